//! What the watches saw, handed to the controllers' one way in
//! ([`Controllers::observe`]).

use std::sync::Arc;
use std::time::Duration;

use kerf_core::controllers::Controllers;
use kerf_core::observe::{Object, Observation, namespaced_key};
use kerf_scheduling::pods::pod_key;
use kube::Resource;

use crate::kwok_types;
use crate::watch::{self, Observed};

/// Hands one observation to the controllers.
pub fn apply(core: &mut Controllers, observed: Observed, now: Duration) {
    let observation = match observed {
        Observed::Applied(object) => match applied(object) {
            Some(object) => Observation::Applied(object),
            None => return,
        },
        Observed::Deleted(object) => {
            let (kind, key) = identity(&object);
            Observation::Deleted { kind, key }
        }
        Observed::Gone(kind, key) => Observation::Deleted {
            kind: kind.to_string(),
            key,
        },
        Observed::Notice(notice) => Observation::Notice(notice),
        Observed::ZonalShifts(zones) => Observation::ZonalShifts(zones),
        Observed::OfferingsChanged => Observation::OfferingsChanged,
        Observed::Synced(_) | Observed::Failed(..) => return,
    };
    core.observe(observation, now);
}

/// The core's form of a watched object; none for one that says nothing to the controllers
/// (a DaemonSet whose template does not read).
fn applied(object: watch::Object) -> Option<Object> {
    Some(match object {
        watch::Object::Pod(pod) => Object::Pod(pod),
        watch::Object::Node(node) => Object::Node(node),
        watch::Object::NodeClaim(read) => Object::NodeClaim(Arc::clone(&read.read)),
        watch::Object::NodePool(read) => Object::NodePool(Arc::clone(&read.read)),
        watch::Object::NodeClass(read) => Object::NodeClass(Arc::clone(&read.read)),
        watch::Object::NodeOverlay(read) => Object::NodeOverlay(Arc::clone(&read.read)),
        // Karpenter's kwok provider's node class stands for an EC2NodeClass with defaults
        watch::Object::KwokNodeClass(class) => {
            Object::node_class(kwok_types::node_class_record(&class)?)
        }
        watch::Object::DaemonSet(ds) => Object::daemonset(&ds)?,
        watch::Object::Pdb(pdb) => Object::Pdb(pdb),
        watch::Object::Volume(v) => Object::Volume(v),
        watch::Object::CapacityBuffer(read) => Object::CapacityBuffer(Arc::clone(&read.read)),
        watch::Object::Shape {
            kind: "PodTemplate",
            key,
            template,
        } => Object::PodTemplate { key, template },
        watch::Object::Shape {
            kind,
            key,
            template,
        } => Object::Workload {
            key: format!("{kind}/{key}"),
            template,
        },
    })
}

/// A deleted object's kind and `namespace/name` key (namespace empty when cluster-scoped).
fn identity(object: &watch::Object) -> (String, String) {
    let cluster_scoped = |kind: &str, name: &str| (kind.to_string(), format!("/{name}"));
    match object {
        watch::Object::Pod(pod) => ("Pod".into(), pod_key(pod)),
        watch::Object::Node(n) => cluster_scoped("Node", name_of(&**n)),
        watch::Object::NodeClaim(c) => cluster_scoped("NodeClaim", name_of(&**c)),
        watch::Object::NodePool(p) => cluster_scoped("NodePool", name_of(&**p)),
        watch::Object::NodeClass(c) => cluster_scoped("EC2NodeClass", name_of(&**c)),
        watch::Object::KwokNodeClass(c) => cluster_scoped("KWOKNodeClass", name_of(&**c)),
        watch::Object::NodeOverlay(o) => cluster_scoped("NodeOverlay", name_of(&**o)),
        watch::Object::DaemonSet(ds) => ("DaemonSet".into(), namespaced_key(&ds.metadata)),
        watch::Object::Pdb(pdb) => ("PodDisruptionBudget".into(), namespaced_key(&pdb.metadata)),
        watch::Object::Volume(v) => {
            let (kind, key) = v.identity();
            (kind.to_string(), key)
        }
        watch::Object::CapacityBuffer(b) => (
            "CapacityBuffer".into(),
            namespaced_key(kube::Resource::meta(&**b)),
        ),
        watch::Object::Shape { kind, key, .. } => (kind.to_string(), key.clone()),
    }
}

fn name_of<K: Resource>(object: &K) -> &str {
    object.meta().name.as_deref().unwrap_or("")
}
