//! The on-demand price model prices every type in AWS's us-east-1 list within 2%, or names
//! it as an exception; types without a list price are not offered.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kerf_aws::pricing::model;
use kerf_aws::{catalog, instance_types};

fn list_prices() -> BTreeMap<String, f64> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/ec2-on-demand-prices-us-east-1.csv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .skip(1)
        .map(|l| {
            let (name, price) = l.split_once(',').expect("instance_type,usd_per_hour");
            (name.to_string(), price.parse().expect("price"))
        })
        .collect()
}

#[test]
fn model_prices_every_listed_type_within_two_percent() {
    let list = list_prices();
    let mut checked = 0;
    let mut exceptions = 0;
    for (name, &price) in &list {
        let Some(info) = catalog::get(name) else {
            continue; // listed by AWS but not in moto's catalog: Kerf cannot launch it
        };
        let modelled = model()
            .on_demand(info)
            .unwrap_or_else(|| panic!("{name} has no modelled price"));
        assert!(
            (modelled - price).abs() <= 0.02 * price,
            "{name}: model {modelled:.5} vs list {price}"
        );
        checked += 1;
        exceptions += usize::from(model().is_exception(name));
    }
    assert!(checked > 1200, "only {checked} types checked");
    assert!(
        exceptions * 10 < checked,
        "{exceptions} exceptions is not a compact model"
    );
}

#[test]
fn unpriced_types_are_not_offered() {
    let list = list_prices();
    let types = instance_types("us-east-1", &Default::default()).unwrap();
    assert!(types.iter().all(|t| list.contains_key(t.name())));
    assert!(
        catalog::all().iter().any(|t| !list.contains_key(&t.name)),
        "the catalog has unpriced types"
    );
    // cheapest first, and spot below on-demand in every zone
    let price = |t: &kerf_aws::InstanceType| t.cheapest().unwrap().price_per_hour;
    assert!(types.windows(2).all(|w| price(&w[0]) <= price(&w[1])));
    let m5 = types.iter().find(|t| t.name() == "m5.large").unwrap();
    for o in m5.offerings.iter().filter(|o| o.capacity_type == "spot") {
        assert!(o.price_per_hour < 0.096 * 0.5, "{o:?}");
    }
}

#[test]
fn other_regions_use_their_zones() {
    let types = instance_types("ap-northeast-2", &Default::default()).unwrap();
    let c5a = types
        .iter()
        .find(|t| t.name() == "c5a.2xlarge")
        .expect("c5a.2xlarge in ap-northeast-2");
    assert!(
        c5a.offerings
            .iter()
            .all(|o| o.zone.starts_with("ap-northeast-2"))
    );
    assert!(instance_types("mars-1", &Default::default()).is_err());
}
