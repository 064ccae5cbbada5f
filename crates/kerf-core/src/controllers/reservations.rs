//! Capacity reservations, as Karpenter v1.15's AWS provider keeps them: a reservation's room
//! counts NodeClaims pinned to it that have not launched yet, a NodeClaim in a capacity block
//! its class reports `expiring` is deleted (40 minutes before the block ends), and one whose
//! reservation its class no longer resolves has drifted (`CapacityReservationDrift`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kerf_api::labels;
use kerf_scheduling::InstanceTypeOption;
use serde_json::json;

use super::desk::Desk;

impl Desk {
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
    pub(super) fn expire_capacity_blocks(&mut self, now: Duration) {
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
            self.delete_nodeclaim(&claim, now);
        }
    }

    /// NodeClaims whose instances the cloud lists out of any capacity reservation though they
    /// were launched into one (an on-demand reservation that ended: the instance runs on as
    /// on-demand), relabelled as Karpenter's AWS provider's `capacitytype` controller does:
    /// `karpenter.sh/capacity-type` `on-demand`, the reservation's id and type labels off (its
    /// `interruptible` label kept), on the NodeClaim and then on its registered Node; priced
    /// as on-demand from then on.
    pub(super) fn left_reservation(&mut self, claims: &[String]) {
        let relabel = BTreeMap::from([
            (
                labels::CAPACITY_TYPE.to_string(),
                Some(labels::CAPACITY_TYPE_ON_DEMAND.to_string()),
            ),
            (labels::CAPACITY_RESERVATION_ID.to_string(), None),
            (labels::CAPACITY_RESERVATION_TYPE.to_string(), None),
        ]);
        let mut relabelled = Vec::new();
        for name in claims {
            let Some(c) = self.cluster.nodeclaims.get(name) else {
                continue;
            };
            let price = c.launched.as_ref().and_then(|l| {
                let types = self.cluster.instance_types.get(&c.node_class)?;
                let t = types.iter().find(|t| t.name == l.instance_type)?;
                (t.offerings.iter())
                    .find(|o| {
                        o.zone == l.zone && o.capacity_type == labels::CAPACITY_TYPE_ON_DEMAND
                    })
                    .map(|o| o.price_per_hour)
            });
            let Some(c) = self.cluster.nodeclaims.get_mut(name) else {
                continue;
            };
            let Some(l) = c.launched.as_mut() else {
                continue;
            };
            l.capacity_type = crate::cluster::CapacityType::OnDemand;
            l.labels.remove(labels::CAPACITY_RESERVATION_ID);
            l.labels.remove(labels::CAPACITY_RESERVATION_TYPE);
            if let Some(price) = price {
                l.price_per_hour = price;
            }
            let node = c.node.clone().filter(|_| c.registered);
            self.actions.push(super::Action::RelabelNodeClaim {
                nodeclaim: name.clone(),
                labels: relabel.clone(),
            });
            if let Some(node) = node {
                self.actions.push(super::Action::RelabelNode {
                    node,
                    labels: relabel.clone(),
                });
            }
            relabelled.push(json!({"name": name}));
        }
        self.cluster.changes.disruption = true;
        self.log(
            "capacityreservation.capacitytype",
            "updated capacity type for nodeclaims",
            json!({"NodeClaims": relabelled}),
        );
    }
}
