//! Writes that failed for a reason that may pass (the API server unreachable, throttling,
//! failing, or a conflict), kept and tried again with a backoff until they succeed: what the
//! controllers decided is carried out after an outage instead of being lost, as
//! controller-runtime requeues a reconcile that returned an error. Every shell that carries
//! out actions keeps one (the operator, and the simulator when its API server fails). Each write is idempotent
//! (a create that was stored although its answer was lost meets 409 and is done; a delete
//! meets 404 and is done), so trying one again whose first outcome is unknown is safe.

use std::time::Duration;

use crate::controllers::Action;
use crate::controllers::lifecycle::retry_wait;

/// After this many tries (about ten minutes) a write is given up, and said so.
const TRIES: u32 = 64;

/// The writes waiting to be tried again, in the order they failed.
#[derive(Debug, Default)]
pub struct Unfinished {
    waiting: Vec<Waiting>,
}

#[derive(Debug)]
struct Waiting {
    due: Duration,
    tries: u32,
    action: Action,
}

/// Whether an action is a write worth trying again. A launch has its own backoff in the
/// controllers; an eviction is asked again by the drain's next round; a disruption
/// command's mark is given up (its command with it) rather than written late; log lines and
/// events are not writes of the controllers' state.
pub fn replayable(action: &Action) -> bool {
    !matches!(
        action,
        Action::Taint { by: Some(_), .. }
            | Action::Log(_)
            | Action::Event(_)
            | Action::Launch { .. }
            | Action::Reboot { .. }
            | Action::ListInstances
            | Action::ListInstanceTypes { .. }
            | Action::Evict { .. }
            | Action::Disrupting { .. }
    )
}

impl Unfinished {
    /// Keeps `action`, which has failed `tries` times, to be tried again after its backoff;
    /// false when it has been tried too often and is given up.
    pub fn keep(&mut self, action: Action, tries: u32, now: Duration) -> bool {
        if tries >= TRIES {
            return false;
        }
        let wait = retry_wait(tries);
        self.waiting.push(Waiting {
            due: now + wait,
            tries,
            action,
        });
        true
    }

    /// The writes due at `now`, with how often each has failed, oldest first.
    pub fn due(&mut self, now: Duration) -> Vec<(u32, Action)> {
        let (due, later): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| w.due <= now);
        self.waiting = later;
        due.into_iter().map(|w| (w.tries, w.action)).collect()
    }

    /// Drops the waiting writes `action` undoes: a NodeClaim being deleted drops a create of
    /// it still waiting (tried after the delete, both caught by one outage, it would bring
    /// the NodeClaim back), and the launch and status writes held behind it; a taint and its
    /// removal drop each other; a status (NodeClaim, NodePool, NodeOverlay) drops an older one
    /// of the same object.
    pub fn superseded_by(&mut self, action: &Action) {
        match action {
            // and a launch or status write held behind that create, which would launch an
            // instance nothing owns or write to an object that is gone
            Action::DeleteNodeClaim { nodeclaim } => self.waiting.retain(|w| match &w.action {
                Action::CreateNodeClaim(c) => {
                    c.metadata.name.as_deref() != Some(nodeclaim.as_str())
                }
                Action::Launch { nodeclaim: n, .. }
                | Action::PatchNodeClaimStatus { nodeclaim: n, .. } => n != nodeclaim,
                _ => true,
            }),
            // a taint and its removal: the later one decides, an earlier one still waiting
            // would undo it
            Action::Taint { node, taint, .. } => self.waiting.retain(|w| {
                !matches!(&w.action, Action::RemoveTaint { node: n, key }
                    if n == node && *key == taint.key)
            }),
            Action::RemoveTaint { node, key } => self.waiting.retain(|w| {
                !matches!(&w.action, Action::Taint { node: n, taint, .. }
                    if n == node && taint.key == *key)
            }),
            // a status carries the whole of it as it was asked for: an older one still
            // waiting would write back what the newer one replaced
            Action::PatchNodeClaimStatus { nodeclaim, .. } => self.waiting.retain(|w| {
                !matches!(&w.action, Action::PatchNodeClaimStatus { nodeclaim: n, .. }
                    if n == nodeclaim)
            }),
            Action::PatchNodePoolStatus { node_pool, .. } => self.waiting.retain(|w| {
                !matches!(&w.action, Action::PatchNodePoolStatus { node_pool: n, .. }
                    if n == node_pool)
            }),
            Action::PatchNodeOverlayStatus { node_overlay, .. } => self.waiting.retain(|w| {
                !matches!(&w.action, Action::PatchNodeOverlayStatus { node_overlay: n, .. }
                    if n == node_overlay)
            }),
            _ => {}
        }
    }

    /// Holds `action` back when it is for a NodeClaim whose create is still waiting: it is
    /// kept to go out right after that create (a launch or a status patch for a NodeClaim the
    /// API server does not have would launch an instance nothing owns, or be refused). True
    /// when it was held.
    pub fn held_behind_create(&mut self, action: &Action) -> bool {
        let name = match action {
            Action::Launch { nodeclaim, .. } | Action::PatchNodeClaimStatus { nodeclaim, .. } => {
                nodeclaim
            }
            _ => return false,
        };
        let create = self.waiting.iter().find(|w| {
            matches!(&w.action, Action::CreateNodeClaim(c)
                if c.metadata.name.as_deref() == Some(name.as_str()))
        });
        let Some(due) = create.map(|w| w.due) else {
            return false;
        };
        self.waiting.push(Waiting {
            due,
            tries: 0,
            action: action.clone(),
        });
        true
    }

    /// When the next write is due.
    pub fn next(&self) -> Option<Duration> {
        self.waiting.iter().map(|w| w.due).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn delete(name: &str) -> Action {
        Action::DeleteNodeClaim {
            nodeclaim: name.into(),
        }
    }

    fn create(name: &str) -> Action {
        let claim: kerf_api::NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                "name": "default"}, "requirements": []},
        }))
        .expect("a NodeClaim");
        Action::CreateNodeClaim(Box::new(claim))
    }

    fn launch(name: &str) -> Action {
        let Action::CreateNodeClaim(object) = create(name) else {
            unreachable!("create makes a create")
        };
        let pool: kerf_api::NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws",
                "kind": "EC2NodeClass", "name": "default"}, "requirements": []}}},
        }))
        .expect("a NodePool");
        let claim = crate::objects::claim_record(&object, Duration::ZERO, None, |_, _, _| 0.0);
        Action::Launch {
            nodeclaim: name.into(),
            request: Box::new(crate::controllers::LaunchRequest {
                claim,
                node_pool: pool,
                node_class: None,
                unavailable: crate::unavailable::UnavailableOfferings::new(),
                at: Duration::ZERO,
            }),
        }
    }

    #[test]
    fn a_failed_write_comes_back_after_a_growing_backoff_in_order() {
        let mut u = Unfinished::default();
        let t = Duration::from_secs(100);
        assert!(u.keep(delete("a"), 1, t));
        assert!(u.keep(delete("b"), 1, t));
        assert!(u.keep(delete("c"), 5, t));
        assert_eq!(u.next(), Some(t + Duration::from_secs(2)));
        assert!(u.due(t + Duration::from_secs(1)).is_empty());
        let due: Vec<String> = u
            .due(t + Duration::from_secs(2))
            .into_iter()
            .map(|(_, a)| match a {
                Action::DeleteNodeClaim { nodeclaim } => nodeclaim,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(due, ["a", "b"]);
        // the backoff stops growing at ten seconds
        assert_eq!(u.next(), Some(t + Duration::from_secs(10)));
        assert!(!u.keep(delete("d"), TRIES, t), "given up");
    }

    #[test]
    fn a_waiting_create_is_dropped_when_its_nodeclaim_is_deleted() {
        let mut u = Unfinished::default();
        let t = Duration::from_secs(100);
        assert!(u.keep(create("a"), 5, t));
        assert!(u.keep(delete("b"), 1, t));
        u.superseded_by(&delete("a"));
        let left: Vec<(u32, Action)> = u.due(t + Duration::from_secs(10));
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(matches!(&left[0].1, Action::DeleteNodeClaim { nodeclaim } if nodeclaim == "b"));
    }

    #[test]
    fn a_waiting_status_is_dropped_for_a_newer_one_of_its_nodeclaim() {
        let status = |n: &str, provider: &str| Action::PatchNodeClaimStatus {
            nodeclaim: n.into(),
            status: Box::new(kerf_api::nodeclaim::NodeClaimStatus {
                provider_id: Some(provider.into()),
                ..Default::default()
            }),
            labels: BTreeMap::new(),
        };
        let mut u = Unfinished::default();
        let t = Duration::from_secs(100);
        assert!(u.keep(status("a", "old"), 1, t));
        assert!(u.keep(status("b", "other"), 1, t));
        u.superseded_by(&status("a", "new"));
        let left = u.due(t + Duration::from_secs(10));
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(matches!(&left[0].1,
            Action::PatchNodeClaimStatus { nodeclaim, .. } if nodeclaim == "b"));
    }

    /// A NodePool's first status (its conditions Unknown) still waiting after an outage
    /// would write back over the real one that went out after it.
    #[test]
    fn a_waiting_nodepool_status_is_dropped_for_a_newer_one() {
        let status = |nodes: i64| Action::PatchNodePoolStatus {
            node_pool: "default".into(),
            status: Box::new(kerf_api::nodepool::NodePoolStatus {
                nodes: Some(nodes),
                ..Default::default()
            }),
        };
        let mut u = Unfinished::default();
        let t = Duration::from_secs(100);
        assert!(u.keep(status(0), 1, t));
        u.superseded_by(&status(1));
        let left = u.due(t + Duration::from_secs(10));
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_launch_held_behind_a_create_goes_with_it_when_the_nodeclaim_is_deleted() {
        let mut u = Unfinished::default();
        let t = Duration::from_secs(100);
        assert!(u.keep(create("a"), 1, t));
        assert!(u.held_behind_create(&launch("a")));
        assert!(u.keep(create("b"), 1, t));
        assert!(u.held_behind_create(&launch("b")));
        u.superseded_by(&delete("a"));
        let left: Vec<String> = (u.due(t + Duration::from_secs(10)).into_iter())
            .map(|(_, a)| format!("{a:?}").chars().take(40).collect())
            .collect();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(left.iter().all(|a| !a.contains("\"a\"")), "{left:?}");
    }

    #[test]
    fn a_launch_waits_behind_its_nodeclaims_create() {
        let mut u = Unfinished::default();
        let t = Duration::from_secs(100);
        assert!(!u.held_behind_create(&launch("a")), "no create waits yet");
        assert!(u.keep(create("a"), 1, t));
        assert!(u.held_behind_create(&launch("a")));
        assert!(
            !u.held_behind_create(&launch("b")),
            "another NodeClaim's launch goes"
        );
        let due = u.due(t + Duration::from_secs(10));
        assert!(matches!(&due[0].1, Action::CreateNodeClaim(_)), "{due:?}");
        assert!(matches!(&due[1].1, Action::Launch { nodeclaim, .. } if nodeclaim == "a"));
    }

    #[test]
    fn launches_and_evictions_are_not_replayed_here() {
        assert!(!replayable(&launch("a")));
        assert!(!replayable(&Action::Evict { pod: "a/b".into() }));
        assert!(replayable(&delete("a")));
    }
}
