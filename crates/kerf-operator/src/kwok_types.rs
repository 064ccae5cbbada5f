//! The instance types of Karpenter's own kwok provider, so that one set of manifests runs
//! under Karpenter's kwok provider or Kerf's and node counts and prices compare directly:
//! NodePools whose `nodeClassRef` is a `karpenter.kwok.sh/v1alpha1` `KWOKNodeClass` get these
//! types. By default they are the set Karpenter v1.15 embeds, made by its published rule
//! (`kwok/tools/gen_instance_types.go`): cpu 1–256 × memory 2, 4 or 8 GiB per cpu × linux and
//! windows × amd64 and arm64, named `c-4x-amd64-linux`, offered spot and on-demand in four
//! zones at `0.025 $/cpu + 0.001 $/GB` an hour (spot 70 % of that). `INSTANCE_TYPES_FILE_PATH`
//! replaces them with a file in the format Karpenter's kwok provider reads.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ClusterResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::ec2nodeclass::EC2NodeClassStatus;
use kerf_api::{EC2NodeClass, labels};
use kerf_scheduling::resources::Resources;
use kerf_scheduling::{InstanceTypeOption, Offering};
use kube::Resource;
use serde::Deserialize;

use crate::cloud::CloudError;

/// The zones of Karpenter's kwok provider.
pub const ZONES: [&str; 4] = ["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"];
/// The group of Karpenter kwok's node class.
pub const GROUP: &str = "karpenter.kwok.sh";
/// Its kind.
pub const KIND: &str = "KWOKNodeClass";
/// What the kwok provider keeps back from every node (kube-reserved).
const RESERVED_CPU_MILLIS: i64 = 100;
const RESERVED_MEMORY: &str = "10Mi";

/// Karpenter kwok's node class (`karpenter.kwok.sh/v1alpha1` `KWOKNodeClass`), as far as Kerf
/// reads it: its metadata and its conditions (its CRD defaults `Ready` True; a NodePool's
/// `NodeClassReady` follows it). Its one spec field, `nodeRegistrationDelay`, is not acted on
/// (Kerf creates the Node at once), and most objects have no spec at all.
#[derive(Clone, Debug, Deserialize)]
pub struct KwokNodeClass {
    /// Its metadata.
    pub metadata: ObjectMeta,
    /// Its status.
    #[serde(default)]
    pub status: Option<KwokNodeClassStatus>,
}

/// A KWOKNodeClass's status: its conditions, each read on its own (one that does not read
/// is left out rather than the class).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct KwokNodeClassStatus {
    /// The conditions as written.
    #[serde(default)]
    pub conditions: Vec<serde_json::Value>,
}

impl Resource for KwokNodeClass {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind((): &()) -> Cow<'_, str> {
        KIND.into()
    }
    fn group((): &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version((): &()) -> Cow<'_, str> {
        "v1alpha1".into()
    }
    fn plural((): &()) -> Cow<'_, str> {
        "kwoknodeclasses".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The annotation on the node-class record the controllers hold for a KWOKNodeClass: the
/// controllers know one node class kind, and this tells the kwok provider which catalog the
/// record stands for.
pub const STANDS_FOR: &str = "kerf.sh/node-class-kind";

/// The node-class record for a KWOKNodeClass: no subnets, groups or images to resolve, so
/// nothing of it can drift; its deletion and its conditions as the class has them.
pub fn node_class_record(class: &KwokNodeClass) -> Option<EC2NodeClass> {
    let mut record: EC2NodeClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {
            "name": class.metadata.name, "annotations": {STANDS_FOR: KIND},
            "deletionTimestamp": class.metadata.deletion_timestamp,
        },
        "spec": {
            "role": "kwok", "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [], "securityGroupSelectorTerms": [],
        },
    }))
    .ok()?;
    let conditions = (class.status.iter())
        .flat_map(|s| &s.conditions)
        .filter_map(|c| serde_json::from_value(c.clone()).ok())
        .collect();
    record.status = Some(EC2NodeClassStatus {
        conditions,
        ..EC2NodeClassStatus::default()
    });
    Some(record)
}

/// Whether a node-class record stands for a KWOKNodeClass.
pub fn is_kwok(class: &EC2NodeClass) -> bool {
    class
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.get(STANDS_FOR).is_some_and(|k| k == KIND))
}

/// One instance type in the file format of Karpenter kwok's `INSTANCE_TYPES_FILE_PATH`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TypeSpec {
    /// `c-4x-amd64-linux`.
    pub name: String,
    /// `amd64` or `arm64`.
    pub architecture: String,
    /// `linux`, `windows`.
    pub operating_systems: Vec<String>,
    /// cpu, memory, pods, ephemeral-storage.
    pub resources: BTreeMap<String, String>,
    /// Where and how it is sold.
    pub offerings: Vec<OfferingSpec>,
}

/// An offering in that format (Go field names, which Go's decoder matches in any case).
#[derive(Clone, Debug, Deserialize)]
pub struct OfferingSpec {
    /// Dollars an hour.
    #[serde(alias = "price", alias = "Price")]
    pub price: f64,
    /// Zone and capacity type, as `In` requirements.
    #[serde(alias = "requirements", alias = "Requirements")]
    pub requirements: Vec<RequirementSpec>,
}

/// A node selector requirement.
#[derive(Clone, Debug, Deserialize)]
pub struct RequirementSpec {
    /// The label.
    pub key: String,
    /// Its values.
    #[serde(default)]
    pub values: Vec<String>,
}

fn gib(n: u64) -> String {
    if n.is_multiple_of(1024) {
        format!("{}Ti", n / 1024)
    } else {
        format!("{n}Gi")
    }
}

/// The default set, by Karpenter's generator rule.
pub fn default_specs() -> Vec<TypeSpec> {
    let mut out = Vec::new();
    for cpu in [1u64, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256] {
        for factor in [2u64, 4, 8] {
            for os in ["linux", "windows"] {
                for arch in ["amd64", "arm64"] {
                    let family = match factor {
                        2 => "c",
                        4 => "s",
                        _ => "m",
                    };
                    let memory_gib = cpu * factor;
                    let price = 0.025 * cpu as f64 + 0.001 * (memory_gib << 30) as f64 / 1e9;
                    let offerings = ZONES
                        .iter()
                        .flat_map(|zone| {
                            [("spot", price * 0.7), ("on-demand", price)].map(|(ct, p)| {
                                OfferingSpec {
                                    price: p,
                                    requirements: vec![
                                        RequirementSpec {
                                            key: labels::CAPACITY_TYPE.into(),
                                            values: vec![ct.into()],
                                        },
                                        RequirementSpec {
                                            key: labels::ZONE.into(),
                                            values: vec![(*zone).into()],
                                        },
                                    ],
                                }
                            })
                        })
                        .collect();
                    out.push(TypeSpec {
                        name: format!("{family}-{cpu}x-{arch}-{os}"),
                        architecture: arch.into(),
                        operating_systems: vec![os.into()],
                        resources: BTreeMap::from([
                            ("cpu".into(), cpu.to_string()),
                            ("memory".into(), gib(memory_gib)),
                            ("pods".into(), (cpu * 16).min(1024).to_string()),
                            ("ephemeral-storage".into(), "20Gi".into()),
                        ]),
                        offerings,
                    });
                }
            }
        }
    }
    out
}

/// Reads a file of Karpenter kwok's format.
pub fn read_file(path: &std::path::Path) -> Result<Vec<TypeSpec>, CloudError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CloudError::Config(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| CloudError::Config(format!("{}: {e}", path.display())))
}

/// The family label: the name up to its first `.` or `-`.
fn family(name: &str) -> &str {
    name.split(['.', '-']).next().unwrap_or(name)
}

/// As the scheduler sees them: labels as Karpenter kwok's nodes carry them, capacity,
/// allocatable (capacity less 100m cpu and 10Mi memory) and offerings.
pub fn options(specs: &[TypeSpec]) -> Vec<InstanceTypeOption> {
    specs
        .iter()
        .map(|t| {
            let mut resources = t.resources.clone();
            resources
                .entry("pods".into())
                .or_insert_with(|| "110".into());
            let capacity =
                Resources::from_quantities(resources.iter().map(|(k, v)| (k, v.as_str())));
            let reserved = Resources::from_quantities(
                [
                    ("cpu".to_string(), format!("{RESERVED_CPU_MILLIS}m")),
                    ("memory".to_string(), RESERVED_MEMORY.to_string()),
                ]
                .iter()
                .map(|(k, v)| (k, v.as_str())),
            );
            let allocatable = capacity.saturating_sub(&reserved);
            let cpu = resources.get("cpu").cloned().unwrap_or_default();
            let memory = resources.get("memory").cloned().unwrap_or_default();
            let mut type_labels = BTreeMap::from([
                (labels::INSTANCE_TYPE.to_string(), t.name.clone()),
                (labels::ARCH.to_string(), t.architecture.clone()),
                (format!("{GROUP}/instance-size"), cpu.clone()),
                (
                    format!("{GROUP}/instance-family"),
                    family(&t.name).to_string(),
                ),
                (format!("{GROUP}/instance-cpu"), cpu),
                (format!("{GROUP}/instance-memory"), memory),
            ]);
            if let [os] = t.operating_systems.as_slice() {
                type_labels.insert(labels::OS.to_string(), os.clone());
            }
            let offerings = t
                .offerings
                .iter()
                .filter_map(|o| {
                    let value = |key: &str| {
                        o.requirements
                            .iter()
                            .find(|r| r.key == key)
                            .and_then(|r| r.values.first().cloned())
                    };
                    Some(Offering {
                        zone: value(labels::ZONE)?,
                        capacity_type: value(labels::CAPACITY_TYPE)?,
                        price_per_hour: o.price,
                        available: true,
                        reservation: None,
                    })
                })
                .collect();
            InstanceTypeOption {
                name: t.name.clone(),
                labels: Arc::new(type_labels),
                capacity,
                allocatable,
                offerings,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_set_follows_karpenters_rule() {
        let specs = default_specs();
        assert_eq!(specs.len(), 144);
        let types = options(&specs);
        let c1 = types
            .iter()
            .find(|t| t.name == "c-1x-amd64-linux")
            .expect("c-1x");
        let on_demand = c1
            .offerings
            .iter()
            .find(|o| o.capacity_type == "on-demand" && o.zone == "test-zone-a")
            .expect("offering");
        // the value Karpenter's embedded instance_types.json holds
        assert!((on_demand.price_per_hour - 0.027_147_483_648).abs() < 1e-12);
        assert_eq!(c1.offerings.len(), 8);
        assert_eq!(c1.allocatable.cpu_millis, 900);
        assert_eq!(c1.labels["karpenter.kwok.sh/instance-family"], "c");
        assert_eq!(c1.labels["karpenter.kwok.sh/instance-memory"], "2Gi");
        let m128 = types
            .iter()
            .find(|t| t.name == "m-128x-arm64-windows")
            .expect("m-128x");
        assert_eq!(m128.labels["karpenter.kwok.sh/instance-memory"], "1Ti");
        assert_eq!(m128.capacity.pods, 1024);
    }

    #[test]
    fn a_kwok_class_record_is_told_from_an_ec2nodeclass() {
        let class: KwokNodeClass = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "default"},
            "status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "Broken", "message": "m"},
                {"type": "Odd", "status": 3},
            ]},
        }))
        .expect("reads");
        let record = node_class_record(&class).expect("a record");
        assert!(is_kwok(&record));
        assert_eq!(record.metadata.name.as_deref(), Some("default"));
        let conditions = &record.status.expect("a status").conditions;
        assert_eq!(
            conditions.len(),
            1,
            "the condition that does not read is left out"
        );
        assert_eq!(
            (conditions[0].status.as_str(), conditions[0].reason.as_str()),
            ("False", "Broken")
        );
    }

    #[test]
    fn a_file_in_karpenters_format_reads() {
        let text = r#"[{"name": "c-1x-amd64-linux", "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "20Gi"},
            "offerings": [{"Price": 0.019, "Available": true, "Requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]}]}]"#;
        let specs: Vec<TypeSpec> = serde_json::from_str(text).expect("parses");
        let types = options(&specs);
        assert_eq!(types[0].capacity.pods, 110, "pods default to 110");
        assert_eq!(types[0].offerings[0].capacity_type, "spot");
    }
}
