//! Cluster objects as scheduler input: NodePools with their instance types, and where a
//! DaemonSet's pods run.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::{NodePool, Taint, TaintEffect};
use kerf_scheduling::resources::Resources;
use kerf_scheduling::{InstanceTypeOption, NodePoolInput};

/// A NodePool resolved against the instance types its node class can launch; `usage` is
/// the capacity of the nodes it already has and `nodes` how many (counted against its
/// limits).
pub fn node_pool_input(
    np: &NodePool,
    instance_types: Arc<[InstanceTypeOption]>,
    usage: Resources,
    nodes: i64,
) -> NodePoolInput {
    let spec = &np.spec.template.spec;
    let limits = Resources::from_quantities(np.spec.limits.iter().map(|(k, v)| (k, v.as_str())));
    let limit_of = |name: &str| match name {
        "cpu" => limits.cpu_millis,
        "memory" => limits.memory_bytes,
        "ephemeral-storage" => limits.ephemeral_storage_bytes,
        "pods" => limits.pods,
        other => limits.extended.get(other).copied().unwrap_or(0),
    };
    NodePoolInput {
        name: np.metadata.name.clone().unwrap_or_default(),
        weight: np.spec.weight.unwrap_or(0),
        labels: np.spec.template.metadata.labels.clone(),
        requirements: spec.requirements.clone(),
        taints: spec.taints.clone(),
        startup_taints: spec.startup_taints.clone(),
        limits: np
            .spec
            .limits
            .keys()
            .map(|k| (k.clone(), limit_of(k)))
            .collect(),
        usage,
        nodes,
        instance_types,
        largest: None,
    }
}

/// A Kubernetes taint in Karpenter's form; an unknown effect is read as NoSchedule (the
/// API server rejects other effects).
pub fn taint_of(t: &k8s_openapi::api::core::v1::Taint) -> Taint {
    Taint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: match t.effect.as_str() {
            "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
            "NoExecute" => TaintEffect::NoExecute,
            _ => TaintEffect::NoSchedule,
        },
        time_added: None,
    }
}

/// Whether a daemonset's pod would run on a node with these labels and taints.
pub fn daemon_runs_on(ds: &Pod, labels: &BTreeMap<String, String>, taints: &[Taint]) -> bool {
    let spec = ds.spec.as_ref();
    let tolerations = spec.and_then(|s| s.tolerations.clone()).unwrap_or_default();
    if kerf_scheduling::taints::first_untolerated(&tolerations, taints, true).is_some() {
        return false;
    }
    let selector_ok = spec
        .and_then(|s| s.node_selector.as_ref())
        .is_none_or(|sel| sel.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let terms = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.clone())
        .unwrap_or_default();
    let affinity_ok = terms.is_empty()
        || terms.iter().any(|term| {
            let reqs = kerf_scheduling::Requirements::from_api(
                term.match_expressions
                    .iter()
                    .flatten()
                    .filter_map(api_requirement)
                    .collect::<Vec<_>>()
                    .iter(),
            );
            reqs.matches_labels(labels)
        });
    selector_ok && affinity_ok
}

fn api_requirement(
    r: &k8s_openapi::api::core::v1::NodeSelectorRequirement,
) -> Option<kerf_api::NodeSelectorRequirementWithMinValues> {
    let operator = serde_json::from_value(serde_json::Value::String(r.operator.clone())).ok()?;
    Some(kerf_api::NodeSelectorRequirementWithMinValues {
        key: r.key.clone(),
        operator,
        values: r.values.clone().unwrap_or_default(),
        min_values: None,
    })
}
