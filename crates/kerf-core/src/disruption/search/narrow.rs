//! A consolidation's new nodes narrowed to what they replace, by Karpenter's rules
//! (`computeConsolidation`, `computeSpotToSpotConsolidation`): only instance types whose
//! worst launch price is below the candidates' price stay, the NodePool's minValues must
//! still hold over them, spot candidates go to spot only behind SpotToSpotConsolidation
//! (with 15 cheaper types for one candidate, and then only the 15 cheapest), and a
//! replacement that may be spot or on-demand is pinned to spot, so that a spot shortage
//! fails the launch instead of buying a dearer on-demand node.

use std::collections::BTreeSet;

use kerf_api::{NodeSelectorRequirementWithMinValues, labels};
use kerf_scheduling::input::{InstanceTypeOption, Offering};
use kerf_scheduling::launch::{Launch, LaunchOption, pin};
use kerf_scheduling::{PlannedNodeClaim, Requirements};

use super::{ClusterView, SPOT_TO_SPOT_MIN_TYPES};
use crate::cluster::CapacityType;

/// Why planned replacements were turned down.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Refused {
    /// Spot candidates, a replacement that may be spot, SpotToSpotConsolidation off.
    SpotToSpotOff,
    /// One spot candidate, and fewer cheaper spot types than Karpenter asks for.
    SpotToSpotTooFew(usize),
    /// No instance type is cheaper, or the new nodes together cost as much or more.
    NotCheaper,
    /// The cheaper types no longer satisfy a minValues: the key, the values left and the
    /// least asked.
    MinValues(String, usize, u32),
}

/// `replacements` for `candidates`, narrowed (see the module doc), with what they save per
/// hour: the candidates' price less each new node's cheapest launch.
pub(super) fn narrow(
    view: &ClusterView<'_>,
    candidates: &[usize],
    mut replacements: Vec<PlannedNodeClaim>,
) -> Result<(Vec<PlannedNodeClaim>, f64), Refused> {
    if replacements.is_empty() {
        return Err(Refused::NotCheaper);
    }
    let price: f64 = (candidates.iter())
        .map(|i| view.nodes[*i].price_per_hour)
        .sum();
    let all_spot = (candidates.iter()).all(|i| view.nodes[*i].capacity_type == CapacityType::Spot);
    let mut cost = 0.0;
    for r in &mut replacements {
        let mut reqs = Requirements::from_api(&r.requirements);
        let may = reqs.get(labels::CAPACITY_TYPE);
        let (spot, on_demand) = (
            may.has(labels::CAPACITY_TYPE_SPOT),
            may.has(labels::CAPACITY_TYPE_ON_DEMAND),
        );
        let spot_to_spot = all_spot && spot;
        if spot_to_spot && !view.spot_to_spot {
            return Err(Refused::SpotToSpotOff);
        }
        let pinned = spot_to_spot || (spot && on_demand);
        if spot_to_spot {
            reqs = spot_only(&r.requirements);
        }
        // priced (and minValues checked) before an on-demand candidate's replacement is
        // pinned to spot, as Karpenter does
        let mut kept: Vec<&InstanceTypeOption> = (r.instance_types.iter())
            .filter_map(|o| view.instance_type(r.node_pool, &o.name))
            .filter(|t| worst_launch_price(t, &reqs).is_some_and(|p| p < price))
            .collect();
        if let Some((key, left, min)) = unmet_min_values(&kept, &r.requirements) {
            return Err(Refused::MinValues(key, left, min));
        }
        if kept.is_empty() {
            return Err(Refused::NotCheaper);
        }
        if spot_to_spot && candidates.len() == 1 {
            if kept.len() < SPOT_TO_SPOT_MIN_TYPES {
                return Err(Refused::SpotToSpotTooFew(kept.len()));
            }
            let least = (1..=kept.len())
                .find(|n| unmet_min_values(&kept[..*n], &r.requirements).is_none())
                .unwrap_or(kept.len());
            kept.truncate(least.max(SPOT_TO_SPOT_MIN_TYPES));
        }
        let priced = reqs;
        // a spot-to-spot replacement was priced on spot already
        let reqs = if pinned && !spot_to_spot {
            spot_only(&r.requirements)
        } else {
            priced.clone()
        };
        // no spot left to pin to: Karpenter's launch would fail, Kerf does not try
        let Some(launch) = cheapest_launch(&kept, &reqs) else {
            return Err(Refused::NotCheaper);
        };
        cost += launch.price_per_hour;
        let cheapest = |t: &InstanceTypeOption, reqs: &Requirements| {
            allowed(t, reqs)
                .map(|o| o.price_per_hour)
                .min_by(f64::total_cmp)
        };
        // a type with no spot offering left stays listed, as in Karpenter's NodeClaim
        r.instance_types = (kept.iter())
            .filter_map(|t| {
                Some(LaunchOption {
                    name: t.name.clone(),
                    price_per_hour: cheapest(t, &reqs).or_else(|| cheapest(t, &priced))?,
                })
            })
            .collect();
        if pinned {
            pin(
                &mut r.requirements,
                labels::CAPACITY_TYPE,
                labels::CAPACITY_TYPE_SPOT,
            );
        }
        if let Some(types) = (r.requirements.iter_mut()).find(|q| q.key == labels::INSTANCE_TYPE) {
            types.values = r.instance_types.iter().map(|o| o.name.clone()).collect();
        }
        r.launch = launch;
    }
    if cost < price {
        Ok((replacements, price - cost))
    } else {
        Err(Refused::NotCheaper)
    }
}

/// The requirements with the capacity type narrowed to spot.
fn spot_only(requirements: &[NodeSelectorRequirementWithMinValues]) -> Requirements {
    let mut reqs = Requirements::from_api(requirements);
    reqs.add(kerf_scheduling::Requirement::new(
        labels::CAPACITY_TYPE,
        kerf_api::Operator::In,
        [labels::CAPACITY_TYPE_SPOT],
    ));
    reqs
}

/// The type's offerings a NodeClaim with `reqs` could launch into now.
fn allowed<'t>(
    t: &'t InstanceTypeOption,
    reqs: &Requirements,
) -> impl Iterator<Item = &'t Offering> {
    let zone = reqs.get(labels::ZONE);
    let capacity_type = reqs.get(labels::CAPACITY_TYPE);
    let reservation = (reqs.has(labels::CAPACITY_RESERVATION_ID))
        .then(|| reqs.get(labels::CAPACITY_RESERVATION_ID));
    (t.offerings.iter()).filter(move |o| {
        o.available
            && zone.has(&o.zone)
            && capacity_type.has(&o.capacity_type)
            && o.reservation.as_ref().is_none_or(|r| r.capacity > 0)
            && reservation
                .as_ref()
                .is_none_or(|id| o.reservation.as_ref().is_some_and(|r| id.has(&r.id)))
    })
}

/// The capacity types in the order a launch takes them: a reservation, then spot, then
/// on-demand.
const LAUNCH_ORDER: [&str; 3] = [
    labels::CAPACITY_TYPE_RESERVED,
    labels::CAPACITY_TYPE_SPOT,
    labels::CAPACITY_TYPE_ON_DEMAND,
];

/// What launching the type could cost at worst: its dearest allowed offering of the
/// capacity type a launch would take (Karpenter's `WorstLaunchPrice`).
fn worst_launch_price(t: &InstanceTypeOption, reqs: &Requirements) -> Option<f64> {
    LAUNCH_ORDER.iter().find_map(|ct| {
        (allowed(t, reqs))
            .filter(|o| o.capacity_type == *ct)
            .map(|o| o.price_per_hour)
            .max_by(f64::total_cmp)
    })
}

/// The launch the kept types give: the first capacity type in launch order any of them
/// offers, and its cheapest offering (ties by type name, then zone).
fn cheapest_launch(kept: &[&InstanceTypeOption], reqs: &Requirements) -> Option<Launch> {
    let ct = LAUNCH_ORDER
        .into_iter()
        .find(|ct| (kept.iter()).any(|t| allowed(t, reqs).any(|o| o.capacity_type == *ct)))?;
    let (t, o) = (kept.iter())
        .flat_map(|t| allowed(t, reqs).map(move |o| (*t, o)))
        .filter(|(_, o)| o.capacity_type == ct)
        .min_by(|a, b| {
            (a.1.price_per_hour.total_cmp(&b.1.price_per_hour))
                .then_with(|| a.0.name.cmp(&b.0.name))
                .then_with(|| a.1.zone.cmp(&b.1.zone))
        })?;
    Some(Launch {
        instance_type: t.name.clone(),
        capacity_type: o.capacity_type.clone(),
        zone: o.zone.clone(),
        price_per_hour: o.price_per_hour,
        reservation: o.reservation.as_ref().map(|r| r.id.clone()),
    })
}

/// The first minValues the types no longer satisfy: its key, how many distinct values they
/// keep and how many it asks. A type's zones and capacity types are those of all its
/// offerings, as Karpenter's instance type requirements list them; other keys come from
/// its labels. No types at all is not this failure.
fn unmet_min_values(
    kept: &[&InstanceTypeOption],
    requirements: &[NodeSelectorRequirementWithMinValues],
) -> Option<(String, usize, u32)> {
    if kept.is_empty() {
        return None;
    }
    requirements.iter().find_map(|q| {
        let min = u32::try_from(q.min_values?).ok()?;
        let mut values: BTreeSet<&str> = BTreeSet::new();
        for t in kept {
            match q.key.as_str() {
                labels::ZONE => values.extend(t.offerings.iter().map(|o| o.zone.as_str())),
                labels::CAPACITY_TYPE => {
                    values.extend(t.offerings.iter().map(|o| o.capacity_type.as_str()))
                }
                key => values.extend(t.labels.get(key).map(String::as_str)),
            }
        }
        (values.len() < min as usize).then(|| (q.key.clone(), values.len(), min))
    })
}
