//! The tag naming an instance's NodeClaim, written after its launch: launches of one shape go
//! out as one fleet request, which cannot tag its instances apart. One CreateTags call a second,
//! as Karpenter's tagging controller paces them, since CreateTags draws on the same EC2
//! mutating-call budget as the launches of the next burst. An instance listed without the tag
//! and not waiting here (the operator restarted before its turn, or the call failed) is tagged
//! from the NodeClaim whose `status.providerID` names it.

use std::collections::{BTreeMap, VecDeque};
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
    /// Instance ids, oldest first.
    queue: VecDeque<String>,
    /// The NodeClaim of each instance in `queue`, and of the one being tagged.
    names: BTreeMap<String, String>,
}

impl Tagging {
    /// Queues `instance_id` to be tagged with `nodeclaim`, unless it waits already.
    pub fn push(&self, instance_id: &str, nodeclaim: &str) {
        let mut w = self.lock();
        if !w.names.contains_key(instance_id) {
            (w.names).insert(instance_id.to_string(), nodeclaim.to_string());
            w.queue.push_back(instance_id.to_string());
            self.wake.notify_one();
        }
    }

    /// The NodeClaim `instance_id` waits to be tagged with (or is being tagged with).
    pub fn nodeclaim_of(&self, instance_id: &str) -> Option<String> {
        self.lock().names.get(instance_id).cloned()
    }

    /// Tags the waiting instances one at a time, [`PACE`] apart, for as long as the
    /// operator runs. A failed call is logged once; the instance is tried again when a
    /// listing finds it untagged.
    pub async fn run(self: Arc<Self>, fleet: Arc<Fleet>) {
        loop {
            let next = {
                let mut w = self.lock();
                let id = w.queue.pop_front();
                id.and_then(|id| w.names.get(&id).map(|name| (id, name.clone())))
            };
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
            self.lock().names.remove(&instance);
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
        t.push("i-1", "c");
        assert_eq!(t.nodeclaim_of("i-1").as_deref(), Some("a"));
        assert_eq!(t.nodeclaim_of("i-2").as_deref(), Some("b"));
        assert_eq!(t.nodeclaim_of("i-3"), None);
        assert_eq!(t.lock().queue, ["i-1", "i-2"]);
    }
}
