//! Helpers shared by the kerf-api integration tests: the fixtures, and the two validators
//! (Rust and the CRD's schema plus CEL rules) that must agree.

#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;

use kerf_api::manifest::{Checked, RawDocument, check_document, read_documents};
use kerf_api::{Problem, crds, schema};
use serde_json::Value;

/// The repository's fixtures folder.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// Every YAML file of a fixtures subfolder, sorted.
pub fn fixture_files(sub: &str) -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(fixtures().join(sub))
        .expect("fixtures folder")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {sub}");
    files
}

/// The Karpenter documents of a file.
pub fn karpenter_documents(text: &str) -> Vec<RawDocument> {
    read_documents(text)
        .expect("fixture parses")
        .into_iter()
        .filter(|d| d.api_version().starts_with("karpenter."))
        .collect()
}

/// What Kerf's Rust validation says of a document.
pub fn rust_problems(doc: &Value) -> Vec<Problem> {
    match check_document(&RawDocument {
        line: 1,
        value: doc.clone(),
    }) {
        Checked::Valid(_) => Vec::new(),
        Checked::Invalid(p) => p,
        Checked::Other => panic!("not a Karpenter document"),
    }
}

/// What the generated CRD says of a document, as an API server would: the structural
/// schema check, then the x-kubernetes-validations CEL rules (evaluated by kube-cel).
pub fn crd_problems(doc: &Value) -> Vec<String> {
    let kind = doc["kind"].as_str().expect("kind");
    let schema = crds::schema_of(kind).expect("schema");
    let mut pruned = doc.clone();
    let structural = schema::check_and_prune(&mut pruned, &schema);
    let mut out: Vec<String> = structural.problems.iter().map(|p| p.to_string()).collect();
    if let Err(errors) = kube_cel::Validator::new().validate(&schema, doc, None) {
        out.extend(
            errors
                .iter()
                .map(|e| format!("{}: {}", e.field_path, e.message)),
        );
    }
    out
}
