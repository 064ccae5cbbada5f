//! Kerf and Karpenter v1.15.0 (its kwok provider, leader election on) running at once on one
//! control plane: they elect on the same Lease, `karpenter-leader-election`, so only the
//! holder acts. Karpenter holds it first: Kerf writes nothing while Karpenter provisions;
//! Karpenter stops and Kerf holds the Lease within its duration and provisions; Karpenter
//! starts again and waits on Kerf in turn.

use std::time::{Duration, Instant};

use super::support::{ControlPlane, Karpenter, Operator, created_by, wait_for};
use super::{CLUSTER, OPERATOR, running, scale};

/// controller-runtime's lease duration and retry period, which Kerf shares: a candidate
/// takes a Lease whose record it has seen unchanged for the duration, and looks once a period.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const RETRY_PERIOD: Duration = Duration::from_secs(2);

/// Who holds `karpenter-leader-election` in kube-system now, if anyone.
fn holder(cp: &ControlPlane) -> Option<String> {
    let out = cp.kubectl(
        &[
            "get",
            "lease",
            "karpenter-leader-election",
            "-n",
            "kube-system",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        None,
    );
    let who = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !who.is_empty()).then_some(who)
}

/// Karpenter's kwok provider with leader election on, its Lease in kube-system.
fn karpenter_electing(cp: &ControlPlane, n: u32) -> Karpenter {
    Karpenter::start(
        cp,
        n,
        &[
            ("DISABLE_LEADER_ELECTION", "false"),
            ("LEADER_ELECTION_NAMESPACE", "kube-system"),
        ],
    )
}

/// The NodeClaims Karpenter's log says it created.
fn created_by_karpenter(k: &Karpenter) -> usize {
    k.lines()
        .iter()
        .filter(|l| l["message"] == "created nodeclaim")
        .count()
}

/// Scales the `batch` Deployment (one pod per node) past the nodes there are, and waits until
/// every pod runs: someone had to launch a node.
fn beyond_the_nodes(cp: &ControlPlane, what: &str) {
    let nodes = cp
        .kubectl_ok(&["get", "nodeclaims", "-o", "name"], None)
        .lines()
        .count();
    scale(cp, nodes + 1);
    wait_for(
        what,
        Duration::from_secs(120),
        || (running(cp) == nodes + 2).then_some(()),
        || format!("{} running", running(cp)),
    );
}

#[test]
fn kerf_and_karpenter_on_one_cluster_act_one_at_a_time() {
    let cp = ControlPlane::start("lease");
    cp.install_karpenter_kwok_crds();

    let karpenter = karpenter_electing(&cp, 1);
    wait_for(
        "Karpenter holding the Lease",
        Duration::from_secs(60),
        || holder(&cp).filter(|h| h != "kerf-e2e"),
        || format!("holder: {:?}", holder(&cp)),
    );
    let kerf = Operator::start(&cp, OPERATOR, 1, &[]);
    // the work arrives with both running: only Karpenter may act on it
    cp.kubectl_ok(&["apply", "-f", "-"], Some(CLUSTER.as_bytes()));
    wait_for(
        "Karpenter's nodes running every pod",
        Duration::from_secs(180),
        || (running(&cp) == 13).then_some(()),
        || format!("{} running", running(&cp)),
    );
    assert!(created_by_karpenter(&karpenter) > 0);
    assert!(
        created_by(&kerf).is_empty(),
        "Kerf created NodeClaims while Karpenter held the Lease: {:?}",
        created_by(&kerf)
    );
    assert_ne!(holder(&cp).as_deref(), Some("kerf-e2e"));

    // Karpenter stops (without handing the Lease back): Kerf holds it once it has run out,
    // and acts
    karpenter.stop();
    let stopped = Instant::now();
    wait_for(
        "Kerf holding the Lease",
        LEASE_DURATION + Duration::from_secs(10),
        || (holder(&cp).as_deref() == Some("kerf-e2e")).then_some(()),
        || format!("holder: {:?}", holder(&cp)),
    );
    let took_over = stopped.elapsed();
    // Karpenter's last renewal came up to a retry period before it stopped, and Kerf saw
    // it up to a retry period later
    assert!(
        took_over <= LEASE_DURATION + 2 * RETRY_PERIOD,
        "Kerf took the Lease {took_over:?} after Karpenter stopped"
    );
    beyond_the_nodes(&cp, "Kerf provisioning the scale-up");
    let made = created_by(&kerf);
    assert!(!made.is_empty(), "Kerf launched nothing");
    // what Karpenter launched while Kerf watched is taken as it is
    let meddled: Vec<String> = (kerf.lines().iter())
        .filter(|l| {
            l["message"] == "garbage collecting instance without nodeclaim"
                || (l["message"] == "launched nodeclaim"
                    && !made.contains(l["NodeClaim"]["name"].as_str().unwrap_or("")))
        })
        .map(|l| l.to_string())
        .collect();
    assert!(meddled.is_empty(), "{meddled:#?}");

    // Karpenter back: it waits on Kerf's Lease and creates nothing
    let karpenter = karpenter_electing(&cp, 2);
    let before = created_by(&kerf).len();
    beyond_the_nodes(&cp, "Kerf provisioning with Karpenter waiting");
    assert!(created_by(&kerf).len() > before, "Kerf launched nothing");
    assert_eq!(holder(&cp).as_deref(), Some("kerf-e2e"));
    assert_eq!(
        created_by_karpenter(&karpenter),
        0,
        "Karpenter created NodeClaims while Kerf held the Lease"
    );
    println!(
        "Kerf held the Lease {:.1} s after Karpenter stopped",
        took_over.as_secs_f64()
    );
}
