//! A scenario's manifests read as kube-apiserver admits them: Karpenter's kinds through
//! their validation rules (every problem named by its field path), the other kinds the
//! simulated cluster keeps (pods, workloads, DaemonSets, PDBs, volumes, CapacityBuffers and
//! PodTemplates) read strictly. What it refuses is refused before the run starts.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodTemplate};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kerf_api::manifest::{Checked, KarpenterObject, RawDocument, check_document};
use kerf_api::{CapacityBuffer, EC2NodeClass, NodeOverlay, NodePool};
use kerf_core::buffers::Template;
use kerf_core::workloads::{ClusterObject, VolumeObject, claim_templates, read as read_object};
use serde_json::Value;

use super::SimError;
use crate::scenario::ScenarioError;

/// One manifest, read.
pub(super) enum Manifest {
    /// A NodePool.
    NodePool(Box<NodePool>),
    /// An EC2NodeClass.
    NodeClass(Box<EC2NodeClass>),
    /// A NodeOverlay.
    NodeOverlay(Box<NodeOverlay>),
    /// A CapacityBuffer (namespace and generation defaulted, as the API server stores it).
    Buffer(Box<CapacityBuffer>),
    /// A PodTemplate a buffer may name, by `namespace/name`.
    PodTemplate {
        key: String,
        template: Box<Template>,
    },
    /// Bare pods.
    Pods(Vec<Pod>),
    /// A workload (Deployment, ReplicaSet, StatefulSet, Job): its pods' template (named
    /// after it), its volume claim templates and its replicas.
    Workload {
        kind: String,
        namespace: String,
        name: String,
        template: Box<Pod>,
        claims: Vec<PersistentVolumeClaim>,
        replicas: i64,
    },
    /// A DaemonSet's pod, by `namespace/name`.
    DaemonSet { key: String, template: Box<Pod> },
    /// A PodDisruptionBudget.
    Pdb(Box<PodDisruptionBudget>),
    /// A claim, volume, StorageClass or CSINode.
    Volume(VolumeObject),
    /// A kind the simulated cluster does not keep.
    Ignored,
}

/// Reads the manifest `doc`, found at `path` of the scenario.
pub(super) fn read(doc: &Value, path: &str) -> Result<Manifest, SimError> {
    let raw = RawDocument {
        line: 0,
        value: doc.clone(),
    };
    let refused = |message: &str| -> SimError {
        ScenarioError {
            path: path.into(),
            message: message.into(),
        }
        .into()
    };
    let manifest = match check_document(&raw) {
        Checked::Valid(KarpenterObject::NodePool(np)) => Manifest::NodePool(np),
        Checked::Valid(KarpenterObject::EC2NodeClass(class)) => Manifest::NodeClass(class),
        Checked::Valid(KarpenterObject::NodeOverlay(overlay)) => Manifest::NodeOverlay(overlay),
        Checked::Valid(KarpenterObject::NodeClaim(_)) => {
            return Err(refused("NodeClaims are made by Kerf, not by scenarios"));
        }
        Checked::Invalid(problems) => return Err(every_problem(path, &problems).into()),
        Checked::Other if matches!(raw.kind(), "CapacityBuffer" | "PodTemplate") => {
            buffer_object(doc, path)?
        }
        Checked::Other => {
            let kind = raw.kind().to_string();
            let object = read_object(&raw).map_err(|e| ScenarioError {
                path: format!("{path}.{}", e.path),
                message: e.message,
            })?;
            let namespace = (doc.pointer("/metadata/namespace"))
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string();
            let name = raw.name().to_string();
            match object {
                Some(ClusterObject::Pods(pods)) if kind == "Pod" => Manifest::Pods(pods),
                Some(ClusterObject::Pods(pods)) => Manifest::Workload {
                    replicas: i64::try_from(pods.len()).unwrap_or(0),
                    template: Box::new(one_template(doc)),
                    claims: claim_templates(&raw),
                    kind,
                    namespace,
                    name,
                },
                Some(ClusterObject::DaemonSet(template)) => Manifest::DaemonSet {
                    key: format!("{namespace}/{name}"),
                    template,
                },
                Some(ClusterObject::Pdb(pdb)) => Manifest::Pdb(pdb),
                Some(ClusterObject::Volume(v)) => Manifest::Volume(v),
                Some(ClusterObject::Node(_)) => {
                    return Err(refused(
                        "Nodes come from the simulated cloud; declare NodePools instead",
                    ));
                }
                None => Manifest::Ignored,
            }
        }
    };
    Ok(manifest)
}

/// A CapacityBuffer or PodTemplate, read strictly; the field that does not read is named
/// by its path.
fn buffer_object(doc: &Value, path: &str) -> Result<Manifest, SimError> {
    let unread = |e: serde_path_to_error::Error<serde_json::Error>| ScenarioError {
        path: format!("{path}.{}", e.path()),
        message: e.into_inner().to_string(),
    };
    if doc.get("kind").and_then(Value::as_str) == Some("CapacityBuffer") {
        let mut buffer: CapacityBuffer = serde_path_to_error::deserialize(doc).map_err(unread)?;
        let meta = &mut buffer.metadata;
        meta.namespace.get_or_insert_with(|| "default".into());
        meta.generation.get_or_insert(1);
        return Ok(Manifest::Buffer(Box::new(buffer)));
    }
    let template: PodTemplate = serde_path_to_error::deserialize(doc).map_err(unread)?;
    let meta = &template.metadata;
    let key = format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref().unwrap_or_default()
    );
    let template = Box::new(Template {
        generation: meta.generation.unwrap_or(1),
        replicas: 0,
        template: template.template.unwrap_or_default(),
    });
    Ok(Manifest::PodTemplate { key, template })
}

/// The pod template of a workload document, named after the workload (pods get `-<i>`).
fn one_template(doc: &Value) -> Pod {
    let mut single = doc.clone();
    let is_job = doc.get("kind").and_then(Value::as_str) == Some("Job");
    if let Some(spec) = single.get_mut("spec").and_then(Value::as_object_mut) {
        // one pod, by the field the kind has (workloads are read strictly)
        if is_job {
            spec.insert("parallelism".into(), 1.into());
            spec.remove("completions");
        } else {
            spec.insert("replicas".into(), 1.into());
        }
    }
    let raw = RawDocument {
        line: 0,
        value: single,
    };
    let mut pod = match read_object(&raw) {
        Ok(Some(ClusterObject::Pods(mut pods))) if !pods.is_empty() => pods.remove(0),
        _ => Pod::default(),
    };
    pod.metadata.name = Some(raw.name().to_string());
    pod
}

/// Every problem of a manifest at `path`, as `kerf validate` lists them: the first as the
/// error's path and message, the others on lines of their own.
pub(super) fn every_problem(
    path: &str,
    problems: &[kerf_api::validation::Problem],
) -> ScenarioError {
    let mut message = problems
        .first()
        .map(|p| p.message.clone())
        .unwrap_or_default();
    for p in problems.iter().skip(1) {
        message.push_str(&format!("\n  {path}.{}: {}", p.path, p.message));
    }
    ScenarioError {
        path: format!("{path}.{}", problems.first().map_or("", |p| &p.path[..])),
        message,
    }
}
