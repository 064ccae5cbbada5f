//! Karpenter's Prometheus metrics: every `karpenter_*` family Karpenter v1.15 registers
//! ([`families`]), with its names, types, labels and buckets, so that dashboards and alerts
//! built for Karpenter read Kerf. Counters, histograms and summaries are kept as the
//! controllers (and the shells' cloud calls) act; gauges over nodes, pods, NodePools and
//! offerings are read off the controllers' state when the metrics are rendered
//! ([`state`]), so nothing is stored twice. Rendered as OpenMetrics text for the operator's
//! `/metrics` and the simulator's `--metrics FILE`.

pub mod families;
mod state;

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use state::{BudgetReading, SchedulingReading, StateView};

/// A metric's labels, in the order its [`Spec`] names them.
pub type Labels = Vec<(&'static str, String)>;
type Counters = Family<Labels, Counter>;
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;
type Histograms = Family<Labels, Histogram, Buckets>;

/// A metric family's type, as Prometheus names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Set to a value.
    Gauge,
    /// Observations counted into buckets.
    Histogram,
    /// Observations summarised by quantiles.
    Summary,
}

impl Kind {
    /// The type as the text format writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
        }
    }
}

/// A metric family as Karpenter declares it.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// The exposed name (a counter's with its `_total`).
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Its help text.
    pub help: &'static str,
    /// Its label names; values are given in this order.
    pub labels: &'static [&'static str],
    /// A histogram's upper bounds.
    pub buckets: &'static [f64],
}

impl Spec {
    /// The name to register: the OpenMetrics encoder adds a counter's `_total` itself.
    fn family_name(&self) -> &'static str {
        match self.kind {
            Kind::Counter => self.name.strip_suffix("_total").unwrap_or(self.name),
            _ => self.name,
        }
    }

    /// The help text without its last full stop, which the encoder adds back.
    fn family_help(&self) -> &'static str {
        self.help.strip_suffix('.').unwrap_or(self.help)
    }

    /// Its labels with `values` (missing values are empty).
    fn labels(&self, values: &[&str]) -> Labels {
        debug_assert_eq!(values.len(), self.labels.len(), "{}", self.name);
        (self.labels.iter().enumerate())
            .map(|(i, name)| (*name, values.get(i).copied().unwrap_or("").to_string()))
            .collect()
    }
}

/// How a histogram of one family is made, with that family's buckets.
#[derive(Clone, Copy, Debug)]
struct Buckets(&'static [f64]);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// How far back a summary's quantiles look (client_golang's default `MaxAge`).
const SUMMARY_WINDOW: Duration = Duration::from_secs(600);
/// The quantiles Karpenter's summaries report.
const QUANTILES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];

/// A summary as client_golang keeps one: quantiles over the last [`SUMMARY_WINDOW`], sum and
/// count over all time.
#[derive(Debug, Default)]
struct Summary {
    recent: VecDeque<(Duration, f64)>,
    sum: f64,
    count: u64,
}

impl Summary {
    fn observe(&mut self, now: Duration, value: f64) {
        self.recent.push_back((now, value));
        self.sum += value;
        self.count += 1;
        self.forget(now);
    }

    fn forget(&mut self, now: Duration) {
        while self
            .recent
            .front()
            .is_some_and(|(t, _)| now.saturating_sub(*t) > SUMMARY_WINDOW)
        {
            self.recent.pop_front();
        }
    }

    /// The value at quantile `q` of the recent observations (NaN when none, as client_golang).
    fn quantile(&self, q: f64) -> f64 {
        let mut values: Vec<f64> = self.recent.iter().map(|(_, v)| *v).collect();
        if values.is_empty() {
            return f64::NAN;
        }
        values.sort_by(f64::total_cmp);
        let rank = (q * (values.len() - 1) as f64).round() as usize;
        values[rank.min(values.len() - 1)]
    }

    fn render(&self, out: &mut String, name: &str, labels: &Labels) {
        let mut pairs: String = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\",", escape(v)))
            .collect();
        for q in QUANTILES {
            let _ = writeln!(
                out,
                "{name}{{{pairs}quantile=\"{q}\"}} {}",
                number(self.quantile(q))
            );
        }
        pairs.pop();
        let braces = if pairs.is_empty() {
            String::new()
        } else {
            format!("{{{pairs}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", number(self.sum));
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

/// A label value as the text format escapes it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A float as OpenMetrics writes it.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else {
        format!("{v}")
    }
}

/// The counters, histograms and set gauges, shared: a clone records into the same families,
/// so a shell's cloud calls (on their own tasks) count beside the controllers.
#[derive(Clone, Debug)]
pub struct Recorder {
    counters: Arc<BTreeMap<&'static str, Counters>>,
    histograms: Arc<BTreeMap<&'static str, Histograms>>,
    gauges: Arc<BTreeMap<&'static str, Gauges>>,
}

impl Recorder {
    /// Adds one to a counter.
    pub fn inc(&self, spec: &Spec, values: &[&str]) {
        self.add(spec, values, 1);
    }

    /// Adds `n` to a counter.
    pub fn add(&self, spec: &Spec, values: &[&str], n: u64) {
        if let Some(f) = self.counters.get(spec.name) {
            f.get_or_create(&spec.labels(values)).inc_by(n);
        }
    }

    /// Sets a gauge that no state holds (a shell's measurement).
    pub fn set(&self, spec: &Spec, values: &[&str], value: f64) {
        if let Some(f) = self.gauges.get(spec.name) {
            f.get_or_create(&spec.labels(values)).set(value);
        }
    }

    /// Removes a set gauge's series (its object is gone).
    pub fn remove(&self, spec: &Spec, values: &[&str]) {
        if let Some(f) = self.gauges.get(spec.name) {
            f.remove(&spec.labels(values));
        }
    }

    /// Observes a value into a histogram.
    pub fn observe(&self, spec: &Spec, values: &[&str], value: f64) {
        if let Some(f) = self.histograms.get(spec.name) {
            f.get_or_create(&spec.labels(values)).observe(value);
        }
    }
}

/// Every kept family: the shared [`Recorder`] and the summaries, which only the controllers
/// observe.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    recorder: Recorder,
    summaries: BTreeMap<&'static str, BTreeMap<Labels, Summary>>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl std::ops::Deref for Metrics {
    type Target = Recorder;

    fn deref(&self) -> &Recorder {
        &self.recorder
    }
}

impl Metrics {
    /// Every kept family registered with no samples, and `karpenter_build_info` set.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let (mut counters, mut histograms, mut gauges) =
            (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        let mut summaries = BTreeMap::new();
        for spec in families::ALL
            .iter()
            .filter(|s| !state::is_read_off_state(s))
        {
            let (name, help) = (spec.family_name(), spec.family_help());
            match spec.kind {
                Kind::Counter => {
                    let f = Counters::default();
                    registry.register(name, help, f.clone());
                    counters.insert(spec.name, f);
                }
                Kind::Gauge => {
                    let f = Gauges::default();
                    registry.register(name, help, f.clone());
                    gauges.insert(spec.name, f);
                }
                Kind::Histogram => {
                    let f = Histograms::new_with_constructor(Buckets(spec.buckets));
                    registry.register(name, help, f.clone());
                    histograms.insert(spec.name, f);
                }
                Kind::Summary => {
                    summaries.insert(spec.name, BTreeMap::new());
                }
            }
        }
        let recorder = Recorder {
            counters: Arc::new(counters),
            histograms: Arc::new(histograms),
            gauges: Arc::new(gauges),
        };
        // the version, the toolchain (Rust's, where Karpenter names Go's), the target
        // architecture and the commit (unknown to a crate build)
        recorder.set(
            &families::BUILD_INFO,
            &[
                "",
                std::env::consts::ARCH,
                concat!("rust", env!("CARGO_PKG_RUST_VERSION")),
                env!("CARGO_PKG_VERSION"),
            ],
            1.0,
        );
        // Kerf's consolidation search has no time limit: the timeouts Karpenter counts stay
        // at zero, shown as Karpenter shows them from the start
        for kind in ["multi", "single"] {
            recorder.add(
                &families::VOLUNTARY_DISRUPTION_CONSOLIDATION_TIMEOUTS,
                &[kind],
                0,
            );
        }
        Metrics {
            registry,
            recorder,
            summaries,
        }
    }

    /// A handle that records into the same families, for a shell.
    pub fn recorder(&self) -> Recorder {
        self.recorder.clone()
    }

    /// Observes a value into a histogram or a summary at `now`.
    pub fn observe_at(&mut self, spec: &Spec, values: &[&str], value: f64, now: Duration) {
        if let Some(s) = self.summaries.get_mut(spec.name) {
            s.entry(spec.labels(values))
                .or_default()
                .observe(now, value);
        } else {
            self.recorder.observe(spec, values, value);
        }
    }

    /// Everything as OpenMetrics text: the kept metrics, the gauges read off `view`, and the
    /// shell's own registries (`extra`), ending in `# EOF`.
    pub fn render(&mut self, view: &StateView<'_>, extra: &[&Registry]) -> String {
        let mut out = String::new();
        let _ = encode_registry(&mut out, &self.registry);
        let _ = encode_registry(&mut out, &state::gauges(view));
        for r in extra {
            let _ = encode_registry(&mut out, r);
        }
        for spec in families::ALL.iter().filter(|s| s.kind == Kind::Summary) {
            let _ = writeln!(out, "# HELP {} {}", spec.name, spec.help);
            let _ = writeln!(out, "# TYPE {} summary", spec.name);
            for (labels, s) in self.summaries.get_mut(spec.name).into_iter().flatten() {
                s.forget(view.now);
                s.render(&mut out, spec.name, labels);
            }
        }
        let _ = encode_eof(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{Kind, Metrics, Summary, families};
    use std::time::Duration;

    #[test]
    fn summary_quantiles_cover_the_last_ten_minutes() {
        let mut s = Summary::default();
        let at = Duration::from_secs;
        s.observe(at(0), 100.0);
        for (i, v) in [1.0, 2.0, 3.0, 4.0, 5.0].into_iter().enumerate() {
            s.observe(at(700 + i as u64), v);
        }
        assert_eq!(s.count, 6);
        assert_eq!(s.sum, 115.0);
        assert_eq!(s.quantile(0.0), 1.0);
        assert_eq!(s.quantile(0.5), 3.0);
        assert_eq!(s.quantile(1.0), 5.0);
        let mut out = String::new();
        s.render(&mut out, "x_seconds", &vec![("nodepool", "a".into())]);
        assert!(
            out.contains("x_seconds{nodepool=\"a\",quantile=\"0.9\"} 5\n"),
            "{out}"
        );
        assert!(out.contains("x_seconds_count{nodepool=\"a\"} 6\n"), "{out}");
        assert!(Summary::default().quantile(0.5).is_nan());
    }

    #[test]
    fn kept_families_are_registered_once_under_their_names() {
        let m = Metrics::new();
        m.inc(&families::NODES_DRAINED, &["default"]);
        let mut names = std::collections::BTreeSet::new();
        for spec in families::ALL {
            assert!(names.insert(spec.name), "{} twice", spec.name);
            assert_eq!(
                spec.kind == Kind::Histogram,
                !spec.buckets.is_empty(),
                "{}",
                spec.name
            );
        }
        for spec in families::ALL {
            let kept = match spec.kind {
                Kind::Counter => m.recorder.counters.contains_key(spec.name),
                Kind::Gauge => m.recorder.gauges.contains_key(spec.name),
                Kind::Histogram => m.recorder.histograms.contains_key(spec.name),
                Kind::Summary => m.summaries.contains_key(spec.name),
            };
            let read_off = super::state::is_read_off_state(spec);
            assert!(
                kept != read_off && (!read_off || spec.kind == Kind::Gauge),
                "{} is kept ({kept}) or read off the state ({read_off}), once",
                spec.name
            );
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, &m.registry).unwrap();
        assert!(
            out.contains("karpenter_build_info{commit=\"\",goarch="),
            "{out}"
        );
        assert!(
            out.contains("# TYPE karpenter_nodes_drained counter\n"),
            "{out}"
        );
        assert!(
            out.contains("karpenter_nodes_drained_total{nodepool=\"default\"} 1\n"),
            "{out}"
        );
    }
}
