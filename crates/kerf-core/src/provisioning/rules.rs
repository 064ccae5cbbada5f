//! The provisioner around the scheduler: which pods to provision for, when a batch of them
//! is complete, and the NodeClaim objects a decision turns into.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kerf_api::nodeclaim::ResourceRequirements;
use kerf_api::{NodeClaim, NodeClaimSpec, NodePool, labels};
use kerf_scheduling::PlannedNodeClaim;
use rand::RngExt;

/// Whether the provisioner should find room for a pod: not yet bound, not owned by a
/// DaemonSet, not a static (mirror) pod, not nominated to a node already, not finished, and
/// either marked unschedulable by kube-scheduler or not tried by it yet.
///
/// Karpenter waits for kube-scheduler's mark. Under a burst the mark is what the pods wait
/// on: kube-scheduler tries each pod against every node (and preemption) before it marks
/// it, 10 to 20 pods a second over 1,500 nodes, then tries it again once a node comes. A pod
/// it has not tried is solved for at once, beside the nodes there are (a pod that fits one
/// is nominated there, not given a new node), so its node is up when kube-scheduler first
/// tries it. Only pods kube-scheduler will try count: the default scheduler's, without
/// scheduling gates (another scheduler's pods wait for its mark).
pub fn is_provisionable(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let bound = spec
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let scheduled = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled");
    let unschedulable = scheduled
        .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
    let untried = scheduled.is_none()
        && spec.is_none_or(|s| {
            s.scheduler_name
                .as_deref()
                .is_none_or(|n| n.is_empty() || n == DEFAULT_SCHEDULER)
                && s.scheduling_gates.as_ref().is_none_or(Vec::is_empty)
        });
    let daemon = crate::cluster::owner_of(pod) == crate::cluster::PodOwner::DaemonSet;
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let nominated = status
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let finished = status
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    !bound && (unschedulable || untried) && !daemon && !mirror && !nominated && !finished
}

/// The name kube-scheduler answers to, and a pod without `spec.schedulerName` gets.
const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// When to stop waiting for more pods: `idle` after the last new pod or `max` after the
/// first, whichever comes first (Karpenter: 1 s and 10 s).
#[derive(Clone, Debug)]
pub struct Batcher {
    idle: Duration,
    max: Duration,
    first: Option<Duration>,
    last: Option<Duration>,
}

impl Batcher {
    /// A batcher with the given windows.
    pub fn new(idle: Duration, max: Duration) -> Batcher {
        Batcher {
            idle,
            max,
            first: None,
            last: None,
        }
    }

    /// Notes that a new provisionable pod was seen at `now`.
    pub fn saw_pod(&mut self, now: Duration) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// When the open batch closes, if one is open.
    pub fn closes_at(&self) -> Option<Duration> {
        let (first, last) = (self.first?, self.last?);
        Some((last + self.idle).min(first + self.max))
    }

    /// Whether the batch is complete at `now`; taking it resets the batcher.
    pub fn take_if_ready(&mut self, now: Duration) -> bool {
        match self.closes_at() {
            Some(at) if now >= at => {
                self.first = None;
                self.last = None;
                true
            }
            _ => false,
        }
    }
}

impl Default for Batcher {
    fn default() -> Batcher {
        Batcher::new(Duration::from_secs(1), Duration::from_secs(10))
    }
}

/// The characters Kubernetes uses for generated name suffixes (no vowels, no look-alikes).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `<nodepool>-<5 random chars>`, as Karpenter names NodeClaims.
pub fn nodeclaim_name(node_pool: &str, rng: &mut impl rand::Rng) -> String {
    let suffix: String = (0..5)
        .map(|_| SUFFIX_ALPHABET[rng.random_range(0..SUFFIX_ALPHABET.len())] as char)
        .collect();
    format!("{node_pool}-{suffix}")
}

/// The NodeClaim object for a planned launch: labels and annotations from the NodePool
/// template plus the NodePool label, the narrowed requirements, the summed requests, the
/// template's taints, and an owner reference to the NodePool.
pub fn nodeclaim(plan: &PlannedNodeClaim, np: &NodePool, name: String) -> NodeClaim {
    let np_name = np.metadata.name.clone().unwrap_or_default();
    let mut labels_map: BTreeMap<String, String> = np.spec.template.metadata.labels.clone();
    let mut annotations = np.spec.template.metadata.annotations.clone();
    annotations.insert(
        labels::MIN_VALUES_RELAXED.into(),
        plan.min_values_relaxed.to_string(),
    );
    labels_map.insert(labels::NODEPOOL.to_string(), np_name.clone());
    let template = &np.spec.template.spec;
    // Karpenter's node class label, `<group>/<lowercase kind>`
    let class = &template.node_class_ref;
    labels_map.insert(
        format!("{}/{}", class.group, class.kind.to_lowercase()),
        class.name.clone(),
    );
    let mut claim = NodeClaim::new(
        &name,
        NodeClaimSpec {
            taints: template.taints.clone(),
            startup_taints: template.startup_taints.clone(),
            requirements: plan.requirements.clone(),
            resources: ResourceRequirements {
                requests: plan
                    .requests
                    .to_resource_list()
                    .into_iter()
                    .filter(|(_, q)| q.milli() != 0)
                    .collect(),
            },
            node_class_ref: template.node_class_ref.clone(),
            termination_grace_period: template.termination_grace_period,
            expire_after: template.expire_after,
        },
    );
    claim.metadata = ObjectMeta {
        name: Some(name),
        labels: Some(labels_map),
        annotations: Some(annotations),
        // owned by the NodePool when it is known by uid (the API server refuses a reference
        // without one, so a NodePool read from a file gives none)
        owner_references: np.metadata.uid.clone().map(|uid| {
            vec![OwnerReference {
                api_version: "karpenter.sh/v1".into(),
                kind: "NodePool".into(),
                name: np_name,
                uid,
                block_owner_deletion: Some(true),
                controller: None,
            }]
        }),
        ..ObjectMeta::default()
    };
    claim
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn batches_close_after_idle_or_max() {
        let s = Duration::from_secs;
        let mut b = Batcher::default();
        assert_eq!(b.closes_at(), None);
        b.saw_pod(s(100));
        b.saw_pod(Duration::from_millis(100_500));
        assert_eq!(b.closes_at(), Some(Duration::from_millis(101_500)));
        assert!(!b.take_if_ready(s(101)));
        // a steady trickle keeps the idle window open, but never past max
        for t in 101..=115 {
            b.saw_pod(s(t));
        }
        assert_eq!(b.closes_at(), Some(s(110)));
        assert!(b.take_if_ready(s(110)));
        assert_eq!(b.closes_at(), None);
    }

    #[test]
    fn names_are_nodepool_and_five_generated_chars() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let name = nodeclaim_name("default", &mut rng);
        let suffix = name.strip_prefix("default-").unwrap();
        assert_eq!(suffix.len(), 5);
        assert!(suffix.bytes().all(|c| SUFFIX_ALPHABET.contains(&c)));
        let mut again = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        assert_eq!(nodeclaim_name("default", &mut again), name);
    }

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn only_unbound_ordinary_pods_kube_scheduler_failed_or_has_not_tried_are_provisioned() {
        let unschedulable = serde_json::json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
        let base = serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": []}, "status": unschedulable});
        assert!(is_provisionable(&pod(base.clone())));
        let mut bound = base.clone();
        bound["spec"]["nodeName"] = "n1".into();
        assert!(!is_provisionable(&pod(bound)));
        let mut ds = base.clone();
        ds["metadata"]["ownerReferences"] = serde_json::json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]);
        assert!(!is_provisionable(&pod(ds)));
        let mut nominated = base.clone();
        nominated["status"]["nominatedNodeName"] = "n2".into();
        assert!(!is_provisionable(&pod(nominated)));
        // not tried by kube-scheduler yet: its node can be on the way before it is
        let fresh = serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        assert!(is_provisionable(&pod(fresh.clone())));
        let mut named = fresh.clone();
        named["spec"]["schedulerName"] = "default-scheduler".into();
        assert!(is_provisionable(&pod(named)));
        // another scheduler's pod waits for that scheduler's mark; a gated pod for its gates
        let mut other = fresh.clone();
        other["spec"]["schedulerName"] = "volcano".into();
        assert!(!is_provisionable(&pod(other.clone())));
        other["status"] = unschedulable.clone();
        assert!(is_provisionable(&pod(other)));
        let mut gated = fresh.clone();
        gated["spec"]["schedulingGates"] = serde_json::json!([{"name": "example.com/quota"}]);
        assert!(!is_provisionable(&pod(gated)));
        let gated_marked = serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [], "schedulingGates": [{"name": "example.com/quota"}]},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}});
        assert!(!is_provisionable(&pod(gated_marked)));
        // tried and bound a moment ago, or tried and waiting on preemption: not again
        let scheduled = serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": []},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}});
        assert!(!is_provisionable(&pod(scheduled)));
    }
}
