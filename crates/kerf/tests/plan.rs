//! `kerf plan` on a snapshot of a running cluster (`fixtures/plan/roll-snapshot.yaml`: four
//! c6a nodes, one pod each, a NodePool whose budget lets one node go at a time): what a
//! change does, beside no change. The same prediction is checked against the real control
//! plane in `kerf-operator`'s end-to-end tests.

use std::process::Output;

use serde_json::Value;

mod common;
use common::{kerf_stdin, root};

/// When the snapshot was taken (a few seconds after its newest object).
const TAKEN: &str = "2026-12-05T00:29:30Z";

/// `kerf plan -f CHANGE --from the snapshot`, with kwok's quick launches, plus `flags`.
fn plan(change: &str, flags: &[&str]) -> Output {
    let snapshot = root().join("fixtures/plan/roll-snapshot.yaml");
    let snapshot = snapshot.to_str().expect("utf-8 path");
    let mut args = vec!["plan", "-f", "-", "--from", snapshot];
    args.extend(["--launch-delay", "1s", "--ready-delay", "1s"]);
    args.extend_from_slice(flags);
    kerf_stdin(change, &args)
}

fn planned(change: &str, flags: &[&str]) -> Value {
    let mut all = vec!["-o", "json"];
    all.extend_from_slice(flags);
    let out = plan(change, &all);
    assert!(
        out.status.success(),
        "kerf plan failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json output")
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(root().join("fixtures/plan").join(name)).expect("fixture")
}

/// The NodePool of `roll.yaml` with its budget set to `nodes`.
fn relabelled_with_budget(nodes: &str) -> String {
    fixture("roll-relabelled.yaml").replace("- nodes: \"1\"", &format!("- nodes: \"{nodes}\""))
}

/// (nodeclaim, reason, decided, terminated) of each removal.
fn removals(outcome: &Value) -> Vec<(String, String, f64, f64)> {
    outcome["removals"]
        .as_array()
        .expect("removals")
        .iter()
        .map(|r| {
            (
                r["nodeclaim"].as_str().unwrap_or_default().to_string(),
                r["reason"].as_str().unwrap_or_default().to_string(),
                r["decided"].as_f64().unwrap_or(-1.0),
                r["terminated"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect()
}

const CLAIMS: [&str; 4] = ["roll-86fv2", "roll-rxf5d", "roll-w86tf", "roll-xp9sz"];

#[test]
fn a_template_change_rolls_every_node_one_at_a_time_under_its_budget() {
    let v = planned(
        &fixture("roll-relabelled.yaml"),
        &["--at", TAKEN, "--for", "30m"],
    );
    assert_eq!(v["change"], serde_json::json!(["NodePool/roll"]));
    assert_eq!(v["now"]["nodes"], 4, "{v}");
    assert!(removals(&v["unchanged"]).is_empty(), "{v}");
    let rolled = removals(&v["changed"]);
    let mut names: Vec<&str> = rolled.iter().map(|r| r.0.as_str()).collect();
    names.sort();
    assert_eq!(names, CLAIMS, "{v}");
    assert!(
        rolled.iter().all(|r| r.1 == "Drifted" && r.3 >= r.2),
        "{rolled:?}"
    );
    // one at a time: each decided only once the one before is gone
    for pair in rolled.windows(2) {
        assert!(pair[1].2 >= pair[0].3, "{rolled:?}");
    }
    // every pod moved, and the NodePool ends as it began: four nodes, one pod each
    assert_eq!(v["changed"]["pods_evicted"], 4);
    assert_eq!(v["changed"]["end"]["nodes"], 4);
    assert_eq!(v["changed"]["end"]["pending_pods"], 0);
    assert_eq!(v["changed"]["nodes_launched"], 4);
}

#[test]
fn a_wider_budget_rolls_two_nodes_at_a_time() {
    let v = planned(
        &relabelled_with_budget("2"),
        &["--at", TAKEN, "--for", "30m"],
    );
    let rolled = removals(&v["changed"]);
    assert_eq!(rolled.len(), 4, "{v}");
    // as many under way at once as the budget allows, and never more (the second of a pair
    // is decided once the first's replacement has launched, as Karpenter's disruption waits
    // for every NodeClaim to launch)
    let under_way = |t: f64| rolled.iter().filter(|r| r.2 <= t && t < r.3).count();
    let most = rolled.iter().map(|r| under_way(r.2)).max();
    assert_eq!(most, Some(2), "two at a time: {rolled:?}");
}

#[test]
fn a_budget_of_no_nodes_holds_the_roll() {
    let v = planned(
        &relabelled_with_budget("0"),
        &["--at", TAKEN, "--for", "30m"],
    );
    assert!(removals(&v["changed"]).is_empty(), "{v}");
    assert_eq!(v["changed"]["pods_evicted"], 0);
}

#[test]
fn nodes_expire_as_their_age_at_the_snapshot_says_unless_the_roll_replaces_them_first() {
    // 720h after the NodeClaims were made (00:28:5x), less 30 minutes: as they are, they
    // expire in the plan's first half hour; with the change, the roll replaces them first
    let v = planned(
        &fixture("roll-relabelled.yaml"),
        &["--at", "2027-01-03T23:59:00Z", "--for", "1h"],
    );
    let expired = removals(&v["unchanged"]);
    assert_eq!(expired.len(), 4, "{v}");
    assert!(
        (expired.iter()).all(|r| r.1 == "Expired" && r.2 > 1500.0 && r.2 < 1800.0),
        "{expired:?}"
    );
    let rolled = removals(&v["changed"]);
    assert_eq!(rolled.len(), 4, "{v}");
    assert!(
        rolled.iter().all(|r| r.1 == "Drifted" && r.2 < 300.0),
        "{rolled:?}"
    );
}

#[test]
fn the_nodepool_as_it_is_changes_nothing() {
    let same = fixture("roll-relabelled.yaml").replace("team: b", "team: a");
    let v = planned(&same, &["--at", TAKEN, "--for", "30m"]);
    assert!(removals(&v["changed"]).is_empty(), "{v}");
    assert_eq!(v["changed"]["cost"], v["unchanged"]["cost"]);
}

#[test]
fn the_text_names_each_node_and_how_long_the_roll_takes() {
    let out = plan(
        &fixture("roll-relabelled.yaml"),
        &["--at", TAKEN, "--for", "30m"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for claim in CLAIMS {
        assert!(
            text.contains(&format!("{claim} (roll, c6a.large) Drifted")),
            "{text}"
        );
    }
    assert!(text.contains("the drift roll takes"), "{text}");
}

#[test]
fn the_report_draws_the_run_without_the_change_beside() {
    let dir = std::env::temp_dir().join(format!("kerf-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let page = dir.join("plan.html");
    let out = plan(
        &fixture("roll-relabelled.yaml"),
        &[
            "--at",
            TAKEN,
            "--for",
            "30m",
            "--report",
            page.to_str().expect("utf-8"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).expect("the page");
    assert!(html.contains("\"beside\":{\"label\":\"without the change\""));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_change_of_another_kind_or_an_invalid_one_is_refused_with_its_name() {
    let out = plan(&fixture("roll.yaml"), &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Deployment/spread: kerf plan answers for changes to NodePool"),
        "{err}"
    );

    let out = plan(&relabelled_with_budget("several"), &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NodePool/roll: spec.disruption.budgets[0].nodes:"),
        "{err}"
    );

    let out = kerf_stdin(
        &fixture("roll-relabelled.yaml"),
        &["plan", "-f", "-", "--from", "no-such-snapshot.yaml"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-snapshot.yaml: cannot read"), "{err}");
}

/// The snapshot as an EKS cluster's would read: its EC2NodeClass resolved to one image,
/// which every NodeClaim runs (kwok's NodeClaims carry none); written to a file of its own.
fn snapshot_with_images(dir: &std::path::Path) -> std::path::PathBuf {
    let text = fixture("roll-snapshot.yaml");
    let mut list: Value = serde_yaml::from_str(&text).expect("the snapshot");
    let image = "ami-0a1b2c3d4e5f60718";
    for item in list["items"].as_array_mut().expect("items") {
        match item["kind"].as_str() {
            Some("EC2NodeClass") => {
                item["status"] = serde_json::json!({"amis": [{
                    "id": image,
                    "name": "amazon-eks-node-al2023-x86_64-standard-1.33-v20251120",
                    "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                }]});
            }
            Some("NodeClaim") => item["status"]["imageID"] = image.into(),
            _ => {}
        }
    }
    let path = dir.join("snapshot-with-images.json");
    std::fs::write(&path, list.to_string()).expect("written");
    path
}

#[test]
fn an_ami_alias_change_rolls_every_node_and_the_same_terms_roll_none() {
    let dir = std::env::temp_dir().join(format!("kerf-plan-ami-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let snapshot = snapshot_with_images(&dir);
    let class = fixture("roll.yaml")
        .split("\n---\n")
        .find(|d| d.contains("\nkind: EC2NodeClass\n"))
        .expect("the class")
        .to_string();
    let run = |class: &str| -> Value {
        let out = kerf_stdin(
            class,
            &[
                "plan",
                "-f",
                "-",
                "--from",
                snapshot.to_str().expect("utf-8"),
                "--at",
                TAKEN,
                "--for",
                "30m",
                "--launch-delay",
                "1s",
                "--ready-delay",
                "1s",
                "-o",
                "json",
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("json")
    };
    let same = run(&class);
    assert!(removals(&same["changed"]).is_empty(), "{same}");
    let newer = run(&class.replace("al2023@latest", "al2023@v20251201"));
    let rolled = removals(&newer["changed"]);
    assert_eq!(rolled.len(), 4, "{newer}");
    assert!(rolled.iter().all(|r| r.1 == "Drifted"), "{rolled:?}");
    assert!(removals(&newer["unchanged"]).is_empty(), "{newer}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The operator's gates reach the controllers the plan runs: the simulator takes each gate
/// `--feature-gates` names (a name it did not know would stop the plan), and the roll is the
/// same with gates that do not touch it.
#[test]
fn the_operators_feature_gates_are_the_plans() {
    let gates = "NodeRepair=true,SpotToSpotConsolidation=true,PodDeletionCostManagement=true";
    let v = planned(
        &fixture("roll-relabelled.yaml"),
        &["--at", TAKEN, "--for", "30m", "--feature-gates", gates],
    );
    assert_eq!(removals(&v["changed"]).len(), 4, "{v}");
    let refused = plan(
        &fixture("roll-relabelled.yaml"),
        &["--feature-gates", "Drift=true"],
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("Drift: not a gate the plan plays"),
        "{refused:?}"
    );
}

/// The autoscaler's Deployment as the chart writes it, with `MIN_VALUES_POLICY` set to
/// `policy`, in a file of its own under `dir`.
fn operator_deployment(dir: &std::path::Path, policy: &str) -> std::path::PathBuf {
    let path = dir.join(format!("deployment-{policy}.yaml"));
    let text = format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: kerf, namespace: kube-system}}
spec:
  replicas: 1
  template:
    spec:
      containers:
        - name: controller
          image: example.com/kerf/controller:0.1.0
          env:
            - {{name: MIN_VALUES_POLICY, value: {policy}}}
            - {{name: FEATURE_GATES, value: "SpotToSpotConsolidation=false,ReservedCapacity=true"}}
"#
    );
    std::fs::write(&path, text).expect("write the Deployment");
    path
}

#[test]
fn the_settings_of_the_autoscaler_the_cluster_runs_are_played() {
    // the template change also asks for two instance families where the generation allows
    // one: under the Strict minValues policy no replacement can be made, under BestEffort
    // the roll goes
    let change = fixture("roll-relabelled.yaml").replace(
        "values: [\"c6a\"]",
        "values: [\"c6a\", \"c7a\"]\n          minValues: 2\n        \
         - {key: karpenter.k8s.aws/instance-generation, operator: In, values: [\"6\"]}",
    );
    let dir = std::env::temp_dir().join(format!("kerf-plan-settings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let strict = planned(&change, &["--at", TAKEN, "--for", "30m"]);
    assert!(
        strict["settings"]["source"].is_null(),
        "{}",
        strict["settings"]
    );
    assert!(removals(&strict["changed"]).is_empty(), "{strict}");
    let best_effort = operator_deployment(&dir, "BestEffort");
    let best_effort = best_effort.to_str().expect("utf-8 path");
    let v = planned(
        &change,
        &["--at", TAKEN, "--for", "30m", "--from", best_effort],
    );
    assert_eq!(
        v["settings"]["source"], "Deployment kube-system/kerf",
        "{}",
        v["settings"]
    );
    assert_eq!(v["settings"]["fields"]["minValuesPolicy"], "BestEffort");
    assert_eq!(removals(&v["changed"]).len(), 4, "{v}");
    // the gate the simulator does not play is said, not refused
    let out = plan(
        &change,
        &["--at", TAKEN, "--for", "30m", "--from", best_effort],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("note: settings of Deployment kube-system/kerf: FEATURE_GATES=")
            && said.contains("ReservedCapacity: not a gate the plan plays"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
