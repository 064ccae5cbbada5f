//! The user data a node boots with, as Karpenter writes it for each AMI family, so that nodes
//! join the same way whichever controller launched them:
//! - AL2023: a MIME multi-part archive (boundary `//`) whose last part is nodeadm's
//!   `NodeConfig` (cluster name, endpoint, CA, service CIDR; the class's kubelet block as
//!   inline kubelet config with `registerWithTaints`; the labels as `--node-labels`), after
//!   the parts of the class's own `userData` (a MIME archive, a NodeConfig, or a script);
//! - Bottlerocket: the class's TOML with `settings.kubernetes` overwritten;
//! - AL2: a MIME archive whose last part runs `/etc/eks/bootstrap.sh`;
//! - Custom: the class's `userData` as it is.
//!
//! Everything returned is base64, as launch templates take it.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kerf_api::Taint;
use kerf_api::ec2nodeclass::{AmiFamily, KubeletConfiguration};

/// The MIME boundary Karpenter's archives use.
const BOUNDARY: &str = "//";
/// nodeadm's NodeConfig content type.
const NODE_CONFIG: &str = "application/node.eks.aws";
/// A shell script's content type.
const SHELL: &str = "text/x-shellscript; charset=\"us-ascii\"";

/// What every node of the cluster is told about its control plane.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The EKS cluster's name (`settings.clusterName`).
    pub name: String,
    /// The API server's URL (`settings.clusterEndpoint`).
    pub endpoint: String,
    /// The cluster's CA certificate, base64 as EKS reports it.
    pub ca_bundle: Option<String>,
    /// The service CIDR (`kubernetesNetworkConfig.serviceIpv4Cidr`); nodeadm needs it.
    pub cidr: Option<String>,
}

/// One node's bootstrap inputs.
#[derive(Clone, Copy, Debug)]
pub struct Bootstrap<'a> {
    /// The control plane.
    pub cluster: &'a ClusterInfo,
    /// How the AMI boots.
    pub family: AmiFamily,
    /// The labels the kubelet registers the node with.
    pub labels: &'a BTreeMap<String, String>,
    /// The taints (and startup taints) it registers with.
    pub taints: &'a [Taint],
    /// The class's `spec.kubelet`.
    pub kubelet: Option<&'a KubeletConfiguration>,
    /// The class's `spec.userData`.
    pub custom: Option<&'a str>,
    /// What the kubelet of this instance type runs and reserves (unset for a class's own
    /// kubelet settings alone).
    pub sizing: Option<&'a Sizing>,
    /// `instanceStorePolicy: RAID0`: the instance-store disks become one array for the
    /// kubelet's and the runtime's data.
    pub raid0: bool,
    /// The image's release as the class's alias names it (`latest`, `v1.46.0`): Bottlerocket
    /// binds its default paths itself from 1.46 on.
    pub image_version: Option<&'a str>,
}

/// The kubelet settings Karpenter works out per instance type: its pod limit and its
/// kube-reserved, so that the kubelet's allocatable is what the scheduler planned with.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sizing {
    /// `maxPods`.
    pub max_pods: i64,
    /// `kubeReserved`: cpu, memory and ephemeral-storage, as quantities.
    pub kube_reserved: BTreeMap<String, String>,
}

impl Sizing {
    /// The settings of an instance type with `vcpu` cores running `pods` pods, under the
    /// class's kubelet configuration.
    pub fn new(vcpu: u32, pods: i64, kubelet: Option<&KubeletConfiguration>) -> Sizing {
        let (cpu, memory, ephemeral) = kerf_aws::capacity::kube_reserved(vcpu, pods, kubelet);
        let cpu = if cpu % 1000 == 0 {
            (cpu / 1000).to_string()
        } else {
            format!("{cpu}m")
        };
        Sizing {
            max_pods: pods,
            kube_reserved: BTreeMap::from([
                ("cpu".to_string(), cpu),
                ("ephemeral-storage".to_string(), bytes(ephemeral)),
                ("memory".to_string(), bytes(memory)),
            ]),
        }
    }
}

/// Bytes as a quantity in the largest binary unit that divides them.
fn bytes(n: i64) -> String {
    for (unit, size) in [("Gi", 1i64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if n != 0 && n % size == 0 {
            return format!("{}{unit}", n / size);
        }
    }
    n.to_string()
}

/// Why user data could not be written.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UserDataError {
    /// nodeadm cannot join a node without the service CIDR.
    #[error("resolving cluster CIDR: the cluster's service CIDR is unknown (set --cluster-cidr)")]
    MissingCidr,
    /// The class's `userData` could not be read as its family expects.
    #[error("spec.userData: {0}")]
    Custom(String),
    /// Windows nodes are bootstrapped by a PowerShell script Kerf does not write.
    #[error(
        "amiFamily {0:?}: Kerf does not bootstrap this family; use amiFamily Custom with your own userData"
    )]
    Unsupported(AmiFamily),
}

/// The base64 user data for a node.
pub fn user_data(b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    let text = match b.family {
        AmiFamily::AL2023 => nodeadm(b)?,
        AmiFamily::Bottlerocket => bottlerocket(b)?,
        AmiFamily::AL2 => bootstrap_sh(b)?,
        AmiFamily::Custom => b.custom.unwrap_or_default().to_string(),
        other => return Err(UserDataError::Unsupported(other)),
    };
    Ok(STANDARD.encode(text))
}

/// `key=value,…` sorted by key, as the kubelet's `--node-labels` takes it.
fn label_list(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `key=value:Effect`, as `--register-with-taints` takes it.
fn taint_string(t: &Taint) -> String {
    match &t.value {
        Some(v) => format!("{}={v}:{:?}", t.key, t.effect),
        None => format!("{}:{:?}", t.key, t.effect),
    }
}

/// One part of a MIME archive.
struct Part {
    content_type: String,
    body: String,
}

/// The parts of the class's own user data: a MIME archive's parts, or one part whose type
/// says whether it is a NodeConfig (YAML mapping) or a script.
fn custom_parts(custom: Option<&str>) -> Result<Vec<Part>, UserDataError> {
    let Some(text) = custom.filter(|t| !t.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let head = text.trim_start();
    if head.starts_with("MIME-Version:") || head.starts_with("Content-Type:") {
        let mail = mailparse::parse_mail(head.as_bytes())
            .map_err(|e| UserDataError::Custom(format!("not a MIME archive: {e}")))?;
        if !mail.ctype.mimetype.starts_with("multipart/") {
            return Err(UserDataError::Custom(format!(
                "a MIME archive must be multipart, not {}",
                mail.ctype.mimetype
            )));
        }
        return mail
            .subparts
            .iter()
            .map(|p| {
                let body = p
                    .get_body()
                    .map_err(|e| UserDataError::Custom(format!("a MIME part: {e}")))?;
                let content_type = p
                    .headers
                    .iter()
                    .find(|h| h.get_key_ref().eq_ignore_ascii_case("content-type"))
                    .map(|h| h.get_value())
                    .unwrap_or_else(|| SHELL.to_string());
                Ok(Part { content_type, body })
            })
            .collect();
    }
    let is_mapping = matches!(
        serde_yaml::from_str::<serde_yaml::Value>(text),
        Ok(serde_yaml::Value::Mapping(_))
    );
    let content_type = if is_mapping { NODE_CONFIG } else { SHELL };
    Ok(vec![Part {
        content_type: content_type.to_string(),
        body: text.to_string(),
    }])
}

/// A MIME multi-part archive of `parts`, line ends `\n` as Karpenter writes them.
fn archive(parts: &[Part]) -> String {
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!(
            "--{BOUNDARY}\nContent-Type: {}\n\n{}",
            part.content_type, part.body
        ));
    }
    out.push_str(&format!("\n--{BOUNDARY}--\n"));
    out
}

/// AL2023: the class's parts, then Kerf's NodeConfig.
fn nodeadm(b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    let cidr = b
        .cluster
        .cidr
        .as_deref()
        .ok_or(UserDataError::MissingCidr)?;
    let mut kubelet_config = match b.kubelet {
        Some(k) => match serde_json::to_value(k) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        },
        None => serde_json::Map::new(),
    };
    let taints: Vec<serde_json::Value> = b
        .taints
        .iter()
        .map(|t| {
            let mut m = serde_json::Map::new();
            m.insert("key".into(), t.key.clone().into());
            if let Some(v) = &t.value {
                m.insert("value".into(), v.clone().into());
            }
            m.insert("effect".into(), format!("{:?}", t.effect).into());
            serde_json::Value::Object(m)
        })
        .collect();
    kubelet_config.insert("registerWithTaints".into(), taints.into());
    if let Some(sizing) = b.sizing {
        kubelet_config.insert("maxPods".into(), sizing.max_pods.into());
        let reserved: serde_json::Map<String, serde_json::Value> = (sizing.kube_reserved.iter())
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        kubelet_config.insert("kubeReserved".into(), reserved.into());
    }
    let mut cluster = serde_json::Map::new();
    cluster.insert("name".into(), b.cluster.name.clone().into());
    cluster.insert(
        "apiServerEndpoint".into(),
        b.cluster.endpoint.clone().into(),
    );
    if let Some(ca) = b.cluster.ca_bundle.as_deref().filter(|c| !c.is_empty()) {
        cluster.insert("certificateAuthority".into(), ca.into());
    }
    cluster.insert("cidr".into(), cidr.into());
    let mut kubelet = serde_json::Map::new();
    kubelet.insert("config".into(), kubelet_config.into());
    if !b.labels.is_empty() {
        let flag = format!("--node-labels={:?}", label_list(b.labels));
        kubelet.insert("flags".into(), vec![flag].into());
    }
    let mut spec = serde_json::json!({ "cluster": cluster, "kubelet": kubelet });
    if b.raid0 {
        spec["instance"] = serde_json::json!({ "localStorage": { "strategy": "RAID0" } });
    }
    let config = serde_json::json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": spec,
    });
    let yaml = serde_yaml::to_string(&config)
        .map_err(|e| UserDataError::Custom(format!("writing NodeConfig: {e}")))?;
    let mut parts = custom_parts(b.custom)?;
    parts.push(Part {
        content_type: NODE_CONFIG.to_string(),
        body: format!("# Karpenter Generated NodeConfig\n{yaml}"),
    });
    Ok(archive(&parts))
}

/// AL2: the class's parts, then a script running the EKS bootstrap with the kubelet's flags.
fn bootstrap_sh(b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    let mut args = Vec::new();
    if !b.labels.is_empty() {
        args.push(format!("--node-labels={:?}", label_list(b.labels)));
    }
    let taints: Vec<String> = b.taints.iter().map(taint_string).collect();
    args.push(format!("--register-with-taints={:?}", taints.join(",")));
    // the instance type's pod limit and kube-reserved stand for the class's own
    let sized = b.kubelet.map(|k| {
        let mut k = k.settings().clone();
        if b.sizing.is_some() {
            k.max_pods = None;
            k.kube_reserved.clear();
        }
        k
    });
    if let Some(sizing) = b.sizing {
        args.push(format!("--max-pods={}", sizing.max_pods));
        let joined: Vec<String> = (sizing.kube_reserved.iter())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        args.push(format!("--kube-reserved={:?}", joined.join(",")));
    }
    if let Some(k) = sized.as_ref() {
        if let Some(n) = k.max_pods {
            args.push(format!("--max-pods={n}"));
        }
        if let Some(n) = k.pods_per_core {
            args.push(format!("--pods-per-core={n}"));
        }
        for (flag, map, sep) in [
            ("--system-reserved", &k.system_reserved, "="),
            ("--kube-reserved", &k.kube_reserved, "="),
            ("--eviction-hard", &k.eviction_hard, "<"),
            ("--eviction-soft", &k.eviction_soft, "<"),
            (
                "--eviction-soft-grace-period",
                &k.eviction_soft_grace_period,
                "=",
            ),
        ] {
            if !map.is_empty() {
                let joined: Vec<String> = map.iter().map(|(k, v)| format!("{k}{sep}{v}")).collect();
                args.push(format!("{flag}={:?}", joined.join(",")));
            }
        }
        if let Some(n) = k.eviction_max_pod_grace_period {
            args.push(format!("--eviction-max-pod-grace-period={n}"));
        }
        if let Some(n) = k.image_gc_high_threshold_percent {
            args.push(format!("--image-gc-high-threshold={n}"));
        }
        if let Some(n) = k.image_gc_low_threshold_percent {
            args.push(format!("--image-gc-low-threshold={n}"));
        }
        if let Some(q) = k.cpu_cfs_quota {
            args.push(format!("--cpu-cfs-quota={q}"));
        }
    }
    let mut script = format!(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n/etc/eks/bootstrap.sh '{}' --apiserver-endpoint '{}'",
        b.cluster.name, b.cluster.endpoint
    );
    if let Some(ca) = b.cluster.ca_bundle.as_deref().filter(|c| !c.is_empty()) {
        script.push_str(&format!(" --b64-cluster-ca '{ca}'"));
    }
    if let Some(dns) = b.kubelet.and_then(|k| k.settings().cluster_dns.first()) {
        script.push_str(&format!(" \\\n--dns-cluster-ip '{dns}'"));
    }
    script.push_str(&format!(
        " \\\n--use-max-pods false \\\n--kubelet-extra-args '{}'",
        args.join(" ")
    ));
    if b.raid0 {
        script.push_str(" \\\n--local-disks raid0");
    }
    script.push('\n');
    let mut parts = custom_parts(b.custom)?;
    parts.push(Part {
        content_type: SHELL.to_string(),
        body: script,
    });
    Ok(archive(&parts))
}

/// Bottlerocket: the class's TOML, `settings.kubernetes` written over it.
fn bottlerocket(b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    let mut root: toml::Table = match b.custom.filter(|t| !t.trim().is_empty()) {
        Some(text) => text
            .parse()
            .map_err(|e| UserDataError::Custom(format!("not TOML: {e}")))?,
        None => toml::Table::new(),
    };
    let settings = table(&mut root, "settings")?;
    let k8s = table(settings, "kubernetes")?;
    k8s.insert("cluster-name".into(), b.cluster.name.clone().into());
    k8s.insert("api-server".into(), b.cluster.endpoint.clone().into());
    if let Some(ca) = b.cluster.ca_bundle.as_deref().filter(|c| !c.is_empty()) {
        k8s.insert("cluster-certificate".into(), ca.into());
    }
    let node_labels = table(k8s, "node-labels")?;
    for (k, v) in b.labels {
        node_labels.insert(k.clone(), v.clone().into());
    }
    if let Some(k) = b.kubelet.map(KubeletConfiguration::settings) {
        let int = |n: i32| toml::Value::Integer(i64::from(n));
        let map = |m: &BTreeMap<String, String>| {
            toml::Value::Table(
                m.iter()
                    .map(|(k, v)| (k.clone(), v.clone().into()))
                    .collect(),
            )
        };
        if let Some(n) = k.max_pods {
            k8s.insert("max-pods".into(), int(n));
        }
        if let Some(dns) = k.cluster_dns.first() {
            k8s.insert("cluster-dns-ip".into(), dns.clone().into());
        }
        for (key, m) in [
            ("system-reserved", &k.system_reserved),
            ("kube-reserved", &k.kube_reserved),
            ("eviction-hard", &k.eviction_hard),
            ("eviction-soft", &k.eviction_soft),
            ("eviction-soft-grace-period", &k.eviction_soft_grace_period),
        ] {
            if !m.is_empty() {
                k8s.insert(key.into(), map(m));
            }
        }
        if let Some(n) = k.eviction_max_pod_grace_period {
            k8s.insert("eviction-max-pod-grace-period".into(), int(n));
        }
        if let Some(n) = k.image_gc_high_threshold_percent {
            k8s.insert(
                "image-gc-high-threshold-percent".into(),
                n.to_string().into(),
            );
        }
        if let Some(n) = k.image_gc_low_threshold_percent {
            k8s.insert(
                "image-gc-low-threshold-percent".into(),
                n.to_string().into(),
            );
        }
        if let Some(q) = k.cpu_cfs_quota {
            k8s.insert("cpu-cfs-quota".into(), q.into());
        }
    }
    if let Some(sizing) = b.sizing {
        // the instance type's pod limit and kube-reserved, over the class's
        k8s.insert("max-pods".into(), toml::Value::Integer(sizing.max_pods));
        let reserved: toml::Table = (sizing.kube_reserved.iter())
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        k8s.insert("kube-reserved".into(), toml::Value::Table(reserved));
    }
    let mut node_taints = toml::Table::new();
    for t in b.taints {
        let entry = format!("{}:{:?}", t.value.as_deref().unwrap_or(""), t.effect);
        if let toml::Value::Array(list) = node_taints
            .entry(t.key.clone())
            .or_insert_with(|| toml::Value::Array(Vec::new()))
        {
            list.push(entry.into());
        }
    }
    k8s.insert("node-taints".into(), toml::Value::Table(node_taints));
    if b.raid0 {
        // the disks joined and mounted before the kubelet starts, on every boot
        let bind: &[&str] = if b.image_version.is_some_and(binds_default_paths) {
            &["apiclient", "ephemeral-storage", "bind"]
        } else {
            &[
                "apiclient",
                "ephemeral-storage",
                "bind",
                "--dirs",
                "/var/lib/containerd",
                "/var/lib/kubelet",
                "/var/log/pods",
            ]
        };
        let command = |c: &[&str]| toml::Value::Array(c.iter().map(|a| (*a).into()).collect());
        let mut mount = toml::Table::new();
        mount.insert(
            "commands".into(),
            toml::Value::Array(vec![
                command(&["apiclient", "ephemeral-storage", "init"]),
                command(bind),
            ]),
        );
        mount.insert("mode".into(), "always".into());
        mount.insert("essential".into(), true.into());
        let settings = table(&mut root, "settings")?;
        table(settings, "bootstrap-commands")?.insert(
            "000-mount-instance-storage".into(),
            toml::Value::Table(mount),
        );
    }
    toml::to_string(&root).map_err(|e| UserDataError::Custom(format!("writing TOML: {e}")))
}

/// Whether a Bottlerocket release binds the kubelet's, containerd's and the pods' log
/// directories by default (`latest`, or 1.46 and later).
fn binds_default_paths(version: &str) -> bool {
    if version == "latest" {
        return true;
    }
    let mut parts = version.trim_start_matches('v').split('.');
    let (Some(major), Some(minor), Some(_)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    match (major.parse::<u32>(), minor.parse::<u32>()) {
        (Ok(major), Ok(minor)) => major > 1 || (major == 1 && minor >= 46),
        _ => false,
    }
}

/// The table under `key`, made when missing; an error when `key` holds something else.
fn table<'t>(parent: &'t mut toml::Table, key: &str) -> Result<&'t mut toml::Table, UserDataError> {
    match parent
        .entry(key.to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
    {
        toml::Value::Table(t) => Ok(t),
        _ => Err(UserDataError::Custom(format!("{key}: must be a table"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_api::TaintEffect;

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            name: "my-cluster".into(),
            endpoint: "https://ABC.gr7.ap-northeast-2.eks.amazonaws.com".into(),
            ca_bundle: Some("Q0EK".into()),
            cidr: Some("10.100.0.0/16".into()),
        }
    }

    fn decode(b64: &str) -> String {
        String::from_utf8(STANDARD.decode(b64).unwrap()).unwrap()
    }

    fn taints() -> Vec<Taint> {
        vec![Taint {
            key: "dedicated".into(),
            value: Some("batch".into()),
            effect: TaintEffect::NoSchedule,
            time_added: None,
        }]
    }

    #[test]
    fn al2023_ends_with_a_node_config_after_the_users_script() {
        let cluster = cluster();
        let labels = BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
            ("team".to_string(), "a".to_string()),
        ]);
        let kubelet: KubeletConfiguration = serde_json::from_value(
            serde_json::json!({"maxPods": 110, "containerLogMaxSize": "50Mi"}),
        )
        .unwrap();
        let taints = taints();
        let b = Bootstrap {
            cluster: &cluster,
            family: AmiFamily::AL2023,
            labels: &labels,
            taints: &taints,
            kubelet: Some(&kubelet),
            custom: Some("#!/bin/bash\necho hello\n"),
            sizing: None,
            raid0: false,
            image_version: None,
        };
        let text = decode(&user_data(&b).unwrap());
        let mail = mailparse::parse_mail(text.as_bytes()).unwrap();
        assert_eq!(mail.subparts.len(), 2, "{text}");
        assert_eq!(mail.subparts[0].ctype.mimetype, "text/x-shellscript");
        assert!(mail.subparts[0].get_body().unwrap().contains("echo hello"));
        assert_eq!(mail.subparts[1].ctype.mimetype, NODE_CONFIG);
        let body = mail.subparts[1].get_body().unwrap();
        assert!(body.starts_with("# Karpenter Generated NodeConfig\n"));
        let config: serde_yaml::Value = serde_yaml::from_str(&body).unwrap();
        let spec = &config["spec"];
        assert_eq!(spec["cluster"]["name"], "my-cluster");
        assert_eq!(spec["cluster"]["cidr"], "10.100.0.0/16");
        assert_eq!(spec["cluster"]["certificateAuthority"], "Q0EK");
        assert_eq!(spec["kubelet"]["config"]["maxPods"], 110);
        // a field Kerf does not read reaches the kubelet as written
        assert_eq!(spec["kubelet"]["config"]["containerLogMaxSize"], "50Mi");
        assert_eq!(
            spec["kubelet"]["config"]["registerWithTaints"][0]["effect"],
            "NoSchedule"
        );
        assert_eq!(
            spec["kubelet"]["flags"][0],
            "--node-labels=\"karpenter.sh/nodepool=default,team=a\""
        );
    }

    #[test]
    fn al2023_keeps_every_part_of_a_users_mime_archive_and_needs_the_cidr() {
        let cluster = cluster();
        let custom = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\n\n--BOUNDARY\nContent-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n--BOUNDARY\nContent-Type: text/x-shellscript\n\n#!/bin/bash\necho two\n--BOUNDARY--\n";
        let labels = BTreeMap::new();
        let b = Bootstrap {
            cluster: &cluster,
            family: AmiFamily::AL2023,
            labels: &labels,
            taints: &[],
            kubelet: None,
            custom: Some(custom),
            sizing: None,
            raid0: false,
            image_version: None,
        };
        let text = decode(&user_data(&b).unwrap());
        let mail = mailparse::parse_mail(text.as_bytes()).unwrap();
        let types: Vec<&str> = mail
            .subparts
            .iter()
            .map(|p| p.ctype.mimetype.as_str())
            .collect();
        assert_eq!(types, [NODE_CONFIG, "text/x-shellscript", NODE_CONFIG]);
        assert!(
            mail.subparts[0]
                .get_body()
                .unwrap()
                .contains("shutdownGracePeriod")
        );
        let no_cidr = ClusterInfo {
            cidr: None,
            ..cluster.clone()
        };
        let b = Bootstrap {
            cluster: &no_cidr,
            ..b
        };
        assert_eq!(user_data(&b), Err(UserDataError::MissingCidr));
    }

    #[test]
    fn a_yaml_mapping_is_a_node_config_and_anything_else_a_script() {
        let parts = custom_parts(Some(
            "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n",
        ))
        .unwrap();
        assert_eq!(parts[0].content_type, NODE_CONFIG);
        let parts = custom_parts(Some("#!/bin/bash\necho hi\n")).unwrap();
        assert_eq!(parts[0].content_type, SHELL);
        assert!(custom_parts(Some("  \n")).unwrap().is_empty());
    }

    #[test]
    fn bottlerocket_overwrites_the_kubernetes_settings_and_keeps_the_rest() {
        let cluster = cluster();
        let labels = BTreeMap::from([("team".to_string(), "a".to_string())]);
        let taints = taints();
        let kubelet: KubeletConfiguration =
            serde_json::from_value(serde_json::json!({"clusterDNS": ["10.100.0.10"]})).unwrap();
        let custom = "[settings.kubernetes]\ncluster-name = \"wrong\"\n[settings.kubernetes.node-labels]\nold = \"kept\"\n[settings.host-containers.admin]\nenabled = true\n";
        let b = Bootstrap {
            cluster: &cluster,
            family: AmiFamily::Bottlerocket,
            labels: &labels,
            taints: &taints,
            kubelet: Some(&kubelet),
            custom: Some(custom),
            sizing: None,
            raid0: false,
            image_version: None,
        };
        let out: toml::Table = decode(&user_data(&b).unwrap()).parse().unwrap();
        let k8s = &out["settings"]["kubernetes"];
        assert_eq!(k8s["cluster-name"].as_str(), Some("my-cluster"));
        assert_eq!(k8s["node-labels"]["old"].as_str(), Some("kept"));
        assert_eq!(k8s["node-labels"]["team"].as_str(), Some("a"));
        assert_eq!(k8s["cluster-dns-ip"].as_str(), Some("10.100.0.10"));
        assert_eq!(
            k8s["node-taints"]["dedicated"][0].as_str(),
            Some("batch:NoSchedule")
        );
        assert_eq!(
            out["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
            Some(true)
        );
        let bad = Bootstrap {
            custom: Some("settings = 3"),
            ..b
        };
        assert_eq!(
            user_data(&bad),
            Err(UserDataError::Custom("settings: must be a table".into()))
        );
    }

    #[test]
    fn al2_runs_the_eks_bootstrap_with_labels_and_taints() {
        let cluster = cluster();
        let labels = BTreeMap::from([("team".to_string(), "a".to_string())]);
        let taints = taints();
        let b = Bootstrap {
            cluster: &cluster,
            family: AmiFamily::AL2,
            labels: &labels,
            taints: &taints,
            kubelet: None,
            custom: None,
            sizing: None,
            raid0: false,
            image_version: None,
        };
        let text = decode(&user_data(&b).unwrap());
        assert!(text.contains("/etc/eks/bootstrap.sh 'my-cluster' --apiserver-endpoint"));
        assert!(text.contains(
            "--kubelet-extra-args '--node-labels=\"team=a\" --register-with-taints=\"dedicated=batch:NoSchedule\"'"
        ));
        let windows = Bootstrap {
            family: AmiFamily::Windows2022,
            ..b
        };
        assert!(matches!(
            user_data(&windows),
            Err(UserDataError::Unsupported(_))
        ));
    }
}

#[cfg(test)]
mod sizing_tests {
    use super::*;
    use kerf_api::Quantity;

    fn bootstrap<'a>(
        family: AmiFamily,
        cluster: &'a ClusterInfo,
        labels: &'a BTreeMap<String, String>,
        sizing: &'a Sizing,
    ) -> Bootstrap<'a> {
        Bootstrap {
            cluster,
            family,
            labels,
            taints: &[],
            kubelet: None,
            custom: None,
            sizing: Some(sizing),
            raid0: false,
            image_version: None,
        }
    }

    #[test]
    fn every_family_tells_the_kubelet_the_types_pod_limit_and_kube_reserved() {
        let cluster = ClusterInfo {
            name: "c".into(),
            endpoint: "https://e".into(),
            ca_bundle: None,
            cidr: Some("10.100.0.0/16".into()),
        };
        let labels = BTreeMap::new();
        // an m5.large: two cores, 29 pods
        let sizing = Sizing::new(2, 29, None);
        let decode = |b64: String| String::from_utf8(STANDARD.decode(b64).unwrap()).unwrap();
        let al2023 =
            decode(user_data(&bootstrap(AmiFamily::AL2023, &cluster, &labels, &sizing)).unwrap());
        assert!(al2023.contains("maxPods: 29"), "{al2023}");
        assert!(
            al2023.contains("kubeReserved:\n        cpu: 70m\n        ephemeral-storage: 1Gi\n        memory: 574Mi"),
            "{al2023}"
        );
        let al2 =
            decode(user_data(&bootstrap(AmiFamily::AL2, &cluster, &labels, &sizing)).unwrap());
        assert!(
            al2.contains(
                "--max-pods=29 --kube-reserved=\"cpu=70m,ephemeral-storage=1Gi,memory=574Mi\""
            ),
            "{al2}"
        );
        let rocket = decode(
            user_data(&bootstrap(
                AmiFamily::Bottlerocket,
                &cluster,
                &labels,
                &sizing,
            ))
            .unwrap(),
        );
        let toml: toml::Table = rocket.parse().unwrap();
        let k8s = &toml["settings"]["kubernetes"];
        assert_eq!(k8s["max-pods"].as_integer(), Some(29));
        assert_eq!(k8s["kube-reserved"]["memory"].as_str(), Some("574Mi"));
    }

    /// For a table of types, what the user data reserves (plus the default eviction
    /// thresholds) is exactly what `kerf instance-types` leaves out of allocatable: the kubelet
    /// and the scheduler agree.
    #[test]
    fn the_kubelet_reserves_what_the_scheduler_leaves_out() {
        let settings = kerf_aws::capacity::NodeSettings::default();
        let types = kerf_aws::instance_types("us-east-1", &settings).unwrap();
        let options = kerf_aws::instance_type::scheduler_options(&types, |_, _, _| false);
        for name in [
            "t3.micro",
            "m5.large",
            "c6g.xlarge",
            "r5.24xlarge",
            "g5.2xlarge",
        ] {
            let t = options.iter().find(|t| t.name == name).expect(name);
            let vcpu = u32::try_from(t.capacity.cpu_millis / 1000).unwrap();
            let sizing = Sizing::new(vcpu, t.capacity.pods, None);
            let q = |k: &str| Quantity::parse(&sizing.kube_reserved[k]).unwrap();
            assert_eq!(sizing.max_pods, t.allocatable.pods, "{name}");
            assert_eq!(
                t.capacity.cpu_millis - q("cpu").milli() as i64,
                t.allocatable.cpu_millis,
                "{name}"
            );
            let evict_memory = 100 << 20;
            assert_eq!(
                t.capacity.memory_bytes - q("memory").units_ceil() as i64 - evict_memory,
                t.allocatable.memory_bytes,
                "{name}"
            );
            let evict_disk = (t.capacity.ephemeral_storage_bytes as f64 * 0.1).ceil() as i64;
            assert_eq!(
                t.capacity.ephemeral_storage_bytes
                    - q("ephemeral-storage").units_ceil() as i64
                    - evict_disk,
                t.allocatable.ephemeral_storage_bytes,
                "{name}"
            );
        }
    }
}
