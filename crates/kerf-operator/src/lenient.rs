//! Karpenter's kinds as the watches read them: a NodePool, NodeClaim or EC2NodeClass with a
//! field or value Kerf does not know is read as far as Kerf understands it
//! ([`kerf_api::cluster_read`]), so one object written by a newer Karpenter can never fail a
//! list and stall the watch of its whole kind.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::cluster_read::{self, Read};
use kerf_core::controllers::{Event, EventObject};
use kube::Resource;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::json;

use crate::events::Recorder;
use crate::log;

/// An object of kind `K` read forward-compatibly; deserializing it never fails on the
/// object's content, only on JSON that is not an object.
#[derive(Clone, Debug)]
pub struct Lenient<K> {
    metadata: ObjectMeta,
    /// The typed object and what could not be read of it.
    pub read: Arc<Read<K>>,
}

impl<K> Resource for Lenient<K>
where
    K: Resource<DynamicType = ()>,
{
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind((): &()) -> Cow<'_, str> {
        K::kind(&())
    }
    fn group((): &()) -> Cow<'_, str> {
        K::group(&())
    }
    fn version((): &()) -> Cow<'_, str> {
        K::version(&())
    }
    fn plural((): &()) -> Cow<'_, str> {
        K::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de, K> Deserialize<'de> for Lenient<K>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        let metadata = value
            .get("metadata")
            .cloned()
            .and_then(|m| serde_json::from_value::<ObjectMeta>(m).ok())
            .unwrap_or_default();
        let read = cluster_read::read::<K>(&K::kind(&()), &value);
        Ok(Lenient {
            metadata,
            read: Arc::new(read),
        })
    }
}

/// Says once per object and generation what Kerf could not read of it: a log line, a
/// Warning Event on the object, and `kerf_cluster_object_gaps{kind,name}`, the number of
/// fields and values not understood (0 once the object is read whole again).
#[derive(Debug)]
pub struct GapReports {
    said: HashMap<(&'static str, String), (Option<i64>, usize)>,
    gauge: Family<Vec<(&'static str, String)>, Gauge>,
    registry: Registry,
}

impl Default for GapReports {
    fn default() -> Self {
        let gauge = Family::<Vec<(&'static str, String)>, Gauge>::default();
        let mut registry = Registry::default();
        registry.register(
            "kerf_cluster_object_gaps",
            "Fields and values of a NodePool, NodeClaim or EC2NodeClass that Kerf does not understand and acts without",
            gauge.clone(),
        );
        GapReports {
            said: HashMap::new(),
            gauge,
            registry,
        }
    }
}

impl GapReports {
    /// The registry holding the gauge, for `/metrics`.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Reports what a watch delivered, unless this generation of the object was reported.
    pub fn observed<K: Resource<DynamicType = ()>>(
        &mut self,
        kind: EventObject,
        object: &Lenient<K>,
        events: &Recorder,
    ) {
        let (_, kind_name) = kind.api_version_kind();
        let name = object.metadata.name.clone().unwrap_or_default();
        let read = &object.read;
        let mut problems: Vec<String> =
            read.gaps.problems.iter().map(ToString::to_string).collect();
        if let Err(e) = &read.object {
            problems.push(format!("{e}: not read, Kerf acts as if it were absent"));
        }
        let generation = object.metadata.generation;
        let key = (kind_name, name.clone());
        let labels = vec![("kind", kind_name.to_string()), ("name", name.clone())];
        if problems.is_empty() {
            if self.said.remove(&key).is_some() {
                self.gauge.get_or_create(&labels).set(0);
            }
            return;
        }
        if self.said.get(&key) == Some(&(generation, problems.len())) {
            return;
        }
        self.said.insert(key, (generation, problems.len()));
        self.gauge
            .get_or_create(&labels)
            .set(i64::try_from(problems.len()).unwrap_or(i64::MAX));
        log::warn(
            "operator",
            "object not fully understood",
            json!({kind_name: {"name": name}, "generation": generation, "problems": problems}),
        );
        let event = Event {
            kind,
            name,
            warning: true,
            reason: "UnsupportedFields".into(),
            message: format!(
                "Kerf does not understand every field of this {kind_name}: {}",
                problems.join("; ")
            ),
        };
        events.record(event, object.metadata.uid.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::Lenient;
    use kerf_api::NodePool;
    use kube::Resource;

    #[test]
    fn a_list_with_an_unknown_value_still_reads_every_item() {
        // the shape of a list response: one object a newer Karpenter wrote, one ordinary
        let list = serde_json::json!([
            {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
             "metadata": {"name": "frugal", "generation": 1},
             "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}},
                "disruption": {"consolidateAfter": "1m", "consolidationPolicy": "Frugal"}}},
            {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
             "metadata": {"name": "default", "generation": 1},
             "spec": {"template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}},
        ]);
        assert!(
            serde_json::from_value::<Vec<NodePool>>(list.clone()).is_err(),
            "a strict read fails the whole list"
        );
        let items: Vec<Lenient<NodePool>> = serde_json::from_value(list).expect("lenient");
        let names: Vec<&str> = items
            .iter()
            .map(|i| i.meta().name.as_deref().unwrap_or(""))
            .collect();
        assert_eq!(names, ["frugal", "default"]);
        assert!(items.iter().all(|i| i.read.object.is_ok()));
        assert_eq!(items[0].read.gaps.problems.len(), 1);
        assert!(items[1].read.gaps.is_empty());
    }
}
