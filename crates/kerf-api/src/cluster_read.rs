//! Karpenter's kinds read from a live cluster, forward-compatibly. A cluster that ran a newer
//! Karpenter holds fields and enum values Kerf does not know (a `consolidationPolicy` of a later version,
//! a budget reason of a later version, an EC2NodeClass field added after v1.15). Files handed to
//! `kerf validate` and `kerf schedule` are read strictly ([`crate::manifest`]); an object in a
//! cluster is read as far as Kerf understands it, and what it does not understand limits
//! what may be done with that object instead of stopping the watch that lists it:
//!
//! - a NodePool whose template holds something unknown is not provisioned for, and its
//!   nodes are not drifted on their hash (the hash would not be comparable);
//! - a NodePool whose disruption settings hold something unknown is not consolidated
//!   (read as `consolidateAfter: Never`); a budget reason Kerf does not act on is dropped,
//!   and a budget left with none of its reasons no longer applies to anything Kerf does;
//! - an EC2NodeClass whose spec holds something unknown launches nothing (the field could
//!   change the instance) and drifts nothing on its hash;
//! - unknown status fields, and anything unknown on a NodeClaim, are only reported.

use serde_json::Value;

use crate::manifest;
use crate::nodepool::DisruptionReason;
use crate::schema;
use crate::validation::Problem;

/// What an object read from the cluster allows, given what Kerf could not read of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gaps {
    /// Each field or value Kerf did not understand, with what it does about it.
    pub problems: Vec<Problem>,
    /// New nodes may be launched from it (a NodePool's template, a node class's spec).
    pub launch: bool,
    /// Its drift hash may be compared with a NodeClaim's.
    pub compare_hash: bool,
}

impl Default for Gaps {
    fn default() -> Self {
        Gaps {
            problems: Vec::new(),
            launch: true,
            compare_hash: true,
        }
    }
}

impl Gaps {
    /// Whether everything was understood.
    pub fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }
}

/// An object of one of Karpenter's kinds as read from the cluster.
#[derive(Clone, Debug)]
pub struct Read<T> {
    /// The object as far as Kerf understands it, or the reason none of it could be typed
    /// (a required field in a form Kerf cannot read).
    pub object: Result<T, Problem>,
    /// What was not understood.
    pub gaps: Gaps,
}

/// Reads a NodePool, NodeClaim or EC2NodeClass (`kind`) from the JSON the API server sent.
pub fn read<T: serde::de::DeserializeOwned>(kind: &str, raw: &Value) -> Read<T> {
    // the common case, and the cheapest: everything is known (read in place, no copy)
    if let Ok(object) = T::deserialize(raw) {
        return Read {
            object: Ok(object),
            gaps: Gaps::default(),
        };
    }
    let mut value = raw.clone();
    let mut gaps = Gaps::default();
    if kind == "NodePool" {
        disruption_values(&mut value, &mut gaps);
    }
    let Some(schema) = manifest::schema(kind) else {
        return Read {
            object: Err(Problem::new(
                "kind",
                format!("{kind} is not a Karpenter kind"),
            )),
            gaps,
        };
    };
    let outcome = schema::check_and_prune(&mut value, schema);
    for p in outcome.problems {
        let effect = effect_of(kind, &p.path, &mut value, &mut gaps);
        gaps.problems.push(Problem::new(
            p.path,
            format!(
                "{}: {effect}",
                p.message.replace("unsupported value", "value")
            ),
        ));
    }
    let object = serde_path_to_error::deserialize(&value)
        .map_err(|e| Problem::new(e.path().to_string(), e.into_inner().to_string()));
    if object.is_err() {
        gaps.launch = false;
        gaps.compare_hash = false;
    }
    Read { object, gaps }
}

/// Unknown values in a NodePool's disruption settings, read as safely as they can be: an
/// unknown consolidation policy disables consolidation, and an unknown budget reason is
/// dropped (with its budget when it named only unknown reasons).
fn disruption_values(value: &mut Value, gaps: &mut Gaps) {
    let Some(disruption) = value
        .pointer_mut("/spec/disruption")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if let Some(policy) = disruption
        .get("consolidationPolicy")
        .and_then(Value::as_str)
        && serde_json::from_value::<crate::nodepool::ConsolidationPolicy>(policy.into()).is_err()
    {
        gaps.problems.push(Problem::new(
            "spec.disruption.consolidationPolicy",
            format!(
                "value {policy:?} is not one Kerf knows (WhenEmpty, WhenEmptyOrUnderutilized, Balanced): \
                 the NodePool is provisioned for but not consolidated"
            ),
        ));
        disruption.remove("consolidationPolicy");
        disruption.insert("consolidateAfter".into(), "Never".into());
    }
    let Some(budgets) = disruption.get_mut("budgets").and_then(Value::as_array_mut) else {
        return;
    };
    let mut index = 0;
    budgets.retain_mut(|budget| {
        let i = index;
        index += 1;
        let Some(reasons) = budget.get_mut("reasons").and_then(Value::as_array_mut) else {
            return true;
        };
        let before = reasons.len();
        let mut unknown = Vec::new();
        reasons.retain(|r| {
            let known = serde_json::from_value::<DisruptionReason>(r.clone()).is_ok();
            if !known {
                unknown.push(r.as_str().unwrap_or("?").to_string());
            }
            known
        });
        if unknown.is_empty() {
            return true;
        }
        let keep = !reasons.is_empty() || before == 0;
        gaps.problems.push(Problem::new(
            format!("spec.disruption.budgets[{i}].reasons"),
            format!(
                "reason {} is not one Kerf disrupts for: {}",
                unknown.join(", "),
                if keep {
                    "the budget applies to its other reasons"
                } else {
                    "the budget limits nothing Kerf does"
                }
            ),
        ));
        keep
    });
}

/// What Kerf does about a field or value of `kind` at `path` that it had to leave out.
fn effect_of(kind: &str, path: &str, value: &mut Value, gaps: &mut Gaps) -> &'static str {
    if path.starts_with("status") || path.starts_with("metadata") {
        return "ignored";
    }
    match kind {
        "NodePool" if path.starts_with("spec.template") => {
            gaps.launch = false;
            gaps.compare_hash = false;
            "no node is launched for this NodePool, nor drifted on its hash"
        }
        "NodePool" if path.starts_with("spec.disruption") => {
            no_consolidation(value);
            "this NodePool is not consolidated"
        }
        "NodePool" => {
            gaps.launch = false;
            no_consolidation(value);
            "this NodePool is neither provisioned for nor consolidated"
        }
        "EC2NodeClass" => {
            gaps.launch = false;
            gaps.compare_hash = false;
            "no node is launched with this class, nor drifted on its hash"
        }
        _ => "ignored",
    }
}

fn no_consolidation(value: &mut Value) {
    if let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut) {
        let disruption = spec
            .entry("disruption")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(d) = disruption.as_object_mut() {
            d.insert("consolidateAfter".into(), "Never".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EC2NodeClass, NodePool};
    use serde_json::json;

    fn pool(disruption: Value) -> Value {
        json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default", "generation": 2},
            "spec": {
                "template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": []}},
                "disruption": disruption,
            },
            "status": {"nodes": 1, "somethingNew": {"a": 1}},
        })
    }

    #[test]
    fn a_known_nodepool_has_no_gaps() {
        let mut v = pool(json!({"consolidateAfter": "1m", "consolidationPolicy": "WhenEmpty"}));
        v["status"] = json!({"nodes": 1});
        let r = read::<NodePool>("NodePool", &v);
        assert!(r.gaps.is_empty(), "{:?}", r.gaps);
        assert!(r.object.is_ok());
    }

    #[test]
    fn an_unknown_policy_is_provisioned_for_but_never_consolidated() {
        let r = read::<NodePool>(
            "NodePool",
            &pool(json!({"consolidateAfter": "30s", "consolidationPolicy": "Frugal"})),
        );
        let np = r.object.expect("typed");
        assert_eq!(
            np.spec.disruption.consolidate_after,
            crate::duration::NillableDuration::Never
        );
        assert!(r.gaps.launch && r.gaps.compare_hash);
        let paths: Vec<&str> = r.gaps.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            ["spec.disruption.consolidationPolicy", "status.somethingNew"]
        );
        assert!(r.gaps.problems[0].message.contains("\"Frugal\""));
    }

    #[test]
    fn an_unknown_budget_reason_drops_only_what_it_alone_limited() {
        let r = read::<NodePool>(
            "NodePool",
            &pool(json!({"consolidateAfter": "30s", "budgets": [
                {"nodes": "0", "reasons": ["Overprovisioned"]},
                {"nodes": "1", "reasons": ["Drifted", "Overprovisioned"]},
                {"nodes": "20%"},
            ]})),
        );
        let np = r.object.expect("typed");
        let budgets: Vec<(&str, usize)> = np
            .spec
            .disruption
            .budgets
            .iter()
            .map(|b| (b.nodes.as_str(), b.reasons.len()))
            .collect();
        assert_eq!(budgets, [("1", 1), ("20%", 0)]);
        assert_eq!(
            np.spec.disruption.consolidate_after,
            crate::duration::NillableDuration::After(std::time::Duration::from_secs(30)),
            "an unknown budget reason does not stop consolidation"
        );
        assert!(r.gaps.problems[0].message.contains("limits nothing"));
        assert!(r.gaps.problems[1].message.contains("other reasons"));
    }

    #[test]
    fn an_unknown_template_field_stops_launches_and_hash_drift() {
        let mut v = pool(json!({"consolidateAfter": "30s"}));
        v["spec"]["template"]["spec"]["someFutureField"] = json!(true);
        let r = read::<NodePool>("NodePool", &v);
        assert!(r.object.is_ok());
        assert!(!r.gaps.launch && !r.gaps.compare_hash);
        assert_eq!(
            r.gaps.problems[0].path,
            "spec.template.spec.someFutureField"
        );
    }

    #[test]
    fn a_class_with_newer_fields_launches_nothing() {
        let v = json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "role": "KarpenterNodeRole",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
                "instanceRecovery": {"enabled": true},
                "networkBoost": 2,
            },
        });
        let r = read::<EC2NodeClass>("EC2NodeClass", &v);
        assert!(r.object.is_ok(), "{:?}", r.object.err());
        assert!(!r.gaps.launch && !r.gaps.compare_hash);
        let mut paths: Vec<&str> = r.gaps.problems.iter().map(|p| p.path.as_str()).collect();
        paths.sort();
        assert_eq!(paths, ["spec.instanceRecovery", "spec.networkBoost"]);
    }

    #[test]
    fn an_object_that_cannot_be_typed_is_an_error_not_a_panic() {
        let v = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "x"}, "spec": {"template": 3}});
        let r = read::<NodePool>("NodePool", &v);
        assert!(r.object.is_err());
        assert!(!r.gaps.launch);
    }
}
