//! `spec.kubelet` of an EC2NodeClass as Karpenter v1.15 has it: an open map of the upstream
//! kubelet configuration. The API server stores any object there; Karpenter reads the dozen
//! fields that shape a node's capacity and bootstrap, passes the rest through to AL2023's
//! nodeadm, and reports a configuration the kubelet would refuse on the class's
//! `ValidationSucceeded` condition instead of refusing the apply. Kerf does the same, with
//! the same messages (proven against Karpenter's Go code by the operator's tests).

mod upstream;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::duration::parse_go_duration_nanos;
use crate::ec2nodeclass::AmiFamily;
use crate::quantity::Quantity;

/// The kubelet's eviction signals: the only keys an eviction map may have.
pub const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

/// The resources the kubelet reserves: the only keys of `kubeReserved` and `systemReserved`.
const RESERVABLE: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

/// Fields Karpenter writes itself at bootstrap, with why a user's value cannot stand.
const KARPENTER_OWNED: &[(&str, &str)] = &[(
    "registerWithTaints",
    "Karpenter sets it from the NodeClaim's taints so the node registers unschedulable until it's ready",
)];

/// The fields Karpenter reads and applies on every AMI family (its `ParsedKubeletConfig`);
/// families other than AL2023 and Custom drop any other field, so a class naming one is
/// not valid there.
const MANAGED: &[&str] = &[
    "clusterDNS",
    "cpuCFSQuota",
    "evictionHard",
    "evictionMaxPodGracePeriod",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "kubeReserved",
    "maxPods",
    "podsPerCore",
    "systemReserved",
];

/// `spec.kubelet`: the map as written (round-tripped unchanged, hashed as written), and the
/// fields Kerf acts on read from it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KubeletConfiguration {
    raw: BTreeMap<String, Value>,
    settings: KubeletSettings,
}

/// The kubelet fields that change a node's capacity or its bootstrap, read leniently: a
/// value of the wrong type is left unset here (validation reports it), and `maxPods` holding
/// an expression reads as unset, as Karpenter reads it with its `NodeClassCEL` gate off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubeletSettings {
    /// DNS server IPs for pods.
    pub cluster_dns: Vec<String>,
    /// Most pods the node runs; overrides the ENI-derived limit.
    pub max_pods: Option<i32>,
    /// Most pods per vCPU.
    pub pods_per_core: Option<i32>,
    /// Resources reserved for the OS.
    pub system_reserved: BTreeMap<String, String>,
    /// Resources reserved for Kubernetes daemons.
    pub kube_reserved: BTreeMap<String, String>,
    /// Hard eviction thresholds (`memory.available: 100Mi`).
    pub eviction_hard: BTreeMap<String, String>,
    /// Soft eviction thresholds.
    pub eviction_soft: BTreeMap<String, String>,
    /// Grace periods of the soft thresholds.
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// Longest grace period (seconds) given to pods evicted on a soft threshold.
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Disk usage at which image garbage collection always runs.
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage image garbage collection frees down to.
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Whether CPU limits are enforced with CFS quota.
    pub cpu_cfs_quota: Option<bool>,
}

/// Why a class's kubelet configuration cannot launch: the `ValidationSucceeded` reason and
/// message Karpenter writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletRefusal {
    /// `InvalidKubeletConfiguration`, `KubeletExpressionsDisabled` or
    /// `UnsupportedKubeletConfiguration`.
    pub reason: &'static str,
    /// What is wrong, every problem joined by `; `.
    pub message: String,
}

impl KubeletConfiguration {
    /// A configuration from its fields as a manifest writes them.
    pub fn from_map(raw: BTreeMap<String, Value>) -> KubeletConfiguration {
        let settings = KubeletSettings::read(&raw);
        KubeletConfiguration { raw, settings }
    }

    /// The fields as written.
    pub fn raw(&self) -> &BTreeMap<String, Value> {
        &self.raw
    }

    /// The fields Kerf acts on.
    pub fn settings(&self) -> &KubeletSettings {
        &self.settings
    }

    /// Whether no field is set (Karpenter treats an empty map as none).
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The fields AL2 and Bottlerocket would drop (any but the dozen Karpenter applies),
    /// sorted, as Karpenter's `UnmanagedKubeletFields`.
    pub fn unmanaged_fields(&self) -> Vec<&str> {
        (self.raw.keys())
            .map(String::as_str)
            .filter(|k| !MANAGED.contains(k))
            .collect()
    }

    /// Every problem Karpenter's `ValidateKubeletConfig` finds, in its words and order: first
    /// what Go's strict decoder says of the map against the upstream KubeletConfiguration
    /// (unknown fields, or the first wrong type alone), then the rules no Go type holds.
    pub fn problems(&self) -> Vec<String> {
        if self.raw.is_empty() {
            return Vec::new();
        }
        let mut out = upstream::decode_problems(&self.raw);
        out.extend(self.semantic_problems());
        out
    }

    /// What keeps a class of `family` with this configuration from launching, in the order
    /// Karpenter's validation checks: a malformed configuration, an expression (Kerf, as
    /// Karpenter with its `NodeClassCEL` gate off, evaluates none), then fields the family
    /// would drop.
    pub fn refusal(&self, family: AmiFamily) -> Option<KubeletRefusal> {
        let problems = self.problems();
        if !problems.is_empty() {
            return Some(KubeletRefusal {
                reason: "InvalidKubeletConfiguration",
                message: problems.join("; "),
            });
        }
        if self.has_expressions() {
            return Some(KubeletRefusal {
                reason: "KubeletExpressionsDisabled",
                message:
                    "spec.kubelet contains a CEL expression, but the NodeClassCEL feature gate is disabled"
                        .into(),
            });
        }
        let message = self.unsupported_by(family);
        (!message.is_empty()).then(|| KubeletRefusal {
            reason: "UnsupportedKubeletConfiguration",
            message: message.join("; "),
        })
    }

    /// A `maxPods` given as text, or a reservation that is not a quantity: Karpenter's CEL
    /// expressions, evaluated per instance type behind its `NodeClassCEL` gate.
    pub fn has_expressions(&self) -> bool {
        if self.raw.get("maxPods").is_some_and(Value::is_string) {
            return true;
        }
        ["kubeReserved", "systemReserved"].iter().any(|field| {
            string_map(&self.raw, field)
                .is_some_and(|m| m.values().any(|v| Quantity::parse(v).is_err()))
        })
    }

    /// What `family`'s bootstrap would not apply: fields beyond the dozen Karpenter maps (all
    /// but AL2023 and Custom), `podsPerCore` where the family has no setting for it
    /// (Bottlerocket), and more than one DNS address where only one is passed on.
    fn unsupported_by(&self, family: AmiFamily) -> Vec<String> {
        if self.raw.is_empty() || matches!(family, AmiFamily::Custom | AmiFamily::AL2023) {
            return Vec::new();
        }
        let name = format!("{family:?}");
        let mut dropped: Vec<&str> = self.unmanaged_fields();
        if family == AmiFamily::Bottlerocket && self.settings.pods_per_core.is_some() {
            dropped.push("podsPerCore");
            dropped.sort_unstable();
        }
        let mut out = Vec::new();
        if !dropped.is_empty() {
            out.push(format!(
                "spec.kubelet has fields not applied by the {name} AMI family that would be silently dropped: {}",
                dropped.join(", ")
            ));
        }
        let dns = self.settings.cluster_dns.len();
        if dns > 1 {
            out.push(format!(
                "spec.kubelet.clusterDNS: the {name} AMI family doesn't accept multiple entries, only one, but {dns} were set"
            ));
        }
        out
    }

    /// The rules the upstream Go types cannot state: fields Karpenter owns, eviction and
    /// reservation keys and values, ranges, and pairs that must agree.
    fn semantic_problems(&self) -> Vec<String> {
        let raw = &self.raw;
        let mut out = Vec::new();
        for (field, why) in KARPENTER_OWNED {
            if raw.contains_key(*field) {
                out.push(format!("spec.kubelet.{field}: can't be set, {why}"));
            }
        }
        for field in [
            "evictionHard",
            "evictionSoft",
            "evictionSoftGracePeriod",
            "evictionMinimumReclaim",
        ] {
            let Some(signals) = string_map(raw, field) else {
                continue;
            };
            for (key, value) in &signals {
                if !EVICTION_SIGNALS.contains(&key.as_str()) {
                    out.push(format!(
                        "spec.kubelet.{field}: {} isn't a valid eviction signal, must be one of {}",
                        go_quote(key),
                        EVICTION_SIGNALS.join(", ")
                    ));
                }
                let problem = if field == "evictionSoftGracePeriod" {
                    grace_period_problem(value)
                } else {
                    threshold_problem(value)
                };
                if let Some(problem) = problem {
                    out.push(format!(
                        "spec.kubelet.{field}[{key}]: {} {problem}",
                        go_quote(value)
                    ));
                }
            }
        }
        let soft = string_map(raw, "evictionSoft").unwrap_or_default();
        let grace = string_map(raw, "evictionSoftGracePeriod").unwrap_or_default();
        for signal in soft.keys().filter(|s| !grace.contains_key(*s)) {
            out.push(format!(
                "spec.kubelet.evictionSoft[{signal}]: has no matching evictionSoftGracePeriod"
            ));
        }
        for signal in grace.keys().filter(|s| !soft.contains_key(*s)) {
            out.push(format!(
                "spec.kubelet.evictionSoftGracePeriod[{signal}]: has no matching evictionSoft"
            ));
        }
        for field in ["kubeReserved", "systemReserved"] {
            let Some(reserved) = string_map(raw, field) else {
                continue;
            };
            for (key, value) in &reserved {
                if !RESERVABLE.contains(&key.as_str()) {
                    out.push(format!(
                        "spec.kubelet.{field}: {} isn't a reservable resource, must be one of {}",
                        go_quote(key),
                        RESERVABLE.join(", ")
                    ));
                }
                if value.starts_with('-') {
                    out.push(format!(
                        "spec.kubelet.{field}[{key}]: {} can't be a negative resource quantity",
                        go_quote(value)
                    ));
                }
            }
        }
        for field in ["imageGCHighThresholdPercent", "imageGCLowThresholdPercent"] {
            if let Some(v) = go_int(raw, field).filter(|v| !(0..=100).contains(v)) {
                out.push(format!(
                    "spec.kubelet.{field}: {v} must be between 0 and 100"
                ));
            }
        }
        for field in ["podsPerCore", "evictionMaxPodGracePeriod"] {
            if let Some(v) = go_int(raw, field).filter(|v| *v < 0) {
                out.push(format!("spec.kubelet.{field}: {v} can't be negative"));
            }
        }
        if raw.get("maxPods").is_some_and(|v| !v.is_string())
            && let Some(v) = go_int(raw, "maxPods").filter(|v| *v < 0)
        {
            out.push(format!("spec.kubelet.maxPods: {v} can't be negative"));
        }
        if let (Some(high), Some(low)) = (
            go_int(raw, "imageGCHighThresholdPercent"),
            go_int(raw, "imageGCLowThresholdPercent"),
        ) && high <= low
        {
            out.push(format!(
                "spec.kubelet: imageGCHighThresholdPercent ({high}) must be greater than imageGCLowThresholdPercent ({low})"
            ));
        }
        out
    }
}

impl KubeletSettings {
    fn read(raw: &BTreeMap<String, Value>) -> KubeletSettings {
        let int = |field: &str| {
            raw.get(field)
                .and_then(Value::as_i64)
                .and_then(|v| i32::try_from(v).ok())
        };
        let map = |field: &str| string_map(raw, field).unwrap_or_default();
        KubeletSettings {
            cluster_dns: (raw.get("clusterDNS").and_then(Value::as_array))
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
            max_pods: int("maxPods"),
            pods_per_core: int("podsPerCore"),
            system_reserved: map("systemReserved"),
            kube_reserved: map("kubeReserved"),
            eviction_hard: map("evictionHard"),
            eviction_soft: map("evictionSoft"),
            eviction_soft_grace_period: map("evictionSoftGracePeriod"),
            eviction_max_pod_grace_period: int("evictionMaxPodGracePeriod"),
            image_gc_high_threshold_percent: int("imageGCHighThresholdPercent"),
            image_gc_low_threshold_percent: int("imageGCLowThresholdPercent"),
            cpu_cfs_quota: raw.get("cpuCFSQuota").and_then(Value::as_bool),
        }
    }
}

// Karpenter holds each field as raw JSON, and a null field as no JSON at all: reading it
// fails, so a null field reads as absent below.

/// A field read as Go's `json.Unmarshal` reads it into `map[string]string`: `None` when it
/// is absent, null, or any value is not a string (a null value reads as empty).
fn string_map(raw: &BTreeMap<String, Value>, field: &str) -> Option<BTreeMap<String, String>> {
    match raw.get(field)? {
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Some((k.clone(), s.clone())),
                Value::Null => Some((k.clone(), String::new())),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// A field read as Go's `json.Unmarshal` reads it into an `int64`.
fn go_int(raw: &BTreeMap<String, Value>, field: &str) -> Option<i64> {
    raw.get(field)?.as_i64()
}

/// What is wrong with an eviction threshold, if anything: a percentage from 0 to 100 or a
/// non-negative quantity.
fn threshold_problem(value: &str) -> Option<&'static str> {
    if let Some(percent) = value.strip_suffix('%') {
        return match percent.parse::<f64>() {
            Ok(p) if (0.0..=100.0).contains(&p) => None,
            _ => Some("must be a percentage or a resource quantity"),
        };
    }
    match Quantity::parse(value) {
        Err(_) => Some("must be a percentage or a resource quantity"),
        Ok(q) if q.milli() < 0 => Some("can't be a negative resource quantity"),
        Ok(_) => None,
    }
}

/// What is wrong with a soft threshold's grace period, if anything: a non-negative Go duration.
fn grace_period_problem(value: &str) -> Option<&'static str> {
    match parse_go_duration_nanos(value) {
        Err(_) => Some("must be a duration"),
        Ok(n) if n < 0 => Some("can't be a negative duration"),
        Ok(_) => None,
    }
}

/// A string as Go's `%q` prints it.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Serialize for KubeletConfiguration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for KubeletConfiguration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::<String, Value>::deserialize(deserializer).map(KubeletConfiguration::from_map)
    }
}

impl JsonSchema for KubeletConfiguration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "KubeletConfiguration".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "additionalProperties": {"x-kubernetes-preserve-unknown-fields": true},
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(v: Value) -> KubeletConfiguration {
        serde_json::from_value(v).expect("an object")
    }

    #[test]
    fn the_fields_kerf_acts_on_are_read_and_the_rest_kept_as_written() {
        let k = config(json!({
            "maxPods": 110, "podsPerCore": 4, "kubeReserved": {"cpu": "200m"},
            "clusterDNS": ["10.0.0.10"], "containerLogMaxSize": "50Mi",
            "logging": {"format": "json"}
        }));
        assert_eq!(k.settings().max_pods, Some(110));
        assert_eq!(k.settings().pods_per_core, Some(4));
        assert_eq!(k.settings().kube_reserved["cpu"], "200m");
        assert_eq!(k.settings().cluster_dns, ["10.0.0.10"]);
        assert_eq!(k.unmanaged_fields(), ["containerLogMaxSize", "logging"]);
        assert_eq!(
            serde_json::to_value(&k).unwrap()["logging"],
            json!({"format": "json"})
        );
        assert!(k.problems().is_empty(), "{:?}", k.problems());
        assert_eq!(k.refusal(AmiFamily::AL2023), None);
    }

    #[test]
    fn an_expression_or_a_field_the_family_drops_keeps_the_class_from_launching() {
        let expr = config(json!({"maxPods": "vcpus * 10"}));
        assert_eq!(expr.settings().max_pods, None);
        assert!(expr.problems().is_empty());
        assert_eq!(
            expr.refusal(AmiFamily::AL2023).map(|r| r.reason),
            Some("KubeletExpressionsDisabled")
        );
        let extra =
            config(json!({"registryPullQPS": 10, "podsPerCore": 2, "clusterDNS": ["a", "b"]}));
        assert_eq!(extra.refusal(AmiFamily::AL2023), None);
        assert_eq!(extra.refusal(AmiFamily::Custom), None);
        let r = extra.refusal(AmiFamily::Bottlerocket).expect("refused");
        assert_eq!(r.reason, "UnsupportedKubeletConfiguration");
        assert_eq!(
            r.message,
            "spec.kubelet has fields not applied by the Bottlerocket AMI family that would be silently dropped: podsPerCore, registryPullQPS; spec.kubelet.clusterDNS: the Bottlerocket AMI family doesn't accept multiple entries, only one, but 2 were set"
        );
        let al2 = extra.refusal(AmiFamily::AL2).expect("refused").message;
        assert!(
            al2.contains("by the AL2 AMI family that would be silently dropped: registryPullQPS;"),
            "{al2}"
        );
    }

    #[test]
    fn a_malformed_configuration_names_each_problem() {
        let k = config(json!({
            "podsPerCore": -1, "kubeReserved": {"gpu": "1", "cpu": "-1"},
            "evictionHard": {"notASignal": "5%"}
        }));
        assert_eq!(
            k.problems(),
            [
                "spec.kubelet.evictionHard: \"notASignal\" isn't a valid eviction signal, must be one of memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, pid.available",
                "spec.kubelet.kubeReserved[cpu]: \"-1\" can't be a negative resource quantity",
                "spec.kubelet.kubeReserved: \"gpu\" isn't a reservable resource, must be one of cpu, memory, ephemeral-storage, pid",
                "spec.kubelet.podsPerCore: -1 can't be negative",
            ]
        );
        assert_eq!(
            k.refusal(AmiFamily::AL2023).map(|r| r.reason),
            Some("InvalidKubeletConfiguration")
        );
    }
}
