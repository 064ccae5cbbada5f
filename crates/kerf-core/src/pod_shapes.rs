//! What replicas share, stored once. A Deployment's pods differ only in their names, uids,
//! timestamps, nodes and status; the rest (namespace, labels, annotations, owners and spec:
//! everything the solver and the disruption rules read) is a pod's *shape*, kept once for
//! all the pods that have it. A `Pod` is over 2 KB inline before its lists and maps, and
//! 10,000 replicas of a few Deployments are a few shapes and 10,000 small records.

use rustc_hash::FxHashMap as HashMap;
use std::sync::{Arc, Weak};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The shapes in use, found again by a hash of their text.
#[derive(Clone, Debug, Default)]
pub struct Shapes {
    by_hash: HashMap<u64, Vec<Weak<Pod>>>,
    /// Entries kept (live or not) and how many were live when last pruned: the table is
    /// pruned once it holds twice as many, so it stays proportional to the shapes in use.
    entries: usize,
    live_at_prune: usize,
}

impl Shapes {
    /// The shape of `pod` (see [`shape_of`]), shared with every pod already stored that
    /// has the same one.
    pub fn intern(&mut self, pod: Pod) -> Arc<Pod> {
        let shape = shape_of(pod);
        let hash = kerf_scheduling::pods::json_hash(&shape);
        let bucket = self.by_hash.entry(hash).or_default();
        if let Some(found) = bucket
            .iter()
            .filter_map(Weak::upgrade)
            .find(|s| **s == shape)
        {
            return found;
        }
        let shape = Arc::new(shape);
        bucket.push(Arc::downgrade(&shape));
        self.entries += 1;
        if self.entries > 2 * self.live_at_prune + 64 {
            self.prune();
        }
        shape
    }

    /// Forgets the shapes no pod has any more.
    fn prune(&mut self) {
        self.by_hash.retain(|_, bucket| {
            bucket.retain(|s| s.strong_count() > 0);
            !bucket.is_empty()
        });
        self.entries = self.by_hash.values().map(Vec::len).sum();
        self.live_at_prune = self.entries;
    }
}

/// A pod without what is its own: name, uid, resource version, generation, timestamps,
/// managed fields, `spec.nodeName` and status. Namespace, labels, annotations, owner
/// references, finalizers and the rest of the spec stay.
pub fn shape_of(pod: Pod) -> Pod {
    let Pod { metadata, spec, .. } = pod;
    let spec = spec.map(|mut s| {
        s.node_name = None;
        s
    });
    let metadata = ObjectMeta {
        namespace: metadata.namespace,
        labels: metadata.labels,
        annotations: metadata.annotations,
        owner_references: metadata.owner_references,
        finalizers: metadata.finalizers,
        generate_name: metadata.generate_name,
        ..ObjectMeta::default()
    };
    Pod {
        metadata,
        spec,
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many shapes some pod still has.
    fn live(shapes: &Shapes) -> usize {
        (shapes.by_hash.values().flatten())
            .filter(|s| s.strong_count() > 0)
            .count()
    }

    fn replica(name: &str, node: Option<&str>, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"),
                         "labels": {"app": "api"}, "resourceVersion": "7"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
                     "resources": {"requests": {"cpu": "250m"}}}]},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn replicas_share_one_shape_whatever_their_names_nodes_and_status() {
        let mut shapes = Shapes::default();
        let a = shapes.intern(replica("api-1", None, "Pending"));
        let b = shapes.intern(replica("api-2", Some("node-a"), "Running"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.metadata.name, None);
        assert_eq!(a.metadata.uid, None);
        assert_eq!(a.spec.as_ref().unwrap().node_name, None);
        assert!(a.status.is_none());
        assert_eq!(a.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(live(&shapes), 1);
    }

    #[test]
    fn a_different_spec_or_label_is_another_shape_and_unused_shapes_are_forgotten() {
        let mut shapes = Shapes::default();
        let a = shapes.intern(replica("api-1", None, "Pending"));
        let mut other = replica("api-2", None, "Pending");
        other.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        let b = shapes.intern(other);
        assert!(!Arc::ptr_eq(&a, &b));
        drop((a, b));
        assert_eq!(live(&shapes), 0);
        for i in 0..200 {
            let mut p = replica("p", None, "Pending");
            p.metadata.labels = Some([("app".to_string(), i.to_string())].into());
            drop(shapes.intern(p));
        }
        assert!(shapes.entries <= 2 * shapes.live_at_prune + 64);
        assert!(shapes.by_hash.len() < 200);
    }
}
