//! The invariants `--check` holds the run to, checked at every step: no over-commitment,
//! taints and selectors, NodePool limits at launch, launch results and registration, budgets,
//! evictions that respect PodDisruptionBudgets and do-not-disrupt, and no pod waiting long
//! while capacity exists.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kerf_api::nodeclaim::condition_types::{INITIALIZED, INSTANCE_TERMINATING};
use kerf_api::nodepool::DisruptionReason;
use kerf_api::{Taint, labels};
use kerf_core::cluster::PodOwner;

use crate::world::api_server::StoredPod;
use kerf_core::controllers::list_text;

use super::oracle::{PodView, blocking_pdb, budget_room};
use super::{Checkers, REGISTRATION_TTL, Sight, SimError};
use crate::clock::EPOCH_UNIX;
use crate::kube_scheduler::{Amounts, add, node_affinity_matches, requests, untolerated};

/// What `--check` holds a run to, as a user reads it.
pub const INVARIANTS: [&str; 19] = [
    "no node over-committed",
    "taints and node selectors honoured",
    "no NodeClaim launched over its NodePool's limits",
    "instances launched only for stored NodeClaims, each given a launch result or deleted",
    "every launched NodeClaim registers or is cleaned up",
    "disruption budgets never exceeded",
    "no eviction past a PodDisruptionBudget",
    "no do-not-disrupt pod evicted",
    "pods evicted only from nodes the API server holds tainted karpenter.sh/disrupted",
    "a NodeClaim being deleted has its node tainted karpenter.sh/disrupted within a minute",
    "no pod waiting long while capacity exists",
    "no pod pending over 15 minutes that a NodePool could host",
    "static NodePools end at their replicas",
    "every instance priced as its NodeOverlays say",
    "every NodeClaim meets its NodePool's minValues, or says it was relaxed (BestEffort)",
    "no capacity reservation over its count; capacity blocks drained 40 minutes before their end",
    "consolidation converges when the cluster is quiet",
    "empty nodes deleted once past consolidateAfter",
    "spot preferred over on-demand fallback",
];

/// How long the writes that clean up an unregistered NodeClaim may take after its
/// registration timeout: their retries through an API server that refuses some of them.
const CLEANUP_SLACK: Duration = Duration::from_secs(60);
/// How long a NodeClaim object may go without a launch result: Karpenter's launch timeout
/// (5 minutes), and a minute for the deletion or the status write to go out.
const LAUNCH_RESULT: Duration = Duration::from_secs(6 * 60);
/// How often `--check` looks for pods waiting too long (each look may solve).
const WAIT_CHECK_EVERY: Duration = Duration::from_secs(30);
/// How long Karpenter keeps a pod nominated to a NodeClaim's node that kube-scheduler
/// has not bound it to (its cluster state's nomination window: 20 s, twice the 10 s batch).
const NOMINATION_WINDOW: Duration = Duration::from_secs(20);
/// Slack on top of launch and ready delays before a wait counts as too long: the batch
/// window (at most 10 s) and a minute for disruption and binding to catch up.
const WAIT_SLACK: Duration = Duration::from_secs(70);

impl Checkers {
    /// Bindings, requests and registration, looked at after every settled step.
    pub(in crate::world) fn check_step(&mut self, seen: &Sight<'_>) -> Result<(), SimError> {
        // requests added up again from the pod objects, not the cluster's running totals
        let mut requested: BTreeMap<&str, Amounts> = BTreeMap::new();
        for (k, p) in &seen.api.pods {
            let Some(node) = &p.node else { continue };
            let Some(n) = seen.api.nodes.get(node) else {
                return Err(seen.violation(format!(
                    "pod {k} is bound to node {node}, which does not exist"
                )));
            };
            add(requested.entry(node).or_default(), &requests(p.declared()));
            if p.owner == PodOwner::DaemonSet {
                continue;
            }
            // the disrupted taint arrives after binding: it keeps new pods off, not old ones
            let scheduling_taints: Vec<Taint> = n
                .taints
                .iter()
                .filter(|t| t.key != labels::DISRUPTED_TAINT_KEY)
                .cloned()
                .collect();
            if untolerated(p.declared(), &scheduling_taints) {
                return Err(seen.violation(format!(
                    "pod {k} is bound to node {node} with a taint it does not tolerate"
                )));
            }
            if !node_affinity_matches(p.declared(), &n.labels) {
                return Err(seen.violation(format!(
                    "pod {k} is bound to node {node}, which its node selector or required \
                     node affinity rules out"
                )));
            }
        }
        for (name, used) in requested {
            let Some(allocatable) = seen.api.nodes.get(name).map(|n| &n.amounts) else {
                continue;
            };
            if let Some((r, v)) = used
                .iter()
                .find(|(r, v)| **v > allocatable.get(*r).copied().unwrap_or(0))
            {
                return Err(seen.violation(format!(
                    "node {name} is over-committed: its pods request {} of {r} (thousandths), \
                     allocatable is {}",
                    v,
                    allocatable.get(r).copied().unwrap_or(0)
                )));
            }
        }
        // read from the stored NodeClaims: one whose instance no kubelet ever registered is
        // deleted within the registration TTL (the cleanup's writes may wait out an
        // API-server fault, hence the slack), whatever Kerf believes of it
        let back = seen.api_back();
        for (name, c) in &seen.api.nodeclaims {
            let launched = (c.object.status.as_ref())
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| !p.is_empty());
            let since = c.created.max(back);
            if launched
                && !c.node_registered
                && seen.now.saturating_sub(since) > REGISTRATION_TTL + CLEANUP_SLACK
            {
                return Err(seen.violation(format!(
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
    /// Every [`WAIT_CHECK_EVERY`], [`World::check_waits`].
    pub(in crate::world) fn check_waits_now(&mut self, seen: &Sight<'_>) -> Result<(), SimError> {
        if seen.now < self.waits_checked + WAIT_CHECK_EVERY {
            return Ok(());
        }
        self.waits_checked = seen.now;
        self.check_launch_results(seen)?;
        self.check_drains_tainted(seen)?;
        self.check_waits(seen)
    }

    /// Every NodeClaim the API server holds as being deleted has its node tainted
    /// `karpenter.sh/disrupted:NoSchedule` within [`CLEANUP_SLACK`] of its deletion (or of
    /// the API server's return): Karpenter's termination taints before anything else. Read
    /// from the stored NodeClaims and Nodes, not from Kerf.
    pub(in crate::world) fn check_drains_tainted(&self, seen: &Sight<'_>) -> Result<(), SimError> {
        // no write reaches a down API server: the minute counts from its return (swarm seed
        // 40030: a deletion two seconds before an outage)
        if seen.api_down().is_some() {
            return Ok(());
        }
        let back = seen.api_back();
        for (name, c) in &seen.api.nodeclaims {
            let Some(deleting) = c.deleting else { continue };
            let node = (c.object.status.as_ref()).and_then(|s| s.node_name.as_deref());
            let Some((node, n)) = node.and_then(|n| Some((n, seen.api.nodes.get(n)?))) else {
                continue;
            };
            let since = deleting.max(back);
            if !n.disrupted() && seen.now.saturating_sub(since) > CLEANUP_SLACK {
                return Err(seen.violation(format!(
                    "nodeclaim {name} has been deleting since {} but its node {node} is not \
                     tainted {}:NoSchedule",
                    crate::clock::rfc3339(deleting),
                    labels::DISRUPTED_TAINT_KEY
                )));
            }
        }
        Ok(())
    }

    /// At the end, with the StaticCapacity gate on, a static NodePool has no more NodeClaims
    /// (not being deleted, drifted or marked ones waiting for their replacement aside) than
    /// its replicas and `limits.nodes` allow; and exactly that many when it has launched one
    /// at all and nothing was in the way in the run's last ten minutes (a NodePool change, a
    /// capacity window, an API-server outage, a restart).
    /// Counted from the stored NodeClaim objects' labels.
    pub(in crate::world) fn check_static_pools(&self, seen: &Sight<'_>) -> Result<(), SimError> {
        if !seen.scenario.spec.feature_gates.static_capacity {
            return Ok(());
        }
        let spec = &seen.scenario.spec;
        let since = seen.now.saturating_sub(Duration::from_secs(600));
        let disturbed = self.pools_changed_at > since
            || (spec.cloud.insufficient_capacity.iter()).any(|w| w.overlaps(since, seen.now))
            || (spec.api_server.outages.iter()).any(|o| o.until.0 > since)
            || (spec.operator_restarts.iter()).any(|r| r.0 > since);
        for (name, np) in &seen.api.objects.node_pools {
            let Some(replicas) = np.spec.replicas else {
                continue;
            };
            let limit = (np.spec.limits.get("nodes")).map_or(i64::MAX, |q| {
                i64::try_from(q.milli() / 1000).unwrap_or(i64::MAX)
            });
            let want = replicas.min(limit);
            let of_pool = |c: &&super::StoredNodeClaim| c.pool() == Some(name.as_str());
            let stored: Vec<_> = seen.api.nodeclaims.values().filter(of_pool).collect();
            let have = stored.iter().filter(|c| c.deleting.is_none()).count();
            let have = i64::try_from(have).unwrap_or(i64::MAX);
            let launched_any = stored
                .iter()
                .any(|c| (c.object.status.as_ref()).is_some_and(|s| s.provider_id.is_some()));
            // StaticDrift and repair replace first: a drifted NodeClaim, or one whose node a
            // repair command marked (tainted `karpenter.sh/disrupted`), stays until its
            // replacement is initialized, one over the count meanwhile (repair's static branch
            // stages the replacement for a node that never initialized too: seed 80363, read
            // against Karpenter v1.15.0's `disruption/repair.go`)
            let marked = |c: &super::StoredNodeClaim| {
                (c.object.status.as_ref())
                    .and_then(|s| s.node_name.as_deref())
                    .and_then(|n| seen.api.nodes.get(n))
                    .is_some_and(|n| n.disrupted())
            };
            let replacing = (stored.iter())
                .filter(|c| c.deleting.is_none())
                .filter(|c| c.condition_true("Drifted") || marked(c))
                .count();
            let replacing = i64::try_from(replacing).unwrap_or(i64::MAX);
            // Karpenter's static provisioning reserves node slots under `limits.nodes` counting
            // the NodeClaims still being deleted (draining ones included): while they hold the
            // limit, no replacement may be made (seed 70128, read against Karpenter v1.15)
            let held = i64::try_from(stored.len()).unwrap_or(i64::MAX);
            let room = held < limit;
            if have - replacing > want || (have < want && room && launched_any && !disturbed) {
                return Err(seen.violation(format!(
                    "static nodepool {name} has {have} nodeclaims at the end; its replicas \
                     and node limit ask for {want}"
                )));
            }
        }
        Ok(())
    }

    /// Every NodeClaim object the API server holds gets its launch result written (a
    /// provider id in its status) or is deleted within Karpenter's launch timeout, counted
    /// from its creation or the end of the last API-server outage, whatever Kerf saw of its
    /// own writes (a lost answer, a restart). Read from the stored objects, not from Kerf.
    pub(in crate::world) fn check_launch_results(&self, seen: &Sight<'_>) -> Result<(), SimError> {
        let now = seen.now;
        let back = seen.api_back();
        for (name, c) in &seen.api.nodeclaims {
            let launched = (c.object.status.as_ref())
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| !p.is_empty());
            let since = c.created.max(back);
            if !launched && c.deleting.is_none() && now.saturating_sub(since) > LAUNCH_RESULT {
                return Err(seen.violation(format!(
                    "nodeclaim {name}, created at {}, has had no launch result for {}s and was \
                     not deleted",
                    crate::clock::rfc3339(c.created),
                    now.saturating_sub(since).as_secs()
                )));
            }
        }
        Ok(())
    }

    pub(in crate::world) fn check_waits(&mut self, seen: &Sight<'_>) -> Result<(), SimError> {
        let cloud = &seen.scenario.spec.cloud;
        // three launches: kube-scheduler may bind another pod into the room a pod was
        // nominated to (the real one ignores Karpenter's nominations too), and the pod then
        // waits out the nomination grace and a second launch; with spread constraints, which
        // kube-scheduler counts over the nodes that exist and Karpenter over the zones it
        // may launch in, the room of that second launch can be taken again (swarm seed 1019)
        let launch = cloud.launch_delay.0
            + cloud.launch_jitter.0
            + cloud.ready_delay.0
            + cloud.ready_jitter.0;
        let bound = launch * 3 + NOMINATION_WINDOW + WAIT_SLACK;
        let now = seen.now;
        let faults = &self.faults;
        let late = seen.waiting(|k, p| {
            now.saturating_sub(self.wait_start(k, p)) > bound
                && !cloud
                    .insufficient_capacity
                    .iter()
                    .any(|w| w.overlaps(p.pending_since, now))
                && !(faults.iter())
                    .any(|f| f.from <= now && f.until > p.pending_since && f.reaches(p))
                && !self.launching_for(seen, k, bound)
        });
        // judged apart from Kerf: new nodes of the NodePools would take the pods
        let hostable = if late.iter().all(|k| self.unhostable.contains(k)) {
            Vec::new()
        } else {
            self.hostable_on_new_nodes(seen, &late)
        };
        if !hostable.is_empty() {
            return Err(seen.violation(format!(
                "pods waiting over {}s for a node although capacity exists: {}",
                bound.as_secs(),
                list_text(&hostable)
            )));
        }
        // which waiting pods no NodePool could host now (their limits reached): when room
        // is freed later, their wait starts again there (swarm seed 1109)
        let waiting = seen.waiting(|_, _| true);
        // worked out again when room was freed too: whether the room made a pod hostable
        // is known then, not at a later look that something else prompted
        if waiting != self.waiting_seen || self.room_freed_at > self.unhostable_seen_at {
            let room_for: BTreeSet<String> = self
                .hostable_on_new_nodes(seen, &waiting)
                .into_iter()
                .collect();
            let unhostable: BTreeSet<String> = waiting
                .iter()
                .filter(|k| !room_for.contains(*k))
                .cloned()
                .collect();
            // a pod that was unhostable at the last look and no longer is became hostable in
            // between: when room was freed, not when it became pending (the set may be
            // worked out again only later), if that was since the last look; room freed
            // before it did not make the pod hostable then, so something the room does not
            // show did since (a pod of its zone spread evicted, swarm seed 140683), now at
            // the latest
            let freed = self.room_freed_at;
            let since = if freed > self.unhostable_seen_at {
                freed
            } else {
                seen.now
            };
            for k in self.unhostable.difference(&unhostable) {
                self.rehostable.insert(k.clone(), since);
            }
            self.unhostable_seen_at = seen.now;
            self.rehostable
                .retain(|k, _| waiting.binary_search(k).is_ok());
            self.unhostable = unhostable;
            self.waiting_seen = waiting;
        }
        Ok(())
    }

    /// Every pending pod a NodePool could host must not have waited long.
    pub(in crate::world) fn check_end(&mut self, seen: &Sight<'_>) -> Result<(), SimError> {
        self.check_step(seen)?;
        self.check_static_pools(seen)?;
        let now = seen.now;
        // a pod that waited through an insufficient-capacity window may have needed just
        // that capacity: the end check leaves it to the in-run wait check, which knows
        let windows = &seen.scenario.spec.cloud.insufficient_capacity;
        let faults = &self.faults;
        // as in the wait check (swarm seed 10050)
        let stale = seen.waiting(|k, p| {
            now.saturating_sub(self.wait_start(k, p)) > REGISTRATION_TTL
                && !windows.iter().any(|w| w.overlaps(p.pending_since, now))
                && !(faults.iter()).any(|f| f.until > p.pending_since && f.reaches(p))
        });
        if stale.is_empty() {
            return Ok(());
        }
        // judged apart from Kerf: a new node of some NodePool would take the pod
        let hostable = self.hostable_on_new_nodes(seen, &stale);
        if hostable.is_empty() {
            Ok(())
        } else {
            Err(seen.violation(format!(
                "pods pending for over 15 minutes that a NodePool could host: {}",
                list_text(&hostable)
            )))
        }
    }

    /// When a waiting pod's wait for a node counts from: it became pending, or a NodePool
    /// or EC2NodeClass changed since (it may have become hostable then), or, for a pod no
    /// NodePool could host at the last look (their limits reached) or at an earlier look
    /// during this wait, room was freed since.
    fn wait_start(&self, key: &str, p: &StoredPod) -> Duration {
        let since = p
            .pending_since
            .max(self.pools_changed_at)
            .max(self.rehostable.get(key).copied().unwrap_or_default());
        if self.unhostable.contains(key) {
            since.max(self.room_freed_at)
        } else {
            since
        }
    }

    /// Whether a NodeClaim made for the pod is still on its way: stored, not being deleted,
    /// not initialized, and made within `bound` (a claim older than a whole wait is not on its
    /// way, and Kerf making one fresh claim after another for the pod excuses nothing). A
    /// NodePool's limit may have kept the pod waiting until room was freed for that launch,
    /// while another pod had been the one the checker thought blocked (swarm seed 10102).
    fn launching_for(&self, seen: &Sight<'_>, key: &str, bound: Duration) -> bool {
        let initialized = |c: &super::StoredNodeClaim| c.condition_true(INITIALIZED);
        // the nomination is Kerf's (in memory, as Karpenter's: shown the checkers as is);
        // the claim is read from the API server
        (seen.nominations.get(key))
            .and_then(|c| seen.api.nodeclaims.get(c))
            .is_some_and(|c| {
                !initialized(c)
                    && c.deleting.is_none()
                    && seen.now.saturating_sub(c.created) <= bound
            })
    }

    /// No voluntary disruption takes more of a NodePool's nodes than its budgets allow,
    /// counted from the stored Nodes and NodeClaims.
    pub(in crate::world) fn check_budgets(
        &self,
        seen: &Sight<'_>,
        reason: DisruptionReason,
        nodes: &[String],
    ) -> Result<(), SimError> {
        let of: BTreeMap<&str, (&super::StoredNodeClaim, &str)> = (seen.api.nodes.iter())
            .filter_map(|(n, _)| Some((n.as_str(), seen.stored_claim_of_node(n)?)))
            .collect();
        let pools: BTreeSet<&str> = nodes
            .iter()
            .filter_map(|n| of.get(n.as_str()).map(|(_, p)| *p))
            .collect();
        for pool in pools {
            let Some(np) = seen.api.objects.node_pools.get(pool) else {
                continue;
            };
            // the nodes Karpenter's budgets count: initialized ones (`NodePoolStatsFromNodes`;
            // a NodeClaim whose node never initialized takes no budget, deleted or not, swarm
            // seed 450921), but those whose NodeClaim's instance is already terminating (its
            // stored `InstanceTerminating` condition: drained, its instance deleted; counted,
            // such a node took a percentage budget's last room, swarm seed 60292). Of those
            // going, only deletions are counted here, fewer than Karpenter counts (it adds
            // nodes not Ready and marked ones), so that the room this allows is never less
            // than Karpenter's
            let initialized = |n: &str| {
                (seen.api.nodes.get(n)).is_some_and(|n| {
                    n.labels
                        .get(labels::INITIALIZED)
                        .is_some_and(|v| v == "true")
                })
            };
            let of_pool: Vec<(&str, bool)> = (of.iter())
                .filter(|(n, (c, p))| {
                    // (one of this command's own was counted when it was decided)
                    let terminating = c.condition_true(INSTANCE_TERMINATING)
                        && !nodes.iter().any(|m| m.as_str() == **n);
                    *p == pool && initialized(n) && !terminating
                })
                .map(|(n, (c, _))| (*n, c.deleting.is_some()))
                .collect();
            // disruptions in progress besides this command's (whose deletions may already
            // have started by the time the shell sees the command)
            let deleting = (of_pool.iter())
                .filter(|(n, deleting)| *deleting && !nodes.iter().any(|m| m == n))
                .count();
            // node repair takes a node that never initialized without its NodePool's budget:
            // it runs nothing to protect (Karpenter v1.15, disruption/repair.go)
            let budgeted = |c: &super::StoredNodeClaim| {
                reason != DisruptionReason::Unhealthy || c.condition_true(INITIALIZED)
            };
            let mine = (nodes.iter())
                .filter(|n| {
                    of.get(n.as_str())
                        .is_some_and(|(c, p)| *p == pool && budgeted(c))
                })
                .count();
            let allowed = budget_room(
                np,
                reason,
                of_pool.len() as i64,
                deleting as i64,
                (EPOCH_UNIX + seen.now.as_secs()) as i64,
            );
            if mine as i64 > allowed {
                return Err(seen.violation(format!(
                    "disruption of {mine} nodes of nodepool {pool} exceeds its budget of {allowed}"
                )));
            }
        }
        Ok(())
    }

    /// A NodeClaim launches only while its NodePool stays within its limits with it (a
    /// limit lowered below what is running stops launches; it removes nothing), every
    /// resource the limits name counted over the cloud's instances of the NodePool whose
    /// NodeClaims are stored, not being deleted and not tainted by a disruption command
    /// (their capacity) and `nodes` as their number.
    pub(in crate::world) fn check_limits(
        &self,
        seen: &Sight<'_>,
        nodeclaim: &str,
    ) -> Result<(), SimError> {
        let pool_of = |claim: &str| {
            (seen.api.nodeclaims.get(claim))
                .and_then(|c| c.pool())
                .map(str::to_string)
        };
        if !seen.cloud.instances.values().any(|(c, _)| c == nodeclaim) {
            return Ok(());
        }
        let Some(pool) = pool_of(nodeclaim) else {
            return Ok(());
        };
        let Some(np) = seen.api.objects.node_pools.get(&pool) else {
            return Ok(());
        };
        // Karpenter checks limits when the provisioner makes a NodeClaim, never at launch
        // (nodeclaim/lifecycle/launch.go): one asked for before a NodePool changed (its create
        // held back by an outage, swarm seed 31034) launches under the limits it was made in
        if (seen.api.nodeclaims.get(nodeclaim)).is_some_and(|c| c.asked < self.pools_changed_at) {
            return Ok(());
        }
        // Karpenter counts only active nodes against the limits: a NodeClaim being deleted,
        // or gone while its instance still terminates, or whose node a disruption command
        // has tainted, frees its share at once (`state.Cluster` leaves nodes marked for
        // deletion out of a NodePool's resources, a command marks its candidates as it
        // taints them, and the scheduler is given `nodes.Active()`; swarm seed 340616)
        let active = |claim: &str| {
            (seen.api.nodeclaims.get(claim)).is_some_and(|c| {
                let node = (c.object.status.as_ref()).and_then(|s| s.node_name.as_deref());
                let disrupted = node.and_then(|n| seen.api.nodes.get(n)).is_some_and(|n| {
                    (n.taints.iter()).any(|t| t.key == labels::DISRUPTED_TAINT_KEY)
                });
                c.deleting.is_none() && !disrupted
            })
        };
        let mut used = Amounts::new();
        let mut count = 0;
        for (claim, instance) in seen.cloud.instances.values() {
            if pool_of(claim).as_ref() == Some(&pool) && active(claim) {
                add(&mut used, &super::allocatable_amounts(&instance.capacity));
                count += 1;
            }
        }
        used.insert("nodes".into(), count * 1000);
        for (resource, limit) in &np.spec.limits {
            let (u, l) = (used.get(resource).copied().unwrap_or(0), limit.milli());
            if u > l {
                return Err(seen.violation(format!(
                    "nodeclaim {nodeclaim} launched although it takes nodepool {pool} over its \
                     {resource} limit: {u} > {l} (thousandths)"
                )));
            }
        }
        Ok(())
    }

    /// No do-not-disrupt pod is evicted, and no PodDisruptionBudget is broken.
    pub(in crate::world) fn check_eviction(
        &self,
        seen: &Sight<'_>,
        pod: &str,
    ) -> Result<(), SimError> {
        let Some(p) = seen.api.pods.get(pod) else {
            return Ok(());
        };
        let annotation = p
            .pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::DO_NOT_DISRUPT));
        // Karpenter's `IsDoNotDisruptActive`: a positive duration counts from the pod's
        // `status.startTime`, and keeps a pod without one
        let blocked = match annotation.map(String::as_str) {
            Some("true") => true,
            Some(d) => kerf_api::duration::parse_go_duration(d).is_ok_and(|d| {
                !d.is_zero() && p.started().is_none_or(|start| seen.now < start + d)
            }),
            None => false,
        };
        if blocked {
            return Err(seen.violation(format!("evicted do-not-disrupt pod {pod}")));
        }
        // Karpenter's termination taints a node before it drains it: an untainted node
        // would take the evicted pods' replacements right back
        if let Some(node) = &p.node
            && seen.api.nodes.get(node).is_some_and(|n| !n.disrupted())
        {
            return Err(seen.violation(format!(
                "evicted pod {pod} from node {node}, which the API server holds without the \
                 {}:NoSchedule taint",
                labels::DISRUPTED_TAINT_KEY
            )));
        }
        let views: Vec<PodView<'_>> = (seen.api.pods.values())
            .map(|q| PodView {
                pod: &q.pod,
                healthy: q
                    .node
                    .as_ref()
                    .is_some_and(|n| seen.api.nodes.get(n).is_some_and(|n| n.ready)),
                // the simulator names a pod's controller by its workload key
                workload: super::owner_workload(&q.pod)
                    .and_then(|w| seen.workloads.specs.get_key_value(w))
                    .map(|(k, wl)| (k.as_str(), wl.replicas)),
            })
            .collect();
        if let Some(pdb) = blocking_pdb(&seen.api.objects.pdbs, &views, &p.pod) {
            return Err(seen.violation(format!(
                "evicted pod {pod} although PodDisruptionBudget {pdb} allows no disruption"
            )));
        }
        Ok(())
    }
}

impl Sight<'_> {
    /// Workload pods waiting for a node, among those `keep` selects.
    pub(super) fn waiting(&self, keep: impl Fn(&str, &StoredPod) -> bool) -> Vec<String> {
        (self.api.pods.iter())
            .filter(|(k, p)| p.node.is_none() && p.owner != PodOwner::DaemonSet && keep(k, p))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The stored NodeClaim whose status names this node, with its NodePool label.
    pub(super) fn stored_claim_of_node(
        &self,
        node: &str,
    ) -> Option<(&super::StoredNodeClaim, &str)> {
        self.api.nodeclaims.values().find_map(|c| {
            let named = (c.object.status.as_ref()).and_then(|s| s.node_name.as_deref());
            (named == Some(node)).then_some((c, c.pool()?))
        })
    }
}
