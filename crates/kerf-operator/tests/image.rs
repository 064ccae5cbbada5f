//! The operator's OCI image as `scripts/image.sh` builds it without a Docker daemon: its
//! layout and config read back from the archive, copied by skopeo as a user would to their
//! registry, then unpacked by umoci and run by runc (the OCI runtime podman and containerd
//! use) to answer `--help` and serve `/healthz` and `/readyz` against a real control plane.
//! The image holds the binary the tests built (the release one is the same files at another
//! size), so this needs no second build.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use support::{ControlPlane, chart_env, free_port, http_get, root, wait_for};

const OPERATOR: &str = env!("CARGO_BIN_EXE_kerf-operator");

fn run(program: &str, args: &[&str]) -> Output {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} (scripts/install-test-deps.sh installs it): {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    layout.join("blobs/sha256").join(hex)
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("read blob")).expect("JSON blob")
}

/// `scripts/image.sh build` with the tests' binary into `out`: the archive's path.
fn build_image(out: &Path) -> PathBuf {
    let script = root().join("scripts/image.sh");
    let built = run(
        script.to_str().expect("utf-8 path"),
        &[
            "build",
            "--binary",
            OPERATOR,
            "--out",
            out.to_str().expect("utf-8 path"),
        ],
    );
    PathBuf::from(text(&built))
}

/// An OCI bundle of the image at `layout`, its process `args`, on the host's network (the
/// control plane listens on 127.0.0.1), with `env` set and `kubeconfig` mounted read-only.
fn bundle(layout: &Path, dir: &Path, args: &[&str], env: &[(&str, String)]) -> PathBuf {
    let bundle = dir.join("bundle");
    let _ = std::fs::remove_dir_all(&bundle);
    run(
        "umoci",
        &[
            "unpack",
            "--image",
            &format!("{}:{}", layout.display(), version()),
            bundle.to_str().expect("utf-8 path"),
        ],
    );
    let path = bundle.join("config.json");
    let mut config = json(&path);
    let process = &mut config["process"];
    process["terminal"] = false.into();
    let mut all_args = process["args"].as_array().cloned().unwrap_or_default();
    all_args.extend(args.iter().map(|a| Value::from(*a)));
    process["args"] = all_args.into();
    let mut vars = process["env"].as_array().cloned().unwrap_or_default();
    for (k, v) in env {
        let v = if *k == "KUBECONFIG" {
            "/etc/kerf/kubeconfig"
        } else {
            v
        };
        vars.push(format!("{k}={v}").into());
    }
    process["env"] = vars.into();
    if let Some((_, kubeconfig)) = env.iter().find(|(k, _)| *k == "KUBECONFIG") {
        config["mounts"]
            .as_array_mut()
            .expect("mounts")
            .push(serde_json::json!({
                "destination": "/etc/kerf/kubeconfig", "type": "bind", "source": kubeconfig,
                "options": ["rbind", "ro"]
            }));
    }
    // the sandbox's cgroups are not the runtime's to manage; the network is the host's
    let linux = config["linux"].as_object_mut().expect("linux");
    linux.remove("resources");
    linux.remove("cgroupsPath");
    if let Some(ns) = linux.get_mut("namespaces").and_then(Value::as_array_mut) {
        ns.retain(|n| n["type"] != "network");
    }
    if let Some(mounts) = config["mounts"].as_array_mut() {
        mounts.retain(|m| m["destination"] != "/sys/fs/cgroup");
    }
    std::fs::write(&path, serde_json::to_vec(&config).expect("config")).expect("write config");
    bundle
}

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[test]
fn the_image_is_small_nonroot_and_runs_the_operator_under_an_oci_runtime() {
    let cp = ControlPlane::start("image");
    let out = cp.dir.join("image");
    let archive = build_image(&out);
    assert_eq!(
        archive.file_name().and_then(|n| n.to_str()),
        Some(format!("kerf-operator-{}.oci.tar", version()).as_str())
    );

    // the archive as a user receives it: an OCI layout naming the chart's default image
    let layout = cp.dir.join("unpacked");
    std::fs::create_dir_all(&layout).expect("mkdir");
    run(
        "tar",
        &[
            "-C",
            layout.to_str().expect("utf-8"),
            "-xf",
            archive.to_str().expect("utf-8"),
        ],
    );
    let index = json(&layout.join("index.json"));
    let manifest_ref = &index["manifests"][0];
    let name = text(&run(
        root().join("scripts/image.sh").to_str().expect("utf-8"),
        &["name"],
    ));
    assert_eq!(
        manifest_ref["annotations"]["io.containerd.image.name"],
        name
    );
    assert_eq!(
        name,
        format!("ghcr.io/kerf-autoscaler/kerf-operator:{}", version())
    );
    let manifest = json(&blob(
        &layout,
        manifest_ref["digest"].as_str().expect("digest"),
    ));
    let config = json(&blob(
        &layout,
        manifest["config"]["digest"].as_str().expect("config"),
    ));
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/kerf-operator"])
    );
    assert_eq!(config["os"], "linux");
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "one layer: {layers:?}");
    let listing = run(
        "tar",
        &[
            "-tzf",
            blob(&layout, layers[0]["digest"].as_str().expect("layer"))
                .to_str()
                .expect("utf-8"),
        ],
    );
    let files: Vec<String> = text(&listing)
        .lines()
        .map(|l| l.trim_start_matches("./").to_string())
        .filter(|l| !l.is_empty() && l != "." && !l.ends_with('/'))
        .collect();
    assert!(files.iter().any(|f| f == "kerf-operator"), "{files:?}");
    assert!(files.iter().any(|f| f.ends_with("/libc.so.6")), "{files:?}");
    assert!(
        files.iter().all(|f| f == "kerf-operator"
            || f.starts_with("etc/")
            || f.starts_with("lib")
            || f.starts_with("usr/lib")),
        "nothing but the binary, its libraries and /etc: {files:?}"
    );

    // what a user runs to push it: skopeo reads the archive as a transport
    let copied = cp.dir.join("copied");
    run(
        "skopeo",
        &[
            "--insecure-policy",
            "copy",
            &format!("oci-archive:{}", archive.display()),
            &format!("oci:{}:{}", copied.display(), version()),
        ],
    );
    assert_eq!(
        json(&copied.join("index.json"))["manifests"][0]["digest"],
        manifest_ref["digest"],
        "skopeo copies the manifest unchanged"
    );

    // started once by an OCI runtime: --help, then the operator against the control plane
    let help = bundle(&layout, &cp.dir, &["--help"], &[]);
    let id = format!("kerf-image-help-{}", std::process::id());
    let out = run(
        "runc",
        &["run", "--bundle", help.to_str().expect("utf-8"), &id],
    );
    assert!(
        text(&out).contains("Usage: kerf-operator"),
        "{}",
        text(&out)
    );

    cp.install_crds();
    let health_port = free_port();
    let mut env = chart_env(&cp, true);
    env.extend([
        ("LEADER_ELECTION_IDENTITY", "kerf-image".to_string()),
        ("BIND_ADDRESS", "127.0.0.1".to_string()),
        ("METRICS_PORT", free_port().to_string()),
        ("HEALTH_PROBE_PORT", health_port.to_string()),
    ]);
    let operator = bundle(&layout, &cp.dir, &["--cloud-provider", "kwok"], &env);
    let id = format!("kerf-image-{}", std::process::id());
    let log = std::fs::File::create(cp.dir.join("image-operator.log")).expect("log");
    let mut child = Command::new("runc")
        .args(["run", "--bundle", operator.to_str().expect("utf-8"), &id])
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("runc starts");
    let describe = || {
        format!(
            "{:?}; log: {}",
            http_get(health_port, "/readyz"),
            std::fs::read_to_string(cp.dir.join("image-operator.log")).unwrap_or_default()
        )
    };
    wait_for(
        "the image's operator to be ready",
        Duration::from_secs(120),
        || (http_get(health_port, "/readyz").0 == 200).then_some(()),
        describe,
    );
    assert_eq!(http_get(health_port, "/healthz").0, 200);
    let _ = Command::new("runc").args(["kill", &id, "TERM"]).status();
    let status = child.wait().expect("runc exits");
    let _ = Command::new("runc")
        .args(["delete", "--force", &id])
        .status();
    assert!(
        status.success(),
        "the operator stops cleanly on SIGTERM: {status}"
    );
}
