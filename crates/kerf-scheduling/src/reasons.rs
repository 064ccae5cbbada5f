//! Why a pod could not be placed: data with fields, rendered as text only at the edge.

use std::fmt;

/// One reason a pod cannot be placed, for one NodePool or for all of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reason {
    /// The NodePool the reason is about; `None` when it holds for every NodePool.
    pub node_pool: Option<String>,
    /// What is wrong.
    pub why: Why,
}

/// What keeps a pod off a NodePool's nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// No NodePool exists.
    NoNodePools,
    /// A taint of the NodePool that the pod does not tolerate.
    TaintNotTolerated {
        /// The taint as `key=value:Effect`.
        taint: String,
    },
    /// The pod requires a custom label no NodePool (or this NodePool) defines.
    UndefinedLabel {
        /// The label key.
        key: String,
    },
    /// The pod's requirement on a key and the NodePool's have no value in common.
    Requirement {
        /// The pod's requirement, as text.
        pod: String,
        /// The NodePool's (narrowed) requirement, as text.
        node_pool: String,
    },
    /// No instance type matches the requirements at all.
    NoInstanceTypeMatches,
    /// Matching instance types exist but every offering is unavailable (insufficient
    /// capacity) or outside the allowed zones and capacity types.
    NoAvailableOffering,
    /// No instance type has enough of these resources for the pod after daemonset overhead.
    NoInstanceTypeHas {
        /// The resources short, with the amounts the pod needs (`96 cpu`).
        needs: Vec<(String, String)>,
    },
    /// The NodePool's limit on a resource leaves no room for another node.
    LimitReached {
        /// The resource.
        resource: String,
        /// The limit, as written.
        limit: String,
    },
    /// Fewer distinct values than a requirement's minValues would remain.
    MinValues {
        /// The label key.
        key: String,
        /// The minimum.
        min: u32,
    },
    /// A topology spread, pod affinity or anti-affinity constraint cannot be met.
    Topology {
        /// The constraint, as text.
        constraint: String,
    },
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::NoNodePools => write!(f, "no nodepools exist"),
            Why::TaintNotTolerated { taint } => write!(f, "taint {taint} not tolerated"),
            Why::UndefinedLabel { key } => write!(f, "label {key} is not defined"),
            Why::Requirement { pod, node_pool } => {
                write!(f, "requirement {pod} not satisfied by {node_pool}")
            }
            Why::NoInstanceTypeMatches => write!(f, "no instance type matches the requirements"),
            Why::NoAvailableOffering => write!(
                f,
                "every matching offering is unavailable (insufficient capacity) or outside the allowed zones and capacity types"
            ),
            Why::NoInstanceTypeHas { needs } => {
                let list: Vec<String> = needs.iter().map(|(r, a)| format!("{a} {r}")).collect();
                write!(
                    f,
                    "no instance type has {} after daemonset overhead",
                    list.join(" and ")
                )
            }
            Why::LimitReached { resource, limit } => write!(f, "limit {resource}={limit} reached"),
            Why::MinValues { key, min } => {
                write!(
                    f,
                    "fewer than {min} values of {key} would remain (minValues)"
                )
            }
            Why::Topology { constraint } => write!(f, "{constraint} cannot be satisfied"),
        }
    }
}

impl Reason {
    /// The message without the NodePool prefix (JSON carries the NodePool apart).
    pub fn message(&self) -> String {
        match (&self.node_pool, &self.why) {
            (None, Why::UndefinedLabel { key }) => format!("no nodepool defines label {key}"),
            (_, why) => why.to_string(),
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.node_pool {
            None => write!(f, "{}", self.message()),
            Some(np) => write!(f, "nodepool {np}: {}", self.why),
        }
    }
}

/// Folds per-NodePool reasons: when every NodePool lacks the same label, one reason says so.
pub fn fold(reasons: Vec<Reason>) -> Vec<Reason> {
    let first_undefined = match reasons.first() {
        Some(Reason {
            why: Why::UndefinedLabel { key },
            ..
        }) => Some(key.clone()),
        _ => None,
    };
    match first_undefined {
        Some(key)
            if reasons
                .iter()
                .all(|r| matches!(&r.why, Why::UndefinedLabel { key: k } if *k == key)) =>
        {
            vec![Reason {
                node_pool: None,
                why: Why::UndefinedLabel { key },
            }]
        }
        _ => reasons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_render_as_users_read_them() {
        let r = Reason {
            node_pool: Some("gpu".into()),
            why: Why::TaintNotTolerated {
                taint: "nvidia.com/gpu=true:NoSchedule".into(),
            },
        };
        assert_eq!(
            r.to_string(),
            "nodepool gpu: taint nvidia.com/gpu=true:NoSchedule not tolerated"
        );
        let r = Reason {
            node_pool: Some("default".into()),
            why: Why::NoInstanceTypeHas {
                needs: vec![("cpu".into(), "96".into())],
            },
        };
        assert_eq!(
            r.to_string(),
            "nodepool default: no instance type has 96 cpu after daemonset overhead"
        );
        let r = Reason {
            node_pool: Some("batch".into()),
            why: Why::LimitReached {
                resource: "cpu".into(),
                limit: "16".into(),
            },
        };
        assert_eq!(r.to_string(), "nodepool batch: limit cpu=16 reached");
        let undefined = |np: &str| Reason {
            node_pool: Some(np.into()),
            why: Why::UndefinedLabel {
                key: "workload".into(),
            },
        };
        let folded = fold(vec![undefined("a"), undefined("b")]);
        assert_eq!(folded.len(), 1);
        assert_eq!(folded[0].to_string(), "no nodepool defines label workload");
    }
}
