//! The interruption queue (`settings.interruptionQueue`): the SQS queue EventBridge fills
//! with spot interruption warnings, rebalance recommendations, scheduled changes and state
//! changes (deploy/aws/cloudformation.yaml makes it). Each poll waits up to 20 s for up to 10
//! messages, parses them with `kerf_aws::interruption`, and deletes every message it read:
//! one it understood has been handed on, one it could not parse would never parse, and
//! leaving either would only bring it back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use kerf_aws::interruption::{self, Message};

use crate::{AwsError, classify};

/// SQS's longest long poll.
pub const LONG_POLL: Duration = Duration::from_secs(20);
/// SQS's most messages per receive.
const BATCH: i32 = 10;

/// A queue Kerf reads interruption messages from.
#[derive(Debug)]
pub struct InterruptionQueue {
    sqs: aws_sdk_sqs::Client,
    url: String,
    wait: Duration,
    malformed: AtomicU64,
}

/// What one poll read.
#[derive(Debug, Default)]
pub struct Polled {
    /// The messages understood.
    pub messages: Vec<Message>,
    /// Why each of the others could not be (they were deleted too).
    pub malformed: Vec<String>,
    /// How many of the messages received were deleted from the queue.
    pub deleted: usize,
}

impl InterruptionQueue {
    /// The queue named `name` (its URL looked up once).
    pub async fn open(
        config: &aws_config::SdkConfig,
        name: &str,
    ) -> Result<InterruptionQueue, AwsError> {
        let sqs = crate::client!(aws_sdk_sqs, config);
        let out = sqs
            .get_queue_url()
            .queue_name(name)
            .send()
            .await
            .map_err(|e| match e.code() {
                Some("AWS.SimpleQueueService.NonExistentQueue" | "QueueDoesNotExist") => {
                    AwsError::Api {
                        call: "GetQueueUrl",
                        message: format!(
                            "interruption queue {name} does not exist (deploy/aws/cloudformation.yaml creates it)"
                        ),
                    }
                }
                _ => classify("GetQueueUrl", "sqs:GetQueueUrl", e),
            })?;
        Ok(InterruptionQueue {
            sqs,
            url: out.queue_url().unwrap_or_default().to_string(),
            wait: LONG_POLL,
            malformed: AtomicU64::new(0),
        })
    }

    /// Polls for at most `wait` instead of [`LONG_POLL`] (whole seconds).
    pub fn with_wait(mut self, wait: Duration) -> InterruptionQueue {
        self.wait = wait;
        self
    }

    /// How many messages could not be parsed since the queue was opened.
    pub fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }

    /// Waits for messages, parses and deletes them.
    pub async fn poll(&self) -> Result<Polled, AwsError> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(BATCH)
            .wait_time_seconds(i32::try_from(self.wait.as_secs()).unwrap_or(20).min(20))
            .send()
            .await
            .map_err(|e| classify("ReceiveMessage", "sqs:ReceiveMessage", e))?;
        let mut polled = Polled::default();
        let mut entries = Vec::new();
        for (i, m) in out.messages().iter().enumerate() {
            match interruption::parse(m.body().unwrap_or_default()) {
                Ok(message) => polled.messages.push(message),
                Err(e) => {
                    self.malformed.fetch_add(1, Ordering::Relaxed);
                    polled.malformed.push(e.to_string());
                }
            }
            if let Some(receipt) = m.receipt_handle() {
                entries.push(
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(receipt)
                        .build()
                        .map_err(|e| AwsError::Api {
                            call: "DeleteMessageBatch",
                            message: e.to_string(),
                        })?,
                );
            }
        }
        if !entries.is_empty() {
            let out = self
                .sqs
                .delete_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| classify("DeleteMessageBatch", "sqs:DeleteMessage", e))?;
            polled.deleted = out.successful().len();
        }
        Ok(polled)
    }
}
