//! The controllers driven as a shell drives them: observations in, `poll(now)`, actions out.
//!
//! One binary, a module per controller; [`support`] holds what they share.

mod buffers;
mod disruption;
mod lifecycle;
mod node_classes;
mod provisioning;
mod reboot;
mod static_capacity;
mod support;
mod termination;
mod zonal_shift;
