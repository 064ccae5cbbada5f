//! What every controller that solves reads, and the solve itself: the instance types each
//! NodePool offers (a node class's types with the offerings found unavailable marked, the
//! NodeOverlays laid over them, the reservations promised to NodeClaims in flight taken
//! off), the capacity already in place, and the options the solver runs with. Provisioning,
//! consolidation, static NodePools and `explain` all solve through these.

use super::desk::Desk;
use super::provisioning::{Packing, Solved, node_labels, scheduling_taints, type_allocatable};
use crate::nodepools::{daemon_runs_on, node_pool_input};
use k8s_openapi::api::core::v1::Pod;
use kerf_api::NodePool;
use kerf_scheduling::resources::{Resources, pod_requests};
use kerf_scheduling::{
    BoundPod, ExistingNode, InstanceTypeOption, NodePoolInput, Problem, SolveOptions, solve_with,
};
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
impl Desk {
    /// The NodeOverlays laid over every NodePool's instance types (none with the gate off).
    pub(super) fn overlay_evaluation(&mut self, now: Duration) -> crate::overlays::Evaluation {
        if !self.settings.node_overlay || self.cluster.node_overlays.is_empty() {
            return crate::overlays::Evaluation::default();
        }
        let generation = self.unavailable.generation();
        let cluster = self.cluster.catalog_generation();
        if let Some((c, u, evaluation)) = &self.overlay_cache
            && (*c, *u) == (cluster, generation)
        {
            return evaluation.clone();
        }
        let pools: Vec<(String, kerf_api::NodePool)> = (self.cluster.node_pools.iter())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut inputs = Vec::new();
        for (name, np) in pools {
            let class = np.spec.template.spec.node_class_ref.name.clone();
            let types = self.type_options_for(&class, generation, now);
            inputs.push((name, np, types));
        }
        let evaluation = crate::overlays::evaluate(&self.cluster.node_overlays, &inputs);
        self.overlay_cache = Some((cluster, generation, evaluation.clone()));
        evaluation
    }

    pub(super) fn type_options_for(
        &mut self,
        class: &str,
        generation: u64,
        now: Duration,
    ) -> Arc<[InstanceTypeOption]> {
        let base = self
            .cluster
            .instance_types
            .get(class)
            .cloned()
            .unwrap_or_else(|| Arc::from(Vec::new()));
        if let Some(cached) = self.type_options.get(class)
            && cached.generation == generation
            && Arc::ptr_eq(&cached.base, &base)
        {
            return cached.options.clone();
        }
        // most changes to the unavailable offerings touch other classes or none of the
        // offerings still marked: the options are rebuilt only when the marks differ
        let unavailable = &self.unavailable;
        let marked: Vec<(usize, usize)> = base
            .iter()
            .enumerate()
            .flat_map(|(i, t)| {
                t.offerings.iter().enumerate().filter_map(move |(j, o)| {
                    (o.available
                        && unavailable.is_unavailable(&o.capacity_type, &t.name, &o.zone, now))
                    .then_some((i, j))
                })
            })
            .collect();
        if let Some(cached) = self.type_options.get_mut(class)
            && cached.marked == marked
            && Arc::ptr_eq(&cached.base, &base)
        {
            cached.generation = generation;
            return cached.options.clone();
        }
        // with nothing marked the provider's own list serves: no copy of every offering
        let options: Arc<[InstanceTypeOption]> = if marked.is_empty() {
            Arc::clone(&base)
        } else {
            let mut types = base.to_vec();
            for (i, j) in &marked {
                types[*i].offerings[*j].available = false;
            }
            types.into()
        };
        self.type_options.insert(
            class.to_string(),
            super::TypeOptions {
                base,
                generation,
                marked,
                options: options.clone(),
            },
        );
        options
    }

    /// The NodePools as the scheduler sees them at `now`: instance types with the offerings the
    /// unavailable cache rules out, and usage counted against limits; with their names.
    pub(super) fn pool_inputs(&mut self, now: Duration) -> (Vec<NodePoolInput>, Vec<String>) {
        self.unavailable.expire(now);
        let generation = self.unavailable.generation();
        let mut pools = Vec::new();
        let mut names = Vec::new();
        let entries: Vec<(String, NodePool)> = self
            .cluster
            .node_pools
            .iter()
            // a static NodePool keeps its own count: no pod or replacement gets a node of it
            .filter(|(k, np)| np.spec.replicas.is_none() && self.cluster.may_launch_for(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let overlaid = self.overlay_evaluation(now);
        for (name, np) in entries {
            let class = np.spec.template.spec.node_class_ref.name.clone();
            let options = match overlaid.by_pool.get(&name) {
                Some(types) => types.clone(),
                None => self.type_options_for(&class, generation, now),
            };
            let options = self.less_reservations_in_flight(options);
            let usage = self.cluster.pool_usage(&name);
            let nodes = self.cluster.pool_nodes(&name);
            pools.push(node_pool_input(&np, options, usage, nodes));
            names.push(name);
        }
        (pools, names)
    }

    /// The prices NodeOverlays give the offerings of these instance types in this NodePool
    /// (empty when no overlay applies).
    pub(super) fn overlaid_prices(
        &mut self,
        pool: &str,
        types: &[String],
        now: Duration,
    ) -> BTreeMap<(String, String, String), f64> {
        let mut prices = BTreeMap::new();
        let Some(overlaid) = self.overlay_evaluation(now).by_pool.remove(pool) else {
            return prices;
        };
        for t in overlaid.iter().filter(|t| types.contains(&t.name)) {
            for o in &t.offerings {
                let key = (t.name.clone(), o.zone.clone(), o.capacity_type.clone());
                prices.insert(key, o.price_per_hour);
            }
        }
        prices
    }

    /// The solve options the policies in the settings ask for.
    pub(super) fn solve_options(&self) -> SolveOptions {
        SolveOptions {
            preferences: self.settings.preference_policy,
            min_values: self.settings.min_values_policy,
            ..SolveOptions::default()
        }
    }

    /// One solve of these pods over the cluster's nodes and in-flight NodeClaims (with the
    /// pods bound or nominated to them) and the given NodePools.
    pub(super) fn solve_over(
        &self,
        keys: Vec<String>,
        pools: &[NodePoolInput],
        pool_names: Vec<String>,
        options: SolveOptions,
        packing: Packing,
    ) -> Solved {
        let cluster = &self.cluster;
        let pods: Vec<&Pod> = keys.iter().map(|k| &*cluster.pods[k].shape).collect();
        let requests: Vec<Resources> = keys
            .iter()
            .map(|k| cluster.pods[k].requests.clone())
            .collect();
        let terms: Vec<u64> = keys.iter().map(|k| cluster.pods[k].terms).collect();
        let solved = self.solve_shapes(&pods, &requests, &terms, pools, options, packing);
        Solved {
            pods: keys,
            node_pools: pool_names,
            ..solved
        }
    }

    /// One solve of pods given by shape, requests and terms over the cluster's nodes and
    /// in-flight NodeClaims (with the pods bound or nominated to them) and the given
    /// NodePools (the answer names no pods or NodePools: the caller knows them).
    pub(super) fn solve_shapes(
        &self,
        pods: &[&Pod],
        requests: &[Resources],
        terms: &[u64],
        pools: &[NodePoolInput],
        options: SolveOptions,
        packing: Packing,
    ) -> Solved {
        let (existing, existing_claims) = self.capacity_in_place(pools);
        let index_by_claim: HashMap<&str, usize> = existing_claims
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_deref().map(|c| (c, i)))
            .collect();
        let cluster = &self.cluster;
        let index_by_node: HashMap<&str, usize> = existing_claims
            .iter()
            .zip(&existing)
            .enumerate()
            .filter_map(|(i, (c, e))| match c {
                Some(c) => cluster.nodeclaims[c].node.as_deref().map(|n| (n, i)),
                None => Some((e.name.as_str(), i)),
            })
            .collect();
        let bound: Vec<BoundPod<'_>> = cluster
            .pods
            .values()
            .filter_map(|p| {
                let at = match (&p.node, &p.nominated) {
                    (Some(n), _) => index_by_node.get(n.as_str()),
                    (None, Some(claim)) => index_by_claim.get(claim.as_str()),
                    _ => None,
                };
                at.map(|&node| BoundPod {
                    node,
                    pod: &p.shape,
                    terms: Some(p.terms),
                })
            })
            .collect();
        let daemonsets: Vec<Pod> = cluster.daemonsets.values().cloned().collect();
        let problem = Problem {
            node_pools: pools,
            nodes: &existing,
            bound_pods: &bound,
            daemonsets: &daemonsets,
            pods,
            requests,
            terms,
            options,
        };
        let catalog = &mut self.catalog.borrow_mut();
        let (decision, bound) = match packing {
            Packing::Karpenter => (solve_with(&problem, catalog), None),
            Packing::NearBound => kerf_scheduling::solve_near_bound(&problem, catalog),
        };
        Solved {
            decision,
            bound,
            pods: Vec::new(),
            node_pools: Vec::new(),
            nodes: existing.into_iter().map(|e| e.name).collect(),
            claims: existing_claims,
            ignored: Vec::new(),
        }
    }

    /// Launched NodeClaims as the scheduler's existing nodes (registered ones as their
    /// node, the others as the node they will become), with their names; then the nodes
    /// Kerf does not manage (a managed node group's), whose room and bound pods count too.
    pub(super) fn capacity_in_place(
        &self,
        pools: &[NodePoolInput],
    ) -> (Vec<ExistingNode>, Vec<Option<String>>) {
        let cluster = &self.cluster;
        let nominated = cluster.nominated_requests();
        let mut existing = Vec::new();
        let mut names = Vec::new();
        for (name, c) in &cluster.nodeclaims {
            let Some(pool) = cluster.node_pools.get(&c.node_pool) else {
                continue;
            };
            let Some(launched) = &c.launched else {
                if let Some(waiting) = nominated.get(name.as_str())
                    && c.node.is_none()
                    && c.deleting.is_none()
                {
                    existing.push(awaiting_launch(name, c, pool, waiting));
                    names.push(Some(name.clone()));
                }
                continue;
            };
            let node = c.node.as_ref().and_then(|n| cluster.nodes.get(n));
            let by_type = type_allocatable(pools, &c.node_pool, &launched.instance_type);
            let entry = match node {
                Some(n) => ExistingNode {
                    name: c.node.clone().unwrap_or_default(),
                    labels: n.labels.clone(),
                    taints: scheduling_taints(n, &c.startup_taints, c.initialized),
                    allocatable: {
                        let mut a = n.allocatable.clone();
                        cluster
                            .volumes
                            .add_attach_slots(c.node.as_deref(), by_type, &mut a);
                        a
                    },
                    // its bound pods, and the pods nominated to it that kube-scheduler has
                    // not bound yet (a solve does not place them again)
                    requested: {
                        let mut r = n.requests.clone();
                        if let Some(waiting) = nominated.get(name.as_str()) {
                            r.add(waiting);
                        }
                        r
                    },
                    initialized: c.initialized,
                },
                None => {
                    let mut requested = nominated.get(name.as_str()).cloned().unwrap_or_default();
                    let labels = node_labels(launched, pool, name);
                    // it registers with its NodeClaim's taints (its startup taints go away)
                    let taints = c.taints.clone();
                    for ds in cluster.daemonsets.values() {
                        if daemon_runs_on(ds, &labels, &taints) {
                            requested.add(&pod_requests(ds));
                        }
                    }
                    let mut allocatable = launched.allocatable.clone();
                    cluster
                        .volumes
                        .add_attach_slots(None, by_type, &mut allocatable);
                    ExistingNode {
                        name: name.clone(),
                        labels: labels.into(),
                        taints,
                        allocatable,
                        requested,
                        initialized: false,
                    }
                }
            };
            existing.push(entry);
            names.push(Some(name.clone()));
        }
        for (name, n) in &cluster.nodes {
            if n.nodeclaim.is_some() {
                continue;
            }
            let mut e = n.as_existing(name, n.ready);
            cluster
                .volumes
                .add_attach_slots(Some(name), None, &mut e.allocatable);
            existing.push(e);
            names.push(None);
        }
        (existing, names)
    }
}

/// A NodeClaim whose launch has not answered, as a node holding the pods nominated to it
/// where its requirements put them, with no room for more (its instance type is not known
/// yet). A later solve counts those pods for topology and affinity: the batch's next round,
/// or a batch while creates wait on the API server. Left out, a zone spread's second pod
/// was planned into the zone the first was just given, and both nominations were ended as
/// their nodes registered (swarm seed 140683).
fn awaiting_launch(
    name: &str,
    c: &crate::cluster::ClaimRecord,
    pool: &NodePool,
    waiting: &Resources,
) -> ExistingNode {
    let mut labels: BTreeMap<String, String> = (c.requirements.iter())
        .filter(|r| r.operator == kerf_api::Operator::In)
        .filter_map(|r| match r.values.as_slice() {
            [value] => Some((r.key.clone(), value.clone())),
            _ => None,
        })
        .collect();
    labels.extend(pool.spec.template.metadata.labels.clone());
    labels.insert(
        kerf_api::labels::NODEPOOL.into(),
        pool.metadata.name.clone().unwrap_or_default(),
    );
    labels.insert(kerf_api::labels::HOSTNAME.into(), name.to_string());
    ExistingNode {
        name: name.to_string(),
        labels: Arc::new(labels),
        taints: c.taints.clone(),
        allocatable: waiting.clone(),
        requested: waiting.clone(),
        initialized: false,
    }
}
