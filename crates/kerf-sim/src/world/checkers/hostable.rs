//! Which waiting pods a new node could host, judged apart from Kerf: for every NodePool
//! with room under its limits, a node of each instance type and offering its requirements
//! allow is imagined (the type's labels and allocatable less the DaemonSets that would run
//! there, the NodePool's labels and taints, the type's EBS attachment limit), and the
//! simulated kube-scheduler is asked whether the pod would go to one of them, with the pods
//! bound now counting for spread and affinity and the claims stored now for volumes.
//!
//! It reads the stored objects and the cloud's catalog, never Kerf's solver: a pod Kerf
//! wrongly believes has room somewhere (and so never gets a node) is caught here.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::rc::Rc;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, Pod};
use kerf_api::{NodePool, NodeSelectorRequirementWithMinValues, Operator, Taint, labels};

use super::{Checkers, Sight};
use crate::kube_scheduler::{self, Amounts, Scheduler};

/// An imagined node of a NodePool.
pub(super) struct Imagined {
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    allocatable: Amounts,
    ebs: i64,
    /// Its NodePool, as an index into the rooms.
    pool: usize,
    /// Its capacity against the NodePool's limits: millicores and bytes.
    capacity: (i64, i64),
}

impl Imagined {
    fn node(&self) -> kube_scheduler::Node<'_> {
        kube_scheduler::Node {
            name: &self.labels[labels::HOSTNAME],
            labels: &self.labels,
            taints: &self.taints,
            allocatable: Cow::Borrowed(&self.allocatable),
            ready: true,
            volume_limits: [(labels::EBS_CSI_DRIVER, self.ebs)].into(),
        }
    }
}

/// The imagined nodes kept between looks: the generation of NodePools, classes and
/// DaemonSets they were imagined for, the nodes, and the names of their NodePools.
pub(super) type Kept = (u64, Rc<Vec<Imagined>>, Rc<Vec<String>>);

/// What a NodePool's limits leave: its instances' capacity and count so far, and the limits
/// (cpu in millicores, memory and nodes in thousandths, as quantities read).
struct Room {
    used: (i64, i64),
    count: i64,
    cpu: Option<i64>,
    memory: Option<i64>,
    nodes: Option<i64>,
}

impl Room {
    fn fits(&self, (cpu, memory): (i64, i64)) -> bool {
        self.nodes.is_none_or(|l| (self.count + 1) * 1000 <= l)
            && self.cpu.is_none_or(|l| self.used.0 + cpu <= l)
            && (self.memory).is_none_or(|l| (self.used.1 + memory).saturating_mul(1000) <= l)
    }

    fn charge(&mut self, (cpu, memory): (i64, i64)) {
        self.used = (self.used.0 + cpu, self.used.1 + memory);
        self.count += 1;
    }
}

impl Checkers {
    /// The pods among `keys` new nodes could host now, placed together first-fit in the
    /// order given: each goes to a node imagined for an earlier one if the binder's filters
    /// let it, else to a new node its NodePool's limits still have room for. Pods that
    /// would share a NodePool's last room are not all counted hostable.
    pub(super) fn hostable_on_new_nodes(
        &mut self,
        seen: &Sight<'_>,
        keys: &[String],
    ) -> Vec<String> {
        let (imagined, mut rooms) = self.imagined_nodes(seen);
        if imagined.is_empty() {
            return Vec::new();
        }
        let storage = seen.api.storage.view();
        // the nodes that exist count as topology domains, but take nothing
        let mut nodes: Vec<kube_scheduler::Node<'_>> = (seen.api.nodes.iter())
            .map(|(name, n)| kube_scheduler::Node {
                name,
                labels: &n.labels,
                taints: &n.taints,
                allocatable: Cow::Owned(Amounts::new()),
                ready: false,
                volume_limits: BTreeMap::new(),
            })
            .collect();
        let mut template: Vec<Option<usize>> = vec![None; nodes.len()];
        nodes.extend(imagined.iter().map(Imagined::node));
        template.extend((0..imagined.len()).map(Some));
        let mut used = vec![false; template.len()];
        let bound = (seen.api.pods.values())
            .filter_map(|q| q.node.as_deref().map(|n| (q.declared(), &q.facts, n)));
        let mut scheduler = Scheduler::with_facts(nodes, bound, Some(storage));
        let mut out = Vec::new();
        // a pod just like one that found no node finds none either: the imagined nodes
        // only fill up
        let mut homeless: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for key in keys {
            let Some(p) = seen.api.pods.get(key) else {
                continue;
            };
            let class = p.facts.class();
            if homeless.contains(class) {
                continue;
            }
            let fresh = |i: usize| {
                !used[i]
                    && template[i]
                        .is_some_and(|t| rooms[imagined[t].pool].fits(imagined[t].capacity))
            };
            let placed = (scheduler.schedule_within(p.declared(), &p.facts, |i| used[i]))
                .or_else(|| scheduler.schedule_within(p.declared(), &p.facts, fresh));
            let Some(i) = placed else {
                homeless.insert(class);
                continue;
            };
            out.push(key.clone());
            if let (false, Some(t)) = (used[i], template[i]) {
                // this imagined node is launched: its NodePool has less room, and another
                // node of its kind may be imagined
                used[i] = true;
                rooms[imagined[t].pool].charge(imagined[t].capacity);
                scheduler.add_node(imagined[t].node());
                template.push(Some(t));
                used.push(false);
            }
        }
        out
    }

    /// A node of every type and offering each NodePool allows, and what each NodePool's
    /// limits leave now. The nodes change only with the NodePools, classes and DaemonSets
    /// (`imagined_generation`): they are kept between looks.
    fn imagined_nodes(&mut self, seen: &Sight<'_>) -> (Rc<Vec<Imagined>>, Vec<Room>) {
        let kept = (self.imagined.as_ref()).filter(|(g, _, _)| *g == self.imagined_generation);
        let (nodes, pools) = match kept {
            Some((_, nodes, pools)) => (nodes.clone(), pools.clone()),
            None => {
                let (nodes, pools) = self.imagine(seen);
                let (nodes, pools) = (Rc::new(nodes), Rc::new(pools));
                self.imagined = Some((self.imagined_generation, nodes.clone(), pools.clone()));
                (nodes, pools)
            }
        };
        let rooms = pools.iter().map(|name| self.room(seen, name)).collect();
        (nodes, rooms)
    }

    /// What a NodePool's limits leave now.
    fn room(&self, seen: &Sight<'_>, name: &str) -> Room {
        let (used, count) = seen.pool_usage(name);
        let limit = |resource: &str| {
            (seen.api.objects.node_pools.get(name))
                .and_then(|np| np.spec.limits.get(resource))
                .map(|q| i64::try_from(q.milli()).unwrap_or(i64::MAX))
        };
        Room {
            used,
            count,
            cpu: limit("cpu"),
            memory: limit("memory"),
            nodes: limit("nodes"),
        }
    }

    /// The imagined nodes, with the names of the NodePools their `pool` indexes.
    fn imagine(&mut self, seen: &Sight<'_>) -> (Vec<Imagined>, Vec<String>) {
        let pools: Vec<NodePool> = seen.api.objects.node_pools.values().cloned().collect();
        let mut out = Vec::new();
        let mut names = Vec::new();
        for pool in &pools {
            let name = pool.metadata.name.clone().unwrap_or_default();
            let spec = &pool.spec.template.spec;
            // a static NodePool makes no node for pods, gate on or off (swarm seed 5308); one
            // asking for minValues may not launch a single type (left to the minValues check)
            if pool.spec.replicas.is_some()
                || spec.requirements.iter().any(|r| r.min_values.is_some())
            {
                continue;
            }
            let index = names.len();
            let catalog = seen.catalog(&spec.node_class_ref.name);
            for t in catalog.iter() {
                let capacity = (t.capacity.cpu_millis, t.capacity.memory_bytes);
                for o in &t.offerings {
                    if o.reservation.is_some() {
                        continue;
                    }
                    let mut node_labels = t.labels.clone();
                    node_labels.insert(labels::ZONE.into(), o.zone.clone());
                    node_labels.insert(labels::CAPACITY_TYPE.into(), o.capacity_type.to_string());
                    node_labels.insert(labels::NODEPOOL.into(), name.clone());
                    node_labels.insert(
                        labels::HOSTNAME.into(),
                        format!("imagined-{}-{}", out.len(), t.name()),
                    );
                    node_labels.extend(
                        (pool.spec.template.metadata.labels.iter())
                            .map(|(k, v)| (k.clone(), v.clone())),
                    );
                    for r in &spec.requirements {
                        if r.operator == Operator::In
                            && !node_labels.contains_key(&r.key)
                            && let Some(v) = r.values.first()
                        {
                            node_labels.insert(r.key.clone(), v.clone());
                        }
                    }
                    let allowed = (spec.requirements.iter()).all(|r| {
                        kube_scheduler::requirement_holds(&as_node_selector(r), &node_labels)
                    });
                    if !allowed {
                        continue;
                    }
                    let mut allocatable = super::allocatable_amounts(&t.allocatable);
                    for ds in seen.api.objects.daemonsets.values() {
                        if runs_on(ds, &node_labels, &spec.taints) {
                            for (r, v) in kube_scheduler::requests(ds) {
                                *allocatable.entry(r).or_default() -= v;
                            }
                        }
                    }
                    out.push(Imagined {
                        labels: node_labels,
                        taints: spec.taints.clone(),
                        allocatable,
                        ebs: t.ebs_attachments,
                        pool: index,
                        capacity,
                    });
                }
            }
            names.push(name);
        }
        (out, names)
    }
}

/// Whether a DaemonSet's pod would run on a node with these labels and taints.
fn runs_on(ds: &Pod, node_labels: &BTreeMap<String, String>, taints: &[Taint]) -> bool {
    kube_scheduler::node_affinity_matches(ds, node_labels)
        && !kube_scheduler::untolerated(ds, taints)
}

/// A NodePool requirement as a node selector requirement (`Gte n` is `Gt n-1`, `Lte n` is
/// `Lt n+1`).
fn as_node_selector(r: &NodeSelectorRequirementWithMinValues) -> NodeSelectorRequirement {
    let shifted = |by: i64| {
        (r.values.iter())
            .map(|v| {
                v.parse::<i64>()
                    .map_or_else(|_| v.clone(), |n| (n + by).to_string())
            })
            .collect()
    };
    let (operator, values) = match r.operator {
        Operator::In => ("In", r.values.clone()),
        Operator::NotIn => ("NotIn", r.values.clone()),
        Operator::Exists => ("Exists", Vec::new()),
        Operator::DoesNotExist => ("DoesNotExist", Vec::new()),
        Operator::Gt => ("Gt", r.values.clone()),
        Operator::Lt => ("Lt", r.values.clone()),
        Operator::Gte => ("Gt", shifted(-1)),
        Operator::Lte => ("Lt", shifted(1)),
    };
    NodeSelectorRequirement {
        key: r.key.clone(),
        operator: operator.to_string(),
        values: Some(values),
    }
}

impl Sight<'_> {
    /// What a NodePool's instances hold now (cpu in millicores, memory in bytes) and how
    /// many there are, from the stored NodeClaims and the cloud's instances.
    pub(super) fn pool_usage(&self, pool: &str) -> ((i64, i64), i64) {
        let (mut cpu, mut memory, mut count) = (0, 0, 0);
        for (claim, instance) in self.cloud.instances.values() {
            let of_pool = (self.api.nodeclaims.get(claim)).is_some_and(|c| c.pool() == Some(pool));
            if of_pool {
                cpu += instance.capacity.cpu_millis;
                memory += instance.capacity.memory_bytes;
                count += 1;
            }
        }
        ((cpu, memory), count)
    }
}
