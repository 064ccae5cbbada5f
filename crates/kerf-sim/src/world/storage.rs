//! The simulated cluster's storage, as the API server and the controllers around it keep it:
//! claims, volumes and classes as stored objects; the StatefulSet controller's claims, made
//! before their pod; and the CSI provisioner, which makes a volume in the zone of the node a
//! `WaitForFirstConsumer` claim's pod was bound to (an `Immediate` one at once, in a zone
//! its class allows) and binds the claim to it.
//!
//! Kept apart from Kerf's own record of volumes (`kerf_core::volumes`): the binder judges
//! placements from these raw objects, so a pod Kerf put where its volume cannot follow stays
//! pending and the checks see it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, Pod, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::labels;
use kerf_core::workloads::VolumeObject;

use crate::kube_scheduler::{Storage, claims_of};

/// Stored claims (by `namespace/name`), volumes and classes.
#[derive(Debug, Default)]
pub(crate) struct Stored {
    pub claims: BTreeMap<String, PersistentVolumeClaim>,
    pub volumes: BTreeMap<String, PersistentVolume>,
    pub classes: BTreeMap<String, StorageClass>,
    /// The simulated nodes' CSINodes (their EBS attachment limits), by node.
    pub csi_nodes: BTreeMap<String, k8s_openapi::api::storage::v1::CSINode>,
}

fn claim_key(c: &PersistentVolumeClaim) -> String {
    format!(
        "{}/{}",
        c.metadata.namespace.as_deref().unwrap_or("default"),
        c.metadata.name.as_deref().unwrap_or_default()
    )
}

impl Stored {
    /// Stores an object the scenario declares.
    pub fn store(&mut self, object: &VolumeObject) {
        match object {
            VolumeObject::Claim(c) => {
                self.claims.insert(claim_key(c), (**c).clone());
            }
            VolumeObject::Volume(v) => {
                let name = v.metadata.name.clone().unwrap_or_default();
                self.volumes.insert(name, (**v).clone());
            }
            VolumeObject::Class(c) => {
                let name = c.metadata.name.clone().unwrap_or_default();
                self.classes.insert(name, (**c).clone());
            }
            VolumeObject::CsiNode(c) => {
                let name = c.metadata.name.clone().unwrap_or_default();
                self.csi_nodes.insert(name, (**c).clone());
            }
            // the simulated world runs no attach-detach controller, which alone would
            // delete one: a scenario's manifests cannot declare them (see `workloads`)
            VolumeObject::Attachment(_) => {}
        }
    }

    /// Every stored object, as a relist delivers them.
    pub fn list(&self) -> Vec<VolumeObject> {
        let claims = (self.claims.values()).map(|c| VolumeObject::Claim(Box::new(c.clone())));
        let volumes = (self.volumes.values()).map(|v| VolumeObject::Volume(Box::new(v.clone())));
        let classes = (self.classes.values()).map(|c| VolumeObject::Class(Box::new(c.clone())));
        let csi = (self.csi_nodes.values()).map(|c| VolumeObject::CsiNode(Box::new(c.clone())));
        classes.chain(volumes).chain(claims).chain(csi).collect()
    }

    /// The stored objects as the binder reads them.
    pub fn view(&self) -> Storage<'_> {
        Storage {
            claims: &self.claims,
            volumes: &self.volumes,
            classes: &self.classes,
        }
    }

    /// The class of a claim: its own, else the default one.
    fn class_of(&self, claim: &PersistentVolumeClaim) -> Option<&StorageClass> {
        self.view().class_of(claim)
    }

    /// A claim the StatefulSet controller makes; an `Immediate` class provisions its volume
    /// at once (`pick` chooses among the zones allowed). Returns the objects that changed.
    pub fn create_claim(
        &mut self,
        claim: PersistentVolumeClaim,
        zones: &[String],
        pick: impl FnOnce(usize) -> usize,
    ) -> Vec<VolumeObject> {
        let key = claim_key(&claim);
        if self.claims.contains_key(&key) {
            return Vec::new();
        }
        self.claims.insert(key.clone(), claim.clone());
        let mut changed = vec![VolumeObject::Claim(Box::new(claim.clone()))];
        let immediate = self
            .class_of(&claim)
            .is_some_and(|c| c.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer"));
        if immediate {
            let allowed: Vec<String> = match self.allowed_zones(&claim) {
                Some(z) => z,
                None => zones.to_vec(),
            };
            if !allowed.is_empty() {
                let zone = allowed[pick(allowed.len()) % allowed.len()].clone();
                changed.extend(self.provision(&key, &zone));
            }
        }
        changed
    }

    /// The zones a claim's class allows, when it lists them.
    fn allowed_zones(&self, claim: &PersistentVolumeClaim) -> Option<Vec<String>> {
        let class = self.class_of(claim)?;
        let zones: Vec<String> = class
            .allowed_topologies
            .iter()
            .flatten()
            .flat_map(|t| t.match_label_expressions.iter().flatten())
            .filter(|e| e.key == labels::ZONE)
            .flat_map(|e| e.values.iter().cloned())
            .collect();
        (!zones.is_empty()).then_some(zones)
    }

    /// The pod was bound to a node in `zone`: its unbound claims get their volumes there.
    pub fn pod_bound(&mut self, pod: &Pod, zone: &str) -> Vec<VolumeObject> {
        let mut changed = Vec::new();
        for key in claims_of(pod) {
            let unbound = self.claims.get(&key).is_some_and(|c| {
                c.spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .is_none_or(str::is_empty)
            });
            if unbound {
                changed.extend(self.provision(&key, zone));
            }
        }
        changed
    }

    /// Makes the claim's volume in `zone` (the class's driver, or EBS) and binds the claim.
    fn provision(&mut self, key: &str, zone: &str) -> Vec<VolumeObject> {
        let Some(claim) = self.claims.get(key) else {
            return Vec::new();
        };
        let driver = self
            .class_of(claim)
            .map_or(labels::EBS_CSI_DRIVER, |c| c.provisioner.as_str())
            .to_string();
        let name = format!("pvc-{}", key.replace('/', "-"));
        let pv = PersistentVolume {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeSpec {
                csi: Some(CSIPersistentVolumeSource {
                    driver,
                    volume_handle: format!("vol-{name}"),
                    ..CSIPersistentVolumeSource::default()
                }),
                node_affinity: Some(VolumeNodeAffinity {
                    required: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: labels::ZONE.into(),
                                operator: "In".into(),
                                values: Some(vec![zone.to_string()]),
                            }]),
                            match_fields: None,
                        }],
                    }),
                }),
                ..PersistentVolumeSpec::default()
            }),
            status: None,
        };
        self.volumes.insert(name.clone(), pv.clone());
        let claim = self.claims.get_mut(key).expect("looked up above");
        claim.spec.get_or_insert_with(Default::default).volume_name = Some(name);
        vec![
            VolumeObject::Volume(Box::new(pv)),
            VolumeObject::Claim(Box::new(claim.clone())),
        ]
    }
}
