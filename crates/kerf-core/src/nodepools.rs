//! Cluster objects as scheduler input: NodePools with their instance types, and where a
//! DaemonSet's pods run.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::labels;
use kerf_api::{NodePool, Taint, TaintEffect};
use kerf_scheduling::input::MinValues;
use kerf_scheduling::resources::Resources;
use kerf_scheduling::{InstanceTypeOption, NodePoolInput, Requirement, Requirements};

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

/// Why a NodePool's requirements leave it no instance type to launch. Karpenter skips such a
/// NodePool in each scheduling simulation and says so (`NoCompatibleInstanceTypes`), so that
/// a typo in a requirement shows on the NodePool rather than only as pending pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoCompatibleTypes {
    /// No type both meets the requirements and has an available offering they allow.
    Requirements,
    /// Some do, but they give these requirements' keys fewer distinct values than their
    /// `minValues` (and the policy is Strict).
    MinValues(Vec<String>),
}

impl NoCompatibleTypes {
    /// The event's message, in Karpenter's words.
    pub fn message(&self) -> &'static str {
        match self {
            NoCompatibleTypes::Requirements => {
                "NodePool requirements filtered out all compatible available instance types"
            }
            NoCompatibleTypes::MinValues(_) => {
                "NodePool requirements filtered out all compatible available instance types \
                 due to minValues incompatibility"
            }
        }
    }
}

/// Whether the NodePool's requirements (and template labels) filter out every one of its
/// instance types, as Karpenter filters them before it schedules: a type must meet every
/// requirement on a key it defines (its labels; its offerings' zones and capacity types)
/// and have an available offering the requirements allow; under the Strict policy the
/// types left must give each `minValues` requirement enough distinct values. A NodePool
/// without instance types (its class has not resolved them) is told too, as Karpenter
/// filters an empty list.
pub fn no_compatible_types(np: &NodePoolInput, policy: MinValues) -> Option<NoCompatibleTypes> {
    let mut reqs = Requirements::from_api(&np.requirements);
    for (k, v) in &np.labels {
        reqs.add(Requirement::new(k, kerf_api::Operator::In, [v]));
    }
    let left: Vec<&InstanceTypeOption> = (np.instance_types.iter())
        .filter(|t| type_meets(t, &reqs) && has_offering(t, &reqs))
        .collect();
    if left.is_empty() {
        return Some(NoCompatibleTypes::Requirements);
    }
    let mut short: Vec<String> = (np.requirements.iter())
        .filter(|r| {
            let Some(min) = r.min_values else {
                return false;
            };
            let allowed = reqs.get(&r.key);
            let distinct: std::collections::BTreeSet<&str> = (left.iter())
                .flat_map(|t| type_values(t, &r.key))
                .filter(|v| allowed.has(v))
                .collect();
            distinct.len() < min as usize
        })
        .map(|r| r.key.clone())
        .collect();
    short.sort();
    short.dedup();
    (!short.is_empty() && policy == MinValues::Strict)
        .then_some(NoCompatibleTypes::MinValues(short))
}

/// The values an instance type defines for a key: its label, or for zone and capacity type
/// those of all its offerings.
fn type_values<'a>(t: &'a InstanceTypeOption, key: &str) -> Vec<&'a str> {
    match key {
        labels::ZONE => t.offerings.iter().map(|o| o.zone.as_str()).collect(),
        labels::CAPACITY_TYPE => (t.offerings.iter())
            .map(|o| o.capacity_type.as_str())
            .collect(),
        _ => t.labels.get(key).map(String::as_str).into_iter().collect(),
    }
}

/// Whether every requirement on a key the type defines allows one of its values.
fn type_meets(t: &InstanceTypeOption, reqs: &Requirements) -> bool {
    reqs.iter().all(|r| {
        let values = type_values(t, &r.key);
        values.is_empty() || values.iter().any(|v| r.has(v))
    })
}

/// Whether the type has an available offering the requirements allow (a reservation without
/// room left is available still, as Karpenter filters).
fn has_offering(t: &InstanceTypeOption, reqs: &Requirements) -> bool {
    t.offerings.iter().any(|o| {
        let reserved = o.reservation.as_ref();
        o.available
            && reqs.get(labels::ZONE).has(&o.zone)
            && reqs.get(labels::CAPACITY_TYPE).has(&o.capacity_type)
            && reserved.is_none_or(|r| reqs.get(labels::CAPACITY_RESERVATION_ID).has(&r.id))
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_scheduling::input::Offering;

    fn pool(requirements: serde_json::Value) -> NodePoolInput {
        let np: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                "name": "default"}, "requirements": requirements}}}
        }))
        .expect("a NodePool");
        let types = ["c5.large", "m5.large"].map(|name| InstanceTypeOption {
            name: name.into(),
            labels: Arc::new(BTreeMap::from([
                (labels::INSTANCE_TYPE.to_string(), name.to_string()),
                ("karpenter.k8s.aws/instance-family".into(), name[..2].into()),
            ])),
            capacity: Resources::default(),
            allocatable: Resources::default(),
            offerings: vec![Offering {
                zone: "us-east-1a".into(),
                capacity_type: "spot".into(),
                price_per_hour: 0.1,
                available: name == "c5.large",
                reservation: None,
            }],
        });
        node_pool_input(&np, Arc::from(types.to_vec()), Resources::default(), 0)
    }

    fn req(key: &str, operator: &str, values: &[&str]) -> serde_json::Value {
        serde_json::json!({"key": key, "operator": operator, "values": values})
    }

    #[test]
    fn a_nodepool_is_told_when_its_requirements_leave_no_available_type() {
        let strict = MinValues::Strict;
        // c5.large is available in us-east-1a as spot, m5.large in nothing
        let fine = pool(serde_json::json!([req(
            labels::ZONE,
            "In",
            &["us-east-1a"]
        )]));
        assert_eq!(no_compatible_types(&fine, strict), None);
        for reqs in [
            // a type no one sells
            serde_json::json!([req(labels::INSTANCE_TYPE, "In", &["c5.typo"])]),
            // the one type that meets it has no available offering
            serde_json::json!([req(labels::INSTANCE_TYPE, "In", &["m5.large"])]),
            // the offerings are in another zone, or of another capacity type
            serde_json::json!([req(labels::ZONE, "In", &["us-east-1b"])]),
            serde_json::json!([req(labels::CAPACITY_TYPE, "NotIn", &["spot"])]),
        ] {
            let np = pool(reqs.clone());
            assert_eq!(
                no_compatible_types(&np, strict),
                Some(NoCompatibleTypes::Requirements),
                "{reqs}"
            );
        }
        // a key no type defines (a custom label the template sets) rules nothing out
        let custom = pool(serde_json::json!([req("team", "In", &["a"])]));
        assert_eq!(no_compatible_types(&custom, strict), None);
        // no types at all (the class has not resolved them): told, as Karpenter tells it
        let mut bare = fine.clone();
        bare.instance_types = Arc::from(Vec::new());
        assert_eq!(
            no_compatible_types(&bare, strict),
            Some(NoCompatibleTypes::Requirements)
        );
    }

    #[test]
    fn a_short_min_values_counts_only_under_the_strict_policy() {
        let mut family = req("karpenter.k8s.aws/instance-family", "Exists", &[]);
        family["minValues"] = 2.into();
        // only c5 is available: one family of the two asked for
        let np = pool(serde_json::json!([family]));
        assert_eq!(
            no_compatible_types(&np, MinValues::Strict),
            Some(NoCompatibleTypes::MinValues(vec![
                "karpenter.k8s.aws/instance-family".into()
            ]))
        );
        assert_eq!(no_compatible_types(&np, MinValues::BestEffort), None);
        let message = NoCompatibleTypes::MinValues(Vec::new()).message();
        assert!(
            message.ends_with(" due to minValues incompatibility"),
            "{message}"
        );
    }
}
