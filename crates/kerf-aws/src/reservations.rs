//! Capacity reservations as offerings: each reservation an EC2NodeClass resolved (its
//! `status.capacityReservations`) is one more offering of its instance type in its zone,
//! capacity type `reserved`, priced as Karpenter v1.15 prices it (the on-demand price over
//! ten million: all but free, so it is taken first, and cheaper types still win).

use kerf_api::ec2nodeclass::CapacityReservationStatus;
use kerf_api::labels;

use crate::instance_type::{InstanceType, PricedOffering};

/// What Karpenter divides the on-demand price by for a reserved offering.
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// A capacity block is drained this long before it ends (EC2 reclaims its instances from
/// 30 minutes before; Karpenter marks it `expiring` and deletes its NodeClaims at 40).
pub const CAPACITY_BLOCK_EXPIRY: std::time::Duration = std::time::Duration::from_secs(40 * 60);

/// The reservation behind a `reserved` offering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reserved {
    /// Its id (`cr-…`).
    pub id: String,
    /// `default` or `capacity-block`.
    pub kind: String,
    /// Whether EC2 may reclaim its instances.
    pub interruptible: bool,
    /// How many more instances it takes now.
    pub capacity: u32,
}

impl Reserved {
    /// The labels a node launched into it carries beside `karpenter.sh/capacity-type:
    /// reserved`, as Karpenter writes them.
    pub fn labels(&self) -> [(String, String); 3] {
        node_labels(&self.id, &self.kind, self.interruptible)
    }
}

/// The labels of a node in reservation `id` of type `kind` (`default`, `capacity-block`).
pub fn node_labels(id: &str, kind: &str, interruptible: bool) -> [(String, String); 3] {
    [
        (labels::CAPACITY_RESERVATION_ID.into(), id.to_string()),
        (labels::CAPACITY_RESERVATION_TYPE.into(), kind.to_string()),
        (
            labels::CAPACITY_RESERVATION_INTERRUPTIBLE.into(),
            interruptible.to_string(),
        ),
    ]
}

/// Adds a `reserved` offering for each active reservation whose instance type the catalog
/// holds and offers in its zone; `room(id)` is how many more instances it takes. An
/// `expiring` capacity block offers nothing, as in Karpenter.
pub fn add_reserved_offerings(
    types: &mut [InstanceType<'_>],
    reservations: &[CapacityReservationStatus],
    room: impl Fn(&str) -> u32,
) {
    for r in reservations.iter().filter(|r| r.state != "expiring") {
        let Some(t) = types.iter_mut().find(|t| t.name() == r.instance_type) else {
            continue;
        };
        let Some(on_demand) = t.offerings.iter().find(|o| {
            o.zone == r.availability_zone && o.capacity_type == labels::CAPACITY_TYPE_ON_DEMAND
        }) else {
            continue;
        };
        let price_per_hour = on_demand.price_per_hour / RESERVED_PRICE_DIVISOR;
        t.offerings.push(PricedOffering {
            zone: r.availability_zone.clone(),
            capacity_type: labels::CAPACITY_TYPE_RESERVED,
            price_per_hour,
            reservation: Some(Reserved {
                id: r.id.clone(),
                kind: r.reservation_type.clone(),
                interruptible: r.interruptible.unwrap_or(false),
                capacity: room(&r.id),
            }),
        });
        t.offerings
            .sort_by(|a, b| a.price_per_hour.total_cmp(&b.price_per_hour));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::NodeSettings;

    fn reservation(id: &str, instance_type: &str, zone: &str) -> CapacityReservationStatus {
        CapacityReservationStatus {
            id: id.into(),
            instance_type: instance_type.into(),
            availability_zone: zone.into(),
            owner_id: "123456789012".into(),
            instance_match_criteria: "targeted".into(),
            reservation_type: "default".into(),
            state: "active".into(),
            end_time: None,
            interruptible: None,
        }
    }

    #[test]
    fn a_reservation_is_its_types_cheapest_offering_in_its_zone() {
        let mut types =
            crate::instance_types("us-east-1", &NodeSettings::default()).expect("catalog");
        let mut block = reservation("cr-0block", "m5.large", "us-east-1b");
        block.reservation_type = "capacity-block".into();
        block.state = "expiring".into();
        add_reserved_offerings(
            &mut types,
            &[
                reservation("cr-0abc", "m5.large", "us-east-1a"),
                reservation("cr-0none", "no.such", "us-east-1a"),
                block,
            ],
            |id| if id == "cr-0abc" { 3 } else { 0 },
        );
        let m5 = types.iter().find(|t| t.name() == "m5.large").unwrap();
        let first = &m5.offerings[0];
        assert_eq!(first.capacity_type, "reserved");
        assert_eq!(first.zone, "us-east-1a");
        let od = m5
            .offerings
            .iter()
            .find(|o| o.capacity_type == "on-demand" && o.zone == "us-east-1a")
            .unwrap();
        assert!((first.price_per_hour - od.price_per_hour / 1e7).abs() < 1e-15);
        let r = first.reservation.as_ref().unwrap();
        assert_eq!((r.id.as_str(), r.capacity), ("cr-0abc", 3));
        // the expiring block offers nothing
        let reserved = m5
            .offerings
            .iter()
            .filter(|o| o.capacity_type == "reserved")
            .count();
        assert_eq!(reserved, 1);
    }
}
