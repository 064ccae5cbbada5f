//! Provisioning's pure parts, apart from the controller that keeps its state between batches
//! ([`crate::controllers::provisioning`]): which pods to provision for, the batch window, and
//! the NodeClaim objects a decision turns into.

pub mod rules;
