//! Capacity reservations, as Karpenter v1.15's AWS provider keeps them: a reservation's room
//! counts NodeClaims pinned to it that have not launched yet, a NodeClaim in a capacity block
//! its class reports `expiring` is deleted (40 minutes before the block ends), and one whose
//! reservation its class no longer resolves has drifted (`CapacityReservationDrift`).

use std::collections::BTreeMap;
use std::sync::Arc;

use kerf_api::labels;
use kerf_scheduling::InstanceTypeOption;
use serde_json::json;

use super::Controllers;

impl Controllers {
    /// NodeClaims pinned to each reservation that the cloud has not launched yet: the cloud's
    /// count of a reservation's room does not know them.
    fn reservations_in_flight(&self) -> BTreeMap<&str, u32> {
        let mut out: BTreeMap<&str, u32> = BTreeMap::new();
        for c in self.cluster.nodeclaims.values() {
            if c.launched.is_some() || c.deleting.is_some() {
                continue;
            }
            let pinned = (c.requirements.iter())
                .filter(|r| r.key == labels::CAPACITY_RESERVATION_ID)
                .flat_map(|r| &r.values);
            for id in pinned {
                *out.entry(id.as_str()).or_default() += 1;
            }
        }
        out
    }

    /// The instance types with each reservation's room less the NodeClaims in flight to it.
    pub(super) fn less_reservations_in_flight(
        &self,
        options: Arc<[InstanceTypeOption]>,
    ) -> Arc<[InstanceTypeOption]> {
        let taken = self.reservations_in_flight();
        let touched = options
            .iter()
            .flat_map(|t| &t.offerings)
            .any(|o| (o.reservation.as_ref()).is_some_and(|r| taken.contains_key(r.id.as_str())));
        if !touched {
            return options;
        }
        let mut owned: Vec<InstanceTypeOption> = options.to_vec();
        for o in owned.iter_mut().flat_map(|t| t.offerings.iter_mut()) {
            if let Some(r) = o.reservation.as_mut() {
                let n = taken.get(r.id.as_str()).copied().unwrap_or(0);
                r.capacity = r.capacity.saturating_sub(n);
            }
        }
        owned.into()
    }

    /// The reservation a launched NodeClaim runs in, from its labels.
    pub(super) fn reservation_of(&self, claim: &str) -> Option<&str> {
        let c = self.cluster.nodeclaims.get(claim)?;
        let launched = c.launched.as_ref()?;
        (launched.labels.get(labels::CAPACITY_RESERVATION_ID)).map(String::as_str)
    }

    /// Deletes every NodeClaim running in a capacity block its class reports `expiring`
    /// (Karpenter: 40 minutes before the block ends, ten before EC2 starts reclaiming).
    pub(super) fn expire_capacity_blocks(&mut self) {
        // it runs at every reaction: most clusters have no block expiring to look for
        let any_expiring = (self.cluster.node_classes.values())
            .filter_map(|k| k.status.as_ref())
            .flat_map(|s| &s.capacity_reservations)
            .any(|r| r.state == "expiring");
        if !any_expiring {
            return;
        }
        let mut expiring: Vec<(String, String)> = Vec::new();
        for (name, c) in &self.cluster.nodeclaims {
            if c.deleting.is_some() {
                continue;
            }
            let Some(id) = self.reservation_of(name) else {
                continue;
            };
            let class = self.cluster.node_classes.get(&c.node_class);
            let status = class.and_then(|k| k.status.as_ref());
            let ends = (status.into_iter())
                .flat_map(|s| &s.capacity_reservations)
                .any(|r| r.id == id && r.state == "expiring");
            if ends {
                expiring.push((name.clone(), id.to_string()));
            }
        }
        for (claim, id) in expiring {
            self.log(
                "capacityreservation.expiration",
                "initiating delete for capacity block expiration",
                json!({"NodeClaim": {"name": claim}, "capacity-reservation-id": id}),
            );
            self.delete_nodeclaim(&claim);
        }
    }
}
