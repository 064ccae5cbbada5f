//! Kerf's operator: the in-cluster shell around kerf-core's controllers. Watches feed the
//! cluster state, the controllers are polled with the wall clock, and their actions become
//! API calls and cloud calls. Startup is in steps that leader election, `/metrics` and probes
//! slot into: connect, wait for every watch to list once, then reconcile.

pub mod aws;
pub mod cloud;
pub mod events;
pub mod execute;
pub mod kwok;
pub mod observe;
pub mod slim;
pub mod watch;

use std::collections::BTreeSet;
use std::time::Duration;

use kerf_core::controllers::{Controllers, EventObject, Settings};

use crate::cloud::CloudProvider;
use crate::execute::{Executor, log_error, now};
use crate::watch::Observed;

/// How often the cloud's instances are compared with the NodeClaims (garbage collection).
pub const GARBAGE_COLLECTION_INTERVAL: Duration = Duration::from_secs(30);
/// The longest the loop sleeps when the controllers ask for nothing sooner.
const IDLE_WAKE: Duration = Duration::from_secs(10);

/// How the operator runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Karpenter's `SpotToSpotConsolidation` feature gate.
    pub spot_to_spot: bool,
    /// Karpenter's `NodeRepair` feature gate.
    pub node_repair: bool,
}

/// Runs the controllers against the cluster `client` reaches until the process is stopped.
pub async fn run<C: CloudProvider>(
    client: kube::Client,
    cloud: C,
    options: Options,
) -> anyhow::Result<()> {
    let settings = Settings {
        epoch_unix: 0,
        spot_to_spot: options.spot_to_spot,
        node_repair: options.node_repair,
        ..Settings::default()
    };
    let seed = now().as_nanos() as u64;
    let mut core = Controllers::new(settings, seed);
    let executor = Executor::new(client.clone(), cloud);
    let queue = watch::spawn_all(&client);
    executor.cloud().start(std::sync::Arc::clone(&queue));

    // every kind listed once before deciding anything: a partial view would look like
    // orphans to garbage collection and like pending pods to provisioning
    let mut synced: BTreeSet<&str> = BTreeSet::new();
    while synced.len() < watch::KINDS.len() {
        let Some(o) = queue.pop().await else {
            anyhow::bail!("the watches stopped before listing the cluster");
        };
        match o {
            Observed::Synced(kind) => {
                synced.insert(kind);
            }
            other => observe_one(&mut core, &executor, other),
        }
    }

    let mut next_gc = now();
    loop {
        let t = now();
        if t >= next_gc {
            next_gc = t + GARBAGE_COLLECTION_INTERVAL;
            match executor.cloud().list().await {
                Ok(instances) => core.garbage_collect(&instances, now()),
                Err(e) => log_error("listing instances", &e.to_string()),
            }
        }
        // act until the controllers have nothing more to say at this instant
        loop {
            let actions = core.poll(now());
            if actions.is_empty() {
                break;
            }
            for a in actions {
                executor.execute(a, &mut core).await;
                // a burst of calls takes seconds: what the watches saw meanwhile is applied
                // as it comes, so that it is not held twice (queued and in the state)
                while let Some(o) = queue.try_pop() {
                    observe_one(&mut core, &executor, o);
                }
            }
        }
        let wake = core
            .next_wakeup()
            .unwrap_or(now() + IDLE_WAKE)
            .min(next_gc)
            .saturating_sub(now());
        tokio::select! {
            o = queue.pop() => {
                let Some(o) = o else {
                    anyhow::bail!("the watches stopped");
                };
                observe_one(&mut core, &executor, o);
                // take everything already queued before polling again
                while let Some(o) = queue.try_pop() {
                    observe_one(&mut core, &executor, o);
                }
            }
            () = tokio::time::sleep(wake) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

fn observe_one<C: CloudProvider>(core: &mut Controllers, executor: &Executor<C>, o: Observed) {
    if let Observed::Failed(kind, e) = &o {
        log_error("watching", &format!("{kind}: {e}"));
    }
    if let Observed::Applied(object) = &o {
        match object {
            watch::Object::Node(n) => executor.events().remember(EventObject::Node, &n.metadata),
            watch::Object::NodeClaim(c) => {
                executor
                    .events()
                    .remember(EventObject::NodeClaim, &c.metadata);
            }
            _ => {}
        }
    }
    observe::apply(core, executor.cloud(), o, now());
}
