//! A real control plane per test (scripts/e2e-cluster.sh: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok on 127.0.0.1), kubectl against it, and
//! the operator as a child process; everything stops when dropped.

#![allow(dead_code)] // each test binary uses its own part of this module

#[path = "../../../kerf-aws-provider/tests/support/port.rs"]
mod port;
pub mod proxy;
pub use port::free_port;

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
        ControlPlane::start_with(name, &[])
    }

    /// Starts one with these environment variables for `scripts/e2e-cluster.sh`
    /// (`KERF_E2E_APF=1`: the API server's priority and fairness on).
    pub fn start_with(name: &str, env: &[(&str, &str)]) -> ControlPlane {
        let dir = std::env::temp_dir().join(format!("kerf-e2e-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(root().join("scripts/e2e-cluster.sh"))
            .arg("start")
            .arg(&dir)
            .envs(env.iter().copied())
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

    /// Merges `patch` (JSON) into NodePool `name`'s spec or metadata, as `kubectl patch` does.
    pub fn patch_nodepool(&self, name: &str, patch: &str) {
        self.kubectl_ok(
            &["patch", "nodepool", name, "--type=merge", "-p", patch],
            None,
        );
    }

    /// Installs Karpenter's own CRDs (as its release ships them, fetched by
    /// `scripts/e2e-cluster.sh karpenter-crds`) in place of Kerf's: what a user who replaces
    /// Karpenter with Kerf already has in the cluster.
    pub fn install_karpenter_crds(&self) {
        let dir = karpenter_crds_dir();
        self.kubectl_ok(&["apply", "--server-side", "-f", &dir], None);
        self.wait_for_crds();
    }

    /// A kubeconfig that authenticates as the ServiceAccount `namespace/name`, with a token
    /// from the TokenRequest API: what a pod running as it would present.
    pub fn kubeconfig_for(&self, namespace: &str, name: &str) -> PathBuf {
        let token = self.kubectl_ok(
            &["create", "token", name, "-n", namespace, "--duration=2h"],
            None,
        );
        let admin = std::fs::read_to_string(&self.kubeconfig).expect("admin kubeconfig");
        let config: String = admin
            .lines()
            .map(|l| match l.trim_start().strip_prefix("token:") {
                Some(_) => format!("    token: {}", token.trim()),
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        let path = self.dir.join(format!("kubeconfig-{namespace}-{name}"));
        std::fs::write(&path, config + "\n").expect("write kubeconfig");
        path
    }

    /// Waits until the API serves the four CRDs. `kubectl wait` fails at once, rather than
    /// waiting, when it reads a CRD the API server has not yet given any status condition,
    /// so it is asked again until a minute has passed.
    pub fn wait_for_crds(&self) {
        let args = [
            "wait",
            "--for=condition=Established",
            "--timeout=10s",
            "crd/nodepools.karpenter.sh",
            "crd/nodeclaims.karpenter.sh",
            "crd/ec2nodeclasses.karpenter.k8s.aws",
            "crd/nodeoverlays.karpenter.sh",
        ];
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.kubectl(&args, None);
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl ControlPlane {
    /// Kills one of its components (`etcd`, `kube-apiserver`, ...) at once, as a crash would.
    pub fn kill(&self, component: &str) {
        self.script(&["kill", component]);
    }

    /// Starts a killed component again with the command line it had.
    pub fn restart(&self, component: &str) {
        self.script(&["restart", component]);
    }

    /// Compacts etcd's history up to its current revision, as the API server does every five
    /// minutes: a watch or list from an older resource version is then answered `410 Gone`.
    pub fn compact_etcd(&self) {
        let cmd = std::fs::read_to_string(self.dir.join("cmd-etcd")).expect("etcd's command line");
        let url = cmd
            .split(['"', ' ', '\''])
            .find(|w| w.starts_with("http://127.0.0.1:"))
            .expect("etcd's client URL");
        let post = |path: &str, body: &str| -> serde_json::Value {
            let out = Command::new("curl")
                .args(["-sf", "-X", "POST", &format!("{url}{path}"), "-d", body])
                .output()
                .expect("curl runs");
            assert!(out.status.success(), "etcd {path}: {out:?}");
            serde_json::from_slice(&out.stdout).expect("etcd answers JSON")
        };
        // any read answers with the store's revision
        let revision = post("/v3/kv/range", r#"{"key":"AA=="}"#)["header"]["revision"]
            .as_str()
            .expect("a revision")
            .to_string();
        post(
            "/v3/kv/compaction",
            &format!(r#"{{"revision":"{revision}","physical":true}}"#),
        );
    }

    fn script(&self, args: &[&str]) {
        let out = Command::new(root().join("scripts/e2e-cluster.sh"))
            .arg(args[0])
            .arg(&self.dir)
            .args(&args[1..])
            .output()
            .expect("run scripts/e2e-cluster.sh");
        assert!(
            out.status.success(),
            "e2e-cluster.sh {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        if failed {
            eprintln!("{}", self.post_mortem());
        }
        let _ = Command::new(root().join("scripts/e2e-cluster.sh"))
            .arg("stop")
            .arg(&self.dir)
            .status();
        if !failed {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl ControlPlane {
    /// What a failed test leaves for whoever reads CI's output without the machine: where the
    /// logs are kept, each component that is no longer running with the end of its log (a
    /// kwok that died leaves every pod pending), and the end of each autoscaler's log.
    fn post_mortem(&self) -> String {
        let tail = |name: &str, n: usize| {
            let text = std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let shown = lines[lines.len().saturating_sub(n)..].join("\n");
            format!(
                "\n--- {name}, {} lines, the last {n}:\n{shown}",
                lines.len()
            )
        };
        let mut out = format!(
            "the control plane's logs are kept in {}",
            self.dir.display()
        );
        let pids = std::fs::read_to_string(self.dir.join("pids")).unwrap_or_default();
        // a component restarted by a test has a line per start: its last is the one running
        let last: std::collections::BTreeMap<&str, &str> =
            pids.lines().filter_map(|l| l.split_once(' ')).collect();
        for (component, pid) in last {
            // an exited component nobody reaped is a zombie: still listed, state `Z`
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(") ")
                .map(|(_, rest)| &rest[..1.min(rest.len())]);
            let alive = state.is_some_and(|s| s != "Z");
            if !alive {
                out += &format!("\n{component} (pid {pid}) is not running");
                out += &tail(&format!("{component}.log"), 10);
            }
        }
        let mut autoscalers: Vec<String> = std::fs::read_dir(&self.dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| {
                        n.ends_with(".log")
                            && (n.starts_with("operator") || n.starts_with("karpenter"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        autoscalers.sort();
        for log in autoscalers {
            out += &tail(&log, 40);
        }
        out
    }
}

/// The folder of Karpenter v1.15.0's CRD files as its release ships them (fetched from the Go
/// module proxy by `scripts/e2e-cluster.sh karpenter-crds`, cached).
pub fn karpenter_crds_dir() -> String {
    cached_path("karpenter-crds", "Karpenter's CRDs could not be fetched")
}

/// The path `scripts/e2e-cluster.sh COMMAND` prints once it has built or fetched (and
/// cached) what it names; panics with `failure` and the script's errors otherwise.
fn cached_path(command: &str, failure: &str) -> String {
    let out = Command::new(root().join("scripts/e2e-cluster.sh"))
        .arg(command)
        .output()
        .expect("scripts/e2e-cluster.sh runs");
    assert!(
        out.status.success(),
        "{failure}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Whether an object's status condition `kind` is `True`.
pub fn condition_true(object: &serde_json::Value, kind: &str) -> bool {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// scripts/karpenter-hash, Karpenter's own hash functions, built over Karpenter's Go modules
/// on first use (scripts/e2e-cluster.sh karpenter-hash).
pub fn karpenter_hash() -> PathBuf {
    PathBuf::from(cached_path(
        "karpenter-hash",
        "scripts/karpenter-hash did not build",
    ))
}

/// helm, built from the Go module proxy on first use (scripts/e2e-cluster.sh helm).
pub fn helm() -> PathBuf {
    PathBuf::from(cached_path("helm", "helm did not build"))
}

/// Runs helm with `args` in the repository root: its output, or the error it printed.
pub fn run_helm(args: &[&str]) -> Result<String, String> {
    let out = Command::new(helm())
        .args(args)
        .current_dir(root())
        .output()
        .expect("helm runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The RBAC objects of charts/kerf released as `kerf` in kube-system, with the rules the
/// kwok provider needs beyond it: it plays the cloud and the kubelet, which create Nodes and
/// (rebooting one) write its status's boot id.
pub fn chart_rbac(kwok: bool, sets: &[&str]) -> String {
    let mut args = vec![
        "template",
        "kerf",
        "charts/kerf",
        "--namespace",
        "kube-system",
        "--set",
        "settings.clusterName=e2e",
        "--show-only",
        "templates/serviceaccount.yaml",
        "--show-only",
        "templates/clusterrole.yaml",
        "--show-only",
        "templates/role.yaml",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    if kwok {
        args.extend([
            "--set-json",
            r#"additionalClusterRoleRules=[{"apiGroups":[""],"resources":["nodes"],"verbs":["create"]},{"apiGroups":[""],"resources":["nodes/status"],"verbs":["patch"]}]"#,
        ]);
    }
    run_helm(&args).unwrap_or_else(|e| panic!("helm template: {e}"))
}

/// The environment of an operator running as the chart's ServiceAccount: its RBAC applied,
/// a kubeconfig with the account's token, the Lease in kube-system. `kwok` adds the rules the
/// kwok provider needs beyond the chart (see [`chart_rbac`]).
pub fn chart_env(cp: &ControlPlane, kwok: bool) -> Vec<(&'static str, String)> {
    chart_env_with(cp, kwok, &[])
}

/// As [`chart_env`], the chart rendered with these `--set` values (a gate that grants more).
pub fn chart_env_with(cp: &ControlPlane, kwok: bool, sets: &[&str]) -> Vec<(&'static str, String)> {
    cp.kubectl_ok(
        &["apply", "-f", "-"],
        Some(chart_rbac(kwok, sets).as_bytes()),
    );
    let kubeconfig = cp.kubeconfig_for("kube-system", "kerf");
    vec![
        ("KUBECONFIG", kubeconfig.display().to_string()),
        ("LEADER_ELECTION_NAMESPACE", "kube-system".to_string()),
    ]
}

/// `kerf-operator` running against a control plane.
pub struct Operator {
    child: Child,
    /// Where its log lines go.
    pub log: PathBuf,
    /// The port of its `/metrics`.
    pub metrics_port: u16,
    /// The port of its `/healthz` and `/readyz`.
    pub health_port: u16,
}

/// `GET http://127.0.0.1:{port}{path}`: the status code and body (empty on no connection).
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

impl Operator {
    /// Starts the operator `binary` with `args` after `--cloud-provider kwok`, as the chart
    /// runs it (its ServiceAccount and RBAC, the Lease in kube-system); its JSON log lines go
    /// to `<dir>/operator-<n>.log`.
    pub fn start(cp: &ControlPlane, binary: &str, n: u32, args: &[&str]) -> Operator {
        let mut all = vec!["--cloud-provider", "kwok"];
        all.extend(args);
        Operator::spawn(cp, binary, n, &all, &chart_env(cp, true))
    }

    /// Starts `binary` with exactly `args` and these environment variables added, on free
    /// loopback ports, with the admin kubeconfig unless `env` names another. Every operator
    /// of a test shares one leader-election identity unless `env` gives one, as a restarted
    /// container of one pod does.
    pub fn spawn(
        cp: &ControlPlane,
        binary: &str,
        n: u32,
        args: &[&str],
        env: &[(&str, String)],
    ) -> Operator {
        let log = cp.dir.join(format!("operator-{n}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let (metrics_port, health_port) = (free_port(), free_port());
        let mut command = Command::new(binary);
        command
            .args(args)
            .env("KUBECONFIG", &cp.kubeconfig)
            .env("LEADER_ELECTION_IDENTITY", "kerf-e2e")
            .env("BIND_ADDRESS", "127.0.0.1")
            .env("METRICS_PORT", metrics_port.to_string())
            .env("HEALTH_PROBE_PORT", health_port.to_string())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(file.try_clone().expect("log file"))
            .stderr(file);
        let child = command.spawn().expect("kerf-operator starts");
        Operator {
            child,
            log,
            metrics_port,
            health_port,
        }
    }

    /// Asks it to stop (SIGTERM, as the kubelet does) and waits: its exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().expect("the operator exits")
    }

    /// Its log lines so far, parsed.
    pub fn lines(&self) -> Vec<serde_json::Value> {
        read_lines(&self.log)
    }

    /// Whether it is still running (it never exits by itself).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
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

/// The NodeClaims an operator's log says it created.
pub fn created_by(op: &Operator) -> std::collections::BTreeSet<String> {
    op.lines()
        .iter()
        .filter(|l| l["message"] == "created nodeclaim")
        .filter_map(|l| l["NodeClaim"]["name"].as_str().map(String::from))
        .collect()
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

impl ControlPlane {
    /// The CRDs Karpenter's kwok provider runs on, with Karpenter's AWS CRD beside them
    /// (Kerf watches EC2NodeClasses too); the kwok ones win where both define a kind.
    pub fn install_karpenter_kwok_crds(&self) {
        let crds = karpenter_kwok().join("crds");
        self.install_karpenter_crds();
        self.kubectl_ok(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                crds.to_str().expect("path"),
            ],
            None,
        );
    }
}

/// Karpenter's kwok provider, outside the cluster.
pub struct Karpenter {
    child: Child,
    log: PathBuf,
}

impl Karpenter {
    /// Starts it against the control plane with these environment variables added
    /// (`FEATURE_GATES`, `MIN_VALUES_POLICY`, …); `n` numbers its log.
    pub fn start(cp: &ControlPlane, n: u32, env: &[(&str, &str)]) -> Karpenter {
        let dir = karpenter_kwok();
        let log = cp.dir.join(format!("karpenter-{n}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let port = |p: u16| p.to_string();
        let child = Command::new(dir.join("kwok"))
            .env("KUBECONFIG", &cp.kubeconfig)
            .env("DISABLE_LEADER_ELECTION", "true")
            .env("SYSTEM_NAMESPACE", "kube-system")
            .env("METRICS_PORT", port(free_port()))
            .env("HEALTH_PROBE_PORT", port(free_port()))
            .env("LOG_LEVEL", "debug")
            .envs(env.iter().copied())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("Karpenter's kwok provider starts");
        Karpenter { child, log }
    }

    /// Its JSON log lines so far.
    pub fn lines(&self) -> Vec<serde_json::Value> {
        read_lines(&self.log)
    }

    /// Stops it (SIGTERM, then SIGKILL after 30 s).
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Karpenter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Karpenter v1.15.0's kwok provider, built (once, cached) by `scripts/e2e-cluster.sh`: its
/// directory (`kwok`, `crds/`).
pub fn karpenter_kwok() -> PathBuf {
    let out = Command::new(root().join("scripts/e2e-cluster.sh"))
        .arg("karpenter-kwok")
        .output()
        .expect("scripts/e2e-cluster.sh runs");
    assert!(
        out.status.success(),
        "Karpenter's kwok provider did not build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}
