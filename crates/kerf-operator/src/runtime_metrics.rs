//! The families every controller-runtime operator serves beside its own, which Karpenter's
//! dashboards and users' alerts read too: the API requests (`client_go_request_total`,
//! `client_go_request_duration_seconds`, as operatorpkg labels them), the process
//! (`process_*`, read from `/proc` at each scrape, and the async runtime's `tokio_*` tasks and
//! workers), the Lease (`leader_election_master_status`)
//! and the webhook and certificate counters controller-runtime serves (Kerf has neither, so
//! they stay at zero, as Karpenter's do).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tower::{Layer, Service};

type Labels = Vec<(&'static str, String)>;

/// Registers `metric` under `name` and hands it back, for the caller to keep feeding.
pub(crate) fn registered<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    registry.register(name, help, metric.clone());
    metric
}

fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 1.5, 20))
}

/// The families, and the registry that serves them.
#[derive(Debug)]
pub struct RuntimeMetrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    durations: Family<Labels, Histogram, fn() -> Histogram>,
    leading: Family<Labels, Gauge>,
}

impl Default for RuntimeMetrics {
    fn default() -> RuntimeMetrics {
        let mut registry = Registry::default();
        let requests = registered(
            &mut registry,
            "client_go_request",
            "Number of HTTP requests, partitioned by status code and method.",
            Family::<Labels, Counter>::default(),
        );
        let durations = registered(
            &mut registry,
            "client_go_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, group, version, kind, and subresource.",
            Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency),
        );
        let leading = registered(
            &mut registry,
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            Family::<Labels, Gauge>::default(),
        );
        // controller-runtime's webhook and certificate counters: Kerf serves no webhook and
        // watches no certificate, so these stay at zero, as Karpenter's do
        for (name, help) in [
            (
                "controller_runtime_webhook_panics",
                "Total number of webhook panics",
            ),
            (
                "controller_runtime_conversion_webhook_panics",
                "Total number of conversion webhook panics",
            ),
            (
                "certwatcher_read_certificate",
                "Total number of certificate reads",
            ),
            (
                "certwatcher_read_certificate_errors",
                "Total number of certificate read errors",
            ),
        ] {
            registry.register(name, help, Counter::<u64>::default());
        }
        registry.register_collector(Box::new(Process));
        RuntimeMetrics {
            registry,
            requests,
            durations,
            leading,
        }
    }
}

impl RuntimeMetrics {
    /// The registry, to render beside the controllers' metrics.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Whether this replica holds the Lease `name` (0 while it waits, as a backup).
    pub fn leading(&self, name: &str, leading: bool) {
        self.leading
            .get_or_create(&vec![("name", name.to_string())])
            .set(i64::from(leading));
    }

    /// One request answered (`code`: its status, or `<error>` when none came) after `took`
    /// seconds.
    pub fn record(&self, method: &str, path: &str, code: &str, took: f64) {
        self.requests
            .get_or_create(&vec![("code", code.into()), ("method", method.into())])
            .inc();
        if let Some(labels) = request_labels(method, path) {
            self.durations.get_or_create(&labels).observe(took);
        }
    }
}

/// operatorpkg's labels of a request to the API server: its verb (`CREATE` for a POST or a
/// PUT of a collection, `LIST` for a GET of one, `UPDATE` for a PUT of an object), the
/// resource's group, version and plural (`kind`), and a subresource (`status`, `eviction`);
/// none for a path outside `/api` and `/apis`.
fn request_labels(method: &str, path: &str) -> Option<Labels> {
    let mut segments = path.trim_start_matches('/').split('/');
    let (group, version) = match segments.next()? {
        "api" => ("", segments.next()?),
        "apis" => (segments.next()?, segments.next()?),
        _ => return None,
    };
    let rest: Vec<&str> = segments.filter(|s| !s.is_empty()).collect();
    let (kind, after) = match rest.as_slice() {
        ["namespaces", _, kind, after @ ..] => (*kind, after),
        [kind, after @ ..] => (*kind, after),
        [] => ("", &[][..]),
    };
    let named = !after.is_empty();
    let verb = match (method, named) {
        ("POST", _) | ("PUT", false) => "CREATE",
        ("GET", false) => "LIST",
        ("PUT", true) => "UPDATE",
        (m, _) => m,
    };
    let subresource = match after {
        [_, sub] => *sub,
        _ => "",
    };
    Some(vec![
        ("verb", verb.to_string()),
        ("group", group.to_string()),
        ("version", version.to_string()),
        ("kind", kind.to_string()),
        ("subresource", subresource.to_string()),
    ])
}

/// A tower layer counting and timing every request a client sends.
#[derive(Clone, Debug)]
pub struct Counted(pub Arc<RuntimeMetrics>);

impl<S> Layer<S> for Counted {
    type Service = CountedService<S>;

    fn layer(&self, inner: S) -> CountedService<S> {
        CountedService {
            inner,
            metrics: Arc::clone(&self.0),
        }
    }
}

/// A client's service, counted (see [`Counted`]).
#[derive(Clone, Debug)]
pub struct CountedService<S> {
    inner: S,
    metrics: Arc<RuntimeMetrics>,
}

impl<S, B, R> Service<axum::http::Request<B>> for CountedService<S>
where
    S: Service<axum::http::Request<B>, Response = axum::http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let method = request.method().as_str().to_string();
        let path = request.uri().path().to_string();
        let metrics = Arc::clone(&self.metrics);
        let started = Instant::now();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            let code = match &result {
                Ok(r) => r.status().as_u16().to_string(),
                Err(_) => "<error>".to_string(),
            };
            metrics.record(&method, &path, &code, started.elapsed().as_secs_f64());
            result
        })
    }
}

/// The process's own figures, read from `/proc` at each scrape as Prometheus' Go process
/// collector reads them (CPU in clock ticks of 1/100 s, memory in 4 KiB pages).
#[derive(Debug)]
struct Process;

/// What `/proc` says of this process now.
#[derive(Debug, Default, PartialEq)]
struct ProcessFigures {
    cpu_seconds: f64,
    virtual_bytes: f64,
    resident_bytes: f64,
    start_seconds: f64,
    open_fds: f64,
    max_fds: f64,
    max_virtual_bytes: f64,
    received_bytes: f64,
    sent_bytes: f64,
}

const TICKS_PER_SECOND: f64 = 100.0;
const PAGE_BYTES: f64 = 4096.0;

/// Reads `/proc/self/stat` (after the command name, whose parentheses may hold spaces),
/// with the boot time from `/proc/stat`.
fn parse_stat(stat: &str, boot_seconds: f64) -> Option<(f64, f64, f64, f64)> {
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // fields counted from the state (the 3rd field of the line)
    let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    let cpu = (field(14)? + field(15)?) / TICKS_PER_SECOND;
    let start = boot_seconds + field(22)? / TICKS_PER_SECOND;
    Some((cpu, field(23)?, field(24)? * PAGE_BYTES, start))
}

/// The soft limit of `row` in `/proc/self/limits` (unlimited: the largest 64-bit value, as
/// Go's collector reports it).
fn parse_limit(limits: &str, row: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with(row))?;
    let soft = line[row.len()..].split_whitespace().next()?;
    Some(if soft == "unlimited" {
        u64::MAX as f64
    } else {
        soft.parse().ok()?
    })
}

/// The bytes received and sent over every interface of `/proc/self/net/dev`.
fn parse_net(dev: &str) -> (f64, f64) {
    dev.lines()
        .skip(2)
        .filter_map(|l| {
            let numbers: Vec<f64> = l
                .split_once(':')?
                .1
                .split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect();
            Some((*numbers.first()?, *numbers.get(8)?))
        })
        .fold((0.0, 0.0), |(r, s), (a, b)| (r + a, s + b))
}

fn read_process() -> Option<ProcessFigures> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let boot = read("/proc/stat")?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())?;
    let (cpu_seconds, virtual_bytes, resident_bytes, start_seconds) =
        parse_stat(&read("/proc/self/stat")?, boot)?;
    let limits = read("/proc/self/limits").unwrap_or_default();
    let (received_bytes, sent_bytes) = parse_net(&read("/proc/self/net/dev").unwrap_or_default());
    Some(ProcessFigures {
        cpu_seconds,
        virtual_bytes,
        resident_bytes,
        start_seconds,
        open_fds: std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count()) as f64,
        max_fds: parse_limit(&limits, "Max open files").unwrap_or(0.0),
        max_virtual_bytes: parse_limit(&limits, "Max address space").unwrap_or(0.0),
        received_bytes,
        sent_bytes,
    })
}

/// The async runtime's tasks and workers now, as `go_goroutines` and `go_threads` tell a Go
/// operator's: tasks that pile up over hours are a leak (the soak run samples them). None
/// outside a runtime.
fn runtime_figures() -> Option<[(&'static str, &'static str, f64); 2]> {
    let metrics = tokio::runtime::Handle::try_current().ok()?.metrics();
    Some([
        (
            "tokio_alive_tasks",
            "Number of tasks alive in the async runtime (spawned and not yet finished).",
            metrics.num_alive_tasks() as f64,
        ),
        (
            "tokio_workers",
            "Number of worker threads of the async runtime.",
            metrics.num_workers() as f64,
        ),
    ])
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, value) in runtime_figures().into_iter().flatten() {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        // a system without /proc has no process figures to serve
        let Some(p) = read_process() else {
            return Ok(());
        };
        let counters = [
            (
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                p.cpu_seconds,
            ),
            (
                "process_network_receive_bytes",
                "Number of bytes received by the process over the network.",
                p.received_bytes,
            ),
            (
                "process_network_transmit_bytes",
                "Number of bytes sent by the process over the network.",
                p.sent_bytes,
            ),
        ];
        for (name, help, value) in counters {
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(
                name,
                help,
                None,
                counter.metric_type(),
            )?)?;
        }
        let gauges = [
            (
                "process_open_fds",
                "Number of open file descriptors.",
                p.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                p.max_fds,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                p.virtual_bytes,
            ),
            (
                "process_virtual_memory_max_bytes",
                "Maximum amount of virtual memory available in bytes.",
                p.max_virtual_bytes,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                p.resident_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                p.start_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(method: &str, path: &str) -> Vec<String> {
        request_labels(method, path)
            .unwrap_or_default()
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }

    /// operatorpkg's reading of a request: verb, group, version, kind, subresource.
    #[test]
    fn a_request_is_labelled_as_operatorpkg_labels_it() {
        let cases: [(&str, &str, [&str; 5]); 7] = [
            (
                "POST",
                "/apis/karpenter.sh/v1/nodeclaims",
                ["CREATE", "karpenter.sh", "v1", "nodeclaims", ""],
            ),
            (
                "PATCH",
                "/apis/karpenter.sh/v1/nodeclaims/default-x/status",
                ["PATCH", "karpenter.sh", "v1", "nodeclaims", "status"],
            ),
            ("GET", "/api/v1/nodes", ["LIST", "", "v1", "nodes", ""]),
            (
                "GET",
                "/api/v1/namespaces/kube-system/pods",
                ["LIST", "", "v1", "pods", ""],
            ),
            (
                "POST",
                "/api/v1/namespaces/default/pods/web-1/eviction",
                ["CREATE", "", "v1", "pods", "eviction"],
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/karpenter-leader-election",
                ["UPDATE", "coordination.k8s.io", "v1", "leases", ""],
            ),
            (
                "GET",
                "/api/v1/namespaces/default",
                ["GET", "", "v1", "namespaces", ""],
            ),
        ];
        for (method, path, want) in cases {
            assert_eq!(labels(method, path), want, "{method} {path}");
        }
        assert!(request_labels("GET", "/version").is_none());
    }

    #[test]
    fn proc_files_read_as_the_go_collector_reads_them() {
        let stat = "4242 (kerf op) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 9 0 12345 104857600 2560 18446744073709551615";
        let (cpu, virt, rss, start) = parse_stat(stat, 1_700_000_000.0).expect("parsed");
        assert_eq!(cpu, 3.0);
        assert_eq!(virt, 104_857_600.0);
        assert_eq!(rss, 2560.0 * 4096.0);
        assert_eq!(start, 1_700_000_000.0 + 123.45);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              1048576              files\nMax address space         unlimited            unlimited            bytes\n";
        assert_eq!(parse_limit(limits, "Max open files"), Some(1_048_576.0));
        assert_eq!(
            parse_limit(limits, "Max address space"),
            Some(u64::MAX as f64)
        );
        let dev = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo: 100 1 0 0 0 0 0 0 200 2 0 0 0 0 0 0\n  eth0: 1000 10 0 0 0 0 0 0 3000 30 0 0 0 0 0 0\n";
        assert_eq!(parse_net(dev), (1100.0, 3200.0));
        // and this process's own, here
        let now = read_process().expect("/proc is readable here");
        assert!(now.resident_bytes > 0.0 && now.open_fds > 0.0, "{now:?}");
    }
}

#[cfg(test)]
mod runtime_tests {
    use super::RuntimeMetrics;

    /// `tokio_alive_tasks` as the registry serves it now.
    fn alive(metrics: &RuntimeMetrics) -> f64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, metrics.registry()).expect("encodes");
        (text.lines())
            .find_map(|l| l.strip_prefix("tokio_alive_tasks "))
            .and_then(|v| v.trim().parse().ok())
            .expect("tokio_alive_tasks served")
    }

    #[test]
    fn the_runtimes_tasks_are_served_while_they_live() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let metrics = RuntimeMetrics::default();
        runtime.block_on(async {
            let before = alive(&metrics);
            let (release, held) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(async move {
                let _ = held.await;
            });
            tokio::task::yield_now().await;
            assert_eq!(alive(&metrics), before + 1.0, "the waiting task counts");
            release.send(()).expect("the task waits");
            task.await.expect("the task ends");
            assert_eq!(alive(&metrics), before, "and no longer once it ended");
        });
    }
}
