//! Each NodePool's `NodeRegistrationHealthy` condition, as Karpenter v1.15 keeps it: the last
//! four launches of the NodePool's NodeClaims (registered, or timed out launching or
//! registering) say whether its nodes come up. Two failures among them make it False (with
//! why the last one failed), a registration makes it True again once fewer than two of the
//! last four failed, and a change to the NodePool or its node class (their generations)
//! makes it Unknown until the next outcome. Launches the cloud had no capacity for, or whose
//! node class was not ready, say nothing about registration and are not counted.

use std::collections::{BTreeMap, VecDeque};

use kerf_api::Condition;

use crate::cluster::Cluster;

/// The outcomes kept per NodePool.
const WINDOW: usize = 4;

/// The condition's type, and its reason when True.
pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";

/// One NodePool's recent outcomes.
#[derive(Clone, Debug, Default)]
struct Tracker {
    /// `true` for a registration, `false` for a timeout; newest last.
    outcomes: VecDeque<bool>,
    /// The NodePool's and its node class's generations the outcomes were seen under.
    generations: (i64, i64),
    /// The condition as last set: `None` (Unknown) until an outcome sets it; True once a
    /// registration leaves fewer than two failures, False (with the reason and message of
    /// the failure) once a failure makes two.
    condition: Option<Result<(), (String, String)>>,
}

impl Tracker {
    fn failures(&self) -> usize {
        self.outcomes.iter().filter(|ok| !**ok).count()
    }

    /// Whether two of the last four failed.
    fn unhealthy(&self) -> bool {
        self.failures() * 2 >= WINDOW
    }

    /// Takes an outcome: a registration (`failure` None) sets the condition True unless two
    /// of the last four failed; a failure sets it False once two did.
    fn push(&mut self, failure: Option<(String, String)>) {
        self.outcomes.push_back(failure.is_none());
        while self.outcomes.len() > WINDOW {
            self.outcomes.pop_front();
        }
        match failure {
            None if !self.unhealthy() => self.condition = Some(Ok(())),
            Some(why) if self.unhealthy() => self.condition = Some(Err(why)),
            _ => {}
        }
    }
}

/// The registration health controller: a tracker per NodePool. It reads the cluster and
/// writes nothing of it; the router writes the NodePool status its condition goes into.
#[derive(Default)]
pub(super) struct Registrations {
    pools: BTreeMap<String, Tracker>,
}

/// The NodePool's and its node class's generations now.
fn generations(cluster: &Cluster, pool: &str) -> (i64, i64) {
    let np = cluster.node_pools.get(pool);
    let class =
        np.and_then(|np| (cluster.node_classes).get(&np.spec.template.spec.node_class_ref.name));
    (
        np.and_then(|n| n.metadata.generation).unwrap_or(0),
        class.and_then(|c| c.metadata.generation).unwrap_or(0),
    )
}

impl Registrations {
    /// The tracker of a NodePool as it stands now: new, or reset when the NodePool or its
    /// node class changed; a new one takes up the condition the stored NodePool carries
    /// (after a restart, or from Karpenter).
    fn tracker(&mut self, cluster: &Cluster, pool: &str) -> &mut Tracker {
        let generations = generations(cluster, pool);
        let stored = (cluster.node_pools.get(pool))
            .and_then(|np| np.status.as_ref())
            .and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == NODE_REGISTRATION_HEALTHY)
            })
            .filter(|c| c.observed_generation.is_none_or(|g| g == generations.0))
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
        let t = self.pools.entry(pool.to_string()).or_insert_with(|| {
            let mut t = Tracker {
                generations,
                ..Tracker::default()
            };
            match stored {
                Some((s, _, _)) if s == "True" => t.push(None),
                Some((s, reason, message)) if s == "False" => {
                    t.push(Some((reason.clone(), message.clone())));
                    t.push(Some((reason, message)));
                }
                _ => {}
            }
            t
        });
        if t.generations != generations {
            *t = Tracker {
                generations,
                ..Tracker::default()
            };
        }
        t
    }

    /// A NodeClaim of `pool` registered (`failure` None) or timed out launching or
    /// registering (`failure`: the reason and message to show).
    pub(super) fn outcome(&mut self, cluster: &Cluster, pool: &str, failure: Option<(&str, &str)>) {
        let failure = failure.map(|(r, m)| (r.to_string(), m.to_string()));
        self.tracker(cluster, pool).push(failure);
    }

    /// The NodePool's `NodeRegistrationHealthy` condition now, and the node class
    /// generation it was worked out under.
    pub(super) fn condition(&mut self, cluster: &Cluster, pool: &str) -> (Condition, i64) {
        let t = self.tracker(cluster, pool);
        let (status, reason, message) = match &t.condition {
            Some(Ok(())) => ("True", NODE_REGISTRATION_HEALTHY.to_string(), String::new()),
            Some(Err((reason, message))) => ("False", reason.clone(), message.clone()),
            None => (
                "Unknown",
                "AwaitingReconciliation".into(),
                "object is awaiting reconciliation".into(),
            ),
        };
        let condition = Condition {
            type_: NODE_REGISTRATION_HEALTHY.into(),
            status: status.into(),
            reason,
            message,
            last_transition_time: None,
            observed_generation: Some(t.generations.0),
        };
        (condition, t.generations.1)
    }
}

#[cfg(test)]
mod tests {
    use super::Tracker;

    #[test]
    fn two_failures_of_the_last_four_make_it_false() {
        let failed = || {
            Some((
                "RegistrationFailed".to_string(),
                "Failed to register node".to_string(),
            ))
        };
        let mut t = Tracker::default();
        assert_eq!(t.condition, None);
        t.push(failed());
        assert_eq!(t.condition, None, "one failure of four is not enough");
        t.push(failed());
        assert!(matches!(t.condition, Some(Err(_))));
        for _ in 0..2 {
            t.push(None);
        }
        assert!(
            matches!(t.condition, Some(Err(_))),
            "still two failures among the last four"
        );
        t.push(None);
        assert_eq!(t.condition, Some(Ok(())));
    }
}
