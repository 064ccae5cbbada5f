//! `PodDeletionCostManagement` beside Karpenter v1.15.0's kwok provider, on one cluster:
//! Karpenter provisions it and ranks its nodes into their ReplicaSet pods'
//! `controller.kubernetes.io/pod-deletion-cost`; then it stops, the annotations are taken
//! off, and Kerf (as the chart's ServiceAccount, the gate on) ranks the same nodes and pods.
//! Every pod must end with the value Karpenter gave it, or none where Karpenter gave none.
//! (A module of the handover test binary, so that it runs beside it.)

use std::collections::BTreeMap;
use std::time::Duration;

use super::support::{self, ControlPlane, Karpenter, Operator, wait_for};
use super::{OPERATOR, items};

/// The gate, as both read it.
const SETTINGS: [(&str, &str); 1] = [("FEATURE_GATES", "PodDeletionCostManagement=true")];

/// The annotation both write.
const ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// A NodePool whose nodes may all be disrupted (budget 100 %) but not soon (consolidateAfter
/// 1h), four nodes of one pod each, small pods of a higher priority among them (a larger
/// eviction cost where they land), and one pod that may not be disrupted.
const MANIFESTS: &str = r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: ranked-high}
value: 100000000
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: ranked}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      expireAfter: Never
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: kubernetes.io/os, operator: In, values: [linux]}
  disruption:
    consolidateAfter: 1h
    budgets: [{nodes: "100%"}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: spread, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: spread}}
  template:
    metadata: {labels: {app: spread}}
    spec:
      nodeSelector: {karpenter.sh/nodepool: ranked}
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - labelSelector: {matchLabels: {app: spread}}
              topologyKey: kubernetes.io/hostname
      containers: [{name: app, image: pause, resources: {requests: {cpu: "1", memory: 1Gi}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: weighty, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: weighty}}
  template:
    metadata: {labels: {app: weighty}}
    spec:
      priorityClassName: ranked-high
      nodeSelector: {karpenter.sh/nodepool: ranked}
      containers: [{name: app, image: pause, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: held, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: held}}
  template:
    metadata:
      labels: {app: held}
      annotations: {karpenter.sh/do-not-disrupt: "true"}
    spec:
      nodeSelector: {karpenter.sh/nodepool: ranked}
      containers: [{name: app, image: pause, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
"#;

/// Every pod of the default namespace: its node and its pod-deletion-cost, by name.
fn costs(cp: &ControlPlane) -> BTreeMap<String, (String, Option<String>)> {
    (items(cp, "pods").into_iter())
        .filter(|p| p["metadata"]["namespace"] == "default")
        .map(|p| {
            let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
            let node = p["spec"]["nodeName"].as_str().unwrap_or("").to_string();
            let cost = p["metadata"]["annotations"][ANNOTATION]
                .as_str()
                .map(str::to_string);
            (name, (node, cost))
        })
        .collect()
}

/// Waits until someone has written the annotation, then until a read 20 s later is the
/// same (a ranking's writes all go out within its minute): the costs then.
fn ranked(cp: &ControlPlane, who: &str) -> BTreeMap<String, (String, Option<String>)> {
    wait_for(
        &format!("{who}'s first pod-deletion-cost"),
        Duration::from_secs(180),
        || (costs(cp).values().any(|(_, c)| c.is_some())).then_some(()),
        || format!("{:?}", costs(cp)),
    );
    let mut last = costs(cp);
    loop {
        std::thread::sleep(Duration::from_secs(20));
        let now = costs(cp);
        if now == last {
            return now;
        }
        last = now;
    }
}

#[test]
fn karpenter_and_kerf_rank_the_same_nodes_into_the_same_pod_deletion_costs() {
    let cp = ControlPlane::start("deletion-cost");
    cp.install_karpenter_kwok_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(MANIFESTS.as_bytes()));

    let karpenter = Karpenter::start(&cp, 1, &SETTINGS);
    wait_for(
        "every pod running on Karpenter's nodes",
        Duration::from_secs(180),
        || {
            let pods = items(&cp, "pods");
            (pods.len() == 8 && pods.iter().all(|p| p["status"]["phase"] == "Running"))
                .then_some(())
        },
        || format!("{:?}", costs(&cp)),
    );
    // a bare pod pins the first node: Karpenter and Kerf alike leave its pods unranked
    let first = costs(&cp)
        .values()
        .map(|(n, _)| n.clone())
        .min()
        .expect("a node");
    let bare = format!(
        r#"{{"apiVersion": "v1", "kind": "Pod",
            "metadata": {{"name": "bare", "namespace": "default"}},
            "spec": {{"nodeName": "{first}", "containers": [{{"name": "app", "image": "pause"}}]}}}}"#
    );
    cp.kubectl_ok(&["apply", "-f", "-"], Some(bare.as_bytes()));
    let theirs = ranked(&cp, "Karpenter");
    karpenter.stop();

    cp.kubectl_ok(
        &[
            "annotate",
            "pods",
            "--all",
            "-n",
            "default",
            &format!("{ANNOTATION}-"),
        ],
        None,
    );
    let mut env = support::chart_env_with(
        &cp,
        true,
        &["settings.featureGates.podDeletionCostManagement=true"],
    );
    env.extend(SETTINGS.iter().map(|(k, v)| (*k, v.to_string())));
    let kerf = Operator::spawn(&cp, OPERATOR, 1, &["--cloud-provider", "kwok"], &env);
    let ours = ranked(&cp, "Kerf");
    let (_, metrics) = support::http_get(kerf.metrics_port, "/metrics");
    drop(kerf);

    eprintln!("Karpenter: {theirs:#?}\nKerf: {ours:#?}");
    assert_eq!(
        ours, theirs,
        "the same pods' costs, Kerf's left, Karpenter's right"
    );
    // the case the comparison needs: nodes ranked, and nodes left unranked
    let values: Vec<_> = theirs.values().filter_map(|(_, c)| c.clone()).collect();
    assert!(values.iter().any(|c| c == "-1"), "{theirs:?}");
    assert!(theirs["bare"].1.is_none(), "{theirs:?}");
    let written = values.len();
    let updated = format!(
        "karpenter_pod_deletion_cost_pod_annotation_writes_total{{result=\"updated\"}} {written}"
    );
    assert!(
        metrics.lines().any(|l| l == updated),
        "{updated} in {metrics}"
    );
}
