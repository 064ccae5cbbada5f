//! Injected faults as the wait checks excuse them: when each one may have held pods up, and
//! which pods.
//!
//! An API-server outage stops the whole cluster, and a launch that never registers may have
//! been any pod's, so both excuse every pod waiting through them. A node that never reports
//! Ready holds up only the pods it could take (Kerf may have nominated them to it, as
//! Karpenter counts a registered node as capacity) and the pods whose room such a pod took on
//! another node meanwhile (kube-scheduler binds whatever fits first; swarm seed 65410).

use std::collections::BTreeMap;
use std::time::Duration;

use kerf_api::Taint;

use super::api_server::{StoredNode, StoredPod};
use crate::kube_scheduler::Amounts;

/// One injected fault.
#[derive(Debug)]
pub(super) struct InjectedFault {
    /// When it began.
    pub from: Duration,
    /// When the pods it held up could have had a node again.
    pub until: Duration,
    reach: Reach,
}

#[derive(Debug)]
enum Reach {
    /// Every pod.
    All,
    /// A node that never reports Ready.
    Node(Box<HeldBy>),
}

/// A node that never reports Ready, and the nodes pods it could take were bound to while it
/// stood.
#[derive(Debug)]
struct HeldBy {
    /// The node with each set of labels it has had, each from when it was written (Kerf
    /// relabels a node whose reservation ended as on-demand: swarm seed 73892). A pod may
    /// have been held up by the labels the node had while it waited.
    node: Vec<(Duration, Shape)>,
    /// By node name: the last time such a pod was bound there, and the node as it was then.
    took: BTreeMap<String, (Duration, Shape)>,
}

/// What kube-scheduler's filters of a node alone read: labels, taints and allocatable.
#[derive(Debug)]
struct Shape {
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    allocatable: Amounts,
}

impl Shape {
    fn could_take(&self, pod: &StoredPod) -> bool {
        (pod.facts).could_bind(
            pod.declared(),
            &self.labels,
            &self.taints,
            &self.allocatable,
        )
    }
}

impl HeldBy {
    /// Whether the node, with the labels it had at some time since `pod` began to wait,
    /// could take it.
    fn could_take(&self, pod: &StoredPod) -> bool {
        let ends = (self.node.iter().skip(1).map(|(from, _)| Some(*from))).chain([None]);
        (self.node.iter().zip(ends))
            .filter(|(_, end)| end.is_none_or(|end| end > pod.pending_since))
            .any(|((_, shape), _)| shape.could_take(pod))
    }
}

impl InjectedFault {
    /// A fault every waiting pod may have waited on.
    pub fn everyone(from: Duration, until: Duration) -> InjectedFault {
        InjectedFault {
            from,
            until,
            reach: Reach::All,
        }
    }

    /// A node that registered at `from` and will never report Ready: `taints` are its own
    /// (its NodeClaim's), without the startup and registration taints that would have gone
    /// with Ready.
    pub fn never_ready(
        from: Duration,
        until: Duration,
        node: &StoredNode,
        taints: Vec<Taint>,
    ) -> InjectedFault {
        let node = Shape {
            labels: node.labels.clone(),
            taints,
            allocatable: node.amounts.clone(),
        };
        InjectedFault {
            from,
            until,
            reach: Reach::Node(Box::new(HeldBy {
                node: vec![(from, node)],
                took: BTreeMap::new(),
            })),
        }
    }

    /// The node that never reports Ready was relabelled at `now` as `node` now holds it:
    /// pods its new labels admit may be held up from now on.
    pub fn relabelled(&mut self, node: &StoredNode, now: Duration) {
        let Reach::Node(held) = &mut self.reach else {
            return;
        };
        let Some((_, last)) = held.node.last() else {
            return;
        };
        if last.labels != node.labels {
            let shape = Shape {
                labels: node.labels.clone(),
                taints: last.taints.clone(),
                allocatable: last.allocatable.clone(),
            };
            held.node.push((now, shape));
        }
    }

    /// Whether `pod`, waiting since its `pending_since`, may have waited on this fault.
    pub fn reaches(&self, pod: &StoredPod) -> bool {
        match &self.reach {
            Reach::All => true,
            Reach::Node(held) => {
                held.could_take(pod)
                    || (held.took.values())
                        .any(|(at, node)| *at >= pod.pending_since && node.could_take(pod))
            }
        }
    }

    /// kube-scheduler bound `pod` to the node `name` at `now`: while a node that never
    /// reports Ready stands, a pod it could take may have been waiting for it and taken room
    /// launched for another pod.
    pub fn bound(&mut self, pod: &StoredPod, name: &str, node: &StoredNode, now: Duration) {
        let Reach::Node(held) = &mut self.reach else {
            return;
        };
        if self.from > now || self.until <= now || !held.could_take(pod) {
            return;
        }
        // a node's labels, taints and allocatable are read once: its first such bind
        let took = held.took.entry(name.to_string()).or_insert_with(|| {
            let shape = Shape {
                labels: node.labels.clone(),
                taints: node.taints.clone(),
                allocatable: node.amounts.clone(),
            };
            (now, shape)
        });
        took.0 = now;
    }
}
