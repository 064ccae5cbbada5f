//! The offerings one launch asks the cloud for. Every cloud Kerf drives (EC2 Fleet, kwok, the
//! simulator's) builds its request here, so that what a shortage proves, and how fast the next
//! plan falls back, is the same on each.

use kerf_api::{NodeSelectorRequirementWithMinValues, labels};

/// At most this many offerings go into one request: EC2 Fleet's overrides as Karpenter keeps
/// them (EC2 takes more; a small request keeps the cheapest).
pub const MAX_OFFERINGS: usize = 60;

/// An offering a launch may ask for, and what its cloud needs back when it is chosen.
#[derive(Clone, Debug)]
pub struct Candidate<'a, T> {
    /// The instance type's name.
    pub instance_type: &'a str,
    /// Its availability zone.
    pub zone: &'a str,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: &'a str,
    /// USD per hour.
    pub price: f64,
    /// The capacity reservation a `reserved` offering launches into.
    pub reservation: Option<&'a str>,
    /// The cloud's own handle on the offering.
    pub item: T,
}

/// Whether `requirements` let `key` be `value` (a key they do not name is free).
fn allows(requirements: &[NodeSelectorRequirementWithMinValues], key: &str, value: &str) -> bool {
    requirements
        .iter()
        .filter(|r| r.key == key)
        .all(|r| r.matches(Some(value)))
}

/// The request for a NodeClaim with `requirements` among `candidates` (its instance types'
/// offerings): the offerings its zone and capacity-type requirements allow and `available`
/// (the unavailable-offerings memory) does not rule out; only the reservations the NodeClaim is
/// pinned to (`karpenter.k8s.aws/capacity-reservation-id`), and none when it is not pinned; of
/// one capacity type, spot whenever any spot offering is left (as Karpenter chooses), else the
/// cheapest offering's; cheapest first
/// (ties by type, then zone); at most [`MAX_OFFERINGS`]. Empty when nothing is left.
pub fn request<'a, T>(
    requirements: &[NodeSelectorRequirementWithMinValues],
    candidates: impl IntoIterator<Item = Candidate<'a, T>>,
    available: impl Fn(&str, &str, &str) -> bool,
) -> Vec<Candidate<'a, T>> {
    // reservations are the planner's to hand out: a NodeClaim pinned to one asks for it
    // alone, any other never for one
    let pinned = (requirements.iter()).any(|r| r.key == labels::CAPACITY_RESERVATION_ID);
    let mut offers: Vec<Candidate<'a, T>> = candidates
        .into_iter()
        .filter(|c| match c.reservation {
            Some(id) => pinned && allows(requirements, labels::CAPACITY_RESERVATION_ID, id),
            None => !pinned,
        })
        .filter(|c| {
            allows(requirements, labels::ZONE, c.zone)
                && allows(requirements, labels::CAPACITY_TYPE, c.capacity_type)
                && available(c.capacity_type, c.instance_type, c.zone)
        })
        .collect();
    offers.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.instance_type.cmp(b.instance_type))
            .then_with(|| a.zone.cmp(b.zone))
    });
    let spot = offers
        .iter()
        .any(|c| c.capacity_type == labels::CAPACITY_TYPE_SPOT);
    let Some(cheapest) = offers.first().map(|c| c.capacity_type) else {
        return offers;
    };
    let chosen = if spot {
        labels::CAPACITY_TYPE_SPOT
    } else {
        cheapest
    };
    offers.retain(|c| c.capacity_type == chosen);
    offers.truncate(MAX_OFFERINGS);
    offers
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_api::common::Operator;

    fn offer(
        instance_type: &'static str,
        zone: &'static str,
        capacity_type: &'static str,
        price: f64,
    ) -> Candidate<'static, ()> {
        Candidate {
            instance_type,
            zone,
            capacity_type,
            price,
            reservation: None,
            item: (),
        }
    }

    fn names<'a>(offers: &[Candidate<'a, ()>]) -> Vec<(&'a str, &'a str, &'a str)> {
        offers
            .iter()
            .map(|c| (c.instance_type, c.zone, c.capacity_type))
            .collect()
    }

    #[test]
    fn spot_first_cheapest_first_and_what_the_memory_rules_out_is_left_out() {
        let candidates = [
            offer("m5.large", "a", "on-demand", 0.096),
            offer("m5.large", "a", "spot", 0.04),
            offer("c5.large", "b", "spot", 0.03),
            offer("c5.large", "a", "spot", 0.03),
        ];
        let all = request(&[], candidates.clone(), |_, _, _| true);
        assert_eq!(
            names(&all),
            [
                ("c5.large", "a", "spot"),
                ("c5.large", "b", "spot"),
                ("m5.large", "a", "spot")
            ]
        );
        // spot gone from zone a: what is left of spot is asked for, not on-demand
        let left = request(&[], candidates.clone(), |ct, _, z| {
            !(ct == "spot" && z == "a")
        });
        assert_eq!(names(&left), [("c5.large", "b", "spot")]);
        // no spot left at all: on-demand
        let od = request(&[], candidates.clone(), |ct, _, _| ct != "spot");
        assert_eq!(names(&od), [("m5.large", "a", "on-demand")]);
        // a NodeClaim that allows on-demand only never asks for spot
        let reqs = [NodeSelectorRequirementWithMinValues {
            key: labels::CAPACITY_TYPE.into(),
            operator: Operator::In,
            values: vec!["on-demand".into()],
            min_values: None,
        }];
        assert_eq!(
            names(&request(&reqs, candidates, |_, _, _| true)),
            [("m5.large", "a", "on-demand")]
        );
    }

    #[test]
    fn a_request_holds_at_most_sixty_offerings() {
        let zones = ["a", "b", "c"];
        let candidates = (0..100).map(|i| offer("m5.large", zones[i % 3], "spot", i as f64));
        let asked = request(&[], candidates, |_, _, _| true);
        assert_eq!(asked.len(), MAX_OFFERINGS);
        assert!(asked.windows(2).all(|w| w[0].price <= w[1].price));
    }
}
