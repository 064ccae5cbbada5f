//! Scheduling decisions as Karpenter defines them, as pure code: no I/O, no clock.
//!
//! The readable reference model (resource amounts, taints, the string-set requirements
//! algebra) sits beside the scheduler's fast path, which interns strings ([`symbols`]),
//! holds requirements as sorted symbol lists ([`interned`]) and instance types as bit sets
//! ([`bitset`]). [`solve`] is the bin-packing scheduler: pending pods in, NodeClaims to launch
//! and placements on existing nodes out.

pub mod amounts;
pub mod benchmark;
pub mod bitset;
pub mod input;
pub mod interned;
pub mod launch;
pub mod pods;
pub mod reasons;
pub mod requirements;
pub mod resources;
pub mod selector;
pub mod solver;
pub mod symbols;
pub mod taints;
pub mod topology;

pub use input::{
    BoundPod, ExistingNode, InstanceTypeOption, MinValues, NodePoolInput, Offering, Preferences,
    Problem, Reservation, SolveOptions,
};
pub use reasons::{Reason, Why};
pub use requirements::{Incompatibility, Requirement, Requirements};
pub use solver::{
    Catalog, CostBound, Decision, ExistingPlacement, NodeSize, PlannedNodeClaim, Session,
    Unschedulable, capped_pools, cost_bound, solve, solve_near_bound, solve_with,
};
