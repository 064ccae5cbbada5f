//! EC2's status checks read through DescribeInstanceStatus against moto's server, with
//! failed checks and scheduled events played by `scripts/moto-server.py --instance-status`
//! (moto passes every check): what fails long enough, or is scheduled, becomes a message.

mod support;

use kerf_aws_provider::instance_status::InstanceStatusChecks;
use support::{ARM64_IMAGE, Moto, NOW};

#[tokio::test]
async fn failed_checks_and_scheduled_events_become_messages() {
    let moto = Moto::start("instance-status", &[]);
    let config = moto.config().await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let run = ec2
        .run_instances()
        .image_id(ARM64_IMAGE)
        .min_count(4)
        .max_count(4)
        .send()
        .await
        .expect("run instances");
    let ids: Vec<String> = run
        .instances()
        .iter()
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect();
    let checks = InstanceStatusChecks::new(&config);
    assert!(
        checks.unhealthy(NOW).await.expect("statuses").is_empty(),
        "every check passed"
    );
    moto.set_instance_status(serde_json::json!({
        // failed five minutes ago
        &ids[0]: {"instance": "impaired", "impairedSince": NOW - 300},
        // failed a minute ago: not yet
        &ids[1]: {"instance": "impaired", "impairedSince": NOW - 60},
        // the host failed, and its retirement is scheduled
        &ids[2]: {"system": "impaired", "impairedSince": NOW - 600, "events": ["instance-retirement"]},
        // an event Karpenter does not vacate for
        &ids[3]: {"events": ["instance-reboot-completed"]},
    }));
    let mut got: Vec<(String, &str)> = checks
        .unhealthy(NOW)
        .await
        .expect("statuses")
        .into_iter()
        .map(|m| (m.instance_ids[0].clone(), m.kind.as_str()))
        .collect();
    got.sort();
    let mut want = vec![
        (ids[0].clone(), "instance_status"),
        (ids[2].clone(), "system_status"),
        (ids[2].clone(), "event_status"),
    ];
    want.sort();
    assert_eq!(got, want);
}
