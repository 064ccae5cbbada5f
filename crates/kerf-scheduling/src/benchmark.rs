//! The scheduling benchmark Karpenter measures its scheduler with (../shared/BENCHMARK.md):
//! 400 synthetic instance types, one unconstrained NodePool, and a diverse pod mix. Shared by
//! the criterion bench and `kerf bench scheduling` so both time the same workload.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Container, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodAffinity,
    PodAffinityTerm, PodAntiAffinity, PodSpec, PreferredSchedulingTerm, ResourceRequirements,
    TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kerf_api::labels;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::input::{InstanceTypeOption, NodePoolInput, Offering};
use crate::resources::Resources;

const GIB: i64 = 1 << 30;
const MIB: i64 = 1 << 20;

/// The 400 instance types `fake-it-0` … `fake-it-399`.
pub fn instance_types() -> Vec<InstanceTypeOption> {
    (0..400i64)
        .map(|i| {
            let cpu = i + 1;
            let memory = 2 * cpu * GIB;
            let capacity = Resources {
                cpu_millis: cpu * 1000,
                memory_bytes: memory,
                ephemeral_storage_bytes: 20 * GIB,
                pods: 10 * cpu,
                extended: BTreeMap::new(),
            };
            let overhead = Resources {
                cpu_millis: 100,
                memory_bytes: 10 * MIB,
                ..Resources::default()
            };
            let price = 0.1 * cpu as f64 + 0.1 * (memory as f64 / 1e9);
            let offering = |zone: &str, ct: &str| Offering {
                zone: zone.into(),
                capacity_type: ct.into(),
                price_per_hour: price,
                available: true,
                reservation: None,
            };
            let name = format!("fake-it-{i}");
            let size = if cpu > 4 && memory > 8 * GIB {
                "large"
            } else {
                "small"
            };
            let labels: BTreeMap<String, String> = [
                (labels::INSTANCE_TYPE, name.clone()),
                (labels::ARCH, "amd64".into()),
                (labels::OS, "linux".into()),
                ("size", size.into()),
                ("integer", cpu.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            InstanceTypeOption {
                name,
                labels: labels.into(),
                allocatable: capacity.saturating_sub(&overhead),
                capacity,
                offerings: vec![
                    offering("test-zone-1", labels::CAPACITY_TYPE_SPOT),
                    offering("test-zone-2", labels::CAPACITY_TYPE_SPOT),
                    offering("test-zone-1", labels::CAPACITY_TYPE_ON_DEMAND),
                    offering("test-zone-2", labels::CAPACITY_TYPE_ON_DEMAND),
                    offering("test-zone-3", labels::CAPACITY_TYPE_ON_DEMAND),
                ],
            }
        })
        .collect()
}

/// The benchmark's single NodePool over the 400 types, limits 10,000,000 cpu and memory.
pub fn node_pool() -> NodePoolInput {
    NodePoolInput {
        name: "default".into(),
        weight: 0,
        labels: BTreeMap::new(),
        requirements: Vec::new(),
        taints: Vec::new(),
        startup_taints: Vec::new(),
        limits: [
            ("cpu".to_string(), 10_000_000 * 1000),
            ("memory".to_string(), 10_000_000 * GIB),
        ]
        .into(),
        usage: Resources::default(),
        nodes: 0,
        instance_types: Arc::from(instance_types()),
        largest: None,
    }
}

struct Gen(ChaCha8Rng);

impl Gen {
    fn value(&mut self) -> String {
        ["a", "b", "c", "d", "e", "f", "g"][self.0.random_range(0..7)].to_string()
    }

    fn pod(
        &mut self,
        name: String,
        labels: BTreeMap<String, String>,
        affinity: Option<Affinity>,
    ) -> Pod {
        let cpu = ["100m", "250m", "500m", "1000m", "1500m"][self.0.random_range(0..5)];
        let memory = ["100Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi"][self.0.random_range(0..6)];
        Pod {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some("default".into()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(
                            [
                                ("cpu".to_string(), Quantity(cpu.into())),
                                ("memory".to_string(), Quantity(memory.into())),
                            ]
                            .into(),
                        ),
                        ..ResourceRequirements::default()
                    }),
                    ..Container::default()
                }],
                affinity,
                ..PodSpec::default()
            }),
            status: None,
        }
    }

    fn labelled(&mut self, key: &str) -> BTreeMap<String, String> {
        [(key.to_string(), self.value())].into()
    }
}

fn selector(labels: BTreeMap<String, String>) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Some(labels),
        match_expressions: None,
    })
}

fn term(labels: BTreeMap<String, String>, key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: selector(labels),
        topology_key: key.into(),
        ..PodAffinityTerm::default()
    }
}

/// Karpenter's `makeDiversePods(n)`: five equal groups (generic; zonal spread; hostname
/// spread; self-affinity on zone; anti-affinity on hostname), the remainder generic.
pub fn diverse_pods(n: usize, seed: u64) -> Vec<Pod> {
    let mut g = Gen(ChaCha8Rng::seed_from_u64(seed));
    let per = n / 5;
    let mut pods = Vec::with_capacity(n);
    let mut name = {
        let mut i = 0;
        move || {
            i += 1;
            format!("pod-{i}")
        }
    };
    for _ in 0..per {
        let l = g.labelled("my-label");
        pods.push(g.pod(name(), l, None));
    }
    for key in [labels::ZONE, labels::HOSTNAME] {
        for _ in 0..per {
            let l = g.labelled("my-label");
            let mut p = g.pod(name(), l, None);
            let sel = g.labelled("my-label");
            if let Some(spec) = p.spec.as_mut() {
                spec.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: key.into(),
                    when_unsatisfiable: "DoNotSchedule".into(),
                    label_selector: selector(sel),
                    ..TopologySpreadConstraint::default()
                }]);
            }
            pods.push(p);
        }
    }
    for _ in 0..per {
        let l = g.labelled("my-affininity");
        let affinity = Affinity {
            pod_affinity: Some(PodAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![term(
                    l.clone(),
                    labels::ZONE,
                )]),
                ..PodAffinity::default()
            }),
            ..Affinity::default()
        };
        pods.push(g.pod(name(), l, Some(affinity)));
    }
    let nginx: BTreeMap<String, String> = [("app".to_string(), "nginx".to_string())].into();
    for _ in 0..per {
        let affinity = Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![term(
                    nginx.clone(),
                    labels::HOSTNAME,
                )]),
                ..PodAntiAffinity::default()
            }),
            ..Affinity::default()
        };
        pods.push(g.pod(name(), nginx.clone(), Some(affinity)));
    }
    while pods.len() < n {
        let l = g.labelled("my-label");
        pods.push(g.pod(name(), l, None));
    }
    pods
}

/// The preference benchmark: pods labelled `app: nginx` preferring test-zone-1 and
/// preferring anti-affinity on zone (weight 10) and hostname (weight 1).
pub fn preference_pods(n: usize, seed: u64) -> Vec<Pod> {
    let mut g = Gen(ChaCha8Rng::seed_from_u64(seed));
    let nginx: BTreeMap<String, String> = [("app".to_string(), "nginx".to_string())].into();
    (0..n)
        .map(|i| {
            let weighted = |weight, key: &str| WeightedPodAffinityTerm {
                weight,
                pod_affinity_term: term(nginx.clone(), key),
            };
            let affinity = Affinity {
                node_affinity: Some(NodeAffinity {
                    preferred_during_scheduling_ignored_during_execution: Some(vec![
                        PreferredSchedulingTerm {
                            weight: 1,
                            preference: NodeSelectorTerm {
                                match_expressions: Some(vec![NodeSelectorRequirement {
                                    key: labels::ZONE.into(),
                                    operator: "In".into(),
                                    values: Some(vec!["test-zone-1".into()]),
                                }]),
                                match_fields: None,
                            },
                        },
                    ]),
                    ..NodeAffinity::default()
                }),
                pod_anti_affinity: Some(PodAntiAffinity {
                    preferred_during_scheduling_ignored_during_execution: Some(vec![
                        weighted(10, labels::ZONE),
                        weighted(1, labels::HOSTNAME),
                    ]),
                    ..PodAntiAffinity::default()
                }),
                ..Affinity::default()
            };
            g.pod(format!("pod-{i}"), nginx.clone(), Some(affinity))
        })
        .collect()
}
