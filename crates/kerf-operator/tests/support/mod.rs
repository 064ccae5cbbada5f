//! A real control plane per test (scripts/e2e-cluster.sh: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok on 127.0.0.1), kubectl against it, and
//! the operator as a child process; everything stops when dropped.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A control plane started for one test.
pub struct ControlPlane {
    /// Its state and logs.
    pub dir: PathBuf,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
}

impl ControlPlane {
    /// Starts one; panics with the build hint when the binaries are missing.
    pub fn start(name: &str) -> ControlPlane {
        let dir = std::env::temp_dir().join(format!("kerf-e2e-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(root().join("scripts/e2e-cluster.sh"))
            .arg("start")
            .arg(&dir)
            .output()
            .expect("run scripts/e2e-cluster.sh");
        let cp = ControlPlane {
            kubeconfig: dir.join("kubeconfig"),
            dir,
        };
        assert!(
            out.status.success(),
            "the control plane did not start (build it with `scripts/e2e-cluster.sh build`, which \
             scripts/install-test-deps.sh runs): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        cp
    }

    /// Runs kubectl against it.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut child = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs (scripts/install-test-deps.sh installs it)");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input)
                .expect("write to kubectl");
        }
        drop(child.stdin.take());
        child.wait_with_output().expect("kubectl finishes")
    }

    /// Runs kubectl and panics unless it succeeds; its standard output.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&[u8]>) -> String {
        let out = self.kubectl(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Installs Kerf's CRDs and waits until the API serves them.
    pub fn install_crds(&self) {
        let yaml = kerf_api::crds::to_yaml().expect("CRDs as YAML");
        self.kubectl_ok(
            &["apply", "--server-side", "-f", "-"],
            Some(yaml.as_bytes()),
        );
        self.wait_for_crds();
    }

    /// Waits until the API serves the three CRDs.
    pub fn wait_for_crds(&self) {
        self.kubectl_ok(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/nodepools.karpenter.sh",
                "crd/nodeclaims.karpenter.sh",
                "crd/ec2nodeclasses.karpenter.k8s.aws",
            ],
            None,
        );
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(root().join("scripts/e2e-cluster.sh"))
            .arg("stop")
            .arg(&self.dir)
            .status();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `kerf-operator` running against a control plane.
pub struct Operator {
    child: Child,
    /// Where its log lines go.
    pub log: PathBuf,
}

impl Operator {
    /// Starts the operator `binary` with `args` after `--cloud-provider kwok`; its JSON log
    /// lines go to `<dir>/operator-<n>.log`.
    pub fn start(cp: &ControlPlane, binary: &str, n: u32, args: &[&str]) -> Operator {
        let mut all = vec!["--cloud-provider", "kwok"];
        all.extend(args);
        Operator::spawn(cp, binary, n, &all, &[])
    }

    /// Starts `binary` with exactly `args` and these environment variables added.
    pub fn spawn(
        cp: &ControlPlane,
        binary: &str,
        n: u32,
        args: &[&str],
        env: &[(&str, String)],
    ) -> Operator {
        let log = cp.dir.join(format!("operator-{n}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(binary)
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("KUBECONFIG", &cp.kubeconfig)
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .expect("kerf-operator starts");
        Operator { child, log }
    }

    /// Its log lines so far, parsed.
    pub fn lines(&self) -> Vec<serde_json::Value> {
        read_lines(&self.log)
    }

    /// Stops it at once (as a crash would).
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON lines of a log file.
pub fn read_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Polls `check` every half second until it returns `Some`, or panics after `limit` with
/// `what` and the last value `describe` gives.
pub fn wait_for<T>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> Option<T>,
    describe: impl Fn() -> String,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        if start.elapsed() > limit {
            panic!("waited {limit:?} for {what}; now: {}", describe());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
