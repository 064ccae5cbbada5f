//! Instance types compiled once and reused by the solves that follow.
//!
//! A NodePool's catalog (hundreds of types, each with its labels and offerings) changes when
//! the cloud's answer or the unavailable offerings change, a few times an hour; the
//! controllers solve every few seconds. Compiling the catalog into symbols cost as much as
//! the rest of a consolidation pass, so a [`Catalog`] keeps it: the types' labels are
//! interned into a shared base table that each solve's own table sits over, and each
//! NodePool's compiled types are kept while its input's type list (the same `Arc`) and its
//! requirements stay the same.

use std::sync::Arc;

use kerf_api::NodeSelectorRequirementWithMinValues;
use kerf_api::labels;

use super::{NodeSize, Reqs};
use crate::input::{InstanceTypeOption, NodePoolInput};
use crate::interned::Req;
use crate::launch::CompiledOffering;
use crate::pods;
use crate::requirements::Requirement;
use crate::symbols::Symbols;

/// How many solves a NodePool's compiled types outlive their last use.
const KEPT_FOR: u64 = 16;

/// Compiled instance types kept between solves (see the module doc). Pass the same one to
/// every solve of a cluster ([`crate::solve_with`], [`crate::Session::with_catalog`]); a
/// fresh one gives the same answers, compiled again.
#[derive(Debug)]
pub struct Catalog {
    symbols: Arc<Symbols>,
    pools: Vec<Entry>,
    solves: u64,
}

/// One NodePool's types as compiled, with what they were compiled from.
#[derive(Debug)]
struct Entry {
    types: Arc<[InstanceTypeOption]>,
    requirements: Vec<NodeSelectorRequirementWithMinValues>,
    compiled: Arc<[CompiledType]>,
    used: u64,
}

/// An instance type as every solve sees it, whatever its pods.
#[derive(Debug)]
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
        }
    }
}

impl Catalog {
    /// The base symbol table and each NodePool's compiled types, compiling what is new and
    /// forgetting NodePools' types unused for [`KEPT_FOR`] solves.
    pub(super) fn prepare(
        &mut self,
        pools: &[NodePoolInput],
    ) -> (Arc<Symbols>, Vec<Arc<[CompiledType]>>) {
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
                    Some(size) => no_larger(np, &compiled, size),
                    None => compiled,
                }
            })
            .collect();
        self.pools.retain(|e| e.used + KEPT_FOR > solves);
        (self.symbols.clone(), compiled)
    }
}

/// The compiled types of `np` no larger than `size` in cpu and memory.
fn no_larger(np: &NodePoolInput, compiled: &[CompiledType], size: NodeSize) -> Arc<[CompiledType]> {
    (compiled.iter())
        .filter(|t| {
            let capacity = &np.instance_types[t.index].capacity;
            capacity.cpu_millis <= size.cpu_millis && capacity.memory_bytes <= size.memory_bytes
        })
        .map(|t| CompiledType {
            index: t.index,
            reqs: t.reqs.clone(),
            offerings: t.offerings.clone(),
        })
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
