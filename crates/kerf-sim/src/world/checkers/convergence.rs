//! The convergence invariant: once the cluster has been quiet (no pod waiting for a node,
//! no disruption command in flight, no scenario event) for longer than the NodePools'
//! consolidateAfter plus one pass interval, a full disruption pass over the current state
//! finds nothing to do — else the controllers missed a decision (a pass that never ran, or
//! one skipped on stale inputs).
//!
//! This is a differential check: the full pass is Kerf's own ([`fresh_decision`]), and
//! what it is held against is the controllers' skipping (their write counters and idle
//! inputs), not the decision itself, which the independent oracles judge (spot
//! preference, budgets, waits). The checker tells "nothing changed" by its own fingerprint
//! of the stored objects, with each node's last pod event as it saw it, not by the
//! controllers' records or counters, so a counter that forgets a write is caught too; what
//! Kerf remembers as unavailable it tells from the cloud's refusals and interruptions, as
//! it saw them. Of Kerf's memory it reads only what no object holds: whether a disruption
//! command is in flight (part of "quiet"), through its one hook.
//!
//! [`fresh_decision`]: kerf_core::controllers::Controllers::fresh_decision

use std::collections::BTreeMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use kerf_api::cron::CronSchedule;
use kerf_api::duration::NillableDuration;
use kerf_api::labels;
use kerf_core::cluster::PodOwner;
use kerf_core::controllers::disruption::PASS_INTERVAL;
use kerf_core::disruption::rules::pod_blocks;
use kerf_core::unavailable::TTL;

use super::{Checkers, Sight, SimError};
use crate::clock::{EPOCH_UNIX, rfc3339};

/// What the convergence check remembers between steps.
#[derive(Debug, Default)]
pub(super) struct Convergence {
    /// Since when the cluster has been quiet.
    quiet_since: Duration,
    /// The fingerprint of the state a full pass last found nothing in.
    settled: Option<u64>,
    /// Per node, a hash of the pods bound to it and since when: its last pod event as
    /// this checker saw it (it looks after every step).
    pod_sets: BTreeMap<String, (u64, Duration)>,
    /// The nodes the emptiness check finds certainly deletable, each since when without a
    /// break in this quiet.
    pub(super) deletable_since: BTreeMap<String, Duration>,
    /// A command a full pass found while the controllers had none, with when it was first
    /// found: the controllers get one pass interval to find it too.
    missed: Option<(Duration, String)>,
    /// The fingerprint of the state spot preference was last checked in, with the
    /// capacity windows that counted then.
    spot_checked: Option<(u64, Vec<usize>)>,
    /// When the cloud refused a launch for capacity or took capacity back (an
    /// interruption), within the last unavailable-offerings TTL: Kerf remembers those
    /// offerings as unavailable that long, which is part of what "nothing changed" means.
    refusals: Vec<Duration>,
}

impl Convergence {
    /// When the quiet began.
    pub(super) fn quiet_since(&self) -> Duration {
        self.quiet_since
    }

    /// When the set of pods on `node` last changed, or its NodeClaim initialized, as this
    /// checker saw it.
    pub(super) fn last_pod_event(&self, node: &str) -> Option<Duration> {
        self.pod_sets.get(node).map(|(_, at)| *at)
    }

    /// The cloud refused capacity or took it back at `now`.
    pub(super) fn refused(&mut self, now: Duration) {
        self.refusals.retain(|at| now < *at + TTL);
        self.refusals.push(now);
    }

    /// Kerf restarted: its memory of unavailable offerings starts empty.
    pub(super) fn forget_refusals(&mut self) {
        self.refusals.clear();
    }

    /// Something happened that the controllers must react to: the quiet starts again.
    pub(super) fn disturbed(&mut self, now: Duration) {
        self.quiet_since = now;
        self.missed = None;
        self.deletable_since.clear();
    }
}

impl Checkers {
    /// Runs after every step under `--check`.
    pub(in crate::world) fn check_convergence(
        &mut self,
        seen: &mut Sight<'_>,
    ) -> Result<(), SimError> {
        let now = seen.now;
        self.track_pod_events(seen);
        // no command starts while the API server is down (its marks are refused), in Kerf
        // as in Karpenter: the quiet starts again when it is back (swarm seed 90012)
        // nor while a NodeClaim Kerf asked for is not stored yet and it still tries: its
        // launch is not answered, and Kerf's pass waits for the cluster read whole, as
        // Karpenter's waits for its cluster state synced (swarm seed 134448)
        let busy = seen.disruption.command_in_flight()
            || seen.api_down().is_some()
            || (seen.writes_pending && !seen.api.creates_asked.is_empty())
            || (seen.api.pods.values()).any(|p| p.node.is_none() && p.owner != PodOwner::DaemonSet);
        if busy {
            self.convergence.disturbed(now);
            return Ok(());
        }
        let Some(wait) = seen.longest_consolidate_after() else {
            return Ok(());
        };
        if now < self.convergence.quiet_since + wait + PASS_INTERVAL {
            return Ok(());
        }
        // the independent check first: it asks nothing of Kerf's disruption code
        self.check_empty_nodes(seen)?;
        let print = self.fingerprint(seen);
        if self.convergence.missed.is_none() && self.convergence.settled == Some(print) {
            return self.check_spot_preference_once(seen, print);
        }
        let Some(found) = seen.disruption.fresh_decision(now) else {
            self.convergence.settled = Some(print);
            self.convergence.missed = None;
            return self.check_spot_preference_once(seen, print);
        };
        match &self.convergence.missed {
            None => {
                self.convergence.missed = Some((now, found));
                Ok(())
            }
            Some((first, _)) if now >= *first + PASS_INTERVAL => Err(seen.violation(format!(
                "convergence: quiet since {} and a full disruption pass finds {found} (first at \
                 {}), yet the controllers started no command",
                rfc3339(self.convergence.quiet_since),
                rfc3339(*first)
            ))),
            Some(_) => Ok(()),
        }
    }

    /// The spot-preference check, once per settled state, when the quiet has outlasted
    /// insufficient-capacity memories (the controllers know what the cloud offers now).
    fn check_spot_preference_once(&mut self, seen: &Sight<'_>, print: u64) -> Result<(), SimError> {
        // the capacity windows that still count: the cloud's offer changes as they end
        let since = seen.now.saturating_sub(TTL + PASS_INTERVAL);
        let windows: Vec<usize> = (seen.scenario.spec.cloud.insufficient_capacity.iter())
            .enumerate()
            .filter(|(_, w)| w.overlaps(since, seen.now))
            .map(|(i, _)| i)
            .collect();
        let state = Some((print, windows));
        if seen.now < self.convergence.quiet_since + TTL + PASS_INTERVAL
            || self.convergence.spot_checked == state
        {
            return Ok(());
        }
        self.convergence.spot_checked = state;
        self.check_spot_preference(seen)
    }

    /// Notes, per node, when the set of pods bound to it last changed or its NodeClaim
    /// became initialized (Karpenter counts that as a pod event too).
    fn track_pod_events(&mut self, seen: &Sight<'_>) {
        let mut sets: BTreeMap<&str, DefaultHasher> = BTreeMap::new();
        for c in seen.api.nodeclaims.values() {
            let Some(status) = &c.object.status else {
                continue;
            };
            let initialized =
                (status.conditions.iter()).any(|k| k.type_ == "Initialized" && k.status == "True");
            if let Some(node) = status.node_name.as_deref().filter(|_| initialized) {
                true.hash(sets.entry(node).or_default());
            }
        }
        for (key, p) in &seen.api.pods {
            if let Some(node) = &p.node {
                key.hash(sets.entry(node.as_str()).or_default());
            }
        }
        let now = seen.now;
        let tracked = &mut self.convergence.pod_sets;
        tracked.retain(|node, _| seen.api.nodes.get(node).is_some());
        for (node, _) in seen.api.nodes.iter() {
            let set = sets.get(node.as_str()).map_or(0, Hasher::finish);
            match tracked.get_mut(node) {
                Some((seen, _)) if *seen == set => {}
                Some(entry) => *entry = (set, now),
                None => {
                    tracked.insert(node.clone(), (set, now));
                }
            }
        }
    }

    /// A hash of the stored objects a disruption pass reads (and the offerings the
    /// controllers remember as unavailable, which no object holds), with consolidateAfter,
    /// do-not-disrupt durations and budget schedules evaluated at now.
    fn fingerprint(&self, seen: &Sight<'_>) -> u64 {
        let now = seen.now;
        let mut h = DefaultHasher::new();
        for (name, n) in seen.api.nodes.iter() {
            name.hash(&mut h);
            n.provider_id.hash(&mut h);
            n.labels.hash(&mut h);
            n.annotations.hash(&mut h);
            n.conditions.hash(&mut h);
            format!("{:?}{:?}", n.taints, n.allocatable).hash(&mut h);
            n.ready.hash(&mut h);
            let pool =
                (n.labels.get(labels::NODEPOOL)).and_then(|p| seen.api.objects.node_pools.get(p));
            let last_pod_event = self.convergence.last_pod_event(name);
            let consolidatable = pool.zip(last_pod_event).is_some_and(|(np, at)| {
                match np.spec.disruption.consolidate_after {
                    NillableDuration::After(d) => now >= at + d,
                    NillableDuration::Never => false,
                }
            });
            consolidatable.hash(&mut h);
        }
        for (name, c) in &seen.api.nodeclaims {
            name.hash(&mut h);
            c.deleting.is_some().hash(&mut h);
            c.object.metadata.labels.hash(&mut h);
            c.object.metadata.annotations.hash(&mut h);
            if let Some(status) = &c.object.status {
                status.node_name.hash(&mut h);
                status.provider_id.hash(&mut h);
                for k in &status.conditions {
                    (&k.type_, &k.status).hash(&mut h);
                }
            }
        }
        for (key, p) in &seen.api.pods {
            key.hash(&mut h);
            p.node.hash(&mut h);
            p.pod.metadata.annotations.hash(&mut h);
            pod_blocks(&p.pod, p.started(), now).hash(&mut h);
        }
        let unix = EPOCH_UNIX + now.as_secs();
        for (name, np) in &seen.api.objects.node_pools {
            name.hash(&mut h);
            serde_json::to_string(&np.spec)
                .unwrap_or_default()
                .hash(&mut h);
            for b in &np.spec.disruption.budgets {
                let open = match (&b.schedule, b.duration) {
                    (Some(s), Some(d)) => {
                        CronSchedule::parse(s).is_ok_and(|c| c.active_at(unix, d.0))
                    }
                    _ => true,
                };
                open.hash(&mut h);
            }
        }
        for (name, class) in &seen.api.objects.node_classes {
            name.hash(&mut h);
            serde_json::to_string(&class.spec)
                .unwrap_or_default()
                .hash(&mut h);
        }
        seen.api
            .objects
            .daemonsets
            .keys()
            .for_each(|k| k.hash(&mut h));
        for (key, pdb) in &seen.api.objects.pdbs {
            key.hash(&mut h);
            serde_json::to_string(&pdb.spec)
                .unwrap_or_default()
                .hash(&mut h);
            (pdb.status.as_ref())
                .map(|s| s.disruptions_allowed)
                .hash(&mut h);
        }
        // the offerings Kerf remembers as unavailable change as refusals come and go out of
        // its memory
        (self.convergence.refusals.iter())
            .filter(|at| now < **at + TTL)
            .for_each(|at| at.hash(&mut h));
        h.finish()
    }
}

impl Sight<'_> {
    /// The longest consolidateAfter of the NodePools that consolidate at all.
    pub(super) fn longest_consolidate_after(&self) -> Option<Duration> {
        (self.api.objects.node_pools.values())
            .filter_map(|np| match np.spec.disruption.consolidate_after {
                NillableDuration::After(d) => Some(d),
                NillableDuration::Never => None,
            })
            .max()
    }
}
