//! Interruption messages: the EC2 and AWS Health events EventBridge puts on the SQS queue
//! Karpenter reads (`settings.interruptionQueue`), parsed into what Kerf does about them.
//!
//! A message that is not JSON, or lacks the fields its kind needs, is an error the caller
//! logs and drops; a well-formed message of a kind Kerf does not act on is [`Kind::NoOp`].

use kerf_core::controllers::interruption::{Notice, NoticeEffect};
use serde_json::Value;
use thiserror::Error;

/// What a message says happens to which instances.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// What kind of notice it is.
    pub kind: Kind,
    /// The EC2 instance ids it concerns.
    pub instance_ids: Vec<String>,
    /// The event's `time` as EventBridge wrote it (RFC 3339), for how long it waited.
    pub time: Option<String>,
}

/// The kinds of notices, named as Karpenter's `messageKind` log field names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// "EC2 Spot Instance Interruption Warning": reclaimed in two minutes.
    SpotInterruption,
    /// "AWS Health Event" with a scheduled change (maintenance, retirement).
    ScheduledChange,
    /// "EC2 Instance State-change Notification" into stopping or stopped.
    InstanceStopped,
    /// "EC2 Instance State-change Notification" into shutting-down or terminated.
    InstanceTerminated,
    /// "EC2 Instance Rebalance Recommendation": elevated risk, only logged.
    RebalanceRecommendation,
    /// "EC2 Capacity Reservation Instance Interruption Warning": the owner of an
    /// interruptible capacity reservation takes its capacity back.
    CapacityReservationInterruption,
    /// DescribeInstanceStatus: the instance's own status check failed for two minutes.
    InstanceStatus,
    /// DescribeInstanceStatus: the host's (system) status check failed for two minutes.
    SystemStatus,
    /// DescribeInstanceStatus: a scheduled event (reboot, maintenance, retirement, stop).
    EventStatus,
    /// A well-formed message Kerf does not act on (another state, another service).
    NoOp,
}

/// What to do about a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Spot capacity is being reclaimed: mark the offering unavailable, then delete as
    /// [`Action::Delete`] does.
    Reclaim,
    /// A capacity reservation is being reclaimed: mark its reserved offering unavailable,
    /// then delete as [`Action::Delete`] does.
    ReclaimReservation,
    /// Cordon and drain the node and delete its NodeClaim.
    Delete,
    /// Delete the NodeClaim without waiting on its pods' disruption budgets or grace
    /// periods: the instance is already broken.
    Terminate,
    /// Log it, nothing else.
    Log,
}

impl Kind {
    /// The name in Karpenter v1.15's `messageKind` log field, and the `reason` of
    /// `karpenter_nodeclaims_disrupted_total` when it deletes a NodeClaim.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SpotInterruption => "spot_interrupted",
            Kind::ScheduledChange => "scheduled_change",
            Kind::InstanceStopped => "instance_stopped",
            Kind::InstanceTerminated => "instance_terminated",
            Kind::RebalanceRecommendation => "rebalance_recommendation",
            Kind::CapacityReservationInterruption => "capacity_reservation_interrupted",
            Kind::InstanceStatus => "instance_status",
            Kind::SystemStatus => "system_status",
            Kind::EventStatus => "event_status",
            Kind::NoOp => "no_op",
        }
    }

    /// What Kerf does about it.
    pub fn action(self) -> Action {
        match self {
            Kind::SpotInterruption => Action::Reclaim,
            Kind::CapacityReservationInterruption => Action::ReclaimReservation,
            Kind::ScheduledChange
            | Kind::InstanceStopped
            | Kind::InstanceTerminated
            | Kind::EventStatus => Action::Delete,
            Kind::InstanceStatus | Kind::SystemStatus => Action::Terminate,
            Kind::RebalanceRecommendation | Kind::NoOp => Action::Log,
        }
    }

    /// The event Karpenter's AWS provider puts on the NodeClaim and its Node: reason,
    /// message, and whether it is a warning.
    pub fn event(self) -> Option<(&'static str, &'static str, bool)> {
        Some(match self {
            Kind::SpotInterruption => (
                "SpotInterrupted",
                "Spot interruption warning was triggered",
                true,
            ),
            Kind::CapacityReservationInterruption => (
                "CapacityReservationInstanceInterrupted",
                "Capacity Reservation interruption warning was triggered",
                true,
            ),
            Kind::ScheduledChange
            | Kind::InstanceStatus
            | Kind::SystemStatus
            | Kind::EventStatus => (
                "InstanceUnhealthy",
                "An unhealthy warning was triggered for the instance",
                true,
            ),
            Kind::InstanceStopped => ("InstanceStopping", "Instance is stopping", true),
            Kind::InstanceTerminated => ("InstanceTerminating", "Instance is terminating", true),
            Kind::RebalanceRecommendation => (
                "SpotRebalanceRecommendation",
                "Spot rebalance recommendation was triggered",
                false,
            ),
            Kind::NoOp => return None,
        })
    }
}

impl Message {
    /// The notices the controllers act on: one per instance.
    pub fn notices(&self) -> Vec<Notice> {
        let effect = match self.kind.action() {
            Action::Reclaim => NoticeEffect::Reclaim,
            Action::ReclaimReservation => NoticeEffect::ReclaimReservation,
            Action::Delete => NoticeEffect::Delete,
            Action::Terminate => NoticeEffect::Terminate,
            Action::Log => NoticeEffect::Log,
        };
        let category = match self.kind {
            Kind::InstanceStatus => Some("InstanceStatus"),
            Kind::SystemStatus => Some("SystemStatus"),
            Kind::EventStatus => Some("EventStatus"),
            _ => None,
        };
        (self.instance_ids.iter())
            .map(|id| Notice {
                instance_id: id.clone(),
                message_kind: self.kind.as_str(),
                effect,
                event: self.kind.event(),
                unhealthy_category: category,
            })
            .collect()
    }
}

/// A message that cannot be understood.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ParseError {
    /// The body is not JSON.
    #[error("message body is not JSON: {0}")]
    NotJson(String),
    /// A field the message's kind needs is missing or of the wrong type.
    #[error("{detail_type} message: {field}: {problem}")]
    Field {
        /// The message's `detail-type`.
        detail_type: String,
        /// Path of the field.
        field: &'static str,
        /// What is wrong.
        problem: &'static str,
    },
}

/// Parses one SQS message body.
pub fn parse(body: &str) -> Result<Message, ParseError> {
    let v: Value = serde_json::from_str(body).map_err(|e| ParseError::NotJson(e.to_string()))?;
    let source = v["source"].as_str().unwrap_or_default();
    let detail_type = v["detail-type"].as_str().unwrap_or_default().to_string();
    let field = |field, problem| ParseError::Field {
        detail_type: detail_type.clone(),
        field,
        problem,
    };
    let instance_id = || {
        v["detail"]["instance-id"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| field("detail.instance-id", "must be an instance id"))
    };
    let time = v["time"].as_str().map(str::to_string);
    let kind = match (source, detail_type.as_str()) {
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => Kind::SpotInterruption,
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => Kind::RebalanceRecommendation,
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning") => {
            Kind::CapacityReservationInterruption
        }
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            let state = v["detail"]["state"]
                .as_str()
                .ok_or_else(|| field("detail.state", "must be a string"))?;
            match state {
                "stopping" | "stopped" => Kind::InstanceStopped,
                "shutting-down" | "terminated" => Kind::InstanceTerminated,
                _ => Kind::NoOp,
            }
        }
        ("aws.health", "AWS Health Event") => {
            let d = &v["detail"];
            if d["service"] == "EC2" && d["eventTypeCategory"] == "scheduledChange" {
                let entities = d["affectedEntities"]
                    .as_array()
                    .ok_or_else(|| field("detail.affectedEntities", "must be a list"))?;
                let ids = entities
                    .iter()
                    .map(|e| e["entityValue"].as_str().map(str::to_string))
                    .collect::<Option<Vec<String>>>()
                    .ok_or_else(|| {
                        field(
                            "detail.affectedEntities[].entityValue",
                            "must be an instance id",
                        )
                    })?;
                return Ok(Message {
                    kind: Kind::ScheduledChange,
                    instance_ids: ids,
                    time,
                });
            }
            Kind::NoOp
        }
        _ => Kind::NoOp,
    };
    let instance_ids = match kind {
        Kind::NoOp => Vec::new(),
        _ => vec![instance_id()?],
    };
    Ok(Message {
        kind,
        instance_ids,
        time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ec2(detail_type: &str, detail: &str) -> String {
        format!(
            r#"{{"version":"0","id":"7e6a","detail-type":"{detail_type}","source":"aws.ec2","account":"123456789012","time":"2026-01-01T00:00:00Z","region":"us-east-1","resources":["arn:aws:ec2:us-east-1a:instance/i-0abc"],"detail":{detail}}}"#
        )
    }

    #[test]
    fn spot_interruption_warnings_delete_the_instance() {
        let m = parse(&ec2(
            "EC2 Spot Instance Interruption Warning",
            r#"{"instance-id":"i-0abc","instance-action":"terminate"}"#,
        ))
        .unwrap();
        assert_eq!(m.kind, Kind::SpotInterruption);
        assert_eq!(m.instance_ids, ["i-0abc"]);
        assert_eq!(m.kind.action(), Action::Reclaim);
        assert_eq!(m.kind.as_str(), "spot_interrupted");
    }

    #[test]
    fn a_capacity_reservation_interruption_reclaims_the_reservations_offering() {
        let m = parse(&ec2(
            "EC2 Capacity Reservation Instance Interruption Warning",
            r#"{"instance-id":"i-0abc","instance-action":"terminate"}"#,
        ))
        .unwrap();
        assert_eq!(m.kind, Kind::CapacityReservationInterruption);
        assert_eq!(m.instance_ids, ["i-0abc"]);
        assert_eq!(m.kind.action(), Action::ReclaimReservation);
        assert_eq!(m.kind.as_str(), "capacity_reservation_interrupted");
        assert_eq!(
            m.kind.event().map(|e| e.0),
            Some("CapacityReservationInstanceInterrupted")
        );
    }

    #[test]
    fn state_changes_are_acted_on_only_for_stopping_and_terminating_states() {
        let notice = |state: &str| {
            parse(&ec2(
                "EC2 Instance State-change Notification",
                &format!(r#"{{"instance-id":"i-0abc","state":"{state}"}}"#),
            ))
            .unwrap()
            .kind
        };
        for s in ["stopping", "stopped"] {
            assert_eq!(notice(s), Kind::InstanceStopped, "{s}");
        }
        for s in ["shutting-down", "terminated"] {
            assert_eq!(notice(s), Kind::InstanceTerminated, "{s}");
        }
        assert_eq!(notice("running"), Kind::NoOp);
        assert_eq!(notice("pending"), Kind::NoOp);
    }

    #[test]
    fn rebalance_recommendations_are_only_logged() {
        let m = parse(&ec2(
            "EC2 Instance Rebalance Recommendation",
            r#"{"instance-id":"i-0abc"}"#,
        ))
        .unwrap();
        assert_eq!(m.kind.action(), Action::Log);
        assert_eq!(m.instance_ids, ["i-0abc"]);
    }

    #[test]
    fn scheduled_changes_name_every_affected_instance() {
        let body = r#"{"version":"0","id":"1","detail-type":"AWS Health Event","source":"aws.health","account":"1","time":"2026-01-01T00:00:00Z","region":"us-east-1","resources":[],"detail":{"eventArn":"arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x","service":"EC2","eventTypeCode":"AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED","eventTypeCategory":"scheduledChange","affectedEntities":[{"entityValue":"i-1"},{"entityValue":"i-2"}]}}"#;
        let m = parse(body).unwrap();
        assert_eq!(m.kind, Kind::ScheduledChange);
        assert_eq!(m.instance_ids, ["i-1", "i-2"]);
    }

    #[test]
    fn malformed_messages_are_errors_that_name_the_field() {
        assert!(matches!(parse("not json"), Err(ParseError::NotJson(_))));
        let e = parse(&ec2(
            "EC2 Spot Instance Interruption Warning",
            r#"{"instance-action":"terminate"}"#,
        ))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "EC2 Spot Instance Interruption Warning message: detail.instance-id: must be an instance id"
        );
        let e = parse(&ec2(
            "EC2 Instance State-change Notification",
            r#"{"instance-id":"i-1"}"#,
        ))
        .unwrap_err();
        assert!(e.to_string().contains("detail.state"), "{e}");
    }

    #[test]
    fn other_sources_are_no_ops() {
        let m = parse(r#"{"source":"aws.s3","detail-type":"Object Created","detail":{}}"#).unwrap();
        assert_eq!(m.kind, Kind::NoOp);
        assert!(m.instance_ids.is_empty());
    }
}
