//! Resource amounts as fixed arrays: the scheduler adds and compares these millions of times,
//! so they are `Copy` and free of maps. Extended resources (GPUs and the like) get slots
//! numbered per solve by [`Dimensions`].

use std::collections::BTreeMap;

use crate::resources::Resources;

/// How many extended resources one solve can tell apart.
pub const EXTENDED_SLOTS: usize = 8;
/// The slot of cpu (millicores).
pub const CPU: usize = 0;
/// The slot of memory (bytes).
pub const MEMORY: usize = 1;
/// The slot of ephemeral storage (bytes).
pub const EPHEMERAL_STORAGE: usize = 2;
/// The slot of the pod count.
pub const PODS: usize = 3;
/// The slot of the node count: 1 in every instance type's capacity, so that a NodePool's
/// `limits.nodes` is spent as its other limits are.
pub const NODES: usize = 4;
/// The first slot of an extended resource.
const FIRST_EXTENDED: usize = 5;
/// How many resources an [`Amounts`] holds: the fixed ones and the extended slots.
pub const SLOTS: usize = FIRST_EXTENDED + EXTENDED_SLOTS;

/// Amounts of cpu (millicores), memory, ephemeral storage (bytes), pods, then extended
/// resources in the slots [`Dimensions`] assigned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Amounts(pub [i64; SLOTS]);

impl Amounts {
    /// More of everything than any request or machine: what a bin with no known bound
    /// holds, with room to add to it without overflow.
    pub const UNBOUNDED: Amounts = Amounts([i64::MAX / 4; SLOTS]);

    /// CPU in millicores.
    pub fn cpu_millis(&self) -> i64 {
        self.0[CPU]
    }

    /// Memory in bytes.
    pub fn memory_bytes(&self) -> i64 {
        self.0[MEMORY]
    }

    /// `self + other`.
    pub fn plus(&self, other: &Amounts) -> Amounts {
        let mut out = *self;
        for (a, b) in out.0.iter_mut().zip(other.0) {
            *a += b;
        }
        out
    }

    /// `self - other`, never below zero.
    pub fn minus(&self, other: &Amounts) -> Amounts {
        let mut out = *self;
        for (a, b) in out.0.iter_mut().zip(other.0) {
            *a = (*a - b).max(0);
        }
        out
    }

    /// The larger of each amount.
    pub fn max(&self, other: &Amounts) -> Amounts {
        let mut out = *self;
        for (a, b) in out.0.iter_mut().zip(other.0) {
            *a = (*a).max(b);
        }
        out
    }

    /// The smaller of each amount.
    pub fn min(&self, other: &Amounts) -> Amounts {
        let mut out = *self;
        for (a, b) in out.0.iter_mut().zip(other.0) {
            *a = (*a).min(b);
        }
        out
    }

    /// Whether every amount fits within `available`.
    pub fn fits(&self, available: &Amounts) -> bool {
        self.0.iter().zip(available.0.iter()).all(|(a, b)| a <= b)
    }

    /// Indices of the amounts that exceed `available`.
    pub fn exceeding<'a>(&'a self, available: &'a Amounts) -> impl Iterator<Item = usize> + 'a {
        (0..SLOTS).filter(|&i| self.0[i] > available.0[i])
    }
}

/// The names of the resource slots of one solve: the five fixed ones, then extended
/// resources in the order first seen. A resource beyond the slots reads as unobtainable.
#[derive(Clone, Debug, Default)]
pub struct Dimensions {
    extended: Vec<String>,
}

/// The amount a request for a resource without a slot reads as: more than any node has.
const UNOBTAINABLE: i64 = i64::MAX / 4;

impl Dimensions {
    /// Slots for resources seen so far.
    pub fn new() -> Dimensions {
        Dimensions::default()
    }

    /// A request, giving new extended resources slots (requests of resources that do not
    /// fit the slots become unobtainable amounts).
    pub fn request(&mut self, r: &Resources) -> Amounts {
        let mut out = Self::fixed(r);
        for (name, v) in &r.extended {
            if *v == 0 {
                continue;
            }
            match self.slot_or_add(name) {
                Some(i) => out.0[FIRST_EXTENDED + i] = *v,
                None => out.0[CPU] = UNOBTAINABLE,
            }
        }
        out
    }

    /// A capacity, in the slots known now (resources no request uses are dropped; call after
    /// every request has been read).
    pub fn capacity(&self, r: &Resources) -> Amounts {
        let mut out = Self::fixed(r);
        for (name, v) in &r.extended {
            if let Some(i) = self.extended.iter().position(|n| n == name) {
                out.0[FIRST_EXTENDED + i] = *v;
            }
        }
        out
    }

    /// What a node offers pods: [`Dimensions::capacity`], except that a volume attachment
    /// slot ([`kerf_api::labels::ATTACHABLE_VOLUMES`]) the node does not list takes any
    /// number, as kube-scheduler counts a CSI driver without a published limit.
    pub fn allocatable(&self, r: &Resources) -> Amounts {
        let mut out = self.capacity(r);
        for (i, name) in self.extended.iter().enumerate() {
            if name.starts_with(kerf_api::labels::ATTACHABLE_VOLUMES)
                && !r.extended.contains_key(name)
            {
                out.0[FIRST_EXTENDED + i] = UNOBTAINABLE;
            }
        }
        out
    }

    /// Back to named resources, for output.
    pub fn to_resources(&self, a: &Amounts) -> Resources {
        let extended: BTreeMap<String, i64> = self
            .extended
            .iter()
            .enumerate()
            .filter(|(i, _)| a.0[FIRST_EXTENDED + i] != 0)
            .map(|(i, n)| (n.clone(), a.0[FIRST_EXTENDED + i]))
            .collect();
        Resources {
            cpu_millis: a.0[CPU],
            memory_bytes: a.0[MEMORY],
            ephemeral_storage_bytes: a.0[EPHEMERAL_STORAGE],
            pods: a.0[PODS],
            extended,
        }
    }

    /// The name of slot `i`.
    pub fn name(&self, i: usize) -> &str {
        match i {
            CPU => "cpu",
            MEMORY => "memory",
            EPHEMERAL_STORAGE => "ephemeral-storage",
            PODS => "pods",
            NODES => "nodes",
            _ => &self.extended[i - FIRST_EXTENDED],
        }
    }

    /// The slot of a resource name, if it has one.
    pub fn slot(&self, name: &str) -> Option<usize> {
        match name {
            "cpu" => Some(CPU),
            "memory" => Some(MEMORY),
            "ephemeral-storage" => Some(EPHEMERAL_STORAGE),
            "pods" => Some(PODS),
            "nodes" => Some(NODES),
            _ => self
                .extended
                .iter()
                .position(|n| n == name)
                .map(|i| FIRST_EXTENDED + i),
        }
    }

    fn slot_or_add(&mut self, name: &str) -> Option<usize> {
        if let Some(i) = self.extended.iter().position(|n| n == name) {
            return Some(i);
        }
        (self.extended.len() < EXTENDED_SLOTS).then(|| {
            self.extended.push(name.to_string());
            self.extended.len() - 1
        })
    }

    fn fixed(r: &Resources) -> Amounts {
        let mut out = Amounts::default();
        out.0[CPU] = r.cpu_millis;
        out.0[MEMORY] = r.memory_bytes;
        out.0[EPHEMERAL_STORAGE] = r.ephemeral_storage_bytes;
        out.0[PODS] = r.pods;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_resources_get_slots_and_round_trip() {
        let mut d = Dimensions::new();
        let gpu_pod = Resources {
            cpu_millis: 500,
            pods: 1,
            extended: [("nvidia.com/gpu".to_string(), 1)].into(),
            ..Default::default()
        };
        let req = d.request(&gpu_pod);
        let plain = d.capacity(&Resources {
            cpu_millis: 2000,
            pods: 10,
            ..Default::default()
        });
        assert!(!req.fits(&plain));
        assert_eq!(
            req.exceeding(&plain).map(|i| d.name(i)).collect::<Vec<_>>(),
            ["nvidia.com/gpu"]
        );
        assert_eq!(d.to_resources(&req), gpu_pod);
        assert_eq!(req.plus(&req).minus(&req), req);
    }
}
