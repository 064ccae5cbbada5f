//! The CustomResourceDefinitions of the four kinds, generated from the Rust types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};

/// The NodePool, NodeClaim, EC2NodeClass and NodeOverlay CRDs, in that order, in the form
/// Karpenter's (controller-gen's) take (the test `kerfs_crds_are_karpenters_…` compares them).
pub fn all() -> Vec<CustomResourceDefinition> {
    [
        NodePool::crd(),
        NodeClaim::crd(),
        EC2NodeClass::crd(),
        NodeOverlay::crd(),
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
        let Ok(mut value) = serde_json::to_value(&*schema) else {
            continue;
        };
        drop_keyword(&mut value, "nullable");
        int_or_string_any_of(&mut value);
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
        if let Ok(typed) = serde_json::from_value(value) {
            *schema = typed;
        }
    }
    crd
}

/// Gives every int-or-string schema the `anyOf` of an integer and a string that
/// controller-gen writes (kube's structural rewrite leaves the branches empty).
fn int_or_string_any_of(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
                map.insert(
                    "anyOf".into(),
                    json!([{"type": "integer"}, {"type": "string"}]),
                );
            }
            map.values_mut().for_each(int_or_string_any_of);
        }
        Value::Array(items) => items.iter_mut().for_each(int_or_string_any_of),
        _ => {}
    }
}

/// Removes the schema keyword `keyword` everywhere below `value` (not a property of that name).
fn drop_keyword(value: &mut Value, keyword: &str) {
    match value {
        Value::Object(map) => {
            if map.get(keyword).is_some_and(|v| !v.is_object()) {
                map.remove(keyword);
            }
            for (key, child) in map.iter_mut() {
                if key == "properties" {
                    for property in child
                        .as_object_mut()
                        .into_iter()
                        .flat_map(|p| p.values_mut())
                    {
                        drop_keyword(property, keyword);
                    }
                } else {
                    drop_keyword(child, keyword);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| drop_keyword(v, keyword)),
        _ => {}
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
