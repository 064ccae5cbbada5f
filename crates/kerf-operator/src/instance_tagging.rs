//! The tag naming an instance's NodeClaim, written after its launch: launches of one shape go
//! out as one fleet request, which cannot tag its instances apart. One CreateTags call a second,
//! as Karpenter's tagging controller paces them, since CreateTags draws on the same EC2
//! mutating-call budget as the launches of the next burst. An instance listed without the tag
//! and not waiting here (the operator restarted before its turn, or the call failed) is tagged
//! from the NodeClaim whose `status.providerID` names it.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kerf_aws_provider::launch::Fleet;
use serde_json::json;

use crate::log;

/// The pause after each CreateTags call.
const PACE: Duration = Duration::from_secs(1);
/// The controller name the log lines carry (Karpenter's).
const CONTROLLER: &str = "nodeclaim.tagging";

/// Instances waiting for their NodeClaim's tag, oldest first.
#[derive(Default)]
pub struct Tagging {
    waiting: Mutex<Waiting>,
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct Waiting {
    /// (instance id, NodeClaim name).
    queue: VecDeque<(String, String)>,
    /// The instance ids in `queue`, and the one being tagged.
    ids: BTreeSet<String>,
}

impl Tagging {
    /// Queues `instance_id` to be tagged with `nodeclaim`, unless it waits already.
    pub fn push(&self, instance_id: &str, nodeclaim: &str) {
        let mut w = self.lock();
        if w.ids.insert(instance_id.to_string()) {
            (w.queue).push_back((instance_id.to_string(), nodeclaim.to_string()));
            self.wake.notify_one();
        }
    }

    /// Whether `instance_id` waits for its tag (or is being tagged).
    pub fn waits(&self, instance_id: &str) -> bool {
        self.lock().ids.contains(instance_id)
    }

    /// Tags the waiting instances one at a time, [`PACE`] apart, for as long as the
    /// operator runs. A failed call is logged once; the instance is tried again when a
    /// listing finds it untagged.
    pub async fn run(self: Arc<Self>, fleet: Arc<Fleet>) {
        loop {
            let next = self.lock().queue.pop_front();
            let Some((instance, nodeclaim)) = next else {
                self.wake.notified().await;
                continue;
            };
            if let Err(e) = fleet.tag_nodeclaim(&instance, &nodeclaim).await {
                log::warn(
                    CONTROLLER,
                    "tagging the instance with its nodeclaim",
                    json!({"instance": instance, "NodeClaim": {"name": nodeclaim}, "error": e.to_string()}),
                );
            }
            self.lock().ids.remove(&instance);
            tokio::time::sleep(PACE).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_waits_once() {
        let t = Tagging::default();
        t.push("i-1", "a");
        t.push("i-1", "a");
        t.push("i-2", "b");
        assert!(t.waits("i-1") && t.waits("i-2") && !t.waits("i-3"));
        let queued: Vec<_> = t.lock().queue.iter().map(|(i, _)| i.clone()).collect();
        assert_eq!(queued, ["i-1", "i-2"]);
    }
}
