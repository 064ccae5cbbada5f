//! Zonal shift events: which NodePools are told, and only when the shifted zones change.

use std::collections::BTreeSet;

use kerf_api::EC2NodeClass;
use kerf_core::controllers::Controllers;
use kerf_core::observe::Observation;

use crate::support::*;

/// The default class with a subnet in us-east-1a (use1-az1) and us-east-1b (use1-az2).
fn class_in_two_zones() -> EC2NodeClass {
    let mut class = resolved_class(&["ami-1"], &[], &["sg-1"]);
    class.status.as_mut().expect("status").subnets = serde_json::from_value(serde_json::json!([
        {"id": "subnet-a", "zone": "us-east-1a", "zoneID": "use1-az1"},
        {"id": "subnet-b", "zone": "us-east-1b", "zoneID": "use1-az2"},
    ]))
    .expect("subnets");
    class
}

fn pool_requiring(name: &str, requirements: &str) -> kerf_api::NodePool {
    let mut p = pool();
    p.metadata.name = Some(name.into());
    p.spec.template.spec.requirements = serde_yaml::from_str(requirements).expect("requirements");
    p
}

fn shifted(core: &mut Controllers, zones: &[&str], at: u64) -> Vec<kerf_core::controllers::Action> {
    let zones: BTreeSet<String> = zones.iter().map(|z| z.to_string()).collect();
    core.observe(Observation::ZonalShifts(zones), secs(at));
    core.poll(secs(at))
}

#[test]
fn a_shift_is_told_to_the_nodepools_that_could_launch_there_once_and_its_end_too() {
    let mut core = with_pool();
    core.apply_node_class(class_in_two_zones());
    core.apply_node_pool(pool_requiring(
        "zone-b",
        "[{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1b]}]",
    ));
    core.apply_node_pool(pool_requiring(
        "not-az1",
        "[{key: topology.k8s.aws/zone-id, operator: NotIn, values: [use1-az1]}]",
    ));
    let active = "Zonal shift detected: offerings in zone us-east-1a (use1-az1) are unavailable for this NodePool";
    let actions = shifted(&mut core, &["use1-az1"], 10);
    // the default NodePool admits every zone; one pinned to 1b and one refusing az1 do not
    assert_eq!(
        events(&actions, "ZonalShiftActive"),
        [format!("default: {active}")]
    );
    let warning = actions.iter().any(|a| {
        matches!(a, kerf_core::controllers::Action::Event(e) if e.reason == "ZonalShiftActive" && e.warning)
    });
    assert!(warning, "a Warning");
    // the same shifts again: nothing to tell; a zone the class has no subnet in: nobody
    assert!(events(&shifted(&mut core, &["use1-az1"], 40), "ZonalShiftActive").is_empty());
    assert!(
        events(
            &shifted(&mut core, &["use1-az1", "use1-az9"], 70),
            "ZonalShiftActive"
        )
        .is_empty()
    );
    // the shift ends: told as restored, to the same NodePool
    let actions = shifted(&mut core, &["use1-az9"], 100);
    assert_eq!(
        events(&actions, "ZonalShiftCleared"),
        [
            "default: Zonal shift cleared: offerings in zone us-east-1a (use1-az1) are restored for this NodePool"
        ]
    );
    // a shift of 1b reaches the NodePool pinned there too
    let actions = shifted(&mut core, &["use1-az2"], 400);
    let mut told = events(&actions, "ZonalShiftActive");
    told.sort();
    assert_eq!(told.len(), 3, "{told:?}");
    assert!(
        told.iter().all(|t| t.contains("us-east-1b (use1-az2)")),
        "{told:?}"
    );
}
