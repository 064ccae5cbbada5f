//! The CustomResourceDefinitions of the five kinds, generated from the Rust types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::{CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};

/// The NodePool, NodeClaim, EC2NodeClass, NodeOverlay and CapacityBuffer CRDs, in that order,
/// in the form Karpenter's (controller-gen's) take (the test `kerfs_crds_are_karpenters_…`
/// compares them).
pub fn all() -> Vec<CustomResourceDefinition> {
    [
        NodePool::crd(),
        NodeClaim::crd(),
        EC2NodeClass::crd(),
        NodeOverlay::crd(),
        CapacityBuffer::crd(),
    ]
    .into_iter()
    .map(as_controller_gen_writes)
    .collect()
}

/// What schemars writes and controller-gen does not, or the other way round: no `nullable`
/// (an absent optional field is left out, never null) and no `title`; `apiVersion`, `kind`
/// and `metadata` among the root's properties; the list kind named. Karpenter's EC2NodeClass
/// does not require `spec` (its Go field carries no `required` marker).
fn as_controller_gen_writes(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    crd.spec.names.list_kind = Some(format!("{}List", crd.spec.names.kind));
    let kind = crd.spec.names.kind.clone();
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let mut value = serde_json::to_value(&*schema).expect("a schema is JSON");
        each_schema(&mut value, &mut |node| {
            // an absent optional field is left out, never null
            node.remove("nullable");
            // the `anyOf` of an integer and a string controller-gen writes for an
            // int-or-string (kube's structural rewrite leaves the branches empty)
            if node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
                let any = json!([{"type": "integer"}, {"type": "string"}]);
                node.insert("anyOf".into(), any);
            }
        });
        if let Some(root) = value.as_object_mut() {
            root.remove("title");
            if kind == "EC2NodeClass" {
                root.remove("required");
            }
            if let Some(properties) = root.get_mut("properties").and_then(Value::as_object_mut) {
                properties.insert("apiVersion".into(), json!({"type": "string"}));
                properties.insert("kind".into(), json!({"type": "string"}));
                properties.insert("metadata".into(), json!({"type": "object"}));
            }
        }
        *schema = serde_json::from_value(value).expect("the schema reads back");
    }
    crd
}

/// Calls `f` on `schema` and on every schema below it (properties, items, additional
/// properties, branches), never inside a default, an enum or a rule.
fn each_schema(schema: &mut Value, f: &mut impl FnMut(&mut serde_json::Map<String, Value>)) {
    let Some(map) = schema.as_object_mut() else {
        return;
    };
    f(map);
    if let Some(properties) = map.get_mut("properties").and_then(Value::as_object_mut) {
        properties.values_mut().for_each(|p| each_schema(p, f));
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = map.get_mut(key) {
            each_schema(child, f);
        }
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        if let Some(branches) = map.get_mut(key).and_then(Value::as_array_mut) {
            branches.iter_mut().for_each(|b| each_schema(b, f));
        }
    }
}

/// The CRDs as one multi-document YAML stream, ready for `kubectl apply -f -`.
pub fn to_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in all() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}

/// The OpenAPI v3 schema of a kind's served version, as JSON, for the structural checker.
pub fn schema_of(kind: &str) -> Option<Value> {
    let crd = all().into_iter().find(|c| c.spec.names.kind == kind)?;
    let schema = crd
        .spec
        .versions
        .first()?
        .schema
        .as_ref()?
        .open_api_v3_schema
        .as_ref()?;
    serde_json::to_value(schema).ok()
}
