//! Consolidation finds the whole set of nodes it can delete, not only a prefix of its
//! disruption order: a node that cannot go does not stop the ones after it. It replaces a
//! node by smaller ones when that costs less, and takes no move that saves less than asked
//! or, in a Balanced NodePool, less than its disruption is worth.

use k8s_openapi::api::core::v1::Pod;
use kerf_api::labels;
use kerf_api::nodepool::ConsolidationPolicy;
use kerf_core::benchmark::BenchCluster;
use kerf_core::cluster::CapacityType;
use kerf_core::disruption::search::{Command, MinSavings, plan};

fn pod(name: &str, cpu: &str, pinned_to: Option<&str>) -> Pod {
    sized(name, cpu, "256Mi", pinned_to)
}

fn sized(name: &str, cpu: &str, memory: &str, pinned_to: Option<&str>) -> Pod {
    let selector = pinned_to.map(|n| serde_json::json!({labels::HOSTNAME: n}));
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeSelector": selector,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        },
    }))
    .expect("a valid pod")
}

#[test]
fn a_node_that_cannot_go_does_not_keep_the_next_ones() {
    let mut c = BenchCluster::generate(0, 1);
    // node-a goes first in the order (fewest pods) but its pod is pinned to it
    let layout: [(&str, usize, Vec<Pod>); 4] = [
        ("node-a", 3, vec![pod("a0", "3", Some("node-a"))]),
        (
            "node-b",
            7,
            vec![pod("b0", "500m", None), pod("b1", "500m", None)],
        ),
        (
            "node-c",
            7,
            (0..3)
                .map(|i| pod(&format!("c{i}"), "500m", None))
                .collect(),
        ),
        (
            "node-d",
            15,
            (0..4).map(|i| pod(&format!("d{i}"), "1", None)).collect(),
        ),
    ];
    c.daemonsets.clear();
    for (name, type_index, pods) in layout {
        c.add_node(name, type_index, "test-zone-1", pods, true);
    }
    let command = plan(&c.view(4), &mut kerf_scheduling::Catalog::default())
        .expect("something to consolidate");
    assert_eq!(
        command.candidates,
        [1, 2],
        "node-b and node-c, not stopped by node-a"
    );
    assert!(command.replacements.is_empty());
    let saved = c.nodes[1].price_per_hour + c.nodes[2].price_per_hour;
    assert!((command.savings - saved).abs() < 1e-9);
}

/// A node whose cpu-heavy pod fits on one node and memory-heavy pod on another goes,
/// though no single node has room for both pods' largest requests.
#[test]
fn pods_that_fit_on_different_nodes_let_their_node_go() {
    let mut c = BenchCluster::generate(0, 1);
    c.daemonsets.clear();
    // three 8-cpu, 16 GiB nodes: one with cpu to spare, one with memory to spare
    let cpu_room = vec![sized("x0", "1", "15Gi", Some("cpu-room"))];
    c.add_node("cpu-room", 7, "test-zone-1", cpu_room, true);
    let memory_room = vec![sized("y0", "7", "1Gi", Some("memory-room"))];
    c.add_node("memory-room", 7, "test-zone-1", memory_room, true);
    let mixed = vec![
        sized("z0", "4", "512Mi", None),
        sized("z1", "500m", "8Gi", None),
    ];
    c.add_node("mixed", 7, "test-zone-1", mixed, true);
    let command = plan(&c.view(4), &mut kerf_scheduling::Catalog::default())
        .expect("mixed's pods fit on the other two");
    assert_eq!(
        (command.candidates, command.replacements.len()),
        (vec![2], 0),
        "mixed deleted, nothing launched"
    );
}

/// An on-demand NodePool of three types: small (2 vCPU, $0.10), medium (4 vCPU, $0.60) and
/// big (16 vCPU, $1.00). Three 900m pods fit one medium node, or two small ones for less.
fn three_sizes(policy: ConsolidationPolicy) -> BenchCluster {
    let mut c = BenchCluster::generate(0, 1);
    let all = kerf_scheduling::benchmark::instance_types();
    let priced = |i: usize, price: f64| {
        let mut t = all[i].clone();
        t.offerings
            .retain(|o| o.capacity_type == labels::CAPACITY_TYPE_ON_DEMAND);
        for o in &mut t.offerings {
            o.price_per_hour = price;
        }
        t
    };
    let types = vec![priced(1, 0.10), priced(3, 0.60), priced(15, 1.00)];
    c.node_pool_input.instance_types = types.into();
    on_demand_only(&mut c);
    c.node_pool.spec.disruption.consolidation_policy = policy;
    c
}

/// Rules spot out of the NodePool, as its types offer none: a replacement that may be spot
/// is pinned to spot.
fn on_demand_only(c: &mut BenchCluster) {
    c.node_pool_input.requirements = vec![kerf_api::NodeSelectorRequirementWithMinValues {
        key: labels::CAPACITY_TYPE.into(),
        operator: kerf_api::Operator::In,
        values: vec![labels::CAPACITY_TYPE_ON_DEMAND.into()],
        min_values: None,
    }];
}

/// Three 900m pods, each with a `karpenter.sh/disruption-cost` when given.
fn three_pods(node: &str, disruption_cost: Option<&str>) -> Vec<Pod> {
    (0..3)
        .map(|i| {
            let mut p = pod(&format!("{node}-{i}"), "900m", None);
            if let Some(cost) = disruption_cost {
                let annotation = ("karpenter.sh/disruption-cost".to_string(), cost.to_string());
                p.metadata.annotations = Some([annotation].into());
            }
            p
        })
        .collect()
}

fn planned(c: &BenchCluster, min_savings: MinSavings) -> Option<Command> {
    let view = kerf_core::disruption::search::ClusterView {
        min_savings,
        ..c.view(1)
    };
    plan(&view, &mut kerf_scheduling::Catalog::default())
}

#[test]
fn a_node_is_split_into_smaller_ones_when_they_cost_less_than_one_cheaper_node() {
    let mut c = three_sizes(ConsolidationPolicy::WhenEmptyOrUnderutilized);
    c.daemonsets.clear();
    c.add_node("big", 2, "test-zone-1", three_pods("big", None), true);
    let command = planned(&c, MinSavings::default()).expect("a cheaper packing");
    assert_eq!(command.candidates, [0]);
    let types: Vec<&str> = (command.replacements.iter())
        .map(|r| r.launch.instance_type.as_str())
        .collect();
    // Karpenter's packing would launch one medium node and save $0.40
    assert_eq!(types, ["fake-it-1", "fake-it-1"], "{command:?}");
    assert!((command.savings - 0.80).abs() < 1e-9, "{command:?}");
}

/// A split is planned only when its pods' LP bound is at least 1 % below the node's price:
/// four pods that fill two small nodes ($0.10 each) exactly, on a node bought for a price
/// that those two beat by 2 %, or by 0.5 %.
#[test]
fn a_split_whose_bound_saves_under_one_percent_is_not_planned() {
    let mut c = three_sizes(ConsolidationPolicy::WhenEmptyOrUnderutilized);
    c.daemonsets.clear();
    let half = c.node_pool_input.instance_types[0].allocatable.cpu_millis / 2;
    let pods = (0..4)
        .map(|i| pod(&format!("big-{i}"), &format!("{half}m"), None))
        .collect();
    c.add_node("big", 2, "test-zone-1", pods, true);
    let split_at = |price: f64| {
        let mut view = c.view(1);
        view.nodes[0].price_per_hour = price;
        plan(&view, &mut kerf_scheduling::Catalog::default())
            .map(|c| (c.replacements.len(), c.savings))
    };
    let (replacements, savings) = split_at(0.2 / 0.98).expect("a split saving 2 %");
    assert_eq!(replacements, 2);
    assert!((savings - (0.2 / 0.98 - 0.2)).abs() < 1e-9, "{savings}");
    assert_eq!(split_at(0.2 / 0.995), None, "a split saving 0.5 %");
}

#[test]
fn a_move_saving_less_than_the_minimum_is_not_taken() {
    let mut c = three_sizes(ConsolidationPolicy::WhenEmptyOrUnderutilized);
    c.daemonsets.clear();
    c.add_node("big", 2, "test-zone-1", three_pods("big", None), true);
    let at_least = |per_hour: f64, percent: f64| planned(&c, MinSavings { per_hour, percent });
    // the split saves $0.80 of $1.00 an hour
    assert!(at_least(0.75, 0.0).is_some());
    assert!(at_least(0.85, 0.0).is_none());
    assert!(at_least(0.0, 75.0).is_some());
    assert!(at_least(0.0, 85.0).is_none());
}

/// A Balanced score reads as Karpenter's `ConsolidationApproved` message prints it (Go's
/// `%.2f` and `%.1f`, an infinite score `+Inf`).
#[test]
fn a_balanced_score_reads_as_karpenters_event_message() {
    let s = kerf_core::disruption::search::Score {
        pool: 0,
        savings_fraction: 0.12,
        disruption_fraction: 0.08,
    };
    assert_eq!(
        s.message(),
        "score 1.50 >= threshold 0.50 (k: 2, savings 12.0%, disruption 8.0%)"
    );
    let free = kerf_core::disruption::search::Score {
        disruption_fraction: 0.0,
        ..s
    };
    assert_eq!(
        free.message(),
        "score +Inf >= threshold 0.50 (k: 2, savings 12.0%, disruption 0.0%)"
    );
}

#[test]
fn a_balanced_nodepool_takes_a_move_only_when_it_saves_enough_for_its_disruption() {
    let layout = |policy: ConsolidationPolicy, cost: Option<&str>| {
        let mut c = three_sizes(policy);
        c.daemonsets.clear();
        c.add_node("a", 2, "test-zone-1", three_pods("a", cost), true);
        // a second big node, full with one pod that cannot move: half the NodePool's cost
        c.add_node(
            "b",
            2,
            "test-zone-1",
            vec![pod("b0", "15500m", Some("b"))],
            true,
        );
        planned(&c, MinSavings::default()).map(|c| (c.candidates, c.replacements.len()))
    };
    let split = Some((vec![0], 2));
    // $0.80 of the pool's $2.00 saved (40 %) for 4 of its 6 disruption (67 %): 0.6 >= 1/2
    assert_eq!(layout(ConsolidationPolicy::Balanced, None), split);
    // each pod costs 10 to evict: 31 of 33 (94 %): 0.43 < 1/2
    let costly = Some("1342177280");
    assert_eq!(layout(ConsolidationPolicy::Balanced, costly), None);
    assert_eq!(
        layout(ConsolidationPolicy::WhenEmptyOrUnderutilized, costly),
        split
    );
}

/// Validation checks the command that was decided, as Karpenter's does: a deletion still
/// holds when another node has since become the one a new search would take, and fails
/// once a candidate cannot be disrupted (churn), its pods no longer fit elsewhere (scheduling)
/// or its budget is spent (budget).
#[test]
fn validation_checks_the_decided_candidates_not_a_new_search() {
    use kerf_api::nodepool::DisruptionReason;
    use kerf_core::disruption::search::{Decided, Method, Rejection, revalidate};
    let mut c = BenchCluster::generate(0, 1);
    c.daemonsets.clear();
    c.add_node("roomy", 15, "test-zone-1", vec![pod("r0", "1", None)], true);
    let small = vec![pod("s0", "500m", None), pod("s1", "500m", None)];
    c.add_node("small", 7, "test-zone-1", small, true);
    let decided = Decided {
        reason: DisruptionReason::Underutilized,
        method: Method::MultiNode,
        candidates: vec![1],
        replacements: 0,
    };
    let catalog = &mut kerf_scheduling::Catalog::default();
    let command = revalidate(&c.view(4), catalog, &decided).expect("small's pods fit on roomy");
    assert_eq!(
        (command.candidates, command.replacements.len()),
        (vec![1], 0)
    );
    // an empty node now: a new search deletes it first, validation keeps to `small`
    c.add_node("spare", 7, "test-zone-1", Vec::new(), true);
    let fresh = plan(&c.view(4), catalog).expect("the empty node");
    assert_eq!(fresh.candidates, [2]);
    let command = revalidate(&c.view(4), catalog, &decided).expect("still valid");
    assert_eq!(command.candidates, [1]);
    // a do-not-disrupt pod landed on `small`: it is no candidate any more
    c.nodes[1].disruptable = false;
    assert_eq!(
        revalidate(&c.view(4), catalog, &decided),
        Err(Rejection::Churn)
    );
    c.nodes[1].disruptable = true;
    // `roomy` and `spare` filled up: small's pods would need a new node
    for n in [0, 2] {
        c.nodes[n].node.requested = c.nodes[n].node.allocatable.clone();
    }
    assert_eq!(
        revalidate(&c.view(4), catalog, &decided),
        Err(Rejection::Scheduling)
    );
    // no budget left
    c.nodes[0].node.requested = Default::default();
    assert!(revalidate(&c.view(4), catalog, &decided).is_ok());
    assert_eq!(
        revalidate(&c.view(0), catalog, &decided),
        Err(Rejection::Budget)
    );
}

/// A node whose pods mostly fit on another node is replaced by a node sized for the rest,
/// as Karpenter's single-node consolidation lets pods land on existing nodes: a replacement
/// need not hold all of the node's pods. The split finds it today: `replace_one`'s price
/// floor counts all of a node's pods and skips the node (the book, docs/src/compatibility.md).
#[test]
fn a_node_is_replaced_by_one_sized_for_the_pods_that_do_not_fit_elsewhere() {
    let mut c = three_sizes(ConsolidationPolicy::WhenEmptyOrUnderutilized);
    c.daemonsets.clear();
    let all = c.node_pool_input.instance_types.to_vec();
    let mut big = kerf_scheduling::benchmark::instance_types()[7].clone();
    for o in &mut big.offerings {
        o.price_per_hour = 0.80;
    }
    big.offerings
        .retain(|o| o.capacity_type == labels::CAPACITY_TYPE_ON_DEMAND);
    c.node_pool_input.instance_types = vec![all[0].clone(), big].into();
    c.add_node(
        "room",
        1,
        "test-zone-1",
        vec![pod("r0", "2", Some("room"))],
        true,
    );
    let busy = (0..6).map(|i| pod(&format!("b{i}"), "1", None)).collect();
    c.add_node("busy", 1, "test-zone-1", busy, true);
    let command = planned(&c, MinSavings::default()).expect("busy is replaced");
    assert_eq!(command.candidates, [1]);
    assert_eq!(command.replacements.len(), 1);
    assert!((command.savings - 0.70).abs() < 1e-9, "{}", command.savings);
}

/// An offering: zone, capacity type, price per hour, available.
type Offered<'a> = (&'a str, &'a str, f64, bool);

/// A NodePool over `types` (copies of benchmark types `index`, each offered as said) holding one 8-cpu node, `busy`, with one pod of 1 cpu
/// that may select a zone. `busy` is bought as `capacity_type` at `price`.
fn one_busy_node(
    types: &[(usize, &[Offered<'_>])],
    capacity_type: CapacityType,
    price: f64,
    zone_of_pod: Option<&str>,
) -> BenchCluster {
    let mut c = BenchCluster::generate(0, 1);
    c.daemonsets.clear();
    let all = kerf_scheduling::benchmark::instance_types();
    let types: Vec<_> = (types.iter())
        .map(|(index, offerings)| {
            let mut t = all[*index].clone();
            t.offerings = (offerings.iter())
                .map(
                    |(zone, ct, price, available)| kerf_scheduling::input::Offering {
                        zone: zone.to_string(),
                        capacity_type: ct.to_string(),
                        price_per_hour: *price,
                        available: *available,
                        reservation: None,
                    },
                )
                .collect();
            t
        })
        .collect();
    let busy_type = types.len() - 1;
    c.node_pool_input.instance_types = types.into();
    let mut p = pod("p0", "1", None);
    if let Some(zone) = zone_of_pod {
        p.spec.as_mut().expect("a spec").node_selector =
            Some([(labels::ZONE.to_string(), zone.to_string())].into());
    }
    c.add_node("busy", busy_type, "test-zone-1", vec![p], true);
    let node = c.nodes.last_mut().expect("busy");
    node.capacity_type = capacity_type;
    node.price_per_hour = price;
    c
}

const OD: &str = labels::CAPACITY_TYPE_ON_DEMAND;
const SPOT: &str = labels::CAPACITY_TYPE_SPOT;

fn capacity_type_of(command: &Command) -> Vec<(String, Vec<String>)> {
    (command.replacements[0].requirements.iter())
        .filter(|r| r.key == labels::CAPACITY_TYPE)
        .map(|r| (format!("{:?}", r.operator), r.values.clone()))
        .collect()
}

/// Karpenter keeps a replacement's instance type only when its dearest offering in the
/// capacity type it would launch as, over every zone the replacement may take, costs less
/// than the node (`WorstLaunchPrice`): a type cheap in one zone only is no cheaper node,
/// unless the pods hold the replacement to that zone.
#[test]
fn a_replacement_type_must_cost_less_in_every_zone_the_replacement_may_take() {
    let small: &[Offered<'_>] = &[
        ("test-zone-1", OD, 0.10, true),
        ("test-zone-2", OD, 0.60, true),
    ];
    let big: &[Offered<'_>] = &[("test-zone-1", OD, 0.50, true)];
    let mut c = one_busy_node(&[(1, small), (7, big)], CapacityType::OnDemand, 0.50, None);
    on_demand_only(&mut c);
    assert_eq!(
        planned(&c, MinSavings::default()),
        None,
        "the small type costs $0.60 in test-zone-2"
    );

    let mut c = one_busy_node(
        &[(1, small), (7, big)],
        CapacityType::OnDemand,
        0.50,
        Some("test-zone-1"),
    );
    on_demand_only(&mut c);
    let command = planned(&c, MinSavings::default()).expect("replaced within test-zone-1");
    let launch = &command.replacements[0].launch;
    assert_eq!(
        (launch.instance_type.as_str(), launch.zone.as_str()),
        ("fake-it-1", "test-zone-1")
    );
    assert!((command.savings - 0.40).abs() < 1e-9, "{}", command.savings);
    let types: Vec<&str> = (command.replacements[0].instance_types.iter())
        .map(|o| o.name.as_str())
        .collect();
    assert_eq!(types, ["fake-it-1"], "the node's own type is no cheaper");
}

/// A spot node whose replacement may be spot goes to spot or nowhere (Karpenter's
/// spot-to-spot path), even when spot has run out and on-demand would cost less; a
/// NodePool that rules spot out replaces it with on-demand.
#[test]
fn a_spot_node_is_not_moved_to_on_demand_while_its_replacement_may_be_spot() {
    let small: &[Offered<'_>] = &[
        ("test-zone-1", SPOT, 0.05, false),
        ("test-zone-1", OD, 0.10, true),
    ];
    let big: &[Offered<'_>] = &[
        ("test-zone-1", SPOT, 0.50, true),
        ("test-zone-1", OD, 1.00, true),
    ];
    let mut c = one_busy_node(&[(1, small), (7, big)], CapacityType::Spot, 0.50, None);
    assert_eq!(planned(&c, MinSavings::default()), None, "SpotToSpot off");
    let view = kerf_core::disruption::search::ClusterView {
        spot_to_spot: true,
        terminate_first: Default::default(),
        ..c.view(1)
    };
    assert_eq!(
        plan(&view, &mut kerf_scheduling::Catalog::default()),
        None,
        "no cheaper spot offering is available"
    );

    on_demand_only(&mut c);
    let command = planned(&c, MinSavings::default()).expect("on-demand only: replaced");
    assert_eq!(command.replacements[0].launch.capacity_type, OD);
    assert_eq!(
        capacity_type_of(&command),
        [("In".to_string(), vec![OD.to_string()])]
    );
}

/// An on-demand node's replacement that may be spot or on-demand is priced as spot and
/// pinned to spot, so a spot shortage at launch fails it rather than buying on-demand.
#[test]
fn an_on_demand_nodes_replacement_that_may_be_spot_is_pinned_to_spot() {
    let small: &[Offered<'_>] = &[
        ("test-zone-1", SPOT, 0.05, true),
        ("test-zone-1", OD, 0.60, true),
    ];
    let big: &[Offered<'_>] = &[("test-zone-1", OD, 0.50, true)];
    let c = one_busy_node(&[(1, small), (7, big)], CapacityType::OnDemand, 0.50, None);
    let command = planned(&c, MinSavings::default()).expect("replaced by spot");
    assert_eq!(command.replacements[0].launch.capacity_type, SPOT);
    assert_eq!(
        capacity_type_of(&command),
        [("In".to_string(), vec![SPOT.to_string()])]
    );
    assert!((command.savings - 0.45).abs() < 1e-9, "{}", command.savings);
}

/// One spot node goes to spot only with 15 cheaper spot types, and its replacement is then
/// held to the 15 cheapest, so the launch cannot pick a type the next pass would replace.
#[test]
fn a_spot_to_spot_replacement_takes_the_fifteen_cheapest_of_at_least_fifteen() {
    let spot_node = |type_index: usize| {
        let mut c = BenchCluster::generate(0, 1);
        c.daemonsets.clear();
        c.add_node(
            "busy",
            type_index,
            "test-zone-1",
            vec![pod("p0", "1", None)],
            true,
        );
        let node = c.nodes.last_mut().expect("busy");
        node.capacity_type = CapacityType::Spot;
        c
    };
    let replaced = |c: &BenchCluster| {
        let view = kerf_core::disruption::search::ClusterView {
            spot_to_spot: true,
            terminate_first: Default::default(),
            ..c.view(1)
        };
        plan(&view, &mut kerf_scheduling::Catalog::default())
    };
    // a 32-cpu node: the 2- to 31-cpu types are cheaper and take the pod
    let command = replaced(&spot_node(31)).expect("replaced");
    let r = &command.replacements[0];
    assert_eq!(r.launch.capacity_type, SPOT);
    assert_eq!(r.instance_types.len(), 15);
    let listed = (r.requirements.iter())
        .find(|q| q.key == labels::INSTANCE_TYPE)
        .map(|q| q.values.len());
    assert_eq!(listed, Some(15), "the NodeClaim lists the 15");
    assert_eq!(
        capacity_type_of(&command),
        [("In".to_string(), vec![SPOT.to_string()])]
    );
    // a 10-cpu node: only the 2- to 9-cpu types are cheaper and take the pod
    assert_eq!(replaced(&spot_node(9)), None);
}
