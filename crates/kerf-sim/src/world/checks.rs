//! What the checkers (`--check`: the invariants, the oracles, convergence) remember between
//! steps. They read the API server and the cloud, never Kerf's controllers but through the
//! named hooks (convergence's, and the nominations of [`super::binder::Nominations`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::{convergence, faults, hostable};

/// The checkers' memory.
#[derive(Default)]
pub(super) struct Checks {
    /// When `--check` last looked for pods waiting too long, and the waiting pods no
    /// NodePool could host then (late ones among them are not solved for again).
    pub waits_checked: Duration,
    pub unhostable: BTreeSet<String>,
    /// The waiting pods `unhostable` was last worked out for.
    pub waiting_seen: Vec<String>,
    /// Waiting pods found hostable again after being unhostable, with when room was last
    /// freed before that: their wait for a node counts from there (swarm seed 51584).
    pub rehostable: BTreeMap<String, Duration>,
    /// Injected faults, each from its start until the pods it held up could have had a node
    /// (for a launch that never registers, the registration TTL and a second launch later).
    pub faults: Vec<faults::InjectedFault>,
    /// Nodes that will never report Ready, with their fault in `faults`, which ends when
    /// the node is deleted.
    pub never_ready: BTreeMap<String, usize>,
    /// When a NodePool or EC2NodeClass was last applied: a pod no NodePool could host may
    /// have become hostable then, and its wait for a node counts from there.
    pub pools_changed_at: Duration,
    /// When the controllers first asked for each NodeClaim's create not stored yet.
    pub creates_asked: BTreeMap<String, Duration>,
    /// When a NodeClaim last went away, giving its NodePool's limits room again: a pod
    /// found unhostable before may have become hostable then.
    pub room_freed_at: Duration,
    /// The convergence check's quiet, fingerprints and pod events.
    pub convergence: convergence::Convergence,
    /// The checker's imagined nodes (`world/hostable.rs`), with the generation of NodePools,
    /// classes and DaemonSets they were imagined for, and their NodePools' names.
    pub imagined: Option<hostable::Kept>,
    /// Bumped whenever a NodePool, class or DaemonSet is applied or deleted.
    pub imagined_generation: u64,
    /// Nodes whose `karpenter.sh/disrupted` taint was taken off while they stayed (a
    /// disruption given up), how many times and when last: the spot-preference oracle
    /// waits out the documented replacement backoff after each.
    pub rolled_back: BTreeMap<String, (u32, Duration)>,
}
