//! CapacityBuffers in the simulator (the `CapacityBuffer` gate): the pod shapes and
//! replicas of a scenario's Deployments, StatefulSets and ReplicaSets, which a buffer may
//! size itself from, reach Kerf as its watch would bring them (the buffers and PodTemplates
//! themselves are read with the other manifests, [`super::manifests`]). Kerf's controllers
//! keep the room; the simulator only keeps the objects.

use kerf_core::buffers::Template;
use kerf_core::observe::Object;
use serde_json::Value;

use super::World;

/// The kinds a buffer's `scalableRef` may name (Karpenter reads `apps` only).
const SCALABLE: [&str; 3] = ["Deployment", "StatefulSet", "ReplicaSet"];

impl World {
    /// A workload's pod shape and replicas, for the buffers that size themselves from it
    /// (with the gate on; nothing else reads it).
    pub(super) fn workload_shape(&mut self, kind: &str, namespace: &str, name: &str, doc: &Value) {
        if !self.scenario.spec.feature_gates.capacity_buffer || !SCALABLE.contains(&kind) {
            return;
        }
        let spec = doc.get("spec");
        let template = spec
            .and_then(|s| s.get("template"))
            .and_then(|t| serde_json::from_value(t.clone()).ok())
            .unwrap_or_default();
        let replicas = (spec.and_then(|s| s.get("replicas")).and_then(Value::as_i64))
            .map_or(1, |r| i32::try_from(r).unwrap_or(i32::MAX));
        let key = format!("{kind}/{namespace}/{name}");
        let shape = Template {
            generation: 1,
            replicas,
            template,
        };
        self.write(Object::Workload {
            key,
            template: Box::new(shape),
        });
    }

    /// A workload deleted: a buffer sized from it is no longer ready for provisioning.
    pub(super) fn workload_deleted(&mut self, kind: &str, namespace: &str, name: &str) {
        let shape = format!("{kind}/{namespace}/{name}");
        if self.api.objects.workload_shapes.remove(&shape).is_some() {
            self.remove(kind, format!("{namespace}/{name}"));
        }
    }

    /// A workload scaled: its replicas as a buffer reads them, a generation on.
    pub(super) fn workload_scaled(
        &mut self,
        kind: &str,
        namespace: &str,
        name: &str,
        replicas: i64,
    ) {
        let key = format!("{kind}/{namespace}/{name}");
        let Some(shape) = self.api.objects.workload_shapes.get(&key) else {
            return;
        };
        let template = Box::new(kerf_core::buffers::Template {
            replicas: i32::try_from(replicas).unwrap_or(i32::MAX),
            generation: shape.generation + 1,
            template: shape.template.clone(),
        });
        self.write(Object::Workload { key, template });
    }
}
