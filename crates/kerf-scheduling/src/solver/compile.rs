//! Compiling a problem: pending pods, bound pods, NodePools with their instance types and
//! daemonset overhead, and the existing nodes, into interned requirements, amounts and
//! topology counts the fit checks read.

use k8s_openapi::api::core::v1::{Pod, Toleration};
use kerf_api::labels;
use rustc_hash::FxHashMap;

use super::catalog::{Catalog, CompiledType};
use super::fit::domain_owned;
use super::*;
use crate::amounts::{Amounts, Dimensions, NODES};
use crate::input::{ExistingNode, NodePoolInput, Problem};
use crate::interned::{Req, Reqs};
use crate::pods::{self, Compiler, HostPort, PodInfo, Replicas};
use crate::resources::pod_requests;
use crate::symbols::{Sym, Symbols};
use crate::taints::first_untolerated;
use crate::topology::{GroupId, Kind, Topology};

impl<'p> State<'p> {
    /// Compiles the problem with `pending` as its pods (the problem's own, or a session's),
    /// its instance types taken from `catalog` where compiled before.
    pub(super) fn new<'x>(
        problem: &'p Problem<'p>,
        pending: impl IntoIterator<Item = &'x Pod>,
        catalog: &mut Catalog,
    ) -> State<'p> {
        let super::catalog::Prepared {
            symbols: base,
            types: compiled,
            nodes: node_reqs,
        } = catalog.prepare(problem.node_pools, problem.nodes);
        let mut symbols = Symbols::over(base);
        let well_known = pods::intern_well_known(&mut symbols);
        let hostname = symbols.intern(labels::HOSTNAME);
        let offering_keys = crate::launch::OfferingKeys::of(&mut symbols);
        let mut topology = Topology::new(hostname);
        let mut dims = Dimensions::new();

        // pods first: their requests give extended resources their slots
        let mut compiler = Compiler {
            symbols: &mut symbols,
            topology: &mut topology,
            dims: &mut dims,
            preferences: problem.options.preferences,
        };
        let mut replicas = Replicas::default();
        let mut pod_infos: Vec<PodInfo> = (pending.into_iter().enumerate())
            .map(|(i, p)| {
                let requests = problem.requests.get(i);
                let terms = problem.terms.get(i).copied();
                let (mut info, copied) =
                    replicas.compile(p, terms, || compiler.compile(p, requests));
                if copied {
                    // replicas may be resized in place: each keeps its own requests
                    info.requests = (compiler.dims)
                        .request(&requests.cloned().unwrap_or_else(|| pod_requests(p)));
                }
                info
            })
            .collect();
        debug_assert!(
            problem.requests.is_empty() || problem.requests.len() == pod_infos.len(),
            "requests are given for every pod to place or for none"
        );
        let has_groups = !compiler.topology.groups().is_empty();
        let mut bound_replicas = Replicas::default();
        let bound: Vec<Bound> = problem
            .bound_pods
            .iter()
            .filter(|b| {
                // without topology groups a bound pod matters only through its anti-affinity
                has_groups
                    || b.pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.affinity.as_ref())
                        .is_some_and(|a| a.pod_anti_affinity.is_some())
            })
            .map(|b| {
                let ((namespace, labels, owned), _) =
                    bound_replicas.compile(b.pod, b.terms, || {
                        let ns = compiler.symbols.intern(pods::namespace_of(b.pod));
                        let labels: Arc<[(Sym, Sym)]> =
                            pods::labels_of(b.pod.metadata.labels.as_ref(), compiler.symbols)
                                .into();
                        let owned: Arc<[GroupId]> = (b.pod.spec.as_ref())
                            .and_then(|s| s.affinity.as_ref())
                            .and_then(|a| a.pod_anti_affinity.as_ref())
                            .and_then(|a| {
                                a.required_during_scheduling_ignored_during_execution
                                    .as_ref()
                            })
                            .into_iter()
                            .flatten()
                            .map(|term| compiler.term_group(term, Kind::InverseAnti, ns))
                            .collect();
                        (ns, labels, owned)
                    });
                Bound {
                    node: b.node,
                    namespace,
                    labels,
                    owned,
                }
            })
            .collect();
        let ds_requests: Vec<Amounts> = problem
            .daemonsets
            .iter()
            .map(|d| compiler.dims.request(&pod_requests(d)))
            .collect();
        pods::link(&mut pod_infos, &topology);
        // equal tolerations, equal ids; replicas share theirs, so each list is written out once
        let mut toleration_index: FxHashMap<String, u64> = FxHashMap::default();
        let mut shared: FxHashMap<*const Toleration, u64> = FxHashMap::default();
        let toleration_ids = pod_infos
            .iter()
            .map(|p| {
                *shared.entry(p.tolerations.as_ptr()).or_insert_with(|| {
                    let next = toleration_index.len() as u64;
                    *toleration_index
                        .entry(format!("{:?}", p.tolerations))
                        .or_insert(next)
                })
            })
            .collect();

        let min_request = pod_infos
            .iter()
            .map(|p| p.requests)
            .reduce(|a, b| a.min(&b))
            .unwrap_or_default();
        let mut state = State {
            problem,
            symbols,
            well_known,
            hostname,
            offering_keys,
            dims,
            topology,
            pools: Vec::new(),
            pool_order: Vec::new(),
            pods: pod_infos,
            bins: Vec::new(),
            min_request,
            cursors: FxHashMap::default(),
            full: None,
            nothing: Req::any_of(Vec::new()),
            toleration_ids,
            bound,
            bound_at: Vec::new(),
            bin_of_node: Vec::new(),
            excluded: Vec::new(),
            pools_enabled: problem.options.new_nodeclaims,
            saved: None,
            reservations: FxHashMap::default(),
        };
        state.pools = problem
            .node_pools
            .iter()
            .enumerate()
            .zip(&compiled)
            .map(|((i, np), types)| state.compile_pool(i, np, types, &ds_requests))
            .collect();
        let mut order: Vec<usize> = (0..problem.node_pools.len()).collect();
        order.sort_by(|a, b| {
            let (x, y) = (&problem.node_pools[*a], &problem.node_pools[*b]);
            y.weight.cmp(&x.weight).then_with(|| x.name.cmp(&y.name))
        });
        state.pool_order = order;
        // each reservation's room, the least any NodePool's catalog gives it
        for np in problem.node_pools {
            let types = np.instance_types.iter().filter(|t| np.within_largest(t));
            for o in types.flat_map(|t| &t.offerings) {
                if let Some(r) = &o.reservation {
                    let id = state.symbols.intern(&r.id);
                    let room = state.reservations.entry(id).or_insert(r.capacity);
                    *room = (*room).min(r.capacity);
                }
            }
        }
        state.add_existing_bins(node_reqs);
        // every requirement is interned by now: a reservation id no one named is in none
        state.offering_keys = crate::launch::OfferingKeys::of(&mut state.symbols);
        state.set_universes();
        state.count_bound();
        if !problem.options.existing_nodes {
            state.excluded = vec![true; state.bins.len()];
        }
        state
    }

    pub(super) fn compile_pool(
        &mut self,
        input: usize,
        np: &NodePoolInput,
        compiled: &[CompiledType],
        ds_requests: &[Amounts],
    ) -> Pool {
        let symbols = &mut self.symbols;
        let mut reqs = Reqs::new();
        for r in &np.requirements {
            let key = symbols.intern(&r.key);
            let req =
                Req::from_requirement(&crate::requirements::Requirement::from_api(r), symbols);
            reqs.add(key, req, symbols);
        }
        for (k, v) in &np.labels {
            let (key, value) = (symbols.intern(k), symbols.intern(v));
            reqs.add(key, Req::one(value), symbols);
        }
        let nodepool_key = symbols.intern(labels::NODEPOOL);
        let name = symbols.intern(&np.name);
        reqs.add(nodepool_key, Req::one(name), symbols);

        let types = compiled
            .iter()
            .map(|t| {
                let it = &np.instance_types[t.index];
                TypeInfo {
                    index: t.index,
                    reqs: t.reqs.clone(),
                    allocatable: self.dims.allocatable(&it.allocatable),
                    capacity: one_node(self.dims.capacity(&it.capacity)),
                    offerings: t.offerings.clone(),
                }
            })
            .collect();

        // daemonsets whose pods would run on this NodePool's nodes
        let mut overhead = Amounts::default();
        for (ds, req) in self.problem.daemonsets.iter().zip(ds_requests) {
            let spec = ds.spec.as_ref();
            let tolerations = spec.and_then(|s| s.tolerations.clone()).unwrap_or_default();
            if first_untolerated(&tolerations, &np.taints, true).is_some() {
                continue;
            }
            let mut ds_reqs =
                pods::selector_reqs(spec.and_then(|s| s.node_selector.as_ref()), symbols);
            let first_term = spec
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|n| {
                    n.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .and_then(|r| r.node_selector_terms.first());
            if let Some(t) = first_term {
                ds_reqs = ds_reqs.intersection(&pods::term_reqs(t, symbols), symbols);
            }
            ds_reqs.remove(self.hostname);
            let wk = self.well_known;
            if reqs
                .compatible(&ds_reqs, |k| k.index() < wk, symbols)
                .is_ok()
            {
                overhead = overhead.plus(req);
            }
        }

        let mut remaining = Amounts::UNBOUNDED;
        for (name, limit) in &np.limits {
            if let Some(i) = self.dims.slot(name) {
                remaining.0[i] = *limit;
            }
        }
        let mut usage = self.dims.capacity(&np.usage);
        usage.0[NODES] = np.nodes;
        Pool {
            input,
            reqs,
            types,
            overhead,
            budget: remaining.minus(&usage),
            remaining: remaining.minus(&usage),
            tightened: None,
            compat: RefCell::new(FxHashMap::default()),
        }
    }

    /// The existing nodes as bins, with their label requirements (`node_reqs`, one a node,
    /// as [`Catalog`] keeps them).
    pub(super) fn add_existing_bins(&mut self, node_reqs: Vec<Arc<Reqs>>) {
        let nodes = self.problem.nodes;
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        order.sort_by_key(|i| !nodes[*i].initialized);
        let mut ports_of: Vec<Vec<HostPort>> = vec![Vec::new(); nodes.len()];
        // replicas (equal fingerprints, which cover ports) declare the same host ports: read
        // once per fingerprint rather than from each of thousands of pods
        let mut by_terms: FxHashMap<u64, Vec<HostPort>> = FxHashMap::default();
        for b in self.problem.bound_pods {
            let Some(ports) = ports_of.get_mut(b.node) else {
                continue;
            };
            match b.terms {
                Some(terms) => ports.extend(
                    (by_terms.entry(terms))
                        .or_insert_with(|| pods::host_ports(b.pod))
                        .iter()
                        .cloned(),
                ),
                None => ports.extend(pods::host_ports(b.pod)),
            }
        }
        let mut node_reqs: Vec<Option<Arc<Reqs>>> = node_reqs.into_iter().map(Some).collect();
        for i in order {
            let n: &ExistingNode = &nodes[i];
            let host_name = n.labels.get(labels::HOSTNAME).unwrap_or(&n.name);
            let hostname = self.symbols.intern(host_name);
            let reqs = node_reqs[i].take().unwrap_or_default();
            let allocatable = self.dims.allocatable(&n.allocatable);
            let requests = self.dims.capacity(&n.requested);
            let ports = std::mem::take(&mut ports_of[i]);
            self.bins.push(Bin {
                host: Host::Node(i),
                hostname,
                reqs,
                requests,
                headroom: allocatable.minus(&requests),
                pods: Vec::new(),
                ports,
            });
        }
    }

    /// Domain values of a key a NodePool's nodes can take.
    pub(super) fn pool_domains(&self, pool: usize, key: Sym) -> Vec<Sym> {
        let p = &self.pools[pool];
        let np_req = p.reqs.get(key);
        let mut out = Vec::new();
        for t in &p.types {
            if p.reqs.intersects(&t.reqs, &self.symbols).is_err() {
                continue;
            }
            let r = match (np_req, t.reqs.get(key)) {
                (Some(a), Some(b)) => a.intersection(b, &self.symbols),
                (Some(a), None) => a.clone(),
                (None, Some(b)) => b.clone(),
                (None, None) => continue,
            };
            out.extend(r.values().into_iter().flatten().copied());
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    pub(super) fn set_universes(&mut self) {
        let mut cache: FxHashMap<(usize, Sym), Vec<Sym>> = FxHashMap::default();
        // each node's value of a key, read once for every group over that key
        let mut by_key: FxHashMap<Sym, (Vec<Option<Sym>>, Vec<Sym>)> = FxHashMap::default();
        for id in 0..self.topology.groups().len() {
            let g = &self.topology.groups()[id];
            let key = g.def.key;
            if key == self.hostname {
                continue;
            }
            let honor_taints = g.def.taint_policy.is_some();
            let tolerations = g.tolerations.clone();
            let mut values = Vec::new();
            for pool in 0..self.pools.len() {
                let np = &self.problem.node_pools[self.pools[pool].input];
                if honor_taints && first_untolerated(&tolerations, &np.taints, false).is_some() {
                    continue;
                }
                let d = cache
                    .entry((pool, key))
                    .or_insert_with(|| self.pool_domains(pool, key));
                values.extend(d.iter().copied());
            }
            let (labelled, distinct) = by_key.entry(key).or_insert_with(|| {
                // each node's labels, compiled into its bin's requirements (one value a key)
                let mut labelled: Vec<Option<Sym>> = vec![None; self.problem.nodes.len()];
                for bin in &self.bins {
                    if let Host::Node(n) = bin.host {
                        labelled[n] = bin.reqs.get(key).and_then(Req::single);
                    }
                }
                let mut distinct: Vec<Sym> = labelled.iter().flatten().copied().collect();
                distinct.sort_unstable();
                distinct.dedup();
                (labelled, distinct)
            });
            if honor_taints {
                for (n, v) in self.problem.nodes.iter().zip(labelled.iter()) {
                    if first_untolerated(&tolerations, &n.taints, false).is_none() {
                        values.extend(*v);
                    }
                }
            } else {
                values.extend(distinct.iter().copied());
            }
            self.topology.set_universe(id, values, &self.symbols);
        }
    }

    pub(super) fn count_bound(&mut self) {
        let mut bin_of_node = vec![usize::MAX; self.problem.nodes.len()];
        for (b, bin) in self.bins.iter().enumerate() {
            if let Some(n) = bin.node() {
                bin_of_node[n] = b;
            }
        }
        self.bin_of_node = bin_of_node;
        let nodes = self.problem.nodes.len();
        self.bound_at = vec![Vec::new(); nodes];
        // what a pod bound on a node counts in a group is the same for every pod there:
        // worked out once a (group, node), not once a pod
        let groups = self.topology.groups().len();
        let mut counted: Vec<Option<Option<Vec<Sym>>>> = vec![None; groups * nodes];
        for k in 0..self.bound.len() {
            let node = self.bound[k].node;
            let Some(at) = self.bound_at.get_mut(node) else {
                continue;
            };
            at.push(k);
            for id in 0..groups {
                if !self.bound_in(k, id) {
                    continue;
                }
                let values = counted[id * nodes + node].get_or_insert_with(|| {
                    let b = self.bin_of_node[node];
                    let taints = &self.problem.nodes[node].taints;
                    (self.topology)
                        .node_counts(id, &self.bins[b].reqs, taints, &self.symbols)
                        .then(|| {
                            let domain = self.domain_of(&self.bins[b], None, id);
                            self.topology.domain_values(id, domain, &self.symbols)
                        })
                });
                if let Some(values) = values {
                    self.topology.add_values(id, values, 1);
                }
            }
        }
    }

    /// Whether group `id` counts bound pod `k` (wherever it runs): it selects the pod, or
    /// it is the pod's own required anti-affinity.
    fn bound_in(&self, k: usize, id: GroupId) -> bool {
        let Bound {
            namespace,
            labels,
            owned,
            ..
        } = &self.bound[k];
        if self.topology.groups()[id].def.kind == Kind::InverseAnti {
            owned.contains(&id)
        } else {
            self.topology.selects(id, *namespace, labels)
        }
    }

    /// Counts (or takes back) a bound pod in the groups that select it.
    pub(super) fn tally_bound(&mut self, k: usize, add: bool) {
        let node = self.bound[k].node;
        let b = self.bin_of_node[node];
        let taints = &self.problem.nodes[node].taints;
        for id in 0..self.topology.groups().len() {
            if self.bound_in(k, id)
                && self
                    .topology
                    .node_counts(id, &self.bins[b].reqs, taints, &self.symbols)
            {
                let owned_domain = domain_owned(self.domain_of(&self.bins[b], None, id));
                if add {
                    self.topology
                        .record(id, owned_domain.as_domain(), &self.symbols);
                } else {
                    self.topology
                        .forget(id, owned_domain.as_domain(), &self.symbols);
                }
            }
        }
    }
}

/// An instance type's capacity counts as one node against `limits.nodes`.
fn one_node(mut capacity: Amounts) -> Amounts {
    capacity.0[NODES] = 1;
    capacity
}
