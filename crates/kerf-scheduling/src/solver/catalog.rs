//! Instance types compiled once and reused by the solves that follow.
//!
//! A NodePool's catalog (hundreds of types, each with its labels and offerings) changes when
//! the cloud's answer or the unavailable offerings change, a few times an hour; the
//! controllers solve every few seconds. Compiling the catalog into symbols cost as much as
//! the rest of a consolidation pass, so a [`Catalog`] keeps it: the types' labels are
//! interned into a shared base table that each solve's own table sits over, and each
//! NodePool's compiled types are kept while its input's type list (the same `Arc`) and its
//! requirements stay the same. A NodePool capped at a size ([`NodePoolInput::largest`]) or
//! with spot taken out ([`Catalog::without_spot`]) reuses them too.
//!
//! The existing nodes' labels are kept the same way: each node's label requirements are
//! compiled into the base table once and kept while the node's labels are the same map
//! (the same `Arc`); a disruption pass compiles every node up to six times, and doing it
//! afresh each time was 5 % of a simulated day.
//!
//! So are cost bounds over pods alone ([`crate::cost_bound`] without existing nodes): a
//! consolidation pass bounds the pods of the same few nodes pass after pass (a split is
//! tried only where the bound leaves room), and those linear programs were 60 % of a swarm
//! run. A bound is given again while the NodePools' type lists are the same `Arc`s and a
//! fingerprint of everything else it read is the same.

use std::collections::BTreeMap;
use std::sync::Arc;

use kerf_api::NodeSelectorRequirementWithMinValues;
use kerf_api::labels;
use rustc_hash::FxHashMap;

use super::Reqs;
use super::bound::CostBound;
use crate::input::{ExistingNode, InstanceTypeOption, NodePoolInput};
use crate::interned::Req;
use crate::launch::CompiledOffering;
use crate::pods;
use crate::requirements::Requirement;
use crate::symbols::Symbols;

/// How many solves a NodePool's compiled types, or a node's labels, outlive their last use.
const KEPT_FOR: u64 = 16;

/// How many cost bounds are kept: a pass bounds a few nodes' pods, and a cluster's nodes
/// change their pods now and then.
const KEPT_BOUNDS: usize = 1024;

/// How many strings the base table may gain beyond what it held after its first solves
/// before it is started afresh: a long-running operator sees node after node come and go,
/// each with labels of its own (a hostname is never interned here, but a cloud may add
/// others), and the base only ever grows.
const BASE_GROWTH: usize = 1 << 16;

/// Compiled instance types kept between solves (see the module doc). Pass the same one to
/// every solve of a cluster ([`crate::solve_with`], [`crate::Session::with_catalog`]); a
/// fresh one gives the same answers, compiled again.
#[derive(Debug)]
pub struct Catalog {
    symbols: Arc<Symbols>,
    pools: Vec<Entry>,
    solves: u64,
    /// Type lists with their spot offerings taken out, each with the list it came from.
    without_spot: Vec<(TypeList, TypeList)>,
    /// Existing nodes' label requirements, by the address of their labels' map (the map is
    /// held here too, so no other map takes that address while the entry is kept).
    nodes: FxHashMap<usize, NodeLabels>,
    /// The base table's size past which it is started afresh.
    base_limit: usize,
    /// Cost bounds over pods alone, by the fingerprint of what they read.
    bounds: FxHashMap<u64, KeptBound>,
    /// Counts the bounds asked for, to tell the least recently used.
    bounds_asked: u64,
}

/// What a cost bound over pods alone read: the NodePools' type lists (held, so that no
/// other list takes their addresses while the bound is kept) and a fingerprint of the rest.
#[derive(Debug)]
pub(super) struct BoundKey {
    pub(super) types: Vec<TypeList>,
    pub(super) fingerprint: u64,
}

/// Where a type list lives: the same list (the same `Arc`) while it is held.
pub(super) fn list_address(types: &TypeList) -> usize {
    Arc::as_ptr(types).cast::<u8>().addr()
}

/// A cost bound kept with what it read.
#[derive(Debug)]
struct KeptBound {
    types: Vec<TypeList>,
    bound: CostBound,
    used: u64,
}

/// What a solve starts from: the base symbol table, each NodePool's compiled types and
/// each existing node's label requirements (in the problem's orders).
pub(super) struct Prepared {
    pub(super) symbols: Arc<Symbols>,
    pub(super) types: Vec<Arc<[CompiledType]>>,
    pub(super) nodes: Vec<Arc<Reqs>>,
}

/// A node's labels as requirements, compiled into the base table.
#[derive(Debug)]
struct NodeLabels {
    labels: Arc<BTreeMap<String, String>>,
    reqs: Arc<Reqs>,
    used: u64,
}

/// A NodePool's instance types, shared.
type TypeList = Arc<[InstanceTypeOption]>;

/// One NodePool's types as compiled, with what they were compiled from.
#[derive(Debug)]
struct Entry {
    types: Arc<[InstanceTypeOption]>,
    requirements: Vec<NodeSelectorRequirementWithMinValues>,
    compiled: Arc<[CompiledType]>,
    used: u64,
}

/// An instance type as every solve sees it, whatever its pods.
#[derive(Clone, Debug)]
pub(super) struct CompiledType {
    /// Its place in the NodePool input's instance types.
    pub(super) index: usize,
    /// Its labels, zones and capacity types as requirements.
    pub(super) reqs: Arc<Reqs>,
    pub(super) offerings: Arc<[CompiledOffering]>,
}

impl Default for Catalog {
    fn default() -> Catalog {
        let mut symbols = Symbols::new();
        // the well-known keys first, as every solve's table starts: their numbers mark them
        pods::intern_well_known(&mut symbols);
        Catalog {
            symbols: Arc::new(symbols),
            pools: Vec::new(),
            solves: 0,
            without_spot: Vec::new(),
            nodes: FxHashMap::default(),
            base_limit: 0,
            bounds: FxHashMap::default(),
            bounds_asked: 0,
        }
    }
}

impl Catalog {
    /// The base symbol table, each NodePool's compiled types and each of `nodes`' label
    /// requirements (hostname left out), compiling what is new and forgetting what went
    /// unused for [`KEPT_FOR`] solves.
    pub(super) fn prepare(&mut self, pools: &[NodePoolInput], nodes: &[ExistingNode]) -> Prepared {
        if self.base_limit > 0 && self.symbols.len() > self.base_limit {
            let without_spot = std::mem::take(&mut self.without_spot);
            *self = Catalog {
                without_spot,
                ..Catalog::default()
            };
        }
        self.solves += 1;
        let solves = self.solves;
        let compiled = pools
            .iter()
            .map(|np| {
                let found = self.pools.iter_mut().find(|e| {
                    Arc::ptr_eq(&e.types, &np.instance_types) && e.requirements == np.requirements
                });
                let compiled = match found {
                    Some(e) => {
                        e.used = solves;
                        e.compiled.clone()
                    }
                    None => {
                        let compiled = compile(np, Arc::make_mut(&mut self.symbols));
                        self.pools.push(Entry {
                            types: np.instance_types.clone(),
                            requirements: np.requirements.clone(),
                            compiled: compiled.clone(),
                            used: solves,
                        });
                        compiled
                    }
                };
                match np.largest {
                    Some(_) => no_larger(np, &compiled),
                    None => compiled,
                }
            })
            .collect();
        self.pools.retain(|e| e.used + KEPT_FOR > solves);
        let node_reqs = nodes.iter().map(|n| self.node_labels(n)).collect();
        self.nodes.retain(|_, e| e.used + KEPT_FOR > solves);
        if self.base_limit == 0 {
            self.base_limit = self.symbols.len() + BASE_GROWTH;
        }
        Prepared {
            symbols: self.symbols.clone(),
            types: compiled,
            nodes: node_reqs,
        }
    }

    /// A node's label requirements, hostname left out (bins carry it apart).
    fn node_labels(&mut self, node: &ExistingNode) -> Arc<Reqs> {
        let solves = self.solves;
        let entry = self
            .nodes
            .entry(Arc::as_ptr(&node.labels) as usize)
            .or_insert_with(|| {
                let symbols = Arc::make_mut(&mut self.symbols);
                let mut reqs = Reqs::new();
                for (k, v) in node.labels.iter().filter(|(k, _)| *k != labels::HOSTNAME) {
                    let (key, value) = (symbols.intern(k), symbols.intern(v));
                    reqs.add(key, Req::one(value), symbols);
                }
                NodeLabels {
                    labels: node.labels.clone(),
                    reqs: Arc::new(reqs),
                    used: solves,
                }
            });
        debug_assert!(Arc::ptr_eq(&entry.labels, &node.labels));
        entry.used = solves;
        entry.reqs.clone()
    }

    /// The bound kept for `key`, if one is.
    pub(super) fn kept_bound(&mut self, key: &BoundKey) -> Option<CostBound> {
        self.bounds_asked += 1;
        let kept = self.bounds.get_mut(&key.fingerprint).filter(|k| {
            k.types.len() == key.types.len()
                && (k.types.iter().zip(&key.types)).all(|(a, b)| Arc::ptr_eq(a, b))
        })?;
        kept.used = self.bounds_asked;
        Some(kept.bound.clone())
    }

    /// Keeps `bound` for `key`. The bounds over a type list no one but this catalog holds
    /// any more go (no one can ask with that list again, and keeping it would keep every
    /// list the cloud's offerings ever made alive); past [`KEPT_BOUNDS`], the least
    /// recently used goes too.
    pub(super) fn keep_bound(&mut self, key: BoundKey, bound: CostBound) {
        // the catalog's own references: kept bounds, compiled types, lists without spot
        let mut held: FxHashMap<usize, usize> = FxHashMap::default();
        let own = (self.bounds.values().flat_map(|k| &k.types))
            .chain(self.pools.iter().map(|e| &e.types))
            .chain(
                self.without_spot
                    .iter()
                    .flat_map(|(from, kept)| [from, kept]),
            );
        for t in own {
            *held.entry(list_address(t)).or_default() += 1;
        }
        (self.bounds).retain(|_, k| {
            (k.types.iter())
                .all(|t| Arc::strong_count(t) > held.get(&list_address(t)).copied().unwrap_or(0))
        });
        if self.bounds.len() >= KEPT_BOUNDS
            && let Some(oldest) = (self.bounds.iter())
                .min_by_key(|(_, k)| k.used)
                .map(|(f, _)| *f)
        {
            self.bounds.remove(&oldest);
        }
        let kept = KeptBound {
            types: key.types,
            bound,
            used: self.bounds_asked,
        };
        self.bounds.insert(key.fingerprint, kept);
    }

    /// `types` with their spot offerings taken out, and the types left with none: what a
    /// NodePool may launch when spot is ruled out (a spot node's replacement with
    /// SpotToSpotConsolidation off). The same list (the same `Arc`) comes back for as long
    /// as `types` is the same list, so the types compiled for it are kept as well.
    pub fn without_spot(&mut self, types: &TypeList) -> TypeList {
        // a list no one but this catalog holds any more will not be asked for again
        self.without_spot
            .retain(|(from, _)| Arc::strong_count(from) > 1);
        if let Some((_, kept)) =
            (self.without_spot.iter()).find(|(from, _)| Arc::ptr_eq(from, types))
        {
            return kept.clone();
        }
        let kept: TypeList = (types.iter())
            .filter_map(|t| {
                let offerings: Vec<crate::input::Offering> = (t.offerings.iter())
                    .filter(|o| o.capacity_type != labels::CAPACITY_TYPE_SPOT)
                    .cloned()
                    .collect();
                (!offerings.is_empty()).then(|| InstanceTypeOption {
                    offerings,
                    ..t.clone()
                })
            })
            .collect();
        self.without_spot.push((types.clone(), kept.clone()));
        kept
    }
}

/// The compiled types of `np` within its [`NodePoolInput::largest`].
fn no_larger(np: &NodePoolInput, compiled: &[CompiledType]) -> Arc<[CompiledType]> {
    (compiled.iter())
        .filter(|t| np.within_largest(&np.instance_types[t.index]))
        .cloned()
        .collect()
}

/// The types of `np`'s catalog its requirements' labels allow, compiled into `symbols`.
fn compile(np: &NodePoolInput, symbols: &mut Symbols) -> Arc<[CompiledType]> {
    let zone = symbols.intern(labels::ZONE);
    let capacity_type = symbols.intern(labels::CAPACITY_TYPE);
    // types the NodePool's own requirements rule out by their labels never compile
    let label_rules: Vec<Requirement> = np.requirements.iter().map(Requirement::from_api).collect();
    np.instance_types
        .iter()
        .enumerate()
        .filter(|(_, it)| {
            label_rules
                .iter()
                .all(|r| it.labels.get(&r.key).is_none_or(|v| r.has(v)))
        })
        .map(|(index, it)| {
            let mut reqs = pods::selector_reqs(Some(&it.labels), symbols);
            let offerings: Vec<CompiledOffering> = it
                .offerings
                .iter()
                .map(|o| CompiledOffering {
                    zone: symbols.intern(&o.zone),
                    capacity_type: symbols.intern(&o.capacity_type),
                    price_per_hour: o.price_per_hour,
                    // a reservation without room is no offering at all, as in Karpenter
                    available: o.available && o.reservation.as_ref().is_none_or(|r| r.capacity > 0),
                    reservation: o.reservation.as_ref().map(|r| symbols.intern(&r.id)),
                })
                .collect();
            reqs.add(
                zone,
                Req::any_of(offerings.iter().map(|o| o.zone).collect()),
                symbols,
            );
            reqs.add(
                capacity_type,
                Req::any_of(offerings.iter().map(|o| o.capacity_type).collect()),
                symbols,
            );
            CompiledType {
                index,
                reqs: Arc::new(reqs),
                offerings: offerings.into(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: &[(&str, &str)]) -> ExistingNode {
        ExistingNode {
            name: name.into(),
            labels: Arc::new(
                (labels.iter())
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            taints: Vec::new(),
            allocatable: Default::default(),
            requested: Default::default(),
            initialized: true,
        }
    }

    #[test]
    fn node_labels_are_compiled_once_per_map_and_the_base_starts_afresh_past_its_limit() {
        let pools = [crate::benchmark::node_pool()];
        let mut catalog = Catalog::default();
        let a = node(
            "a",
            &[(labels::HOSTNAME, "a"), (labels::ZONE, "us-east-1a")],
        );
        let first = catalog.prepare(&pools, std::slice::from_ref(&a)).nodes;
        let size = catalog.symbols.len();
        let Prepared {
            symbols: base,
            nodes: again,
            ..
        } = catalog.prepare(&pools, std::slice::from_ref(&a));
        assert!(Arc::ptr_eq(&first[0], &again[0]), "the same map: kept");
        assert_eq!(catalog.symbols.len(), size, "nothing new interned");
        assert_eq!(base.get("a"), None, "a hostname never enters the base");
        let zone = base.get(labels::ZONE).expect("interned");
        assert_eq!(
            again[0].get(zone),
            Some(&Req::one(base.get("us-east-1a").unwrap()))
        );

        // the same labels in another map are compiled for it
        let b = node(
            "a",
            &[(labels::HOSTNAME, "a"), (labels::ZONE, "us-east-1a")],
        );
        let other = catalog.prepare(&pools, std::slice::from_ref(&b)).nodes;
        assert!(!Arc::ptr_eq(&first[0], &other[0]));
        assert_eq!(*first[0], *other[0]);

        // node after node with labels of its own: the base grows to its limit, then starts
        // afresh, its pools compiled again
        let mut restarted = false;
        for round in 0..80 {
            let nodes: Vec<ExistingNode> = (0..1000)
                .map(|i| node("n", &[("unique", &format!("{round}-{i}"))]))
                .collect();
            let before = catalog.symbols.len();
            catalog.prepare(&pools, &nodes);
            restarted |= catalog.symbols.len() < before;
            assert!(catalog.symbols.len() <= catalog.base_limit + 1000);
        }
        assert!(restarted, "the base never started afresh");
        assert!(catalog.nodes.len() <= 1000 * KEPT_FOR as usize);
    }

    #[test]
    fn a_spot_less_list_is_kept_while_its_source_is_held_and_has_no_spot_offering() {
        let mut types = crate::benchmark::instance_types();
        // one type offered as spot only: it has nothing left without spot
        types[0]
            .offerings
            .retain(|o| o.capacity_type == labels::CAPACITY_TYPE_SPOT);
        let types: Arc<[InstanceTypeOption]> = types.into();
        let mut catalog = Catalog::default();

        let first = catalog.without_spot(&types);
        assert_eq!(
            first.len(),
            types.len() - 1,
            "the spot-only type is dropped"
        );
        assert_eq!(first[0].name, types[1].name);
        let spot = |list: &[InstanceTypeOption]| {
            (list.iter().flat_map(|t| &t.offerings))
                .filter(|o| o.capacity_type == labels::CAPACITY_TYPE_SPOT)
                .count()
        };
        assert_eq!(spot(&first), 0);
        assert_eq!(
            first.iter().map(|t| t.offerings.len()).sum::<usize>(),
            types.iter().map(|t| t.offerings.len()).sum::<usize>() - spot(&types),
            "every other offering stays"
        );
        assert!(
            Arc::ptr_eq(&first, &catalog.without_spot(&types)),
            "the same list again"
        );

        // an equal list that is another one gets its own; the first, held by no one else
        // now, is forgotten
        let other: Arc<[InstanceTypeOption]> = types.to_vec().into();
        drop(types);
        let second = catalog.without_spot(&other);
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(catalog.without_spot.len(), 1);
    }
}
