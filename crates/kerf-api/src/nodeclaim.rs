//! NodeClaim (karpenter.sh/v1): one requested node, from launch to termination.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{
    Condition, NodeClassReference, NodeSelectorRequirementWithMinValues, ResourceList, Taint,
};
use crate::duration::{GoDuration, NillableDuration};

/// Condition types a NodeClaim's status carries, in lifecycle order.
pub mod condition_types {
    /// The cloud provider created the instance.
    pub const LAUNCHED: &str = "Launched";
    /// The instance joined the cluster as a Node.
    pub const REGISTERED: &str = "Registered";
    /// The Node is ready, its startup taints are gone and its resources are registered.
    pub const INITIALIZED: &str = "Initialized";
    /// Launched, registered and initialized.
    pub const READY: &str = "Ready";
    /// The NodeClaim no longer matches its NodePool or node class.
    pub const DRIFTED: &str = "Drifted";
    /// The node may be consolidated (consolidateAfter has passed).
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    /// All evictable pods have left the node.
    pub const DRAINED: &str = "Drained";
    /// The instance is being terminated.
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    /// Why the NodeClaim is being disrupted.
    pub const DISRUPTION_REASON: &str = "DisruptionReason";
    /// The node's VolumeAttachments are gone (its deletion may finish).
    pub const VOLUMES_DETACHED: &str = "VolumesDetached";
    /// The node's shape matches what the NodeClaim said it would be.
    pub const CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
    /// The node is being rebooted for repair (Karpenter's RebootForRepair).
    pub const REBOOTING: &str = "Rebooting";

    /// The types Kerf writes: a condition of another type (one another controller put on
    /// the NodeClaim) is left as it is.
    pub const OWNED: [&str; 12] = [
        LAUNCHED,
        REGISTERED,
        INITIALIZED,
        READY,
        DRIFTED,
        CONSOLIDATABLE,
        DRAINED,
        VOLUMES_DETACHED,
        INSTANCE_TERMINATING,
        DISRUPTION_REASON,
        CONSISTENT_STATE_FOUND,
        REBOOTING,
    ];
}

/// Desired state of a NodeClaim.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    doc = "NodeClaim is one requested node, tracked from launch to termination.",
    plural = "nodeclaims",
    category = "karpenter",
    derive = "PartialEq",
    status = "NodeClaimStatus",
    printcolumn = r#"{"name": "Type", "type": "string", "jsonPath": ".metadata.labels.node\\.kubernetes\\.io/instance-type"}"#,
    printcolumn = r#"{"name": "Capacity", "type": "string", "jsonPath": ".metadata.labels.karpenter\\.sh/capacity-type"}"#,
    printcolumn = r#"{"name": "Zone", "type": "string", "jsonPath": ".metadata.labels.topology\\.kubernetes\\.io/zone"}"#,
    printcolumn = r#"{"name": "Node", "type": "string", "jsonPath": ".status.nodeName"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "ImageID", "type": "string", "jsonPath": ".status.imageID", "priority": 1}"#,
    printcolumn = r#"{"name": "ID", "type": "string", "jsonPath": ".status.providerID", "priority": 1}"#,
    printcolumn = r#"{"name": "NodePool", "type": "string", "jsonPath": ".metadata.labels.karpenter\\.sh/nodepool", "priority": 1}"#,
    printcolumn = r#"{"name": "NodeClass", "type": "string", "jsonPath": ".spec.nodeClassRef.name", "priority": 1}"#,
    printcolumn = r#"{"name": "Drifted", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Drifted\")].status", "priority": 1}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "spec is immutable"}]))]
pub struct NodeClaimSpec {
    /// Taints put on the node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub taints: Vec<Taint>,
    /// Taints expected to be removed by a daemon after startup.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub startup_taints: Vec<Taint>,
    /// Constraints the launched instance satisfies, narrowed by the scheduler's decision.
    #[schemars(schema_with = "crate::crd_schema::requirements")]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Resources the node must offer to the pods it was made for.
    #[serde(default, skip_serializing_if = "ResourceRequirements::is_empty")]
    pub resources: ResourceRequirements,
    /// The cloud-specific node class the instance is launched with.
    pub node_class_ref: NodeClassReference,
    /// How long a draining node may take before its pods are deleted without grace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<GoDuration>,
    /// Age after which the node is replaced (`720h` by default, or `Never`).
    #[serde(default = "crate::nodepool::default_expire_after")]
    #[schemars(default = "crate::nodepool::default_expire_after")]
    pub expire_after: NillableDuration,
}

/// Resource requests of a NodeClaim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceRequirements {
    /// The summed requests of the pods (and daemonsets) the node was made for.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: ResourceList,
}

impl ResourceRequirements {
    fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

/// Observed state of a NodeClaim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// Name of the Node the instance registered as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Cloud provider ID (`aws:///us-east-1a/i-0123…`).
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Image the instance booted from.
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Capacity of the instance.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: ResourceList,
    /// Capacity less system reservations and eviction thresholds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: ResourceList,
    /// RFC 3339 time of the last pod bound to or removed from the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::crd_schema::date_time")]
    pub last_pod_event_time: Option<String>,
    /// Lifecycle and disruption conditions (see [`condition_types`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::crd_schema::nodeclaim_conditions")]
    pub conditions: Vec<Condition>,
}
