//! EC2's status checks, read as Karpenter v1.15's `interruption.instancestatus` controller
//! reads them: every minute, DescribeInstanceStatus for impaired instance checks, impaired
//! system checks and scheduled events (three calls, since EC2 ANDs filters of different
//! names). A failed instance or system check counts once it has failed for two minutes; a
//! scheduled event at once (the host is to be vacated). EBS checks are left alone, as
//! Karpenter leaves them. Each unhealthy instance becomes one message per category, which
//! the interruption controller acts on: failed checks end the instance without a graceful
//! drain, events drain it.

use std::time::Duration;

use aws_sdk_ec2::types::{Filter, InstanceStatus, StatusType, SummaryStatus};
use kerf_aws::interruption::{Kind, Message};

use crate::{AwsError, classify};

/// How often the checks are read (Karpenter's `InstanceStatusInterval`).
pub const INTERVAL: Duration = Duration::from_secs(60);
/// How long a check must have failed before it counts (Karpenter's `UnhealthyThreshold`).
pub const UNHEALTHY_AFTER: Duration = Duration::from_secs(120);
/// The scheduled events that vacate an instance.
const EVENT_CODES: [&str; 5] = [
    "instance-reboot",
    "system-reboot",
    "system-maintenance",
    "instance-retirement",
    "instance-stop",
];

/// Reads the region's status checks.
pub struct InstanceStatusChecks {
    ec2: aws_sdk_ec2::Client,
}

impl InstanceStatusChecks {
    /// Reads the region of `config`.
    pub fn new(config: &aws_config::SdkConfig) -> InstanceStatusChecks {
        InstanceStatusChecks {
            ec2: crate::client!(aws_sdk_ec2, config),
        }
    }

    /// The unhealthy instances now (`now` in seconds since the Unix epoch), one message per
    /// instance and category.
    pub async fn unhealthy(&self, now: i64) -> Result<Vec<Message>, AwsError> {
        let filter = |name: &str, values: &[&str]| {
            Filter::builder()
                .name(name)
                .set_values(Some(values.iter().map(|v| v.to_string()).collect()))
                .build()
        };
        let sets = [
            filter("instance-status.status", &["impaired"]),
            filter("system-status.status", &["impaired"]),
            filter("event.code", &EVENT_CODES),
        ];
        let mut statuses: Vec<InstanceStatus> = Vec::new();
        for f in sets {
            let page: Vec<InstanceStatus> = self
                .ec2
                .describe_instance_status()
                .filters(f)
                .into_paginator()
                .items()
                .send()
                .try_collect()
                .await
                .map_err(|e| classify("DescribeInstanceStatus", "ec2:DescribeInstanceStatus", e))?;
            for s in page {
                if !statuses.iter().any(|t| t.instance_id() == s.instance_id()) {
                    statuses.push(s);
                }
            }
        }
        Ok(unhealthy_of(&statuses, now))
    }
}

/// The messages `statuses` call for at `now` (seconds since the Unix epoch).
pub fn unhealthy_of(statuses: &[InstanceStatus], now: i64) -> Vec<Message> {
    let threshold = UNHEALTHY_AFTER.as_secs() as i64;
    let failed_long = |summary: Option<&aws_sdk_ec2::types::InstanceStatusSummary>| {
        summary.is_some_and(|s| {
            s.status() == Some(&SummaryStatus::Impaired)
                && s.details().iter().any(|d| {
                    d.status() == Some(&StatusType::Failed)
                        && d.impaired_since()
                            .is_some_and(|t| now - t.secs() >= threshold)
                })
        })
    };
    let mut out = Vec::new();
    for s in statuses {
        let Some(id) = s.instance_id() else {
            continue;
        };
        let scheduled = s
            .events()
            .iter()
            .any(|e| e.code().is_some_and(|c| EVENT_CODES.contains(&c.as_str())));
        for (kind, unhealthy) in [
            (Kind::InstanceStatus, failed_long(s.instance_status())),
            (Kind::SystemStatus, failed_long(s.system_status())),
            (Kind::EventStatus, scheduled),
        ] {
            if unhealthy {
                out.push(Message {
                    kind,
                    instance_ids: vec![id.to_string()],
                    time: None,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::primitives::DateTime;
    use aws_sdk_ec2::types::{
        EventCode, InstanceStatusDetails, InstanceStatusEvent, InstanceStatusSummary, StatusName,
    };

    const NOW: i64 = 1_800_000_000;

    fn summary(status: SummaryStatus, failed_since: Option<i64>) -> InstanceStatusSummary {
        let mut b = InstanceStatusSummary::builder().status(status);
        if let Some(since) = failed_since {
            b = b.details(
                InstanceStatusDetails::builder()
                    .name(StatusName::Reachability)
                    .status(StatusType::Failed)
                    .impaired_since(DateTime::from_secs(since))
                    .build(),
            );
        }
        b.build()
    }

    fn kinds(statuses: &[InstanceStatus]) -> Vec<(String, &'static str)> {
        unhealthy_of(statuses, NOW)
            .into_iter()
            .map(|m| (m.instance_ids[0].clone(), m.kind.as_str()))
            .collect()
    }

    #[test]
    fn a_failed_check_counts_after_two_minutes_and_an_event_at_once() {
        let statuses = [
            // failed for two minutes: the instance's own check
            InstanceStatus::builder()
                .instance_id("i-broken")
                .instance_status(summary(SummaryStatus::Impaired, Some(NOW - 120)))
                .system_status(summary(SummaryStatus::Ok, None))
                .build(),
            // failed for a minute: not yet
            InstanceStatus::builder()
                .instance_id("i-flaky")
                .instance_status(summary(SummaryStatus::Impaired, Some(NOW - 60)))
                .build(),
            // the host's check, and a retirement scheduled on it
            InstanceStatus::builder()
                .instance_id("i-host")
                .system_status(summary(SummaryStatus::Impaired, Some(NOW - 600)))
                .events(
                    InstanceStatusEvent::builder()
                        .code(EventCode::InstanceRetirement)
                        .build(),
                )
                .build(),
            // impaired without a failed detail (initializing): nothing
            InstanceStatus::builder()
                .instance_id("i-starting")
                .instance_status(summary(SummaryStatus::Impaired, None))
                .build(),
        ];
        assert_eq!(
            kinds(&statuses),
            [
                ("i-broken".to_string(), "instance_status"),
                ("i-host".to_string(), "system_status"),
                ("i-host".to_string(), "event_status"),
            ]
        );
    }
}
