//! The checkers `--check` runs ([`Checkers`]): the invariants, the oracles and the
//! convergence check. They see the cluster only as [`Sight`] shows it: the API server's
//! objects, the cloud's instances, the scenario and the clock. Of Kerf they see two things no
//! object holds: its nominations (kept in memory, as Karpenter keeps them; the binder reads
//! the same), and the convergence check's one hook, [`DisruptionHook`]. They hold no
//! reference to Kerf's controllers, so a checker cannot take its answer from the code it
//! checks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::api_server::{ApiServer, StoredNode, StoredNodeClaim, StoredPod};
use super::workloads::Workloads;
use super::{REGISTRATION_TTL, SimError, allocatable_amounts, faults, owner_workload};
use crate::cloud::Cloud;
use crate::scenario::Scenario;

mod convergence;
pub(super) mod emptiness;
mod hostable;
mod invariants;
mod min_values;
mod oracle;
mod reservations;
mod spot_preference;

pub use invariants::INVARIANTS;

/// The convergence check's hook into Kerf's disruption controller, which it compares with
/// by design: whether a command is under way (no object shows one while it is validated),
/// and what a full pass would decide now. Nothing else of Kerf's controllers reaches the
/// checkers.
pub(super) trait DisruptionHook {
    /// Whether a disruption command is being validated or carried out: the cluster is not
    /// quiet while one is.
    fn command_in_flight(&self) -> bool;
    /// What a full disruption pass over the current state would decide now: the
    /// convergence check's differential question.
    fn fresh_decision(&mut self, now: Duration) -> Option<String>;
}

/// An invariant broken at `now`.
pub(super) fn violation(now: Duration, message: String) -> SimError {
    SimError::Invariant {
        at: crate::clock::rfc3339(now),
        message,
    }
}

/// What the checkers see at one moment: the API server's objects, the cloud, the scenario,
/// the clock, Kerf's nominations and the convergence check's hook.
pub(super) struct Sight<'a> {
    /// Every stored object.
    pub api: &'a ApiServer,
    /// The cloud's instances, zones and catalogs.
    pub cloud: &'a Cloud,
    /// The scenario: its capacity windows, outages and restarts excuse what they hold up.
    pub scenario: &'a Scenario,
    /// The workload controllers' objects (each workload's replicas).
    pub workloads: &'a Workloads,
    /// The simulated time.
    pub now: Duration,
    /// Whether the operator still has writes to try again (a deletion the API server
    /// refused is on its way: Kerf counts it and the stored objects do not show it yet).
    pub writes_pending: bool,
    /// The NodeClaim Kerf nominated each pod to, by pod (`namespace/name`): a pod
    /// nominated to a NodeClaim still on its way is not yet late. Karpenter keeps
    /// nominations in memory; its `Nominated` Events are deduplicated per pod and rate
    /// limited, so the stored Events cannot tell a nomination to a second NodeClaim.
    pub nominations: &'a BTreeMap<String, String>,
    /// The convergence check's hook.
    pub disruption: &'a mut dyn DisruptionHook,
}

impl Sight<'_> {
    /// The end of the API-server outage under way, if one is.
    pub(super) fn api_down(&self) -> Option<Duration> {
        self.scenario.spec.api_server.down_at(self.now)
    }

    /// When the API server last came back from an outage (zero when it never went down):
    /// writes that waited out the outage are due from then. While it is down, now: no write
    /// is overdue while none can be made (swarm seed 400658).
    pub(super) fn api_back(&self) -> Duration {
        if self.api_down().is_some() {
            return self.now;
        }
        (self.scenario.spec.api_server.outages.iter())
            .map(|o| o.until.0)
            .filter(|until| *until <= self.now)
            .max()
            .unwrap_or_default()
    }

    /// An invariant broken now.
    pub(super) fn violation(&self, message: String) -> SimError {
        violation(self.now, message)
    }

    /// A class's instance types as the cloud offers them: the cloud's list when it made one,
    /// else made the same way.
    pub(super) fn catalog(&self, class: &str) -> Arc<Vec<kerf_aws::InstanceType<'static>>> {
        match self.cloud.catalogs.get(class) {
            Some(c) => c.clone(),
            None => Arc::new(self.cloud.types_for(
                &self.scenario.spec.region,
                &super::node_settings(self.api, class),
            )),
        }
    }
}

/// What the checkers see before it is carried out: a write as the API server's validating
/// admission webhook sees it, a launch asked of the cloud, or a disruption command Kerf
/// announces (no object records one; its taints and deletions follow).
pub(super) enum Admission<'a> {
    /// A NodeClaim to be created: its instance types keep its NodePool's minValues.
    CreateNodeClaim(&'a kerf_api::NodeClaim),
    /// A launch asked for this NodeClaim: the API server holds it.
    Launch(&'a str),
    /// An eviction asked of a pod: no PodDisruptionBudget is broken by it.
    Evict(&'a str),
    /// A disruption command starting on these nodes: within their NodePools' budgets.
    Disrupting {
        /// Why the nodes go.
        reason: kerf_api::nodepool::DisruptionReason,
        /// The nodes.
        nodes: &'a [String],
    },
}

/// What the cloud did, shown to the checkers once it is done.
pub(super) enum CloudEvent<'a> {
    /// A launch was tried for this NodeClaim: an instance made, or refused for capacity
    /// (no instance runs for it).
    Launched(&'a str),
}

/// The checkers and their memory.
#[derive(Default)]
pub(super) struct Checkers {
    /// When `--check` last looked for pods waiting too long, and the waiting pods no
    /// NodePool could host then (late ones among them are not solved for again).
    waits_checked: Duration,
    unhostable: BTreeSet<String>,
    /// The waiting pods `unhostable` was last worked out for.
    waiting_seen: Vec<String>,
    /// When `unhostable` was last worked out.
    unhostable_seen_at: Duration,
    /// Waiting pods found hostable again after being unhostable, with when that may have
    /// happened at the earliest: their wait for a node counts from there (swarm seeds 51584,
    /// 140683).
    rehostable: BTreeMap<String, Duration>,
    /// Injected faults, each from its start until the pods it held up could have had a node
    /// (for a launch that never registers, the registration TTL and a second launch later).
    faults: Vec<faults::InjectedFault>,
    /// Nodes that will never report Ready, with their fault in `faults`, which ends when
    /// the node is deleted.
    never_ready: BTreeMap<String, usize>,
    /// When a NodePool or EC2NodeClass was last applied: a pod no NodePool could host may
    /// have become hostable then, and its wait for a node counts from there.
    pools_changed_at: Duration,
    /// When a NodeClaim last went away, giving its NodePool's limits room again: a pod
    /// found unhostable before may have become hostable then.
    room_freed_at: Duration,
    /// The convergence check's quiet, fingerprints and pod events.
    convergence: convergence::Convergence,
    /// The checker's imagined nodes (`world/hostable.rs`), with the generation of NodePools,
    /// classes and DaemonSets they were imagined for, and their NodePools' names.
    imagined: Option<hostable::Kept>,
    /// Bumped whenever a NodePool, class or DaemonSet is applied or deleted.
    imagined_generation: u64,
    /// Nodes whose `karpenter.sh/disrupted` taint was taken off while they stayed (a
    /// disruption given up), how many times and when last: the spot-preference oracle
    /// waits out the documented replacement backoff after each.
    rolled_back: BTreeMap<String, (u32, Duration)>,
}

/// What happens in the world that the checkers must hear of: their memory between steps.
impl Checkers {
    /// Checks a write before it is carried out ([`Admission`]).
    pub(super) fn admit(&mut self, seen: &Sight<'_>, write: Admission<'_>) -> Result<(), SimError> {
        match write {
            Admission::CreateNodeClaim(object) => self.check_min_values(seen, object),
            Admission::Launch(nodeclaim) => {
                if seen.api.nodeclaims.contains_key(nodeclaim) {
                    return Ok(());
                }
                Err(seen.violation(format!(
                    "an instance was launched for nodeclaim {nodeclaim}, which the API server \
                     does not hold"
                )))
            }
            Admission::Evict(pod) => self.check_eviction(seen, pod),
            Admission::Disrupting { reason, nodes } => self.check_budgets(seen, reason, nodes),
        }
    }

    /// Checks what the cloud just did ([`CloudEvent`]).
    pub(super) fn cloud_event(
        &mut self,
        seen: &Sight<'_>,
        event: CloudEvent<'_>,
    ) -> Result<(), SimError> {
        match event {
            CloudEvent::Launched(nodeclaim) => {
                if !(seen.cloud.instances.values()).any(|(c, _)| c == nodeclaim) {
                    self.convergence.refused(seen.now);
                }
                self.check_limits(seen, nodeclaim)?;
                self.check_launch_price(seen, nodeclaim)?;
                self.check_reservations(seen)
            }
        }
    }

    /// Something happened that the controllers must react to: the quiet starts again.
    pub(super) fn disturbed(&mut self, now: Duration) {
        self.convergence.disturbed(now);
    }

    /// The cloud told of an interruption at `now`: it takes the capacity back.
    pub(super) fn interrupted(&mut self, now: Duration) {
        self.convergence.refused(now);
    }

    /// Kerf restarted: what it remembered as unavailable is gone with the old process.
    pub(super) fn restarted(&mut self) {
        self.convergence.forget_refusals();
    }

    /// A NodePool, EC2NodeClass or NodeOverlay was applied: a pod no NodePool could host
    /// may have become hostable.
    pub(super) fn pools_changed(&mut self, now: Duration) {
        self.pools_changed_at = now;
    }

    /// An object the imagined nodes are made from (a NodePool, class or DaemonSet) may have
    /// been applied or deleted.
    pub(super) fn objects_changed(&mut self) {
        self.imagined_generation += 1;
    }

    /// A NodeClaim went away, giving its NodePool's limits room again.
    pub(super) fn room_freed(&mut self, now: Duration) {
        self.room_freed_at = now;
    }

    /// Node `node`'s `karpenter.sh/disrupted` taint was taken off while it stayed.
    pub(super) fn rolled_back(&mut self, node: &str, now: Duration) {
        let e = self.rolled_back.entry(node.to_string()).or_default();
        *e = (e.0 + 1, now);
    }

    /// A fault was injected.
    pub(super) fn fault(&mut self, fault: faults::InjectedFault) {
        self.faults.push(fault);
    }

    /// Node `node` will never report Ready: its fault lasts until the node is deleted.
    pub(super) fn never_ready(&mut self, node: &str, fault: faults::InjectedFault) {
        self.never_ready.insert(node.to_string(), self.faults.len());
        self.faults.push(fault);
    }

    /// Node `node`'s labels were written at `now` (`n` as it is now): a never-Ready node
    /// may hold up the pods its new labels admit.
    pub(super) fn node_relabelled(&mut self, node: &str, n: &StoredNode, now: Duration) {
        if let Some(i) = self.never_ready.get(node) {
            self.faults[*i].relabelled(n, now);
        }
    }

    /// Node `node` was deleted: a never-Ready node's fault ends by `ends_by`, when a
    /// replacement could be up.
    pub(super) fn node_deleted(&mut self, node: &str, ends_by: Duration) {
        if let Some(i) = self.never_ready.remove(node) {
            self.faults[i].until = self.faults[i].until.min(ends_by);
        }
    }

    /// Pod `p` was bound to node `node`: a fault may have sent it there, into another pod's
    /// room.
    pub(super) fn bound(&mut self, p: &StoredPod, node: &str, n: &StoredNode, now: Duration) {
        for fault in &mut self.faults {
            fault.bound(p, node, n, now);
        }
    }

    /// The injected faults, for the tests that plant one.
    #[cfg(test)]
    pub(super) fn faults_mut(&mut self) -> &mut Vec<faults::InjectedFault> {
        &mut self.faults
    }
}

#[cfg(test)]
mod tests {
    /// The checkers' sources, each with its name.
    const SOURCES: [(&str, &str); 9] = [
        ("checkers.rs", include_str!("checkers.rs")),
        ("convergence.rs", include_str!("checkers/convergence.rs")),
        ("emptiness.rs", include_str!("checkers/emptiness.rs")),
        ("hostable.rs", include_str!("checkers/hostable.rs")),
        ("invariants.rs", include_str!("checkers/invariants.rs")),
        ("min_values.rs", include_str!("checkers/min_values.rs")),
        ("oracle.rs", include_str!("checkers/oracle.rs")),
        ("reservations.rs", include_str!("checkers/reservations.rs")),
        (
            "spot_preference.rs",
            include_str!("checkers/spot_preference.rs"),
        ),
    ];

    /// The checkers reach Kerf only through [`super::DisruptionHook`] and the nominations
    /// they are shown, and the world only
    /// through [`super::Sight`]: no checker names Kerf's controllers or the world itself,
    /// so none can take its answer from the code it checks.
    #[test]
    fn no_checker_names_the_controllers_or_the_world() {
        for (file, source) in SOURCES {
            // tests build worlds to check; this one names what it looks for
            let source = source.split("#[cfg(test)]\nmod tests").next();
            for (line, text) in source.unwrap_or_default().lines().enumerate() {
                let code = text.split("//").next().unwrap_or_default();
                for name in ["Controllers", "World", "self.core", "Unfinished"] {
                    assert!(
                        !code.contains(name),
                        "{file}:{}: a checker names {name}: {text}",
                        line + 1
                    );
                }
            }
        }
    }
}
