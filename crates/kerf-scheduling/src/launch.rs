//! The launch choice for a planned NodeClaim: instance types ordered by their cheapest
//! available offering, cut to the launch cap while keeping every minValues satisfied, and
//! the capacity type (spot when allowed and offered, else on-demand).

use kerf_api::{NodeSelectorRequirementWithMinValues, Operator, labels};

use crate::interned::{Req, Reqs};
use crate::symbols::{Sym, Symbols};

/// An instance type the NodeClaim may launch as, with its cheapest allowed offering.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchOption {
    /// The type's name.
    pub name: String,
    /// Its cheapest available, allowed offering's hourly price.
    pub price_per_hour: f64,
}

/// What would be bought.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// The instance type.
    pub instance_type: String,
    /// `spot` or `on-demand` (or `reserved`).
    pub capacity_type: String,
    /// The zone.
    pub zone: String,
    /// Dollars per hour.
    pub price_per_hour: f64,
    /// The capacity reservation it launches into (capacity type `reserved`).
    pub reservation: Option<String>,
}

/// One offering of a compiled instance type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompiledOffering {
    /// Its zone.
    pub zone: Sym,
    /// Its capacity type.
    pub capacity_type: Sym,
    /// Dollars per hour.
    pub price_per_hour: f64,
    /// False while the cloud reports no capacity for it.
    pub available: bool,
    /// The capacity reservation it launches into, if it is one.
    pub reservation: Option<Sym>,
}

/// The symbols of the labels an offering is judged by, looked up once per solve rather than
/// once per offering.
#[derive(Clone, Copy, Debug)]
pub struct OfferingKeys {
    /// `topology.kubernetes.io/zone`.
    pub zone: Sym,
    /// `karpenter.sh/capacity-type`.
    pub capacity_type: Sym,
    /// `karpenter.k8s.aws/capacity-reservation-id`, when anything named it.
    pub reservation_id: Option<Sym>,
}

impl OfferingKeys {
    /// The keys as `symbols` knows them (zone and capacity type interned).
    pub fn of(symbols: &mut Symbols) -> OfferingKeys {
        OfferingKeys {
            zone: symbols.intern(labels::ZONE),
            capacity_type: symbols.intern(labels::CAPACITY_TYPE),
            reservation_id: symbols.get(labels::CAPACITY_RESERVATION_ID),
        }
    }
}

impl CompiledOffering {
    /// Whether it can be bought now for a NodeClaim with these requirements: available,
    /// in a zone and of a capacity type they allow.
    #[inline]
    pub fn allowed(&self, reqs: &Reqs, keys: &OfferingKeys, symbols: &Symbols) -> bool {
        self.passes(&OfferingFilter::new(reqs, keys), symbols)
    }

    /// [`CompiledOffering::allowed`] with the requirements read once for many offerings.
    #[inline]
    pub fn passes(&self, filter: &OfferingFilter<'_>, symbols: &Symbols) -> bool {
        // a requirement on the reservation id: only that reservation's offerings meet it
        // (on the others the label does not exist)
        let reservation = (filter.reservation)
            .is_none_or(|r| self.reservation.is_some_and(|id| r.has(id, symbols)));
        self.available
            && reservation
            && filter.zone.is_none_or(|r| r.has(self.zone, symbols))
            && (filter.capacity_type).is_none_or(|r| r.has(self.capacity_type, symbols))
    }
}

/// What a NodeClaim's requirements say of the offerings it may take (their zone, capacity
/// type and reservation), looked up once for a scan over hundreds of types' offerings.
pub struct OfferingFilter<'r> {
    zone: Option<&'r Req>,
    capacity_type: Option<&'r Req>,
    reservation: Option<&'r Req>,
}

impl<'r> OfferingFilter<'r> {
    /// The requirements' terms on the offering keys.
    pub fn new(reqs: &'r Reqs, keys: &OfferingKeys) -> OfferingFilter<'r> {
        OfferingFilter {
            zone: reqs.get(keys.zone),
            capacity_type: reqs.get(keys.capacity_type),
            reservation: keys.reservation_id.and_then(|k| reqs.get(k)),
        }
    }
}

/// An instance type still open to a planned NodeClaim.
pub struct Candidate<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its labels as requirements.
    pub reqs: &'a Reqs,
    /// Its offerings.
    pub offerings: &'a [CompiledOffering],
}

/// Orders, cuts and picks: a reservation with room first (Karpenter's order: reserved, spot,
/// on-demand), and a reservation without room is no offering at all. `None` when no
/// candidate has an available allowed offering.
pub fn choose(
    candidates: &[Candidate<'_>],
    reqs: &Reqs,
    keys: &OfferingKeys,
    cap: usize,
    symbols: &Symbols,
    room: &dyn Fn(Sym) -> bool,
) -> Option<(Vec<LaunchOption>, Launch)> {
    let filter = OfferingFilter::new(reqs, keys);
    let allowed =
        |o: &&CompiledOffering| o.passes(&filter, symbols) && o.reservation.is_none_or(room);
    let mut priced: Vec<(usize, f64)> = candidates
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            c.offerings
                .iter()
                .filter(allowed)
                .map(|o| o.price_per_hour)
                .min_by(f64::total_cmp)
                .map(|p| (i, p))
        })
        .collect();
    priced.sort_by(|a, b| {
        a.1.total_cmp(&b.1)
            .then_with(|| candidates[a.0].name.cmp(candidates[b.0].name))
    });
    let kept = truncate(&priced, candidates, reqs, cap);

    let offered = |ct: &str| {
        symbols.get(ct).filter(|s| {
            kept.iter().any(|(i, _)| {
                candidates[*i]
                    .offerings
                    .iter()
                    .filter(allowed)
                    .any(|o| o.capacity_type == *s)
            })
        })
    };
    let first_choice =
        offered(labels::CAPACITY_TYPE_RESERVED).or_else(|| offered(labels::CAPACITY_TYPE_SPOT));
    let best = kept
        .iter()
        .flat_map(|(i, _)| {
            candidates[*i]
                .offerings
                .iter()
                .filter(allowed)
                .map(move |o| (*i, o))
        })
        .filter(|(_, o)| first_choice.is_none_or(|c| o.capacity_type == c))
        .min_by(|a, b| {
            a.1.price_per_hour
                .total_cmp(&b.1.price_per_hour)
                .then_with(|| candidates[a.0].name.cmp(candidates[b.0].name))
                .then_with(|| symbols.name(a.1.zone).cmp(symbols.name(b.1.zone)))
        })?;
    let (chosen, offering) = best;
    let launch = Launch {
        instance_type: candidates[chosen].name.to_string(),
        capacity_type: symbols.name(offering.capacity_type).to_string(),
        zone: symbols.name(offering.zone).to_string(),
        price_per_hour: offering.price_per_hour,
        reservation: offering.reservation.map(|r| symbols.name(r).to_string()),
    };
    let options = kept
        .iter()
        .map(|(i, p)| LaunchOption {
            name: candidates[*i].name.to_string(),
            price_per_hour: *p,
        })
        .collect();
    Some((options, launch))
}

/// The cheapest `cap` types, except that types needed to keep each minValues satisfied are
/// taken first (cheapest of those that add a missing value), then the rest by price.
fn truncate(
    priced: &[(usize, f64)],
    candidates: &[Candidate<'_>],
    reqs: &Reqs,
    cap: usize,
) -> Vec<(usize, f64)> {
    let mins: Vec<(Sym, usize)> = reqs
        .iter()
        .filter_map(|(k, r)| r.min_values.map(|m| (k, m as usize)))
        .collect();
    if priced.len() <= cap || mins.is_empty() {
        return priced.iter().take(cap).copied().collect();
    }
    let mut chosen = vec![false; priced.len()];
    for (key, min) in &mins {
        let mut seen: Vec<Sym> = Vec::new();
        for (j, (i, _)) in priced.iter().enumerate() {
            if seen.len() >= *min {
                break;
            }
            let Some(v) = candidates[*i].reqs.get(*key).and_then(|r| r.single()) else {
                continue;
            };
            if !seen.contains(&v) {
                seen.push(v);
                chosen[j] = true;
            }
        }
    }
    let mut room = cap.saturating_sub(chosen.iter().filter(|c| **c).count());
    for c in chosen.iter_mut() {
        if room == 0 {
            break;
        }
        if !*c {
            *c = true;
            room -= 1;
        }
    }
    priced
        .iter()
        .zip(chosen)
        .filter(|(_, c)| *c)
        .map(|(p, _)| *p)
        .collect()
}

/// The NodeClaim's requirements as the API writes them: the narrowed requirements, with
/// the instance type narrowed to the launch options.
pub fn requirements(
    reqs: &Reqs,
    options: &[LaunchOption],
    symbols: &Symbols,
) -> Vec<NodeSelectorRequirementWithMinValues> {
    let mut out = Vec::new();
    for (key, r) in reqs.iter() {
        let name = symbols.name(key);
        if name == labels::INSTANCE_TYPE {
            continue;
        }
        let full = r.to_requirement(name, symbols);
        let (gt, lt) = full.bounds();
        let (operator, values): (Operator, Vec<String>) = match full.values() {
            Some(v) => (Operator::In, v.iter().cloned().collect()),
            None => {
                let excluded: Vec<String> = full.excluded().cloned().collect();
                if excluded.is_empty() {
                    (Operator::Exists, Vec::new())
                } else {
                    (Operator::NotIn, excluded)
                }
            }
        };
        let min_values = r.min_values.map(|m| m as i32);
        let skip_exists = operator == Operator::Exists && (gt.is_some() || lt.is_some());
        if !skip_exists {
            out.push(NodeSelectorRequirementWithMinValues {
                key: name.to_string(),
                operator,
                values,
                min_values,
            });
        }
        for (op, bound) in [(Operator::Gt, gt), (Operator::Lt, lt)] {
            if let Some(b) = bound {
                out.push(NodeSelectorRequirementWithMinValues {
                    key: name.to_string(),
                    operator: op,
                    values: vec![b.to_string()],
                    min_values: None,
                });
            }
        }
    }
    let type_min = reqs
        .iter()
        .find(|(k, _)| symbols.name(*k) == labels::INSTANCE_TYPE)
        .and_then(|(_, r)| r.min_values);
    out.push(NodeSelectorRequirementWithMinValues {
        key: labels::INSTANCE_TYPE.to_string(),
        operator: Operator::In,
        values: options.iter().map(|o| o.name.clone()).collect(),
        min_values: type_min.map(|m| m as i32),
    });
    out
}

/// Pins a NodeClaim's requirements to a reservation, as Karpenter does for a reserved
/// launch: capacity type `reserved` only, and the reservation's id.
pub fn pin_reservation(requirements: &mut Vec<NodeSelectorRequirementWithMinValues>, id: &str) {
    pin(
        requirements,
        labels::CAPACITY_TYPE,
        labels::CAPACITY_TYPE_RESERVED,
    );
    pin(requirements, labels::CAPACITY_RESERVATION_ID, id);
}

/// Narrows a NodeClaim's requirements to `key In [value]`, in place of any requirement on
/// the key, placed before the instance types (which stay last).
pub fn pin(requirements: &mut Vec<NodeSelectorRequirementWithMinValues>, key: &str, value: &str) {
    requirements.retain(|r| r.key != key);
    let at = requirements
        .iter()
        .position(|r| r.key == labels::INSTANCE_TYPE)
        .unwrap_or(requirements.len());
    let pinned = NodeSelectorRequirementWithMinValues {
        key: key.to_string(),
        operator: Operator::In,
        values: vec![value.to_string()],
        min_values: None,
    };
    requirements.insert(at, pinned);
}
