//! CapacityBuffers in the simulator (the `CapacityBuffer` gate): a scenario's buffers and the
//! PodTemplates they name reach Kerf as its watch would bring them, and so do the pod shapes
//! and replicas of its Deployments, StatefulSets and ReplicaSets, which a buffer may size
//! itself from. Kerf's controllers keep the room; the simulator only keeps the objects.

use k8s_openapi::api::core::v1::PodTemplate;
use kerf_core::buffers::Template;
use kerf_core::observe::Object;
use serde_json::Value;

use super::{SimError, World};
use crate::scenario::ScenarioError;

/// The kinds a buffer's `scalableRef` may name (Karpenter reads `apps` only).
const SCALABLE: [&str; 3] = ["Deployment", "StatefulSet", "ReplicaSet"];

impl World {
    /// A scenario's CapacityBuffer or PodTemplate, written as the API server would hold it.
    pub(super) fn apply_buffer_object(&mut self, doc: &Value, path: &str) -> Result<(), SimError> {
        // the field that does not read is named by its path
        let unread = |e: serde_path_to_error::Error<serde_json::Error>| ScenarioError {
            path: format!("{path}.{}", e.path()),
            message: e.into_inner().to_string(),
        };
        match doc.get("kind").and_then(Value::as_str) {
            Some("CapacityBuffer") => {
                let mut buffer: kerf_api::CapacityBuffer =
                    serde_path_to_error::deserialize(doc).map_err(unread)?;
                let meta = &mut buffer.metadata;
                meta.namespace.get_or_insert_with(|| "default".into());
                meta.generation.get_or_insert(1);
                self.write(Object::capacity_buffer(buffer));
            }
            _ => {
                let template: PodTemplate =
                    serde_path_to_error::deserialize(doc).map_err(unread)?;
                let meta = &template.metadata;
                let key = format!(
                    "{}/{}",
                    meta.namespace.as_deref().unwrap_or("default"),
                    meta.name.as_deref().unwrap_or_default()
                );
                let template = Box::new(Template {
                    generation: meta.generation.unwrap_or(1),
                    replicas: 0,
                    template: template.template.unwrap_or_default(),
                });
                self.write(Object::PodTemplate { key, template });
            }
        }
        Ok(())
    }

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
