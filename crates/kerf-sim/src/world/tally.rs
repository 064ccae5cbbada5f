//! What a run adds up for its report as it goes: cost and node-seconds, the cost lower
//! bound, the longest waits, the timeline's samples and the NodeClaims taken away; and the
//! report it makes of them at the end. It reads nothing of Kerf's: [`super::World`] feeds
//! it what the API server and the cloud did, and it reads their state, given to each call.

use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;
use std::time::Duration;

use kerf_api::labels;
use kerf_core::cluster::PodOwner;

use super::api_server::{ApiServer, StoredNodeClaim};
use crate::cloud::{Cloud, Instance};
use crate::log::Log;
use crate::report::{FinalNode, LONGEST_WAITS, PoolSample, Removal, Report, Sample, Totals, Wait};
use crate::scenario::Scenario;

/// The report's running sums and records.
pub(super) struct Tally {
    /// The cost lower bound's rate ($/hour) for the pods and NodePools at the last sample,
    /// and whether either changed since.
    pub floor: (f64, bool),
    /// Cost bounds worked out since the NodePools, classes, overlays or daemonsets last
    /// changed, by the workload's fingerprint ([`super::World::workload_fingerprint`]): pods
    /// evicted and made again bring back a workload already bounded.
    pub floors: HashMap<(u64, usize), f64>,
    /// The NodeClaims Kerf took away, in the order it decided to.
    pub removals: Vec<Removal>,
    /// One sample per interval.
    pub timeline: Vec<Sample>,
    /// The report's totals so far.
    pub totals: Totals,
    /// The pod that waited longest for a node so far.
    pub slowest_pod: Option<String>,
    /// The longest waits for a node so far, longest first.
    pub longest_waits: Vec<Wait>,
    /// Seconds of every node's life so far, and of spot nodes'.
    pub node_seconds: f64,
    pub spot_node_seconds: f64,
    /// Up to when cost and node-seconds are added up.
    pub last_accrual: Duration,
    /// When the run starts on the simulated clock: zero, or for a run from a standing
    /// cluster the age of its oldest NodeClaim (the controllers' clock cannot go back past
    /// its epoch, and that NodeClaim was created at it). Reports count from here.
    pub origin: Duration,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally {
            // no bound is worked out yet: the first sample works one out
            floor: (0.0, true),
            floors: HashMap::default(),
            removals: Vec::new(),
            timeline: Vec::new(),
            totals: Totals::default(),
            slowest_pod: None,
            longest_waits: Vec::new(),
            node_seconds: 0.0,
            spot_node_seconds: 0.0,
            last_accrual: Duration::ZERO,
            origin: Duration::ZERO,
        }
    }
}

impl Tally {
    /// Simulated time since the run's start, in seconds, as reports count it.
    pub fn since_start(&self, t: Duration) -> f64 {
        t.saturating_sub(self.origin).as_secs_f64()
    }

    /// Adds cost and node-seconds of the cloud's instances up to `t`.
    pub fn accrue(&mut self, t: Duration, cloud: &Cloud) {
        let dt = t.saturating_sub(self.last_accrual).as_secs_f64();
        if dt > 0.0 {
            // the bound's rate as last sampled: its time integral is the run's floor
            self.totals.lower_bound_cost += self.floor.0 * dt / 3600.0;
            for (_, i) in cloud.instances.values() {
                self.totals.cost += i.price_per_hour * dt / 3600.0;
                self.node_seconds += dt;
                if i.capacity_type == labels::CAPACITY_TYPE_SPOT {
                    self.spot_node_seconds += dt;
                }
            }
        }
        self.last_accrual = t;
    }

    /// A workload pod's wait for a node, pending since `since`, ends (or is counted to the
    /// end of the run) at `now`.
    pub fn waited(&mut self, pod: &str, since: Duration, now: Duration) {
        let waited = now.saturating_sub(since).as_secs_f64();
        if waited > self.totals.max_pod_pending_seconds {
            self.totals.max_pod_pending_seconds = waited;
            self.slowest_pod = Some(pod.to_string());
        }
        let wait = Wait {
            pod: pod.to_string(),
            since: self.since_start(since),
            until: self.since_start(now),
        };
        self.wait(wait);
    }

    /// Kerf decided to take the NodeClaim away (a command's `reason`, or its deletion):
    /// recorded once, at the first.
    pub fn removing(
        &mut self,
        claim: &str,
        reason: &str,
        api: &ApiServer,
        cloud: &Cloud,
        now: Duration,
    ) {
        if self.removals.iter().any(|r| r.nodeclaim == claim) {
            return;
        }
        let instance = (cloud.instances.values()).find(|(c, _)| c == claim);
        let instance_type = instance
            .map(|(_, i)| i.instance_type.clone())
            .unwrap_or_default();
        let node = (api.nodes.iter())
            .find(|(_, n)| instance.is_some_and(|(_, i)| i.provider_id == n.provider_id))
            .map(|(name, _)| name.clone());
        let nodepool = (api.nodeclaims.get(claim))
            .and_then(StoredNodeClaim::pool)
            .unwrap_or_default()
            .to_string();
        self.removals.push(Removal {
            nodeclaim: claim.to_string(),
            node,
            nodepool,
            instance_type,
            reason: reason.to_string(),
            decided: self.since_start(now),
            terminated: None,
        });
    }

    /// A disruption command on the node was rolled back (its taint removed) before its
    /// NodeClaim was deleted: it is not being taken away after all.
    pub fn not_removing(&mut self, node: &str, api: &ApiServer) {
        let deleting =
            |claim: &str| (api.nodeclaims.get(claim)).is_some_and(|c| c.deleting.is_some());
        self.removals.retain(|r| {
            r.node.as_deref() != Some(node) || r.terminated.is_some() || deleting(&r.nodeclaim)
        });
    }

    /// The instance launched for `claim` was terminated at `now`.
    pub fn terminated(&mut self, claim: &str, now: Duration) {
        let now = self.since_start(now);
        for r in (self.removals.iter_mut()).filter(|r| r.nodeclaim == claim) {
            r.terminated.get_or_insert(now);
        }
        self.totals.nodes_terminated += 1;
    }

    /// Samples the cloud's instances for the timeline, with `pending` pods waiting.
    pub fn sample(&mut self, api: &ApiServer, cloud: &Cloud, pending: usize, now: Duration) {
        let spot = (cloud.instances.values())
            .filter(|(_, i)| i.capacity_type == labels::CAPACITY_TYPE_SPOT)
            .count();
        let mut by_pool: BTreeMap<(String, String), (usize, f64)> = BTreeMap::new();
        for (claim, i) in cloud.instances.values() {
            let pool = (api.nodeclaims.get(claim))
                .and_then(|o| o.pool())
                .unwrap_or_default()
                .to_string();
            let entry = by_pool.entry((pool, i.capacity_type.clone())).or_default();
            entry.0 += 1;
            entry.1 += i.price_per_hour;
        }
        self.timeline.push(Sample {
            t: self.since_start(now),
            nodes: cloud.instances.len(),
            spot_nodes: spot,
            pending_pods: pending,
            cost_per_hour: (cloud.instances.values())
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

    /// The run's report at its end (`now`): the pods still pending count their wait until
    /// then, and the cloud's instances are listed as the API server names them.
    pub fn report(
        mut self,
        end: End<'_>,
        scenario: &Scenario,
        log: &mut Log,
        metrics: String,
    ) -> Report {
        let End {
            api,
            cloud,
            pending,
            now,
        } = end;
        let workload = |p: &super::api_server::StoredPod| p.owner != PodOwner::DaemonSet;
        let waiting: Vec<(&String, Duration)> = (api.pods.iter())
            .filter(|(_, p)| p.node.is_none() && workload(p))
            .map(|(k, p)| (k, p.pending_since))
            .collect();
        for (k, since) in &waiting {
            self.waited(k, *since, now);
        }
        self.sample(api, cloud, pending, now);
        self.totals.spot_node_seconds_share = if self.node_seconds > 0.0 {
            self.spot_node_seconds / self.node_seconds
        } else {
            0.0
        };
        self.totals.slowest_pod = self.slowest_pod.clone();
        // the cloud's instances, named as the API server has them: the NodeClaim's status
        // names its Node, else the Node its kubelet registered does
        let mut launched: Vec<&(String, Instance)> = cloud.instances.values().collect();
        launched.sort_by(|a, b| a.0.cmp(&b.0));
        let mut nodes = Vec::new();
        for (name, i) in launched {
            let stored = api.nodeclaims.get(name);
            let node = (stored.and_then(|c| c.object.status.as_ref()))
                .and_then(|s| s.node_name.clone())
                .or_else(|| {
                    (api.nodes.iter())
                        .find(|(_, n)| n.provider_id == i.provider_id)
                        .map(|(node, _)| node.clone())
                })
                .unwrap_or_else(|| name.clone());
            let mut pods: Vec<String> = (api.pods.iter())
                .filter(|(_, p)| p.node.as_deref() == Some(&node) && workload(p))
                .map(|(k, _)| k.clone())
                .collect();
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
        let pending = waiting.into_iter().map(|(k, _)| k.clone()).collect();
        let mut report = Report::new(
            scenario,
            nodes,
            pending,
            self.totals,
            self.timeline,
            self.longest_waits,
            log.take(),
        );
        report.removals = self.removals;
        report.started_at = crate::clock::rfc3339(self.origin);
        report.metrics = metrics;
        report
    }

    /// Keeps a wait that ended if it is among the longest.
    pub fn wait(&mut self, wait: Wait) {
        let length = |w: &Wait| w.until - w.since;
        if length(&wait) <= 0.0 {
            return;
        }
        self.longest_waits.push(wait);
        self.longest_waits
            .sort_by(|a, b| length(b).total_cmp(&length(a)).then(a.pod.cmp(&b.pod)));
        self.longest_waits.truncate(LONGEST_WAITS);
    }
}

/// The cluster as a run ends: what its report is made of.
pub(super) struct End<'a> {
    /// The objects stored.
    pub api: &'a ApiServer,
    /// The instances running.
    pub cloud: &'a Cloud,
    /// How many pods kube-scheduler's stand-in still has pending.
    pub pending: usize,
    /// The end of the run on the simulated clock.
    pub now: Duration,
}
