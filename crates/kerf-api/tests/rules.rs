//! One valid and one invalid case per validation rule. Each case changes one field of a
//! valid base manifest; Kerf must report the problem at the expected path, and the CRD
//! (schema plus CEL) must reject it too, unless the rule is one only Kerf checks.

mod common;

use common::{crd_problems, rust_problems};
use serde_json::{Value, json};

const NODEPOOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    metadata:
      labels: {team: platform}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
      taints:
        - {key: dedicated, value: batch, effect: NoSchedule}
  disruption:
    consolidateAfter: 30s
    budgets:
      - nodes: "10%"
"#;

/// A static NodePool: a fixed node count.
const STATIC_NODEPOOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: static}
spec:
  replicas: 3
  limits: {nodes: "5"}
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
"#;

/// A NodeOverlay: 10 % off m5 on-demand.
const NODEOVERLAY: &str = r#"
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: savings-plan}
spec:
  weight: 10
  priceAdjustment: "-10%"
  requirements:
    - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}
"#;

const NODECLASS: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-demo
  amiSelectorTerms:
    - alias: al2023@latest
  subnetSelectorTerms:
    - tags: {karpenter.sh/discovery: demo}
  securityGroupSelectorTerms:
    - tags: {karpenter.sh/discovery: demo}
"#;

/// A rule case: set `pointer` in the base to `valid` (accepted) or to `invalid` (rejected
/// at `path` with a message containing `needle`). `Value::Null` as a value removes the field.
struct Case {
    base: &'static str,
    pointer: &'static str,
    valid: Value,
    invalid: Value,
    path: &'static str,
    needle: &'static str,
    /// The CRD cannot express this rule (Kerf-only check).
    kerf_only: bool,
}

fn case(
    base: &'static str,
    pointer: &'static str,
    valid: Value,
    invalid: Value,
    path: &'static str,
    needle: &'static str,
) -> Case {
    Case {
        base,
        pointer,
        valid,
        invalid,
        path,
        needle,
        kerf_only: false,
    }
}

/// A rule Karpenter's CRD leaves to the controller (Karpenter refuses such a NodePool at
/// runtime, on its `ValidationSucceeded` condition); `kerf validate` says so before apply.
fn kerf_only(mut c: Case) -> Case {
    c.kerf_only = true;
    c
}

fn with(base: &str, pointer: &str, value: &Value) -> Value {
    let mut doc: Value = serde_yaml::from_str(base).unwrap();
    let (parent, field) = pointer.rsplit_once('/').unwrap();
    let target = doc
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("{parent}"));
    match target {
        Value::Object(map) if value.is_null() => {
            map.remove(field);
        }
        Value::Object(map) => {
            map.insert(field.to_string(), value.clone());
        }
        Value::Array(items) => items[field.parse::<usize>().unwrap()] = value.clone(),
        _ => panic!("{pointer}"),
    }
    doc
}

fn requirement(key: &str, op: &str, values: &[&str]) -> Value {
    json!({"key": key, "operator": op, "values": values})
}

fn cases() -> Vec<Case> {
    let req = "/spec/template/spec/requirements/0";
    vec![
        case(
            NODEPOOL,
            req,
            requirement("topology.kubernetes.io/zone", "In", &["us-east-1a"]),
            requirement("topology.kubernetes.io/zone", "In", &[]),
            "spec.template.spec.requirements[0].values",
            "must have a value defined",
        ),
        case(
            NODEPOOL,
            req,
            requirement("karpenter.k8s.aws/instance-generation", "Gt", &["2"]),
            requirement("karpenter.k8s.aws/instance-generation", "Gt", &["2", "3"]),
            "spec.template.spec.requirements[0].values",
            "single non-negative integer",
        ),
        case(
            NODEPOOL,
            req,
            requirement("karpenter.k8s.aws/instance-cpu", "Lt", &["65"]),
            requirement("karpenter.k8s.aws/instance-cpu", "Lt", &["-1"]),
            "spec.template.spec.requirements[0].values",
            "single non-negative integer",
        ),
        case(
            NODEPOOL,
            req,
            json!({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"], "minValues": 2}),
            json!({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"], "minValues": 3}),
            "spec.template.spec.requirements[0].minValues",
            "at least that many values",
        ),
        case(
            NODEPOOL,
            req,
            json!({"key": "karpenter.k8s.aws/instance-family", "operator": "Exists", "minValues": 50}),
            json!({"key": "karpenter.k8s.aws/instance-family", "operator": "Exists", "minValues": 51}),
            "spec.template.spec.requirements[0].minValues",
            "50",
        ),
        case(
            NODEPOOL,
            req,
            requirement(
                "node.kubernetes.io/instance-type",
                "NotIn",
                &["m6g.16xlarge"],
            ),
            requirement("karpenter.sh/nodepool", "In", &["x"]),
            "spec.template.spec.requirements[0].key",
            "\"karpenter.sh/nodepool\" is restricted",
        ),
        case(
            NODEPOOL,
            req,
            requirement("workload", "Exists", &[]),
            requirement("kubernetes.io/hostname", "Exists", &[]),
            "spec.template.spec.requirements[0].key",
            "\"kubernetes.io/hostname\" is restricted",
        ),
        case(
            NODEPOOL,
            req,
            requirement("karpenter.sh/capacity-type", "In", &["spot"]),
            requirement("karpenter.sh/custom", "Exists", &[]),
            "spec.template.spec.requirements[0].key",
            "domain \"karpenter.sh\" is restricted",
        ),
        kerf_only(case(
            NODEPOOL,
            req,
            requirement("karpenter.k8s.aws/instance-hypervisor", "In", &["nitro"]),
            requirement("karpenter.k8s.aws/custom", "Exists", &[]),
            "spec.template.spec.requirements[0].key",
            "domain \"karpenter.k8s.aws\" is restricted",
        )),
        kerf_only(case(
            NODEPOOL,
            req,
            requirement("team", "In", &["a-b_c.d"]),
            requirement("team", "In", &["not valid!"]),
            "spec.template.spec.requirements[0].values[0]",
            "not a valid label value",
        )),
        case(
            NODEPOOL,
            req,
            requirement("team", "In", &["x"]),
            requirement("bad key/with/slashes", "In", &["x"]),
            "spec.template.spec.requirements[0].key",
            "must match the pattern",
        ),
        case(
            NODEPOOL,
            req,
            requirement("team", "Gte", &["3"]),
            requirement("team", "Between", &["3"]),
            "spec.template.spec.requirements[0].operator",
            "unsupported value",
        ),
        case(
            NODEPOOL,
            "/spec/template/metadata/labels",
            json!({"billing-team": "my-team"}),
            json!({"karpenter.sh/nodepool": "x"}),
            "spec.template.metadata.labels[karpenter.sh/nodepool]",
            "is restricted",
        ),
        case(
            NODEPOOL,
            "/spec/template/metadata/labels",
            json!({"node.kubernetes.io/lifecycle": "spot"}),
            json!({"team": "has space"}),
            "spec.template.metadata.labels[team]",
            "must match the pattern",
        ),
        case(
            NODEPOOL,
            "/spec/weight",
            json!(100),
            json!(0),
            "spec.weight",
            "1",
        ),
        case(
            NODEPOOL,
            "/spec/weight",
            json!(1),
            json!(101),
            "spec.weight",
            "100",
        ),
        case(
            NODEOVERLAY,
            "/spec/priceAdjustment",
            json!("+0.5"),
            json!("10%"),
            "spec.priceAdjustment",
            "signed amount or percent",
        ),
        case(
            NODEOVERLAY,
            "/spec/price",
            Value::Null,
            json!("0.05"),
            "spec",
            "cannot set both 'price' and 'priceAdjustment'",
        ),
        case(
            NODEOVERLAY,
            "/spec/capacity",
            json!({"hugepages-2Mi": "1Gi"}),
            json!({"cpu": "2"}),
            "spec.capacity[cpu]",
            "invalid resource restricted",
        ),
        case(
            NODEOVERLAY,
            "/spec/requirements/0",
            requirement("karpenter.sh/capacity-type", "In", &["on-demand"]),
            requirement("karpenter.sh/do-not-sync-taints", "In", &["true"]),
            "spec.requirements[0].key",
            "label domain \"karpenter.sh\" is restricted",
        ),
        case(
            NODEOVERLAY,
            "/spec/weight",
            json!(10000),
            json!(10001),
            "spec.weight",
            "10000",
        ),
        case(
            STATIC_NODEPOOL,
            "/spec/weight",
            Value::Null,
            json!(10),
            "spec.weight",
            "'weight' is not supported on static NodePools",
        ),
        case(
            STATIC_NODEPOOL,
            "/spec/limits",
            json!({"nodes": "10"}),
            json!({"nodes": "10", "cpu": "100"}),
            "spec.limits",
            "only 'limits.nodes' is supported on static NodePools",
        ),
        case(
            STATIC_NODEPOOL,
            "/spec/replicas",
            json!(0),
            json!(-1),
            "spec.replicas",
            "0",
        ),
        case(
            NODEPOOL,
            "/spec/disruption/budgets/0",
            json!({"nodes": "5"}),
            json!({"nodes": "five"}),
            "spec.disruption.budgets[0].nodes",
            "must",
        ),
        case(
            NODEPOOL,
            "/spec/disruption/budgets/0",
            json!({"nodes": "100%"}),
            json!({"nodes": "101%"}),
            "spec.disruption.budgets[0].nodes",
            "must",
        ),
        case(
            NODEPOOL,
            "/spec/disruption/budgets/0",
            json!({"nodes": "0", "schedule": "@daily", "duration": "10m"}),
            json!({"nodes": "0", "schedule": "@daily"}),
            "spec.disruption.budgets[0]",
            "'schedule' must be set with 'duration'",
        ),
        case(
            NODEPOOL,
            "/spec/disruption/budgets/0",
            json!({"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}),
            json!({"nodes": "0", "duration": "8h"}),
            "spec.disruption.budgets[0]",
            "'schedule' must be set with 'duration'",
        ),
        case(
            NODEPOOL,
            "/spec/disruption/budgets/0",
            json!({"nodes": "0", "schedule": "*/30 * * * *", "duration": "1h30m"}),
            json!({"nodes": "0", "schedule": "every day", "duration": "1h"}),
            "spec.disruption.budgets[0].schedule",
            "must",
        ),
        case(
            NODEPOOL,
            "/spec/disruption/budgets/0",
            json!({"nodes": "0", "schedule": "@hourly", "duration": "30m"}),
            json!({"nodes": "0", "schedule": "@hourly", "duration": "30s"}),
            "spec.disruption.budgets[0].duration",
            "must",
        ),
        Case {
            kerf_only: true,
            ..case(
                NODEPOOL,
                "/spec/disruption/budgets/0",
                json!({"nodes": "0", "schedule": "0 19-23,0-8 * * *", "duration": "1h"}),
                json!({"nodes": "0", "schedule": "0 19-8 * * *", "duration": "1h"}),
                "spec.disruption.budgets[0].schedule",
                "split it into 19-23,0-8",
            )
        },
        Case {
            kerf_only: true,
            ..case(
                NODEPOOL,
                "/spec/disruption/budgets/0",
                json!({"nodes": "0", "schedule": "0 9 * * *", "duration": "1h"}),
                json!({"nodes": "0", "schedule": "0 25 * * *", "duration": "1h"}),
                "spec.disruption.budgets[0].schedule",
                "out of range",
            )
        },
        case(
            NODEPOOL,
            "/spec/disruption/budgets/0",
            json!({"nodes": "1", "reasons": ["Underutilized", "Empty", "Drifted"]}),
            json!({"nodes": "1", "reasons": ["Expired"]}),
            "spec.disruption.budgets[0].reasons[0]",
            "unsupported value",
        ),
        case(
            NODEPOOL,
            "/spec/disruption/consolidationPolicy",
            json!("WhenEmpty"),
            json!("WhenUnderutilized"),
            "spec.disruption.consolidationPolicy",
            "WhenEmptyOrUnderutilized",
        ),
        case(
            NODEPOOL,
            "/spec/disruption/consolidateAfter",
            json!("Never"),
            json!("soon"),
            "spec.disruption.consolidateAfter",
            "must match",
        ),
        case(
            NODEPOOL,
            "/spec/disruption/expireAfter",
            Value::Null,
            json!("720h"),
            "spec.disruption.expireAfter",
            "spec.template.spec.expireAfter",
        ),
        case(
            NODEPOOL,
            "/spec/template/spec/expireAfter",
            json!("Never"),
            json!("30d"),
            "spec.template.spec.expireAfter",
            "must match",
        ),
        case(
            NODEPOOL,
            "/spec/template/spec/terminationGracePeriod",
            json!("48h"),
            json!("Never"),
            "spec.template.spec.terminationGracePeriod",
            "must match",
        ),
        case(
            NODEPOOL,
            "/spec/template/spec/taints/0",
            json!({"key": "gpu", "effect": "NoExecute"}),
            json!({"key": "gpu", "effect": "Sometimes"}),
            "spec.template.spec.taints[0].effect",
            "unsupported value",
        ),
        kerf_only(case(
            NODEPOOL,
            "/spec/template/spec/taints",
            json!([{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}]),
            json!([{"key": "a", "effect": "NoSchedule"}, {"key": "a", "value": "x", "effect": "NoSchedule"}]),
            "spec.template.spec.taints[1]",
            "duplicate taint",
        )),
        kerf_only(case(
            NODEPOOL,
            "/spec/template/spec/startupTaints",
            json!([{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]),
            json!([{"key": "dedicated", "effect": "NoSchedule"}]),
            "spec.template.spec.startupTaints[0]",
            "duplicate taint",
        )),
        case(
            NODEPOOL,
            "/spec/template/spec/nodeClassRef",
            json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"}),
            json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass"}),
            "spec.template.spec.nodeClassRef.name",
            "is required",
        ),
        case(
            NODEPOOL,
            "/spec/template/spec/nodeClassRef",
            json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}),
            json!({"group": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "name": "default"}),
            "spec.template.spec.nodeClassRef.group",
            "^[^/]*$",
        ),
        case(
            NODEPOOL,
            "/spec/template/spec/kubelet",
            Value::Null,
            json!({"maxPods": 110}),
            "spec.template.spec.kubelet",
            "EC2NodeClass",
        ),
        case(
            NODEPOOL,
            "/spec/limits",
            json!({"cpu": 1000, "memory": "1000Gi", "nvidia.com/gpu": "8"}),
            json!({"cpu": "lots"}),
            "spec.limits[cpu]",
            "must match",
        ),
        // EC2NodeClass
        case(
            NODECLASS,
            "/spec/instanceProfile",
            Value::Null,
            json!("KarpenterNodeInstanceProfile"),
            "spec",
            "exactly one of ['role', 'instanceProfile']",
        ),
        case(
            NODECLASS,
            "/spec/amiSelectorTerms/0",
            json!({"alias": "bottlerocket@v1.20.0"}),
            json!({"alias": "al2023"}),
            "spec.amiSelectorTerms[0].alias",
            "family@version",
        ),
        case(
            NODECLASS,
            "/spec/amiSelectorTerms/0",
            json!({"alias": "windows2025@latest"}),
            json!({"alias": "ubuntu@latest"}),
            "spec.amiSelectorTerms[0].alias",
            "family is not supported",
        ),
        case(
            NODECLASS,
            "/spec/amiSelectorTerms/0",
            json!({"alias": "al2@v20240807"}),
            json!({"alias": "windows2019@v1"}),
            "spec.amiSelectorTerms[0].alias",
            "only specify version 'latest'",
        ),
        case(
            NODECLASS,
            "/spec/amiSelectorTerms",
            json!([{"alias": "al2023@v20250821"}]),
            json!([{"alias": "al2023@latest"}, {"id": "ami-0123456789abcdef0"}]),
            "spec.amiSelectorTerms",
            "'alias' is mutually exclusive",
        ),
        case(
            NODECLASS,
            "/spec/amiSelectorTerms/0",
            json!({"alias": "al2023@latest"}),
            json!({"alias": "al2023@latest", "owner": "amazon"}),
            "spec.amiSelectorTerms[0]",
            "'alias' is mutually exclusive",
        ),
        case(
            NODECLASS,
            "/spec/amiSelectorTerms/0",
            json!({"alias": "al2023@latest"}),
            json!({"id": "ami-0123456789abcdef0"}),
            "spec.amiFamily",
            "amiFamily is required",
        ),
        case(
            NODECLASS,
            "/spec/amiFamily",
            json!("AL2023"),
            json!("Bottlerocket"),
            "spec.amiFamily",
            "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
        ),
        case(
            NODECLASS,
            "/spec/role",
            json!("KarpenterNodeRole-demo"),
            json!(""),
            "spec.role",
            "role cannot be empty",
        ),
        case(
            NODECLASS,
            "/spec/amiSelectorTerms/0",
            json!({"alias": "al2023@v20250821"}),
            json!({}),
            "spec.amiSelectorTerms[0]",
            "expected at least one",
        ),
        case(
            NODECLASS,
            "/spec/tags",
            json!({"Name": "karpenter", "team": "platform"}),
            json!({"kubernetes.io/cluster/demo": "owned"}),
            "spec.tags[kubernetes.io/cluster/demo]",
            "restricted tag",
        ),
        case(
            NODECLASS,
            "/spec/tags",
            json!({"karpenter.sh/discovery": "demo"}),
            json!({"karpenter.sh/nodepool": "x"}),
            "spec.tags[karpenter.sh/nodepool]",
            "restricted tag",
        ),
        case(
            NODECLASS,
            "/spec/subnetSelectorTerms/0",
            json!({"id": "subnet-0abc"}),
            json!({}),
            "spec.subnetSelectorTerms[0]",
            "expected at least one",
        ),
        case(
            NODECLASS,
            "/spec/subnetSelectorTerms/0",
            json!({"tags": {"Name": "*private*"}}),
            json!({"id": "subnet-0abc", "tags": {"Name": "x"}}),
            "spec.subnetSelectorTerms[0]",
            "'id' is mutually exclusive",
        ),
        case(
            NODECLASS,
            "/spec/subnetSelectorTerms/0",
            json!({"id": "subnet-0abc"}),
            json!({"id": "sn-0abc"}),
            "spec.subnetSelectorTerms[0].id",
            "must match",
        ),
        case(
            NODECLASS,
            "/spec/subnetSelectorTerms/0",
            json!({"tags": {"a": "b"}}),
            json!({"tags": {"a": ""}}),
            "spec.subnetSelectorTerms[0].tags",
            "empty tag",
        ),
        case(
            NODECLASS,
            "/spec/securityGroupSelectorTerms/0",
            json!({"name": "eks-cluster-sg"}),
            json!({"name": "eks-cluster-sg", "id": "sg-123"}),
            "spec.securityGroupSelectorTerms[0]",
            "mutually exclusive",
        ),
        case(
            NODECLASS,
            "/spec/capacityReservationSelectorTerms",
            json!([{"tags": {"team": "ml"}, "ownerID": "012345678901"}]),
            json!([{"id": "cr-0123", "ownerID": "012345678901"}]),
            "spec.capacityReservationSelectorTerms[0]",
            "'id' is mutually exclusive",
        ),
        case(
            NODECLASS,
            "/spec/blockDeviceMappings",
            json!([{"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "100Gi", "volumeType": "gp3"}}]),
            json!([{"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}}, {"deviceName": "/dev/xvdb", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}}]),
            "spec.blockDeviceMappings",
            "only one blockDeviceMappings with rootVolume",
        ),
        case(
            NODECLASS,
            "/spec/blockDeviceMappings",
            json!([{"deviceName": "/dev/xvdb", "ebs": {"snapshotID": "snap-123"}}]),
            json!([{"deviceName": "/dev/xvdb", "ebs": {"encrypted": true}}]),
            "spec.blockDeviceMappings[0].ebs",
            "snapshotID or volumeSize",
        ),
        case(
            NODECLASS,
            "/spec/blockDeviceMappings",
            json!([{"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "64T"}}]),
            json!([{"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "100GB"}}]),
            "spec.blockDeviceMappings[0].ebs.volumeSize",
            "must",
        ),
        case(
            NODECLASS,
            "/spec/blockDeviceMappings",
            json!([{"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "1Ti", "volumeType": "io2", "iops": 3000}}]),
            json!([{"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "1Ti", "volumeType": "gp4"}}]),
            "spec.blockDeviceMappings[0].ebs.volumeType",
            "unsupported value",
        ),
        kerf_only(case(
            NODECLASS,
            "/spec/kubelet",
            json!({"imageGCHighThresholdPercent": 85, "imageGCLowThresholdPercent": 80}),
            json!({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}),
            "spec.kubelet",
            "imageGCHighThresholdPercent (50) must be greater than imageGCLowThresholdPercent (60)",
        )),
        kerf_only(case(
            NODECLASS,
            "/spec/kubelet",
            json!({"evictionSoft": {"memory.available": "500Mi"}, "evictionSoftGracePeriod": {"memory.available": "1m"}}),
            json!({"evictionSoft": {"memory.available": "500Mi"}}),
            "spec.kubelet.evictionSoft[memory.available]",
            "has no matching evictionSoftGracePeriod",
        )),
        case(
            NODECLASS,
            "/spec/placementGroupSelector",
            json!({"name": "training"}),
            json!({"name": "training", "id": "pg-0123abcd"}),
            "spec.placementGroupSelector",
            "mutually exclusive",
        ),
        case(
            NODECLASS,
            "/spec/placementGroupSelector",
            json!({"id": "pg-0123abcd"}),
            json!({}),
            "spec.placementGroupSelector",
            "expected at least one",
        ),
        case(
            NODECLASS,
            "/spec/placementGroupSelector",
            json!({"id": "pg-0123abcd"}),
            json!({"id": "placement-1"}),
            "spec.placementGroupSelector.id",
            "pg-",
        ),
        case(
            NODECLASS,
            "/spec/ipPrefixCount",
            json!(2),
            json!(-1),
            "spec.ipPrefixCount",
            "",
        ),
        case(
            NODECLASS,
            "/spec/networkInterfaces",
            json!([{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                   {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"}]),
            json!([{"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "interface"}]),
            "spec.networkInterfaces",
            "primary interface",
        ),
        case(
            NODECLASS,
            "/spec/networkInterfaces",
            json!([{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                   {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"}]),
            json!([{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                   {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"},
                   {"networkCardIndex": 0, "deviceIndex": 2, "interfaceType": "efa-only"}]),
            "spec.networkInterfaces",
            "at most one efa device per network card",
        ),
        case(
            NODECLASS,
            "/spec/connectionTracking",
            json!({"udpTimeout": 45}),
            json!({}),
            "spec.connectionTracking",
            "at least one of tcpEstablishedTimeout",
        ),
        case(
            NODECLASS,
            "/spec/connectionTracking",
            json!({"tcpEstablishedTimeout": 432000}),
            json!({"tcpEstablishedTimeout": 30}),
            "spec.connectionTracking.tcpEstablishedTimeout",
            "",
        ),
        case(
            NODECLASS,
            "/spec/cpuOptions",
            json!({"nestedVirtualization": "enabled"}),
            json!({"nestedVirtualization": "on"}),
            "spec.cpuOptions.nestedVirtualization",
            "",
        ),
        case(
            NODECLASS,
            "/spec/blockDeviceMappings",
            json!([{"deviceName": "/dev/xvda", "ebs": {"snapshotID": "snap-0123", "volumeInitializationRate": 200}}]),
            json!([{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi", "volumeInitializationRate": 200}}]),
            "spec.blockDeviceMappings[0].ebs",
            "snapshotID must be set when volumeInitializationRate is set",
        ),
        kerf_only(case(
            NODECLASS,
            "/spec/kubelet",
            json!({"evictionHard": {"nodefs.available": "10%"}}),
            json!({"evictionHard": {"disk.available": "10%"}}),
            "spec.kubelet.evictionHard",
            "\"disk.available\" isn't a valid eviction signal",
        )),
        kerf_only(case(
            NODECLASS,
            "/spec/kubelet",
            json!({"systemReserved": {"cpu": "100m", "memory": "100Mi"}, "maxPods": 110, "podsPerCore": 10}),
            json!({"kubeReserved": {"gpu": "1"}}),
            "spec.kubelet.kubeReserved",
            "\"gpu\" isn't a reservable resource",
        )),
        kerf_only(case(
            NODECLASS,
            "/spec/kubelet",
            json!({"clusterDNS": ["10.100.0.10"], "cpuCFSQuota": true, "containerLogMaxSize": "50Mi"}),
            json!({"maxPods": -1}),
            "spec.kubelet.maxPods",
            "-1 can't be negative",
        )),
        kerf_only(case(
            NODECLASS,
            "/spec/kubelet",
            json!({"logging": {"format": "json"}}),
            json!({"logging": {"fromat": "json"}}),
            "spec.kubelet",
            "unknown field \"logging.fromat\"",
        )),
        case(
            NODECLASS,
            "/spec/metadataOptions",
            json!({"httpPutResponseHopLimit": 64, "httpTokens": "optional"}),
            json!({"httpPutResponseHopLimit": 0}),
            "spec.metadataOptions.httpPutResponseHopLimit",
            "greater than or equal to 1",
        ),
        case(
            NODECLASS,
            "/spec/metadataOptions",
            json!({"httpEndpoint": "disabled", "httpProtocolIPv6": "enabled"}),
            json!({"httpTokens": "maybe"}),
            "spec.metadataOptions.httpTokens",
            "unsupported value",
        ),
        case(
            NODECLASS,
            "/spec/instanceStorePolicy",
            json!("RAID0"),
            json!("RAID1"),
            "spec.instanceStorePolicy",
            "unsupported value",
        ),
        case(
            NODECLASS,
            "/spec/userdata",
            Value::Null,
            json!("#!/bin/bash"),
            "spec.userdata",
            "unknown field",
        ),
    ]
}

#[test]
fn every_rule_accepts_its_valid_case_and_rejects_its_invalid_case_in_kerf_and_the_crd() {
    let mut failures = Vec::new();
    for c in cases() {
        let valid = with(c.base, c.pointer, &c.valid);
        let problems = rust_problems(&valid);
        if !problems.is_empty() {
            failures.push(format!(
                "valid case of {} = {}: {problems:?}",
                c.pointer, c.valid
            ));
        }
        let crd = crd_problems(&valid);
        if !crd.is_empty() {
            failures.push(format!(
                "CRD, valid case of {} = {}: {crd:?}",
                c.pointer, c.valid
            ));
        }

        let invalid = with(c.base, c.pointer, &c.invalid);
        let problems = rust_problems(&invalid);
        if !problems
            .iter()
            .any(|p| p.path == c.path && p.message.contains(c.needle))
        {
            failures.push(format!(
                "{} = {}: expected {}: …{}…, got {problems:?}",
                c.pointer, c.invalid, c.path, c.needle
            ));
        }
        let crd = crd_problems(&invalid);
        if crd.is_empty() != c.kerf_only {
            failures.push(format!(
                "CRD on {} = {} (Kerf-only: {}): {crd:?}",
                c.pointer, c.invalid, c.kerf_only
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
