//! The command line as users run it: exit codes, output lines and formats.

use std::path::PathBuf;
use std::process::{Command, Output};

fn kerf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run kerf")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn seeds() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(root().join("fixtures/seeds"))
        .unwrap()
        .map(|e| {
            format!(
                "fixtures/seeds/{}",
                e.unwrap().file_name().to_string_lossy()
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn validate_accepts_every_seed_and_skips_other_kinds() {
    let files = seeds();
    let args: Vec<&str> = std::iter::once("validate")
        .chain(files.iter().map(String::as_str))
        .collect();
    let out = kerf(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    assert!(
        text.contains("fixtures/seeds/000-spot-fallback.yaml:4: NodePool/batch: valid"),
        "{text}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("Pod/my-pod: skipped"));
}

#[test]
fn validate_reports_problems_with_file_document_kind_and_path() {
    let out = kerf(&[
        "validate",
        "fixtures/seeds/000-spot-fallback.yaml",
        "fixtures/broken/003-business-hours.yaml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    // the line is the field's, where an editor should jump
    assert!(text.contains(
        "fixtures/broken/003-business-hours.yaml:24: NodePool/default: spec.disruption.consolidationPolicy: unsupported value \"WhenUnderutilized\""
    ), "{text}");
    assert!(
        text.contains(
            "hint: karpenter.sh/v1 renamed WhenUnderutilized to WhenEmptyOrUnderutilized"
        )
    );
    assert!(
        text.contains(
            "003-business-hours.yaml:29: NodePool/default: spec.disruption.budgets[1].schedule: invalid cron schedule \"0 19-8 * * *\""
        ),
        "{text}"
    );
}

#[test]
fn validate_says_when_a_file_holds_nothing_or_a_kind_lacks_its_api_version() {
    let dir = std::env::temp_dir().join(format!("kerf-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let empty = dir.join("empty.yaml");
    std::fs::write(&empty, "# nothing yet\n").expect("write");
    let versionless = dir.join("versionless.yaml");
    std::fs::write(&versionless, "kind: NodePool\nmetadata:\n  name: default\n").expect("write");
    let out = kerf(&[
        "validate",
        &empty.to_string_lossy(),
        &versionless.to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("empty.yaml: no YAML documents"), "{text}");
    assert!(
        text.contains(
            "versionless.yaml:1: NodePool/default: apiVersion: missing: a NodePool is apiVersion: karpenter.sh/v1"
        ),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn validate_exits_2_with_line_and_column_when_yaml_cannot_be_parsed() {
    let out = kerf(&["validate", "fixtures/unparseable/003-unindented.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fixtures/unparseable/003-unindented.yaml:3:1: cannot parse YAML"),
        "{err}"
    );
    assert!(err.contains("duplicate entry with key \"spec\""), "{err}");

    let out = kerf(&["validate", "fixtures/no-such-file.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

#[test]
fn crds_print_five_definitions_with_printer_columns() {
    let out = kerf(&["crds"]);
    assert!(out.status.success());
    let text = stdout(&out);
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let names: Vec<&str> = docs
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "nodepools.karpenter.sh",
            "nodeclaims.karpenter.sh",
            "ec2nodeclasses.karpenter.k8s.aws",
            "nodeoverlays.karpenter.sh",
            "capacitybuffers.autoscaling.x-k8s.io"
        ]
    );
    let columns: Vec<&str> = docs[1]["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        [
            "Type",
            "Capacity",
            "Zone",
            "Node",
            "Ready",
            "Age",
            "ImageID",
            "ID",
            "NodePool",
            "NodeClass",
            "Drifted"
        ]
    );
    assert!(docs[0]["spec"]["versions"][0]["subresources"]["scale"].is_mapping());
}

#[test]
fn instance_types_filter_by_requirements_and_list_cheapest_first() {
    let out = kerf(&[
        "instance-types",
        "--region",
        "ap-northeast-2",
        "-r",
        "karpenter.k8s.aws/instance-category=In:c,m,r",
        "-r",
        "karpenter.k8s.aws/instance-cpu=Gt:4",
        "-r",
        "karpenter.sh/capacity-type=In:on-demand",
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let types = v["instance_types"].as_array().unwrap();
    assert!(types.len() > 50);
    let mut last = 0.0;
    for t in types {
        let cpu: u32 = t["labels"]["karpenter.k8s.aws/instance-cpu"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(cpu > 4);
        assert!(
            ["c", "m", "r"].contains(
                &t["labels"]["karpenter.k8s.aws/instance-category"]
                    .as_str()
                    .unwrap()
            )
        );
        let offerings = t["offerings"].as_array().unwrap();
        assert!(offerings.iter().all(|o| o["capacity_type"] == "on-demand"
            && o["zone"].as_str().unwrap().starts_with("ap-northeast-2")));
        let price = offerings[0]["price_per_hour"].as_f64().unwrap();
        assert!(price >= last);
        last = price;
    }
    assert!(v["price_source"].as_str().unwrap().contains("us-east-1"));
}

#[test]
fn instance_types_rejects_a_bad_requirement_and_an_unknown_region() {
    let out = kerf(&["instance-types", "-r", "cpu>4"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("KEY=OPERATOR"));
    let out = kerf(&["instance-types", "--region", "mars-1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown region"));
}

#[test]
fn schedule_writes_nodeclaims_that_validate() {
    let out = kerf(&[
        "schedule",
        "-f",
        "fixtures/seeds/004-getting-started.yaml",
        "--replicas",
        "inflate=5",
        "-o",
        "nodeclaims",
    ]);
    assert!(out.status.success());
    let yaml = stdout(&out);
    assert!(yaml.contains("kind: NodeClaim"));
    assert!(yaml.contains("karpenter.sh/nodepool: default"));
    let path = std::env::temp_dir().join(format!("kerf-nodeclaims-{}.yaml", std::process::id()));
    std::fs::write(&path, &yaml).unwrap();
    let check = kerf(&["validate", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    assert!(check.status.success(), "{}", stdout(&check));
    assert!(stdout(&check).contains(": valid"));
}

#[test]
fn bench_scheduling_prints_pods_per_second_and_nodes() {
    let out = kerf(&["bench", "scheduling", "--pods", "50,100", "--repeat", "1"]);
    assert!(out.status.success());
    let text = stdout(&out);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split('\t').collect())
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0][0], "50");
    // ten pods of the anti-affinity group each need their own node
    assert!(rows[0][1].parse::<usize>().unwrap() >= 10);
    assert!(rows[1][3].parse::<f64>().unwrap() > 0.0);
}

#[test]
fn bench_simulate_times_two_builds_by_turns_and_tells_when_their_reports_differ() {
    let kerf_bin = env!("CARGO_BIN_EXE_kerf");
    let args = |against: &str| {
        let args = ["bench", "simulate", "getting-started", "--repeat", "1"];
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.extend(["--against".to_string(), against.to_string()]);
        args
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kerf(&args)
    };
    // against itself: two rows, the same report
    let out = run(args(kerf_bin));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("1\t")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows[1].starts_with("1\tagainst\t"), "{text}");
    assert!(text.contains("every report is the same"), "{text}");
    // against a build that decides otherwise (here: one whose report is not kerf's)
    let dir = std::env::temp_dir().join(format!("kerf-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let other = dir.join("other-kerf");
    std::fs::write(&other, "#!/bin/sh\necho '{}'\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(args(other.to_str().unwrap()));
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("the reports differ"),
        "{}",
        stdout(&out)
    );
    // a binary that is not there is told at once
    let out = run(args("/nonexistent/kerf"));
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/kerf: no such file"));
    // a build that fails is an error, told with its own words
    std::fs::write(&other, "#!/bin/sh\necho broken >&2\nexit 3\n").unwrap();
    let out = run(args(other.to_str().unwrap()));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("broken"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_missing_file_is_told_once_in_one_style_by_every_command() {
    for args in [
        &["simulate", "nope.yaml"][..],
        &["schedule", "-f", "nope.yaml"],
        &["validate", "nope.yaml"],
    ] {
        let out = kerf(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("nope.yaml: "), "{args:?}: {err}");
        assert_eq!(err.matches("nope.yaml").count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn manifests_handed_to_simulate_are_sent_where_they_belong() {
    let out = kerf(&["simulate", "examples/001-workloads.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("examples/001-workloads.yaml: not a scenario: it holds Job/train,")
            && err.contains("kerf schedule -f FILE"),
        "{err}"
    );
}

#[test]
fn instance_types_sort_by_the_price_asked_for() {
    let ranked = |sort: &str, capacity_type: &str| {
        let out = kerf(&[
            "instance-types",
            "-r",
            "karpenter.k8s.aws/instance-category=In:c,m,r",
            "--sort",
            sort,
            "-o",
            "json",
        ]);
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["instance_types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                t["offerings"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|o| o["capacity_type"] == capacity_type)
                    .map(|o| o["price_per_hour"].as_f64().unwrap())
                    .fold(f64::MAX, f64::min)
            })
            .collect::<Vec<f64>>()
    };
    for (sort, capacity_type) in [("on-demand", "on-demand"), ("spot", "spot")] {
        let prices = ranked(sort, capacity_type);
        assert!(prices.len() > 50);
        assert!(prices.windows(2).all(|w| w[0] <= w[1]), "--sort {sort}");
    }
    // the two orders differ: spot discounts are not one ratio
    assert_ne!(ranked("on-demand", "spot"), ranked("spot", "spot"));
}

#[test]
fn help_keeps_up_with_the_readme() {
    let top = stdout(&kerf(&["--help"]));
    assert!(top.contains("kerf bench consolidation"), "{top}");
    let simulate = stdout(&kerf(&["simulate", "--help"]));
    for invariant in ["convergence", "spot preference", "PodDisruptionBudgets"] {
        assert!(simulate.contains(invariant), "{invariant}: {simulate}");
    }
    let types = stdout(&kerf(&["instance-types", "--help"]));
    assert!(types.contains("--sort"), "{types}");
}

/// Runs `kerf` under `script`, so its standard error is a terminal; what the terminal got.
fn on_a_terminal(args: &str) -> String {
    let kerf = env!("CARGO_BIN_EXE_kerf");
    let out = Command::new("script")
        .args(["-qec", &format!("{kerf} {args} >/dev/null"), "/dev/null"])
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("script runs (util-linux; scripts/install-test-deps.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn progress_bars_are_drawn_on_a_terminal_only_and_never_for_json() {
    let shown = on_a_terminal("simulate getting-started");
    assert!(shown.contains("simulating ["), "{shown:?}");
    assert!(shown.contains("%"), "{shown:?}");
    let swarm = on_a_terminal("simulate --swarm 2 --seed 1 --jobs 1");
    assert!(swarm.contains("swarm ["), "{swarm:?}");
    assert!(!on_a_terminal("simulate getting-started -o json").contains('['));
    // not a terminal: nothing but the result
    let piped = kerf(&["simulate", "getting-started"]);
    assert!(piped.status.success());
    assert_eq!(String::from_utf8_lossy(&piped.stderr), "");
}
