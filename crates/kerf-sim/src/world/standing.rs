//! A run that starts from a cluster as it stands (what `kerf plan` simulates): each
//! NodeClaim's instance running in the simulated cloud at its offering's price, its Node
//! registered as the cluster shows it, every pod bound where it runs, and each pod's
//! controller a workload that keeps its replicas (an evicted pod is made again, as its
//! ReplicaSet, StatefulSet or Job would). Kerf's controllers then start over it, as after
//! a restart: they read the NodeClaims' status, the Nodes and the pods.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use kerf_api::{NodeClaim, Taint, labels};
use kerf_core::cluster::PodOwner;
use kerf_core::observe::finished;
use kerf_core::workloads::PodNames;
use kerf_scheduling::resources::Resources;

use super::{StoredNodeClaim, Workload, World, api_server, owned_by, workload_key};
use crate::cloud::Instance;

/// The objects of a running cluster a run starts from.
#[derive(Clone, Debug, Default)]
pub struct Standing {
    /// NodeClaims, each with how old it was when the cluster was read (expiry counts
    /// from its creation, not from the run's start).
    pub nodeclaims: Vec<(NodeClaim, Duration)>,
    /// Nodes: those of the NodeClaims, and any other (a managed node group's), which
    /// take pods but are never Kerf's to launch or remove.
    pub nodes: Vec<Node>,
    /// Pods, bound or pending; finished ones are left out.
    pub pods: Vec<Pod>,
}

impl World {
    /// Puts the standing cluster in place at the start, before any event, and starts the
    /// controllers over it. What could not be placed is said in the returned notes (a
    /// NodeClaim without a Node yet, an instance type the region's catalog lacks).
    pub fn stand(&mut self, standing: Standing) -> Vec<String> {
        let mut notes = Vec::new();
        let oldest = standing.nodeclaims.iter().map(|(_, age)| *age).max();
        self.start_at(Duration::from_secs(
            oldest.unwrap_or_default().as_secs() + 1,
        ));
        let origin = self.tally.origin;
        let nodes: BTreeMap<String, Node> = (standing.nodes.into_iter())
            .filter_map(|n| Some((n.metadata.name.clone()?, n)))
            .collect();
        let mut placed: BTreeMap<String, ()> = BTreeMap::new();
        for (claim, age) in standing.nodeclaims {
            let name = claim.metadata.name.clone().unwrap_or_default();
            let status = claim.status.clone().unwrap_or_default();
            let node = (status.node_name.as_ref())
                .and_then(|n| nodes.get(n))
                .or_else(|| {
                    let id = status.provider_id.as_deref()?;
                    (nodes.values()).find(|n| provider_id(n) == Some(id))
                });
            let Some(node) = node else {
                notes.push(format!(
                    "nodeclaim {name} has no Node yet: left out, its pods are provisioned anew"
                ));
                continue;
            };
            let node_name = node.metadata.name.clone().unwrap_or_default();
            let Some(instance) = self.standing_instance(&claim, node, &mut notes) else {
                continue;
            };
            placed.insert(node_name.clone(), ());
            let deleting = claim.metadata.deletion_timestamp.is_some();
            self.api.nodeclaims.insert(
                name.clone(),
                StoredNodeClaim {
                    object: claim,
                    created: origin,
                    age,
                    deleting: deleting.then_some(origin),
                    node_registered: true,
                    asked: origin,
                },
            );
            let limit = (self
                .catalog(&class_of(&self.api.nodeclaims[&name].object))
                .iter())
            .find(|t| t.name() == instance.instance_type)
            .map(|t| t.ebs_attachments);
            if let Some(limit) = limit {
                self.api.csi_limits.insert(node_name.clone(), limit);
            }
            self.cloud
                .instances
                .insert(instance.provider_id.clone(), (name, instance));
        }
        for (name, class) in &self.api.objects.node_classes {
            let amis = (class.status.as_ref())
                .map(|s| s.amis.clone())
                .unwrap_or_default();
            if !amis.is_empty() {
                let terms =
                    serde_json::to_value(&class.spec.ami_selector_terms).unwrap_or_default();
                self.images.insert(name.clone(), (terms, amis));
            }
        }
        for (name, node) in &nodes {
            self.stand_node(name, node, placed.contains_key(name));
        }
        self.stand_pods(standing.pods);
        self.relist();
        notes
    }

    /// Moves the run's start to `origin` on the simulated clock: every event queued moves
    /// with it, and nothing is counted before it.
    fn start_at(&mut self, origin: Duration) {
        self.agenda.shift(origin);
        self.tally.origin = origin;
        self.now = origin;
        self.tally.last_accrual = origin;
    }

    /// The instance a standing NodeClaim runs on, priced as its offering is in the region's
    /// catalog; none (with a note) when its Node names no instance type.
    fn standing_instance(
        &mut self,
        claim: &NodeClaim,
        node: &Node,
        notes: &mut Vec<String>,
    ) -> Option<Instance> {
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        let node_labels = node.metadata.labels.clone().unwrap_or_default();
        let label = |key: &str| node_labels.get(key).cloned().unwrap_or_default();
        let instance_type = label(labels::INSTANCE_TYPE);
        if instance_type.is_empty() {
            notes.push(format!(
                "nodeclaim {name}: its Node has no {} label: left out",
                labels::INSTANCE_TYPE
            ));
            return None;
        }
        let (zone, capacity_type) = (label(labels::ZONE), label(labels::CAPACITY_TYPE));
        let catalog = self.catalog(&class_of(claim));
        let known = catalog.iter().find(|t| t.name() == instance_type);
        let price = known.and_then(|t| {
            (t.offerings.iter())
                .find(|o| o.zone == zone && o.capacity_type == capacity_type)
                .map(|o| o.price_per_hour)
        });
        if price.is_none() {
            notes.push(format!(
                "nodeclaim {name}: {instance_type} {capacity_type} in {zone} has no price in \
                 {}'s catalog: counted at $0/hour",
                self.scenario.spec.region
            ));
        }
        let status = node.status.clone().unwrap_or_default();
        let listed = |list: Option<
            &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >| {
            list.filter(|l| !l.is_empty())
                .map(|l| Resources::from_quantities(l.iter().map(|(k, q)| (k, q.0.as_str()))))
        };
        let allocatable = listed(status.allocatable.as_ref())
            .or_else(|| known.map(|t| t.allocatable.clone()))
            .unwrap_or_default();
        let capacity = listed(status.capacity.as_ref())
            .or_else(|| known.map(|t| t.capacity.clone()))
            .unwrap_or_default();
        let provider_id = provider_id(node)
            .map(str::to_string)
            .or_else(|| claim.status.as_ref()?.provider_id.clone())
            .unwrap_or_else(|| format!("aws:///{zone}/{name}"));
        Some(Instance {
            id: provider_id
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string(),
            provider_id,
            instance_type,
            zone,
            capacity_type,
            price_per_hour: price.unwrap_or(0.0),
            allocatable,
            capacity,
            labels: known.map(|t| t.labels.clone()).unwrap_or_default(),
            interrupted: false,
            reservation: node_labels.get(labels::CAPACITY_RESERVATION_ID).cloned(),
        })
    }

    /// A standing Node, registered and Ready as its conditions say, with its taints and
    /// other conditions; one that is Kerf's (`owned`) is counted by the node names drawn
    /// after it.
    fn stand_node(&mut self, name: &str, node: &Node, owned: bool) {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let spec = node.spec.clone().unwrap_or_default();
        // the API server's taints read as Karpenter's type holds them (an effect it does
        // not know is left out: no pod or decision reads it)
        let taints: Vec<Taint> = (spec.taints.iter().flatten())
            .filter_map(|t| serde_json::from_value(serde_json::to_value(t).ok()?).ok())
            .collect();
        let status = node.status.clone().unwrap_or_default();
        let amounts = |list: Option<
            &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >| {
            Resources::from_quantities(list.into_iter().flatten().map(|(k, q)| (k, q.0.as_str())))
        };
        let mut stored = api_server::StoredNode::registered(
            spec.provider_id.as_deref().unwrap_or_default(),
            labels,
            taints,
            amounts(status.allocatable.as_ref()),
            amounts(status.capacity.as_ref()),
            self.tally.origin,
        );
        stored.annotations = node.metadata.annotations.clone().unwrap_or_default();
        for c in status.conditions.iter().flatten() {
            if c.type_ == "Ready" {
                stored.ready = c.status == "True";
            } else {
                let reason = c.reason.clone().unwrap_or_default();
                (stored.conditions).push((
                    c.type_.clone(),
                    c.status.clone(),
                    reason,
                    Duration::ZERO,
                ));
            }
        }
        if status.conditions.is_none() {
            stored.ready = true;
        }
        self.api.nodes.create(name, stored);
        if owned {
            self.cloud.node_counter += 1;
        }
    }

    /// The standing pods: each controller-owned one under a workload of its controller,
    /// which makes it again if it goes, then bound where it runs.
    fn stand_pods(&mut self, pods: Vec<Pod>) {
        let mut workloads: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
        let mut loose = Vec::new();
        for mut pod in pods.into_iter().filter(|p| !finished(p)) {
            let namespace = kerf_scheduling::pods::namespace_of(&pod).to_string();
            let controller = (pod.metadata.owner_references.iter().flatten())
                .find(|o| o.controller == Some(true))
                .map(|o| (o.kind.clone(), o.name.clone()));
            match controller {
                Some((kind, owner))
                    if kerf_core::cluster::owner_of(&pod) != PodOwner::DaemonSet =>
                {
                    let wk = workload_key(&kind, &namespace, &owner);
                    pod.metadata.owner_references = owned_by(&kind, &wk);
                    workloads.entry(wk).or_default().push(pod);
                }
                _ => loose.push(pod),
            }
        }
        for (wk, pods) in workloads {
            let (kind, name) = {
                let mut parts = wk.splitn(3, '/');
                let kind = parts.next().unwrap_or_default().to_string();
                let _namespace = parts.next();
                (kind, parts.next().unwrap_or_default().to_string())
            };
            let template = template_of(&pods[0]);
            let claims = if kind == "StatefulSet" {
                claim_templates_of(&pods[0], &self.api.storage.list())
            } else {
                Vec::new()
            };
            let names = PodNames::new(&kind, &name, &template, self.scenario.spec.seed);
            let replicas = i64::try_from(pods.len()).unwrap_or(i64::MAX);
            self.workloads.specs.insert(
                wk,
                Workload {
                    kind,
                    template,
                    claims,
                    replicas,
                    next: pods.len() as u64,
                    names,
                },
            );
            loose.extend(pods);
        }
        for pod in loose {
            self.add_pod(pod);
        }
    }
}

impl World {
    /// The images a class of the standing cluster resolves to now: those it resolved to
    /// there while its AMI selector terms are the same, and others, one for each, once they
    /// changed (a new alias version, another name or id selects other images). None for a
    /// class the standing cluster had no images for.
    pub(super) fn images_now(&self, class: &str) -> Option<Vec<kerf_api::ec2nodeclass::AmiStatus>> {
        let (terms, amis) = self.images.get(class)?;
        let now = self.api.objects.node_classes.get(class)?;
        let now = serde_json::to_value(&now.spec.ami_selector_terms).unwrap_or_default();
        if &now == terms {
            return Some(amis.clone());
        }
        let selected = |ami: &kerf_api::ec2nodeclass::AmiStatus| {
            let text = format!("{now}/{}", ami.id);
            let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            let mut other = ami.clone();
            other.id = format!("ami-{:017x}", hash >> 4);
            other.name = None;
            other
        };
        Some(amis.iter().map(selected).collect())
    }
}

/// The EC2NodeClass a NodeClaim names.
fn class_of(claim: &NodeClaim) -> String {
    claim.spec.node_class_ref.name.clone()
}

/// A Node's `spec.providerID`.
fn provider_id(node: &Node) -> Option<&str> {
    node.spec.as_ref()?.provider_id.as_deref()
}

/// A pod as its controller's template would make it: no name, node, status or identity.
fn template_of(pod: &Pod) -> Pod {
    let mut template = pod.clone();
    let meta = &mut template.metadata;
    meta.name = None;
    meta.uid = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
    meta.managed_fields = None;
    meta.generate_name = None;
    if let Some(spec) = &mut template.spec {
        spec.node_name = None;
    }
    template.status = None;
    template
}

/// A StatefulSet's claim templates, read back from one of its pods: each volume whose
/// claim is named `<template>-<pod>` (the controller's naming) is a template of that
/// name, with the claim's spec as stored.
fn claim_templates_of(
    pod: &Pod,
    stored: &[kerf_core::workloads::VolumeObject],
) -> Vec<PersistentVolumeClaim> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let namespace = kerf_scheduling::pods::namespace_of(pod);
    let volumes = pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
    volumes
        .filter_map(|v| {
            let claim = &v.persistent_volume_claim.as_ref()?.claim_name;
            (claim.strip_suffix(pod_name)?.strip_suffix('-')? == v.name).then_some(claim)
        })
        .map(|claim| {
            let found = stored.iter().find_map(|o| match o {
                kerf_core::workloads::VolumeObject::Claim(c)
                    if c.metadata.name.as_deref() == Some(claim.as_str())
                        && c.metadata.namespace.as_deref().unwrap_or("default") == namespace =>
                {
                    Some((**c).clone())
                }
                _ => None,
            });
            let mut template = found.unwrap_or_default();
            let name = claim.strip_suffix(pod_name).unwrap_or(claim);
            template.metadata.name = Some(name.trim_end_matches('-').to_string());
            template.metadata.uid = None;
            template.metadata.resource_version = None;
            template.status = None;
            template
        })
        .collect()
}
