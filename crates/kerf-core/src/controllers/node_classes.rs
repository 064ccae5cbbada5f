//! The node class status controller, as Karpenter's AWS provider's `nodeclass` controllers:
//! each class's selector terms resolved into its status every minute and whenever the class
//! changes; the termination finalizer on each class, and on deletion, once no NodeClaim uses
//! the class any more, what was made for it cleaned up before the finalizer comes off.
//!
//! The controller decides when; the cloud does the resolving and the cleaning
//! ([`Action::ResolveNodeClass`], [`Action::FinalizeNodeClass`]) and answers with
//! [`crate::observe::Observation::NodeClassResolved`].

use std::collections::BTreeMap;
use std::time::Duration;

use kerf_api::common::{NodeSelectorRequirementWithMinValues as Requirement, Operator};
use kerf_api::ec2nodeclass::EC2NodeClassStatus;
use serde_json::json;

use super::desk::Desk;
use super::{Action, Event, EventObject, Timer};
use crate::objects::keep_transition_times;

/// How often every node class is resolved again (Karpenter's is a minute too).
pub const NODE_CLASS_INTERVAL: Duration = Duration::from_secs(60);
/// How soon a class being deleted is looked at again while NodeClaims still use it.
const TERMINATION_RETRY: Duration = Duration::from_secs(10);
/// The finalizer that holds a class until what was made for it is deleted (Karpenter's).
pub const TERMINATION_FINALIZER: &str = "karpenter.k8s.aws/termination";

/// What the node class status controller keeps between answers.
#[derive(Default)]
pub(crate) struct NodeClassStatuses {
    /// Classes whose resolution was asked for and not yet answered, with the generation
    /// asked about and when.
    asked: BTreeMap<String, (Option<i64>, Duration)>,
}

impl NodeClassStatuses {
    /// The regular round: every class resolved again (or, being deleted, looked at), then
    /// the next round in a minute, or in ten seconds while a deletion waits on NodeClaims.
    pub(super) fn resolve_node_classes(&mut self, desk: &mut Desk, now: Duration) {
        let names: Vec<String> = desk.cluster.node_classes.keys().cloned().collect();
        let mut waiting = false;
        for name in names {
            // one asked within the round is on its way; one unanswered longer is asked again
            let asked = self.asked.get(&name);
            if asked.is_some_and(|(_, at)| now < *at + NODE_CLASS_INTERVAL) {
                continue;
            }
            waiting |= !self.reconcile_node_class(desk, &name, now);
        }
        let next = if waiting {
            TERMINATION_RETRY
        } else {
            NODE_CLASS_INTERVAL
        };
        desk.at(now + next, Timer::ResolveNodeClasses);
    }

    /// Resolves one class now, whether or not it was asked about within the round.
    pub(super) fn resolve_node_class_now(&mut self, desk: &mut Desk, name: &str, now: Duration) {
        self.asked.remove(name);
        self.reconcile_node_class(desk, name, now);
    }

    /// A class was observed: one not resolved for its generation yet, or being deleted, is
    /// looked at now rather than at the next round.
    pub(crate) fn node_class_observed(&mut self, desk: &mut Desk, name: &str, now: Duration) {
        let Some(class) = desk.cluster.node_classes.get(name) else {
            return;
        };
        let generation = class.metadata.generation;
        let resolved = (class.status.as_ref())
            .is_some_and(|s| (s.conditions.iter()).any(|c| c.observed_generation == generation));
        let deleting = class.metadata.deletion_timestamp.is_some();
        let asked = self.asked.get(name).map(|(g, _)| *g);
        if (resolved && !deleting) || asked == Some(generation) {
            return;
        }
        if !self.reconcile_node_class(desk, name, now) {
            node_class_round_by(desk, now + TERMINATION_RETRY);
        }
    }

    /// Brings one class along: its finalizer and a resolution of its status, or its
    /// deletion. False while a deletion waits on NodeClaims.
    fn reconcile_node_class(&mut self, desk: &mut Desk, name: &str, now: Duration) -> bool {
        if !desk.settings.node_class_status {
            return true;
        }
        let Some(class) = desk.cluster.node_classes.get(name) else {
            return true;
        };
        let held = (class.metadata.finalizers.iter().flatten()).any(|f| f == TERMINATION_FINALIZER);
        if class.metadata.deletion_timestamp.is_some() {
            return !held || terminate_node_class(desk, name, now);
        }
        let class = Box::new(class.clone());
        if !held {
            desk.actions.push(Action::AddNodeClassFinalizer {
                node_class: name.to_string(),
                class: class.clone(),
            });
        }
        let asked = (class.metadata.generation, now);
        self.asked.insert(name.to_string(), asked);
        let node_pools = admitted_by_node_pools(desk, name);
        desk.actions.push(Action::ResolveNodeClass {
            node_class: name.to_string(),
            class,
            node_pools,
        });
        true
    }

    /// The cloud's resolution of a class: written as the class's status, each condition
    /// keeping its transition time while its status stays and observing the class's
    /// generation; an error is logged and the next round tries again.
    pub(crate) fn node_class_resolved(
        &mut self,
        desk: &mut Desk,
        name: &str,
        resolved: Result<EC2NodeClassStatus, String>,
        now: Duration,
    ) {
        self.asked.remove(name);
        let mut status = match resolved {
            Ok(s) => s,
            Err(e) => {
                let fields = json!({"EC2NodeClass": {"name": name}, "error": e});
                desk.log_error("nodeclass", "failed resolving ec2nodeclass", fields);
                return;
            }
        };
        let Some(class) = desk.cluster.node_classes.get(name) else {
            return;
        };
        let previous = (class.status.as_ref()).map_or(&[][..], |s| &s.conditions[..]);
        let unix = now + Duration::from_secs(desk.settings.epoch_unix);
        keep_transition_times(&mut status.conditions, previous, unix);
        for c in &mut status.conditions {
            c.observed_generation = class.metadata.generation;
        }
        if class.status.as_ref() != Some(&status) {
            desk.actions.push(Action::PatchNodeClassStatus {
                node_class: name.to_string(),
                status: Box::new(status),
            });
        }
    }
}

/// Brings the next round forward to `at` unless it comes sooner already.
fn node_class_round_by(desk: &mut Desk, at: Duration) {
    let round = |(_, t): &(Duration, Timer)| *t == Timer::ResolveNodeClasses;
    if desk.timers.iter().any(|e| round(e) && e.0 <= at) {
        return;
    }
    desk.timers.retain(|e| !round(e));
    desk.at(at, Timer::ResolveNodeClasses);
}

/// What each NodePool of the class admits: its requirements, and its template's labels as
/// `In` requirements.
fn admitted_by_node_pools(desk: &Desk, class: &str) -> Vec<Vec<Requirement>> {
    (desk.cluster.node_pools.values())
        .filter(|np| np.spec.template.spec.node_class_ref.name == class)
        .map(|np| {
            let template = &np.spec.template;
            let labels = (template.metadata.labels.iter()).map(|(k, v)| Requirement {
                key: k.clone(),
                operator: Operator::In,
                values: vec![v.clone()],
                min_values: None,
            });
            (template.spec.requirements.iter().cloned())
                .chain(labels)
                .collect()
        })
        .collect()
}

/// A class being deleted: waits while NodeClaims use it, then asks the cloud to clean
/// up after it and take the finalizer off. False while it waits.
fn terminate_node_class(desk: &mut Desk, name: &str, now: Duration) -> bool {
    let using: Vec<&String> = (desk.cluster.nodeclaims.iter())
        .filter(|(_, c)| c.node_class == name)
        .map(|(k, _)| k)
        .collect();
    if !using.is_empty() {
        // Karpenter names the first five, and counts the rest
        let mut names: Vec<String> = using.iter().take(5).map(|n| n.to_string()).collect();
        if using.len() > 5 {
            names.push(format!("and {} other(s)", using.len() - 5));
        }
        let message = format!("Waiting on NodeClaim termination for {}", names.join(", "))
            .replace(", and ", " and ");
        let fields = json!({"EC2NodeClass": {"name": name}, "NodeClaims": using});
        desk.event(
            Event {
                kind: EventObject::NodeClass,
                name: name.to_string(),
                warning: false,
                reason: "WaitingOnNodeClaimTermination".into(),
                message,
            },
            now,
        );
        desk.log(
            "nodeclass.termination",
            "waiting on nodeclaim termination",
            fields,
        );
        return false;
    }
    let class = Box::new(desk.cluster.node_classes[name].clone());
    desk.actions.push(Action::FinalizeNodeClass {
        node_class: name.to_string(),
        class,
    });
    true
}
