//! The interruption queue against moto's SQS: a spot interruption warning is parsed and
//! deleted, a malformed message is counted and deleted too, and a queue that does not exist
//! says which.

mod support;

use std::time::Duration;

use kerf_aws::interruption::Kind;
use kerf_aws_provider::interruption_queue::InterruptionQueue;
use support::{CLUSTER, Moto};

const SPOT_WARNING: &str = r#"{"version":"0","id":"1e5527d7-bb36-4607-3370-4164db56a40e","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2026-11-25T10:00:00Z","region":"ap-northeast-2","resources":["arn:aws:ec2:ap-northeast-2a:instance/i-0b662ef9931388ba0"],"detail":{"instance-id":"i-0b662ef9931388ba0","instance-action":"terminate"}}"#;

#[tokio::test]
async fn messages_are_parsed_and_deleted_and_malformed_ones_counted() {
    let moto = Moto::start("queue", &[]);
    let config = moto.config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let url = sqs
        .create_queue()
        .queue_name(CLUSTER)
        .send()
        .await
        .expect("create queue")
        .queue_url()
        .expect("url")
        .to_string();
    for body in [
        SPOT_WARNING,
        "{not json",
        r#"{"detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","detail":{}}"#,
    ] {
        sqs.send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .expect("send");
    }
    let queue = InterruptionQueue::open(&config, CLUSTER)
        .await
        .expect("open")
        .with_wait(Duration::from_secs(1));
    let mut messages = Vec::new();
    let mut malformed = Vec::new();
    // SQS may hand the three over in more than one receive
    for _ in 0..5 {
        let polled = queue.poll().await.expect("poll");
        messages.extend(polled.messages);
        malformed.extend(polled.malformed);
        if messages.len() + malformed.len() == 3 {
            break;
        }
    }
    assert_eq!(messages.len(), 1, "{messages:?} {malformed:?}");
    assert_eq!(messages[0].kind, Kind::SpotInterruption);
    assert_eq!(messages[0].instance_ids, ["i-0b662ef9931388ba0"]);
    assert_eq!(malformed.len(), 2, "{malformed:?}");
    assert!(
        malformed
            .iter()
            .any(|m| m.contains("detail.instance-id: must be an instance id")),
        "{malformed:?}"
    );
    assert_eq!(queue.malformed(), 2);

    // every message was deleted: nothing comes back once the visibility timeout is over
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(
            aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        )
        .send()
        .await
        .expect("attributes");
    let count = |name| {
        attributes
            .attributes()
            .and_then(|a| a.get(&name))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(
        count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages),
        "0"
    );
    assert_eq!(
        count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        "0"
    );

    let missing = InterruptionQueue::open(&config, "no-such-queue")
        .await
        .expect_err("no queue");
    assert!(
        missing
            .to_string()
            .contains("interruption queue no-such-queue does not exist"),
        "{missing}"
    );
}
