//! Disruption: drift marking, consolidatable marking, and the pass that picks one command
//! (emptiness, drift, consolidation; see [`crate::disruption::search`]). After 15 s a command's
//! candidates are checked again ([`crate::disruption::search::revalidate`]) and it is acted on
//! only if it still holds; candidates are tainted, replacements launched and awaited (10
//! minutes at most, then the command is rolled back), and the candidates deleted.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap as HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::duration::format_go_duration;
use kerf_api::labels;
use kerf_api::nodepool::DisruptionReason;
use kerf_scheduling::{NodePoolInput, Requirements};
use serde_json::json;

use crate::metrics::families;

use super::blockers::{Gathered, Wanted};
use super::desk::Desk;
use super::rehearsal::PlannedNode;
use super::{Action, Controllers, Event, EventObject, Timer};
use crate::cluster::{CapacityType, Cluster, DriftReason, PodOwner};
use crate::disruption::rules::{
    allowances, budget_active, consolidatable_at, node_disruption_cost, pdb_allowance, pdb_selects,
};
use crate::disruption::search::{
    ClusterView, Command, Decided, Method, NodeView, Rejection, plan_judged, replace_alone,
    revalidate,
};
use crate::hash::{node_class_hash, node_pool_hash};

/// How often disruption looks for work while the cluster changes.
pub const PASS_INTERVAL: Duration = Duration::from_secs(10);
/// How soon a pass that found the cluster state unsynced looks again, as Karpenter requeues.
const UNSYNCED_RETRY: Duration = Duration::from_secs(1);
/// How long a decision waits before it is re-checked and acted on.
pub const VALIDATION_DELAY: Duration = Duration::from_secs(15);
/// How long a command waits for its replacements to initialize before it is rolled back.
pub const REPLACEMENT_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// How long a node waits to be replaced again after its replacement failed to launch the
/// first time: longer than the unavailable-offerings memory, so the offering that failed is
/// not simply tried again the moment it is forgotten.
pub const REPLACE_BACKOFF: Duration = Duration::from_secs(5 * 60);
/// The longest a node waits after failed replacements: the wait doubles with each failure
/// in a row up to here, so a shortage costs a few attempts, not one every few minutes.
pub const REPLACE_BACKOFF_MAX: Duration = Duration::from_secs(2 * 60 * 60);

/// A node's failed replacements in a row, and until when it is not replaced again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Backoff {
    pub(super) failures: u32,
    pub(super) until: Duration,
}

impl Backoff {
    /// The wait after the `failures`-th failure in a row.
    pub(super) fn wait(failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        (REPLACE_BACKOFF * 2u32.pow(doublings)).min(REPLACE_BACKOFF_MAX)
    }
}

/// A NodePool's nodes as its disruption budgets count them ([`Disruptions::budget_counts`]).
#[derive(Clone, Copy, Debug, Default)]
struct BudgetCounts {
    /// The nodes the budgets' percentages are of.
    nodes: usize,
    /// Those being deleted or tainted by these controllers.
    going: usize,
    /// The others that are not Ready.
    only_not_ready: usize,
}

/// A disruption decision on its way: validated after [`VALIDATION_DELAY`]
/// (`Disruptions::command`), then carried out, its candidates tainted and its replacements
/// coming up (`Disruptions::executing`).
#[derive(Clone, Debug)]
pub(super) struct Pending {
    pub(super) reason: DisruptionReason,
    /// The method that found it, and how many new nodes it plans: what validation checks.
    method: Method,
    planned: usize,
    /// Karpenter's consolidation type of the command (empty for drift).
    consolidation_type: &'static str,
    pub(super) candidates: Vec<String>,
    /// When its candidates' marks are due: a refusal of an older command's mark on the same
    /// node is not this command's.
    marks_by: Duration,
    /// Its one candidate's pods all go onto its replacement, none onto other nodes: the
    /// cheaper move kube-scheduler would not follow was looked past (validated the same way).
    alone: bool,
    replacements: Vec<String>,
    savings: f64,
    /// Its Balanced scores, by NodePool name (none under the other policies).
    scores: Vec<(String, crate::disruption::search::Score)>,
}

/// A command as Karpenter writes it in its log: `head: [nodes] -> [1 replacement] (savings:
/// $0.12)`, or `head: [nodes] (savings: $0.12)` for a deletion.
fn command_text(head: &str, candidates: &[String], replacements: usize, savings: f64) -> String {
    let nodes = candidates.join(", ");
    match replacements {
        0 => format!("{head}: [{nodes}] (savings: ${savings:.2})"),
        1 => format!("{head}: [{nodes}] -> [1 replacement] (savings: ${savings:.2})"),
        n => format!("{head}: [{nodes}] -> [{n} replacements] (savings: ${savings:.2})"),
    }
}

/// One candidate of a consolidation command as Karpenter's `ConsolidationCandidate` and
/// `ConsolidationRejected` events put it: the whole command for a single node
/// (`replace: [a] -> [1 replacement]`), the node's part of it for several
/// (`delete: [a] (part of 3-node consolidation)`).
fn candidate_text(candidates: &[String], node: &str, replacements: usize) -> String {
    let decision = if replacements == 0 {
        "delete"
    } else {
        "replace"
    };
    if candidates.len() > 1 {
        let n = candidates.len();
        return format!("{decision}: [{node}] (part of {n}-node consolidation)");
    }
    match replacements {
        0 => format!("{decision}: [{node}]"),
        1 => format!("{decision}: [{node}] -> [1 replacement]"),
        n => format!("{decision}: [{node}] -> [{n} replacements]"),
    }
}

/// What a disruption pass reads, reduced to what tells two passes apart (see
/// `Disruptions::pass_inputs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PassInputs {
    written: Written,
    consolidatable: usize,
    do_not_disrupt_ended: usize,
    backoffs_ended: usize,
}

/// The part of [`PassInputs`] that changes only by writes (and budget schedules): cheap to
/// read on every pass.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Written {
    cluster: u64,
    controllers: u64,
    unavailable: u64,
    budget_windows: Vec<bool>,
    repairs: Vec<String>,
}

/// What the budget gauges depend on: the counts of every write to the nodes and NodeClaims
/// they count (the cluster's, the controllers' work, their own marks) and which budgets'
/// schedules are active. Equal, the gauges are too.
#[derive(Clone, Debug, PartialEq, Eq)]
struct GaugesRead {
    cluster: u64,
    controllers: u64,
    marks: u64,
    budget_windows: Vec<bool>,
}

/// What drift compares NodeClaims with, worked out once per NodePool (its template's hash and
/// its requirements) and per node class (its hash) in a look over all NodeClaims.
#[derive(Default)]
struct DriftBasis {
    pools: HashMap<String, (String, Requirements)>,
    classes: HashMap<String, String>,
}

/// Whether the node, as last observed, carries the disrupted taint.
pub fn has_disrupted_taint(node: &crate::cluster::NodeRecord) -> bool {
    (node.taints.iter()).any(|t| t.key == labels::DISRUPTED_TAINT_KEY)
}

/// What each PodDisruptionBudget still allows, computed once from the cluster and spent as
/// evictions are decided, so one drain or pass never allows more than the budget does.
#[derive(Debug)]
pub struct PdbAllowances {
    left: BTreeMap<String, usize>,
}

impl PdbAllowances {
    /// The allowances now, counting healthy the selected pods on Ready nodes that are not
    /// already being evicted (`evicting`).
    pub fn new(cluster: &Cluster, evicting: &super::termination::Evicting) -> PdbAllowances {
        let left = cluster
            .pdbs
            .iter()
            .map(|(key, b)| {
                let mut selected = 0;
                let mut healthy = 0;
                for (k, q) in cluster
                    .pods
                    .iter()
                    .filter(|(_, q)| pdb_selects(b, &q.shape))
                {
                    selected += 1;
                    let ready = q
                        .node
                        .as_ref()
                        .is_some_and(|n| cluster.nodes.get(n).is_some_and(|n| n.ready));
                    if ready && !evicting.contains(cluster, k) {
                        healthy += 1;
                    }
                }
                (key.clone(), pdb_allowance(b, selected, healthy))
            })
            .collect();
        PdbAllowances { left }
    }

    /// Whether evicting the pod (`namespace/name`) would break a budget that selects it.
    pub fn blocks(&self, cluster: &Cluster, pod: &str) -> bool {
        (cluster.pods.get(pod)).is_some_and(|p| !self.blocking(cluster, &p.shape).is_empty())
    }

    /// The budgets selecting the pod that allow no more disruptions (`namespace/name`).
    pub fn blocking<'a>(&self, cluster: &'a Cluster, pod: &Pod) -> Vec<&'a String> {
        self.selecting(cluster, pod)
            .into_iter()
            .filter(|k| self.left.get(*k).copied().unwrap_or(0) == 0)
            .collect()
    }

    /// Counts the pod's eviction against every budget that selects it.
    pub fn spend(&mut self, cluster: &Cluster, pod: &str) {
        let Some(p) = cluster.pods.get(pod) else {
            return;
        };
        for k in self.selecting(cluster, &p.shape) {
            if let Some(n) = self.left.get_mut(k) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// The budgets that select the pod (`namespace/name`).
    pub(super) fn selecting<'a>(&self, cluster: &'a Cluster, pod: &Pod) -> Vec<&'a String> {
        cluster
            .pdbs
            .iter()
            .filter(|(_, b)| pdb_selects(b, pod))
            .map(|(k, _)| k)
            .collect()
    }
}

/// What a disruption pass reads of the other controllers, handed over by the router.
pub(super) struct Facts<'a> {
    /// The pods the provisioner's last solve left without a place: consolidation waits
    /// while other pods want capacity (see [`ClusterView::pods_await_capacity`]).
    pub(super) left_pending: &'a rustc_hash::FxHashSet<String>,
    /// The room the CapacityBuffers hold, by the NodeClaim or node holding it.
    pub(super) held: &'a BTreeMap<String, kerf_scheduling::resources::Resources>,
    /// The nodes repair may replace now.
    pub(super) repairs: &'a BTreeMap<String, super::health::RepairDue>,
    /// What the blocker checks read ([`Controllers::gather`]).
    pub(super) gathered: &'a Gathered<'a>,
}

/// What the disruption controller keeps between passes.
#[derive(Default)]
pub(super) struct Disruptions {
    /// When the next pass is due.
    pass_at: Option<Duration>,
    /// The inputs of the last disruption pass that found nothing.
    idle_inputs: Option<PassInputs>,
    /// Until when the time-driven inputs of that pass stay as they were while nothing is
    /// written: the first consolidateAfter, do-not-disrupt duration or replacement backoff
    /// to run out after it.
    quiet_until: Duration,
    /// The command being validated: one at a time, as Karpenter's disruption loop waits
    /// out a consolidation's validation before it looks again.
    command: Option<Pending>,
    /// The commands carried out and waiting for their replacements, by id: as many as the
    /// budgets allow, as Karpenter's orchestration queue holds them while its loop goes on
    /// deciding.
    executing: BTreeMap<String, Pending>,
    /// Commands started so far, for each command's id.
    commands_started: u64,
    /// Nodes each disruption reason could act on, at the last pass that looked.
    eligible: BTreeMap<String, usize>,
    /// Nodes whose replacements failed to launch, by node name.
    backoffs: BTreeMap<String, Backoff>,
    /// Each NodePool's budget by reason at the last pass that looked, for the metrics.
    budgets: BTreeMap<(String, DisruptionReason), crate::metrics::BudgetReading>,
    /// What `budgets` was read off: read again only when it changes.
    budgets_read: Option<GaugesRead>,
    /// The Balanced scores of the last consolidation command decided, by NodePool name.
    scores: Vec<(String, crate::disruption::search::Score)>,
    /// The move a pass chose for each of its candidates, and when: `kerf explain` tells it
    /// as chosen while it is carried out.
    chosen: BTreeMap<String, (Duration, String)>,
    /// What the last pass that decided found for each node it looked at, for `kerf explain`.
    last_pass: Option<PassRecord>,
}

/// What one disruption pass decided with, node by node: the blockers it told, the moves its
/// kube-scheduler rehearsal dropped, and whether it chose a command. `kerf explain node`
/// tells it as the pass's own word, beside its dry run of the next pass.
pub(super) struct PassRecord {
    /// When the pass ran.
    pub at: Duration,
    /// The nodes the pass looked at.
    pub nodes: BTreeSet<String>,
    /// The nodes it left out for a blocker of their own, with the `DisruptionBlocked`
    /// message it told of each.
    pub blocked: BTreeMap<String, String>,
    /// The moves its rehearsal dropped, for each of their candidates: the move, and the pods
    /// kube-scheduler would have left without a node.
    pub dropped: BTreeMap<String, (String, Vec<String>)>,
    /// Whether it chose a command ([`Disruptions::choice`] says which, for its candidates).
    pub chose: bool,
}

impl Disruptions {
    /// The move a pass chose for `node`, as a sentence, and when it chose it.
    pub(super) fn choice(&self, node: &str) -> Option<&(Duration, String)> {
        self.chosen.get(node)
    }

    /// What the last pass that decided found, node by node.
    pub(super) fn last_pass(&self) -> Option<&PassRecord> {
        self.last_pass.as_ref()
    }

    /// The id of the next command started (Karpenter's command ids are per process too).
    pub(super) fn next_command_id(&mut self) -> String {
        self.commands_started += 1;
        format!("{:08x}", self.commands_started)
    }

    /// Whether a command is being validated: no pass decides until it is carried out or
    /// given up.
    pub(super) fn validating(&self) -> bool {
        self.command.is_some()
    }

    /// The command being validated and those carried out, waiting for their replacements.
    pub(super) fn commands(&self) -> impl Iterator<Item = &Pending> {
        self.command.iter().chain(self.executing.values())
    }

    /// `node`'s replacement backoff, while it lasts at `now`.
    pub(super) fn backoff(&self, node: &str, now: Duration) -> Option<&Backoff> {
        self.backoffs.get(node).filter(|b| now < b.until)
    }

    /// Nodes each disruption reason could act on at the last pass that looked, for the
    /// metrics.
    pub(super) fn eligible(&self) -> &BTreeMap<String, usize> {
        &self.eligible
    }

    /// Each NodePool's budget by reason at the last pass that looked, for the metrics.
    pub(super) fn budget_readings(
        &self,
    ) -> &BTreeMap<(String, DisruptionReason), crate::metrics::BudgetReading> {
        &self.budgets
    }

    pub(super) fn schedule_pass(&mut self, desk: &mut Desk, at: Duration) {
        if self.pass_at.is_none_or(|p| p > at) {
            if let Some(p) = self.pass_at {
                desk.timers.remove(&(p, Timer::Pass));
            }
            self.pass_at = Some(at);
            desk.at(at, Timer::Pass);
        }
    }

    /// Each NodePool's budget for each reason now, as Karpenter works it out
    /// (`BuildDisruptionBudgetMapping`): what its budgets allow over the nodes that count, and
    /// how many of those already take from it. Its gauges show both.
    pub(super) fn budgets_now<'a>(
        &self,
        desk: &'a Desk,
        now: Duration,
    ) -> BTreeMap<(&'a str, DisruptionReason), crate::metrics::BudgetReading> {
        let unix = desk.settings.epoch_unix + now.as_secs();
        let counts = budget_counts(desk);
        let mut out = BTreeMap::new();
        for (name, np) in &desk.cluster.node_pools {
            let c = counts.get(name.as_str()).copied().unwrap_or_default();
            let reasons = crate::disruption::search::BUDGET_REASONS;
            let allowed = allowances(np, reasons, c.nodes, unix);
            for (r, allowed) in reasons.into_iter().zip(allowed) {
                let consuming = match r {
                    DisruptionReason::Unhealthy => c.going,
                    _ => c.going + c.only_not_ready,
                };
                let reading = crate::metrics::BudgetReading {
                    allowed,
                    consuming,
                    nodes: c.nodes,
                };
                out.insert((name.as_str(), r), reading);
            }
        }
        out
    }

    /// For each reason with candidates, each NodePool with nodes whose budgets allow that
    /// reason nothing says so, as Karpenter's disruption controller does when a method finds
    /// candidates (`NodePoolBlockedForDisruptionReason`).
    fn tell_blocked_budgets(
        &mut self,
        desk: &mut Desk,
        reasons: &[DisruptionReason],
        now: Duration,
    ) {
        let blocked: Vec<(String, DisruptionReason)> = (self.budgets.iter())
            .filter(|((_, r), b)| reasons.contains(r) && b.nodes > 0 && b.allowed == 0)
            .map(|(key, _)| key.clone())
            .collect();
        for (pool, reason) in blocked {
            desk.event(
                Event {
                    kind: EventObject::NodePool,
                    name: pool,
                    warning: false,
                    reason: "DisruptionBlocked".into(),
                    message: format!(
                        "No allowed disruptions for disruption reason {} due to blocking budget",
                        reason.as_str()
                    ),
                },
                now,
            );
        }
    }

    /// Records what one search worked out ([`Disruptions::search`]).
    fn record_search(
        &mut self,
        desk: &mut Desk,
        searched: Searched,
        pool_names: &[String],
        now: Duration,
    ) {
        self.scores = (searched.scores.into_iter())
            .map(|score| (pool_names[score.pool].clone(), score))
            .collect();
        for j in searched.judged {
            let pool = &desk.cluster.node_pools[&pool_names[j.pool]];
            let policy = format!("{:?}", pool.spec.disruption.consolidation_policy);
            let decision = if j.approved { "approved" } else { "rejected" };
            let values = [decision, pool_names[j.pool].as_str(), policy.as_str()];
            desk.metrics.inc(&families::CONSOLIDATION_MOVES, &values);
            if let Some(score) = j.score {
                desk.metrics
                    .observe(&families::CONSOLIDATION_SCORE, &values, score);
            }
        }
        desk.metrics.observe(
            &families::VOLUNTARY_DISRUPTION_DECISION_EVALUATION_DURATION_SECONDS,
            &[searched.consolidation_type, &searched.reason.to_lowercase()],
            searched.elapsed,
        );
        self.eligible = searched.eligible;
        if let Some(reasons) = searched.blocked_reasons {
            self.tell_blocked_budgets(desk, &reasons, now);
        }
    }

    /// What a pass reads, reduced to what can differ between two passes: the cluster's and
    /// the controllers' write counters, the unavailable offerings, and the inputs that
    /// change by themselves with time (consolidateAfter running out, do-not-disrupt
    /// durations ending, budget schedules opening and closing). With the counters unchanged
    /// the time-driven ones move one way only, so counting them tells every change.
    fn pass_inputs(&self, desk: &Desk, written: Written, now: Duration) -> PassInputs {
        let consolidatable = (consolidatable_times(desk)).filter(|t| now >= *t).count();
        let do_not_disrupt_ended = (desk.cluster.do_not_disrupt_ends())
            .filter(|end| now >= *end)
            .count();
        let backoffs_ended = (self.backoffs.values()).filter(|b| now >= b.until).count();
        PassInputs {
            written,
            consolidatable,
            do_not_disrupt_ended,
            backoffs_ended,
        }
    }

    /// The first time after now at which one of [`PassInputs`]' time-driven counts grows
    /// while nothing is written.
    fn next_timed_change(&self, desk: &Desk, now: Duration) -> Duration {
        (consolidatable_times(desk))
            .chain(desk.cluster.do_not_disrupt_ends())
            .chain(self.backoffs.values().map(|b| b.until))
            .filter(|t| *t > now)
            .min()
            .unwrap_or(Duration::MAX)
    }

    /// A node carrying the disrupted taint that no command holds and that is not being
    /// deleted was left by a command that did not finish (or by a restart): untaint it.
    /// `static_held` are the nodes a static NodePool's replace-first command holds (drift or
    /// repair), marked until their replacement is up (swarm seed 80363: released at the
    /// next pass, a repaired node was open to pods again while it waited).
    fn release_stale_taints(&mut self, desk: &mut Desk, static_held: BTreeSet<String>) {
        let mut held = static_held;
        held.extend(
            (self.command.iter())
                .chain(self.executing.values())
                .flat_map(|c| c.candidates.iter().cloned()),
        );
        let stale: Vec<String> = desk
            .cluster
            .nodes
            .iter()
            .filter(|(name, n)| {
                (has_disrupted_taint(n) || n.tainting)
                    && !held.contains(*name)
                    && (desk.cluster.claim_of(n)).is_some_and(|(_, c)| c.deleting.is_none())
            })
            .map(|(k, _)| k.clone())
            .collect();
        for node in stale {
            desk.untaint(&node);
        }
    }

    /// Tells each candidate of a consolidation command, on its Node and its NodeClaim, that
    /// it is one (`ConsolidationCandidate`), or with `rejected` that validation turned the
    /// command down and why (`ConsolidationRejected`).
    fn tell_consolidation(
        &mut self,
        desk: &mut Desk,
        pending: &Pending,
        rejected: Option<Rejection>,
        now: Duration,
    ) {
        let savings = pending.savings;
        for node in &pending.candidates {
            let text = candidate_text(&pending.candidates, node, pending.planned);
            let (reason, message) = match rejected {
                None => (
                    "ConsolidationCandidate",
                    format!("Consolidation candidate: {text} (savings: ${savings:.2})"),
                ),
                Some(why) => (
                    "ConsolidationRejected",
                    format!(
                        "Consolidation rejected: {text}, reason: {} (savings: ${savings:.2})",
                        why.as_str()
                    ),
                ),
            };
            tell_node_and_claim(desk, node, reason, &message, now);
        }
        if rejected.is_none() {
            self.tell_approved(desk, pending, now);
        }
    }

    /// Tells a decided consolidation command's Balanced scores, as Karpenter's Balanced
    /// evaluator does: `ConsolidationApproved` on the Node and NodeClaim of a one-node move,
    /// on each NodePool of a move of several.
    fn tell_approved(&mut self, desk: &mut Desk, pending: &Pending, now: Duration) {
        const REASON: &str = "ConsolidationApproved";
        for (pool, score) in &pending.scores {
            let message = score.message();
            match pending.candidates.as_slice() {
                [node] => tell_node_and_claim(desk, node, REASON, &message, now),
                _ => desk.event(
                    Event {
                        kind: EventObject::NodePool,
                        name: pool.clone(),
                        warning: false,
                        reason: REASON.into(),
                        message,
                    },
                    now,
                ),
            }
        }
    }

    /// A command starts, as Karpenter's queue says it: its id (returned), the `disrupting
    /// node(s)` line with its decision (`method`), and the decision and disruption metrics.
    fn announce(
        &mut self,
        desk: &mut Desk,
        command: &Command,
        candidates: &[String],
        method: &str,
    ) -> String {
        let pools: BTreeSet<String> = candidates
            .iter()
            .filter_map(|n| {
                desk.cluster
                    .claim_of_node(n)
                    .map(|(_, c)| c.node_pool.clone())
            })
            .collect();
        let id = self.next_command_id();
        let pool_list: Vec<&str> = pools.iter().map(String::as_str).collect();
        let head = format!(
            "{}/{id}: {method}: nodepools=[{}]",
            command.reason.as_str(),
            pool_list.join(",")
        );
        let text = command_text(
            &head,
            candidates,
            command.replacements.len(),
            command.savings,
        );
        let reason = command.reason.as_str().to_lowercase();
        let consolidation_type = command.method.consolidation_type();
        desk.metrics.inc(
            &families::VOLUNTARY_DISRUPTION_DECISIONS,
            &[consolidation_type, method, &reason],
        );
        for pool in &pool_list {
            desk.metrics.inc(
                &families::VOLUNTARY_DISRUPTION_DECISIONS_BY_NODEPOOL,
                &[consolidation_type, method, pool, &reason],
            );
        }
        for c in candidates {
            if let Some((claim, _)) = desk.cluster.claim_of_node(c) {
                let claim = claim.clone();
                desk.count_disrupted(&claim, &reason, consolidation_type, true);
            }
        }
        let more = command_fields(desk, command, candidates, method);
        let mut fields = json!({"command": text, "reason": reason, "savings": format!("${:.2}", command.savings)});
        if let (Some(all), serde_json::Value::Object(more)) = (fields.as_object_mut(), more) {
            all.extend(more);
        }
        desk.log("disruption", "disrupting node(s)", fields);
        id
    }

    /// Marks NodeClaims drifted, or clears the mark when drift no longer holds.
    pub(super) fn evaluate_drift(
        &mut self,
        desk: &mut Desk,
        lifecycle: &super::lifecycle::Lifecycles,
        now: Duration,
    ) {
        // nothing below changes what drift reads: every NodeClaim's is worked out first
        let mut basis = DriftBasis::default();
        let drifts: Vec<(String, Option<DriftReason>)> = (desk.cluster.nodeclaims.keys())
            .map(|name| (name.clone(), drift_of(desk, lifecycle, name, &mut basis)))
            .collect();
        let mut marked = false;
        for (name, drift) in drifts {
            let Some(c) = desk.cluster.nodeclaims.get_mut(&name) else {
                continue;
            };
            if c.drifted == drift {
                continue;
            }
            c.drifted = drift;
            desk.status_changed(&name);
            match drift {
                Some(reason) => {
                    marked = true;
                    desk.log(
                        "nodeclaim.disruption",
                        "marking drifted",
                        json!({"NodeClaim": {"name": name}, "reason": reason.as_str()}),
                    );
                }
                None => desk.log(
                    "nodeclaim.disruption",
                    "unmarking drifted",
                    json!({"NodeClaim": {"name": name}}),
                ),
            }
        }
        if marked {
            self.schedule_pass(desk, now);
        }
    }

    /// The cluster as one disruption pass reads it, with the node names in view order.
    pub(super) fn view<'a>(
        &'a self,
        desk: &'a Desk,
        facts: &Facts<'a>,
        node_pools: Vec<NodePoolInput>,
        pool_names: &[String],
        daemonsets: &'a [Pod],
        now: Duration,
    ) -> (ClusterView<'a>, Vec<String>) {
        let cluster = &desk.cluster;
        let pool_index: BTreeMap<&str, usize> = pool_names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let by_node = &facts.gathered.pods_by_node;
        let overlaid = desk.settings.node_overlay && !cluster.node_overlays.is_empty();
        // no move counts on the room of pods still pending (Karpenter places them in its
        // simulation)
        let nominated = cluster.nominated_requests();
        // nodes of a command under way: no method takes them again (repair looks past
        // what blocks the others, so it is told here)
        let in_command: BTreeSet<&str> = (self.command.iter())
            .chain(self.executing.values())
            .flat_map(|c| c.candidates.iter().map(String::as_str))
            .collect();
        let mut names = Vec::new();
        let mut nodes = Vec::new();
        let mut pods = Vec::new();
        let mut keys = Vec::new();
        let mut requests = Vec::new();
        let mut terms = Vec::new();
        let mut allocatable_of = HashMap::default();
        for (name, n) in &cluster.nodes {
            let Some(claim_name) = n.nodeclaim.as_deref() else {
                // a node Kerf does not manage: never a candidate, but evicted pods may go there
                let mut on_node = Vec::new();
                for (k, p) in by_node.get(name.as_str()).into_iter().flatten() {
                    on_node.push(pods.len());
                    pods.push(&*p.shape);
                    keys.push(k.as_str());
                    requests.push(p.requests.clone());
                    terms.push(p.terms);
                }
                let mut node = n.as_existing(name, n.ready);
                cluster
                    .volumes
                    .add_attach_slots(Some(name), None, &mut node.allocatable);
                nodes.push(NodeView {
                    node,
                    node_pool: None,
                    price_per_hour: 0.0,
                    capacity_type: CapacityType::OnDemand,
                    pods: on_node,
                    disruptable: false,
                    consolidatable: false,
                    drifted: false,
                    disruption_cost: 0.0,
                    replace_backoff: false,
                    multi_node: true,
                    repair: None,
                });
                names.push(name.clone());
                continue;
            };
            let Some(c) = cluster.nodeclaims.get(claim_name) else {
                continue;
            };
            let Some(launched) = &c.launched else {
                continue;
            };
            let pool = pool_index.get(c.node_pool.as_str()).copied();
            let mut on_node = Vec::new();
            for (k, p) in by_node.get(name.as_str()).into_iter().flatten() {
                on_node.push(pods.len());
                pods.push(&*p.shape);
                keys.push(k.as_str());
                requests.push(p.requests.clone());
                terms.push(p.terms);
            }
            let disruption_cost = node_disruption_cost(
                on_node.iter().map(|k| pods[*k]),
                desk.settings.pod_deletion_cost,
            );
            let backoff = self.backoffs.get(name.as_str());
            let np = cluster.node_pools.get(&c.node_pool);
            // room a CapacityBuffer holds is no move's, and keeps the node from consolidation
            let buffered = facts.held.get(claim_name);
            let consolidatable = c.initialized
                && buffered.is_none()
                && np
                    .and_then(|np| consolidatable_at(np, n.last_pod_event))
                    .is_some_and(|t| now >= t);
            let mut node = n.as_existing(name, c.initialized);
            if let Some(waiting) = nominated.get(claim_name) {
                node.requested.add(waiting);
            }
            if let Some(held) = buffered {
                node.requested.add(held);
            }
            if !c.initialized {
                // no move counts on a node still coming up, as Karpenter's simulation
                // refuses one that would: its room is the pending pods'
                node.allocatable = node.requested.clone();
            }
            // looked up once per NodePool and type: a type list is hundreds long
            let by_type = *allocatable_of
                .entry((c.node_pool.as_str(), launched.instance_type.as_str()))
                .or_insert_with(|| {
                    super::provisioning::type_allocatable(
                        &node_pools,
                        &c.node_pool,
                        &launched.instance_type,
                    )
                });
            cluster
                .volumes
                .add_attach_slots(Some(name), by_type, &mut node.allocatable);
            nodes.push(NodeView {
                node,
                node_pool: pool,
                // what the node costs now, as its NodePool's types are priced: a
                // NodeOverlay's discount counts for the candidate as for its replacement
                price_per_hour: pool
                    .filter(|_| overlaid)
                    .and_then(|i| {
                        crate::overlays::price_of(
                            &node_pools[i].instance_types,
                            &launched.instance_type,
                            &launched.zone,
                            launched.capacity_type.as_str(),
                        )
                    })
                    .unwrap_or(launched.price_per_hour),
                capacity_type: launched.capacity_type,
                pods: on_node,
                // a node still carrying a disrupted taint that no command holds (an earlier
                // command's, its removal on its way) waits for it to go, as Karpenter
                // removes such taints before it looks for candidates: a new command's mark
                // must not be taken for stored while the old taint is
                disruptable: pool.is_some()
                    && !has_disrupted_taint(n)
                    && self
                        .blockers(desk, name, facts.gathered, Wanted::First, now)
                        .is_empty(),
                consolidatable,
                drifted: c.drifted.is_some(),
                disruption_cost,
                replace_backoff: backoff.is_some_and(|b| now < b.until),
                multi_node: true,
                // a static NodePool's nodes are repaired by its own controller
                repair: (facts.repairs.get(name))
                    .filter(|_| !in_command.contains(name.as_str()) && !has_disrupted_taint(n))
                    .filter(|_| np.is_none_or(|np| np.spec.replicas.is_none()))
                    .map(|r| r.view),
            });
            names.push(name.clone());
        }
        let budgets = self.budgets_now(desk, now);
        let mut allowed = BTreeMap::new();
        for (i, pool) in pool_names.iter().enumerate() {
            for r in crate::disruption::search::BUDGET_REASONS {
                let left = (budgets.get(&(pool.as_str(), r)))
                    .map_or(0, |b| b.allowed.saturating_sub(b.consuming));
                allowed.insert((i, r), left);
            }
        }
        let objects = pool_names.iter().map(|n| &cluster.node_pools[n]).collect();
        (
            ClusterView {
                nodes,
                pods,
                keys,
                requests,
                terms,
                node_pool_objects: objects,
                node_pools,
                daemonsets,
                allowed,
                spot_to_spot: desk.settings.spot_to_spot,
                terminate_first: crate::disruption::search::TerminateFirst {
                    drift: desk.settings.terminate_first_drift,
                    repair: desk.settings.terminate_first_repair,
                },
                options: desk.solve_options(),
                min_savings: desk.settings.min_savings,
                pods_await_capacity: (desk.cluster.pods.iter())
                    .any(|(k, p)| p.wants_capacity() && !facts.left_pending.contains(k)),
                types_by_name: Default::default(),
            },
            names,
        )
    }

    /// The pods of a consolidation move that kube-scheduler would leave without a node once
    /// the move's replacements are Ready and its candidates drained
    /// ([`Provisioner::rehearse_move`](super::provisioning::Provisioner::rehearse_move)); none for emptiness, drift and repair, which move no
    /// pod by a packing of their own.
    fn stranded(
        &mut self,
        desk: &mut Desk,
        provisioning: &super::provisioning::Provisioner,
        command: &Command,
        names: &[String],
        now: Duration,
    ) -> Vec<String> {
        let (pools, _) = desk.pool_inputs(now);
        stranded_in(desk, provisioning, &pools, command, names)
    }

    /// The inputs of a pass that change only when something is written, or with a budget's
    /// schedule.
    fn written_inputs(
        &mut self,
        desk: &mut Desk,
        health: &super::health::Repairs,
        now: Duration,
    ) -> Written {
        desk.unavailable.expire(now);
        Written {
            cluster: desk.cluster.generation(),
            controllers: desk.activity,
            unavailable: desk.unavailable.generation(),
            budget_windows: budget_windows(desk, now),
            repairs: health.repairs.keys().cloned().collect(),
        }
    }
}

/// What one search of a disruption pass worked out for the evaluation's records: kept
/// while the search's view borrows the controllers, recorded after.
struct Searched {
    eligible: BTreeMap<String, usize>,
    /// With the blocked nodes told: the reasons with candidates, whose blocking budgets
    /// are told too.
    blocked_reasons: Option<Vec<DisruptionReason>>,
    judged: Vec<crate::disruption::search::JudgedMove>,
    scores: Vec<crate::disruption::search::Score>,
    reason: &'static str,
    consolidation_type: &'static str,
    /// Wall-clock seconds, for the evaluation-duration histogram only.
    elapsed: f64,
}

/// What one pass's searches found ([`Controllers::rehearse`]), before it is recorded.
pub(super) struct Rehearsal {
    /// The command, the view's node names, and whether it is a one-node move with all the
    /// node's pods on one replacement (tried after the rehearsal refused the cheaper one).
    pub found: Option<(Command, Vec<String>, bool)>,
    /// Each search's records, in the order they ran, with the move the rehearsal refused
    /// after it.
    told: Vec<(Searched, Option<Dropped>)>,
    /// The blocked nodes' events, when the pass reports.
    blocked: Vec<Event>,
    /// The NodePools' names in view order, which the records name them by.
    pool_names: Vec<String>,
    /// The nodes the pass looked at, when it reports.
    looked_at: BTreeSet<String>,
}

impl PassRecord {
    /// A pass's record, from what it found and told.
    fn new(
        at: Duration,
        nodes: BTreeSet<String>,
        blocked: &[Event],
        told: &[(Searched, Option<Dropped>)],
        found: &Option<(Command, Vec<String>, bool)>,
    ) -> PassRecord {
        let blocked = (blocked.iter())
            .filter(|e| e.kind == EventObject::Node)
            .map(|e| (e.name.clone(), e.message.clone()))
            .collect();
        let mut dropped = BTreeMap::new();
        for d in told.iter().filter_map(|(_, d)| d.as_ref()) {
            for c in &d.candidates {
                dropped.insert(c.clone(), (d.text.clone(), d.stranded.clone()));
            }
        }
        PassRecord {
            at,
            nodes,
            blocked,
            dropped,
            chose: found.is_some(),
        }
    }
}

impl Rehearsal {
    /// The moves kube-scheduler's rehearsal refused.
    pub fn dropped(&self) -> impl Iterator<Item = &Dropped> {
        self.told.iter().filter_map(|(_, d)| d.as_ref())
    }
}

/// A move a pass found and dropped: kube-scheduler would leave some of its pods without a
/// node once its replacements are Ready and its candidates drained.
pub(super) struct Dropped {
    /// Its candidates' node names.
    pub candidates: Vec<String>,
    /// The move, as told of one of its candidates ([`super::explain::move_text`]).
    pub text: String,
    /// The pods kube-scheduler would leave without a node.
    pub stranded: Vec<String>,
    /// Its disruption reason.
    pub reason: DisruptionReason,
}

/// How many moves one pass may find and see refused by the kube-scheduler rehearsal before
/// it gives up until something changes.
const REHEARSED_MOVES: usize = 4;

impl Controllers {
    /// One pass, every [`PASS_INTERVAL`] for as long as the controllers run (as Karpenter
    /// polls), sooner after a change. A pass whose inputs equal those of the last pass that
    /// found nothing is skipped: it would find nothing again.
    pub(super) fn disruption_pass(&mut self, now: Duration) {
        self.disruption.pass_at = None;
        self.disruption
            .schedule_pass(&mut self.desk, now + PASS_INTERVAL);
        mark_consolidatable(&mut self.desk, now);
        let static_held = self.static_capacity.held_nodes(&self.desk);
        self.disruption
            .release_stale_taints(&mut self.desk, static_held);
        let nodes = &self.desk.cluster.nodes;
        self.disruption
            .backoffs
            .retain(|n, _| nodes.contains_key(n));
        self.health.find_repairs(&mut self.desk, &self.reboot, now);
        // the budget gauges at every pass, read off the cluster as it is now (unless nothing
        // they count was written since the last pass: thousands of passes a day find so)
        let read = GaugesRead {
            cluster: self.desk.cluster.generation(),
            controllers: self.desk.activity,
            marks: self.desk.marks,
            budget_windows: budget_windows(&self.desk, now),
        };
        if self.disruption.budgets_read.as_ref() != Some(&read) {
            self.disruption.budgets = (self.disruption.budgets_now(&self.desk, now).into_iter())
                .map(|((pool, r), b)| ((pool.to_string(), r), b))
                .collect();
            self.disruption.budgets_read = Some(read);
        }
        if self.disruption.command.is_some() {
            return;
        }
        // no decision on a partial view, as Karpenter's disruption waits for its cluster state
        // to sync: a watch relisting, or a NodeClaim whose launch has not answered (its
        // instance type, zone and price unknown; in a burst, the nodes still filling)
        if self.unsynced_since().is_some() {
            self.disruption
                .schedule_pass(&mut self.desk, now + UNSYNCED_RETRY);
            return;
        }
        let written = self
            .disruption
            .written_inputs(&mut self.desk, &self.health, now);
        // nothing written and nothing run out since the last pass that found nothing
        let idle = self.disruption.idle_inputs.as_ref();
        if idle.is_some_and(|i| i.written == written) && now < self.disruption.quiet_until {
            return;
        }
        let inputs = self.disruption.pass_inputs(&self.desk, written, now);
        if self.disruption.idle_inputs.as_ref() == Some(&inputs) {
            return;
        }
        if let Some((command, names, alone)) = self.decide_rehearsed(now) {
            self.disruption.idle_inputs = None;
            let nodes = &self.desk.cluster.nodes;
            (self.disruption.chosen).retain(|n, _| nodes.contains_key(n));
            let text = super::explain::chosen_text(&command, alone);
            for i in &command.candidates {
                (self.disruption.chosen).insert(names[*i].clone(), (now, text.clone()));
            }
            if command.method == Method::Reboot {
                let node = names[command.candidates[0]].clone();
                self.reboot_command(&command, node, now);
                return;
            }
            if matches!(command.method, Method::Repair | Method::Drift) {
                // repair and drift are not validated again after a wait, as Karpenter's
                // validator checks only emptiness and consolidation: a drifted or unhealthy
                // node stays so
                let candidates: Vec<String> = (command.candidates.iter())
                    .map(|i| names[*i].clone())
                    .collect();
                if command.method == Method::Repair {
                    for n in &candidates {
                        self.health.select_repair(&mut self.desk, n);
                    }
                }
                self.act(command, candidates, now);
                return;
            }
            let pending = Pending {
                reason: command.reason,
                method: command.method,
                planned: command.replacements.len(),
                consolidation_type: command.method.consolidation_type(),
                candidates: command
                    .candidates
                    .iter()
                    .map(|i| names[*i].clone())
                    .collect(),
                marks_by: Duration::ZERO,
                alone,
                replacements: Vec::new(),
                savings: command.savings,
                scores: std::mem::take(&mut self.disruption.scores),
            };
            if matches!(pending.method, Method::SingleNode | Method::MultiNode) {
                self.disruption
                    .tell_consolidation(&mut self.desk, &pending, None, now);
            }
            self.disruption.command = Some(pending);
            self.desk.at(now + VALIDATION_DELAY, Timer::Validate);
            return;
        }
        self.disruption.idle_inputs = Some(inputs);
        self.disruption.quiet_until = self.disruption.next_timed_change(&self.desk, now);
    }

    /// A pass's search for a command, carried out ([`Controllers::rehearse`]) and recorded
    /// (the searches' metrics, scores and eligible counts), with why nodes are blocked and
    /// each move the rehearsal refused told.
    fn decide_rehearsed(&mut self, now: Duration) -> Option<(Command, Vec<String>, bool)> {
        let Rehearsal {
            found,
            told,
            blocked,
            pool_names,
            looked_at,
        } = self.rehearse(true, now);
        self.disruption.last_pass = Some(PassRecord::new(now, looked_at, &blocked, &told, &found));
        // told in the order the searches ran: the blocked nodes before the first's records
        let mut blocked = Some(blocked);
        for (searched, dropped) in told {
            for e in blocked.take().into_iter().flatten() {
                self.desk.event(e, now);
            }
            self.disruption
                .record_search(&mut self.desk, searched, &pool_names, now);
            if let Some(dropped) = dropped {
                self.desk.log(
                    "disruption",
                    "kube-scheduler would leave pod(s) without a node, consolidation move dropped",
                    json!({"Pods": super::list_text(&dropped.stranded), "reason": dropped.reason.as_str().to_lowercase()}),
                );
            }
        }
        found
    }

    /// One pass's search for a command, with nothing recorded or told: a move kube-scheduler's
    /// rehearsal refuses ([`Disruptions::stranded_in`]) is looked past (its candidates are
    /// marked not disruptable in the same view, or for a multi-node move not for multi-node
    /// consolidation, and the search runs again, up to [`REHEARSED_MOVES`] times). The view
    /// is built once: nothing a search records changes what it reads. With `report`, the blocked nodes' events and the NodePools whose
    /// budgets block a reason are worked out for the pass to tell. `kerf explain` runs it as
    /// the pass's dry run.
    pub(super) fn rehearse(&mut self, report: bool, now: Duration) -> Rehearsal {
        let (pools, pool_names) = self.desk.pool_inputs(now);
        let daemonsets: Vec<Pod> = self.desk.cluster.daemonsets.values().cloned().collect();
        let mut told = Vec::new();
        let g = self.gather();
        let blocked = if report {
            self.blocked_events(&g, now)
        } else {
            Vec::new()
        };
        let (mut view, names) = self.disruption.view(
            &self.desk,
            &self.disruption_facts(&g),
            pools,
            &pool_names,
            &daemonsets,
            now,
        );
        let looked_at = if report {
            names.iter().cloned().collect()
        } else {
            BTreeSet::new()
        };
        let mut found = None;
        for attempt in 0..REHEARSED_MOVES {
            let (command, searched) = search(&self.desk, &view, report && attempt == 0);
            let Some(command) = command else {
                told.push((searched, None));
                break;
            };
            let stranded = stranded_in(
                &self.desk,
                &self.provisioning,
                &view.node_pools,
                &command,
                &names,
            );
            if stranded.is_empty() {
                told.push((searched, None));
                found = Some((command, names, false));
                break;
            }
            told.push((
                searched,
                Some(Dropped {
                    candidates: (command.candidates.iter())
                        .map(|i| names[*i].clone())
                        .collect(),
                    text: super::explain::move_text(&command),
                    stranded,
                    reason: command.reason,
                }),
            ));
            // a one-node move kube-scheduler would not follow may still be made with all
            // the node's pods on its replacement, where each has room whatever order
            // they come in: dropped outright, an on-demand node whose pods spot
            // capacity of a heavier NodePool would take stayed for good (swarm seeds
            // 63966, 66157)
            // (a one-node deletion comes from the multi-node search)
            let one_node = matches!(command.method, Method::SingleNode | Method::MultiNode)
                && command.candidates.len() == 1;
            if one_node {
                let alone = self.alone_move(&mut view, command.candidates[0], &names);
                if let Some(alone) = alone {
                    // the Balanced score told when it is approved is this move's
                    if let Some((searched, _)) = told.last_mut() {
                        searched.scores = crate::disruption::search::Worth::new(&view)
                            .scores(&alone.candidates, alone.savings);
                    }
                    found = Some((alone, names, true));
                    break;
                }
            }
            // a multi-node move's candidates are still single-node consolidation's to try
            // (swarm seed 139195): only multi-node consolidation looks past them
            let several = command.method == Method::MultiNode && command.candidates.len() > 1;
            for i in &command.candidates {
                if several {
                    view.nodes[*i].multi_node = false;
                } else {
                    view.nodes[*i].disruptable = false;
                }
            }
        }
        Rehearsal {
            found,
            told,
            blocked,
            pool_names,
            looked_at,
        }
    }

    /// The move of node `i` with every one of its pods on one new node (other nodes are
    /// given none of them; single-node consolidation alone, [`replace_alone`]), when
    /// kube-scheduler's rehearsal follows it.
    fn alone_move(
        &self,
        view: &mut ClusterView<'_>,
        i: usize,
        names: &[String],
    ) -> Option<Command> {
        let kept = keep_on_replacements(view, i);
        let alone = replace_alone(view, &mut self.desk.catalog.borrow_mut());
        for (n, (disruptable, allocatable)) in view.nodes.iter_mut().zip(kept) {
            n.disruptable = disruptable;
            n.node.allocatable = allocatable;
        }
        // one new node, as Karpenter's single-node consolidation allows
        let alone = alone.filter(|c| {
            c.method == Method::SingleNode && c.candidates == [i] && c.replacements.len() == 1
        })?;
        let stranded = stranded_in(
            &self.desk,
            &self.provisioning,
            &view.node_pools,
            &alone,
            names,
        );
        stranded.is_empty().then_some(alone)
    }

    /// Creates a command's replacement NodeClaim; its name. Karpenter's queue says on it
    /// that it launches and that the command waits for it.
    pub(super) fn launch_replacement(
        &mut self,
        plan: &kerf_scheduling::PlannedNodeClaim,
        pool: &str,
        reason: kerf_api::nodepool::DisruptionReason,
        now: Duration,
    ) -> String {
        let counted = reason.as_str().to_lowercase();
        let name = self.create_nodeclaim(plan, pool, &counted, now);
        for (event, message) in [
            (
                "DisruptionLaunching",
                format!("Launching NodeClaim: {}", reason.as_str()),
            ),
            (
                "DisruptionWaitingReadiness",
                "Waiting on readiness to continue disruption".to_string(),
            ),
        ] {
            self.desk.event(
                Event {
                    kind: EventObject::NodeClaim,
                    name: name.clone(),
                    warning: false,
                    reason: event.into(),
                    message,
                },
                now,
            );
        }
        name
    }

    /// Whether a disruption command is being validated or carried out.
    pub fn command_in_flight(&self) -> bool {
        self.disruption.command.is_some() || !self.disruption.executing.is_empty()
    }

    /// What a full disruption pass over the current state would decide at `now`, without
    /// acting on it or skipping anything: how a checker tells whether a pass was missed.
    pub fn fresh_decision(&mut self, now: Duration) -> Option<String> {
        let decided = self.with_repairs_as_at(now, |core| core.rehearse(false, now).found);
        let (command, names, _) = decided?;
        let candidates: Vec<String> = command
            .candidates
            .iter()
            .map(|i| names[*i].clone())
            .collect();
        Some(command_text(
            command.reason.as_str(),
            &candidates,
            command.replacements.len(),
            command.savings,
        ))
    }

    /// Checks the command again on the current state after the validation wait (see
    /// [`crate::disruption::search::revalidate`]); acts on it if it still holds.
    pub(super) fn validate_command(&mut self, now: Duration) {
        let Some(pending) = self.disruption.command.take() else {
            return;
        };
        let failed = |core: &mut Controllers| {
            core.desk.metrics.add(
                &families::VOLUNTARY_DISRUPTION_FAILED_VALIDATIONS,
                &[pending.consolidation_type],
                pending.candidates.len() as u64,
            );
            core.disruption
                .schedule_pass(&mut core.desk, now + PASS_INTERVAL);
        };
        let (pools, pool_names) = self.desk.pool_inputs(now);
        let daemonsets: Vec<Pod> = self.desk.cluster.daemonsets.values().cloned().collect();
        let g = self.gather();
        let (mut view, names) = self.disruption.view(
            &self.desk,
            &self.disruption_facts(&g),
            pools,
            &pool_names,
            &daemonsets,
            now,
        );
        let candidates: Option<Vec<usize>> = (pending.candidates.iter())
            .map(|c| names.iter().position(|n| n == c))
            .collect();
        if pending.alone
            && let Some([i]) = candidates.as_deref()
        {
            keep_on_replacements(&mut view, *i);
        }
        // a candidate gone from the view is churn, as Karpenter finds a candidate no longer valid
        let command = candidates.ok_or(Rejection::Churn).and_then(|candidates| {
            let decided = Decided {
                reason: pending.reason,
                method: pending.method,
                candidates,
                replacements: pending.planned,
            };
            revalidate(&view, &mut self.desk.catalog.borrow_mut(), &decided)
        });
        drop(view);
        drop(g);
        let command = command.and_then(|c| {
            let stranded =
                self.disruption
                    .stranded(&mut self.desk, &self.provisioning, &c, &names, now);
            stranded
                .is_empty()
                .then_some(c)
                .ok_or(Rejection::Scheduling)
        });
        let command = match command {
            Ok(command) => command,
            Err(why) => {
                // a one-node move is Karpenter's single-node consolidation, which tells why;
                // its multi-node validation (two nodes and more) drops the command untold
                if matches!(pending.method, Method::SingleNode | Method::MultiNode)
                    && pending.candidates.len() == 1
                {
                    self.disruption
                        .tell_consolidation(&mut self.desk, &pending, Some(why), now);
                }
                failed(self);
                return;
            }
        };
        let candidates: Vec<String> = (command.candidates.iter())
            .map(|i| names[*i].clone())
            .collect();
        self.act(command, candidates, now);
    }

    /// Node repair reboots a node: the reboot committed on its NodeClaim
    /// ([`Controllers::commit_reboot`]) and announced as Karpenter's `reboot` decision; the
    /// node is neither tainted `karpenter.sh/disrupted` nor replaced. The next pass looks at
    /// once.
    fn reboot_command(&mut self, command: &Command, node: String, now: Duration) {
        let Some(due) = self.health.repairs.get(&node).cloned() else {
            return;
        };
        if self.commit_reboot(&node, &due.decision, now) {
            self.health.select_repair(&mut self.desk, &node);
            self.disruption
                .announce(&mut self.desk, command, &[node], "reboot");
        }
        self.disruption.schedule_pass(&mut self.desk, now);
    }

    fn act(&mut self, command: Command, candidates: Vec<String>, now: Duration) {
        let method = if command.terminate_first.is_some() {
            "terminate-first"
        } else if command.replacements.is_empty() {
            "delete"
        } else {
            "replace"
        };
        if let Some(why) = command.terminate_first {
            let reason = command.reason.as_str().to_lowercase();
            for c in &candidates {
                if let Some((_, claim)) = self.desk.cluster.claim_of_node(c) {
                    let pool = claim.node_pool.clone();
                    self.desk.metrics.inc(
                        &families::VOLUNTARY_DISRUPTION_TERMINATE_FIRST_DECISIONS,
                        &[&pool, &reason, why],
                    );
                }
            }
        }
        self.desk.actions.push(Action::Disrupting {
            reason: command.reason,
            nodes: candidates.clone(),
        });
        let id = self
            .disruption
            .announce(&mut self.desk, &command, &candidates, method);
        let by = mark_deadline(&self.desk, now);
        for c in &candidates {
            self.desk.mark(c, by);
            self.desk.disrupting(c, command.reason);
        }
        // launched with the marks, as the provisioner counts them against the NodePools'
        // limits from now on (launched only once the marks are stored, a replacement could
        // take a slot the provisioner had filled meanwhile: swarm seeds 73723, 73779); a
        // command given up at its marks leaves them as capacity
        let (_, pool_names) = self.desk.pool_inputs(now);
        let mut launched = Vec::new();
        for r in &command.replacements {
            let pool = pool_names[r.node_pool].clone();
            launched.push(self.launch_replacement(r, &pool, command.reason, now));
        }
        let pending = Pending {
            reason: command.reason,
            method: command.method,
            planned: command.replacements.len(),
            consolidation_type: command.method.consolidation_type(),
            candidates,
            marks_by: by,
            alone: false,
            replacements: launched,
            savings: command.savings,
            scores: Vec::new(),
        };
        let method = pending.method;
        self.disruption.executing.insert(id.clone(), pending);
        self.desk
            .at(now + REPLACEMENT_TIMEOUT, Timer::ReplacementTimeout(id));
        // as Karpenter's loop after a drift or repair command: it looks again at once, the
        // nodes under way counted against the budgets (after a consolidation the next pass
        // comes at its time: the next command waits out its 15 s validation anyway)
        if matches!(method, Method::Drift | Method::Repair) {
            self.disruption.schedule_pass(&mut self.desk, now);
        }
    }

    /// Deletes each command's candidates once the API server holds every candidate's mark
    /// (Karpenter deletes only the candidates it marked) and every replacement is
    /// initialized; rolls a command back when a replacement of it is gone.
    pub(super) fn continue_command(&mut self, now: Duration) {
        let ids: Vec<String> = self.disruption.executing.keys().cloned().collect();
        for id in ids {
            let c = &self.disruption.executing[&id];
            let nodes = &self.desk.cluster.nodes;
            if !(c.candidates.iter()).all(|n| nodes.get(n).is_none_or(has_disrupted_taint)) {
                continue;
            }
            let mut ready = true;
            let mut gone = false;
            for r in &c.replacements {
                match self.desk.cluster.nodeclaims.get(r) {
                    None => gone = true,
                    Some(claim) => ready &= claim.initialized,
                }
            }
            if gone {
                self.roll_back(&id, "replacement nodeclaim was deleted", true, now);
                continue;
            }
            if !ready {
                continue;
            }
            let c = self.disruption.executing.remove(&id).expect("listed");
            self.desk.cancel(&Timer::ReplacementTimeout(id));
            for n in &c.candidates {
                if let Some((claim, _)) = self.desk.cluster.claim_of_node(n) {
                    let claim = claim.clone();
                    self.terminate_disrupted(n, &claim, c.reason, now);
                }
            }
            self.desk.log(
                "disruption",
                "command succeeded",
                json!({
                    "reason": c.reason.as_str().to_lowercase(), "savings": format!("${:.2}", c.savings),
                }),
            );
            self.disruption
                .schedule_pass(&mut self.desk, now + PASS_INTERVAL);
        }
    }

    pub(super) fn replacement_timeout(&mut self, id: &str, now: Duration) {
        self.roll_back(id, "replacements did not initialize in time", true, now);
    }

    /// A candidate's mark was refused or not written in time. As Karpenter's command start
    /// when it cannot taint every candidate: a command that launches replacements is given
    /// up; one that only deletes goes on with the candidates marked, without this one.
    pub(crate) fn mark_refused(&mut self, node: &str, by: Duration, now: Duration) {
        let held = (self.disruption.executing.iter())
            .find(|(_, c)| c.marks_by == by && c.candidates.iter().any(|n| n == node))
            .map(|(id, c)| (id.clone(), c.planned > 0 || c.candidates.len() == 1));
        let Some((id, whole)) = held else {
            // its command went on (the mark was stored after all) or was given up: a mark
            // still awaited is not coming
            if (self.desk.cluster.nodes.get(node))
                .is_some_and(|n| n.tainting && !has_disrupted_taint(n))
            {
                self.release_candidate(node);
            }
            return;
        };
        if whole {
            self.roll_back(&id, MARK_LATE, false, now);
            return;
        }
        let c = (self.disruption.executing.get_mut(&id)).expect("found above");
        c.candidates.retain(|n| n != node);
        self.release_candidate(node);
    }

    /// Lets a candidate of a command given up go: its disrupted taint is asked to go, unless
    /// its NodeClaim is being deleted meanwhile (it expired, say), whose drain needs the
    /// taint: that is asked for as termination asks for it.
    fn release_candidate(&mut self, node: &str) {
        let deleting =
            (self.desk.cluster.claim_of_node(node)).is_some_and(|(_, c)| c.deleting.is_some());
        if !deleting {
            self.desk.untaint(node);
            return;
        }
        if let Some(n) = self.desk.cluster.nodes.get_mut(node) {
            n.tainting = false;
        }
        self.desk.taint(node);
    }

    /// Gives a command up: candidates untainted. Replacements that came up stay after a
    /// replacement failed (they are ordinary capacity now, consolidated later if unneeded);
    /// a command given up at its marks deletes its own. `replacement_failed`: it is
    /// given up for a replacement (Karpenter's queue failure, counted, and its candidates
    /// wait longer with each in a row), not because a candidate could not be marked.
    fn roll_back(&mut self, id: &str, why: &str, replacement_failed: bool, now: Duration) {
        let Some(c) = self.disruption.executing.remove(id) else {
            return;
        };
        self.desk.cancel(&Timer::ReplacementTimeout(id.to_string()));
        let decision = if c.planned == 0 { "delete" } else { "replace" };
        let reason = c.reason.as_str().to_lowercase();
        if replacement_failed {
            self.desk.metrics.add(
                &families::VOLUNTARY_DISRUPTION_QUEUE_FAILURES,
                &[c.consolidation_type, decision, &reason],
                c.replacements.len().max(1) as u64,
            );
        }
        // the candidates wait longer with each replacement that failed in a row
        let mut retry = Duration::ZERO;
        let backed_off = replacement_failed && !c.replacements.is_empty();
        for n in c.candidates.iter().filter(|_| backed_off) {
            let failures = self.disruption.backoffs.get(n).map_or(0, |b| b.failures) + 1;
            let wait = Backoff::wait(failures);
            retry = retry.max(wait);
            let until = now + wait;
            (self.disruption.backoffs).insert(n.clone(), Backoff { failures, until });
        }
        let mut fields = json!({"reason": c.reason.as_str().to_lowercase(), "error": why, "Nodes": c.candidates});
        if retry > Duration::ZERO {
            fields["retryAfter"] = format_go_duration(retry).into();
        }
        self.desk
            .log_error("disruption", "failed disrupting node(s)", fields);
        for n in &c.candidates {
            self.release_candidate(n);
            self.health.repair_abandoned(n);
        }
        // a command given up at its marks would not have launched them, as Karpenter's: its
        // replacements go (one whose create still waits out an outage is dropped with it)
        if !replacement_failed {
            for r in &c.replacements {
                self.desk.delete_nodeclaim(r, now);
            }
        }
        self.disruption
            .schedule_pass(&mut self.desk, now + PASS_INTERVAL);
    }

    /// Deletes a disrupted NodeClaim, with Karpenter's `DisruptionTerminating` Events on its
    /// Node and NodeClaim.
    pub(super) fn terminate_disrupted(
        &mut self,
        node: &str,
        claim: &str,
        reason: kerf_api::nodepool::DisruptionReason,
        now: Duration,
    ) {
        if reason == kerf_api::nodepool::DisruptionReason::Unhealthy {
            self.health.bound_repair(&mut self.desk, node, claim, now);
        }
        // recorded first: the status written as its deletion starts says why
        self.desk.record_reason(claim, reason);
        self.desk.delete_nodeclaim(claim, now);
        for (kind, name, what) in [
            (EventObject::Node, node, "Node"),
            (EventObject::NodeClaim, claim, "NodeClaim"),
        ] {
            self.desk.event(
                Event {
                    kind,
                    name: name.to_string(),
                    warning: false,
                    reason: "DisruptionTerminating".into(),
                    message: format!("Disrupting {what}: {}", reason.as_str()),
                },
                now,
            );
        }
    }
}

/// Each NodePool's nodes as Karpenter's budgets count them (`NodePoolStatsFromNodes`), from
/// what the API server holds (Karpenter's informers' copies), not what Kerf asked for: Nodes
/// with a NodeClaim, initialized (the Node's stored label), whose
/// instance is not already terminating (the NodeClaim's condition), by the NodePool the
/// registered Node's label names (the NodeClaim's before it registers). Of those, the ones already disrupting: being deleted, or
/// tainted by these controllers (Karpenter's mark for deletion), and
/// besides them those only not Ready, which take from every budget but repair's (not
/// being Ready is what repair acts on).
fn budget_counts<'a>(desk: &'a Desk) -> BTreeMap<&'a str, BudgetCounts> {
    let mut out: BTreeMap<&'a str, BudgetCounts> = BTreeMap::new();
    for n in desk.cluster.nodes.values() {
        let Some((_, c)) = desk.cluster.claim_of(n) else {
            continue;
        };
        let label = |k: &str| n.labels.get(k).map(String::as_str);
        // a node rebooting for repair counts, and takes from every reason's budget, while
        // it is not initialized too
        let rebooting = c.reboot.as_ref().is_some_and(|r| r.under_way());
        if (!n.initialized_stored && !rebooting) || c.instance_terminating_stored {
            continue;
        }
        let pool = if label(labels::REGISTERED) == Some("true") {
            label(labels::NODEPOOL).unwrap_or_default()
        } else {
            c.node_pool.as_str()
        };
        let counts = out.entry(pool).or_default();
        counts.nodes += 1;
        if c.deleting.is_some() || n.tainting || rebooting {
            counts.going += 1;
        } else if !n.ready {
            counts.only_not_ready += 1;
        }
    }
    out
}

/// Plans a command over `view` (one search of a pass) and works out what the evaluation
/// records: the metrics, the eligible counts and scores, and with `report_blocked` which
/// NodePools' budgets block a reason with candidates. Recorded later by
/// [`Disruptions::record_search`], once the view is let go.
fn search(
    desk: &Desk,
    view: &ClusterView<'_>,
    report_blocked: bool,
) -> (Option<Command>, Searched) {
    let eligible = crate::disruption::search::eligible(view);
    let reasons_with_candidates: Vec<DisruptionReason> = (eligible.iter())
        .filter(|(_, n)| *n > 0)
        .map(|(r, _)| *r)
        .collect();
    let eligible = eligible
        .into_iter()
        .map(|(r, n)| (r.as_str().to_lowercase(), n))
        .collect();
    // wall-clock time, for the evaluation-duration histogram only: no decision reads it
    let started = std::time::Instant::now();
    let (command, judged) = plan_judged(view, &mut desk.catalog.borrow_mut());
    let elapsed = started.elapsed().as_secs_f64();
    let scores = (command.as_ref())
        .filter(|c| matches!(c.method, Method::SingleNode | Method::MultiNode))
        .map(|c| crate::disruption::search::Worth::new(view).scores(&c.candidates, c.savings))
        .unwrap_or_default();
    let kind = command.as_ref().map_or(("", ""), |c| {
        (c.reason.as_str(), c.method.consolidation_type())
    });
    let searched = Searched {
        eligible,
        blocked_reasons: report_blocked.then_some(reasons_with_candidates),
        judged,
        scores,
        reason: kind.0,
        consolidation_type: kind.1,
        elapsed,
    };
    (command, searched)
}

/// Leaves node `i`'s pods nowhere to go but new capacity: every other node is no candidate
/// and has no room left. What each node was, to be put back.
fn keep_on_replacements(
    view: &mut ClusterView<'_>,
    i: usize,
) -> Vec<(bool, kerf_scheduling::resources::Resources)> {
    (view.nodes.iter_mut().enumerate())
        .map(|(j, n)| {
            let was = (n.disruptable, n.node.allocatable.clone());
            if j != i {
                n.disruptable = false;
                n.node.allocatable = n.node.requested.clone();
            }
            was
        })
        .collect()
}

/// Why a command is given up at its marks (Karpenter's `marking disrupted` error).
const MARK_LATE: &str = "marking disrupted: the taint was not stored in time";

/// How long a command's marks may take to be stored, at most.
const MARK_WITHIN: u64 = 10;

/// The instant by which the marks of a command decided at `now` must be stored: within
/// [`MARK_WITHIN`] seconds, and before any budget's schedule opens or closes a window (the
/// budgets that allowed the command would no longer be the ones that hold). Schedules count
/// in whole seconds.
fn mark_deadline(desk: &Desk, now: Duration) -> Duration {
    let windows = budget_windows(desk, now);
    let second = now.as_secs();
    ((second + 1)..=(second + MARK_WITHIN))
        .map(Duration::from_secs)
        .find(|t| budget_windows(desk, *t) != windows)
        .unwrap_or(now + Duration::from_secs(MARK_WITHIN))
}

/// Which budgets' schedules are active now, all NodePools' in order.
fn budget_windows(desk: &Desk, now: Duration) -> Vec<bool> {
    let unix = desk.settings.epoch_unix + now.as_secs();
    (desk.cluster.node_pools.values())
        .flat_map(|np| &np.spec.disruption.budgets)
        .map(|b| budget_active(b, unix).unwrap_or(false))
        .collect()
}

/// When each node may be consolidated by its NodePool's consolidateAfter.
fn consolidatable_times<'a>(desk: &'a Desk) -> impl Iterator<Item = Duration> + 'a {
    let cluster = &desk.cluster;
    (cluster.nodes.values()).filter_map(|n| {
        let (_, c) = cluster.claim_of(n)?;
        consolidatable_at(cluster.node_pools.get(&c.node_pool)?, n.last_pod_event)
    })
}

/// Logs each node once when its consolidateAfter has run out since its last pod event.
fn mark_consolidatable(desk: &mut Desk, now: Duration) {
    let mut newly = Vec::new();
    // NodeClaims whose `Consolidatable` condition is to be set (true) or cleared (false)
    let mut flips = Vec::new();
    for (name, n) in &desk.cluster.nodes {
        let Some((claim, c)) = desk.cluster.claim_of(n) else {
            continue;
        };
        let pool = desk.cluster.node_pools.get(&c.node_pool);
        // a static NodePool's nodes are never consolidated, and Karpenter leaves their
        // condition alone
        if pool.is_some_and(|np| np.spec.replicas.is_some()) || c.deleting.is_some() {
            continue;
        }
        let due = pool.and_then(|np| consolidatable_at(np, n.last_pod_event));
        let now_due = c.initialized && due.is_some_and(|t| now >= t);
        if now_due != c.consolidatable {
            flips.push((claim.clone(), now_due));
        }
        if !c.initialized || n.marked_consolidatable == Some(n.last_pod_event) {
            continue;
        }
        if now_due {
            newly.push((name.clone(), claim.clone()));
        }
    }
    for (claim, due) in flips {
        if let Some(c) = desk.cluster.nodeclaims.get_mut(&claim) {
            c.consolidatable = due;
        }
        desk.status_changed(&claim);
    }
    for (name, claim) in newly {
        if let Some(n) = desk.cluster.nodes.get_mut(&name) {
            n.marked_consolidatable = Some(n.last_pod_event);
        }
        desk.log(
            "nodeclaim.disruption",
            "marking consolidatable",
            json!({"NodeClaim": {"name": claim}, "Node": {"name": name}}),
        );
    }
}

/// Tells a Normal event on a node and on its NodeClaim, as Karpenter pairs its
/// consolidation events.
fn tell_node_and_claim(
    desk: &mut Desk,
    node: &str,
    reason: &'static str,
    message: &str,
    now: Duration,
) {
    let claim = desk.cluster.claim_of_node(node).map(|(c, _)| c.clone());
    let told = [
        (EventObject::Node, Some(node.to_string())),
        (EventObject::NodeClaim, claim),
    ];
    for (kind, name) in told {
        let Some(name) = name else { continue };
        desk.event(
            Event {
                kind,
                name,
                warning: false,
                reason: reason.into(),
                message: message.into(),
            },
            now,
        );
    }
}

/// Karpenter's fields of a command's log line: the decision, what it disrupts and
/// launches, and the pods it moves.
fn command_fields(
    desk: &Desk,
    command: &Command,
    candidates: &[String],
    decision: &str,
) -> serde_json::Value {
    let cluster = &desk.cluster;
    // the pods that move: daemon pods stay (`gather` leaves them out too)
    let candidate: BTreeSet<&str> = candidates.iter().map(String::as_str).collect();
    let pods = (cluster.pods.values())
        .filter(|p| p.owner != PodOwner::DaemonSet)
        .filter(|p| p.node.as_deref().is_some_and(|n| candidate.contains(n)))
        .count();
    let disrupted: Vec<serde_json::Value> = (candidates.iter())
        .map(|n| {
            let claim = cluster.claim_of_node(n);
            let launched = claim.and_then(|(_, c)| c.launched.as_ref());
            json!({
                "Node": {"name": n},
                "NodeClaim": {"name": claim.map(|(name, _)| name.as_str())},
                "instance-type": launched.map(|l| l.instance_type.as_str()),
                "capacity-type": launched.map(|l| l.capacity_type.as_str()),
            })
        })
        .collect();
    let replacements: Vec<serde_json::Value> = (command.replacements.iter())
        .map(|r| {
            let mut m = json!({"capacity-type": r.launch.capacity_type});
            if command.replacements.len() == 1 {
                let types: Vec<String> = r.instance_types.iter().map(|t| t.name.clone()).collect();
                m["instance-types"] = super::list_text(&types).into();
            }
            m
        })
        .collect();
    json!({
        "decision": decision,
        "disrupted-node-count": candidates.len(),
        "replacement-node-count": command.replacements.len(),
        "pod-count": pods,
        "disrupted-nodes": disrupted,
        "replacement-nodes": replacements,
    })
}

/// Why a NodeClaim has drifted, if it has: its NodePool's template changed
/// (`NodePoolDrifted`), its node no longer meets the requirements
/// (`RequirementsDrifted`), its node class changed (`NodeClassDrift`), its image is no
/// longer one the class resolves to (`AMIDrift`), or its security groups
/// (`SecurityGroupDrift`) or subnet (`SubnetDrift`) are not the ones the class selects
/// now, or its capacity reservation is not one the class resolves
/// (`CapacityReservationDrift`), or its placement group is not the one the class resolves
/// to now (`PlacementGroupDrift`). What the class has not resolved yet (an empty status
/// list) is no reason, except for reservations: Karpenter counts an empty list as none.
fn drift_of(
    desk: &Desk,
    lifecycle: &super::lifecycle::Lifecycles,
    name: &str,
    basis: &mut DriftBasis,
) -> Option<DriftReason> {
    let c = desk.cluster.nodeclaims.get(name)?;
    let np = desk.cluster.node_pools.get(&c.node_pool)?;
    let (pool_hash, requirements) = (basis.pools).entry(c.node_pool.clone()).or_insert_with(|| {
        let requirements = Requirements::from_api(&np.spec.template.spec.requirements);
        (node_pool_hash(np), requirements)
    });
    // no hash (a NodeClaim written by another version or by hand): nothing to compare,
    // as Karpenter treats a hash of another version
    // nor when Kerf could not read the whole template: its hash would not be comparable
    let pool_readable = desk
        .cluster
        .pool_gaps
        .get(&c.node_pool)
        .is_none_or(|g| g.compare_hash);
    if pool_readable && !c.node_pool_hash.is_empty() && c.node_pool_hash != *pool_hash {
        return Some(DriftReason::NodePoolDrifted);
    }
    let labels = c
        .node
        .as_ref()
        .and_then(|n| desk.cluster.nodes.get(n))
        .map(|n| &n.labels);
    if labels.is_some_and(|l| !requirements.matches_labels(l)) {
        return Some(DriftReason::RequirementsDrifted);
    }
    let class = desk.cluster.node_classes.get(&c.node_class)?;
    let class_readable = desk
        .cluster
        .class_gaps
        .get(&c.node_class)
        .is_none_or(|g| g.compare_hash);
    let ca_bundle = &desk.settings.cluster_ca_bundle;
    let class_hash = (basis.classes)
        .entry(c.node_class.clone())
        .or_insert_with(|| node_class_hash(class, ca_bundle));
    if class_readable && !c.node_class_hash.is_empty() && c.node_class_hash != *class_hash {
        return Some(DriftReason::NodeClassDrift);
    }
    let status = class.status.as_ref()?;
    let launched = c.launched.as_ref()?;
    if let Some(image) = &launched.image_id
        && !status.amis.is_empty()
        && !status.amis.iter().any(|a| a.id == *image)
    {
        return Some(DriftReason::AmiDrift);
    }
    let reservation = launched.labels.get(labels::CAPACITY_RESERVATION_ID);
    // gone from the class, and the instance still in it as a listing asked for since
    // said (an instance whose reservation ended runs on as on-demand: it is relabelled,
    // not drifted); for a cloud that does not say, once any listing asked for since came
    // in (after a start, at least one)
    let changed_at = lifecycle.reservations_changed.get(&c.node_class);
    let fresh = |listed: Duration| changed_at.is_none_or(|at| listed > *at);
    let listed = lifecycle.listed_reservations.get(&launched.provider_id);
    let still_in = match listed {
        Some((listing, id)) => id.is_some() && fresh(*listing),
        None => lifecycle.last_listing.is_some_and(fresh),
    };
    let reservation_gone = still_in
        && reservation.is_some_and(|id| !status.capacity_reservations.iter().any(|r| r.id == *id));
    // the group the class's offerings launch into now (its types carry its id), against
    // the one the node was launched into; nothing to compare before the types are known
    // (a selector whose group is not resolved yet, after a restart say, is no answer)
    let selects = class.spec.placement_group_selector.is_some();
    let group_now = (desk.cluster.instance_types.get(&c.node_class))
        .and_then(|types| types.first())
        .map(|t| t.labels.get(labels::PLACEMENT_GROUP_ID).cloned())
        .filter(|id| id.is_some() || !selects);
    let group_moved = group_now.is_some_and(|now| {
        now.as_deref().unwrap_or("")
            != launched
                .labels
                .get(labels::PLACEMENT_GROUP_ID)
                .map_or("", String::as_str)
    });
    let Some(network) = launched.network.as_ref() else {
        if reservation_gone {
            return Some(DriftReason::CapacityReservationDrift);
        }
        return group_moved.then_some(DriftReason::PlacementGroupDrift);
    };
    let groups: BTreeSet<&str> = status.security_groups.iter().map(|g| &g.id[..]).collect();
    // an instance in a VPC has at least one group: none is a listing that did not say
    if !groups.is_empty()
        && !network.security_group_ids.is_empty()
        && !groups
            .iter()
            .copied()
            .eq(network.security_group_ids.iter().map(String::as_str))
    {
        return Some(DriftReason::SecurityGroupDrift);
    }
    if !status.subnets.is_empty() && !status.subnets.iter().any(|s| s.id == network.subnet_id) {
        return Some(DriftReason::SubnetDrift);
    }
    if reservation_gone {
        return Some(DriftReason::CapacityReservationDrift);
    }
    group_moved.then_some(DriftReason::PlacementGroupDrift)
}

/// [`Disruptions::stranded`], the replacements planned from `pools`.
fn stranded_in(
    desk: &Desk,
    provisioning: &super::provisioning::Provisioner,
    pools: &[NodePoolInput],
    command: &Command,
    names: &[String],
) -> Vec<String> {
    if !matches!(command.method, Method::MultiNode | Method::SingleNode) {
        return Vec::new();
    }
    let planned: Vec<PlannedNode> = (command.replacements.iter().enumerate())
        .filter_map(|(i, r)| {
            let pool = pools.get(r.node_pool)?;
            PlannedNode::of(&format!("replacement-{i}"), r, pool, &pool.taints)
        })
        .collect();
    let candidates: Vec<String> = (command.candidates.iter())
        .map(|i| names[*i].clone())
        .collect();
    provisioning.rehearse_move(desk, &candidates, &planned)
}
