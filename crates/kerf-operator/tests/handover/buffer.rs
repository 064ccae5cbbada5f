//! CapacityBuffers on Karpenter v1.15.0's kwok provider, Karpenter and Kerf one after the
//! other on one control plane, both with `CapacityBuffer=true`, as Karpenter's own regression
//! suite plays them on 2-cpu nodes: a buffer of three 1-cpu chunks is provisioned, its status
//! written, its nodes kept from consolidation; a real pod starts at once in the room it holds
//! and the buffer is refilled; once the buffer goes, consolidation takes the spare nodes.
//! (A module of the handover test binary, so that it runs beside it.)

use std::collections::BTreeSet;
use std::time::Duration;

use super::repair::{clear, items};
use super::support::{ControlPlane, wait_for};
use serde_json::Value;

/// The settings both run with (Karpenter kwok's chart writes both gates; its binary reads
/// an empty one as an error).
const SETTINGS: [(&str, &str); 1] = [("FEATURE_GATES", "CapacityBuffer=true,StaticCapacity=false")];

const MANIFESTS: &str = r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: buffer}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      expireAfter: Never
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: [c-2x-amd64-linux, c-2x-arm64-linux]}
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s}
---
apiVersion: v1
kind: PodTemplate
metadata: {name: buffer-template, namespace: default}
template:
  spec:
    containers: [{name: pause, image: pause, resources: {requests: {cpu: "1", memory: 512Mi}}}]
"#;

const BUFFER: &str = r#"
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {name: spare, namespace: default}
spec:
  podTemplateRef: {name: buffer-template}
  replicas: 3
"#;

const CONSUMER: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: consumer, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: consumer}}
  template:
    metadata: {labels: {app: consumer}}
    spec:
      containers: [{name: app, image: pause, resources: {requests: {cpu: "1", memory: 512Mi}}}]
"#;

/// What one autoscaler did with the buffer.
#[derive(Debug, PartialEq)]
struct Buffered {
    /// The buffer's status once its chunks fit: replicas, PodTemplate, strategy, and each
    /// condition's type, status, reason, message and observed generation.
    status: Vec<String>,
    /// NodeClaims made for the buffer.
    nodes: usize,
    /// Whether the real pod ran on a node that was there before it came.
    consumer_on_spare_room: bool,
    /// NodeClaims made after the real pod took its room (the refill).
    refilled: usize,
    /// Whether any NodeClaim was deleted while the buffer was there.
    disrupted_while_buffered: bool,
    /// NodeClaims left once the buffer was deleted and consolidation settled.
    left_after: usize,
    /// The reasons of the Events about the buffer.
    events: Vec<String>,
}

fn status_of(buffer: &Value) -> Vec<String> {
    let s = &buffer["status"];
    let mut out = vec![format!(
        "replicas={} podTemplateRef={} strategy={}",
        s["replicas"], s["podTemplateRef"]["name"], s["provisioningStrategy"]
    )];
    for c in s["conditions"].as_array().into_iter().flatten() {
        out.push(format!(
            "{} {} {} {:?} generation={}",
            c["type"], c["status"], c["reason"], c["message"], c["observedGeneration"]
        ));
    }
    out.sort();
    out
}

fn buffer_fits(cp: &ControlPlane, what: &str) -> Value {
    wait_for(
        what,
        Duration::from_secs(120),
        || {
            let b = (items(cp, "capacitybuffers.autoscaling.x-k8s.io").into_iter())
                .find(|b| b["metadata"]["name"] == "spare")?;
            let fits = (b["status"]["conditions"].as_array().into_iter().flatten())
                .any(|c| c["type"] == "Provisioning" && c["reason"] == "FitsExistingCapacity");
            fits.then_some(b)
        },
        || cp.kubectl_ok(&["get", "capacitybuffers", "-A", "-o", "yaml"], None),
    )
}

fn claim_names(cp: &ControlPlane) -> (BTreeSet<String>, bool) {
    let claims = items(cp, "nodeclaims.karpenter.sh");
    let deleting = claims
        .iter()
        .any(|c| !c["metadata"]["deletionTimestamp"].is_null());
    let names = (claims.iter())
        .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    (names, deleting)
}

fn buffered(cp: &ControlPlane, who: &str) -> Buffered {
    cp.kubectl_ok(&["apply", "-f", "-"], Some(BUFFER.as_bytes()));
    let fits = buffer_fits(cp, &format!("{who} to provision the buffer"));
    let (before, mut disrupted) = claim_names(cp);
    let nodes_before: BTreeSet<String> = (items(cp, "nodes").into_iter())
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(CONSUMER.as_bytes()));
    let node = wait_for(
        &format!("the consumer to run under {who}"),
        Duration::from_secs(60),
        || {
            (items(cp, "pods").into_iter())
                .filter(|p| p["metadata"]["labels"]["app"] == "consumer")
                .find(|p| p["status"]["phase"] == "Running")
                .and_then(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
        },
        || cp.kubectl_ok(&["get", "pods", "-A", "-o", "wide"], None),
    );
    // the refill: the buffer's chunks find room again, on a node made for them
    wait_for(
        &format!("{who} to refill the buffer"),
        Duration::from_secs(90),
        || (claim_names(cp).0.difference(&before).count() > 0).then_some(()),
        || cp.kubectl_ok(&["get", "nodeclaims,capacitybuffers", "-A"], None),
    );
    buffer_fits(cp, &format!("{who} to fit the buffer again"));
    let (now, deleting) = claim_names(cp);
    let refilled = now.difference(&before).count();
    disrupted |= deleting;
    // the buffer's nodes hold no real pod but one: consolidation leaves them while it stays
    std::thread::sleep(Duration::from_secs(20));
    let (_, deleting) = claim_names(cp);
    disrupted |= deleting;
    let mut events: Vec<String> = (items(cp, "events").into_iter())
        .filter(|e| e["involvedObject"]["kind"] == "CapacityBuffer")
        .filter(|e| e["involvedObject"]["name"] == "spare")
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect();
    events.sort();
    events.dedup();
    cp.kubectl_ok(
        &["delete", "capacitybuffer", "spare", "-n", "default"],
        None,
    );
    let left_after = wait_for(
        &format!("{who} to consolidate once the buffer is gone"),
        Duration::from_secs(180),
        || {
            let (names, deleting) = claim_names(cp);
            (names.len() == 1 && !deleting).then_some(names.len())
        },
        || cp.kubectl_ok(&["get", "nodeclaims", "-o", "wide"], None),
    );
    cp.kubectl_ok(&["delete", "deployment", "consumer", "-n", "default"], None);
    Buffered {
        status: status_of(&fits),
        nodes: before.len(),
        consumer_on_spare_room: nodes_before.contains(&node),
        refilled,
        disrupted_while_buffered: disrupted,
        left_after,
        events,
    }
}

#[test]
fn karpenter_and_kerf_keep_a_capacity_buffer_alike() {
    let run = super::each_in_turn("buffer", MANIFESTS, &SETTINGS, buffered, clear);
    let (karpenters, kerfs) = (&run.karpenter, &run.kerf);
    eprintln!("Karpenter: {karpenters:?}\nKerf: {kerfs:?}");
    assert!(
        karpenters.consumer_on_spare_room && karpenters.nodes >= 2,
        "Karpenter kept the buffer: {karpenters:?}"
    );
    assert_eq!(kerfs, karpenters);
    // operatorpkg's families of the buffer's conditions, as Karpenter serves them (the
    // buffer is gone by the scrape: its per-object gauges have no sample left)
    for family in [
        "# TYPE operator_capacitybuffer_status_condition_count gauge",
        "operator_capacitybuffer_status_condition_transitions_total{",
    ] {
        assert!(run.kerf_metrics.contains(family), "{family} not served");
    }
}
