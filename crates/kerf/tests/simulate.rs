//! `kerf simulate` as users run it: built-in scenarios, the JSON contract, scenario errors,
//! logs, and the HTML report rendered in headless Chromium.

use std::path::PathBuf;
use std::process::{Command, Output};

fn kerf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(args)
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("run kerf")
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kerf-{}-{name}", std::process::id()))
}

#[test]
fn list_names_the_built_in_scenarios() {
    let out = kerf(&["simulate", "--list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["day", "getting-started", "spot-fallback"] {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "{name} missing from {text}"
        );
    }
}

#[test]
fn json_output_keeps_the_contract() {
    let out = kerf(&["simulate", "spot-fallback", "--check", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["scenario"], "spot-fallback");
    assert_eq!(v["seed"], 1);
    assert_eq!(v["duration_seconds"], 5400.0);
    let node = &v["final"]["nodes"][0];
    for k in [
        "name",
        "nodepool",
        "instance_type",
        "capacity_type",
        "zone",
        "price_per_hour",
        "pods",
    ] {
        assert!(!node[k].is_null(), "final.nodes[0].{k}");
    }
    for k in [
        "cost",
        "lower_bound_cost",
        "nodes_launched",
        "nodes_terminated",
        "pods_evicted",
        "max_pod_pending_seconds",
        "spot_node_seconds_share",
    ] {
        assert!(v["totals"][k].is_number(), "totals.{k}");
    }
    for k in ["t", "nodes", "spot_nodes", "pending_pods", "cost_per_hour"] {
        assert!(v["timeline"][1][k].is_number(), "timeline[1].{k}");
    }
    assert!(v["final"]["pending_pods"].as_array().unwrap().is_empty());
    assert_eq!(v["events"][0]["level"], "INFO");
}

#[test]
fn scenario_errors_name_the_path_and_exit_2() {
    let path = temp("bad.yaml");
    std::fs::write(
        &path,
        "apiVersion: kerf.sh/v1alpha1\nkind: Scenario\nmetadata: {name: bad}\nspec:\n  duration: 1h\n  events:\n  - {at: 1m, scale: {kind: Deployment, name: x, replicas: 1}}\n  - {at: 2m, scale: {kind: Deployment, name: x, replicas: -3}}\n",
    )
    .unwrap();
    let out = kerf(&["simulate", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.events[1].scale.replicas: must be ≥ 0"),
        "{err}"
    );
    let out = kerf(&["simulate", "no-such-scenario"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn log_file_holds_karpenter_style_json_lines() {
    let path = temp("sim.log");
    let out = kerf(&[
        "simulate",
        "getting-started",
        "--log",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let keys: Vec<&String> = first.as_object().unwrap().keys().take(4).collect();
    assert_eq!(keys, ["level", "time", "logger", "message"]);
    assert!(
        text.lines()
            .any(|l| l.contains("\"message\":\"launched nodeclaim\"")
                && l.contains("\"capacity-type\":\"on-demand\""))
    );
}

/// `--metrics` writes what the operator's `/metrics` would serve at the end of the run:
/// Karpenter's counters from what happened, gauges from the end state, OpenMetrics' end.
#[test]
fn metrics_file_holds_karpenters_metrics_of_the_run() {
    let path = temp("sim.metrics");
    let out = kerf(&[
        "simulate",
        "spot-fallback",
        "--metrics",
        path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let total = |prefix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(
        total("karpenter_nodeclaims_created_total{min_values_relaxed=\"false\"") >= 1.0,
        "{text}"
    );
    assert!(
        text.contains("reason=\"provisioned\"} "),
        "Karpenter's reason for a provisioned NodeClaim: {text}"
    );
    assert!(total("karpenter_nodes_created_total{") >= 1.0, "{text}");
    assert!(text.contains("# TYPE karpenter_nodes_termination_duration_seconds summary"));
    assert!(
        text.contains("karpenter_nodepools_usage{nodepool="),
        "{text}"
    );
    assert!(text.contains("karpenter_cloudprovider_instance_type_offering_price_estimate{"));
    assert!(text.ends_with("# EOF\n"), "{text}");
}

/// Headless Chromium (Debian's, installed by scripts/install-test-deps.sh) on a file, at a
/// fixed window size so two runs lay the page out alike: `mode` is `--dump-dom` or
/// `--screenshot=PATH`.
fn chromium(page: &std::path::Path, mode: &str) -> Vec<u8> {
    let profile = temp(&format!("chromium-profile-{}", mode.len()));
    let out = Command::new("/usr/bin/chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1100,2600",
            &format!("--user-data-dir={}", profile.display()),
            mode,
            &format!("file://{}", page.display()),
        ])
        .output()
        .expect("chromium is installed (scripts/install-test-deps.sh)");
    let _ = std::fs::remove_dir_all(&profile);
    out.stdout
}

/// Pixels of a chart's plot area that carry data: saturated colours, not the grey grid,
/// the axes and text, nor the purple decision markers, and above the bottom few rows where a
/// zero line runs.
fn data_pixels(image: &png::Reader<std::fs::File>, rgba: &[u8], plot: [usize; 4]) -> usize {
    let info = image.info();
    let channels = info.color_type.samples();
    let [left, top, width, height] = plot;
    let mut n = 0;
    for y in top..(top + height).saturating_sub(4).min(info.height as usize) {
        for x in left..(left + width).min(info.width as usize) {
            let i = (y * info.width as usize + x) * channels;
            let (r, g, b) = (rgba[i] as i32, rgba[i + 1] as i32, rgba[i + 2] as i32);
            let saturated = r.max(g).max(b) - r.min(g).min(b) > 60;
            // the markers' purple (#9467bd) and its blends with white: blue and red over green
            let purple = b > g + 40 && r > g + 10;
            if saturated && !purple {
                n += 1;
            }
        }
    }
    n
}

/// The report renders in headless Chromium: the inline script draws every chart from the
/// run's data (per NodePool and capacity type, with axes and units), nothing outside is
/// named, and a screenshot shows data in every chart's plot area.
#[test]
fn html_report_renders_in_headless_chromium_with_every_chart_drawn() {
    let html = temp("report.html");
    let out = kerf(&[
        "simulate",
        "spot-fallback",
        "--report",
        html.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let page = std::fs::read_to_string(&html).unwrap();
    for outside in [
        "src=",
        "href=",
        "@import",
        "url(",
        "<link",
        "fetch(",
        "XMLHttpRequest",
    ] {
        assert!(
            !page.contains(outside),
            "the report must be self-contained: found {outside}"
        );
    }
    let dom = String::from_utf8_lossy(&chromium(&html, "--dump-dom")).into_owned();
    assert!(
        dom.contains("data-rendered=\"ok\""),
        "the script did not run: {}",
        &dom[..dom.len().min(500)]
    );
    // the nodes split by NodePool and capacity type, as the legend names them
    for series in ["batch · spot", "batch-fallback · on-demand"] {
        assert!(
            dom.contains(&format!("data-series=\"{series}\"")),
            "no {series} series"
        );
    }
    for unit in [
        "USD per hour",
        "% of nodes on spot",
        ">1h00m<",
        "simulated time",
    ] {
        assert!(dom.contains(unit), "no {unit:?} on the axes");
    }
    assert!(
        dom.contains("batch-fallback"),
        "the final node table lists the fallback node"
    );
    let plots: std::collections::BTreeMap<String, [usize; 4]> = {
        let at = dom.find("data-plots=\"").expect("plot boxes") + "data-plots=\"".len();
        let raw = &dom[at..at + dom[at..].find('"').expect("end of attribute")];
        serde_json::from_str(&raw.replace("&quot;", "\"")).expect("plot boxes as JSON")
    };
    assert_eq!(
        plots.keys().collect::<Vec<_>>(),
        ["cost", "nodes", "pending", "spot"]
    );
    let shot = temp("report.png");
    chromium(&html, &format!("--screenshot={}", shot.display()));
    let decoder = png::Decoder::new(std::fs::File::open(&shot).expect("the screenshot"));
    let mut image = decoder.read_info().expect("a PNG");
    let mut rgba = vec![0; image.output_buffer_size()];
    image.next_frame(&mut rgba).expect("PNG pixels");
    let _ = std::fs::remove_file(&shot);
    let _ = std::fs::remove_file(&html);
    for (chart, plot) in plots {
        let n = data_pixels(&image, &rgba, plot);
        assert!(
            n > 1000,
            "the {chart} chart is empty on screen ({n} data pixels)"
        );
    }
}

#[test]
fn swarm_reports_the_same_whatever_the_number_of_jobs() {
    let dir = temp("swarm-failures");
    let dir = dir.to_str().expect("UTF-8 temp dir");
    let run = |jobs: &str| {
        let out = kerf(&[
            "simulate",
            "--swarm",
            "2",
            "--seed",
            "1",
            "--jobs",
            jobs,
            "--failures",
            dir,
        ]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let (one, two) = (run("1"), run("2"));
    assert_eq!(one, two);
    assert_eq!(one.lines().last(), Some("2 scenarios, 0 violations"));
}

#[test]
fn the_summary_tells_the_peak_the_launches_and_what_check_held() {
    let out = kerf(&["simulate", "getting-started", "--check"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    // getting-started ends with no nodes: the peak and the launches say what ran
    assert!(text.contains("nodes at the end: 0"), "{text}");
    let peak = text
        .lines()
        .find(|l| l.starts_with("peak: "))
        .unwrap_or_else(|| panic!("no peak line: {text}"));
    assert!(
        peak.contains(" nodes at ") || peak.contains(" node at "),
        "{peak}"
    );
    let launched: usize = text
        .lines()
        .filter(|l| l.ends_with(" launched"))
        .map(|l| {
            l.split_whitespace()
                .next()
                .and_then(|n| n.parse::<usize>().ok())
                .expect("a count")
        })
        .sum();
    let total = text
        .lines()
        .find_map(|l| l.strip_prefix("nodes launched "))
        .and_then(|l| l.split(',').next())
        .and_then(|n| n.parse::<usize>().ok())
        .expect("nodes launched N");
    assert!(total > 0);
    assert_eq!(launched, total, "{text}");
    assert!(
        text.contains("--check: held at every step: no node over-committed;"),
        "{text}"
    );
}

#[test]
fn a_typod_nodepool_is_reported_as_fully_as_kerf_validate_reports_it() {
    let nodepool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n  disruption:\n    consolidationPolicy: WhenUnderutilized\n    consolidateAftr: 1m\n    consolidateAfter: 1m\n";
    let alone = temp("nodepool.yaml");
    std::fs::write(&alone, nodepool).expect("write");
    let validated = kerf(&["validate", alone.to_str().expect("path")]);
    let expected: Vec<String> = String::from_utf8_lossy(&validated.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(2).map(str::to_string))
        .collect();
    for typo in ["consolidationPolicy", "consolidateAftr"] {
        assert!(expected.iter().any(|p| p.ends_with(typo)), "{expected:?}");
    }
    let indented: String = nodepool.lines().map(|l| format!("    {l}\n")).collect();
    let scenario = format!(
        "apiVersion: kerf.sh/v1alpha1\nkind: Scenario\nmetadata: {{name: typo}}\nspec:\n  duration: 1m\n  manifests:\n  -\n{indented}"
    );
    let path = temp("typo-scenario.yaml");
    std::fs::write(&path, scenario).expect("write");
    let out = kerf(&["simulate", path.to_str().expect("path")]);
    let _ = std::fs::remove_file(&alone);
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for field in expected {
        assert!(
            err.contains(&format!("spec.manifests[0].{field}")),
            "{field}: {err}"
        );
    }
}
