//! Scheduling decisions as Karpenter defines them, as pure code: no I/O, no clock.
//!
//! So far it holds resource amounts and a pod's effective requests, taint and toleration
//! matching, and the requirements algebra: the set semantics of node selector requirements
//! (In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte, minValues) with intersection and
//! NodePool/pod compatibility, written for clarity over string sets. That algebra is the
//! reference the scheduler's interned, bitset-based fast path will be checked against.

pub mod requirements;
pub mod resources;
pub mod taints;

pub use requirements::{Incompatibility, Requirement, Requirements};
