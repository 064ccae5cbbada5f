//! The simulated account's capacity reservations: resolved into each EC2NodeClass's status
//! as Karpenter's AWS provider resolves them (selected by id or by tags, active until they
//! end, a capacity block `expiring` from 40 minutes before), offered with their room (count
//! less the instances in them), and checked: no reservation ever holds more instances than
//! it has, and every NodeClaim in an expiring block is being deleted within a minute.

use kerf_api::ec2nodeclass::{CapacityReservationStatus, EC2NodeClassStatus};
use kerf_aws::reservations::CAPACITY_BLOCK_EXPIRY;

use super::World;
use crate::scenario::CapacityReservation;

impl World {
    /// The reservations `class` selects, as its status would list them now.
    fn resolved(&self, class: &str) -> Vec<CapacityReservationStatus> {
        let Some(k) = self.api.objects.node_classes.get(class) else {
            return Vec::new();
        };
        let terms = &k.spec.capacity_reservation_selector_terms;
        let mut out: Vec<CapacityReservationStatus> = (self.scenario.spec.cloud.reservations)
            .iter()
            .filter(|r| r.end.is_none_or(|e| self.now < e.0))
            .filter(|r| {
                terms.iter().any(|t| match (&t.id, &t.tags) {
                    (Some(id), _) => *id == r.id,
                    (None, Some(tags)) => tags
                        .iter()
                        .all(|(k, v)| r.tags.get(k).is_some_and(|have| v == "*" || have == v)),
                    (None, None) => false,
                })
            })
            .map(|r| CapacityReservationStatus {
                id: r.id.clone(),
                instance_type: r.instance_type.clone(),
                availability_zone: r.zone.clone(),
                owner_id: "000000000000".into(),
                instance_match_criteria: "targeted".into(),
                reservation_type: r.reservation_type.clone(),
                state: if self.expiring(r) {
                    "expiring"
                } else {
                    "active"
                }
                .into(),
                end_time: None,
                interruptible: r.interruptible.then_some(true),
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    fn expiring(&self, r: &CapacityReservation) -> bool {
        r.reservation_type == "capacity-block"
            && r.end
                .is_some_and(|e| self.now + CAPACITY_BLOCK_EXPIRY >= e.0)
    }

    /// How many more instances a reservation takes now.
    pub(super) fn reservation_room(&self, id: &str) -> u32 {
        let Some(r) = self
            .scenario
            .spec
            .cloud
            .reservations
            .iter()
            .find(|r| r.id == id)
        else {
            return 0;
        };
        let inside = (self.cloud.instances.values())
            .filter(|(_, i)| i.reservation.as_deref() == Some(id))
            .count() as u32;
        r.count.saturating_sub(inside)
    }

    /// The class's status as the simulated cloud resolves it: its reservations, as
    /// Karpenter's AWS provider lists them.
    pub(super) fn resolve_node_class(&self, class: &str) -> EC2NodeClassStatus {
        let mut status = (self.api.objects.node_classes.get(class))
            .and_then(|c| c.status.clone())
            .unwrap_or_default();
        status.capacity_reservations = self.resolved(class);
        if let Some(amis) = self.images_now(class) {
            status.amis = amis;
        }
        status
    }

    /// A reservation's room changed (a launch into it, an instance gone, one ending): the
    /// cloud's offerings for each class listing it changed, and the classes' instance types
    /// are asked for anew, as the AWS provider's fleet tells the controllers.
    pub(super) fn sync_reservations(&mut self) {
        if self.scenario.spec.cloud.reservations.is_empty() {
            return;
        }
        let classes: Vec<String> = self.api.objects.node_classes.keys().cloned().collect();
        let mut changed = false;
        for name in classes {
            let listed = (self.api.objects.node_classes.get(&name))
                .and_then(|c| c.status.as_ref())
                .map(|s| s.capacity_reservations.clone())
                .unwrap_or_default();
            let rooms: Vec<(String, u32)> = (listed.iter())
                .map(|r| (r.id.clone(), self.reservation_room(&r.id)))
                .collect();
            if self.cloud.reservations_offered.get(&name) != Some(&rooms) {
                changed = true;
                self.cloud.reservations_offered.insert(name, rooms);
            }
        }
        if changed {
            let now = self.now;
            (self.core).observe(kerf_core::observe::Observation::OfferingsChanged, now);
        }
    }

    /// A reservation ends: EC2 reclaims what still runs in a capacity block, and an On-Demand
    /// Capacity Reservation's instances run on, as on-demand instances.
    pub(super) fn end_reservations(&mut self) {
        let ended = |kind: &str| -> Vec<String> {
            (self.scenario.spec.cloud.reservations.iter())
                .filter(|r| r.end.is_some_and(|e| self.now >= e.0) && r.reservation_type == kind)
                .map(|r| r.id.clone())
                .collect()
        };
        let (ended, released) = (ended("capacity-block"), ended("default"));
        for (_, i) in self.cloud.instances.values_mut() {
            if i.reservation
                .as_ref()
                .is_some_and(|id| released.contains(id))
            {
                i.reservation = None;
            }
        }
        let gone: Vec<String> = (self.cloud.instances.iter())
            .filter(|(_, (_, i))| i.reservation.as_ref().is_some_and(|id| ended.contains(id)))
            .map(|(p, _)| p.clone())
            .collect();
        for provider_id in gone {
            self.reclaim(&provider_id, "capacity block ended");
        }
    }
}
