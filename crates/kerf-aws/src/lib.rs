//! AWS facts Kerf needs without calling AWS: the EC2 instance-type catalog embedded from
//! moto's DescribeInstanceTypes data, per-region zone offerings, the capacity and allocatable
//! formulas Karpenter uses for AL2023 nodes, the labels Karpenter derives from a type, an
//! on-demand price model fitted to AWS list prices, a deterministic spot price model, and
//! the interruption-queue messages EventBridge delivers.
//!
//! No SDK, no network, no clock: the live AWS provider (a later crate) reads real prices
//! and offerings; the simulator and `kerf instance-types` read these.

pub mod attach_limits;
pub mod capacity;
pub mod catalog;
pub mod discovery;
pub mod instance_type;
pub mod interruption;
pub mod pricing;
pub mod reservations;

pub use catalog::{CatalogError, InstanceTypeInfo};
pub use instance_type::{InstanceType, PricedOffering, instance_types, instance_types_of};
