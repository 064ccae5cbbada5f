//! How many EBS volumes a node of an instance type can attach: what the EBS CSI driver's node
//! plugin publishes in the node's CSINode (`allocatable.count` of `ebs.csi.aws.com`), worked
//! out before the node exists so that a new NodeClaim is not planned for more volumes than
//! its instance will take.
//!
//! The driver reads EC2's per-type `MaximumEbsAttachments`; the embedded catalog does not
//! carry it, so the rules that produce those numbers are followed instead:
//! - Xen instances attach 39 volumes;
//! - Nitro instances of the 7th generation on (x86 families, and Graviton4 onwards), the
//!   high-memory `u7i`/`u7in` and the newer accelerated families have slots of their own,
//!   by size: 32 up to 12xlarge, 48 at 16–18xlarge, 64 at 24xlarge, 88 at 32xlarge, 128 from
//!   48xlarge; metal sizes 39 (24xlarge or smaller) or 79;
//! - other Nitro instances share 27 slots (31 on bare metal) with their NVMe instance-store
//!   disks and GPUs, and with network interfaces beyond the first;
//! - every node keeps a slot for each block device of its launch template (at least the
//!   root volume), and never reports fewer than one.

use crate::catalog::InstanceTypeInfo;

/// Slots of a Xen instance.
const XEN: i64 = 39;
/// Slots a Nitro instance shares with its disks, GPUs and extra interfaces.
const SHARED: i64 = 27;
/// Slots an older bare-metal Nitro instance shares.
const SHARED_METAL: i64 = 31;

/// The EBS attachment limit of a node of type `info` launched with `block_devices` block
/// device mappings (the root volume included).
pub fn ebs(info: &InstanceTypeInfo, block_devices: usize) -> i64 {
    let reserved = i64::try_from(block_devices.max(1)).unwrap_or(i64::MAX);
    let slots = if info.hypervisor == "xen" {
        XEN
    } else if let Some(d) = dedicated(&info.name) {
        d
    } else {
        let base = if info.bare_metal {
            SHARED_METAL
        } else {
            SHARED
        };
        let gpus = info.gpu.as_ref().map_or(0, |g| i64::from(g.count));
        base - nvme_disks(info) - gpus
    };
    (slots - reserved).max(1)
}

/// The dedicated EBS slots of a type whose family has them, by size.
fn dedicated(name: &str) -> Option<i64> {
    let (family, size) = name.split_once('.')?;
    match family {
        "p4d" | "p4de" => return Some(28),
        "p5" | "p5e" | "p5en" | "p6-b200" | "p6-b300" | "trn2" | "trn2u" => {
            return Some(if size == "48xlarge" { 64 } else { 32 });
        }
        "hpc7a" | "hpc8a" => return Some(27),
        _ => {}
    }
    if !has_dedicated_slots(family) {
        return None;
    }
    if let Some(metal) = size.strip_prefix("metal") {
        let cores: u32 = metal
            .trim_start_matches('-')
            .trim_end_matches("xl")
            .parse()
            .unwrap_or(0);
        return Some(if cores != 0 && cores <= 24 { 39 } else { 79 });
    }
    Some(match multiple(size) {
        0..=12 => 32,
        13..=18 => 48,
        19..=24 => 64,
        25..=32 => 88,
        _ => 128,
    })
}

/// Whether a family's instances have EBS slots of their own: 7th-generation-on x86
/// families (`c7i`, `m7a`, `r8i`, …), Graviton4-on families (`m8g`, `c9g`, …), `i7i`/`i7ie`,
/// `i8g`/`i8ge`, `x8*`, `u7i*`, `f2` and the newer GPU families (`g6*`, `gr6*`, `g7*`).
fn has_dedicated_slots(family: &str) -> bool {
    let class: String = family
        .chars()
        .take_while(|c| c.is_ascii_lowercase())
        .collect();
    let rest = &family[class.len()..];
    let generation: u32 = rest
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or(0);
    let suffix = &rest[rest.len().min(generation.to_string().len())..];
    let graviton = suffix.starts_with('g');
    match class.as_str() {
        "c" | "m" | "r" => generation >= 8 || (generation == 7 && !graviton),
        "i" | "x" => generation >= 7 && !(class == "x" && generation == 2),
        "u" => generation >= 7,
        "g" | "gr" => generation >= 6,
        "f" => generation >= 2,
        _ => false,
    }
}

/// NVMe instance-store disks, as AWS sizes them: one up to 4xlarge, two up to 12xlarge,
/// four above (the catalog gives the total, not the count).
fn nvme_disks(info: &InstanceTypeInfo) -> i64 {
    if info.local_nvme_gb.is_none() {
        return 0;
    }
    let size = info.name.split_once('.').map_or("", |(_, s)| s);
    match multiple(size) {
        0..=4 => 1,
        5..=12 => 2,
        _ => 4,
    }
}

/// How many xlarges a size is (1 for xlarge and smaller).
fn multiple(size: &str) -> u32 {
    match size {
        "nano" | "micro" | "small" | "medium" | "large" | "xlarge" => 1,
        _ => size.trim_end_matches("xlarge").parse().unwrap_or(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    fn limit(name: &str) -> i64 {
        let info = catalog::get(name).unwrap_or_else(|| panic!("{name} not in the catalog"));
        ebs(info, 1)
    }

    /// Values from the EBS CSI driver's table (`MaximumEbsAttachments` as EC2 reports it),
    /// less the root volume's slot.
    #[test]
    fn limits_follow_the_ebs_drivers_numbers() {
        for (name, want) in [
            ("m5.large", 26),
            ("c5.metal", 30),
            ("c4.large", 38),
            ("c5d.large", 25),
            ("c5d.24xlarge", 22),
            ("m7i.large", 31),
            ("m7i.16xlarge", 47),
            ("m7i.24xlarge", 63),
            ("m7i.48xlarge", 127),
            ("m7g.large", 26),
            ("m8g.large", 31),
            ("r7iz.32xlarge", 87),
            ("p4d.24xlarge", 27),
            ("u7i-12tb.224xlarge", 127),
            ("g6.xlarge", 31),
        ] {
            assert_eq!(limit(name), want, "{name}");
        }
        let m5 = catalog::get("m5.large").unwrap();
        assert_eq!(ebs(m5, 3), 24, "each extra block device takes a slot");
        assert_eq!(ebs(m5, 0), 26, "the root volume always does");
    }
}
