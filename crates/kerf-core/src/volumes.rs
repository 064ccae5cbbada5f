//! Volume topology: a pod whose PersistentVolumeClaim is bound to a volume that only some
//! nodes reach (an EBS volume lives in one zone) can only run on those nodes, and one whose
//! claim waits for its first consumer can only run where its StorageClass allows. As
//! Karpenter does, the requirements of the pod's volumes are added to every term of its
//! required node affinity before it is scheduled: from the bound PersistentVolume's
//! `spec.nodeAffinity` (its first term), else from the claim's StorageClass's
//! `allowedTopologies` (its first term).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;

/// The claims, volumes and storage classes the cluster has, as far as topology goes.
#[derive(Clone, Debug, Default)]
pub struct Volumes {
    /// Claims by `namespace/name`: the volume they are bound to, their storage class.
    claims: BTreeMap<String, (Option<String>, Option<String>)>,
    /// What each PersistentVolume requires of a node.
    volumes: BTreeMap<String, Vec<NodeSelectorRequirement>>,
    /// What each StorageClass allows.
    classes: BTreeMap<String, Vec<NodeSelectorRequirement>>,
}

fn key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or("default"))
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
            (volume, class),
        );
    }

    /// A claim deleted.
    pub fn delete_claim(&mut self, namespace: Option<&str>, name: &str) {
        self.claims.remove(&key(namespace, name));
    }

    /// A PersistentVolume as the API server has it.
    pub fn apply_volume(&mut self, pv: &PersistentVolume) {
        let first = pv
            .spec
            .as_ref()
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
            .and_then(|r| r.node_selector_terms.first())
            .and_then(|t| t.match_expressions.clone())
            .unwrap_or_default();
        let name = pv.metadata.name.clone().unwrap_or_default();
        self.volumes.insert(name, first);
    }

    /// A PersistentVolume deleted.
    pub fn delete_volume(&mut self, name: &str) {
        self.volumes.remove(name);
    }

    /// A StorageClass as the API server has it.
    pub fn apply_class(&mut self, sc: &StorageClass) {
        let first = sc
            .allowed_topologies
            .iter()
            .flatten()
            .next()
            .and_then(|t| t.match_label_expressions.as_ref())
            .map(|es| {
                es.iter()
                    .map(|e| NodeSelectorRequirement {
                        key: e.key.clone(),
                        operator: "In".into(),
                        values: Some(e.values.clone()),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let name = sc.metadata.name.clone().unwrap_or_default();
        self.classes.insert(name, first);
    }

    /// A StorageClass deleted.
    pub fn delete_class(&mut self, name: &str) {
        self.classes.remove(name);
    }

    /// Whether a pod mounts a claim (its own, or a generic ephemeral volume's), so that its
    /// requirements may change with the volumes.
    pub fn mounts_claims(pod: &Pod) -> bool {
        !claims_of(pod).is_empty()
    }

    /// What the pod's volumes require of a node.
    pub fn requirements(&self, pod: &Pod) -> Vec<NodeSelectorRequirement> {
        let namespace = pod.metadata.namespace.as_deref();
        let mut out = Vec::new();
        for claim in claims_of(pod) {
            let Some((volume, class)) = self.claims.get(&key(namespace, &claim)) else {
                continue;
            };
            let found = match (volume, class) {
                (Some(v), _) => self.volumes.get(v),
                (None, Some(c)) => self.classes.get(c),
                (None, None) => None,
            };
            out.extend(found.into_iter().flatten().cloned());
        }
        out
    }

    /// The pod as it is scheduled: its volumes' requirements added to every term of its
    /// required node affinity (one term of only them when it has none). Unchanged when its
    /// volumes require nothing.
    pub fn inject(&self, mut pod: Pod) -> Pod {
        let reqs = self.requirements(&pod);
        if reqs.is_empty() {
            return pod;
        }
        let Some(spec) = pod.spec.as_mut() else {
            return pod;
        };
        let required = spec
            .affinity
            .get_or_insert_with(Affinity::default)
            .node_affinity
            .get_or_insert_with(NodeAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(NodeSelector::default);
        if required.node_selector_terms.is_empty() {
            required
                .node_selector_terms
                .push(NodeSelectorTerm::default());
        }
        for term in &mut required.node_selector_terms {
            term.match_expressions
                .get_or_insert_with(Vec::new)
                .extend(reqs.iter().cloned());
        }
        pod
    }
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

    fn object<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn zone_of(pod: &Pod) -> Vec<String> {
        pod.spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|r| {
                r.node_selector_terms
                    .iter()
                    .map(|t| serde_json::to_string(&t.match_expressions).unwrap())
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn a_bound_claim_pins_the_pod_to_its_volumes_zone_and_an_unbound_one_to_its_class() {
        let mut v = Volumes::default();
        v.apply_claim(&object(serde_json::json!({
            "metadata": {"name": "data-db-0", "namespace": "db"},
            "spec": {"volumeName": "pv-1", "storageClassName": "gp3"}})));
        v.apply_volume(&object(serde_json::json!({
            "metadata": {"name": "pv-1"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1c"]}]}]}}}})));
        v.apply_claim(&object(serde_json::json!({
            "metadata": {"name": "cache-web-0", "namespace": "db"},
            "spec": {"storageClassName": "zonal"}})));
        v.apply_class(&object(serde_json::json!({
            "metadata": {"name": "zonal"}, "provisioner": "ebs.csi.aws.com",
            "allowedTopologies": [{"matchLabelExpressions": [
                {"key": "topology.kubernetes.io/zone", "values": ["us-east-1b"]}]}]})));
        let pod = |claim: &str, affinity: serde_json::Value| -> Pod {
            object(serde_json::json!({
                "metadata": {"name": "p", "namespace": "db"},
                "spec": {"containers": [{"name": "c"}], "affinity": affinity,
                    "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]}}))
        };
        let bound = v.inject(pod("data-db-0", serde_json::Value::Null));
        assert_eq!(
            zone_of(&bound),
            [r#"[{"key":"topology.kubernetes.io/zone","operator":"In","values":["us-east-1c"]}]"#]
        );
        // every term of the pod's own affinity gets it
        let own = serde_json::json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                                   {"matchExpressions": [{"key": "b", "operator": "Exists"}]}]}}});
        let both = v.inject(pod("data-db-0", own));
        assert!(
            zone_of(&both).iter().all(|t| t.contains("us-east-1c")),
            "{:?}",
            zone_of(&both)
        );
        assert_eq!(zone_of(&both).len(), 2);
        let waiting = v.inject(pod("cache-web-0", serde_json::Value::Null));
        assert!(zone_of(&waiting)[0].contains("us-east-1b"));
        // a claim the cluster does not have (yet) requires nothing
        assert!(zone_of(&v.inject(pod("other", serde_json::Value::Null))).is_empty());
    }
}
