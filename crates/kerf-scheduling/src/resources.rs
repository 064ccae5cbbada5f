//! Resource amounts as the scheduler counts them: CPU in millicores, memory and storage in
//! bytes, pod slots, and extended resources (GPUs, Neuron devices) in whole units; and a
//! pod's effective requests as kube-scheduler computes them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use kerf_api::Quantity;

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// Amounts of the node resources Kerf schedules on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    /// CPU in millicores.
    pub cpu_millis: i64,
    /// Memory in bytes.
    pub memory_bytes: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage_bytes: i64,
    /// Pod slots.
    pub pods: i64,
    /// Extended resources (GPUs, Neuron devices) in whole units.
    pub extended: BTreeMap<String, i64>,
}

impl Resources {
    /// `self − other`, resource by resource, floored at zero.
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        Resources {
            cpu_millis: (self.cpu_millis - other.cpu_millis).max(0),
            memory_bytes: (self.memory_bytes - other.memory_bytes).max(0),
            ephemeral_storage_bytes: (self.ephemeral_storage_bytes - other.ephemeral_storage_bytes)
                .max(0),
            pods: (self.pods - other.pods).max(0),
            extended: self
                .extended
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        (v - other.extended.get(k).copied().unwrap_or(0)).max(0),
                    )
                })
                .collect(),
        }
    }

    /// The resources as a Kubernetes resource list (`cpu: 1930m`, `memory: 6903Mi`, …).
    pub fn to_resource_list(&self) -> BTreeMap<String, Quantity> {
        let mut out = BTreeMap::new();
        out.insert("cpu".into(), Quantity::from_milli(self.cpu_millis));
        out.insert("memory".into(), bytes_quantity(self.memory_bytes));
        out.insert(
            "ephemeral-storage".into(),
            bytes_quantity(self.ephemeral_storage_bytes),
        );
        out.insert("pods".into(), Quantity::from_units(self.pods));
        for (k, v) in &self.extended {
            out.insert(k.clone(), Quantity::from_units(*v));
        }
        out
    }
}

/// Writes bytes in the largest binary unit that divides them (`17Gi`, `6903Mi`).
pub fn bytes_quantity(bytes: i64) -> Quantity {
    for (unit, size) in [("Gi", GIB), ("Mi", MIB), ("Ki", 1 << 10)] {
        if bytes % size == 0 && bytes != 0 {
            return Quantity::parse(&format!("{}{unit}", bytes / size))
                .expect("well-formed quantity");
        }
    }
    Quantity::from_units(bytes)
}

impl Resources {
    /// Whether every amount of `self` fits within `available`.
    pub fn fits(&self, available: &Resources) -> bool {
        self.cpu_millis <= available.cpu_millis
            && self.memory_bytes <= available.memory_bytes
            && self.ephemeral_storage_bytes <= available.ephemeral_storage_bytes
            && self.pods <= available.pods
            && self
                .extended
                .iter()
                .all(|(k, v)| *v <= available.extended.get(k).copied().unwrap_or(0))
    }

    /// `self + other`, resource by resource.
    pub fn add(&mut self, other: &Resources) {
        self.cpu_millis += other.cpu_millis;
        self.memory_bytes += other.memory_bytes;
        self.ephemeral_storage_bytes += other.ephemeral_storage_bytes;
        self.pods += other.pods;
        for (k, v) in &other.extended {
            *self.extended.entry(k.clone()).or_insert(0) += v;
        }
    }

    /// The larger of each amount.
    pub fn max(&self, other: &Resources) -> Resources {
        let mut extended = self.extended.clone();
        for (k, v) in &other.extended {
            let e = extended.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
        Resources {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
            ephemeral_storage_bytes: self
                .ephemeral_storage_bytes
                .max(other.ephemeral_storage_bytes),
            pods: self.pods.max(other.pods),
            extended,
        }
    }

    /// Reads a resource list (`cpu`, `memory`, `ephemeral-storage`, `pods`, extended names);
    /// a quantity that does not parse counts as zero (the API server rejects such pods).
    pub fn from_quantities<'a>(list: impl IntoIterator<Item = (&'a String, &'a str)>) -> Resources {
        let mut r = Resources::default();
        for (name, text) in list {
            let Ok(q) = Quantity::parse(text) else {
                continue;
            };
            match name.as_str() {
                "cpu" => r.cpu_millis = q.milli() as i64,
                "memory" => r.memory_bytes = q.units_ceil() as i64,
                "ephemeral-storage" => r.ephemeral_storage_bytes = q.units_ceil() as i64,
                "pods" => r.pods = q.units_ceil() as i64,
                other => {
                    r.extended.insert(other.to_string(), q.units_ceil() as i64);
                }
            }
        }
        r
    }
}

fn container_requests(c: &Container) -> Resources {
    c.resources.as_ref().map(requests_of).unwrap_or_default()
}

/// The requests of a container's or a pod's `resources`.
fn requests_of(res: &k8s_openapi::api::core::v1::ResourceRequirements) -> Resources {
    // a limit without a request defaults the request to the limit
    let mut merged: BTreeMap<&String, &str> = BTreeMap::new();
    for (k, v) in res.limits.iter().flatten() {
        merged.insert(k, v.0.as_str());
    }
    for (k, v) in res.requests.iter().flatten() {
        merged.insert(k, v.0.as_str());
    }
    Resources::from_quantities(merged)
}

/// What a pod requests of a node, as kube-scheduler counts it: the sum of its containers
/// plus its restartable (sidecar) init containers, or the largest init container step if
/// larger; where the pod sets pod-level `spec.resources` (Kubernetes 1.34, Karpenter v1.8),
/// its cpu and memory there instead (a limit without a request standing for it, as the API
/// server defaults it); plus the pod overhead, plus one pod slot.
pub fn pod_requests(pod: &Pod) -> Resources {
    let Some(spec) = &pod.spec else {
        return Resources {
            pods: 1,
            ..Resources::default()
        };
    };
    let mut sum = Resources::default();
    for c in &spec.containers {
        sum.add(&container_requests(c));
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let req = container_requests(c);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&req);
            init_peak = init_peak.max(&sidecars);
        } else {
            let mut step = req;
            step.add(&sidecars);
            init_peak = init_peak.max(&step);
        }
    }
    sum.add(&sidecars);
    let mut total = sum.max(&init_peak);
    if let Some(pod_level) = spec.resources.as_ref().map(requests_of) {
        let set = |name: &str| {
            let res = spec.resources.as_ref();
            let has =
                |list: Option<&BTreeMap<String, _>>| list.is_some_and(|l| l.contains_key(name));
            res.is_some_and(|r| has(r.requests.as_ref()) || has(r.limits.as_ref()))
        };
        // only cpu and memory can be set for the pod as a whole
        if set("cpu") {
            total.cpu_millis = pod_level.cpu_millis;
        }
        if set("memory") {
            total.memory_bytes = pod_level.memory_bytes;
        }
    }
    if let Some(overhead) = &spec.overhead {
        total.add(&Resources::from_quantities(
            overhead.iter().map(|(k, v)| (k, v.0.as_str())),
        ));
    }
    total.pods = 1;
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_level_resources_stand_for_the_containers_cpu_and_memory() {
        let p = pod(r#"
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: a, image: x}, {name: b, image: x, resources: {requests: {cpu: 100m, nvidia.com/gpu: "1"}}}]
  resources: {requests: {cpu: "6"}, limits: {memory: 12Gi}}
"#);
        let r = pod_requests(&p);
        assert_eq!(r.cpu_millis, 6000);
        assert_eq!(
            r.memory_bytes,
            12 * 1024 * 1024 * 1024,
            "a pod-level limit stands for its request"
        );
        assert_eq!(
            r.extended.get("nvidia.com/gpu"),
            Some(&1),
            "other resources stay the containers'"
        );
        // without pod-level resources, the containers' sum
        let p = pod(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: a, image: x, resources: {requests: {cpu: 100m}}}]\n",
        );
        assert_eq!(pod_requests(&p).cpu_millis, 100);
    }

    fn pod(yaml: &str) -> Pod {
        serde_json::from_value(
            kerf_api::manifest::read_documents(yaml)
                .unwrap()
                .remove(0)
                .value,
        )
        .unwrap()
    }

    #[test]
    fn quantities_render_in_binary_units() {
        assert_eq!(bytes_quantity(17 * GIB).as_str(), "17Gi");
        assert_eq!(bytes_quantity(6903 * MIB).as_str(), "6903Mi");
    }

    #[test]
    fn requests_sum_containers_and_take_the_init_peak() {
        let p = pod(r#"
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  initContainers:
  - {name: migrate, image: x, resources: {requests: {cpu: "2", memory: 1Gi}}}
  - {name: proxy, image: x, restartPolicy: Always, resources: {requests: {cpu: 100m, memory: 64Mi}}}
  containers:
  - {name: a, image: x, resources: {requests: {cpu: 500m, memory: 512Mi, nvidia.com/gpu: "1"}}}
  - {name: b, image: x, resources: {limits: {cpu: 250m, memory: 128Mi}}}
  overhead: {cpu: 10m}
"#);
        let r = pod_requests(&p);
        // containers 750m + sidecar 100m = 850m < migrate step 2000m; plus 10m overhead
        assert_eq!(r.cpu_millis, 2010);
        // containers 640Mi + sidecar 64Mi = 704Mi < 1Gi
        assert_eq!(r.memory_bytes, 1 << 30);
        assert_eq!(r.extended.get("nvidia.com/gpu"), Some(&1));
        assert_eq!(r.pods, 1);
    }

    #[test]
    fn fits_and_saturating_sub() {
        let node = Resources {
            cpu_millis: 1930,
            memory_bytes: 6903 * MIB,
            pods: 29,
            ..Default::default()
        };
        let small = Resources {
            cpu_millis: 1000,
            memory_bytes: 1536 * MIB,
            pods: 1,
            ..Default::default()
        };
        assert!(small.fits(&node));
        let mut two = small.clone();
        two.add(&small);
        assert!(!two.fits(&node));
        let gpu = Resources {
            extended: [("nvidia.com/gpu".to_string(), 1)].into(),
            ..Default::default()
        };
        assert!(!gpu.fits(&node));
        assert_eq!(node.saturating_sub(&two).cpu_millis, 0);
    }
}
