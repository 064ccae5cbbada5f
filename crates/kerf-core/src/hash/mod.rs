//! The drift hashes written on each NodeClaim at creation (`karpenter.sh/nodepool-hash`,
//! `karpenter.k8s.aws/ec2nodeclass-hash`) and compared with the current objects later. They
//! are Karpenter's own: the same Go structs, fields and hashstructure v2 rules
//! ([`go_value`]), so a NodeClaim Karpenter v1.15 launched is not drifted when Kerf takes
//! over, nor one Kerf launched when Karpenter takes it back. `tests/karpenter_hash.rs`
//! checks the values against Karpenter's Go code.
//!
//! One difference is left: Go tells an absent list or map from an empty one (`taints: []`),
//! and Kerf's types do not; both hash as absent.

pub mod go_value;

use kerf_api::ec2nodeclass::{
    AmiFamily, BlockDevice, BlockDeviceMapping, MetadataOptions, NetworkInterface,
};
use kerf_api::{EC2NodeClass, NodePool, Taint};

use crate::hash::go_value::GoValue;

/// The `karpenter.sh/nodepool-hash-version` of Karpenter v1.15, which Kerf writes: a hash of
/// another version is not compared (the NodeClaim is re-stamped instead), as Karpenter does.
pub const NODEPOOL_HASH_VERSION: &str = "v3";
/// The `karpenter.k8s.aws/ec2nodeclass-hash-version` of Karpenter's AWS provider v1.15.
pub const EC2NODECLASS_HASH_VERSION: &str = "v6";

/// FNV-1a, 64 bits: a fixed, documented function (no seed) for names that must come out the
/// same across releases and restarts (instance profiles, launch templates).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn string_map(m: &std::collections::BTreeMap<String, String>) -> Option<GoValue> {
    (!m.is_empty()).then(|| {
        GoValue::Map(
            m.iter()
                .map(|(k, v)| (GoValue::str(k), GoValue::str(v)))
                .collect(),
        )
    })
}

fn nanos(d: std::time::Duration) -> GoValue {
    GoValue::Int64(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn taint(t: &Taint) -> GoValue {
    let effect = serde_json::to_value(t.effect)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let added = t
        .time_added
        .as_deref()
        .and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(|ts| {
            let time = GoValue::Time(ts.as_second(), ts.subsec_nanosecond());
            GoValue::Struct("Time", vec![("Time", Some(time))])
        });
    GoValue::Struct(
        "Taint",
        vec![
            ("Key", GoValue::opt_str(&t.key)),
            ("Value", t.value.as_deref().and_then(GoValue::opt_str)),
            ("Effect", GoValue::opt_str(&effect)),
            ("TimeAdded", added),
        ],
    )
}

fn taints(list: &[Taint]) -> Option<GoValue> {
    (!list.is_empty()).then(|| GoValue::Slice(list.iter().map(taint).collect()))
}

/// `NodePool.Hash()`: the template's labels, annotations, taints, startup taints, node class
/// reference, terminationGracePeriod and expireAfter (requirements are left out: a node that
/// no longer meets them drifts on its own).
pub fn node_pool_hash(np: &NodePool) -> String {
    let t = &np.spec.template;
    let spec = &t.spec;
    let meta = GoValue::Struct(
        "ObjectMeta",
        vec![
            ("Labels", string_map(&t.metadata.labels)),
            ("Annotations", string_map(&t.metadata.annotations)),
        ],
    );
    let meta_zero = t.metadata.labels.is_empty() && t.metadata.annotations.is_empty();
    let class_ref = GoValue::Struct(
        "NodeClassReference",
        vec![
            ("Kind", GoValue::opt_str(&spec.node_class_ref.kind)),
            ("Name", GoValue::opt_str(&spec.node_class_ref.name)),
            ("Group", GoValue::opt_str(&spec.node_class_ref.group)),
        ],
    );
    let grace = spec.termination_grace_period.as_ref().map(|d| {
        let inner = (!d.0.is_zero()).then(|| nanos(d.0));
        GoValue::Struct("Duration", vec![("Duration", inner)])
    });
    // `Never` leaves every field of NillableDuration zero: the field is skipped
    let expire = match spec.expire_after {
        kerf_api::duration::NillableDuration::Never => None,
        kerf_api::duration::NillableDuration::After(d) => Some(GoValue::Struct(
            "NillableDuration",
            vec![("Duration", Some(nanos(d)))],
        )),
    };
    let template_spec = GoValue::Struct(
        "NodeClaimTemplateSpec",
        vec![
            ("Taints", taints(&spec.taints)),
            ("StartupTaints", taints(&spec.startup_taints)),
            ("NodeClassRef", Some(class_ref)),
            ("TerminationGracePeriod", grace),
            ("ExpireAfter", expire),
        ],
    );
    let template = GoValue::Struct(
        "NodeClaimTemplate",
        vec![
            ("ObjectMeta", (!meta_zero).then_some(meta)),
            ("Spec", Some(template_spec)),
        ],
    );
    template.hash().to_string()
}

fn opt_string(s: Option<&str>) -> Option<GoValue> {
    s.map(GoValue::str)
}

fn opt_enum(v: Option<impl serde::Serialize>) -> Option<GoValue> {
    v.and_then(|v| serde_json::to_value(v).ok())
        .and_then(|v| v.as_str().map(GoValue::str))
}

/// A quantity as `resource.Quantity.String()` prints it: the largest binary (or decimal)
/// suffix that keeps it whole, as `volumeSize` is hashed.
fn canonical_size(s: &str) -> String {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, suffix) = s.split_at(split);
    let Ok(mut n) = digits.parse::<u64>() else {
        return s.to_string();
    };
    let (binary, decimal) = (
        ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"],
        ["k", "M", "G", "T", "P", "E"],
    );
    let (ladder, base) = if suffix.ends_with('i') {
        (binary, 1024)
    } else {
        (decimal, 1000)
    };
    let Some(mut at) = ladder.iter().position(|u| *u == suffix) else {
        return s.to_string();
    };
    while n != 0 && n % base == 0 && at + 1 < ladder.len() {
        n /= base;
        at += 1;
    }
    format!("{n}{}", ladder[at])
}

fn block_device(d: &BlockDevice) -> GoValue {
    GoValue::Struct(
        "BlockDevice",
        vec![
            (
                "DeleteOnTermination",
                d.delete_on_termination.map(GoValue::Bool),
            ),
            ("Encrypted", d.encrypted.map(GoValue::Bool)),
            ("IOPS", d.iops.map(GoValue::Int64)),
            ("KMSKeyID", opt_string(d.kms_key_id.as_deref())),
            ("SnapshotID", opt_string(d.snapshot_id.as_deref())),
            ("Throughput", d.throughput.map(GoValue::Int64)),
            (
                "VolumeInitializationRate",
                d.volume_initialization_rate.map(GoValue::Int32),
            ),
            (
                "VolumeSize",
                d.volume_size
                    .as_deref()
                    .map(|s| GoValue::str(canonical_size(s))),
            ),
            ("VolumeType", opt_enum(d.volume_type)),
        ],
    )
}

fn block_device_mapping(m: &BlockDeviceMapping) -> GoValue {
    GoValue::Struct(
        "BlockDeviceMapping",
        vec![
            ("DeviceName", opt_string(m.device_name.as_deref())),
            ("EBS", m.ebs.as_ref().map(block_device)),
            ("RootVolume", m.root_volume.then_some(GoValue::Bool(true))),
        ],
    )
}

/// A `*NetworkInterface` of the spec's slice; index 0 is Go's zero value, left out.
fn network_interface(n: &NetworkInterface) -> GoValue {
    let index = |i: i32| (i != 0).then_some(GoValue::Int32(i));
    GoValue::Struct(
        "NetworkInterface",
        vec![
            ("NetworkCardIndex", index(n.network_card_index)),
            ("DeviceIndex", index(n.device_index)),
            (
                "InterfaceType",
                Some(GoValue::str(n.interface_type.as_str())),
            ),
        ],
    )
}

fn metadata_options(m: &MetadataOptions) -> GoValue {
    GoValue::Struct(
        "MetadataOptions",
        vec![
            ("HTTPEndpoint", opt_enum(m.http_endpoint)),
            ("HTTPProtocolIPv6", opt_enum(m.http_protocol_ipv6)),
            (
                "HTTPPutResponseHopLimit",
                m.http_put_response_hop_limit.map(GoValue::Int64),
            ),
            ("HTTPTokens", opt_enum(m.http_tokens)),
        ],
    )
}

/// The AMI family the class resolves to (`EC2NodeClass.AMIFamily()`): its `amiFamily`, else
/// its alias's family, else `Custom`.
fn ami_family(class: &EC2NodeClass) -> String {
    let family = class.spec.ami_family.or_else(|| {
        class
            .spec
            .ami_selector_terms
            .iter()
            .filter_map(|t| t.alias.as_deref())
            .find_map(|a| AmiFamily::from_alias(a.split('@').next().unwrap_or("")))
    });
    opt_enum(Some(family.unwrap_or(AmiFamily::Custom)))
        .and_then(|v| match v {
            GoValue::Str(s) => Some(s),
            _ => None,
        })
        .unwrap_or_default()
}

/// The kubelet settings as Go's `json.Marshal` of the map prints them (keys sorted, compact),
/// or `null` when there are none.
fn kubelet_json(class: &EC2NodeClass) -> String {
    let value = class
        .spec
        .kubelet
        .as_ref()
        .and_then(|k| serde_json::to_value(k).ok())
        .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()));
    value.map_or_else(|| "null".to_string(), |v| go_json(&v))
}

/// Compact JSON with object keys sorted and `<`, `>`, `&` escaped, as Go's encoder writes it.
fn go_json(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", go_json(&k.as_str().into()), go_json(&m[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        serde_json::Value::Array(a) => {
            let items: Vec<String> = a.iter().map(go_json).collect();
            format!("[{}]", items.join(","))
        }
        other => other
            .to_string()
            .replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026"),
    }
}

/// `EC2NodeClass.Hash(caBundle)`: the spec's launch fields (selector terms are left out:
/// they drift by what they resolve to), the resolved AMI family, the cluster's CA bundle and
/// the kubelet settings.
pub fn node_class_hash(class: &EC2NodeClass, ca_bundle: &str) -> String {
    let s = &class.spec;
    let mappings = (!s.block_device_mappings.is_empty()).then(|| {
        GoValue::Slice(
            s.block_device_mappings
                .iter()
                .map(block_device_mapping)
                .collect(),
        )
    });
    // the fields in the Go struct's declaration order: each one's hash is mixed in turn
    // (IPPrefixCount is `hash:"ignore"`: a change reaches new instances only)
    let spec = GoValue::Struct(
        "EC2NodeClassSpec",
        vec![
            (
                "PlacementGroupSelector",
                s.placement_group_selector.as_ref().map(|pg| {
                    GoValue::Struct(
                        "PlacementGroupSelector",
                        vec![
                            ("Name", opt_string(pg.name.as_deref())),
                            ("ID", opt_string(pg.id.as_deref())),
                        ],
                    )
                }),
            ),
            (
                "AssociatePublicIPAddress",
                s.associate_public_ip_address.map(GoValue::Bool),
            ),
            ("UserData", opt_string(s.user_data.as_deref())),
            ("Role", s.role.as_deref().and_then(GoValue::opt_str)),
            ("InstanceProfile", opt_string(s.instance_profile.as_deref())),
            ("Tags", string_map(&s.tags)),
            ("BlockDeviceMappings", mappings),
            ("InstanceStorePolicy", opt_enum(s.instance_store_policy)),
            (
                "NetworkInterfaces",
                (s.network_interfaces.as_ref())
                    .map(|nics| GoValue::Slice(nics.iter().map(network_interface).collect())),
            ),
            (
                "DetailedMonitoring",
                s.detailed_monitoring.map(GoValue::Bool),
            ),
            (
                "MetadataOptions",
                Some(metadata_options(&s.metadata_options)),
            ),
            (
                "EnclaveOptions",
                s.enclave_options.as_ref().map(|e| {
                    GoValue::Struct(
                        "EnclaveOptions",
                        vec![("Enabled", e.enabled.then_some(GoValue::Bool(true)))],
                    )
                }),
            ),
            (
                "ConnectionTracking",
                s.connection_tracking.as_ref().map(|c| {
                    GoValue::Struct(
                        "ConnectionTracking",
                        vec![
                            (
                                "TCPEstablishedTimeout",
                                c.tcp_established_timeout.map(GoValue::Int32),
                            ),
                            ("UDPStreamTimeout", c.udp_stream_timeout.map(GoValue::Int32)),
                            ("UDPTimeout", c.udp_timeout.map(GoValue::Int32)),
                        ],
                    )
                }),
            ),
            ("Context", opt_string(s.context.as_deref())),
            (
                "CPUOptions",
                s.cpu_options.as_ref().map(|c| {
                    GoValue::Struct(
                        "CPUOptions",
                        vec![(
                            "NestedVirtualization",
                            c.nested_virtualization.map(|t| GoValue::str(t.as_str())),
                        )],
                    )
                }),
            ),
        ],
    );
    let items = GoValue::Slice(vec![
        spec,
        GoValue::Str(ami_family(class)),
        GoValue::str(ca_bundle),
        GoValue::Str(kubelet_json(class)),
    ]);
    items.hash().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn volume_sizes_hash_in_canonical_form() {
        assert_eq!(canonical_size("2G"), "2G");
        assert_eq!(canonical_size("1024Gi"), "1Ti");
        assert_eq!(canonical_size("1000G"), "1T");
        assert_eq!(canonical_size("20Gi"), "20Gi");
    }

    #[test]
    fn kubelet_json_is_sorted_and_compact() {
        let v = serde_json::json!({"maxPods": 110, "clusterDNS": ["10.0.0.10"], "a": {"z": 1, "b": "<"}});
        assert_eq!(
            go_json(&v),
            r#"{"a":{"b":"\u003c","z":1},"clusterDNS":["10.0.0.10"],"maxPods":110}"#
        );
    }

    #[test]
    fn behaviour_fields_count_and_requirements_do_not() {
        let np: NodePool = serde_yaml::from_str(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
        )
        .unwrap();
        let h = node_pool_hash(&np);
        let mut reqs = np.clone();
        reqs.spec.template.spec.requirements =
            serde_yaml::from_str("[{key: a, operator: Exists}]").unwrap();
        assert_eq!(node_pool_hash(&reqs), h);
        let mut never = np.clone();
        never.spec.template.spec.expire_after = kerf_api::duration::NillableDuration::Never;
        assert_ne!(
            node_pool_hash(&never),
            h,
            "Karpenter v1.15 hashes expireAfter"
        );
    }
}
