//! What the tests of every controller share: objects, a shell that drives the
//! controllers, and readings of the actions they take.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::nodepool::DisruptionReason;
use kerf_api::{EC2NodeClass, NodePool};
use kerf_core::cluster::{
    CapacityType, CloudInstance, DriftReason, InstanceNetwork, Launched, NodeRecord,
};
use kerf_core::controllers::interruption::Notice;
use kerf_core::controllers::reboot::RebootRefusal;
use kerf_core::controllers::{Action, Controllers, Settings};
use kerf_core::observe::{Object, Observation};
use kerf_scheduling::resources::Resources;
use kerf_scheduling::{InstanceTypeOption, Offering};

pub(crate) fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

pub(crate) fn pool() -> NodePool {
    serde_yaml::from_str(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
    )
    .unwrap()
}

pub(crate) fn two_cpus() -> Resources {
    Resources::from_quantities([
        (&"cpu".to_string(), "2"),
        (&"memory".to_string(), "8Gi"),
        (&"pods".to_string(), "110"),
    ])
}

pub(crate) fn instance_type() -> InstanceTypeOption {
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
pub(crate) fn unschedulable(name: &str, cpu: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }))
    .unwrap()
}

pub(crate) fn created(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::CreateNodeClaim(c) => c.metadata.name.clone(),
            _ => None,
        })
        .collect()
}

/// Polls until `until`, a second at a time, collecting the actions; the taints and node
/// labels asked for are stored and come back as the watch would bring them.
pub(crate) fn run_until(core: &mut Controllers, from: u64, until: u64) -> Vec<Action> {
    (from..=until).flat_map(|t| poll_stored(core, t)).collect()
}

/// One poll at `t`; the taints and node labels it asks for are stored and come back as the
/// watch would bring them.
pub(crate) fn poll_stored(core: &mut Controllers, t: u64) -> Vec<Action> {
    let actions = core.poll(secs(t));
    for a in &actions {
        match a {
            Action::Taint { node, taint, .. } => store_taint(core, node, taint, t),
            Action::LabelNode { node, labels, .. } => store_labels(core, node, labels, t),
            _ => {}
        }
    }
    actions
}

/// The API server stores `labels` on `node`, and the watch brings the node back at `at`.
pub(crate) fn store_labels(
    core: &mut Controllers,
    node: &str,
    labels: &BTreeMap<String, String>,
    at: u64,
) {
    if let Some(mut n) = core.cluster().nodes().get(node).cloned() {
        Arc::make_mut(&mut n.labels).extend(labels.clone());
        core.apply_node(node.to_string(), n, secs(at));
    }
}

/// The cluster's objects reach the controllers only through [`Controllers::observe`]; these
/// say it shortly, from the records the tests build.
pub(crate) trait Observe {
    fn apply_pod(&mut self, pod: Pod, now: Duration);
    fn delete_pod(&mut self, key: &str, now: Duration);
    fn apply_node_pool(&mut self, np: NodePool);
    fn apply_node_class(&mut self, class: EC2NodeClass);
    fn set_instance_types(&mut self, class: &str, types: Arc<[InstanceTypeOption]>);
    fn apply_node(&mut self, name: String, record: NodeRecord, now: Duration);
    fn nodeclaim_gone(&mut self, name: &str);
    fn launched(&mut self, nodeclaim: &str, launched: Launched, now: Duration);
    fn launch_failed(
        &mut self,
        nodeclaim: &str,
        insufficient: &[kerf_core::controllers::lifecycle::InsufficientOffering],
        now: Duration,
    );
    fn launch_retry(&mut self, nodeclaim: &str, error: &str, now: Duration);
    fn garbage_collect(&mut self, instances: &[CloudInstance], now: Duration);
    fn notice(&mut self, notice: &Notice, now: Duration);
    fn evicted(&mut self, pod: &str);
    fn eviction_refused(&mut self, pod: &str, code: Option<u16>);
    fn reboot_answered(
        &mut self,
        nodeclaim: &str,
        result: Result<(), RebootRefusal>,
        now: Duration,
    );
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
    fn launched(&mut self, nodeclaim: &str, launched: Launched, now: Duration) {
        let (nodeclaim, launched) = (nodeclaim.to_string(), Box::new(launched));
        self.observe(
            Observation::Launched {
                nodeclaim,
                launched,
            },
            now,
        );
    }
    fn launch_failed(
        &mut self,
        nodeclaim: &str,
        insufficient: &[kerf_core::controllers::lifecycle::InsufficientOffering],
        now: Duration,
    ) {
        let (nodeclaim, insufficient) = (nodeclaim.to_string(), insufficient.to_vec());
        let failed = Observation::LaunchFailed {
            nodeclaim,
            insufficient,
        };
        self.observe(failed, now);
    }
    fn launch_retry(&mut self, nodeclaim: &str, error: &str, now: Duration) {
        let (nodeclaim, error) = (nodeclaim.to_string(), error.to_string());
        self.observe(Observation::LaunchRetry { nodeclaim, error }, now);
    }
    fn garbage_collect(&mut self, instances: &[CloudInstance], now: Duration) {
        self.observe(Observation::Instances(instances.to_vec()), now);
    }
    fn notice(&mut self, notice: &Notice, now: Duration) {
        self.observe(Observation::Notice(notice.clone()), now);
    }
    fn evicted(&mut self, pod: &str) {
        self.observe(Observation::Evicted(pod.to_string()), Duration::ZERO);
    }
    fn eviction_refused(&mut self, pod: &str, code: Option<u16>) {
        let pod = pod.to_string();
        self.observe(Observation::EvictionRefused { pod, code }, Duration::ZERO);
    }
    fn reboot_answered(
        &mut self,
        nodeclaim: &str,
        result: Result<(), RebootRefusal>,
        now: Duration,
    ) {
        let nodeclaim = nodeclaim.to_string();
        self.observe(Observation::RebootAnswered { nodeclaim, result }, now);
    }
}

/// The Node object a kubelet and the API server would hold for a record.
pub(crate) fn node_object(name: &str, n: &NodeRecord) -> k8s_openapi::api::core::v1::Node {
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
    let mut conditions = vec![serde_json::json!({
        "type": "Ready", "status": if n.ready { "True" } else { "False" },
        "lastTransitionTime": changed.to_string(),
    })];
    for c in n.conditions.iter().filter(|c| c.kind != "Ready") {
        let since = k8s_openapi::jiff::Timestamp::from_second(c.since.as_secs() as i64);
        conditions.push(serde_json::json!({
            "type": c.kind, "status": c.status, "reason": c.reason,
            "lastTransitionTime": since.expect("a time").to_string(),
        }));
    }
    let info = serde_json::json!({
        "bootID": n.boot_id, "architecture": "", "containerRuntimeVersion": "", "kernelVersion": "",
        "kubeProxyVersion": "", "kubeletVersion": "", "machineID": "", "operatingSystem": "",
        "osImage": "", "systemUUID": "",
    });
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": *n.labels, "annotations": annotations,
                     "finalizers": finalizers, "deletionTimestamp": deleted},
        "spec": {"providerID": n.provider_id, "taints": taints},
        "status": {
            "allocatable": n.allocatable.to_resource_list(),
            "capacity": n.capacity.to_resource_list(),
            "conditions": conditions,
            "nodeInfo": info,
        },
    }))
    .expect("a Node")
}

/// The API server stores a taint on a node, and the watch brings the node back.
pub(crate) fn store_taint(core: &mut Controllers, node: &str, taint: &kerf_api::Taint, at: u64) {
    if let Some(mut n) = core.cluster().nodes().get(node).cloned() {
        n.taints.push(taint.clone());
        core.apply_node(node.to_string(), n, secs(at));
    }
}

/// Controllers with the default NodePool, offering one instance type.
pub(crate) fn with_pool() -> Controllers {
    let mut core = Controllers::new(Settings::default(), 7);
    core.apply_node_pool(pool());
    core.set_instance_types("default", Arc::from(vec![instance_type()]));
    core
}

/// The cloud launches `claim` as an m5.large at 3 s, and its node registers Ready at 4 s.
pub(crate) fn launch_and_register(core: &mut Controllers, claim: &str) {
    launch_image_and_register(core, claim, None);
}

/// As [`launch_and_register`], booting `image`.
pub(crate) fn launch_image_and_register(core: &mut Controllers, claim: &str, image: Option<&str>) {
    launch_into_and_register(core, claim, image, None);
}

/// The network of an instance in `subnet` with these security groups.
pub(crate) fn network(subnet: &str, groups: &[&str]) -> InstanceNetwork {
    InstanceNetwork {
        subnet_id: subnet.into(),
        security_group_ids: groups.iter().map(|g| g.to_string()).collect(),
    }
}

/// The m5.large the cloud launches for `claim`.
pub(crate) fn instance(claim: &str) -> Launched {
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
pub(crate) fn launch_into_and_register(
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
pub(crate) fn launch_as_and_register(core: &mut Controllers, claim: &str, launched: Launched) {
    launch_as_and_register_tainted(core, claim, launched, Vec::new());
}

/// As [`launch_as_and_register`], the node registering with `taints`.
pub(crate) fn launch_as_and_register_tainted(
    core: &mut Controllers,
    claim: &str,
    launched: Launched,
    taints: Vec<kerf_api::Taint>,
) {
    launch_as_and_register_with(core, claim, launched, taints, BTreeMap::new());
}

/// As [`launch_and_register`], the node registering with the zone label of its launch
/// (`us-east-1a`), as a kubelet's cloud provider sets it.
pub(crate) fn launch_and_register_zoned(core: &mut Controllers, claim: &str) {
    let launched = instance(claim);
    let zone = BTreeMap::from([("topology.kubernetes.io/zone".into(), launched.zone.clone())]);
    launch_as_and_register_with(core, claim, launched, Vec::new(), zone);
}

/// The cloud launches `claim` as `launched` at 3 s, and its node registers Ready at 4 s with
/// `taints` and `labels`.
fn launch_as_and_register_with(
    core: &mut Controllers,
    claim: &str,
    launched: Launched,
    taints: Vec<kerf_api::Taint>,
    labels: BTreeMap<String, String>,
) {
    core.launched(claim, launched, secs(3));
    core.apply_node(
        claim.to_string(),
        NodeRecord {
            provider_id: format!("kwok://{claim}"),
            nodeclaim: None,
            labels: labels.into(),
            // read from the stored labels once observed
            initialized_stored: false,
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
            boot_id: String::new(),
        },
        secs(4),
    );
}

/// A Ready node of a managed node group: no NodeClaim, no Kerf labels.
pub(crate) fn unmanaged_node(core: &mut Controllers, zone: &str) {
    unmanaged_node_named(core, "mng-1", zone);
}

/// [`unmanaged_node`], named.
pub(crate) fn unmanaged_node_named(core: &mut Controllers, name: &str, zone: &str) {
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
            // read from the stored labels once observed
            initialized_stored: false,
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
            boot_id: String::new(),
        },
        secs(0),
    );
}

/// One node launched for a ReplicaSet's pod, which runs there from 5 s: nothing else can take it.
pub(crate) fn one_node_with_a_replicaset_pod() -> (Controllers, String) {
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

/// A pod owned by a ReplicaSet (so its node may be consolidated), that kube-scheduler found
/// no node for.
pub(crate) fn replica(name: &str, cpu: &str) -> Pod {
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
pub(crate) fn launch_at(core: &mut Controllers, claim: &str, at: u64) {
    core.launched(claim, instance(claim), secs(at));
    let record = NodeRecord {
        provider_id: format!("kwok://{claim}"),
        nodeclaim: None,
        labels: Default::default(),
        // read from the stored labels once observed
        initialized_stored: false,
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
        boot_id: String::new(),
    };
    core.apply_node(claim.to_string(), record, secs(at + 1));
}

/// x (1 cpu) runs alone on node a, half of it free, by 5 s; w (1500m), too big for a's room,
/// comes at 6 s and gets NodeClaim b, not yet launched: the controllers, a and b.
pub(crate) fn x_on_a_and_w_planned_on_b() -> (Controllers, String, String) {
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

/// Two nodes, each with one 500m pod that fits beside the other's, by 35 s; the provisioner's
/// batch window held at 30 s, so that a pod coming later waits that long to be solved for.
pub(crate) fn two_half_empty_nodes() -> Controllers {
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

pub(crate) fn events(actions: &[Action], reason: &str) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Event(e) if e.reason == reason => Some(format!("{}: {}", e.name, e.message)),
            _ => None,
        })
        .collect()
}

/// The nodes repair commands took.
pub(crate) fn repaired(actions: &[Action]) -> Vec<String> {
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

/// The default EC2NodeClass, its status resolving to these AMIs.
pub(crate) fn node_class(amis: &[&str]) -> EC2NodeClass {
    resolved_class(amis, &[], &[])
}

/// The default EC2NodeClass, its status resolving to these AMIs, subnets and security groups.
pub(crate) fn resolved_class(amis: &[&str], subnets: &[&str], groups: &[&str]) -> EC2NodeClass {
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

/// The drift reasons of `claims`, in order.
pub(crate) fn drift(core: &Controllers, claims: &[String]) -> Vec<Option<DriftReason>> {
    claims
        .iter()
        .map(|c| core.cluster().nodeclaims().get(c).and_then(|c| c.drifted))
        .collect()
}

pub(crate) fn launches(actions: &[Action], claim: &str) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Launch { nodeclaim, .. } if nodeclaim == claim))
        .count()
}

pub(crate) fn deleted(actions: &[Action], claim: &str) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, Action::DeleteNodeClaim { nodeclaim } if nodeclaim == claim))
}

/// The API server holds the NodeClaim's deletion from second `at`, and Kerf's watch sees it.
pub(crate) fn store_deletion(core: &mut Controllers, mut stored: kerf_api::NodeClaim, at: i64) {
    stored.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(at).unwrap(),
        ));
    core.observe(
        Observation::Applied(Object::nodeclaim(stored)),
        secs(at as u64),
    );
}

pub(crate) fn evicted(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Evict { pod } => Some(pod.clone()),
            _ => None,
        })
        .collect()
}

/// A node with pod `default/x` (made by `edit`) bound to it, whose NodeClaim's deletion
/// has just started; the NodeClaim's name.
pub(crate) fn drained_with_pod(core: &mut Controllers, edit: impl FnOnce(Pod) -> Pod) -> String {
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
    let _ = core.poll(secs(5));
    core.delete_nodeclaim(&claim, secs(5));
    claim
}

/// Controllers with the StaticCapacity gate on and `default` a static NodePool of
/// `replicas`, offering one instance type.
pub(crate) fn with_static_pool(replicas: i64, node_limit: Option<&str>) -> Controllers {
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

pub(crate) fn logged(actions: &[Action], message: &str) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Log(r) if r.message == message))
        .count()
}

pub(crate) fn types_asked(actions: &[Action]) -> Vec<String> {
    (actions.iter())
        .filter_map(|a| match a {
            Action::ListInstanceTypes { node_class, .. } => Some(node_class.clone()),
            _ => None,
        })
        .collect()
}

/// The node class status controller's requests among `actions`, shortly: `resolve`,
/// `finalizer`, `finalize`, and `status` with the written conditions' observed generations.
pub(crate) fn node_class_work(actions: &[Action]) -> Vec<String> {
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

/// The NodePool's `NodeRegistrationHealthy` condition in the status patches `actions` wrote,
/// last first: (status, reason).
pub(crate) fn registration_health(actions: &[Action]) -> Option<(String, String)> {
    pool_condition(actions, "NodeRegistrationHealthy")
}

/// The NodePool's condition `type_` in the last status `actions` wrote: (status, reason).
pub(crate) fn pool_condition(actions: &[Action], type_: &str) -> Option<(String, String)> {
    actions.iter().rev().find_map(|a| match a {
        Action::PatchNodePoolStatus { status, .. } => (status.conditions.iter())
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.reason.clone())),
        _ => None,
    })
}

/// The test's instance type, carrying placement group `id` when the class resolves one.
pub(crate) fn in_group(id: Option<&str>) -> Arc<[InstanceTypeOption]> {
    let mut t = instance_type();
    if let Some(id) = id {
        Arc::make_mut(&mut t.labels).insert(kerf_api::labels::PLACEMENT_GROUP_ID.into(), id.into());
    }
    Arc::from(vec![t])
}

/// `claim`'s instance, booting ami-1 in placement group `id`.
pub(crate) fn launched_in(claim: &str, id: &str) -> Launched {
    Launched {
        image_id: Some("ami-1".into()),
        labels: BTreeMap::from([(
            kerf_api::labels::PLACEMENT_GROUP_ID.to_string(),
            id.to_string(),
        )]),
        ..instance(claim)
    }
}

/// A failed status check's notice for `claim`'s instance (`kwok://claim`'s id is `claim`).
pub(crate) fn status_check_failed(claim: &str) -> kerf_core::controllers::interruption::Notice {
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

/// Controllers with the default NodePool, and the NodeClaim object they create for one
/// pending pod (`x`, 1 cpu) in their first seconds.
pub(crate) fn first_nodeclaim() -> (Controllers, kerf_api::NodeClaim) {
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

/// A VolumeAttachment `name` on `node`, of persistent volume `pv` (an inline volume's
/// without).
pub(crate) fn attachment(node: &str, name: &str, pv: Option<&str>) -> Observation {
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
pub(crate) fn termination_ended(actions: &[Action]) -> bool {
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
pub(crate) fn volumes_detached(actions: &[Action], claim: &str) -> Option<(String, String)> {
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

/// A ReplicaSet's pod (or, with no `owner`, a bare one) of `cpu` and `priority` bound to
/// `node`, its pod-deletion-cost `annotated`.
pub(crate) fn bound_pod(
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
pub(crate) fn deletion_costs(actions: &[Action]) -> BTreeMap<String, Option<i32>> {
    (actions.iter())
        .filter_map(|a| match a {
            Action::AnnotatePodDeletionCost { pod, cost } => Some((pod.clone(), *cost)),
            _ => None,
        })
        .collect()
}

/// The last status `actions` wrote for `claim`.
pub(crate) fn last_status(
    actions: &[Action],
    claim: &str,
) -> Option<kerf_api::nodeclaim::NodeClaimStatus> {
    actions.iter().rev().find_map(|a| match a {
        Action::PatchNodeClaimStatus {
            nodeclaim, status, ..
        } if nodeclaim == claim => Some((**status).clone()),
        _ => None,
    })
}

/// The `ConsistentStateFound` condition (status, reason) of the last status written.
pub(crate) fn consistent(actions: &[Action]) -> Option<(String, String)> {
    actions.iter().rev().find_map(|a| match a {
        Action::PatchNodeClaimStatus { status, .. } => (status.conditions.iter())
            .find(|c| c.type_ == "ConsistentStateFound")
            .map(|c| (c.status.clone(), c.reason.clone())),
        _ => None,
    })
}

/// One node whose only pod (ReplicaSet-owned) would move onto a node Kerf does not manage, and
/// the first poll at which the consolidation command is decided, with what that poll did.
pub(crate) fn consolidation_decided() -> (Controllers, String, u64, Vec<Action>) {
    let (mut core, claim) = one_node_with_a_replicaset_pod();
    unmanaged_node(&mut core, "us-east-1a");
    for t in 5..120 {
        let actions = poll_stored(&mut core, t);
        if !events(&actions, "ConsolidationCandidate").is_empty() {
            return (core, claim, t, actions);
        }
    }
    panic!("no consolidation command was decided");
}

/// An unlabelled gauge's value in rendered metrics.
pub(crate) fn gauge(text: &str, name: &str) -> Option<f64> {
    let line = (text.lines()).find(|l| l.starts_with(&format!("{name} ")));
    line.and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
}
