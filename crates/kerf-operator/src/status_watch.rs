//! What Karpenter's status controllers (operatorpkg's, one per kind) make of the conditions
//! the watches deliver, whoever wrote them: an Event on each condition's transition
//! (`Status condition transitioned, …`, its reason the condition's type) and each finalizer
//! lifted (`Finalized …`), and the `operator_<kind>_status_condition_*` and
//! `operator_<kind>_termination_*` families (and the deprecated `operator_status_condition_*`
//! and `operator_termination_*` ones) that Karpenter's dashboards and users' alerts read.
//! Nodes, NodeClaims, NodePools and EC2NodeClasses are watched, as in Karpenter, and
//! CapacityBuffers with the `CapacityBuffer` gate.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_core::controllers::{Event, EventObject};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::runtime_metrics::registered;

/// One condition as an object carries it.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    /// Its type.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// Its `lastTransitionTime`, in Unix seconds (0 when absent).
    pub since: i64,
}

impl Seen {
    /// A condition read from its fields (`lastTransitionTime` as RFC 3339).
    pub fn new(
        type_: &str,
        status: &str,
        reason: &str,
        message: &str,
        since: Option<&str>,
    ) -> Seen {
        let since = since
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map_or(0, |t| t.as_second());
        Seen {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            since,
        }
    }
}

/// The kinds watched, with what their families are called and labelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `operator_node_*`: labelled with the node's NodePool, node class and initialization.
    Node,
    /// `operator_nodeclaim_*`: labelled with its NodePool and node class.
    NodeClaim,
    /// `operator_nodepool_*`.
    NodePool,
    /// `operator_ec2nodeclass_*`.
    NodeClass,
    /// `operator_capacitybuffer_*` (with the `CapacityBuffer` gate).
    CapacityBuffer,
}

impl Kind {
    /// The kind of a watched object's kind name, if it is one of these.
    pub fn of(kind: &str) -> Option<Kind> {
        Some(match kind {
            "Node" => Kind::Node,
            "NodeClaim" => Kind::NodeClaim,
            "NodePool" => Kind::NodePool,
            "EC2NodeClass" => Kind::NodeClass,
            "CapacityBuffer" => Kind::CapacityBuffer,
            _ => return None,
        })
    }

    const ALWAYS: [Kind; 4] = [Kind::Node, Kind::NodeClaim, Kind::NodePool, Kind::NodeClass];

    fn prefix(self) -> &'static str {
        match self {
            Kind::Node => "operator_node",
            Kind::NodeClaim => "operator_nodeclaim",
            Kind::NodePool => "operator_nodepool",
            Kind::NodeClass => "operator_ec2nodeclass",
            Kind::CapacityBuffer => "operator_capacitybuffer",
        }
    }

    /// The object labels each series carries, as operatorpkg names them.
    fn extra(self) -> &'static [(&'static str, &'static str)] {
        const CLASS: (&str, &str) = (
            "karpenter_k8s_aws_ec2nodeclass",
            "karpenter.k8s.aws/ec2nodeclass",
        );
        const POOL: (&str, &str) = ("karpenter_sh_nodepool", "karpenter.sh/nodepool");
        match self {
            Kind::Node => &[
                CLASS,
                POOL,
                ("karpenter_sh_initialized", "karpenter.sh/initialized"),
            ],
            Kind::NodeClaim => &[CLASS, POOL],
            Kind::NodePool | Kind::NodeClass | Kind::CapacityBuffer => &[],
        }
    }

    /// The group and kind of the deprecated families; Nodes have none.
    fn deprecated(self) -> Option<(&'static str, &'static str)> {
        match self {
            Kind::Node => None,
            Kind::NodeClaim => Some(("karpenter.sh", "NodeClaim")),
            Kind::NodePool => Some(("karpenter.sh", "NodePool")),
            Kind::NodeClass => Some(("karpenter.k8s.aws", "EC2NodeClass")),
            Kind::CapacityBuffer => Some(("autoscaling.x-k8s.io", "CapacityBuffer")),
        }
    }

    fn event_object(self) -> EventObject {
        match self {
            Kind::Node => EventObject::Node,
            Kind::NodeClaim => EventObject::NodeClaim,
            Kind::NodePool => EventObject::NodePool,
            Kind::NodeClass => EventObject::NodeClass,
            Kind::CapacityBuffer => EventObject::CapacityBuffer,
        }
    }
}

type Labels = Vec<(&'static str, String)>;

fn exponential() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.5, 2.0, 15,
    ))
}

/// Prometheus' default buckets, which the EC2NodeClass's and the deprecated families use.
fn default_buckets() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// The three families of one kind (or the deprecated set) fed as things happen; its three
/// gauges of each object's state now are written at each scrape by [`PerObject`].
struct Families {
    transition_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    transitions: Family<Labels, Counter>,
    termination_duration: Family<Labels, Histogram, fn() -> Histogram>,
}

const COUNT_HELP: &str = "The number of a condition for a given object, type and status. e.g. Alarm := Available=False > 0";
const CURRENT_HELP: &str = "The current amount of time in seconds that a status condition has been in a specific state. Alarm := P99(Updated=Unknown) > 5 minutes";
const TERMINATING_HELP: &str =
    "The current amount of time in seconds that an object has been in terminating state.";

impl Families {
    fn new(registry: &mut Registry, prefix: &str, buckets: fn() -> Histogram) -> Families {
        let condition = format!("{prefix}_status_condition");
        let transition_seconds = registered(
            registry,
            &format!("{condition}_transition_seconds"),
            "The amount of time a condition was in a given state (status) before transitioning to another state (to_status). e.g. Alarm := P99(Updated=False) > 5 minutes",
            Family::new_with_constructor(buckets),
        );
        let transitions = registered(
            registry,
            &format!("{condition}_transitions"),
            "The count of transitions of a given object, type and status.",
            Family::default(),
        );
        let termination_duration = registered(
            registry,
            &format!("{prefix}_termination_duration_seconds"),
            "The amount of time taken by an object to terminate completely.",
            Family::new_with_constructor(buckets),
        );
        Families {
            transition_seconds,
            transitions,
            termination_duration,
        }
    }
}

/// An object as last observed.
#[derive(Debug)]
struct Object {
    namespace: String,
    name: String,
    /// Its object labels, as the series carry them.
    extra: Labels,
    conditions: Vec<Seen>,
    finalizers: BTreeSet<String>,
    /// Its `deletionTimestamp`, in Unix seconds.
    deleting: Option<i64>,
}

/// Every watched object as last observed, by kind and `namespace/name`.
type Objects = HashMap<(Kind, String), Object>;

/// The conditions of every watched object, the Events their changes make and the
/// families they feed.
pub struct StatusWatch {
    objects: Arc<Mutex<Objects>>,
    /// The Unix second the per-object gauges are read at (set by [`StatusWatch::refresh`]).
    now: Arc<AtomicI64>,
    families: HashMap<Kind, Families>,
    deprecated: Families,
    registry: Registry,
}

/// The per-object gauges (`…_status_condition_count`, `…_current_status_seconds`,
/// `…_termination_current_time_seconds`, and their deprecated forms), written straight from
/// the objects at each scrape rather than kept as series: a series per object and condition
/// held between scrapes cost some 36 MiB at 1,500 nodes and 1,500 NodeClaims.
struct PerObject {
    objects: Arc<Mutex<Objects>>,
    now: Arc<AtomicI64>,
    /// The kinds followed, whose families are served.
    kinds: Vec<Kind>,
}

impl std::fmt::Debug for PerObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PerObject")
    }
}

/// Which per-object gauge is written.
#[derive(Clone, Copy)]
enum Gauge {
    Count,
    Current,
    Terminating,
}

impl PerObject {
    /// One gauge family: for `kind` (its own labels), or for the deprecated set (every kind
    /// that has one, labelled with its group and kind) when `kind` is none.
    fn family(
        &self,
        encoder: &mut DescriptorEncoder,
        objects: &[(&(Kind, String), &Object)],
        kind: Option<Kind>,
        gauge: Gauge,
    ) -> Result<(), std::fmt::Error> {
        let prefix = kind.map_or("operator", Kind::prefix);
        let (name, help) = match gauge {
            Gauge::Count => (format!("{prefix}_status_condition_count"), COUNT_HELP),
            Gauge::Current => (
                format!("{prefix}_status_condition_current_status_seconds"),
                CURRENT_HELP,
            ),
            Gauge::Terminating => (
                format!("{prefix}_termination_current_time_seconds"),
                TERMINATING_HELP,
            ),
        };
        let now = self.now.load(Ordering::Relaxed);
        let mut family = encoder.encode_descriptor(&name, help, None, MetricType::Gauge)?;
        for &(key, o) in objects {
            let labels_of_kind: Labels = match kind {
                Some(k) if k == key.0 => o.extra.clone(),
                Some(_) => continue,
                None => match key.0.deprecated() {
                    Some((g, k)) => vec![("group", g.to_string()), ("kind", k.to_string())],
                    None => continue,
                },
            };
            let object = [("namespace", o.namespace.clone()), ("name", o.name.clone())];
            if let Gauge::Terminating = gauge {
                if let Some(since) = o.deleting {
                    let labels = [object.to_vec(), labels_of_kind].concat();
                    let took = (now - since).max(0) as f64;
                    ConstGauge::new(took).encode(family.encode_family(&labels)?)?;
                }
                continue;
            }
            for c in &o.conditions {
                let mut labels: Labels = object.to_vec();
                labels.extend([
                    ("type", c.type_.clone()),
                    ("status", c.status.clone()),
                    ("reason", c.reason.clone()),
                ]);
                labels.extend(labels_of_kind.iter().cloned());
                let sample = family.encode_family(&labels)?;
                match gauge {
                    Gauge::Count => ConstGauge::new(1i64).encode(sample)?,
                    _ => ConstGauge::new((now - c.since).max(0) as f64).encode(sample)?,
                }
            }
        }
        Ok(())
    }
}

impl Collector for PerObject {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        // in name order, sorted once for every family
        let mut sorted: Vec<(&(Kind, String), &Object)> = objects.iter().collect();
        sorted.sort_by(|(a, _), (b, _)| (a.1.as_str(), a.0 as u8).cmp(&(b.1.as_str(), b.0 as u8)));
        let kinds = self.kinds.iter().copied().map(Some).chain([None]);
        for kind in kinds {
            for gauge in [Gauge::Count, Gauge::Current, Gauge::Terminating] {
                self.family(&mut encoder, &sorted, kind, gauge)?;
            }
        }
        Ok(())
    }
}

impl Default for StatusWatch {
    fn default() -> StatusWatch {
        StatusWatch::new(false)
    }
}

impl StatusWatch {
    /// The status watch of the always-followed kinds, and of CapacityBuffers with `buffers`
    /// (their families served only then, as Karpenter registers their controller only with
    /// its gate).
    pub fn new(buffers: bool) -> StatusWatch {
        let mut registry = Registry::default();
        let mut kinds = Kind::ALWAYS.to_vec();
        if buffers {
            kinds.push(Kind::CapacityBuffer);
        }
        let families = (kinds.iter().copied())
            .map(|k| {
                let buckets: fn() -> Histogram = match k {
                    Kind::NodeClass => default_buckets,
                    _ => exponential,
                };
                (k, Families::new(&mut registry, k.prefix(), buckets))
            })
            .collect();
        let deprecated = Families::new(&mut registry, "operator", default_buckets);
        let objects = Arc::new(Mutex::new(HashMap::new()));
        let now = Arc::new(AtomicI64::new(0));
        registry.register_collector(Box::new(PerObject {
            objects: Arc::clone(&objects),
            now: Arc::clone(&now),
            kinds,
        }));
        StatusWatch {
            objects,
            now,
            families,
            deprecated,
            registry,
        }
    }
}

/// operatorpkg's Event for a condition that changed status from `was`.
fn transition_event(kind: Kind, name: &str, c: &Seen, was: &str) -> Event {
    let mut message = format!(
        "Status condition transitioned, Type: {}, Status: {} -> {}, Reason: {}",
        c.type_, was, c.status, c.reason
    );
    if !c.message.is_empty() {
        message.push_str(&format!(", Message: {}", c.message));
    }
    Event {
        kind: kind.event_object(),
        name: name.to_string(),
        warning: false,
        reason: Cow::Owned(c.type_.clone()),
        message,
    }
}

impl StatusWatch {
    /// The registry of the `operator_*` families, for `/metrics`.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// An object as a watch delivered it, with its conditions: the Events its changes since
    /// the last observation make (none the first time it is seen, as after Karpenter's
    /// start), and the counters and histograms they feed.
    pub fn observe(&mut self, kind: Kind, meta: &ObjectMeta, conditions: Vec<Seen>) -> Vec<Event> {
        let name = meta.name.clone().unwrap_or_default();
        let namespace = meta.namespace.clone().unwrap_or_default();
        let key = (kind, format!("{namespace}/{name}"));
        let labels = meta.labels.clone().unwrap_or_default();
        let extra: Labels = (kind.extra().iter())
            .map(|(l, k)| (*l, labels.get(*k).cloned().unwrap_or_default()))
            .collect();
        let mut objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        let before = objects.get(&key);
        let mut events = Vec::new();
        let event_name = if namespace.is_empty() {
            name.clone()
        } else {
            format!("{namespace}/{name}")
        };
        for c in &conditions {
            let old = before.and_then(|b| b.conditions.iter().find(|o| o.type_ == c.type_));
            // a condition never observed counts as having been Unknown
            let was = old.map_or("Unknown", |o| o.status.as_str());
            if was != c.status {
                let mut l = vec![
                    ("type", c.type_.clone()),
                    ("status", c.status.clone()),
                    ("reason", c.reason.clone()),
                ];
                self.families[&kind]
                    .transitions
                    .get_or_create(&[l.clone(), extra.clone()].concat())
                    .inc();
                if let Some((group, k)) = kind.deprecated() {
                    l.extend([("group", group.to_string()), ("kind", k.to_string())]);
                    self.deprecated.transitions.get_or_create(&l).inc();
                }
            }
            // a condition not there before is counted, not told (as operatorpkg does)
            let Some(old) = old.filter(|o| o.status != c.status) else {
                continue;
            };
            let held = (c.since - old.since).max(0) as f64;
            let mut l = vec![
                ("type", c.type_.clone()),
                ("status", old.status.clone()),
                ("to_status", c.status.clone()),
            ];
            self.families[&kind]
                .transition_seconds
                .get_or_create(&[l.clone(), extra.clone()].concat())
                .observe(held);
            if let Some((group, k)) = kind.deprecated() {
                l.extend([("group", group.to_string()), ("kind", k.to_string())]);
                self.deprecated
                    .transition_seconds
                    .get_or_create(&l)
                    .observe(held);
            }
            events.push(transition_event(kind, &event_name, c, &old.status));
        }
        let finalizers: BTreeSet<String> = meta.finalizers.iter().flatten().cloned().collect();
        if let Some(before) = before {
            for lifted in before.finalizers.difference(&finalizers) {
                events.push(Event {
                    kind: kind.event_object(),
                    name: event_name.clone(),
                    warning: false,
                    reason: Cow::Borrowed("Finalized"),
                    message: format!("Finalized {lifted}"),
                });
            }
        }
        let deleting = meta.deletion_timestamp.as_ref().map(|t| t.0.as_second());
        objects.insert(
            key,
            Object {
                namespace,
                name,
                extra,
                conditions,
                finalizers,
                deleting,
            },
        );
        events
    }

    /// An object is gone (by its `namespace/name` key, the namespace empty when
    /// cluster-scoped): a `Finalized` Event for each finalizer it still held when last seen
    /// (the last one lifted deletes it at once, unseen), its termination's duration observed
    /// (counted from its deletion timestamp to `now`, Unix seconds), and its series gone at
    /// the next refresh.
    pub fn deleted(&mut self, kind: Kind, key: &str, now: i64) -> Vec<Event> {
        let gone = (self.objects.lock().unwrap_or_else(|e| e.into_inner()))
            .remove(&(kind, key.to_string()));
        let Some(gone) = gone else {
            return Vec::new();
        };
        let name = key.strip_prefix('/').unwrap_or(key);
        let events = (gone.finalizers.iter())
            .map(|lifted| Event {
                kind: kind.event_object(),
                name: name.to_string(),
                warning: false,
                reason: Cow::Borrowed("Finalized"),
                message: format!("Finalized {lifted}"),
            })
            .collect();
        let Some(since) = gone.deleting else {
            return events;
        };
        let took = (now - since).max(0) as f64;
        self.families[&kind]
            .termination_duration
            .get_or_create(&gone.extra)
            .observe(took);
        if let Some((group, k)) = kind.deprecated() {
            let l = vec![("group", group.to_string()), ("kind", k.to_string())];
            self.deprecated
                .termination_duration
                .get_or_create(&l)
                .observe(took);
        }
        events
    }

    /// Sets the time (Unix seconds) the per-object gauges are read at by the next scrape: one
    /// `count` and `current_status_seconds` sample per object and condition, one
    /// `termination_current_time_seconds` per object being deleted.
    pub fn refresh(&self, now: i64) {
        self.now.store(now, Ordering::Relaxed);
    }
}

/// The kind, metadata and conditions of a watched object this module follows.
pub fn read(object: &crate::watch::Object) -> Option<(Kind, &ObjectMeta, Vec<Seen>)> {
    use crate::watch::Object as W;
    let ours = |cs: &[kerf_api::Condition]| -> Vec<Seen> {
        (cs.iter())
            .map(|c| {
                let since = c.last_transition_time.as_deref();
                Seen::new(&c.type_, &c.status, &c.reason, &c.message, since)
            })
            .collect()
    };
    Some(match object {
        W::Node(n) => {
            let cs = (n.status.as_ref().and_then(|s| s.conditions.as_ref())).into_iter();
            let seen = cs
                .flatten()
                .map(|c| Seen {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone().unwrap_or_default(),
                    message: c.message.clone().unwrap_or_default(),
                    since: (c.last_transition_time.as_ref()).map_or(0, |t| t.0.as_second()),
                })
                .collect();
            (Kind::Node, &n.metadata, seen)
        }
        W::NodeClaim(c) => {
            let cs = (c.read.object.as_ref().ok()).and_then(|o| o.status.as_ref());
            let seen = cs.map(|s| ours(&s.conditions)).unwrap_or_default();
            (Kind::NodeClaim, kube::Resource::meta(&**c), seen)
        }
        W::NodePool(p) => {
            let cs = (p.read.object.as_ref().ok()).and_then(|o| o.status.as_ref());
            let seen = cs.map(|s| ours(&s.conditions)).unwrap_or_default();
            (Kind::NodePool, kube::Resource::meta(&**p), seen)
        }
        W::NodeClass(c) => {
            let cs = (c.read.object.as_ref().ok()).and_then(|o| o.status.as_ref());
            let seen = cs.map(|s| ours(&s.conditions)).unwrap_or_default();
            (Kind::NodeClass, kube::Resource::meta(&**c), seen)
        }
        W::CapacityBuffer(b) => {
            let cs = (b.read.object.as_ref().ok()).and_then(|o| o.status.as_ref());
            let seen = cs.map(|s| ours(&s.conditions)).unwrap_or_default();
            (Kind::CapacityBuffer, kube::Resource::meta(&**b), seen)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, finalizers: &[&str]) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            labels: Some([("karpenter.sh/nodepool".to_string(), "default".to_string())].into()),
            finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
            ..ObjectMeta::default()
        }
    }

    fn text(watch: &StatusWatch) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, watch.registry()).unwrap();
        out
    }

    /// As operatorpkg's status controller: no event the first time an object is seen; one
    /// per status change with Karpenter's message (none for a condition new on the object, nor
    /// for a reason alone); one per
    /// finalizer lifted; transitions counted (a condition first seen True counts once) and
    /// timed; the gauges say where each condition stands.
    #[test]
    fn a_conditions_changes_make_karpenters_events_and_series() {
        let mut w = StatusWatch::default();
        fn at(s: &str) -> Option<&str> {
            Some(s)
        }
        let first = w.observe(
            Kind::NodeClaim,
            &meta("default-a", &["karpenter.sh/termination"]),
            vec![
                Seen::new(
                    "Launched",
                    "True",
                    "Launched",
                    "",
                    at("2026-12-01T00:00:00Z"),
                ),
                Seen::new(
                    "Ready",
                    "Unknown",
                    "ReconcilingDependents",
                    "Initialized=Unknown",
                    at("2026-12-01T00:00:00Z"),
                ),
            ],
        );
        assert!(first.is_empty(), "{first:?}");
        let second = w.observe(
            Kind::NodeClaim,
            &meta("default-a", &[]),
            vec![
                Seen::new("Launched", "True", "Other", "", at("2026-12-01T00:00:00Z")),
                Seen::new("Ready", "True", "Ready", "", at("2026-12-01T00:00:30Z")),
                Seen::new(
                    "Registered",
                    "True",
                    "Registered",
                    "",
                    at("2026-12-01T00:00:30Z"),
                ),
            ],
        );
        // gone: every finalizer still held is told lifted
        let gone = w.deleted(Kind::NodeClaim, "/default-b", 0);
        assert!(gone.is_empty(), "never seen: {gone:?}");
        w.observe(
            Kind::NodeClaim,
            &meta("default-c", &["karpenter.sh/termination"]),
            Vec::new(),
        );
        let gone = w.deleted(Kind::NodeClaim, "/default-c", 0);
        let said: Vec<(String, String)> = (gone.iter())
            .map(|e| (e.name.clone(), e.message.clone()))
            .collect();
        assert_eq!(
            said,
            [(
                "default-c".to_string(),
                "Finalized karpenter.sh/termination".to_string()
            )]
        );
        let said: Vec<(String, String)> = second
            .iter()
            .map(|e| (e.reason.to_string(), e.message.clone()))
            .collect();
        assert_eq!(
            said,
            [
                (
                    "Ready".to_string(),
                    "Status condition transitioned, Type: Ready, Status: Unknown -> True, Reason: Ready".to_string()
                ),
                ("Finalized".to_string(), "Finalized karpenter.sh/termination".to_string()),
            ]
        );
        w.refresh(1_796_083_260); // 2026-12-01T00:01:00Z
        let out = text(&w);
        for line in [
            r#"operator_nodeclaim_status_condition_transitions_total{type="Launched",status="True",reason="Launched",karpenter_k8s_aws_ec2nodeclass="",karpenter_sh_nodepool="default"} 1"#,
            r#"operator_nodeclaim_status_condition_transitions_total{type="Ready",status="True",reason="Ready",karpenter_k8s_aws_ec2nodeclass="",karpenter_sh_nodepool="default"} 1"#,
            r#"operator_nodeclaim_status_condition_transition_seconds_sum{type="Ready",status="Unknown",to_status="True",karpenter_k8s_aws_ec2nodeclass="",karpenter_sh_nodepool="default"} 30.0"#,
            r#"operator_nodeclaim_status_condition_count{namespace="",name="default-a",type="Ready",status="True",reason="Ready",karpenter_k8s_aws_ec2nodeclass="",karpenter_sh_nodepool="default"} 1"#,
            r#"operator_nodeclaim_status_condition_current_status_seconds{namespace="",name="default-a",type="Ready",status="True",reason="Ready",karpenter_k8s_aws_ec2nodeclass="",karpenter_sh_nodepool="default"} 30.0"#,
            r#"operator_status_condition_transitions_total{type="Ready",status="True",reason="Ready",group="karpenter.sh",kind="NodeClaim"} 1"#,
        ] {
            assert!(out.contains(line), "no {line} in:\n{out}");
        }
        // the Unknown Ready's series went when it became True
        assert!(
            !out.contains(r#"status="Unknown",reason="ReconcilingDependents""#),
            "{out}"
        );
    }

    /// An object deleted: `termination_current_time_seconds` while it is, its duration
    /// observed once it is gone, and its series gone.
    #[test]
    fn a_termination_is_timed() {
        let mut w = StatusWatch::default();
        let mut m = meta("default", &[]);
        m.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-12-01T00:00:00Z".parse().unwrap(),
        ));
        let ready = Seen::new("Ready", "True", "Ready", "", Some("2026-11-30T00:00:00Z"));
        w.observe(Kind::NodePool, &m, vec![ready]);
        w.refresh(1_796_083_210);
        assert!(text(&w).contains(
            r#"operator_nodepool_termination_current_time_seconds{namespace="",name="default"} 10.0"#
        ));
        w.deleted(Kind::NodePool, "/default", 1_796_083_220);
        w.refresh(1_796_083_230);
        let out = text(&w);
        assert!(
            out.contains("operator_nodepool_termination_duration_seconds_sum 20.0"),
            "{out}"
        );
        assert!(out.contains(
            r#"operator_termination_duration_seconds_count{group="karpenter.sh",kind="NodePool"} 1"#
        ), "{out}");
        assert!(!out.contains(r#"name="default""#), "{out}");
    }
}
