//! NodeOverlays laid over the instance types each NodePool sees (Karpenter's `NodeOverlay`
//! feature gate), as Karpenter v1.15 lays them: overlays taken by weight, heaviest first (of
//! equal weights, the name that sorts last first); per offering only the first price change
//! counts, per instance type and resource the first capacity; an overlay that would change
//! what an overlay of the same weight already changed is a conflict and applies nowhere. An
//! overlay selects an instance type by its labels, the NodePool's template labels and
//! `karpenter.sh/nodepool`, and offerings by zone and capacity type. Prices changed here are
//! the ones every price-based decision uses: the launch order, consolidation, `kerf explain`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use kerf_api::nodeoverlay::{NodeOverlay, adjusted_price};
use kerf_api::{NodePool, Operator, Validate, labels};
use kerf_scheduling::InstanceTypeOption;
use kerf_scheduling::requirements::{Requirement, Requirements};
use kerf_scheduling::resources::Resources;

/// Why an overlay applies nowhere, as its `ValidationSucceeded` condition says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It failed Karpenter's runtime validation.
    RuntimeValidation(String),
    /// An overlay of the same weight already changed what it would change.
    Conflict,
}

/// The overlays applied to every NodePool's instance types.
#[derive(Clone, Debug, Default)]
pub struct Evaluation {
    /// Per NodePool, its instance types with the overlays applied (only NodePools an
    /// overlay changed).
    pub by_pool: BTreeMap<String, Arc<[InstanceTypeOption]>>,
    /// The overlays that apply nowhere, and why.
    pub refused: BTreeMap<String, Refusal>,
}

/// A change planned to one offering's price or one type's capacity, with the lowest weight
/// of the overlays that selected it.
struct Update<T> {
    value: T,
    lowest_weight: i32,
}

/// Where the overlays apply: the NodePools by name with their instance types.
pub fn evaluate(
    overlays: &BTreeMap<String, NodeOverlay>,
    pools: &[(String, NodePool, Arc<[InstanceTypeOption]>)],
) -> Evaluation {
    let mut ordered: Vec<(&String, &NodeOverlay)> = overlays.iter().collect();
    let weight = |o: &NodeOverlay| o.spec.weight.unwrap_or(0);
    ordered.sort_by(|a, b| weight(b.1).cmp(&weight(a.1)).then(b.0.cmp(a.0)));
    let mut prices: HashMap<(usize, usize, usize), Update<f64>> = HashMap::new();
    let mut capacity: HashMap<(usize, usize), Update<BTreeMap<String, i64>>> = HashMap::new();
    let mut out = Evaluation::default();
    for (name, overlay) in ordered {
        let problems = overlay.validate();
        if let Some(p) = problems.first() {
            let refusal = Refusal::RuntimeValidation(format!("{}: {}", p.path, p.message));
            out.refused.insert(name.clone(), refusal);
            continue;
        }
        let w = weight(overlay);
        let reqs = Requirements::from_api(&overlay.spec.requirements);
        let changes_price = overlay.spec.price.is_some() || overlay.spec.price_adjustment.is_some();
        let extra = extended(&overlay.spec.capacity);
        let mut touched_prices = Vec::new();
        let mut touched_types = Vec::new();
        let mut conflict = false;
        for (p, (pool, np, types)) in pools.iter().enumerate() {
            let mut pool_labels = np.spec.template.metadata.labels.clone();
            pool_labels.insert(labels::NODEPOOL.into(), pool.clone());
            for (t, it) in types.iter().enumerate() {
                let offerings = selected(&reqs, it, &pool_labels);
                if offerings.is_empty() {
                    continue;
                }
                if changes_price {
                    for o in offerings {
                        conflict |= prices.get(&(p, t, o)).is_some_and(|u| u.lowest_weight == w);
                        touched_prices.push((p, t, o));
                    }
                }
                if !extra.is_empty() {
                    conflict |= capacity.get(&(p, t)).is_some_and(|u| {
                        u.lowest_weight == w && u.value.keys().any(|k| extra.contains_key(k))
                    });
                    touched_types.push((p, t));
                }
            }
        }
        if conflict {
            out.refused.insert(name.clone(), Refusal::Conflict);
            continue;
        }
        for (p, t, o) in touched_prices {
            let base = pools[p].2[t].offerings[o].price_per_hour;
            let update = prices.entry((p, t, o)).or_insert_with(|| Update {
                value: adjusted_price(&overlay.spec, base).unwrap_or(base),
                lowest_weight: w,
            });
            update.lowest_weight = update.lowest_weight.min(w);
        }
        for (p, t) in touched_types {
            let update = capacity.entry((p, t)).or_insert_with(|| Update {
                value: BTreeMap::new(),
                lowest_weight: w,
            });
            for (k, v) in &extra {
                update.value.entry(k.clone()).or_insert(*v);
            }
            update.lowest_weight = update.lowest_weight.min(w);
        }
    }
    let changed: BTreeSet<usize> = (prices.keys().map(|k| k.0))
        .chain(capacity.keys().map(|k| k.0))
        .collect();
    for p in changed {
        let mut types = pools[p].2.to_vec();
        for ((q, t, o), u) in &prices {
            if *q == p {
                types[*t].offerings[*o].price_per_hour = u.value;
            }
        }
        for ((q, t), u) in &capacity {
            if *q == p {
                add_capacity(&mut types[*t], &u.value);
            }
        }
        out.by_pool.insert(pools[p].0.clone(), types.into());
    }
    out
}

/// The extended resources of an overlay's capacity, in the scheduler's units.
fn extended(capacity: &kerf_api::ResourceList) -> BTreeMap<String, i64> {
    let texts: Vec<(String, String)> = (capacity.iter())
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    Resources::from_quantities(texts.iter().map(|(k, v)| (k, v.as_str()))).extended
}

/// The indices of the type's offerings the requirements select, given the type's labels and
/// the NodePool's; none when a type-level requirement rules the type out.
fn selected(
    reqs: &Requirements,
    it: &InstanceTypeOption,
    pool_labels: &BTreeMap<String, String>,
) -> Vec<usize> {
    let offering_keys = [labels::ZONE, labels::CAPACITY_TYPE];
    let type_ok = reqs
        .iter()
        .filter(|r| !offering_keys.contains(&r.key.as_str()))
        .all(
            |r| match it.labels.get(&r.key).or_else(|| pool_labels.get(&r.key)) {
                Some(v) => r.has(v),
                None => matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist),
            },
        );
    if !type_ok {
        return Vec::new();
    }
    let (zone, capacity_type): (Requirement, Requirement) =
        (reqs.get(labels::ZONE), reqs.get(labels::CAPACITY_TYPE));
    (it.offerings.iter().enumerate())
        .filter(|(_, o)| zone.has(&o.zone) && capacity_type.has(&o.capacity_type))
        .map(|(i, _)| i)
        .collect()
}

/// Adds extended resources to a type's capacity and allocatable (hugepages also come out of
/// allocatable memory, as the kubelet reserves them).
fn add_capacity(it: &mut InstanceTypeOption, extra: &BTreeMap<String, i64>) {
    for (k, v) in extra {
        it.capacity.extended.insert(k.clone(), *v);
        it.allocatable.extended.insert(k.clone(), *v);
        if k.starts_with("hugepages-") {
            it.allocatable.memory_bytes = it.allocatable.memory_bytes.saturating_sub(*v).max(0);
        }
    }
}

/// The price of an offering of `instance_type` in `zone` of `capacity_type` among `types`.
pub fn price_of(
    types: &[InstanceTypeOption],
    instance_type: &str,
    zone: &str,
    capacity_type: &str,
) -> Option<f64> {
    let it = types.iter().find(|t| t.name == instance_type)?;
    (it.offerings.iter())
        .find(|o| o.zone == zone && o.capacity_type == capacity_type)
        .map(|o| o.price_per_hour)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_scheduling::Offering;

    fn it(name: &str, family: &str, price: f64) -> InstanceTypeOption {
        InstanceTypeOption {
            name: name.into(),
            labels: Arc::new(BTreeMap::from([
                (labels::INSTANCE_TYPE.to_string(), name.to_string()),
                (
                    "karpenter.k8s.aws/instance-family".to_string(),
                    family.to_string(),
                ),
            ])),
            capacity: Resources::default(),
            allocatable: Resources {
                memory_bytes: 8 << 30,
                ..Resources::default()
            },
            offerings: ["on-demand", "spot"]
                .into_iter()
                .map(|ct| Offering {
                    zone: "us-east-1a".into(),
                    capacity_type: ct.into(),
                    price_per_hour: if ct == "spot" { price / 3.0 } else { price },
                    available: true,
                    reservation: None,
                })
                .collect(),
        }
    }

    fn overlay(name: &str, yaml: &str) -> (String, NodeOverlay) {
        let doc = format!(
            "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: {name}}}\nspec:\n{yaml}"
        );
        (
            name.to_string(),
            serde_yaml::from_str(&doc).expect("an overlay"),
        )
    }

    fn pools(names: &[&str]) -> Vec<(String, NodePool, Arc<[InstanceTypeOption]>)> {
        names
            .iter()
            .map(|n| {
                let np: NodePool = serde_yaml::from_str(&format!(
                    "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {n}}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements: []\n"
                ))
                .expect("a NodePool");
                let types: Arc<[InstanceTypeOption]> =
                    vec![it("m5.large", "m5", 0.096), it("c5.large", "c5", 0.085)].into();
                (n.to_string(), np, types)
            })
            .collect()
    }

    fn price(e: &Evaluation, pool: &str, t: &str, ct: &str) -> Option<f64> {
        price_of(e.by_pool.get(pool)?, t, "us-east-1a", ct)
    }

    #[test]
    fn the_heaviest_overlay_prices_an_offering_and_the_lighter_one_adds_nothing() {
        let overlays = BTreeMap::from([
            overlay(
                "savings-plan",
                "  weight: 20\n  priceAdjustment: \"-10%\"\n  requirements:\n  - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}\n  - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n",
            ),
            overlay(
                "everything",
                "  weight: 10\n  priceAdjustment: \"+0.5\"\n  requirements: []\n",
            ),
        ]);
        let e = evaluate(&overlays, &pools(&["default"]));
        assert!(e.refused.is_empty(), "{:?}", e.refused);
        // m5 on-demand: only the heavier overlay's discount
        let m5 = price(&e, "default", "m5.large", "on-demand").unwrap();
        assert!((m5 - 0.0864).abs() < 1e-9, "{m5}");
        // the rest: only the lighter one's
        let c5 = price(&e, "default", "c5.large", "on-demand").unwrap();
        assert!((c5 - 0.585).abs() < 1e-9, "{c5}");
        let spot = price(&e, "default", "m5.large", "spot").unwrap();
        assert!((spot - (0.032 + 0.5)).abs() < 1e-9, "{spot}");
    }

    #[test]
    fn equal_weights_on_the_same_offering_conflict_and_the_later_name_wins() {
        let overlays = BTreeMap::from([
            overlay("a", "  weight: 10\n  price: \"0.01\"\n  requirements: []\n"),
            overlay("b", "  weight: 10\n  price: \"0.02\"\n  requirements: []\n"),
        ]);
        let e = evaluate(&overlays, &pools(&["default"]));
        assert_eq!(e.refused.get("a"), Some(&Refusal::Conflict));
        assert!(!e.refused.contains_key("b"));
        assert_eq!(price(&e, "default", "c5.large", "spot"), Some(0.02));
    }

    #[test]
    fn an_overlay_selects_nodepools_by_name_and_adds_capacity() {
        let overlays = BTreeMap::from([overlay(
            "hugepages",
            "  requirements:\n  - {key: karpenter.sh/nodepool, operator: In, values: [db]}\n  capacity: {hugepages-2Mi: 1Gi}\n",
        )]);
        let e = evaluate(&overlays, &pools(&["default", "db"]));
        assert!(!e.by_pool.contains_key("default"));
        let db = &e.by_pool["db"];
        assert!(
            db.iter()
                .all(|t| t.allocatable.extended["hugepages-2Mi"] == 1 << 30)
        );
        assert!(db.iter().all(|t| t.allocatable.memory_bytes == 7 << 30));
    }

    #[test]
    fn an_overlay_karpenter_would_refuse_applies_nowhere() {
        let overlays = BTreeMap::from([overlay(
            "cpu",
            "  requirements: []\n  capacity: {cpu: \"2\"}\n",
        )]);
        let e = evaluate(&overlays, &pools(&["default"]));
        assert!(matches!(
            e.refused.get("cpu"),
            Some(Refusal::RuntimeValidation(_))
        ));
        assert!(e.by_pool.is_empty());
    }
}
