//! Scheduling decisions as Karpenter defines them, as pure code: no I/O, no clock.
//!
//! So far this crate holds resource amounts and a pod's effective requests, and the
//! requirements algebra — the set semantics of node selector
//! requirements (In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte, minValues) with
//! intersection and NodePool/pod compatibility — written for clarity over string sets. It is
//! the reference the scheduler's interned, bitset-based fast path is checked against.

pub mod requirements;
pub mod resources;

pub use requirements::{Incompatibility, Requirement, Requirements};
