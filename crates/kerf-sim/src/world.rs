//! The simulated world: a Kubernetes cluster (workload controllers, daemonsets, a binder that
//! plays kube-scheduler) and an AWS cloud (launch delays, insufficient capacity, spot
//! interruptions), on a virtual clock of discrete events, with Kerf's core deciding.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::manifest::{Checked, KarpenterObject, RawDocument, check_document};
use kerf_api::{EC2NodeClass, NodePool, Taint, labels};
use kerf_aws::capacity::NodeSettings;
use kerf_aws::instance_type::scheduler_options;
use kerf_core::nodepools::{daemon_runs_on, node_pool_input};
use kerf_core::provisioner::{Batcher, nodeclaim_name};
use kerf_core::unavailable::{Pattern, UnavailableOfferings};
use kerf_core::workloads::{ClusterObject, read};
use kerf_scheduling::pods::pod_key;
use kerf_scheduling::resources::{Resources, pod_requests};
use kerf_scheduling::{
    BoundPod, ExistingNode, InstanceTypeOption, NodePoolInput, Problem, SolveOptions, solve,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use crate::cloud::{self, Instance};
use crate::log::Log;
use crate::report::{FinalNode, Report, Sample, Totals};
use crate::scenario::{NoticeKind, Scenario, ScenarioError};

mod disruption;

/// How long a launched instance may take to register before Kerf gives up on it.
pub const REGISTRATION_TTL: Duration = Duration::from_secs(15 * 60);
/// Spot interruption warning lead time.
pub const INTERRUPTION_NOTICE: Duration = Duration::from_secs(120);
/// How long a stopping instance keeps running after its state-change notice.
const STOP_DELAY: Duration = Duration::from_secs(60);
/// How often `--check` looks for pods waiting too long (each look may solve).
const WAIT_CHECK_EVERY: Duration = Duration::from_secs(30);
/// Slack on top of launch and ready delays before a wait counts as too long: the batch
/// window (at most 10 s) and a minute for disruption and binding to catch up.
const WAIT_SLACK: Duration = Duration::from_secs(70);

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
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Scenario(usize),
    Batch,
    Registered(String),
    Ready(String),
    Interrupt(usize),
    Notice(usize),
    /// The instance behind a node goes away, with the cloud's words for why.
    Reclaim(String, &'static str),
    RegistrationTimeout(String),
    Sample,
    Disrupt,
    Validate,
    Drain(String),
    Expire(String),
}

struct SimPod {
    pod: Pod,
    requests: Resources,
    workload: Option<String>,
    daemon: bool,
    node: Option<String>,
    nominated: Option<String>,
    pending_since: Duration,
    provisionable: bool,
}

struct Workload {
    template: Pod,
    replicas: i64,
    next: u64,
}

struct SimNodeClaim {
    nodepool: String,
    created: Duration,
    instance: Option<Instance>,
    node: Option<String>,
    /// Hash of the NodePool template it was made from (drift).
    hash: u64,
    /// Hash of the EC2NodeClass spec it was launched with (drift).
    class_hash: u64,
    drifted: bool,
}

struct SimNode {
    nodeclaim: String,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    allocatable: Resources,
    ready: bool,
    requests: Resources,
    last_pod_event: Duration,
    /// The `last_pod_event` the node was last logged consolidatable for.
    marked_consolidatable: Option<Duration>,
    deleting: Option<Duration>,
}

/// One simulation.
pub struct World {
    scenario: Scenario,
    /// What the workload pods request in total (for the cost lower bound).
    requested_total: Resources,
    /// The cheapest dollars per hour per allocatable vCPU and per GiB any NodePool offers,
    /// recomputed after NodePool changes.
    cheapest_rates: Option<(f64, f64)>,
    /// When `--check` last looked for pods waiting too long, and the late pods no NodePool
    /// could host then (not solved again while the late set stays within them).
    waits_checked: Duration,
    unhostable: BTreeSet<String>,
    zones: Vec<String>,
    now: Duration,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<(Duration, u64, Ev)>>,
    seq: u64,
    node_pools: BTreeMap<String, NodePool>,
    node_classes: BTreeMap<String, EC2NodeClass>,
    catalogs: HashMap<String, Arc<Vec<kerf_aws::InstanceType>>>,
    workloads: BTreeMap<String, Workload>,
    daemonsets: BTreeMap<String, Pod>,
    pods: BTreeMap<String, SimPod>,
    nodeclaims: BTreeMap<String, SimNodeClaim>,
    nodes: BTreeMap<String, SimNode>,
    unavailable: UnavailableOfferings,
    batcher: Batcher,
    batch_scheduled: Option<Duration>,
    binder_dirty: bool,
    node_counter: u64,
    log: Log,
    timeline: Vec<Sample>,
    totals: Totals,
    slowest_pod: Option<String>,
    node_seconds: f64,
    spot_node_seconds: f64,
    last_accrual: Duration,
    options: RunOptions,
    pdbs: BTreeMap<String, k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    command: Option<disruption::Pending>,
    pass_at: Option<Duration>,
    disruption_dirty: bool,
    /// Instance types per node class as the scheduler sees them, with the generation of the
    /// unavailable-offerings cache they were made for.
    type_options: HashMap<String, (u64, Arc<[InstanceTypeOption]>)>,
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

fn workload_key(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
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
        let mut w = World {
            rng: ChaCha8Rng::seed_from_u64(scenario.spec.seed),
            zones,
            now: Duration::ZERO,
            queue: BinaryHeap::new(),
            seq: 0,
            node_pools: BTreeMap::new(),
            node_classes: BTreeMap::new(),
            catalogs: HashMap::new(),
            workloads: BTreeMap::new(),
            daemonsets: BTreeMap::new(),
            pods: BTreeMap::new(),
            nodeclaims: BTreeMap::new(),
            nodes: BTreeMap::new(),
            unavailable: UnavailableOfferings::new(),
            batcher: Batcher::default(),
            batch_scheduled: None,
            binder_dirty: false,
            node_counter: 0,
            log: Log::default(),
            timeline: Vec::new(),
            totals: Totals::default(),
            slowest_pod: None,
            node_seconds: 0.0,
            spot_node_seconds: 0.0,
            last_accrual: Duration::ZERO,
            options,
            pdbs: BTreeMap::new(),
            command: None,
            pass_at: None,
            disruption_dirty: false,
            type_options: HashMap::new(),
            scenario,
            waits_checked: Duration::ZERO,
            requested_total: Resources::default(),
            cheapest_rates: None,
            unhostable: BTreeSet::new(),
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
        w.push(Duration::ZERO, Ev::Sample);
        Ok(w)
    }

    fn push(&mut self, at: Duration, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, ev)));
    }

    fn duration(&self) -> Duration {
        self.scenario.spec.duration.0
    }

    fn sample_every(&self) -> Duration {
        (self.duration() / 720).max(Duration::from_secs(60))
    }

    /// Runs to the end and reports.
    pub fn run(
        mut self,
        progress: &mut dyn FnMut(Duration, usize, usize),
    ) -> Result<Report, SimError> {
        self.reconcile()?;
        while let Some(Reverse((at, _, ev))) = self.queue.pop() {
            if at > self.duration() {
                break;
            }
            self.accrue(at);
            self.now = at;
            self.handle(ev)?;
            self.reconcile()?;
            progress(self.now, self.nodes.len(), self.pending_count());
        }
        self.accrue(self.duration());
        self.now = self.duration();
        if self.options.check {
            self.check_end()?;
        }
        Ok(self.report())
    }

    fn pending_count(&self) -> usize {
        self.pods
            .values()
            .filter(|p| p.node.is_none() && !p.daemon)
            .count()
    }

    /// Adds cost and node-seconds up to `t`.
    fn accrue(&mut self, t: Duration) {
        let dt = t.saturating_sub(self.last_accrual).as_secs_f64();
        if dt > 0.0 {
            let (per_cpu, per_gib) = match self.cheapest_rates {
                Some(r) => r,
                None => {
                    let r = self.cheapest_rates();
                    self.cheapest_rates = Some(r);
                    r
                }
            };
            // every node costs at least its vCPUs (and its GiB) at the cheapest rate, so
            // no cluster running these requests can cost less than either product
            let cpu = self.requested_total.cpu_millis as f64 / 1000.0;
            let gib = self.requested_total.memory_bytes as f64 / f64::from(1u32 << 30);
            self.totals.lower_bound_cost += (cpu * per_cpu).max(gib * per_gib) * dt / 3600.0;
            for nc in self.nodeclaims.values() {
                if let Some(i) = &nc.instance {
                    self.totals.cost += i.price_per_hour * dt / 3600.0;
                    self.node_seconds += dt;
                    if i.capacity_type == labels::CAPACITY_TYPE_SPOT {
                        self.spot_node_seconds += dt;
                    }
                }
            }
        }
        self.last_accrual = t;
    }

    fn handle(&mut self, ev: Ev) -> Result<(), SimError> {
        match ev {
            Ev::Scenario(i) => self.scenario_event(i)?,
            Ev::Batch => {
                self.batch_scheduled = None;
                if self.batcher.take_if_ready(self.now) {
                    self.provision();
                } else if let Some(at) = self.batcher.closes_at() {
                    self.batch_scheduled = Some(at);
                    self.push(at, Ev::Batch);
                }
            }
            Ev::Registered(nc) => self.register(&nc),
            Ev::Disrupt => self.disruption_pass()?,
            Ev::Validate => self.validate_command()?,
            Ev::Drain(node) => self.drain(&node)?,
            Ev::Expire(nc) => self.expire(&nc),
            Ev::Ready(node) => {
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.ready = true;
                    n.last_pod_event = self.now;
                    self.disruption_dirty = true;
                    let nc = n.nodeclaim.clone();
                    let allocatable = n.allocatable.to_resource_list();
                    self.log.info(self.now, "nodeclaim.lifecycle", "initialized nodeclaim", json!({
                        "NodeClaim": {"name": nc}, "Node": {"name": node}, "allocatable": allocatable,
                    }));
                    self.binder_dirty = true;
                }
                self.continue_command();
            }
            Ev::Interrupt(i) => self.interrupt(i),
            Ev::Notice(i) => self.notice(i),
            Ev::Reclaim(node, why) => self.reclaim(&node, why),
            Ev::RegistrationTimeout(nc) => {
                let stuck = self.nodeclaims.get(&nc).is_some_and(|c| c.node.is_none());
                if stuck {
                    self.log.info(
                        self.now,
                        "nodeclaim.lifecycle",
                        "deleted nodeclaim",
                        json!({
                            "NodeClaim": {"name": nc}, "reason": "registration timeout",
                        }),
                    );
                    self.remove_nodeclaim(&nc);
                }
            }
            Ev::Sample => {
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

    fn sample(&mut self) {
        let launched: Vec<&Instance> = self
            .nodeclaims
            .values()
            .filter_map(|c| c.instance.as_ref())
            .collect();
        let spot = launched
            .iter()
            .filter(|i| i.capacity_type == labels::CAPACITY_TYPE_SPOT)
            .count();
        self.timeline.push(Sample {
            t: self.now.as_secs_f64(),
            nodes: launched.len(),
            spot_nodes: spot,
            pending_pods: self.pending_count(),
            cost_per_hour: launched.iter().map(|i| i.price_per_hour).sum::<f64>() + 0.0,
        });
    }

    // ---- objects -------------------------------------------------------------------------

    fn apply(&mut self, doc: &Value, path: &str) -> Result<(), SimError> {
        let raw = RawDocument {
            index: 0,
            value: doc.clone(),
        };
        match check_document(&raw) {
            Checked::Valid(KarpenterObject::NodePool(np)) => {
                let name = np.metadata.name.clone().unwrap_or_default();
                self.node_pools.insert(name.clone(), *np);
                self.cheapest_rates = None;
                self.mark_drift(&name);
                self.binder_dirty = true;
            }
            Checked::Valid(KarpenterObject::EC2NodeClass(nc)) => {
                let name = nc.metadata.name.clone().unwrap_or_default();
                self.catalogs.remove(&name);
                self.type_options.remove(&name);
                self.node_classes.insert(name.clone(), *nc);
                self.mark_class_drift(&name);
            }
            Checked::Valid(KarpenterObject::NodeClaim(_)) => {
                return Err(ScenarioError {
                    path: path.into(),
                    message: "NodeClaims are made by Kerf, not by scenarios".into(),
                }
                .into());
            }
            Checked::Invalid(problems) => {
                let p = &problems[0];
                return Err(ScenarioError {
                    path: format!("{path}.{}", p.path),
                    message: p.message.clone(),
                }
                .into());
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
                            self.add_pod(p, None, false);
                        }
                    }
                    Some(ClusterObject::Pods(pods)) => {
                        let replicas = i64::try_from(pods.len()).unwrap_or(0);
                        let template = one_template(doc);
                        let wk = workload_key(&kind, &ns, &name);
                        let next = self.workloads.get(&wk).map_or(0, |w| w.next);
                        self.workloads.insert(
                            wk,
                            Workload {
                                template,
                                replicas,
                                next,
                            },
                        );
                    }
                    Some(ClusterObject::DaemonSet(pod)) => {
                        self.daemonsets.insert(key(&ns, &name), *pod);
                    }
                    None if kind == "PodDisruptionBudget" => {
                        let pdb =
                            serde_json::from_value(doc.clone()).map_err(|e| ScenarioError {
                                path: path.into(),
                                message: e.to_string(),
                            })?;
                        self.pdbs.insert(key(&ns, &name), pdb);
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
            match self.workloads.get_mut(&wk) {
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
        if let Some(d) = &e.delete {
            match d.kind.as_str() {
                "NodePool" => {
                    self.node_pools.remove(&d.name);
                    self.cheapest_rates = None;
                    let owned: Vec<String> = self
                        .nodeclaims
                        .iter()
                        .filter(|(_, c)| c.nodepool == d.name)
                        .map(|(k, _)| k.clone())
                        .collect();
                    for nc in owned {
                        self.log.info(
                            self.now,
                            "nodeclaim.lifecycle",
                            "deleted nodeclaim",
                            json!({"NodeClaim": {"name": nc}, "reason": "nodepool deleted"}),
                        );
                        self.remove_nodeclaim(&nc);
                    }
                }
                "DaemonSet" => {
                    self.daemonsets.remove(&key(&d.namespace, &d.name));
                }
                "Pod" => self.delete_pod(&key(&d.namespace, &d.name)),
                kind => {
                    let wk = workload_key(kind, &d.namespace, &d.name);
                    if self.workloads.remove(&wk).is_none() {
                        return Err(ScenarioError {
                            path: format!("{path}.delete"),
                            message: format!("no {kind} {}/{} exists", d.namespace, d.name),
                        }
                        .into());
                    }
                    let owned = self.pods_where(|p| p.workload.as_deref() == Some(&wk));
                    for p in owned {
                        self.delete_pod(&p);
                    }
                }
            }
        }
        Ok(())
    }

    /// Keys of the pods that satisfy `keep`.
    fn pods_where(&self, keep: impl Fn(&SimPod) -> bool) -> Vec<String> {
        self.pods
            .iter()
            .filter(|(_, p)| keep(p))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn add_pod(&mut self, pod: Pod, workload: Option<String>, daemon: bool) -> String {
        let k = pod_key(&pod);
        let requests = pod_requests(&pod);
        if !daemon {
            self.requested_total.add(&requests);
        }
        self.pods.insert(
            k.clone(),
            SimPod {
                pod,
                requests,
                workload,
                daemon,
                node: None,
                nominated: None,
                pending_since: self.now,
                provisionable: false,
            },
        );
        self.binder_dirty = true;
        k
    }

    fn delete_pod(&mut self, k: &str) {
        let Some(p) = self.pods.remove(k) else { return };
        if !p.daemon {
            self.requested_total = self.requested_total.saturating_sub(&p.requests);
        }
        if let Some(n) = p.node.and_then(|n| self.nodes.get_mut(&n)) {
            n.requests = n.requests.saturating_sub(&p.requests);
            n.last_pod_event = self.now;
            self.binder_dirty = true;
            self.disruption_dirty = true;
        }
    }

    fn bind(&mut self, k: &str, node: &str) {
        let Some(p) = self.pods.get_mut(k) else {
            return;
        };
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        n.requests.add(&p.requests);
        n.last_pod_event = self.now;
        p.node = Some(node.to_string());
        p.nominated = None;
        p.provisionable = false;
        let waited = self.now.saturating_sub(p.pending_since).as_secs_f64();
        if !p.daemon && waited > self.totals.max_pod_pending_seconds {
            self.totals.max_pod_pending_seconds = waited;
            self.slowest_pod = Some(k.to_string());
        }
    }

    // ---- controllers ---------------------------------------------------------------------

    fn reconcile(&mut self) -> Result<(), SimError> {
        self.reconcile_workloads();
        if self.binder_dirty {
            self.binder_dirty = false;
            self.bind_pending();
        }
        // binding only fills nodes; freed room and new or removed nodes are what can make
        // a disruption possible
        if std::mem::take(&mut self.disruption_dirty) {
            self.schedule_pass(self.now + disruption::PASS_INTERVAL);
        }
        if self.options.check {
            self.check_step()?;
            if self.now >= self.waits_checked + WAIT_CHECK_EVERY {
                self.waits_checked = self.now;
                self.check_waits()?;
            }
        }
        Ok(())
    }

    /// The ReplicaSet/StatefulSet/Job controllers: make or remove pods to match replicas
    /// (removing pending pods first, then the newest).
    fn reconcile_workloads(&mut self) {
        let mut by_workload: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, p) in &self.pods {
            if let Some(w) = &p.workload {
                by_workload.entry(w.clone()).or_default().push(k.clone());
            }
        }
        let keys: Vec<String> = self.workloads.keys().cloned().collect();
        for wk in keys {
            let have = by_workload.remove(&wk).unwrap_or_default();
            let want = usize::try_from(self.workloads[&wk].replicas).unwrap_or(0);
            if have.len() < want {
                for _ in have.len()..want {
                    let w = self.workloads.get_mut(&wk).expect("listed");
                    let mut pod = w.template.clone();
                    let base = pod.metadata.name.clone().unwrap_or_default();
                    pod.metadata.name = Some(format!("{base}-{}", w.next));
                    w.next += 1;
                    self.add_pod(pod, Some(wk.clone()), false);
                }
            } else if have.len() > want {
                let mut order: Vec<(bool, Duration, String)> = have
                    .iter()
                    .map(|k| {
                        let p = &self.pods[k];
                        (p.node.is_some(), p.pending_since, k.clone())
                    })
                    .collect();
                // pending first, then newest first
                order.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)));
                for (_, _, k) in order.into_iter().take(have.len() - want) {
                    self.delete_pod(&k);
                }
            }
        }
    }

    fn node_taints(&self, pool: &NodePool, initialized: bool) -> Vec<Taint> {
        let spec = &pool.spec.template.spec;
        let mut t = spec.taints.clone();
        if !initialized {
            t.extend(spec.startup_taints.iter().cloned());
        }
        t
    }

    /// Plays kube-scheduler: binds pending pods to Ready nodes they fit, with the same
    /// predicates as Kerf's scheduler; nominated nodes first.
    fn bind_pending(&mut self) {
        let pending = self.pods_where(|p| p.node.is_none() && !p.daemon);
        if pending.is_empty() {
            return;
        }
        // nominated pods whose node is now ready go there if they still fit
        for k in &pending {
            let Some(nc) = self.pods[k].nominated.clone() else {
                continue;
            };
            let node = self.nodeclaims.get(&nc).and_then(|c| c.node.clone());
            if let Some(n) = node
                && self.nodes.get(&n).is_some_and(|n| n.ready)
            {
                let fits = {
                    let node = &self.nodes[&n];
                    let mut total = node.requests.clone();
                    total.add(&self.pods[k].requests);
                    total.fits(&node.allocatable)
                };
                if fits {
                    self.bind(k, &n);
                }
            }
        }
        let pending: Vec<String> = pending
            .into_iter()
            .filter(|k| self.pods[k].node.is_none())
            .collect();
        let ready: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.ready)
            .map(|(k, _)| k.clone())
            .collect();
        let placed = if ready.is_empty() {
            Vec::new()
        } else {
            let nodes: Vec<ExistingNode> = ready
                .iter()
                .map(|name| {
                    let n = &self.nodes[name];
                    ExistingNode {
                        name: name.clone(),
                        labels: n.labels.clone(),
                        taints: n.taints.clone(),
                        allocatable: n.allocatable.clone(),
                        requested: n.requests.clone(),
                        initialized: true,
                    }
                })
                .collect();
            let index: HashMap<&str, usize> = ready
                .iter()
                .enumerate()
                .map(|(i, n)| (n.as_str(), i))
                .collect();
            let bound: Vec<BoundPod<'_>> = self
                .pods
                .values()
                .filter_map(|p| {
                    p.node
                        .as_deref()
                        .and_then(|n| index.get(n))
                        .map(|&node| BoundPod { node, pod: &p.pod })
                })
                .collect();
            let pods: Vec<Pod> = pending.iter().map(|k| self.pods[k].pod.clone()).collect();
            let decision = solve(&Problem {
                node_pools: &[],
                nodes: &nodes,
                bound_pods: &bound,
                daemonsets: &[],
                pods: &pods,
                options: SolveOptions::default(),
            });
            let (pending, ready) = (&pending, &ready);
            decision
                .existing
                .iter()
                .flat_map(|e| {
                    e.pods
                        .iter()
                        .map(move |p| (pending[*p].clone(), ready[e.node].clone()))
                })
                .collect()
        };
        for (k, n) in placed {
            self.bind(&k, &n);
        }
        let mut fresh = false;
        for k in &pending {
            let p = self.pods.get_mut(k).expect("pending pod");
            let in_flight = p
                .nominated
                .as_ref()
                .is_some_and(|nc| self.nodeclaims.contains_key(nc));
            if p.node.is_none() && !in_flight && !p.provisionable {
                p.provisionable = true;
                p.nominated = None;
                fresh = true;
            }
        }
        if fresh {
            self.batcher.saw_pod(self.now);
            if let Some(at) = self.batcher.closes_at()
                && self.batch_scheduled.is_none_or(|s| s > at)
            {
                self.batch_scheduled = Some(at);
                self.push(at, Ev::Batch);
            }
        }
    }

    fn catalog(&mut self, class: &str) -> Arc<Vec<kerf_aws::InstanceType>> {
        if let Some(c) = self.catalogs.get(class) {
            return c.clone();
        }
        let settings = self
            .node_classes
            .get(class)
            .map(|c| NodeSettings::from_node_class(&c.spec))
            .unwrap_or_default();
        let mut types =
            kerf_aws::instance_types(&self.scenario.spec.region, &settings).unwrap_or_default();
        for t in &mut types {
            t.offerings.retain(|o| self.zones.contains(&o.zone));
        }
        types.retain(|t| !t.offerings.is_empty());
        let types = Arc::new(types);
        self.catalogs.insert(class.to_string(), types.clone());
        types
    }

    /// The cheapest price per allocatable vCPU and per allocatable GiB among the offerings
    /// the NodePools' requirements allow (zone and capacity type included).
    fn cheapest_rates(&mut self) -> (f64, f64) {
        let (mut per_cpu, mut per_gib) = (f64::INFINITY, f64::INFINITY);
        let pools: Vec<NodePool> = self.node_pools.values().cloned().collect();
        for np in pools {
            let reqs = kerf_scheduling::Requirements::from_api(&np.spec.template.spec.requirements);
            let types = self.catalog(&np.spec.template.spec.node_class_ref.name);
            for t in types.iter() {
                let cpu = t.allocatable.cpu_millis as f64 / 1000.0;
                let gib = t.allocatable.memory_bytes as f64 / f64::from(1u32 << 30);
                if cpu <= 0.0 || gib <= 0.0 {
                    continue;
                }
                let mut labels = t.labels.clone();
                for o in &t.offerings {
                    labels.insert(labels::ZONE.into(), o.zone.clone());
                    labels.insert(labels::CAPACITY_TYPE.into(), o.capacity_type.into());
                    if reqs.matches_labels(&labels) {
                        per_cpu = per_cpu.min(o.price_per_hour / cpu);
                        per_gib = per_gib.min(o.price_per_hour / gib);
                    }
                }
            }
        }
        (
            if per_cpu.is_finite() { per_cpu } else { 0.0 },
            if per_gib.is_finite() { per_gib } else { 0.0 },
        )
    }

    /// The NodePools as the core sees them now: instance types with the offerings the
    /// unavailable cache rules out, and usage counted against limits.
    fn pool_inputs(&mut self) -> (Vec<NodePoolInput>, Vec<String>) {
        let mut pools: Vec<NodePoolInput> = Vec::new();
        let mut pool_names: Vec<String> = Vec::new();
        let now = self.now;
        self.unavailable.expire(now);
        let generation = self.unavailable.generation();
        let names: Vec<String> = self.node_pools.keys().cloned().collect();
        for name in names {
            let np = self.node_pools[&name].clone();
            let class = np.spec.template.spec.node_class_ref.name.clone();
            let cached = self
                .type_options
                .get(&class)
                .filter(|(g, _)| *g == generation)
                .map(|(_, o)| o.clone());
            let options = match cached {
                Some(o) => o,
                None => {
                    let types = self.catalog(&class);
                    let unavailable = &self.unavailable;
                    let o: Arc<[InstanceTypeOption]> = scheduler_options(&types, |ct, it, z| {
                        unavailable.is_unavailable(ct, it, z, now)
                    })
                    .into();
                    self.type_options.insert(class, (generation, o.clone()));
                    o
                }
            };
            let mut usage = Resources::default();
            for c in self.nodeclaims.values().filter(|c| c.nodepool == name) {
                if let Some(i) = &c.instance {
                    usage.add(&i.capacity);
                }
            }
            pools.push(node_pool_input(&np, options, usage));
            pool_names.push(name);
        }
        (pools, pool_names)
    }

    /// The provisioner: one solve over the provisionable pods, then NodeClaims created and
    /// launched, and pods nominated.
    fn provision(&mut self) {
        self.unavailable.expire(self.now);
        let pods_keys: Vec<String> = self.pods_where(|p| p.provisionable && p.node.is_none());
        if pods_keys.is_empty() {
            return;
        }
        self.log.info(
            self.now,
            "provisioner",
            "found provisionable pod(s)",
            json!({
                "Pods": list_text(&pods_keys), "duration": "0s",
            }),
        );
        let (pools, pool_names) = self.pool_inputs();
        // existing capacity: nodes, and launched NodeClaims that are not nodes yet
        let mut existing: Vec<ExistingNode> = Vec::new();
        let mut existing_ids: Vec<(Option<String>, String)> = Vec::new();
        for (name, c) in &self.nodeclaims {
            let Some(i) = &c.instance else { continue };
            let Some(pool) = self.node_pools.get(&c.nodepool) else {
                continue;
            };
            let node = c.node.as_ref().and_then(|n| self.nodes.get(n));
            let (labels, taints, requested, initialized) = match node {
                Some(n) => (
                    n.labels.clone(),
                    n.taints.clone(),
                    n.requests.clone(),
                    n.ready,
                ),
                None => {
                    let mut requested = Resources::default();
                    for p in self
                        .pods
                        .values()
                        .filter(|p| p.nominated.as_deref() == Some(name))
                    {
                        requested.add(&p.requests);
                    }
                    let labels = self.instance_labels(i, pool, name);
                    let taints = self.node_taints(pool, true);
                    for ds in self.daemonsets.values() {
                        if daemon_runs_on(ds, &labels, &taints) {
                            requested.add(&pod_requests(ds));
                        }
                    }
                    (labels, taints, requested, false)
                }
            };
            existing.push(ExistingNode {
                name: c.node.clone().unwrap_or_else(|| name.clone()),
                labels,
                taints,
                allocatable: i.allocatable.clone(),
                requested,
                initialized,
            });
            existing_ids.push((c.node.clone(), name.clone()));
        }
        let index_by_claim: HashMap<&str, usize> = existing_ids
            .iter()
            .enumerate()
            .map(|(i, (_, c))| (c.as_str(), i))
            .collect();
        let index_by_node: HashMap<&str, usize> = existing_ids
            .iter()
            .enumerate()
            .filter_map(|(i, (n, _))| n.as_deref().map(|n| (n, i)))
            .collect();
        let bound: Vec<BoundPod<'_>> = self
            .pods
            .values()
            .filter_map(|p| {
                let at = match (&p.node, &p.nominated) {
                    (Some(n), _) => index_by_node.get(n.as_str()),
                    (None, Some(nc)) => index_by_claim.get(nc.as_str()),
                    _ => None,
                };
                at.map(|&node| BoundPod { node, pod: &p.pod })
            })
            .collect();
        let pods: Vec<Pod> = pods_keys.iter().map(|k| self.pods[k].pod.clone()).collect();
        let daemonsets: Vec<Pod> = self.daemonsets.values().cloned().collect();
        let decision = solve(&Problem {
            node_pools: &pools,
            nodes: &existing,
            bound_pods: &bound,
            daemonsets: &daemonsets,
            pods: &pods,
            options: SolveOptions::default(),
        });
        drop(bound);
        for e in &decision.existing {
            let claim = existing_ids[e.node].1.clone();
            for p in &e.pods {
                if let Some(sp) = self.pods.get_mut(&pods_keys[*p]) {
                    sp.nominated = Some(claim.clone());
                    sp.provisionable = false;
                }
            }
            self.binder_dirty = true;
        }
        if !decision.nodeclaims.is_empty() {
            self.log.info(
                self.now,
                "provisioner",
                "computed new nodeclaim(s) to fit pod(s)",
                json!({
                    "nodeclaims": decision.nodeclaims.len(),
                    "pods": decision.nodeclaims.iter().map(|c| c.pods.len()).sum::<usize>(),
                }),
            );
        }
        for u in &decision.unschedulable {
            let reasons: Vec<String> = u.reasons.iter().map(ToString::to_string).collect();
            self.log.error(self.now, "provisioner", "could not schedule pod", json!({
                "Pod": {"name": pods[u.pod].metadata.name, "namespace": pods[u.pod].metadata.namespace},
                "error": reasons.join("; "),
            }));
        }
        let mut retry = false;
        for plan in &decision.nodeclaims {
            let pool_name = pool_names[plan.node_pool].clone();
            match self.launch_plan(plan, &pool_name) {
                Some(name) => {
                    for p in &plan.pods {
                        if let Some(sp) = self.pods.get_mut(&pods_keys[*p]) {
                            sp.nominated = Some(name.clone());
                            sp.provisionable = false;
                        }
                    }
                }
                None => retry = true,
            }
        }
        if retry || !decision.unschedulable.is_empty() {
            // pods left pending go round again in the next batch
            for k in &pods_keys {
                if let Some(p) = self.pods.get_mut(k)
                    && p.nominated.is_none()
                    && p.node.is_none()
                {
                    p.provisionable = false;
                }
            }
            self.binder_dirty = true;
        }
    }

    /// Creates and launches the NodeClaim of a plan; its name, or `None` when the cloud had no
    /// capacity for any of its offerings (those are marked unavailable).
    fn launch_plan(
        &mut self,
        plan: &kerf_scheduling::PlannedNodeClaim,
        pool_name: &str,
    ) -> Option<String> {
        let pool_name = pool_name.to_string();
        let name = nodeclaim_name(&pool_name, &mut self.rng);
        let types: Vec<String> = plan.instance_types.iter().map(|o| o.name.clone()).collect();
        self.log.info(
            self.now,
            "provisioner",
            "created nodeclaim",
            json!({
                "NodePool": {"name": pool_name}, "NodeClaim": {"name": name},
                "requests": plan.requests.to_resource_list(),
                "instance-types": list_text(&types),
            }),
        );
        let pool = self.node_pools[&pool_name].clone();
        let catalog = self.catalog(&pool.spec.template.spec.node_class_ref.name);
        let windows = &self.scenario.spec.cloud.insufficient_capacity;
        let now = self.now;
        let attempt = cloud::launch(
            &plan.requirements,
            &types,
            &catalog,
            &self.zones,
            |ct, it, z| windows.iter().any(|w| w.covers(ct, it, z, now)),
            &mut self.rng,
        );
        for (ct, it, zone) in &attempt.insufficient {
            self.unavailable.mark(
                Pattern {
                    capacity_type: Some(ct.clone()),
                    instance_type: Some(it.clone()),
                    zone: Some(zone.clone()),
                },
                self.now,
            );
        }
        match attempt.instance {
            Some(instance) => {
                self.log.info(
                    self.now,
                    "nodeclaim.lifecycle",
                    "launched nodeclaim",
                    json!({
                        "NodeClaim": {"name": name},
                        "provider-id": instance.provider_id,
                        "instance-type": instance.instance_type,
                        "zone": instance.zone,
                        "capacity-type": instance.capacity_type,
                        "allocatable": instance.allocatable.to_resource_list(),
                    }),
                );
                self.totals.nodes_launched += 1;
                if let kerf_api::duration::NillableDuration::After(ttl) =
                    pool.spec.template.spec.expire_after
                {
                    self.push(self.now + ttl, Ev::Expire(name.clone()));
                }
                self.nodeclaims.insert(
                    name.clone(),
                    SimNodeClaim {
                        nodepool: pool_name,
                        created: self.now,
                        instance: Some(instance),
                        node: None,
                        hash: disruption::template_hash(&pool),
                        class_hash: self
                            .node_classes
                            .get(&pool.spec.template.spec.node_class_ref.name)
                            .map_or(0, disruption::class_hash),
                        drifted: false,
                    },
                );
                let delay = self.scenario.spec.cloud.launch_delay.0;
                self.push(self.now + delay, Ev::Registered(name.clone()));
                self.push(
                    self.now + REGISTRATION_TTL,
                    Ev::RegistrationTimeout(name.clone()),
                );
                Some(name)
            }
            None => {
                self.log.error(self.now, "nodeclaim.lifecycle", "failed launching nodeclaim", json!({
                    "NodeClaim": {"name": name},
                    "error": format!("creating instance, insufficient capacity, all requested instance types were unavailable during launch ({} offerings)", attempt.insufficient.len()),
                }));
                None
            }
        }
    }

    fn instance_labels(
        &self,
        i: &Instance,
        pool: &NodePool,
        hostname: &str,
    ) -> BTreeMap<String, String> {
        let mut l = i.labels.clone();
        l.extend(pool.spec.template.metadata.labels.clone());
        l.insert(
            labels::NODEPOOL.into(),
            pool.metadata.name.clone().unwrap_or_default(),
        );
        l.insert(labels::ZONE.into(), i.zone.clone());
        l.insert(labels::REGION.into(), self.scenario.spec.region.clone());
        l.insert(labels::CAPACITY_TYPE.into(), i.capacity_type.clone());
        l.insert(labels::HOSTNAME.into(), hostname.to_string());
        l
    }

    fn register(&mut self, nc: &str) {
        let Some(claim) = self.nodeclaims.get(nc) else {
            return;
        };
        let Some(instance) = claim.instance.clone() else {
            return;
        };
        let Some(pool) = self.node_pools.get(&claim.nodepool).cloned() else {
            return;
        };
        self.node_counter += 1;
        let n = self.node_counter;
        let name = format!(
            "ip-10-{}-{}-{}.{}.compute.internal",
            n / 65536 % 256,
            n / 256 % 256,
            n % 256,
            region_domain(&self.scenario.spec.region)
        );
        let labels = self.instance_labels(&instance, &pool, &name);
        let taints = self.node_taints(&pool, true);
        self.nodes.insert(
            name.clone(),
            SimNode {
                nodeclaim: nc.to_string(),
                labels: labels.clone(),
                taints: taints.clone(),
                allocatable: instance.allocatable.clone(),
                ready: false,
                requests: Resources::default(),
                last_pod_event: self.now,
                marked_consolidatable: None,
                deleting: None,
            },
        );
        if let Some(c) = self.nodeclaims.get_mut(nc) {
            c.node = Some(name.clone());
        }
        self.log.info(
            self.now,
            "nodeclaim.lifecycle",
            "registered nodeclaim",
            json!({
                "NodeClaim": {"name": nc}, "Node": {"name": name},
            }),
        );
        // daemonset pods start on the node as soon as it registers
        let daemonsets: Vec<(String, Pod)> = self
            .daemonsets
            .iter()
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        for (ds, template) in daemonsets {
            if daemon_runs_on(&template, &labels, &taints) {
                let mut pod = template.clone();
                pod.metadata.name = Some(format!("{}-{}", ds.rsplit('/').next().unwrap_or(""), n));
                let k = self.add_pod(pod, None, true);
                self.bind(&k, &name);
            }
        }
        let ready = self.scenario.spec.cloud.ready_delay.0;
        self.push(self.now + ready, Ev::Ready(name));
    }

    /// NodeClaims with a running node, oldest first, filtered as a notice says.
    fn notice_targets(
        &self,
        spot_only: bool,
        nodepool: Option<&String>,
        instance_type: Option<&String>,
        count: u32,
    ) -> Vec<(String, String, String, String)> {
        let mut candidates: Vec<(Duration, String, String, String, String)> = self
            .nodeclaims
            .iter()
            .filter_map(|(name, c)| {
                let inst = c.instance.as_ref()?;
                let node = c.node.clone()?;
                let ok = (!spot_only || inst.capacity_type == labels::CAPACITY_TYPE_SPOT)
                    && !inst.interrupted
                    && nodepool.is_none_or(|p| *p == c.nodepool)
                    && instance_type.is_none_or(|t| *t == inst.instance_type);
                ok.then(|| {
                    let (id, zone) = (inst.id.clone(), inst.zone.clone());
                    (c.created, name.clone(), node, id, zone)
                })
            })
            .collect();
        candidates.sort();
        candidates
            .into_iter()
            .take(count as usize)
            .map(|(_, claim, node, id, zone)| (claim, node, id, zone))
            .collect()
    }

    fn interrupt(&mut self, i: usize) {
        let spec = self.scenario.spec.cloud.spot_interruptions[i].clone();
        let targets = self.notice_targets(
            true,
            spec.nodepool.as_ref(),
            spec.instance_type.as_ref(),
            spec.count,
        );
        for (claim, node, id, zone) in targets {
            if let Some(inst) = self
                .nodeclaims
                .get_mut(&claim)
                .and_then(|c| c.instance.as_mut())
            {
                inst.interrupted = true;
            }
            self.log.info(self.now, "cloud", "spot interruption warning", json!({
                "Node": {"name": node}, "instance-id": id, "reclaim-at": crate::clock::rfc3339(self.now + INTERRUPTION_NOTICE),
            }));
            self.push(
                self.now + INTERRUPTION_NOTICE,
                Ev::Reclaim(node.clone(), "spot instance reclaimed"),
            );
            self.deliver(None, &id, &zone);
        }
    }

    /// Scheduled maintenance, stop and terminate notices, rebalance recommendations.
    fn notice(&mut self, i: usize) {
        let spec = self.scenario.spec.cloud.notices[i].clone();
        let targets = self.notice_targets(
            false,
            spec.nodepool.as_ref(),
            spec.instance_type.as_ref(),
            spec.count,
        );
        for (claim, node, id, zone) in targets {
            let gone = match spec.kind {
                NoticeKind::Stopping => Some((STOP_DELAY, "instance stopped")),
                NoticeKind::Terminated => Some((Duration::ZERO, "instance terminated")),
                NoticeKind::ScheduledChange | NoticeKind::Rebalance => None,
            };
            if let Some((after, why)) = gone {
                if let Some(inst) = self
                    .nodeclaims
                    .get_mut(&claim)
                    .and_then(|c| c.instance.as_mut())
                {
                    inst.interrupted = true;
                }
                self.push(self.now + after, Ev::Reclaim(node.clone(), why));
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
        self.receive(&body);
    }

    fn reclaim(&mut self, node: &str, why: &str) {
        let Some(n) = self.nodes.get(node) else {
            return;
        };
        let claim = n.nodeclaim.clone();
        self.log
            .info(self.now, "cloud", why, json!({"Node": {"name": node}}));
        self.log.info(
            self.now,
            "node.termination",
            "deleted node",
            json!({"Node": {"name": node}}),
        );
        self.log.info(
            self.now,
            "nodeclaim.lifecycle",
            "deleted nodeclaim",
            json!({"NodeClaim": {"name": claim}, "Node": {"name": node}}),
        );
        self.remove_nodeclaim(&claim);
    }

    /// Deletes a NodeClaim, its node and instance; pods on it become pending again.
    fn remove_nodeclaim(&mut self, nc: &str) {
        let Some(c) = self.nodeclaims.remove(nc) else {
            return;
        };
        self.disruption_dirty = true;
        if c.instance.is_some() {
            self.totals.nodes_terminated += 1;
        }
        if let Some(node) = c.node {
            self.nodes.remove(&node);
            let on_node = self.pods_where(|p| p.node.as_deref() == Some(&node));
            for k in on_node {
                if self.pods[&k].daemon {
                    self.pods.remove(&k);
                    continue;
                }
                let p = self.pods.get_mut(&k).expect("listed");
                p.node = None;
                p.pending_since = self.now;
                self.totals.pods_evicted += 1;
                // workload pods are recreated by their controller; bare pods are gone
                if p.workload.is_some() {
                    self.pods.remove(&k);
                }
            }
        }
        for p in self.pods.values_mut() {
            if p.nominated.as_deref() == Some(nc) {
                p.nominated = None;
                p.provisionable = false;
            }
        }
        self.binder_dirty = true;
    }

    // ---- invariants ----------------------------------------------------------------------

    fn violation(&self, message: String) -> SimError {
        SimError::Invariant {
            at: crate::clock::rfc3339(self.now),
            message,
        }
    }

    fn check_step(&self) -> Result<(), SimError> {
        for (name, n) in &self.nodes {
            if !n.requests.fits(&n.allocatable) {
                return Err(self.violation(format!(
                    "node {name} is over-committed: requests {:?} exceed allocatable {:?}",
                    n.requests, n.allocatable
                )));
            }
        }
        for (k, p) in &self.pods {
            let Some(node) = &p.node else { continue };
            let Some(n) = self.nodes.get(node) else {
                return Err(self.violation(format!(
                    "pod {k} is bound to node {node}, which does not exist"
                )));
            };
            if p.daemon {
                continue;
            }
            let tolerations = p
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.clone())
                .unwrap_or_default();
            // the disrupted taint arrives after binding: it keeps new pods off, not old ones
            let scheduling_taints: Vec<Taint> = n
                .taints
                .iter()
                .filter(|t| t.key != labels::DISRUPTED_TAINT_KEY)
                .cloned()
                .collect();
            if let Some(t) =
                kerf_scheduling::taints::first_untolerated(&tolerations, &scheduling_taints, true)
            {
                return Err(self.violation(format!(
                    "pod {k} is bound to node {node} whose taint {} it does not tolerate",
                    t.key
                )));
            }
            let selector = p
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.node_selector.clone())
                .unwrap_or_default();
            if let Some((key, v)) = selector
                .iter()
                .find(|(key, v)| n.labels.get(*key) != Some(*v))
            {
                return Err(self.violation(format!(
                    "pod {k} selects {key}={v} but is bound to node {node} without it"
                )));
            }
        }
        for (name, pool) in &self.node_pools {
            let limits =
                Resources::from_quantities(pool.spec.limits.iter().map(|(k, v)| (k, v.as_str())));
            let mut used = Resources::default();
            for c in self.nodeclaims.values().filter(|c| c.nodepool == *name) {
                if let Some(i) = &c.instance {
                    used.add(&i.capacity);
                }
            }
            for (resource, _) in pool.spec.limits.iter() {
                let (u, l) = match resource.as_str() {
                    "cpu" => (used.cpu_millis, limits.cpu_millis),
                    "memory" => (used.memory_bytes, limits.memory_bytes),
                    _ => continue,
                };
                if u > l {
                    return Err(self.violation(format!(
                        "nodepool {name} exceeds its {resource} limit: {u} > {l}"
                    )));
                }
            }
        }
        for (name, c) in &self.nodeclaims {
            if c.instance.is_some()
                && c.node.is_none()
                && self.now.saturating_sub(c.created) > REGISTRATION_TTL
            {
                return Err(self.violation(format!(
                    "nodeclaim {name} launched at {} never registered and was not cleaned up",
                    crate::clock::rfc3339(c.created)
                )));
            }
        }
        Ok(())
    }

    /// No pod waits for a node longer than launch + ready delay + slack while the cloud has
    /// capacity (no insufficient-capacity window open since it became pending) and a
    /// NodePool within its limits could host it.
    fn check_waits(&mut self) -> Result<(), SimError> {
        let cloud = &self.scenario.spec.cloud;
        let bound = cloud.launch_delay.0 + cloud.ready_delay.0 + WAIT_SLACK;
        let now = self.now;
        let late: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| {
                p.node.is_none()
                    && !p.daemon
                    && now.saturating_sub(p.pending_since) > bound
                    && !cloud
                        .insufficient_capacity
                        .iter()
                        .any(|w| w.overlaps(p.pending_since, now))
            })
            .map(|(k, _)| k.clone())
            .collect();
        if late.iter().all(|k| self.unhostable.contains(k)) {
            return Ok(());
        }
        let (pools, _) = self.pool_inputs();
        let pods: Vec<Pod> = late.iter().map(|k| self.pods[k].pod.clone()).collect();
        let d = solve(&Problem::new(&pools, &pods));
        let hostable: Vec<String> = d
            .nodeclaims
            .iter()
            .flat_map(|c| c.pods.iter().map(|p| late[*p].clone()))
            .collect();
        if hostable.is_empty() {
            self.unhostable = late.into_iter().collect();
            return Ok(());
        }
        Err(self.violation(format!(
            "pods waiting over {}s for a node although capacity exists: {}",
            bound.as_secs(),
            list_text(&hostable)
        )))
    }

    /// Every pending pod a NodePool could host must not have waited long.
    fn check_end(&mut self) -> Result<(), SimError> {
        self.check_step()?;
        let stale: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| {
                p.node.is_none()
                    && !p.daemon
                    && self.now.saturating_sub(p.pending_since) > REGISTRATION_TTL
            })
            .map(|(k, _)| k.clone())
            .collect();
        if stale.is_empty() {
            return Ok(());
        }
        let mut pools = Vec::new();
        let names: Vec<String> = self.node_pools.keys().cloned().collect();
        for name in names {
            let np = self.node_pools[&name].clone();
            let types = self.catalog(&np.spec.template.spec.node_class_ref.name);
            let options: Arc<[InstanceTypeOption]> =
                scheduler_options(&types, |_, _, _| false).into();
            pools.push(node_pool_input(&np, options, Resources::default()));
        }
        let pods: Vec<Pod> = stale.iter().map(|k| self.pods[k].pod.clone()).collect();
        let d = solve(&Problem::new(&pools, &pods));
        let hostable: Vec<String> = d
            .nodeclaims
            .iter()
            .flat_map(|c| c.pods.iter().map(|p| stale[*p].clone()))
            .collect();
        if hostable.is_empty() {
            Ok(())
        } else {
            Err(self.violation(format!(
                "pods pending for over 15 minutes that a NodePool could host: {}",
                list_text(&hostable)
            )))
        }
    }

    // ---- report --------------------------------------------------------------------------

    fn report(mut self) -> Report {
        // pods still pending count their wait until the end
        for (k, p) in &self.pods {
            if p.node.is_none() && !p.daemon {
                let waited = self.now.saturating_sub(p.pending_since).as_secs_f64();
                if waited > self.totals.max_pod_pending_seconds {
                    self.totals.max_pod_pending_seconds = waited;
                    self.slowest_pod = Some(k.clone());
                }
            }
        }
        self.sample();
        self.totals.spot_node_seconds_share = if self.node_seconds > 0.0 {
            self.spot_node_seconds / self.node_seconds
        } else {
            0.0
        };
        self.totals.slowest_pod = self.slowest_pod.clone();
        let mut nodes = Vec::new();
        for (name, c) in &self.nodeclaims {
            let Some(i) = &c.instance else { continue };
            let node = c.node.clone().unwrap_or_else(|| name.clone());
            let mut pods: Vec<String> =
                self.pods_where(|p| p.node.as_deref() == Some(&node) && !p.daemon);
            pods.sort();
            nodes.push(FinalNode {
                name: node,
                nodeclaim: name.clone(),
                nodepool: c.nodepool.clone(),
                instance_type: i.instance_type.clone(),
                capacity_type: i.capacity_type.clone(),
                zone: i.zone.clone(),
                price_per_hour: i.price_per_hour,
                pods,
            });
        }
        let pending = self.pods_where(|p| p.node.is_none() && !p.daemon);
        Report::new(
            &self.scenario,
            nodes,
            pending,
            std::mem::take(&mut self.totals),
            std::mem::take(&mut self.timeline),
            self.log.take(),
        )
    }
}

/// The pod template of a workload document, named after the workload (pods get `-<i>`).
fn one_template(doc: &Value) -> Pod {
    let mut single = doc.clone();
    if let Some(spec) = single.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("replicas".into(), 1.into());
        spec.insert("parallelism".into(), 1.into());
        spec.remove("completions");
    }
    let raw = RawDocument {
        index: 0,
        value: single,
    };
    let mut pod = match read(&raw) {
        Ok(Some(ClusterObject::Pods(mut pods))) if !pods.is_empty() => pods.remove(0),
        _ => Pod::default(),
    };
    pod.metadata.name = Some(raw.name().to_string());
    pod
}

fn precheck(doc: &Value, path: &str) -> Result<(), SimError> {
    let raw = RawDocument {
        index: 0,
        value: doc.clone(),
    };
    match check_document(&raw) {
        Checked::Invalid(problems) => Err(ScenarioError {
            path: format!("{path}.{}", problems[0].path),
            message: problems[0].message.clone(),
        }
        .into()),
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

fn list_text(items: &[String]) -> String {
    const SHOWN: usize = 5;
    if items.len() <= SHOWN {
        items.join(", ")
    } else {
        format!(
            "{} and {} other(s)",
            items[..SHOWN].join(", "),
            items.len() - SHOWN
        )
    }
}

fn region_domain(region: &str) -> &str {
    if region == "us-east-1" { "ec2" } else { region }
}
