//! NodeClaim consistency, Karpenter's `nodeclaim.consistency`: an initialized node that came
//! up with less of a resource than its NodeClaim's launch promised (an instance type whose
//! memory the catalog overstates, a kubelet that reserves more than expected) is said in a
//! warning on the NodeClaim, a log line and its `ConsistentStateFound` condition, again every
//! [`SCAN_PERIOD`] while it lasts.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use super::desk::Desk;
use super::{Event, EventObject, Timer};
use crate::cluster::{ClaimRecord, Cluster, NodeRecord};

/// How often a NodeClaim whose node falls short is looked at and said again (Karpenter's
/// scan period).
pub const SCAN_PERIOD: Duration = Duration::from_secs(10 * 60);

/// The share of a promised resource below which a node is short of it (Karpenter's 90 %).
const SHORT_BELOW: f64 = 0.90;

/// The consistency check: each NodeClaim's shortfalls between looks. It reads the cluster
/// and writes nothing of it; the router says, schedules and writes what a look decided.
#[derive(Default)]
pub(super) struct ConsistencyChecks {
    /// Each NodeClaim's shortfalls as last said; a NodeClaim without any is absent.
    issues: BTreeMap<String, Vec<String>>,
}

/// What an initialized node lacks against its NodeClaim's launch, one line per resource the
/// NodeClaim requests whose node capacity is under 90 % of the launched capacity, worded as
/// Karpenter words it. A NodeClaim being deleted or not yet initialized has none.
pub fn shape_issues(record: &ClaimRecord, node: &NodeRecord) -> Vec<String> {
    let Some(launched) = &record.launched else {
        return Vec::new();
    };
    if record.deleting.is_some() || !record.initialized {
        return Vec::new();
    }
    let expected = launched.capacity.to_resource_list();
    let found = node.capacity.to_resource_list();
    let mut issues = Vec::new();
    for name in &record.requested {
        let Some(want) = expected.get(name).filter(|q| q.milli() != 0) else {
            continue;
        };
        let have = found.get(name);
        let share = have.map_or(0.0, |q| q.milli() as f64) / want.milli() as f64;
        if share < SHORT_BELOW {
            let have = have.map_or_else(|| "0".to_string(), ToString::to_string);
            issues.push(format!(
                "expected {want} of resource {name}, but found {have} ({:.1}% of expected)",
                share * 100.0
            ));
        }
    }
    issues
}

/// What one look at a NodeClaim's node decided.
pub(super) struct Look {
    /// The shortfalls to say (each in a log line and a warning), none when it has none.
    pub(super) said: Vec<String>,
    /// Whether the NodeClaim's `ConsistentStateFound` condition flipped: its status is
    /// written again.
    pub(super) flipped: bool,
}

impl ConsistencyChecks {
    /// Looks at a NodeClaim's node against its launch: what changed since the last look is
    /// said; a shortfall that lasts is said again when `rescan` (the scan period's timer)
    /// asks. `None` when nothing is to be said or written. While [`Look::said`] is not empty
    /// the NodeClaim is looked at again after [`SCAN_PERIOD`].
    pub(super) fn look(&mut self, cluster: &Cluster, name: &str, rescan: bool) -> Option<Look> {
        let issues = match cluster.nodeclaims.get(name) {
            Some(record) => (record.node.as_ref())
                .and_then(|n| cluster.nodes.get(n))
                .map(|node| shape_issues(record, node))
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let before = self.issues.get(name);
        let (had, has) = (before.is_some(), !issues.is_empty());
        let changed = before.map_or(has, |b| *b != issues);
        // a shortfall that lasts is said again at each scan
        let lasting = rescan && has;
        if !changed && !lasting {
            return None;
        }
        if has {
            self.issues.insert(name.to_string(), issues.clone());
        } else {
            self.issues.remove(name);
        }
        Some(Look {
            said: issues,
            flipped: had != has,
        })
    }

    /// Whether a NodeClaim's node was short of something at the last look.
    pub(super) fn short(&self, name: &str) -> bool {
        self.issues.contains_key(name)
    }

    /// A NodeClaim is gone: nothing of it is looked at again. Whether it was short of
    /// something (its rescan is then due no more).
    pub(super) fn forget(&mut self, name: &str) -> bool {
        self.issues.remove(name).is_some()
    }

    /// Has the consistency check look at a NodeClaim's node ([`ConsistencyChecks::look`]) and
    /// says, schedules and writes what it decided.
    pub(super) fn check_consistency(
        &mut self,
        desk: &mut Desk,
        name: &str,
        rescan: bool,
        now: Duration,
    ) {
        let Some(look) = self.look(&desk.cluster, name, rescan) else {
            return;
        };
        for issue in &look.said {
            desk.log(
                "nodeclaim.consistency",
                "failed consistency check",
                json!({"NodeClaim": {"name": name}, "issue": issue}),
            );
            desk.event(
                Event {
                    kind: EventObject::NodeClaim,
                    name: name.to_string(),
                    warning: true,
                    reason: "FailedConsistencyCheck".into(),
                    message: issue.clone(),
                },
                now,
            );
        }
        let timer = Timer::ConsistencyScan(name.to_string());
        desk.cancel(&timer);
        if !look.said.is_empty() {
            desk.at(now + SCAN_PERIOD, timer);
        }
        if look.flipped {
            desk.status_changed(name);
        }
    }

    /// A NodeClaim is gone: nothing of it is looked at again.
    pub(super) fn forget_consistency(&mut self, desk: &mut Desk, name: &str) {
        if self.forget(name) {
            desk.cancel(&Timer::ConsistencyScan(name.to_string()));
        }
    }
}
