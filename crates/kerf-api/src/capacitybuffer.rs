//! CapacityBuffer (autoscaling.x-k8s.io/v1beta1, Karpenter's `CapacityBuffer` feature gate):
//! spare room kept in the cluster, in chunks shaped as a pod — a PodTemplate's, or a
//! Deployment's, StatefulSet's or ReplicaSet's own pods' — so that pods arriving in a burst
//! start on nodes already there. The API is the cluster autoscaler project's; Karpenter v1.15
//! ships its CRD and acts on it, and so does Kerf.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, ResourceList};

/// The only provisioning strategy: placeholder pods that make the autoscaler keep capacity.
pub const ACTIVE_CAPACITY: &str = "buffer.x-k8s.io/active-capacity";

/// Desired state of a CapacityBuffer: the shape of one chunk and how many chunks.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1beta1",
    kind = "CapacityBuffer",
    doc = "CapacityBuffer keeps spare capacity in the cluster, in chunks shaped as a pod.",
    plural = "capacitybuffers",
    shortname = "cb",
    category = "autoscaling",
    namespaced,
    derive = "PartialEq",
    status = "CapacityBufferStatus",
    printcolumn = r#"{"name": "Strategy", "type": "string", "jsonPath": ".spec.provisioningStrategy", "description": "The strategy to be used."}"#,
    printcolumn = r#"{"name": "PodTemplate", "type": "string", "jsonPath": ".status.podTemplateRef.name", "description": "The name of the PodTemplate used."}"#,
    printcolumn = r#"{"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas", "description": "The actual number of buffer chunks."}"#,
    printcolumn = r#"{"name": "ConditionsType", "type": "string", "jsonPath": ".status.conditions[*].type", "description": "List of all condition types."}"#,
    printcolumn = r#"{"name": "ConditionsStatus", "type": "string", "jsonPath": ".status.conditions[*].status", "description": "List of all condition statuses."}"#,
    printcolumn = r#"{"name": "ConditionsReason", "type": "string", "jsonPath": ".status.conditions[*].reason", "description": "List of all condition reasons."}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp", "description": "The age of the CapacityBuffer."}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)", "message": "If podTemplateRef is set, replicas or limits must also be set"},
    {"rule": "!(has(self.podTemplateRef) && has(self.scalableRef))", "message": "You must define either PodTemplateRef or ScalableRef, but not both"}
]))]
pub struct CapacityBufferSpec {
    /// How the buffer is kept; `buffer.x-k8s.io/active-capacity`, the default, is the one
    /// strategy: placeholder pods the autoscaler provisions for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "buffer.x-k8s.io/active-capacity"))]
    pub provisioning_strategy: Option<String>,
    /// A PodTemplate of the buffer's namespace giving one chunk's shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// A Deployment, StatefulSet or ReplicaSet of the buffer's namespace whose pods give
    /// one chunk's shape (and, with `percentage`, its replicas the chunks' number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    /// How many chunks; with `percentage` too, the larger of the two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Chunks as a percent of `scalableRef`'s replicas, rounded up, at least one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub percentage: Option<i32>,
    /// The most the chunks may request together; alone, as many chunks as fit in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
}

/// A PodTemplate of the same namespace, by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LocalObjectRef {
    /// Its name.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// An object of the same namespace that has a scale subresource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    /// Its API group (`apps`; empty reads as `apps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// Its kind: `Deployment`, `StatefulSet` or `ReplicaSet`.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// Its name.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// Observed state of a CapacityBuffer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    /// The PodTemplate the chunks were shaped from (a `podTemplateRef` buffer's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// How many chunks the buffer keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The PodTemplate's generation the chunks were shaped from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    /// `ReadyForProvisioning` (the shape and number worked out) and `Provisioning` (whether
    /// the chunks fit on capacity already there).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::crd_schema::conditions")]
    pub conditions: Vec<Condition>,
    /// `spec.provisioningStrategy` as last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
}
