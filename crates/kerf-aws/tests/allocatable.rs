//! Allocatable resources match the values Karpenter publishes for AL2023 nodes with default
//! kubelet settings (its instance-types reference page), and the kubelet settings of an
//! EC2NodeClass change them as Karpenter's do.

use kerf_api::ec2nodeclass::KubeletConfiguration;
use kerf_aws::capacity::{NodeSettings, capacity, overhead};
use kerf_aws::catalog;

const MIB: i64 = 1 << 20;

/// An extended resource and its count.
type Extended = Option<(&'static str, i64)>;

/// (type, cpu millicores, memory MiB, pods, extended resource)
const PUBLISHED: &[(&str, i64, i64, i64, Extended)] = &[
    ("m5.large", 1930, 6903, 29, None),
    ("c5.xlarge", 3920, 6584, 58, None),
    ("c5.2xlarge", 7910, 14162, 58, None),
    ("c5a.2xlarge", 7910, 14162, 58, None), // seed 004: `launched nodeclaim` allocatable
    ("m6g.large", 1930, 6844, 29, None),
    ("a1.medium", 940, 1392, 8, None),
    ("a1.large", 1930, 3055, 29, None),
    ("a1.xlarge", 3920, 6525, 58, None),
    ("a1.2xlarge", 7910, 14103, 58, None),
    ("a1.4xlarge", 15890, 27322, 234, None),
    ("a1.metal", 15890, 27322, 234, None),
    ("c1.medium", 1930, 1122, 12, None),
    ("c1.xlarge", 7910, 5637, 58, None),
    ("c3.large", 1930, 2878, 29, None),
    ("c3.2xlarge", 7910, 13215, 58, None),
    ("c3.8xlarge", 31850, 53903, 234, None),
    ("c4.8xlarge", 35840, 53903, 234, None),
    ("i8g.2xlarge", 7910, 59568, 58, None),
    ("i7ie.48xlarge", 191450, 1446437, 737, None),
    ("g6.2xlarge", 7910, 29317, 58, Some(("nvidia.com/gpu", 1))),
    (
        "g6.12xlarge",
        47810,
        178933,
        234,
        Some(("nvidia.com/gpu", 4)),
    ),
    (
        "g6.48xlarge",
        191450,
        718987,
        737,
        Some(("nvidia.com/gpu", 8)),
    ),
    ("g6e.xlarge", 3920, 29317, 58, Some(("nvidia.com/gpu", 1))),
];

#[test]
fn allocatable_matches_karpenters_published_values() {
    let settings = NodeSettings::default();
    for &(name, cpu, memory_mib, pods, extended) in PUBLISHED {
        let info = catalog::get(name).unwrap_or_else(|| panic!("{name} not in catalog"));
        let cap = capacity(info, &settings);
        let alloc = cap.saturating_sub(&overhead(info, &settings, &cap));
        assert_eq!(alloc.cpu_millis, cpu, "{name} cpu");
        assert_eq!(alloc.memory_bytes, memory_mib * MIB, "{name} memory");
        assert_eq!(alloc.pods, pods, "{name} pods");
        assert_eq!(
            alloc.ephemeral_storage_bytes,
            17 << 30,
            "{name} ephemeral-storage"
        );
        if let Some((resource, count)) = extended {
            assert_eq!(
                alloc.extended.get(resource),
                Some(&count),
                "{name} {resource}"
            );
        }
    }
}

#[test]
fn kubelet_settings_change_capacity_and_overhead() {
    let info = catalog::get("m5.large").unwrap();
    let kubelet: KubeletConfiguration = serde_json::from_value(serde_json::json!({
        "maxPods": 110,
        "systemReserved": {"cpu": "100m", "memory": "100Mi"},
        "evictionHard": {"memory.available": "5%"},
        // a soft threshold only warns: as Karpenter, it leaves allocatable alone
        "evictionSoft": {"memory.available": "50%"},
        "evictionSoftGracePeriod": {"memory.available": "1m"},
    }))
    .unwrap();
    let settings = NodeSettings {
        kubelet: Some(&kubelet),
        ..Default::default()
    };
    let cap = capacity(info, &settings);
    assert_eq!(cap.pods, 110);
    let alloc = cap.saturating_sub(&overhead(info, &settings, &cap));
    assert_eq!(alloc.cpu_millis, 1930 - 100);
    // 7577Mi capacity − (11×110+255)Mi kube-reserved − 100Mi system − ceil(5% of 7577Mi)
    let evict = (7577.0 * MIB as f64 * 0.05).ceil() as i64;
    assert_eq!(
        alloc.memory_bytes,
        7577 * MIB - (11 * 110 + 255) * MIB - 100 * MIB - evict
    );

    let per_core: KubeletConfiguration =
        serde_json::from_value(serde_json::json!({"podsPerCore": 4})).unwrap();
    let settings = NodeSettings {
        kubelet: Some(&per_core),
        ..Default::default()
    };
    assert_eq!(capacity(info, &settings).pods, 8);
}

#[test]
fn root_volume_sets_ephemeral_storage() {
    let info = catalog::get("m5.large").unwrap();
    let settings = NodeSettings {
        root_volume_bytes: Some(100 << 30),
        ..Default::default()
    };
    let cap = capacity(info, &settings);
    let alloc = cap.saturating_sub(&overhead(info, &settings, &cap));
    assert_eq!(cap.ephemeral_storage_bytes, 100 << 30);
    assert_eq!(
        alloc.ephemeral_storage_bytes,
        (100 << 30) - (1 << 30) - (10 << 30)
    );
}
