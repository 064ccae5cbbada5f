//! The CustomResourceDefinitions of the four kinds, generated from the Rust types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};

/// The NodePool, NodeClaim, EC2NodeClass and NodeOverlay CRDs, in that order.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        NodePool::crd(),
        NodeClaim::crd(),
        EC2NodeClass::crd(),
        NodeOverlay::crd(),
    ]
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

/// The OpenAPI v3 schema of a kind's served version, as JSON, for the structural checker,
/// with the `apiVersion`, `kind` and `metadata` fields the API server adds to every kind.
pub fn schema_of(kind: &str) -> Option<serde_json::Value> {
    let crd = all().into_iter().find(|c| c.spec.names.kind == kind)?;
    let schema = crd
        .spec
        .versions
        .first()?
        .schema
        .as_ref()?
        .open_api_v3_schema
        .as_ref()?;
    let mut value = serde_json::to_value(schema).ok()?;
    let properties = value.get_mut("properties")?.as_object_mut()?;
    properties.insert("apiVersion".into(), serde_json::json!({"type": "string"}));
    properties.insert("kind".into(), serde_json::json!({"type": "string"}));
    properties.insert("metadata".into(), serde_json::json!({"type": "object"}));
    Some(value)
}
