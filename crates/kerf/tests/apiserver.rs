//! Against a real control plane (kube-apiserver v1.35 with etcd, kube-controller-manager,
//! kube-scheduler and kwok, built and started by `scripts/e2e-cluster.sh`): `kerf crds`
//! installs, and every Karpenter document in `fixtures/` gets the same verdict from the API
//! server's dry run as from `kerf validate`, except where Kerf is documented to be stricter;
//! the NodeClaims `kerf schedule -o nodeclaims` prints apply as they are.

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

/// Documents where Kerf rejects what the API server accepts, on purpose (README, "Validation").
const KERF_STRICTER: &[(&str, usize, &str)] = &[(
    "broken/003-business-hours-fixed-durations.yaml",
    0,
    "a budget schedule whose range runs backwards",
)];

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
}
