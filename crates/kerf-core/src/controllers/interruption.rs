//! Interruption: a cloud notice that an instance will go (spot reclaim, maintenance, stop,
//! terminate) cordons and drains its node at once, so its pods get capacity before the
//! instance goes. The cloud provider parses its own messages into [`Notice`]s.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use kerf_api::labels;

use super::desk::Desk;
use super::{Event, EventObject};
use crate::metrics::families;
use crate::unavailable::Pattern;

/// What a notice means for Kerf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeEffect {
    /// Spot capacity is being reclaimed: mark the offering unavailable and delete.
    Reclaim,
    /// A capacity reservation's capacity is being reclaimed: mark its reserved offering
    /// (type and zone) unavailable and delete.
    ReclaimReservation,
    /// The instance is going (maintenance, stop, terminate): delete.
    Delete,
    /// The instance is broken (a failed status check): delete without waiting on disruption
    /// budgets or grace periods, as Karpenter's forceful termination does.
    Terminate,
    /// Only worth a log line (rebalance recommendation, states not acted on).
    Log,
}

/// What the interruption controller keeps between notices.
#[derive(Default)]
pub(crate) struct Interruptions {
    /// Instances and status check categories counted unhealthy, while their NodeClaims live.
    seen: BTreeSet<(String, &'static str)>,
}

/// One notice about one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// The cloud's instance id (the last segment of the provider id).
    pub instance_id: String,
    /// The kind, as Karpenter's `messageKind` log field names it.
    pub message_kind: &'static str,
    /// What to do.
    pub effect: NoticeEffect,
    /// The event put on the NodeClaim and its Node (reason, message, whether a warning).
    pub event: Option<(&'static str, &'static str, bool)>,
    /// A failed status check's category (`InstanceStatus`, `SystemStatus`, `EventStatus`),
    /// counted once per instance in `karpenter_interruption_instance_status_unhealthy_total`.
    pub unhealthy_category: Option<&'static str>,
}

impl Interruptions {
    /// Acts on a notice from the cloud's interruption queue.
    pub(crate) fn notice(&mut self, desk: &mut Desk, notice: &Notice, now: Duration) {
        desk.activity += 1;
        let found = desk.cluster.nodeclaims.iter().find_map(|(name, c)| {
            let l = c
                .launched
                .as_ref()
                .filter(|l| l.instance_id() == notice.instance_id)?;
            Some((name.clone(), c.node.clone(), l.clone()))
        });
        let Some((claim, node, launched)) = found else {
            return;
        };
        if let Some(category) = notice.unhealthy_category {
            let claims = &desk.cluster.nodeclaims;
            // an instance gone is forgotten, so that one seen again is counted again
            self.seen.retain(|(id, _)| {
                claims
                    .values()
                    .any(|c| c.launched.as_ref().is_some_and(|l| l.instance_id() == id))
            });
            if self.seen.insert((notice.instance_id.clone(), category)) {
                desk.metrics.inc(
                    &families::INTERRUPTION_INSTANCE_STATUS_UNHEALTHY,
                    &[category],
                );
                let fields = json!({"instanceID": notice.instance_id, "category": category});
                desk.log(
                    "interruption.instancestatus",
                    "detected unhealthy instance owned by cluster",
                    fields,
                );
            }
        }
        let deleting = notice.effect != NoticeEffect::Log;
        let fields = json!({
            "NodeClaim": {"name": claim}, "Node": {"name": node},
            "messageKind": notice.message_kind, "instance-id": notice.instance_id,
            "action": match notice.effect {
                NoticeEffect::Log => "NoAction",
                NoticeEffect::Terminate => "ForcefulTermination",
                _ => "CordonAndDrain",
            },
        });
        if let Some((reason, message, warning)) = notice.event {
            events_on(desk, &claim, node.as_deref(), reason, message, warning, now);
        }
        if !deleting {
            desk.log("interruption", "received interruption message", fields);
            return;
        }
        let capacity_type = match notice.effect {
            NoticeEffect::Reclaim => Some(launched.capacity_type.as_str().to_string()),
            NoticeEffect::ReclaimReservation => Some(labels::CAPACITY_TYPE_RESERVED.to_string()),
            _ => None,
        };
        if let Some(capacity_type) = capacity_type {
            desk.unavailable.mark(
                Pattern {
                    capacity_type: Some(capacity_type),
                    instance_type: Some(launched.instance_type.clone()),
                    zone: Some(launched.zone.clone()),
                },
                now,
            );
        }
        if notice.effect == NoticeEffect::Terminate {
            // the termination timestamp now: the drain waits on nothing
            desk.terminate_by(&claim, now, now);
        }
        let already = (desk.cluster.nodeclaims.get(&claim)).is_some_and(|c| c.deleting.is_some());
        if already {
            return;
        }
        desk.log(
            "interruption",
            "initiating delete from interruption message",
            fields,
        );
        events_on(
            desk,
            &claim,
            node.as_deref(),
            "TerminatingOnInterruption",
            "Interruption triggered termination for the",
            true,
            now,
        );
        desk.count_disrupted(&claim, notice.message_kind, "", false);
        desk.delete_nodeclaim(&claim, now);
    }
}

/// Publishes an event on the NodeClaim and, when it has one, its Node; a message ending
/// in "the" is completed with the object's kind (`… for the NodeClaim`, `… for the Node`).
fn events_on(
    desk: &mut Desk,
    claim: &str,
    node: Option<&str>,
    reason: &'static str,
    message: &'static str,
    warning: bool,
    now: Duration,
) {
    let text = |kind: &str| match message.strip_suffix(" the") {
        Some(head) => format!("{head} the {kind}"),
        None => message.to_string(),
    };
    desk.event(
        Event {
            kind: EventObject::NodeClaim,
            name: claim.to_string(),
            warning,
            reason: reason.into(),
            message: text("NodeClaim"),
        },
        now,
    );
    if let Some(node) = node {
        desk.event(
            Event {
                kind: EventObject::Node,
                name: node.to_string(),
                warning,
                reason: reason.into(),
                message: text("Node"),
            },
            now,
        );
    }
}
