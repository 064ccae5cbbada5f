//! The controllers' actions carried out at once, object by object: each action goes into the
//! lane of the object it is about (a NodeClaim and its Node share one, so a NodeClaim's
//! create goes before its launch and status, a Node's taint before its deletion), a lane
//! carries out one action at a time in the order the controllers asked, and lanes run side by
//! side within the action client's budget ([`crate::throttle`]). Nothing in flight holds the
//! controllers: each answer comes back to the loop that holds them ([`Lanes::finish`]), which
//! keeps applying the watches meanwhile.

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use kerf_core::cluster::CloudInstance;
use kerf_core::controllers::{Action, Controllers};
use kerf_core::unfinished::{self, Unfinished};

use crate::cloud::CloudProvider;
use crate::execute::{Answer, Executor, Outcome, now};
use crate::log;
use crate::reconciles::{self, Reconciles};

/// The object an action is about: actions of one lane go out one after another.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Lane {
    /// A NodeClaim, with its Node and instance.
    NodeClaim(String),
    /// A Node no NodeClaim is known for.
    Node(String),
    /// A pod (`namespace/name`).
    Pod(String),
    /// A node class.
    NodeClass(String),
    /// A NodePool's status.
    NodePool(String),
    /// A NodeOverlay's status.
    NodeOverlay(String),
    /// A CapacityBuffer's status (`namespace/name`).
    Buffer(String),
    /// Garbage collection's listing of the cloud's instances.
    Instances,
}

/// The lane of an action, or none for what is done on the spot (a log line, an Event).
fn lane_of(action: &Action, core: &Controllers) -> Option<Lane> {
    let node = |node: &str| match core.cluster().claim_of_node(node) {
        Some((claim, _)) => Lane::NodeClaim(claim.clone()),
        None => Lane::Node(node.to_string()),
    };
    Some(match action {
        Action::Log(_) | Action::Event(_) | Action::Disrupting { .. } => return None,
        Action::CreateNodeClaim(c) => Lane::NodeClaim(c.metadata.name.clone().unwrap_or_default()),
        Action::Launch { nodeclaim, .. }
        | Action::PatchNodeClaimStatus { nodeclaim, .. }
        | Action::AnnotateNodeClaim { nodeclaim, .. }
        | Action::RelabelNodeClaim { nodeclaim, .. }
        | Action::DeleteNodeClaim { nodeclaim }
        | Action::ReleaseNodeClaim { nodeclaim }
        | Action::DeleteInstance { nodeclaim, .. }
        | Action::Reboot { nodeclaim, .. } => Lane::NodeClaim(nodeclaim.clone()),
        Action::Taint { node: n, .. }
        | Action::RemoveTaint { node: n, .. }
        | Action::LabelNode { node: n, .. }
        | Action::RelabelNode { node: n, .. }
        | Action::DeleteNode { node: n } => node(n),
        Action::Evict { pod }
        | Action::DeletePod { pod, .. }
        | Action::AnnotatePodDeletionCost { pod, .. } => Lane::Pod(pod.clone()),
        Action::ListInstanceTypes { node_class, .. }
        | Action::ResolveNodeClass { node_class, .. }
        | Action::PatchNodeClassStatus { node_class, .. }
        | Action::AddNodeClassFinalizer { node_class, .. }
        | Action::FinalizeNodeClass { node_class, .. } => Lane::NodeClass(node_class.clone()),
        Action::PatchNodePoolStatus { node_pool, .. } => Lane::NodePool(node_pool.clone()),
        Action::PatchNodeOverlayStatus { node_overlay, .. } => {
            Lane::NodeOverlay(node_overlay.clone())
        }
        Action::PatchCapacityBufferStatus { buffer, .. } => Lane::Buffer(buffer.clone()),
        Action::ListInstances => Lane::Instances,
    })
}

/// Folds an action into what already waits in its lane, while the API server is slow to
/// answer and the watches keep asking again: a NodeClaim's status replaces the one still
/// waiting (each carries the whole status, so the older would only be written over; it goes
/// last, behind what was asked before it); a taint, a taint's removal or a node's labels that
/// the lane's last waiting word on the same thing already asks for is dropped. Returns the
/// action to queue, if any.
fn coalesce(queue: &mut VecDeque<(u32, Action)>, action: Action) -> Option<Action> {
    match action {
        Action::PatchNodeClaimStatus {
            nodeclaim,
            status,
            mut labels,
        } => {
            queue.retain(|(_, w)| match w {
                Action::PatchNodeClaimStatus {
                    nodeclaim: n,
                    labels: older,
                    ..
                } if *n == nodeclaim => {
                    for (k, v) in older {
                        labels.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                    false
                }
                _ => true,
            });
            Some(Action::PatchNodeClaimStatus {
                nodeclaim,
                status,
                labels,
            })
        }
        Action::Taint { .. } | Action::RemoveTaint { .. } => {
            let (node, key) = taint_target(&action)?;
            let last = (queue.iter().rev()).find(|(_, w)| taint_target(w) == Some((node, key)));
            let same = last.is_some_and(|(_, w)| match (w, &action) {
                (Action::RemoveTaint { .. }, Action::RemoveTaint { .. }) => true,
                (
                    Action::Taint {
                        taint: a, by: x, ..
                    },
                    Action::Taint {
                        taint: b, by: y, ..
                    },
                ) => a == b && x == y,
                _ => false,
            });
            (!same).then_some(action)
        }
        Action::LabelNode {
            ref node,
            ref labels,
            ref annotations,
            finalizer,
        } => {
            let last = (queue.iter().rev())
                .find(|(_, w)| matches!(w, Action::LabelNode { node: n, .. } if n == node));
            let same = last.is_some_and(|(_, w)| {
                matches!(w, Action::LabelNode { labels: l, annotations: a, finalizer: f, .. }
                    if l == labels && a == annotations && *f == finalizer)
            });
            (!same).then_some(action)
        }
        other => Some(other),
    }
}

/// The node and taint key a taint or a taint's removal is about.
fn taint_target(action: &Action) -> Option<(&str, &str)> {
    match action {
        Action::Taint { node, taint, .. } => Some((node, &taint.key)),
        Action::RemoveTaint { node, key } => Some((node, key)),
        _ => None,
    }
}

/// An action that came back from its calls.
pub struct Finished {
    lane: Lane,
    /// The action again, when it is a write worth trying again should it fail.
    again: Option<Action>,
    tries: u32,
    controller: Option<&'static str>,
    took: Duration,
    outcome: Outcome,
}

type Call<'e> = Pin<Box<dyn Future<Output = Finished> + 'e>>;

/// The lanes: what is in flight, and what waits behind it.
pub struct Lanes<'e, C> {
    executor: &'e Executor<C>,
    in_flight: FuturesUnordered<Call<'e>>,
    busy: HashSet<Lane>,
    waiting: HashMap<Lane, VecDeque<(u32, Action)>>,
    /// Launches answered while the cloud's instances were being listed: the listing may
    /// predate them, and must not read their instances as gone.
    launched_while_listing: Option<Vec<CloudInstance>>,
}

impl<'e, C: CloudProvider> Lanes<'e, C> {
    /// No lane busy.
    pub fn new(executor: &'e Executor<C>) -> Lanes<'e, C> {
        Lanes {
            executor,
            in_flight: FuturesUnordered::new(),
            busy: HashSet::new(),
            waiting: HashMap::new(),
            launched_while_listing: None,
        }
    }

    /// Whether any action is in flight.
    pub fn idle(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// Takes an action that has failed `tries` times before: a log line or an Event at once,
    /// anything else into its lane, started now when the lane is free.
    pub fn submit(
        &mut self,
        core: &Controllers,
        unfinished: &mut Unfinished,
        action: Action,
        tries: u32,
    ) {
        unfinished.superseded_by(&action);
        let Some(lane) = lane_of(&action, core) else {
            match action {
                Action::Event(e) => self.executor.record_event(e, core),
                Action::Log(r) => log::record(&r),
                _ => {}
            }
            return;
        };
        // behind whatever the lane has in flight or waiting
        if self.busy.contains(&lane) || self.waiting.contains_key(&lane) {
            let queue = self.waiting.entry(lane).or_default();
            if let Some(action) = coalesce(queue, action) {
                queue.push_back((tries, action));
            }
        } else {
            self.start(core, unfinished, lane, action, tries);
        }
    }

    fn start(
        &mut self,
        core: &Controllers,
        unfinished: &mut Unfinished,
        lane: Lane,
        action: Action,
        tries: u32,
    ) {
        // a launch or status for a NodeClaim whose create waits to be tried again goes
        // right after it
        if unfinished.held_behind_create(&action) {
            return;
        }
        let node_pool = match &action {
            Action::DeleteInstance { nodeclaim, .. } => (core.cluster().nodeclaims())
                .get(nodeclaim)
                .map(|c| c.node_pool.clone())
                .unwrap_or_default(),
            _ => String::new(),
        };
        if matches!(action, Action::ListInstances) {
            self.launched_while_listing = Some(Vec::new());
        }
        let controller = reconciles::controller_of(&action);
        let again = unfinished::replayable(&action).then(|| action.clone());
        let executor = self.executor;
        self.busy.insert(lane.clone());
        self.in_flight.push(Box::pin(async move {
            let started = Instant::now();
            let outcome = executor.execute(action, node_pool).await;
            Finished {
                lane,
                again,
                tries,
                controller,
                took: started.elapsed(),
                outcome,
            }
        }));
    }

    /// The next action to come back; pending while none is in flight.
    pub async fn next(&mut self) -> Option<Finished> {
        if self.in_flight.is_empty() {
            return std::future::pending().await;
        }
        self.in_flight.next().await
    }

    /// Hands what an action came back with to the controllers, keeps a write that failed for
    /// a passing reason to be tried again, and starts what waited behind it in its lane
    /// (unless `may_write` says the Lease is overdue: it waits for [`Lanes::resume`]).
    pub fn finish(
        &mut self,
        core: &mut Controllers,
        unfinished: &mut Unfinished,
        reconciles: &Reconciles,
        done: Finished,
        may_write: bool,
    ) {
        let Finished {
            lane,
            again,
            tries,
            controller,
            took,
            outcome,
        } = done;
        if let Some(c) = controller {
            reconciles.record(c, outcome.result, took);
        }
        match outcome.answer {
            Some(Answer::Instances(mut instances)) => {
                instances.extend(self.launched_while_listing.take().unwrap_or_default());
                Answer::Instances(instances).tell(core);
            }
            Some(answer) => {
                if let (Some(seen), Answer::Launch { nodeclaim, result }) =
                    (&mut self.launched_while_listing, &answer)
                    && let Ok(launched) = result
                {
                    seen.push(CloudInstance {
                        provider_id: launched.provider_id.clone(),
                        nodeclaim: nodeclaim.clone(),
                        image_id: None,
                        network: None,
                        reservation: None,
                    });
                }
                answer.tell(core);
            }
            None if lane == Lane::Instances => self.launched_while_listing = None,
            None => {}
        }
        if let (Err(fault), Some(action)) = (outcome.result, again)
            && fault.passes()
            && !unfinished.keep(action.clone(), tries + 1, now())
        {
            log::error(
                "giving up a write",
                &format!("{action:?} failed {} times", tries + 1),
            );
        }
        self.busy.remove(&lane);
        if may_write {
            self.next_in(core, unfinished, lane);
        }
    }

    /// Starts the next waiting action of a lane.
    fn next_in(&mut self, core: &Controllers, unfinished: &mut Unfinished, lane: Lane) {
        let Some(queue) = self.waiting.get_mut(&lane) else {
            return;
        };
        let next = queue.pop_front();
        if queue.is_empty() {
            self.waiting.remove(&lane);
        }
        if let Some((tries, action)) = next {
            self.start(core, unfinished, lane, action, tries);
        }
    }

    /// Starts the waiting actions of every free lane (once the Lease is held again).
    pub fn resume(&mut self, core: &Controllers, unfinished: &mut Unfinished) {
        let lanes: Vec<Lane> = (self.waiting.keys())
            .filter(|l| !self.busy.contains(*l))
            .cloned()
            .collect();
        for lane in lanes {
            self.next_in(core, unfinished, lane);
        }
    }

    /// Waits for what is in flight (at a stop: each action under way is finished first),
    /// handing the answers to the controllers; nothing waiting starts.
    pub async fn settle(
        &mut self,
        core: &mut Controllers,
        unfinished: &mut Unfinished,
        reconciles: &Reconciles,
    ) {
        while let Some(done) = self.in_flight.next().await {
            self.finish(core, unfinished, reconciles, done, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn status(claim: &str, labels: &[(&str, &str)]) -> Action {
        Action::PatchNodeClaimStatus {
            nodeclaim: claim.into(),
            status: Box::default(),
            labels: (labels.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn remove(node: &str) -> Action {
        Action::RemoveTaint {
            node: node.into(),
            key: "karpenter.sh/unregistered".into(),
        }
    }

    fn taint(node: &str) -> Action {
        Action::Taint {
            node: node.into(),
            taint: kerf_api::Taint {
                key: "karpenter.sh/unregistered".into(),
                value: None,
                effect: kerf_api::TaintEffect::NoExecute,
                time_added: None,
            },
            by: None,
        }
    }

    fn label(node: &str, value: &str) -> Action {
        Action::LabelNode {
            node: node.into(),
            labels: BTreeMap::from([("karpenter.sh/initialized".into(), value.into())]),
            annotations: BTreeMap::new(),
            finalizer: false,
        }
    }

    /// Folds each action in as `submit` does behind a busy lane; the queue's actions after.
    fn queued(actions: Vec<Action>) -> Vec<String> {
        let mut queue = VecDeque::new();
        for a in actions {
            if let Some(a) = coalesce(&mut queue, a) {
                queue.push_back((0, a));
            }
        }
        (queue.into_iter())
            .map(|(_, a)| match a {
                Action::PatchNodeClaimStatus {
                    nodeclaim, labels, ..
                } => format!("status {nodeclaim} {labels:?}"),
                Action::RemoveTaint { node, .. } => format!("untaint {node}"),
                Action::Taint { node, .. } => format!("taint {node}"),
                Action::LabelNode { node, labels, .. } => format!("label {node} {labels:?}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_newer_status_takes_the_waiting_ones_place_at_the_end_with_its_labels() {
        let q = queued(vec![
            status("a", &[("zone", "z1")]),
            label("n", "true"),
            status("b", &[]),
            status("a", &[]),
        ]);
        assert_eq!(
            q,
            [
                r#"label n {"karpenter.sh/initialized": "true"}"#,
                "status b {}",
                r#"status a {"zone": "z1"}"#,
            ]
        );
    }

    #[test]
    fn a_taint_word_or_labels_already_waiting_are_not_asked_again_unless_undone_between() {
        assert_eq!(
            queued(vec![remove("n"), remove("n"), remove("m")]),
            ["untaint n", "untaint m"]
        );
        // a removal asked after a taint that follows an earlier removal is kept: it decides
        assert_eq!(
            queued(vec![remove("n"), taint("n"), remove("n")]),
            ["untaint n", "taint n", "untaint n"]
        );
        assert_eq!(queued(vec![taint("n"), taint("n")]), ["taint n"]);
        assert_eq!(
            queued(vec![
                label("n", "true"),
                label("n", "true"),
                label("n", "false")
            ]),
            [
                r#"label n {"karpenter.sh/initialized": "true"}"#,
                r#"label n {"karpenter.sh/initialized": "false"}"#,
            ]
        );
    }
}
