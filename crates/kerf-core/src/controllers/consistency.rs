//! NodeClaim consistency, Karpenter's `nodeclaim.consistency`: an initialized node that came
//! up with less of a resource than its NodeClaim's launch promised (an instance type whose
//! memory the catalog overstates, a kubelet that reserves more than expected) is said in a
//! warning on the NodeClaim, a log line and its `ConsistentStateFound` condition, again every
//! [`SCAN_PERIOD`] while it lasts.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use super::{Controllers, Event, EventObject, Timer};
use crate::cluster::{ClaimRecord, NodeRecord};

/// How often a NodeClaim whose node falls short is looked at and said again (Karpenter's
/// scan period).
pub const SCAN_PERIOD: Duration = Duration::from_secs(10 * 60);

/// The share of a promised resource below which a node is short of it (Karpenter's 90 %).
const SHORT_BELOW: f64 = 0.90;

/// What the consistency check keeps between looks.
#[derive(Default)]
pub(super) struct ConsistencyChecks {
    /// Each NodeClaim's shortfalls as last said; a NodeClaim without any is absent.
    pub(super) issues: BTreeMap<String, Vec<String>>,
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

impl Controllers {
    /// Looks at a NodeClaim's node against its launch. What changed since the last look is
    /// said and written to the status at once; a shortfall that lasts is said again when
    /// `rescan` (the scan period's timer) asks.
    pub(super) fn check_consistency(&mut self, name: &str, rescan: bool, now: Duration) {
        let issues = match self.cluster.nodeclaims.get(name) {
            Some(record) => (record.node.as_ref())
                .and_then(|n| self.cluster.nodes.get(n))
                .map(|node| shape_issues(record, node))
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let before = self.consistency.issues.get(name);
        let (had, has) = (before.is_some(), !issues.is_empty());
        let changed = before.map_or(has, |b| *b != issues);
        let lasting = rescan && has;
        if !changed && !lasting {
            return;
        }
        let flipped = had != has;
        for issue in &issues {
            self.log(
                "nodeclaim.consistency",
                "failed consistency check",
                json!({"NodeClaim": {"name": name}, "issue": issue}),
            );
            self.event(
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
        if issues.is_empty() {
            self.consistency.issues.remove(name);
            self.cancel(&Timer::ConsistencyScan(name.to_string()));
        } else {
            self.consistency.issues.insert(name.to_string(), issues);
            let timer = Timer::ConsistencyScan(name.to_string());
            self.cancel(&timer);
            self.at(now + SCAN_PERIOD, timer);
        }
        if flipped {
            self.status_changed(name);
        }
    }

    /// A NodeClaim is gone: nothing of it is looked at again.
    pub(super) fn forget_consistency(&mut self, name: &str) {
        if self.consistency.issues.remove(name).is_some() {
            self.cancel(&Timer::ConsistencyScan(name.to_string()));
        }
    }
}
