//! Kerf's decision core around the scheduler: pure code that turns cluster objects into a
//! scheduling problem and decisions into NodeClaims. No I/O and no clock: time comes in as
//! a value (a [`std::time::Duration`] since an epoch the shell chooses).

pub mod benchmark;
pub mod consolidation;
pub mod disruption;
pub mod interruption;
pub mod nodepools;
pub mod provisioner;
pub mod unavailable;
pub mod workloads;
