//! CapacityBuffers (Karpenter's `CapacityBuffer` gate): each buffer's shape and number are
//! worked out whenever it, its PodTemplate or its workload changes, and written in its
//! status; every provisioning pass then places the buffers' placeholder pods after the real
//! pods have been provisioned for (so real pods take the room first), launching NodeClaims
//! for the chunks that fit nowhere, and writes each buffer's `Provisioning` condition. The
//! room the placeholders hold on nodes keeps consolidation from taking those nodes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::Condition;
use kerf_api::capacitybuffer::CapacityBufferStatus;
use kerf_scheduling::resources::{Resources, pod_requests};
use serde_json::json;

use super::desk::Desk;
use super::provisioning::Packing;
use super::{Action, Controllers, Timer};
use crate::buffers::{Placed, placeholder_pods, provisioning_condition, resolved_status};

/// How often the buffers are placed again when nothing else brings a pass (Karpenter's
/// buffer controller looks at each buffer every 30 s).
pub const BUFFER_INTERVAL: Duration = Duration::from_secs(30);

/// One placeholder pod, as the solver reads it.
#[derive(Clone, Debug)]
struct Placeholder {
    pod: Arc<Pod>,
    requests: Resources,
    terms: u64,
}

/// What the buffer controller keeps between passes.
#[derive(Default)]
pub(super) struct BufferPlacement {
    /// Each ready buffer's placeholder pods, by `namespace/name`.
    placeholders: BTreeMap<String, Vec<Placeholder>>,
    /// Each buffer's `Provisioning` condition from the last pass that set it.
    provisioning: BTreeMap<String, Condition>,
    /// Each buffer's status as Kerf last wrote (or read) it.
    written: BTreeMap<String, CapacityBufferStatus>,
    /// The room the last pass's placeholders took on each node, or NodeClaim it made, by
    /// NodeClaim (a node's own name where Kerf does not manage it).
    pub(super) held: BTreeMap<String, Resources>,
    /// NodeClaims made for placeholders, with their `namespace/name`s, until launched: the
    /// solver sees no room of theirs before, so those placeholders count as placed there.
    waiting: BTreeMap<String, Vec<String>>,
}

impl BufferPlacement {
    /// A buffer, a PodTemplate or a workload changed: every buffer's shape and number are
    /// worked out again and their statuses written where they changed; true when a
    /// provisioning pass is to place them.
    pub(super) fn buffers_changed(&mut self, desk: &mut Desk, now: Duration) -> bool {
        if !desk.settings.capacity_buffer {
            return false;
        }
        let keys: Vec<String> = desk.cluster.buffers.buffers.keys().cloned().collect();
        self.placeholders.retain(|k, _| keys.contains(k));
        self.provisioning.retain(|k, _| keys.contains(k));
        self.written.retain(|k, _| keys.contains(k));
        for key in keys {
            let buffer = &desk.cluster.buffers.buffers[&key];
            let (namespace, name) = crate::cluster::split_pod_key(&key);
            let resolved = desk.cluster.buffers.resolve(namespace, &buffer.spec);
            let uid = buffer.metadata.uid.clone().unwrap_or_default();
            let pods = match &resolved {
                Ok(r) if r.replicas > 0 => placeholder_pods(namespace, name, &uid, r),
                _ => Vec::new(),
            };
            let placeholders = (pods.into_iter())
                .map(|pod| Placeholder {
                    requests: pod_requests(&pod),
                    terms: kerf_scheduling::pods::terms_of(&pod),
                    pod: Arc::new(pod),
                })
                .collect();
            self.placeholders.insert(key.clone(), placeholders);
            let provisioning = self.provisioning.get(&key).cloned();
            let mut status = resolved_status(buffer, &resolved, provisioning);
            // a buffer the provisioner has not placed yet, or not ready, is told so at once
            let generation = buffer.metadata.generation;
            if let Some(c) = provisioning_condition(&status, None, generation) {
                self.set_provisioning(&key, &mut status, c);
            }
            self.write_buffer_status(desk, &key, status);
        }
        desk.cancel(&Timer::Buffers);
        if !desk.cluster.buffers.buffers.is_empty() {
            desk.at(now + BUFFER_INTERVAL, Timer::Buffers);
        }
        true
    }

    /// Whether a pod bound to one of `nodes`, or a node written, may have taken room a
    /// buffer held: the buffers are placed again (the refill).
    pub(super) fn buffer_room_taken(
        &self,
        desk: &Desk,
        nodes: &std::collections::BTreeSet<String>,
    ) -> bool {
        let held = &self.held;
        !held.is_empty()
            && nodes.iter().any(|n| {
                held.contains_key(n)
                    || (desk.cluster.nodes.get(n))
                        .and_then(|r| r.nodeclaim.as_deref())
                        .is_some_and(|c| held.contains_key(c))
            })
    }

    /// Puts `condition` in the buffer's status as its `Provisioning`, and keeps it for the
    /// statuses written after.
    fn set_provisioning(&mut self, key: &str, status: &mut CapacityBufferStatus, c: Condition) {
        let provisioning = crate::buffers::PROVISIONING;
        status.conditions.retain(|c| c.type_ != provisioning);
        status.conditions.push(c.clone());
        self.provisioning.insert(key.to_string(), c);
    }

    /// Asks for the buffer's status to be written unless it stands so already (as Kerf last
    /// wrote it, or as read, transition times aside).
    fn write_buffer_status(&mut self, desk: &mut Desk, key: &str, status: CapacityBufferStatus) {
        if self.written.get(key) == Some(&status) {
            return;
        }
        let read = (desk.cluster.buffers.buffers.get(key))
            .and_then(|b| b.status.clone())
            .map(|mut s| {
                s.conditions
                    .iter_mut()
                    .for_each(|c| c.last_transition_time = None);
                s
            });
        let first = !self.written.contains_key(key);
        self.written.insert(key.to_string(), status.clone());
        if first && read.as_ref() == Some(&status) {
            return;
        }
        desk.actions.push(Action::PatchCapacityBufferStatus {
            buffer: key.to_string(),
            status: Box::new(status),
        });
    }
}

impl Controllers {
    /// Places every buffer's placeholder pods on the room the cluster has once the real
    /// pods are provisioned for, launching NodeClaims for those that fit nowhere, and writes
    /// each buffer's `Provisioning` condition (Karpenter's provisioner does both in its pass).
    pub(super) fn provision_buffers(&mut self, now: Duration) {
        if !self.desk.settings.capacity_buffer {
            return;
        }
        let claims = &self.desk.cluster.nodeclaims;
        (self.buffers.waiting).retain(|c, _| {
            claims
                .get(c)
                .is_some_and(|c| c.launched.is_none() && c.deleting.is_none())
        });
        let waiting: BTreeMap<&String, &String> = (self.buffers.waiting.iter())
            .flat_map(|(claim, pods)| pods.iter().map(move |p| (p, claim)))
            .collect();
        let mut placed: BTreeMap<String, Placed> = BTreeMap::new();
        let mut held: BTreeMap<String, Resources> = BTreeMap::new();
        let mut owners = Vec::new();
        let mut pods = Vec::new();
        for (key, list) in &self.buffers.placeholders {
            for p in list {
                match waiting.get(&crate::observe::namespaced_key(&p.pod.metadata)) {
                    Some(claim) => {
                        placed.entry(key.clone()).or_default().existing += 1;
                        held.entry((*claim).clone()).or_default().add(&p.requests);
                    }
                    None => {
                        owners.push(key.clone());
                        pods.push(p.clone());
                    }
                }
            }
        }
        self.buffers.held = held;
        if !pods.is_empty() {
            let (pools, pool_names) = self.desk.pool_inputs(now);
            let shapes: Vec<&Pod> = pods.iter().map(|p| &*p.pod).collect();
            let requests: Vec<Resources> = pods.iter().map(|p| p.requests.clone()).collect();
            let terms: Vec<u64> = pods.iter().map(|p| p.terms).collect();
            let options = self.desk.solve_options();
            let solved = self.desk.solve_shapes(
                &shapes,
                &requests,
                &terms,
                &pools,
                options,
                Packing::NearBound,
            );
            let super::provisioning::Solved {
                decision,
                nodes,
                claims,
                ..
            } = solved;
            for e in &decision.existing {
                let holder = claims[e.node]
                    .clone()
                    .unwrap_or_else(|| nodes[e.node].clone());
                for p in &e.pods {
                    placed.entry(owners[*p].clone()).or_default().existing += 1;
                    self.buffers
                        .held
                        .entry(holder.clone())
                        .or_default()
                        .add(&requests[*p]);
                }
            }
            super::provisioning::log_new_nodeclaims(&mut self.desk, &decision.nodeclaims);
            for plan in &decision.nodeclaims {
                let pool = pool_names[plan.node_pool].clone();
                let claim = self.create_nodeclaim(plan, &pool, "provisioned", now);
                let mut names = Vec::new();
                for p in &plan.pods {
                    placed.entry(owners[*p].clone()).or_default().new += 1;
                    names.push(crate::observe::namespaced_key(&shapes[*p].metadata));
                    // its room is the buffer's from the start: consolidation must not take
                    // the node before the next pass finds the chunks there
                    self.buffers
                        .held
                        .entry(claim.clone())
                        .or_default()
                        .add(&requests[*p]);
                }
                self.buffers.waiting.insert(claim, names);
            }
            for u in &decision.unschedulable {
                placed.entry(owners[u.pod].clone()).or_default().failed += 1;
                let reasons: Vec<String> = u.reasons.iter().map(ToString::to_string).collect();
                let (namespace, name) = (
                    shapes[u.pod].metadata.namespace.clone(),
                    shapes[u.pod].metadata.name.clone(),
                );
                self.desk.log_error(
                    "provisioner",
                    "could not schedule pod",
                    json!({"Pod": {"name": name, "namespace": namespace}, "error": reasons.join("; ")}),
                );
            }
        }
        let keys: Vec<String> = self.desk.cluster.buffers.buffers.keys().cloned().collect();
        for key in keys {
            let buffer = &self.desk.cluster.buffers.buffers[&key];
            let Some(mut status) = self.buffers.written.get(&key).cloned() else {
                continue;
            };
            let generation = buffer.metadata.generation;
            let Some(c) = provisioning_condition(&status, placed.get(&key).copied(), generation)
            else {
                continue;
            };
            self.buffers.set_provisioning(&key, &mut status, c);
            self.buffers
                .write_buffer_status(&mut self.desk, &key, status);
        }
    }
}

/// The regular look: true when there are buffers to place again.
pub(super) fn buffers_due(desk: &mut Desk, now: Duration) -> bool {
    if desk.cluster.buffers.buffers.is_empty() {
        return false;
    }
    desk.at(now + BUFFER_INTERVAL, Timer::Buffers);
    true
}
