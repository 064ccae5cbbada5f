//! The capacity-reservation invariant: no reservation ever holds more instances than it
//! has, and every NodeClaim in an expiring capacity block is being deleted within a minute.

use std::time::Duration;

use kerf_api::labels;
use kerf_aws::reservations::CAPACITY_BLOCK_EXPIRY;

use super::{Checkers, Sight, SimError};

/// How long after a block turns `expiring` its NodeClaims may still be without a deletion:
/// the node class status controller resolves reservations once a minute (as Karpenter's
/// AWS provider does), and the deletion follows within the minute after.
const EXPIRY_SLACK: Duration = Duration::from_secs(120);

impl Checkers {
    /// No reservation holds more instances than it has: counted from the instances alone
    /// (one its owner is reclaiming no longer counts: the reservation already shrank).
    pub(in crate::world) fn check_reservations(
        &mut self,
        seen: &Sight<'_>,
    ) -> Result<(), SimError> {
        for r in &seen.scenario.spec.cloud.reservations {
            let inside = (seen.cloud.instances.values())
                .filter(|(_, i)| i.reservation.as_deref() == Some(r.id.as_str()))
                .filter(|(_, i)| !(i.interrupted && r.interruptible))
                .count();
            if inside > r.count as usize {
                let message = format!(
                    "capacity reservation {} holds {inside} instances, more than its {}",
                    r.id, r.count
                );
                return Err(seen.violation(message));
            }
        }
        // an API-server outage holds the deletion back until it is over
        let back = seen.api_back();
        if seen.api_down().is_some() {
            return Ok(());
        }
        let late: Vec<String> = (seen.scenario.spec.cloud.reservations.iter())
            .filter(|r| r.reservation_type == "capacity-block")
            .filter_map(|r| {
                let end = r.end?.0;
                let due = end.saturating_sub(CAPACITY_BLOCK_EXPIRY).max(back) + EXPIRY_SLACK;
                (seen.now >= due && seen.now < end).then_some(r.id.clone())
            })
            .collect();
        for id in late {
            let kept = seen.api.nodeclaims.iter().find(|(_, s)| {
                s.deleting.is_none()
                    && (s.object.metadata.labels.as_ref())
                        .and_then(|l| l.get(labels::CAPACITY_RESERVATION_ID))
                        .is_some_and(|v| *v == id)
            });
            if let Some((name, _)) = kept {
                let message = format!(
                    "nodeclaim {name} still runs in capacity block {id}, which ends within 40 \
                     minutes"
                );
                return Err(seen.violation(message));
            }
        }
        Ok(())
    }
}
