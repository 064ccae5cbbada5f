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
        /// The candidate instance type with the most of the first resource short, and what
        /// it leaves pods of that resource after daemonset overhead; none when no type is
        /// a candidate.
        largest: Option<(String, String)>,
    },
    /// The NodePool's limit on a resource leaves no room for another node.
    LimitReached {
        /// The resource.
        resource: String,
        /// The limit, as written.
        limit: String,
        /// How much of it the NodePool's nodes and planned NodeClaims take.
        in_use: String,
        /// How much the smallest candidate instance type would add.
        smallest: String,
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
            Why::NoInstanceTypeHas { needs, largest } => {
                let list: Vec<String> = needs.iter().map(|(r, a)| format!("{a} {r}")).collect();
                write!(
                    f,
                    "no instance type has {} after daemonset overhead",
                    list.join(" and ")
                )?;
                match (largest, needs.first()) {
                    (Some((name, left)), Some((resource, _))) => {
                        write!(f, " (the largest, {name}, leaves {left} {resource})")
                    }
                    _ => Ok(()),
                }
            }
            Why::LimitReached {
                resource,
                limit,
                in_use,
                smallest,
            } => write!(
                f,
                "limit {resource}={limit} reached ({in_use} in use or planned, the smallest instance type adds {smallest})"
            ),
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

impl Why {
    /// What a user could change so the pod fits: the other side of the reason.
    pub fn fix(&self) -> String {
        match self {
            Why::NoNodePools => "create a NodePool whose requirements the pod accepts".into(),
            Why::TaintNotTolerated { taint } => format!(
                "add a toleration for {taint} to the pod, or remove the taint from the NodePool"
            ),
            Why::UndefinedLabel { key } => format!(
                "add {key} to the NodePool's template labels or requirements, or drop it from the pod's nodeSelector and affinity"
            ),
            Why::Requirement { .. } => {
                "widen the NodePool's requirement or the pod's so they share a value".into()
            }
            Why::NoInstanceTypeMatches => {
                "allow more instance types (families, categories, sizes, architectures) in the NodePool's requirements or the EC2NodeClass".into()
            }
            Why::NoAvailableOffering => {
                "allow more zones or capacity types (on-demand as well as spot), or wait until the insufficient capacity expires".into()
            }
            Why::NoInstanceTypeHas { .. } => {
                "lower the pod's requests, or allow larger instance types in the NodePool".into()
            }
            Why::LimitReached { resource, .. } => format!(
                "raise the NodePool's spec.limits.{resource}, or free capacity in it"
            ),
            Why::MinValues { key, .. } => {
                format!("allow more values of {key}, or lower its minValues")
            }
            Why::Topology { .. } => {
                "allow the pod more domains (zones, nodes), raise maxSkew, or make the constraint preferred".into()
            }
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
                largest: Some(("m5.24xlarge".into(), "95690m".into())),
            },
        };
        assert_eq!(
            r.to_string(),
            "nodepool default: no instance type has 96 cpu after daemonset overhead (the largest, m5.24xlarge, leaves 95690m cpu)"
        );
        let r = Reason {
            node_pool: Some("batch".into()),
            why: Why::LimitReached {
                resource: "cpu".into(),
                limit: "16".into(),
                in_use: "14".into(),
                smallest: "4".into(),
            },
        };
        assert_eq!(
            r.to_string(),
            "nodepool batch: limit cpu=16 reached (14 in use or planned, the smallest instance type adds 4)"
        );
        assert_eq!(
            r.why.fix(),
            "raise the NodePool's spec.limits.cpu, or free capacity in it"
        );
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
