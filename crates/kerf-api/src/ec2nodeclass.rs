//! EC2NodeClass (karpenter.k8s.aws/v1): how instances are launched on AWS — image, network,
//! IAM, storage, metadata service and kubelet settings.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Quantity;
use crate::common::{Condition, NodeSelectorRequirementWithMinValues};
pub use crate::kubelet::{EVICTION_SIGNALS, KubeletConfiguration};

/// Desired state of an EC2NodeClass.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    doc = "EC2NodeClass is the AWS-specific launch configuration NodePools refer to.",
    plural = "ec2nodeclasses",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    category = "karpenter",
    derive = "PartialEq",
    status = "EC2NodeClassStatus",
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Role", "type": "string", "jsonPath": ".spec.role", "priority": 1}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))", "message": "must specify exactly one of ['role', 'instanceProfile']"},
    {"rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'al2') ? (self.amiFamily == 'Custom' || self.amiFamily == 'AL2') : true)", "message": "if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias"},
    {"rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'al2023') ? (self.amiFamily == 'Custom' || self.amiFamily == 'AL2023') : true)", "message": "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias"},
    {"rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'bottlerocket') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Bottlerocket') : true)", "message": "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias"},
    {"rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2019') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2019') : true)", "message": "if set, amiFamily must be 'Windows2019' or 'Custom' when using a Windows2019 alias"},
    {"rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2022') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2022') : true)", "message": "if set, amiFamily must be 'Windows2022' or 'Custom' when using a Windows2022 alias"},
    {"rule": "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == 'windows2025') ? (self.amiFamily == 'Custom' || self.amiFamily == 'Windows2025') : true)", "message": "if set, amiFamily must be 'Windows2025' or 'Custom' when using a Windows2025 alias"},
    {"rule": "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)", "message": "must specify amiFamily if amiSelectorTerms does not contain an alias"}
]))]
pub struct EC2NodeClassSpec {
    /// Selects the subnets instances launch into.
    #[schemars(length(max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.size() != 0", "message": "subnetSelectorTerms cannot be empty"},
        {"rule": "self.all(x, has(x.tags) || has(x.id))", "message": "expected at least one, got none, ['tags', 'id']"},
        {"rule": "!self.all(x, has(x.id) && has(x.tags))", "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term"}
    ]))]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// Selects the security groups instances get.
    #[schemars(length(max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.size() != 0", "message": "securityGroupSelectorTerms cannot be empty"},
        {"rule": "self.all(x, has(x.tags) || has(x.id) || has(x.name))", "message": "expected at least one, got none, ['tags', 'id', 'name']"},
        {"rule": "!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))", "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"},
        {"rule": "!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))", "message": "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"}
    ]))]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// Selects capacity reservations instances may launch into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(x, has(x.tags) || has(x.id) || has(x.instanceMatchCriteria))", "message": "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']"},
        {"rule": "!self.all(x, has(x.id) && (has(x.tags) || has(x.ownerID) || has(x.instanceMatchCriteria)))", "message": "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term"}
    ]))]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    /// Whether instances get a public IPv4 address.
    #[serde(
        default,
        rename = "associatePublicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// Selects the AMIs instances boot from.
    #[schemars(length(min = 1, max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))", "message": "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']"},
        {"rule": "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))", "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"},
        {"rule": "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))", "message": "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"},
        {"rule": "!(self.exists(x, has(x.alias)) && self.size() != 1)", "message": "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"}
    ]))]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// Bootstrap format of the AMIs; implied by an alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<AmiFamily>,
    /// User data merged with (or, for Custom, used instead of) Karpenter's bootstrap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// IAM role for the instance profile Karpenter manages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self != ''", "message": "role cannot be empty"}
    ]))]
    pub role: Option<String>,
    /// An existing instance profile, instead of `role`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self != ''", "message": "instanceProfile cannot be empty"}
    ]))]
    pub instance_profile: Option<String>,
    /// Tags put on instances, volumes and launch templates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(k, k != '')", "message": "empty tag keys aren't supported"},
        {"rule": "self.all(k, k !='eks:eks-cluster-name')", "message": "tag contains a restricted tag matching eks:eks-cluster-name"},
        {"rule": "self.all(k, !k.startsWith('kubernetes.io/cluster') )", "message": "tag contains a restricted tag matching kubernetes.io/cluster/"},
        {"rule": "self.all(k, k != 'karpenter.sh/nodepool')", "message": "tag contains a restricted tag matching karpenter.sh/nodepool"},
        {"rule": "self.all(k, k !='karpenter.sh/nodeclaim')", "message": "tag contains a restricted tag matching karpenter.sh/nodeclaim"},
        {"rule": "self.all(k, k !='karpenter.k8s.aws/ec2nodeclass')", "message": "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass"}
    ]))]
    pub tags: BTreeMap<String, String>,
    /// Kubelet settings, any field of the upstream KubeletConfiguration; a dozen of them
    /// also change the capacity Karpenter computes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// EBS volumes attached at launch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1", "message": "must have only one blockDeviceMappings with rootVolume"}
    ]))]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// How local instance store volumes are used (`RAID0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// Whether detailed CloudWatch monitoring is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Instance metadata service settings.
    #[serde(default = "default_metadata_options")]
    #[schemars(default = "default_metadata_options")]
    pub metadata_options: MetadataOptions,
    /// Outpost or Wavelength context passed to CreateFleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The placement group instances launch into (by name or id); nodes carry its id as
    /// `karpenter.k8s.aws/placement-group-id` and drift when it resolves to another group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// IP prefixes (/28 for IPv4, /80 for IPv6) assigned to each network interface at launch.
    /// Not part of the drift hash: a change reaches new instances only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ip_prefix_count: Option<i32>,
    /// The network interfaces each instance gets (card and device index, `interface` or
    /// `efa-only`); types without those cards or EFA devices are not launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 150))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 && x.interfaceType == 'interface')", "message": "networkInterfaces must include a primary interface with interfaceType='interface'"},
        {"rule": "self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == y.deviceIndex).size() == 1 && (x.interfaceType != 'efa-only' || self.filter(y, x.networkCardIndex == y.networkCardIndex && y.interfaceType == 'efa-only').size() == 1))", "message": "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card"}
    ]))]
    pub network_interfaces: Option<Vec<NetworkInterface>>,
    /// Nitro Enclaves on the instances; only types that support them are launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enclave_options: Option<EnclaveOptions>,
    /// Connection tracking idle timeouts of the instances' interfaces; Nitro types only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// CPU options: nested virtualization, for which only types that support it launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
}

/// Which placement group to launch into: exactly one of its name or id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.name) || has(self.id)", "message": "expected at least one, got none, ['name', 'id']"},
    {"rule": "!(has(self.name) && has(self.id))", "message": "'name' and 'id' are mutually exclusive"}
]))]
pub struct PlacementGroupSelector {
    /// The group's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
    /// The group's id (`pg-…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^pg-[0-9a-z]+$"))]
    pub id: Option<String>,
}

impl std::fmt::Display for PlacementGroupSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id.as_deref().or(self.name.as_deref()).unwrap_or(""))
    }
}

/// One network interface of an instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkInterface {
    /// The network card it is attached to.
    #[schemars(range(min = 0))]
    pub network_card_index: i32,
    /// Its device index on that card (0 on card 0 is the primary interface).
    #[schemars(range(min = 0))]
    pub device_index: i32,
    /// `interface` (IP traffic, with EFA where the type has it) or `efa-only`.
    pub interface_type: InterfaceType,
}

/// What kind of network interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum InterfaceType {
    /// An ENA interface carrying IP traffic.
    #[serde(rename = "interface")]
    Interface,
    /// An EFA device without IP traffic.
    #[serde(rename = "efa-only")]
    EfaOnly,
}

impl InterfaceType {
    /// The name EC2 and the manifest use.
    pub fn as_str(self) -> &'static str {
        match self {
            InterfaceType::Interface => "interface",
            InterfaceType::EfaOnly => "efa-only",
        }
    }
}

/// Nitro Enclaves settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnclaveOptions {
    /// Whether the instances run Nitro Enclaves.
    pub enabled: bool,
}

/// Connection tracking idle timeouts, in seconds; EC2's defaults where unset.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)", "message": "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set"}
]))]
pub struct ConnectionTracking {
    /// Idle timeout of established TCP connections (60–432000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 432000))]
    pub tcp_established_timeout: Option<i32>,
    /// Idle timeout of UDP flows seen in both directions (60–180).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 180))]
    pub udp_stream_timeout: Option<i32>,
    /// Idle timeout of one-way or single request-response UDP flows (30–60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 60))]
    pub udp_timeout: Option<i32>,
}

/// CPU options of the instances.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CpuOptions {
    /// `enabled` or `disabled`: nested virtualization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<Toggle>,
}

/// An `enabled`/`disabled` switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Toggle {
    /// On.
    Enabled,
    /// Off.
    Disabled,
}

impl Toggle {
    /// The name EC2 and the manifest use.
    pub fn as_str(self) -> &'static str {
        match self {
            Toggle::Enabled => "enabled",
            Toggle::Disabled => "disabled",
        }
    }
}

/// A subnet selector: by tags or by id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubnetSelectorTerm {
    /// Tags the subnet carries; `*` matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = crate::validation::tag_selector_rules()))]
    #[schemars(extend("maxProperties" = 20, "additionalProperties" = {"type": "string"}))]
    pub tags: Option<BTreeMap<String, String>>,
    /// Subnet id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "subnet-[0-9a-z]+"))]
    pub id: Option<String>,
}

/// A security group selector: by tags, id or name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecurityGroupSelectorTerm {
    /// Tags the group carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = crate::validation::tag_selector_rules()))]
    #[schemars(extend("maxProperties" = 20, "additionalProperties" = {"type": "string"}))]
    pub tags: Option<BTreeMap<String, String>>,
    /// Security group id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "sg-[0-9a-z]+"))]
    pub id: Option<String>,
    /// Security group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A capacity reservation selector: by tags (and owner) or by id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityReservationSelectorTerm {
    /// Tags the reservation carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = crate::validation::tag_selector_rules()))]
    #[schemars(extend("maxProperties" = 20, "additionalProperties" = {"type": "string"}))]
    pub tags: Option<BTreeMap<String, String>>,
    /// Reservation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^cr-[0-9a-z]+$"))]
    pub id: Option<String>,
    /// Account that owns the reservation.
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^[0-9]{12}$"))]
    pub owner_id: Option<String>,
    /// `open` or `targeted`: how instances are matched to the reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["open", "targeted"]))]
    pub instance_match_criteria: Option<String>,
}

/// An AMI selector: an alias (`al2023@v20240807`), or id, or name/owner/tags, or an SSM parameter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AmiSelectorTerm {
    /// `family@version`, the EKS-optimized AMI of that family and release (`latest` follows new releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.matches('^[a-zA-Z0-9]+@.+$')", "message": "'alias' is improperly formatted, must match the format 'family@version'"},
        {"rule": "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022','windows2025']", "message": "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'"},
        {"rule": "self.split('@')[0] in ['windows2019','windows2022','windows2025'] ? self.split('@')[1] == 'latest' : true", "message": "windows families may only specify version 'latest'"}
    ]))]
    pub alias: Option<String>,
    /// Tags the AMI carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = crate::validation::tag_selector_rules()))]
    #[schemars(extend("maxProperties" = 20, "additionalProperties" = {"type": "string"}))]
    pub tags: Option<BTreeMap<String, String>>,
    /// AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "ami-[0-9a-z]+"))]
    pub id: Option<String>,
    /// AMI name; `*` is a wildcard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// AMI owner: an account id, `self` or `amazon`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// SSM parameter holding an AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

/// AMI families Karpenter knows how to bootstrap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AmiFamily {
    /// Amazon Linux 2.
    AL2,
    /// Amazon Linux 2023.
    AL2023,
    /// Bottlerocket.
    Bottlerocket,
    /// User-provided bootstrap.
    Custom,
    /// Windows Server 2019.
    Windows2019,
    /// Windows Server 2022.
    Windows2022,
    /// Windows Server 2025.
    Windows2025,
}

impl EC2NodeClassSpec {
    /// The AMI family the class boots: `amiFamily`, else its alias's, else AL2023.
    pub fn family(&self) -> AmiFamily {
        self.ami_family
            .or_else(|| {
                self.ami_selector_terms
                    .iter()
                    .filter_map(|t| t.alias.as_deref())
                    .find_map(|a| AmiFamily::from_alias(a.split('@').next().unwrap_or(a)))
            })
            .unwrap_or(AmiFamily::AL2023)
    }
}

impl AmiFamily {
    /// The family an alias prefix (`al2023`) names.
    pub fn from_alias(prefix: &str) -> Option<AmiFamily> {
        Some(match prefix {
            "al2" => AmiFamily::AL2,
            "al2023" => AmiFamily::AL2023,
            "bottlerocket" => AmiFamily::Bottlerocket,
            "windows2019" => AmiFamily::Windows2019,
            "windows2022" => AmiFamily::Windows2022,
            "windows2025" => AmiFamily::Windows2025,
            _ => return None,
        })
    }
}

/// An EBS volume attached at launch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlockDeviceMapping {
    /// Device name (`/dev/xvda`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The EBS volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// Whether this is the root volume (its size counts as the node's ephemeral storage).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub root_volume: bool,
}

/// EBS volume settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.snapshotID) || has(self.volumeSize)", "message": "snapshotID or volumeSize must be defined"},
    {"rule": "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')", "message": "snapshotID must be set when volumeInitializationRate is set"}
]))]
pub struct BlockDevice {
    /// Whether the volume is deleted with the instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Whether the volume is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Provisioned IOPS (io1, io2, gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// KMS key for encryption.
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// Snapshot to create the volume from.
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    /// Throughput in MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// Size (`100Gi`), at most 64T.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = "^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$"
    ))]
    pub volume_size: Option<String>,
    /// Volume type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<VolumeType>,
    /// Initialization rate in MiB/s when restoring from a snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 300))]
    pub volume_initialization_rate: Option<i32>,
}

impl BlockDevice {
    /// The volume size as a quantity, when it is set and well formed.
    pub fn size(&self) -> Option<Quantity> {
        self.volume_size
            .as_deref()
            .and_then(|s| Quantity::parse(s).ok())
    }
}

/// EBS volume types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    /// Magnetic.
    Standard,
    /// Provisioned IOPS SSD.
    Io1,
    /// Provisioned IOPS SSD, newer.
    Io2,
    /// General purpose SSD.
    Gp2,
    /// Cold HDD.
    Sc1,
    /// Throughput-optimized HDD.
    St1,
    /// General purpose SSD, newer.
    Gp3,
}

/// Use of instance store volumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum InstanceStorePolicy {
    /// Stripe all instance store volumes into one and use it for ephemeral storage.
    RAID0,
}

/// Instance metadata service settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetadataOptions {
    /// Whether IMDS is reachable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "enabled"))]
    pub http_endpoint: Option<EnabledDisabled>,
    /// Whether IMDS is reachable over IPv6.
    #[serde(
        default,
        rename = "httpProtocolIPv6",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = "disabled"))]
    pub http_protocol_ipv6: Option<EnabledDisabled>,
    /// Hop limit of IMDS responses (1–64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64), extend("default" = 1))]
    pub http_put_response_hop_limit: Option<i64>,
    /// Whether IMDSv2 tokens are required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "required"))]
    pub http_tokens: Option<HttpTokens>,
}

/// Karpenter's metadata defaults: IMDS on, IPv6 off, hop limit 1, tokens required.
fn default_metadata_options() -> MetadataOptions {
    MetadataOptions {
        http_endpoint: Some(EnabledDisabled::Enabled),
        http_protocol_ipv6: Some(EnabledDisabled::Disabled),
        http_put_response_hop_limit: Some(1),
        http_tokens: Some(HttpTokens::Required),
    }
}

/// `enabled` or `disabled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EnabledDisabled {
    /// On.
    Enabled,
    /// Off.
    Disabled,
}

/// IMDSv2 token mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HttpTokens {
    /// Tokens required (IMDSv2 only).
    Required,
    /// Tokens optional (IMDSv1 allowed).
    Optional,
}

/// Observed state of an EC2NodeClass.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    /// Resolved subnets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<SubnetStatus>,
    /// Resolved security groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<SecurityGroupStatus>,
    /// Resolved AMIs with the requirements under which each is used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<AmiStatus>,
    /// Instance profile in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Capacity reservations the selector terms resolved to (active ones, sorted by id).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<CapacityReservationStatus>,
    /// Conditions (`Ready`, `SubnetsReady`, `SecurityGroupsReady`, `AMIsReady`, `InstanceProfileReady`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::crd_schema::ec2nodeclass_conditions")]
    pub conditions: Vec<Condition>,
}

/// A capacity reservation the class may launch into, as Karpenter v1.15 writes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationStatus {
    /// Reservation id (`cr-…`).
    #[schemars(regex(pattern = "^cr-[0-9a-z]+$"))]
    pub id: String,
    /// The one instance type it holds.
    pub instance_type: String,
    /// Its zone.
    pub availability_zone: String,
    /// Account that owns it.
    #[serde(rename = "ownerID")]
    #[schemars(regex(pattern = "^[0-9]{12}$"))]
    pub owner_id: String,
    /// `open` or `targeted`.
    #[schemars(extend("enum" = ["open", "targeted"]))]
    pub instance_match_criteria: String,
    /// `default` (an On-Demand Capacity Reservation) or `capacity-block`.
    #[serde(default = "default_reservation_type")]
    #[schemars(extend("enum" = ["default", "capacity-block"]))]
    pub reservation_type: String,
    /// `active`, or `expiring` for a capacity block within 40 minutes of its end.
    #[serde(default = "default_reservation_state")]
    #[schemars(extend("enum" = ["active", "expiring"]))]
    pub state: String,
    /// When it ends (RFC 3339), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::crd_schema::date_time")]
    pub end_time: Option<String>,
    /// Whether EC2 may reclaim its instances (interruptible reservations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
}

fn default_reservation_type() -> String {
    "default".into()
}

fn default_reservation_state() -> String {
    "active".into()
}

/// A resolved subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetStatus {
    /// Subnet id.
    pub id: String,
    /// Availability zone name.
    pub zone: String,
    /// Availability zone id.
    #[serde(default, rename = "zoneID", skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

/// A resolved security group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupStatus {
    /// Group id.
    pub id: String,
    /// Group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A resolved AMI.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["id", "requirements"]))]
pub struct AmiStatus {
    /// AMI id.
    pub id: String,
    /// AMI name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Instance types this AMI serves (architecture, GPU or not); always written, as
    /// Karpenter's CRD requires it.
    #[serde(default)]
    #[schemars(
        schema_with = "crate::crd_schema::node_selector_requirements",
        transform = crate::crd_schema::without_default
    )]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Set when the AMI is deprecated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<bool>,
}
