//! Workload manifests as the pods they make: a Deployment, ReplicaSet or StatefulSet with N
//! replicas (a Job with parallelism N) becomes N pods `<name>-<i>`; a DaemonSet becomes the
//! pod it would run on every node; Nodes and PodDisruptionBudgets (checked as the API
//! server checks them) are read as they are.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplateSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
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
            ClusterObject::Pods(replicas(&d.metadata, &spec.template, spec.replicas))
        }
        ("apps", "ReplicaSet") => {
            let r: ReplicaSet = parse(doc)?;
            let spec = r.spec.unwrap_or_default();
            non_negative(doc, "spec.replicas", spec.replicas)?;
            ClusterObject::Pods(replicas(
                &r.metadata,
                &spec.template.unwrap_or_default(),
                spec.replicas,
            ))
        }
        ("apps", "StatefulSet") => {
            let s: StatefulSet = parse(doc)?;
            let spec = s.spec.unwrap_or_default();
            non_negative(doc, "spec.replicas", spec.replicas)?;
            ClusterObject::Pods(replicas(&s.metadata, &spec.template, spec.replicas))
        }
        ("batch", "Job") => {
            let j: Job = parse(doc)?;
            let spec = j.spec.unwrap_or_default();
            non_negative(doc, "spec.parallelism", spec.parallelism)?;
            non_negative(doc, "spec.completions", spec.completions)?;
            let parallelism = spec.parallelism.unwrap_or(1);
            let n = spec.completions.map_or(parallelism, |c| c.min(parallelism));
            ClusterObject::Pods(replicas(&j.metadata, &spec.template, Some(n)))
        }
        ("apps", "DaemonSet") => {
            let d: DaemonSet = parse(doc)?;
            let spec = d.spec.unwrap_or_default();
            let mut pod = replicas(&d.metadata, &spec.template, Some(1)).remove(0);
            pod.metadata.name = d.metadata.name.clone();
            ClusterObject::DaemonSet(Box::new(pod))
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

/// N pods from a template, named `<name>-<i>`.
fn replicas(meta: &ObjectMeta, template: &PodTemplateSpec, replicas: Option<i32>) -> Vec<Pod> {
    let name = meta.name.clone().unwrap_or_default();
    let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
    let n = replicas.unwrap_or(1).max(0);
    let template_meta = template.metadata.clone().unwrap_or_default();
    (0..n)
        .map(|i| Pod {
            metadata: ObjectMeta {
                name: Some(format!("{name}-{i}")),
                namespace: Some(namespace.clone()),
                labels: template_meta.labels.clone(),
                annotations: template_meta.annotations.clone(),
                ..ObjectMeta::default()
            },
            spec: template.spec.clone(),
            status: None,
        })
        .collect()
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
    fn deployments_become_numbered_pods() {
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
        assert_eq!(names, ["inflate-0", "inflate-1", "inflate-2"]);
        assert_eq!(pods[0].metadata.namespace.as_deref(), Some("web"));
        assert_eq!(pods[0].metadata.labels.as_ref().unwrap()["app"], "inflate");
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
