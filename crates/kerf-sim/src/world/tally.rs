//! What a run adds up for its report as it goes: cost and node-seconds, the cost lower
//! bound, the longest waits, the timeline's samples and the NodeClaims taken away. It reads
//! nothing of Kerf's; [`super::World`] feeds it what the API server and the cloud did.

use rustc_hash::FxHashMap as HashMap;
use std::time::Duration;

use crate::report::{LONGEST_WAITS, Removal, Sample, Totals, Wait};

/// The report's running sums and records.
pub(super) struct Tally {
    /// The cost lower bound's rate ($/hour) for the pods and NodePools at the last sample,
    /// and whether either changed since.
    pub floor: (f64, bool),
    /// Cost bounds worked out since the NodePools, classes, overlays or daemonsets last
    /// changed, by the workload's fingerprint ([`super::World::workload_fingerprint`]): pods
    /// evicted and made again bring back a workload already bounded.
    pub floors: HashMap<(u64, usize), f64>,
    /// The NodeClaims Kerf took away, in the order it decided to.
    pub removals: Vec<Removal>,
    /// One sample per interval.
    pub timeline: Vec<Sample>,
    /// The report's totals so far.
    pub totals: Totals,
    /// The pod that waited longest for a node so far.
    pub slowest_pod: Option<String>,
    /// The longest waits for a node so far, longest first.
    pub longest_waits: Vec<Wait>,
    /// Seconds of every node's life so far, and of spot nodes'.
    pub node_seconds: f64,
    pub spot_node_seconds: f64,
    /// Up to when cost and node-seconds are added up.
    pub last_accrual: Duration,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            // no bound is worked out yet: the first sample works one out
            floor: (0.0, true),
            floors: HashMap::default(),
            removals: Vec::new(),
            timeline: Vec::new(),
            totals: Totals::default(),
            slowest_pod: None,
            longest_waits: Vec::new(),
            node_seconds: 0.0,
            spot_node_seconds: 0.0,
            last_accrual: Duration::ZERO,
        }
    }
}

impl Tally {
    /// Keeps a wait that ended if it is among the longest.
    pub fn wait(&mut self, wait: Wait) {
        let length = |w: &Wait| w.until - w.since;
        if length(&wait) <= 0.0 {
            return;
        }
        self.longest_waits.push(wait);
        self.longest_waits
            .sort_by(|a, b| length(b).total_cmp(&length(a)).then(a.pod.cmp(&b.pod)));
        self.longest_waits.truncate(LONGEST_WAITS);
    }
}
