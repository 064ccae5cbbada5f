//! Control-plane faults against `kerf-operator --cloud-provider kwok` on a real control plane:
//! the API server killed (SIGKILL) at the instant the operator creates a NodeClaim, and when a
//! consolidation starts; etcd killed when a consolidation starts. Each case asserts what a user needs after the fault,
//! with the operator never restarted by hand: every pod that can run runs within a bound of
//! the API server's return, no NodeClaim is left without a node, no node is left tainted, no
//! NodeClaim was created twice for the same pods, and `/readyz` said the truth throughout.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{ControlPlane, Operator, created_by, http_get, root, wait_for};

const LIMIT: Duration = Duration::from_secs(120);
const OPERATOR: &str = env!("CARGO_BIN_EXE_kerf-operator");
/// How long the API server stays down: longer than the operator's in-call retries (about
/// 2 s), its readiness grace (5 s) and its Lease's renew deadline (10 s).
const OUTAGE: Duration = Duration::from_secs(20);
/// How soon after the API server's return Kerf must have done its part (the NodeClaim caught
/// by the outage launched and its node registered, a drain finished or rolled back).
const RECOVERY: Duration = Duration::from_secs(30);
/// How soon after the API server's return every pod must run again: kube-scheduler's own
/// watches back off up to 30 s (client-go's reflector) during an outage, and must see the node
/// before it binds, so this bound is Kerf's plus theirs.
const PODS_BACK: Duration = Duration::from_secs(90);

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

/// A control plane with seed 004 applied and the operator on it, ready.
fn seeded(name: &str) -> (ControlPlane, Operator) {
    let cp = ControlPlane::start(name);
    cp.install_crds();
    let seed =
        std::fs::read(root().join("fixtures/seeds/004-getting-started.yaml")).expect("seed 004");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed));
    let op = Operator::start(&cp, OPERATOR, 1, &[]);
    wait_for(
        "/readyz to answer 200",
        LIMIT,
        || (http_get(op.health_port, "/readyz").0 == 200).then_some(()),
        || format!("{:?}", http_get(op.health_port, "/readyz")),
    );
    (cp, op)
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
    wait_for(
        "/readyz back to 200",
        LIMIT,
        || (http_get(op.health_port, "/readyz").0 == 200).then_some(()),
        || format!("{:?}", http_get(op.health_port, "/readyz")),
    );
    assert!(op.running(), "the operator exited");
}

#[test]
fn the_api_server_killed_while_a_nodeclaim_is_created_loses_no_work() {
    let (cp, mut op) = seeded("fault-create");
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=40"], None);
    // the line is written just before the create call goes out
    when_logged(&op, "\"created nodeclaim\"");
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
        || {
            format!(
                "{}\n{}",
                cp.kubectl_ok(&["get", "nodeclaims,nodes"], None),
                std::fs::read_to_string(&op.log).unwrap_or_default()
            )
        },
    );
    let registered = back.elapsed();
    wait_for(
        "40 pods running after the API server's return",
        PODS_BACK,
        || (running_pods(&cp) == 40).then_some(()),
        || {
            format!(
                "{} running\n{}\n{}\n{}\n{}",
                running_pods(&cp),
                cp.kubectl_ok(&["get", "nodeclaims,nodes"], None),
                cp.kubectl_ok(
                    &["get", "nodes", "-o", "jsonpath={.items[*].spec.taints}"],
                    None
                ),
                cp.kubectl_ok(&["get", "pods", "-o", "wide"], None),
                std::fs::read_to_string(&op.log).unwrap_or_default()
            )
        },
    );
    let recovered = back.elapsed();
    settled(&cp, &mut op);
    // the NodeClaim caught by the outage was launched, not made again for the same pods
    let made = created_by(&op);
    let claims = items(&cp, &["get", "nodeclaims"]);
    assert_eq!(made.len(), claims.len(), "{made:?}");
    println!(
        "after the API server's return: node registered in {:.1} s, 40 pods running in {:.1} s",
        registered.as_secs_f64(),
        recovered.as_secs_f64()
    );
}

/// One node for 12 pods, then a scale-down to 2 that leaves it underutilized: consolidation
/// replaces it with a smaller node (launch, registration, drain). `component` is killed when
/// the consolidation starts, kept down for [`OUTAGE`] and started again. Whatever the
/// disruption was doing, it is finished or rolled back and done again: no node is left
/// tainted, and the big node is gone for a smaller one.
fn fault_during_consolidation(name: &str, component: &str) {
    let (cp, mut op) = seeded(name);
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=12"], None);
    wait_for(
        "12 pods running",
        LIMIT,
        || (running_pods(&cp) == 12).then_some(()),
        || cp.kubectl_ok(&["get", "nodeclaims,nodes"], None),
    );
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
    wait_for(
        "2 pods running after the outage",
        PODS_BACK,
        || (running_pods(&cp) == 2).then_some(()),
        || cp.kubectl_ok(&["get", "pods", "-o", "wide"], None),
    );
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
