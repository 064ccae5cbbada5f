//! What keeps a node from being disrupted, worked out in one place: the disruption pass
//! leaves a node with a blocker out of its candidates, and `kerf explain node` and the
//! `DisruptionBlocked` events tell the same blockers, so the two cannot disagree.

use std::collections::BTreeSet;
use std::time::Duration;

use kerf_api::labels;
use kerf_api::nodepool::DisruptionReason;
use kerf_scheduling::resources::Resources;
use rustc_hash::FxHashMap;

use super::Controllers;
use super::desk::Desk;
use super::disruption::{Disruptions, PdbAllowances};
use crate::cluster::{PodOwner, PodRecord};
use crate::disruption::rules::{DoNotDisrupt, do_not_disrupt};

/// One reason a node may not be disrupted now, in the node's own state or its pods
/// (Karpenter's candidate checks). The budgets and the consolidation policy, which depend
/// on the disruption reason, are not blockers of the node itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocker {
    /// The node has no NodeClaim: Kerf did not launch it.
    NotManaged,
    /// Node repair is rebooting the node (draining it for the reboot, or waiting for it to
    /// come back): no other method takes it meanwhile.
    Rebooting,
    /// The NodeClaim's NodePool does not exist (any more).
    NodePoolNotFound(String),
    /// The NodeClaim is not initialized yet.
    NotInitialized,
    /// The NodeClaim is being deleted.
    Deleting,
    /// A pending pod was promised this node.
    Nominated,
    /// The node carries `karpenter.sh/do-not-disrupt`.
    NodeDoNotDisrupt,
    /// The node is a candidate of the command under way.
    BeingDisrupted(DisruptionReason),
    /// A pod on the node carries `karpenter.sh/do-not-disrupt`, for good or `until` then.
    PodDoNotDisrupt {
        /// `namespace/name`.
        pod: String,
        /// When a duration-valued annotation runs out.
        until: Option<Duration>,
    },
    /// PodDisruptionBudgets that allow no more evictions select a pod on the node.
    Pdb {
        /// `namespace/name` of the pod.
        pod: String,
        /// `namespace/name` of each budget that blocks it.
        budgets: Vec<String>,
    },
    /// More than one PodDisruptionBudget selects a pod on the node: the eviction API takes
    /// no such pod.
    PdbMultiple {
        /// `namespace/name` of the pod.
        pod: String,
        /// `namespace/name` of each budget that selects it.
        budgets: Vec<String>,
    },
}

impl Blocker {
    /// A stable name for programs: `do-not-disrupt`, `pdb`, `nominated`, …
    pub fn kind(&self) -> &'static str {
        match self {
            Blocker::NotManaged => "not-managed",
            Blocker::Rebooting => "rebooting",
            Blocker::NodePoolNotFound(_) => "nodepool-not-found",
            Blocker::NotInitialized => "not-initialized",
            Blocker::Deleting => "deleting",
            Blocker::Nominated => "nominated",
            Blocker::NodeDoNotDisrupt | Blocker::PodDoNotDisrupt { .. } => "do-not-disrupt",
            Blocker::BeingDisrupted(_) => "being-disrupted",
            Blocker::Pdb { .. } | Blocker::PdbMultiple { .. } => "pdb",
        }
    }

    /// What it means, in Karpenter's words; `relative` says an instant next to now.
    pub fn message(&self, relative: impl Fn(Duration) -> String) -> String {
        match self {
            Blocker::NotManaged => "node isn't managed by karpenter".into(),
            Blocker::Rebooting => "node is rebooting".into(),
            Blocker::NodePoolNotFound(pool) => format!("NodePool not found (NodePool={pool})"),
            Blocker::NotInitialized => "node isn't initialized".into(),
            Blocker::Deleting => "node is deleting or marked for deletion".into(),
            Blocker::Nominated => "node is nominated for a pending pod".into(),
            Blocker::NodeDoNotDisrupt => format!(
                "disruption is blocked through the {:?} annotation",
                labels::DO_NOT_DISRUPT
            ),
            Blocker::BeingDisrupted(reason) => {
                format!("candidate is already being disrupted ({})", reason.as_str())
            }
            Blocker::PodDoNotDisrupt { pod, until } => {
                let tail = until
                    .map(|end| format!(" until {}", relative(end)))
                    .unwrap_or_default();
                format!(
                    "pod has {:?} annotation (Pod={pod}){tail}",
                    labels::DO_NOT_DISRUPT
                )
            }
            Blocker::Pdb { pod, budgets } => format!(
                "pdb prevents pod evictions (Pod={pod}, PodDisruptionBudget=[{}])",
                budgets.join(", ")
            ),
            Blocker::PdbMultiple { pod, budgets } => format!(
                "eviction does not support multiple PDBs (Pod={pod}, PodDisruptionBudget(s)=[{}])",
                budgets.join(", ")
            ),
        }
    }
}

/// What the blocker checks of many nodes read, gathered once per pass or answer.
pub(super) struct Gathered<'a> {
    /// Each node's pods, daemon pods left out (they go with their node: no candidate's
    /// replacement makes room for them).
    pub(super) pods_by_node: FxHashMap<&'a str, Vec<(&'a String, &'a PodRecord)>>,
    /// Each node's daemon pods: their do-not-disrupt and budgets hold the node as a
    /// workload pod's do (Karpenter reads every pod on a candidate).
    daemon_pods_by_node: FxHashMap<&'a str, Vec<(&'a String, &'a PodRecord)>>,
    /// NodeClaims a pending pod was promised.
    pub(super) nominated: BTreeSet<&'a str>,
    /// The least cpu and the least memory (each over all of them) of the pods kube-scheduler
    /// has yet to place that the provisioner placed or has yet to solve for, with one pod
    /// slot: an initialized node with that much room is kept as nominated (see
    /// [`has_room_for_waiting_pods`]).
    waiting_least: Option<Resources>,
    /// What each PodDisruptionBudget still allows.
    pub(super) pdbs: PdbAllowances,
}

/// How many blockers a caller wants.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Wanted {
    /// Whether there is any: the disruption pass.
    First,
    /// Every one: `kerf explain`.
    All,
}

impl Disruptions {
    /// What keeps the node `name` from being disrupted now, in Karpenter's order: its own
    /// state, then each pod's annotation and budgets.
    pub(super) fn blockers(
        &self,
        desk: &Desk,
        name: &str,
        g: &Gathered<'_>,
        wanted: Wanted,
        now: Duration,
    ) -> Vec<Blocker> {
        let mut out = Vec::new();
        let Some(record) = desk.cluster.nodes.get(name) else {
            return out;
        };
        let claim_name = record.nodeclaim.as_deref();
        let Some(claim) = claim_name.and_then(|c| desk.cluster.nodeclaims.get(c)) else {
            out.push(Blocker::NotManaged);
            return out;
        };
        let in_command = (self.commands())
            .find(|c| c.candidates.iter().any(|n| n == name))
            .map(|c| c.reason);
        let rebooting = claim.reboot.as_ref().is_some_and(|r| r.under_way());
        let own = [
            rebooting.then_some(Blocker::Rebooting),
            (!desk.cluster.node_pools.contains_key(&claim.node_pool))
                .then(|| Blocker::NodePoolNotFound(claim.node_pool.clone())),
            (!claim.initialized).then_some(Blocker::NotInitialized),
            claim.deleting.is_some().then_some(Blocker::Deleting),
            (g.nominated.contains(claim_name.unwrap_or_default())
                || claim.initialized && has_room_for_waiting_pods(record, g))
            .then_some(Blocker::Nominated),
            record.do_not_disrupt.then_some(Blocker::NodeDoNotDisrupt),
            in_command.map(Blocker::BeingDisrupted),
        ];
        for b in own.into_iter().flatten() {
            out.push(b);
            if wanted == Wanted::First {
                return out;
            }
        }
        let daemons = g.daemon_pods_by_node.get(name).into_iter().flatten();
        for (key, p) in g
            .pods_by_node
            .get(name)
            .into_iter()
            .flatten()
            .chain(daemons)
        {
            let until = match do_not_disrupt(&p.shape, p.started) {
                DoNotDisrupt::Always => Some(None),
                DoNotDisrupt::Until(end) if now < end => Some(Some(end)),
                _ => None,
            };
            if let Some(until) = until {
                out.push(Blocker::PodDoNotDisrupt {
                    pod: (*key).clone(),
                    until,
                });
                if wanted == Wanted::First {
                    return out;
                }
            }
            // a daemon pod that tolerates the disrupted taint stays to the end and holds by
            // no budget (Karpenter evicts no pod that tolerates it)
            if p.owner == PodOwner::DaemonSet && tolerates_disrupted(&p.shape) {
                continue;
            }
            // the eviction API refuses a pod more than one budget selects, whatever they allow
            let selecting = g.pdbs.selecting(&desk.cluster, &p.shape);
            if selecting.len() > 1 {
                out.push(Blocker::PdbMultiple {
                    pod: (*key).clone(),
                    budgets: selecting.into_iter().cloned().collect(),
                });
                if wanted == Wanted::First {
                    return out;
                }
                continue;
            }
            let budgets = g.pdbs.blocking(&desk.cluster, &p.shape);
            if !budgets.is_empty() {
                out.push(Blocker::Pdb {
                    pod: (*key).clone(),
                    budgets: budgets.into_iter().cloned().collect(),
                });
                if wanted == Wanted::First {
                    return out;
                }
            }
        }
        out
    }
}

impl Controllers {
    /// What the blocker checks read, from the cluster as it is now.
    pub(super) fn gather(&self) -> Gathered<'_> {
        let mut pods_by_node: FxHashMap<&str, Vec<(&String, &PodRecord)>> = FxHashMap::default();
        let mut daemon_pods_by_node: FxHashMap<&str, Vec<(&String, &PodRecord)>> =
            FxHashMap::default();
        let mut nominated = BTreeSet::new();
        let mut waiting_least: Option<Resources> = None;
        let left = &self.provisioning.left_pending;
        for (k, p) in &self.desk.cluster.pods {
            if let Some(n) = &p.node {
                let by_node = match p.owner {
                    PodOwner::DaemonSet => &mut daemon_pods_by_node,
                    _ => &mut pods_by_node,
                };
                by_node.entry(n.as_str()).or_default().push((k, p));
            }
            if let Some(claim) = &p.nominated {
                nominated.insert(claim.as_str());
            }
            let waiting = p.node.is_none()
                && (p.nominated.is_some() || p.wants_capacity() && !left.contains(k));
            if waiting {
                let least = waiting_least.get_or_insert_with(|| Resources {
                    cpu_millis: i64::MAX,
                    memory_bytes: i64::MAX,
                    pods: 1,
                    ..Resources::default()
                });
                least.cpu_millis = least.cpu_millis.min(p.requests.cpu_millis);
                least.memory_bytes = least.memory_bytes.min(p.requests.memory_bytes);
            }
        }
        Gathered {
            pods_by_node,
            daemon_pods_by_node,
            nominated,
            waiting_least,
            pdbs: PdbAllowances::new(&self.desk.cluster, &self.termination.evicting),
        }
    }
}

/// Whether a pod tolerates `karpenter.sh/disrupted:NoSchedule`.
pub(super) fn tolerates_disrupted(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    let taint = crate::cluster::disrupted_taint();
    (pod.spec.as_ref().and_then(|s| s.tolerations.as_ref()))
        .into_iter()
        .flatten()
        .any(|t| kerf_scheduling::taints::tolerates(t, &taint))
}

/// Whether a node has room for the least of the pods still waiting for kube-scheduler, so
/// kube-scheduler may yet place one there. Karpenter's provisioner simulates every pending pod
/// on the nodes there are at each pass and nominates each node it places one on, which keeps
/// that node from disruption; Kerf keeps each pod's nomination to the NodeClaim it was
/// planned for, and kube-scheduler binds pods elsewhere, so in a burst a node whose own pods
/// went to others sits empty while pods still come. Room for the least cpu and the least
/// memory (each over the waiting pods, so as much as any one of them needs or less) keeps it.
fn has_room_for_waiting_pods(record: &crate::cluster::NodeRecord, g: &Gathered<'_>) -> bool {
    g.waiting_least
        .as_ref()
        .is_some_and(|least| least.fits(&record.allocatable.saturating_sub(&record.requests)))
}
