//! Reading the cluster's zonal shifts from ARC (moto's stand-in in `scripts/moto-server.py`):
//! a cluster ARC does not manage is refused at start in Karpenter's words, and applied,
//! unexpired shifts are the zones shifted away from.

mod support;

use std::collections::BTreeSet;

use kerf_aws_provider::zonal_shift::ZonalShifts;
use serde_json::json;
use support::{CLUSTER, Moto};

#[tokio::test]
async fn the_shifts_of_the_cluster_are_read_from_arc() {
    let moto = Moto::start("zonal-shift", &[]);
    let config = moto.config().await;
    moto.create_cluster().await;
    let arn = kerf_aws_provider::cluster::arn(&config, CLUSTER)
        .await
        .expect("the cluster's ARN");
    assert!(arn.ends_with(&format!(":cluster/{CLUSTER}")), "{arn}");
    let shifts = ZonalShifts::new(&config, arn.clone());

    // not enabled for zonal shift: refused as Karpenter refuses to start
    let refused = shifts.check().await.expect_err("not managed");
    assert!(
        refused.starts_with(&format!(
            "Unable to find Cluster {arn} in Zonal Shift. Please check that the cluster is enabled for Zonal Shift and roles have appropriate permissions"
        )),
        "{refused}"
    );
    assert!(refused.contains("ResourceNotFoundException"), "{refused}");

    moto.set_zonal_shifts(Some(json!([])));
    shifts.check().await.expect("managed, nothing shifted");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64;
    assert!(shifts.shifted(now).is_empty());

    // one applied, one not yet, one over
    moto.set_zonal_shifts(Some(json!([
        {"awayFrom": "apne2-az1", "expiryTime": now + 600},
        {"awayFrom": "apne2-az3", "expiryTime": now + 600, "appliedStatus": "NOT_APPLIED"},
        {"awayFrom": "apne2-az2", "expiryTime": now - 1},
    ])));
    shifts.update().await.expect("read");
    assert_eq!(
        shifts.shifted(now),
        BTreeSet::from(["apne2-az1".to_string()])
    );

    moto.set_zonal_shifts(Some(json!([])));
    shifts.update().await.expect("read");
    assert!(
        shifts.shifted(now).is_empty(),
        "an empty answer ends every shift"
    );
}
