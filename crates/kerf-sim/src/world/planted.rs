//! Each invariant's checker shown to fire: a settled run of a small cluster, one bug planted
//! in what the checker reads (an object, an instance, an action it is shown), and the check
//! called. A checker that cannot fail checks nothing.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Toleration};
use kerf_api::nodepool::DisruptionReason;
use kerf_api::{NodeClaim, NodePool, Taint, TaintEffect};
use kerf_core::cluster::PodOwner;
use kerf_core::observe::Object;

use super::api_server::StoredPod;
use super::faults::InjectedFault;
use super::{RunOptions, SimError, StoredNodeClaim, World};
use crate::scenario;

/// Three one-cpu pods of a Deployment on on-demand m-family nodes, settled after 10 minutes.
const CLUSTER: &str = r#"
apiVersion: kerf.sh/v1alpha1
kind: Scenario
metadata: {name: planted}
spec:
  duration: 10m
  manifests:
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata: {name: default}
    spec:
      role: R
      amiSelectorTerms: [{alias: al2023@latest}]
      subnetSelectorTerms: [{tags: {k: v}}]
      securityGroupSelectorTerms: [{tags: {k: v}}]
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: general}
    spec:
      template:
        spec:
          nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
          requirements:
          - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
          - {key: karpenter.k8s.aws/instance-category, operator: In, values: [m]}
      disruption:
        consolidationPolicy: WhenEmptyOrUnderutilized
        consolidateAfter: 30s
        budgets: [{nodes: '0'}]
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: app, namespace: default}
    spec:
      replicas: 3
      selector: {matchLabels: {app: app}}
      template:
        metadata: {labels: {app: app}}
        spec:
          containers:
          - name: c
            image: app
            resources: {requests: {cpu: '1', memory: 1Gi}}
"#;

/// The cluster run to its end with every invariant held.
fn settled() -> World {
    let scenario = scenario::parse(CLUSTER, None).expect("scenario");
    let options = RunOptions::checked();
    let mut world = World::new(scenario, options).expect("world");
    world.settle().expect("settles");
    while world.step().expect("holds every invariant") {}
    world
}

fn a_node(world: &World) -> String {
    let (name, _) = world.api.nodes.iter().next().expect("a node");
    name.clone()
}

/// Stores a pod in the API server as of `at`; Kerf's watch sees it.
fn store_pod(world: &mut World, pod: Pod, at: Duration) {
    let key = kerf_scheduling::pods::pod_key(&pod);
    world
        .api
        .pods
        .insert(key.clone(), StoredPod::created(pod, at));
    world.track_pod(&key);
    world.observe_pod(&key);
}

fn a_workload_pod(world: &World) -> String {
    let pods = world.pods_where(|p| p.owner == PodOwner::Controller);
    pods.into_iter().next().expect("a workload pod")
}

fn a_nodeclaim(world: &World) -> String {
    let (name, _) = world.api.nodeclaims.iter().next().expect("a nodeclaim");
    name.clone()
}

fn pod(yaml: &str) -> Pod {
    serde_yaml::from_str(yaml).expect("pod")
}

/// The pool's NodePool with `edit` applied, as the controllers are told of it.
fn edit_pool(world: &mut World, edit: impl FnOnce(&mut NodePool)) {
    let mut np = world.api.objects.node_pools["general"].clone();
    edit(&mut np);
    world.write(Object::node_pool(np));
}

/// Stores `object` as a NodeClaim named `name`, created and asked for at the run's start.
fn store_old_nodeclaim(world: &mut World, name: &str, mut object: NodeClaim) {
    object.metadata.name = Some(name.into());
    let stored = StoredNodeClaim {
        object,
        created: Duration::ZERO,
        age: Duration::ZERO,
        deleting: None,
        node_registered: false,
        asked: Duration::ZERO,
    };
    world.api.nodeclaims.insert(name.into(), stored);
}

type Plant = fn(&mut World) -> Result<(), SimError>;

/// (invariant, the bug planted and the check that must catch it, words of its message)
const CASES: &[(&str, Plant, &str)] = &[
    ("no node over-committed", over_committed, "over-committed"),
    (
        "taints and node selectors honoured",
        untolerated_taint,
        "does not tolerate",
    ),
    (
        "taints and node selectors honoured",
        selector_broken,
        "rules out",
    ),
    (
        "no NodeClaim launched over its NodePool's limits",
        over_limit,
        "over its cpu limit",
    ),
    (
        "instances launched only for stored NodeClaims, each given a launch result or deleted",
        no_launch_result,
        "no launch result",
    ),
    (
        "disruption budgets never exceeded",
        over_budget,
        "exceeds its budget",
    ),
    (
        "no eviction past a PodDisruptionBudget",
        past_pdb,
        "PodDisruptionBudget",
    ),
    (
        "no do-not-disrupt pod evicted",
        do_not_disrupt_evicted,
        "do-not-disrupt",
    ),
    (
        "pods evicted only from nodes the API server holds tainted karpenter.sh/disrupted",
        evicted_untainted,
        "without the karpenter.sh/disrupted",
    ),
    (
        "a NodeClaim being deleted has its node tainted karpenter.sh/disrupted within a minute",
        deleting_untainted,
        "is not tainted karpenter.sh/disrupted",
    ),
    (
        "every NodeClaim meets its NodePool's minValues, or says it was relaxed (BestEffort)",
        below_min_values,
        "below its minValues",
    ),
    (
        "every instance priced as its NodeOverlays say",
        mispriced,
        "NodeOverlays price it",
    ),
    (
        "no pod waiting long while capacity exists",
        waiting_long,
        "although capacity exists",
    ),
    (
        "no pod pending over 15 minutes that a NodePool could host",
        pending_at_end,
        "that a NodePool could host",
    ),
    (
        "every launched NodeClaim registers or is cleaned up",
        never_registered,
        "never registered and was not cleaned up",
    ),
    (
        "static NodePools end at their replicas",
        static_over,
        "its replicas and node limit ask for 0",
    ),
    (
        "no capacity reservation over its count; capacity blocks drained 40 minutes before their end",
        reservation_overfull,
        "more than its 0",
    ),
    (
        "consolidation converges when the cluster is quiet",
        unseen_write,
        "yet the controllers started no command",
    ),
    (
        "empty nodes deleted once past consolidateAfter",
        emptied_unseen,
        "emptiness: node",
    ),
];

/// Invariants whose planted-bug test lives beside their checker.
const PLANTED_ELSEWHERE: &[&str] = &["spot preferred over on-demand fallback"];

#[test]
fn every_invariant_has_a_planted_bug() {
    let untested: Vec<&str> = (super::INVARIANTS.iter().copied())
        .filter(|i| !PLANTED_ELSEWHERE.contains(i))
        .filter(|i| !CASES.iter().any(|(invariant, _, _)| invariant == i))
        .collect();
    assert!(untested.is_empty(), "no planted bug for {untested:?}");
}

#[test]
fn every_planted_bug_is_caught_by_its_checker() {
    for (invariant, plant, words) in CASES {
        let mut world = settled();
        let caught = plant(&mut world).expect_err(invariant);
        assert!(caught.to_string().contains(words), "{invariant}: {caught}");
        assert!(
            super::INVARIANTS.contains(invariant),
            "{invariant} is listed"
        );
    }
}

fn over_committed(world: &mut World) -> Result<(), SimError> {
    let node = a_node(world);
    let mut big = pod(
        "metadata: {name: big, namespace: default}\nspec: {containers: [{name: c, resources: {requests: {cpu: '500'}}}]}",
    );
    big.spec.as_mut().expect("spec").node_name = Some(node);
    store_pod(world, big, world.now);
    world.with_checkers(|c, s| c.check_step(s))
}

fn untolerated_taint(world: &mut World) -> Result<(), SimError> {
    let node = a_node(world);
    let taint = Taint {
        key: "planted".into(),
        value: None,
        effect: TaintEffect::NoSchedule,
        time_added: None,
    };
    world.api.nodes.taint(&node, &taint);
    world.with_checkers(|c, s| c.check_step(s))
}

fn selector_broken(world: &mut World) -> Result<(), SimError> {
    let node = a_node(world);
    let pod_key = world
        .pods_where(|p| p.node.as_deref() == Some(node.as_str()) && p.owner == PodOwner::Controller)
        .into_iter()
        .next()
        .expect("a pod on the node");
    let mut p = (*world.api.pods[&pod_key].pod).clone();
    let spec = p.spec.as_mut().expect("spec");
    spec.node_selector = Some([("planted".to_string(), "yes".to_string())].into());
    store_pod(world, p, world.now);
    world.with_checkers(|c, s| c.check_step(s))
}

fn over_limit(world: &mut World) -> Result<(), SimError> {
    let claim = a_nodeclaim(world);
    edit_pool(world, |np| {
        np.spec
            .limits
            .insert("cpu".into(), "1".parse().expect("quantity"));
    });
    world.with_checkers(|c, s| c.check_limits(s, &claim))
}

fn no_launch_result(world: &mut World) -> Result<(), SimError> {
    let claim = a_nodeclaim(world);
    let mut object: NodeClaim = world.api.nodeclaims[&claim].object.clone();
    object.status = None;
    store_old_nodeclaim(world, "planted-never-launched", object);
    world.with_checkers(|c, s| c.check_launch_results(s))
}

fn over_budget(world: &mut World) -> Result<(), SimError> {
    let node = a_node(world);
    world.with_checkers(|c, s| c.check_budgets(s, DisruptionReason::Underutilized, &[node]))
}

fn past_pdb(world: &mut World) -> Result<(), SimError> {
    let pdb = serde_yaml::from_str(
        "metadata: {name: app, namespace: default}\nspec: {minAvailable: 3, selector: {matchLabels: {app: app}}}",
    )
    .expect("pdb");
    world.write(Object::Pdb(Box::new(pdb)));
    let pod = a_workload_pod(world);
    // its node tainted as a drain's is: only the budget is broken
    let node = world.api.pods[&pod].node.clone().expect("bound");
    let disrupted = kerf_core::cluster::disrupted_taint();
    world.api.nodes.taint(&node, &disrupted);
    world.with_checkers(|c, s| c.check_eviction(s, &pod))
}

fn do_not_disrupt_evicted(world: &mut World) -> Result<(), SimError> {
    let key = a_workload_pod(world);
    let mut p = (*world.api.pods[&key].pod).clone();
    p.metadata.annotations = Some(
        [(
            kerf_api::labels::DO_NOT_DISRUPT.to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    store_pod(world, p, world.now);
    world.with_checkers(|c, s| c.check_eviction(s, &key))
}

fn evicted_untainted(world: &mut World) -> Result<(), SimError> {
    let key = a_workload_pod(world);
    world.with_checkers(|c, s| c.check_eviction(s, &key))
}

fn deleting_untainted(world: &mut World) -> Result<(), SimError> {
    let claim = a_nodeclaim(world);
    if let Some(stored) = world.api.nodeclaims.get_mut(&claim) {
        stored.deleting = Some(Duration::ZERO);
    }
    world.with_checkers(|c, s| c.check_drains_tainted(s))
}

/// A pod that waited from the start for a node a NodePool could launch (two cpus more than
/// any node has free), the controllers never asked.
fn stranded(world: &mut World) {
    let p = pod(
        "metadata: {name: stranded, namespace: default, ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: x, uid: u, controller: true}]}\nspec: {containers: [{name: c, resources: {requests: {cpu: '6'}}}]}",
    );
    store_pod(world, p, Duration::ZERO);
    world.now = Duration::from_secs(3600);
}

fn waiting_long(world: &mut World) -> Result<(), SimError> {
    stranded(world);
    world.with_checkers(|c, s| c.check_waits(s))
}

/// A node that never reports Ready excuses the pods it could take and those whose room they
/// took, not every waiting pod (swarm seed 65410's carve-out, narrowed).
#[test]
fn a_never_ready_node_excuses_only_the_pods_it_held_up() {
    let mut world = settled();
    stranded(&mut world);
    // the stranded pod asks for 6 cpu: the nodes below have room for it
    let mut node = world
        .api
        .nodes
        .get(&a_node(&world))
        .expect("a node")
        .clone();
    node.amounts.insert("cpu".into(), 64_000);
    let dedicated = Taint {
        key: "dedicated".into(),
        value: Some("gpu".into()),
        effect: TaintEffect::NoSchedule,
        time_added: None,
    };
    let (from, until) = (Duration::ZERO, Duration::from_secs(7200));
    // a tainted node the stranded pod does not tolerate held nothing up for it
    let tainted = InjectedFault::never_ready(from, until, &node, vec![dedicated.clone()]);
    world.checkers.fault(tainted);
    let caught = world
        .with_checkers(|c, s| c.check_waits(s))
        .expect_err("the stranded pod was not held up");
    assert!(
        caught.to_string().contains("although capacity exists"),
        "{caught}"
    );
    world
        .with_checkers(|c, s| c.check_end(s))
        .expect_err("nor at the end");
    // a pod that node could take was bound, after the stranded pod became pending, to a node
    // the stranded pod could take too: its room may have been that one
    let (other, name) = (a_workload_pod(&world), a_node(&world));
    let untainted = node.clone();
    let mut sent = world.api.pods[&other].clone();
    sent.pod.spec.as_mut().expect("spec").tolerations = Some(vec![Toleration {
        key: Some("dedicated".into()),
        operator: Some("Exists".into()),
        ..Toleration::default()
    }]);
    sent.facts = crate::kube_scheduler::Facts::of(&sent.pod);
    world.checkers.faults_mut()[0].bound(&sent, &name, &untainted, Duration::from_secs(60));
    world
        .with_checkers(|c, s| c.check_waits(s))
        .expect("the stranded pod's room was taken");
    // and a node the stranded pod could take held it up itself
    world.checkers.faults_mut()[0] = InjectedFault::never_ready(from, until, &node, Vec::new());
    world
        .with_checkers(|c, s| c.check_waits(s))
        .expect("the stranded pod waited on the node");
    world
        .with_checkers(|c, s| c.check_end(s))
        .expect("to the end");
}

fn pending_at_end(world: &mut World) -> Result<(), SimError> {
    stranded(world);
    world.with_checkers(|c, s| c.check_end(s))
}

fn below_min_values(world: &mut World) -> Result<(), SimError> {
    let claim = a_nodeclaim(world);
    edit_pool(world, |np| {
        let r = &mut np.spec.template.spec.requirements[1];
        r.min_values = Some(100);
    });
    let object = world.api.nodeclaims[&claim].object.clone();
    world.with_checkers(|c, s| c.check_min_values(s, &object))
}

fn mispriced(world: &mut World) -> Result<(), SimError> {
    let claim = a_nodeclaim(world);
    if let Some((_, instance)) = world
        .cloud
        .instances
        .values_mut()
        .find(|(c, _)| *c == claim)
    {
        instance.price_per_hour += 1.0;
    }
    world.with_checkers(|c, s| c.check_launch_price(s, &claim))
}

fn never_registered(world: &mut World) -> Result<(), SimError> {
    let claim = a_nodeclaim(world);
    // launched (its status names an instance), but no kubelet registers for it
    let object: NodeClaim = world.api.nodeclaims[&claim].object.clone();
    store_old_nodeclaim(world, "planted-never-registered", object);
    world.now += Duration::from_secs(20 * 60);
    world.with_checkers(|c, s| c.check_step(s))
}

fn static_over(world: &mut World) -> Result<(), SimError> {
    world.scenario.spec.feature_gates.static_capacity = true;
    edit_pool(world, |np| np.spec.replicas = Some(0));
    world.with_checkers(|c, s| c.check_static_pools(s))
}

fn reservation_overfull(world: &mut World) -> Result<(), SimError> {
    let (_, instance) = world
        .cloud
        .instances
        .values_mut()
        .next()
        .expect("an instance");
    instance.reservation = Some("cr-planted".into());
    let reservation = scenario::CapacityReservation {
        id: "cr-planted".into(),
        instance_type: instance.instance_type.clone(),
        zone: instance.zone.clone(),
        count: 0,
        reservation_type: "default".into(),
        tags: Default::default(),
        end: None,
        interruptible: false,
    };
    world.scenario.spec.cloud.reservations.push(reservation);
    world.with_checkers(|c, s| c.check_reservations(s))
}

/// Writes the controllers never hear of (straight into their cluster state, past its change
/// tracking), as the API server holds them too: the budgets open and a node's pods gone.
/// Their passes, skipped on unchanged inputs, never see the empty node; the checker's own
/// fingerprint of the objects does.
fn unseen_write(world: &mut World) -> Result<(), SimError> {
    let node = a_node(world);
    let untracked = world.core.untracked_writes();
    let pool = untracked
        .node_pools
        .get_mut("general")
        .expect("the NodePool");
    pool.spec.disruption.budgets[0].nodes = "100%".into();
    untracked
        .pods
        .retain(|_, p| p.node.as_deref() != Some(node.as_str()));
    empty_in_api_server(world, &node);
    world.with_checkers(|c, s| c.check_convergence(s))?;
    world.now += kerf_core::controllers::disruption::PASS_INTERVAL;
    world.with_checkers(|c, s| c.check_convergence(s))
}

/// A node emptied and its budget opened in the API server, and the controllers never hear
/// of either: nothing deletes the node, and the emptiness check, which reads only the
/// objects, sees it stay past consolidateAfter.
fn emptied_unseen(world: &mut World) -> Result<(), SimError> {
    let node = a_node(world);
    empty_in_api_server(world, &node);
    world.with_checkers(|c, s| c.check_convergence(s))?;
    // past consolidateAfter: certainly deletable from now on
    world.now += Duration::from_secs(30);
    world.with_checkers(|c, s| c.check_convergence(s))?;
    world.now += super::checkers::emptiness::DELETE_WITHIN;
    world.with_checkers(|c, s| c.check_convergence(s))
}

/// Opens the `general` NodePool's budget and takes `node`'s pods away in the API server
/// alone: the controllers hear of neither.
fn empty_in_api_server(world: &mut World, node: &str) {
    let stored = world.api.objects.node_pools.get_mut("general");
    stored.expect("the NodePool").spec.disruption.budgets[0].nodes = "100%".into();
    world
        .api
        .pods
        .retain(|_, p| p.node.as_deref() != Some(node));
}
