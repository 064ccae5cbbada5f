//! Reading multi-document YAML manifests into checked Karpenter objects.
//!
//! Each document is checked in two steps: structurally against the CRD schema (every wrong
//! type, unknown field and bad enum at once, as the API server's strict field validation
//! does), then, once it has the right shape, by the typed [`Validate`] rules. Known leftovers
//! of the v1beta1 API get a hint naming the v1 spelling.

use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::Value;

use crate::validation::{Problem, Validate};
use crate::{EC2NodeClass, NodeClaim, NodePool, crds, schema};

/// A YAML stream that could not be parsed at all.
#[derive(Debug, Clone, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    /// 1-based line of the error.
    pub line: usize,
    /// 1-based column of the error.
    pub column: usize,
    /// What the YAML parser found.
    pub message: String,
}

/// One document of a stream, as JSON, with where it starts.
#[derive(Debug, Clone)]
pub struct RawDocument {
    /// 1-based position of the document in the stream.
    pub index: usize,
    /// The document's content.
    pub value: Value,
}

impl RawDocument {
    /// `apiVersion` of the document, or "".
    pub fn api_version(&self) -> &str {
        self.value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    /// `kind` of the document, or "".
    pub fn kind(&self) -> &str {
        self.value.get("kind").and_then(Value::as_str).unwrap_or("")
    }
    /// `metadata.name` of the document, or "".
    pub fn name(&self) -> &str {
        self.value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// Splits a YAML stream into documents; empty documents are dropped.
pub fn read_documents(text: &str) -> Result<Vec<RawDocument>, ParseError> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let yaml = serde_yaml::Value::deserialize(doc).map_err(|e| {
            let loc = e.location();
            ParseError {
                line: loc.as_ref().map_or(0, |l| l.line()),
                column: loc.as_ref().map_or(0, |l| l.column()),
                message: e.to_string(),
            }
        })?;
        if yaml.is_null() {
            continue;
        }
        let value = serde_json::to_value(&yaml).map_err(|e| ParseError {
            line: 0,
            column: 0,
            message: format!("document {}: {e}", i + 1),
        })?;
        out.push(RawDocument {
            index: i + 1,
            value,
        });
    }
    Ok(out)
}

/// A Karpenter object that passed every check.
#[derive(Debug, Clone)]
pub enum KarpenterObject {
    /// A karpenter.sh/v1 NodePool.
    NodePool(Box<NodePool>),
    /// A karpenter.sh/v1 NodeClaim.
    NodeClaim(Box<NodeClaim>),
    /// A karpenter.k8s.aws/v1 EC2NodeClass.
    EC2NodeClass(Box<EC2NodeClass>),
}

/// What checking one document found.
#[derive(Debug, Clone)]
pub enum Checked {
    /// A valid Karpenter object.
    Valid(KarpenterObject),
    /// A Karpenter object with problems.
    Invalid(Vec<Problem>),
    /// Not a Karpenter kind; left to other readers.
    Other,
}

/// The kinds this crate checks, by apiVersion and kind.
fn is_karpenter(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        ("karpenter.sh/v1", "NodePool")
            | ("karpenter.sh/v1", "NodeClaim")
            | ("karpenter.k8s.aws/v1", "EC2NodeClass")
    )
}

static SCHEMAS: LazyLock<[(String, Value); 3]> = LazyLock::new(|| {
    ["NodePool", "NodeClaim", "EC2NodeClass"]
        .map(|k| (k.to_string(), crds::schema_of(k).unwrap_or(Value::Null)))
});

/// Checks one document: structure first, then the typed rules.
pub fn check_document(doc: &RawDocument) -> Checked {
    let (api_version, kind) = (doc.api_version(), doc.kind());
    let group = api_version.split('/').next().unwrap_or("");
    if !is_karpenter(api_version, kind) {
        if group == "karpenter.sh" || group == "karpenter.k8s.aws" {
            return Checked::Invalid(vec![Problem::new(
                "apiVersion",
                format!(
                    "{api_version} {kind} is not served: Kerf reads karpenter.sh/v1 NodePool and NodeClaim and karpenter.k8s.aws/v1 EC2NodeClass; migrate the manifest to v1"
                ),
            )]);
        }
        return Checked::Other;
    }
    let schema = &SCHEMAS
        .iter()
        .find(|(k, _)| k == kind)
        .expect("karpenter kind has a schema")
        .1;
    let mut pruned = doc.value.clone();
    let structural = schema::check_and_prune(&mut pruned, schema);
    let mut problems = structural.problems;
    for p in &mut problems {
        add_hint(p);
    }
    // The pruned document has the right shape (or lacks a required field Rust can default):
    // the typed rules check what is left.
    let typed = match kind {
        "NodePool" => typed::<NodePool>(&pruned).map(|o| KarpenterObject::NodePool(Box::new(o))),
        "NodeClaim" => typed::<NodeClaim>(&pruned).map(|o| KarpenterObject::NodeClaim(Box::new(o))),
        _ => typed::<EC2NodeClass>(&pruned).map(|o| KarpenterObject::EC2NodeClass(Box::new(o))),
    };
    match typed {
        Err(_) if structural.missing_required => Checked::Invalid(problems),
        Err(p) => {
            problems.push(p);
            Checked::Invalid(problems)
        }
        Ok(object) => {
            let semantic = match &object {
                KarpenterObject::NodePool(o) => o.validate(),
                KarpenterObject::NodeClaim(o) => o.validate(),
                KarpenterObject::EC2NodeClass(o) => o.validate(),
            };
            for p in semantic {
                if !problems.iter().any(|q| q.path == p.path) {
                    problems.push(p);
                }
            }
            if problems.is_empty() {
                Checked::Valid(object)
            } else {
                Checked::Invalid(problems)
            }
        }
    }
}

fn typed<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, Problem> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        Problem::new(
            if path == "." { "<root>".into() } else { path },
            e.into_inner().to_string(),
        )
    })
}

/// Appends the v1 spelling to problems that come from v1beta1 habits.
fn add_hint(p: &mut Problem) {
    let hint = match p.path.as_str() {
        "spec.disruption.consolidationPolicy" if p.message.contains("\"WhenUnderutilized\"") => {
            "karpenter.sh/v1 renamed WhenUnderutilized to WhenEmptyOrUnderutilized"
        }
        "spec.disruption.expireAfter" if p.message == "unknown field" => {
            "karpenter.sh/v1 moved expireAfter to spec.template.spec.expireAfter"
        }
        "spec.template.spec.kubelet" if p.message == "unknown field" => {
            "karpenter.sh/v1 moved kubelet settings to the EC2NodeClass's spec.kubelet"
        }
        _ => return,
    };
    p.message = format!("{}; hint: {hint}", p.message);
}
