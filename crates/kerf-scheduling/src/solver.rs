//! The bin-packing scheduler: Karpenter's provisioning simulation over interned data.
//!
//! Pods go largest first (CPU, then memory). Each tries the bins in order: existing nodes
//! (initialized first), then the NodeClaims planned so far in this solve (first fit), then a
//! new NodeClaim from each NodePool by weight. A pod that fits nowhere is relaxed one step
//! and queued again; the solve ends when a full pass over the queue places nothing.
//!
//! Speed comes from the shape of the data, not from shortcuts in the rules: label keys and
//! values are symbols, a planned node's instance types are a bit set narrowed by a cache of
//! (NodePool, requirements) → compatible types, topology counts are kept incrementally, and
//! pods with the same constraints share a cursor past the bins that can never take them.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::rc::Rc;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::{Taint, TaintEffect, labels};
use rustc_hash::FxHashMap;

use crate::amounts::{Amounts, Dimensions};
use crate::bitset::BitSet;
use crate::input::{ExistingNode, NodePoolInput, Problem};
use crate::interned::{Conflict, Req, Reqs};
use crate::launch::{self, Launch, LaunchOption};
use crate::pods::{self, Compiler, HostPort, PodInfo, Relaxation};
use crate::reasons::{self, Reason, Why};
use crate::resources::{Resources, pod_requests};
use crate::symbols::{Sym, Symbols};
use crate::taints::first_untolerated;
use crate::topology::{Domain, GroupId, Kind, Topology};

mod session;
pub use session::Session;

/// A NodeClaim the solve decided to launch.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedNodeClaim {
    /// Index of its NodePool in the problem.
    pub node_pool: usize,
    /// Indices of the pending pods it takes.
    pub pods: Vec<usize>,
    /// What its pods and the daemonsets request.
    pub requests: Resources,
    /// The NodePool's requirements narrowed by its pods and topology, instance types last.
    pub requirements: Vec<kerf_api::NodeSelectorRequirementWithMinValues>,
    /// The instance types it may launch as, cheapest first (at most the launch cap).
    pub instance_types: Vec<LaunchOption>,
    /// The launch the cheapest available offering gives.
    pub launch: Launch,
}

/// Pods placed on one existing node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExistingPlacement {
    /// Index of the node in the problem.
    pub node: usize,
    /// Indices of the pending pods placed there.
    pub pods: Vec<usize>,
}

/// A pod that could not be placed, with why, per NodePool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    /// Index of the pod in the problem.
    pub pod: usize,
    /// The reasons of its last (most relaxed) attempt.
    pub reasons: Vec<Reason>,
}

/// The outcome of one solve.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// NodeClaims to create, in the order they were planned.
    pub nodeclaims: Vec<PlannedNodeClaim>,
    /// Pods placed on existing nodes, by node.
    pub existing: Vec<ExistingPlacement>,
    /// Pods left pending.
    pub unschedulable: Vec<Unschedulable>,
}

impl Decision {
    /// What the planned NodeClaims cost per hour.
    pub fn cost_per_hour(&self) -> f64 {
        // folded from +0.0: an empty sum of f64 is -0.0
        self.nodeclaims
            .iter()
            .fold(0.0, |sum, n| sum + n.launch.price_per_hour)
    }
}

/// An instance type of a NodePool, compiled.
struct TypeInfo {
    /// Its place in the NodePool input's instance types.
    index: usize,
    reqs: Reqs,
    allocatable: Amounts,
    capacity: Amounts,
    offerings: Vec<(Sym, Sym, f64, bool)>,
}

/// A NodePool, compiled.
struct Pool {
    input: usize,
    reqs: Reqs,
    types: Vec<TypeInfo>,
    overhead: Amounts,
    /// What the limits leave after the NodePool's existing usage.
    budget: Amounts,
    /// What they leave after the planned NodeClaims' reservations too.
    remaining: Amounts,
    /// How many bins there were when the reservations were last tightened.
    tightened: Option<usize>,
    compat: RefCell<FxHashMap<Reqs, Rc<BitSet>>>,
}

/// Where pods can go: an existing node or a planned NodeClaim.
#[derive(Clone)]
struct Bin {
    /// The NodePool of a planned NodeClaim.
    pool: Option<usize>,
    /// The existing node.
    node: Option<usize>,
    hostname: Sym,
    reqs: Reqs,
    requests: Amounts,
    /// An upper bound on what more fits.
    headroom: Amounts,
    types: Option<BitSet>,
    pods: Vec<usize>,
    ports: Vec<HostPort>,
}

/// Why a bin turned a pod away, in symbols; `permanent` when no later change in the solve
/// can make the same pod constraints fit.
#[derive(Clone, Copy, Debug)]
struct Reject {
    permanent: bool,
    cause: Cause,
}

#[derive(Clone, Copy, Debug)]
enum Cause {
    Hostname,
    Resources,
    Taint(usize),
    Ports,
    Requirements(Conflict),
    Topology(GroupId),
    NoTypes,
    Fit,
    Limit,
    MinValues(Sym, u32),
}

/// A pod already on a node: node index, namespace, labels, inverse groups it owns.
type Bound = (usize, Sym, Vec<(Sym, Sym)>, Vec<GroupId>);

/// A successful check, ready to apply.
struct Fit {
    reqs: Option<Reqs>,
    types: Option<BitSet>,
}

/// The pod constraints in force for one attempt. Pods whose attempts are equal share a
/// cursor: the attempt itself is the key, so two different constraint sets never do.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Attempt {
    reqs: Reqs,
    host: Option<Req>,
    groups: Vec<GroupId>,
    tolerations: u64,
    tolerate_pns: bool,
    host_ports: Vec<HostPort>,
}

struct State<'p> {
    problem: &'p Problem<'p>,
    symbols: Symbols,
    well_known: usize,
    hostname: Sym,
    zone: Sym,
    capacity_type: Sym,
    dims: Dimensions,
    topology: Topology,
    pools: Vec<Pool>,
    pool_order: Vec<usize>,
    pods: Vec<PodInfo>,
    bins: Vec<Bin>,
    min_request: Amounts,
    cursors: FxHashMap<Attempt, Cursor>,
    nothing: Req,
    toleration_ids: Vec<u64>,
    /// Pods already on nodes that topology counts, and their indices by node.
    bound: Vec<Bound>,
    bound_at: Vec<Vec<usize>>,
    /// The bin of each existing node.
    bin_of_node: Vec<usize>,
    /// Bins a [`Session`] has taken away.
    excluded: Vec<bool>,
    /// Whether pods may open new NodeClaims (a session may forbid it).
    pools_enabled: bool,
    /// Bins as they were before a session's tentative change touched them.
    saved: Option<session::Saved>,
}

/// Decides where the pending pods go and which NodeClaims to launch.
pub fn solve(problem: &Problem<'_>) -> Decision {
    let mut state = State::new(problem, problem.pods.iter().copied());
    let reasons = state.run((0..problem.pods.len()).collect());
    state.finish(reasons)
}

fn taint_text(t: &Taint) -> String {
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

/// Node requirements of a node's labels (hostname excluded: bins carry it apart).
fn label_reqs(
    labels: &std::collections::BTreeMap<String, String>,
    hostname: Sym,
    symbols: &mut Symbols,
) -> Reqs {
    let mut out = pods::selector_reqs(Some(labels), symbols);
    out.remove(hostname);
    out
}

impl<'p> State<'p> {
    /// Compiles the problem with `pending` as its pods (the problem's own, or a session's).
    fn new<'x>(problem: &'p Problem<'p>, pending: impl IntoIterator<Item = &'x Pod>) -> State<'p> {
        let mut symbols = Symbols::new();
        let well_known = pods::intern_well_known(&mut symbols);
        let hostname = symbols.intern(labels::HOSTNAME);
        let zone = symbols.intern(labels::ZONE);
        let capacity_type = symbols.intern(labels::CAPACITY_TYPE);
        let mut topology = Topology::new(hostname);
        let mut dims = Dimensions::new();

        // pods first: their requests give extended resources their slots
        let mut compiler = Compiler {
            symbols: &mut symbols,
            topology: &mut topology,
            dims: &mut dims,
            preferences: problem.options.preferences,
        };
        let mut pod_infos: Vec<PodInfo> =
            pending.into_iter().map(|p| compiler.compile(p)).collect();
        let has_groups = !compiler.topology.groups().is_empty();
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
                let ns = compiler.symbols.intern(pods::namespace_of(b.pod));
                let labels = pods::labels_of(b.pod.metadata.labels.as_ref(), compiler.symbols);
                let owned: Vec<GroupId> = b
                    .pod
                    .spec
                    .as_ref()
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
                (b.node, ns, labels, owned)
            })
            .collect();
        let ds_requests: Vec<Amounts> = problem
            .daemonsets
            .iter()
            .map(|d| compiler.dims.request(&pod_requests(d)))
            .collect();
        pods::link(&mut pod_infos, &topology);

        let mut toleration_index: HashMap<String, u64> = HashMap::new();
        let toleration_ids = pod_infos
            .iter()
            .map(|p| {
                let next = toleration_index.len() as u64;
                *toleration_index
                    .entry(format!("{:?}", p.tolerations))
                    .or_insert(next)
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
            zone,
            capacity_type,
            dims,
            topology,
            pools: Vec::new(),
            pool_order: Vec::new(),
            pods: pod_infos,
            bins: Vec::new(),
            min_request,
            cursors: FxHashMap::default(),
            nothing: Req::any_of(Vec::new()),
            toleration_ids,
            bound,
            bound_at: Vec::new(),
            bin_of_node: Vec::new(),
            excluded: Vec::new(),
            pools_enabled: problem.options.new_nodeclaims,
            saved: None,
        };
        state.pools = problem
            .node_pools
            .iter()
            .enumerate()
            .map(|(i, np)| state.compile_pool(i, np, &ds_requests))
            .collect();
        let mut order: Vec<usize> = (0..problem.node_pools.len()).collect();
        order.sort_by(|a, b| {
            let (x, y) = (&problem.node_pools[*a], &problem.node_pools[*b]);
            y.weight.cmp(&x.weight).then_with(|| x.name.cmp(&y.name))
        });
        state.pool_order = order;
        state.add_existing_bins();
        state.set_universes();
        state.count_bound();
        if !problem.options.existing_nodes {
            state.excluded = vec![true; state.bins.len()];
        }
        state
    }

    fn compile_pool(&mut self, input: usize, np: &NodePoolInput, ds_requests: &[Amounts]) -> Pool {
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

        // types the NodePool's own requirements rule out by their labels never compile
        let label_rules: Vec<crate::requirements::Requirement> = np
            .requirements
            .iter()
            .map(crate::requirements::Requirement::from_api)
            .collect();
        let types = np
            .instance_types
            .iter()
            .enumerate()
            .filter(|(_, it)| {
                label_rules
                    .iter()
                    .all(|r| it.labels.get(&r.key).is_none_or(|v| r.has(v)))
            })
            .map(|(index, it)| {
                let mut t = pods::selector_reqs(Some(&it.labels), symbols);
                let offerings: Vec<(Sym, Sym, f64, bool)> = it
                    .offerings
                    .iter()
                    .map(|o| {
                        (
                            symbols.intern(&o.zone),
                            symbols.intern(&o.capacity_type),
                            o.price_per_hour,
                            o.available,
                        )
                    })
                    .collect();
                t.add(
                    self.zone,
                    Req::any_of(offerings.iter().map(|o| o.0).collect()),
                    symbols,
                );
                t.add(
                    self.capacity_type,
                    Req::any_of(offerings.iter().map(|o| o.1).collect()),
                    symbols,
                );
                TypeInfo {
                    index,
                    reqs: t,
                    allocatable: self.dims.capacity(&it.allocatable),
                    capacity: self.dims.capacity(&it.capacity),
                    offerings,
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

        let mut remaining = Amounts([i64::MAX / 4; 12]);
        for (name, limit) in &np.limits {
            if let Some(i) = self.dims.slot(name) {
                remaining.0[i] = *limit;
            }
        }
        let usage = self.dims.capacity(&np.usage);
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

    fn add_existing_bins(&mut self) {
        let nodes = self.problem.nodes;
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        order.sort_by_key(|i| !nodes[*i].initialized);
        let mut ports_of: Vec<Vec<HostPort>> = vec![Vec::new(); nodes.len()];
        for b in self.problem.bound_pods {
            if let Some(ports) = ports_of.get_mut(b.node) {
                ports.extend(pods::host_ports(b.pod));
            }
        }
        for i in order {
            let n: &ExistingNode = &nodes[i];
            let host_name = n.labels.get(labels::HOSTNAME).unwrap_or(&n.name);
            let hostname = self.symbols.intern(host_name);
            let reqs = label_reqs(&n.labels, self.hostname, &mut self.symbols);
            let allocatable = self.dims.capacity(&n.allocatable);
            let requests = self.dims.capacity(&n.requested);
            let ports = std::mem::take(&mut ports_of[i]);
            self.bins.push(Bin {
                pool: None,
                node: Some(i),
                hostname,
                reqs,
                requests,
                headroom: allocatable.minus(&requests),
                types: None,
                pods: Vec::new(),
                ports,
            });
        }
    }

    /// Domain values of a key a NodePool's nodes can take.
    fn pool_domains(&self, pool: usize, key: Sym) -> Vec<Sym> {
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

    fn set_universes(&mut self) {
        let mut cache: HashMap<(usize, Sym), Vec<Sym>> = HashMap::new();
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
            for n in self.problem.nodes {
                if honor_taints && first_untolerated(&tolerations, &n.taints, false).is_some() {
                    continue;
                }
                if let Some(v) = n.labels.get(self.symbols.name(key)) {
                    values.push(self.symbols.get(v).expect("node labels are interned"));
                }
            }
            self.topology.set_universe(id, values, &self.symbols);
        }
    }

    fn count_bound(&mut self) {
        let mut bin_of_node = vec![usize::MAX; self.problem.nodes.len()];
        for (b, bin) in self.bins.iter().enumerate() {
            if let Some(n) = bin.node {
                bin_of_node[n] = b;
            }
        }
        self.bin_of_node = bin_of_node;
        self.bound_at = vec![Vec::new(); self.problem.nodes.len()];
        for k in 0..self.bound.len() {
            let node = self.bound[k].0;
            let Some(at) = self.bound_at.get_mut(node) else {
                continue;
            };
            at.push(k);
            self.tally_bound(k, true);
        }
    }

    /// Counts (or takes back) a bound pod in the groups that select it.
    fn tally_bound(&mut self, k: usize, add: bool) {
        let (node, ns, labels, owned) = &self.bound[k];
        let b = self.bin_of_node[*node];
        let taints = &self.problem.nodes[*node].taints;
        for id in 0..self.topology.groups().len() {
            let kind = &self.topology.groups()[id].def.kind;
            let counts = if *kind == Kind::InverseAnti {
                owned.contains(&id)
            } else {
                self.topology.selects(id, *ns, labels)
            };
            if counts
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

    /// A bin's domain for a group's key, under requirements `reqs` (the bin's own if None).
    fn domain_of<'a>(&'a self, bin: &'a Bin, reqs: Option<&'a Reqs>, id: GroupId) -> Domain<'a> {
        let key = self.topology.groups()[id].def.key;
        if key == self.hostname {
            return Domain::Host(bin.hostname);
        }
        let reqs = reqs.unwrap_or(&bin.reqs);
        match (reqs.get(key), bin.node) {
            (Some(r), _) => Domain::Req(Some(r)),
            // an existing node without the label is in no domain of the key
            (None, Some(_)) => Domain::Req(Some(&self.nothing)),
            (None, None) => Domain::Req(None),
        }
    }

    fn taints_of(&self, bin: &Bin) -> &'p [Taint] {
        match (bin.node, bin.pool) {
            (Some(n), _) => &self.problem.nodes[n].taints,
            (None, Some(p)) => &self.problem.node_pools[self.pools[p].input].taints,
            (None, None) => &[],
        }
    }

    fn attempt(&self, pod: usize, relax: &Relaxation) -> Attempt {
        let info = &self.pods[pod];
        let (reqs, host) = relax.node_reqs(info, self.hostname, &self.symbols);
        let groups = relax.groups(info);
        Attempt {
            reqs,
            host,
            groups,
            tolerations: self.toleration_ids[pod],
            tolerate_pns: relax.tolerate_prefer_no_schedule,
            host_ports: info.host_ports.clone(),
        }
    }

    /// Instance types of a pool compatible with requirements (labels, and an available
    /// offering in an allowed zone and capacity type), cached per requirement shape.
    fn compatible_types(&self, pool: usize, reqs: &Reqs) -> Rc<BitSet> {
        if let Some(hit) = self.pools[pool].compat.borrow().get(reqs) {
            return hit.clone();
        }
        let p = &self.pools[pool];
        let mut set = BitSet::empty(p.types.len());
        for (i, t) in p.types.iter().enumerate() {
            if t.reqs.intersects(reqs, &self.symbols).is_ok()
                && t.offerings.iter().any(|(z, ct, _, available)| {
                    *available
                        && reqs.allows(self.zone, *z, &self.symbols)
                        && reqs.allows(self.capacity_type, *ct, &self.symbols)
                })
            {
                set.insert(i);
            }
        }
        let set = Rc::new(set);
        self.pools[pool]
            .compat
            .borrow_mut()
            .insert(reqs.clone(), set.clone());
        set
    }

    /// Checks a pod against a bin without changing anything (except the compatibility
    /// cache); `limit` filters a new NodeClaim's types by the NodePool's remaining limits.
    fn check(
        &self,
        pod: usize,
        a: &Attempt,
        bin: &Bin,
        limit: Option<&Amounts>,
    ) -> Result<Fit, Reject> {
        let info = &self.pods[pod];
        let permanent = |cause| Reject {
            permanent: true,
            cause,
        };
        let transient = |cause| Reject {
            permanent: false,
            cause,
        };
        if let Some(h) = &a.host
            && !h.has(bin.hostname, &self.symbols)
        {
            return Err(permanent(Cause::Hostname));
        }
        if !info.requests.fits(&bin.headroom) {
            let full = !self.min_request.fits(&bin.headroom);
            return Err(Reject {
                permanent: full,
                cause: Cause::Resources,
            });
        }
        let taints = self.taints_of(bin);
        if let Some(t) = first_untolerated(&info.tolerations, taints, a.tolerate_pns) {
            let i = taints.iter().position(|x| std::ptr::eq(x, t)).unwrap_or(0);
            return Err(permanent(Cause::Taint(i)));
        }
        if info
            .host_ports
            .iter()
            .any(|p| bin.ports.iter().any(|q| p.conflicts(q)))
        {
            return Err(permanent(Cause::Ports));
        }
        let wk = self.well_known;
        let compat = if bin.node.is_some() {
            bin.reqs.compatible(&a.reqs, |_| false, &self.symbols)
        } else {
            bin.reqs
                .compatible(&a.reqs, |k| k.index() < wk, &self.symbols)
        };
        compat.map_err(|c| permanent(Cause::Requirements(c)))?;
        let mut reqs: Option<Reqs> =
            (!a.reqs.is_empty()).then(|| bin.reqs.intersection(&a.reqs, &self.symbols));
        for &id in &a.groups {
            let g = &self.topology.groups()[id];
            let key = g.def.key;
            let honors = !matches!(g.def.kind, Kind::Spread { .. }) || g.def.node_terms.is_some();
            let pod_domains = if honors { a.reqs.get(key) } else { None };
            let selects_self = g.def.kind != Kind::InverseAnti && info.counted_by.contains(&id);
            let domain = self.domain_of(bin, reqs.as_ref(), id);
            match self
                .topology
                .check(id, pod_domains, selects_self, domain, &self.symbols)
            {
                Ok(Some(narrow)) => {
                    let r = reqs.get_or_insert_with(|| bin.reqs.clone());
                    r.add(key, narrow, &self.symbols);
                }
                Ok(None) => {}
                Err(rej) => {
                    return Err(Reject {
                        permanent: rej.permanent,
                        cause: Cause::Topology(id),
                    });
                }
            }
        }
        let Some(pool) = bin.pool else {
            return Ok(Fit { reqs, types: None });
        };
        let current = bin.types.as_ref().expect("planned bins carry types");
        let mut types = current.clone();
        if let Some(r) = &reqs
            && *r != bin.reqs
        {
            let compat = self.compatible_types(pool, r);
            types.intersect_with(&compat);
        }
        if types.is_empty() {
            return Err(permanent(Cause::NoTypes));
        }
        let total = bin.requests.plus(&self.pods[pod].requests);
        let p = &self.pools[pool];
        let mut fits_any = false;
        let candidates: Vec<usize> = types.iter().collect();
        for i in candidates {
            let t = &p.types[i];
            if !total.fits(&t.allocatable) {
                types.remove(i);
                continue;
            }
            fits_any = true;
            if limit.is_some_and(|l| !t.capacity.fits(l)) {
                types.remove(i);
            }
        }
        if types.is_empty() {
            return Err(transient(if fits_any { Cause::Limit } else { Cause::Fit }));
        }
        let final_reqs = reqs.as_ref().unwrap_or(&bin.reqs);
        for (key, r) in final_reqs.iter() {
            if let Some(min) = r.min_values {
                let mut seen: Vec<Sym> = types
                    .iter()
                    .filter_map(|i| {
                        p.types[i]
                            .reqs
                            .get(key)
                            .and_then(|t| t.values())
                            .map(|v| v.to_vec())
                    })
                    .flatten()
                    .filter(|v| r.has(*v, &self.symbols))
                    .collect();
                seen.sort_unstable();
                seen.dedup();
                if (seen.len() as u32) < min {
                    return Err(transient(Cause::MinValues(key, min)));
                }
            }
        }
        Ok(Fit {
            reqs,
            types: Some(types),
        })
    }

    fn headroom(&self, bin: &Bin) -> Amounts {
        match (&bin.types, bin.pool) {
            (Some(types), Some(pool)) => {
                let p = &self.pools[pool];
                let max = types
                    .iter()
                    .map(|i| p.types[i].allocatable)
                    .reduce(|a, b| a.max(&b))
                    .unwrap_or_default();
                max.minus(&bin.requests)
            }
            _ => bin.headroom,
        }
    }

    fn commit(&mut self, pod: usize, b: usize, fit: Fit) {
        let info = &self.pods[pod];
        let requests = info.requests;
        let ports = info.host_ports.clone();
        self.save(b);
        let bin = &mut self.bins[b];
        if let Some(r) = fit.reqs {
            bin.reqs = r;
        }
        if fit.types.is_some() {
            bin.types = fit.types;
        }
        bin.requests = bin.requests.plus(&requests);
        if bin.node.is_some() {
            bin.headroom = bin.headroom.minus(&requests);
        }
        bin.pods.push(pod);
        bin.ports.extend(ports);
        let headroom = self.headroom(&self.bins[b]);
        self.bins[b].headroom = headroom;
        self.tally_placed(pod, b, true);
    }

    /// Counts (or takes back) a placed pod in the groups that count it.
    fn tally_placed(&mut self, pod: usize, b: usize, add: bool) {
        let info = &self.pods[pod];
        let counted: Vec<GroupId> = info
            .counted_by
            .iter()
            .chain(&info.owns_inverse)
            .copied()
            .collect();
        let taints = self.taints_of(&self.bins[b]);
        for id in counted {
            let bin = &self.bins[b];
            if self
                .topology
                .node_counts(id, &bin.reqs, taints, &self.symbols)
            {
                let owned = domain_owned(self.domain_of(bin, None, id));
                if add {
                    self.topology.record(id, owned.as_domain(), &self.symbols);
                } else {
                    self.topology.forget(id, owned.as_domain(), &self.symbols);
                }
            }
        }
    }

    /// Tries every bin, then a new NodeClaim per NodePool. Returns the reasons per NodePool
    /// on failure.
    fn place(&mut self, pod: usize, relax: &Relaxation) -> Result<(), Vec<Reason>> {
        let a = self.attempt(pod, relax);
        let mut cursor = self
            .cursors
            .get_mut(&a)
            .map(std::mem::take)
            .unwrap_or_default();
        let mut placed = None;
        let mut b = cursor.start;
        while b < self.bins.len() {
            if cursor.is_dead(b) || self.excluded.get(b).copied().unwrap_or(false) {
                b += 1;
                continue;
            }
            match self.check(pod, &a, &self.bins[b], None) {
                Ok(fit) => {
                    placed = Some((b, fit));
                    break;
                }
                Err(r) if r.permanent => cursor.kill(b),
                Err(_) => {}
            }
            b += 1;
        }
        match self.cursors.get_mut(&a) {
            Some(slot) => *slot = cursor,
            None => {
                self.cursors.insert(a.clone(), cursor);
            }
        }
        if let Some((b, fit)) = placed {
            self.commit(pod, b, fit);
            return Ok(());
        }
        if self.pools.is_empty() || !self.pools_enabled {
            return Err(vec![Reason {
                node_pool: None,
                why: Why::NoNodePools,
            }]);
        }
        let mut reasons = Vec::new();
        for oi in 0..self.pool_order.len() {
            let pool = self.pool_order[oi];
            let mut opened = self.new_bin(pod, &a, pool);
            if matches!(opened, Err(Why::LimitReached { .. })) && self.tighten_limits(pool) {
                opened = self.new_bin(pod, &a, pool);
            }
            match opened {
                Ok(()) => return Ok(()),
                Err(why) => reasons.push(Reason {
                    node_pool: Some(self.problem.node_pools[self.pools[pool].input].name.clone()),
                    why,
                }),
            }
        }
        Err(reasons::fold(reasons))
    }

    /// A NodePool's limits ran out: each planned NodeClaim of it has reserved the largest
    /// of its candidate types, though it can only launch one of the `max_instance_types`
    /// cheapest. Caps every such NodeClaim's types at the largest of its cheapest ones and
    /// reserves only that; `true` when room came back. The types a NodeClaim keeps can
    /// only shrink as pods join it, so no launch can exceed its reservation.
    fn tighten_limits(&mut self, pool: usize) -> bool {
        // nothing new to tighten since the last time: no room can come back
        if self.pools[pool].tightened == Some(self.bins.len()) {
            return false;
        }
        self.pools[pool].tightened = Some(self.bins.len());
        let cap_len = self.problem.options.max_instance_types.max(1);
        let mut reserved = Amounts::default();
        for b in 0..self.bins.len() {
            if self.bins[b].pool != Some(pool) {
                continue;
            }
            let bin = &self.bins[b];
            let p = &self.pools[pool];
            let types = bin.types.as_ref().expect("planned bins carry types");
            if bin.reqs.iter().any(|(_, r)| r.min_values.is_some()) {
                // minValues may keep types beyond the cheapest: leave its reservation whole
                let max = types
                    .iter()
                    .map(|i| p.types[i].capacity)
                    .reduce(|x, y| x.max(&y))
                    .unwrap_or_default();
                reserved = reserved.plus(&max);
                continue;
            }
            let mut priced: Vec<(f64, usize)> = types
                .iter()
                .filter_map(|i| {
                    p.types[i]
                        .offerings
                        .iter()
                        .filter(|(z, ct, _, available)| {
                            *available
                                && bin.reqs.allows(self.zone, *z, &self.symbols)
                                && bin.reqs.allows(self.capacity_type, *ct, &self.symbols)
                        })
                        .map(|o| o.2)
                        .min_by(f64::total_cmp)
                        .map(|price| (price, i))
                })
                .collect();
            priced.sort_by(|a, b| a.0.total_cmp(&b.0));
            let cap = priced
                .iter()
                .take(cap_len)
                .map(|(_, i)| p.types[*i].capacity)
                .reduce(|x, y| x.max(&y))
                .unwrap_or_default();
            let mut kept = types.clone();
            for i in types.iter() {
                if !p.types[i].capacity.fits(&cap) {
                    kept.remove(i);
                }
            }
            reserved = reserved.plus(&cap);
            self.bins[b].types = Some(kept);
        }
        let p = &mut self.pools[pool];
        let remaining = p.budget.minus(&reserved);
        let grew = remaining != p.remaining;
        p.remaining = remaining;
        grew
    }

    fn new_bin(&mut self, pod: usize, a: &Attempt, pool: usize) -> Result<(), Why> {
        let p = &self.pools[pool];
        let all = {
            let mut s = BitSet::empty(p.types.len());
            (0..p.types.len()).for_each(|i| s.insert(i));
            s
        };
        let base = p.reqs.clone();
        let compat = self.compatible_types(pool, &base);
        let mut types = all;
        types.intersect_with(&compat);
        let p = &self.pools[pool];
        let fresh = Bin {
            pool: Some(pool),
            node: None,
            hostname: self.hostname, // never a domain of any count
            reqs: base,
            requests: p.overhead,
            headroom: Amounts([i64::MAX / 4; 12]),
            types: Some(types),
            pods: Vec::new(),
            ports: Vec::new(),
        };
        let remaining = p.remaining;
        match self.check(pod, a, &fresh, Some(&remaining)) {
            Ok(fit) => {
                let name = format!(
                    "{}#{}",
                    self.problem.node_pools[self.pools[pool].input].name,
                    self.bins.len()
                );
                let hostname = self.symbols.intern(&name);
                let b = self.bins.len();
                self.bins.push(Bin { hostname, ..fresh });
                self.commit(pod, b, fit);
                let p = &self.pools[pool];
                let max_capacity = self.bins[b]
                    .types
                    .as_ref()
                    .expect("planned")
                    .iter()
                    .map(|i| p.types[i].capacity)
                    .reduce(|x, y| x.max(&y))
                    .unwrap_or_default();
                self.pools[pool].remaining = remaining.minus(&max_capacity);
                Ok(())
            }
            Err(r) => Err(self.explain(pod, a, pool, &fresh, r.cause)),
        }
    }

    /// Turns a rejection of a new NodeClaim into a reason users can act on.
    fn explain(&mut self, pod: usize, a: &Attempt, pool: usize, fresh: &Bin, cause: Cause) -> Why {
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
            Cause::NoTypes | Cause::Resources | Cause::Ports => {
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
                let compat = fresh.types.as_ref().expect("planned");
                let max = compat
                    .iter()
                    .map(|i| p.types[i].allocatable)
                    .reduce(|x, y| x.max(&y))
                    .unwrap_or_default();
                let total = p.overhead.plus(&self.pods[pod].requests);
                let mut short: Vec<usize> = total.exceeding(&max).collect();
                if short.is_empty() {
                    short = (0..total.0.len())
                        .filter(|i| total.0[*i] > 0 && *i != 3)
                        .collect();
                }
                let largest = short.first().and_then(|&slot| {
                    compat
                        .iter()
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
                let compat = fresh.types.as_ref().expect("planned");
                // the types that could host the pod, when any: the others never launch for it
                let total = p.overhead.plus(&self.pods[pod].requests);
                let hosting = compat
                    .iter()
                    .filter(|i| total.fits(&p.types[*i].allocatable));
                let smallest = hosting
                    .map(|i| p.types[i].capacity)
                    .reduce(|x, y| x.min(&y))
                    .or_else(|| {
                        compat
                            .iter()
                            .map(|i| p.types[i].capacity)
                            .reduce(|x, y| x.min(&y))
                    })
                    .unwrap_or_default();
                let slot = smallest.exceeding(&p.remaining).next().unwrap_or(0);
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

    /// Places `order`'s pods, largest first; returns the ones left with their reasons.
    fn run(&mut self, mut order: Vec<usize>) -> HashMap<usize, Vec<Reason>> {
        order.sort_by(|a, b| {
            let (x, y) = (&self.pods[*a].requests, &self.pods[*b].requests);
            y.cpu_millis()
                .cmp(&x.cpu_millis())
                .then_with(|| y.memory_bytes().cmp(&x.memory_bytes()))
        });
        let mut queue: VecDeque<usize> = order.into();
        let mut relax: FxHashMap<usize, Relaxation> = FxHashMap::default();
        let mut last_len: HashMap<usize, usize> = HashMap::new();
        let mut reasons: HashMap<usize, Vec<Reason>> = HashMap::new();
        while let Some(&pod) = queue.front() {
            if last_len.get(&pod) == Some(&queue.len()) {
                break; // a full pass without progress
            }
            queue.pop_front();
            let r = *relax.entry(pod).or_default();
            match self.place(pod, &r) {
                Ok(()) => {
                    reasons.remove(&pod);
                }
                Err(why) => {
                    reasons.insert(pod, why);
                    let relaxed = relax.entry(pod).or_default().relax(&self.pods[pod]);
                    queue.push_back(pod);
                    if relaxed {
                        last_len.clear();
                    } else {
                        last_len.insert(pod, queue.len());
                    }
                }
            }
        }
        queue
            .into_iter()
            .map(|p| (p, reasons.remove(&p).unwrap_or_default()))
            .collect()
    }

    fn finish(self, reasons: HashMap<usize, Vec<Reason>>) -> Decision {
        let placed = self.bins.iter().map(|b| (b, b.pods.clone()));
        self.decision(placed, reasons)
    }

    /// The decision for pods placed in bins (each bin with the pods it gained).
    fn decision<'b>(
        &'b self,
        placed: impl Iterator<Item = (&'b Bin, Vec<usize>)>,
        mut reasons: HashMap<usize, Vec<Reason>>,
    ) -> Decision {
        let mut decision = Decision::default();
        for (bin, mut pods) in placed {
            if pods.is_empty() {
                continue;
            }
            pods.sort_unstable();
            match (bin.node, bin.pool) {
                (Some(node), _) => decision.existing.push(ExistingPlacement { node, pods }),
                (None, Some(pool)) => {
                    if let Some(planned) = self.planned(bin, pool, pods) {
                        decision.nodeclaims.push(planned);
                    }
                }
                (None, None) => {}
            }
        }
        let mut pending: Vec<usize> = reasons.keys().copied().collect();
        pending.sort_unstable();
        decision.unschedulable = pending
            .into_iter()
            .map(|pod| Unschedulable {
                pod,
                reasons: reasons.remove(&pod).unwrap_or_default(),
            })
            .collect();
        decision
    }

    /// A planned bin as a NodeClaim to launch: the cheapest offering among its types.
    fn planned(&self, bin: &Bin, pool: usize, pods: Vec<usize>) -> Option<PlannedNodeClaim> {
        let p = &self.pools[pool];
        let types = bin.types.as_ref().expect("planned bins carry types");
        let candidates: Vec<launch::Candidate<'_>> = types
            .iter()
            .map(|i| launch::Candidate {
                name: &self.problem.node_pools[p.input].instance_types[p.types[i].index].name,
                reqs: &p.types[i].reqs,
                offerings: &p.types[i].offerings,
            })
            .collect();
        let (options, chosen) = launch::choose(
            &candidates,
            &bin.reqs,
            self.zone,
            self.capacity_type,
            self.problem.options.max_instance_types,
            &self.symbols,
        )?;
        let requirements = launch::requirements(&bin.reqs, &options, &self.symbols);
        Some(PlannedNodeClaim {
            node_pool: p.input,
            pods,
            requests: self.dims.to_resources(&bin.requests),
            requirements,
            instance_types: options,
            launch: chosen,
        })
    }
}

/// The bins a group of pods with one constraint signature can never use again: a leading
/// run skipped outright, then one bit per bin.
#[derive(Default)]
struct Cursor {
    start: usize,
    dead: Vec<u64>,
}

impl Cursor {
    fn is_dead(&self, b: usize) -> bool {
        self.dead
            .get(b / 64)
            .is_some_and(|w| w & (1 << (b % 64)) != 0)
    }

    fn kill(&mut self, b: usize) {
        if self.dead.len() <= b / 64 {
            self.dead.resize(b / 64 + 1, 0);
        }
        self.dead[b / 64] |= 1 << (b % 64);
        while self.is_dead(self.start) {
            self.start += 1;
        }
    }
}

/// A domain detached from the bin it was read from, so counts can be updated.
enum OwnedDomain {
    Host(Sym),
    Req(Option<Req>),
}

impl OwnedDomain {
    fn as_domain(&self) -> Domain<'_> {
        match self {
            OwnedDomain::Host(h) => Domain::Host(*h),
            OwnedDomain::Req(r) => Domain::Req(r.as_ref()),
        }
    }
}

fn domain_owned(d: Domain<'_>) -> OwnedDomain {
    match d {
        Domain::Host(h) => OwnedDomain::Host(h),
        Domain::Req(r) => OwnedDomain::Req(r.cloned()),
    }
}

/// An amount as users write it: cores for cpu, binary units for bytes, plain counts.
fn amount_text(slot: usize, v: i64) -> String {
    match slot {
        0 => kerf_api::Quantity::from_milli(v).as_str().to_string(),
        1 | 2 => crate::resources::bytes_quantity(v).as_str().to_string(),
        _ => v.to_string(),
    }
}
