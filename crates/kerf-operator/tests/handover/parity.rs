//! Karpenter v1.15.0 (its kwok provider) and Kerf given the same v1.15 manifests on one real
//! control plane, one after the other, decide the same for a pod whose pod-level resources
//! are all it asks, a static NodePool's replicas, minValues relaxed under
//! `MIN_VALUES_POLICY=BestEffort` and a pod whose bound volume lives in one zone; they replace
//! an on-demand node with the same spot node once its NodePool allows spot too (the
//! replacement pinned to spot, its instance types narrowed by price alike); and for a
//! NodePool's `limits.nodes`, where Kerf holds the limit within a batch and Karpenter does not,
//! each does what it does.
//! Each case has a NodePool of its own and its pods select it, so one run of each
//! autoscaler covers them all. (A module of the handover test binary, so that the two run
//! side by side.)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::support::{self, ControlPlane, Karpenter, Operator, wait_for};
use serde_json::Value;

use super::OPERATOR;

/// The settings both run with.
const SETTINGS: [(&str, &str); 2] = [
    ("FEATURE_GATES", "StaticCapacity=true"),
    ("MIN_VALUES_POLICY", "BestEffort"),
];

/// A NodePool `name` on Karpenter kwok's node class, on-demand linux, with extra spec lines
/// (under `spec:`) and requirement lines.
fn pool(name: &str, spec: &str, requirements: &str) -> String {
    format!(
        r#"
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
{spec}
  template:
    spec:
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
      expireAfter: Never
      requirements:
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
        - {{key: kubernetes.io/os, operator: In, values: [linux]}}
{requirements}
  disruption: {{consolidateAfter: 1h}}
"#
    )
}

/// Every case's objects.
fn manifests() -> String {
    let mut out = String::from(
        "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: default}\n",
    );
    // limits.nodes: six pods that each need a node, two nodes allowed
    out += &pool("limits", "  limits: {nodes: 2}", "");
    out += r#"
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: limits, namespace: default}
spec:
  replicas: 6
  selector: {matchLabels: {app: limits}}
  template:
    metadata: {labels: {app: limits}}
    spec:
      nodeSelector: {karpenter.sh/nodepool: limits}
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - {labelSelector: {matchLabels: {app: limits}}, topologyKey: kubernetes.io/hostname}
      containers: [{name: app, image: pause, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"#;
    // pod-level resources: 6 cpu / 12Gi for the pod, nothing for its containers
    out += &pool("podlevel", "", "");
    out += r#"
---
apiVersion: v1
kind: Pod
metadata: {name: podlevel, namespace: default}
spec:
  nodeSelector: {karpenter.sh/nodepool: podlevel}
  resources: {requests: {cpu: "6", memory: 12Gi}, limits: {cpu: "6", memory: 12Gi}}
  containers: [{name: app, image: pause}]
"#;
    // a static NodePool: two nodes, no pods (one instance type: Karpenter's kwok provider
    // cannot launch a static NodeClaim whose requirements leave the type open)
    out += &pool(
        "static",
        "  replicas: 2",
        "        - {key: node.kubernetes.io/instance-type, operator: In, values: [c-2x-amd64-linux]}\n",
    );
    // minValues no instance type list can meet, relaxed under BestEffort
    out += &pool(
        "minvalues",
        "",
        "        - {key: karpenter.kwok.sh/instance-family, operator: Exists, minValues: 50}\n",
    );
    out += r#"
---
apiVersion: v1
kind: Pod
metadata: {name: minvalues, namespace: default}
spec:
  nodeSelector: {karpenter.sh/nodepool: minvalues}
  containers: [{name: app, image: pause, resources: {requests: {cpu: "1"}}}]
"#;
    // a claim bound to a volume in test-zone-c
    out += &pool("volume", "", "");
    out += r#"
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: parity-data}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  claimRef: {namespace: default, name: parity-data}
  csi: {driver: ebs.csi.aws.com, volumeHandle: vol-parity}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: topology.kubernetes.io/zone, operator: In, values: [test-zone-c]}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: parity-data, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: parity-data
  resources: {requests: {storage: 10Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: volume, namespace: default}
spec:
  nodeSelector: {karpenter.sh/nodepool: volume}
  containers: [{name: app, image: pause, resources: {requests: {cpu: "1"}}}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: parity-data}}]
"#;
    // an on-demand node whose NodePool will allow spot too: consolidated at once
    out += &pool("pin", "", "").replace(
        "consolidateAfter: 1h",
        "consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s",
    );
    out += r#"
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: pin, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: pin}}
  template:
    metadata: {labels: {app: pin}}
    spec:
      nodeSelector: {karpenter.sh/nodepool: pin}
      containers: [{name: app, image: pause, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"#;
    out
}

fn items(cp: &ControlPlane, kind: &str) -> Vec<Value> {
    let out = cp.kubectl_ok(&["get", kind, "-A", "-o", "json"], None);
    let list: Value = serde_json::from_str(&out).expect("a JSON list");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// What an autoscaler decided, case by case.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// NodeClaims by NodePool.
    claims: BTreeMap<String, usize>,
    /// Pods without a node, by NodePool they select.
    pending: BTreeMap<String, usize>,
    /// The pod-level pod's NodeClaim's cpu and memory requests.
    podlevel_requests: (String, String),
    /// Whether the minvalues NodeClaim says its minValues were relaxed.
    minvalues_relaxed: Option<String>,
    /// The zone the volume's pod's NodeClaim was launched in.
    volume_zone: Option<String>,
}

fn outcome(cp: &ControlPlane) -> Outcome {
    let claims_list = items(cp, "nodeclaims.karpenter.sh");
    let pool_of = |c: &Value| {
        c["metadata"]["labels"]["karpenter.sh/nodepool"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let mut claims = BTreeMap::new();
    for c in &claims_list {
        *claims.entry(pool_of(c)).or_insert(0) += 1;
    }
    let mut pending = BTreeMap::new();
    for p in items(cp, "pods") {
        if p["metadata"]["namespace"] == "default" && p["spec"]["nodeName"].is_null() {
            let pool = p["spec"]["nodeSelector"]["karpenter.sh/nodepool"]
                .as_str()
                .unwrap_or("")
                .to_string();
            *pending.entry(pool).or_insert(0) += 1;
        }
    }
    let of = |pool: &str| claims_list.iter().find(|c| pool_of(c) == pool);
    let podlevel_requests = of("podlevel").map_or_else(Default::default, |c| {
        let r = &c["spec"]["resources"]["requests"];
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        (s(&r["cpu"]), s(&r["memory"]))
    });
    let minvalues_relaxed = of("minvalues").and_then(|c| {
        c["metadata"]["annotations"]["karpenter.sh/nodeclaim-min-values-relaxed"]
            .as_str()
            .map(str::to_string)
    });
    let volume_zone = of("volume").and_then(|c| {
        c["metadata"]["labels"]["topology.kubernetes.io/zone"]
            .as_str()
            .map(str::to_string)
    });
    Outcome {
        claims,
        pending,
        podlevel_requests,
        minvalues_relaxed,
        volume_zone,
    }
}

/// Waits until every case has its NodeClaims and they have not changed for 15 s.
fn settled(cp: &ControlPlane, who: &str) -> Outcome {
    let want = [
        ("limits", 2),
        ("podlevel", 1),
        ("static", 2),
        ("minvalues", 1),
        ("volume", 1),
        ("pin", 1),
    ];
    let mut last: Option<(Outcome, Instant)> = None;
    wait_for(
        &format!("{who}'s NodeClaims for every case, unchanged for 15 s"),
        Duration::from_secs(180),
        || {
            let now = outcome(cp);
            let complete = want
                .iter()
                .all(|(p, n)| now.claims.get(*p).copied().unwrap_or(0) >= *n);
            match &last {
                Some((before, since)) if *before == now => {
                    (complete && since.elapsed() > Duration::from_secs(15)).then(|| outcome(cp))
                }
                _ => {
                    last = Some((now, Instant::now()));
                    None
                }
            }
        },
        || format!("{:?}", outcome(cp)),
    )
}

/// The pin case's replacement: what it must launch as and may launch as, and what it is.
#[derive(Debug, PartialEq)]
struct Pinned {
    /// The values of its `karpenter.sh/capacity-type` requirement.
    capacity_types: Vec<String>,
    /// The values of its `node.kubernetes.io/instance-type` requirement, sorted.
    instance_types: Vec<String>,
    /// Its `karpenter.sh/capacity-type` label.
    launched_as: String,
    /// Its `node.kubernetes.io/instance-type` label.
    instance_type: String,
}

/// The pin NodePool is let allow spot too; waits for its on-demand NodeClaim to be replaced
/// and gone, and reads the replacement.
fn pinned(cp: &ControlPlane, who: &str) -> Pinned {
    let pin = |c: &&Value| c["metadata"]["labels"]["karpenter.sh/nodepool"] == "pin";
    let claims = items(cp, "nodeclaims.karpenter.sh");
    let first = claims.iter().find(pin).expect("the pin NodeClaim");
    let label = |c: &Value, key: &str| {
        c["metadata"]["labels"][key]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(
        label(first, "karpenter.sh/capacity-type"),
        "on-demand",
        "{who}"
    );
    let first = first["metadata"]["name"].as_str().unwrap_or("").to_string();
    cp.kubectl_ok(
        &[
            "patch",
            "nodepools.karpenter.sh",
            "pin",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/template/spec/requirements/0/values","value":["on-demand","spot"]}]"#,
        ],
        None,
    );
    let values = |c: &Value, key: &str| -> Vec<String> {
        let requirements = c["spec"]["requirements"].as_array().cloned();
        let r = requirements
            .unwrap_or_default()
            .into_iter()
            .find(|r| r["key"] == key);
        let mut v: Vec<String> = r
            .and_then(|r| r["values"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        v.sort();
        v
    };
    wait_for(
        &format!("{who} to replace the pin NodePool's on-demand node with one launched"),
        Duration::from_secs(240),
        || {
            let claims = items(cp, "nodeclaims.karpenter.sh");
            let pins: Vec<&Value> = claims.iter().filter(pin).collect();
            let [only] = pins[..] else {
                return None;
            };
            let launched = !label(only, "node.kubernetes.io/instance-type").is_empty();
            (only["metadata"]["name"] != first.as_str() && launched).then(|| Pinned {
                capacity_types: values(only, "karpenter.sh/capacity-type"),
                instance_types: values(only, "node.kubernetes.io/instance-type"),
                launched_as: label(only, "karpenter.sh/capacity-type"),
                instance_type: label(only, "node.kubernetes.io/instance-type"),
            })
        },
        || format!("{:?}", items(cp, "nodeclaims.karpenter.sh")),
    )
}

/// Deletes every NodeClaim and Node, their finalizers stripped (the autoscaler that made
/// them is stopped).
pub(super) fn remove_nodes(cp: &ControlPlane) {
    for kind in ["nodeclaims.karpenter.sh", "nodes"] {
        for o in items(cp, kind) {
            let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
            let _ = cp.kubectl(
                &[
                    "patch",
                    kind,
                    &name,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ],
                None,
            );
            let _ = cp.kubectl(&["delete", kind, &name, "--wait=false"], None);
        }
    }
}

/// [`remove_nodes`], then waits until no NodeClaim or Node is left.
pub(super) fn remove_nodes_and_wait(cp: &ControlPlane) {
    remove_nodes(cp);
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

/// Takes away what an autoscaler made (finalizers stripped: it is stopped), and the bare
/// pods, so that the other starts from the same objects.
fn clear(cp: &ControlPlane) {
    remove_nodes(cp);
    cp.kubectl_ok(
        &[
            "delete",
            "pods",
            "--all",
            "-n",
            "default",
            "--force",
            "--wait=false",
        ],
        None,
    );
    wait_for(
        "no NodeClaim, Node or pod left bound",
        Duration::from_secs(60),
        || {
            let left = items(cp, "nodeclaims.karpenter.sh").len()
                + items(cp, "nodes").len()
                + (items(cp, "pods").iter())
                    .filter(|p| p["metadata"]["namespace"] == "default")
                    .filter(|p| !p["spec"]["nodeName"].is_null())
                    .count();
            (left == 0).then_some(())
        },
        || "objects left".into(),
    );
    cp.kubectl_ok(&["apply", "-f", "-"], Some(manifests().as_bytes()));
}

#[test]
fn karpenter_and_kerf_decide_alike_on_v1_15_provisioning() {
    let cp = ControlPlane::start("parity");
    cp.install_karpenter_kwok_crds();
    cp.kubectl_ok(&["apply", "-f", "-"], Some(manifests().as_bytes()));

    let karpenter = Karpenter::start(&cp, 1, &SETTINGS);
    let karpenters = settled(&cp, "Karpenter");
    let karpenter_pinned = pinned(&cp, "Karpenter");
    karpenter.stop();
    clear(&cp);

    let env: Vec<(&str, String)> = SETTINGS.iter().map(|(k, v)| (*k, v.to_string())).collect();
    let mut all_env = support::chart_env(&cp, true);
    all_env.extend(env);
    let kerf = Operator::spawn(&cp, OPERATOR, 1, &["--cloud-provider", "kwok"], &all_env);
    let kerfs = settled(&cp, "Kerf");
    let kerf_pinned = pinned(&cp, "Kerf");
    drop(kerf);

    // what each case is about, stated outright, then the two side by side
    eprintln!("Karpenter: {karpenters:?}\nKerf: {kerfs:?}");
    eprintln!("Karpenter's pin: {karpenter_pinned:?}\nKerf's pin: {kerf_pinned:?}");
    // an on-demand node's replacement that may be spot or on-demand is pinned to spot, so
    // that a spot shortage fails its launch rather than buying on-demand
    assert_eq!(karpenter_pinned.capacity_types, ["spot"]);
    assert_eq!(karpenter_pinned.launched_as, "spot");
    assert_eq!(kerf_pinned, karpenter_pinned);
    assert_eq!(karpenters.claims.get("static"), Some(&2), "{karpenters:?}");
    assert_eq!(karpenters.volume_zone.as_deref(), Some("test-zone-c"));
    assert_eq!(karpenters.minvalues_relaxed.as_deref(), Some("true"));
    assert_eq!(karpenters.podlevel_requests.0, "6", "{karpenters:?}");
    // limits.nodes: Kerf holds it within one batch of pods; Karpenter v1.15 counts a node
    // against it only once the node exists (an instance type's capacity has no `nodes`), so
    // six pods arriving together get six NodeClaims
    assert_eq!(kerfs.claims.get("limits"), Some(&2), "{kerfs:?}");
    assert_eq!(kerfs.pending.get("limits"), Some(&4), "{kerfs:?}");
    assert_eq!(karpenters.claims.get("limits"), Some(&6), "{karpenters:?}");
    let without_limits = |o: &Outcome| {
        let mut claims = o.claims.clone();
        claims.remove("limits");
        let mut pending = o.pending.clone();
        pending.remove("limits");
        (
            claims,
            pending,
            o.podlevel_requests.clone(),
            o.minvalues_relaxed.clone(),
            o.volume_zone.clone(),
        )
    };
    assert_eq!(without_limits(&kerfs), without_limits(&karpenters));
}
