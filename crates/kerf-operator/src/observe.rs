//! Observations from the watches, written into the core's cluster state.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::manifest::RawDocument;
use kerf_core::controllers::Controllers;
use kerf_core::workloads::{ClusterObject, read};
use kerf_scheduling::pods::pod_key;

use crate::cloud::CloudProvider;
use crate::kwok_types;
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
        Observed::Notice(notice) => core.notice(&notice, now),
        Observed::OfferingsChanged => {
            let classes: Vec<String> = core.cluster.instance_types.keys().cloned().collect();
            for class in classes {
                let types = cloud.instance_types(core.cluster.node_classes.get(&class));
                core.cluster.set_instance_types(&class, types);
            }
        }
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
        Object::Node(node) => core.node_observed(&node, now),
        Object::NodeClaim(read) => {
            // one Kerf cannot type is reported (lib.rs) and left as it was last read
            let Ok(claim) = &read.read.object else {
                return;
            };
            let meta = &claim.metadata;
            let created = meta.creation_timestamp.as_ref().map_or(now, since_epoch);
            let deleting = meta.deletion_timestamp.as_ref().map(since_epoch);
            core.nodeclaim_observed(claim, created, deleting);
        }
        Object::NodePool(read) => {
            let Ok(np) = &read.read.object else {
                return;
            };
            let gaps = &read.read.gaps;
            let name = np.metadata.name.clone().unwrap_or_default();
            let class = np.spec.template.spec.node_class_ref.name.clone();
            // status writes come back as events too: only a spec change is a change
            if cluster
                .node_pools
                .get(&name)
                .is_none_or(|old| old.spec != np.spec)
                || cluster.pool_gaps.get(&name) != Some(gaps).filter(|g| !g.is_empty())
            {
                cluster.apply_node_pool_read(np.clone(), gaps);
            }
            offer_instance_types(core, cloud, &class);
        }
        Object::NodeClass(read) => {
            let Ok(class) = &read.read.object else {
                return;
            };
            let gaps = &read.read.gaps;
            let name = class.metadata.name.clone().unwrap_or_default();
            if cluster
                .node_classes
                .get(&name)
                .is_none_or(|old| old.spec != class.spec || old.status != class.status)
                || cluster.class_gaps.get(&name) != Some(gaps).filter(|g| !g.is_empty())
            {
                // the status matters too: its subnets' zones are where types are offered
                cluster.apply_node_class_read(class.clone(), gaps);
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
                read(&RawDocument { line: 0, value })
            {
                cluster.apply_daemonset(k, *template);
            }
        }
        Object::Pdb(pdb) => {
            let k = key(pdb.metadata.namespace.as_ref(), pdb.metadata.name.as_ref());
            cluster.apply_pdb(k, *pdb);
        }
        Object::Volume(v) => cluster.volumes_changed(|volumes| v.apply(volumes), now),
        Object::NodeOverlay(read) => {
            let Ok(overlay) = &read.read.object else {
                return;
            };
            let name = name_of(overlay).to_string();
            // status writes come back as events too: only a spec change is a change
            if (cluster.node_overlays.get(&name)).is_none_or(|old| old.spec != overlay.spec) {
                cluster.apply_node_overlay(overlay.clone());
            }
        }
        Object::KwokNodeClass(class) => {
            let name = class.metadata.name.clone().unwrap_or_default();
            if cluster.node_classes.contains_key(&name) {
                return;
            }
            if let Some(record) = kwok_types::node_class_record(&name) {
                cluster.apply_node_class(record);
                let types = cloud.instance_types(cluster.node_classes.get(&name));
                cluster.set_instance_types(&name, types);
            }
        }
    }
}

fn name_of<K: kube::Resource>(object: &K) -> &str {
    object.meta().name.as_deref().unwrap_or("")
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
        "EC2NodeClass" | "KWOKNodeClass" => cluster.delete_node_class(name),
        "NodeOverlay" => cluster.delete_node_overlay(name),
        "DaemonSet" => cluster.delete_daemonset(key),
        "PodDisruptionBudget" => cluster.delete_pdb(key),
        "PersistentVolumeClaim" => {
            let namespace = key.split_once('/').map(|(ns, _)| ns);
            cluster.volumes_changed(|v| v.delete_claim(namespace, name), now);
        }
        "PersistentVolume" => cluster.volumes_changed(|v| v.delete_volume(name), now),
        "StorageClass" => cluster.volumes_changed(|v| v.delete_class(name), now),
        "CSINode" => cluster.volumes_changed(|v| v.delete_csi_node(name), now),
        _ => {}
    }
}

fn deleted(core: &mut Controllers, object: Object, now: Duration) {
    let cluster = &mut core.cluster;
    match object {
        Object::Pod(pod) => cluster.delete_pod(&pod_key(&pod), now),
        Object::Node(node) => cluster.delete_node(node.metadata.name.as_deref().unwrap_or(""), now),
        Object::NodeClaim(read) => cluster.delete_nodeclaim(name_of(&*read)),
        Object::NodePool(read) => cluster.delete_node_pool(name_of(&*read)),
        Object::NodeClass(read) => cluster.delete_node_class(name_of(&*read)),
        Object::KwokNodeClass(class) => cluster.delete_node_class(name_of(&*class)),
        Object::NodeOverlay(read) => cluster.delete_node_overlay(name_of(&*read)),
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
        Object::Volume(v) => cluster.volumes_changed(|volumes| v.delete(volumes), now),
    }
}
