//! When an Event is a repeat ([`Event::repeat_key`]): Karpenter's recorder drops an event
//! whose key (its reason and the values its constructor names) went out within the
//! constructor's window. Most constructors name the object's UID alone, so a changed
//! message is still a repeat; a few name the bare object name, or add a reason, a command
//! or a time that Kerf's message carries.

use std::time::Duration;

use super::{EVENT_DEDUPE, Event, EventObject};

/// What makes two events the same to Karpenter's recorder, besides their reason.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum EventIdentity {
    /// The object (its UID in Karpenter: the kind and name here).
    Object(EventObject, String),
    /// The object's bare name, without kind or namespace: a pod evicted from one namespace
    /// and one of the same name from another are the same to Karpenter's recorder.
    Name(String),
}

/// An event's key for deduplication, and how long a repeat is dropped.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RepeatKey {
    /// The event's reason.
    pub reason: String,
    /// The object it is about, as the recorder tells it.
    pub identity: EventIdentity,
    /// The message, when the constructor keys on more than the object: what it adds (a
    /// disruption reason, a command, a zone, a time) is part of the message (a
    /// consolidation candidate's without its savings).
    pub message: Option<String>,
}

impl Event {
    /// The key a repeat of this event shares, and how long after it went out a repeat is
    /// dropped (Karpenter v1.15's constructors' `DedupeValues` and `DedupeTimeout`).
    pub fn repeat_key(&self) -> (RepeatKey, Duration) {
        let reason = self.reason.as_ref();
        let bare = || self.name.rsplit('/').next().unwrap_or_default().to_string();
        let identity = match reason {
            "Evicted"
            | "Disrupted"
            | "FailedDraining"
            | "AwaitingVolumeDetachment"
            | "TerminationGracePeriodExpiring" => EventIdentity::Name(bare()),
            _ => EventIdentity::Object(self.kind, self.name.clone()),
        };
        // the constructors that name the object alone
        let object_only = match reason {
            "DisruptionBlocked" => self.kind != EventObject::NodePool,
            "Nominated"
            | "FailedScheduling"
            | "Unconsolidatable"
            | "NodeRepairBlocked"
            | "ConsolidationApproved"
            | "Evicted"
            | "Disrupted"
            | "FailedDraining"
            | "AwaitingVolumeDetachment"
            | "TerminationGracePeriodExpiring"
            | "InsufficientCapacityError"
            | "UnregisteredTaintMissing"
            | "NoCompatibleInstanceTypes"
            | "DisruptionWaitingReadiness"
            | "WaitingOnNodeClaimTermination"
            | "DoNotDisruptGracePeriodElapsed"
            | "SpotInterrupted"
            | "CapacityReservationInstanceInterrupted"
            | "SpotRebalanceRecommendation"
            | "InstanceStopping"
            | "InstanceTerminating"
            | "InstanceUnhealthy"
            | "TerminatingOnInterruption" => true,
            _ => false,
        };
        let window = match reason {
            "FailedScheduling" => EVENT_DEDUPE * 5 / 2,
            "Unconsolidatable" | "NodeRepairBlocked" => EVENT_DEDUPE * 15 / 2,
            "NoCompatibleInstanceTypes" => EVENT_DEDUPE / 2,
            "DisruptionBlocked" if self.kind == EventObject::NodePool => EVENT_DEDUPE / 2,
            _ => EVENT_DEDUPE,
        };
        // a consolidation candidate's key names its command (and why it was rejected), not
        // its savings, which end its message
        let message = match reason {
            "ConsolidationCandidate" | "ConsolidationRejected" => (self.message)
                .rsplit_once(" (savings: ")
                .map_or(&self.message[..], |(before, _)| before),
            _ => &self.message[..],
        };
        let key = RepeatKey {
            reason: reason.to_string(),
            identity,
            message: (!object_only).then(|| message.to_string()),
        };
        (key, window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventObject, name: &str, reason: &'static str, message: &str) -> Event {
        Event {
            kind,
            name: name.into(),
            warning: false,
            reason: reason.into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_node_blocked_for_another_reason_is_a_repeat_and_a_pool_blocked_for_another_is_not() {
        let node = |m| event(EventObject::Node, "n", "DisruptionBlocked", m).repeat_key();
        assert_eq!(node("Node is nominated").0, node("PDB prevents").0);
        let pool = |m| event(EventObject::NodePool, "p", "DisruptionBlocked", m).repeat_key();
        assert_ne!(
            pool("No allowed disruptions for disruption reason Drifted").0,
            pool("No allowed disruptions for disruption reason Empty").0
        );
        assert_eq!(pool("x").1, Duration::from_secs(60));
    }

    #[test]
    fn an_eviction_is_keyed_on_the_bare_pod_name() {
        let a = event(
            EventObject::Pod,
            "shop/web-0",
            "Evicted",
            "Evicted pod: Drifted",
        );
        let b = event(
            EventObject::Pod,
            "blog/web-0",
            "Evicted",
            "Evicted pod: Expired",
        );
        assert_eq!(a.repeat_key(), b.repeat_key());
        let c = event(
            EventObject::Pod,
            "shop/web-0",
            "Nominated",
            "Pod should schedule on: x",
        );
        let d = event(
            EventObject::Pod,
            "blog/web-0",
            "Nominated",
            "Pod should schedule on: x",
        );
        assert_ne!(c.repeat_key(), d.repeat_key());
    }

    #[test]
    fn a_candidate_told_again_with_other_savings_is_a_repeat() {
        let told = |m| event(EventObject::Node, "n", "ConsolidationCandidate", m).repeat_key();
        let a = told("Consolidation candidate: delete: [n] (savings: $0.10)");
        let b = told("Consolidation candidate: delete: [n] (savings: $0.12)");
        assert_eq!(a, b);
        assert_ne!(
            a,
            told("Consolidation candidate: replace: [n] (savings: $0.10)")
        );
    }
}
