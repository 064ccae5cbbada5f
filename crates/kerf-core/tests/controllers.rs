//! The controllers driven as a shell drives them: observations in, `poll(now)`, actions out.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::nodepool::DisruptionReason;
use kerf_api::{EC2NodeClass, NodePool};
use kerf_core::cluster::{
    CapacityType, CloudInstance, DriftReason, InstanceNetwork, Launched, NodeRecord,
};
use kerf_core::controllers::{Action, Controllers, EventObject, Settings};
use kerf_core::observe::{Object, Observation};
use kerf_core::repair::NodeCondition;
use kerf_scheduling::resources::Resources;
use kerf_scheduling::{InstanceTypeOption, Offering};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn pool() -> NodePool {
    serde_yaml::from_str(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
    )
    .unwrap()
}

fn two_cpus() -> Resources {
    Resources::from_quantities([
        (&"cpu".to_string(), "2"),
        (&"memory".to_string(), "8Gi"),
        (&"pods".to_string(), "110"),
    ])
}

fn instance_type() -> InstanceTypeOption {
    InstanceTypeOption {
        name: "m5.large".into(),
        labels: BTreeMap::from([("node.kubernetes.io/instance-type".into(), "m5.large".into())])
            .into(),
        capacity: two_cpus(),
        allocatable: two_cpus(),
        offerings: vec![Offering {
            zone: "us-east-1a".into(),
            capacity_type: "on-demand".into(),
            price_per_hour: 0.1,
            available: true,
            reservation: None,
        }],
    }
}

/// A pod kube-scheduler found no node for.
fn unschedulable(name: &str, cpu: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }))
    .unwrap()
}

fn created(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::CreateNodeClaim(c) => c.metadata.name.clone(),
            _ => None,
        })
        .collect()
}

/// Polls until `until`, a second at a time, collecting the actions; the taints asked for
/// are stored and come back as the watch would bring them.
fn run_until(core: &mut Controllers, from: u64, until: u64) -> Vec<Action> {
    let mut all = Vec::new();
    for t in from..=until {
        let actions = core.poll(secs(t));
        for a in &actions {
            if let Action::Taint { node, taint } = a {
                store_taint(core, node, taint, t);
            }
        }
        all.extend(actions);
    }
    all
}

/// The cluster's objects reach the controllers only through [`Controllers::observe`]; these
/// say it shortly, from the records the tests build.
trait Observe {
    fn apply_pod(&mut self, pod: Pod, now: Duration);
    fn delete_pod(&mut self, key: &str, now: Duration);
    fn apply_node_pool(&mut self, np: NodePool);
    fn apply_node_class(&mut self, class: EC2NodeClass);
    fn set_instance_types(&mut self, class: &str, types: Arc<[InstanceTypeOption]>);
    fn apply_node(&mut self, name: String, record: NodeRecord, now: Duration);
    fn nodeclaim_gone(&mut self, name: &str);
}

impl Observe for Controllers {
    fn apply_pod(&mut self, pod: Pod, now: Duration) {
        self.observe(Observation::Applied(Object::Pod(Box::new(pod))), now);
    }
    fn delete_pod(&mut self, key: &str, now: Duration) {
        let (kind, key) = ("Pod".into(), key.to_string());
        self.observe(Observation::Deleted { kind, key }, now);
    }
    fn apply_node_pool(&mut self, np: NodePool) {
        self.observe(Observation::Applied(Object::node_pool(np)), Duration::ZERO);
    }
    fn apply_node_class(&mut self, class: EC2NodeClass) {
        self.observe(
            Observation::Applied(Object::node_class(class)),
            Duration::ZERO,
        );
    }
    fn set_instance_types(&mut self, class: &str, types: Arc<[InstanceTypeOption]>) {
        let node_class = class.to_string();
        // answered for the class as the controllers hold it
        let spec = self
            .cluster()
            .node_classes()
            .get(class)
            .cloned()
            .map(Box::new);
        let answer = Observation::InstanceTypes {
            node_class,
            spec,
            types,
        };
        self.observe(answer, Duration::ZERO);
    }
    fn apply_node(&mut self, name: String, record: NodeRecord, now: Duration) {
        self.observe(
            Observation::Applied(Object::Node(Box::new(node_object(&name, &record)))),
            now,
        );
    }
    fn nodeclaim_gone(&mut self, name: &str) {
        let (kind, key) = ("NodeClaim".into(), format!("/{name}"));
        self.observe(Observation::Deleted { kind, key }, Duration::ZERO);
    }
}

/// The Node object a kubelet and the API server would hold for a record.
fn node_object(name: &str, n: &NodeRecord) -> k8s_openapi::api::core::v1::Node {
    let changed = k8s_openapi::jiff::Timestamp::from_millisecond(
        i64::try_from(n.ready_changed.as_millis()).expect("a time"),
    )
    .expect("a time");
    let taints: Vec<_> = (n.taints.iter())
        .map(|t| serde_json::json!({"key": t.key, "value": t.value, "effect": format!("{:?}", t.effect)}))
        .collect();
    let annotations: BTreeMap<&str, &str> = if n.do_not_disrupt {
        [(kerf_api::labels::DO_NOT_DISRUPT, "true")].into()
    } else {
        BTreeMap::new()
    };
    let finalizers: Vec<&str> = (n
        .finalizer
        .then_some(kerf_api::labels::TERMINATION_FINALIZER))
    .into_iter()
    .collect();
    let deleted = n.deleting.then(|| changed.to_string());
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": *n.labels, "annotations": annotations,
                     "finalizers": finalizers, "deletionTimestamp": deleted},
        "spec": {"providerID": n.provider_id, "taints": taints},
        "status": {
            "allocatable": n.allocatable.to_resource_list(),
            "capacity": n.capacity.to_resource_list(),
            "conditions": [{
                "type": "Ready", "status": if n.ready { "True" } else { "False" },
                "lastTransitionTime": changed.to_string(),
            }],
        },
    }))
    .expect("a Node")
}

/// The API server stores a taint on a node, and the watch brings the node back.
fn store_taint(core: &mut Controllers, node: &str, taint: &kerf_api::Taint, at: u64) {
    if let Some(mut n) = core.cluster().nodes().get(node).cloned() {
        n.taints.push(taint.clone());
        core.apply_node(node.to_string(), n, secs(at));
    }
}

/// Controllers with the default NodePool, offering one instance type.
fn with_pool() -> Controllers {
    let mut core = Controllers::new(Settings::default(), 7);
    core.apply_node_pool(pool());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core
}

/// The cloud launches `claim` as an m5.large at 3 s, and its node registers Ready at 4 s.
fn launch_and_register(core: &mut Controllers, claim: &str) {
    launch_image_and_register(core, claim, None);
}

/// As [`launch_and_register`], booting `image`.
fn launch_image_and_register(core: &mut Controllers, claim: &str, image: Option<&str>) {
    launch_into_and_register(core, claim, image, None);
}

/// The network of an instance in `subnet` with these security groups.
fn network(subnet: &str, groups: &[&str]) -> InstanceNetwork {
    InstanceNetwork {
        subnet_id: subnet.into(),
        security_group_ids: groups.iter().map(|g| g.to_string()).collect(),
    }
}

/// The m5.large the cloud launches for `claim`.
fn instance(claim: &str) -> Launched {
    Launched {
        provider_id: format!("kwok://{claim}"),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::OnDemand,
        price_per_hour: 0.1,
        capacity: two_cpus(),
        allocatable: two_cpus(),
        labels: BTreeMap::new(),
        image_id: None,
        network: None,
    }
}

/// As [`launch_and_register`], booting `image` into `network`.
fn launch_into_and_register(
    core: &mut Controllers,
    claim: &str,
    image: Option<&str>,
    network: Option<InstanceNetwork>,
) {
    let launched = Launched {
        image_id: image.map(str::to_string),
        network,
        ..instance(claim)
    };
    launch_as_and_register(core, claim, launched);
}

/// The cloud launches `claim` as `launched` at 3 s, and its node registers Ready at 4 s.
fn launch_as_and_register(core: &mut Controllers, claim: &str, launched: Launched) {
    launch_as_and_register_tainted(core, claim, launched, Vec::new());
}

/// As [`launch_as_and_register`], the node registering with `taints`.
fn launch_as_and_register_tainted(
    core: &mut Controllers,
    claim: &str,
    launched: Launched,
    taints: Vec<kerf_api::Taint>,
) {
    core.launched(claim, launched, secs(3));
    core.apply_node(
        claim.to_string(),
        NodeRecord {
            provider_id: format!("kwok://{claim}"),
            nodeclaim: None,
            labels: Default::default(),
            taints,
            allocatable: two_cpus(),
            capacity: two_cpus(),
            ready: true,
            ready_changed: Duration::ZERO,
            requests: Resources::default(),
            last_pod_event: secs(4),
            marked_consolidatable: None,
            do_not_disrupt: false,
            tainting: false,
            untainting: false,
            created: secs(4),
            conditions: Vec::new(),
            do_not_repair: false,
            finalizer: false,
            deleting: false,
        },
        secs(4),
    );
}

/// kube-scheduler gives a node's room to another pod: the pod nominated there gets capacity
/// again as soon as the watch shows the node full, not when the nomination window ends.
#[test]
fn a_nominated_pod_whose_node_kube_scheduler_filled_gets_capacity_at_once() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let first = created(&run_until(&mut core, 0, 2));
    assert_eq!(first.len(), 1, "one NodeClaim for the pending pod");
    let claim = first[0].clone();
    launch_and_register(&mut core, &claim);
    core.poll(secs(4));
    assert!(core.cluster().nodeclaims()[&claim].initialized);
    // kube-scheduler gives the room to another pod; x stays pending, nominated
    let mut other = unschedulable("y", "1500m");
    other.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(other, secs(5));
    // the batch window (1 s idle) and no more: x gets a NodeClaim of its own
    let again = created(&run_until(&mut core, 5, 7));
    assert_eq!(again.len(), 1, "the pod was left nominated to a full node");
    assert_ne!(again[0], claim);
}

/// A batch's NodeClaim whose launch has not answered (its create held up by a throttling API
/// server) keeps its pod: the next batch, for another pod, rehearses kube-scheduler with that
/// NodeClaim's node among the seats and makes one NodeClaim, not a second for the first pod.
#[test]
fn the_pod_of_a_nodeclaim_not_yet_launched_is_not_provisioned_for_again() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("a", "1500m"), secs(0));
    let first = created(&run_until(&mut core, 0, 2));
    assert_eq!(first.len(), 1, "one NodeClaim for the first pod");
    // no launch answers; a second pod comes, in a batch of its own
    core.apply_pod(unschedulable("b", "1500m"), secs(3));
    let second = created(&run_until(&mut core, 3, 6));
    assert_eq!(
        second.len(),
        1,
        "the first pod was provisioned for again: {second:?}"
    );
    assert!(core.cluster().nodeclaims()[&first[0]].launched.is_none());
}

/// A nomination holds while its node can still take the pod: another pod bound there that
/// leaves room makes no NodeClaim, then a taint the pod does not tolerate ends it at once.
#[test]
fn a_nomination_holds_while_its_node_has_room_and_ends_with_an_untolerated_taint() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    core.poll(secs(4));
    let mut other = unschedulable("y", "500m");
    other.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(other, secs(5));
    assert!(created(&run_until(&mut core, 5, 12)).is_empty());
    assert_eq!(
        core.cluster().pods()["default/x"].nominated.as_deref(),
        Some(claim.as_str())
    );
    let mut node = core.cluster().nodes()[claim.as_str()].clone();
    node.taints.push(kerf_api::Taint {
        key: "example.com/maintenance".into(),
        value: None,
        effect: kerf_api::TaintEffect::NoSchedule,
        time_added: None,
    });
    core.apply_node(claim.clone(), node, secs(13));
    let again = created(&run_until(&mut core, 13, 15));
    assert_eq!(
        again.len(),
        1,
        "x stayed nominated to a node it cannot go to"
    );
}

/// A Ready node of a managed node group: no NodeClaim, no Kerf labels.
fn unmanaged_node(core: &mut Controllers, zone: &str) {
    unmanaged_node_named(core, "mng-1", zone);
}

/// [`unmanaged_node`], named.
fn unmanaged_node_named(core: &mut Controllers, name: &str, zone: &str) {
    core.apply_node(
        name.into(),
        NodeRecord {
            provider_id: format!("aws:///us-east-1a/i-{name}"),
            nodeclaim: None,
            labels: BTreeMap::from([
                ("kubernetes.io/hostname".into(), name.into()),
                ("topology.kubernetes.io/zone".into(), zone.into()),
            ])
            .into(),
            taints: Vec::new(),
            allocatable: two_cpus(),
            capacity: two_cpus(),
            ready: true,
            ready_changed: Duration::ZERO,
            requests: Resources::default(),
            last_pod_event: secs(0),
            marked_consolidatable: None,
            do_not_disrupt: false,
            tainting: false,
            untainting: false,
            created: secs(0),
            conditions: Vec::new(),
            do_not_repair: false,
            finalizer: false,
            deleting: false,
        },
        secs(0),
    );
}

#[test]
fn a_pod_that_fits_on_a_node_kerf_does_not_manage_gets_no_nodeclaim() {
    let mut core = with_pool();
    unmanaged_node(&mut core, "us-east-1a");
    core.apply_pod(unschedulable("x", "1"), secs(0));
    assert!(created(&run_until(&mut core, 0, 30)).is_empty());
}

#[test]
fn pods_bound_on_a_node_kerf_does_not_manage_count_in_zone_spread() {
    let mut core = Controllers::new(Settings::default(), 7);
    core.apply_node_pool(pool());
    let mut two_zones = instance_type();
    two_zones.offerings.push(Offering {
        zone: "us-east-1b".into(),
        capacity_type: "on-demand".into(),
        price_per_hour: 0.2,
        available: true,
        reservation: None,
    });
    core.set_instance_types("default", Arc::from(vec![two_zones]));
    unmanaged_node(&mut core, "us-east-1a");
    let web = |name: &str, node: Option<&str>| -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m"}}}],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}],
            },
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
        }))
        .unwrap();
        p.spec.as_mut().unwrap().node_name = node.map(str::to_string);
        p
    };
    core.apply_pod(web("web-0", Some("mng-1")), secs(0));
    core.apply_pod(web("web-1", None), secs(0));
    let actions = run_until(&mut core, 0, 15);
    let claims: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::CreateNodeClaim(c) => Some(c.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(claims.len(), 1);
    // us-east-1a is cheaper, but it already has web-0: the spread puts web-1 in us-east-1b
    let zone = claims[0]
        .spec
        .requirements
        .iter()
        .find(|r| r.key == "topology.kubernetes.io/zone")
        .map(|r| r.values.clone());
    assert_eq!(zone, Some(vec!["us-east-1b".to_string()]));
}

/// One node launched for a ReplicaSet's pod, which runs there from 5 s: nothing else can take it.
fn one_node_with_a_replicaset_pod() -> (Controllers, String) {
    let mut core = with_pool();
    let mut x = unschedulable("x", "1");
    x.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "x".into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: None,
        },
    ]);
    core.apply_pod(x.clone(), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    x.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(x, secs(5));
    (core, claim)
}

#[test]
fn consolidation_moves_pods_to_a_node_kerf_does_not_manage() {
    let (mut core, claim) = one_node_with_a_replicaset_pod();
    // nothing else can take x: the node stays
    let idle = run_until(&mut core, 5, 120);
    assert!(
        !idle
            .iter()
            .any(|a| matches!(a, Action::DeleteNodeClaim { .. }))
    );
    // a managed node group's node with room joins: x can move there, and its node goes
    unmanaged_node(&mut core, "us-east-1a");
    let after = run_until(&mut core, 121, 240);
    assert!(
        after
            .iter()
            .any(|a| matches!(a, Action::DeleteNodeClaim { nodeclaim } if *nodeclaim == claim)),
        "{after:#?}"
    );
    // the command's log line counts the pod that moves
    let command = (after.iter())
        .find_map(|a| match a {
            Action::Log(r) if r.message == "disrupting node(s)" => Some(&r.fields),
            _ => None,
        })
        .expect("the command is logged");
    assert_eq!(command["pod-count"], 1, "{command}");
}

/// A deletion the solver packs tightly, which kube-scheduler would not follow: the
/// candidate's small pod (the older, so made again first) and large pod fit the two other
/// nodes' room exactly (large onto the roomier, small onto the other), but kube-scheduler
/// puts the small one on the roomier node (it scores least allocated best), and the large one
/// then fits nowhere and would wait for a new node. The move is dropped; once the room is
/// there for any order, it is made.
#[test]
fn no_consolidation_move_leaves_a_pod_that_kube_scheduler_would_place_nowhere() {
    let mut core = with_pool();
    let bound = |name: &str, cpu: &str, node: &str| {
        let mut p = unschedulable(name, cpu);
        p.spec.as_mut().unwrap().node_name = Some(node.into());
        p
    };
    for (node, fillers) in [("mng-e", ["e-a", "e-b"]), ("mng-f", ["f-a", "f-b"])] {
        unmanaged_node_named(&mut core, node, "us-east-1a");
        core.apply_pod(bound(fillers[0], "1500m", node), secs(0));
        core.apply_pod(bound(fillers[1], "500m", node), secs(0));
    }
    let (mut small, mut large) = (replica("small", "500m"), replica("large", "1500m"));
    core.apply_pod(small.clone(), secs(0));
    core.apply_pod(large.clone(), secs(1));
    let claim = created(&run_until(&mut core, 0, 3))[0].clone();
    launch_and_register(&mut core, &claim);
    for p in [&mut small, &mut large] {
        p.spec.as_mut().unwrap().node_name = Some(claim.clone());
        core.apply_pod(p.clone(), secs(5));
    }
    // mng-e keeps 500m (1.5 cpu free), mng-f 1500m (0.5 free)
    core.delete_pod("default/e-a", secs(6));
    core.delete_pod("default/f-b", secs(6));
    let deleted = |actions: &[Action]| {
        (actions.iter())
            .any(|a| matches!(a, Action::DeleteNodeClaim { nodeclaim } if *nodeclaim == claim))
    };
    let held = run_until(&mut core, 6, 120);
    assert!(!deleted(&held), "{held:#?}");
    assert!(
        (held.iter()).any(|a| matches!(a, Action::Log(l) if l.message
            == "kube-scheduler would leave pod(s) without a node, consolidation move dropped")),
        "{held:#?}"
    );
    // mng-f's other pod goes too: both nodes can take either pod first
    core.delete_pod("default/f-a", secs(121));
    assert!(deleted(&run_until(&mut core, 121, 240)));
}

/// A pod owned by a ReplicaSet (so its node may be consolidated), that kube-scheduler found
/// no node for.
fn replica(name: &str, cpu: &str) -> Pod {
    let mut pod = unschedulable(name, cpu);
    pod.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: format!("{name}-rs"),
            uid: format!("{name}-uid"),
            controller: Some(true),
            block_owner_deletion: None,
        },
    ]);
    pod
}

/// The cloud launches `claim` as an m5.large at `at`, and its node registers Ready a second
/// later.
fn launch_at(core: &mut Controllers, claim: &str, at: u64) {
    core.launched(claim, instance(claim), secs(at));
    let record = NodeRecord {
        provider_id: format!("kwok://{claim}"),
        nodeclaim: None,
        labels: Default::default(),
        taints: Vec::new(),
        allocatable: two_cpus(),
        capacity: two_cpus(),
        ready: true,
        ready_changed: secs(at + 1),
        requests: Resources::default(),
        last_pod_event: secs(at + 1),
        marked_consolidatable: None,
        do_not_disrupt: false,
        tainting: false,
        untainting: false,
        created: secs(at + 1),
        conditions: Vec::new(),
        do_not_repair: false,
        finalizer: false,
        deleting: false,
    };
    core.apply_node(claim.to_string(), record, secs(at + 1));
}

/// x (1 cpu) runs alone on node a, half of it free, by 5 s; w (1500m), too big for a's room,
/// comes at 6 s and gets NodeClaim b, not yet launched: the controllers, a and b.
fn x_on_a_and_w_planned_on_b() -> (Controllers, String, String) {
    let mut core = with_pool();
    let mut x = replica("x", "1");
    core.apply_pod(x.clone(), secs(0));
    let a = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_at(&mut core, &a, 3);
    x.spec.as_mut().unwrap().node_name = Some(a.clone());
    core.apply_pod(x, secs(5));
    core.apply_pod(replica("w", "1500m"), secs(6));
    let b = created(&run_until(&mut core, 6, 9))[0].clone();
    (core, a, b)
}

/// During a burst kube-scheduler binds pods long after Kerf planned them: the room a pod
/// nominated to a new node will take is not given to pods consolidation moves, and while
/// pods wait for capacity the provisioner has not solved for yet, no consolidation move is
/// made (Karpenter's consolidation simulates the pending pods beside the candidates'). Once
/// they are gone, consolidation goes on.
#[test]
fn consolidation_leaves_the_room_of_pods_still_pending_to_them() {
    let (mut core, a, b) = x_on_a_and_w_planned_on_b();
    // b is launched for w, and kube-scheduler has not bound w there yet
    assert_ne!(a, b);
    launch_at(&mut core, &b, 10);
    // b looks empty, and x would fit there: but that room is w's. A command may be weighed
    // while w's nomination lapses and it waits to be solved for again, but none is carried
    // out: no node is tainted or deleted
    for t in 11..=90 {
        for act in core.poll(secs(t)) {
            assert!(
                !matches!(act, Action::Taint { .. } | Action::DeleteNodeClaim { .. }),
                "at {t} s a node was disrupted while a pod it was kept for waited: {act:?}"
            );
        }
    }
    // w goes: x moves onto b (or b, empty, goes) and one node is left
    core.delete_pod("default/w", secs(91));
    let after = run_until(&mut core, 91, 200);
    assert!(
        after
            .iter()
            .any(|act| matches!(act, Action::DeleteNodeClaim { .. })),
        "consolidation stayed blocked once no pod was pending: {after:#?}"
    );
}

/// A node still coming up takes no pod a consolidation move would send it: here x's node
/// stays although x would fit on the other, registered but not yet Ready.
#[test]
fn consolidation_moves_no_pod_onto_a_node_not_yet_initialized() {
    let (mut core, a, b) = x_on_a_and_w_planned_on_b();
    // w goes before b is Ready: b registers, empty, and stays not Ready
    core.delete_pod("default/w", secs(9));
    launch_at(&mut core, &b, 10);
    let mut not_ready = core.cluster().nodes()[&b].clone();
    not_ready.ready = false;
    core.apply_node(b.clone(), not_ready, secs(12));
    for t in 12..=120 {
        for act in core.poll(secs(t)) {
            assert!(
                !matches!(&act, Action::Taint { node, .. } if *node == a),
                "at {t} s x's node was disrupted to move x onto a node still coming up"
            );
        }
    }
    assert!(!core.cluster().nodeclaims()[&b].initialized);
}

/// Two nodes, each with one 500m pod that fits beside the other's, by 35 s; the provisioner's
/// batch window held at 30 s, so that a pod coming later waits that long to be solved for.
fn two_half_empty_nodes() -> Controllers {
    let settings = Settings {
        batch_idle: secs(30),
        batch_max: secs(30),
        ..Settings::default()
    };
    let mut core = Controllers::new(settings, 7);
    core.apply_node_pool(pool());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    // x and y, too big to share a node, get one each
    core.apply_pod(replica("x", "1500m"), secs(0));
    core.apply_pod(replica("y", "1500m"), secs(0));
    let claims = created(&run_until(&mut core, 0, 31));
    assert_eq!(claims.len(), 2, "{claims:?}");
    for claim in &claims {
        launch_at(&mut core, claim, 32);
    }
    // they are replaced by smaller pods, one on each node
    for (old, new, node) in [("x", "x2", &claims[0]), ("y", "y2", &claims[1])] {
        core.delete_pod(&format!("default/{old}"), secs(34));
        let mut pod = replica(new, "500m");
        pod.spec.as_mut().unwrap().node_name = Some(node.clone());
        core.apply_pod(pod, secs(35));
    }
    core
}

/// Pods that come while the provisioner's batch window is open have not been solved for
/// yet: no consolidation move is weighed until they are, since they may need the room it
/// would count on (here: moving y2 beside x2 would leave z, coming meanwhile, no node).
#[test]
fn no_consolidation_move_is_weighed_while_pods_wait_to_be_solved_for() {
    let mut core = two_half_empty_nodes();
    // z comes, as big as the room either node has left; the batch keeps it 30 s
    core.apply_pod(replica("z", "1500m"), secs(36));
    for t in 36..=120 {
        for act in core.poll(secs(t)) {
            assert!(
                !matches!(
                    act,
                    Action::Taint { .. }
                        | Action::DeleteNodeClaim { .. }
                        | Action::CreateNodeClaim(_)
                ),
                "at {t} s: {act:?}"
            );
        }
        if t < 66 {
            assert!(
                !core.command_in_flight(),
                "at {t} s a move was weighed while z waited"
            );
        }
    }
    // z was placed on the room of one of them
    assert!(core.cluster().pods()["default/z"].nominated.is_some());
}

/// A pod no NodePool can host holds consolidation off only until the provisioner has found
/// that out: then the two half-empty nodes are consolidated into one, although the solve
/// that found it wrote nothing.
#[test]
fn consolidation_goes_on_once_waiting_pods_are_found_unplaceable() {
    let mut core = two_half_empty_nodes();
    core.apply_pod(replica("huge", "100"), secs(36));
    let actions = run_until(&mut core, 36, 160);
    assert!(
        (actions.iter()).any(|a| matches!(a, Action::DeleteNodeClaim { .. })),
        "the unplaceable pod kept consolidation off: {actions:#?}"
    );
    assert!(core.cluster().pods()["default/huge"].nominated.is_none());
}

fn events(actions: &[Action], reason: &str) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Event(e) if e.reason == reason => Some(format!("{}: {}", e.name, e.message)),
            _ => None,
        })
        .collect()
}

#[test]
fn pods_get_karpenters_events_and_a_failure_is_told_once_per_five_minutes() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("fits", "1"), secs(0));
    core.apply_pod(unschedulable("huge", "64"), secs(0));
    let first = run_until(&mut core, 0, 299);
    let claim = created(&first)[0].clone();
    assert_eq!(
        events(&first, "Nominated"),
        [format!(
            "default/fits: Pod should schedule on: nodeclaim/{claim}"
        )]
    );
    // retried every 10 s, told once
    let failed = events(&first, "FailedScheduling");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].starts_with("default/huge: Failed to schedule pod, "));
    assert_eq!(
        events(&run_until(&mut core, 300, 320), "FailedScheduling").len(),
        1
    );
}

#[test]
fn a_nodepool_whose_requirements_leave_no_type_is_told_so_once_a_minute_while_pods_wait() {
    let mut core = with_pool();
    let mut typo = pool();
    typo.metadata.name = Some("typo".into());
    typo.spec.template.spec.requirements = serde_yaml::from_str(
        "[{key: node.kubernetes.io/instance-type, operator: In, values: [m5.lrage]}]",
    )
    .unwrap();
    core.apply_node_pool(typo);
    // nothing pending: no scheduling simulation, nothing told
    assert!(events(&run_until(&mut core, 0, 30), "NoCompatibleInstanceTypes").is_empty());
    core.apply_pod(unschedulable("waits", "64"), secs(31));
    let actions = run_until(&mut core, 31, 150);
    let message = "NodePool requirements filtered out all compatible available instance types";
    // retried every 10 s, told on the NodePool once a minute; the default NodePool is fine
    assert_eq!(
        events(&actions, "NoCompatibleInstanceTypes"),
        [format!("typo: {message}"), format!("typo: {message}")]
    );
    let logged = (actions.iter())
        .filter(|a| {
            matches!(a, Action::Log(l) if l.message
                == "skipping, nodepool requirements filtered out all instance types"
                && l.fields["NodePool"]["name"] == "typo")
        })
        .count();
    assert!(logged >= 10, "told {logged} times");
}

#[test]
fn a_candidate_kept_by_do_not_disrupt_gets_disruption_blocked_events_on_node_and_nodeclaim() {
    let mut core = with_pool();
    let mut x = unschedulable("x", "1");
    x.metadata.annotations = Some(BTreeMap::from([(
        "karpenter.sh/do-not-disrupt".to_string(),
        "true".to_string(),
    )]));
    core.apply_pod(x.clone(), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    x.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(x, secs(5));
    let actions = run_until(&mut core, 5, 300);
    let message = "Pod has \"karpenter.sh/do-not-disrupt\" annotation (Pod=default/x)";
    // on the Node (named as the claim here) and on the NodeClaim, once per two minutes each
    let blocked = events(&actions, "DisruptionBlocked");
    assert!(blocked.len() >= 2 && blocked.len() <= 6, "{blocked:?}");
    assert!(blocked.iter().all(|e| *e == format!("{claim}: {message}")));
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::DeleteNodeClaim { .. }))
    );
}

/// The nodes repair commands took.
fn repaired(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Disrupting { reason, nodes } if *reason == DisruptionReason::Unhealthy => {
                Some(nodes.clone())
            }
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn node_repair_waits_out_the_toleration_and_stops_when_a_fifth_of_the_pool_is_unhealthy() {
    let settings = Settings {
        node_repair: true,
        ..Settings::default()
    };
    let mut core = Controllers::new(settings, 7);
    core.apply_node_pool(pool());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    for i in 0..5 {
        core.apply_pod(unschedulable(&format!("p{i}"), "1500m"), secs(0));
    }
    let claims = created(&run_until(&mut core, 0, 2));
    assert_eq!(claims.len(), 5, "one node a pod");
    for c in &claims {
        launch_and_register(&mut core, c);
    }
    let not_ready = |core: &mut Controllers, node: &str, since: u64| {
        let mut record = core.cluster().nodes()[node].clone();
        record.ready = false;
        record.ready_changed = secs(since);
        record.conditions = vec![NodeCondition {
            kind: "Ready".into(),
            status: "False".into(),
            reason: "KubeletNotReady".into(),
            since: secs(since),
        }];
        core.apply_node(node.to_string(), record, secs(since));
    };
    // two of five nodes unhealthy: more than 20 % (one node, rounded up)
    not_ready(&mut core, &claims[0], 10);
    not_ready(&mut core, &claims[1], 10);
    let before = run_until(&mut core, 5, 10 + 30 * 60 - 1);
    assert!(repaired(&before).is_empty(), "within the toleration");
    let blocked = run_until(&mut core, 10 + 30 * 60, 10 + 31 * 60);
    assert!(repaired(&blocked).is_empty());
    // on each unhealthy Node and NodeClaim, and on the NodePool
    let told: std::collections::BTreeSet<String> =
        events(&blocked, "NodeRepairBlocked").into_iter().collect();
    let message = "more than 20% of nodes in nodepool \"default\" are unhealthy";
    assert_eq!(
        told,
        [&claims[0], &claims[1], &"default".to_string()]
            .iter()
            .map(|n| format!("{n}: {message}"))
            .collect(),
        "{blocked:?}"
    );
    // one recovers: one unhealthy node of five may be replaced
    let mut record = core.cluster().nodes()[&claims[1]].clone();
    record.ready = true;
    record.conditions[0].status = "True".into();
    core.apply_node(claims[1].clone(), record, secs(10 + 31 * 60));
    let after = run_until(&mut core, 10 + 31 * 60 + 1, 10 + 32 * 60);
    assert_eq!(repaired(&after), vec![claims[0].clone()]);
    // its drain may take the policy's ten minutes and no longer
    let claim = &core.cluster().nodeclaims()[&claims[0]];
    let deleting = claim.deleting.expect("the NodeClaim is being deleted");
    assert_eq!(
        claim.terminate_at,
        Some(deleting + Duration::from_secs(600))
    );
}

/// The default EC2NodeClass, its status resolving to these AMIs.
fn node_class(amis: &[&str]) -> EC2NodeClass {
    resolved_class(amis, &[], &[])
}

/// The default EC2NodeClass, its status resolving to these AMIs, subnets and security groups.
fn resolved_class(amis: &[&str], subnets: &[&str], groups: &[&str]) -> EC2NodeClass {
    let amis: Vec<serde_json::Value> = amis
        .iter()
        .map(|id| serde_json::json!({"id": id, "requirements": []}))
        .collect();
    let subnets: Vec<serde_json::Value> = subnets
        .iter()
        .map(|id| serde_json::json!({"id": id, "zone": "us-east-1a"}))
        .collect();
    let groups: Vec<serde_json::Value> = groups
        .iter()
        .map(|id| serde_json::json!({"id": id}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"a": "b"}}],
            "securityGroupSelectorTerms": [{"tags": {"a": "b"}}], "role": "r"},
        "status": {"amis": amis, "subnets": subnets, "securityGroups": groups},
    }))
    .unwrap()
}

#[test]
fn a_node_whose_image_the_class_no_longer_resolves_to_has_drifted() {
    let mut core = with_pool();
    core.apply_node_class(node_class(&["ami-1"]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_image_and_register(&mut core, &claim, Some("ami-1"));
    run_until(&mut core, 4, 20);
    assert_eq!(core.cluster().nodeclaims()[&claim].drifted, None);
    // a new release: the alias resolves to another image
    core.apply_node_class(node_class(&["ami-2"]));
    run_until(&mut core, 21, 40);
    assert_eq!(
        core.cluster()
            .nodeclaims()
            .get(&claim)
            .and_then(|c| c.drifted),
        Some(DriftReason::AmiDrift)
    );
    assert_eq!(DriftReason::AmiDrift.as_str(), "AMIDrift");
}

#[test]
fn a_node_whose_image_is_still_resolved_or_unknown_has_not_drifted() {
    let mut core = with_pool();
    core.apply_node_class(node_class(&["ami-1", "ami-arm"]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    core.apply_pod(unschedulable("y", "1500m"), secs(0));
    let claims = created(&run_until(&mut core, 0, 2));
    assert_eq!(claims.len(), 2);
    launch_image_and_register(&mut core, &claims[0], Some("ami-arm"));
    launch_image_and_register(&mut core, &claims[1], None);
    // the class not resolved yet (no AMIs) is no reason either
    core.apply_node_class(node_class(&[]));
    run_until(&mut core, 4, 40);
    for c in &claims {
        assert_eq!(core.cluster().nodeclaims()[c].drifted, None, "{c}");
    }
}

/// The drift reasons of `claims`, in order.
fn drift(core: &Controllers, claims: &[String]) -> Vec<Option<DriftReason>> {
    claims
        .iter()
        .map(|c| core.cluster().nodeclaims().get(c).and_then(|c| c.drifted))
        .collect()
}

#[test]
fn a_node_whose_security_groups_or_subnet_the_class_no_longer_selects_has_drifted() {
    let mut core = with_pool();
    core.apply_node_class(resolved_class(
        &["ami-1"],
        &["subnet-a", "subnet-b"],
        &["sg-1"],
    ));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    core.apply_pod(unschedulable("y", "1500m"), secs(0));
    let claims = created(&run_until(&mut core, 0, 2));
    assert_eq!(claims.len(), 2);
    launch_into_and_register(
        &mut core,
        &claims[0],
        Some("ami-1"),
        Some(network("subnet-a", &["sg-1"])),
    );
    launch_into_and_register(
        &mut core,
        &claims[1],
        Some("ami-1"),
        Some(network("subnet-b", &["sg-1"])),
    );
    run_until(&mut core, 4, 20);
    assert_eq!(drift(&core, &claims), [None, None]);
    // a security group added to the class: neither instance has it
    core.apply_node_class(resolved_class(
        &["ami-1"],
        &["subnet-a", "subnet-b"],
        &["sg-1", "sg-2"],
    ));
    run_until(&mut core, 21, 25);
    let sg = Some(DriftReason::SecurityGroupDrift);
    assert_eq!(drift(&core, &claims), [sg, sg]);
    // the group taken out again and subnet-b no longer selected: only the second has drifted
    core.apply_node_class(resolved_class(&["ami-1"], &["subnet-a"], &["sg-1"]));
    run_until(&mut core, 26, 30);
    assert_eq!(
        drift(&core, &claims),
        [None, Some(DriftReason::SubnetDrift)]
    );
    assert_eq!(DriftReason::SubnetDrift.as_str(), "SubnetDrift");
    assert_eq!(
        DriftReason::SecurityGroupDrift.as_str(),
        "SecurityGroupDrift"
    );
}

#[test]
fn a_restarted_controller_learns_an_instances_network_from_the_cloud_listing() {
    let mut core = with_pool();
    core.apply_node_class(resolved_class(&["ami-1"], &["subnet-a"], &["sg-2"]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    // as read back from its NodeClaim after a restart: no network, so nothing to compare
    launch_into_and_register(&mut core, &claim, Some("ami-1"), None);
    run_until(&mut core, 4, 20);
    assert_eq!(core.cluster().nodeclaims()[&claim].drifted, None);
    let listed = |groups: &[&str]| CloudInstance {
        provider_id: format!("kwok://{claim}"),
        nodeclaim: claim.clone(),
        image_id: Some("ami-1".into()),
        network: Some(network("subnet-a", groups)),
    };
    // a listing without the groups says nothing about them
    core.garbage_collect(&[listed(&[])], secs(21));
    run_until(&mut core, 21, 25);
    assert_eq!(core.cluster().nodeclaims()[&claim].drifted, None);
    core.garbage_collect(&[listed(&["sg-1"])], secs(26));
    run_until(&mut core, 26, 30);
    assert_eq!(
        core.cluster().nodeclaims()[&claim].drifted,
        Some(DriftReason::SecurityGroupDrift)
    );
}

#[test]
fn an_instance_named_apart_from_its_nodeclaim_is_not_an_orphan() {
    // Karpenter kwok names a node `kwok-<nodeclaim>-…`: the cloud listing cannot tell its
    // NodeClaim by name, but the NodeClaim's provider id does
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_into_and_register(&mut core, &claim, None, None);
    run_until(&mut core, 4, 20);
    let provider_id = core.cluster().nodeclaims()[&claim]
        .launched
        .as_ref()
        .expect("launched")
        .provider_id
        .clone();
    let listed = CloudInstance {
        provider_id,
        nodeclaim: format!("kwok-{claim}-silly-name-1"),
        image_id: None,
        network: None,
    };
    core.garbage_collect(&[listed], secs(21));
    let actions = run_until(&mut core, 21, 25);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::DeleteNode { .. } | Action::DeleteInstance { .. })),
        "{actions:?}"
    );
    assert!(core.cluster().nodeclaims().contains_key(&claim));
}

#[test]
fn a_nodeclaim_read_before_its_instance_types_is_priced_when_they_come() {
    // another autoscaler's NodeClaim, listed before the node class's types are known
    let mut core = Controllers::new(Settings::default(), 7);
    core.apply_node_pool(pool());
    let object: kerf_api::NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-k8rpt", "labels": {
            "karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "m5.large",
            "karpenter.sh/capacity-type": "on-demand", "topology.kubernetes.io/zone": "us-east-1a"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []},
        "status": {"providerID": "kwok://default-k8rpt"},
    }))
    .unwrap();
    core.observe(
        Observation::Applied(Object::nodeclaim(object.clone())),
        secs(0),
    );
    let price = |core: &Controllers| {
        core.cluster().nodeclaims()["default-k8rpt"]
            .launched
            .as_ref()
            .map(|l| l.price_per_hour)
    };
    assert_eq!(price(&core), Some(0.0));
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    assert_eq!(price(&core), Some(0.1));
}

/// A NodeClaim another autoscaler created and then launched while these controllers only
/// watched (a Karpenter holding the Lease): read first without an instance, then with one.
/// Its instance is taken as it is: never launched a second time, its node joined to it.
#[test]
fn a_nodeclaim_launched_by_another_writer_after_it_was_read_is_not_launched_again() {
    let mut core = Controllers::new(Settings::default(), 7);
    core.apply_node_pool(pool());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    let mut object: kerf_api::NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-k8rpt", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []},
    }))
    .unwrap();
    core.observe(
        Observation::Applied(Object::nodeclaim(object.clone())),
        secs(0),
    );
    let labels = object.metadata.labels.get_or_insert_default();
    for (k, v) in [
        ("node.kubernetes.io/instance-type", "m5.large"),
        ("karpenter.sh/capacity-type", "on-demand"),
        ("topology.kubernetes.io/zone", "us-east-1a"),
    ] {
        labels.insert(k.into(), v.into());
    }
    object.status =
        Some(serde_json::from_value(serde_json::json!({"providerID": "kwok://other"})).unwrap());
    core.observe(Observation::Applied(Object::nodeclaim(object)), secs(1));
    let actions = run_until(&mut core, 1, 30);
    assert_eq!(launches(&actions, "default-k8rpt"), 0, "{actions:?}");
    let claim = &core.cluster().nodeclaims()["default-k8rpt"];
    assert_eq!(
        claim.launched.as_ref().map(|l| l.provider_id.as_str()),
        Some("kwok://other")
    );
}

/// A NodeClaim that found no capacity tells the pods it was for, as Karpenter does.
#[test]
fn pods_waiting_on_a_nodeclaim_without_capacity_are_told() {
    use kerf_core::controllers::lifecycle::Offering as Refused;
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    let short = Refused {
        capacity_type: "on-demand".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
    };
    core.launch_failed(&claim, &[short], secs(3));
    let told = events(&core.poll(secs(3)), "InsufficientCapacityError");
    assert_eq!(told.len(), 2, "{told:?}");
    assert!(
        told.contains(&format!(
            "default/x: NodeClaim {claim} nominated for this pod failed to launch: creating instance, insufficient capacity, all requested instance types were unavailable during launch (1 offerings)"
        )),
        "{told:?}"
    );
}

/// A NodeClaim given a deadline for its pods says when they all go, on it and its node.
#[test]
fn a_termination_deadline_is_told_on_the_nodeclaim_and_its_node() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.template.spec.termination_grace_period =
        Some(kerf_api::duration::GoDuration(Duration::from_secs(3600)));
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_and_register(&mut core, &claim);
    run_until(&mut core, 5, 6);
    core.delete_nodeclaim(&claim);
    let told = events(
        &run_until(&mut core, 7, 8),
        "TerminationGracePeriodExpiring",
    );
    let by = format!("All pods will be deleted by {}", "1970-01-01T01:00:06Z");
    assert_eq!(
        told,
        [format!("{claim}: {by}"), format!("{claim}: {by}")],
        "{told:?}"
    );
}

#[test]
fn a_request_with_no_spot_capacity_anywhere_marks_spot_short_in_its_zones() {
    use kerf_core::controllers::lifecycle::Offering as Refused;
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    let refused = |ct: &str, it: &str, zone: &str| Refused {
        capacity_type: ct.into(),
        instance_type: it.into(),
        zone: zone.into(),
    };
    core.launch_failed(
        &claim,
        &[
            refused("spot", "m5.large", "us-east-1a"),
            refused("spot", "c5.large", "us-east-1b"),
        ],
        secs(3),
    );
    let unavailable = |ct: &str, it: &str, zone: &str| {
        core.unavailable_offerings()
            .is_unavailable(ct, it, zone, secs(4))
    };
    assert!(
        unavailable("spot", "r5.large", "us-east-1a"),
        "every spot type in the zone"
    );
    assert!(unavailable("spot", "r5.large", "us-east-1b"));
    assert!(
        !unavailable("spot", "r5.large", "us-east-1c"),
        "only the zones asked"
    );
    assert!(!unavailable("on-demand", "m5.large", "us-east-1a"));

    // a failure that refused on-demand offerings too says nothing of spot elsewhere
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    core.launch_failed(
        &claim,
        &[
            refused("spot", "m5.large", "us-east-1a"),
            refused("on-demand", "m5.large", "us-east-1a"),
        ],
        secs(3),
    );
    assert!(!core.unavailable_offerings().is_unavailable(
        "spot",
        "r5.large",
        "us-east-1a",
        secs(4)
    ));
}

fn launches(actions: &[Action], claim: &str) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Launch { nodeclaim, .. } if nodeclaim == claim))
        .count()
}

fn deleted(actions: &[Action], claim: &str) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, Action::DeleteNodeClaim { nodeclaim } if nodeclaim == claim))
}

#[test]
fn a_launch_that_failed_for_a_passing_reason_is_tried_again_with_a_backoff_and_not_given_up() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let first = run_until(&mut core, 0, 2);
    let claim = created(&first).remove(0);
    assert_eq!(launches(&first, &claim), 1);
    // the API server went away under the launch: nothing is marked, the NodeClaim stays
    core.launch_retry(
        &claim,
        "cloud provider API: client error (Connect)",
        secs(3),
    );
    let waited = run_until(&mut core, 3, 3);
    assert_eq!(launches(&waited, &claim), 0, "{waited:?}");
    assert!(!deleted(&waited, &claim));
    assert!(!core.unavailable_offerings().is_unavailable(
        "on-demand",
        "m5.large",
        "us-east-1a",
        secs(3)
    ));
    // 1 s later it is launched again; the next failure waits 2 s
    assert_eq!(launches(&run_until(&mut core, 4, 4), &claim), 1);
    core.launch_retry(&claim, "still unreachable", secs(4));
    assert_eq!(launches(&run_until(&mut core, 5, 5), &claim), 0);
    assert_eq!(launches(&run_until(&mut core, 6, 6), &claim), 1);
    // the API server is back: it launches and registers, and no other NodeClaim was made
    launch_and_register(&mut core, &claim);
    let after = run_until(&mut core, 7, 60);
    assert!(created(&after).is_empty(), "{after:?}");
    assert!(core.cluster().nodeclaims()[&claim].registered);
}

#[test]
fn a_nodeclaim_whose_launch_keeps_failing_is_deleted_five_minutes_after_its_creation() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    core.launch_retry(&claim, "unreachable", secs(2));
    let mut all = Vec::new();
    for t in 3..=299 {
        let actions = core.poll(secs(t));
        if launches(&actions, &claim) > 0 {
            core.launch_retry(&claim, "unreachable", secs(t));
        }
        all.extend(actions);
    }
    assert!(
        launches(&all, &claim) >= 25,
        "tried again all along: {}",
        launches(&all, &claim)
    );
    assert!(!deleted(&all, &claim), "not before its launch timeout");
    let at_timeout = run_until(&mut core, 300, 305);
    assert!(deleted(&at_timeout, &claim), "{at_timeout:?}");
}

#[test]
fn limits_nodes_counts_launched_and_in_flight_nodeclaims_whose_deletion_is_not_stored() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec
        .limits
        .insert("nodes".into(), kerf_api::Quantity::parse("2").unwrap());
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    // six pods that each need a node of their own (1.5 of the type's 2 cpus)
    for i in 0..6 {
        core.apply_pod(unschedulable(&format!("p{i}"), "1500m"), secs(0));
    }
    let first = run_until(&mut core, 0, 3);
    let claims = created(&first);
    assert_eq!(claims.len(), 2, "{first:?}");
    let stored = (first.into_iter())
        .find_map(|a| match a {
            Action::CreateNodeClaim(o) if o.metadata.name.as_ref() == Some(&claims[0]) => Some(*o),
            _ => None,
        })
        .expect("the first NodeClaim's object");
    // the two are in flight (not launched): still counted, so nothing more is made
    assert!(created(&run_until(&mut core, 4, 30)).is_empty());
    // launched and registered, they still count; another pod gets no node either
    for claim in &claims {
        launch_and_register(&mut core, claim);
    }
    core.apply_pod(unschedulable("late", "1500m"), secs(31));
    assert!(created(&run_until(&mut core, 31, 60)).is_empty());
    // and explain names the limit
    let why = core
        .explain_pod("default/late")
        .expect("explained")
        .to_string();
    assert!(why.contains("limit nodes=2 reached"), "{why}");
    // a deletion only asked for (its write refused, say by an outage) still counts:
    // Karpenter frees a node's share once the write that marks it has succeeded
    core.delete_nodeclaim(&claims[0]);
    let asked = run_until(&mut core, 61, 90);
    let going = core.cluster().nodeclaims().get(&claims[0]);
    assert!(going.is_some_and(|c| c.deleting.is_some()), "{asked:?}");
    assert!(created(&asked).is_empty(), "{asked:?}");
    // stored, it counts no more, as Karpenter's scheduler counts only active nodes: its
    // instance is still there, and one more NodeClaim is made at once
    store_deletion(&mut core, stored, 91);
    let after = run_until(&mut core, 91, 120);
    assert_eq!(created(&after).len(), 1, "{after:?}");
}

/// The API server holds the NodeClaim's deletion from second `at`, and Kerf's watch sees it.
fn store_deletion(core: &mut Controllers, mut stored: kerf_api::NodeClaim, at: i64) {
    stored.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(at).unwrap(),
        ));
    core.observe(
        Observation::Applied(Object::nodeclaim(stored)),
        secs(at as u64),
    );
}

fn evicted(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Evict { pod } => Some(pod.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_eviction_that_did_not_happen_is_asked_again_by_the_drain() {
    let mut core = with_pool();
    drained_with_pod(&mut core, |p| p);
    let first = evicted(&run_until(&mut core, 6, 8));
    assert_eq!(first, ["default/x"]);
    // asked once: while the pod is on its way out, it is not asked again
    assert!(evicted(&run_until(&mut core, 9, 20)).is_empty());
    // the eviction never happened (the API server was down): asked again
    core.eviction_refused("default/x", Some(500));
    assert_eq!(evicted(&run_until(&mut core, 21, 30)), ["default/x"]);
}

/// The `Evicted` Event on a pod, as Karpenter publishes it: once the API server took the
/// eviction, and once per pod however often a refused eviction is asked again.
#[test]
fn a_pod_is_told_of_its_eviction_once_the_api_server_took_it() {
    let mut core = with_pool();
    let claim = drained_with_pod(&mut core, |p| p);
    let told = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| matches!(a, Action::Event(e) if e.reason == "Evicted"))
            .count()
    };
    let first = run_until(&mut core, 6, 8);
    assert_eq!(evicted(&first), ["default/x"]);
    assert_eq!(told(&first), 0, "announced before the API server answered");
    core.eviction_refused("default/x", Some(429));
    let again = run_until(&mut core, 9, 20);
    assert_eq!(evicted(&again), ["default/x"]);
    assert_eq!(told(&again), 0);
    // the drain's wait is said on the node once: the budget's refusal after it is held back
    // for two minutes, as Karpenter's recorder dedupes a failed drain on its node alone
    assert_eq!(
        events(&first, "FailedDraining"),
        [format!(
            "{claim}: Failed to drain node, 1 pods are waiting to be evicted"
        )]
    );
    assert!(events(&again, "FailedDraining").is_empty());
    core.evicted("default/x");
    let after = run_until(&mut core, 21, 22);
    assert_eq!(told(&after), 1);
    let Some(Action::Event(e)) = after.iter().find(|a| matches!(a, Action::Event(_))) else {
        unreachable!()
    };
    assert_eq!(e.name, "default/x");
    assert!(e.message.starts_with("Evicted pod: "), "{}", e.message);
    let text = core.render_metrics(secs(22), &[]);
    for line in [
        "karpenter_pods_eviction_requests_total{code=\"429\"} 1",
        "karpenter_pods_eviction_requests_total{code=\"200\"} 1",
    ] {
        assert!(text.contains(line), "no {line} in:\n{text}");
    }
    assert!(core.cluster().nodeclaims().contains_key(&claim));
}

/// A pod already on its way out when its node drains (evicted by an operator that was
/// then restarted, or deleted by its owner) is waited for, not evicted again (Karpenter
/// evicts no terminating pod).
#[test]
fn a_terminating_pod_on_a_draining_node_is_waited_for_not_evicted() {
    let mut core = with_pool();
    drained_with_pod(&mut core, |mut p| {
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(4).unwrap(),
        ));
        p
    });
    let actions = run_until(&mut core, 6, 20);
    assert!(evicted(&actions).is_empty(), "{actions:?}");
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::DeleteNode { .. })),
        "the node went with a pod still on it"
    );
}

/// A node with pod `default/x` (made by `edit`) bound to it, whose NodeClaim's deletion
/// has just started; the NodeClaim's name.
fn drained_with_pod(core: &mut Controllers, edit: impl FnOnce(Pod) -> Pod) -> String {
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(core, 0, 2))[0].clone();
    launch_and_register(core, &claim);
    let mut bound: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "x", "namespace": "default", "ownerReferences": [{"apiVersion":
            "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "1", "controller": true}]},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running"},
    }))
    .unwrap();
    bound.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(edit(bound), secs(4));
    core.poll(secs(5));
    core.delete_nodeclaim(&claim);
    claim
}

/// Karpenter's termination taints a node, then drains it: no pod is evicted while the
/// taint is only asked for (a write refused or not yet seen would let the evicted pods'
/// replacements be bound right back).
#[test]
fn the_drain_evicts_only_once_the_disrupted_taint_is_stored() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let mut bound = unschedulable("x", "1");
    bound.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(bound, secs(4));
    core.poll(secs(5));
    core.delete_nodeclaim(&claim);
    // the taint's write never lands: polled without storing it, nothing is evicted
    let asked: Vec<Action> = (6..=20).flat_map(|t| core.poll(secs(t))).collect();
    let taints = asked
        .iter()
        .filter(|a| matches!(a, Action::Taint { .. }))
        .count();
    assert_eq!(taints, 1, "asked once: {asked:?}");
    assert!(evicted(&asked).is_empty(), "{asked:?}");
    // once stored, the drain goes on
    store_taint(
        &mut core,
        &claim,
        &kerf_core::controllers::disruption::disrupted_taint(),
        21,
    );
    assert_eq!(evicted(&run_until(&mut core, 21, 23)), ["default/x"]);
}

/// A StatefulSet makes an evicted pod again under the same name at once: when that new pod's
/// node is drained later, it is evicted too (it is not the pod asked to leave before).
#[test]
fn a_pod_made_again_under_an_evicted_pods_name_is_evicted_when_its_node_drains() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("db-0", "1"), secs(0));
    let first = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &first);
    let on = |node: &str, uid: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-0", "namespace": "default", "uid": uid, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "s",
                 "controller": true}]},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"},
        }))
        .unwrap()
    };
    core.apply_pod(on(&first, "a"), secs(4));
    core.poll(secs(5));
    core.delete_nodeclaim(&first);
    assert_eq!(evicted(&run_until(&mut core, 6, 8)), ["default/db-0"]);
    // the StatefulSet controller makes db-0 again, on a second node
    core.delete_pod("default/db-0", secs(9));
    core.apply_pod(unschedulable("db-0", "1"), secs(9));
    let second = created(&run_until(&mut core, 9, 12))
        .into_iter()
        .find(|c| *c != first)
        .expect("a second nodeclaim");
    launch_and_register(&mut core, &second);
    core.apply_pod(on(&second, "b"), secs(14));
    core.poll(secs(15));
    core.delete_nodeclaim(&second);
    assert_eq!(evicted(&run_until(&mut core, 16, 20)), ["default/db-0"]);
}

/// Controllers with the StaticCapacity gate on and `default` a static NodePool of
/// `replicas`, offering one instance type.
fn with_static_pool(replicas: i64, node_limit: Option<&str>) -> Controllers {
    let settings = Settings {
        static_capacity: true,
        ..Settings::default()
    };
    let mut core = Controllers::new(settings, 7);
    let mut np = pool();
    np.spec.replicas = Some(replicas);
    if let Some(l) = node_limit {
        np.spec.limits.insert("nodes".into(), l.parse().unwrap());
    }
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core
}

fn logged(actions: &[Action], message: &str) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Log(r) if r.message == message))
        .count()
}

#[test]
fn a_static_nodepool_gets_its_replicas_without_pods_up_to_its_node_limit() {
    let mut core = with_static_pool(3, Some("2"));
    let actions = run_until(&mut core, 0, 5);
    let made = created(&actions);
    assert_eq!(made.len(), 2, "limits.nodes caps the replicas: {made:?}");
    assert_eq!(
        logged(&actions, "provisioning nodeclaims to satisfy replica count"),
        1
    );
    // the third is refused by the limit, and said once
    assert_eq!(logged(&actions, "nodepool node limit reached"), 1);
    let c = &core.cluster().nodeclaims()[&made[0]];
    assert_eq!(c.instance_types, ["m5.large"]);
    // without the gate a static NodePool is inert
    let mut inert = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.replicas = Some(3);
    inert.apply_node_pool(np);
    inert.set_instance_types("default", Arc::from(vec![instance_type()]));
    assert!(created(&run_until(&mut inert, 0, 5)).is_empty());
}

/// A static NodePool's NodeClaim whose deletion is only asked for (an expiry's delete
/// refused by the API server) still counts toward its replicas: Karpenter makes the
/// replacement once the deletion is stored (swarm seed 439550).
#[test]
fn a_static_nodeclaim_counts_until_the_api_server_holds_its_deletion() {
    let mut core = with_static_pool(2, None);
    let first = run_until(&mut core, 0, 5);
    let claims = created(&first);
    assert_eq!(claims.len(), 2, "{first:?}");
    let stored = (first.into_iter())
        .find_map(|a| match a {
            Action::CreateNodeClaim(o) if o.metadata.name.as_ref() == Some(&claims[0]) => Some(*o),
            _ => None,
        })
        .expect("the first NodeClaim's object");
    for claim in &claims {
        launch_and_register(&mut core, claim);
    }
    core.delete_nodeclaim(&claims[0]);
    let asked = run_until(&mut core, 6, 60);
    let going = core.cluster().nodeclaims().get(&claims[0]);
    assert!(going.is_some_and(|c| c.deleting.is_some()), "{asked:?}");
    assert!(created(&asked).is_empty(), "{asked:?}");
    store_deletion(&mut core, stored, 61);
    let after = run_until(&mut core, 61, 90);
    assert_eq!(created(&after).len(), 1, "{after:?}");
}

/// Karpenter's `Consolidatable` condition: set once an initialized node has been quiet for
/// its NodePool's consolidateAfter, cleared when a pod lands on it.
#[test]
fn a_nodeclaims_status_says_consolidatable_once_quiet_for_consolidate_after() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.disruption.consolidate_after =
        kerf_api::duration::NillableDuration::After(Duration::from_secs(60));
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let says = |actions: &[Action]| -> Vec<bool> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::PatchNodeClaimStatus {
                    nodeclaim, status, ..
                } if *nodeclaim == claim => Some(
                    status
                        .conditions
                        .iter()
                        .any(|c| c.type_ == "Consolidatable"),
                ),
                _ => None,
            })
            .collect()
    };
    let quiet = run_until(&mut core, 5, 50);
    assert!(!says(&quiet).contains(&true), "{quiet:?}");
    let due = run_until(&mut core, 50, 90);
    assert_eq!(says(&due), [true]);
    // a pod lands: the window starts again, and the condition goes
    let mut bound = unschedulable("y", "100m");
    bound.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(bound, secs(91));
    let busy = run_until(&mut core, 91, 120);
    assert_eq!(says(&busy), [false]);
}

#[test]
fn a_static_nodepool_takes_no_pending_pod_and_is_never_consolidated() {
    let mut core = with_static_pool(1, None);
    let claim = created(&run_until(&mut core, 0, 1))[0].clone();
    launch_and_register(&mut core, &claim);
    // its one node stays empty for five minutes and is not touched
    let idle = run_until(&mut core, 5, 300);
    assert_eq!(logged(&idle, "disrupting node(s)"), 0);
    assert_eq!(logged(&idle, "marking consolidatable"), 0);
    assert!(core.cluster().nodeclaims()[&claim].deleting.is_none());
    // a pod fills most of it, and another waits: it needs a new node, which a static
    // NodePool is not the scheduler's to launch
    let mut filler = unschedulable("filler", "1500m");
    filler.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(filler, secs(301));
    core.apply_pod(unschedulable("waiting", "1"), secs(301));
    let later = run_until(&mut core, 301, 400);
    assert!(created(&later).is_empty(), "{:?}", created(&later));
}

#[test]
fn scaling_a_static_nodepool_down_removes_unlaunched_then_empty_then_cheapest_nodes() {
    let mut core = with_static_pool(4, None);
    let made = created(&run_until(&mut core, 0, 1));
    assert_eq!(made.len(), 4);
    // three launched and registered; one of them runs a pod, one a pod that may not be
    // disrupted; the fourth never launched
    for c in &made[..3] {
        launch_and_register(&mut core, c);
    }
    let pod = |name: &str, node: &str, do_not_disrupt: bool| -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "1",
                "controller": true}]},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        if do_not_disrupt {
            p.metadata.annotations = Some(BTreeMap::from([(
                "karpenter.sh/do-not-disrupt".to_string(),
                "true".to_string(),
            )]));
        }
        p
    };
    core.apply_pod(pod("busy", &made[0], false), secs(5));
    core.apply_pod(pod("kept", &made[1], true), secs(5));
    core.poll(secs(6));
    let mut np = core.cluster().node_pools()["default"].clone();
    let mut deleted = |core: &mut Controllers, replicas: i64, at: u64| -> Vec<String> {
        np.spec.replicas = Some(replicas);
        core.apply_node_pool(np.clone());
        core.poll(secs(at))
            .iter()
            .filter_map(|a| match a {
                Action::DeleteNodeClaim { nodeclaim } => Some(nodeclaim.clone()),
                _ => None,
            })
            .collect()
    };
    // 4 → 2: the NodeClaim never launched, then the empty node
    assert_eq!(
        deleted(&mut core, 2, 10),
        [made[3].clone(), made[2].clone()]
    );
    // 2 → 1: the node whose pod may be disrupted, before the do-not-disrupt one
    assert_eq!(deleted(&mut core, 1, 20), [made[0].clone()]);
    // nothing is made again for the ones going
    assert!(created(&run_until(&mut core, 21, 30)).is_empty());
}

#[test]
fn a_drifted_static_node_is_replaced_first_within_the_drift_budget() {
    let mut core = with_static_pool(2, None);
    let made = created(&run_until(&mut core, 0, 1));
    for c in &made {
        launch_and_register(&mut core, c);
    }
    run_until(&mut core, 5, 10);
    // the template changes: both nodes drift
    let mut np = core.cluster().node_pools()["default"].clone();
    np.spec
        .template
        .metadata
        .labels
        .insert("team".into(), "edge".into());
    core.apply_node_pool(np);
    let acted = run_until(&mut core, 11, 30);
    assert!(
        made.iter()
            .all(|c| core.cluster().nodeclaims()[c].drifted.is_some())
    );
    // Karpenter's default budget (10 % of 2 nodes, rounded up): one replacement at a time,
    // made before anything goes
    let replacements = created(&acted);
    assert_eq!(replacements.len(), 1, "{replacements:?}");
    assert!(
        !acted
            .iter()
            .any(|a| matches!(a, Action::DeleteNodeClaim { .. }))
    );
    assert_eq!(logged(&acted, "disrupting node(s)"), 1);
    // the command waits on its replacement, and says so on it
    assert_eq!(
        events(&acted, "DisruptionWaitingReadiness"),
        [format!(
            "{}: Waiting on readiness to continue disruption",
            replacements[0]
        )]
    );
    // once the replacement is up, one drifted node goes, and no third node is made
    launch_and_register(&mut core, &replacements[0]);
    let after = run_until(&mut core, 31, 40);
    let deleted: Vec<&String> = after
        .iter()
        .filter_map(|a| match a {
            Action::DeleteNodeClaim { nodeclaim } => Some(nodeclaim),
            _ => None,
        })
        .collect();
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert!(made.contains(deleted[0]));
    assert!(created(&after).is_empty(), "{:?}", created(&after));
}

/// A static NodePool at its node limit cannot stage a replacement: with
/// `TerminateFirstDrift` a drifted node is deleted first (one at a time under the default
/// budget) and the pool refilled once it is gone; without the gate it is told blocked.
#[test]
fn a_drifted_static_node_at_the_node_limit_is_terminated_first_with_the_gate() {
    for gate in [true, false] {
        let mut core = with_static_pool(2, Some("2"));
        if gate {
            let settings = Settings {
                static_capacity: true,
                terminate_first_drift: true,
                ..Settings::default()
            };
            core = Controllers::new(settings, 7);
            let mut np = pool();
            np.spec.replicas = Some(2);
            np.spec.limits.insert("nodes".into(), "2".parse().unwrap());
            core.apply_node_pool(np);
            core.set_instance_types("default", Arc::from(vec![instance_type()]));
        }
        let made = created(&run_until(&mut core, 0, 1));
        for c in &made {
            launch_and_register(&mut core, c);
        }
        run_until(&mut core, 5, 10);
        let mut np = core.cluster().node_pools()["default"].clone();
        (np.spec.template.metadata.labels).insert("team".into(), "edge".into());
        core.apply_node_pool(np);
        let acted = run_until(&mut core, 11, 30);
        let deleted: Vec<&String> = (acted.iter())
            .filter_map(|a| match a {
                Action::DeleteNodeClaim { nodeclaim } => Some(nodeclaim),
                _ => None,
            })
            .collect();
        // no third node while both count against the limit
        assert!(
            created(&acted).is_empty(),
            "gate {gate}: {:?}",
            created(&acted)
        );
        if !gate {
            assert!(deleted.is_empty(), "{deleted:?}");
            let blocked = events(&acted, "DisruptionBlocked");
            let said = "static NodePool is at its node limit and cannot stage a replacement";
            assert!(blocked.iter().any(|e| e.ends_with(said)), "{blocked:?}");
            continue;
        }
        assert_eq!(deleted.len(), 1, "{deleted:?}");
        assert!(made.contains(deleted[0]));
        let first = (acted.iter()).any(|a| {
            matches!(a, Action::Log(r) if r.message == "disrupting node(s)"
                && r.fields["decision"] == "terminate-first")
        });
        assert!(first, "{acted:?}");
        // once the API server holds it gone, the pool is refilled
        let gone = deleted[0].clone();
        core.nodeclaim_gone(&gone);
        let refill = run_until(&mut core, 31, 40);
        assert_eq!(created(&refill).len(), 1, "{:?}", created(&refill));
    }
}

#[test]
fn a_static_nodeclaim_whose_launch_failed_is_made_again_once_capacity_may_be_back() {
    let mut core = with_static_pool(1, None);
    let first = created(&run_until(&mut core, 0, 1));
    assert_eq!(first.len(), 1);
    // no capacity for the one instance type, in either capacity type
    let refused: Vec<kerf_core::controllers::lifecycle::Offering> = ["on-demand", "spot"]
        .into_iter()
        .map(|ct| kerf_core::controllers::lifecycle::Offering {
            capacity_type: ct.into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
        })
        .collect();
    core.launch_failed(&first[0], &refused, secs(2));
    // the shell carries out the release
    core.nodeclaim_gone(&first[0]);
    let meanwhile = run_until(&mut core, 2, 60);
    assert!(created(&meanwhile).is_empty(), "{:?}", created(&meanwhile));
    assert_eq!(
        logged(
            &meanwhile,
            "could not provision nodeclaims to satisfy replica count"
        ),
        1,
        "said once"
    );
    // the unavailable-offerings memory (3 minutes) runs out: the NodePool is whole again
    let again = created(&run_until(&mut core, 61, 240));
    assert_eq!(again.len(), 1, "{again:?}");
}

#[test]
fn a_reservation_takes_no_more_nodeclaims_than_its_room_and_the_rest_say_why() {
    // a NodePool that may only use a reservation with room for one m5.large
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.template.spec.requirements = serde_yaml::from_str(
        "- {key: karpenter.sh/capacity-type, operator: In, values: [reserved]}",
    )
    .unwrap();
    core.apply_node_pool(np);
    let mut reserved = instance_type();
    reserved.offerings.push(Offering {
        zone: "us-east-1a".into(),
        capacity_type: "reserved".into(),
        price_per_hour: 0.1 / 1e7,
        available: true,
        reservation: Some(kerf_scheduling::Reservation {
            id: "cr-0abc".into(),
            capacity: 1,
        }),
    });
    core.set_instance_types("default", Arc::from(vec![reserved.clone()]));
    for name in ["a", "b", "c"] {
        core.apply_pod(unschedulable(name, "1500m"), secs(0));
    }
    let solved = core.dry_run();
    let claims = &solved.decision.nodeclaims;
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert_eq!(claims[0].launch.capacity_type, "reserved");
    assert_eq!(claims[0].launch.reservation.as_deref(), Some("cr-0abc"));
    let pinned = |key: &str| {
        claims[0]
            .requirements
            .iter()
            .find(|r| r.key == key)
            .map(|r| r.values.clone())
    };
    assert_eq!(
        pinned("karpenter.k8s.aws/capacity-reservation-id"),
        Some(vec!["cr-0abc".to_string()])
    );
    // the other two pods are not dropped: they are pending, with the reason
    let pending = &solved.decision.unschedulable;
    assert_eq!(pending.len(), 2, "{pending:?}");
    assert!(pending.iter().all(|u| !u.reasons.is_empty()), "{pending:?}");

    // once the reservation is full (its room 0), no NodeClaim is planned into it at all
    reserved.offerings[1].reservation = Some(kerf_scheduling::Reservation {
        id: "cr-0abc".into(),
        capacity: 0,
    });
    core.set_instance_types("default", Arc::from(vec![reserved]));
    let solved = core.dry_run();
    assert!(solved.decision.nodeclaims.is_empty());
    assert_eq!(solved.decision.unschedulable.len(), 3);
}

/// As Karpenter provisions with reserved capacity (its strict mode): a NodeClaim that can
/// launch into a reservation does not take the pod that would leave it none. Three 1-cpu
/// pods, a reserved 2-cpu type with room for two and a 4-cpu on-demand type: two reserved
/// NodeClaims (one pod each beside the other's), not one on-demand NodeClaim for all three.
#[test]
fn a_nodeclaim_that_can_use_a_reservation_keeps_it() {
    let mut core = with_pool();
    let mut small = instance_type();
    small.offerings.push(Offering {
        zone: "us-east-1a".into(),
        capacity_type: "reserved".into(),
        price_per_hour: 0.1 / 1e7,
        available: true,
        reservation: Some(kerf_scheduling::Reservation {
            id: "cr-0abc".into(),
            capacity: 2,
        }),
    });
    let mut big = instance_type();
    big.name = "m5.xlarge".into();
    big.labels = BTreeMap::from([(
        "node.kubernetes.io/instance-type".into(),
        "m5.xlarge".into(),
    )])
    .into();
    big.capacity.cpu_millis = 4000;
    big.allocatable.cpu_millis = 4000;
    big.offerings[0].price_per_hour = 0.15;
    core.set_instance_types("default", Arc::from(vec![small, big]));
    for name in ["a", "b", "c"] {
        core.apply_pod(unschedulable(name, "900m"), secs(0));
    }
    let solved = core.dry_run();
    let claims = &solved.decision.nodeclaims;
    let reserved = (claims.iter())
        .filter(|c| c.launch.capacity_type == "reserved")
        .count();
    assert_eq!(reserved, 2, "{claims:#?}");
    assert!(solved.decision.unschedulable.is_empty());
}

/// Garbage collection is the controllers' own timer: they ask for the cloud's instances at
/// once and every 30 seconds after, whatever shell runs them.
#[test]
fn garbage_collection_asks_for_the_instances_every_thirty_seconds() {
    let mut core = with_pool();
    let asked = |actions: &[Action]| {
        (actions.iter())
            .filter(|a| matches!(a, Action::ListInstances))
            .count()
    };
    assert_eq!(asked(&core.poll(secs(0))), 1);
    assert_eq!(asked(&run_until(&mut core, 1, 29)), 0);
    assert_eq!(asked(&run_until(&mut core, 30, 30)), 1);
    assert_eq!(asked(&run_until(&mut core, 31, 90)), 2);
}

/// A node registers with its NodeClaim's startup taints and is initialized once those are
/// gone, whatever its NodePool says by then: a NodePool changed after the NodeClaim was made
/// neither holds the node back nor lets it through early.
#[test]
fn a_node_is_initialized_by_its_nodeclaims_startup_taints_not_its_nodepools_current_ones() {
    let startup = |key: &str| kerf_api::Taint {
        key: key.into(),
        value: None,
        effect: kerf_api::TaintEffect::NoSchedule,
        time_added: None,
    };
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.template.spec.startup_taints = vec![startup("example.com/agent-a")];
    core.apply_node_pool(np.clone());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("web-1", "500m"), Duration::ZERO);
    let claims = created(&run_until(&mut core, 0, 2));
    assert_eq!(claims.len(), 1);
    let claim = &claims[0];
    assert_eq!(
        core.cluster().nodeclaims()[claim].registration_taints(),
        vec![
            startup("example.com/agent-a"),
            kerf_core::cluster::unregistered_taint()
        ]
    );
    // the NodePool now names another agent's taint
    np.spec.template.spec.startup_taints = vec![startup("example.com/agent-b")];
    core.apply_node_pool(np);
    launch_and_register(&mut core, claim);
    let mut node = core.cluster().nodes()[claim.as_str()].clone();
    node.taints = vec![startup("example.com/agent-a")];
    core.apply_node(claim.clone(), node.clone(), secs(5));
    run_until(&mut core, 5, 8);
    assert!(
        !core.cluster().nodeclaims()[claim].initialized,
        "initialized with its startup taint still on"
    );
    node.taints.clear();
    core.apply_node(claim.clone(), node, secs(9));
    run_until(&mut core, 9, 12);
    assert!(core.cluster().nodeclaims()[claim].initialized);
}

/// A node that registers without the `karpenter.sh/unregistered` taint (user data that does
/// not add it) is registered all the same, and its NodeClaim is told why that is a risk, in
/// Karpenter's words; one that registers with it is told nothing.
#[test]
fn a_node_registered_without_the_unregistered_taint_is_told_on_its_nodeclaim() {
    for tainted in [false, true] {
        let mut core = with_pool();
        core.apply_pod(unschedulable("x", "1"), secs(0));
        let claim = created(&run_until(&mut core, 0, 2))[0].clone();
        let taints = if tainted {
            vec![kerf_core::cluster::unregistered_taint()]
        } else {
            Vec::new()
        };
        launch_as_and_register_tainted(&mut core, &claim, instance(&claim), taints);
        let actions = run_until(&mut core, 4, 10);
        assert!(core.cluster().nodeclaims()[&claim].registered);
        let told = events(&actions, "UnregisteredTaintMissing");
        let logged = (actions.iter())
            .filter(|a| matches!(a, Action::Log(l) if l.message == "node claim registration error"))
            .count();
        if tainted {
            assert!(told.is_empty() && logged == 0, "{told:?}");
        } else {
            assert_eq!(
                told,
                [format!(
                    "{claim}: Missing karpenter.sh/unregistered taint which prevents \
                     registration related race conditions on Karpenter-managed nodes"
                )]
            );
            assert_eq!(logged, 1);
        }
    }
}

/// Pods nominated to a registered node and not bound yet hold its room: a pod that comes
/// while they wait for kube-scheduler gets a NodeClaim of its own, not a nomination to room
/// already promised (it would wait out the nomination window for nothing).
#[test]
fn room_promised_to_nominated_pods_on_a_registered_node_is_not_promised_again() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    core.poll(secs(4));
    assert!(core.cluster().nodeclaims()[&claim].initialized);
    // x is nominated to the Ready node (2 cpus) and not bound yet when y (1.5 cpus) comes
    core.apply_pod(unschedulable("y", "1500m"), secs(5));
    let more = created(&run_until(&mut core, 5, 10));
    assert_eq!(more.len(), 1, "y was promised x's room: {more:?}");
    assert_ne!(more[0], claim);
}

/// A Ready node still tainted `node.kubernetes.io/not-ready:NoSchedule` (the node lifecycle
/// controller has not caught up, as after an API-server restart) is not initialized: its
/// nominated pods keep it, and no NodeClaim is made for them every nomination window.
#[test]
fn a_node_still_tainted_not_ready_is_not_initialized_and_keeps_its_pods() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let mut node = core.cluster().nodes()[claim.as_str()].clone();
    node.taints = vec![kerf_api::Taint {
        key: "node.kubernetes.io/not-ready".into(),
        value: None,
        effect: kerf_api::TaintEffect::NoSchedule,
        time_added: None,
    }];
    core.apply_node(claim.clone(), node.clone(), secs(4));
    let more = created(&run_until(&mut core, 4, 45));
    assert!(!core.cluster().nodeclaims()[&claim].initialized);
    assert!(
        more.is_empty(),
        "a NodeClaim while the node comes up: {more:?}"
    );
    node.taints.clear();
    core.apply_node(claim.clone(), node, secs(46));
    run_until(&mut core, 46, 48);
    assert!(core.cluster().nodeclaims()[&claim].initialized);
}

/// A launch carries what the cloud needs (the NodeClaim, its NodePool) and the offerings the
/// controllers know unavailable when they ask, so no shell reads their state back.
#[test]
fn a_launch_carries_its_nodeclaim_and_the_offerings_known_unavailable() {
    use kerf_core::controllers::lifecycle::Offering as Refused;
    let request = |actions: &[Action]| {
        actions.iter().find_map(|a| match a {
            Action::Launch { request, .. } => Some(request.clone()),
            _ => None,
        })
    };
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let first = run_until(&mut core, 0, 2);
    let claim = created(&first).remove(0);
    let asked = request(&first).expect("a launch");
    assert_eq!(asked.claim.instance_types, ["m5.large"]);
    assert_eq!(asked.node_pool.metadata.name.as_deref(), Some("default"));
    assert!(asked.available("on-demand", "m5.large", "us-east-1b"));
    // the cloud had none in us-east-1b: the next launch knows it
    core.launch_failed(
        &claim,
        &[Refused {
            capacity_type: "on-demand".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1b".into(),
        }],
        secs(3),
    );
    // the NodeClaim is gone, and kube-scheduler finds no node for the pod again
    run_until(&mut core, 3, 3);
    core.nodeclaim_gone(&claim);
    let mut pod = core.cluster().pods()["default/x"].object("default/x");
    kerf_core::cluster::set_pod_scheduled(&mut pod, "False", Some("Unschedulable"));
    core.apply_pod(pod, secs(4));
    let again = request(&run_until(&mut core, 4, 60)).expect("a second launch");
    assert_eq!(again.claim.instance_types, ["m5.large"]);
    assert!(!again.available("on-demand", "m5.large", "us-east-1b"));
    assert!(again.available("on-demand", "m5.large", "us-east-1a"));
}

fn types_asked(actions: &[Action]) -> Vec<String> {
    (actions.iter())
        .filter_map(|a| match a {
            Action::ListInstanceTypes { node_class, .. } => Some(node_class.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_node_classs_instance_types_are_asked_for_once_and_their_answer_lets_its_pools_provision() {
    let mut core = Controllers::new(Settings::default(), 7);
    // a NodePool seen twice, its class's types not known: one question, and no launch
    core.apply_node_pool(pool());
    let mut edited = pool();
    edited.spec.weight = Some(5);
    core.apply_node_pool(edited);
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let first = run_until(&mut core, 0, 15);
    assert_eq!(types_asked(&first), ["default"]);
    assert!(created(&first).is_empty(), "{first:?}");
    // the cloud answers: the pod gets its NodeClaim, and nothing is asked again
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    let then = run_until(&mut core, 16, 30);
    assert_eq!(created(&then).len(), 1, "{then:?}");
    assert!(types_asked(&then).is_empty(), "{then:?}");
    // the class changes: its types are asked for again, with the class as it is now
    core.apply_node_class(node_class(&["ami-1"]));
    let changed = core.poll(secs(31));
    let spec = changed.iter().find_map(|a| match a {
        Action::ListInstanceTypes { spec, .. } => spec.as_deref(),
        _ => None,
    });
    let name = spec.and_then(|c| c.metadata.name.as_deref());
    assert_eq!(name, Some("default"), "{changed:?}");
}

#[test]
fn an_answer_for_a_class_that_changed_since_it_was_asked_is_left_for_the_fresh_one() {
    let mut core = Controllers::new(Settings::default(), 7);
    // the class is seen before its status is resolved: asked for with no subnets
    core.apply_node_class(node_class(&[]));
    core.apply_node_pool(pool());
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let asked = core.poll(secs(0));
    let stale = asked.iter().find_map(|a| match a {
        Action::ListInstanceTypes { spec, .. } => Some(spec.clone()),
        _ => None,
    });
    let stale = stale.expect("the class's types asked for");
    // its status is written (subnets resolved) while the cloud works the first answer out
    core.apply_node_class(resolved_class(&["ami-1"], &["subnet-1"], &[]));
    let answer = Observation::InstanceTypes {
        node_class: "default".into(),
        spec: stale,
        types: Arc::from(Vec::new()),
    };
    core.observe(answer, secs(1));
    // the stale answer (nothing offered in no subnet) is not taken, and the fresh ask stands
    let then = run_until(&mut core, 1, 15);
    assert_eq!(types_asked(&then), ["default"], "{then:?}");
    assert!(core.cluster().instance_types().get("default").is_none());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    let launched = run_until(&mut core, 16, 30);
    assert_eq!(created(&launched).len(), 1, "{launched:?}");
}

/// The node class status controller's requests among `actions`, shortly: `resolve`,
/// `finalizer`, `finalize`, and `status` with the written conditions' observed generations.
fn node_class_work(actions: &[Action]) -> Vec<String> {
    (actions.iter())
        .filter_map(|a| match a {
            Action::ResolveNodeClass { node_class, .. } => Some(format!("resolve {node_class}")),
            Action::AddNodeClassFinalizer { node_class, .. } => {
                Some(format!("finalizer {node_class}"))
            }
            Action::FinalizeNodeClass { node_class, .. } => Some(format!("finalize {node_class}")),
            Action::PatchNodeClassStatus { node_class, status } => {
                let generations: Vec<String> = (status.conditions.iter())
                    .map(|c| format!("{}@{:?}", c.type_, c.observed_generation))
                    .collect();
                Some(format!("status {node_class} {}", generations.join(",")))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn node_classes_are_resolved_on_change_and_every_minute_and_deleted_once_no_nodeclaim_uses_them() {
    let settings = Settings {
        node_class_status: true,
        ..Settings::default()
    };
    let mut core = Controllers::new(settings, 7);
    core.apply_node_pool(pool());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    let mut class = node_class(&["ami-1"]);
    class.metadata.generation = Some(1);
    core.apply_node_class(class.clone());
    // a new class gets the finalizer and a resolution at once
    assert_eq!(
        node_class_work(&core.poll(secs(1))),
        ["finalizer default", "resolve default"]
    );
    // the cloud's answer is written with the class's generation, once
    let ready: kerf_api::ec2nodeclass::EC2NodeClassStatus = serde_json::from_value(
        serde_json::json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": ""}]}),
    )
    .unwrap();
    let answer = |status| Observation::NodeClassResolved {
        node_class: "default".into(),
        status,
    };
    core.observe(answer(Ok(ready.clone())), secs(2));
    let written = core.poll(secs(2));
    assert_eq!(node_class_work(&written), ["status default Ready@Some(1)"]);
    let status = written.iter().find_map(|a| match a {
        Action::PatchNodeClassStatus { status, .. } => Some((**status).clone()),
        _ => None,
    });
    class.status = status;
    class.metadata.finalizers = Some(vec!["karpenter.k8s.aws/termination".into()]);
    core.apply_node_class(class.clone());
    // resolved for its generation: nothing until the next round, a minute after the first
    assert!(node_class_work(&run_until(&mut core, 3, 59)).is_empty());
    assert_eq!(
        node_class_work(&run_until(&mut core, 60, 61)),
        ["resolve default"]
    );
    // the same answer again writes nothing; an error is logged, not written
    core.observe(answer(Ok(ready)), secs(62));
    core.observe(answer(Err("throttled".into())), secs(62));
    let quiet = core.poll(secs(62));
    assert!(node_class_work(&quiet).is_empty(), "{quiet:?}");
    assert!(
        quiet
            .iter()
            .any(|a| matches!(a, Action::Log(r) if r.message == "failed resolving ec2nodeclass")),
        "{quiet:?}"
    );
    // deleted while a NodeClaim uses it: the class waits, and is finalized once it is gone
    core.apply_pod(unschedulable("x", "1"), secs(63));
    let claim = created(&run_until(&mut core, 63, 70))[0].clone();
    class.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    ));
    core.apply_node_class(class);
    let waiting = run_until(&mut core, 71, 100);
    assert!(node_class_work(&waiting).is_empty(), "{waiting:?}");
    assert_eq!(
        events(&waiting, "WaitingOnNodeClaimTermination"),
        [format!(
            "default: Waiting on NodeClaim termination for {claim}"
        )]
    );
    assert!(
        waiting.iter().any(
            |a| matches!(a, Action::Log(r) if r.message == "waiting on nodeclaim termination")
        )
    );
    core.delete_pod("default/x", secs(101));
    core.nodeclaim_gone(&claim);
    let gone = run_until(&mut core, 101, 115);
    assert_eq!(node_class_work(&gone), ["finalize default"], "{gone:?}");
}

/// The NodePool's `NodeRegistrationHealthy` condition in the status patches `actions` wrote,
/// last first: (status, reason).
fn registration_health(actions: &[Action]) -> Option<(String, String)> {
    actions.iter().rev().find_map(|a| match a {
        Action::PatchNodePoolStatus { status, .. } => status
            .conditions
            .iter()
            .find(|c| c.type_ == "NodeRegistrationHealthy")
            .map(|c| (c.status.clone(), c.reason.clone())),
        _ => None,
    })
}

#[test]
fn two_nodeclaims_that_never_register_make_the_nodepool_registration_unhealthy() {
    let mut core = with_pool();
    // registration health is kept for a NodePool whose class is there
    core.apply_node_class(node_class(&["ami-1"]));
    core.apply_pod(unschedulable("a", "1500m"), secs(0));
    let unknown = Some(("Unknown".to_string(), "AwaitingReconciliation".to_string()));
    let unhealthy = Some(("False".to_string(), "RegistrationFailed".to_string()));
    // each NodeClaim is launched and its node never registers: the registration timeout
    // deletes it and the pod gets another
    let mut at = 0;
    let mut seen = Vec::new();
    let mut last = None;
    for _ in 0..2 {
        let actions = run_until(&mut core, at, at + 2);
        last = registration_health(&actions).or(last);
        let claim = created(&actions).pop().expect("a NodeClaim for the pod");
        core.launched(&claim, instance(&claim), secs(at + 3));
        let waited = run_until(&mut core, at + 3, at + 16 * 60);
        let timed_out = waited.iter().any(|a| {
            matches!(a, Action::Log(r) if r.message == "deleted nodeclaim"
                && r.fields["reason"] == "registration timeout"
                && r.fields["NodeClaim"]["name"] == claim.as_str())
        });
        assert!(timed_out, "the registration timeout deleted it: {waited:?}");
        core.observe(
            Observation::Deleted {
                kind: "NodeClaim".into(),
                key: claim.clone(),
            },
            secs(at + 16 * 60),
        );
        last = registration_health(&waited).or(last);
        seen.push(last.clone());
        at += 16 * 60 + 1;
    }
    assert_eq!(
        seen[0], unknown,
        "one failure of the last four changes nothing"
    );
    assert_eq!(seen[1], unhealthy, "two do");
    // one registers: two of the last four still failed
    let actions = run_until(&mut core, at, at + 2);
    let claim = created(&actions).pop().expect("a NodeClaim for the pod");
    launch_and_register(&mut core, &claim);
    let after = run_until(&mut core, at + 3, at + 10);
    assert_eq!(registration_health(&after).or(seen[1].clone()), unhealthy);
    // the NodePool changes: Unknown until the next outcome
    let mut changed = pool();
    changed.metadata.generation = Some(2);
    changed.spec.weight = Some(10);
    core.apply_node_pool(changed);
    let reset = run_until(&mut core, at + 11, at + 12);
    assert_eq!(registration_health(&reset), unknown);
}

#[test]
fn a_registering_node_gets_its_nodeclaims_annotations_once() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut annotated = pool();
    annotated.spec.template.metadata.annotations =
        BTreeMap::from([("example.com/owner".to_string(), "payments".to_string())]);
    core.apply_node_pool(annotated);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_and_register(&mut core, &claim);
    let labelled: Vec<BTreeMap<String, String>> = run_until(&mut core, 4, 20)
        .into_iter()
        .filter_map(|a| match a {
            Action::LabelNode { annotations, .. } => Some(annotations),
            _ => None,
        })
        .collect();
    let first = labelled
        .first()
        .expect("the node is labelled at registration");
    assert_eq!(
        first.get("example.com/owner").map(String::as_str),
        Some("payments"),
        "{first:?}"
    );
    assert!(
        first.contains_key(kerf_api::labels::NODEPOOL_HASH),
        "Karpenter's own annotations go too: {first:?}"
    );
    assert!(
        labelled[1..].iter().all(BTreeMap::is_empty),
        "copied once, at registration: {labelled:?}"
    );
}

/// The test's instance type, carrying placement group `id` when the class resolves one.
fn in_group(id: Option<&str>) -> Arc<[InstanceTypeOption]> {
    let mut t = instance_type();
    if let Some(id) = id {
        Arc::make_mut(&mut t.labels).insert(kerf_api::labels::PLACEMENT_GROUP_ID.into(), id.into());
    }
    Arc::from(vec![t])
}

/// `claim`'s instance, booting ami-1 in placement group `id`.
fn launched_in(claim: &str, id: &str) -> Launched {
    Launched {
        image_id: Some("ami-1".into()),
        labels: BTreeMap::from([(
            kerf_api::labels::PLACEMENT_GROUP_ID.to_string(),
            id.to_string(),
        )]),
        ..instance(claim)
    }
}

#[test]
fn a_node_outside_the_placement_group_its_class_resolves_to_now_has_drifted() {
    let mut core = with_pool();
    core.apply_node_class(node_class(&["ami-1"]));
    // the class's offerings launch into a group: its types carry the group's id
    core.set_instance_types("default", in_group(Some("pg-1")));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_as_and_register(&mut core, &claim, launched_in(&claim, "pg-1"));
    run_until(&mut core, 4, 20);
    let drifted = |core: &Controllers| {
        core.cluster()
            .nodeclaims()
            .get(&claim)
            .and_then(|c| c.drifted)
    };
    assert_eq!(drifted(&core), None, "in the group the class resolves to");
    // the group was made again (another id), then the selector removed: both drift the node
    for now in [Some("pg-2"), None] {
        core.set_instance_types("default", in_group(now));
        run_until(&mut core, 21, 40);
        assert_eq!(
            drifted(&core),
            Some(DriftReason::PlacementGroupDrift),
            "{now:?}"
        );
    }
    // back in the node's group: no longer drifted
    core.set_instance_types("default", in_group(Some("pg-1")));
    run_until(&mut core, 41, 60);
    assert_eq!(drifted(&core), None);
}

#[test]
fn a_placement_group_not_resolved_yet_drifts_nothing() {
    let mut core = with_pool();
    let mut selecting = node_class(&["ami-1"]);
    selecting.spec.placement_group_selector = serde_json::from_str(r#"{"name": "training"}"#).ok();
    core.apply_node_class(selecting);
    core.set_instance_types("default", in_group(Some("pg-1")));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_as_and_register(&mut core, &claim, launched_in(&claim, "pg-1"));
    // the class's types before its group is resolved again (a restart): no answer, no drift
    core.set_instance_types("default", in_group(None));
    run_until(&mut core, 4, 40);
    let c = &core.cluster().nodeclaims()[&claim];
    assert_eq!(c.drifted, None, "an unresolved group is no reason");
    // resolved to another group: drifted
    core.set_instance_types("default", in_group(Some("pg-2")));
    run_until(&mut core, 41, 60);
    let c = &core.cluster().nodeclaims()[&claim];
    assert_eq!(c.drifted, Some(DriftReason::PlacementGroupDrift));
}

/// A failed status check's notice for `claim`'s instance (`kwok://claim`'s id is `claim`).
fn status_check_failed(claim: &str) -> kerf_core::controllers::interruption::Notice {
    use kerf_core::controllers::interruption::{Notice, NoticeEffect};
    Notice {
        instance_id: claim.to_string(),
        message_kind: "instance_status",
        effect: NoticeEffect::Terminate,
        event: Some((
            "InstanceUnhealthy",
            "An unhealthy warning was triggered for the instance",
            true,
        )),
        unhealthy_category: Some("InstanceStatus"),
    }
}

#[test]
fn a_failed_status_check_ends_the_node_without_waiting_and_is_counted_once() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_and_register(&mut core, &claim);
    run_until(&mut core, 4, 20);
    assert_eq!(
        core.cluster().nodeclaims()[&claim]
            .launched
            .as_ref()
            .map(|l| l.instance_id().to_string()),
        Some(claim.clone())
    );
    core.notice(&status_check_failed(&claim), secs(21));
    let written: Vec<BTreeMap<String, String>> = run_until(&mut core, 21, 21)
        .into_iter()
        .filter_map(|a| match a {
            Action::AnnotateNodeClaim { annotations, .. } => Some(annotations),
            _ => None,
        })
        .collect();
    assert_eq!(
        written,
        [BTreeMap::from([(
            kerf_api::labels::NODECLAIM_TERMINATION_TIMESTAMP.to_string(),
            "1970-01-01T00:00:21.000Z".to_string()
        )])],
        "the deadline is written for a restart to read"
    );
    core.notice(&status_check_failed(&claim), secs(81));
    let c = &core.cluster().nodeclaims()[&claim];
    assert!(c.deleting.is_some(), "its NodeClaim is deleted");
    assert_eq!(
        c.terminate_at,
        Some(secs(21)),
        "its pods go without waiting on budgets or grace periods"
    );
    let text = core.render_metrics(secs(82), &[]);
    let line = text
        .lines()
        .find(|l| l.starts_with("karpenter_interruption_instance_status_unhealthy_total{"))
        .unwrap_or_default();
    assert!(
        line.contains(r#"category="InstanceStatus""#) && line.ends_with(" 1"),
        "{line}"
    );
}

/// Controllers with the default NodePool, and the NodeClaim object they create for one
/// pending pod (`x`, 1 cpu) in their first seconds.
fn first_nodeclaim() -> (Controllers, kerf_api::NodeClaim) {
    let mut first = with_pool();
    first.apply_pod(unschedulable("x", "1"), secs(0));
    let object = run_until(&mut first, 0, 2)
        .into_iter()
        .find_map(|a| match a {
            Action::CreateNodeClaim(o) => Some(*o),
            _ => None,
        })
        .expect("a NodeClaim");
    (first, object)
}

/// The node's `karpenter.sh/initialized` label is asked for before the NodeClaim's status that
/// says `Initialized` (both go in the NodeClaim's lane, in order), as Karpenter writes them:
/// a restart between the two finds the NodeClaim not initialized and initializes it again.
#[test]
fn the_initialized_label_is_asked_before_the_status_that_says_so() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let actions = run_until(&mut core, 4, 6);
    let labelled = actions.iter().position(|a| {
        matches!(a, Action::LabelNode { labels, .. }
            if labels.get(kerf_api::labels::INITIALIZED).map(String::as_str) == Some("true"))
    });
    let initialized = actions.iter().rposition(|a| {
        matches!(a, Action::PatchNodeClaimStatus { status, .. } if status.conditions.iter()
            .any(|c| c.type_ == "Initialized" && c.status == "True"))
    });
    assert!(
        labelled.is_some() && initialized.is_some() && labelled < initialized,
        "label at {labelled:?}, status at {initialized:?}"
    );
}

/// A NodeClaim's status says `Initialized` but its node lacks the `karpenter.sh/initialized`
/// label (taken off, or its write failed for good): a restarted controller labels the node,
/// which then counts in its NodePool's budget, and, empty, is deleted.
#[test]
fn a_restart_labels_an_initialized_nodeclaims_node_that_lacks_the_label() {
    let (mut first, mut object) = first_nodeclaim();
    let name = object.metadata.name.clone().unwrap_or_default();
    launch_and_register(&mut first, &name);
    let written = run_until(&mut first, 4, 6);
    assert!(first.cluster().nodeclaims()[&name].initialized);
    let (status, labels) = (written.into_iter().rev())
        .find_map(|a| match a {
            Action::PatchNodeClaimStatus { status, labels, .. } => Some((*status, labels)),
            _ => None,
        })
        .expect("a status written");
    object.status = Some(status);
    object
        .metadata
        .labels
        .get_or_insert_default()
        .extend(labels);
    // the node as stored: registered, but not labelled initialized
    let mut node = first.cluster().nodes()[&name].clone();
    std::sync::Arc::make_mut(&mut node.labels).remove(kerf_api::labels::INITIALIZED);
    node.nodeclaim = None;

    let mut restarted = with_pool();
    restarted.observe(Observation::Applied(Object::nodeclaim(object)), secs(10));
    restarted.apply_node(name.clone(), node, secs(10));
    let actions = run_until(&mut restarted, 10, 120);
    let labelled = actions.iter().any(|a| {
        matches!(a, Action::LabelNode { node, labels, .. } if *node == name
            && labels.get(kerf_api::labels::INITIALIZED).map(String::as_str) == Some("true"))
    });
    assert!(labelled, "{actions:#?}");
    assert!(
        (actions.iter()).any(|a| matches!(a, Action::DeleteNodeClaim { .. })),
        "the empty node was never deleted: {actions:#?}"
    );
}

#[test]
fn a_restart_reads_the_termination_deadline_back_from_the_nodeclaim() {
    let (_, mut object) = first_nodeclaim();
    let name = object.metadata.name.clone().unwrap_or_default();
    (object.metadata.annotations.get_or_insert_default()).insert(
        kerf_api::labels::NODECLAIM_TERMINATION_TIMESTAMP.into(),
        "1970-01-01T00:10:00Z".into(),
    );
    let mut restarted = with_pool();
    restarted.observe(Observation::Applied(Object::nodeclaim(object)), secs(30));
    assert_eq!(
        restarted.cluster().nodeclaims()[&name].terminate_at,
        Some(secs(600))
    );
}

/// Two small pods (1 cpu), then two large (3 cpu), onto 4-cpu nodes: the solver packs two
/// nodes (a large with a small on each), but the nodes turn Ready one after the other and
/// kube-scheduler binds in queue order: both smalls onto the first, one large onto the second,
/// and the other large is left nowhere. The batch rehearses that placement and launches the
/// third node at once, not in a second wave.
#[test]
fn a_batch_kube_scheduler_would_place_otherwise_gets_its_last_node_in_the_same_batch() {
    let four = Resources::from_quantities([
        (&"cpu".to_string(), "4"),
        (&"memory".to_string(), "16Gi"),
        (&"pods".to_string(), "110"),
    ]);
    let mut core = Controllers::new(Settings::default(), 7);
    core.apply_node_pool(pool());
    let xlarge = InstanceTypeOption {
        name: "m5.xlarge".into(),
        capacity: four.clone(),
        allocatable: four,
        ..instance_type()
    };
    core.set_instance_types("default", Arc::from(vec![xlarge]));
    for i in 0..2 {
        core.apply_pod(unschedulable(&format!("small-{i}"), "1"), secs(0));
    }
    for i in 0..2 {
        core.apply_pod(unschedulable(&format!("large-{i}"), "3"), secs(1));
    }
    let actions = run_until(&mut core, 0, 3);
    let claims = created(&actions);
    assert_eq!(claims.len(), 3, "{claims:?}");
    assert_eq!(
        logged(
            &actions,
            "kube-scheduler would leave pod(s) without a node, provisioning again"
        ),
        1
    );
    // every pod is nominated where kube-scheduler's placement has room for it
    let pods = core.cluster().pods();
    let mut on: BTreeMap<&str, i64> = BTreeMap::new();
    for (key, p) in pods {
        let claim = p.nominated.as_deref().unwrap_or_else(|| panic!("{key}"));
        *on.entry(claim).or_default() += p.requests.cpu_millis;
    }
    assert!(on.values().all(|m| *m <= 4000), "{on:?}");
}

/// A NodePool that Karpenter's CRD lets through but its controller refuses (a label of the
/// AWS provider's domain): no node is launched for it, and its status says why, as
/// Karpenter's `nodepool.validation` does; fixed, it launches.
#[test]
fn a_nodepool_failing_runtime_validation_launches_nothing_and_says_why() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.template.metadata.labels =
        BTreeMap::from([("karpenter.k8s.aws/team".to_string(), "a".to_string())]);
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let actions = run_until(&mut core, 0, 3);
    assert!(
        created(&actions).is_empty(),
        "a NodeClaim from an invalid NodePool"
    );
    let status = actions
        .iter()
        .rev()
        .find_map(|a| match a {
            Action::PatchNodePoolStatus { status, .. } => Some(status.clone()),
            _ => None,
        })
        .expect("the NodePool's status is written");
    let of = |t: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .cloned()
            .unwrap()
    };
    let validation = of("ValidationSucceeded");
    assert_eq!(
        (validation.status.as_str(), validation.reason.as_str()),
        ("False", "NodePoolValidationFailed")
    );
    assert!(
        validation
            .message
            .contains("spec.template.metadata.labels[karpenter.k8s.aws/team]"),
        "{}",
        validation.message
    );
    assert_eq!(of("Ready").status, "False");
    core.apply_node_pool(pool());
    assert_eq!(created(&run_until(&mut core, 4, 30)).len(), 1);
}

/// The last status a NodeClaim gets before its finalizer goes says `Drained` True (Karpenter
/// writes it before the volumes and the instance), though the instance goes in the same poll.
#[test]
fn a_drained_nodeclaims_last_status_says_drained() {
    let mut core = with_pool();
    let claim = drained_with_pod(&mut core, |p| p);
    run_until(&mut core, 6, 8);
    core.evicted("default/x");
    core.delete_pod("default/x", secs(9));
    let actions = run_until(&mut core, 9, 20);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::ReleaseNodeClaim { nodeclaim } if *nodeclaim == claim)),
        "the NodeClaim's finalizer goes"
    );
    let last = actions
        .iter()
        .rev()
        .find_map(|a| match a {
            Action::PatchNodeClaimStatus {
                nodeclaim, status, ..
            } if *nodeclaim == claim => Some(status.clone()),
            _ => None,
        })
        .expect("a status written");
    let drained = last.conditions.iter().find(|c| c.type_ == "Drained");
    assert_eq!(
        drained.map(|c| (c.status.as_str(), c.reason.as_str())),
        Some(("True", "Drained")),
        "{last:?}"
    );
}

/// A VolumeAttachment `name` on `node`, of persistent volume `pv` (an inline volume's
/// without).
fn attachment(node: &str, name: &str, pv: Option<&str>) -> Observation {
    let source = match pv {
        Some(pv) => serde_json::json!({"persistentVolumeName": pv}),
        None => serde_json::json!({"inlineVolumeSpec": {}}),
    };
    let va = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node, "source": source},
    }))
    .unwrap();
    let object = Object::Volume(kerf_core::workloads::VolumeObject::Attachment(Box::new(va)));
    Observation::Applied(object)
}

/// Whether the node, its instance or its NodeClaim's finalizer went.
fn termination_ended(actions: &[Action]) -> bool {
    actions.iter().any(|a| {
        matches!(
            a,
            Action::DeleteInstance { .. }
                | Action::DeleteNode { .. }
                | Action::ReleaseNodeClaim { .. }
        )
    })
}

/// The status and reason of `claim`'s `VolumesDetached` in its last status write.
fn volumes_detached(actions: &[Action], claim: &str) -> Option<(String, String)> {
    let status = (actions.iter().rev())
        .find_map(|a| match a {
            Action::PatchNodeClaimStatus {
                nodeclaim, status, ..
            } if nodeclaim == claim => Some(status.clone()),
            _ => None,
        })
        .expect("a status written");
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == "VolumesDetached");
    c.map(|c| (c.status.clone(), c.reason.clone()))
}

/// A registering node is given Karpenter's termination finalizer; when someone deletes the
/// Node (`kubectl delete node`), which the finalizer holds, its NodeClaim is deleted and the
/// node drained, and only then is the Node deleted (the finalizer released with it).
#[test]
fn a_deleted_node_is_held_by_its_finalizer_while_it_drains() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let registered = run_until(&mut core, 4, 5);
    assert!(
        (registered.iter()).any(|a| matches!(a,
            Action::LabelNode { node, finalizer: true, .. } if *node == claim)),
        "{registered:?}"
    );
    let mut bound = unschedulable("x", "1");
    bound.spec.as_mut().unwrap().node_name = Some(claim.clone());
    core.apply_pod(bound, secs(5));
    // the API server marks the Node deleted; its finalizer keeps it
    let mut node = core.cluster().nodes()[&claim].clone();
    node.finalizer = true;
    node.deleting = true;
    core.apply_node(claim.clone(), node, secs(6));
    let draining = run_until(&mut core, 6, 10);
    assert!(
        (draining.iter())
            .any(|a| matches!(a, Action::DeleteNodeClaim { nodeclaim } if *nodeclaim == claim)),
        "{draining:?}"
    );
    assert_eq!(evicted(&draining), ["default/x"]);
    assert!(
        !(draining.iter()).any(|a| matches!(a, Action::DeleteNode { .. })),
        "the node went before its pods: {draining:?}"
    );
    core.evicted("default/x");
    core.delete_pod("default/x", secs(11));
    let done = run_until(&mut core, 11, 13);
    assert!(
        (done.iter()).any(|a| matches!(a, Action::DeleteNode { node } if *node == claim)),
        "{done:?}"
    );
}

/// A drained node whose persistent volume is still attached waits for it, as Karpenter's
/// termination waits: the Node is told `AwaitingVolumeDetachment` (once, whatever the
/// retries), `VolumesDetached` is Unknown, and neither the Node nor the instance goes until
/// the VolumeAttachment does; an inline volume's attachment is not waited for. Then
/// `VolumesDetached` is True and the node, the instance and the NodeClaim go.
#[test]
fn a_drained_node_waits_for_its_volumes_to_be_detached() {
    let mut core = with_pool();
    let claim = drained_with_pod(&mut core, |p| p);
    core.observe(attachment(&claim, "csi-data", Some("pv-data")), secs(5));
    core.observe(attachment(&claim, "csi-inline", None), secs(5));
    run_until(&mut core, 6, 8);
    core.evicted("default/x");
    core.delete_pod("default/x", secs(9));
    let waiting = run_until(&mut core, 9, 30);
    assert!(!termination_ended(&waiting), "{waiting:?}");
    assert_eq!(
        events(&waiting, "AwaitingVolumeDetachment"),
        [format!(
            "{claim}: Awaiting deletion of bound volumeattachments (csi-data)"
        )],
        "{waiting:?}"
    );
    let awaiting = ("Unknown".into(), "AwaitingVolumeDetachment".into());
    assert_eq!(volumes_detached(&waiting, &claim), Some(awaiting));
    let (kind, key) = ("VolumeAttachment".to_string(), "/csi-data".to_string());
    core.observe(Observation::Deleted { kind, key }, secs(31));
    let done = run_until(&mut core, 31, 33);
    assert!(termination_ended(&done), "{done:?}");
    let detached = ("True".into(), "VolumesDetached".into());
    assert_eq!(volumes_detached(&done, &claim), Some(detached));
}

/// At the NodeClaim's termination time its instance goes though a volume is still
/// attached, and `VolumesDetached` says False: `TerminationGracePeriodElapsed`.
#[test]
fn at_the_termination_time_the_instance_goes_with_volumes_still_attached() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.template.spec.termination_grace_period =
        Some(kerf_api::duration::GoDuration(Duration::from_secs(60)));
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    let claim = drained_with_pod(&mut core, |p| p);
    core.observe(attachment(&claim, "csi-data", Some("pv-data")), secs(5));
    run_until(&mut core, 6, 8);
    core.evicted("default/x");
    core.delete_pod("default/x", secs(9));
    let waiting = run_until(&mut core, 9, 60);
    assert!(!termination_ended(&waiting), "{waiting:?}");
    let done = run_until(&mut core, 61, 70);
    assert!(termination_ended(&done), "{done:?}");
    let elapsed = ("False".into(), "TerminationGracePeriodElapsed".into());
    assert_eq!(volumes_detached(&done, &claim), Some(elapsed));
}

/// A ReplicaSet's pod (or, with no `owner`, a bare one) of `cpu` and `priority` bound to
/// `node`, its pod-deletion-cost `annotated`.
fn bound_pod(
    name: &str,
    node: &str,
    cpu: &str,
    priority: i32,
    owner: Option<&str>,
    annotated: Option<&str>,
) -> Pod {
    let owners: Vec<_> = (owner.iter())
        .map(|rs| serde_json::json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": rs, "controller": true}))
        .collect();
    let annotations: BTreeMap<&str, &str> = (annotated.iter())
        .map(|v| ("controller.kubernetes.io/pod-deletion-cost", *v))
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "ownerReferences": owners,
                     "annotations": annotations},
        "spec": {"nodeName": node, "priority": priority,
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running"},
    }))
    .unwrap()
}

/// The pod deletion costs asked for, by pod.
fn deletion_costs(actions: &[Action]) -> BTreeMap<String, Option<i32>> {
    (actions.iter())
        .filter_map(|a| match a {
            Action::AnnotatePodDeletionCost { pod, cost } => Some((pod.clone(), *cost)),
            _ => None,
        })
        .collect()
}

/// With `PodDeletionCostManagement` on, each minute the nodes are ranked as consolidation
/// would take them (savings ratio: price over 1 plus the pods' eviction costs, which no
/// longer read the annotation) and their ReplicaSet pods get `-n + i`; a node pinned by a bare
/// pod has the annotation removed; a node tainted disrupted goes first of all.
#[test]
fn replicaset_pods_get_their_nodes_rank_as_pod_deletion_cost() {
    let settings = Settings {
        pod_deletion_cost: true,
        ..Settings::default()
    };
    let mut core = Controllers::new(settings, 7);
    let mut np = pool();
    np.spec.disruption.budgets =
        serde_json::from_value(serde_json::json!([{"nodes": "100%"}])).expect("budgets");
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    for name in ["a", "b", "c"] {
        core.apply_pod(unschedulable(name, "1500m"), secs(0));
    }
    let claims = created(&run_until(&mut core, 0, 2));
    assert_eq!(claims.len(), 3, "{claims:?}");
    for claim in &claims {
        launch_and_register(&mut core, claim);
    }
    // a: one pod of cost 1, ratio 0.1/2 (its annotation, were it read, would make it 0.1/11
    // and put a last); b: a pod of cost 2 (priority 2^25) and one of cost 1, ratio 0.1/4;
    // c: pinned by a bare pod
    let rs = Some("rs");
    let pods = [
        bound_pod("a", &claims[0], "1500m", 0, rs, Some("2147483647")),
        bound_pod("b", &claims[1], "1500m", 33_554_432, rs, None),
        bound_pod("b2", &claims[1], "100m", 0, rs, None),
        bound_pod("c", &claims[2], "1500m", 0, None, None),
        bound_pod("d", &claims[2], "100m", 0, rs, Some("5")),
    ];
    for p in pods {
        core.apply_pod(p, secs(5));
    }
    let first = deletion_costs(&run_until(&mut core, 5, 70));
    let want = |pairs: &[(&str, Option<i32>)]| -> BTreeMap<String, Option<i32>> {
        (pairs.iter())
            .map(|(k, v)| (format!("default/{k}"), *v))
            .collect()
    };
    assert_eq!(
        first,
        want(&[
            ("a", Some(-2)),
            ("b", Some(-1)),
            ("b2", Some(-1)),
            ("d", None),
        ])
    );
    // the API server stores them; a minute on nothing is asked again
    for (name, node, cpu, priority, cost) in [
        ("a", 0, "1500m", 0, "-2"),
        ("b", 1, "1500m", 33_554_432, "-1"),
        ("b2", 1, "100m", 0, "-1"),
    ] {
        let pod = bound_pod(name, &claims[node], cpu, priority, rs, Some(cost));
        core.apply_pod(pod, secs(71));
    }
    core.delete_pod("default/d", secs(71));
    assert_eq!(deletion_costs(&run_until(&mut core, 71, 130)), want(&[]));
    // b's node is tainted for disruption: its pods go first; a is ranked alone
    store_taint(
        &mut core,
        &claims[1],
        &kerf_core::controllers::disruption::disrupted_taint(),
        131,
    );
    assert_eq!(
        deletion_costs(&run_until(&mut core, 131, 190)),
        want(&[
            ("a", Some(-1)),
            ("b", Some(i32::MIN)),
            ("b2", Some(i32::MIN))
        ])
    );
}

/// A node its NodePool will not consolidate is told so as Karpenter's disruption methods
/// tell it (`Unconsolidatable`, on the Node and NodeClaim, once per 15 minutes), and a pod's
/// timed do-not-disrupt is told on the pod while it holds and once it has elapsed.
#[test]
fn candidates_are_told_unconsolidatable_and_their_pods_do_not_disrupt_times() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.disruption.consolidate_after = kerf_api::duration::NillableDuration::Never;
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    launch_and_register(&mut core, &claim);
    let mut pod = bound_pod("x", &claim, "1", 0, Some("rs"), None);
    pod.metadata.annotations = Some(BTreeMap::from([(
        "karpenter.sh/do-not-disrupt".to_string(),
        "2m".to_string(),
    )]));
    pod.status.as_mut().unwrap().start_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(5).unwrap(),
        ));
    core.apply_pod(pod, secs(5));
    let actions = run_until(&mut core, 5, 1200);
    let unconsolidatable = events(&actions, "Unconsolidatable");
    let said = format!("{claim}: NodePool \"default\" has consolidation disabled");
    // on the Node (named as the claim here) and the NodeClaim; not again while nothing
    // changes (a pass whose inputs did not change is not run)
    assert_eq!(
        unconsolidatable,
        [said.clone(), said],
        "{unconsolidatable:?}"
    );
    let until = events(&actions, "DoNotDisruptUntil");
    assert!(!until.is_empty());
    assert!(until.iter().all(|e| e
        == "default/x: The karpenter.sh/do-not-disrupt grace period will elapse at \
            1970-01-01T00:02:05Z"));
    let elapsed = events(&actions, "DoNotDisruptGracePeriodElapsed");
    assert!(!elapsed.is_empty());
}

/// A pod whose own grace period would outlast its node's termination time is deleted when
/// what is left of the node's time equals it, whatever holds it (here do-not-disrupt), with
/// that time as its grace period, and told `Disrupted`, as Karpenter's drain does.
#[test]
fn a_pod_whose_grace_period_would_outlast_the_node_is_deleted_in_time() {
    let mut core = Controllers::new(Settings::default(), 7);
    let mut np = pool();
    np.spec.template.spec.termination_grace_period =
        Some(kerf_api::duration::GoDuration(Duration::from_secs(300)));
    core.apply_node_pool(np);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2)).remove(0);
    launch_and_register(&mut core, &claim);
    let mut pod = bound_pod("x", &claim, "1", 0, Some("rs"), None);
    pod.metadata.annotations = Some(BTreeMap::from([(
        "karpenter.sh/do-not-disrupt".to_string(),
        "true".to_string(),
    )]));
    pod.spec.as_mut().unwrap().termination_grace_period_seconds = Some(120);
    core.apply_pod(pod, secs(5));
    run_until(&mut core, 5, 6);
    core.delete_nodeclaim(&claim);
    let deletes = |actions: &[Action]| -> Vec<(String, Option<i64>)> {
        (actions.iter())
            .filter_map(|a| match a {
                Action::DeletePod { pod, grace_seconds } => Some((pod.clone(), *grace_seconds)),
                Action::Evict { pod } => Some((pod.clone(), None)),
                _ => None,
            })
            .collect()
    };
    // the node goes at 306 s: until 186 s the pod keeps its do-not-disrupt
    let before = run_until(&mut core, 7, 186);
    assert!(deletes(&before).is_empty(), "{:?}", deletes(&before));
    let after = run_until(&mut core, 187, 190);
    assert_eq!(deletes(&after), [("default/x".to_string(), Some(119))]);
    assert_eq!(
        events(&after, "Disrupted"),
        [
            "default/x: Deleting the pod to accommodate the terminationTime 1970-01-01 00:05:06 \
          +0000 UTC of the node. The pod was granted 119 seconds of grace-period of its 120 \
          terminationGracePeriodSeconds. This bypasses the PDB of the pod and the \
          do-not-disrupt annotation."
        ]
    );
}

/// The `ConsistentStateFound` condition (status, reason) of the last status written.
fn consistent(actions: &[Action]) -> Option<(String, String)> {
    actions.iter().rev().find_map(|a| match a {
        Action::PatchNodeClaimStatus { status, .. } => (status.conditions.iter())
            .find(|c| c.type_ == "ConsistentStateFound")
            .map(|c| (c.status.clone(), c.reason.clone())),
        _ => None,
    })
}

/// A node that comes up with under 90 % of a resource its NodeClaim requests, against what the
/// launch promised, is said as Karpenter's consistency check says it: a warning on the
/// NodeClaim, a log line and `ConsistentStateFound` false; said again each scan period while it
/// lasts, and true once the node reports what was promised.
#[test]
fn a_node_short_of_its_launch_fails_the_consistency_check_until_it_is_not() {
    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let claim = created(&run_until(&mut core, 0, 2))[0].clone();
    let four = Resources::from_quantities([
        (&"cpu".to_string(), "4"),
        (&"memory".to_string(), "8Gi"),
        (&"pods".to_string(), "110"),
    ]);
    let promised = Launched {
        capacity: four.clone(),
        allocatable: four.clone(),
        ..instance(&claim)
    };
    launch_as_and_register(&mut core, &claim, promised);
    core.apply_pod(bound_pod("x", &claim, "1", 0, None, None), secs(5));
    let first = run_until(&mut core, 3, 10);
    assert_eq!(
        events(&first, "FailedConsistencyCheck"),
        [format!(
            "{claim}: expected 4 of resource cpu, but found 2 (50.0% of expected)"
        )]
    );
    assert_eq!(logged(&first, "failed consistency check"), 1);
    assert_eq!(
        consistent(&first),
        Some(("False".into(), "ConsistencyCheckFailed".into()))
    );
    // said again once per ten minutes while it lasts, and the status not written again
    let later = run_until(&mut core, 11, 700);
    assert_eq!(events(&later, "FailedConsistencyCheck").len(), 1);
    assert_eq!(consistent(&later), None);
    // the node reports the promised capacity: consistent again, and nothing more is said
    let mut node = core.cluster().nodes()[&claim].clone();
    node.capacity = four.clone();
    node.allocatable = four;
    core.apply_node(claim.clone(), node, secs(701));
    let after = run_until(&mut core, 701, 1400);
    assert_eq!(
        consistent(&after),
        Some(("True".into(), "ConsistentStateFound".into()))
    );
    assert!(events(&after, "FailedConsistencyCheck").is_empty());
    assert_eq!(core.cluster().nodeclaims().len(), 1);
}

/// One node whose only pod (ReplicaSet-owned) would move onto a node Kerf does not manage, and
/// the first poll at which the consolidation command is decided, with what that poll did.
fn consolidation_decided() -> (Controllers, String, u64, Vec<Action>) {
    let (mut core, claim) = one_node_with_a_replicaset_pod();
    unmanaged_node(&mut core, "us-east-1a");
    for t in 5..120 {
        let actions = core.poll(secs(t));
        if !events(&actions, "ConsolidationCandidate").is_empty() {
            return (core, claim, t, actions);
        }
    }
    panic!("no consolidation command was decided");
}

/// A consolidation command's candidates are told so on their Node and NodeClaim when it is
/// decided (`ConsolidationCandidate`), and, when validation turns a one-node move down,
/// why (`ConsolidationRejected`: budget, scheduling or churn), with Karpenter's messages.
#[test]
fn consolidation_candidates_are_told_when_decided_and_when_rejected() {
    let (_, claim, _, decided) = consolidation_decided();
    let candidate = format!("Consolidation candidate: delete: [{claim}] (savings: $0.10)");
    // the Node and the NodeClaim share the name here: both are told
    assert_eq!(
        events(&decided, "ConsolidationCandidate"),
        [
            format!("{claim}: {candidate}"),
            format!("{claim}: {candidate}")
        ]
    );
    let kinds: Vec<_> = (decided.iter())
        .filter_map(|a| match a {
            Action::Event(e) if e.reason == "ConsolidationCandidate" => Some((e.kind, e.warning)),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        [(EventObject::Node, false), (EventObject::NodeClaim, false)]
    );

    // the NodePool's budget closes during the validation wait
    let (mut core, claim, t, _) = consolidation_decided();
    let mut np = pool();
    np.spec.disruption.budgets =
        serde_json::from_value(serde_json::json!([{"nodes": "0"}])).expect("budgets");
    core.apply_node_pool(np);
    let after = run_until(&mut core, t + 1, t + 60);
    assert_eq!(
        events(&after, "ConsolidationRejected"),
        vec![
            format!(
                "{claim}: Consolidation rejected: delete: [{claim}], reason: budget (savings: $0.10)"
            );
            2
        ]
    );
    assert!(
        !(after.iter()).any(|a| matches!(a, Action::DeleteNodeClaim { .. })),
        "{after:#?}"
    );

    // the node Kerf does not manage goes during the wait: nowhere to move, so scheduling
    let (mut core, claim, t, _) = consolidation_decided();
    let (kind, key) = ("Node".into(), "/mng-1".to_string());
    core.observe(Observation::Deleted { kind, key }, secs(t + 1));
    let after = run_until(&mut core, t + 1, t + 60);
    let rejected = format!(
        "{claim}: Consolidation rejected: delete: [{claim}], reason: scheduling (savings: $0.10)"
    );
    assert_eq!(events(&after, "ConsolidationRejected"), vec![rejected; 2]);
}

/// Under the Balanced policy a decided one-node move's score is told on its Node and
/// NodeClaim (`ConsolidationApproved`, with Karpenter's message); under the others nothing
/// is.
#[test]
fn a_balanced_move_is_told_approved_with_its_score() {
    let (_, _, _, decided) = consolidation_decided();
    assert!(events(&decided, "ConsolidationApproved").is_empty());
    let (mut core, claim) = one_node_with_a_replicaset_pod();
    let mut np = pool();
    np.spec.disruption.consolidation_policy = kerf_api::nodepool::ConsolidationPolicy::Balanced;
    core.apply_node_pool(np);
    unmanaged_node(&mut core, "us-east-1a");
    let told: Vec<String> = (5..120)
        .flat_map(|t| events(&core.poll(secs(t)), "ConsolidationApproved"))
        .collect();
    // the pool's one node: all of its cost saved, all of its disruption cost disrupted
    let message = "score 1.00 >= threshold 0.50 (k: 2, savings 100.0%, disruption 100.0%)";
    assert_eq!(
        told,
        [format!("{claim}: {message}"), format!("{claim}: {message}")]
    );
}

/// A NodePool being deleted (held while a foreground deletion takes its NodeClaims first) gets
/// no new node for a pending pod, as Karpenter's provisioner leaves such a NodePool out; the
/// same NodePool not being deleted does.
#[test]
fn a_nodepool_being_deleted_gets_no_new_node() {
    let mut going = pool();
    going.metadata = serde_yaml::from_str(
        "{name: default, deletionTimestamp: '2026-12-01T00:00:00Z', finalizers: [foregroundDeletion]}",
    )
    .expect("metadata");
    let mut core = Controllers::new(Settings::default(), 7);
    core.apply_node_pool(going);
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core.apply_pod(unschedulable("x", "1"), secs(0));
    let actions = run_until(&mut core, 0, 30);
    assert!(created(&actions).is_empty(), "{actions:#?}");

    let mut core = with_pool();
    core.apply_pod(unschedulable("x", "1"), secs(0));
    assert_eq!(created(&run_until(&mut core, 0, 30)).len(), 1);
}

/// While the shell's watches are listing, Karpenter's cluster-state gauges say the state is
/// not synced and for how long; once they have listed, synced.
#[test]
fn the_cluster_state_reads_unsynced_while_the_watches_list() {
    let mut core = Controllers::new(Settings::default(), 7);
    let gauge = |text: &str, name: &str| {
        let line = (text.lines()).find(|l| l.starts_with(&format!("{name} ")));
        line.and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    core.watches_unsynced_since(Some(secs(10)));
    let text = core.render_metrics(secs(25), &[]);
    assert_eq!(gauge(&text, "karpenter_cluster_state_synced"), Some(0.0));
    assert_eq!(
        gauge(&text, "karpenter_cluster_state_unsynced_time_seconds"),
        Some(15.0)
    );
    core.watches_unsynced_since(None);
    let text = core.render_metrics(secs(30), &[]);
    assert_eq!(gauge(&text, "karpenter_cluster_state_synced"), Some(1.0));
    assert_eq!(
        gauge(&text, "karpenter_cluster_state_unsynced_time_seconds"),
        Some(0.0)
    );
}
