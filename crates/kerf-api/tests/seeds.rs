//! Every NodePool and EC2NodeClass of the users' seed documents is accepted by Kerf's
//! validation and by the generated CRDs, and survives a serialize/parse round trip.

mod common;

use common::{crd_problems, fixture_files, karpenter_documents, rust_problems};
use kerf_api::manifest::{Checked, KarpenterObject, RawDocument, check_document};
use kerf_api::{EC2NodeClass, NodePool};

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

#[test]
fn fixtures_round_trip() {
    for file in fixture_files("seeds") {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in karpenter_documents(&text) {
            let Checked::Valid(object) = check_document(&doc) else {
                panic!("{}: invalid", file.display());
            };
            let again = |value: serde_json::Value| check_document(&RawDocument { index: 1, value });
            match object {
                KarpenterObject::NodePool(np) => {
                    let yaml = serde_yaml::to_string(&np).unwrap();
                    let back: NodePool = serde_yaml::from_str(&yaml).unwrap();
                    assert_eq!(*np, back, "{}", file.display());
                    assert!(matches!(
                        again(serde_json::to_value(&back).unwrap()),
                        Checked::Valid(_)
                    ));
                }
                KarpenterObject::EC2NodeClass(nc) => {
                    let yaml = serde_yaml::to_string(&nc).unwrap();
                    let back: EC2NodeClass = serde_yaml::from_str(&yaml).unwrap();
                    assert_eq!(*nc, back, "{}", file.display());
                    assert!(matches!(
                        again(serde_json::to_value(&back).unwrap()),
                        Checked::Valid(_)
                    ));
                }
                KarpenterObject::NodeClaim(_) => {}
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
