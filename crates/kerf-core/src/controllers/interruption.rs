//! Interruption: a cloud notice that an instance will go (spot reclaim, maintenance, stop,
//! terminate) cordons and drains its node at once, so its pods get capacity before the
//! instance goes. The cloud provider parses its own messages into [`Notice`]s.

use std::time::Duration;

use serde_json::json;

use super::Controllers;
use crate::unavailable::Pattern;

/// What a notice means for Kerf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeEffect {
    /// Spot capacity is being reclaimed: mark the offering unavailable and delete.
    Reclaim,
    /// The instance is going (maintenance, stop, terminate): delete.
    Delete,
    /// Only worth a log line (rebalance recommendation, states not acted on).
    Log,
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
}

impl Controllers {
    /// Acts on a notice from the cloud's interruption queue.
    pub fn notice(&mut self, notice: &Notice, now: Duration) {
        self.activity += 1;
        self.now = self.now.max(now);
        let found = self.cluster.nodeclaims.iter().find_map(|(name, c)| {
            let l = c
                .launched
                .as_ref()
                .filter(|l| l.instance_id() == notice.instance_id)?;
            Some((name.clone(), c.node.clone(), l.clone()))
        });
        let Some((claim, node, launched)) = found else {
            return;
        };
        let fields = json!({
            "NodeClaim": {"name": claim}, "Node": {"name": node},
            "messageKind": notice.message_kind, "instance-id": notice.instance_id,
        });
        if notice.effect == NoticeEffect::Log {
            self.log("interruption", "received interruption message", fields);
            return;
        }
        if notice.effect == NoticeEffect::Reclaim {
            self.unavailable.mark(
                Pattern {
                    capacity_type: Some(launched.capacity_type.as_str().to_string()),
                    instance_type: Some(launched.instance_type.clone()),
                    zone: Some(launched.zone.clone()),
                },
                self.now,
            );
        }
        self.log(
            "interruption",
            "initiating delete from interruption message",
            fields,
        );
        self.count_disrupted(&claim, "interrupted");
        self.delete_nodeclaim(&claim);
    }
}
