//! Consolidation finds the whole set of nodes it can delete, not only a prefix of its
//! disruption order: a node that cannot go does not stop the ones after it.

use k8s_openapi::api::core::v1::Pod;
use kerf_api::labels;
use kerf_core::benchmark::Cluster;
use kerf_core::consolidation::plan;

fn pod(name: &str, cpu: &str, pinned_to: Option<&str>) -> Pod {
    let selector = pinned_to.map(|n| serde_json::json!({labels::HOSTNAME: n}));
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeSelector": selector,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
        },
    }))
    .expect("a valid pod")
}

#[test]
fn a_node_that_cannot_go_does_not_keep_the_next_ones() {
    let mut c = Cluster::generate(0, 1);
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
