//! CapacityBuffers as data: the buffers, PodTemplates and workloads the cluster holds, how a
//! buffer's chunk shape and number are worked out from them (as Karpenter v1.15 works them
//! out), the placeholder pods that stand for its chunks in a provisioning pass, and its
//! `Provisioning` condition from where those pods went.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::capacitybuffer::{
    CapacityBuffer, CapacityBufferSpec, CapacityBufferStatus, LocalObjectRef,
};
use kerf_api::{Condition, ResourceList};
use kerf_scheduling::resources::{Resources, pod_requests};

/// The annotation marking a placeholder pod, as Karpenter marks its own.
pub const FAKE_POD: &str = "karpenter.sh/capacity-buffer-fake-pod";
/// The annotation naming a placeholder pod's buffer.
pub const BUFFER_NAME: &str = "karpenter.sh/capacity-buffer-name";
/// The annotation naming a placeholder pod's buffer's namespace.
pub const BUFFER_NAMESPACE: &str = "karpenter.sh/capacity-buffer-namespace";
/// The condition saying whether a buffer's shape and number are worked out.
pub const READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
/// The condition saying whether a buffer's chunks fit on capacity already there.
pub const PROVISIONING: &str = "Provisioning";
/// The kinds a `scalableRef` may name (group `apps`).
const SCALABLE_KINDS: [(&str, &str); 3] = [
    ("Deployment", "deployments"),
    ("StatefulSet", "statefulsets"),
    ("ReplicaSet", "replicasets"),
];

/// A pod shape a buffer may take its chunks from: a PodTemplate, or a workload's template
/// with its replicas.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    /// `metadata.generation`.
    pub generation: i64,
    /// `spec.replicas` of a workload (1 where unset, as Karpenter reads it); 0 for a
    /// PodTemplate, which has none.
    pub replicas: i32,
    /// The pods' template.
    pub template: PodTemplateSpec,
}

/// What the cluster holds of CapacityBuffers and what they refer to.
#[derive(Clone, Debug, Default)]
pub struct Buffers {
    /// Buffers by `namespace/name`.
    pub buffers: BTreeMap<String, CapacityBuffer>,
    /// PodTemplates by `namespace/name`.
    pub templates: BTreeMap<String, Template>,
    /// Deployments, StatefulSets and ReplicaSets by `Kind/namespace/name`.
    pub workloads: BTreeMap<String, Template>,
}

/// A buffer's shape and number, worked out.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// One chunk's pod template.
    pub template: PodTemplateSpec,
    /// The PodTemplate and its generation, for a `podTemplateRef` buffer.
    pub pod_template: Option<(String, i64)>,
    /// How many chunks.
    pub replicas: i32,
}

/// Why a buffer's shape could not be worked out: the condition's reason and message.
#[derive(Clone, Debug, PartialEq)]
pub struct Unresolved {
    /// `ResolutionFailed`, `PodTemplateNotFound` or `ScalableRefNotFound`.
    pub reason: &'static str,
    /// Karpenter's message (the API server's not-found text for a missing object).
    pub message: String,
}

impl Buffers {
    /// Works out the shape and number of the buffer `namespace/name`, as Karpenter's buffer
    /// controller does.
    pub fn resolve(
        &self,
        namespace: &str,
        spec: &CapacityBufferSpec,
    ) -> Result<Resolved, Unresolved> {
        let failed = |message: String| Unresolved {
            reason: "ResolutionFailed",
            message,
        };
        if let Some(r) = &spec.pod_template_ref {
            let t = (self.templates.get(&format!("{namespace}/{}", r.name))).ok_or_else(|| {
                Unresolved {
                    reason: "PodTemplateNotFound",
                    message: format!("podtemplates {:?} not found", r.name),
                }
            })?;
            let replicas = replicas(spec, &t.template, None);
            return Ok(Resolved {
                template: t.template.clone(),
                pod_template: Some((r.name.clone(), t.generation)),
                replicas,
            });
        }
        let Some(r) = &spec.scalable_ref else {
            return Err(failed(
                "Neither podTemplateRef nor scalableRef is set".into(),
            ));
        };
        let group = r
            .api_group
            .as_deref()
            .filter(|g| !g.is_empty())
            .unwrap_or("apps");
        if group != "apps" {
            return Err(failed(format!(
                "unsupported scalableRef API group {group:?}"
            )));
        }
        let Some((kind, plural)) = SCALABLE_KINDS.iter().find(|(k, _)| *k == r.kind) else {
            return Err(failed(format!("unsupported kind {:?}", r.kind)));
        };
        let w = (self
            .workloads
            .get(&format!("{kind}/{namespace}/{}", r.name)))
        .ok_or_else(|| Unresolved {
            reason: "ScalableRefNotFound",
            message: format!("{plural}.apps {:?} not found", r.name),
        })?;
        Ok(Resolved {
            template: w.template.clone(),
            pod_template: None,
            replicas: replicas(spec, &w.template, Some(w.replicas)),
        })
    }
}

/// The number of chunks: the larger of `replicas` and `percentage` of the workload's
/// replicas (rounded up, at least one), capped by as many chunks as `limits` hold; `limits`
/// alone give that many; none of them, zero. Limits name resources the pod requests;
/// those it does not request are left out, and limits naming none of them are ignored.
pub fn replicas(
    spec: &CapacityBufferSpec,
    template: &PodTemplateSpec,
    workload: Option<i32>,
) -> i32 {
    let mut wanted = Vec::new();
    if let (Some(pct), Some(n)) = (spec.percentage, workload)
        && n > 0
    {
        let share = (f64::from(n) * f64::from(pct) / 100.0).ceil() as i32;
        wanted.push(if pct > 0 { share.max(1) } else { share });
    }
    wanted.extend(spec.replicas);
    let desired = wanted.iter().copied().max();
    match (
        spec.limits
            .as_ref()
            .and_then(|l| limit_replicas(l, template)),
        desired,
    ) {
        (Some(cap), Some(d)) => d.min(cap),
        (Some(cap), None) => cap,
        (None, d) => d.unwrap_or(0),
    }
}

/// How many chunks fit in `limits`: the fewest over the resources both name, or `None` when
/// they share none.
fn limit_replicas(limits: &ResourceList, template: &PodTemplateSpec) -> Option<i32> {
    let requests = requests_milli(template);
    (limits.iter())
        .filter_map(|(name, limit)| {
            let each = *requests.get(name.as_str()).filter(|r| **r > 0)?;
            let n = limit.milli().max(0) / each;
            Some(i32::try_from(n).unwrap_or(i32::MAX))
        })
        .min()
}

/// One chunk's requests in thousandths, by resource name, without the pod slot (Kubernetes'
/// pod requests: containers, the init peak with sidecars, overhead).
fn requests_milli(template: &PodTemplateSpec) -> BTreeMap<String, i128> {
    let pod = Pod {
        spec: template.spec.clone(),
        ..Pod::default()
    };
    let r: Resources = pod_requests(&pod);
    let mut out = BTreeMap::new();
    out.insert("cpu".to_string(), i128::from(r.cpu_millis));
    out.insert("memory".to_string(), i128::from(r.memory_bytes) * 1000);
    let storage = i128::from(r.ephemeral_storage_bytes) * 1000;
    out.insert("ephemeral-storage".to_string(), storage);
    for (name, units) in &r.extended {
        out.insert(name.clone(), i128::from(*units) * 1000);
    }
    out
}

/// The status the buffer controller writes: `ReadyForProvisioning` from the resolution,
/// with the replicas and PodTemplate on success (kept as they were on failure), and the
/// strategy; `provisioning` is the last `Provisioning` condition, kept as it is.
pub fn resolved_status(
    buffer: &CapacityBuffer,
    resolved: &Result<Resolved, Unresolved>,
    provisioning: Option<Condition>,
) -> CapacityBufferStatus {
    let mut status = buffer.status.clone().unwrap_or_default();
    let generation = buffer.metadata.generation;
    let ready = match resolved {
        Ok(r) => {
            status.replicas = Some(r.replicas);
            status.pod_template_ref =
                (r.pod_template.as_ref()).map(|(name, _)| LocalObjectRef { name: name.clone() });
            status.pod_template_generation = r.pod_template.as_ref().map(|(_, g)| *g);
            condition(
                READY_FOR_PROVISIONING,
                "True",
                "Resolved",
                "Pod template resolved successfully",
                generation,
            )
        }
        Err(u) => condition(
            READY_FOR_PROVISIONING,
            "False",
            u.reason,
            &u.message,
            generation,
        ),
    };
    status.provisioning_strategy = buffer.spec.provisioning_strategy.clone();
    status.conditions = vec![ready];
    status.conditions.extend(provisioning);
    status
}

/// A condition without its transition time (the shell keeps the time of one unchanged).
pub fn condition(
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: kind.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: None,
        observed_generation: generation,
    }
}

/// Where one provisioning pass put a buffer's placeholder pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placed {
    /// On nodes or NodeClaims already there.
    pub existing: usize,
    /// On NodeClaims the pass made.
    pub new: usize,
    /// Nowhere.
    pub failed: usize,
}

/// The `Provisioning` condition after a pass, as Karpenter's provisioner writes it; `None`
/// leaves it as it was (the pass placed none of the buffer's pods, or some but not all on
/// capacity already there and none elsewhere).
pub fn provisioning_condition(
    status: &CapacityBufferStatus,
    placed: Option<Placed>,
    generation: Option<i64>,
) -> Option<Condition> {
    let ready =
        (status.conditions.iter()).any(|c| c.type_ == READY_FOR_PROVISIONING && c.status == "True");
    let desired = status.replicas.unwrap_or(0);
    let c =
        |s, reason, message: String| Some(condition(PROVISIONING, s, reason, &message, generation));
    if !ready {
        return c(
            "False",
            "NotReadyForProvisioning",
            "Buffer is not ReadyForProvisioning".into(),
        );
    }
    if desired <= 0 {
        return c(
            "False",
            "BufferEmpty",
            "Buffer has zero desired replicas".into(),
        );
    }
    let p = placed?;
    if p.new > 0 || p.failed > 0 {
        let m = format!(
            "{}/{desired} virtual pods required new capacity, {} failed",
            p.new, p.failed
        );
        return c("False", "RequiresNewCapacity", m);
    }
    if i32::try_from(p.existing) == Ok(desired) {
        return c(
            "True",
            "FitsExistingCapacity",
            format!("All {desired} virtual pods fit on existing capacity"),
        );
    }
    None
}

/// The placeholder pods of buffer `namespace/name` (uid `uid`): `replicas` pods shaped as
/// the template, as Karpenter makes them (its annotations, the template's labels, volumes
/// that claim storage left out, the lowest priority, marked unschedulable).
pub fn placeholder_pods(namespace: &str, name: &str, uid: &str, resolved: &Resolved) -> Vec<Pod> {
    let mut spec = resolved.template.spec.clone().unwrap_or_default();
    spec.node_name = None;
    spec.priority = Some(i32::MIN);
    let claims: Vec<String> = (spec.volumes.iter().flatten())
        .filter(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
        .map(|v| v.name.clone())
        .collect();
    if let Some(volumes) = &mut spec.volumes {
        volumes.retain(|v| !claims.contains(&v.name));
    }
    let containers = spec.containers.iter_mut();
    for c in containers.chain(spec.init_containers.iter_mut().flatten()) {
        if let Some(mounts) = &mut c.volume_mounts {
            mounts.retain(|m| !claims.contains(&m.name));
        }
    }
    let labels = resolved
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone());
    (1..=resolved.replicas.max(0))
        .map(|i| Pod {
            metadata: ObjectMeta {
                name: Some(format!("capacity-buffer-{name}-{i}")),
                namespace: Some(namespace.to_string()),
                uid: Some(format!("{uid}-{i}")),
                labels: labels.clone(),
                annotations: Some(
                    [
                        (FAKE_POD.to_string(), "true".to_string()),
                        (BUFFER_NAME.to_string(), name.to_string()),
                        (BUFFER_NAMESPACE.to_string(), namespace.to_string()),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(spec.clone()),
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("Unschedulable".into()),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_api::capacitybuffer::ScalableRef;

    fn template(containers: serde_json::Value, init: serde_json::Value) -> PodTemplateSpec {
        serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "buffer"}},
            "spec": {"containers": containers, "initContainers": init},
        }))
        .unwrap()
    }

    fn one_cpu() -> PodTemplateSpec {
        let c = serde_json::json!([{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]);
        template(c, serde_json::json!([]))
    }

    fn spec(
        replicas: Option<i32>,
        percentage: Option<i32>,
        limits: &[(&str, &str)],
    ) -> CapacityBufferSpec {
        CapacityBufferSpec {
            replicas,
            percentage,
            limits: (!limits.is_empty()).then(|| {
                (limits.iter())
                    .map(|(k, v)| (k.to_string(), kerf_api::Quantity::parse(v).unwrap()))
                    .collect()
            }),
            ..CapacityBufferSpec::default()
        }
    }

    #[test]
    fn replicas_are_worked_out_as_karpenters_table() {
        // Karpenter v1.15's own cases (capacitybuffer suite_test.go): replicas, percentage
        // of a workload of 10 (or 1), limits on 1 cpu a chunk
        let t = one_cpu();
        for (s, workload, want) in [
            (spec(Some(7), None, &[]), None, 7),
            (spec(Some(10), None, &[("cpu", "3")]), None, 3),
            (spec(Some(3), None, &[("cpu", "10")]), None, 3),
            (spec(None, None, &[("cpu", "5")]), None, 5),
            (spec(None, Some(20), &[]), Some(10), 2),
            (spec(Some(5), Some(20), &[]), Some(10), 5),
            (spec(Some(5), Some(80), &[]), Some(10), 8),
            (spec(Some(5), Some(80), &[("cpu", "4")]), Some(10), 4),
            (spec(None, Some(10), &[]), Some(1), 1),
            (spec(None, Some(50), &[]), Some(0), 0),
            (spec(None, None, &[("nvidia.com/gpu", "4")]), None, 0),
            (spec(None, None, &[("cpu", "500m")]), None, 0),
            (
                spec(None, None, &[("cpu", "8"), ("memory", "4Gi")]),
                None,
                4,
            ),
            (spec(None, Some(200), &[]), Some(5), 10),
        ] {
            assert_eq!(replicas(&s, &t, workload), want, "{s:?} of {workload:?}");
        }
    }

    #[test]
    fn a_chunks_requests_take_the_init_peak_and_sidecars() {
        // containers 500m + 500m; an init container of 4 cpu runs alone first: 4 a chunk
        let t = template(
            serde_json::json!([
                {"name": "a", "resources": {"requests": {"cpu": "500m"}}},
                {"name": "b", "resources": {"requests": {"cpu": "500m"}}}
            ]),
            serde_json::json!([{"name": "i", "resources": {"requests": {"cpu": "4"}}}]),
        );
        assert_eq!(replicas(&spec(None, None, &[("cpu", "8")]), &t, None), 2);
    }

    #[test]
    fn references_resolve_or_say_why_not_in_karpenters_words() {
        let mut b = Buffers::default();
        let by_ref = |r: ScalableRef| CapacityBufferSpec {
            scalable_ref: Some(r),
            percentage: Some(20),
            ..CapacityBufferSpec::default()
        };
        let web = |group: Option<&str>, kind: &str| ScalableRef {
            api_group: group.map(String::from),
            kind: kind.into(),
            name: "web".into(),
        };
        let missing = b
            .resolve("team", &by_ref(web(None, "Deployment")))
            .unwrap_err();
        assert_eq!(missing.reason, "ScalableRefNotFound");
        assert_eq!(missing.message, r#"deployments.apps "web" not found"#);
        let job = b
            .resolve("team", &by_ref(web(Some("batch"), "Job")))
            .unwrap_err();
        assert_eq!(job.message, r#"unsupported scalableRef API group "batch""#);
        let job = b
            .resolve("team", &by_ref(web(Some("apps"), "Job")))
            .unwrap_err();
        assert_eq!(
            (job.reason, job.message.as_str()),
            ("ResolutionFailed", r#"unsupported kind "Job""#)
        );
        let none = b
            .resolve("team", &CapacityBufferSpec::default())
            .unwrap_err();
        assert_eq!(
            none.message,
            "Neither podTemplateRef nor scalableRef is set"
        );
        let w = Template {
            generation: 3,
            replicas: 10,
            template: one_cpu(),
        };
        b.workloads.insert("Deployment/team/web".into(), w);
        let r = b
            .resolve("team", &by_ref(web(Some(""), "Deployment")))
            .unwrap();
        assert_eq!((r.replicas, r.pod_template), (2, None));
        assert!(
            b.resolve("other", &by_ref(web(None, "Deployment")))
                .is_err()
        );
        let by_template = CapacityBufferSpec {
            pod_template_ref: Some(LocalObjectRef {
                name: "chunk".into(),
            }),
            replicas: Some(3),
            ..CapacityBufferSpec::default()
        };
        let missing = b.resolve("team", &by_template).unwrap_err();
        assert_eq!(
            (missing.reason, missing.message.as_str()),
            ("PodTemplateNotFound", r#"podtemplates "chunk" not found"#)
        );
        let t = Template {
            generation: 2,
            replicas: 0,
            template: one_cpu(),
        };
        b.templates.insert("team/chunk".into(), t);
        let r = b.resolve("team", &by_template).unwrap();
        assert_eq!((r.replicas, r.pod_template), (3, Some(("chunk".into(), 2))));
    }

    #[test]
    fn placeholder_pods_keep_the_shape_and_drop_claimed_volumes() {
        let mut t: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "db"}, "annotations": {"x": "y"}},
            "spec": {
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "containers": [{"name": "c", "volumeMounts": [
                    {"name": "data", "mountPath": "/d"}, {"name": "tmp", "mountPath": "/t"}]}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
                            {"name": "tmp", "emptyDir": {}}],
            },
        }))
        .unwrap();
        t.spec.as_mut().unwrap().node_name = Some("old".into());
        let r = Resolved {
            template: t,
            pod_template: None,
            replicas: 2,
        };
        let pods = placeholder_pods("team", "db-buffer", "u1", &r);
        assert_eq!(pods.len(), 2);
        let p = &pods[1];
        assert_eq!(
            p.metadata.name.as_deref(),
            Some("capacity-buffer-db-buffer-2")
        );
        assert_eq!(p.metadata.uid.as_deref(), Some("u1-2"));
        assert_eq!(p.metadata.labels.as_ref().unwrap()["app"], "db");
        let notes = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(notes.len(), 3, "the template's annotations are not copied");
        assert_eq!(notes[FAKE_POD], "true");
        let s = p.spec.as_ref().unwrap();
        assert_eq!((s.node_name.as_deref(), s.priority), (None, Some(i32::MIN)));
        let volumes: Vec<&str> = s
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["tmp"]);
        let mounts = s.containers[0].volume_mounts.as_ref().unwrap();
        assert_eq!(mounts.len(), 1);
        assert!(crate::provisioning::rules::is_provisionable(p));
    }

    #[test]
    fn the_provisioning_condition_follows_karpenters_order() {
        let mut status = CapacityBufferStatus {
            replicas: Some(10),
            ..CapacityBufferStatus::default()
        };
        let reason = |s: &CapacityBufferStatus, p: Option<Placed>| {
            provisioning_condition(s, p, Some(1)).map(|c| (c.status, c.reason, c.message))
        };
        let placed = |existing, new, failed| {
            Some(Placed {
                existing,
                new,
                failed,
            })
        };
        assert_eq!(
            reason(&status, placed(10, 0, 0)).unwrap().1,
            "NotReadyForProvisioning"
        );
        status.conditions = vec![condition(
            READY_FOR_PROVISIONING,
            "True",
            "Resolved",
            "",
            None,
        )];
        assert_eq!(
            reason(&status, placed(0, 2, 8)).unwrap(),
            (
                "False".into(),
                "RequiresNewCapacity".into(),
                "2/10 virtual pods required new capacity, 8 failed".into()
            )
        );
        assert_eq!(
            reason(&status, placed(10, 0, 0)).unwrap(),
            (
                "True".into(),
                "FitsExistingCapacity".into(),
                "All 10 virtual pods fit on existing capacity".into()
            )
        );
        assert_eq!(reason(&status, placed(9, 0, 0)), None);
        assert_eq!(reason(&status, None), None);
        status.replicas = Some(0);
        assert_eq!(reason(&status, None).unwrap().1, "BufferEmpty");
    }
}
