//! Every NodePool and EC2NodeClass of the users' seed documents is accepted by Kerf's
//! validation and by the generated CRDs, and survives a serialize/parse round trip.

mod common;

use common::{crd_problems, fixture_files, karpenter_documents, rust_problems};
use kerf_api::manifest::{Checked, KarpenterObject, RawDocument, check_document};

#[test]
fn seed_manifests_are_valid_for_kerf_and_for_the_crds() {
    let mut checked = 0;
    for file in fixture_files("seeds") {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in karpenter_documents(&text) {
            let what = format!("{}: {}/{}", file.display(), doc.kind(), doc.name());
            assert_eq!(rust_problems(&doc.value), vec![], "{what}");
            assert_eq!(crd_problems(&doc.value), Vec::<String>::new(), "{what}");
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} seed documents");
}

/// Serializes to YAML, parses back to the same value, and the result is still valid.
fn round_trip<T>(object: &T, what: &str)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let yaml = serde_yaml::to_string(object).unwrap();
    let back: T = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(object, &back, "{what}");
    let value = serde_json::to_value(&back).unwrap();
    assert!(
        matches!(
            check_document(&RawDocument { line: 1, value }),
            Checked::Valid(_)
        ),
        "{what}"
    );
}

#[test]
fn fixtures_round_trip() {
    for file in fixture_files("seeds") {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in karpenter_documents(&text) {
            let Checked::Valid(object) = check_document(&doc) else {
                panic!("{}: invalid", file.display());
            };
            let what = file.display().to_string();
            match object {
                KarpenterObject::NodePool(o) => round_trip(&*o, &what),
                KarpenterObject::EC2NodeClass(o) => round_trip(&*o, &what),
                KarpenterObject::NodeClaim(o) => round_trip(&*o, &what),
                KarpenterObject::NodeOverlay(o) => round_trip(&*o, &what),
            }
        }
    }
}

#[test]
fn defaults_are_karpenters() {
    let text =
        std::fs::read_to_string(common::fixtures().join("seeds/000-spot-fallback.yaml")).unwrap();
    let doc = &karpenter_documents(&text)[0];
    let Checked::Valid(KarpenterObject::NodePool(np)) = check_document(doc) else {
        panic!("batch is valid");
    };
    let d = &np.spec.disruption;
    assert_eq!(
        d.consolidation_policy,
        kerf_api::nodepool::ConsolidationPolicy::WhenEmptyOrUnderutilized
    );
    assert_eq!(
        d.consolidate_after.duration(),
        Some(std::time::Duration::ZERO)
    );
    assert_eq!(d.budgets.len(), 1);
    assert_eq!(d.budgets[0].nodes, "10%");
    assert_eq!(
        np.spec.template.spec.expire_after.duration(),
        Some(std::time::Duration::from_secs(720 * 3600))
    );
    assert_eq!(np.spec.weight, Some(100));
}
