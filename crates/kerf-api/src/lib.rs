//! The Karpenter v1 API as Kerf speaks it: the NodePool and NodeClaim kinds of
//! `karpenter.sh/v1` and the EC2NodeClass kind of `karpenter.k8s.aws/v1`, with their
//! defaults, the well-known labels, validation that names the field path of every problem,
//! CRD generation, and reading of multi-document manifests.
//!
//! This crate only describes and checks objects: no I/O beyond parsing the text handed to
//! it, no clock, no cluster access.

pub mod capacitybuffer;
pub mod cluster_read;
pub mod common;
pub mod crd_schema;
pub mod crds;
pub mod cron;
pub mod duration;
pub mod ec2nodeclass;
pub mod kubelet;
pub mod labels;
pub mod manifest;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod quantity;
pub mod schema;
pub mod validation;

pub use capacitybuffer::{CapacityBuffer, CapacityBufferSpec};
pub use common::{
    Condition, NodeClassReference, NodeSelectorRequirementWithMinValues, Operator, ResourceList,
    Taint, TaintEffect,
};
pub use ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec};
pub use nodeclaim::{NodeClaim, NodeClaimSpec};
pub use nodeoverlay::{NodeOverlay, NodeOverlaySpec};
pub use nodepool::{NodePool, NodePoolSpec};
pub use quantity::Quantity;
pub use validation::{Problem, Validate};
