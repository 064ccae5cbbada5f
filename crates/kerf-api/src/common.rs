//! Types shared by NodePool and NodeClaim: requirements, taints, the node class reference
//! and status conditions.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Operator of a node selector requirement.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum Operator {
    /// The label's value is one of `values`.
    In,
    /// The label's value is none of `values`, or the label is absent.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label's integer value is greater than the single value.
    Gt,
    /// The label's integer value is less than the single value.
    Lt,
    /// The label's integer value is greater than or equal to the single value.
    Gte,
    /// The label's integer value is less than or equal to the single value.
    Lte,
}

impl Operator {
    /// Whether the operator compares integers (`Gt`, `Lt`, `Gte`, `Lte`).
    pub fn is_numeric(self) -> bool {
        matches!(
            self,
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
        )
    }
}

/// A node selector requirement with Karpenter's `minValues` flexibility floor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSelectorRequirementWithMinValues {
    /// The label key the requirement applies to.
    #[schemars(length(max = 316), regex(pattern = crate::crd_schema::LABEL_KEY_PATTERN))]
    #[schemars(extend("x-kubernetes-validations" = crate::crd_schema::requirement_key_rules()))]
    pub key: String,
    /// How the label relates to `values`.
    pub operator: Operator,
    /// The values; their meaning depends on the operator.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::crd_schema::requirement_values")]
    pub values: Vec<String>,
    /// The least number of distinct values of this key the launch choice must keep open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::crd_schema::min_values")]
    pub min_values: Option<i32>,
}

/// Effect of a taint.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum TaintEffect {
    /// Pods that do not tolerate the taint are not scheduled.
    NoSchedule,
    /// The scheduler avoids the node for pods that do not tolerate the taint.
    PreferNoSchedule,
    /// Pods that do not tolerate the taint are not scheduled and are evicted.
    NoExecute,
}

/// A node taint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    /// The taint key.
    #[schemars(length(min = 1), regex(pattern = crate::crd_schema::LABEL_KEY_PATTERN))]
    pub key: String,
    /// The taint value (Karpenter's CRDs hold it to the key's pattern).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::crd_schema::LABEL_KEY_PATTERN))]
    pub value: Option<String>,
    /// What happens to pods that do not tolerate the taint.
    pub effect: TaintEffect,
    /// When the taint was added (only for NoExecute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::crd_schema::date_time")]
    pub time_added: Option<String>,
}

impl std::fmt::Display for Taint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(v) if !v.is_empty() => write!(f, "{}={}:{:?}", self.key, v, self.effect),
            _ => write!(f, "{}:{:?}", self.key, self.effect),
        }
    }
}

/// Reference from a NodePool or NodeClaim to its cloud-specific node class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClassReference {
    /// API group of the node class (`karpenter.k8s.aws`), without a version.
    #[schemars(regex(pattern = "^[^/]*$"))]
    #[schemars(extend("x-kubernetes-validations" = crate::crd_schema::not_empty("group")))]
    pub group: String,
    /// Kind of the node class (`EC2NodeClass`).
    #[schemars(extend("x-kubernetes-validations" = crate::crd_schema::not_empty("kind")))]
    pub kind: String,
    /// Name of the node class.
    #[schemars(extend("x-kubernetes-validations" = crate::crd_schema::not_empty("name")))]
    pub name: String,
}

/// A status condition in the shape of metav1.Condition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type (`Ready`, `Launched`, `Drifted`, …).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    // reason and message are written even when empty: Karpenter's NodePool and EC2NodeClass
    // CRDs require both, as metav1.Condition does
    /// Machine-readable reason in CamelCase.
    #[serde(default)]
    pub reason: String,
    /// Human-readable detail; may be empty.
    #[serde(default)]
    pub message: String,
    /// RFC 3339 time of the last status change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Generation the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A resource list: resource name to quantity.
pub type ResourceList = BTreeMap<String, crate::Quantity>;

impl NodeSelectorRequirementWithMinValues {
    /// Whether a label value (None when the label is absent) satisfies the requirement.
    pub fn matches(&self, value: Option<&str>) -> bool {
        let number = |s: &str| s.parse::<i64>().ok();
        let compare = |ok: fn(i64, i64) -> bool| match (
            value.and_then(number),
            self.values.first().and_then(|v| number(v)),
        ) {
            (Some(v), Some(bound)) => ok(v, bound),
            _ => false,
        };
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Gt => compare(|v, b| v > b),
            Operator::Lt => compare(|v, b| v < b),
            Operator::Gte => compare(|v, b| v >= b),
            Operator::Lte => compare(|v, b| v <= b),
        }
    }

    /// Parses the command-line form `KEY=OPERATOR:V1,V2` (`OPERATOR` alone for Exists and
    /// DoesNotExist), as `kerf instance-types --requirement` takes it.
    pub fn parse_flag(text: &str) -> Result<Self, String> {
        let (key, rest) = text.split_once('=').ok_or_else(|| {
            format!(
                "{text:?}: expected KEY=OPERATOR:VALUES, e.g. karpenter.k8s.aws/instance-cpu=Gt:4"
            )
        })?;
        let (op, values) = rest.split_once(':').unwrap_or((rest, ""));
        let operator: Operator = serde_json::from_value(serde_json::Value::String(op.to_string())).map_err(|_| {
            format!("{text:?}: unknown operator {op:?} (In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte)")
        })?;
        let values: Vec<String> = values
            .split(',')
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect();
        Ok(NodeSelectorRequirementWithMinValues {
            key: key.to_string(),
            operator,
            values,
            min_values: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(text: &str) -> NodeSelectorRequirementWithMinValues {
        NodeSelectorRequirementWithMinValues::parse_flag(text).unwrap()
    }

    #[test]
    fn operators_match_as_kubernetes_defines_them() {
        assert!(req("k=In:a,b").matches(Some("b")));
        assert!(!req("k=In:a,b").matches(None));
        assert!(req("k=NotIn:a").matches(None));
        assert!(!req("k=NotIn:a").matches(Some("a")));
        assert!(req("k=Exists").matches(Some("")));
        assert!(req("k=DoesNotExist").matches(None));
        assert!(req("k=Gt:4").matches(Some("8")));
        assert!(!req("k=Gt:4").matches(Some("4")));
        assert!(!req("k=Gt:4").matches(Some("x")));
        assert!(req("k=Lte:4").matches(Some("4")));
        assert!(req("k=Gte:4").matches(Some("4")));
        assert!(req("k=Lt:4").matches(Some("3")));
    }

    #[test]
    fn flag_errors_are_clear() {
        assert!(
            NodeSelectorRequirementWithMinValues::parse_flag("no-equals")
                .unwrap_err()
                .contains("KEY=OPERATOR")
        );
        assert!(
            NodeSelectorRequirementWithMinValues::parse_flag("k=Near:1")
                .unwrap_err()
                .contains("unknown operator")
        );
    }
}
