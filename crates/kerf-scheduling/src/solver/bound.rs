//! A lower bound on what the pending pods cost: the linear-programming relaxation of packing
//! them onto the instance types their NodePools allow and the room left on existing nodes.
//!
//! Pods with the same requests, node requirements and tolerations form a group. A column is
//! a NodePool's instance type bought as one capacity type, priced at its cheapest available
//! offering of that capacity type (zones are not told apart: a looser bound, never a wrong
//! one). A group may use a column when every check that cannot be relaxed passes: the
//! NodePool's requirements and taints, an instance type with an allowed offering of that
//! capacity type, room for one pod after daemonset overhead. NodePools are tried by weight,
//! as the provisioner tries them: a group opens nodes in the first that can take it, and in
//! the next ones only while the first has limits that could run out, or when the pods have
//! preferences or topology (spread, pod affinity or anti-affinity) that may send them past
//! it; a pod may join a node of any NodePool that some group opens nodes in, as the
//! provisioner fills the nodes it planned before it opens another. A NodePool no group opens
//! nodes in is left out. Preferences, topology and pod (anti-)affinity themselves are left
//! out, which only lowers the bound.
//!
//! The model: `x_c` nodes of each column and `y_gc` pods of each group on it, both
//! fractional; every pod placed; on every column and resource, what its pods request within
//! what its nodes offer after daemonset overhead; a NodePool's columns within its limits;
//! the cost `Σ price_c x_c` minimised. A column another of its NodePool beats on price,
//! room and the groups it takes is dropped first, which leaves the optimum as it is.

use good_lp::{
    Expression, ResolutionError, Solution, SolverModel, Variable, clarabel, variable, variables,
};

use std::hash::{Hash, Hasher};

use super::State;
use super::catalog::{BoundKey, list_address};
use crate::amounts::{Amounts, CPU, MEMORY, NODES, PODS, SLOTS};
use crate::input::{NodePoolInput, Problem};
use crate::interned::Reqs;
use crate::pods;
use crate::resources::pod_requests;
use crate::solver::catalog::Catalog;
use crate::taints::first_untolerated;
use crate::topology::GroupId;

/// What [`cost_bound`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct CostBound {
    /// No placement of the pods can cost less per hour than this.
    pub per_hour: f64,
    /// Pods no column and no existing node can take, left out of the bound.
    pub unplaceable: usize,
    /// Groups of alike pods in the model.
    pub groups: usize,
    /// Columns in the model, after the dominated ones were dropped.
    pub columns: usize,
    /// Per NodePool of the problem (by index), the largest node the optimum buys there:
    /// a packing with nodes no larger can reach the bound's cost, one with larger ones may
    /// pay for room its pods never use.
    pub largest: Vec<Option<NodeSize>>,
}

/// A node's size as the bound's optimum buys it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeSize {
    /// Millicores.
    pub cpu_millis: i64,
    /// Bytes.
    pub memory_bytes: i64,
}

/// Alike pending pods: one set of requests, requirement alternatives and tolerations.
struct Group {
    requests: Amounts,
    /// The alternatives a node may meet (one per required node affinity term).
    reqs: Vec<Reqs>,
    tolerations: usize,
    /// Its first pod, whose tolerations stand for the group's.
    first: usize,
    /// Whether preferences or topology may send its pods past the first NodePool that
    /// takes them.
    wanders: bool,
    /// The required hostname anti-affinity its pods' selector and labels share, when each
    /// pod's selects the others (one pod of the group per node at most).
    alone: Option<GroupId>,
    pods: usize,
}

/// Where pods of a group may go: a NodePool's instance type as one capacity type, or the room
/// left on an existing node.
struct Column {
    /// Dollars per hour a node of it costs; 0 for an existing node.
    price: f64,
    /// What its pods may request (allocatable after daemonset overhead, or the room left).
    room: Amounts,
    /// What one node counts against its NodePool's limits.
    capacity: Amounts,
    /// Its NodePool (compiled index); `None` for an existing node, which is there once.
    pool: Option<usize>,
    /// The groups that may use it.
    groups: Vec<bool>,
}

/// The lower bound for `problem`'s pending pods (see the module's documentation). A bound
/// over pods alone (no existing nodes) is kept in `catalog` and given again for as long as
/// everything it read is the same ([`Catalog`]).
pub fn cost_bound(problem: &Problem<'_>, catalog: &mut Catalog) -> Result<CostBound, String> {
    let Some(key) = bound_key(problem) else {
        return bound_within(problem, catalog, usize::MAX);
    };
    if let Some(kept) = catalog.kept_bound(&key) {
        return Ok(kept);
    }
    let bound = bound_within(problem, catalog, usize::MAX)?;
    catalog.keep_bound(key, bound.clone());
    Ok(bound)
}

/// What a bound over pods alone reads: each NodePool's type list by identity, and a
/// fingerprint of the rest (each NodePool's name, weight, labels, requirements, taints,
/// limits, cap, and its usage and node count where limits make them count; each
/// daemonset's and pod's scheduling terms and requests, in order; the options). None for a
/// problem with existing nodes, whose bound depends on them.
fn bound_key(problem: &Problem<'_>) -> Option<BoundKey> {
    if !problem.nodes.is_empty() || !problem.bound_pods.is_empty() {
        return None;
    }
    let mut h = std::hash::DefaultHasher::new();
    for np in problem.node_pools {
        (&np.name, np.weight, &np.labels, &np.limits).hash(&mut h);
        // the list itself is compared when a kept bound is found; its address here keeps
        // two lists (a NodePool's, and the same without spot) from sharing a slot
        list_address(&np.instance_types).hash(&mut h);
        pods::json_hash(&(&np.requirements, &np.taints, &np.startup_taints)).hash(&mut h);
        (np.largest)
            .map(|s| (s.cpu_millis, s.memory_bytes))
            .hash(&mut h);
        if !np.limits.is_empty() {
            (&np.usage, np.nodes).hash(&mut h);
        }
    }
    problem.daemonsets.len().hash(&mut h);
    for ds in problem.daemonsets {
        (pods::terms_of(ds), pod_requests(ds)).hash(&mut h);
    }
    problem.pods.len().hash(&mut h);
    for (i, pod) in problem.pods.iter().enumerate() {
        let terms = problem.terms.get(i).copied();
        terms.unwrap_or_else(|| pods::terms_of(pod)).hash(&mut h);
        match problem.requests.get(i) {
            Some(r) => r.hash(&mut h),
            None => pod_requests(pod).hash(&mut h),
        }
    }
    format!("{:?}", problem.options).hash(&mut h);
    Some(BoundKey {
        types: (problem.node_pools.iter())
            .map(|np| np.instance_types.clone())
            .collect(),
        fingerprint: h.finish(),
    })
}

/// [`cost_bound`], or an error without solving when the model would have more than
/// `variables` variables (groups of pods times the columns they may go to).
fn bound_within(
    problem: &Problem<'_>,
    catalog: &mut Catalog,
    variables: usize,
) -> Result<CostBound, String> {
    let state = State::new(problem, problem.pods.iter().copied(), catalog);
    let groups = state.groups();
    let mut columns = state.existing_columns(&groups);
    columns.extend(state.pool_columns(&groups));
    let columns = undominated(columns, |k| limited(&state.pools[k].budget));
    let placeable: Vec<bool> = (0..groups.len())
        .map(|g| columns.iter().any(|c| c.groups[g]))
        .collect();
    let unplaceable: usize = (groups.iter().zip(&placeable))
        .filter(|(_, p)| !**p)
        .map(|(g, _)| g.pods)
        .sum();
    let size: usize = columns
        .iter()
        .map(|c| c.groups.iter().filter(|g| **g).count())
        .sum();
    if size > variables {
        return Err(format!(
            "a model of {size} variables ({} groups of pods, {} columns) is past the {variables} solved while provisioning",
            groups.len(),
            columns.len()
        ));
    }
    let (per_hour, left, bought) =
        solve_lp(&state, &groups, &placeable, &columns).map_err(|e| e.to_string())?;
    let mut largest = vec![None; problem.node_pools.len()];
    for (column, nodes) in columns.iter().zip(bought) {
        let Some(k) = column.pool.filter(|_| nodes > 1e-6) else {
            continue;
        };
        let size: &mut NodeSize = largest[state.pools[k].input].get_or_insert_default();
        size.cpu_millis = size.cpu_millis.max(column.capacity.0[CPU]);
        size.memory_bytes = size.memory_bytes.max(column.capacity.0[MEMORY]);
    }
    Ok(CostBound {
        per_hour,
        unplaceable: unplaceable + left,
        groups: groups.len(),
        columns: columns.len(),
        largest,
    })
}

impl State<'_> {
    /// The pending pods, grouped.
    /// The pods in groups of alike ones; past [`EXACT_GROUPS`] groups, alike up to their
    /// requests rounded down to a grid (a looser bound, but a model that solves in
    /// milliseconds where thousands of pod sizes would take seconds).
    fn groups(&self) -> Vec<Group> {
        let exact = self.grouped(false);
        if exact.len() <= EXACT_GROUPS {
            return exact;
        }
        self.grouped(true)
    }

    fn grouped(&self, coarse: bool) -> Vec<Group> {
        let mut groups: Vec<Group> = Vec::new();
        for (i, info) in self.pods.iter().enumerate() {
            let requests = if coarse {
                rounded_down(info.requests)
            } else {
                info.requests
            };
            let base = match &info.volume_reqs {
                Some(v) => info.node_selector.intersection(v, &self.symbols),
                None => info.node_selector.clone(),
            };
            let mut reqs: Vec<Reqs> = if info.required_terms.is_empty() {
                vec![base]
            } else {
                (info.required_terms.iter())
                    .map(|t| base.intersection(t, &self.symbols))
                    .collect()
            };
            for r in &mut reqs {
                r.remove(self.hostname);
            }
            let wanders = !(info.spreads.is_empty()
                && info.affinity.is_empty()
                && info.anti.is_empty()
                && info.inverse.is_empty()
                && info.preferred_affinity.is_empty()
                && info.preferred_anti.is_empty()
                && info.preferred_terms.is_empty());
            let topology = &self.topology;
            let alone = info.anti.iter().copied().find(|id| {
                topology.groups()[*id].def.key == self.hostname
                    && topology.selects(*id, info.namespace, &info.labels)
            });
            let alike = |g: &&mut Group| {
                let first = &self.pods[g.first];
                g.requests == requests
                    && g.tolerations == self.toleration_ids[i] as usize
                    && g.wanders == wanders
                    && g.reqs == reqs
                    && g.alone == alone
                    && (alone.is_none()
                        || (first.namespace == info.namespace && first.labels == info.labels))
            };
            match groups.iter_mut().find(alike) {
                Some(g) => g.pods += 1,
                None => groups.push(Group {
                    requests,
                    reqs,
                    tolerations: self.toleration_ids[i] as usize,
                    first: i,
                    wanders,
                    alone,
                    pods: 1,
                }),
            }
        }
        groups
    }

    /// The tolerations a group's pods share.
    fn tolerations_of(&self, group: &Group) -> &[k8s_openapi::api::core::v1::Toleration] {
        &self.pods[group.first].tolerations
    }

    /// The room left on each existing node, for the groups its labels and taints admit.
    fn existing_columns(&self, groups: &[Group]) -> Vec<Column> {
        let mut out = Vec::new();
        for (b, bin) in self.bins.iter().enumerate() {
            if bin.node().is_none() || self.excluded.get(b).copied().unwrap_or(false) {
                continue;
            }
            let taints = self.taints_of(bin);
            let room = self.headroom(bin);
            let admits: Vec<bool> = (groups.iter())
                .map(|g| {
                    first_untolerated(self.tolerations_of(g), taints, true).is_none()
                        && (g.reqs.iter()).any(|r| bin.reqs.intersects(r, &self.symbols).is_ok())
                        && g.requests.fits(&room)
                })
                .collect();
            if admits.iter().any(|a| *a) {
                out.push(Column {
                    price: 0.0,
                    room,
                    capacity: Amounts::default(),
                    pool: None,
                    groups: admits,
                });
            }
        }
        out
    }

    /// Each NodePool's instance types per capacity type, for the groups that may use them.
    fn pool_columns(&self, groups: &[Group]) -> Vec<Column> {
        // every NodePool's columns with the groups its requirements, taints and types admit
        let mut by_pool: Vec<Vec<Column>> = (0..self.pools.len())
            .map(|k| self.columns_of(k, groups))
            .collect();
        // then by weight: a group opens nodes in the first NodePool with a column for it,
        // and in the ones after only while that one has limits or the group may wander;
        // it may join nodes of any NodePool some group opens nodes in
        let mut opens = vec![false; self.pools.len()];
        for (g, group) in groups.iter().enumerate() {
            for &k in &self.pool_order {
                if by_pool[k].iter().any(|c| c.groups[g]) {
                    opens[k] = true;
                    if !group.wanders && !limited(&self.pools[k].budget) {
                        break;
                    }
                }
            }
        }
        for (k, columns) in by_pool.iter_mut().enumerate() {
            if !opens[k] {
                columns.clear();
            }
        }
        (self.pool_order.iter())
            .flat_map(|k| std::mem::take(&mut by_pool[*k]))
            .filter(|c| c.groups.iter().any(|g| *g))
            .collect()
    }

    /// A NodePool's instance types per capacity type, each priced at the cheapest offering
    /// of that capacity type a group it admits may buy.
    fn columns_of(&self, k: usize, groups: &[Group]) -> Vec<Column> {
        let pool = &self.pools[k];
        let takers: Vec<usize> = (0..groups.len())
            .filter(|g| self.pool_takes(k, &groups[*g]))
            .collect();
        // each taker's requirement alternatives within the NodePool's
        let within: Vec<Vec<Reqs>> = (takers.iter())
            .map(|g| {
                (groups[*g].reqs.iter())
                    .map(|r| pool.reqs.intersection(r, &self.symbols))
                    .collect()
            })
            .collect();
        let mut out = Vec::new();
        for info in &pool.types {
            let room = info.allocatable.minus(&pool.overhead);
            let mut by_capacity_type: Vec<(crate::symbols::Sym, f64, Vec<bool>)> = Vec::new();
            for o in info.offerings.iter().filter(|o| o.available) {
                let at = match by_capacity_type.iter().position(|c| c.0 == o.capacity_type) {
                    Some(i) => i,
                    None => {
                        let none = vec![false; groups.len()];
                        by_capacity_type.push((o.capacity_type, f64::INFINITY, none));
                        by_capacity_type.len() - 1
                    }
                };
                let column = &mut by_capacity_type[at];
                for (j, g) in takers.iter().enumerate() {
                    if !groups[*g].requests.fits(&room) {
                        continue;
                    }
                    let fits = within[j].iter().any(|r| {
                        info.reqs.intersects(r, &self.symbols).is_ok()
                            && o.allowed(r, &self.offering_keys, &self.symbols)
                    });
                    if fits {
                        column.2[*g] = true;
                        column.1 = column.1.min(o.price_per_hour);
                    }
                }
            }
            for (_, price, groups_of) in by_capacity_type {
                if price.is_finite() && groups_of.iter().any(|g| *g) {
                    out.push(Column {
                        price,
                        room,
                        capacity: info.capacity,
                        pool: Some(k),
                        groups: groups_of,
                    });
                }
            }
        }
        out
    }

    /// Whether a NodePool's requirements and taints admit the group at all.
    fn pool_takes(&self, k: usize, group: &Group) -> bool {
        let pool = &self.pools[k];
        let np = &self.problem.node_pools[pool.input];
        let wk = self.well_known;
        first_untolerated(self.tolerations_of(group), &np.taints, true).is_none()
            && (group.reqs.iter()).any(|r| {
                pool.reqs
                    .compatible(r, |key| key.index() < wk, &self.symbols)
                    .is_ok()
            })
    }
}

/// Whether a NodePool's remaining limits bound anything.
fn limited(budget: &Amounts) -> bool {
    budget.0.iter().any(|v| *v < Amounts::UNBOUNDED.0[0] / 2)
}

/// The columns no other of the same NodePool beats: one at most as cheap, with at least as
/// much room, taking every group it takes, and, in a NodePool with limits, spending no more
/// of them.
fn undominated(mut columns: Vec<Column>, limited_pool: impl Fn(usize) -> bool) -> Vec<Column> {
    columns.sort_by(|a, b| a.price.total_cmp(&b.price));
    let mut kept: Vec<Column> = Vec::new();
    for c in columns {
        let beaten = c.pool.is_some()
            && kept.iter().any(|k| {
                k.pool == c.pool
                    && k.price <= c.price
                    && c.room.fits(&k.room)
                    && c.groups.iter().zip(&k.groups).all(|(a, b)| !*a || *b)
                    && c.pool
                        .is_none_or(|p| !limited_pool(p) || k.capacity.fits(&c.capacity))
            });
        if !beaten {
            kept.push(c);
        }
    }
    kept
}

/// Solves the model over the groups some column takes: the optimum's cost, how many pods
/// the NodePools' limits leave no room for (each priced above any node, so the model places
/// every pod it can; those it cannot are left out of the cost), and the nodes it buys of
/// each column.
fn solve_lp(
    state: &State<'_>,
    groups: &[Group],
    placeable: &[bool],
    columns: &[Column],
) -> Result<(f64, usize, Vec<f64>), ResolutionError> {
    if !placeable.iter().any(|p| *p) {
        return Ok((0.0, 0, vec![0.0; columns.len()]));
    }
    let dearest = columns.iter().map(|c| c.price).fold(0.0, f64::max);
    let left_out = 10.0 * (dearest + 1.0);
    // each resource in units of the largest column's room, for a well-scaled model
    let mut scale = [1.0f64; SLOTS];
    for (d, s) in scale.iter_mut().enumerate() {
        let most = columns.iter().map(|c| c.room.0[d]).max().unwrap_or(1);
        *s = (most.clamp(1, Amounts::UNBOUNDED.0[0] / 2)) as f64;
    }
    let requested: Vec<usize> = (0..SLOTS)
        .filter(|d| *d != NODES && groups.iter().any(|g| g.requests.0[*d] > 0))
        .collect();
    let mut vars = variables!();
    let x: Vec<Option<Variable>> = (columns.iter())
        .map(|c| c.pool.map(|_| vars.add(variable().min(0.0))))
        .collect();
    let y: Vec<Vec<Option<Variable>>> = (columns.iter())
        .map(|c| {
            (0..groups.len())
                .map(|g| (c.groups[g] && placeable[g]).then(|| vars.add(variable().min(0.0))))
                .collect()
        })
        .collect();
    let mut cost = Expression::from(0.0);
    for (c, column) in columns.iter().enumerate() {
        if let Some(x) = x[c] {
            cost += column.price * x;
        }
    }
    let unplaced: Vec<Option<Variable>> = (0..groups.len())
        .map(|g| placeable[g].then(|| vars.add(variable().min(0.0))))
        .collect();
    let penalty: Expression = unplaced.iter().flatten().map(|u| left_out * *u).sum();
    let mut model = vars.minimise(cost.clone() + penalty).using(clarabel);
    for (g, group) in groups.iter().enumerate() {
        let Some(u) = unplaced[g] else { continue };
        let placed: Expression = (0..columns.len())
            .filter_map(|c| y[c][g])
            .map(Expression::from)
            .sum();
        model = model.with((placed + u).eq(group.pods as f64));
    }
    // a row without a variable is left out: the simplex takes it for a singular matrix
    for (c, column) in columns.iter().enumerate() {
        for &d in &requested {
            let mut used = Expression::from(0.0);
            let mut any = false;
            for (g, group) in groups.iter().enumerate() {
                if let Some(y) = y[c][g]
                    && group.requests.0[d] > 0
                {
                    used += (group.requests.0[d] as f64 / scale[d]) * y;
                    any = true;
                }
            }
            if !any {
                continue;
            }
            let room = column.room.0[d].max(0) as f64 / scale[d];
            model = match x[c] {
                Some(x) => model.with(used.leq(room * x)),
                None => model.with(used.leq(room)),
            };
        }
    }
    // a group whose pods keep apart by hostname: one of them per node at most
    for (c, row) in y.iter().enumerate() {
        for (g, group) in groups.iter().enumerate() {
            if let (Some(y), Some(_)) = (row[g], group.alone) {
                model = match x[c] {
                    Some(x) => model.with(Expression::from(y).leq(x)),
                    None => model.with(Expression::from(y).leq(1.0)),
                };
            }
        }
    }
    // NodePools with limits: their columns' nodes within what the limits leave
    for (k, pool) in state.pools.iter().enumerate() {
        if !limited(&pool.budget) {
            continue;
        }
        for (d, (budget, unit)) in pool.budget.0.iter().zip(scale).enumerate() {
            if *budget >= Amounts::UNBOUNDED.0[0] / 2 {
                continue;
            }
            let unit = unit.max(1.0);
            let mut spent = Expression::from(0.0);
            let mut any = false;
            for (c, column) in columns.iter().enumerate() {
                if let (Some(x), Some(p)) = (x[c], column.pool)
                    && p == k
                    && column.capacity.0[d] > 0
                {
                    spent += (column.capacity.0[d] as f64 / unit) * x;
                    any = true;
                }
            }
            if !any {
                continue;
            }
            model = model.with(spent.leq((*budget).max(0) as f64 / unit));
        }
    }
    let solution = model.solve()?;
    let left: f64 = unplaced.iter().flatten().map(|u| solution.value(*u)).sum();
    let bought = x
        .iter()
        .map(|x| x.map_or(0.0, |x| solution.value(x)))
        .collect();
    Ok((solution.eval(&cost), left.round() as usize, bought))
}

/// The largest model provisioning solves for its bound (about 50 ms): a batch of more
/// distinct pods over more instance types keeps Karpenter's packing.
const NEAR_VARIABLES: usize = 20_000;

/// Up to how many groups of exactly alike pods the model keeps them apart.
const EXACT_GROUPS: usize = 64;

/// Each request rounded down to a power of 1.25 (pods and nodes counted as they are): pods
/// whose sizes differ by less than that share a group, and no pod asks for more in the
/// model than it does.
fn rounded_down(requests: Amounts) -> Amounts {
    let mut out = requests;
    for (d, v) in out.0.iter_mut().enumerate() {
        if d == PODS || d == NODES || *v <= 1 {
            continue;
        }
        let step = (*v as f64).ln() / 1.25f64.ln();
        let grid = 1.25f64.powi(step.floor() as i32).floor() as i64;
        *v = grid.clamp(1, *v);
    }
    out
}

/// How far above the bound a decision may cost before a packing with smaller nodes is tried.
const NEAR: f64 = 1.05;

/// The NodePools with each one's instance types capped at the largest node a bound's
/// optimum buys there (`largest`, as [`CostBound::largest`]; a pool it buys nothing in keeps
/// every type): what a packing that should not pay for unused room may choose from.
pub fn capped_pools(pools: &[NodePoolInput], largest: &[Option<NodeSize>]) -> Vec<NodePoolInput> {
    (pools.iter().zip(largest))
        .map(|(np, size)| {
            let Some(size) = size else {
                return np.clone();
            };
            NodePoolInput {
                largest: Some(*size),
                ..np.clone()
            }
        })
        .collect()
}

/// Karpenter's decision, or, where it costs more than the bound allows, the same solver's
/// decision over the NodePools' types no larger than the bound's optimum buys, when that one
/// places as many pods for less. Every rule that decides where a pod may go is the solver's
/// in both; only the size a NodeClaim may grow to differs. Returns the bound too, unless
/// Karpenter's decision launches nothing: then there is no cost to hold against one, and
/// its linear program (most of a provisioning pass while pods wait for room no NodePool
/// offers) is not solved.
pub fn solve_near_bound(
    problem: &Problem<'_>,
    catalog: &mut Catalog,
) -> (crate::Decision, Option<Result<CostBound, String>>) {
    let first = super::solve_with(problem, catalog);
    if first.nodeclaims.is_empty() {
        return (first, None);
    }
    let bound = bound_within(problem, catalog, NEAR_VARIABLES);
    let Ok(b) = &bound else {
        return (first, Some(bound));
    };
    if first.cost_per_hour() <= b.per_hour * NEAR {
        return (first, Some(bound));
    }
    let capped = capped_pools(problem.node_pools, &b.largest);
    let smaller = Problem {
        node_pools: &capped,
        ..*problem
    };
    // capped NodePools reuse the types compiled for them uncapped
    let second = super::solve_with(&smaller, catalog);
    let better = second.unschedulable.len() <= first.unschedulable.len()
        && second.cost_per_hour() < first.cost_per_hour() - 1e-9;
    (if better { second } else { first }, Some(bound))
}
