//! Pods and Nodes as the watches read them: only the fields the controllers use are
//! deserialized, so managed fields, volumes, environments, probes, images and container
//! statuses (most of each object, and most of a watch's traffic) are skipped while parsing
//! instead of being allocated and dropped. Each converts into the k8s-openapi object the core
//! takes.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EphemeralVolumeSource, Node, NodeCondition, NodeSpec,
    NodeStatus, NodeSystemInfo, PersistentVolumeClaimVolumeSource, Pod, PodCondition,
    PodSchedulingGate, PodSpec, PodStatus, ResourceRequirements, Toleration,
    TopologySpreadConstraint, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// The annotation `kubectl apply` writes: a copy of the whole object, never read here.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// An object's metadata without its managed fields and last-applied copy.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    generate_name: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    finalizers: Option<Vec<String>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
}

fn meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let mut m = Meta::deserialize(d)?;
    if let Some(a) = m.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
    if let Some(o) = m.owner_references.as_mut() {
        o.shrink_to_fit();
    }
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        generate_name: m.generate_name,
        resource_version: m.resource_version,
        generation: m.generation,
        labels: m.labels,
        annotations: m.annotations,
        owner_references: m.owner_references,
        finalizers: m.finalizers,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        ..ObjectMeta::default()
    })
}

/// The kind a slim object stands for: its API coordinates come from the full type.
pub trait SlimOf {
    /// The k8s-openapi type.
    type Full: k8s_openapi::Resource;
}

/// An object read with slim spec `S` and status `T`.
#[derive(Clone, Debug, Deserialize)]
pub struct Slim<S, T> {
    #[serde(deserialize_with = "meta")]
    metadata: ObjectMeta,
    spec: Option<S>,
    status: Option<T>,
}

impl<S: SlimOf, T> kube::Resource for Slim<S, T> {
    type DynamicType = ();
    type Scope = <S::Full as k8s_openapi::Resource>::Scope;

    fn kind((): &()) -> Cow<'_, str> {
        <S::Full as k8s_openapi::Resource>::KIND.into()
    }
    fn group((): &()) -> Cow<'_, str> {
        <S::Full as k8s_openapi::Resource>::GROUP.into()
    }
    fn version((): &()) -> Cow<'_, str> {
        <S::Full as k8s_openapi::Resource>::VERSION.into()
    }
    fn plural((): &()) -> Cow<'_, str> {
        <S::Full as k8s_openapi::Resource>::URL_PATH_SEGMENT.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A container: its name, what it requests, its ports (host ports) and restart policy
/// (an init container with `Always` is a sidecar).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimContainer {
    name: String,
    resources: Option<ResourceRequirements>,
    ports: Option<Vec<ContainerPort>>,
    restart_policy: Option<String>,
}

impl From<SlimContainer> for Container {
    fn from(c: SlimContainer) -> Container {
        Container {
            name: c.name,
            resources: c.resources,
            ports: c.ports,
            restart_policy: c.restart_policy,
            ..Container::default()
        }
    }
}

/// A pod volume as far as its topology goes: its name, and the claim it names (its own, or
/// the one a generic ephemeral volume makes).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimVolume {
    name: String,
    persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    ephemeral: Option<serde::de::IgnoredAny>,
}

impl SlimVolume {
    /// The volume, when it names a claim.
    fn into_volume(self) -> Option<Volume> {
        let ephemeral = self.ephemeral.map(|_| EphemeralVolumeSource::default());
        (self.persistent_volume_claim.is_some() || ephemeral.is_some()).then(|| Volume {
            name: self.name,
            persistent_volume_claim: self.persistent_volume_claim,
            ephemeral,
            ..Volume::default()
        })
    }
}

/// The scheduling fields of a pod's spec.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodSpec {
    #[serde(default)]
    containers: Vec<SlimContainer>,
    init_containers: Option<Vec<SlimContainer>>,
    node_name: Option<String>,
    node_selector: Option<BTreeMap<String, String>>,
    affinity: Option<Affinity>,
    tolerations: Option<Vec<Toleration>>,
    topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    priority_class_name: Option<String>,
    priority: Option<i32>,
    overhead: Option<BTreeMap<String, Quantity>>,
    /// Pod-level resources (Kubernetes 1.34): they stand for the containers' cpu and memory.
    resources: Option<ResourceRequirements>,
    /// The volumes that name a claim (volume topology).
    volumes: Option<Vec<SlimVolume>>,
    termination_grace_period_seconds: Option<i64>,
    /// Whether kube-scheduler will try the pod (one it has not tried yet is provisioned for).
    scheduler_name: Option<String>,
    scheduling_gates: Option<Vec<PodSchedulingGate>>,
}

impl SlimOf for SlimPodSpec {
    type Full = Pod;
}

/// A pod's phase, nomination, PodScheduled condition and start time.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodStatus {
    phase: Option<String>,
    nominated_node_name: Option<String>,
    conditions: Option<Vec<PodCondition>>,
    /// A timed `karpenter.sh/do-not-disrupt` counts from here.
    start_time: Option<Time>,
}

/// A Pod as the pod watch reads it.
pub type SlimPod = Slim<SlimPodSpec, SlimPodStatus>;

impl From<SlimPod> for Pod {
    fn from(p: SlimPod) -> Pod {
        let containers = |cs: Vec<SlimContainer>| cs.into_iter().map(Container::from).collect();
        let mut pod = Pod {
            metadata: p.metadata,
            spec: p.spec.map(|s| PodSpec {
                containers: containers(s.containers),
                init_containers: s.init_containers.map(containers),
                node_name: s.node_name,
                node_selector: s.node_selector,
                affinity: s.affinity,
                // a parsed list keeps room for four: the two default tolerations every pod
                // gets would hold the space of four for as long as the pod is kept
                tolerations: s.tolerations.map(|mut t| {
                    t.shrink_to_fit();
                    t
                }),
                topology_spread_constraints: s.topology_spread_constraints,
                priority_class_name: s.priority_class_name,
                priority: s.priority,
                overhead: s.overhead,
                resources: s.resources,
                // only the volumes that name a claim; none kept when none does
                volumes: s
                    .volumes
                    .map(|vs| {
                        vs.into_iter()
                            .filter_map(SlimVolume::into_volume)
                            .collect::<Vec<_>>()
                    })
                    .filter(|vs| !vs.is_empty()),
                termination_grace_period_seconds: s.termination_grace_period_seconds,
                // the default is what no name means: not kept on every pod
                scheduler_name: s.scheduler_name.filter(|n| n != "default-scheduler"),
                scheduling_gates: s.scheduling_gates,
                ..PodSpec::default()
            }),
            status: p.status.map(|s| PodStatus {
                phase: s.phase,
                nominated_node_name: s.nominated_node_name,
                conditions: s.conditions.map(|mut cs| {
                    // filtered in place, the list would keep the room of all of them
                    cs.retain(|c| c.type_ == "PodScheduled");
                    cs.shrink_to_fit();
                    cs
                }),
                start_time: s.start_time,
                ..PodStatus::default()
            }),
        };
        fold_containers(&mut pod);
        pod
    }
}

/// A `Container` takes 2 KB even when all but its name and requests are empty, and every
/// pod has one: a pod whose containers bind no host port (what the scheduler reads of them
/// besides requests) keeps what it requests, as kube-scheduler adds it up (containers,
/// sidecars, the init peak, pod-level resources and the overhead), as its overhead, and no
/// containers.
fn fold_containers(pod: &mut Pod) {
    let binds_ports = pod.spec.as_ref().is_some_and(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .any(|c| c.ports.iter().flatten().any(|p| p.host_port.is_some()))
    });
    if binds_ports {
        return;
    }
    let requests = kerf_scheduling::resources::pod_requests(pod).to_resource_list();
    if let Some(spec) = pod.spec.as_mut() {
        spec.containers = Vec::new();
        spec.init_containers = None;
        // counted in the total below: kept, it would count twice
        spec.resources = None;
        spec.overhead = Some(
            requests
                .into_iter()
                .filter(|(k, _)| k != "pods")
                .map(|(k, q)| (k, Quantity(q.to_string())))
                .collect(),
        );
    }
}

impl SlimOf for NodeSpec {
    type Full = Node;
}

/// A node's capacity, allocatable, conditions and boot id (images, addresses and the rest
/// of its system info skipped).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimNodeStatus {
    allocatable: Option<BTreeMap<String, Quantity>>,
    capacity: Option<BTreeMap<String, Quantity>>,
    conditions: Option<Vec<NodeCondition>>,
    #[serde(rename = "nodeInfo")]
    node_info: Option<SlimNodeInfo>,
}

/// Of a node's system info, the boot id: a reboot for repair is proven by a new one.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SlimNodeInfo {
    #[serde(rename = "bootID", default)]
    boot_id: String,
}

/// A Node as the node watch reads it.
pub type SlimNode = Slim<NodeSpec, SlimNodeStatus>;

impl From<SlimNode> for Node {
    fn from(n: SlimNode) -> Node {
        Node {
            metadata: n.metadata,
            spec: n.spec,
            status: n.status.map(|s| NodeStatus {
                allocatable: s.allocatable,
                capacity: s.capacity,
                conditions: s.conditions,
                node_info: s.node_info.map(|i| NodeSystemInfo {
                    boot_id: i.boot_id,
                    ..NodeSystemInfo::default()
                }),
                ..NodeStatus::default()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slim_pod_keeps_what_scheduling_reads_and_drops_the_rest() {
        let full = serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "default", "labels": {"app": "web"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {
                "nodeSelector": {"karpenter.sh/capacity-type": "spot"},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "volumes": [{"name": "token", "emptyDir": {}}],
                "containers": [{"name": "c", "image": "nginx", "env": [{"name": "A", "value": "1"}],
                    "resources": {"requests": {"cpu": "1"}}, "ports": [{"containerPort": 80, "hostPort": 80}]}],
                "initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always",
                    "resources": {"requests": {"memory": "64Mi"}}}],
            },
            "status": {"phase": "Pending", "startTime": "2026-11-30T10:00:00Z", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
                {"type": "Ready", "status": "False"}]},
        });
        let pod: Pod = serde_json::from_value(full.clone()).unwrap();
        let before = kerf_scheduling::resources::pod_requests(&pod);
        let slim: Pod = serde_json::from_value::<SlimPod>(full).unwrap().into();
        assert_eq!(kerf_scheduling::resources::pod_requests(&slim), before);
        let v = serde_json::to_value(&slim).unwrap();
        assert_eq!(
            v["spec"]["nodeSelector"]["karpenter.sh/capacity-type"],
            "spot"
        );
        assert_eq!(v["spec"]["tolerations"][0]["key"], "dedicated");
        assert_eq!(v["spec"]["containers"][0]["ports"][0]["hostPort"], 80);
        assert_eq!(v["spec"]["initContainers"][0]["restartPolicy"], "Always");
        assert_eq!(
            v["metadata"]["annotations"],
            serde_json::json!({"karpenter.sh/do-not-disrupt": "true"})
        );
        assert!(v["spec"]["volumes"].is_null(), "an emptyDir names no claim");
        assert!(v["spec"]["containers"][0]["env"].is_null());
        assert!(v["spec"]["containers"][0]["image"].is_null());
        assert!(v["metadata"]["managedFields"].is_null());
        assert_eq!(v["status"]["conditions"].as_array().unwrap().len(), 1);
        // whether kube-scheduler will try it: the scheduler's name unless the default, gates
        let read = |spec: serde_json::Value| -> serde_json::Value {
            let slim: Pod = serde_json::from_value::<SlimPod>(serde_json::json!({
                "metadata": {"name": "p"}, "spec": spec}))
            .unwrap()
            .into();
            serde_json::to_value(slim.spec.unwrap()).unwrap()
        };
        let other = read(serde_json::json!({"schedulerName": "volcano",
            "schedulingGates": [{"name": "example.com/quota"}]}));
        assert_eq!(other["schedulerName"], "volcano");
        assert_eq!(other["schedulingGates"][0]["name"], "example.com/quota");
        assert!(
            read(serde_json::json!({"schedulerName": "default-scheduler"}))["schedulerName"]
                .is_null()
        );
        assert_eq!(v["status"]["startTime"], "2026-11-30T10:00:00Z");
    }

    #[test]
    fn without_host_ports_the_containers_fold_into_the_pods_requests() {
        let full = serde_json::json!({
            "metadata": {"name": "job-0", "namespace": "default"},
            "spec": {
                "overhead": {"cpu": "10m"},
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "640Mi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "250m", "nvidia.com/gpu": "1"}},
                        "ports": [{"containerPort": 8080}]}],
                "initContainers": [
                    {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
                    {"name": "migrate", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
            },
        });
        let pod: Pod = serde_json::from_value(full.clone()).unwrap();
        let slim: Pod = serde_json::from_value::<SlimPod>(full).unwrap().into();
        let spec = slim.spec.as_ref().unwrap();
        assert!(spec.containers.is_empty() && spec.init_containers.is_none());
        let requests = kerf_scheduling::resources::pod_requests(&slim);
        assert_eq!(requests, kerf_scheduling::resources::pod_requests(&pod));
        assert_eq!((requests.cpu_millis, requests.pods), (2110, 1));
        assert_eq!(requests.memory_bytes, (1024 + 64) << 20);
        assert_eq!(requests.extended["nvidia.com/gpu"], 1);
    }

    #[test]
    fn pod_level_resources_are_read_and_counted_once() {
        for ports in [
            serde_json::json!(null),
            serde_json::json!([{"containerPort": 80, "hostPort": 80}]),
        ] {
            let full = serde_json::json!({
                "metadata": {"name": "big", "namespace": "default"},
                "spec": {
                    "resources": {"requests": {"cpu": "6", "memory": "12Gi"}},
                    "containers": [{"name": "a", "ports": ports}],
                },
            });
            let slim: Pod = serde_json::from_value::<SlimPod>(full).unwrap().into();
            let requests = kerf_scheduling::resources::pod_requests(&slim);
            assert_eq!(
                (requests.cpu_millis, requests.memory_bytes),
                (6000, 12 << 30)
            );
        }
    }

    #[test]
    fn a_slim_node_keeps_what_its_record_reads() {
        let full = serde_json::json!({
            "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "default"},
                "managedFields": [{"manager": "kwok", "fieldsV1": {"f:status": {}}}]},
            "spec": {"providerID": "kwok://n1", "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]},
            "status": {"allocatable": {"cpu": "7910m", "pods": "58"}, "capacity": {"cpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "images": [{"names": ["nginx"], "sizeBytes": 1}],
                "nodeInfo": {"machineID": "m-1", "systemUUID": "", "bootID": "b-1", "kernelVersion": "",
                    "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "",
                    "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}},
        });
        let node: Node = serde_json::from_value(full.clone()).unwrap();
        let slim: Node = serde_json::from_value::<SlimNode>(full).unwrap().into();
        let now = std::time::Duration::ZERO;
        let (a, b) = (
            kerf_core::objects::node_record(&node, now),
            kerf_core::objects::node_record(&slim, now),
        );
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert!(a.ready && !a.taints.is_empty());
        let status = slim.status.unwrap();
        assert!(status.images.is_none());
        let info = status.node_info.as_ref().expect("the boot id is kept");
        assert_eq!(
            (info.boot_id.as_str(), info.machine_id.as_str()),
            ("b-1", "")
        );
        assert!(slim.metadata.managed_fields.is_none());
    }
}
