//! The simulated world: a Kubernetes cluster (workload controllers, daemonsets, a binder that
//! plays kube-scheduler) and an AWS cloud (launch delays, insufficient capacity, spot
//! interruptions), on a virtual clock of discrete events. Kerf's controllers
//! ([`kerf_core::controllers::Controllers`]) decide; this shell feeds them what happened and
//! carries out what they ask, as the operator does against a real cluster.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kerf_api::{NodePool, labels};
use kerf_aws::capacity::NodeSettings;
use kerf_aws::instance_type::scheduler_options;
use kerf_aws::interruption;
use kerf_core::cluster::{PodOwner, set_pod_scheduled};
use kerf_core::controllers::disruption::PASS_INTERVAL;
use kerf_core::controllers::lifecycle::{InsufficientOffering, retry_wait};
use kerf_core::controllers::node_classes::TERMINATION_FINALIZER;
use kerf_core::controllers::{Action, Controllers, LaunchRequest};
use kerf_core::nodepools::node_pool_input;
use kerf_core::observe::{Object, Observation};
use kerf_core::provisioning::rules::is_provisionable;
use kerf_core::unfinished::{Unfinished, replayable};
use kerf_core::workloads::{PodNames, VolumeObject};
use kerf_scheduling::pods::pod_key;
use kerf_scheduling::resources::Resources;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use crate::cloud;
use crate::kube_scheduler;
use crate::log::Log;
use crate::report::Report;
use crate::scenario::{NoticeKind, Scenario, ScenarioError};

mod agenda;
use agenda::{Agenda, Ev};
mod api_server;
use api_server::{ApiServer, StoredNodeClaim};
mod binder;
mod buffers;
mod checkers;
use checkers::{Admission, Checkers, CloudEvent, DisruptionHook, Sight};
mod events;
pub use events::{Events, KeptEvent};
mod faults;
mod kubelet;
mod manifests;
use manifests::Manifest;
mod reservations;
pub use checkers::INVARIANTS;
mod notices;
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

/// One simulation: the loop that wires its parts, in time order ([`Agenda`]). The API server
/// ([`ApiServer`]) stores every object; the cloud, its kubelets ([`kubelet`]), the workload
/// controllers and kube-scheduler's stand-in ([`binder::Binder`]) act on it; Kerf's
/// controllers ([`Controllers`]) see it through watch events and act through [`Action`]s;
/// the checkers read the API server and the cloud; [`tally::Tally`] makes the report.
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
    /// For a run from a standing cluster, the images each EC2NodeClass's AMI selector
    /// terms resolved to there (the terms as JSON, and the class's `status.amis`).
    images: BTreeMap<String, (Value, Vec<kerf_api::ec2nodeclass::AmiStatus>)>,
    now: Duration,
    rng: ChaCha8Rng,
    /// What is due next.
    agenda: Agenda,
    /// Kerf's writes that failed for a passing reason (`spec.apiServer`), to be tried again
    /// as the operator does; lost when Kerf restarts.
    unfinished: Unfinished,
    log: Log,
    options: RunOptions,
}

/// Kerf's disruption controller as the convergence check asks it.
impl DisruptionHook for Controllers {
    fn command_in_flight(&self) -> bool {
        Controllers::command_in_flight(self)
    }

    fn fresh_decision(&mut self, now: Duration) -> Option<String> {
        Controllers::fresh_decision(self, now)
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
        let zones = scenario.zones()?;
        let settings = scenario.settings();
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
            agenda: Agenda::default(),
            unfinished: Unfinished::default(),
            log: Log::default(),
            options,
            scenario,
            images: BTreeMap::new(),
        };
        let manifests = w.scenario.spec.manifests.clone();
        for (i, m) in manifests.iter().enumerate() {
            w.apply(m, &format!("spec.manifests[{i}]"))?;
        }
        // every later apply must be valid too: check them now, before time starts
        for (i, e) in w.scenario.spec.events.iter().enumerate() {
            if let Some(doc) = &e.apply {
                manifests::read(doc, &format!("spec.events[{i}].apply"))?;
            }
        }
        w.agenda = Agenda::of(&w.scenario);
        // pods that waited through an API-server outage are excused until it ends and the
        // writes' backoff after it
        for o in &w.scenario.spec.api_server.outages {
            let until = o.until.0 + retry_wait(u32::MAX);
            (w.checkers).fault(faults::InjectedFault::everyone(o.from.0, until));
        }
        Ok(w)
    }

    fn push(&mut self, at: Duration, ev: Ev) {
        self.agenda.push(at, ev);
    }

    fn duration(&self) -> Duration {
        self.tally.origin + self.scenario.spec.duration.0
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
        self.tally.accrue(self.duration(), &self.cloud);
        self.now = self.duration();
        if self.options.check {
            self.with_checkers(|c, s| c.check_end(s))?;
        }
        let metrics = self.core.render_metrics(self.now, &[]);
        let end = tally::End {
            api: &self.api,
            cloud: &self.cloud,
            pending: self.pending_count(),
            now: self.now,
        };
        Ok((self.tally).report(end, &self.scenario, &mut self.log, metrics))
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
        let at = (self.tally.origin + at).min(self.duration());
        self.agenda.wake_at(at);
        while self.agenda.due_by(at) {
            self.step()?;
        }
        Ok(question(&mut self.core, &self.api.events, self.now))
    }

    /// Handles the next event and lets the cluster settle; false once no event is left
    /// within the scenario's duration.
    fn step(&mut self) -> Result<bool, SimError> {
        let Some((at, ev)) = self.agenda.pop() else {
            return Ok(false);
        };
        if at > self.duration() {
            return Ok(false);
        }
        self.tally.accrue(at, &self.cloud);
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

    /// The end of the API-server outage under way, if one is.
    fn api_down(&self) -> Option<Duration> {
        self.scenario.spec.api_server.down_at(self.now)
    }

    /// Lets the checkers look at the world as it is now: they see it only through
    /// [`Sight`], and of Kerf only its nominations and the convergence check's hook.
    fn with_checkers<T>(&mut self, check: impl FnOnce(&mut Checkers, &mut Sight<'_>) -> T) -> T {
        // the waiting pods' (only a waiting pod's nomination is read)
        let pods = self.core.cluster().pods();
        let nominations: BTreeMap<String, String> = (self.binder.pending())
            .filter_map(|k| Some((k.clone(), pods.get(k)?.nominated.clone()?)))
            .collect();
        let mut sight = Sight {
            nominations: &nominations,
            api: &self.api,
            cloud: &self.cloud,
            scenario: &self.scenario,
            workloads: &self.workloads,
            now: self.now,
            writes_pending: self.unfinished.next().is_some(),
            disruption: &mut self.core,
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
            Ev::Interrupt(_) | Ev::Notice(_) => self.checkers.interrupted(self.now),
            Ev::Restart => self.checkers.restarted(),
            _ => {}
        }
        match ev {
            Ev::Scenario(i) => self.scenario_event(i)?,
            Ev::Registered(provider_id) => self.register(&provider_id),
            Ev::Ready(node) => self.node_ready(&node),
            Ev::Interrupt(i) => self.interrupt(i),
            Ev::Notice(i) => self.notice(i),
            Ev::Reclaim(provider_id, why) => self.reclaim(&provider_id, why),
            Ev::Wake => self.agenda.woke(self.now),
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
                    self.agenda.clear();
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
                    if t <= self.duration() {
                        self.agenda.wake_at(t);
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
                self.tally.not_removing(&node, &self.api);
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
            Action::CreateNodeClaim(object) => self.api.create_nodeclaim(*object, self.now),
            Action::PatchNodeClaimStatus {
                nodeclaim,
                status,
                labels,
            } => (self.api).patch_nodeclaim_status(&nodeclaim, *status, labels, self.now),
            Action::AnnotateNodeClaim {
                nodeclaim,
                annotations,
            } => self
                .api
                .patch_nodeclaim_metadata(&nodeclaim, annotations, true),
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
                self.api.patch_nodeclaim_metadata(&nodeclaim, labels, false);
            }
            Action::DeleteNodeClaim { nodeclaim } => {
                if let Some(object) = self.api.delete_nodeclaim(&nodeclaim, self.now) {
                    // the NodeClaim watch delivers the deletion: what tells Kerf the API
                    // server holds it (its limits count the NodeClaim until then)
                    let object = Object::nodeclaim(object);
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
                        self.tally.not_removing(&node, &self.api);
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
                let widens = self.binder.labels_widen(&self.api, &node, &labels);
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
                    self.tally.terminated(&claim, self.now);
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
                let listed = self.cloud.listing();
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
        for (object, at) in self.api.relist() {
            let at = at.unwrap_or(self.now);
            self.core.observe(Observation::Applied(object), at);
        }
        self.binder_changed();
    }

    fn sample(&mut self) {
        let pending = self.pending_count();
        (self.tally).sample(&self.api, &self.cloud, pending, self.now);
    }

    // ---- objects -------------------------------------------------------------------------

    /// Applies a scenario's manifest ([`manifests::read`]) as kubectl would: stored, and
    /// seen by Kerf's watches and the simulated controllers.
    fn apply(&mut self, doc: &Value, path: &str) -> Result<(), SimError> {
        self.checkers.objects_changed();
        match manifests::read(doc, path)? {
            Manifest::NodePool(np) => {
                let old = self.api.objects.node_pools.get(&name_of(&np.metadata));
                let np = api_server::applied(*np, old);
                self.write(Object::node_pool(np));
                self.tally.floor.1 = true;
                self.checkers.pools_changed(self.now);
                self.binder_changed();
            }
            Manifest::NodeClass(class) => {
                let name = name_of(&class.metadata);
                self.cloud.catalogs.remove(&name);
                let class = api_server::applied(*class, self.api.objects.node_classes.get(&name));
                self.write(Object::node_class(class));
                self.sync_reservations();
                self.tally.floor.1 = true;
                self.checkers.pools_changed(self.now);
            }
            Manifest::NodeOverlay(overlay) => {
                let old = (self.api.objects.node_overlays).get(&name_of(&overlay.metadata));
                let overlay = api_server::applied(*overlay, old);
                self.write(Object::node_overlay(overlay));
                self.tally.floor.1 = true;
                self.checkers.pools_changed(self.now);
            }
            Manifest::Buffer(buffer) => self.write(Object::capacity_buffer(*buffer)),
            Manifest::PodTemplate { key, template } => {
                self.write(Object::PodTemplate { key, template });
            }
            Manifest::Pods(pods) => {
                for p in pods {
                    self.add_pod(p);
                }
            }
            Manifest::Workload {
                kind,
                namespace,
                name,
                template,
                claims,
                replicas,
            } => {
                let wk = workload_key(&kind, &namespace, &name);
                let next = self.workloads.specs.get(&wk).map_or(0, |w| w.next);
                self.workload_shape(&kind, &namespace, &name, doc);
                let names = PodNames::new(&kind, &name, &template, self.scenario.spec.seed);
                self.workloads.dirty = true;
                self.disruption.stale = true;
                let workload = Workload {
                    kind,
                    template: *template,
                    claims,
                    replicas,
                    next,
                    names,
                };
                self.workloads.specs.insert(wk, workload);
            }
            Manifest::DaemonSet { key, template } => {
                self.write(Object::DaemonSet { key, template });
            }
            Manifest::Pdb(pdb) => self.write(Object::Pdb(pdb)),
            Manifest::Volume(v) => {
                self.api.storage.store(&v);
                self.storage_changed(vec![v]);
            }
            Manifest::Ignored => {}
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
        if p.owner != PodOwner::DaemonSet {
            self.tally.waited(k, p.pending_since, self.now);
        }
        // kube-scheduler's binding and condition update, as the API server stores them
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

    /// Kerf decided to take the NodeClaim away (a command's `reason`, or its deletion).
    fn removing(&mut self, claim: &str, reason: &str) {
        (self.tally).removing(claim, reason, &self.api, &self.cloud, self.now);
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
        let api = &self.api;
        (self.cloud).catalog(class, &self.scenario.spec.region, || {
            node_settings(api, class)
        })
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

    /// Spot interruption warnings: each instance reached is reclaimed two minutes later.
    fn interrupt(&mut self, i: usize) {
        let spec = &self.scenario.spec.cloud.spot_interruptions[i];
        for r in notices::spot_interruption(spec, &self.api, &mut self.cloud) {
            let reclaim_at = crate::clock::rfc3339(self.now + notices::INTERRUPTION_NOTICE);
            self.log.info(self.now, "cloud", "spot interruption warning", json!({
                "Node": {"name": r.node}, "instance-id": r.instance_id, "reclaim-at": reclaim_at,
            }));
            self.reached(None, r);
        }
    }

    /// Scheduled maintenance, stop and terminate notices, rebalance recommendations,
    /// capacity reservation interruptions.
    fn notice(&mut self, i: usize) {
        let cloud = &mut self.scenario.spec.cloud;
        let reached = notices::notice(
            &cloud.notices[i],
            &mut cloud.reservations,
            &self.api,
            &mut self.cloud,
        );
        let kind = self.scenario.spec.cloud.notices[i].kind;
        for r in reached {
            self.reached(Some(kind), r);
        }
    }

    /// A notice reached an instance: the cloud takes it away when it says, and the message
    /// goes to the interruption queue.
    fn reached(&mut self, kind: Option<NoticeKind>, r: notices::Reached) {
        if let Some((after, why)) = r.gone {
            self.push(self.now + after, Ev::Reclaim(r.provider_id, why));
        }
        self.deliver(kind, &r.instance_id, &r.zone);
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
        let launched = instance.launched(&self.scenario.spec.region);
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

    /// The instance's kubelet registers its Node ([`kubelet::register`]), and the daemonset
    /// pods that fit start at once.
    fn register(&mut self, provider_id: &str) {
        let region = &self.scenario.spec.region;
        let now = self.now;
        let Some(node) =
            kubelet::register(&mut self.api, &mut self.cloud, provider_id, region, now)
        else {
            return;
        };
        self.storage_changed(node.csi.into_iter().collect());
        let name = node.name;
        self.observe_node(&name);
        for pod in node.daemon_pods {
            let k = self.add_pod(pod);
            self.bind(&k, &name);
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
            if let Some(stored) = self.api.nodes.get(&name) {
                let fault = faults::InjectedFault::never_ready(
                    self.now,
                    self.duration(),
                    stored,
                    node.spec_taints,
                );
                self.checkers.never_ready(&name, fault);
            }
            self.tally.totals.faults_injected += 1;
            return;
        }
        let ready = cloud.ready_delay.0 + jitter(&mut self.rng, cloud.ready_jitter.0);
        self.push(self.now + ready, Ev::Ready(name));
    }

    /// The kubelet reports Ready ([`kubelet::ready`]).
    fn node_ready(&mut self, node: &str) {
        if kubelet::ready(&mut self.api, &self.cloud, node, self.now) {
            self.node_written(node);
        }
    }

    /// A scenario's node fault ([`kubelet::set_condition`]).
    fn set_node_condition(&mut self, c: &crate::scenario::NodeConditionFault) {
        for name in kubelet::set_condition(&mut self.api, c, self.now) {
            self.tally.totals.faults_injected += 1;
            self.node_written(&name);
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
