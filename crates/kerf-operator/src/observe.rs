//! Observations from the watches, written into the core's cluster state.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::manifest::RawDocument;
use kerf_core::controllers::Controllers;
use kerf_core::objects::node_record;
use kerf_core::workloads::{ClusterObject, read};
use kerf_scheduling::pods::pod_key;

use crate::cloud::CloudProvider;
use crate::watch::{Object, Observed};

fn since_epoch(t: &Time) -> Duration {
    Duration::from_millis(u64::try_from(t.0.as_millisecond()).unwrap_or(0))
}

fn key(namespace: Option<&String>, name: Option<&String>) -> String {
    format!(
        "{}/{}",
        namespace.map_or("default", String::as_str),
        name.map_or("", String::as_str)
    )
}

/// Gives a node class's instance types to the controllers if they have none yet.
fn offer_instance_types(core: &mut Controllers, cloud: &impl CloudProvider, class: &str) {
    if !core.cluster.instance_types.contains_key(class) {
        let types = cloud.instance_types(core.cluster.node_classes.get(class));
        core.cluster.set_instance_types(class, types);
    }
}

/// Keeps of a pod only what the controllers read: managed fields, volumes, environments,
/// probes and container statuses are often most of it, and every pod is kept (and queued
/// between the watch and the loop). What stays: the scheduling fields (node name, selector,
/// affinity, tolerations, spread, priority class, overhead), each container's name,
/// resources, ports and restart policy, and the PodScheduled condition and phase.
pub fn slim_pod(mut pod: Pod) -> Pod {
    pod.metadata.managed_fields = None;
    if let Some(spec) = pod.spec.take() {
        let slim = |cs: Vec<Container>| -> Vec<Container> {
            cs.into_iter()
                .map(|c| Container {
                    name: c.name,
                    resources: c.resources,
                    ports: c.ports,
                    restart_policy: c.restart_policy,
                    ..Container::default()
                })
                .collect()
        };
        pod.spec = Some(PodSpec {
            containers: slim(spec.containers),
            init_containers: spec.init_containers.map(slim),
            node_name: spec.node_name,
            node_selector: spec.node_selector,
            affinity: spec.affinity,
            tolerations: spec.tolerations,
            topology_spread_constraints: spec.topology_spread_constraints,
            priority_class_name: spec.priority_class_name,
            priority: spec.priority,
            overhead: spec.overhead,
            termination_grace_period_seconds: spec.termination_grace_period_seconds,
            ..PodSpec::default()
        });
    }
    if let Some(status) = pod.status.as_mut() {
        *status = PodStatus {
            phase: status.phase.take(),
            nominated_node_name: status.nominated_node_name.take(),
            conditions: status.conditions.take().map(|cs| {
                cs.into_iter()
                    .filter(|c| c.type_ == "PodScheduled")
                    .collect()
            }),
            ..PodStatus::default()
        };
    }
    pod
}

/// Writes one observation into the cluster state.
pub fn apply(
    core: &mut Controllers,
    cloud: &impl CloudProvider,
    observed: Observed,
    now: Duration,
) {
    match observed {
        Observed::Applied(object) => applied(core, cloud, object, now),
        Observed::Deleted(object) => deleted(core, object, now),
        Observed::Gone(kind, key) => gone(core, kind, &key, now),
        Observed::Synced(_) | Observed::Failed(..) => {}
    }
}

fn applied(core: &mut Controllers, cloud: &impl CloudProvider, object: Object, now: Duration) {
    let cluster = &mut core.cluster;
    match object {
        Object::Pod(pod) => {
            let finished = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|p| p == "Succeeded" || p == "Failed");
            if finished {
                cluster.delete_pod(&pod_key(&pod), now);
            } else {
                cluster.apply_pod(*pod, now);
            }
        }
        Object::Node(node) => {
            let name = node.metadata.name.clone().unwrap_or_default();
            cluster.apply_node(name, node_record(&node, now), now);
        }
        Object::NodeClaim(claim) => {
            let meta = &claim.metadata;
            let created = meta.creation_timestamp.as_ref().map_or(now, since_epoch);
            let deleting = meta.deletion_timestamp.as_ref().map(since_epoch);
            core.nodeclaim_observed(&claim, created, deleting);
        }
        Object::NodePool(np) => {
            let name = np.metadata.name.clone().unwrap_or_default();
            let class = np.spec.template.spec.node_class_ref.name.clone();
            // status writes come back as events too: only a spec change is a change
            if cluster
                .node_pools
                .get(&name)
                .is_none_or(|old| old.spec != np.spec)
            {
                cluster.apply_node_pool(*np);
            }
            offer_instance_types(core, cloud, &class);
        }
        Object::NodeClass(class) => {
            let name = class.metadata.name.clone().unwrap_or_default();
            if cluster
                .node_classes
                .get(&name)
                .is_none_or(|old| old.spec != class.spec)
            {
                cluster.apply_node_class(*class);
                let types = cloud.instance_types(cluster.node_classes.get(&name));
                cluster.set_instance_types(&name, types);
            }
        }
        Object::DaemonSet(ds) => {
            let k = key(ds.metadata.namespace.as_ref(), ds.metadata.name.as_ref());
            let Ok(value) = serde_json::to_value(&ds) else {
                return;
            };
            let mut value = value;
            value["apiVersion"] = "apps/v1".into();
            value["kind"] = "DaemonSet".into();
            if let Ok(Some(ClusterObject::DaemonSet(template))) =
                read(&RawDocument { index: 0, value })
            {
                cluster.apply_daemonset(k, *template);
            }
        }
        Object::Pdb(pdb) => {
            let k = key(pdb.metadata.namespace.as_ref(), pdb.metadata.name.as_ref());
            cluster.apply_pdb(k, *pdb);
        }
    }
}

/// An object deleted while its watch was down, known only by its kind and key.
fn gone(core: &mut Controllers, kind: &str, key: &str, now: Duration) {
    let cluster = &mut core.cluster;
    let name = key.split_once('/').map_or(key, |(_, n)| n);
    match kind {
        "Pod" => cluster.delete_pod(key, now),
        "Node" => cluster.delete_node(name, now),
        "NodeClaim" => cluster.delete_nodeclaim(name),
        "NodePool" => cluster.delete_node_pool(name),
        "EC2NodeClass" => cluster.delete_node_class(name),
        "DaemonSet" => cluster.delete_daemonset(key),
        "PodDisruptionBudget" => cluster.delete_pdb(key),
        _ => {}
    }
}

fn deleted(core: &mut Controllers, object: Object, now: Duration) {
    let cluster = &mut core.cluster;
    match object {
        Object::Pod(pod) => cluster.delete_pod(&pod_key(&pod), now),
        Object::Node(node) => cluster.delete_node(node.metadata.name.as_deref().unwrap_or(""), now),
        Object::NodeClaim(claim) => {
            cluster.delete_nodeclaim(claim.metadata.name.as_deref().unwrap_or(""));
        }
        Object::NodePool(np) => cluster.delete_node_pool(np.metadata.name.as_deref().unwrap_or("")),
        Object::NodeClass(class) => {
            cluster.delete_node_class(class.metadata.name.as_deref().unwrap_or(""));
        }
        Object::DaemonSet(ds) => {
            cluster.delete_daemonset(&key(
                ds.metadata.namespace.as_ref(),
                ds.metadata.name.as_ref(),
            ));
        }
        Object::Pdb(pdb) => {
            cluster.delete_pdb(&key(
                pdb.metadata.namespace.as_ref(),
                pdb.metadata.name.as_ref(),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::slim_pod;

    #[test]
    fn a_slim_pod_keeps_what_scheduling_reads_and_drops_the_rest() {
        let pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "default", "labels": {"app": "web"},
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
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
                {"type": "Ready", "status": "False"}]},
        }))
        .unwrap();
        let before = kerf_scheduling::resources::pod_requests(&pod);
        let slim = slim_pod(pod);
        assert_eq!(kerf_scheduling::resources::pod_requests(&slim), before);
        let v = serde_json::to_value(&slim).unwrap();
        assert_eq!(
            v["spec"]["nodeSelector"]["karpenter.sh/capacity-type"],
            "spot"
        );
        assert_eq!(v["spec"]["tolerations"][0]["key"], "dedicated");
        assert_eq!(v["spec"]["containers"][0]["ports"][0]["hostPort"], 80);
        assert_eq!(v["spec"]["initContainers"][0]["restartPolicy"], "Always");
        assert!(v["spec"]["volumes"].is_null());
        assert!(v["spec"]["containers"][0]["env"].is_null());
        assert!(v["metadata"]["managedFields"].is_null());
        assert_eq!(v["status"]["conditions"].as_array().unwrap().len(), 1);
    }
}
