//! Turning a NodePool's rejection of a pod into a reason people can act on, with the
//! numbers on each side.

use kerf_api::{Taint, TaintEffect, labels};

use super::*;
use crate::amounts::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
use crate::bitset::BitSet;
use crate::interned::Conflict;
use crate::reasons::Why;

impl State<'_> {
    /// Turns a rejection of a new NodeClaim into a reason users can act on.
    pub(super) fn explain(
        &mut self,
        pod: usize,
        a: &Attempt,
        pool: usize,
        fresh: &Bin,
        cause: Cause,
    ) -> Why {
        let np = &self.problem.node_pools[self.pools[pool].input];
        match cause {
            Cause::Taint(i) => Why::TaintNotTolerated {
                taint: taint_text(&np.taints[i]),
            },
            Cause::Requirements(Conflict::Undefined(k)) => Why::UndefinedLabel {
                key: self.symbols.name(k).to_string(),
            },
            Cause::Requirements(Conflict::Disjoint(k)) => {
                let name = self.symbols.name(k);
                let pod_req = a
                    .reqs
                    .get(k)
                    .map(|r| r.to_requirement(name, &self.symbols).to_string());
                let pool_req = fresh
                    .reqs
                    .get(k)
                    .map(|r| r.to_requirement(name, &self.symbols).to_string());
                Why::Requirement {
                    pod: pod_req.unwrap_or_default(),
                    node_pool: pool_req.unwrap_or_default(),
                }
            }
            Cause::Hostname => Why::Requirement {
                pod: a
                    .host
                    .as_ref()
                    .map(|r| {
                        r.to_requirement(labels::HOSTNAME, &self.symbols)
                            .to_string()
                    })
                    .unwrap_or_default(),
                node_pool: "a new node".into(),
            },
            Cause::Topology(id) => Why::Topology {
                constraint: self.topology.describe(id, &self.symbols),
            },
            Cause::MinValues(k, min) => Why::MinValues {
                key: self.symbols.name(k).to_string(),
                min,
            },
            Cause::NoTypes | Cause::Resources | Cause::Ports | Cause::Reserved => {
                let reqs = fresh.reqs.intersection(&a.reqs, &self.symbols);
                let p = &self.pools[pool];
                let labels_match = p
                    .types
                    .iter()
                    .any(|t| t.reqs.intersects(&reqs, &self.symbols).is_ok());
                if labels_match {
                    Why::NoAvailableOffering
                } else {
                    Why::NoInstanceTypeMatches
                }
            }
            Cause::Fit => {
                let p = &self.pools[pool];
                let compat = || fresh.types().into_iter().flat_map(BitSet::iter);
                let max = compat()
                    .map(|i| p.types[i].allocatable)
                    .reduce(|x, y| x.max(&y))
                    .unwrap_or_default();
                let total = p.overhead.plus(&self.pods[pod].requests);
                let mut short: Vec<usize> = total.exceeding(&max).collect();
                if short.is_empty() {
                    short = (0..total.0.len())
                        .filter(|i| total.0[*i] > 0 && *i != PODS)
                        .collect();
                }
                let largest = short.first().and_then(|&slot| {
                    compat()
                        .max_by_key(|i| p.types[*i].allocatable.0[slot])
                        .map(|i| {
                            let t = &p.types[i];
                            let left = t.allocatable.0[slot] - p.overhead.0[slot];
                            (
                                np.instance_types[t.index].name.clone(),
                                amount_text(slot, left.max(0)),
                            )
                        })
                });
                let needs = short
                    .into_iter()
                    .map(|i| (self.dims.name(i).to_string(), amount_text(i, total.0[i])))
                    .collect();
                Why::NoInstanceTypeHas { needs, largest }
            }
            Cause::Limit => {
                let p = &self.pools[pool];
                let compat = || fresh.types().into_iter().flat_map(BitSet::iter);
                // the types that could host the pod, when any: the others never launch for it
                let total = p.overhead.plus(&self.pods[pod].requests);
                let hosting = compat().filter(|i| total.fits(&p.types[*i].allocatable));
                let smallest = hosting
                    .map(|i| p.types[i].capacity)
                    .reduce(|x, y| x.min(&y))
                    .or_else(|| {
                        compat()
                            .map(|i| p.types[i].capacity)
                            .reduce(|x, y| x.min(&y))
                    })
                    .unwrap_or_default();
                let slot = smallest.exceeding(&p.remaining).next().unwrap_or(CPU);
                let resource = self.dims.name(slot).to_string();
                let limit = np.limits.get(&resource).copied().unwrap_or_default();
                Why::LimitReached {
                    limit: amount_text(slot, limit),
                    in_use: amount_text(slot, limit - p.remaining.0[slot]),
                    smallest: amount_text(slot, smallest.0[slot]),
                    resource,
                }
            }
        }
    }
}

pub(super) fn taint_text(t: &Taint) -> String {
    let effect = match t.effect {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    };
    match &t.value {
        Some(v) if !v.is_empty() => format!("{}={}:{}", t.key, v, effect),
        _ => format!("{}:{}", t.key, effect),
    }
}

/// An amount as users write it: cores for cpu, binary units for bytes, plain counts.
pub(super) fn amount_text(slot: usize, v: i64) -> String {
    match slot {
        CPU => kerf_api::Quantity::from_milli(v).as_str().to_string(),
        MEMORY | EPHEMERAL_STORAGE => crate::resources::bytes_quantity(v).as_str().to_string(),
        _ => v.to_string(),
    }
}
