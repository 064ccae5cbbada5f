//! Workload manifests as the pods they make: a Deployment, ReplicaSet or StatefulSet with N
//! replicas (a Job with parallelism N) becomes N pods `<name>-<i>`; a DaemonSet becomes the
//! pod it would run on every node; Nodes and PodDisruptionBudgets (checked as the API
//! server checks them) are read as they are.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod,
    PodTemplateSpec, Volume,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kerf_api::Quantity;
use kerf_api::manifest::RawDocument;
use serde_json::Value;

/// A cluster object the scheduler reads.
#[derive(Clone, Debug)]
pub enum ClusterObject {
    /// Pods, pending or (with `spec.nodeName`) bound.
    Pods(Vec<Pod>),
    /// The pod a DaemonSet runs on each node it selects (named as the DaemonSet).
    DaemonSet(Box<Pod>),
    /// A node.
    Node(Box<Node>),
    /// A PodDisruptionBudget.
    Pdb(Box<PodDisruptionBudget>),
    /// A PersistentVolumeClaim, PersistentVolume, StorageClass or CSINode (volume topology
    /// and attachment limits).
    Volume(VolumeObject),
}

/// An object that tells where a pod's volumes can be reached.
#[derive(Clone, Debug)]
pub enum VolumeObject {
    /// A PersistentVolumeClaim.
    Claim(Box<PersistentVolumeClaim>),
    /// A PersistentVolume.
    Volume(Box<PersistentVolume>),
    /// A StorageClass.
    Class(Box<StorageClass>),
    /// A CSINode: how many volumes its node's CSI drivers attach.
    CsiNode(Box<CSINode>),
    /// A VolumeAttachment: a volume still attached to a node, which a deleted node's
    /// instance waits for.
    Attachment(Box<VolumeAttachment>),
}

impl VolumeObject {
    /// Files the object with the cluster's volumes.
    pub fn apply(&self, volumes: &mut crate::volumes::Volumes) {
        match self {
            VolumeObject::Claim(c) => volumes.apply_claim(c),
            VolumeObject::Volume(v) => volumes.apply_volume(v),
            VolumeObject::Class(c) => volumes.apply_class(c),
            VolumeObject::CsiNode(c) => volumes.apply_csi_node(c),
            VolumeObject::Attachment(a) => volumes.apply_attachment(a),
        }
    }

    /// Its kind and `namespace/name` key (namespace empty when cluster-scoped), by which a
    /// deletion is observed.
    pub fn identity(&self) -> (&'static str, String) {
        let key = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            format!(
                "{}/{}",
                m.namespace.as_deref().unwrap_or(""),
                m.name.as_deref().unwrap_or("")
            )
        };
        match self {
            VolumeObject::Claim(c) => ("PersistentVolumeClaim", key(&c.metadata)),
            VolumeObject::Volume(v) => ("PersistentVolume", key(&v.metadata)),
            VolumeObject::Class(c) => ("StorageClass", key(&c.metadata)),
            VolumeObject::CsiNode(c) => ("CSINode", key(&c.metadata)),
            VolumeObject::Attachment(a) => ("VolumeAttachment", key(&a.metadata)),
        }
    }
}

/// The claim templates of a StatefulSet manifest (`spec.volumeClaimTemplates`, in the
/// StatefulSet's namespace); none for any other document or one that does not read.
pub fn claim_templates(doc: &RawDocument) -> Vec<PersistentVolumeClaim> {
    if doc.kind() != "StatefulSet" {
        return Vec::new();
    }
    let Ok(s) = parse::<StatefulSet>(doc) else {
        return Vec::new();
    };
    let mut templates = s
        .spec
        .and_then(|s| s.volume_claim_templates)
        .unwrap_or_default();
    for t in &mut templates {
        t.metadata.namespace = s.metadata.namespace.clone();
    }
    templates
}

/// The claim the StatefulSet controller makes from a template for one of its pods,
/// `<template>-<pod>`, before it makes the pod.
pub fn claim_for(template: &PersistentVolumeClaim, pod: &str) -> PersistentVolumeClaim {
    let mut claim = template.clone();
    let name = template.metadata.name.as_deref().unwrap_or_default();
    claim.metadata.name = Some(format!("{name}-{pod}"));
    claim
}

/// A workload manifest that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{kind}/{name}: {path}: {message}")]
pub struct WorkloadError {
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// Field path of the problem.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// Reads a document as `T`, strictly as `kubectl` does: a field `T` does not have (a typo such
/// as `reqests`) is an error, not a value silently dropped.
fn parse<T: serde::de::DeserializeOwned + serde::Serialize>(
    doc: &RawDocument,
) -> Result<T, WorkloadError> {
    let error = |path: String, message: String| WorkloadError {
        kind: doc.kind().to_string(),
        name: doc.name().to_string(),
        path,
        message,
    };
    let object: T = serde_path_to_error::deserialize(&doc.value)
        .map_err(|e| error(e.path().to_string(), e.into_inner().to_string()))?;
    // what was read, written back: a field of the manifest missing there was not read
    let known = serde_json::to_value(&object).unwrap_or(Value::Null);
    // a status is the server's, not the author's: an object saved from a newer cluster may
    // carry status fields this API version lacks
    let mut authored = doc.value.clone();
    if let Some(fields) = authored.as_object_mut() {
        fields.remove("status");
    }
    if let Some(path) = unknown_field(&authored, &known, String::new()) {
        return Err(error(path, "unknown field".into()));
    }
    Ok(object)
}

/// The path of the first field of `input` that `known` (the same object read and written
/// back) lacks; `null` values are left alone, as the API server leaves them.
fn unknown_field(input: &Value, known: &Value, path: String) -> Option<String> {
    match (input, known) {
        (Value::Object(fields), Value::Object(read)) => fields.iter().find_map(|(key, value)| {
            if value.is_null() {
                return None;
            }
            let here = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            match read.get(key) {
                None => Some(here),
                Some(v) => unknown_field(value, v, here),
            }
        }),
        (Value::Array(items), Value::Array(read)) => items
            .iter()
            .zip(read)
            .enumerate()
            .find_map(|(i, (item, r))| unknown_field(item, r, format!("{path}[{i}]"))),
        _ => None,
    }
}

/// A count the API server requires to be zero or more.
fn non_negative(doc: &RawDocument, path: &str, n: Option<i32>) -> Result<(), WorkloadError> {
    match n {
        Some(n) if n < 0 => Err(WorkloadError {
            kind: doc.kind().to_string(),
            name: doc.name().to_string(),
            path: path.into(),
            message: format!("{n}: must be greater than or equal to 0"),
        }),
        _ => Ok(()),
    }
}

/// Reads one document; `Ok(None)` for kinds the scheduler does not use.
pub fn read(doc: &RawDocument) -> Result<Option<ClusterObject>, WorkloadError> {
    let group = doc.api_version().split('/').next().unwrap_or("");
    let object = match (group, doc.kind()) {
        ("v1", "Pod") => {
            let pod: Pod = parse(doc)?;
            ClusterObject::Pods(vec![pod])
        }
        ("v1", "Node") => ClusterObject::Node(Box::new(parse(doc)?)),
        ("apps", "Deployment") => {
            let d: Deployment = parse(doc)?;
            let spec = d.spec.unwrap_or_default();
            non_negative(doc, "spec.replicas", spec.replicas)?;
            ClusterObject::Pods(replicas(
                "Deployment",
                &d.metadata,
                &spec.template,
                spec.replicas,
            ))
        }
        ("apps", "ReplicaSet") => {
            let r: ReplicaSet = parse(doc)?;
            let spec = r.spec.unwrap_or_default();
            non_negative(doc, "spec.replicas", spec.replicas)?;
            ClusterObject::Pods(replicas(
                "ReplicaSet",
                &r.metadata,
                &spec.template.unwrap_or_default(),
                spec.replicas,
            ))
        }
        ("apps", "StatefulSet") => {
            let s: StatefulSet = parse(doc)?;
            let spec = s.spec.unwrap_or_default();
            non_negative(doc, "spec.replicas", spec.replicas)?;
            let mut pods = replicas("StatefulSet", &s.metadata, &spec.template, spec.replicas);
            // each pod mounts its own claim of every template, `<template>-<pod>`, as the
            // StatefulSet controller makes them
            for pod in &mut pods {
                let pod_name = pod.metadata.name.clone().unwrap_or_default();
                let Some(pod_spec) = pod.spec.as_mut() else {
                    continue;
                };
                for template in spec.volume_claim_templates.iter().flatten() {
                    let claim = template.metadata.name.clone().unwrap_or_default();
                    let volumes = pod_spec.volumes.get_or_insert_with(Vec::new);
                    volumes.retain(|v| v.name != claim);
                    volumes.push(Volume {
                        name: claim.clone(),
                        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                            claim_name: format!("{claim}-{pod_name}"),
                            read_only: None,
                        }),
                        ..Volume::default()
                    });
                }
            }
            ClusterObject::Pods(pods)
        }
        ("batch", "Job") => {
            let j: Job = parse(doc)?;
            let spec = j.spec.unwrap_or_default();
            non_negative(doc, "spec.parallelism", spec.parallelism)?;
            non_negative(doc, "spec.completions", spec.completions)?;
            let parallelism = spec.parallelism.unwrap_or(1);
            let n = spec.completions.map_or(parallelism, |c| c.min(parallelism));
            ClusterObject::Pods(replicas("Job", &j.metadata, &spec.template, Some(n)))
        }
        ("apps", "DaemonSet") => {
            let d: DaemonSet = parse(doc)?;
            let spec = d.spec.unwrap_or_default();
            let mut pod = replicas("DaemonSet", &d.metadata, &spec.template, Some(1)).remove(0);
            pod.metadata.name = d.metadata.name.clone();
            ClusterObject::DaemonSet(Box::new(pod))
        }
        ("v1", "PersistentVolumeClaim") => {
            return Ok(Some(ClusterObject::Volume(VolumeObject::Claim(parse(
                doc,
            )?))));
        }
        ("v1", "PersistentVolume") => {
            return Ok(Some(ClusterObject::Volume(VolumeObject::Volume(parse(
                doc,
            )?))));
        }
        ("storage.k8s.io", "StorageClass") => {
            return Ok(Some(ClusterObject::Volume(VolumeObject::Class(parse(
                doc,
            )?))));
        }
        ("storage.k8s.io", "CSINode") => {
            return Ok(Some(ClusterObject::Volume(VolumeObject::CsiNode(parse(
                doc,
            )?))));
        }
        ("policy", "PodDisruptionBudget") => {
            let pdb: PodDisruptionBudget = parse(doc)?;
            check_pdb(doc, &pdb)?;
            return Ok(Some(ClusterObject::Pdb(Box::new(pdb))));
        }
        _ => return Ok(None),
    };
    check_quantities(doc)?;
    Ok(Some(object))
}

/// The API server's rules for a PodDisruptionBudget's amounts: a non-negative integer or a
/// percentage (`"1"` as a string is neither), and not both fields.
fn check_pdb(doc: &RawDocument, pdb: &PodDisruptionBudget) -> Result<(), WorkloadError> {
    let error = |path: &str, message: &str| WorkloadError {
        kind: doc.kind().to_string(),
        name: doc.name().to_string(),
        path: path.into(),
        message: message.into(),
    };
    let Some(spec) = &pdb.spec else {
        return Ok(());
    };
    if spec.min_available.is_some() && spec.max_unavailable.is_some() {
        return Err(error(
            "spec",
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    for (path, v) in [
        ("spec.minAvailable", &spec.min_available),
        ("spec.maxUnavailable", &spec.max_unavailable),
    ] {
        let ok = match v {
            None => true,
            Some(IntOrString::Int(n)) => *n >= 0,
            Some(IntOrString::String(s)) => s
                .strip_suffix('%')
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())),
        };
        if !ok {
            return Err(error(
                path,
                "must be a non-negative integer or a percentage (\"50%\")",
            ));
        }
    }
    Ok(())
}

/// N pods of a `kind` workload from its template, named as its controller names them (see
/// [`PodNames`]).
fn replicas(
    kind: &str,
    meta: &ObjectMeta,
    template: &PodTemplateSpec,
    replicas: Option<i32>,
) -> Vec<Pod> {
    let name = meta.name.clone().unwrap_or_default();
    let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
    let n = replicas.unwrap_or(1).max(0);
    let template_meta = template.metadata.clone().unwrap_or_default();
    let model = Pod {
        metadata: ObjectMeta {
            namespace: Some(namespace),
            labels: template_meta.labels,
            annotations: template_meta.annotations,
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    };
    let names = PodNames::new(kind, &name, &model, 0);
    let mut taken = std::collections::HashSet::new();
    (0..u64::try_from(n).unwrap_or(0))
        .map(|i| {
            let mut pod = model.clone();
            let mut attempt = 0;
            let mut pod_name = names.name(i, attempt);
            while !taken.insert(pod_name.clone()) {
                attempt += 1;
                pod_name = names.name(i, attempt);
            }
            pod.metadata.name = Some(pod_name);
            names.label(&mut pod);
            pod
        })
        .collect()
}

/// The characters Kubernetes draws generated name suffixes and pod-template hashes from:
/// no vowels and no 0, 1 or 3, so no words and no look-alikes.
const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The label a Deployment's ReplicaSet puts on its pods.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// FNV-1a (64-bit), the same on every platform and release: names must not change between
/// runs or builds.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// How a workload's controller names the pods it makes, as in Kubernetes: a Deployment's
/// ReplicaSet is `NAME-HASH` (the pod-template-hash of its template) and its pods
/// `NAME-HASH-XXXXX`; a StatefulSet's pods are `NAME-0`, `NAME-1`, …; a ReplicaSet's or a
/// Job's `NAME-XXXXX`. The five characters come from the alphabet kube-apiserver's
/// `generateName` draws from, but from a hash of the prefix, the pod's number and a seed, so
/// a run names its pods the same every time.
#[derive(Clone, Debug)]
pub struct PodNames {
    prefix: String,
    ordinals: bool,
    template_hash: Option<String>,
    seed: u64,
}

impl PodNames {
    /// The names of a `kind` workload `name` whose pods look like `template` (its name and
    /// any pod-template-hash label aside).
    pub fn new(kind: &str, name: &str, template: &Pod, seed: u64) -> PodNames {
        let template_hash = (kind == "Deployment").then(|| {
            let mut model = template.clone();
            model.metadata.name = None;
            if let Some(labels) = &mut model.metadata.labels {
                labels.remove(POD_TEMPLATE_HASH);
            }
            let text = serde_json::to_string(&(
                &model.metadata.labels,
                &model.metadata.annotations,
                &model.spec,
            ))
            .unwrap_or_default();
            // Kubernetes safe-encodes the decimal text of a 32-bit hash
            let hash = (fnv1a(&[text.as_bytes()]) as u32).to_string();
            hash.bytes()
                .map(|b| char::from(NAME_CHARS[usize::from(b) % NAME_CHARS.len()]))
                .collect::<String>()
        });
        let prefix = match &template_hash {
            Some(hash) => format!("{name}-{hash}"),
            None => name.to_string(),
        };
        PodNames {
            prefix,
            ordinals: kind == "StatefulSet",
            template_hash,
            seed,
        }
    }

    /// The name of the `n`th pod made; `attempt` > 0 draws another suffix after the name
    /// was found taken, as kube-apiserver's generateName retries.
    pub fn name(&self, n: u64, attempt: u64) -> String {
        if self.ordinals {
            return format!("{}-{n}", self.prefix);
        }
        let h = fnv1a(&[
            self.prefix.as_bytes(),
            &n.to_le_bytes(),
            &attempt.to_le_bytes(),
            &self.seed.to_le_bytes(),
        ]);
        let suffix: String = (0..5)
            .map(|i| {
                let c = (h >> (i * 12)) % NAME_CHARS.len() as u64;
                char::from(NAME_CHARS[c as usize])
            })
            .collect();
        format!("{}-{suffix}", self.prefix)
    }

    /// Gives a Deployment's pod its `pod-template-hash` label.
    pub fn label(&self, pod: &mut Pod) {
        if let Some(hash) = &self.template_hash {
            pod.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(POD_TEMPLATE_HASH.to_string(), hash.clone());
        }
    }
}

/// Every resource quantity under a pod spec must parse: a typo is an error, not zero.
fn check_quantities(doc: &RawDocument) -> Result<(), WorkloadError> {
    fn walk(v: &Value, path: &mut Vec<String>, bad: &mut Option<(String, String)>) {
        if bad.is_some() {
            return;
        }
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    path.push(k.clone());
                    let in_resources = path.len() >= 2
                        && matches!(
                            path[path.len() - 2].as_str(),
                            "requests" | "limits" | "overhead"
                        );
                    if in_resources
                        && let Some(text) = child
                            .as_str()
                            .map(str::to_string)
                            .or_else(|| child.as_i64().map(|n| n.to_string()))
                        && let Err(e) = Quantity::parse(&text)
                    {
                        *bad = Some((path.join("."), format!("{text:?} is not a quantity: {e}")));
                    }
                    walk(child, path, bad);
                    path.pop();
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    let last = path.pop().unwrap_or_default();
                    path.push(format!("{last}[{i}]"));
                    walk(child, path, bad);
                    path.pop();
                    path.push(last);
                }
            }
            _ => {}
        }
    }
    let mut bad = None;
    walk(&doc.value, &mut Vec::new(), &mut bad);
    match bad {
        Some((path, message)) => Err(WorkloadError {
            kind: doc.kind().to_string(),
            name: doc.name().to_string(),
            path,
            message,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_api::manifest::read_documents;

    fn one(yaml: &str) -> Result<Option<ClusterObject>, WorkloadError> {
        read(&read_documents(yaml).unwrap()[0])
    }

    #[test]
    fn deployments_become_pods_named_as_kubernetes_names_them() {
        let obj = one(r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: inflate, namespace: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: inflate}}
  template:
    metadata: {labels: {app: inflate}}
    spec:
      containers: [{name: c, image: pause, resources: {requests: {cpu: 1}}}]
"#)
        .unwrap();
        let Some(ClusterObject::Pods(pods)) = obj else {
            panic!("pods expected")
        };
        let names: Vec<_> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        // inflate-<pod-template-hash>-<five generated characters>, the hash also a label
        let hash = pods[0].metadata.labels.as_ref().unwrap()[POD_TEMPLATE_HASH].clone();
        assert!((6..=10).contains(&hash.len()), "{hash}");
        let allowed = |c: char| NAME_CHARS.contains(&(c as u8));
        for name in &names {
            let suffix = name
                .strip_prefix(&format!("inflate-{hash}-"))
                .unwrap_or_else(|| panic!("{name} is not inflate-{hash}-…"));
            assert_eq!(suffix.len(), 5, "{name}");
            assert!(suffix.chars().all(allowed), "{name}");
        }
        let distinct: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), 3);
        assert_eq!(pods[0].metadata.namespace.as_deref(), Some("web"));
        assert_eq!(pods[0].metadata.labels.as_ref().unwrap()["app"], "inflate");
        // the same manifest names its pods the same; another template, another hash
        let again = one(r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: inflate, namespace: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: inflate}}
  template:
    metadata: {labels: {app: inflate}}
    spec:
      containers: [{name: c, image: pause, resources: {requests: {cpu: 2}}}]
"#)
        .unwrap();
        let Some(ClusterObject::Pods(other)) = again else {
            panic!("pods expected")
        };
        assert_ne!(
            other[0].metadata.labels.as_ref().unwrap()[POD_TEMPLATE_HASH],
            hash
        );
    }

    #[test]
    fn statefulset_pods_are_numbered_without_a_template_hash() {
        let Ok(Some(ClusterObject::Pods(pods))) = one(r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 2
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: c, image: x}]
"#)
        else {
            panic!("pods expected")
        };
        let names: Vec<_> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["db-0", "db-1"]);
        assert!(
            pods[0]
                .metadata
                .labels
                .as_ref()
                .unwrap()
                .get(POD_TEMPLATE_HASH)
                .is_none()
        );
    }

    #[test]
    fn jobs_run_parallelism_pods_and_other_kinds_are_skipped() {
        let obj = one(r#"
apiVersion: batch/v1
kind: Job
metadata: {name: etl}
spec:
  parallelism: 4
  completions: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: x}]
"#)
        .unwrap();
        let Some(ClusterObject::Pods(pods)) = obj else {
            panic!("pods expected")
        };
        assert_eq!(pods.len(), 2);
        // etl-<five generated characters>, as a Job's pods are named
        for p in &pods {
            let name = p.metadata.name.as_deref().unwrap();
            assert!(name.starts_with("etl-") && name.len() == 9, "{name}");
        }
        assert!(
            one("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn bad_quantities_name_their_path() {
        let err = one(r#"
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: c, image: x, resources: {requests: {cpu: "one"}}}]
"#)
        .unwrap_err();
        assert_eq!(err.path, "spec.containers[0].resources.requests.cpu");
        assert!(err.to_string().starts_with(
            "Pod/p: spec.containers[0].resources.requests.cpu: \"one\" is not a quantity"
        ));
    }

    #[test]
    fn pod_disruption_budgets_take_integers_or_percentages() {
        let pdb = |spec: &str| {
            one(&format!(
                "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: web}}\n\
                 spec: {{selector: {{matchLabels: {{app: web}}}}, {spec}}}"
            ))
        };
        assert!(matches!(
            pdb("minAvailable: 1"),
            Ok(Some(ClusterObject::Pdb(_)))
        ));
        assert!(matches!(
            pdb("maxUnavailable: '25%'"),
            Ok(Some(ClusterObject::Pdb(_)))
        ));
        let err = pdb("minAvailable: '1'").unwrap_err();
        assert_eq!(err.path, "spec.minAvailable");
        assert!(
            err.to_string()
                .contains("a non-negative integer or a percentage")
        );
        assert_eq!(
            pdb("maxUnavailable: -1").unwrap_err().path,
            "spec.maxUnavailable"
        );
        assert_eq!(
            pdb("minAvailable: 1, maxUnavailable: 1").unwrap_err().path,
            "spec"
        );
    }
}
