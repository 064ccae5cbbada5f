//! Why a pod is where it is, or still pending, and why a node is or is not about to be
//! disrupted: the controllers' own reasons as data, for `kerf explain`, the simulator's
//! `--explain-at` and the operator's Events.
//!
//! A waiting pod's place, or the reasons it has none, are what the provisioning pass that
//! last solved for it decided (kept by the provisioner), and say when; before any pass has,
//! they are a dry run of one, labelled so. The rest is read from the state the controllers
//! hold, with the same solver and the same disruption view a pass uses. Nothing changes.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::clock::rfc3339;
use kerf_api::duration::{NillableDuration, format_go_duration};
use kerf_api::labels;
use kerf_api::nodepool::DisruptionReason;
use kerf_scheduling::SolveOptions;
use serde::Serialize;

use super::Controllers;
use super::blockers::{Gathered, Wanted};
use super::disruption::{PassRecord, Rehearsal};
use super::provisioning::{Packing, PodOutcome};
use crate::disruption::rules::{
    budget_active, budget_allows, consolidatable_at, do_not_disrupt, do_not_disrupt_event,
};
use crate::disruption::search::{
    Alone, ClusterView, Command, Method, Worth, alone, policy_permits,
};

/// Why a pod is where it is.
#[derive(Clone, Debug, Serialize)]
pub struct PodExplanation {
    /// `namespace/name`.
    pub pod: String,
    /// Where it is, or would go.
    pub placement: Placement,
    /// For a pod waiting for a node, the provisioning pass whose decision `placement` is;
    /// `None` when no pass has decided about it as it waits now (it came since the last
    /// batch, a nomination ended, or the cluster was just read), and a pending pod's
    /// `placement` is then a dry run of a pass at the time asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided: Option<Decided>,
    /// Every NodePool in the order the provisioner tries them, each asked whether a new node
    /// of it could host the pod: a pending pod's answer is the provisioning pass's own,
    /// with the pods planned beside it, where that pass gave one.
    pub node_pools: Vec<PoolVerdict>,
    /// What each claim the pod mounts asks of its node, and why (a requirement a NodePool
    /// refuses may come from here, not from the pod's own spec).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
}

/// Where a pod is, or where the provisioner would put it now.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Placement {
    /// Bound to a node.
    Running {
        /// The node.
        node: String,
        /// The NodeClaim behind it, when Kerf launched it.
        nodeclaim: Option<String>,
        /// Its NodePool.
        node_pool: Option<String>,
        /// Its instance type, capacity type and zone, from the node's labels.
        instance_type: Option<String>,
        /// `karpenter.sh/capacity-type`.
        capacity_type: Option<String>,
        /// `topology.kubernetes.io/zone`.
        zone: Option<String>,
    },
    /// Waiting for a NodeClaim launched for it.
    Nominated {
        /// The NodeClaim.
        nodeclaim: String,
    },
    /// Pending; a provisioning pass now would launch a NodeClaim for it.
    WouldLaunch {
        /// The NodePool.
        node_pool: String,
        /// The cheapest instance type the NodeClaim may launch as.
        instance_type: String,
        /// How it would be bought.
        capacity_type: String,
        /// Where.
        zone: String,
        /// Dollars per hour.
        price_per_hour: f64,
        /// How many pending pods would share it, this one included.
        pods: usize,
    },
    /// Pending; it fits on a node that exists (or a NodeClaim coming up).
    WouldFit {
        /// The node or NodeClaim.
        node: String,
    },
    /// Pending, and no NodePool can host it: see the verdicts.
    Unschedulable,
}

/// When a provisioning pass decided about a pod.
#[derive(Clone, Debug, Serialize)]
pub struct Decided {
    /// RFC 3339.
    pub at: String,
    /// Next to the time asked: `12s ago`.
    pub ago: String,
}

/// One NodePool's answer for one pod.
#[derive(Clone, Debug, Serialize)]
pub struct PoolVerdict {
    /// The NodePool.
    pub node_pool: String,
    /// Its weight (higher is tried first).
    pub weight: i32,
    /// The launch a new node of it would be, when it could host the pod.
    pub fits: Option<Fit>,
    /// The first reason it cannot, as text.
    pub reason: Option<String>,
    /// What would change that.
    pub fix: Option<String>,
}

/// A launch that could host a pod.
#[derive(Clone, Debug, Serialize)]
pub struct Fit {
    /// The cheapest instance type.
    pub instance_type: String,
    /// How it is bought.
    pub capacity_type: String,
    /// Where.
    pub zone: String,
    /// Dollars per hour.
    pub price_per_hour: f64,
}

/// Why a node is, or is not, about to be disrupted.
#[derive(Clone, Debug, Serialize)]
pub struct NodeExplanation {
    /// The node.
    pub node: String,
    /// The NodeClaim behind it.
    pub nodeclaim: Option<String>,
    /// Its NodePool.
    pub node_pool: Option<String>,
    /// What it runs as, when launched.
    pub instance_type: Option<String>,
    /// How it is bought.
    pub capacity_type: Option<String>,
    /// Dollars per hour.
    pub price_per_hour: Option<f64>,
    /// The pods that would move if it went (daemonset pods left out).
    pub pods: Vec<String>,
    /// The move a disruption pass chose for it, with when, while that move is carried out;
    /// else what the next pass would do with it (a dry run), when it would act on it.
    pub decision: Option<String>,
    /// What keeps it from being disrupted now, each with a kind for programs.
    pub blockers: Vec<Finding>,
    /// Facts that bear on disruption but block nothing (drift, expiry, what consolidation
    /// would find for it alone).
    pub notes: Vec<Finding>,
}

/// One reason, with a stable kind for programs and a message for people.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Finding {
    /// A stable name: `do-not-disrupt`, `pdb`, `budget`, `consolidate-after`, …
    pub kind: &'static str,
    /// What it means here.
    pub message: String,
}

impl Finding {
    fn new(kind: &'static str, message: impl Into<String>) -> Finding {
        Finding {
            kind,
            message: message.into(),
        }
    }
}

/// How many back-to-back budget windows `until` follows before it stops looking.
const WINDOWS_AHEAD: usize = 48;

impl Controllers {
    /// Karpenter's `DisruptionBlocked` events, to be told: for each node consolidateAfter
    /// has made a candidate, the first thing in its own state or its pods that keeps it from
    /// being disrupted, on the Node and its NodeClaim (deduplicated as every event is).
    pub(super) fn blocked_events(&self, g: &Gathered<'_>, now: Duration) -> Vec<super::Event> {
        let mut events = Vec::new();
        for (name, n) in &self.desk.cluster.nodes {
            let Some(claim) = &n.nodeclaim else { continue };
            self.candidate_events(name, claim, g, &mut events, now);
            if n.marked_consolidatable != Some(n.last_pod_event) {
                continue;
            }
            // the first blocker alone, as `kerf explain` would list it first
            let Some(first) = self
                .disruption
                .blockers(&self.desk, name, g, Wanted::First, now)
                .into_iter()
                .next()
            else {
                continue;
            };
            // a node on its way out is not blocked, it is going
            if matches!(first.kind(), "deleting" | "being-disrupted") {
                continue;
            }
            let mut message = first.message(|at| relative(at, now));
            if let Some(c) = message.get(..1) {
                message = c.to_uppercase() + &message[1..];
            }
            for (kind, object) in [
                (super::EventObject::Node, name),
                (super::EventObject::NodeClaim, claim),
            ] {
                events.push(super::Event {
                    kind,
                    name: object.clone(),
                    warning: false,
                    reason: "DisruptionBlocked".into(),
                    message: message.clone(),
                });
            }
        }
        events
    }

    /// What Karpenter tells as it reads a node as a disruption candidate (its own state lets
    /// it be one): each pod's timed `karpenter.sh/do-not-disrupt` (`DoNotDisruptUntil` while
    /// it holds, `DoNotDisruptGracePeriodElapsed` after), and `Unconsolidatable` on the Node
    /// and NodeClaim when its NodePool turns consolidation off or allows it only when empty,
    /// or a CapacityBuffer holds room on it.
    fn candidate_events(
        &self,
        name: &str,
        claim: &str,
        g: &Gathered<'_>,
        events: &mut Vec<super::Event>,
        now: Duration,
    ) {
        let Some(c) = self.desk.cluster.nodeclaims.get(claim) else {
            return;
        };
        let Some(np) = self.desk.cluster.node_pools.get(&c.node_pool) else {
            return;
        };
        let node_level = self
            .disruption
            .blockers(&self.desk, name, g, Wanted::First, now)
            .into_iter()
            .next();
        if node_level.as_ref().is_some_and(|b| {
            !matches!(
                b,
                super::blockers::Blocker::PodDoNotDisrupt { .. }
                    | super::blockers::Blocker::Pdb { .. }
                    | super::blockers::Blocker::PdbMultiple { .. }
            )
        }) {
            return;
        }
        let pods = g.pods_by_node.get(name).map_or(&[][..], Vec::as_slice);
        for (key, p) in pods {
            let dnd = do_not_disrupt(&p.shape, p.started);
            let Some((reason, message, warning)) =
                do_not_disrupt_event(&dnd, now, self.desk.epoch())
            else {
                continue;
            };
            events.push(super::Event {
                kind: super::EventObject::Pod,
                name: (*key).clone(),
                warning,
                reason: reason.into(),
                message,
            });
        }
        // a candidate whose pods keep it stays one for the methods' own checks
        if node_level.is_some() || np.spec.replicas.is_some() {
            return;
        }
        let pool = &c.node_pool;
        let message = if self.buffers.held.contains_key(claim) {
            format!("Node {name:?} has buffer pods")
        } else if matches!(
            np.spec.disruption.consolidate_after,
            NillableDuration::Never
        ) {
            format!("NodePool {pool:?} has consolidation disabled")
        } else if !pods.is_empty()
            && !policy_permits(
                np.spec.disruption.consolidation_policy,
                DisruptionReason::Underutilized,
            )
        {
            format!("NodePool {pool:?} has consolidation policy WhenEmpty, but node is not empty")
        } else {
            return;
        };
        for (kind, object) in [
            (super::EventObject::Node, name),
            (super::EventObject::NodeClaim, claim),
        ] {
            events.push(super::Event {
                kind,
                name: object.to_string(),
                warning: false,
                reason: "Unconsolidatable".into(),
                message: message.clone(),
            });
        }
    }

    /// Why the pod `namespace/name` is where it is at `now`; `None` when no such pod is
    /// known.
    pub fn explain_pod(&mut self, key: &str, now: Duration) -> Option<PodExplanation> {
        let record = self.desk.cluster.pods.get(key)?;
        let (node, nominated) = (record.node.clone(), record.nominated.clone());
        let verdict = (self.provisioning.verdict(key, nominated.as_deref()))
            .filter(|_| node.is_none())
            .cloned();
        let decided = verdict.as_ref().map(|v| Decided {
            at: rfc3339(self.desk.epoch() + v.at),
            ago: relative(v.at, now),
        });
        // the reasons the provisioning pass itself gave, with the pods planned beside this
        // one: they come before what a NodePool would say of the pod alone (a limit the
        // others use up leaves the pod pending although a node of it could host it); with
        // no pass's decision standing, those of a dry run of one now
        let (placement, pass_reasons) = match (node, nominated, verdict.map(|v| v.outcome)) {
            (Some(node), _, _) => (self.running_on(node), Vec::new()),
            (None, Some(nodeclaim), _) => (Placement::Nominated { nodeclaim }, Vec::new()),
            (None, None, Some(PodOutcome::Unschedulable(reasons))) => {
                (Placement::Unschedulable, reasons)
            }
            (None, None, _) => self.pending_placement(key, now),
        };
        let (pools, names) = self.desk.pool_inputs(now);
        let mut order: Vec<usize> = (0..pools.len()).collect();
        order.sort_by(|a, b| {
            pools[*b]
                .weight
                .cmp(&pools[*a].weight)
                .then_with(|| names[*a].cmp(&names[*b]))
        });
        let alone = SolveOptions {
            existing_nodes: false,
            ..self.desk.solve_options()
        };
        let node_pools = order
            .into_iter()
            .map(|i| {
                let solved = self.desk.solve_over(
                    vec![key.to_string()],
                    &pools[i..=i],
                    vec![names[i].clone()],
                    alone,
                    Packing::Karpenter,
                );
                let d = &solved.decision;
                let fits = d.nodeclaims.first().map(|c| Fit {
                    instance_type: c.launch.instance_type.clone(),
                    capacity_type: c.launch.capacity_type.clone(),
                    zone: c.launch.zone.clone(),
                    price_per_hour: c.launch.price_per_hour,
                });
                let alone_why = d
                    .unschedulable
                    .first()
                    .and_then(|u| u.reasons.first())
                    .map(|r| &r.why);
                let in_pass = (pass_reasons.iter())
                    .find(|r| r.node_pool.as_deref() == Some(names[i].as_str()))
                    .map(|r| &r.why);
                let why = in_pass.or(alone_why);
                PoolVerdict {
                    node_pool: names[i].clone(),
                    weight: pools[i].weight,
                    fits: fits.filter(|_| in_pass.is_none()),
                    reason: why.map(ToString::to_string),
                    fix: why.map(kerf_scheduling::Why::fix),
                }
            })
            .collect();
        let volumes = self
            .desk
            .cluster
            .pods
            .get(key)
            .map(|p| self.desk.cluster.volumes.describe(p.declared()))
            .unwrap_or_default();
        Some(PodExplanation {
            pod: key.to_string(),
            placement,
            decided,
            node_pools,
            volumes,
        })
    }

    fn running_on(&self, node: String) -> Placement {
        let record = self.desk.cluster.nodes.get(&node);
        let label = |k: &str| record.and_then(|n| n.labels.get(k).cloned());
        let nodeclaim = record.and_then(|n| n.nodeclaim.clone());
        let node_pool = nodeclaim
            .as_ref()
            .and_then(|c| self.desk.cluster.nodeclaims.get(c))
            .map(|c| c.node_pool.clone())
            .or_else(|| label(labels::NODEPOOL));
        Placement::Running {
            nodeclaim,
            node_pool,
            instance_type: label(labels::INSTANCE_TYPE),
            capacity_type: label(labels::CAPACITY_TYPE),
            zone: label(labels::ZONE),
            node,
        }
    }

    /// The dry run for a pod no pass has decided about: where one provisioning pass over
    /// every pending pod would put this one, and the reasons it would give for leaving it
    /// pending.
    fn pending_placement(
        &mut self,
        key: &str,
        now: Duration,
    ) -> (Placement, Vec<kerf_scheduling::Reason>) {
        let mut keys = self.desk.cluster.pods_where(|p| p.wants_capacity());
        if !keys.iter().any(|k| k == key) {
            keys.push(key.to_string());
        }
        let (pools, names) = self.desk.pool_inputs(now);
        let solved = self.desk.solve_over(
            keys,
            &pools,
            names,
            self.desk.solve_options(),
            Packing::NearBound,
        );
        let Some(index) = solved.pods.iter().position(|k| k == key) else {
            return (Placement::Unschedulable, Vec::new());
        };
        let d = &solved.decision;
        if let Some(c) = d.nodeclaims.iter().find(|c| c.pods.contains(&index)) {
            let placement = Placement::WouldLaunch {
                node_pool: solved.node_pools[c.node_pool].clone(),
                instance_type: c.launch.instance_type.clone(),
                capacity_type: c.launch.capacity_type.clone(),
                zone: c.launch.zone.clone(),
                price_per_hour: c.launch.price_per_hour,
                pods: c.pods.len(),
            };
            return (placement, Vec::new());
        }
        if let Some(e) = d.existing.iter().find(|e| e.pods.contains(&index)) {
            let node = solved.nodes[e.node].clone();
            return (Placement::WouldFit { node }, Vec::new());
        }
        let reasons = (d.unschedulable.iter())
            .find(|u| u.pod == index)
            .map(|u| u.reasons.clone())
            .unwrap_or_default();
        (Placement::Unschedulable, reasons)
    }

    /// Why the node `name` is or is not about to be disrupted at `now`; `None` when no such
    /// node is known.
    pub fn explain_node(&mut self, name: &str, now: Duration) -> Option<NodeExplanation> {
        if !self.desk.cluster.nodes.contains_key(name) {
            return None;
        }
        // a move the pass chose and is still carrying out is told as chosen; else what the
        // next pass would do, by the pass's own search and kube-scheduler rehearsal run dry
        // (nothing recorded or told)
        let under_way = self
            .disruption
            .commands()
            .any(|c| c.candidates.iter().any(|n| n == name));
        let chosen = (self.disruption.choice(name).filter(|_| under_way)).map(|(at, text)| {
            format!("the disruption pass {} chose to {text}", relative(*at, now))
        });
        // a pass decides nothing while a command is validated or the cluster is not read
        // whole: told so, rather than a dry run of a pass that would not run
        let waits = if chosen.is_some() {
            None
        } else if self.disruption.validating() {
            Some(
                "a command is being validated: the next pass decides once it is carried out or given up",
            )
        } else if self.unsynced_since().is_some() {
            Some(
                "the cluster is not read whole yet (a watch relisting, or a launch not answered): no pass decides until it is",
            )
        } else {
            None
        };
        let rehearsal = (chosen.is_none() && waits.is_none())
            .then(|| self.with_repairs_as_at(now, |core| core.rehearse(false, now)));
        let (pools, pool_names) = self.desk.pool_inputs(now);
        let daemonsets: Vec<k8s_openapi::api::core::v1::Pod> =
            self.desk.cluster.daemonsets.values().cloned().collect();
        // one gathering for the node's own blockers and the view
        let g = self.gather();
        let mut out = self.described(name, &g, now)?;
        out.decision = chosen;
        let claim = out
            .nodeclaim
            .as_ref()
            .and_then(|c| self.desk.cluster.nodeclaims.get(c));
        if let Some(c) = claim {
            if let Some(d) = c.drifted {
                out.notes
                    .push(Finding::new("drifted", format!("drifted: {}", d.as_str())));
            }
            let expire = self
                .desk
                .cluster
                .node_pools
                .get(&c.node_pool)
                .map(|np| np.spec.template.spec.expire_after);
            if let Some(NillableDuration::After(ttl)) = expire {
                out.notes.push(Finding::new(
                    "expires",
                    format!(
                        "expires {} (expireAfter {})",
                        relative(c.created + ttl, now),
                        format_go_duration(ttl)
                    ),
                ));
            }
        }
        if let Some(record) = self
            .disruption
            .last_pass()
            .filter(|_| out.decision.is_none())
        {
            let chose = (self.disruption.choice(name))
                .filter(|(at, _)| *at == record.at)
                .map(|(_, text)| text.as_str());
            out.notes.push(last_pass(record, chose, name, now));
        }
        if let Some(rehearsal) = &rehearsal {
            dry_run(rehearsal, name, &mut out);
        }
        if let Some(why) = waits {
            out.notes.push(Finding::new("pass-waits", why));
        }
        let (view, names) = self.disruption.view(
            &self.desk,
            &self.disruption_facts(&g),
            pools,
            &pool_names,
            &daemonsets,
            now,
        );
        let Some(i) = names.iter().position(|n| n == name) else {
            return Some(out);
        };
        self.policy_blockers(&view, i, &pool_names, &mut out, now);
        if let Some(b) = self.disruption.backoff(name, now) {
            out.notes.push(Finding::new(
                "replacement-backoff",
                format!(
                    "its replacement failed to launch {} time(s) in a row: it is not replaced again until {} (deleting it is still considered)",
                    b.failures,
                    relative(b.until, now)
                ),
            ));
        }
        if out.decision.is_none() || under_way {
            consolidation_findings(&view, i, &mut out);
        }
        Some(out)
    }

    /// The node, its NodeClaim and pods, and what in its own state or its pods blocks its
    /// disruption; `None` when no such node is known.
    fn described(&self, name: &str, g: &Gathered<'_>, now: Duration) -> Option<NodeExplanation> {
        let record = self.desk.cluster.nodes.get(name)?;
        let claim = record
            .nodeclaim
            .as_ref()
            .and_then(|c| self.desk.cluster.nodeclaims.get(c));
        let launched = claim.and_then(|c| c.launched.as_ref());
        let mut out = NodeExplanation {
            node: name.to_string(),
            nodeclaim: record.nodeclaim.clone(),
            node_pool: claim.map(|c| c.node_pool.clone()),
            instance_type: launched.map(|l| l.instance_type.clone()),
            capacity_type: launched.map(|l| l.capacity_type.as_str().to_string()),
            price_per_hour: launched.map(|l| l.price_per_hour),
            pods: g
                .pods_by_node
                .get(name)
                .into_iter()
                .flatten()
                .map(|(k, _)| (*k).clone())
                .collect(),
            decision: None,
            blockers: Vec::new(),
            notes: Vec::new(),
        };
        out.blockers = (self
            .disruption
            .blockers(&self.desk, name, g, Wanted::All, now)
            .iter())
        .map(|b| Finding::new(b.kind(), b.message(|at| relative(at, now))))
        .collect();
        Some(out)
    }

    /// consolidateAfter, the consolidation policy and the disruption budgets, as the pass's
    /// view of node `i` reads them (whether consolidateAfter has run out, whether its
    /// policy allows each reason, what its budgets leave); the texts say why.
    fn policy_blockers(
        &self,
        view: &ClusterView<'_>,
        i: usize,
        pool_names: &[String],
        out: &mut NodeExplanation,
        now: Duration,
    ) {
        let n = &view.nodes[i];
        let Some(index) = n.node_pool else {
            // the pass reads no NodePool it cannot launch for (being deleted, not read whole,
            // its class not ready), as Karpenter's finds no instance types for it; a static
            // NodePool's nodes are its own controller's
            let pool = out.node_pool.clone().unwrap_or_default();
            let dynamic = (self.desk.cluster.node_pools.get(&pool))
                .is_some_and(|np| np.spec.replicas.is_none());
            let b = super::blockers::Blocker::NodePoolNotFound(pool);
            if dynamic && !out.blockers.iter().any(|f| f.kind == b.kind()) {
                (out.blockers).push(Finding::new(b.kind(), b.message(|at| relative(at, now))));
            }
            return;
        };
        let np = view.node_pool_objects[index];
        let pool = &pool_names[index];
        let record = &self.desk.cluster.nodes[&out.node];
        let d = &np.spec.disruption;
        if !n.consolidatable {
            match consolidatable_at(np, record.last_pod_event) {
                None => out.blockers.push(Finding::new(
                    "consolidation-disabled",
                    format!("NodePool {pool:?} has consolidation disabled"),
                )),
                Some(at) if now < at => out.blockers.push(Finding::new(
                    "consolidate-after",
                    format!(
                        "consolidateAfter {}: pods last changed {}, consolidatable {}",
                        d.consolidate_after,
                        relative(record.last_pod_event, now),
                        relative(at, now)
                    ),
                )),
                // (a node not initialized yet is told among the node's own blockers)
                Some(_) => {
                    if (out.nodeclaim.as_ref()).is_some_and(|c| self.buffers.held.contains_key(c)) {
                        out.blockers.push(Finding::new(
                            "buffer",
                            format!("Node {:?} has buffer pods", out.node),
                        ));
                    }
                }
            }
        }
        if !out.pods.is_empty()
            && !policy_permits(d.consolidation_policy, DisruptionReason::Underutilized)
        {
            out.blockers.push(Finding::new(
                "when-empty",
                format!(
                    "NodePool {pool:?} has consolidation policy WhenEmpty, but node is not empty"
                ),
            ));
        }
        let reasons: Vec<DisruptionReason> = [
            (DisruptionReason::Empty, out.pods.is_empty()),
            (DisruptionReason::Drifted, n.drifted),
            (DisruptionReason::Underutilized, !out.pods.is_empty()),
        ]
        .into_iter()
        .filter_map(|(r, applies)| applies.then_some(r))
        .collect();
        let unix = self.desk.settings.epoch_unix + now.as_secs();
        for r in reasons {
            if view.allowed.get(&(index, r)).copied().unwrap_or(0) > 0 {
                continue;
            }
            let active: Vec<String> = d
                .budgets
                .iter()
                .enumerate()
                .filter(|(_, b)| {
                    (b.reasons.is_empty() || b.reasons.contains(&r))
                        && budget_active(b, unix).unwrap_or(false)
                })
                .map(|(i, b)| match (&b.schedule, b.duration) {
                    (Some(s), Some(d)) => {
                        let until = kerf_api::cron::CronSchedule::parse(s)
                            .ok()
                            .and_then(|c| c.active_until(unix, d.0, WINDOWS_AHEAD))
                            .map(|end| {
                                let at = Duration::from_secs(
                                    end.saturating_sub(self.desk.settings.epoch_unix),
                                );
                                format!(
                                    ", until {} ({})",
                                    rfc3339(Duration::from_secs(end)),
                                    relative(at, now)
                                )
                            })
                            .unwrap_or_default();
                        format!(
                            "budgets[{i}] (nodes {:?}, schedule {s:?} for {}{until})",
                            b.nodes,
                            format_go_duration(d.0)
                        )
                    }
                    _ => format!("budgets[{i}] (nodes {:?})", b.nodes),
                })
                .collect();
            // a budget that cannot be read allows nothing for any reason, as in Karpenter
            let unreadable: Vec<String> = (d.budgets.iter().enumerate())
                .filter_map(|(i, b)| {
                    let error = budget_allows(b, 0, unix).err()?;
                    Some(format!("budgets[{i}] cannot be read ({error})"))
                })
                .collect();
            // (a reason no active budget names has no limit, so one of the two is not empty)
            let which = if unreadable.is_empty() {
                active.join(", ")
            } else {
                unreadable.join(", ")
            };
            out.blockers.push(Finding::new(
                "budget",
                format!(
                    "No allowed disruptions for disruption reason {} due to blocking budget: {which}",
                    r.as_str()
                ),
            ));
        }
    }
}

/// What the last pass that decided found for the node, as it recorded it; `chose`, the move
/// it chose for the node (since carried out or given up).
fn last_pass(record: &PassRecord, chose: Option<&str>, name: &str, now: Duration) -> Finding {
    let when = if record.at == now {
        "just now".to_string()
    } else {
        relative(record.at, now)
    };
    let found = if let Some(text) = chose {
        format!("chose to {text}")
    } else if !record.nodes.contains(name) {
        "ran before it was a launched node".to_string()
    } else if let Some(message) = record.blocked.get(name) {
        format!("left it out: {message}")
    } else if let Some((text, stranded)) = record.dropped.get(name) {
        format!(
            "dropped the move to {text}: kube-scheduler would have left pod(s) {} without a node",
            stranded.join(", ")
        )
    } else if record.chose {
        "chose a move of other nodes".to_string()
    } else {
        "found no move for it".to_string()
    };
    Finding::new("last-pass", format!("the disruption pass {when} {found}"))
}

/// What the next pass would do with the node, from a dry run of the pass's search and
/// kube-scheduler rehearsal: the move it would make, and any move with the node the
/// rehearsal drops.
fn dry_run(rehearsal: &Rehearsal, name: &str, out: &mut NodeExplanation) {
    for dropped in rehearsal.dropped() {
        if !dropped.candidates.iter().any(|n| n == name) {
            continue;
        }
        out.notes.push(Finding::new(
            "rehearsal-dropped",
            format!(
                "a pass finds the move to {}, and drops it: kube-scheduler would leave pod(s) {} without a node once its replacements are Ready",
                dropped.text,
                dropped.stranded.join(", ")
            ),
        ));
    }
    let Some((command, names, alone)) = &rehearsal.found else {
        return;
    };
    if command.candidates.iter().any(|i| names[*i] == name) {
        out.decision = Some(format!(
            "the next disruption pass would {}",
            chosen_text(command, *alone)
        ));
    }
}

/// A move a pass chose, for a sentence about one of its candidates: [`move_text`], and
/// whether it is the one-replacement move tried after the rehearsal dropped a cheaper one.
pub(super) fn chosen_text(command: &Command, alone: bool) -> String {
    let how = if alone {
        ", all its pods on the one new node, where kube-scheduler puts each of them"
    } else {
        ""
    };
    format!("{}{how}", move_text(command))
}

/// What consolidating the node alone finds, unless a dry run of the next pass names a move
/// for it.
fn consolidation_findings(view: &ClusterView<'_>, i: usize, out: &mut NodeExplanation) {
    // (a move already chosen and under way leaves what consolidating it alone finds told)
    let n = &view.nodes[i];
    if n.pods.is_empty() {
        return;
    }
    let worth = Worth::new(view);
    if let Some(score) = worth.best_score(i).filter(|_| !worth.can_pass(i)) {
        out.notes.push(Finding::new(
            "balanced-score",
            format!(
                "its NodePool is Balanced: deleting it outright would score {score:.2} (its share of the NodePool's cost over its share of the NodePool's disruption cost), below 1/k = {:.2}, so no move on it is taken",
                1.0 / crate::disruption::search::BALANCED_K
            ),
        ));
        return;
    }
    let alone = alone(view, i);
    let saving = match &alone {
        Alone::Deletable => Some(n.price_per_hour),
        Alone::Replaceable { price_per_hour, .. } | Alone::Split { price_per_hour, .. } => {
            Some(n.price_per_hour - price_per_hour)
        }
        _ => None,
    };
    if let Some(saving) = saving.filter(|s| !worth.approves(&[i], *s)) {
        let min = view.min_savings;
        let why = if min.met(saving, n.price_per_hour) {
            format!(
                "its Balanced NodePool's score for it is below 1/k = {:.2}",
                1.0 / crate::disruption::search::BALANCED_K
            )
        } else {
            format!(
                "the minimum saving is ${:.4}/hour and {}% of the node's cost",
                min.per_hour, min.percent
            )
        };
        out.notes.push(Finding::new(
            "not-worth-it",
            format!("a move saving ${saving:.4}/hour is not taken: {why}"),
        ));
    }
    let finding = match alone {
        Alone::Deletable => Finding::new(
            "pods-fit-elsewhere",
            "its pods fit on the other nodes: it can be deleted once nothing above blocks it",
        ),
        Alone::Replaceable {
            instance_type,
            price_per_hour,
        } => Finding::new(
            "cheaper-replacement",
            format!(
                "a cheaper node can take its pods: {instance_type} at ${price_per_hour:.4}/hour against ${:.4}/hour",
                n.price_per_hour
            ),
        ),
        Alone::PodsDoNotFit { pod, reasons } => {
            let text: Vec<String> = reasons.iter().map(ToString::to_string).collect();
            Finding::new(
                "pods-do-not-fit",
                format!(
                    "pod {} fits nowhere else: {}",
                    view.keys[pod],
                    text.join("; ")
                ),
            )
        }
        Alone::Split {
            instance_types,
            price_per_hour,
        } => Finding::new(
            "split",
            format!(
                "{} new node(s) of other sizes can take its pods for less: {} at ${price_per_hour:.4}/hour against ${:.4}/hour",
                instance_types.len(),
                instance_types.join(" + "),
                n.price_per_hour
            ),
        ),
        Alone::NeedsNodes(k) => Finding::new(
            "needs-more-nodes",
            format!("Can't remove without creating {k} candidates"),
        ),
        Alone::NotCheaper {
            instance_type,
            capacity_type,
            price_per_hour,
        } => Finding::new(
            "no-cheaper-replacement",
            format!(
                "Can't replace with a cheaper node: no instance type launches for less than ${:.4}/hour in every zone it may take (the cheapest option: {instance_type} {capacity_type} at ${price_per_hour:.4}/hour)",
                n.price_per_hour
            ),
        ),
        Alone::MinValues { key, left, min } => Finding::new(
            "no-cheaper-replacement",
            format!(
                "Filtering by price: minValues requirement is not met for label(s) {key}: the cheaper instance types have {left} distinct value(s), {min} are required"
            ),
        ),
        Alone::SpotToSpotOff => Finding::new(
            "spot-to-spot",
            "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node",
        ),
        Alone::SpotToSpotTooFew { cheaper } => Finding::new(
            "spot-to-spot",
            format!(
                "SpotToSpotConsolidation requires {} cheaper instance type options than the current candidate to consolidate, got {cheaper}",
                crate::disruption::search::SPOT_TO_SPOT_MIN_TYPES
            ),
        ),
    };
    out.notes.push(finding);
}

/// A move as the disruption pass chose it or a dry run finds it, for a sentence about one
/// of its candidates: `replace it and 1 other node with m5.large (Underutilized,
/// multi-node consolidation, saving $0.0420/hour)`.
pub(super) fn move_text(command: &Command) -> String {
    let verb = if command.replacements.is_empty() {
        "delete"
    } else {
        "replace"
    };
    let with: BTreeSet<&str> = (command.replacements.iter())
        .map(|r| r.launch.instance_type.as_str())
        .collect();
    let others = match command.candidates.len() - 1 {
        0 => String::new(),
        1 => " and 1 other node".to_string(),
        k => format!(" and {k} other nodes"),
    };
    let with = if with.is_empty() {
        String::new()
    } else {
        format!(" with {}", with.into_iter().collect::<Vec<_>>().join(", "))
    };
    format!(
        "{verb} it{others}{with} ({}, {}, saving ${:.4}/hour)",
        command.reason.as_str(),
        method_text(command.method),
        command.savings
    )
}

/// How a method reads in a sentence.
fn method_text(method: Method) -> &'static str {
    match method {
        Method::Emptiness => "empty-node deletion",
        Method::Drift => "drift replacement",
        Method::Repair => "repair replacement",
        Method::Reboot => "repair reboot",
        Method::MultiNode => "multi-node consolidation",
        Method::SingleNode => "single-node consolidation",
    }
}

impl std::fmt::Display for PodExplanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pod = &self.pod;
        match &self.placement {
            Placement::Running {
                node,
                nodeclaim,
                node_pool,
                instance_type,
                capacity_type,
                zone,
            } => {
                write!(f, "pod {pod}: running on node {node}")?;
                let parts: Vec<String> = [
                    node_pool.as_ref().map(|p| format!("nodepool {p}")),
                    nodeclaim.as_ref().map(|c| format!("NodeClaim {c}")),
                    instance_type.clone(),
                    capacity_type.clone(),
                    zone.clone(),
                ]
                .into_iter()
                .flatten()
                .collect();
                if !parts.is_empty() {
                    write!(f, " ({})", parts.join(", "))?;
                }
                writeln!(f)?;
            }
            Placement::Nominated { nodeclaim } => writeln!(
                f,
                "pod {pod}: pending, waiting for NodeClaim {nodeclaim}, launched for it"
            )?,
            Placement::WouldLaunch {
                node_pool,
                instance_type,
                capacity_type,
                zone,
                price_per_hour,
                pods,
            } => writeln!(
                f,
                "pod {pod}: pending; a provisioning pass now would launch a nodepool {node_pool} NodeClaim for it: {instance_type} {capacity_type} in {zone} at ${price_per_hour:.4}/hour ({pods} pending pod(s) on it)"
            )?,
            Placement::WouldFit { node } => writeln!(
                f,
                "pod {pod}: pending; it fits on {node}, where kube-scheduler should bind it"
            )?,
            Placement::Unschedulable => writeln!(
                f,
                "pod {pod}: pending, and no NodePool can launch a node for it"
            )?,
        }
        match (&self.decided, &self.placement) {
            (_, Placement::Running { .. }) => {}
            (Some(d), _) => writeln!(f, "decided by the provisioning pass {} ({})", d.ago, d.at)?,
            (None, Placement::Nominated { .. }) => {}
            (None, _) => writeln!(
                f,
                "no provisioning pass has decided about it yet: this is a dry run of one now"
            )?,
        }
        for v in &self.volumes {
            writeln!(f, "volume: {v}")?;
        }
        if self.node_pools.is_empty() {
            return writeln!(
                f,
                "no NodePools exist: create one whose requirements the pod accepts"
            );
        }
        writeln!(
            f,
            "NodePools, in the order they are tried (for a new node, beside the pods planned with it):"
        )?;
        for v in &self.node_pools {
            write!(f, "  {} (weight {}): ", v.node_pool, v.weight)?;
            match (&v.fits, &v.reason) {
                (Some(fit), _) => writeln!(
                    f,
                    "fits: {} {} in {} at ${:.4}/hour",
                    fit.instance_type, fit.capacity_type, fit.zone, fit.price_per_hour
                )?,
                (None, Some(reason)) => writeln!(f, "{reason}")?,
                (None, None) => writeln!(f, "cannot host it")?,
            }
            if let Some(fix) = &v.fix {
                writeln!(f, "      fix: {fix}")?;
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for NodeExplanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "node {}", self.node)?;
        let parts: Vec<String> = [
            self.node_pool.as_ref().map(|p| format!("nodepool {p}")),
            self.nodeclaim.as_ref().map(|c| format!("NodeClaim {c}")),
            self.instance_type.clone(),
            self.capacity_type.clone(),
            self.price_per_hour.map(|p| format!("${p:.4}/hour")),
            Some(match self.pods.len() {
                1 => "1 pod".to_string(),
                n => format!("{n} pods"),
            }),
        ]
        .into_iter()
        .flatten()
        .collect();
        writeln!(f, ": {}", parts.join(", "))?;
        match &self.decision {
            Some(d) => writeln!(f, "{d}")?,
            None if self.blockers.is_empty() => writeln!(
                f,
                "nothing blocks its disruption, but the next pass would not disrupt it"
            )?,
            None => {}
        }
        if !self.blockers.is_empty() {
            writeln!(f, "not disrupted now because:")?;
            for b in &self.blockers {
                writeln!(f, "  - [{}] {}", b.kind, b.message)?;
            }
        }
        if !self.notes.is_empty() {
            writeln!(f, "notes:")?;
            for n in &self.notes {
                writeln!(f, "  - [{}] {}", n.kind, n.message)?;
            }
        }
        Ok(())
    }
}

/// An instant as people read it next to `now`: `in 4m30s`, `5m ago`, `now`.
fn relative(at: Duration, now: Duration) -> String {
    if at > now {
        format!("in {}", format_go_duration(at - now))
    } else if at < now {
        format!("{} ago", format_go_duration(now - at))
    } else {
        "now".into()
    }
}
