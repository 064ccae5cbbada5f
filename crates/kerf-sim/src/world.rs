//! The simulated world: a Kubernetes cluster (workload controllers, daemonsets, a binder that
//! plays kube-scheduler) and an AWS cloud (launch delays, insufficient capacity, spot
//! interruptions), on a virtual clock of discrete events. Kerf's controllers
//! ([`kerf_core::controllers::Controllers`]) decide; this shell feeds them what happened and
//! carries out what they ask, as the operator does against a real cluster.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::CSINode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kerf_api::manifest::{Checked, KarpenterObject, RawDocument, check_document};
use kerf_api::{NodePool, labels};
use kerf_aws::capacity::NodeSettings;
use kerf_aws::instance_type::scheduler_options;
use kerf_aws::interruption;
use kerf_core::cluster::{CapacityType, CloudInstance, Launched, PodOwner, set_pod_scheduled};
use kerf_core::controllers::disruption::PASS_INTERVAL;
use kerf_core::controllers::lifecycle::{InsufficientOffering, retry_wait};
use kerf_core::controllers::node_classes::TERMINATION_FINALIZER;
use kerf_core::controllers::provisioning::node_labels;
use kerf_core::controllers::{Action, Controllers, LaunchRequest, Settings};
use kerf_core::nodepools::{daemon_runs_on, node_pool_input};
use kerf_core::objects::nodeclaim_conditions;
use kerf_core::observe::{Object, Observation};
use kerf_core::provisioning::rules::is_provisionable;
use kerf_core::unfinished::{Unfinished, replayable};
use kerf_core::workloads::{ClusterObject, PodNames, VolumeObject, claim_templates, read};
use kerf_scheduling::pods::pod_key;
use kerf_scheduling::resources::Resources;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use crate::clock::EPOCH_UNIX;
use crate::cloud::{self, Instance};
use crate::kube_scheduler;
use crate::log::Log;
use crate::report::{FinalNode, PoolSample, Removal, Report, Sample, Wait};
use crate::scenario::{NoticeKind, Scenario, ScenarioError};

mod api_server;
use api_server::{ApiServer, StoredNodeClaim};
mod binder;
mod buffers;
mod checkers;
use checkers::{Admission, Checkers, CloudEvent, KerfMemory, Sight};
mod events;
pub use events::{Events, KeptEvent};
mod faults;
mod reservations;
pub use checkers::INVARIANTS;
mod pdb_status;
#[cfg(test)]
mod planted;
mod standing;
pub use standing::Standing;
mod storage;
mod tally;
mod workloads;
use workloads::Workload;

/// How long a launched instance may take to register before Kerf gives up on it.
pub const REGISTRATION_TTL: Duration = Duration::from_secs(15 * 60);
/// Spot interruption warning lead time.
pub const INTERRUPTION_NOTICE: Duration = Duration::from_secs(120);
/// How long a stopping instance keeps running after its state-change notice.
const STOP_DELAY: Duration = Duration::from_secs(60);
/// How many rounds of actions one instant may take before the run is declared stuck.
const SETTLE_ROUNDS: usize = 10_000;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The scenario is unusable.
    #[error("{0}")]
    Scenario(#[from] ScenarioError),
    /// An invariant broke.
    #[error("invariant violated at {at}: {message}")]
    Invariant {
        /// Simulated time, as text.
        at: String,
        /// What broke, naming the objects.
        message: String,
    },
}

/// Run knobs.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// Check the invariants on every step.
    pub check: bool,
    /// A bug to plant, for the tests that show a checker catches it.
    pub plant: Option<Plant>,
    /// Leave the cost lower bound out (a linear program at every sample): the swarm reads
    /// only the checks.
    pub skip_floor: bool,
}

impl RunOptions {
    /// Every invariant checked, nothing planted: how the tests run scenarios.
    pub fn checked() -> RunOptions {
        RunOptions {
            check: true,
            plant: None,
            skip_floor: false,
        }
    }
}

/// A bug planted between the controllers and the simulated cluster: what a controller
/// that forgot an action would do. The checkers must catch each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plant {
    /// The controllers never taint a node (no `Taint` action reaches the API server).
    MissingTaint,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Scenario(usize),
    /// The instance with this provider id registers its node.
    Registered(String),
    /// The node becomes Ready (and its startup taints are removed).
    Ready(String),
    Interrupt(usize),
    Notice(usize),
    /// The instance with this provider id goes away, with the cloud's words for why.
    Reclaim(String, &'static str),
    Sample,
    /// The controllers asked to be polled.
    Wake,
    /// Kerf crashes and starts again.
    Restart,
    /// A capacity reservation turns `expiring` or ends.
    Reservations,
}

/// One simulation: the loop that wires its parts. The simulated API server ([`ApiServer`])
/// stores every object; the cloud's instances, the workload controllers and kube-scheduler's
/// stand-in ([`binder::Binder`]) act on it; Kerf's controllers ([`Controllers`]) see it
/// through watch events and act through [`Action`]s; the checkers read the API server and
/// the cloud; [`tally::Tally`] adds up the report.
pub struct World {
    scenario: Scenario,
    /// Kerf's controllers and the cluster state they see (the simulated API server's objects).
    core: Controllers,
    /// Every object the cluster stores.
    api: ApiServer,
    /// The cloud's instances and offerings.
    cloud: cloud::Cloud,
    /// The workload controllers (ReplicaSets, StatefulSets, Jobs).
    workloads: workloads::Workloads,
    /// kube-scheduler's stand-in.
    binder: binder::Binder,
    /// kube-controller-manager's disruption controller (PodDisruptionBudgets' status).
    disruption: pdb_status::DisruptionController,
    /// The checkers (`--check`) and what they remember between steps; they see the world
    /// only through [`Sight`].
    checkers: Checkers,
    /// What the report adds up as the run goes.
    tally: tally::Tally,
    /// When the run starts on the simulated clock: zero, or for a run from a standing
    /// cluster the age of its oldest NodeClaim (the controllers' clock cannot go back past
    /// its epoch, and that NodeClaim was created at it). Reports count from here.
    origin: Duration,
    /// For a run from a standing cluster, the images each EC2NodeClass's AMI selector
    /// terms resolved to there (the terms as JSON, and the class's `status.amis`).
    images: BTreeMap<String, (Value, Vec<kerf_api::ec2nodeclass::AmiStatus>)>,
    now: Duration,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<(Duration, u64, Ev)>>,
    seq: u64,
    /// Wake-ups already queued for the controllers.
    wakes: BTreeSet<Duration>,
    /// Kerf's writes that failed for a passing reason (`spec.apiServer`), to be tried again
    /// as the operator does; lost when Kerf restarts.
    unfinished: Unfinished,
    log: Log,
    options: RunOptions,
}

/// Kerf's memory as the checkers' named hooks read it.
impl KerfMemory for Controllers {
    fn nominated(&self, pod: &str) -> Option<&str> {
        (self.cluster().pods().get(pod)).and_then(|r| r.nominated.as_deref())
    }

    fn command_in_flight(&self) -> bool {
        Controllers::command_in_flight(self)
    }

    fn fresh_decision(&mut self, now: Duration) -> Option<String> {
        Controllers::fresh_decision(self, now)
    }

    fn unavailable_at(&self, now: Duration) -> Vec<String> {
        Controllers::unavailable_at(self, now)
    }
}

/// Whether an action is a write through the API server (which `spec.apiServer` can fail),
/// rather than a log line, an Event, a cloud call or a note for the checkers.
fn through_api_server(action: &Action) -> bool {
    !matches!(
        action,
        Action::Log(_)
            | Action::Event(_)
            | Action::Launch { .. }
            | Action::ListInstances
            | Action::ListInstanceTypes { .. }
            | Action::DeleteInstance { .. }
            | Action::Reboot { .. }
            | Action::Disrupting { .. }
    )
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The node settings the EC2NodeClass `class` stored now asks for (defaults when it is
/// not stored).
fn node_settings<'a>(api: &'a ApiServer, class: &str) -> NodeSettings<'a> {
    (api.objects.node_classes.get(class))
        .map(|c| NodeSettings::from_node_class(&c.spec))
        .unwrap_or_default()
}

fn name_of(metadata: &ObjectMeta) -> String {
    metadata.name.clone().unwrap_or_default()
}

fn workload_key(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

/// A pod's `controller.kubernetes.io/pod-deletion-cost` as the ReplicaSet controller reads
/// it when scaling in: 0 when absent or not a 32-bit integer.
fn deletion_cost(pod: &Pod) -> i32 {
    (pod.metadata.annotations.as_ref())
        .and_then(|a| a.get(kerf_core::disruption::rules::POD_DELETION_COST_ANNOTATION))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The workload key a pod's controller reference names.
fn owner_workload(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .as_deref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.name.as_str())
}

fn owned_by(kind: &str, name: &str) -> Option<Vec<OwnerReference>> {
    Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: String::new(),
        controller: Some(true),
        block_owner_deletion: None,
    }])
}

impl World {
    /// Builds the world at t=0 from a scenario.
    pub fn new(scenario: Scenario, options: RunOptions) -> Result<World, SimError> {
        let region = scenario.spec.region.clone();
        let all_zones = kerf_aws::catalog::zones(&region).map_err(|e| ScenarioError {
            path: "spec.region".into(),
            message: e.to_string(),
        })?;
        let zones: Vec<String> = if scenario.spec.zones.is_empty() {
            all_zones.iter().take(3).cloned().collect()
        } else {
            for (i, z) in scenario.spec.zones.iter().enumerate() {
                if !all_zones.contains(z) {
                    return Err(ScenarioError {
                        path: format!("spec.zones[{i}]"),
                        message: format!("{z} is not a zone of {region}"),
                    }
                    .into());
                }
            }
            scenario.spec.zones.clone()
        };
        let settings = Settings {
            epoch_unix: EPOCH_UNIX,
            registration_ttl: REGISTRATION_TTL,
            spot_to_spot: scenario.spec.feature_gates.spot_to_spot_consolidation,
            node_repair: scenario.spec.feature_gates.node_repair,
            static_capacity: scenario.spec.feature_gates.static_capacity,
            capacity_buffer: scenario.spec.feature_gates.capacity_buffer,
            node_overlay: scenario.spec.feature_gates.node_overlay,
            pod_deletion_cost: scenario.spec.feature_gates.pod_deletion_cost_management,
            terminate_first_drift: scenario.spec.feature_gates.terminate_first_drift,
            terminate_first_repair: scenario.spec.feature_gates.terminate_first_repair,
            node_class_status: true,
            preference_policy: scenario.spec.preference_policy,
            min_values_policy: scenario.spec.min_values_policy,
            min_savings: kerf_core::disruption::search::MinSavings {
                per_hour: scenario.spec.consolidation_min_savings_per_hour,
                percent: scenario.spec.consolidation_min_savings_percent,
            },
            ..Settings::default()
        };
        let mut w = World {
            // the controllers draw NodeClaim names from their own stream, the cloud from the world's
            core: Controllers::new(settings, scenario.spec.seed ^ 0x6b65_7266),
            rng: ChaCha8Rng::seed_from_u64(scenario.spec.seed),
            api: ApiServer::default(),
            cloud: cloud::Cloud::new(zones),
            workloads: workloads::Workloads::default(),
            disruption: pdb_status::DisruptionController::default(),
            binder: binder::Binder::default(),
            checkers: Checkers::default(),
            tally: tally::Tally::default(),
            now: Duration::ZERO,
            queue: BinaryHeap::new(),
            seq: 0,
            unfinished: Unfinished::default(),
            wakes: BTreeSet::new(),
            log: Log::default(),
            options,
            scenario,
            origin: Duration::ZERO,
            images: BTreeMap::new(),
        };
        let manifests = w.scenario.spec.manifests.clone();
        for (i, m) in manifests.iter().enumerate() {
            w.apply(m, &format!("spec.manifests[{i}]"))?;
        }
        // every later apply must be valid too: check them now, before time starts
        for (i, e) in w.scenario.spec.events.iter().enumerate() {
            if let Some(doc) = &e.apply {
                precheck(doc, &format!("spec.events[{i}].apply"))?;
            }
        }
        let events: Vec<Duration> = w.scenario.spec.events.iter().map(|e| e.at.0).collect();
        for (i, at) in events.into_iter().enumerate() {
            w.push(at, Ev::Scenario(i));
        }
        let interruptions: Vec<Duration> = w
            .scenario
            .spec
            .cloud
            .spot_interruptions
            .iter()
            .map(|s| s.at.0)
            .collect();
        for (i, at) in interruptions.into_iter().enumerate() {
            w.push(at, Ev::Interrupt(i));
        }
        let notices: Vec<Duration> = w
            .scenario
            .spec
            .cloud
            .notices
            .iter()
            .map(|n| n.at.0)
            .collect();
        for (i, at) in notices.into_iter().enumerate() {
            w.push(at, Ev::Notice(i));
        }
        for at in w.scenario.spec.operator_restarts.clone() {
            w.push(at.0, Ev::Restart);
        }
        let reservation_times: Vec<Duration> = (w.scenario.spec.cloud.reservations.iter())
            .filter_map(|r| r.end.map(|e| e.0))
            .flat_map(|end| {
                [
                    end.saturating_sub(kerf_aws::reservations::CAPACITY_BLOCK_EXPIRY),
                    end,
                ]
            })
            .collect();
        for at in reservation_times {
            w.push(at, Ev::Reservations);
        }
        // the cluster moves again when the API server is back; pods that waited through an
        // outage are excused until then and the writes' backoff after it
        let outages: Vec<(Duration, Duration)> = (w.scenario.spec.api_server.outages.iter())
            .map(|o| (o.from.0, o.until.0))
            .collect();
        for (from, until) in outages {
            if w.wakes.insert(until) {
                w.push(until, Ev::Wake);
            }
            (w.checkers).fault(faults::InjectedFault::everyone(
                from,
                until + retry_wait(u32::MAX),
            ));
        }
        w.push(Duration::ZERO, Ev::Sample);
        Ok(w)
    }

    fn push(&mut self, at: Duration, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, ev)));
    }

    fn duration(&self) -> Duration {
        self.origin + self.scenario.spec.duration.0
    }

    /// Simulated time since the run's start, in seconds, as reports count it.
    fn since_start(&self, t: Duration) -> f64 {
        t.saturating_sub(self.origin).as_secs_f64()
    }

    fn sample_every(&self) -> Duration {
        (self.scenario.spec.duration.0 / 720).max(Duration::from_secs(60))
    }

    /// Runs to the end and reports.
    pub fn run(
        mut self,
        progress: &mut dyn FnMut(Duration, usize, usize),
    ) -> Result<Report, SimError> {
        self.settle()?;
        // counting the pending pods walks every pod: once per sample interval, not per step
        let mut reported = None;
        while self.step()? {
            if reported.is_none_or(|at| self.now >= at + self.sample_every()) {
                reported = Some(self.now);
                progress(self.now, self.api.nodes.len(), self.pending_count());
            }
        }
        self.accrue(self.duration());
        self.now = self.duration();
        if self.options.check {
            self.with_checkers(|c, s| c.check_end(s))?;
        }
        Ok(self.report())
    }

    /// Runs up to `at` (every event due by then handled, the controllers polled at `at`)
    /// and answers `question` about that moment, from the controllers and the Events the
    /// API server keeps: how `--explain-at` asks.
    pub fn explain_at<T>(
        mut self,
        at: Duration,
        question: impl FnOnce(&mut Controllers, &Events, Duration) -> T,
    ) -> Result<T, SimError> {
        self.settle()?;
        let at = (self.origin + at).min(self.duration());
        if self.wakes.insert(at) {
            self.push(at, Ev::Wake);
        }
        while self.queue.peek().is_some_and(|Reverse((t, _, _))| *t <= at) {
            self.step()?;
        }
        Ok(question(&mut self.core, &self.api.events, self.now))
    }

    /// Handles the next event and lets the cluster settle; false once no event is left
    /// within the scenario's duration.
    fn step(&mut self) -> Result<bool, SimError> {
        let Some(Reverse((at, _, ev))) = self.queue.pop() else {
            return Ok(false);
        };
        if at > self.duration() {
            return Ok(false);
        }
        self.accrue(at);
        self.now = at;
        self.handle(ev)?;
        self.settle()?;
        Ok(true)
    }
    fn pending_count(&self) -> usize {
        self.binder.pending_count()
    }

    /// Keeps which pods each workload owns and the binder's waiting pods
    /// ([`binder::Binder::track`]) true to the pod `k` as stored now (or gone).
    fn track_pod(&mut self, k: &str) {
        let owner = (self.api.pods.get(k)).and_then(|p| owner_workload(&p.pod));
        self.workloads.track(k, owner);
        self.binder.track(k, self.api.pods.get(k));
    }

    /// Adds cost and node-seconds up to `t`.
    fn accrue(&mut self, t: Duration) {
        let dt = t.saturating_sub(self.tally.last_accrual).as_secs_f64();
        if dt > 0.0 {
            // the bound's rate as last sampled: its time integral is the run's floor
            self.tally.totals.lower_bound_cost += self.tally.floor.0 * dt / 3600.0;
            for (_, i) in self.cloud.instances.values() {
                self.tally.totals.cost += i.price_per_hour * dt / 3600.0;
                self.tally.node_seconds += dt;
                if i.capacity_type == labels::CAPACITY_TYPE_SPOT {
                    self.tally.spot_node_seconds += dt;
                }
            }
        }
        self.tally.last_accrual = t;
    }

    /// The end of the API-server outage under way, if one is.
    fn api_down(&self) -> Option<Duration> {
        self.scenario.spec.api_server.down_at(self.now)
    }

    /// Lets the checkers look at the world as it is now: they see it only through
    /// [`Sight`], and Kerf only through its named hooks.
    fn with_checkers<T>(&mut self, check: impl FnOnce(&mut Checkers, &mut Sight<'_>) -> T) -> T {
        let mut sight = Sight {
            api: &self.api,
            cloud: &self.cloud,
            scenario: &self.scenario,
            workloads: &self.workloads,
            now: self.now,
            writes_pending: self.unfinished.next().is_some(),
            kerf: &mut self.core,
        };
        check(&mut self.checkers, &mut sight)
    }

    /// The run broke a rule it holds itself to, now.
    fn violation(&self, message: String) -> SimError {
        checkers::violation(self.now, message)
    }

    fn handle(&mut self, ev: Ev) -> Result<(), SimError> {
        // while the API server is down nothing in the cluster changes: a kubelet cannot
        // register its node or report it Ready, kubectl cannot write, a reclaimed
        // instance's node stays; it all happens when the API server is back
        if let Some(end) = self.api_down()
            && matches!(
                ev,
                Ev::Scenario(_) | Ev::Registered(_) | Ev::Ready(_) | Ev::Reclaim(..)
            )
        {
            self.push(end, ev);
            return Ok(());
        }
        if matches!(
            ev,
            Ev::Scenario(_) | Ev::Interrupt(_) | Ev::Notice(_) | Ev::Reclaim(..) | Ev::Restart
        ) {
            self.checkers.disturbed(self.now);
        }
        match ev {
            Ev::Scenario(i) => self.scenario_event(i)?,
            Ev::Registered(provider_id) => self.register(&provider_id),
            Ev::Ready(node) => self.node_ready(&node),
            Ev::Interrupt(i) => self.interrupt(i),
            Ev::Notice(i) => self.notice(i),
            Ev::Reclaim(provider_id, why) => self.reclaim(&provider_id, why),
            Ev::Wake => {
                self.wakes.remove(&self.now);
            }
            Ev::Restart => self.restart_controllers(),
            Ev::Reservations => {
                self.end_reservations();
                self.sync_reservations();
            }
            Ev::Sample => {
                if self.tally.floor.1 && !self.options.skip_floor {
                    // reserved offerings' room changes with every launch: not kept then
                    let reserved = (self.api.objects.node_classes.values()).any(|k| {
                        (k.status.as_ref()).is_some_and(|s| !s.capacity_reservations.is_empty())
                    });
                    let key = self.workload_fingerprint();
                    let rate = match self.tally.floors.get(&key) {
                        Some(rate) if !reserved => *rate,
                        _ => {
                            let rate = self.floor_rate();
                            self.tally.floors.insert(key, rate);
                            rate
                        }
                    };
                    self.tally.floor = (rate, false);
                }
                self.sample();
                let next = self.now + self.sample_every();
                self.push(next.min(self.duration()), Ev::Sample);
                if self.now >= self.duration() {
                    self.queue.clear();
                }
            }
        }
        Ok(())
    }

    /// Lets the workload controllers, the binder and Kerf's controllers run until nothing
    /// more happens at this instant, then queues the controllers' next wake-up.
    fn settle(&mut self) -> Result<(), SimError> {
        // the workload controllers and kube-scheduler write through the API server too
        let down = self.api_down().is_some();
        for _ in 0..SETTLE_ROUNDS {
            if !down {
                if std::mem::take(&mut self.workloads.dirty) {
                    self.reconcile_workloads();
                }
                self.update_pdb_status();
                if std::mem::take(&mut self.binder.dirty) {
                    self.bind_pending();
                }
            }
            // writes that failed, due again, before what the controllers say now
            let mut actions = self.unfinished.due(self.now);
            actions.extend(self.core.poll(self.now).into_iter().map(|a| (0, a)));
            if actions.is_empty() && (down || !self.binder.dirty) {
                let due = [self.core.next_wakeup(), self.unfinished.next()];
                for t in due.into_iter().flatten() {
                    if t <= self.duration() && self.wakes.insert(t) {
                        self.push(t, Ev::Wake);
                    }
                }
                if self.options.check {
                    self.with_checkers(|c, s| {
                        c.check_step(s)?;
                        c.check_reservations(s)?;
                        c.check_waits_now(s)?;
                        c.check_convergence(s)
                    })?;
                }
                return Ok(());
            }
            for (tries, a) in actions {
                self.execute(a, tries)?;
            }
        }
        Err(self.violation(format!(
            "the controllers did not settle within {SETTLE_ROUNDS} rounds"
        )))
    }

    /// Carries out one action that has failed `tries` times before, as the operator does:
    /// a write through the API server may fail (`spec.apiServer`: an outage, a conflict) or
    /// be stored with its answer lost; either way Kerf cannot tell, and keeps it to try
    /// again. An eviction that may not have happened is asked again by the drain instead.
    fn execute(&mut self, action: Action, tries: u32) -> Result<(), SimError> {
        if self.options.plant == Some(Plant::MissingTaint) && matches!(action, Action::Taint { .. })
        {
            return Ok(());
        }
        self.unfinished.superseded_by(&action);
        if let Action::CreateNodeClaim(object) = &action {
            let name = object.metadata.name.clone().unwrap_or_default();
            self.api.creates_asked.entry(name).or_insert(self.now);
        }
        if self.unfinished.held_behind_create(&action) {
            return Ok(());
        }
        if !through_api_server(&action) {
            return self.carry_out(action);
        }
        let api = &self.scenario.spec.api_server;
        // down, or a conflict: not stored; a lost answer: stored, and Kerf cannot tell
        let down = api.down_at(self.now).is_some();
        let conflict = api.conflicts > 0.0 && self.rng.random_bool(api.conflicts);
        let refused = down || conflict;
        let lost = !refused && api.lost_responses > 0.0 && self.rng.random_bool(api.lost_responses);
        // a disruption command's mark is the operator's write that is not kept to be tried
        // later: within its call it reads again and writes after a conflict, and tries
        // again after a lost answer (finding its taint stored), so only an API server down
        // refuses it
        let mark_only_down = matches!(action, Action::Taint { by: Some(_), .. });
        let (refused, lost) = if mark_only_down {
            (down, false)
        } else {
            (refused, lost)
        };
        let (stored, answered) = (!refused, !refused && !lost);
        let again = (!answered && replayable(&action)).then(|| action.clone());
        let evicted = match &action {
            Action::Evict { pod } => Some(pod.clone()),
            _ => None,
        };
        let mark = match &action {
            Action::Taint {
                node, by: Some(by), ..
            } => Some((node.clone(), *by)),
            _ => None,
        };
        if stored {
            self.carry_out(action)?;
        }
        if !answered {
            self.tally.totals.api_writes_failed += 1;
        }
        if let Some(pod) = evicted {
            // an answer lost on the way back reads as a refusal: the drain asks again
            let answer = if answered {
                Observation::Evicted(pod)
            } else {
                let code = refused.then_some(500);
                Observation::EvictionRefused { pod, code }
            };
            self.core.observe(answer, self.now);
        }
        // a mark is written at once or given up, its command with it
        if let Some((node, by)) = mark
            && !answered
        {
            // a mark never stored takes back the removal its command announced
            if refused {
                self.not_removing(&node);
            }
            self.core
                .observe(Observation::MarkRefused { node, by }, self.now);
        }
        if let Some(action) = again
            && !self.unfinished.keep(action, tries + 1, self.now)
        {
            return Err(self.violation(format!(
                "a write was still failing after {} tries",
                tries + 1
            )));
        }
        Ok(())
    }

    /// Carries out one action stored or taken, with the checkers shown it as the API
    /// server's admission and the cloud's events show it: before it is carried out, and
    /// after a launch was tried.
    fn carry_out(&mut self, action: Action) -> Result<(), SimError> {
        if self.options.check
            && let Some(write) = admission(&action)
        {
            self.with_checkers(|c, s| c.admit(s, write))?;
        }
        let launched = match &action {
            Action::Launch { nodeclaim, .. } if self.options.check => Some(nodeclaim.clone()),
            _ => None,
        };
        self.apply_action(action)?;
        if let Some(claim) = launched {
            self.with_checkers(|c, s| c.cloud_event(s, CloudEvent::Launched(&claim)))?;
        }
        Ok(())
    }

    /// Carries out one action as the API server, kube-controller-manager and the cloud would.
    /// Writes are idempotent, as the API server's are: a create of an object that exists
    /// and a delete of one that is gone change nothing.
    fn apply_action(&mut self, action: Action) -> Result<(), SimError> {
        match action {
            Action::Log(r) => {
                // the deletions no disruption command decides, named as their log says
                let cause = match r.message {
                    "deleting expired nodeclaim" => Some("Expired"),
                    "initiating delete from interruption message" => Some("Interrupted"),
                    _ => None,
                };
                let claim = r.fields.pointer("/NodeClaim/name").and_then(Value::as_str);
                if let (Some(cause), Some(claim)) = (cause, claim) {
                    self.removing(claim, cause);
                }
                self.log.record(self.now, &r);
            }
            Action::Event(event) => self.api.events.record(&event, self.now),
            Action::CreateNodeClaim(object) => {
                let name = object.metadata.name.clone().unwrap_or_default();
                let asked = self.api.creates_asked.remove(&name).unwrap_or(self.now);
                let stored = StoredNodeClaim {
                    object: *object,
                    created: self.now,
                    age: Duration::ZERO,
                    deleting: None,
                    node_registered: false,
                    asked,
                };
                self.api.nodeclaims.entry(name).or_insert(stored);
            }
            Action::PatchNodeClaimStatus {
                nodeclaim,
                status,
                labels,
            } => {
                if let Some(stored) = self.api.nodeclaims.get_mut(&nodeclaim) {
                    let mut status = *status;
                    let previous = stored.object.status.take().unwrap_or_default();
                    let created = kerf_core::clock::kubernetes_time(stored.born());
                    status.conditions = nodeclaim_conditions(
                        std::mem::take(&mut status.conditions),
                        &previous.conditions,
                        self.now + Duration::from_secs(EPOCH_UNIX),
                        stored.object.metadata.generation,
                        Some(&created),
                    );
                    stored.object.status = Some(status);
                    (stored.object.metadata.labels.get_or_insert_default()).extend(labels);
                }
            }
            Action::AnnotateNodeClaim {
                nodeclaim,
                annotations,
            } => {
                if let Some(stored) = self.api.nodeclaims.get_mut(&nodeclaim) {
                    let stored = stored.object.metadata.annotations.get_or_insert_default();
                    for (k, v) in annotations {
                        match v {
                            Some(v) => stored.insert(k, v),
                            None => stored.remove(&k),
                        };
                    }
                }
            }
            // the simulated cloud replaces nodes; it has no reboot (its nodes raise no
            // condition a reboot would clear)
            Action::Reboot { nodeclaim, .. } => {
                let refusal = kerf_core::controllers::reboot::RebootRefusal::NotImplemented;
                let result = Err(refusal);
                let answer = Observation::RebootAnswered { nodeclaim, result };
                self.core.observe(answer, self.now);
            }
            Action::RelabelNode { node, labels } => {
                if self.api.nodes.relabel(&node, &labels) {
                    if let Some(n) = self.api.nodes.get(&node) {
                        self.checkers.node_relabelled(&node, n, self.now);
                    }
                    self.node_narrowed(&node);
                }
            }
            Action::RelabelNodeClaim { nodeclaim, labels } => {
                if let Some(stored) = self.api.nodeclaims.get_mut(&nodeclaim) {
                    let stored = stored.object.metadata.labels.get_or_insert_default();
                    for (k, v) in labels {
                        match v {
                            Some(v) => stored.insert(k, v),
                            None => stored.remove(&k),
                        };
                    }
                }
            }
            Action::DeleteNodeClaim { nodeclaim } => {
                if let Some(stored) = self.api.nodeclaims.get_mut(&nodeclaim)
                    && stored.deleting.is_none()
                {
                    stored.deleting = Some(self.now);
                    // the NodeClaim watch delivers the deletion: what tells Kerf the API
                    // server holds it (its limits count the NodeClaim until then)
                    let object = Object::nodeclaim(stored.listed());
                    self.core.observe(Observation::Applied(object), self.now);
                    self.removing(&nodeclaim, "Deleted");
                    // a deletion Kerf made on its own (expiry, a static NodePool scaled
                    // down, garbage collection) frees its NodePool's limits and budget:
                    // Karpenter takes them up at its next disruption pass and after the
                    // validation wait, so the checks give Kerf that long as after any change
                    // (swarm seed 326309)
                    self.checkers.disturbed(self.now);
                }
            }
            Action::Taint { node, taint, .. } => {
                // a taint only keeps pods off its node, and spread domains ignore taints
                if self.api.nodes.taint(&node, &taint) {
                    self.node_narrowed(&node);
                }
            }
            Action::RemoveTaint { node, key } => {
                let widens = self.api.nodes.get(&node).is_some_and(|n| n.ready);
                if self.api.nodes.remove_taint(&node, &key) {
                    if key == labels::DISRUPTED_TAINT_KEY {
                        self.checkers.rolled_back(&node, self.now);
                        self.not_removing(&node);
                    }
                    if widens {
                        self.node_written(&node);
                    } else {
                        self.node_narrowed(&node);
                    }
                }
            }
            Action::LabelNode {
                node,
                labels,
                annotations,
                ..
            } => {
                let widens = self.labels_widen(&node, &labels);
                if self.api.nodes.label(&node, &labels, &annotations) {
                    if widens {
                        self.node_written(&node);
                    } else {
                        self.node_narrowed(&node);
                    }
                }
            }
            Action::Launch { nodeclaim, request } => {
                self.launch(&nodeclaim, &request);
                self.sync_reservations();
            }
            Action::Disrupting { nodes, reason } => {
                for node in &nodes {
                    let claim = (self.api.nodes.get(node))
                        .and_then(|n| self.cloud.instances.get(&n.provider_id))
                        .map(|(claim, _)| claim.clone());
                    if let Some(claim) = claim {
                        self.removing(&claim, reason.as_str());
                    }
                }
            }
            Action::Evict { pod } => self.evicted(&pod),
            Action::DeletePod { pod, .. } => self.evicted(&pod),
            Action::AnnotatePodDeletionCost { pod, cost } => {
                let key = kerf_core::disruption::rules::POD_DELETION_COST_ANNOTATION;
                if let Some(p) = self.api.pods.get_mut(&pod) {
                    let annotations = p
                        .pod
                        .metadata
                        .annotations
                        .get_or_insert_with(Default::default);
                    match cost {
                        Some(c) => annotations.insert(key.to_string(), c.to_string()),
                        None => annotations.remove(key),
                    };
                    self.observe_pod(&pod);
                }
            }
            Action::DeleteInstance { provider_id, .. } => {
                if let Some((claim, _)) = self.cloud.instances.remove(&provider_id) {
                    let now = self.since_start(self.now);
                    for r in self
                        .tally
                        .removals
                        .iter_mut()
                        .filter(|r| r.nodeclaim == claim)
                    {
                        r.terminated.get_or_insert(now);
                    }
                    self.tally.totals.nodes_terminated += 1;
                    self.sync_reservations();
                }
            }
            Action::DeleteNode { node } => self.delete_node(&node),
            // the cloud lists its instances, each with the NodeClaim it was launched for
            // the simulated cloud reads the class as the API server holds it
            Action::ListInstanceTypes { node_class, spec } => {
                self.offer_instance_types(node_class, spec)
            }
            Action::ListInstances => {
                let listed: Vec<CloudInstance> = (self.cloud.instances.values())
                    .map(|(claim, i)| CloudInstance {
                        provider_id: i.provider_id.clone(),
                        nodeclaim: claim.clone(),
                        image_id: None,
                        network: None,
                        reservation: Some(i.reservation.clone()),
                    })
                    .collect();
                self.core.observe(Observation::Instances(listed), self.now);
            }
            Action::ResolveNodeClass { node_class, .. } => {
                let status = Ok(self.resolve_node_class(&node_class));
                let resolved = Observation::NodeClassResolved { node_class, status };
                self.core.observe(resolved, self.now);
            }
            Action::PatchNodeClassStatus { node_class, status } => {
                if let Some(class) = self.api.objects.node_classes.get(&node_class) {
                    let mut class = class.clone();
                    class.status = Some(*status);
                    self.write(Object::node_class(class));
                    self.sync_reservations();
                }
            }
            Action::AddNodeClassFinalizer { node_class, .. } => {
                if let Some(class) = self.api.objects.node_classes.get(&node_class) {
                    let mut class = class.clone();
                    let finalizers = class.metadata.finalizers.get_or_insert_default();
                    if !finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
                        finalizers.push(TERMINATION_FINALIZER.to_string());
                        self.write_status(Object::node_class(class));
                    }
                }
            }
            // scenarios delete no class: none is ever held by its finalizer
            Action::FinalizeNodeClass { .. } => {}
            Action::PatchNodePoolStatus { node_pool, status } => {
                if let Some(np) = self.api.objects.node_pools.get(&node_pool) {
                    let mut np = np.clone();
                    np.status = Some(*status);
                    self.write_status(Object::node_pool(np));
                }
            }
            Action::PatchNodeOverlayStatus {
                node_overlay,
                status,
            } => {
                if let Some(o) = self.api.objects.node_overlays.get(&node_overlay) {
                    let mut o = o.clone();
                    o.status = Some(*status);
                    self.write_status(Object::node_overlay(o));
                }
            }
            // kept on the stored buffer, as a restarted Kerf lists it
            Action::PatchCapacityBufferStatus { buffer, status } => {
                if let Some(b) = self.api.objects.buffers.get_mut(&buffer) {
                    b.status = Some(*status);
                }
            }
            Action::ReleaseNodeClaim { nodeclaim } => {
                self.checkers.room_freed(self.now);
                self.api.nodeclaims.remove(&nodeclaim);
                self.remove("NodeClaim", format!("/{nodeclaim}"));
                self.binder_changed();
            }
        }
        Ok(())
    }

    /// Kerf crashes and starts again: new controllers, which learn the cluster only from its
    /// objects (NodePools, EC2NodeClasses, DaemonSets, PDBs, NodeClaims with their labels,
    /// annotations and status, Nodes, Pods), as an operator's informers would after a restart.
    /// Nominations, unavailable offerings, a disruption command in flight and every timer
    /// are lost with the old process.
    fn restart_controllers(&mut self) {
        self.tally.totals.operator_restarts += 1;
        self.relist();
    }

    /// New controllers over what the API server holds, as an operator's first list gives
    /// it them.
    fn relist(&mut self) {
        self.unfinished = Unfinished::default();
        let settings = self.core.settings().clone();
        let seed = self.rng.random::<u64>();
        self.core = Controllers::new(settings, seed);
        let now = self.now;
        // a relist, in the order the operator's watches settle: the kinds users apply (the
        // cloud is asked for each class's types again), NodeClaims, volumes, then pods
        for object in self.api.objects.list() {
            self.core.observe(Observation::Applied(object), now);
        }
        for stored in self.api.nodeclaims.values() {
            let object = Object::nodeclaim(stored.listed());
            self.core.observe(Observation::Applied(object), now);
        }
        for object in self.api.storage.list() {
            self.core
                .observe(Observation::Applied(Object::Volume(object)), now);
        }
        // a pod's wait counts from its creation (or its PodScheduled condition), which the
        // object carries; the nodes come after their pods so their requests add up
        for p in self.api.pods.values() {
            let pod = Object::Pod(p.pod.clone());
            self.core
                .observe(Observation::Applied(pod), p.pending_since);
        }
        let names: Vec<String> = self
            .api
            .nodes
            .iter()
            .map(|(name, _)| name.clone())
            .collect();
        for name in names {
            self.observe_node(&name);
        }
        self.binder_changed();
    }

    fn sample(&mut self) {
        let spot = (self.cloud.instances.values())
            .filter(|(_, i)| i.capacity_type == labels::CAPACITY_TYPE_SPOT)
            .count();
        let mut by_pool: BTreeMap<(String, String), (usize, f64)> = BTreeMap::new();
        for (claim, i) in self.cloud.instances.values() {
            let pool = (self.api.nodeclaims.get(claim))
                .and_then(|o| o.pool())
                .unwrap_or_default()
                .to_string();
            let entry = by_pool.entry((pool, i.capacity_type.clone())).or_default();
            entry.0 += 1;
            entry.1 += i.price_per_hour;
        }
        self.tally.timeline.push(Sample {
            t: self.since_start(self.now),
            nodes: self.cloud.instances.len(),
            spot_nodes: spot,
            pending_pods: self.pending_count(),
            cost_per_hour: (self.cloud.instances.values())
                .map(|(_, i)| i.price_per_hour)
                .sum::<f64>()
                + 0.0,
            by_pool: by_pool
                .into_iter()
                .map(|((nodepool, capacity_type), (nodes, cost))| PoolSample {
                    nodepool,
                    capacity_type,
                    nodes,
                    cost_per_hour: cost + 0.0,
                })
                .collect(),
        });
    }

    // ---- objects -------------------------------------------------------------------------

    fn apply(&mut self, doc: &Value, path: &str) -> Result<(), SimError> {
        self.checkers.objects_changed();
        let raw = RawDocument {
            line: 0,
            value: doc.clone(),
        };
        match check_document(&raw) {
            Checked::Valid(KarpenterObject::NodePool(np)) => {
                let old = self.api.objects.node_pools.get(&name_of(&np.metadata));
                let np = api_server::applied(*np, old);
                self.write(Object::node_pool(np));
                self.tally.floor.1 = true;
                self.checkers.pools_changed(self.now);
                self.binder_changed();
            }
            Checked::Valid(KarpenterObject::EC2NodeClass(class)) => {
                let name = name_of(&class.metadata);
                self.cloud.catalogs.remove(&name);
                let class = api_server::applied(*class, self.api.objects.node_classes.get(&name));
                self.write(Object::node_class(class));
                self.sync_reservations();
                self.tally.floor.1 = true;
                self.checkers.pools_changed(self.now);
            }
            Checked::Valid(KarpenterObject::NodeOverlay(overlay)) => {
                let old = self
                    .api
                    .objects
                    .node_overlays
                    .get(&name_of(&overlay.metadata));
                let overlay = api_server::applied(*overlay, old);
                self.write(Object::node_overlay(overlay));
                self.tally.floor.1 = true;
                self.checkers.pools_changed(self.now);
            }
            Checked::Valid(KarpenterObject::NodeClaim(_)) => {
                return Err(ScenarioError {
                    path: path.into(),
                    message: "NodeClaims are made by Kerf, not by scenarios".into(),
                }
                .into());
            }
            Checked::Invalid(problems) => return Err(every_problem(path, &problems).into()),
            Checked::Other if matches!(raw.kind(), "CapacityBuffer" | "PodTemplate") => {
                self.apply_buffer_object(doc, path)?;
            }
            Checked::Other => {
                let kind = raw.kind().to_string();
                let obj = read(&raw).map_err(|e| ScenarioError {
                    path: format!("{path}.{}", e.path),
                    message: e.message,
                })?;
                let ns = doc
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default")
                    .to_string();
                let name = raw.name().to_string();
                match obj {
                    Some(ClusterObject::Pods(pods)) if kind == "Pod" => {
                        for p in pods {
                            self.add_pod(p);
                        }
                    }
                    Some(ClusterObject::Pods(pods)) => {
                        let replicas = i64::try_from(pods.len()).unwrap_or(0);
                        let template = one_template(doc);
                        let wk = workload_key(&kind, &ns, &name);
                        let next = self.workloads.specs.get(&wk).map_or(0, |w| w.next);
                        self.workload_shape(&kind, &ns, &name, doc);
                        let names = PodNames::new(&kind, &name, &template, self.scenario.spec.seed);
                        self.workloads.dirty = true;
                        self.disruption.stale = true;
                        self.workloads.specs.insert(
                            wk,
                            Workload {
                                kind: kind.clone(),
                                template,
                                claims: claim_templates(&raw),
                                replicas,
                                next,
                                names,
                            },
                        );
                    }
                    Some(ClusterObject::DaemonSet(pod)) => {
                        let key = key(&ns, &name);
                        self.write(Object::DaemonSet { key, template: pod });
                    }
                    Some(ClusterObject::Pdb(pdb)) => {
                        self.write(Object::Pdb(pdb));
                    }
                    Some(ClusterObject::Volume(v)) => {
                        self.api.storage.store(&v);
                        self.storage_changed(vec![v]);
                    }
                    Some(ClusterObject::Node(_)) => {
                        return Err(ScenarioError {
                            path: path.into(),
                            message:
                                "Nodes come from the simulated cloud; declare NodePools instead"
                                    .into(),
                        }
                        .into());
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }

    fn scenario_event(&mut self, i: usize) -> Result<(), SimError> {
        let e = self.scenario.spec.events[i].clone();
        let path = format!("spec.events[{i}]");
        if let Some(s) = &e.scale {
            let wk = workload_key(&s.kind, &s.namespace, &s.name);
            self.workloads.dirty = true;
            // a workload's scale counts in its budgets' expected pods
            self.disruption.stale = true;
            self.workload_scaled(&s.kind, &s.namespace, &s.name, s.replicas);
            match self.workloads.specs.get_mut(&wk) {
                Some(w) => w.replicas = s.replicas,
                None => {
                    return Err(ScenarioError {
                        path: format!("{path}.scale"),
                        message: format!(
                            "no {} {}/{} exists at {}",
                            s.kind,
                            s.namespace,
                            s.name,
                            crate::clock::short(self.now)
                        ),
                    }
                    .into());
                }
            }
        }
        if let Some(doc) = &e.apply {
            self.apply(doc, &format!("{path}.apply"))?;
        }
        if let Some(c) = &e.node_condition {
            self.set_node_condition(c);
        }
        if let Some(d) = &e.delete {
            self.checkers.objects_changed();
            match d.kind.as_str() {
                "NodePool" => {
                    self.remove("NodePool", format!("/{}", d.name));
                    self.tally.floor.1 = true;
                }
                "DaemonSet" => {
                    self.remove("DaemonSet", key(&d.namespace, &d.name));
                }
                "Pod" => self.delete_pod(&key(&d.namespace, &d.name)),
                kind @ ("CapacityBuffer" | "PodTemplate") => {
                    self.remove(kind, key(&d.namespace, &d.name));
                }
                kind => {
                    self.workload_deleted(kind, &d.namespace, &d.name);
                    let wk = workload_key(kind, &d.namespace, &d.name);
                    if self.workloads.specs.remove(&wk).is_none() {
                        return Err(ScenarioError {
                            path: format!("{path}.delete"),
                            message: format!("no {kind} {}/{} exists", d.namespace, d.name),
                        }
                        .into());
                    }
                    let owned = self.workloads.pods_of(&wk);
                    for p in owned {
                        self.delete_pod(&p);
                    }
                }
            }
        }
        Ok(())
    }

    fn add_pod(&mut self, pod: Pod) -> String {
        let k = pod_key(&pod);
        self.tally.floor.1 = true;
        let pod = api_server::StoredPod::created(pod, self.now);
        self.counted_by_budgets(&pod.pod);
        self.binder.uses(&pod, true);
        if let Some(old) = self.api.pods.insert(k.clone(), pod) {
            self.binder.uses(&old, false);
        }
        self.track_pod(&k);
        self.observe_pod(&k);
        // a pending pod changes nothing the binder read; a pod bound as it is made does
        if self.api.pods.get(&k).is_some_and(|p| p.node.is_some()) {
            self.binder.changed();
        }
        self.binder.dirty = true;
        k
    }

    /// A pod is deleted (scale-down, eviction, its node gone): its controller, if any,
    /// makes a new one.
    fn delete_pod(&mut self, k: &str) {
        let Some(old) = self.api.pods.remove(k) else {
            return;
        };
        self.binder.uses(&old, false);
        self.counted_by_budgets(&old.pod);
        self.track_pod(k);
        self.tally.floor.1 = true;
        self.remove("Pod", k.to_string());
        self.binder_changed();
        self.workloads.dirty = true;
    }

    /// A pod evicted (or deleted at the end of the grace period) by Kerf.
    fn evicted(&mut self, k: &str) {
        // the report counts the pods users run; daemonset pods go with every node
        if (self.api.pods.get(k)).is_some_and(|p| p.owner != PodOwner::DaemonSet) {
            self.tally.totals.pods_evicted += 1;
        }
        self.delete_pod(k);
    }
    fn bind(&mut self, k: &str, node: &str) {
        let Some(p) = self.api.pods.get(k) else {
            return;
        };
        let waited = self.now.saturating_sub(p.pending_since).as_secs_f64();
        if p.owner != PodOwner::DaemonSet {
            if waited > self.tally.totals.max_pod_pending_seconds {
                self.tally.totals.max_pod_pending_seconds = waited;
                self.tally.slowest_pod = Some(k.to_string());
            }
            let since = p.pending_since;
            self.record_wait(k, since);
        } // kube-scheduler's binding and condition update, as the API server stores them
        if let Some(p) = self.api.pods.get_mut(k) {
            self.binder.uses(p, false);
            p.bind(node, self.now);
            self.binder.uses(p, true);
        }
        // a node that never reports Ready may have sent this pod here, into another's room
        if let (Some(p), Some(n)) = (self.api.pods.get(k), self.api.nodes.get(node))
            && p.owner != PodOwner::DaemonSet
        {
            let now = self.now;
            self.checkers.bound(p, node, n, now);
        }
        self.track_pod(k);
        self.observe_pod(k);
        // the CSI provisioner makes the volumes that waited for this pod, in its zone
        let zone = (self.api.nodes.get(node))
            .and_then(|n| n.labels.get(labels::ZONE))
            .cloned();
        let pod = self.api.pods.get(k).map(|p| p.declared());
        if let (Some(zone), Some(pod)) = (zone, pod) {
            let pod = pod.clone();
            let changed = self.api.storage.pod_bound(&pod, &zone);
            self.storage_changed(changed);
        }
    }

    /// Claims, volumes or CSINodes changed in the simulated API server: Kerf's watches see
    /// them.
    fn storage_changed(&mut self, changed: Vec<VolumeObject>) {
        if changed.is_empty() {
            return;
        }
        let now = self.now;
        for object in changed {
            self.core
                .observe(Observation::Applied(Object::Volume(object)), now);
        }
        self.binder.storage_changed();
    }

    /// Keeps a wait that ends now if it is among the longest.
    fn record_wait(&mut self, pod: &str, since: Duration) {
        let wait = Wait {
            pod: pod.to_string(),
            since: self.since_start(since),
            until: self.since_start(self.now),
        };
        self.tally.wait(wait);
    }

    /// Kerf decided to take the NodeClaim away (a command's `reason`, or its deletion):
    /// recorded once, at the first.
    fn removing(&mut self, claim: &str, reason: &str) {
        if self.tally.removals.iter().any(|r| r.nodeclaim == claim) {
            return;
        }
        let instance = (self.cloud.instances.values()).find(|(c, _)| c == claim);
        let instance_type = instance
            .map(|(_, i)| i.instance_type.clone())
            .unwrap_or_default();
        let node = (self.api.nodes.iter())
            .find(|(_, n)| instance.is_some_and(|(_, i)| i.provider_id == n.provider_id))
            .map(|(name, _)| name.clone());
        let nodepool = (self.api.nodeclaims.get(claim))
            .and_then(StoredNodeClaim::pool)
            .unwrap_or_default()
            .to_string();
        self.tally.removals.push(Removal {
            nodeclaim: claim.to_string(),
            node,
            nodepool,
            instance_type,
            reason: reason.to_string(),
            decided: self.since_start(self.now),
            terminated: None,
        });
    }

    /// A disruption command on the node was rolled back (its taint removed) before its
    /// NodeClaim was deleted: it is not being taken away after all.
    fn not_removing(&mut self, node: &str) {
        let deleting =
            |claim: &str| (self.api.nodeclaims.get(claim)).is_some_and(|c| c.deleting.is_some());
        let keep: Vec<bool> = (self.tally.removals.iter())
            .map(|r| {
                r.node.as_deref() != Some(node) || r.terminated.is_some() || deleting(&r.nodeclaim)
            })
            .collect();
        let mut keep = keep.into_iter();
        self.tally.removals.retain(|_| keep.next().unwrap_or(true));
    }

    /// The Node is deleted: pod garbage collection deletes the pods bound to it (controllers
    /// make new ones); bare pods are left waiting for a node.
    fn delete_node(&mut self, node: &str) {
        let cloud = &self.scenario.spec.cloud;
        let launch = cloud.launch_delay.0
            + cloud.launch_jitter.0
            + cloud.ready_delay.0
            + cloud.ready_jitter.0;
        (self.checkers).node_deleted(node, self.now + PASS_INTERVAL + launch);
        let on_node = self.pods_where(|p| p.node.as_deref() == Some(node));
        for k in on_node {
            let owner = self.api.pods[&k].owner;
            if owner != PodOwner::DaemonSet {
                self.tally.totals.pods_evicted += 1;
            }
            if owner != PodOwner::None {
                self.delete_pod(&k);
            } else if let Some(p) = self.api.pods.get_mut(&k) {
                self.binder.uses(p, false);
                p.unbind(self.now);
                self.track_pod(&k);
                self.observe_pod(&k);
            }
        }
        self.api.nodes.delete(node);
        self.remove("Node", format!("/{node}"));
        if self.api.csi_limits.remove(node).is_some() {
            self.api.storage.csi_nodes.remove(node);
            self.remove("CSINode", format!("/{node}"));
        }
        self.binder_changed();
    }

    // ---- the simulated control plane ------------------------------------------------------

    /// The ReplicaSet/StatefulSet/Job controllers ([`workloads::Workloads::reconcile`]): the
    /// pods they make or delete to match replicas, stored.
    fn reconcile_workloads(&mut self) {
        for wk in self.workloads.off() {
            for change in self.workloads.reconcile(&wk, &self.api.pods) {
                match change {
                    workloads::Change::Create { pod, claims } => {
                        for claim in claims {
                            let zones = self.cloud.zones.clone();
                            let rng = &mut self.rng;
                            let changed = (self.api.storage)
                                .create_claim(claim, &zones, |n| rng.random_range(0..n));
                            self.storage_changed(changed);
                        }
                        self.add_pod(*pod);
                    }
                    workloads::Change::Delete(k) => self.delete_pod(&k),
                }
            }
        }
    }

    /// Plays kube-scheduler ([`binder::Binder::pass`]) over the pending pods and stores what
    /// it decided: the pods it placed bound, the rest marked `Unschedulable`.
    fn bind_pending(&mut self) {
        let honoured = !self.scenario.spec.kube_scheduler.ignore_nominations;
        let nominations = binder::Nominations::new(self.core.cluster(), honoured);
        let pass = self.binder.pass(&self.api, &nominations);
        for (k, n) in pass.placed {
            self.bind(&k, &n);
        }
        self.mark_unschedulable(&pass.unmarked);
    }

    /// kube-scheduler found these pods no node: it says so in their status, unless Kerf
    /// nominated them to a NodeClaim.
    fn mark_unschedulable(&mut self, keys: &[String]) {
        for k in keys {
            let Some(p) = self.api.pods.get_mut(k).filter(|p| p.node.is_none()) else {
                continue;
            };
            let nominations = binder::Nominations::new(self.core.cluster(), true);
            if nominations.claim(k).is_none() {
                set_pod_scheduled(&mut p.pod, "False", Some("Unschedulable"));
                // a pod Kerf may not provision for (nominated, finished, a mirror) stays
                if is_provisionable(&p.pod) {
                    self.binder.marked(k);
                }
                self.observe_pod(k);
            }
        }
    }

    fn catalog(&mut self, class: &str) -> Arc<Vec<kerf_aws::InstanceType<'static>>> {
        if let Some(c) = self.cloud.catalogs.get(class) {
            return c.clone();
        }
        let types = Arc::new(
            self.cloud
                .types_for(&self.scenario.spec.region, &node_settings(&self.api, class)),
        );
        self.cloud.catalogs.insert(class.to_string(), types.clone());
        types
    }

    /// What no cluster running the workload pods now can cost less than per hour: the
    /// linear-programming bound of packing them all anew onto the NodePools' instance types
    /// ([`kerf_scheduling::cost_bound`]), daemonset overhead and limits included.
    /// The workload pods as a multiset: the sum of their classes' hashes (equal for the
    /// same pods in any order, whatever their names) and their count.
    fn workload_fingerprint(&self) -> (u64, usize) {
        (self.api.pods.values())
            .filter(|p| p.owner != PodOwner::DaemonSet)
            .fold((0u64, 0), |(sum, n), p| {
                (sum.wrapping_add(p.facts.class_hash()), n + 1)
            })
    }

    fn floor_rate(&mut self) -> f64 {
        let pools: Vec<NodePool> = self.api.objects.node_pools.values().cloned().collect();
        let inputs: Vec<kerf_scheduling::NodePoolInput> = (pools.iter())
            .map(|np| {
                let types = self.offered_catalog(&np.spec.template.spec.node_class_ref.name);
                let types = scheduler_options(&types, |_, _, _| false).into();
                node_pool_input(np, types, Resources::default(), 0)
            })
            .collect();
        let pods: Vec<&Pod> = (self.api.pods.values())
            .filter(|p| p.owner != PodOwner::DaemonSet)
            .map(|p| &*p.pod)
            .collect();
        let daemonsets: Vec<Pod> = self.api.objects.daemonsets.values().cloned().collect();
        let problem = kerf_scheduling::Problem {
            daemonsets: &daemonsets,
            ..kerf_scheduling::Problem::new(&inputs, &pods)
        };
        kerf_scheduling::cost_bound(&problem, &mut kerf_scheduling::Catalog::default())
            .map_or(0.0, |b| b.per_hour)
    }

    /// Tells the controllers what a node class can launch (the cloud provider's instance
    /// types, every offering available: the controllers track capacity errors).
    fn offer_instance_types(
        &mut self,
        node_class: String,
        spec: Option<Box<kerf_api::EC2NodeClass>>,
    ) {
        let types = self.offered_catalog(&node_class);
        let types = scheduler_options(&types, |_, _, _| false).into();
        let answer = Observation::InstanceTypes {
            node_class,
            spec,
            types,
        };
        let now = self.now;
        self.core.observe(answer, now);
    }

    /// Writes an object to the simulated API server; Kerf's watch sees it.
    fn write(&mut self, object: Object) {
        if matches!(
            object,
            Object::NodePool(_)
                | Object::NodeClass(_)
                | Object::NodeOverlay(_)
                | Object::DaemonSet { .. }
        ) {
            self.tally.floors.clear();
        }
        if matches!(object, Object::Pdb(_)) {
            self.disruption.stale = true;
        }
        let object = self.api.objects.store(object);
        let now = self.now;
        self.core.observe(Observation::Applied(object), now);
    }

    /// Stores what the controllers wrote to an object's status or metadata, which changes
    /// nothing Kerf plans with (no spec); Kerf's watch sees it.
    fn write_status(&mut self, object: Object) {
        let object = self.api.objects.store(object);
        let now = self.now;
        self.core.observe(Observation::Applied(object), now);
    }

    /// Deletes an object (`kind`, `namespace/name` or `/name`) from the simulated API server;
    /// Kerf's watch sees it go.
    fn remove(&mut self, kind: &str, key: String) {
        if matches!(
            kind,
            "NodePool" | "EC2NodeClass" | "NodeOverlay" | "DaemonSet"
        ) {
            self.tally.floors.clear();
        }
        self.api.objects.delete(kind, &key);
        let kind = kind.to_string();
        let now = self.now;
        self.core.observe(Observation::Deleted { kind, key }, now);
    }

    /// The class's catalog with its status's reservations as offerings, each with its room.
    fn offered_catalog(&mut self, class: &str) -> Arc<Vec<kerf_aws::InstanceType<'static>>> {
        let types = self.catalog(class);
        let reservations = (self.api.objects.node_classes.get(class))
            .and_then(|k| k.status.as_ref())
            .map(|s| s.capacity_reservations.clone())
            .unwrap_or_default();
        if reservations.is_empty() {
            return types;
        }
        let mut types = (*types).clone();
        kerf_aws::reservations::add_reserved_offerings(&mut types, &reservations, |id| {
            self.reservation_room(id)
        });
        Arc::new(types)
    }

    /// The stored NodeClaims whose instance runs a registered Node, oldest first, filtered
    /// as a notice says: read off the API server and the cloud, as AWS picks instances.
    fn notice_targets(
        &self,
        only: impl Fn(&Instance) -> bool,
        nodepool: Option<&String>,
        instance_type: Option<&String>,
        count: u32,
    ) -> Vec<(String, String, String, String)> {
        let nodes: BTreeMap<&str, &String> = (self.api.nodes.iter())
            .map(|(name, n)| (n.provider_id.as_str(), name))
            .collect();
        let mut candidates: Vec<(Duration, String, String, String, String)> = (self.api)
            .nodeclaims
            .iter()
            .filter_map(|(name, c)| {
                let status = c.object.status.as_ref()?;
                let provider_id = status.provider_id.as_deref()?;
                let (_, inst) = self.cloud.instances.get(provider_id)?;
                let node = nodes.get(provider_id)?;
                let ok = only(inst)
                    && !inst.interrupted
                    && nodepool.is_none_or(|p| Some(p.as_str()) == c.pool())
                    && instance_type.is_none_or(|t| *t == inst.instance_type);
                ok.then(|| {
                    (
                        c.born(),
                        name.clone(),
                        (*node).clone(),
                        inst.provider_id.clone(),
                        inst.zone.clone(),
                    )
                })
            })
            .collect();
        candidates.sort();
        candidates
            .into_iter()
            .take(count as usize)
            .map(|(_, claim, node, provider_id, zone)| (claim, node, provider_id, zone))
            .collect()
    }

    fn interrupt(&mut self, i: usize) {
        let spec = self.scenario.spec.cloud.spot_interruptions[i].clone();
        let targets = self.notice_targets(
            |inst| inst.capacity_type == labels::CAPACITY_TYPE_SPOT,
            spec.nodepool.as_ref(),
            spec.instance_type.as_ref(),
            spec.count,
        );
        for (_, node, provider_id, zone) in targets {
            let Some((_, inst)) = self.cloud.instances.get_mut(&provider_id) else {
                continue;
            };
            inst.interrupted = true;
            let id = inst.id.clone();
            self.log.info(self.now, "cloud", "spot interruption warning", json!({
                "Node": {"name": node}, "instance-id": id, "reclaim-at": crate::clock::rfc3339(self.now + INTERRUPTION_NOTICE),
            }));
            self.push(
                self.now + INTERRUPTION_NOTICE,
                Ev::Reclaim(provider_id, "spot instance reclaimed"),
            );
            self.deliver(None, &id, &zone);
        }
    }

    /// Scheduled maintenance, stop and terminate notices, rebalance recommendations.
    fn notice(&mut self, i: usize) {
        let spec = self.scenario.spec.cloud.notices[i].clone();
        let interruptible: Vec<String> = (self.scenario.spec.cloud.reservations.iter())
            .filter(|r| r.interruptible)
            .map(|r| r.id.clone())
            .collect();
        let reclaim = spec.kind == NoticeKind::CapacityReservationInterruption;
        let targets = self.notice_targets(
            |inst| {
                !reclaim || (inst.reservation.as_ref()).is_some_and(|r| interruptible.contains(r))
            },
            spec.nodepool.as_ref(),
            spec.instance_type.as_ref(),
            spec.count,
        );
        for (_, _, provider_id, zone) in targets {
            let Some((_, inst)) = self.cloud.instances.get_mut(&provider_id) else {
                continue;
            };
            let id = inst.id.clone();
            let gone = match spec.kind {
                NoticeKind::Stopping => Some((STOP_DELAY, "instance stopped")),
                NoticeKind::Terminated => Some((Duration::ZERO, "instance terminated")),
                NoticeKind::CapacityReservationInterruption => {
                    // the owner takes the capacity back for good
                    let id = inst.reservation.clone();
                    let r = (self.scenario.spec.cloud.reservations.iter_mut())
                        .find(|r| Some(&r.id) == id.as_ref());
                    if let Some(r) = r {
                        r.count = r.count.saturating_sub(1);
                    }
                    Some((INTERRUPTION_NOTICE, "capacity reservation reclaimed"))
                }
                NoticeKind::ScheduledChange | NoticeKind::Rebalance => None,
            };
            if let Some((after, why)) = gone {
                inst.interrupted = true;
                self.push(self.now + after, Ev::Reclaim(provider_id, why));
            }
            self.deliver(Some(spec.kind), &id, &zone);
        }
    }

    /// Puts a notice's EventBridge message through the interruption controller's parser, as
    /// the queue would deliver it.
    fn deliver(&mut self, kind: Option<NoticeKind>, instance_id: &str, zone: &str) {
        let body = crate::cloud::notice_message(
            kind,
            instance_id,
            zone,
            &self.scenario.spec.region,
            &crate::clock::rfc3339(self.now),
        );
        match interruption::parse(&body) {
            Ok(message) => {
                for notice in message.notices() {
                    self.core.observe(Observation::Notice(notice), self.now);
                }
            }
            Err(e) => self.log.error(
                self.now,
                "interruption",
                "failed parsing interruption message",
                json!({"error": e.to_string()}),
            ),
        }
    }

    /// The cloud takes an instance away; Kerf's garbage collection notices.
    fn reclaim(&mut self, provider_id: &str, why: &'static str) {
        if self.cloud.instances.remove(provider_id).is_none() {
            return;
        }
        self.tally.totals.nodes_terminated += 1;
        let node = (self.api.nodes.iter())
            .find(|(_, n)| n.provider_id == provider_id)
            .map(|(name, _)| name.clone());
        self.log
            .info(self.now, "cloud", why, json!({"Node": {"name": node}}));
        let gone = Observation::InstanceGone(provider_id.to_string());
        self.core.observe(gone, self.now);
        self.sync_reservations();
    }

    /// Asks the simulated EC2 for a NodeClaim's instance and reports the answer.
    fn launch(&mut self, name: &str, request: &LaunchRequest) {
        let claim = &request.claim;
        let catalog = self.offered_catalog(&claim.node_class);
        let windows = &self.scenario.spec.cloud.insufficient_capacity;
        let now = self.now;
        let attempt = cloud::launch(
            claim,
            &catalog,
            &self.cloud.zones,
            |ct, it, z| request.available(ct, it, z),
            |ct, it, z| windows.iter().any(|w| w.covers(ct, it, z, now)),
            &mut self.rng,
        );
        let Some(instance) = attempt.instance else {
            let insufficient: Vec<InsufficientOffering> = attempt
                .insufficient
                .into_iter()
                .map(
                    |(capacity_type, instance_type, zone)| InsufficientOffering {
                        capacity_type,
                        instance_type,
                        zone,
                    },
                )
                .collect();
            let nodeclaim = name.to_string();
            let answer = Observation::LaunchFailed {
                nodeclaim,
                insufficient,
            };
            self.core.observe(answer, self.now);
            return;
        };
        self.tally.totals.nodes_launched += 1;
        let launched = launched_as(&instance, &self.scenario.spec.region);
        let cloud = &self.scenario.spec.cloud;
        let delay = cloud.launch_delay.0 + jitter(&mut self.rng, cloud.launch_jitter.0);
        // no draw without faults: scenarios without them keep their exact runs
        let p = cloud.faults.never_register;
        if p > 0.0 && self.rng.random_bool(p) {
            // the instance runs but its kubelet never registers: pods waiting on it may wait
            // out the registration TTL and a second launch
            let ends = self.now + REGISTRATION_TTL + cloud.launch_delay.0 + cloud.ready_delay.0;
            let until = ends + cloud.launch_jitter.0 + cloud.ready_jitter.0;
            (self.checkers).fault(faults::InjectedFault::everyone(self.now, until));
            self.tally.totals.faults_injected += 1;
        } else {
            self.push(
                self.now + delay,
                Ev::Registered(instance.provider_id.clone()),
            );
        }
        self.cloud
            .instances
            .insert(instance.provider_id.clone(), (name.to_string(), instance));
        let nodeclaim = name.to_string();
        let launched = Box::new(launched);
        let answer = Observation::Launched {
            nodeclaim,
            launched,
        };
        self.core.observe(answer, self.now);
    }

    /// The instance's kubelet registers its Node: the stored NodeClaim's taints and startup
    /// taints on it (as its user data sets them), and the daemonset pods that fit start at
    /// once.
    fn register(&mut self, provider_id: &str) {
        let Some((claim_name, instance)) = self.cloud.instances.get(provider_id) else {
            return;
        };
        let (claim_name, instance) = (claim_name.clone(), instance.clone());
        let launched = launched_as(&instance, &self.scenario.spec.region);
        let Some(claim) = self.api.nodeclaims.get(&claim_name) else {
            return;
        };
        let Some(pool) = (claim.pool())
            .and_then(|p| self.api.objects.node_pools.get(p))
            .cloned()
        else {
            return;
        };
        let spec = &claim.object.spec;
        // as Karpenter's user data registers it: the NodeClaim's taints, its startup taints
        // and the registration taint
        let spec_taints = spec.taints.clone();
        let mut taints: Vec<_> = spec
            .taints
            .iter()
            .chain(&spec.startup_taints)
            .cloned()
            .collect();
        taints.push(kerf_core::cluster::unregistered_taint());
        if let Some(c) = self.api.nodeclaims.get_mut(&claim_name) {
            c.node_registered = true;
        }
        self.cloud.node_counter += 1;
        let n = self.cloud.node_counter;
        let name = format!(
            "ip-10-{}-{}-{}.{}.compute.internal",
            n / 65536 % 256,
            n / 256 % 256,
            n % 256,
            region_domain(&self.scenario.spec.region)
        );
        let labels = node_labels(&launched, &pool, &name);
        // the EBS CSI driver's node plugin publishes the node's attachment limit
        let class = pool.spec.template.spec.node_class_ref.name.clone();
        let limit = self
            .catalog(&class)
            .iter()
            .find(|t| t.name() == launched.instance_type)
            .map(|t| t.ebs_attachments);
        if let Some(limit) = limit {
            self.api.csi_limits.insert(name.clone(), limit);
            let csi: CSINode = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"drivers": [{"name": labels::EBS_CSI_DRIVER, "nodeID": launched.provider_id,
                    "allocatable": {"count": limit}}]},
            }))
            .expect("a well-formed CSINode");
            let csi = VolumeObject::CsiNode(Box::new(csi));
            self.api.storage.store(&csi);
            self.storage_changed(vec![csi]);
        }
        let stored = api_server::StoredNode::registered(
            provider_id,
            labels.clone(),
            taints.clone(),
            launched.allocatable.clone(),
            launched.capacity.clone(),
            self.now,
        );
        self.api.nodes.create(&name, stored);
        self.observe_node(&name);
        // daemonset pods start on the node as soon as it registers
        let daemonsets: Vec<(String, Pod)> = (self.api.objects.daemonsets.iter())
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        for (ds, template) in daemonsets {
            if daemon_runs_on(&template, &labels, &taints) {
                let mut pod = template.clone();
                let ds_name = ds.rsplit('/').next().unwrap_or("");
                pod.metadata.name = Some(format!("{ds_name}-{n}"));
                pod.metadata.owner_references = owned_by("DaemonSet", &ds);
                let k = self.add_pod(pod);
                self.bind(&k, &name);
            }
        }
        let cloud = &self.scenario.spec.cloud;
        // no draw without faults: scenarios without them keep their exact runs
        let p = cloud.faults.never_ready;
        if p > 0.0 && self.rng.random_bool(p) {
            // the kubelet registered but never reports Ready: pods nominated to the node wait
            // for it, and others lose the room launched for them to those pods (kube-scheduler
            // binds whatever fits first; swarm seed 65410), until the node is gone and a
            // second launch comes up. Node repair may remove it after its toleration, unless
            // too much of its NodePool is unhealthy; without node repair it stays, as with
            // Karpenter. The fault lasts until the node is deleted, and excuses only the pods
            // it could take and those whose room they took (`faults`).
            if let Some(node) = self.api.nodes.get(&name) {
                let fault = faults::InjectedFault::never_ready(
                    self.now,
                    self.duration(),
                    node,
                    spec_taints,
                );
                self.checkers.never_ready(&name, fault);
            }
            self.tally.totals.faults_injected += 1;
            return;
        }
        let ready = cloud.ready_delay.0 + jitter(&mut self.rng, cloud.ready_jitter.0);
        self.push(self.now + ready, Ev::Ready(name));
    }

    /// The kubelet reports Ready and the node's agents remove its startup taints.
    fn node_ready(&mut self, node: &str) {
        // the startup taints are its stored NodeClaim's, which its user data registered it with
        let claim = (self.api.nodes.get(node))
            .and_then(|n| self.cloud.instances.get(&n.provider_id))
            .and_then(|(claim, _)| self.api.nodeclaims.get(claim));
        let startup: Vec<String> = (claim.iter())
            .flat_map(|c| &c.object.spec.startup_taints)
            .map(|t| t.key.clone())
            .collect();
        let now = self.now;
        let written = self.api.nodes.update(node, |n| {
            n.ready = true;
            n.ready_changed = now;
            n.taints.retain(|t| !startup.contains(&t.key));
            true
        });
        if written {
            self.node_written(node);
        }
    }

    /// A scenario's node fault: the condition set (or changed) on the first nodes by name,
    /// of its NodePool when it names one. A `Ready` condition is the kubelet's own.
    fn set_node_condition(&mut self, c: &crate::scenario::NodeConditionFault) {
        let names: Vec<String> = (self.api.nodes.iter())
            .filter(|(_, n)| {
                c.node_pool
                    .as_ref()
                    .is_none_or(|p| n.labels.get(labels::NODEPOOL) == Some(p))
            })
            .map(|(name, _)| name.clone())
            .take(c.nodes as usize)
            .collect();
        let now = self.now;
        for name in names {
            let written = self.api.nodes.update(&name, |n| {
                if c.kind == "Ready" {
                    let ready = c.status == "True";
                    if n.ready != ready {
                        n.ready_changed = now;
                    }
                    n.ready = ready;
                    return true;
                }
                n.conditions
                    .retain(|(kind, status, _, _)| kind != &c.kind || status == &c.status);
                match n.conditions.iter_mut().find(|(kind, ..)| kind == &c.kind) {
                    Some(existing) => existing.2.clone_from(&c.reason),
                    None => {
                        n.conditions
                            .push((c.kind.clone(), c.status.clone(), c.reason.clone(), now))
                    }
                }
                true
            });
            if written {
                self.tally.totals.faults_injected += 1;
                self.node_written(&name);
            }
        }
    }

    /// Something the binder reads other than a new pending pod changed: it looks again,
    /// over every pending pod.
    fn binder_changed(&mut self) {
        self.binder.changed();
    }

    /// A Node changed in the API server: Kerf's watch delivers it, and the binder looks again.
    fn node_written(&mut self, node: &str) {
        self.observe_node(node);
        self.binder_changed();
    }

    /// A Node changed in a way that fits no pod anywhere that did not fit before (a taint
    /// added; a node not Ready losing a taint or gaining labels): Kerf's watch delivers
    /// it, and the binder's last failures still hold.
    fn node_narrowed(&mut self, node: &str) {
        self.observe_node(node);
        self.binder.dirty = true;
    }

    /// Whether writing `labels` onto `node` could fit a pod the binder last placed nowhere.
    /// The binder places pods on Ready nodes only. A node not Ready that gains labels can
    /// add spread domains, which never raises the fewest pods any domain holds, and can
    /// count the pods bound to it in domains: that matters when one of them counts toward
    /// a pending pod's spread or required affinity ([`kube_scheduler::counts_for`]). A
    /// changed value can empty a domain, so it always counts.
    fn labels_widen(&self, node: &str, labels: &BTreeMap<String, String>) -> bool {
        let Some(n) = self.api.nodes.get(node) else {
            return false;
        };
        if n.ready || !self.binder.failed_last() {
            return true;
        }
        if (labels.iter()).any(|(k, v)| n.labels.get(k).is_some_and(|old| old != v)) {
            return true;
        }
        let on_node: Vec<&Pod> = (self.api.pods.values())
            .filter(|p| p.node.as_deref() == Some(node))
            .map(|p| p.declared())
            .collect();
        !on_node.is_empty()
            && (self.api.pods.values())
                .filter(|p| p.node.is_none())
                .any(|p| (on_node.iter()).any(|o| kube_scheduler::counts_for(p.declared(), o)))
    }

    /// Kerf's watch delivers a Pod as the API server stores it.
    fn observe_pod(&mut self, key: &str) {
        if let Some(p) = self.api.pods.get(key) {
            let object = Object::Pod(p.pod.clone());
            let now = self.now;
            self.core.observe(Observation::Applied(object), now);
        }
    }

    /// The stored pods `keep` selects, by key.
    fn pods_where(&self, keep: impl Fn(&api_server::StoredPod) -> bool) -> Vec<String> {
        (self.api.pods.iter())
            .filter(|(_, p)| keep(p))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Kerf's watch delivers a Node as the API server stores it.
    fn observe_node(&mut self, node: &str) {
        if let Some(n) = self.api.nodes.get(node) {
            let object = Object::Node(Box::new(n.object(node)));
            let now = self.now;
            self.core.observe(Observation::Applied(object), now);
        }
    }

    // ---- report --------------------------------------------------------------------------

    fn report(mut self) -> Report {
        // pods still pending count their wait until the end
        let waiting: Vec<(String, Duration)> = (self.api.pods.iter())
            .filter(|(_, p)| p.node.is_none() && p.owner != PodOwner::DaemonSet)
            .map(|(k, p)| (k.clone(), p.pending_since))
            .collect();
        for (k, since) in waiting {
            let waited = self.now.saturating_sub(since).as_secs_f64();
            if waited > self.tally.totals.max_pod_pending_seconds {
                self.tally.totals.max_pod_pending_seconds = waited;
                self.tally.slowest_pod = Some(k.clone());
            }
            self.record_wait(&k, since);
        }
        self.sample();
        self.tally.totals.spot_node_seconds_share = if self.tally.node_seconds > 0.0 {
            self.tally.spot_node_seconds / self.tally.node_seconds
        } else {
            0.0
        };
        self.tally.totals.slowest_pod = self.tally.slowest_pod.clone();
        // the cloud's instances, named as the API server has them: the NodeClaim's status
        // names its Node, else the Node its kubelet registered does
        let mut launched: Vec<&(String, Instance)> = self.cloud.instances.values().collect();
        launched.sort_by(|a, b| a.0.cmp(&b.0));
        let mut nodes = Vec::new();
        for (name, i) in launched {
            let stored = self.api.nodeclaims.get(name);
            let node = (stored.and_then(|c| c.object.status.as_ref()))
                .and_then(|s| s.node_name.clone())
                .or_else(|| {
                    (self.api.nodes.iter())
                        .find(|(_, n)| n.provider_id == i.provider_id)
                        .map(|(node, _)| node.clone())
                })
                .unwrap_or_else(|| name.clone());
            let mut pods: Vec<String> = self
                .pods_where(|p| p.node.as_deref() == Some(&node) && p.owner != PodOwner::DaemonSet);
            pods.sort();
            nodes.push(FinalNode {
                name: node,
                nodeclaim: name.clone(),
                nodepool: stored
                    .and_then(StoredNodeClaim::pool)
                    .unwrap_or_default()
                    .to_string(),
                instance_type: i.instance_type.clone(),
                // as its labels say it now (an ended reservation's instance runs on as
                // on-demand, relabelled so), else as launched
                capacity_type: (stored.and_then(|c| c.object.metadata.labels.as_ref()))
                    .and_then(|l| l.get(labels::CAPACITY_TYPE))
                    .unwrap_or(&i.capacity_type)
                    .clone(),
                zone: i.zone.clone(),
                price_per_hour: i.price_per_hour,
                pods,
            });
        }
        let pending = self.pods_where(|p| p.node.is_none() && p.owner != PodOwner::DaemonSet);
        let mut report = Report::new(
            &self.scenario,
            nodes,
            pending,
            std::mem::take(&mut self.tally.totals),
            std::mem::take(&mut self.tally.timeline),
            std::mem::take(&mut self.tally.longest_waits),
            self.log.take(),
        );
        report.removals = std::mem::take(&mut self.tally.removals);
        report.started_at = crate::clock::rfc3339(self.origin);
        report.metrics = self.core.render_metrics(self.now, &[]);
        report
    }
}

/// The pod template of a workload document, named after the workload (pods get `-<i>`).
/// A delay of up to `most` more, in whole milliseconds, drawn from the run's seed.
fn jitter(rng: &mut ChaCha8Rng, most: Duration) -> Duration {
    if most.is_zero() {
        return Duration::ZERO;
    }
    let ms = u64::try_from(most.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rng.random_range(0..=ms))
}

/// A node's allocatable as the kube-scheduler model counts it (thousandths by name).
pub(crate) fn allocatable_amounts(r: &Resources) -> kube_scheduler::Amounts {
    r.to_resource_list()
        .into_iter()
        .map(|(k, q)| (k, q.milli()))
        .collect()
}

fn one_template(doc: &Value) -> Pod {
    let mut single = doc.clone();
    let is_job = doc.get("kind").and_then(Value::as_str) == Some("Job");
    if let Some(spec) = single.get_mut("spec").and_then(Value::as_object_mut) {
        // one pod, by the field the kind has (workloads are read strictly)
        if is_job {
            spec.insert("parallelism".into(), 1.into());
            spec.remove("completions");
        } else {
            spec.insert("replicas".into(), 1.into());
        }
    }
    let raw = RawDocument {
        line: 0,
        value: single,
    };
    let mut pod = match read(&raw) {
        Ok(Some(ClusterObject::Pods(mut pods))) if !pods.is_empty() => pods.remove(0),
        _ => Pod::default(),
    };
    pod.metadata.name = Some(raw.name().to_string());
    pod
}

/// What the cloud says of a launched instance, as the launch answer carries it.
fn launched_as(instance: &Instance, region: &str) -> Launched {
    let mut labels = instance.labels.clone();
    labels.insert(labels::REGION.into(), region.to_string());
    Launched {
        provider_id: instance.provider_id.clone(),
        instance_type: instance.instance_type.clone(),
        zone: instance.zone.clone(),
        capacity_type: CapacityType::parse(&instance.capacity_type)
            .unwrap_or(CapacityType::OnDemand),
        price_per_hour: instance.price_per_hour,
        capacity: instance.capacity.clone(),
        allocatable: instance.allocatable.clone(),
        labels,
        image_id: None,
        network: None,
    }
}

/// Every problem of a manifest at `path`, as `kerf validate` lists them: the first as the
/// error's path and message, the others on lines of their own.
fn every_problem(path: &str, problems: &[kerf_api::validation::Problem]) -> ScenarioError {
    let mut message = problems
        .first()
        .map(|p| p.message.clone())
        .unwrap_or_default();
    for p in problems.iter().skip(1) {
        message.push_str(&format!("\n  {path}.{}: {}", p.path, p.message));
    }
    ScenarioError {
        path: format!("{path}.{}", problems.first().map_or("", |p| &p.path[..])),
        message,
    }
}

fn precheck(doc: &Value, path: &str) -> Result<(), SimError> {
    let raw = RawDocument {
        line: 0,
        value: doc.clone(),
    };
    match check_document(&raw) {
        Checked::Invalid(problems) => Err(every_problem(path, &problems).into()),
        Checked::Other => read(&raw).map(|_| ()).map_err(|e| {
            ScenarioError {
                path: format!("{path}.{}", e.path),
                message: e.message,
            }
            .into()
        }),
        Checked::Valid(_) => Ok(()),
    }
}

fn region_domain(region: &str) -> &str {
    if region == "us-east-1" { "ec2" } else { region }
}

/// What the checkers see of an action before it is carried out ([`Admission`]); none for
/// the others.
fn admission(action: &Action) -> Option<Admission<'_>> {
    match action {
        Action::CreateNodeClaim(object) => Some(Admission::CreateNodeClaim(object)),
        Action::Launch { nodeclaim, .. } => Some(Admission::Launch(nodeclaim)),
        Action::Evict { pod } => Some(Admission::Evict(pod)),
        Action::Disrupting { reason, nodes } => Some(Admission::Disrupting {
            reason: *reason,
            nodes,
        }),
        _ => None,
    }
}
