//! Against a real control plane (kube-apiserver v1.35 with etcd, kube-controller-manager,
//! kube-scheduler and kwok, built and started by `scripts/e2e-cluster.sh`): `kerf crds`
//! installs, and every Karpenter document in `fixtures/` gets the same verdict from the API
//! server's dry run as from `kerf validate`, except where Kerf is documented to be stricter,
//! and then the same verdict under Karpenter v1.15.0's own CRDs;
//! the NodeClaims `kerf schedule -o nodeclaims` prints apply as they are; `kerf explain`
//! reads the cluster's objects as the API server serves them.

#[path = "../../kerf-operator/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;
use support::{ControlPlane, root};

fn kerf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run kerf")
}

/// Documents where Kerf rejects what the API server accepts, on purpose (the book, docs/src/design.md, "Validation").
const KERF_STRICTER: &[(&str, usize, &str)] = &[(
    "broken/003-business-hours-fixed-durations.yaml",
    0,
    "a budget schedule whose range runs backwards",
)];

/// Documents the API server refuses under `kerf crds` and accepts under Karpenter's CRDs, on
/// purpose (the CRD test `kerfs_crds_are_karpenters_…` lists the schema difference).
const CRD_VERDICTS_DIFFER: &[(&str, usize, &str)] = &[];

fn karpenter_documents(path: &Path) -> Vec<serde_yaml::Value> {
    let text = std::fs::read_to_string(path).expect("fixture reads");
    serde_yaml::Deserializer::from_str(&text)
        .filter_map(|d| serde_yaml::Value::deserialize(d).ok())
        .filter(|v| {
            v.get("apiVersion")
                .and_then(serde_yaml::Value::as_str)
                .is_some_and(|a| a.starts_with("karpenter."))
        })
        .collect()
}

#[test]
fn crds_install_and_every_fixture_gets_the_servers_verdict() {
    let cp = ControlPlane::start("crds");
    let crds = kerf(&["crds"]);
    assert!(crds.status.success());
    let applied = cp.kubectl(&["apply", "--server-side", "-f", "-"], Some(&crds.stdout));
    assert!(
        applied.status.success(),
        "kube-apiserver rejects `kerf crds`: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    cp.wait_for_crds();

    let scratch = cp.dir.join("docs");
    std::fs::create_dir_all(&scratch).expect("scratch dir");
    let mut compared = 0;
    let mut mismatches = Vec::new();
    let mut verdicts = Vec::new();
    for group in ["seeds", "broken"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("fixtures").join(group))
            .expect("fixtures")
            .map(|e| e.expect("entry").path())
            .collect();
        files.sort();
        for file in files {
            let name = format!(
                "{group}/{}",
                file.file_name().and_then(|f| f.to_str()).unwrap_or("")
            );
            for (i, doc) in karpenter_documents(&file).into_iter().enumerate() {
                let path = scratch.join(format!("{compared}.yaml"));
                std::fs::write(&path, serde_yaml::to_string(&doc).expect("yaml"))
                    .expect("write doc");
                let path_text = path.to_string_lossy().into_owned();
                let ours = kerf(&["validate", &path_text]);
                let theirs = cp.kubectl(&["create", "--dry-run=server", "-f", &path_text], None);
                compared += 1;
                let stricter = KERF_STRICTER.iter().any(|(f, d, _)| *f == name && *d == i);
                let (kerf_ok, server_ok) = (ours.status.success(), theirs.status.success());
                verdicts.push((name.clone(), i, path_text.clone(), server_ok));
                if stricter {
                    assert!(
                        !kerf_ok && server_ok,
                        "{name} document {i} is listed as Kerf-stricter but kerf={kerf_ok} server={server_ok}"
                    );
                } else if kerf_ok != server_ok {
                    mismatches.push(format!(
                        "{name} document {i}: kerf validate {}, kube-apiserver {}\n  kerf: {}\n  server: {}",
                        if kerf_ok { "accepts" } else { "rejects" },
                        if server_ok { "accepts" } else { "rejects" },
                        String::from_utf8_lossy(&ours.stdout).trim(),
                        String::from_utf8_lossy(&theirs.stderr).trim()
                    ));
                }
            }
        }
    }
    assert!(compared >= 15, "only {compared} documents compared");
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));

    // the NodeClaims `kerf schedule -o nodeclaims` prints apply as they are
    let claims = kerf(&[
        "schedule",
        "-f",
        "fixtures/seeds/004-getting-started.yaml",
        "--replicas",
        "inflate=5",
        "-o",
        "nodeclaims",
    ]);
    assert!(claims.status.success());
    let created = cp.kubectl(
        &["create", "--dry-run=server", "-f", "-"],
        Some(&claims.stdout),
    );
    assert!(
        created.status.success(),
        "kube-apiserver rejects kerf schedule's NodeClaims: {}",
        String::from_utf8_lossy(&created.stderr)
    );

    // the same documents under Karpenter v1.15.0's own CRDs get the same verdicts
    cp.kubectl_ok(&["delete", "-f", "-", "--wait=true"], Some(&crds.stdout));
    cp.install_karpenter_crds();
    let mut differ = Vec::new();
    for (name, i, path, under_kerfs) in &verdicts {
        let theirs = cp.kubectl(&["create", "--dry-run=server", "-f", path], None);
        let under_karpenters = theirs.status.success();
        let said = String::from_utf8_lossy(&theirs.stderr);
        assert!(
            !said.contains("no matches for kind") && !said.contains("could not find the requested"),
            "{name} document {i}: no verdict, the kind is not served yet: {said}"
        );
        let listed = CRD_VERDICTS_DIFFER
            .iter()
            .any(|(f, d, _)| f == name && d == i);
        if listed {
            assert!(
                !*under_kerfs && under_karpenters,
                "{name} document {i} is listed as refused only under Kerf's CRDs"
            );
        } else if *under_kerfs != under_karpenters {
            differ.push(format!(
                "{name} document {i}: Kerf's CRDs {}, Karpenter's {} ({})",
                if *under_kerfs { "accept" } else { "refuse" },
                if under_karpenters { "accept" } else { "refuse" },
                String::from_utf8_lossy(&theirs.stderr).trim()
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

fn kerf_on(cp: &ControlPlane, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(args)
        .env("KUBECONFIG", &cp.kubeconfig)
        .current_dir(root())
        .output()
        .expect("run kerf")
}

/// A NodeClaim of seed 004's NodePool whose instance registered as the Node `n1`.
const CLAIM: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-live1
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.2xlarge, topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: on-demand}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements:
  - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.2xlarge]}
"#;

const CLAIM_STATUS: &str = r#"{"status": {"providerID": "kwok://n1", "nodeName": "n1",
  "capacity": {"cpu": "8", "memory": "32Gi", "pods": "58"},
  "allocatable": {"cpu": "7910m", "memory": "29Gi", "pods": "58"},
  "conditions": [
    {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": "2026-11-25T10:00:00Z"},
    {"type": "Registered", "status": "True", "reason": "Registered", "message": "", "lastTransitionTime": "2026-11-25T10:00:00Z"},
    {"type": "Initialized", "status": "True", "reason": "Initialized", "message": "", "lastTransitionTime": "2026-11-25T10:00:00Z"}]}}"#;

const NODE: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: n1
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.2xlarge, topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: on-demand, kubernetes.io/arch: amd64, kubernetes.io/os: linux, kubernetes.io/hostname: n1, type: kwok}
spec:
  providerID: kwok://n1
status:
  capacity: {cpu: "8", memory: 32Gi, pods: "58"}
  allocatable: {cpu: 7910m, memory: 29Gi, pods: "58"}
"#;

const GUARDED: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: guarded, namespace: default, labels: {app: guarded}, annotations: {karpenter.sh/do-not-disrupt: "true"}}
spec:
  nodeName: n1
  containers:
  - {name: c, image: pause, resources: {requests: {cpu: 500m, memory: 256Mi}}}
"#;

#[test]
fn explain_reads_a_live_cluster_as_the_api_server_serves_it() {
    let cp = ControlPlane::start("explain");
    cp.install_crds();
    let seed =
        std::fs::read(root().join("fixtures/seeds/004-getting-started.yaml")).expect("seed 004");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed));
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=2"], None);
    cp.kubectl_ok(&["apply", "-f", "-"], Some(CLAIM.as_bytes()));
    cp.kubectl_ok(
        &[
            "patch",
            "nodeclaim",
            "default-live1",
            "--subresource=status",
            "--type=merge",
            "-p",
            CLAIM_STATUS,
        ],
        None,
    );
    cp.kubectl_ok(&["apply", "-f", "-"], Some(NODE.as_bytes()));
    cp.kubectl_ok(&["apply", "-f", "-"], Some(GUARDED.as_bytes()));
    // whether kube-scheduler binds the inflate pods to the kwok node or leaves them pending,
    // each NodePool's verdict for them is the same
    let pods = support::wait_for(
        "two inflate pods",
        std::time::Duration::from_secs(60),
        || {
            let out = cp.kubectl_ok(&["get", "pods", "-l", "app=inflate", "-o", "name"], None);
            let names: Vec<String> = out
                .lines()
                .map(|l| l.trim_start_matches("pod/").to_string())
                .collect();
            (names.len() == 2).then_some(names)
        },
        || "no pods yet".into(),
    );
    let out = kerf_on(&cp, &["explain", "pod", &pods[0], "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["pod"], format!("default/{}", pods[0]));
    assert_eq!(v["node_pools"][0]["node_pool"], "default");
    assert!(
        v["node_pools"][0]["fits"]["instance_type"].is_string(),
        "{v:#}"
    );

    let out = kerf_on(&cp, &["explain", "node", "n1", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["nodeclaim"], "default-live1");
    assert_eq!(v["node_pool"], "default");
    let blockers: Vec<&str> = v["blockers"]
        .as_array()
        .expect("blockers")
        .iter()
        .filter_map(|b| b["message"].as_str())
        .collect();
    assert!(
        blockers
            .contains(&"pod has \"karpenter.sh/do-not-disrupt\" annotation (Pod=default/guarded)"),
        "{blockers:?}"
    );

    let out = kerf_on(&cp, &["explain", "node", "n2"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "no node n2; there are: n1"
    );
}
