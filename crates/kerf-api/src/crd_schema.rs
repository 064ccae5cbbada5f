//! Schema pieces the four CRDs share, in the form Karpenter v1.15's CRDs give them: status
//! conditions, label keys and values in requirements and taints. The derive attributes of the
//! API types refer to these, so that a kube-apiserver given `kerf crds` accepts and refuses
//! what it does under Karpenter's own CRDs.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

/// A label key (and a taint key): an optional DNS-subdomain prefix and `/`, then a name.
pub const LABEL_KEY_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";

/// A label value: empty, or alphanumeric at both ends.
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

const CONDITION_TYPE_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";

fn condition_list(reason: Value, required: &[&str]) -> Schema {
    let mut schema = unmapped_condition_list(reason, required);
    schema.insert("x-kubernetes-list-type".into(), json!("map"));
    schema.insert("x-kubernetes-list-map-keys".into(), json!(["type"]));
    schema
}

fn unmapped_condition_list(reason: Value, required: &[&str]) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "message": {"type": "string", "maxLength": 32768},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
                "reason": reason,
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "type": {"type": "string", "maxLength": 316, "pattern": CONDITION_TYPE_PATTERN},
            },
            "required": required,
        },
    })
}

const STRICT_REASON: &str = "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";

/// `status.conditions` of a NodePool and a NodeOverlay: metav1.Condition's schema, reason and
/// message required, one condition a type.
pub fn conditions(_: &mut SchemaGenerator) -> Schema {
    condition_list(
        json!({"type": "string", "maxLength": 1024, "minLength": 1, "pattern": STRICT_REASON}),
        &["lastTransitionTime", "message", "reason", "status", "type"],
    )
}

/// `status.conditions` of an EC2NodeClass: as a NodePool's, but a plain list.
pub fn ec2nodeclass_conditions(_: &mut SchemaGenerator) -> Schema {
    unmapped_condition_list(
        json!({"type": "string", "maxLength": 1024, "minLength": 1, "pattern": STRICT_REASON}),
        &["lastTransitionTime", "message", "reason", "status", "type"],
    )
}

/// `status.conditions` of a NodeClaim: reason and message may be left out, reason may be empty.
pub fn nodeclaim_conditions(_: &mut SchemaGenerator) -> Schema {
    condition_list(
        json!({"type": "string", "maxLength": 1024,
               "pattern": "^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$"}),
        &["lastTransitionTime", "status", "type"],
    )
}

/// An RFC 3339 time held as a string.
pub fn date_time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "format": "date-time"})
}

/// A requirement's `minValues`: 1 to 50.
pub fn min_values(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "integer", "minimum": 1, "maximum": 50})
}

/// A requirement's `values`, as Karpenter's CRDs give them (the string limits sit on the list,
/// where kube-apiserver does not apply them).
pub fn requirement_values(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = <Vec<String>>::json_schema(generator);
    schema.insert("maxLength".into(), json!(63));
    schema.insert("pattern".into(), json!(LABEL_VALUE_PATTERN));
    schema.insert("x-kubernetes-list-type".into(), json!("atomic"));
    schema
}

/// The CEL rules on a requirement's key: the `karpenter.sh` domain but for capacity type and
/// NodePool, and the hostname, are Karpenter's own.
pub fn requirement_key_rules() -> Value {
    json!([
        {"rule": "self in [\"karpenter.sh/capacity-type\", \"karpenter.sh/nodepool\"] || !self.find(\"^([^/]+)\").endsWith(\"karpenter.sh\")",
         "message": "label domain \"karpenter.sh\" is restricted"},
        {"rule": "self != \"kubernetes.io/hostname\"",
         "message": "label \"kubernetes.io/hostname\" is restricted"},
    ])
}

/// `Gt`, `Lt`, `Gte` and `Lte` each take one non-negative integer (`message` as the kind's
/// CRD words it).
pub fn numeric_operator_rule(message: &str) -> Value {
    json!({
        "rule": "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
        "message": message,
    })
}

/// A NodeClaim's requirements.
pub fn requirements(generator: &mut SchemaGenerator) -> Schema {
    let mut schema =
        <Vec<crate::common::NodeSelectorRequirementWithMinValues>>::json_schema(generator);
    schema.insert("maxItems".into(), json!(100));
    schema.insert("x-kubernetes-list-type".into(), json!("atomic"));
    schema.insert("x-kubernetes-validations".into(), requirement_list_rules());
    schema
}

/// A NodePool template's requirements: a NodeClaim's, the NodePool label also refused as a key.
pub fn nodepool_requirements(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = requirements(generator);
    if let Some(rules) = schema
        .pointer_mut("/items/properties/key/x-kubernetes-validations")
        .and_then(Value::as_array_mut)
    {
        rules.insert(
            1,
            json!({"rule": "self != \"karpenter.sh/nodepool\"",
                   "message": "label \"karpenter.sh/nodepool\" is restricted"}),
        );
    }
    schema
}

/// The rules on a NodePool's or NodeClaim's requirement list.
fn requirement_list_rules() -> Value {
    json!([
        {"rule": "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
         "message": "requirements with operator 'In' must have a value defined"},
        numeric_operator_rule("requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"),
        {"rule": "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
         "message": "requirements with 'minValues' must have at least that many values specified in the 'values' field"},
    ])
}

/// A `nodeClassRef` field that may not be empty.
pub fn not_empty(field: &str) -> Value {
    json!([{"rule": "self != ''", "message": format!("{field} may not be empty")}])
}

/// The CEL rules on a NodePool template's labels.
pub fn template_label_rules() -> Value {
    json!([
        {"rule": "self.all(x, x in [\"karpenter.sh/capacity-type\", \"karpenter.sh/nodepool\"] || !x.find(\"^([^/]+)\").endsWith(\"karpenter.sh\"))",
         "message": "label domain \"karpenter.sh\" is restricted"},
        {"rule": "self.all(x, x != \"karpenter.sh/nodepool\")",
         "message": "label \"karpenter.sh/nodepool\" is restricted"},
        {"rule": "self.all(x, x != \"kubernetes.io/hostname\")",
         "message": "label \"kubernetes.io/hostname\" is restricted"},
    ])
}

/// A list of core/v1 NodeSelectorRequirements (an EC2NodeClass's `status.amis[].requirements`).
pub fn node_selector_requirements(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "key": {"type": "string"},
                "operator": {"type": "string"},
                "values": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "atomic"},
            },
            "required": ["key", "operator"],
        },
    })
}

/// A NodeOverlay's requirements: a NodePool's, without `minValues`, `NotIn` needing a value.
pub fn overlay_requirements(generator: &mut SchemaGenerator) -> Schema {
    let mut schema =
        <Vec<crate::common::NodeSelectorRequirementWithMinValues>>::json_schema(generator);
    if let Some(properties) = schema
        .pointer_mut("/items/properties")
        .and_then(Value::as_object_mut)
    {
        properties.remove("minValues");
    }
    schema.insert("maxItems".into(), json!(100));
    schema.insert("x-kubernetes-list-type".into(), json!("atomic"));
    schema.insert(
        "x-kubernetes-validations".into(),
        json!([
            {"rule": "self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)",
             "message": "requirements with operator 'NotIn' must have a value defined"},
            {"rule": "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
             "message": "requirements with operator 'In' must have a value defined"},
            numeric_operator_rule("requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value"),
        ]),
    );
    schema
}

/// Takes off the `default` schemars writes for a `#[serde(default)]` field that Karpenter's
/// CRD requires instead.
pub fn without_default(schema: &mut Schema) {
    schema.remove("default");
}
