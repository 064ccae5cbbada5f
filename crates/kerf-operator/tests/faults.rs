//! Control-plane faults against `kerf-operator --cloud-provider kwok` on a real control plane:
//! the API server killed (SIGKILL) at the instant the operator creates a NodeClaim, patches
//! its status, and when a consolidation starts; etcd killed when a consolidation starts; the
//! operator itself killed at each step of a consolidation; its watches expired (`410 Gone`)
//! after an etcd compaction with changes made while it could not see the cluster; and an API
//! server that is slow, or answers 429 and 500, through a relay the test controls, and one
//! whose own priority and fairness gives the operator one seat. Each case
//! asserts what a user needs after the fault, with the operator never restarted by hand
//! (except where killing it is the fault): every pod that can run runs within a bound, no
//! NodeClaim is left without a node, no node is left tainted, no pod was evicted twice, no
//! NodeClaim was created twice for the same pods, and `/readyz` said the truth throughout.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::proxy::{FaultProxy, Mode};
use support::{ControlPlane, Operator, chart_env, created_by, http_get, root, wait_for};

const LIMIT: Duration = Duration::from_secs(120);
const OPERATOR: &str = env!("CARGO_BIN_EXE_kerf-operator");
/// How long the API server stays down: longer than the operator's in-call retries (about
/// 2 s), its readiness grace (5 s) and its Lease's renew deadline (10 s).
const OUTAGE: Duration = Duration::from_secs(15);
/// How soon after the API server's return Kerf must have done its part (the NodeClaim caught
/// by the outage launched and its node registered, a drain finished or rolled back).
const RECOVERY: Duration = Duration::from_secs(30);
/// How soon after the API server's return every pod must run again: kube-scheduler's own
/// watches back off up to 30 s (client-go's reflector) during an outage, and must see the node
/// before it binds, so this bound is Kerf's plus theirs (measured 48–71 s on 2 CPUs).
const PODS_BACK: Duration = Duration::from_secs(120);

fn items(cp: &ControlPlane, args: &[&str]) -> Vec<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = cp.kubectl(&all, None);
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
}

fn running_pods(cp: &ControlPlane) -> usize {
    items(cp, &["get", "pods", "-l", "app=inflate"])
        .iter()
        .filter(|p| {
            p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
        })
        .count()
}

/// A control plane with seed 004 applied.
fn seeded_plane(name: &str) -> ControlPlane {
    seeded_plane_with(name, &[])
}

/// [`seeded_plane`] started with these environment variables for `scripts/e2e-cluster.sh`.
fn seeded_plane_with(name: &str, env: &[(&str, &str)]) -> ControlPlane {
    let cp = ControlPlane::start_with(name, env);
    cp.install_crds();
    let seed =
        std::fs::read(root().join("fixtures/seeds/004-getting-started.yaml")).expect("seed 004");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed));
    cp
}

/// Seed 004's NodePool consolidates at once (`consolidateAfter: 0s`), so that a test need
/// not wait a minute for it.
fn consolidate_at_once(cp: &ControlPlane) {
    cp.patch_nodepool(
        "default",
        r#"{"spec":{"disruption":{"consolidateAfter":"0s"}}}"#,
    );
}

/// Waits until the operator reports ready.
fn ready(op: &Operator) {
    wait_for(
        "/readyz to answer 200",
        LIMIT,
        || (http_get(op.health_port, "/readyz").0 == 200).then_some(()),
        || format!("{:?}", http_get(op.health_port, "/readyz")),
    );
}

/// A control plane with seed 004 applied and the operator on it, ready.
fn seeded(name: &str) -> (ControlPlane, Operator) {
    let cp = seeded_plane(name);
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    ready(&op);
    (cp, op)
}

/// A control plane with seed 004 applied and the operator on it, ready, reaching the API
/// server only through a relay the test controls.
fn seeded_behind_relay(name: &str) -> (ControlPlane, FaultProxy, Operator) {
    seeded_behind_relay_with(name, &[])
}

/// [`seeded_behind_relay`] with these environment variables added.
fn seeded_behind_relay_with(
    name: &str,
    extra: &[(&'static str, &str)],
) -> (ControlPlane, FaultProxy, Operator) {
    let cp = seeded_plane(name);
    let mut env = chart_env(&cp, true);
    let proxy = FaultProxy::start(&cp, &env[0].1);
    env[0].1 = proxy.kubeconfig.display().to_string();
    env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    let op = Operator::spawn(&cp, OPERATOR, 1, &["--cloud-provider", "kwok"], &env);
    ready(&op);
    (cp, proxy, op)
}

/// How many lines of the operator's log have `message`.
fn logged(op: &Operator, message: &str) -> usize {
    op.lines()
        .iter()
        .filter(|l| l["message"] == message)
        .count()
}

/// Waits until the operator's log has a line with `message`, polling fast: the instant to
/// strike.
fn when_logged(op: &Operator, message: &str) {
    let deadline = Instant::now() + LIMIT;
    while !std::fs::read_to_string(&op.log)
        .unwrap_or_default()
        .contains(message)
    {
        assert!(Instant::now() < deadline, "no {message:?} in the log");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits until the API server answers `/readyz` again.
fn api_server_back(cp: &ControlPlane) {
    wait_for(
        "the API server back",
        LIMIT,
        || {
            cp.kubectl(&["get", "--raw", "/readyz"], None)
                .status
                .success()
                .then_some(())
        },
        String::new,
    );
}

/// Keeps `component` (killed by the caller) down for [`OUTAGE`], then starts it again; the
/// instant the API server answers again. With the API server down, `/readyz` must fail
/// meanwhile.
fn outage(cp: &ControlPlane, op: &Operator, component: &str) -> Instant {
    let down = Instant::now();
    let mut unready = None;
    while down.elapsed() < OUTAGE {
        if unready.is_none() && http_get(op.health_port, "/readyz").0 == 503 {
            unready = Some(down.elapsed());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    if component == "kube-apiserver" {
        let unready = unready.expect("/readyz kept answering 200 while the API server was down");
        assert!(unready < Duration::from_secs(12), "{unready:?}");
    }
    cp.restart(component);
    api_server_back(cp);
    Instant::now()
}

/// What must hold once a fault is over: every NodeClaim has its node, no node carries
/// Karpenter's disruption taint, every NodeClaim the operator created is still there or was
/// deleted on purpose, `/readyz` is back, and the operator never stopped.
fn settled(cp: &ControlPlane, op: &mut Operator) {
    wait_for(
        "every NodeClaim with a node, and no node tainted for disruption",
        LIMIT,
        || {
            let claims = items(cp, &["get", "nodeclaims"]);
            let nodes = items(cp, &["get", "nodes"]);
            let claimed = claims.iter().all(|c| {
                let name = &c["metadata"]["name"];
                nodes.iter().any(|n| &n["metadata"]["name"] == name)
            });
            let tainted = nodes.iter().any(|n| {
                n["spec"]["taints"]
                    .as_array()
                    .is_some_and(|ts| ts.iter().any(|t| t["key"] == "karpenter.sh/disrupted"))
            });
            (claimed && !tainted).then_some(())
        },
        || {
            format!(
                "{}\n{}",
                cp.kubectl_ok(&["get", "nodeclaims,nodes"], None),
                std::fs::read_to_string(&op.log).unwrap_or_default()
            )
        },
    );
    ready(op);
    assert!(op.running(), "the operator exited");
    // each eviction is announced with an `Evicted` Event on its pod: one per pod at most
    let mut evicted = std::collections::BTreeMap::<String, u64>::new();
    for e in items(
        cp,
        &["get", "events", "-A", "--field-selector", "reason=Evicted"],
    ) {
        let pod = e["involvedObject"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        *evicted.entry(pod).or_default() += e["count"].as_u64().unwrap_or(1);
    }
    let twice: Vec<_> = evicted.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "pods evicted more than once: {twice:?}");
}

/// Every NodeClaim the operator logged as created is there: none was made twice.
fn made_once(cp: &ControlPlane, op: &Operator) {
    let made = created_by(op);
    assert_eq!(
        made.len(),
        items(cp, &["get", "nodeclaims"]).len(),
        "{made:?}"
    );
}

/// Waits until `n` of inflate's pods run (`what`, within `limit`).
fn pods_running(cp: &ControlPlane, op: &Operator, n: usize, limit: Duration, what: &str) {
    wait_for(
        what,
        limit,
        || (running_pods(cp) == n).then_some(()),
        || format!("{} running\n{}", running_pods(cp), state(cp, op)),
    );
}

/// The log with the NodeClaims and nodes, for a failure's message.
fn state(cp: &ControlPlane, op: &Operator) -> String {
    // what the disruption controller weighed, from its metrics: a pass that decides nothing
    // or a command that fails validation logs nothing
    let (_, metrics) = http_get(op.metrics_port, "/metrics");
    let disruption: Vec<&str> = (metrics.lines())
        .filter(|l| l.starts_with("karpenter_voluntary_disruption") && !l.contains("_bucket"))
        .collect();
    format!(
        "{}\n{}\n{}\n{}\n{}",
        cp.kubectl_ok(&["get", "nodeclaims,nodes"], None),
        cp.kubectl_ok(&["get", "pods", "-A", "-o", "wide"], None),
        cp.kubectl_ok(&["get", "events", "-A", "--sort-by=.lastTimestamp"], None),
        disruption.join("\n"),
        std::fs::read_to_string(&op.log).unwrap_or_default()
    )
}

/// Seed 004's `inflate` scaled 0 → 40, the API server killed when the operator logs `line`,
/// kept down for [`OUTAGE`] and started again: the NodeClaim caught by it is launched and
/// registered within [`RECOVERY`], not made again, and the pods run.
fn fault_during_scale_up(name: &str, line: &str) {
    let (cp, mut op) = seeded(name);
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=40"], None);
    when_logged(&op, line);
    cp.kill("kube-apiserver");
    let back = outage(&cp, &op, "kube-apiserver");
    wait_for(
        "every NodeClaim launched, its node registered",
        RECOVERY,
        || {
            let claims = items(&cp, &["get", "nodeclaims"]);
            (!claims.is_empty() && claims.iter().all(|c| c["status"]["nodeName"].is_string()))
                .then_some(())
        },
        || state(&cp, &op),
    );
    let registered = back.elapsed();
    pods_running(
        &cp,
        &op,
        40,
        PODS_BACK,
        "40 pods running after the API server's return",
    );
    let recovered = back.elapsed();
    settled(&cp, &mut op);
    // the NodeClaim caught by the outage was launched, not made again for the same pods
    let made = created_by(&op);
    let claims = items(&cp, &["get", "nodeclaims"]);
    assert_eq!(made.len(), claims.len(), "{made:?}");
    println!(
        "API server killed at {line}: after its return, node registered in {:.1} s, 40 pods \
         running in {:.1} s",
        registered.as_secs_f64(),
        recovered.as_secs_f64()
    );
}

#[test]
fn the_api_server_killed_while_a_nodeclaim_is_created_loses_no_work() {
    // the line is written just before the create call goes out
    fault_during_scale_up("fault-create", "\"created nodeclaim\"");
}

#[test]
fn the_api_server_killed_while_a_nodeclaim_status_is_patched_loses_no_work() {
    // the line is written as the instance is up, just before its status is patched
    fault_during_scale_up("fault-status", "\"launched nodeclaim\"");
}

/// One node for 12 pods, then a scale-down to 2 that leaves it underutilized: consolidation
/// replaces it with a smaller node (launch, registration, drain). `component` is killed when
/// the consolidation starts, kept down for [`OUTAGE`] and started again. Whatever the
/// disruption was doing, it is finished or rolled back and done again: no node is left
/// tainted, and the big node is gone for a smaller one.
fn fault_during_consolidation(name: &str, component: &str) {
    let (cp, mut op) = seeded(name);
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=12"], None);
    pods_running(&cp, &op, 12, LIMIT, "12 pods running");
    let names = |cp: &ControlPlane| -> Vec<String> {
        items(cp, &["get", "nodes"])
            .iter()
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
            .collect()
    };
    let before = names(&cp);
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=2"], None);
    when_logged(&op, "\"disrupting node(s)\"");
    cp.kill(component);
    let back = outage(&cp, &op, component);
    pods_running(&cp, &op, 2, PODS_BACK, "2 pods running after the outage");
    wait_for(
        "the big node replaced",
        LIMIT,
        || {
            let now = names(&cp);
            (now.len() <= before.len() && now.iter().all(|n| !before.contains(n))).then_some(())
        },
        || cp.kubectl_ok(&["get", "nodeclaims,nodes"], None),
    );
    settled(&cp, &mut op);
    println!(
        "{component} down {}s during a consolidation: replaced and settled {:.1} s after its return",
        OUTAGE.as_secs(),
        back.elapsed().as_secs_f64()
    );
}

#[test]
fn the_api_server_killed_during_a_drain_leaves_no_node_tainted() {
    fault_during_consolidation("fault-drain", "kube-apiserver");
}

#[test]
fn etcd_killed_during_a_consolidation_leaves_no_node_tainted() {
    fault_during_consolidation("fault-etcd", "etcd");
}

/// The cloud provider errors the operator counted, by `error` label.
fn cloud_errors(op: &Operator) -> Vec<String> {
    http_get(op.metrics_port, "/metrics")
        .1
        .lines()
        .filter(|l| l.starts_with("karpenter_cloudprovider_errors_total{"))
        .map(str::to_string)
        .collect()
}

#[test]
fn an_api_server_answering_429_then_500_delays_the_pods_but_loses_nothing() {
    // without leader election: the Lease's renewals meet the same answers, and a leader
    // whose Lease lapses holds its calls until it is renewed, by when the relay passes again
    // (the lapse has its own test, `no_nodeclaim_is_written_while_the_lease_is_overdue`)
    let (cp, proxy, mut op) =
        seeded_behind_relay_with("fault-answers", &[("DISABLE_LEADER_ELECTION", "true")]);
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=40"], None);
    when_logged(&op, "\"created nodeclaim\"");
    proxy.set(Mode::Answer(429));
    std::thread::sleep(OUTAGE / 2);
    proxy.set(Mode::Answer(500));
    std::thread::sleep(OUTAGE / 2);
    proxy.set(Mode::Pass);
    let back = Instant::now();
    pods_running(
        &cp,
        &op,
        40,
        RECOVERY,
        "40 pods running after the API server answers again",
    );
    let recovered = back.elapsed();
    settled(&cp, &mut op);
    made_once(&cp, &op);
    // the failures were told apart: the 500s are counted as the server failing, and nothing
    // was taken for the cloud running out of capacity
    let metrics = http_get(op.metrics_port, "/metrics").1;
    assert!(
        metrics.contains(
            "kerf_reconcile_errors_by_kind_total{controller=\"provisioner\",kind=\"server\"}"
        ),
        "{metrics}"
    );
    let errors = cloud_errors(&op);
    assert!(
        !errors
            .iter()
            .any(|l| l.contains("InsufficientCapacityError")),
        "{errors:?}"
    );
    assert!(
        !std::fs::read_to_string(&op.log)
            .unwrap_or_default()
            .contains("insufficient capacity")
    );
    println!(
        "429 then 500 for {}s: 40 pods running {:.1} s after the API server answered again",
        OUTAGE.as_secs(),
        recovered.as_secs_f64()
    );
}

/// How many of Kerf's requests the API server's priority and fairness turned away, from its
/// own metrics.
fn rejected_by_the_api_server(cp: &ControlPlane) -> u64 {
    cp.kubectl_ok(&["get", "--raw", "/metrics"], None)
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_flowcontrol_rejected_requests_total{")
                && l.contains("flow_schema=\"kerf-few-seats\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[test]
fn the_api_servers_own_throttling_slows_the_pods_but_loses_nothing() {
    // the API server's priority and fairness on, Kerf's requests on one seat that answers
    // 429 with Retry-After to what does not fit: no relay, the server's own answers
    let cp = seeded_plane_with("fault-apf", &[("KERF_E2E_APF", "1")]);
    let few_seats = root().join("fixtures/apf/kerf-few-seats.yaml");
    cp.kubectl_ok(&["apply", "-f", &few_seats.display().to_string()], None);
    let mut op = Operator::start(&cp, OPERATOR, 1, &[]);
    ready(&op);
    let scaled = Instant::now();
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=60"], None);
    pods_running(
        &cp,
        &op,
        60,
        LIMIT,
        "60 pods running with Kerf's requests on one seat",
    );
    let took = scaled.elapsed();
    settled(&cp, &mut op);
    made_once(&cp, &op);
    // the throttling was real: without it this test would prove nothing
    let rejected = rejected_by_the_api_server(&cp);
    assert!(rejected > 0, "the API server never turned Kerf away");
    // each 429 was waited out inside the client, as its Retry-After asked, and tried again
    // there: none reached Kerf's own retries or error lines
    let surfaced: Vec<_> = (op.lines().into_iter())
        .filter(|l| l.to_string().contains("Too many requests"))
        .collect();
    assert!(surfaced.is_empty(), "{surfaced:?}");
    println!(
        "one seat, {rejected} requests turned away: 60 pods running {:.1} s after the scale",
        took.as_secs_f64()
    );
}

#[test]
fn a_slow_api_server_slows_the_pods_but_duplicates_nothing() {
    let (cp, proxy, mut op) = seeded_behind_relay("fault-slow");
    proxy.set(Mode::Slow(Duration::from_millis(500)));
    let scaled = Instant::now();
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=40"], None);
    pods_running(
        &cp,
        &op,
        40,
        LIMIT,
        "40 pods running with every request held 500 ms",
    );
    let took = scaled.elapsed();
    proxy.set(Mode::Pass);
    settled(&cp, &mut op);
    made_once(&cp, &op);
    println!(
        "every request held 500 ms: 40 pods running {:.1} s after the scale",
        took.as_secs_f64()
    );
}

#[test]
fn watches_expired_after_a_compaction_relist_what_changed_while_the_operator_was_blind() {
    let (cp, proxy, mut op) = seeded_behind_relay("fault-gone");
    consolidate_at_once(&cp);
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=2"], None);
    pods_running(&cp, &op, 2, LIMIT, "2 pods running");
    let node = items(&cp, &["get", "nodes", "-l", "karpenter.sh/nodepool"]);
    let [node] = node.as_slice() else {
        panic!("one node expected: {node:?}");
    };
    let name = node["metadata"]["name"].as_str().expect("name").to_string();
    let zone = node["metadata"]["labels"]["topology.kubernetes.io/zone"]
        .as_str()
        .expect("a zone")
        .to_string();

    // blind: every request answered 503, every watch cut
    proxy.set(Mode::Answer(503));
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=0"], None);
    let elsewhere = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"blind"}},"spec":{{
        "affinity":{{"nodeAffinity":{{"requiredDuringSchedulingIgnoredDuringExecution":{{
        "nodeSelectorTerms":[{{"matchExpressions":[{{"key":"topology.kubernetes.io/zone",
        "operator":"NotIn","values":["{zone}"]}}]}}]}}}}}},
        "containers":[{{"name":"pause","image":"public.ecr.aws/eks-distro/kubernetes/pause:3.7",
        "resources":{{"requests":{{"cpu":"1"}}}}}}]}}}}"#
    );
    cp.kubectl_ok(&["apply", "-f", "-"], Some(elsewhere.as_bytes()));
    wait_for(
        "inflate's pods gone",
        LIMIT,
        || {
            items(&cp, &["get", "pods", "-l", "app=inflate"])
                .is_empty()
                .then_some(())
        },
        String::new,
    );
    // the history the operator's watches would resume from is compacted away, and the API
    // server's watch cache starts again after it: every watch is answered 410 Gone
    cp.compact_etcd();
    cp.kill("kube-apiserver");
    cp.restart("kube-apiserver");
    api_server_back(&cp);
    proxy.set(Mode::Pass);
    let back = Instant::now();
    wait_for(
        "the pod created while the operator was blind running",
        PODS_BACK,
        || {
            let pod = items(
                &cp,
                &["get", "pods", "--field-selector", "metadata.name=blind"],
            );
            (pod.first()?["status"]["phase"] == "Running").then_some(())
        },
        || state(&cp, &op),
    );
    let running = back.elapsed();
    wait_for(
        "the node emptied while the operator was blind deleted",
        LIMIT,
        || {
            let nodes = items(&cp, &["get", "nodes"]);
            (!nodes.iter().any(|n| n["metadata"]["name"] == name.as_str())).then_some(())
        },
        || state(&cp, &op),
    );
    let deleted = back.elapsed();
    let log = std::fs::read_to_string(&op.log).unwrap_or_default();
    assert!(
        log.contains("too old resource version") || log.contains("Expired"),
        "no watch was answered 410 Gone:\n{log}"
    );
    settled(&cp, &mut op);
    println!(
        "after 410 Gone: the pod created while blind running {:.1} s, the node emptied while \
         blind deleted {:.1} s after the operator could see again",
        running.as_secs_f64(),
        deleted.as_secs_f64()
    );
}

/// Kills the operator at each of `steps` of a replacement in turn, on one control plane, and
/// starts it again: each time the replacement is rolled back or finished.
fn operator_killed_at(name: &str, steps: &[&str]) {
    let cp = seeded_plane(name);
    consolidate_at_once(&cp);
    let mut op = Operator::start(&cp, OPERATOR, 1, &[]);
    ready(&op);
    let mut made = created_by(&op);
    for (n, &step) in steps.iter().enumerate() {
        // from no node at all: 12 pods get one node, which the scale-down to 2 replaces
        cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=0"], None);
        wait_for(
            "no NodeClaim left",
            LIMIT,
            || items(&cp, &["get", "nodeclaims"]).is_empty().then_some(()),
            || state(&cp, &op),
        );
        cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=12"], None);
        pods_running(&cp, &op, 12, LIMIT, "12 pods running");
        settled(&cp, &mut op);
        let before = logged(&op, step);
        cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=2"], None);
        wait_for(
            step,
            LIMIT,
            || (logged(&op, step) > before).then_some(()),
            || state(&cp, &op),
        );
        made.extend(created_by(&op));
        op.kill();
        let restarted = Instant::now();
        op = Operator::start(&cp, OPERATOR, n as u32 + 2, &[]);
        pods_running(&cp, &op, 2, LIMIT, "2 pods running after the restart");
        settled(&cp, &mut op);
        println!(
            "operator killed at {step:?}: settled {:.1} s after its restart",
            restarted.elapsed().as_secs_f64()
        );
    }
    made.extend(created_by(&op));
    // no NodeClaim name was made twice, and every one made is accounted for
    let claims = items(&cp, &["get", "nodeclaims"]);
    for c in &claims {
        let name = c["metadata"]["name"].as_str().unwrap_or("");
        assert!(
            made.contains(name),
            "{name} was made by no operator: {made:?}"
        );
    }
}

// the steps of a replacement, each logged as it starts: the node chosen and tainted, the
// replacement's node ready (the drain is next), the old node's termination under way, the
// old node gone (its NodeClaim's finalizer is next); two control planes, so that the suite's
// two threads share the work

#[test]
fn the_operator_killed_as_a_replacement_starts_settles_when_started_again() {
    operator_killed_at(
        "fault-steps-a",
        &["disrupting node(s)", "initialized nodeclaim"],
    );
}

#[test]
fn the_operator_killed_as_a_node_is_drained_settles_when_started_again() {
    operator_killed_at("fault-steps-b", &["tainted node", "deleted node"]);
}
