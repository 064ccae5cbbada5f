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
use crate::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool, crds, schema};

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
    /// 1-based line of the stream where the document's content starts (0 when it did not
    /// come from a file).
    pub line: usize,
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
    let mut starts = document_starts(text).into_iter();
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
            line: starts.next().unwrap_or(0),
            value,
        });
    }
    Ok(out)
}

/// Whether a line holds YAML content (not blank, not a comment).
fn is_content(line: &str) -> bool {
    let t = line.trim_start();
    !t.is_empty() && !t.starts_with('#')
}

/// The 1-based first content line of each document of a stream that has content, in order:
/// documents are separated by `---` lines.
fn document_starts(text: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut open = true; // looking for the current document's first content line
    for (i, line) in text.lines().enumerate() {
        if let Some(rest) = line.strip_prefix("---")
            && (rest.is_empty() || rest.starts_with([' ', '\t']))
        {
            open = true;
            if is_content(rest) {
                starts.push(i + 1);
                open = false;
            }
            continue;
        }
        if open && is_content(line) && line.trim() != "..." {
            starts.push(i + 1);
            open = false;
        }
    }
    starts
}

/// One step of a field path: a key, or an item of a list.
enum Step<'a> {
    Key(&'a str),
    Item(usize),
}

/// The steps of `spec.template.spec.containers[1].resources`.
fn steps(path: &str) -> impl Iterator<Item = Step<'_>> {
    path.split('.').flat_map(|part| {
        let (key, items) = part.split_once('[').unwrap_or((part, ""));
        let items = items
            .split('[')
            .filter_map(|i| i.trim_end_matches(']').parse().ok())
            .map(Step::Item);
        (!key.is_empty() && key != "<root>")
            .then_some(Step::Key(key))
            .into_iter()
            .chain(items)
    })
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The key a block-YAML line starts (after any `- `), unquoted, and its column.
fn key_of(line: &str) -> Option<(&str, usize)> {
    let mut rest = line.trim_start();
    while let Some(r) = rest.strip_prefix("- ") {
        rest = r.trim_start();
    }
    let column = line.len() - rest.len();
    let (key, after) = rest.split_once(':')?;
    if !(after.is_empty() || after.starts_with([' ', '\t'])) {
        return None;
    }
    Some((key.trim().trim_matches(['"', '\'']), column))
}

/// The 1-based line of a field of the document starting at `doc_line`, found by following
/// `path` (`spec.template.spec.containers[1].resources`) key by key and item by item through
/// block YAML; the deepest step found when the rest cannot be (a flow-style value, a field
/// that is absent). Lets an editor jump to the field a problem names.
pub fn field_line(text: &str, doc_line: usize, path: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let first = doc_line.saturating_sub(1).min(lines.len());
    let end = (first + 1..lines.len())
        .find(|&i| lines[i].starts_with("---"))
        .unwrap_or(lines.len());
    // where the current node's children are searched: from a line, up to where the
    // indentation says the node ends
    let (mut from, mut until) = (first, end);
    let mut found = doc_line;
    for step in steps(path) {
        let hit = match step {
            Step::Key(name) => (from..until).find_map(|i| {
                key_of(lines[i])
                    .filter(|(k, _)| *k == name)
                    .map(|(_, column)| (i, column))
            }),
            Step::Item(n) => {
                let items = (from..until)
                    .find(|&i| lines[i].trim_start().starts_with("- "))
                    .map(|i| indent(lines[i]));
                (from..until)
                    .filter(|&i| {
                        lines[i].trim_start().starts_with("- ") && Some(indent(lines[i])) == items
                    })
                    .nth(n)
                    .map(|i| (i, indent(lines[i])))
            }
        };
        let Some((line, column)) = hit else {
            break;
        };
        found = line + 1;
        let content = |i: &usize| is_content(lines[*i]);
        (from, until) = match step {
            // a key's value: the lines indented past it, or a list at its own column
            Step::Key(_) => (
                line + 1,
                (line + 1..until)
                    .filter(content)
                    .find(|&i| {
                        let d = indent(lines[i]);
                        d < column || d == column && !lines[i].trim_start().starts_with("- ")
                    })
                    .unwrap_or(until),
            ),
            // an item: its own line (its first key follows the dash) and those indented past
            // the dash
            Step::Item(_) => (
                line,
                (line + 1..until)
                    .filter(content)
                    .find(|&i| indent(lines[i]) <= column)
                    .unwrap_or(until),
            ),
        };
    }
    found
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
    /// A karpenter.sh/v1alpha1 NodeOverlay.
    NodeOverlay(Box<NodeOverlay>),
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
            | ("karpenter.sh/v1alpha1", "NodeOverlay")
    )
}

static SCHEMAS: LazyLock<[(String, Value); 4]> = LazyLock::new(|| {
    ["NodePool", "NodeClaim", "EC2NodeClass", "NodeOverlay"]
        .map(|k| (k.to_string(), crds::schema_of(k).unwrap_or(Value::Null)))
});

/// The structural schema of a Karpenter kind (`NodePool`, `NodeClaim`, `EC2NodeClass`).
pub fn schema(kind: &str) -> Option<&'static Value> {
    SCHEMAS.iter().find(|(k, _)| k == kind).map(|(_, s)| s)
}

/// Checks one document: structure first, then the typed rules.
pub fn check_document(doc: &RawDocument) -> Checked {
    let (api_version, kind) = (doc.api_version(), doc.kind());
    let group = api_version.split('/').next().unwrap_or("");
    if api_version.is_empty() {
        let served = [
            ("NodePool", "karpenter.sh/v1"),
            ("NodeClaim", "karpenter.sh/v1"),
            ("EC2NodeClass", "karpenter.k8s.aws/v1"),
            ("NodeOverlay", "karpenter.sh/v1alpha1"),
        ];
        if let Some((_, version)) = served.iter().find(|(k, _)| *k == kind) {
            return Checked::Invalid(vec![Problem::new(
                "apiVersion",
                format!("missing: a {kind} is apiVersion: {version}"),
            )]);
        }
    }
    if !is_karpenter(api_version, kind) {
        if group == "karpenter.sh" || group == "karpenter.k8s.aws" {
            return Checked::Invalid(vec![Problem::new(
                "apiVersion",
                format!(
                    "{api_version} {kind} is not served: Kerf reads karpenter.sh/v1 NodePool and NodeClaim, karpenter.sh/v1alpha1 NodeOverlay and karpenter.k8s.aws/v1 EC2NodeClass; migrate the manifest to v1"
                ),
            )]);
        }
        return Checked::Other;
    }
    let Some(schema) = schema(kind) else {
        return Checked::Other;
    };
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
        "NodeOverlay" => {
            typed::<NodeOverlay>(&pruned).map(|o| KarpenterObject::NodeOverlay(Box::new(o)))
        }
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
                KarpenterObject::NodeOverlay(o) => o.validate(),
            };
            // a rule over an object one of whose fields was pruned for a structural problem
            // read it without that field: what it says there is the structural problem again
            let structural_paths: Vec<String> = problems.iter().map(|q| q.path.clone()).collect();
            let covered = |path: &str| {
                structural_paths.iter().any(|q| {
                    q == path
                        || q.strip_prefix(path).is_some_and(|rest| {
                            let child = rest.strip_prefix('.').unwrap_or(rest);
                            rest.starts_with('.') && !child.contains(['.', '['])
                        })
                })
            };
            for p in semantic {
                if !covered(&p.path) {
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
        "spec.priceAdjustment" if p.message.contains("must match the pattern") => {
            "a signed amount or percent: \"-10%\", \"+0.5\" (at most \"-100%\")"
        }
        "spec.price" if p.message.contains("must match the pattern") => {
            "a price in dollars per hour, such as \"0.0326\""
        }
        _ => return,
    };
    p.message = format!("{}; hint: {hint}", p.message);
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = r"# workloads
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: a
        image: x
      - name: b
        resources:
          reqests:
            cpu: 1
---

kind: Pod
";

    #[test]
    fn documents_know_the_line_they_start_on() {
        let docs = read_documents(STREAM).unwrap();
        let lines: Vec<usize> = docs.iter().map(|d| d.line).collect();
        assert_eq!(lines, [3, 22]);
        let one = read_documents("a: 1\n---\n# c\nb: 2\n").unwrap();
        assert_eq!(one.iter().map(|d| d.line).collect::<Vec<_>>(), [1, 4]);
    }

    #[test]
    fn a_field_path_leads_to_its_line() {
        let at = |path| field_line(STREAM, 3, path);
        assert_eq!(at("spec.replicas"), 8);
        assert_eq!(at("spec.template.spec.containers[1].resources.reqests"), 18);
        assert_eq!(at("spec.template.spec.containers[1].name"), 16);
        assert_eq!(at("spec.template.spec.containers[0].image"), 15);
        // a flow mapping or an absent field: the deepest line found
        assert_eq!(at("spec.template.metadata.labels.app"), 11);
        assert_eq!(at("spec.template.spec.nodeSelector"), 12);
        assert_eq!(at("<root>"), 3);
        // the second document's fields are not the first's
        assert_eq!(field_line(STREAM, 22, "spec.replicas"), 22);
    }
}
