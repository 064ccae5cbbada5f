//! Kerf beside Karpenter v1.15 on a real control plane with Karpenter's own CRDs: the drift
//! hashes Kerf computes are the ones Karpenter's Go code computes for the same objects (so
//! neither drifts the other's nodes on a takeover), a NodeClaim stamped by Karpenter is kept,
//! and objects using what Kerf does not know stall nothing.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use kerf_api::cluster_read;
use kerf_api::{EC2NodeClass, NodePool};
use serde_json::Value;
use support::{ControlPlane, Operator, condition_true, http_get, karpenter_hash, root, wait_for};

const OPERATOR: &str = env!("CARGO_BIN_EXE_kerf-operator");
const CA_BUNDLE: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCmtlcmYtdGVzdAo=";

fn items(cp: &ControlPlane, kind: &str) -> Vec<Value> {
    let out = cp.kubectl_ok(&["get", kind, "-o", "json"], None);
    let list: Value = serde_json::from_str(&out).expect("a JSON list");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// What Karpenter's Go code says of `objects`: (kind, name) → (hash, version).
fn karpenters_hashes(objects: &[Value]) -> Vec<(String, String, String, String)> {
    karpenter_says(objects)
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
            (s("kind"), s("name"), s("hash"), s("version"))
        })
        .collect()
}

/// scripts/karpenter-hash's answers for `items`, one per item.
fn karpenter_says(items: &[Value]) -> Vec<Value> {
    let mut child = Command::new(karpenter_hash())
        .arg(CA_BUNDLE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("karpenter-hash runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&serde_json::to_vec(items).expect("JSON"))
        .expect("write objects");
    let out = child.wait_with_output().expect("karpenter-hash ends");
    assert!(
        out.status.success(),
        "karpenter-hash: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("karpenter-hash's JSON")
}

/// Every `karpenter_*` family Karpenter v1.15 registers (its core and AWS provider packages,
/// loaded by scripts/karpenter-hash) is one Kerf declares with the same type, label names
/// and buckets, and Kerf declares none Karpenter does not have; and what Kerf serves after a
/// simulated run (spot shortage, fallback, consolidation) is typed and labelled so.
#[test]
fn metric_families_are_karpenters() {
    use std::collections::{BTreeMap, BTreeSet};
    let theirs = karpenter_says(&[serde_json::json!({"kind": "MetricFamilies"})]);
    let theirs = theirs[0]["families"].as_array().expect("families").clone();
    assert!(
        theirs.len() > 70,
        "Karpenter's registry read whole: {}",
        theirs.len()
    );
    let strings = |v: &Value| -> BTreeSet<String> {
        (v.as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .map(String::from)
            .collect()
    };
    // Karpenter's families by the name OpenMetrics gives them (a counter's without `_total`)
    let mut karpenters: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    let mut differences = Vec::new();
    let declared = kerf_core::metrics::families::ALL;
    for f in &theirs {
        let name = f["name"].as_str().unwrap_or_default();
        let kind = f["type"].as_str().unwrap_or_default();
        let labels = strings(&f["labels"]);
        let family = match kind {
            "counter" => name.strip_suffix("_total").unwrap_or(name),
            _ => name,
        };
        karpenters.insert(family.to_string(), (kind.to_string(), labels.clone()));
        // the families of the Go runtime, controller-runtime and operatorpkg: see
        // `every_family_karpenter_serves_beside_its_own_is_served`
        if !name.starts_with("karpenter_") {
            continue;
        }
        let Some(spec) = declared.iter().find(|s| s.name == name) else {
            differences.push(format!("{name}: Kerf lacks it"));
            continue;
        };
        if spec.kind.as_str() != kind {
            differences.push(format!(
                "{name}: a {}, Karpenter's a {kind}",
                spec.kind.as_str()
            ));
        }
        let ours: BTreeSet<String> = spec.labels.iter().map(|l| l.to_string()).collect();
        if ours != labels {
            differences.push(format!("{name}: labels {ours:?}, Karpenter's {labels:?}"));
        }
        let buckets: Vec<f64> = (f["buckets"].as_array().into_iter().flatten())
            .filter_map(Value::as_f64)
            .collect();
        if spec.buckets != buckets.as_slice() {
            differences.push(format!(
                "{name}: buckets {:?}, Karpenter's {buckets:?}",
                spec.buckets
            ));
        }
    }
    for spec in declared {
        if !theirs.iter().any(|f| f["name"] == spec.name) {
            differences.push(format!(
                "{}: Kerf's own, under Karpenter's prefix",
                spec.name
            ));
        }
    }
    // what is served: every family with samples typed and labelled as Karpenter's
    let scenario = kerf_sim::load("spot-fallback").expect("built-in scenario");
    let report = kerf_sim::run(scenario, Default::default(), &mut |_, _, _| {}).expect("runs");
    let mut served = BTreeSet::new();
    for line in report.metrics.lines() {
        if let Some((family, kind)) = line.strip_prefix("# TYPE ").and_then(|l| l.split_once(' ')) {
            served.insert(family.to_string());
            match karpenters.get(family) {
                Some((k, _)) if k != kind => {
                    differences.push(format!("{family}: served as a {kind}, Karpenter's a {k}"))
                }
                None if family.starts_with("karpenter_") => {
                    differences.push(format!("{family}: served, not Karpenter's"))
                }
                _ => {}
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let sample = &line[..name_end];
        let family = ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                sample
                    .strip_suffix(suffix)
                    .filter(|f| karpenters.contains_key(*f))
            })
            .unwrap_or(sample);
        let Some((_, labels)) = karpenters.get(family) else {
            continue;
        };
        let mut found = BTreeSet::new();
        if let Some(rest) = line[name_end..].strip_prefix('{') {
            for pair in rest.split("\",") {
                if let Some((k, _)) = pair.split_once("=\"") {
                    found.insert(k.trim_start_matches([',', '{']).to_string());
                }
            }
        }
        found.remove("le");
        found.remove("quantile");
        if &found != labels {
            differences.push(format!(
                "{sample}: labels {found:?}, Karpenter's {labels:?}"
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    assert!(served.len() >= 30, "the run served only {served:?}");
}

/// The families of Karpenter's registry that are not `karpenter_*` and that Kerf has no
/// counterpart for, with why.
const NOT_SERVED: [(&str, &str); 4] = [
    (
        "go_",
        "the Go runtime's: Kerf is no Go program (its process_* families are served)",
    ),
    (
        "workqueue_",
        "controller-runtime's work queues: Kerf's controllers are one state machine polled in one loop, with no queue per controller",
    ),
    (
        "rest_client_requests_total",
        "registered by controller-runtime and never given a series in Karpenter (operatorpkg counts client_go_request_total instead)",
    ),
    (
        "controller_runtime_webhook_",
        "per-webhook families: Karpenter v1.15 registers no webhook, so they never have a series (its two plain webhook panic counters, at zero, are served)",
    ),
];

/// A scrape's families: type, label names and buckets (of the first series that has them).
#[derive(Default)]
struct Served {
    types: std::collections::BTreeMap<String, String>,
    labels: std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    buckets: std::collections::BTreeMap<String, Vec<f64>>,
}

fn served(text: &str) -> Served {
    let mut s = Served::default();
    for line in text.lines() {
        if let Some((family, kind)) = line.strip_prefix("# TYPE ").and_then(|l| l.split_once(' ')) {
            s.types.insert(family.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let sample = &line[..end];
        let family = ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|x| sample.strip_suffix(x).filter(|f| s.types.contains_key(*f)))
            .unwrap_or(sample)
            .to_string();
        let mut found = std::collections::BTreeSet::new();
        let mut le = None;
        if let Some(rest) = line[end..].strip_prefix('{') {
            let inner = &rest[..rest.rfind('}').unwrap_or(rest.len())];
            for pair in inner.split("\",") {
                if let Some((k, v)) = pair.split_once("=\"") {
                    let k = k.trim_start_matches(',');
                    if k == "le" {
                        le = v.trim_end_matches('"').parse::<f64>().ok();
                    } else {
                        found.insert(k.to_string());
                    }
                }
            }
        }
        s.labels.entry(family.clone()).or_insert(found);
        if let Some(le) = le.filter(|l| l.is_finite()) {
            let b = s.buckets.entry(family).or_default();
            if !b.contains(&le) {
                b.push(le);
            }
        }
    }
    s
}

/// How `ours` differs from Karpenter's registry `theirs` over the families neither
/// `karpenter_*` nor [`NOT_SERVED`]: a family missing, or typed, labelled or bucketed apart.
fn family_differences(theirs: &[Value], ours: &Served) -> Vec<String> {
    let mut differences = Vec::new();
    for f in theirs {
        let name = f["name"].as_str().unwrap_or_default();
        if name.starts_with("karpenter_") || NOT_SERVED.iter().any(|(p, _)| name.starts_with(p)) {
            continue;
        }
        let kind = f["type"].as_str().unwrap_or_default();
        let family = match kind {
            "counter" => name.strip_suffix("_total").unwrap_or(name),
            _ => name,
        };
        let Some(served_as) = ours.types.get(family) else {
            differences.push(format!("{name}: not served"));
            continue;
        };
        if served_as != kind {
            differences.push(format!(
                "{name}: served as a {served_as}, Karpenter's a {kind}"
            ));
        }
        let want: std::collections::BTreeSet<String> = (f["labels"].as_array().into_iter())
            .flatten()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect();
        match ours.labels.get(family) {
            Some(got) if *got != want => {
                differences.push(format!("{name}: labels {got:?}, Karpenter's {want:?}"))
            }
            Some(_) => {}
            None => differences.push(format!("{name}: no series to compare")),
        }
        let want: Vec<f64> = (f["buckets"].as_array().into_iter().flatten())
            .filter_map(Value::as_f64)
            .collect();
        let got = ours.buckets.get(family).cloned().unwrap_or_default();
        let apart = got.len() != want.len()
            || got
                .iter()
                .zip(&want)
                .any(|(a, b)| (a - b).abs() > 1e-9 * b.abs().max(1.0));
        if !want.is_empty() && apart {
            differences.push(format!("{name}: buckets {got:?}, Karpenter's {want:?}"));
        }
    }
    differences
}

fn karpenters_registry() -> Vec<Value> {
    let theirs = karpenter_says(&[serde_json::json!({"kind": "MetricFamilies"})]);
    theirs[0]["families"].as_array().expect("families").clone()
}

/// Every family Karpenter v1.15's registry holds beside its `karpenter_*` ones (aside from
/// [`NOT_SERVED`]) — operatorpkg's status-condition and termination families for NodeClaims,
/// NodePools, Nodes and EC2NodeClasses and their deprecated forms, client-go's requests,
/// controller-runtime's reconciles and counters, the Lease, the process — is one the
/// operator's registries hold, with the same type, label names and buckets, once each has
/// seen what gives it a series.
#[test]
fn every_family_karpenter_serves_beside_its_own_is_kerfs() {
    use kerf_operator::status_watch::{Kind, Seen, StatusWatch};
    let mut status = StatusWatch::default();
    let time =
        |s: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(s.parse().expect("a time"));
    for kind in [Kind::Node, Kind::NodeClaim, Kind::NodePool, Kind::NodeClass] {
        for (name, deleting) in [("kept", false), ("gone", true)] {
            let mut meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            };
            let ready =
                |status: &str, at: &str| vec![Seen::new("Ready", status, "Ready", "", Some(at))];
            status.observe(kind, &meta, ready("Unknown", "2026-12-01T00:00:00Z"));
            meta.deletion_timestamp = deleting.then(|| time("2026-12-01T00:01:00Z"));
            status.observe(kind, &meta, ready("True", "2026-12-01T00:00:30Z"));
            if name == "gone" {
                status.deleted(kind, "/gone", 1_796_083_290);
            }
        }
        // one being deleted, for the termination gauges
        let meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("going".into()),
            deletion_timestamp: Some(time("2026-12-01T00:01:00Z")),
            ..Default::default()
        };
        status.observe(kind, &meta, Vec::new());
    }
    status.refresh(1_796_083_300);
    let runtime = kerf_operator::runtime_metrics::RuntimeMetrics::default();
    runtime.record(
        "PATCH",
        "/apis/karpenter.sh/v1/nodeclaims/a/status",
        "200",
        0.01,
    );
    runtime.leading("karpenter-leader-election", true);
    let reconciles = kerf_operator::reconciles::Reconciles::default();
    reconciles.record("nodeclaim.lifecycle", Ok(()), Duration::from_millis(5));
    let sdk = kerf_aws_provider::sdk_metrics::install();
    sdk_call();
    let mut text = String::new();
    for registry in [
        status.registry(),
        runtime.registry(),
        reconciles.registry(),
        sdk.registry(),
    ] {
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encoded");
    }
    let differences = family_differences(&karpenters_registry(), &served(&text));
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// One EC2 call through a client that counts its calls, answered by the SDK's mock.
fn sdk_call() {
    use aws_sdk_ec2::operation::describe_subnets::DescribeSubnetsOutput;
    use aws_smithy_mocks::{MockResponseInterceptor, mock};
    let rule = mock!(aws_sdk_ec2::Client::describe_subnets)
        .then_output(|| DescribeSubnetsOutput::builder().build());
    let config = aws_sdk_ec2::Config::builder()
        .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
        .region(aws_sdk_ec2::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .http_client(aws_smithy_mocks::create_mock_http_client())
        .interceptor(MockResponseInterceptor::new().with_rule(&rule))
        .interceptor(kerf_aws_provider::sdk_metrics::Counting)
        .build();
    let ec2 = aws_sdk_ec2::Client::from_conf(config);
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(ec2.describe_subnets().send())
        .expect("the mock's answer");
}

/// What a running operator serves after a NodeClaim came up: the families that must have a
/// series by then do, labelled as Karpenter labels them.
#[test]
fn a_running_operator_serves_karpenters_runtime_families() {
    let theirs = karpenters_registry();
    let cp = ControlPlane::start("families");
    cp.install_crds();
    let seed = std::fs::read(root().join("fixtures/seeds/004-getting-started.yaml")).expect("seed");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed));
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=2"], None);
    let text = wait_for(
        "a NodeClaim Ready, its transitions counted",
        Duration::from_secs(120),
        || {
            let text = http_get(op.metrics_port, "/metrics").1;
            text.contains("operator_nodeclaim_status_condition_transition_seconds_bucket")
                .then_some(text)
        },
        || cp.kubectl_ok(&["get", "nodeclaims"], None),
    );
    let ours = served(&text);
    let differences: Vec<String> = family_differences(&theirs, &ours)
        .into_iter()
        .filter(|d| !d.ends_with(": not served") && !d.ends_with(": no series to compare"))
        .collect();
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    for family in [
        "operator_nodeclaim_status_condition_count",
        "operator_nodeclaim_status_condition_transitions",
        "operator_node_status_condition_count",
        "operator_nodepool_status_condition_count",
        "operator_status_condition_count",
        "client_go_request",
        "client_go_request_duration_seconds",
        "controller_runtime_reconcile",
        "leader_election_master_status",
        "process_resident_memory_bytes",
    ] {
        assert!(
            ours.labels.contains_key(family),
            "no series of {family}:\n{text}"
        );
    }
}

#[test]
fn eviction_costs_and_balanced_scores_are_karpenters() {
    // every mix of the two annotations (valid, out of range, malformed) and priorities
    let steer = [
        None,
        Some("0"),
        Some("134217728"),
        Some("-134217728"),
        Some("+5"),
        Some("2147483647"),
        Some("-2147483648"),
        Some("2147483648"),
        Some(" 5"),
        Some("lots"),
    ];
    let priorities = [
        None,
        Some(0),
        Some(33_554_432),
        Some(-33_554_432),
        Some(2_000_000_000),
    ];
    let mut pods = Vec::new();
    for (i, cost) in steer.iter().enumerate() {
        for (j, deletion) in steer.iter().enumerate().step_by(3) {
            for priority in priorities {
                let mut annotations = serde_json::Map::new();
                if let Some(c) = cost {
                    annotations.insert("karpenter.sh/disruption-cost".into(), (*c).into());
                }
                if let Some(d) = deletion {
                    annotations.insert(
                        "controller.kubernetes.io/pod-deletion-cost".into(),
                        (*d).into(),
                    );
                }
                pods.push(serde_json::json!({
                    "metadata": {"name": format!("p-{i}-{j}-{priority:?}"), "annotations": annotations},
                    "spec": {"priority": priority, "containers": []},
                }));
            }
        }
    }
    let moves = [
        (0.8, 4.0, 2.0, 6.0),
        (0.8, 31.0, 2.0, 33.0),
        (0.1, 0.0, 2.0, 6.0),
        (0.0, 3.0, 2.0, 6.0),
        (-0.2, 3.0, 2.0, 6.0),
        (0.5, 3.0, 0.0, 6.0),
        (0.5, 3.0, 2.0, 0.0),
        (1.0, 2.0, 4.0, 4.0),
        (0.25, 1.0, 1.0, 2.0),
    ];
    // the same pods read with PodDeletionCostManagement off, then on (the second list last)
    let mut items = vec![serde_json::json!({"kind": "PodList", "items": pods})];
    for (savings, disruption, total_cost, total_disruption) in moves {
        items.push(serde_json::json!({
            "kind": "BalancedMove", "savings": savings, "disruption": disruption,
            "totalCost": total_cost, "totalDisruption": total_disruption,
        }));
    }
    items.push(serde_json::json!({
        "kind": "PodList", "items": pods, "podDeletionCostManagement": true,
    }));
    let answers = karpenter_says(&items);
    let typed: Vec<k8s_openapi::api::core::v1::Pod> =
        serde_json::from_value(items[0]["items"].clone()).expect("pods");
    let gated = answers.last().expect("the gated list's answer");
    for (managed, answer) in [(false, &answers[0]), (true, gated)] {
        let theirs = answer["costs"].as_array().expect("costs");
        for (pod, cost) in typed.iter().zip(theirs) {
            let ours = kerf_core::disruption::rules::eviction_cost(pod, managed);
            let cost = cost.as_f64().expect("a cost");
            assert!(
                (ours - cost).abs() < 1e-12,
                "{:?} (PodDeletionCostManagement {managed}): Kerf {ours}, Karpenter {cost}",
                pod.metadata
            );
        }
        let node = kerf_core::disruption::rules::node_disruption_cost(&typed, managed);
        let cost = answer["cost"].as_f64().expect("a node cost");
        assert!(
            (node - cost).abs() < 1e-9,
            "node (PodDeletionCostManagement {managed}): Kerf {node}, Karpenter {cost}"
        );
    }
    for ((savings, disruption, cost, total), answer) in moves.iter().zip(&answers[1..]) {
        let totals = kerf_core::disruption::search::PoolTotals {
            cost: *cost,
            disruption: *total,
        };
        let ours = kerf_core::disruption::search::balanced_score(*savings, *disruption, totals);
        let theirs: f64 = answer["score"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("a score");
        let approved = ours >= 1.0 / kerf_core::disruption::search::BALANCED_K;
        assert!(
            ours == theirs || (ours - theirs).abs() < 1e-12,
            "move {savings} {disruption} {cost} {total}: Kerf {ours}, Karpenter {theirs}"
        );
        assert_eq!(Some(approved), answer["approved"].as_bool());
    }
}

/// Kerf drops a repeated Event when Karpenter's recorder does. For every event of Karpenter
/// v1.15's constructors whose reason Kerf sends (scripts/karpenter-hash builds them over
/// one object of each kind), Kerf's repeat key names the object as Karpenter's dedupe
/// values do (its UID, or its bare name), holds the message exactly when those values say
/// more than the object, and then what they say (a reason, a command, a zone, a time), and
/// the repeat window is Karpenter's.
#[test]
fn events_repeat_as_karpenters() {
    use kerf_core::controllers::{Event, EventIdentity, EventObject};
    let uid = |n: &str| format!("00000000-0000-0000-0000-{n}");
    let class_ref = serde_json::json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"});
    let item = serde_json::json!({
        "kind": "Events",
        "pod": {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "shop", "uid": uid("00000000p0d0")},
            "spec": {"terminationGracePeriodSeconds": 60, "containers": [{"name": "app", "image": "app"}]}},
        "node": {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "ip-10-0-0-1.ec2.internal", "uid": uid("0000000n0de0")}},
        "nodeClaim": {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abcde", "uid": uid("000000c1a100")},
            "spec": {"nodeClassRef": class_ref, "requirements": []},
            "status": {"conditions": [{"type": "Rebooting", "status": "True", "reason": "Rebooting",
                "message": "", "lastTransitionTime": "2026-01-02T03:00:00Z", "observedGeneration": 1}]}},
        "nodePool": {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default", "uid": uid("0000000p0010")},
            "spec": {"template": {"spec": {"nodeClassRef": class_ref, "requirements": []}}}},
        "nodeClass": {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default", "uid": uid("00000c1a5500")},
            "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}]}},
    });
    let objects = [
        ("Pod", EventObject::Pod, "shop/web-0", uid("00000000p0d0")),
        (
            "Node",
            EventObject::Node,
            "ip-10-0-0-1.ec2.internal",
            uid("0000000n0de0"),
        ),
        (
            "NodeClaim",
            EventObject::NodeClaim,
            "default-abcde",
            uid("000000c1a100"),
        ),
        (
            "NodePool",
            EventObject::NodePool,
            "default",
            uid("0000000p0010"),
        ),
        (
            "EC2NodeClass",
            EventObject::NodeClass,
            "default",
            uid("00000c1a5500"),
        ),
    ];
    let theirs = karpenter_says(&[item]);
    let events = theirs[0]["events"].as_array().expect("events").clone();
    assert!(
        events.len() > 40,
        "Karpenter's constructors built: {}",
        events.len()
    );
    let mut compared = 0;
    for e in &events {
        let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
        let constructor = s("constructor");
        // a reboot's events are keyed on the reboot (its condition's transition time), and
        // Kerf tells each once per reboot
        if constructor.starts_with("rebootevents.") {
            continue;
        }
        let Some((_, kind, name, object_uid)) = objects.iter().find(|o| o.0 == s("object")) else {
            panic!("{constructor}: an event about {}", s("object"));
        };
        let event = Event {
            kind: *kind,
            name: name.to_string(),
            warning: s("type") == "Warning",
            reason: s("reason").into(),
            message: s("message"),
        };
        let (key, window) = event.repeat_key();
        let values: Vec<String> = (e["dedupeValues"].as_array().into_iter().flatten())
            .filter_map(|v| v.as_str().map(String::from))
            .collect();
        let identity = match values.first() {
            Some(v) if v == object_uid => EventIdentity::Object(*kind, name.to_string()),
            Some(v) => EventIdentity::Name(v.clone()),
            None => panic!("{constructor}: no dedupe values"),
        };
        assert_eq!(key.identity, identity, "{constructor}: keyed on {values:?}");
        assert_eq!(
            key.message.is_some(),
            values.len() > 1,
            "{constructor}: keyed on {values:?}, Kerf's key {key:?}"
        );
        // what Karpenter keys on besides the object is in the message Kerf keys on
        for value in values.iter().skip(1) {
            let keyed = key.message.as_deref().unwrap_or_default();
            assert!(
                keyed.contains(value.as_str()),
                "{constructor}: keyed on {value:?}, Kerf on {keyed:?}"
            );
        }
        assert_eq!(
            window.as_secs(),
            e["dedupeTimeoutSeconds"].as_u64().unwrap_or_default(),
            "{constructor}: repeat window"
        );
        compared += 1;
    }
    assert!(compared > 40, "events compared: {compared}");
}

/// NodePools and EC2NodeClasses covering every hashed field: the users' seeds, and a table
/// of the fields the seeds leave out.
fn table() -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(root().join("fixtures/seeds")).expect("seeds") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("seed");
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let number = &stem[..3];
        for doc in kerf_api::manifest::read_documents(&text).expect("seed parses") {
            let kind = doc.value["kind"].as_str().unwrap_or("");
            if kind != "NodePool" && kind != "EC2NodeClass" {
                continue;
            }
            let mut v = doc.value.clone();
            let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
            v["metadata"]["name"] = format!("s{number}-{name}").into();
            if kind == "NodePool" {
                let class = &mut v["spec"]["template"]["spec"]["nodeClassRef"]["name"];
                *class = format!("s{number}-{}", class.as_str().unwrap_or("")).into();
            }
            out.push_str("---\n");
            out.push_str(&serde_yaml::to_string(&v).expect("YAML"));
        }
    }
    out.push_str(include_str!("karpenter_hash_table.yaml"));
    out
}

#[test]
fn kerfs_drift_hashes_are_karpenters() {
    let cp = ControlPlane::start("karpenter-hash");
    cp.install_karpenter_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(table().as_bytes()));
    // as Karpenter reads them: defaulted and stored by the API server
    let mut objects = items(&cp, "nodepools.karpenter.sh");
    objects.extend(items(&cp, "ec2nodeclasses.karpenter.k8s.aws"));
    assert!(objects.len() >= 20, "{} objects", objects.len());
    let theirs = karpenters_hashes(&objects);
    assert_eq!(theirs.len(), objects.len());
    let mut differ = Vec::new();
    for (object, (kind, name, hash, version)) in objects.iter().zip(&theirs) {
        let ours = match kind.as_str() {
            "NodePool" => {
                let read = cluster_read::read::<NodePool>(kind, object);
                assert!(read.gaps.is_empty(), "{name}: {:?}", read.gaps);
                let np = read.object.expect("typed");
                assert_eq!(version, kerf_core::hash::NODEPOOL_HASH_VERSION);
                kerf_core::hash::node_pool_hash(&np)
            }
            _ => {
                let read = cluster_read::read::<EC2NodeClass>(kind, object);
                assert!(read.gaps.is_empty(), "{name}: {:?}", read.gaps);
                let class = read.object.expect("typed");
                assert_eq!(version, kerf_core::hash::EC2NODECLASS_HASH_VERSION);
                kerf_core::hash::node_class_hash(&class, CA_BUNDLE)
            }
        };
        if &ours != hash {
            differ.push(format!(
                "{kind}/{name}: Karpenter {hash}, Kerf {ours}: {object}"
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// The labels Karpenter's AWS provider gives an on-demand m5.large in us-east-1a, and `more`.
fn instance_labels(more: &[(&str, &str)]) -> Value {
    let mut labels = serde_json::json!({
        "node.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/zone": "us-east-1a",
        "karpenter.sh/capacity-type": "on-demand",
        "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
        "karpenter.k8s.aws/instance-category": "m",
        "karpenter.k8s.aws/instance-family": "m5",
        "karpenter.k8s.aws/instance-generation": "5",
        "karpenter.k8s.aws/instance-size": "large",
        "karpenter.k8s.aws/instance-cpu": "2",
        "karpenter.k8s.aws/instance-memory": "8192",
    });
    for (k, v) in more {
        labels[*k] = (*v).into();
    }
    labels
}

/// A NodeClaim, its Node and a running pod as Karpenter v1.15 leaves them: hash annotations
/// from Karpenter's own code for the NodePool as the API server holds it.
fn karpenters_nodeclaim(cp: &ControlPlane, name: &str, pool_hash: &str) {
    let claim = serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": instance_labels(&[
                ("karpenter.sh/nodepool", "default"),
                ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ]),
            "annotations": {
                "karpenter.sh/nodepool-hash": pool_hash,
                "karpenter.sh/nodepool-hash-version": "v3",
                "karpenter.sh/nodeclaim-min-values-relaxed": "false",
            },
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
            "expireAfter": "720h",
        },
    });
    cp.kubectl_ok(&["create", "-f", "-"], Some(claim.to_string().as_bytes()));
    let now = "2026-11-26T00:00:00Z";
    let condition = |t: &str| serde_json::json!({"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": now});
    let conditions = ["Launched", "Registered", "Initialized", "Ready"].map(condition);
    let status = serde_json::json!({"status": {
        "providerID": format!("kwok://{name}"), "nodeName": name,
        "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
        "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
        "conditions": conditions,
    }});
    cp.kubectl_ok(
        &[
            "patch",
            "nodeclaim",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ],
        None,
    );
    let node = serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": instance_labels(&[
                ("karpenter.sh/nodepool", "default"), ("karpenter.sh/registered", "true"),
                ("karpenter.sh/initialized", "true"), ("kubernetes.io/hostname", name),
                ("type", "kwok"),
            ]),
        },
        "spec": {"providerID": format!("kwok://{name}")},
        "status": {
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
            "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
        },
    });
    cp.kubectl_ok(&["create", "-f", "-"], Some(node.to_string().as_bytes()));
}

fn drifted(claim: &Value) -> bool {
    condition_true(claim, "Drifted")
}

#[test]
fn a_nodeclaim_karpenter_launched_is_kept_on_takeover() {
    let cp = ControlPlane::start("takeover");
    cp.install_karpenter_crds();
    let seed = std::fs::read(root().join("fixtures/seeds/004-getting-started.yaml")).expect("seed");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed));
    let pool = items(&cp, "nodepools.karpenter.sh");
    let theirs = karpenters_hashes(&pool);
    let karpenters = &theirs[0].2;
    karpenters_nodeclaim(&cp, "default-k8rpt", karpenters);
    // a second one stamped with a template Karpenter would call drifted: Kerf must see it
    let mut older = pool[0].clone();
    older["spec"]["template"]["metadata"] = serde_json::json!({"labels": {"team": "before"}});
    let stale = &karpenters_hashes(&[older])[0].2;
    karpenters_nodeclaim(&cp, "default-stale", stale);
    // its pod keeps the stale node from being disrupted at all (pinned there: on the other
    // node it would leave the stale one empty, and a drift deletion could take it before it
    // is read)
    cp.kubectl_ok(
        &["patch", "deployment", "inflate", "--type=merge", "-p",
          r#"{"spec":{"replicas":1,"template":{"metadata":{"annotations":{"karpenter.sh/do-not-disrupt":"true"}},"spec":{"nodeSelector":{"kubernetes.io/hostname":"default-stale"}}}}}"#],
        None,
    );
    wait_for(
        "the protected pod bound to the stale node",
        Duration::from_secs(60),
        || {
            let nodes = cp.kubectl_ok(
                &[
                    "get",
                    "pods",
                    "-l",
                    "app=inflate",
                    "-o",
                    "jsonpath={.items[*].spec.nodeName}",
                ],
                None,
            );
            (nodes.trim() == "default-stale").then_some(())
        },
        || cp.kubectl_ok(&["get", "pods", "-o", "wide"], None),
    );
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    let claim = |name: &str| -> Value {
        serde_json::from_str(&cp.kubectl_ok(&["get", "nodeclaim", name, "-o", "json"], None))
            .expect("nodeclaim JSON")
    };
    wait_for(
        "the stale NodeClaim marked drifted",
        Duration::from_secs(90),
        || drifted(&claim("default-stale")).then_some(()),
        || format!("{}", claim("default-stale")["status"]),
    );
    // the pass that marked one has judged the other; a few more passes to be sure
    std::thread::sleep(Duration::from_secs(20));
    let kept = claim("default-k8rpt");
    assert!(!drifted(&kept), "{}", kept["status"]);
    assert!(kept["metadata"]["deletionTimestamp"].is_null());
    let touched: Vec<Value> = op
        .lines()
        .into_iter()
        .filter(|l| l.to_string().contains("default-k8rpt") && l.to_string().contains("disrupting"))
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
}

/// `spec.kubelet` is read as Karpenter v1.15 reads it: for every configuration of the corpus
/// (valid ones, CEL expressions, unknown and nested unknown fields, each kind of wrong type,
/// durations and quantities that do not parse, every semantic rule), Kerf reports the
/// problems Karpenter's `ValidateKubeletConfig` reports, word for word and in order, and the
/// same fields as ones AL2 and Bottlerocket would drop.
#[test]
fn kubelet_validation_is_karpenters() {
    let corpus: Vec<Value> =
        serde_json::from_str(include_str!("kubelet_corpus.json")).expect("the corpus");
    let asked: Vec<Value> = corpus
        .iter()
        .map(|k| serde_json::json!({"kind": "KubeletConfig", "kubelet": k}))
        .collect();
    let theirs = karpenter_says(&asked);
    let strings = |v: &Value| -> Vec<String> {
        (v.as_array().into_iter().flatten())
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    };
    let mut differ = Vec::new();
    for (k, answer) in corpus.iter().zip(&theirs) {
        let ours: kerf_api::ec2nodeclass::KubeletConfiguration =
            serde_json::from_value(k.clone()).expect("an object");
        let (problems, dropped) = (ours.problems(), ours.unmanaged_fields());
        if problems != strings(&answer["errors"]) || dropped != strings(&answer["unmanaged"]) {
            differ.push(format!(
                "{k}\n  Kerf:      {problems:?} {dropped:?}\n  Karpenter: {} {}",
                answer["errors"], answer["unmanaged"]
            ));
        }
    }
    let refused = theirs.iter().filter(|a| a["errors"].is_array()).count();
    assert!(
        refused > corpus.len() / 2 && refused < corpus.len(),
        "the corpus holds both kinds: {refused} of {} refused",
        corpus.len()
    );
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// The upstream KubeletConfiguration Kerf decodes against (its copy in kerf-api) is the one
/// Karpenter's pinned k8s.io/kubelet has: same fields, types and pointers, nested.
#[test]
fn the_upstream_kubelet_configuration_is_the_one_karpenter_pins() {
    let theirs = karpenter_says(&[serde_json::json!({"kind": "KubeletFields"})]);
    let path = root().join("crates/kerf-api/src/kubelet/v1beta1-shape.json");
    let ours: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the copy")).expect("JSON");
    assert!(
        ours == theirs[0]["shape"],
        "{} differs from what scripts/karpenter-hash prints for KubeletFields: print it again",
        path.display()
    );
}

#[test]
fn what_kerf_does_not_know_stalls_nothing() {
    let cp = ControlPlane::start("forward-compatible");
    cp.install_karpenter_crds();
    let seed = std::fs::read(root().join("fixtures/seeds/004-getting-started.yaml")).expect("seed");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed));
    // a newer Karpenter's EC2NodeClass: two spec fields Kerf has never heard of
    for (field, kind) in [("futureSetting", "string"), ("futureToggle", "boolean")] {
        let patch = serde_json::json!([{
            "op": "add",
            "path": format!("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/{field}"),
            "value": {"type": kind},
        }]);
        cp.kubectl_ok(
            &[
                "patch",
                "crd",
                "ec2nodeclasses.karpenter.k8s.aws",
                "--type=json",
                "-p",
                &patch.to_string(),
            ],
            None,
        );
    }
    // valid under those CRDs, unknown to Kerf; the kubelet fields are an open map Kerf
    // passes through, as Karpenter v1.15
    let newer = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: balanced}
spec:
  weight: 90
  template:
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  disruption:
    consolidationPolicy: Balanced
    consolidateAfter: 30s
    budgets:
      - {nodes: "0", reasons: [Unhealthy]}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: placed}
spec:
  weight: 100
  template:
    spec:
      requirements: []
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: placed}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: placed}
spec:
  role: KarpenterNodeRole-test
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
  kubelet: {containerLogMaxSize: 50Mi, serializeImagePulls: false}
  futureSetting: soon
  futureToggle: true
"#;
    cp.kubectl_ok(&["apply", "-f", "-"], Some(newer.as_bytes()));
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    cp.kubectl_ok(&["scale", "deployment", "inflate", "--replicas=3"], None);
    wait_for(
        "inflate's pods running",
        Duration::from_secs(120),
        || {
            let pods = items(&cp, "pods");
            (pods
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .count()
                == 3)
                .then_some(())
        },
        || format!("{:?}", op.lines().last()),
    );
    // the highest weight's class could change the instance: nothing launches from it; the
    // Balanced pool launches (it is provisioned for), and `default` is left for the rest
    let claims = items(&cp, "nodeclaims.karpenter.sh");
    let pools: Vec<&str> = claims
        .iter()
        .filter_map(|c| c["metadata"]["labels"]["karpenter.sh/nodepool"].as_str())
        .collect();
    assert!(
        !pools.is_empty() && pools.iter().all(|p| *p == "balanced"),
        "{pools:?}"
    );
    // said once per object: a log line, a Warning Event, a gauge
    let warned: Vec<String> = op
        .lines()
        .into_iter()
        .filter(|l| l["message"] == "object not fully understood")
        .map(|l| l.to_string())
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    // Balanced is known (and consolidated by its score), and so is the Unhealthy budget
    // reason (it paces node repair)
    assert!(
        !warned.iter().any(|w| w.contains("Unhealthy")),
        "{warned:?}"
    );
    assert!(!warned.iter().any(|w| w.contains("Balanced")), "{warned:?}");
    assert!(
        warned.iter().any(|w| w.contains("spec.futureSetting")),
        "{warned:?}"
    );
    assert!(!warned.iter().any(|w| w.contains("kubelet")), "{warned:?}");
    wait_for(
        "the Warning Events",
        Duration::from_secs(30),
        || {
            let events = items(&cp, "events.events.k8s.io");
            let about: Vec<&str> = events
                .iter()
                .filter(|e| e["reason"] == "UnsupportedFields")
                .filter_map(|e| e["regarding"]["name"].as_str())
                .collect();
            (about == ["placed"]).then_some(())
        },
        || "no UnsupportedFields event yet".into(),
    );
    let (_, metrics) = http_get(op.metrics_port, "/metrics");
    assert!(
        metrics.contains(r#"kerf_cluster_object_gaps{kind="EC2NodeClass",name="placed"} 2"#)
            && !(metrics.lines())
                .any(|l| l.starts_with("kerf_cluster_object_gaps")
                    && l.contains(r#"name="balanced""#)),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("gaps"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A NodePool named `name` with `budgets` (given whole: the API server's default of one 10 %
/// budget is not added by either reader).
fn budgeted_pool(name: &str, budgets: Value) -> Value {
    serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "spec": {
            "disruption": {"consolidateAfter": "1m", "budgets": budgets},
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            }},
        },
    })
}

const REASONS: [&str; 4] = ["Empty", "Drifted", "Underutilized", "Unhealthy"];

/// How many nodes a NodePool's budgets let each reason disrupt is what Karpenter's own
/// `MustGetAllowedDisruptions` says, over budgets with and without reasons and schedules (in
/// and out of their windows), percentages, no budget for a reason, and budgets Karpenter cannot
/// read (which stop every reason).
#[test]
fn disruption_budgets_allow_what_karpenters_allow() {
    use kerf_api::nodepool::DisruptionReason;
    let budgets = [
        serde_json::json!([{"nodes": "10%"}]),
        serde_json::json!([]),
        serde_json::json!([{"nodes": "0", "reasons": ["Drifted"]}]),
        serde_json::json!([{"nodes": "5"}, {"nodes": "20%", "reasons": ["Empty", "Underutilized"]}]),
        serde_json::json!([{"nodes": "0", "schedule": "0 9 * * 1-5", "duration": "8h"}, {"nodes": "100%"}]),
        serde_json::json!([{"nodes": "3", "schedule": "@daily", "duration": "1h"}]),
        serde_json::json!([{"nodes": "2", "schedule": "*/15 * * * *", "duration": "5m"}]),
        serde_json::json!([{"nodes": "1", "schedule": "0 9 * * MON-FRI", "duration": "10h", "reasons": ["Underutilized"]}]),
        serde_json::json!([{"nodes": "0", "schedule": "0 0 1 * *", "duration": "720h"}]),
        serde_json::json!([{"nodes": "0", "schedule": "61 * * * *", "duration": "1h", "reasons": ["Drifted"]}, {"nodes": "10"}]),
        serde_json::json!([{"nodes": "0", "schedule": "@hourly"}, {"nodes": "4"}]),
        serde_json::json!([{"nodes": "5", "duration": "1h"}]),
        serde_json::json!([{"nodes": "33%", "reasons": ["Unhealthy"]}, {"nodes": "1%"}]),
        // cron's corners: a day of week 7 and a backwards range (robfig rejects both), a
        // date no month has (never fires: always open), `?`, `*/1` and a stepped day of month
        // beside a day of week (either may match)
        serde_json::json!([{"nodes": "2", "schedule": "0 9 * * 7", "duration": "8h"}]),
        serde_json::json!([{"nodes": "2", "schedule": "0 9 * * 5-1", "duration": "8h"}]),
        serde_json::json!([{"nodes": "2", "schedule": "0 0 30 2 *", "duration": "1h"}, {"nodes": "5"}]),
        serde_json::json!([{"nodes": "1", "schedule": "0 9 ? * 1", "duration": "2h"}]),
        serde_json::json!([{"nodes": "1", "schedule": "0 9 */1 * 0", "duration": "2h"}]),
        serde_json::json!([{"nodes": "1", "schedule": "0 9 */2 * 1", "duration": "2h"}]),
        serde_json::json!([{"nodes": "1", "schedule": "0 9 1 * *", "duration": "2h"}]),
        // counts cut to 32 bits, as Karpenter's intstr cuts them
        serde_json::json!([{"nodes": "4294967296"}]),
        serde_json::json!([{"nodes": "4294967301"}]),
    ];
    let times = [
        "2026-11-30T10:00:00Z",
        "2026-11-30T09:00:00Z",
        "2026-11-30T17:00:00Z",
        "2026-11-30T10:03:00Z",
        "2026-11-30T10:07:30Z",
        "2026-11-29T12:00:00Z",
        "2026-12-01T00:30:00Z",
    ];
    let counts = [0, 1, 7, 10, 33];
    let mut items = Vec::new();
    let mut asked = Vec::new();
    for (b, budget) in budgets.iter().enumerate() {
        let pool = budgeted_pool(&format!("p{b}"), budget.clone());
        for now in times {
            for nodes in counts {
                for reason in REASONS {
                    items.push(serde_json::json!({
                        "kind": "DisruptionBudget", "nodePool": pool, "nodes": nodes,
                        "reason": reason, "now": now,
                    }));
                    asked.push((b, now, nodes, reason));
                }
            }
        }
    }
    let answers = karpenter_says(&items);
    let mut differences = Vec::new();
    for ((b, now, nodes, reason), answer) in asked.iter().zip(&answers) {
        let np: NodePool =
            serde_json::from_value(budgeted_pool("p", budgets[*b].clone())).expect("a NodePool");
        let r: DisruptionReason = serde_json::from_value((*reason).into()).expect("a reason");
        let unix = now
            .parse::<k8s_openapi::jiff::Timestamp>()
            .expect("a time")
            .as_second();
        let ours = kerf_core::disruption::rules::allowed_disruptions(
            &np,
            r,
            *nodes,
            u64::try_from(unix).expect("after 1970"),
        );
        let theirs = answer["allowed"].as_u64().expect("allowed");
        if ours as u64 != theirs {
            differences.push(format!(
                "budgets {} at {now}, {nodes} nodes, {reason}: Kerf {ours}, Karpenter {theirs}",
                budgets[*b]
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// A Node and its NodeClaim (either may be left out) of NodePool `pool`, as Karpenter's
/// objects stand: `initialized` and `registered` the Node's labels, `ready` its Ready status
/// (no condition at all when `None`), the NodeClaim deleting or its instance terminating.
struct BudgetNode {
    name: &'static str,
    pool: &'static str,
    node: bool,
    claim: bool,
    initialized: bool,
    registered: bool,
    ready: Option<&'static str>,
    deleting: bool,
    terminating: bool,
}

impl BudgetNode {
    fn objects(&self) -> (Option<Value>, Option<Value>) {
        let provider_id = format!("aws:///us-east-1a/i-{}", self.name);
        let mut labels = serde_json::Map::new();
        labels.insert("karpenter.sh/nodepool".into(), self.pool.into());
        for (k, v) in instance_labels(&[]).as_object().expect("labels").iter() {
            labels.insert(k.clone(), v.clone());
        }
        let mut node_labels = labels.clone();
        node_labels.insert("kubernetes.io/hostname".into(), self.name.into());
        if self.initialized {
            node_labels.insert("karpenter.sh/initialized".into(), "true".into());
        }
        if self.registered {
            node_labels.insert("karpenter.sh/registered".into(), "true".into());
        }
        let conditions: Vec<Value> = (self.ready.iter())
            .map(|s| serde_json::json!({"type": "Ready", "status": s, "lastTransitionTime": "2026-11-30T09:00:00Z"}))
            .collect();
        // an uninitialized node keeps a startup taint, so that no lifecycle initializes it
        let startup: Vec<Value> = (!self.initialized)
            .then(|| serde_json::json!({"key": "example.com/agent", "effect": "NoSchedule"}))
            .into_iter()
            .collect();
        let node = self.node.then(|| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": node_labels, "creationTimestamp": "2026-11-30T08:00:00Z"},
                "spec": {"providerID": provider_id, "taints": startup},
                "status": {
                    "conditions": conditions,
                    "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
                    "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
                },
            })
        });
        let mut claim_conditions = vec![
            serde_json::json!({"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": "2026-11-30T08:00:00Z"}),
        ];
        if self.terminating {
            claim_conditions.push(serde_json::json!({"type": "InstanceTerminating", "status": "True", "reason": "InstanceTerminating", "message": "", "lastTransitionTime": "2026-11-30T09:59:00Z"}));
        }
        let mut meta = serde_json::json!({
            "name": format!("{}-claim", self.name), "labels": labels,
            "creationTimestamp": "2026-11-30T08:00:00Z",
            "finalizers": ["karpenter.sh/termination"],
        });
        if self.deleting {
            meta["deletionTimestamp"] = "2026-11-30T09:59:00Z".into();
        }
        let claim = self.claim.then(|| {
            serde_json::json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": meta,
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [],
                    "startupTaints": startup,
                },
                "status": {
                    "providerID": provider_id,
                    "nodeName": self.node.then_some(self.name),
                    "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
                    "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
                    "conditions": claim_conditions,
                },
            })
        });
        (node, claim)
    }
}

/// The nodes each NodePool's budgets count, and how many of them already take from the
/// budget, are what Karpenter's own `NodePoolStatsFromNodes` says for the same Nodes and
/// NodeClaims, for every reason: only initialized Nodes with a NodeClaim whose instance is not
/// terminating; a deleting NodeClaim's node and (but for repair) a node not Ready take from it.
/// Kerf's `karpenter_nodepools_allowed_disruptions` and `…_nodes_consuming_budgets` gauges,
/// after the controllers observed the objects, are compared with Karpenter's answers.
#[test]
fn disruption_budgets_count_the_nodes_karpenter_counts() {
    use kerf_core::observe::{Object, Observation};
    let node = |name, pool, ready| BudgetNode {
        name,
        pool,
        node: true,
        claim: true,
        initialized: true,
        registered: true,
        ready: Some(ready),
        deleting: false,
        terminating: false,
    };
    let nodes = [
        node("a1", "a", "True"),
        node("a2", "a", "True"),
        node("a3", "a", "True"),
        node("a4", "a", "True"),
        node("a5", "a", "False"),
        node("a6", "a", "Unknown"),
        BudgetNode {
            ready: None,
            ..node("a7", "a", "True")
        },
        BudgetNode {
            initialized: false,
            ..node("a8", "a", "True")
        },
        BudgetNode {
            initialized: false,
            ..node("a9", "a", "False")
        },
        BudgetNode {
            deleting: true,
            ..node("a10", "a", "True")
        },
        BudgetNode {
            deleting: true,
            ..node("a11", "a", "False")
        },
        BudgetNode {
            terminating: true,
            deleting: true,
            ..node("a12", "a", "True")
        },
        BudgetNode {
            claim: false,
            ..node("a13", "a", "True")
        },
        BudgetNode {
            node: false,
            ..node("a14", "a", "True")
        },
        BudgetNode {
            registered: false,
            ..node("a15", "a", "True")
        },
        node("b1", "b", "True"),
        node("b2", "b", "False"),
        BudgetNode {
            deleting: true,
            ..node("b3", "b", "True")
        },
        node("d1", "d", "True"),
    ];
    let pools = [
        budgeted_pool("a", serde_json::json!([{"nodes": "50%"}])),
        budgeted_pool(
            "b",
            serde_json::json!([{"nodes": "3"}, {"nodes": "0", "reasons": ["Drifted"]}]),
        ),
        budgeted_pool("c", serde_json::json!([{"nodes": "10%"}])),
        budgeted_pool("d", serde_json::json!([{"nodes": "0"}])),
    ]
    .map(|mut p| {
        // only d's empty node becomes a candidate (Empty), so nothing is disrupted
        if p["metadata"]["name"] != "d" {
            p["spec"]["disruption"]["consolidateAfter"] = "Never".into();
        }
        p
    });
    let epoch: u64 = 1_796_032_800; // 2026-11-30T10:00:00Z
    let settings = kerf_core::controllers::Settings {
        epoch_unix: epoch,
        ..Default::default()
    };
    let mut core = kerf_core::controllers::Controllers::new(settings, 7);
    let at = Duration::from_secs(1);
    for p in &pools {
        let np: NodePool = serde_json::from_value(p.clone()).expect("a NodePool");
        core.observe(Observation::Applied(Object::node_pool(np)), at);
    }
    let objects: Vec<(Option<Value>, Option<Value>)> =
        nodes.iter().map(BudgetNode::objects).collect();
    for (node, claim) in &objects {
        if let Some(c) = claim {
            let c: kerf_api::NodeClaim = serde_json::from_value(c.clone()).expect("a NodeClaim");
            core.observe(Observation::Applied(Object::nodeclaim(c)), at);
        }
        if let Some(n) = node {
            let n: k8s_openapi::api::core::v1::Node =
                serde_json::from_value(n.clone()).expect("a Node");
            core.observe(Observation::Applied(Object::Node(Box::new(n))), at);
        }
    }
    let mut now = at;
    let mut blocked = std::collections::BTreeSet::new();
    while now < Duration::from_secs(150) {
        now += Duration::from_secs(1);
        for action in core.poll(now) {
            if let kerf_core::controllers::Action::Event(e) = action
                && e.kind == kerf_core::controllers::EventObject::NodePool
            {
                blocked.insert((e.name, e.reason.to_string(), e.message));
            }
        }
    }
    // a NodePool with nodes whose budgets allow nothing for a reason that has candidates
    // says so, as Karpenter's disruption controller does (`NodePoolBlockedForDisruptionReason`):
    // b's Drifted budget allows nothing but no node drifted
    assert_eq!(
        blocked.into_iter().collect::<Vec<_>>(),
        [(
            "d".to_string(),
            "DisruptionBlocked".to_string(),
            "No allowed disruptions for disruption reason Empty due to blocking budget".to_string()
        )]
    );
    let metrics = core.render_metrics(now, &[]);
    // a gauge's value for one NodePool and reason, from the served text
    let gauge = |family: &str, pool: &str, reason: &str| -> Option<u64> {
        let want = [
            format!("nodepool=\"{pool}\""),
            format!("reason=\"{reason}\""),
        ];
        metrics
            .lines()
            .find_map(|line| {
                let rest = line.strip_prefix(family)?.strip_prefix('{')?;
                let (labels, value) = rest.split_once("} ")?;
                let labels: Vec<&str> = labels.split(',').collect();
                let matches = want.iter().all(|w| labels.contains(&w.as_str()));
                matches.then(|| value.trim().parse::<f64>().ok()).flatten()
            })
            .map(|v| v as u64)
    };
    let pairs: Vec<Value> = (objects.iter())
        .map(|(node, claim)| serde_json::json!({"node": node, "nodeClaim": claim}))
        .collect();
    let now_text = k8s_openapi::jiff::Timestamp::from_second(
        i64::try_from(epoch + now.as_secs()).expect("a time"),
    )
    .expect("a time")
    .to_string();
    let mut differences = Vec::new();
    for reason in REASONS {
        let stats = karpenter_says(&[
            serde_json::json!({"kind": "NodePoolStats", "reason": reason, "nodes": pairs}),
        ]);
        let count = |field: &str, pool: &str| stats[0][field][pool].as_u64().unwrap_or(0);
        let mut asks = Vec::new();
        for p in &pools {
            let name = p["metadata"]["name"].as_str().expect("a name");
            asks.push(serde_json::json!({
                "kind": "DisruptionBudget", "nodePool": p, "nodes": count("numNodes", name),
                "reason": reason, "now": now_text,
            }));
        }
        let allowed = karpenter_says(&asks);
        for (p, answer) in pools.iter().zip(&allowed) {
            let name = p["metadata"]["name"].as_str().expect("a name");
            let lower = reason.to_lowercase();
            let theirs = (answer["allowed"].as_u64(), Some(count("disrupting", name)));
            let ours = (
                gauge("karpenter_nodepools_allowed_disruptions", name, &lower),
                gauge("karpenter_nodepools_nodes_consuming_budgets", name, &lower),
            );
            if ours != theirs {
                differences.push(format!(
                    "nodepool {name}, {reason}: Kerf (allowed, consuming) {ours:?}, Karpenter {theirs:?} over {} counted nodes",
                    count("numNodes", name)
                ));
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// Whether a pod's `karpenter.sh/do-not-disrupt` keeps its node is what Karpenter's own
/// `IsDisruptable` says: `"true"` always, a positive Go duration for that long after the
/// pod's `status.startTime` (and while it has none), other values never; and the events the
/// check publishes on the pod (`DoNotDisruptUntil`, `DoNotDisruptGracePeriodElapsed`,
/// `InvalidDoNotDisruptAnnotation` with Go's own parse error) are Kerf's, word for word.
#[test]
fn do_not_disrupt_holds_as_long_as_karpenters() {
    let values = [
        None,
        Some("true"),
        Some("True"),
        Some("false"),
        Some(""),
        Some("10m"),
        Some("1h30m"),
        Some("1.5h"),
        Some(".5h"),
        Some("+20m"),
        Some("90000000us"),
        Some("2µs"),
        Some("0"),
        Some("0s"),
        Some("-5m"),
        Some("10"),
        Some("1x"),
        Some("3d"),
        Some("1h1"),
        Some(".s"),
        Some("1..5s"),
        Some("soon"),
        Some("9223372036854775807ns"),
        Some("9223372036854775808ns"),
        Some("2562048h"),
        Some("5 m"),
        Some("é5m"),
        Some("5m\""),
    ];
    let starts = [
        None,
        Some("2026-11-30T09:55:00Z"),
        Some("2026-11-30T08:00:00Z"),
    ];
    let mut pods = Vec::new();
    for (i, value) in values.iter().enumerate() {
        for (j, start) in starts.iter().enumerate() {
            let mut annotations = serde_json::Map::new();
            if let Some(v) = value {
                annotations.insert("karpenter.sh/do-not-disrupt".into(), (*v).into());
            }
            pods.push(serde_json::json!({
                "metadata": {"name": format!("p-{i}-{j}"), "namespace": "default", "annotations": annotations},
                "spec": {"nodeName": "n", "containers": []},
                "status": {"phase": "Running", "startTime": start},
            }));
        }
    }
    let now = "2026-11-30T10:00:00Z";
    let answers =
        karpenter_says(&[serde_json::json!({"kind": "DoNotDisrupt", "pods": pods, "now": now})]);
    let theirs = answers[0]["blocks"].as_array().expect("blocks");
    let told = answers[0]["told"].as_array().expect("told");
    let unix = now
        .parse::<k8s_openapi::jiff::Timestamp>()
        .expect("a time")
        .as_second();
    let now = Duration::from_secs(u64::try_from(unix).expect("after 1970"));
    let mut differences = Vec::new();
    for ((pod, blocks), their_events) in pods.iter().zip(theirs).zip(told) {
        let typed: k8s_openapi::api::core::v1::Pod =
            serde_json::from_value(pod.clone()).expect("a pod");
        let started = kerf_core::disruption::rules::pod_started(&typed);
        let ours = kerf_core::disruption::rules::pod_blocks(&typed, started, now);
        if Some(ours) != blocks.as_bool() {
            differences.push(format!(
                "{} started {}: Kerf {ours}, Karpenter {blocks}",
                pod["metadata"]["annotations"], pod["status"]["startTime"]
            ));
        }
        let dnd = kerf_core::disruption::rules::do_not_disrupt(&typed, started);
        let our_events: Vec<String> =
            kerf_core::disruption::rules::do_not_disrupt_event(&dnd, now, Duration::ZERO)
                .map(|(reason, message, _)| format!("{reason}: {message}"))
                .into_iter()
                .collect();
        let their_events: Vec<&str> = (their_events.as_array().into_iter().flatten())
            .filter_map(|e| e.as_str())
            .collect();
        if our_events != their_events {
            differences.push(format!(
                "{} started {}: Kerf tells {our_events:?}, Karpenter {their_events:?}",
                pod["metadata"]["annotations"], pod["status"]["startTime"]
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// Whether a node's pods keep it from being a disruption candidate is what Karpenter's own
/// checks say (each pod's do-not-disrupt, then `pdb.Limits.CanEvictPods` over the budgets):
/// a DaemonSet's pod holds its node by its annotation or a budget as a workload pod does, and
/// a pod two budgets select holds it whatever they allow. Kerf's answer is `kerf explain`'s
/// blockers after the controllers observed the objects; the budgets' status given to
/// Karpenter is what the disruption controller would write for them.
#[test]
fn the_pods_that_hold_a_candidate_are_karpenters() {
    use kerf_core::observe::{Object, Observation};
    let pod = |name: &str, app: &str, daemon: bool, annotation: Option<&str>| {
        let mut meta = serde_json::json!({
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "labels": {"app": app}, "creationTimestamp": "2026-11-30T09:00:00Z",
        });
        if let Some(v) = annotation {
            meta["annotations"] = serde_json::json!({"karpenter.sh/do-not-disrupt": v});
        }
        if daemon {
            meta["ownerReferences"] = serde_json::json!([{"apiVersion": "apps/v1", "kind": "DaemonSet",
                "name": app, "uid": format!("uid-ds-{app}"), "controller": true}]);
        } else {
            meta["ownerReferences"] = serde_json::json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": app, "uid": format!("uid-rs-{app}"), "controller": true}]);
        }
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "pause",
                "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": "Running", "startTime": "2026-11-30T09:00:00Z",
                "conditions": [{"type": "Ready", "status": "True"}]},
        })
    };
    // a budget over `app` with minAvailable `min` of its `pods` healthy pods, and the status
    // the disruption controller writes for it
    let pdb = |name: &str, app: &str, min: i32, pods: i32| {
        serde_json::json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": app}}, "minAvailable": min},
            "status": {"disruptionsAllowed": (pods - min).max(0), "currentHealthy": pods,
                "desiredHealthy": min, "expectedPods": pods},
        })
    };
    let cases: Vec<(&str, Vec<Value>, Vec<Value>)> = vec![
        (
            "a workload pod",
            vec![pod("web-0", "web", false, None)],
            vec![],
        ),
        (
            "a daemon pod's do-not-disrupt",
            vec![
                pod("web-0", "web", false, None),
                pod("agent-0", "agent", true, Some("true")),
            ],
            vec![],
        ),
        (
            "a daemon pod's budget without room",
            vec![
                pod("web-0", "web", false, None),
                pod("agent-0", "agent", true, None),
            ],
            vec![pdb("agent", "agent", 1, 1)],
        ),
        (
            "a daemon pod that tolerates every taint, its budget without room",
            vec![pod("web-0", "web", false, None), {
                let mut p = pod("agent-0", "agent", true, None);
                p["spec"]["tolerations"] = serde_json::json!([{"operator": "Exists"}]);
                p
            }],
            vec![pdb("agent", "agent", 1, 1)],
        ),
        (
            "a workload pod's budget with room",
            vec![pod("web-0", "web", false, None)],
            vec![pdb("web", "web", 0, 1)],
        ),
        (
            "two budgets with room over one pod",
            vec![pod("web-0", "web", false, None)],
            vec![pdb("web-a", "web", 0, 1), pdb("web-b", "web", 0, 1)],
        ),
        (
            "a workload pod's timed do-not-disrupt, run out",
            vec![pod("web-0", "web", false, Some("30m"))],
            vec![],
        ),
    ];
    // the controllers' clock starts at midnight, before every object's timestamps, and it is
    // 10:00 when they are asked
    let epoch: u64 = 1_795_996_800; // 2026-11-30T00:00:00Z
    let now = Duration::from_secs(10 * 3600);
    let mut differences = Vec::new();
    for (what, pods, pdbs) in &cases {
        let answer = karpenter_says(&[serde_json::json!({
            "kind": "PodsDisruptable", "pods": pods, "pdbs": pdbs, "now": "2026-11-30T10:00:00Z",
        })]);
        let theirs = answer[0]["blockedBy"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let settings = kerf_core::controllers::Settings {
            epoch_unix: epoch,
            ..Default::default()
        };
        let mut core = kerf_core::controllers::Controllers::new(settings, 7);
        let np: NodePool =
            serde_json::from_value(budgeted_pool("a", serde_json::json!([{"nodes": "100%"}])))
                .expect("a NodePool");
        core.observe(Observation::Applied(Object::node_pool(np)), now);
        let node = BudgetNode {
            name: "n1",
            pool: "a",
            node: true,
            claim: true,
            initialized: true,
            registered: true,
            ready: Some("True"),
            deleting: false,
            terminating: false,
        };
        let (node, claim) = node.objects();
        let claim: kerf_api::NodeClaim =
            serde_json::from_value(claim.expect("a claim")).expect("a NodeClaim");
        core.observe(
            Observation::Applied(Object::nodeclaim(claim)),
            Duration::ZERO,
        );
        let node: k8s_openapi::api::core::v1::Node =
            serde_json::from_value(node.expect("a node")).expect("a Node");
        core.observe(
            Observation::Applied(Object::Node(Box::new(node))),
            Duration::ZERO,
        );
        for p in pods {
            let p: k8s_openapi::api::core::v1::Pod =
                serde_json::from_value(p.clone()).expect("a pod");
            core.observe(
                Observation::Applied(Object::Pod(Box::new(p))),
                Duration::ZERO,
            );
        }
        for b in pdbs {
            let b: k8s_openapi::api::policy::v1::PodDisruptionBudget =
                serde_json::from_value(b.clone()).expect("a PDB");
            core.observe(
                Observation::Applied(Object::Pdb(Box::new(b))),
                Duration::ZERO,
            );
        }
        drop(core.poll(now + Duration::from_secs(1)));
        let explained = core
            .explain_node("n1", now + Duration::from_secs(1))
            .expect("the node");
        let ours: Vec<&str> = (explained.blockers.iter())
            .map(|f| f.kind)
            .filter(|k| matches!(*k, "do-not-disrupt" | "pdb"))
            .collect();
        let ours = ours.first().copied().unwrap_or_default();
        if ours != theirs {
            differences.push(format!(
                "{what}: Kerf {ours:?} ({:?}), Karpenter {theirs:?} ({})",
                explained
                    .blockers
                    .iter()
                    .map(|f| &f.message)
                    .collect::<Vec<_>>(),
                answer[0]["pdbs"]
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
