//! NodePool (karpenter.sh/v1): the template and policy from which NodeClaims are made.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{
    Condition, NodeClassReference, NodeSelectorRequirementWithMinValues, ResourceList, Taint,
};
use crate::duration::{GoDuration, NillableDuration};

/// Desired state of a NodePool.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    doc = "NodePool is a template and policy for the nodes Karpenter-compatible autoscalers create.",
    plural = "nodepools",
    category = "karpenter",
    derive = "PartialEq",
    status = "NodePoolStatus",
    scale = r#"{"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"}"#,
    printcolumn = r#"{"name": "NodeClass", "type": "string", "jsonPath": ".spec.template.spec.nodeClassRef.name"}"#,
    printcolumn = r#"{"name": "Nodes", "type": "string", "jsonPath": ".status.nodes"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1}"#,
    printcolumn = r#"{"name": "CPU", "type": "string", "jsonPath": ".status.resources.cpu", "priority": 1}"#,
    printcolumn = r#"{"name": "Memory", "type": "string", "jsonPath": ".status.resources.memory", "priority": 1}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.replicas) == has(oldSelf.replicas)", "message": "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"},
    {"rule": "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))", "message": "only 'limits.nodes' is supported on static NodePools"},
    {"rule": "!has(self.replicas) || !has(self.weight)", "message": "'weight' is not supported on static NodePools"}
]))]
pub struct NodePoolSpec {
    /// The template of the NodeClaims this NodePool makes.
    pub template: NodeClaimTemplate,
    /// How and when nodes of this NodePool may be disrupted (defaulted as Karpenter's CRD
    /// does: `consolidateAfter` here, the rest by the fields' own defaults).
    #[serde(default)]
    #[schemars(extend("default" = {"consolidateAfter": "0s"}))]
    pub disruption: Disruption,
    /// Caps on the total capacity of this NodePool's nodes (`cpu: 1000`, `memory: 1000Gi`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: ResourceList,
    /// Priority among NodePools that fit a pod; the higher weight is tried first (1–100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// A static NodePool: keep exactly this many nodes, whatever the pods ask (Karpenter's
    /// StaticCapacity feature gate). Its nodes are never consolidated, no pending pod gets a
    /// node from it, and only `limits.nodes` applies; `kubectl scale nodepool` sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

/// Labels and annotations, plus the NodeClaim spec, of the NodeClaims a NodePool makes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimTemplate {
    /// Labels and annotations put on the NodeClaims and their nodes.
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,
    /// The NodeClaim spec.
    pub spec: NodeClaimTemplateSpec,
}

/// The subset of object metadata a NodeClaim template may set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateMetadata {
    /// Labels for the nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = crate::crd_schema::template_label_rules()))]
    #[schemars(extend("maxProperties" = 100, "x-kubernetes-map-type" = "atomic",
        "additionalProperties" = {"type": "string", "maxLength": 63, "pattern": crate::crd_schema::LABEL_VALUE_PATTERN}))]
    pub labels: BTreeMap<String, String>,
    /// Annotations for the nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-map-type" = "granular"))]
    pub annotations: BTreeMap<String, String>,
}

impl TemplateMetadata {
    fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// The NodeClaim spec inside a NodePool template.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimTemplateSpec {
    /// Constraints on the nodes' labels (instance type, zone, capacity type, custom keys).
    #[schemars(schema_with = "crate::crd_schema::nodepool_requirements")]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Taints put on the nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub taints: Vec<Taint>,
    /// Taints that are expected to be removed by a daemon after startup.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub startup_taints: Vec<Taint>,
    /// How long a draining node may take before its pods are deleted without grace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<GoDuration>,
    /// Age after which a node is replaced (`720h` by default, or `Never`).
    #[serde(default = "default_expire_after")]
    #[schemars(default = "default_expire_after")]
    pub expire_after: NillableDuration,
    /// The cloud-specific node class the nodes are launched with (its group and kind fixed).
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.group == oldSelf.group", "message": "nodeClassRef.group is immutable"},
        {"rule": "self.kind == oldSelf.kind", "message": "nodeClassRef.kind is immutable"}
    ]))]
    pub node_class_ref: NodeClassReference,
}

/// Karpenter's default node lifetime: 30 days.
pub fn default_expire_after() -> NillableDuration {
    NillableDuration::After(std::time::Duration::from_secs(720 * 3600))
}

/// Which nodes consolidation may act on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConsolidationPolicy {
    /// Only nodes without workload pods.
    WhenEmpty,
    /// Empty nodes, and nodes whose pods fit elsewhere or on a cheaper node.
    #[default]
    WhenEmptyOrUnderutilized,
    /// As `WhenEmptyOrUnderutilized`, but a move must save enough for the pods it moves
    /// (Karpenter v1.14: its share of the NodePool's cost over its share of the NodePool's
    /// disruption cost at least 1/k, k = 2).
    Balanced,
}

/// Disruption policy of a NodePool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Disruption {
    /// How long after the last pod event a node may be consolidated, or `Never`; `0s` when
    /// not given (Karpenter v1.15's CRD defaults it, as earlier versions required it).
    #[serde(default = "default_consolidate_after")]
    #[schemars(default = "default_consolidate_after")]
    pub consolidate_after: NillableDuration,
    /// Which nodes consolidation may act on.
    #[serde(default)]
    #[schemars(default = "ConsolidationPolicy::default")]
    pub consolidation_policy: ConsolidationPolicy,
    /// Limits on how many nodes may be disrupted at once.
    #[serde(default = "default_budgets")]
    #[schemars(default = "default_budgets", length(max = 50))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(x, has(x.schedule) == has(x.duration))", "message": "'schedule' must be set with 'duration'"}
    ]))]
    pub budgets: Vec<Budget>,
}

impl Default for Disruption {
    fn default() -> Self {
        Disruption {
            consolidate_after: default_consolidate_after(),
            consolidation_policy: ConsolidationPolicy::default(),
            budgets: default_budgets(),
        }
    }
}

fn default_consolidate_after() -> NillableDuration {
    NillableDuration::After(std::time::Duration::ZERO)
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget {
        nodes: "10%".into(),
        schedule: None,
        duration: None,
        reasons: Vec::new(),
    }]
}

/// Reasons a budget can be scoped to.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum DisruptionReason {
    /// Consolidation of underutilized nodes.
    Underutilized,
    /// Removal of empty nodes.
    Empty,
    /// Replacement of drifted nodes.
    Drifted,
    /// Repair of unhealthy nodes (Karpenter v1.15's node repair, paced by these budgets).
    Unhealthy,
}

impl DisruptionReason {
    /// The name as manifests and log lines spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            DisruptionReason::Underutilized => "Underutilized",
            DisruptionReason::Empty => "Empty",
            DisruptionReason::Drifted => "Drifted",
            DisruptionReason::Unhealthy => "Unhealthy",
        }
    }
}

/// A limit on concurrent disruptions, optionally only inside a cron window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("required" = ["nodes"]))]
pub struct Budget {
    /// Nodes that may be disrupted at once: a count (`5`) or a percentage of the NodePool's nodes (`10%`).
    #[serde(default = "default_budget_nodes")]
    #[schemars(
        default = "default_budget_nodes",
        regex(pattern = r"^((100|[0-9]{1,2})%|[0-9]+)$")
    )]
    pub nodes: String,
    /// Cron schedule (UTC) at which the budget's window opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
    ))]
    pub schedule: Option<String>,
    /// How long the window stays open after each firing of `schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        with = "Option<String>",
        regex(pattern = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$")
    )]
    pub duration: Option<GoDuration>,
    /// The disruption reasons the budget applies to; all when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), extend("x-kubernetes-list-type" = "set"))]
    pub reasons: Vec<DisruptionReason>,
}

fn default_budget_nodes() -> String {
    "10%".into()
}

/// Observed state of a NodePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Capacity of the NodePool's nodes, summed, plus `nodes`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: ResourceList,
    /// Number of nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub nodes: Option<i64>,
    /// Conditions (`Ready`, `ValidationSucceeded`, `NodeClassReady`,
    /// `NodeRegistrationHealthy`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::crd_schema::conditions")]
    pub conditions: Vec<Condition>,
    /// The node class generation `NodeRegistrationHealthy` was worked out under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
}
