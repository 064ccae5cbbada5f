//! Kerf's operator: the in-cluster shell around kerf-core's controllers. Watches feed the
//! cluster state, the controllers are polled with the wall clock, and their actions become
//! API calls and cloud calls. Startup is in steps that leader election, `/metrics` and probes
//! slot into: connect, wait for every watch to list once, then reconcile.

pub mod aws;
pub mod cloud;
pub mod dispatch;
pub mod events;
pub mod execute;
pub mod http;
pub mod instance_tagging;
pub mod kwok;
pub mod kwok_types;
pub mod leader;
pub mod lenient;
pub mod log;
pub mod node_classes;
pub mod observe;
mod recent;
pub mod reconciles;
pub mod runtime_metrics;
pub mod seats;
pub mod settings;
pub mod slim;
pub mod status_watch;
pub mod throttle;
pub mod watch;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kerf_core::controllers::{Controllers, EventObject, Settings};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::cloud::CloudProvider;
use crate::dispatch::Lanes;
use crate::execute::{Executor, now};
use crate::http::{Readiness, Scrape};
use crate::leader::Elector;
use crate::lenient::GapReports;
use crate::reconciles::Reconciles;
use crate::runtime_metrics::RuntimeMetrics;
use crate::status_watch::StatusWatch;
use crate::throttle::Gate;
use crate::watch::{Observed, Queue};
use kerf_core::unfinished::Unfinished;

/// The longest the loop sleeps when the controllers ask for nothing sooner.
const IDLE_WAKE: Duration = Duration::from_secs(10);
/// How long a stop waits for the calls in flight to come back.
const SETTLE: Duration = Duration::from_secs(15);

/// The operator's API clients.
#[derive(Clone)]
pub struct Clients {
    /// For the watches, the readiness probe and the Lease: nothing waits on the actions'
    /// budget here.
    pub watch: kube::Client,
    /// For the controllers' actions (and the events, and kwok's launches): every request
    /// waits at [`Clients::gate`], then for a token of the client's budget
    /// ([`throttle::Paced`]).
    pub act: kube::Client,
    /// For the Events: behind the same gate, with a budget of its own (client-go's event
    /// broadcaster writes through a client of its own too).
    pub events: kube::Client,
    /// Open while this replica may write.
    pub gate: Gate,
    /// Both clients' requests, the process and the Lease, as controller-runtime serves them.
    pub metrics: Arc<RuntimeMetrics>,
}

/// How the operator runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// What the controllers are told: feature gates, batch window, policies, the CA bundle
    /// the `ec2nodeclass-hash` covers.
    pub controllers: Settings,
    /// The Lease to lead on; none acts at once (DISABLE_LEADER_ELECTION).
    pub leader_election: Option<leader::Config>,
    /// Where `/metrics` is served.
    pub metrics_address: SocketAddr,
    /// Where `/healthz` and `/readyz` are served.
    pub health_address: SocketAddr,
}

/// What stops the process: SIGTERM (a Deployment's rollout or scale-down) or ^C.
struct Stop {
    term: tokio::signal::unix::Signal,
}

impl Stop {
    fn new() -> anyhow::Result<Stop> {
        Ok(Stop {
            term: signal(SignalKind::terminate())?,
        })
    }

    async fn requested(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
}

/// The loop's inputs besides the controllers: what the watches saw and who asks for metrics.
struct Inputs {
    queue: Arc<Queue>,
    ready: Arc<Readiness>,
    scrapes: mpsc::Receiver<Scrape>,
    reconciles: Reconciles,
    watched: Watched,
    unfinished: Unfinished,
    runtime: Arc<RuntimeMetrics>,
}

/// What the shell itself makes of the watched objects on their way to the controllers.
struct Watched {
    /// What could not be read of Karpenter's kinds.
    gaps: GapReports,
    /// Their conditions' transitions, as Karpenter's status controllers report them.
    status: StatusWatch,
}

impl Inputs {
    fn answer(&self, core: &mut Controllers, scrape: Scrape) {
        self.note_sync(core);
        let unix = i64::try_from(now().as_secs()).unwrap_or(0);
        self.watched.status.refresh(unix);
        let mut extra = vec![
            self.reconciles.registry(),
            self.watched.gaps.registry(),
            self.watched.status.registry(),
            self.runtime.registry(),
        ];
        // the AWS SDK's calls, on the AWS path
        extra.extend(kerf_aws_provider::sdk_metrics::installed().map(|m| m.registry()));
        let text = core.render_metrics(now(), &extra);
        // the scraper may have given up: nothing to do then
        let _ = scrape.send(text);
    }

    /// Tells the controllers whether every watch has listed, and since when not.
    fn note_sync(&self, core: &mut Controllers) {
        let since = (self.ready.unsynced_for()).map(|d| now().saturating_sub(d));
        core.watches_unsynced_since(since);
    }

    /// Applies what is already queued, and answers scrapes already asked.
    fn drain<C: CloudProvider>(
        &mut self,
        core: &mut Controllers,
        executor: &Executor<C>,
        leading: bool,
    ) {
        while let Some(o) = self.queue.try_pop() {
            observe_one(core, executor, &mut self.watched, o, leading);
        }
        while let Ok(scrape) = self.scrapes.try_recv() {
            self.answer(core, scrape);
        }
    }
}

/// Runs the controllers against the cluster `client` reaches until SIGTERM: every watch lists
/// once, the probes report ready, this replica waits for the Lease, then the controllers act.
pub async fn run<C: CloudProvider>(
    clients: Clients,
    cloud: C,
    options: Options,
) -> anyhow::Result<()> {
    let client = clients.watch.clone();
    let settings = kerf_core::controllers::Settings {
        node_class_status: cloud.resolves_node_classes(),
        repair_policies: cloud.repair_policies(),
        ..options.controllers.clone()
    };
    let mut stop = Stop::new()?;
    let seed = now().as_nanos() as u64;
    let mut core = Controllers::new(settings, seed);
    let reconciles = Reconciles::default();
    let calls = reconciles::CloudCalls::new(cloud.name(), core.metrics());
    let executor = Executor::new(clients.act.clone(), clients.events.clone(), cloud, calls);
    let ready = Arc::new(Readiness::default());
    let (scrape_tx, scrapes) = mpsc::channel(8);
    http::serve(
        options.metrics_address,
        options.health_address,
        Arc::clone(&ready),
        scrape_tx,
    )
    .await?;
    let overlays = options.controllers.node_overlay && serves_node_overlays(&client).await;
    let buffers = options.controllers.capacity_buffer && serves_capacity_buffers(&client).await;
    let (queue, kinds) = watch::spawn_all(
        &client,
        serves_kwok_node_classes(&client, executor.cloud()).await,
        overlays,
        buffers,
        &ready,
    );
    tokio::spawn(probe_api_server(client.clone(), Arc::clone(&ready)));
    let mut inputs = Inputs {
        queue,
        ready: Arc::clone(&ready),
        scrapes,
        reconciles,
        watched: Watched {
            gaps: GapReports::default(),
            status: StatusWatch::new(buffers),
        },
        unfinished: Unfinished::default(),
        runtime: Arc::clone(&clients.metrics),
    };

    // every kind listed once before deciding anything: a partial view would look like
    // orphans to garbage collection and like pending pods to provisioning
    let mut synced: BTreeSet<&str> = BTreeSet::new();
    while synced.len() < kinds.len() {
        tokio::select! {
            o = inputs.queue.pop() => match o {
                None => anyhow::bail!("the watches stopped before listing the cluster"),
                Some(Observed::Synced(kind)) => {
                    synced.insert(kind);
                }
                Some(other) => observe_one(&mut core, &executor, &mut inputs.watched, other, false),
            },
            Some(scrape) = inputs.scrapes.recv() => inputs.answer(&mut core, scrape),
            () = stop.requested() => return Ok(()),
        }
    }
    ready.set();

    // a candidate keeps its state current while it waits, so that it acts at once on taking
    // over; it writes nothing
    let leadership = match &options.leader_election {
        None => None,
        Some(config) => {
            inputs.runtime.leading(&config.name, false);
            let lead = Elector::new(client.clone(), config.clone()).lead();
            tokio::pin!(lead);
            loop {
                tokio::select! {
                    held = &mut lead => break Some(held),
                    o = inputs.queue.pop() => match o {
                        None => anyhow::bail!("the watches stopped"),
                        Some(o) => observe_one(&mut core, &executor, &mut inputs.watched, o, false),
                    },
                    Some(scrape) = inputs.scrapes.recv() => inputs.answer(&mut core, scrape),
                    () = stop.requested() => return Ok(()),
                }
            }
        }
    };
    if let (Some((held, _)), Some(config)) = (&leadership, &options.leader_election) {
        clients.gate.lead(Arc::clone(held));
        inputs.runtime.leading(&config.name, true);
    }
    executor
        .cloud()
        .start(client.clone(), Arc::clone(&inputs.queue), core.metrics());

    let result = act(&mut core, &executor, &mut inputs, &clients.gate, &mut stop).await;
    // renewals stop before the Lease is handed back, or the next one would take it again
    if let (Some((_, renewal)), Some(config)) = (leadership, &options.leader_election) {
        renewal.abort();
        let _ = renewal.await;
        Elector::release(client, config).await;
    }
    result
}

/// How often the API server is asked whether it answers, for `/readyz`.
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// Asks the API server for its version every [`PROBE_EVERY`] (with as long to answer) and
/// tells readiness whether it answered: the watches alone cannot tell a quiet cluster from
/// an unreachable one.
async fn probe_api_server(client: kube::Client, ready: Arc<Readiness>) {
    loop {
        let answered = tokio::time::timeout(PROBE_EVERY, client.apiserver_version()).await;
        ready.reachable(matches!(answered, Ok(Ok(_))));
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// Whether to watch Karpenter kwok's node classes: with the kwok provider, where the cluster
/// serves the kind (Karpenter kwok's CRDs are installed).
async fn serves_kwok_node_classes<C: CloudProvider>(client: &kube::Client, cloud: &C) -> bool {
    let gvk = kube::core::GroupVersionKind::gvk(kwok_types::GROUP, "v1alpha1", kwok_types::KIND);
    cloud.name() == "kwok" && kube::discovery::pinned_kind(client, &gvk).await.is_ok()
}

/// Whether the cluster serves NodeOverlays (Karpenter's CRD installed); without it the gate
/// has nothing to read, and says so.
async fn serves_node_overlays(client: &kube::Client) -> bool {
    let gvk = kube::core::GroupVersionKind::gvk("karpenter.sh", "v1alpha1", "NodeOverlay");
    let served = kube::discovery::pinned_kind(client, &gvk).await.is_ok();
    if !served {
        log::error(
            "watching",
            "NodeOverlay=true but the cluster does not serve karpenter.sh/v1alpha1 NodeOverlay: install the CRDs",
        );
    }
    served
}

/// Whether the cluster serves CapacityBuffers (the CRD Karpenter's chart installs); without
/// it the gate has nothing to read, and says so.
async fn serves_capacity_buffers(client: &kube::Client) -> bool {
    let gvk =
        kube::core::GroupVersionKind::gvk("autoscaling.x-k8s.io", "v1beta1", "CapacityBuffer");
    let served = kube::discovery::pinned_kind(client, &gvk).await.is_ok();
    if !served {
        log::error(
            "watching",
            "CapacityBuffer=true but the cluster does not serve autoscaling.x-k8s.io/v1beta1 CapacityBuffer: install the CRDs",
        );
    }
    served
}

/// The leader's loop: poll the controllers, hand their actions to the lanes
/// ([`dispatch`]), and take whatever comes next (an action's answer, a watch event, a scrape,
/// a timer) until a stop is requested; the calls in flight then come back first (for at most
/// [`SETTLE`]).
///
/// While the Lease is overdue no action is started, and a call in flight sends no further
/// request: the action client's gate holds every request (a retry, the write after a read, a
/// kwok launch) until the Lease is renewed, and the process ends if another replica took it.
/// A request already sent before the lapse completes at the API server, as client-go's would.
async fn act<C: CloudProvider>(
    core: &mut Controllers,
    executor: &Executor<C>,
    inputs: &mut Inputs,
    gate: &Gate,
    stop: &mut Stop,
) -> anyhow::Result<()> {
    let mut lanes = Lanes::new(executor);
    let result = loop {
        if !hold(core, executor, inputs, gate, stop).await {
            break Ok(());
        }
        lanes.resume(core, &mut inputs.unfinished);
        // writes that failed for a passing reason, due again
        for (tries, a) in inputs.unfinished.due(now()) {
            lanes.submit(core, &mut inputs.unfinished, a, tries);
        }
        inputs.note_sync(core);
        // act until the controllers have nothing more to say at this instant
        loop {
            let actions = core.poll(now());
            if actions.is_empty() {
                break;
            }
            for a in actions {
                lanes.submit(core, &mut inputs.unfinished, a, 0);
            }
        }
        let wake = core
            .next_wakeup()
            .unwrap_or(now() + IDLE_WAKE)
            .min(inputs.unfinished.next().unwrap_or(Duration::MAX))
            .saturating_sub(now());
        tokio::select! {
            Some(done) = lanes.next() => {
                let open = gate.is_open();
                lanes.finish(core, &mut inputs.unfinished, &inputs.reconciles, done, open);
            }
            o = inputs.queue.pop() => {
                let Some(o) = o else {
                    break Err(anyhow::anyhow!("the watches stopped"));
                };
                let leading = gate.is_open();
                observe_one(core, executor, &mut inputs.watched, o, leading);
                // take everything already queued before polling again
                inputs.drain(core, executor, leading);
            }
            Some(scrape) = inputs.scrapes.recv() => inputs.answer(core, scrape),
            () = tokio::time::sleep(wake) => {}
            () = stop.requested() => break Ok(()),
        }
    };
    let settled = lanes.settle(core, &mut inputs.unfinished, &inputs.reconciles);
    if tokio::time::timeout(SETTLE, settled).await.is_err() {
        log::error("stopping", "calls still in flight were left unfinished");
    }
    result
}

/// Waits, keeping the state current, while the Lease is overdue: no action starts that
/// another replica might have carried out. False when a stop was requested meanwhile.
async fn hold<C: CloudProvider>(
    core: &mut Controllers,
    executor: &Executor<C>,
    inputs: &mut Inputs,
    gate: &Gate,
    stop: &mut Stop,
) -> bool {
    while !gate.is_open() {
        tokio::select! {
            Some(o) = inputs.queue.pop() => observe_one(core, executor, &mut inputs.watched, o, false),
            Some(scrape) = inputs.scrapes.recv() => inputs.answer(core, scrape),
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
            () = stop.requested() => return false,
        }
    }
    true
}

/// Hands one watch event to the controllers, after the shell's own readers; `leading`: this
/// replica acts, and so tells of the conditions' transitions.
fn observe_one<C: CloudProvider>(
    core: &mut Controllers,
    executor: &Executor<C>,
    watched: &mut Watched,
    o: Observed,
    leading: bool,
) {
    let gaps = &mut watched.gaps;
    if let Observed::Failed(kind, e) = &o {
        log::error("watching", &format!("{kind}: {e}"));
    }
    let unix = i64::try_from(now().as_secs()).unwrap_or(0);
    match &o {
        Observed::Applied(object) => {
            if let Some((kind, meta, conditions)) = status_watch::read(object) {
                for e in watched.status.observe(kind, meta, conditions) {
                    if leading {
                        executor.events().record(e, meta.uid.clone());
                    }
                }
            }
        }
        Observed::Deleted(object) => {
            if let Some((kind, meta, _)) = status_watch::read(object) {
                let key = format!(
                    "{}/{}",
                    meta.namespace.as_deref().unwrap_or(""),
                    meta.name.as_deref().unwrap_or("")
                );
                for e in watched.status.deleted(kind, &key, unix) {
                    if leading {
                        executor.events().record(e, meta.uid.clone());
                    }
                }
            }
        }
        Observed::Gone(kind, key) => {
            if let Some(kind) = status_watch::Kind::of(kind) {
                for e in watched.status.deleted(kind, key, unix) {
                    if leading {
                        executor.events().record(e, None);
                    }
                }
            }
        }
        _ => {}
    }
    if let Observed::Applied(object) = &o {
        match object {
            watch::Object::Node(n) => executor.events().remember(EventObject::Node, &n.metadata),
            watch::Object::NodeClaim(c) => {
                executor
                    .events()
                    .remember(EventObject::NodeClaim, kube::Resource::meta(&**c));
                gaps.observed(EventObject::NodeClaim, c, executor.events());
            }
            watch::Object::NodePool(p) => {
                gaps.observed(EventObject::NodePool, p, executor.events())
            }
            watch::Object::NodeClass(c) => {
                gaps.observed(EventObject::NodeClass, c, executor.events());
            }
            watch::Object::NodeOverlay(o) => {
                executor
                    .events()
                    .remember(EventObject::NodeOverlay, kube::Resource::meta(&**o));
                gaps.observed(EventObject::NodeOverlay, o, executor.events());
            }
            _ => {}
        }
    }
    observe::apply(core, o, now());
}
