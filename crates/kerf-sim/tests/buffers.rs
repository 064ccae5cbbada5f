//! CapacityBuffers in the simulator: the room a buffer keeps is there before any pod asks for
//! it, survives a restart of Kerf, and the pods that come take it at once.

use kerf_sim::{Report, RunOptions};

const SCALE_UP: &str =
    "{at: 20m, scale: {kind: Deployment, name: app, namespace: default, replicas: 4}}";

fn run(gates: &str) -> Report {
    run_with(gates, &[SCALE_UP])
}

fn run_with(gates: &str, events: &[&str]) -> Report {
    let events = events.join(", ");
    let yaml = format!(
        r#"
apiVersion: kerf.sh/v1alpha1
kind: Scenario
metadata: {{name: buffer}}
spec:
  duration: 40m
  featureGates: {gates}
  operatorRestarts: [15m]
  manifests:
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata: {{name: default}}
    spec:
      role: R
      amiSelectorTerms: [{{alias: al2023@latest}}]
      subnetSelectorTerms: [{{tags: {{k: v}}}}]
      securityGroupSelectorTerms: [{{tags: {{k: v}}}}]
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {{name: default}}
    spec:
      disruption: {{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 1m}}
      template:
        spec:
          nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
          requirements:
          - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
          - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}}
          - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: app, namespace: default}}
    spec:
      replicas: 0
      selector: {{matchLabels: {{app: app}}}}
      template:
        metadata:
          labels: {{app: app}}
        spec:
          containers: [{{name: c, image: x, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]
  - apiVersion: autoscaling.x-k8s.io/v1beta1
    kind: CapacityBuffer
    metadata: {{name: headroom, namespace: default}}
    spec:
      scalableRef: {{apiGroup: apps, kind: Deployment, name: app}}
      replicas: 4
  events: [{events}]
"#
    );
    let scenario = kerf_sim::scenario::parse(&yaml, None).expect("scenario parses");
    kerf_sim::run(scenario, RunOptions::checked(), &mut |_, _, _| {})
        .expect("runs with invariants held")
}

/// The most nodes at any sample before minute `m`.
fn nodes_before(r: &Report, m: f64) -> usize {
    (r.timeline.iter())
        .filter(|s| s.t < m * 60.0)
        .map(|s| s.nodes)
        .max()
        .unwrap_or(0)
}

/// How long the app's pods waited, longest first, in seconds.
fn waits(r: &Report) -> Vec<f64> {
    (r.longest_waits.iter())
        .filter(|w| w.pod.starts_with("default/app-"))
        .map(|w| w.until - w.since)
        .collect()
}

#[test]
fn a_buffer_keeps_room_that_its_workloads_pods_take_at_once() {
    let r = run("{CapacityBuffer: true}");
    // room for four one-cpu pods, made with no pod asking, and kept past consolidateAfter
    // and across Kerf's restart at 15m (which lists the buffer again)
    assert!(nodes_before(&r, 20.0) >= 1, "{:?}", r.timeline);
    let kept = (r.timeline.iter()).filter(|s| s.t > 10.0 * 60.0 && s.t < 20.0 * 60.0);
    assert!(kept.clone().all(|s| s.nodes >= 1), "{:?}", r.timeline);
    let waited = waits(&r);
    assert!(waited.iter().all(|w| *w < 5.0), "{waited:?}");
    assert!(r.end.pending_pods.is_empty(), "{:?}", r.end.pending_pods);

    // without the gate nothing is kept, and the pods wait for a launch
    let r = run("{}");
    assert_eq!(nodes_before(&r, 20.0), 0, "{:?}", r.timeline);
    let waited = waits(&r);
    assert!(waited.iter().any(|w| *w >= 5.0), "{waited:?}");
}

#[test]
fn a_buffer_whose_workload_is_deleted_keeps_no_room() {
    let delete = "{at: 25m, delete: {kind: Deployment, name: app, namespace: default}}";
    let r = run_with("{CapacityBuffer: true}", &[SCALE_UP, delete]);
    assert!(nodes_before(&r, 20.0) >= 1, "{:?}", r.timeline);
    // its scalableRef names nothing now: no room is kept, the nodes go
    assert!(r.end.nodes.is_empty(), "{:?}", r.end.nodes);
}

#[test]
fn a_buffer_that_does_not_read_is_named_by_its_field_path() {
    let yaml = r#"
apiVersion: kerf.sh/v1alpha1
kind: Scenario
metadata: {name: bad}
spec:
  duration: 10m
  featureGates: {CapacityBuffer: true}
  manifests:
  - apiVersion: autoscaling.x-k8s.io/v1beta1
    kind: CapacityBuffer
    metadata: {name: b, namespace: default}
    spec: {replicas: "three", podTemplateRef: {name: t}}
"#;
    let scenario = kerf_sim::scenario::parse(yaml, None).expect("scenario parses");
    let error = kerf_sim::run(scenario, RunOptions::checked(), &mut |_, _, _| {})
        .expect_err("refused")
        .to_string();
    assert!(error.contains("spec.manifests[0].spec.replicas"), "{error}");
}
