//! The zonal shift events, as Karpenter's AWS provider publishes them: when the zones ARC
//! shifts the cluster away from change, each NodePool that could launch into a newly shifted
//! zone is told `ZonalShiftActive` (Warning), and each that could into a zone no longer
//! shifted `ZonalShiftCleared`. A NodePool could launch into a zone when its class has a
//! subnet there and its requirements admit both the zone's name and its id.
//!
//! The cloud reads the shifts and keeps launches out of shifted zones; it reports the set
//! with [`crate::observe::Observation::ZonalShifts`].

use std::collections::BTreeSet;

use kerf_api::NodePool;
use kerf_api::ec2nodeclass::SubnetStatus;
use kerf_api::labels;

use super::{Event, EventObject};
use crate::cluster::Cluster;

/// The zonal shift controller: what it keeps between the cloud's reports, and the events a
/// change makes. It reads the cluster and writes nothing of it; the router sends its events.
#[derive(Debug, Default)]
pub(super) struct ZonalShifts {
    /// The zones (ids) the cloud last said the cluster is shifted away from.
    shifted: BTreeSet<String>,
}

impl ZonalShifts {
    /// The zones shifted away from are now `zones` (zone ids): the events telling each
    /// NodePool they concern what changed. The first report after a start counts every
    /// shift as new.
    #[must_use]
    pub(super) fn observed(&mut self, zones: BTreeSet<String>, cluster: &Cluster) -> Vec<Event> {
        let previous = std::mem::replace(&mut self.shifted, zones);
        let current = &self.shifted;
        let mut events = Vec::new();
        for (name, pool) in &cluster.node_pools {
            let class = &pool.spec.template.spec.node_class_ref.name;
            let Some(subnets) = (cluster.node_classes.get(class))
                .and_then(|c| c.status.as_ref())
                .map(|s| &s.subnets)
            else {
                continue;
            };
            for (zones, active) in [
                (current.difference(&previous), true),
                (previous.difference(current), false),
            ] {
                for zone_id in zones {
                    let Some(zone) = launchable_zone(pool, subnets, zone_id) else {
                        continue;
                    };
                    let (reason, said) = if active {
                        (
                            "ZonalShiftActive",
                            "detected: offerings in zone {zone} ({zone_id}) are unavailable",
                        )
                    } else {
                        (
                            "ZonalShiftCleared",
                            "cleared: offerings in zone {zone} ({zone_id}) are restored",
                        )
                    };
                    let said = said.replace("{zone}", zone).replace("{zone_id}", zone_id);
                    events.push(Event {
                        kind: EventObject::NodePool,
                        name: name.clone(),
                        warning: active,
                        reason: reason.into(),
                        message: format!("Zonal shift {said} for this NodePool"),
                    });
                }
            }
        }
        events
    }
}

/// The name of the zone with id `zone_id` if the NodePool could launch into it: its class
/// has a subnet there, and its requirements admit the zone's name and id.
fn launchable_zone<'s>(
    pool: &NodePool,
    subnets: &'s [SubnetStatus],
    zone_id: &str,
) -> Option<&'s str> {
    let subnet = subnets
        .iter()
        .find(|s| s.zone_id.as_deref() == Some(zone_id))?;
    let requirements = &pool.spec.template.spec.requirements;
    let admits = |key: &str, value: &str| {
        (requirements.iter())
            .filter(|r| r.key == key)
            .all(|r| r.matches(Some(value)))
    };
    (admits(labels::ZONE, &subnet.zone) && admits(labels::ZONE_ID, zone_id))
        .then_some(subnet.zone.as_str())
}
