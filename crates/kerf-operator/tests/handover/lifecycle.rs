//! One NodeClaim's life under Karpenter v1.15.0's kwok provider and under Kerf, one after the
//! other on one control plane, from the same manifests: launched, registered, initialized,
//! consolidatable, drifted (the NodePool's template changes), replaced, drained, terminated.
//! A watch records every version of every NodeClaim; the test compares, per NodeClaim (the
//! first and its replacement) and condition type, the statuses and reasons each went
//! through (and `DisruptionReason`'s before the deletion), and the reasons of the events each
//! autoscaler sent, per kind of object. What Kerf does not do as Karpenter does is listed in
//! [`DIFFERENCES`] with why (the book's compatibility table says the same); anything else
//! fails. (A module of the handover test binary, so that it runs beside it.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::OPERATOR;
use super::support::{self, ControlPlane, Karpenter, Operator, condition_true, wait_for};

/// Consolidatable after 10 s, but only empty nodes consolidated: the pod keeps its node until
/// the drift.
const MANIFESTS: &str = r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: lifecycle}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      expireAfter: Never
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: kubernetes.io/os, operator: In, values: [linux]}
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 10s}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: lifecycle, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: lifecycle}}
  template:
    metadata: {labels: {app: lifecycle}}
    spec:
      nodeSelector: {karpenter.sh/nodepool: lifecycle}
      terminationGracePeriodSeconds: 1
      containers: [{name: app, image: pause, resources: {requests: {cpu: "1", memory: 1Gi}}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: typo}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [c-3x-amd64-linux]}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: few}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: karpenter.kwok.sh/instance-family, operator: Exists, minValues: 4}
---
apiVersion: v1
kind: Pod
metadata: {name: typo, namespace: default}
spec:
  nodeSelector: {karpenter.sh/nodepool: typo}
  containers: [{name: app, image: pause, resources: {requests: {cpu: 100m}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: few, namespace: default}
spec:
  nodeSelector: {karpenter.sh/nodepool: few}
  containers: [{name: app, image: pause, resources: {requests: {cpu: 100m}}}]
"#;

/// The NodePools whose requirements leave them no instance type (each for its own reason),
/// each with a pod that only they could take: both autoscalers must say so on the NodePool.
const NO_TYPES: &[&str] = &["typo", "few"];

/// What is seen differently under Kerf, on purpose or not yet built: (what differs, why).
/// An entry names a condition as `claim N condition TYPE` and an event as `event KIND REASON`.
/// Each shows only in some runs (Karpenter's watch catches a state, or its disruption pass
/// tells an event, in one run and not another), so it is excused, not required.
const DIFFERENCES: &[(&str, &str)] = &[
    (
        "claim 0 condition Drained",
        "Kerf always writes `True/Drained` before the NodeClaim's finalizer goes (test \
         `a_drained_nodeclaims_last_status_says_drained`); Karpenter's last state is \
         `True/Drained` in some runs and `Unknown/Draining` in others, as its node termination \
         happens to reconcile before the NodeClaim goes",
    ),
    (
        "claim 0 condition VolumesDetached",
        "Kerf always writes `True/VolumesDetached` before the NodeClaim's finalizer goes (test \
         `a_drained_node_waits_for_its_volumes_to_be_detached`); Karpenter's last state shows it \
         only when its watch catches the NodeClaim then",
    ),
    (
        "event Node Unconsolidatable",
        "not sent: Kerf says why a node is not consolidated in its logs and metrics only",
    ),
    (
        "event NodeClaim Unconsolidatable",
        "not sent: Kerf says why a node is not consolidated in its logs and metrics only",
    ),
    (
        "event Node DisruptionBlocked",
        "Kerf tells it for a do-not-disrupt pod or node and a spent budget; Karpenter also for \
         the other reasons a node is no candidate at a disruption pass (during this drift \
         replacement: a node not initialized yet, or one already being disrupted)",
    ),
    (
        "event NodeClaim DisruptionBlocked",
        "Kerf tells it for a do-not-disrupt pod or node and a spent budget; Karpenter also for \
         the other reasons a node is no candidate at a disruption pass (during this drift \
         replacement: a node not initialized yet, or one already being disrupted)",
    ),
];

/// Every version of every NodeClaim from a watch, in order (into a file: a pipe left unread
/// would fill and hold the watch up).
pub(super) struct Watch {
    child: Child,
    out: PathBuf,
}

impl Watch {
    pub(super) fn start(cp: &ControlPlane, who: &str) -> Watch {
        let out = cp.dir.join(format!("nodeclaims-{who}.json"));
        let file = std::fs::File::create(&out).expect("watch file");
        let child = Command::new("kubectl")
            .args([
                "get",
                "nodeclaims.karpenter.sh",
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ])
            .env("KUBECONFIG", &cp.kubeconfig)
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl watch starts");
        Watch { child, out }
    }

    /// Stops the watch and reads what it saw: every event (`type` and `object`), in order.
    pub(super) fn events(mut self) -> Vec<Value> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        (serde_json::Deserializer::from_str(&text).into_iter::<Value>())
            .map_while(Result::ok)
            .collect()
    }

    /// Stops the watch and reads what it saw: each NodeClaim's versions, NodeClaims in the
    /// order they were first seen.
    pub(super) fn versions(self) -> Vec<Vec<Value>> {
        let mut order: Vec<String> = Vec::new();
        let mut by_name: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for event in self.events() {
            let object = event["object"].clone();
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if !by_name.contains_key(&name) {
                order.push(name.clone());
            }
            by_name.entry(name).or_default().push(object);
        }
        order
            .into_iter()
            .map(|n| by_name.remove(&n).unwrap_or_default())
            .collect()
    }
}

/// Per condition type, the `status/reason` values a NodeClaim's versions went through, a
/// repeat of the one before left out, and so is every `Unknown` but a last one (awaiting
/// reconciliation, a node not there or not Ready yet, its startup taints still on): whether an
/// autoscaler writes one of those, or sets several conditions in one write, depends on
/// whether it happened to reconcile in that second, not on what it does. A state left and
/// come back to through `Unknown` therefore reads as one; a condition removed is not told.
fn condition_paths(versions: &[Value]) -> BTreeMap<String, Vec<String>> {
    let mut out = every_state(versions);
    for path in out.values_mut() {
        let last = path.len().saturating_sub(1);
        let mut i = 0;
        path.retain(|state| {
            let keep = i == last || !state.starts_with("Unknown/");
            i += 1;
            keep
        });
        path.dedup();
    }
    out
}

/// Per condition type, every `status/reason` the versions went through, in order.
pub(super) fn every_state(versions: &[Value]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for v in versions {
        for c in v["status"]["conditions"].as_array().into_iter().flatten() {
            let kind = c["type"].as_str().unwrap_or("").to_string();
            let state = format!(
                "{}/{}",
                c["status"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or("")
            );
            let path = out.entry(kind).or_default();
            if path.last() != Some(&state) {
                path.push(state);
            }
        }
    }
    out
}

/// Conditions whose transitions operatorpkg tells as Events named for them: it tells those it
/// happens to see (a condition set in the same write that brought it is not told), so they
/// are left out of the comparison of events, the conditions being compared themselves.
const TRANSITION_EVENTS: &[&str] = &[
    "Launched",
    "Registered",
    "Initialized",
    "Ready",
    "Consolidatable",
    "Drifted",
    "Drained",
    "VolumesDetached",
    "InstanceTerminating",
    "ConsistentStateFound",
    "DisruptionReason",
    "ValidationSucceeded",
    "NodeClassReady",
    "NodeRegistrationHealthy",
    "MemoryPressure",
    "DiskPressure",
    "PIDPressure",
    "NetworkUnavailable",
];

/// The reasons of the events the autoscaler sent, per kind of object they are about, but for
/// [`TRANSITION_EVENTS`]; a NodePool's events by its name, each with its type and message.
fn event_reasons(cp: &ControlPlane) -> BTreeMap<String, BTreeSet<String>> {
    let out = cp.kubectl_ok(&["get", "events", "-A", "-o", "json"], None);
    let list: Value = serde_json::from_str(&out).expect("events as JSON");
    let mut reasons: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in list["items"].as_array().into_iter().flatten() {
        let ours =
            e["source"]["component"] == "karpenter" || e["reportingComponent"] == "karpenter";
        if !ours {
            continue;
        }
        let kind = e["involvedObject"]["kind"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let mut reason = e["reason"].as_str().unwrap_or("").to_string();
        if TRANSITION_EVENTS.contains(&reason.as_str()) {
            continue;
        }
        let kind = if kind == "NodePool" {
            let name = e["involvedObject"]["name"].as_str().unwrap_or("");
            let (kind_of, message) = (e["type"].as_str(), e["message"].as_str());
            reason = format!(
                "{reason} {}: {}",
                kind_of.unwrap_or(""),
                message.unwrap_or("")
            );
            format!("NodePool {name}")
        } else {
            kind
        };
        reasons.entry(kind).or_default().insert(reason);
    }
    reasons
}

fn items(cp: &ControlPlane, kind: &str) -> Vec<Value> {
    let out = cp.kubectl_ok(&["get", kind, "-o", "json", "-A"], None);
    let list: Value = serde_json::from_str(&out).expect("a JSON list");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// The `DisruptionReason` states a NodeClaim went through while not yet being deleted, under
/// its own key: Karpenter's queue writes the condition with the disrupted taint, when it marks
/// the candidate, and the replacement takes a while to come up before the deletion.
fn reason_before_deletion(versions: &[Value]) -> Option<(String, Vec<String>)> {
    let live: Vec<Value> = (versions.iter())
        .filter(|v| v["metadata"]["deletionTimestamp"].is_null())
        .cloned()
        .collect();
    let reason = every_state(&live).remove("DisruptionReason")?;
    Some(("DisruptionReason before deletion".to_string(), reason))
}

fn pods_node(cp: &ControlPlane) -> Option<String> {
    items(cp, "pods")
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["app"] == "lifecycle")
        .filter(|p| {
            p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
        })
        .find_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
}

/// What one autoscaler did: each NodeClaim's condition paths, and its events' reasons.
#[derive(Debug)]
struct Life {
    claims: Vec<BTreeMap<String, Vec<String>>>,
    events: BTreeMap<String, BTreeSet<String>>,
}

/// Waits (a minute at most) for a NodeClaim, `what`, to be marked consolidatable.
fn consolidatable(cp: &ControlPlane, what: &str) {
    wait_for(
        &format!("{what} consolidatable"),
        Duration::from_secs(60),
        || {
            items(cp, "nodeclaims.karpenter.sh")
                .iter()
                .any(|c| condition_true(c, "Consolidatable"))
                .then_some(())
        },
        || "not yet".into(),
    );
}

/// Lets `who` (already running) take the pod's NodeClaim through its life.
fn life(cp: &ControlPlane, who: &str) -> Life {
    let watch = Watch::start(cp, who);
    cp.kubectl_ok(&["apply", "-f", "-"], Some(MANIFESTS.as_bytes()));
    let first = wait_for(
        &format!("{who}'s node running the pod"),
        Duration::from_secs(120),
        || pods_node(cp),
        || format!("{} NodeClaims", items(cp, "nodeclaims.karpenter.sh").len()),
    );
    consolidatable(cp, &format!("{who}'s NodeClaim"));
    // the template changes: the NodeClaim drifts, is replaced, drained and terminated
    cp.kubectl_ok(
        &[
            "patch",
            "nodepool",
            "lifecycle",
            "--type=merge",
            "-p",
            r#"{"spec":{"template":{"metadata":{"labels":{"generation":"two"}}}}}"#,
        ],
        None,
    );
    wait_for(
        &format!("{who}'s pod on the replacement, the first node gone"),
        Duration::from_secs(180),
        || {
            let nodes = items(cp, "nodes");
            let gone = !nodes
                .iter()
                .any(|n| n["metadata"]["name"] == first.as_str());
            let moved = pods_node(cp).is_some_and(|n| n != first);
            let claims = items(cp, "nodeclaims.karpenter.sh").len();
            (gone && moved && claims == 1).then_some(())
        },
        || {
            format!(
                "{} NodeClaims, pod on {:?}",
                items(cp, "nodeclaims.karpenter.sh").len(),
                pods_node(cp)
            )
        },
    );
    // the replacement quiet for consolidateAfter, then a moment for the last writes and events
    consolidatable(cp, &format!("{who}'s replacement"));
    std::thread::sleep(Duration::from_secs(5));
    wait_for(
        &format!("{who}'s word on each NodePool that has no instance type"),
        Duration::from_secs(60),
        || {
            let told = event_reasons(cp);
            (NO_TYPES
                .iter()
                .all(|p| told.contains_key(&format!("NodePool {p}"))))
            .then_some(())
        },
        || format!("{:?}", event_reasons(cp)),
    );
    let claims = watch
        .versions()
        .iter()
        .map(|v| {
            let mut paths = condition_paths(v);
            paths.extend(reason_before_deletion(v));
            paths
        })
        .collect();
    Life {
        claims,
        events: event_reasons(cp),
    }
}

/// Takes away what the first autoscaler made (finalizers stripped: it is stopped), its
/// events too, so that the other starts from the same objects.
fn clear(cp: &ControlPlane) {
    cp.kubectl_ok(
        &["delete", "deployment", "lifecycle", "-n", "default"],
        None,
    );
    cp.kubectl_ok(&["delete", "nodepool", "lifecycle"], None);
    for pool in NO_TYPES {
        cp.kubectl_ok(&["delete", "nodepool", pool], None);
    }
    super::parity::remove_nodes(cp);
    cp.kubectl_ok(
        &["delete", "pods", "--all", "-n", "default", "--force"],
        None,
    );
    cp.kubectl_ok(&["delete", "events", "--all", "-A"], None);
    wait_for(
        "no NodeClaim or Node left",
        Duration::from_secs(60),
        || {
            let left = items(cp, "nodeclaims.karpenter.sh").len() + items(cp, "nodes").len();
            (left == 0).then_some(())
        },
        || "objects left".into(),
    );
}

/// Every way the two lives differ, as `claim N condition TYPE: …` and `events KIND: …`.
fn differences(theirs: &Life, ours: &Life) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if theirs.claims.len() != ours.claims.len() {
        out.push((
            "NodeClaims".to_string(),
            format!(
                "Karpenter made {}, Kerf {}",
                theirs.claims.len(),
                ours.claims.len()
            ),
        ));
    }
    for (i, (a, b)) in theirs.claims.iter().zip(&ours.claims).enumerate() {
        let types: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for t in types {
            if a.get(t) != b.get(t) {
                out.push((
                    format!("claim {i} condition {t}"),
                    format!("Karpenter {:?}, Kerf {:?}", a.get(t), b.get(t)),
                ));
            }
        }
    }
    let none = BTreeSet::new();
    let kinds: BTreeSet<&String> = theirs.events.keys().chain(ours.events.keys()).collect();
    for k in kinds {
        let (a, b) = (
            theirs.events.get(k).unwrap_or(&none),
            ours.events.get(k).unwrap_or(&none),
        );
        for reason in a.symmetric_difference(b) {
            let who = if a.contains(reason) {
                "Karpenter"
            } else {
                "Kerf"
            };
            out.push((format!("event {k} {reason}"), format!("sent by {who} only")));
        }
    }
    out
}

#[test]
fn karpenter_and_kerf_take_a_nodeclaim_through_its_life_alike() {
    let cp = ControlPlane::start("lifecycle");
    cp.install_karpenter_kwok_crds();

    let karpenter = Karpenter::start(&cp, 1, &[]);
    let karpenters = life(&cp, "Karpenter");
    karpenter.stop();
    clear(&cp);

    let env = support::chart_env(&cp, true);
    let kerf = Operator::spawn(&cp, OPERATOR, 1, &["--cloud-provider", "kwok"], &env);
    let kerfs = life(&cp, "Kerf");
    drop(kerf);

    eprintln!("Karpenter: {karpenters:#?}\nKerf: {kerfs:#?}");
    // both watches saw the first NodeClaim and its replacement, with their conditions
    for (who, l) in [("Karpenter", &karpenters), ("Kerf", &kerfs)] {
        assert!(
            l.claims.len() == 2 && l.claims.iter().all(|c| c.contains_key("Ready")),
            "{who}: {l:?}"
        );
    }
    let found = differences(&karpenters, &kerfs);
    let unlisted: Vec<String> = found
        .iter()
        .filter(|(what, _)| !DIFFERENCES.iter().any(|(d, _)| d == what))
        .map(|(what, how)| format!("{what}: {how}"))
        .collect();
    assert!(
        unlisted.is_empty(),
        "unlisted differences:\n{}",
        unlisted.join("\n")
    );
}
