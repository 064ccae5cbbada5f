//! Volumes as scheduling sees them: where a pod's claims can be reached, and how many
//! volumes a node can attach.
//!
//! Topology, as Karpenter v1.15 does it: a claim bound to a PersistentVolume allows the
//! nodes one of the volume's `nodeAffinity` terms selects (hostname terms dropped for local
//! and hostPath volumes, which a new node cannot reach anyway); an unbound claim allows what
//! one of its StorageClass's `allowedTopologies` terms selects. A pod with several claims
//! gets every compatible combination of their terms as alternatives. They go on Kerf's copy
//! of the pod as an annotation ([`labels::VOLUME_TOPOLOGY`]) that the solver adds to the
//! pod's node affinity when placing it, but not when counting topology spread domains (as
//! kube-scheduler, which knows nothing of volumes there, counts them).
//!
//! Attachments: each claim a pod mounts takes one of its CSI driver's attachment slots on
//! the node (the driver from the bound volume, else from the class's provisioner, in-tree
//! names translated as Kubernetes does). They go on the copy as pod overhead in
//! [`labels::ATTACHABLE_VOLUMES`] resources, and a node offers what its CSINode publishes.
//!
//! Detachment: a deleted node's instance goes only once the VolumeAttachments of its
//! persistent volumes are gone (kube-controller-manager's attach-detach controller deletes
//! them once the volumes are detached), as Karpenter's termination waits for them.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kerf_api::labels;

/// One way a pod's volumes can all be reached: requirements a node must meet (none: any
/// node).
type Alternative = Vec<NodeSelectorRequirement>;

/// A claim as far as scheduling goes.
#[derive(Clone, Debug)]
struct Claim {
    volume: Option<String>,
    class: Option<String>,
}

/// A PersistentVolume as far as scheduling goes.
#[derive(Clone, Debug)]
struct Volume {
    alternatives: Vec<Alternative>,
    driver: Option<String>,
}

/// A StorageClass as far as scheduling goes.
#[derive(Clone, Debug)]
struct Class {
    alternatives: Vec<Alternative>,
    driver: String,
    /// `storageclass.kubernetes.io/is-default-class: "true"`: a claim that names no class
    /// gets this one (the API server's admission does it for claims it stores).
    default: bool,
    /// `volumeBindingMode: Immediate` (the default): the volume is made when the claim is.
    immediate: bool,
}

/// The claims, volumes, storage classes and CSINodes the cluster has.
#[derive(Clone, Debug, Default)]
pub struct Volumes {
    /// Claims by `namespace/name`.
    claims: BTreeMap<String, Claim>,
    volumes: BTreeMap<String, Volume>,
    classes: BTreeMap<String, Class>,
    /// By node: each CSI driver's attachment limit (`None`: the driver publishes none).
    nodes: BTreeMap<String, BTreeMap<String, Option<i64>>>,
    /// VolumeAttachments of persistent volumes, by name: the node each attaches to.
    attachments: BTreeMap<String, String>,
}

fn key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or("default"))
}

/// The CSI driver that serves an in-tree provisioner's volumes, as Kubernetes' CSI
/// migration maps them; a CSI provisioner's own name otherwise.
fn csi_driver(provisioner: &str) -> &str {
    match provisioner {
        "kubernetes.io/aws-ebs" => labels::EBS_CSI_DRIVER,
        "kubernetes.io/gce-pd" => "pd.csi.storage.gke.io",
        "kubernetes.io/azure-disk" => "disk.csi.azure.com",
        "kubernetes.io/azure-file" => "file.csi.azure.com",
        "kubernetes.io/cinder" => "cinder.csi.openstack.org",
        "kubernetes.io/vsphere-volume" => "csi.vsphere.vmware.com",
        "kubernetes.io/portworx-volume" => "pxd.portworx.com",
        other => other,
    }
}

impl Volumes {
    /// A claim as the API server has it.
    pub fn apply_claim(&mut self, pvc: &PersistentVolumeClaim) {
        let spec = pvc.spec.as_ref();
        let volume = spec
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty());
        let class = spec
            .and_then(|s| s.storage_class_name.clone())
            .filter(|c| !c.is_empty());
        let name = pvc.metadata.name.as_deref().unwrap_or_default();
        self.claims.insert(
            key(pvc.metadata.namespace.as_deref(), name),
            Claim { volume, class },
        );
    }

    /// A claim deleted.
    pub fn delete_claim(&mut self, namespace: Option<&str>, name: &str) {
        self.claims.remove(&key(namespace, name));
    }

    /// A PersistentVolume as the API server has it.
    pub fn apply_volume(&mut self, pv: &PersistentVolume) {
        let spec = pv.spec.as_ref();
        let node_local = spec.is_some_and(|s| s.local.is_some() || s.host_path.is_some());
        let terms = spec
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
            .map(|r| r.node_selector_terms.as_slice())
            .unwrap_or_default();
        let mut alternatives = Vec::new();
        for term in terms {
            let all = term.match_expressions.clone().unwrap_or_default();
            let kept: Alternative = all
                .iter()
                .filter(|e| !(node_local && e.key == labels::HOSTNAME))
                .cloned()
                .collect();
            // a hostname-only term of a local volume leaves the pod free
            if !kept.is_empty() || !all.is_empty() {
                alternatives.push(kept);
            }
        }
        let driver = spec.and_then(|s| {
            s.csi.as_ref().map(|c| c.driver.clone()).or_else(|| {
                s.aws_elastic_block_store
                    .as_ref()
                    .map(|_| labels::EBS_CSI_DRIVER.to_string())
            })
        });
        let name = pv.metadata.name.clone().unwrap_or_default();
        self.volumes.insert(
            name,
            Volume {
                alternatives,
                driver,
            },
        );
    }

    /// A PersistentVolume deleted.
    pub fn delete_volume(&mut self, name: &str) {
        self.volumes.remove(name);
    }

    /// A StorageClass as the API server has it.
    pub fn apply_class(&mut self, sc: &StorageClass) {
        let alternatives = sc
            .allowed_topologies
            .iter()
            .flatten()
            .filter_map(|t| {
                let reqs: Alternative = t
                    .match_label_expressions
                    .iter()
                    .flatten()
                    .map(|e| NodeSelectorRequirement {
                        key: e.key.clone(),
                        operator: "In".into(),
                        values: Some(e.values.clone()),
                    })
                    .collect();
                (!reqs.is_empty()).then_some(reqs)
            })
            .collect();
        let name = sc.metadata.name.clone().unwrap_or_default();
        self.classes.insert(
            name,
            Class {
                alternatives,
                driver: csi_driver(&sc.provisioner).to_string(),
                default: sc
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("storageclass.kubernetes.io/is-default-class"))
                    .is_some_and(|v| v == "true"),
                immediate: sc.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer"),
            },
        );
    }

    /// A StorageClass deleted.
    pub fn delete_class(&mut self, name: &str) {
        self.classes.remove(name);
    }

    /// A CSINode as the API server has it: the attachment limits of its node's drivers.
    pub fn apply_csi_node(&mut self, csi: &CSINode) {
        let drivers = csi
            .spec
            .drivers
            .iter()
            .map(|d| {
                let count = d.allocatable.as_ref().and_then(|a| a.count).map(i64::from);
                (d.name.clone(), count)
            })
            .collect();
        let name = csi.metadata.name.clone().unwrap_or_default();
        self.nodes.insert(name, drivers);
    }

    /// A CSINode deleted (its node is gone, or its drivers are).
    pub fn delete_csi_node(&mut self, name: &str) {
        self.nodes.remove(name);
    }

    /// A VolumeAttachment as the API server has it. One of an inline volume (no
    /// `spec.source.persistentVolumeName`) is not waited for, as Karpenter does not.
    pub fn apply_attachment(&mut self, va: &VolumeAttachment) {
        let name = va.metadata.name.clone().unwrap_or_default();
        if va.spec.source.persistent_volume_name.is_some() {
            self.attachments.insert(name, va.spec.node_name.clone());
        } else {
            self.attachments.remove(&name);
        }
    }

    /// A VolumeAttachment deleted: its volume is detached.
    pub fn delete_attachment(&mut self, name: &str) {
        self.attachments.remove(name);
    }

    /// The VolumeAttachments of persistent volumes still on a node, by name.
    pub fn attached_to(&self, node: &str) -> Vec<&str> {
        (self.attachments.iter())
            .filter(|(_, n)| *n == node)
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// The attachment limits a node's CSINode publishes, by driver (`None`: no limit), when
    /// the cluster has its CSINode.
    pub fn attach_limits(&self, node: &str) -> Option<&BTreeMap<String, Option<i64>>> {
        self.nodes.get(node)
    }

    /// Gives a node's allocatable its CSI attachment slots: those of its instance type
    /// (`by_type`, the type's allocatable as the scheduler sees it) until its CSINode is
    /// known, then what the CSINode publishes (a driver without a count takes any number).
    pub fn add_attach_slots(
        &self,
        node: Option<&str>,
        by_type: Option<&kerf_scheduling::resources::Resources>,
        allocatable: &mut kerf_scheduling::resources::Resources,
    ) {
        let slot = |driver: &str| format!("{}{driver}", labels::ATTACHABLE_VOLUMES);
        for (name, n) in by_type.into_iter().flat_map(|r| &r.extended) {
            if name.starts_with(labels::ATTACHABLE_VOLUMES) {
                allocatable.extended.insert(name.clone(), *n);
            }
        }
        for (driver, count) in node.and_then(|n| self.nodes.get(n)).into_iter().flatten() {
            match count {
                Some(c) => allocatable.extended.insert(slot(driver), *c),
                None => allocatable.extended.remove(&slot(driver)),
            };
        }
    }

    /// The class an unbound claim is provisioned by: its own, else the default one.
    fn class_of(&self, claim: &Claim) -> Option<&Class> {
        match &claim.class {
            Some(c) => self.classes.get(c),
            None => self.classes.values().find(|c| c.default),
        }
    }

    /// Whether a pod mounts a claim (its own, or a generic ephemeral volume's), so that its
    /// requirements may change with the volumes.
    pub fn mounts_claims(pod: &Pod) -> bool {
        !claims_of(pod).is_empty()
    }

    /// The ways a pod's volumes can all be reached (empty: anywhere). Alternatives that
    /// contradict themselves are dropped, unless every one does (then the pod fits nowhere,
    /// and says so when it is explained).
    pub fn requirements(&self, pod: &Pod) -> Vec<Alternative> {
        let namespace = pod.metadata.namespace.as_deref();
        let mut out: Vec<Alternative> = vec![Vec::new()];
        let mut constrained = false;
        for claim in claims_of(pod) {
            let Some(c) = self.claims.get(&key(namespace, &claim)) else {
                continue;
            };
            let alternatives = match &c.volume {
                Some(v) => self.volumes.get(v).map(|v| &v.alternatives),
                None => self.class_of(c).map(|c| &c.alternatives),
            };
            let Some(alternatives) = alternatives.filter(|a| !a.is_empty()) else {
                continue;
            };
            constrained = true;
            let all: Vec<(Alternative, bool)> = out
                .iter()
                .flat_map(|have| {
                    alternatives.iter().map(move |add| {
                        let ok = compatible(have, add);
                        (have.iter().chain(add).cloned().collect(), ok)
                    })
                })
                .collect();
            let any_ok = all.iter().any(|(_, ok)| *ok);
            out = all
                .into_iter()
                .filter(|(_, ok)| *ok || !any_ok)
                .map(|(a, _)| a)
                .collect();
        }
        if constrained { out } else { Vec::new() }
    }

    /// Why a node cannot be planned for the pod yet, as Karpenter v1.15 checks a pod's
    /// claims before scheduling it (it ignores the pod until they are right): a claim the
    /// cluster does not have, a bound claim whose volume it does not have, an unbound claim
    /// without a class or with one it does not have, or an unbound claim of an `Immediate`
    /// class (its volume must be made first).
    pub fn problem(&self, pod: &Pod) -> Option<String> {
        let namespace = pod.metadata.namespace.as_deref();
        claims_of(pod).into_iter().find_map(|claim| {
            let k = key(namespace, &claim);
            let Some(c) = self.claims.get(&k) else {
                return Some(format!("persistentvolumeclaim {k} not found"));
            };
            match &c.volume {
                Some(v) if !self.volumes.contains_key(v) => Some(format!(
                    "persistentvolumeclaim {k} is bound to persistentvolume {v}, which is not found"
                )),
                Some(_) => None,
                None => match (&c.class, self.class_of(c)) {
                    (None, None) => Some(format!(
                        "persistentvolumeclaim {k} is unbound and names no storage class"
                    )),
                    (Some(name), None) => Some(format!(
                        "persistentvolumeclaim {k}: storage class {name} not found"
                    )),
                    (_, Some(class)) if class.immediate => Some(format!(
                        "persistentvolumeclaim {k}: pvc with immediate volume binding mode must be bound"
                    )),
                    _ => None,
                },
            }
        })
    }

    /// What each claim of the pod asks of a node, a line each, for `kerf explain`.
    pub fn describe(&self, pod: &Pod) -> Vec<String> {
        let namespace = pod.metadata.namespace.as_deref();
        let text = |alternatives: &[Alternative]| -> String {
            let terms: Vec<String> = alternatives
                .iter()
                .map(|a| {
                    let reqs: Vec<String> = a
                        .iter()
                        .map(|r| {
                            let values = r.values.as_deref().unwrap_or_default().join(" ");
                            format!("{} {} [{values}]", r.key, r.operator)
                        })
                        .collect();
                    reqs.join(", ")
                })
                .collect();
            match terms.len() {
                0 => "any node".to_string(),
                _ => terms.join(", or "),
            }
        };
        claims_of(pod)
            .into_iter()
            .map(|claim| {
                let Some(c) = self.claims.get(&key(namespace, &claim)) else {
                    return format!("claim {claim}: not found; it asks nothing until it exists");
                };
                match &c.volume {
                    Some(v) => match self.volumes.get(v) {
                        Some(pv) => format!(
                            "claim {claim}: bound to PersistentVolume {v}, reached from {}",
                            text(&pv.alternatives)
                        ),
                        None => format!("claim {claim}: bound to PersistentVolume {v}, not found"),
                    },
                    None => match self.class_of(c) {
                        Some(sc) => format!(
                            "claim {claim}: unbound; its class ({}) provisions where {}",
                            c.class.as_deref().unwrap_or("the default"),
                            text(&sc.alternatives)
                        ),
                        None => format!("claim {claim}: unbound, with no class the cluster has"),
                    },
                }
            })
            .collect()
    }

    /// How many attachment slots of each CSI driver a pod's claims take.
    pub fn attachments(&self, pod: &Pod) -> BTreeMap<String, i64> {
        let namespace = pod.metadata.namespace.as_deref();
        let mut by_driver: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for claim in claims_of(pod) {
            let k = key(namespace, &claim);
            let Some(c) = self.claims.get(&k) else {
                continue;
            };
            let driver = match &c.volume {
                Some(v) => self.volumes.get(v).and_then(|v| v.driver.clone()),
                None => self.class_of(c).map(|c| c.driver.clone()),
            };
            if let Some(d) = driver {
                by_driver.entry(d).or_default().insert(k);
            }
        }
        by_driver
            .into_iter()
            .map(|(d, claims)| (d, i64::try_from(claims.len()).unwrap_or(i64::MAX)))
            .collect()
    }

    /// The pod as it is scheduled: its volumes' topology as the [`labels::VOLUME_TOPOLOGY`]
    /// annotation, its attachments as overhead. Unchanged when its volumes are not known
    /// or ask nothing.
    pub fn inject(&self, mut pod: Pod) -> Pod {
        let alternatives = self.requirements(&pod);
        let attachments = self.attachments(&pod);
        if !alternatives.is_empty() {
            let text = serde_json::to_string(&alternatives).unwrap_or_default();
            pod.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(labels::VOLUME_TOPOLOGY.to_string(), text);
        }
        if let Some(spec) = pod.spec.as_mut().filter(|_| !attachments.is_empty()) {
            let overhead = spec.overhead.get_or_insert_with(BTreeMap::new);
            for (driver, n) in attachments {
                let name = format!("{}{driver}", labels::ATTACHABLE_VOLUMES);
                overhead.insert(name, Quantity(n.to_string()));
            }
        }
        pod
    }
}

/// Whether two sets of requirements can hold at once: no key is asked for values the other
/// rules out (`In` lists that share nothing, or an `In` list wholly excluded by `NotIn`).
fn compatible(a: &[NodeSelectorRequirement], b: &[NodeSelectorRequirement]) -> bool {
    let values = |r: &NodeSelectorRequirement| -> BTreeSet<String> {
        r.values.iter().flatten().cloned().collect()
    };
    a.iter().all(|x| {
        b.iter().filter(|y| y.key == x.key).all(|y| {
            match (x.operator.as_str(), y.operator.as_str()) {
                ("In", "In") => !values(x).is_disjoint(&values(y)),
                ("In", "NotIn") => !values(x).is_subset(&values(y)),
                ("NotIn", "In") => !values(y).is_subset(&values(x)),
                ("In", "DoesNotExist") | ("DoesNotExist", "In") => false,
                _ => true,
            }
        })
    })
}

/// The claims a pod's volumes name: `persistentVolumeClaim.claimName`, and for a generic
/// ephemeral volume the claim Kubernetes makes for it (`<pod>-<volume>`).
fn claims_of(pod: &Pod) -> Vec<String> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(c), _) => Some(c.claim_name.clone()),
            (None, Some(_)) => Some(format!("{name}-{}", v.name)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_scheduling::resources::Resources;

    fn object<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    /// The alternatives on the pod, each as the zones it allows.
    fn zones_of(pod: &Pod) -> Vec<Vec<String>> {
        let Some(text) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::VOLUME_TOPOLOGY))
        else {
            return Vec::new();
        };
        let alternatives: Vec<Alternative> = serde_json::from_str(text).unwrap();
        alternatives
            .iter()
            .map(|a| {
                a.iter()
                    .filter(|r| r.key == labels::ZONE)
                    .flat_map(|r| r.values.iter().flatten().cloned())
                    .collect()
            })
            .collect()
    }

    fn cluster_volumes() -> Volumes {
        let mut v = Volumes::default();
        v.apply_claim(&object(serde_json::json!({
            "metadata": {"name": "data-db-0", "namespace": "db"},
            "spec": {"volumeName": "pv-1", "storageClassName": "gp3"}})));
        v.apply_volume(&object(serde_json::json!({
            "metadata": {"name": "pv-1"},
            "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1c"]}]}]}}}})));
        v.apply_claim(&object(serde_json::json!({
            "metadata": {"name": "cache-web-0", "namespace": "db"},
            "spec": {"storageClassName": "zonal"}})));
        v.apply_class(&object(serde_json::json!({
            "metadata": {"name": "zonal"}, "provisioner": "kubernetes.io/aws-ebs",
            "allowedTopologies": [
                {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["us-east-1b"]}]},
                {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["us-east-1c"]}]}]})));
        v
    }

    fn pod(claims: &[&str]) -> Pod {
        let volumes: Vec<serde_json::Value> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| serde_json::json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        object(serde_json::json!({
            "metadata": {"name": "p", "namespace": "db"},
            "spec": {"containers": [{"name": "c"}], "volumes": volumes}}))
    }

    #[test]
    fn a_bound_claim_pins_the_pod_to_its_volumes_zone_and_an_unbound_one_to_its_class() {
        let v = cluster_volumes();
        assert_eq!(zones_of(&v.inject(pod(&["data-db-0"]))), [["us-east-1c"]]);
        // every term of the class is an alternative
        assert_eq!(
            zones_of(&v.inject(pod(&["cache-web-0"]))),
            [["us-east-1b"], ["us-east-1c"]]
        );
        // two claims: only the combinations that can hold together
        assert_eq!(
            zones_of(&v.inject(pod(&["data-db-0", "cache-web-0"]))),
            [["us-east-1c", "us-east-1c"]]
        );
        // a claim the cluster does not have (yet) requires nothing
        assert!(zones_of(&v.inject(pod(&["other"]))).is_empty());
        // the pod's own affinity is left as it was declared
        let injected = v.inject(pod(&["data-db-0"]));
        assert!(injected.spec.as_ref().unwrap().affinity.is_none());
    }

    #[test]
    fn each_claim_takes_an_attachment_slot_of_its_driver_and_a_csinode_sets_the_nodes_slots() {
        let mut v = cluster_volumes();
        let injected = v.inject(pod(&["data-db-0", "cache-web-0", "other"]));
        let overhead = injected.spec.unwrap().overhead.unwrap();
        let slot = format!("{}{}", labels::ATTACHABLE_VOLUMES, labels::EBS_CSI_DRIVER);
        // the bound volume's CSI driver and the in-tree class's translated one are the same
        assert_eq!(overhead[&slot].0, "2");

        let by_type = Resources {
            extended: [(slot.clone(), 26)].into(),
            ..Resources::default()
        };
        let mut a = Resources::default();
        v.add_attach_slots(Some("n1"), Some(&by_type), &mut a);
        assert_eq!(
            a.extended[&slot], 26,
            "the instance type's until the CSINode is known"
        );
        v.apply_csi_node(&object(serde_json::json!({
            "metadata": {"name": "n1"},
            "spec": {"drivers": [
                {"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25}},
                {"name": "efs.csi.aws.com", "nodeID": "i-1"}]}})));
        let mut a = Resources {
            extended: [(format!("{}efs.csi.aws.com", labels::ATTACHABLE_VOLUMES), 3)].into(),
            ..Resources::default()
        };
        v.add_attach_slots(Some("n1"), Some(&by_type), &mut a);
        assert_eq!(a.extended[&slot], 25);
        assert_eq!(
            a.extended.len(),
            1,
            "a driver without a count takes any number"
        );
    }

    #[test]
    fn a_local_volumes_hostname_is_no_requirement() {
        let mut v = Volumes::default();
        v.apply_claim(&object(serde_json::json!({
            "metadata": {"name": "local", "namespace": "db"}, "spec": {"volumeName": "pv-l"}})));
        v.apply_volume(&object(serde_json::json!({
            "metadata": {"name": "pv-l"},
            "spec": {"local": {"path": "/mnt"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n9"]}]}]}}}})));
        assert_eq!(zones_of(&v.inject(pod(&["local"]))), [Vec::<String>::new()]);
    }
}
