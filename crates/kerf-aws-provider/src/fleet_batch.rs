//! Launches of the same shape go to EC2 as one CreateFleet request, as Karpenter's batcher
//! sends them: requests that are the same but for their count wait together — until 35 ms pass
//! with no other joining, 1 s after the first, or 1,000 joined — then one `instant` fleet asks
//! for all of them, and each launch takes one of the instances it returned. When EC2 launched
//! fewer, the launches left over get the fleet's errors (or, with none, Karpenter's "too few
//! instances returned" error, which is retried), as each would have from its own request.
//!
//! A provisioning batch of a hundred NodeClaims of one NodePool makes a handful of fleet
//! requests instead of a hundred, which keeps the EC2 mutating-call budget (shared with
//! CreateTags, TerminateInstances and CreateLaunchTemplate) for the rest.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_sdk_ec2::operation::create_fleet::builders::CreateFleetFluentBuilder;
use aws_sdk_ec2::types::{
    CreateFleetError, CreateFleetInstance, TargetCapacitySpecificationRequest,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

use kerf_core::metrics::{Recorder, families};

use crate::{AwsError, classify};

/// A batch closes this long after the last request joined it.
const IDLE: Duration = Duration::from_millis(35);
/// A batch closes at the latest this long after its first request.
const MAX_WAIT: Duration = Duration::from_secs(1);
/// A batch closes when this many requests joined it.
const MAX_ITEMS: usize = 1_000;
/// The batcher label of the batch metrics (Karpenter's name for its CreateFleet batcher).
const BATCHER: &str = "create_fleet";
/// Karpenter's error code for a launch left without an instance while EC2 named no error.
const TOO_FEW: &str = "too few instances returned";

/// One launch's part of a batch's answer.
#[derive(Debug)]
pub(crate) struct Share {
    /// Its instance, when EC2 launched one for it.
    pub instance: Option<CreateFleetInstance>,
    /// The errors EC2 answered the whole request with.
    pub errors: Vec<CreateFleetError>,
}

type Waiter = oneshot::Sender<Result<Share, AwsError>>;

/// A batch still taking requests.
struct Open {
    /// Tells this batch from a later one of the same shape, once this one was sent.
    generation: u64,
    /// The first request of the batch; the others are the same but for their count.
    request: CreateFleetFluentBuilder,
    /// Where the batch's size and window are counted (Karpenter's batcher families).
    metrics: Option<Recorder>,
    waiters: Vec<Waiter>,
    first: Instant,
    last: Instant,
}

/// Open batches, by the shape of their request.
type Batches = Arc<Mutex<HashMap<String, Open>>>;

/// Gathers CreateFleet requests of one instance each into batches of the same shape.
#[derive(Default)]
pub(crate) struct FleetBatcher {
    open: Batches,
    generations: AtomicU64,
}

impl std::fmt::Debug for FleetBatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = lock(&self.open).len();
        f.debug_struct("FleetBatcher").field("open", &open).finish()
    }
}

impl FleetBatcher {
    /// Sends `request` (for one instance) in a batch with others of its shape, and answers
    /// with this request's part of the fleet's answer; counts the batch into `metrics`.
    pub(crate) async fn create_fleet(
        &self,
        request: CreateFleetFluentBuilder,
        metrics: Option<Recorder>,
    ) -> Result<Share, AwsError> {
        // the input's every field but a count no request here changes: the same text is the
        // same request
        let key = format!("{:?}", request.as_input());
        let (answer, answered) = oneshot::channel();
        let now = Instant::now();
        let full = {
            let mut open = lock(&self.open);
            match open.get_mut(&key) {
                Some(batch) => {
                    batch.waiters.push(answer);
                    batch.last = now;
                    if batch.waiters.len() >= MAX_ITEMS {
                        open.remove(&key)
                    } else {
                        None
                    }
                }
                None => {
                    let generation = self.generations.fetch_add(1, Ordering::Relaxed);
                    open.insert(
                        key.clone(),
                        Open {
                            generation,
                            request,
                            metrics,
                            waiters: vec![answer],
                            first: now,
                            last: now,
                        },
                    );
                    tokio::spawn(close_when_due(Arc::clone(&self.open), key, generation));
                    None
                }
            }
        };
        if let Some(batch) = full {
            tokio::spawn(send(batch));
        }
        answered.await.unwrap_or_else(|_| {
            Err(AwsError::Api {
                call: "CreateFleet",
                message: "the batched request ended without an answer".into(),
            })
        })
    }
}

fn lock(batches: &Batches) -> std::sync::MutexGuard<'_, HashMap<String, Open>> {
    batches.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends the batch `generation` of `key` once it has been idle long enough or waited the most.
async fn close_when_due(batches: Batches, key: String, generation: u64) {
    let batch = loop {
        let due = {
            let mut open = lock(&batches);
            let Some(b) = open.get(&key).filter(|b| b.generation == generation) else {
                // sent already, full
                return;
            };
            let due = (b.last + IDLE).min(b.first + MAX_WAIT);
            if Instant::now() >= due {
                break open.remove(&key);
            }
            due
        };
        tokio::time::sleep_until(due).await;
    };
    if let Some(batch) = batch {
        send(batch).await;
    }
}

/// One fleet request for the whole batch; each waiter gets an instance of it, in the order
/// EC2 listed them, or the request's errors.
async fn send(batch: Open) {
    if let Some(m) = &batch.metrics {
        let labels = [BATCHER];
        let size = batch.waiters.len() as f64;
        m.observe(&families::CLOUDPROVIDER_BATCHER_BATCH_SIZE, &labels, size);
        let window = batch.first.elapsed().as_secs_f64();
        m.observe(
            &families::CLOUDPROVIDER_BATCHER_BATCH_TIME_SECONDS,
            &labels,
            window,
        );
    }
    let count = i32::try_from(batch.waiters.len()).unwrap_or(i32::MAX);
    let asked = batch.request.as_input().get_target_capacity_specification();
    let capacity = TargetCapacitySpecificationRequest::builder()
        .total_target_capacity(count)
        .set_default_target_capacity_type(
            asked
                .as_ref()
                .and_then(|c| c.default_target_capacity_type())
                .cloned(),
        )
        .build();
    let answer = batch
        .request
        .target_capacity_specification(capacity)
        .send()
        .await
        .map_err(|e| classify("CreateFleet", "ec2:CreateFleet", e));
    let out = match answer {
        Ok(out) => out,
        Err(e) => {
            for waiter in batch.waiters {
                let _ = waiter.send(Err(e.clone()));
            }
            return;
        }
    };
    // EC2 groups the instances of one override under one entry; each launch takes one id
    let mut instances = out.instances().iter().flat_map(|entry| {
        entry.instance_ids().iter().map(move |id| {
            let mut one = entry.clone();
            one.instance_ids = Some(vec![id.clone()]);
            one
        })
    });
    let mut errors = out.errors().to_vec();
    // a request EC2 answered with nothing at all is judged by its launch as before (every
    // offering asked for unavailable); one it filled in part left the rest without a reason
    let some_launched = !out.instances().is_empty();
    for waiter in batch.waiters {
        let instance = instances.next();
        if instance.is_none() && errors.is_empty() && some_launched {
            errors.push(
                CreateFleetError::builder()
                    .error_code(TOO_FEW)
                    .error_message(TOO_FEW)
                    .build(),
            );
        }
        let _ = waiter.send(Ok(Share {
            instance,
            errors: errors.clone(),
        }));
    }
    // more instances than launches asked (EC2 never should): untagged, garbage collection
    // terminates them once they are older than a launch in flight can be
}
