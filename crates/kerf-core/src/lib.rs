//! Kerf's decision core around the scheduler: the cluster state and the controllers
//! (provisioning, NodeClaim lifecycle, disruption, termination, interruption) as one sans-IO
//! state machine that every shell drives. No I/O and no clock: time comes in as a value (a
//! [`std::time::Duration`] since an epoch the shell chooses), actions go out as values.

pub mod benchmark;
pub mod buffers;
pub mod clock;
pub mod cluster;
pub mod controllers;
pub mod disruption;
pub mod fleet;
pub mod hash;
pub mod metrics;
pub mod nodepools;
pub mod objects;
pub mod observe;
pub mod overlays;
pub mod pod_shapes;
pub mod provisioning;
pub mod repair;
pub mod unavailable;
pub mod unfinished;
pub mod volumes;
pub mod workloads;
