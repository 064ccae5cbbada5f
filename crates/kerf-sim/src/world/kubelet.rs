//! The kubelets of the simulated cloud's instances, and the node agents beside them: a
//! kubelet registers its Node (with the taints its user data gives it, and the EBS CSI
//! driver's CSINode), reports it Ready (its agents removing the startup taints), and a
//! node monitoring agent sets the conditions a scenario's faults ask for. They write to the
//! API server only.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::CSINode;
use kerf_api::{Taint, labels};
use kerf_core::controllers::provisioning::node_labels;
use kerf_core::nodepools::daemon_runs_on;
use kerf_core::workloads::VolumeObject;
use serde_json::json;

use super::api_server::{ApiServer, StoredNode};
use super::{node_settings, owned_by};
use crate::cloud::Cloud;
use crate::scenario::NodeConditionFault;

/// A Node a kubelet registered, as the API server now stores it.
pub(super) struct Registered {
    /// The Node's name.
    pub name: String,
    /// The taints its NodeClaim's spec asked for (not its startup taints).
    pub spec_taints: Vec<Taint>,
    /// Its CSINode, stored with it, when its instance type has an EBS attachment limit.
    pub csi: Option<VolumeObject>,
    /// The DaemonSets' pods that run on it, to be made and bound at once.
    pub daemon_pods: Vec<Pod>,
}

/// The kubelet of the instance `provider_id` registers its Node at `now`: with the stored
/// NodeClaim's taints, its startup taints and the registration taint (as Karpenter's user
/// data registers it), the NodePool's labels and the instance's. None when the instance,
/// its NodeClaim or its NodePool is gone.
pub(super) fn register(
    api: &mut ApiServer,
    cloud: &mut Cloud,
    provider_id: &str,
    region: &str,
    now: Duration,
) -> Option<Registered> {
    let (claim_name, instance) = cloud.instances.get(provider_id)?;
    let launched = instance.launched(region);
    let claim = api.nodeclaims.get_mut(claim_name)?;
    let pool = (claim.pool()).and_then(|p| api.objects.node_pools.get(p))?;
    let spec = &claim.object.spec;
    let spec_taints = spec.taints.clone();
    let mut taints: Vec<Taint> = (spec.taints.iter())
        .chain(&spec.startup_taints)
        .cloned()
        .collect();
    taints.push(kerf_core::cluster::unregistered_taint());
    claim.node_registered = true;
    cloud.node_counter += 1;
    let n = cloud.node_counter;
    let domain = if region == "us-east-1" { "ec2" } else { region };
    let name = format!(
        "ip-10-{}-{}-{}.{domain}.compute.internal",
        n / 65536 % 256,
        n / 256 % 256,
        n % 256,
    );
    let labels = node_labels(&launched, pool, &name);
    // the EBS CSI driver's node plugin publishes the node's attachment limit
    let class = &pool.spec.template.spec.node_class_ref.name;
    let limit = (cloud
        .catalog(class, region, || node_settings(api, class))
        .iter())
    .find(|t| t.name() == launched.instance_type)
    .map(|t| t.ebs_attachments);
    let csi = limit.map(|limit| {
        api.csi_limits.insert(name.clone(), limit);
        let csi: CSINode = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"drivers": [{"name": labels::EBS_CSI_DRIVER, "nodeID": launched.provider_id,
                "allocatable": {"count": limit}}]},
        }))
        .expect("a well-formed CSINode");
        let csi = VolumeObject::CsiNode(Box::new(csi));
        api.storage.store(&csi);
        csi
    });
    // daemonset pods start on the node as soon as it registers
    let daemon_pods = (api.objects.daemonsets.iter())
        .filter(|(_, template)| daemon_runs_on(template, &labels, &taints))
        .map(|(ds, template)| {
            let mut pod = template.clone();
            let ds_name = ds.rsplit('/').next().unwrap_or("");
            pod.metadata.name = Some(format!("{ds_name}-{n}"));
            pod.metadata.owner_references = owned_by("DaemonSet", ds);
            pod
        })
        .collect();
    let stored = StoredNode::registered(
        provider_id,
        labels,
        taints,
        launched.allocatable.clone(),
        launched.capacity.clone(),
        now,
    );
    api.nodes.create(&name, stored);
    Some(Registered {
        name,
        spec_taints,
        csi,
        daemon_pods,
    })
}

/// The kubelet reports the Node Ready at `now` and the node's agents remove its startup
/// taints (its stored NodeClaim's, which its user data registered it with). Whether the
/// Node was written.
pub(super) fn ready(api: &mut ApiServer, cloud: &Cloud, node: &str, now: Duration) -> bool {
    let claim = (api.nodes.get(node))
        .and_then(|n| cloud.instances.get(&n.provider_id))
        .and_then(|(claim, _)| api.nodeclaims.get(claim));
    let startup: Vec<String> = (claim.iter())
        .flat_map(|c| &c.object.spec.startup_taints)
        .map(|t| t.key.clone())
        .collect();
    api.nodes.update(node, |n| {
        n.ready = true;
        n.ready_changed = now;
        n.taints.retain(|t| !startup.contains(&t.key));
        true
    })
}

/// A scenario's node fault at `now`: the condition set (or changed) on the first nodes by
/// name, of its NodePool when it names one. A `Ready` condition is the kubelet's own. The
/// Nodes written.
pub(super) fn set_condition(
    api: &mut ApiServer,
    c: &NodeConditionFault,
    now: Duration,
) -> Vec<String> {
    let names: Vec<String> = (api.nodes.iter())
        .filter(|(_, n)| {
            (c.node_pool.as_ref()).is_none_or(|p| n.labels.get(labels::NODEPOOL) == Some(p))
        })
        .map(|(name, _)| name.clone())
        .take(c.nodes as usize)
        .collect();
    let mut written = Vec::new();
    for name in names {
        let wrote = api.nodes.update(&name, |n| {
            if c.kind == "Ready" {
                let ready = c.status == "True";
                if n.ready != ready {
                    n.ready_changed = now;
                }
                n.ready = ready;
                return true;
            }
            n.conditions
                .retain(|(kind, status, _, _)| kind != &c.kind || status == &c.status);
            match n.conditions.iter_mut().find(|(kind, ..)| kind == &c.kind) {
                Some(existing) => existing.2.clone_from(&c.reason),
                None => {
                    (n.conditions).push((c.kind.clone(), c.status.clone(), c.reason.clone(), now))
                }
            }
            true
        });
        if wrote {
            written.push(name);
        }
    }
    written
}
