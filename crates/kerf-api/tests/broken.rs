//! The broken variants of the seed manifests are rejected, by Kerf with the expected field
//! paths and hints, and by the generated CRDs.

mod common;

use common::{crd_problems, fixture_files, karpenter_documents, rust_problems};

#[test]
fn broken_manifests_are_rejected_with_paths_and_hints() {
    for file in fixture_files("broken") {
        let text = std::fs::read_to_string(&file).unwrap();
        let expectations: Vec<(String, String)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .map(|l| {
                let (path, needle) = l.split_once(": ").expect("expect: PATH: TEXT");
                (path.to_string(), needle.to_string())
            })
            .collect();
        assert!(
            !expectations.is_empty(),
            "{}: no expectations",
            file.display()
        );
        let docs = karpenter_documents(&text);
        assert_eq!(docs.len(), 1, "{}", file.display());
        let problems = rust_problems(&docs[0].value);
        for (path, needle) in &expectations {
            assert!(
                problems
                    .iter()
                    .any(|p| &p.path == path && p.message.contains(needle.as_str())),
                "{}: expected {path}: …{needle}…, got {problems:#?}",
                file.display()
            );
        }
        assert_eq!(
            problems.len(),
            expectations.len(),
            "{}: {problems:#?}",
            file.display()
        );
    }
}

/// What the CRDs alone can catch: all of the broken seeds but two. The backwards cron range
/// passes every OpenAPI pattern and CEL rule Karpenter ships (that is the point of checking it
/// in Kerf), and an invalid metadata.name is rejected by the API server's own object-meta
/// validation, which applies to every kind, not by the CRD.
#[test]
fn crds_reject_the_broken_seeds_too() {
    for file in fixture_files("broken") {
        let text = std::fs::read_to_string(&file).unwrap();
        let doc = &karpenter_documents(&text)[0];
        let problems = crd_problems(&doc.value);
        let name = file.display().to_string();
        let outside_the_crd = name.contains("fixed-durations") || name.contains("placeholders");
        assert_eq!(
            problems.is_empty(),
            outside_the_crd,
            "{name}: {problems:#?}"
        );
    }
}
