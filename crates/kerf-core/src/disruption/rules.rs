//! Disruption rules that do not depend on how the cluster is stored: budgets, the
//! `karpenter.sh/do-not-disrupt` annotation, PodDisruptionBudgets, and when a node has been
//! quiet long enough to consolidate.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kerf_api::cron::CronSchedule;
use kerf_api::duration::NillableDuration;
use kerf_api::nodepool::{Budget, DisruptionReason};
use kerf_api::{NodePool, labels};

/// What a NodePool's budgets allow for a reason none of its active budgets names:
/// Karpenter's `math.MaxInt32`, which its `karpenter_nodepools_allowed_disruptions` gauge
/// shows as it is.
pub const UNLIMITED: usize = i32::MAX as usize;

/// How many of a NodePool's `nodes` its budgets let `reason` disrupt at once at `unix_now`
/// (UTC), before the nodes already disrupting are taken off: Karpenter's
/// `NodePool.MustGetAllowedDisruptions`. The fewest any active budget naming the reason (or
/// naming none) allows, a percentage of `nodes` rounded up; [`UNLIMITED`] when no active
/// budget names it; and none, for every reason, while any budget of the NodePool cannot be
/// read (a schedule cron rejects, a duration without a schedule): Karpenter fails closed.
pub fn allowed_disruptions(
    np: &NodePool,
    reason: DisruptionReason,
    nodes: usize,
    unix_now: u64,
) -> usize {
    allowances(np, [reason], nodes, unix_now)[0]
}

/// [`allowed_disruptions`] for each of `reasons`, each budget read once.
pub fn allowances<const N: usize>(
    np: &NodePool,
    reasons: [DisruptionReason; N],
    nodes: usize,
    unix_now: u64,
) -> [usize; N] {
    let mut allowed = [UNLIMITED; N];
    for b in &np.spec.disruption.budgets {
        let Ok(n) = budget_allows(b, nodes, unix_now) else {
            return [0; N];
        };
        for (reason, a) in reasons.iter().zip(&mut allowed) {
            if b.reasons.is_empty() || b.reasons.contains(reason) {
                *a = (*a).min(n);
            }
        }
    }
    allowed
}

/// What one budget allows at `unix_now`: [`UNLIMITED`] outside its window, else its count
/// or its percentage of `nodes` rounded up; an error, saying why, when it cannot be read. A
/// count is cut to 32 bits as Karpenter's `intstr` cuts it (a negative one allows none).
pub fn budget_allows(b: &Budget, nodes: usize, unix_now: u64) -> Result<usize, String> {
    if !budget_active(b, unix_now)? {
        return Ok(UNLIMITED);
    }
    let count = match b.nodes.strip_suffix('%') {
        Some(p) => p
            .parse::<usize>()
            .map(|p| nodes.saturating_mul(p).div_ceil(100)),
        None => (b.nodes.parse::<i64>()).map(|n| usize::try_from(n as i32).unwrap_or(0)),
    };
    count.map_err(|_| format!("nodes {:?} is neither a count nor a percentage", b.nodes))
}

/// Whether a budget applies at `unix_now`, as Karpenter's `Budget.IsActive` reads it: always
/// without a schedule or duration; inside a window `duration` long from each time the
/// schedule fires; never with a schedule but no duration (its windows last no time); always
/// with a schedule that never fires. A schedule that does not parse, or a duration without
/// a schedule, is an error.
pub fn budget_active(b: &Budget, unix_now: u64) -> Result<bool, String> {
    match (&b.schedule, b.duration) {
        (None, None) => Ok(true),
        (Some(s), d) => {
            let length = d.map_or(Duration::ZERO, |d| d.0);
            let cron = CronSchedule::parse(s).map_err(|e| format!("schedule {s:?}: {}", e.0))?;
            // Karpenter looks for the next firing after the window's start, and a schedule
            // that never fires gives it the zero time, which is not after now: always open
            Ok(!cron.ever_fires() || cron.active_at(unix_now, length))
        }
        (None, Some(_)) => Err("a duration without a schedule".into()),
    }
}

/// Whether a pod forbids voluntary disruption of its node at `now`: the annotation is
/// `"true"`, or a duration still running since the pod started (`started`, its
/// `status.startTime`), or a duration on a pod not started yet.
pub fn pod_blocks(pod: &Pod, started: Option<Duration>, now: Duration) -> bool {
    match do_not_disrupt(pod, started) {
        DoNotDisrupt::No | DoNotDisrupt::Invalid(_) => false,
        DoNotDisrupt::Always => true,
        DoNotDisrupt::Until(end) => now < end,
    }
}

/// What a pod's `karpenter.sh/do-not-disrupt` annotation says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DoNotDisrupt {
    /// Absent.
    No,
    /// A value that is neither `"true"` nor a positive duration: ignored, and why (Karpenter's
    /// words, Go's parse error among them).
    Invalid(String),
    /// `"true"`, or a duration on a pod that has not started.
    Always,
    /// A duration: until this instant (the pod's start plus the duration).
    Until(Duration),
}

/// Reads a pod's `karpenter.sh/do-not-disrupt` annotation as Karpenter's
/// `IsDoNotDisruptActive` does: `"true"` blocks; a positive duration blocks for that long
/// after the pod started (`started`: its `status.startTime`), and for as long as it has no
/// start time (Karpenter fails safe); any other value does not block.
pub fn do_not_disrupt(pod: &Pod, started: Option<Duration>) -> DoNotDisrupt {
    let Some(v) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::DO_NOT_DISRUPT))
    else {
        return DoNotDisrupt::No;
    };
    if v == "true" {
        return DoNotDisrupt::Always;
    }
    match kerf_api::duration::parse_go_duration_nanos(v) {
        Ok(nanos) if nanos > 0 => {
            let d = Duration::from_nanos(nanos.unsigned_abs());
            started.map_or(DoNotDisrupt::Always, |s| DoNotDisrupt::Until(s + d))
        }
        Ok(_) => DoNotDisrupt::Invalid(format!("duration {v:?} must be positive")),
        Err(e) => DoNotDisrupt::Invalid(format!("failed to parse {v:?} as a duration: {e}")),
    }
}

/// The event Karpenter publishes on a pod as it reads the pod's `karpenter.sh/do-not-disrupt`
/// (`IsDoNotDisruptActive`): reason, message and whether it is a warning; none for a pod
/// without the annotation, with `"true"`, or not started.
pub fn do_not_disrupt_event(
    dnd: &DoNotDisrupt,
    now: Duration,
    epoch: Duration,
) -> Option<(&'static str, String, bool)> {
    match dnd {
        DoNotDisrupt::Until(end) if now < *end => Some((
            "DoNotDisruptUntil",
            format!(
                "The karpenter.sh/do-not-disrupt grace period will elapse at {}",
                crate::clock::kubernetes_time(*end + epoch)
            ),
            false,
        )),
        DoNotDisrupt::Until(_) => Some((
            "DoNotDisruptGracePeriodElapsed",
            "The karpenter.sh/do-not-disrupt grace period has elapsed, pod is now disruptable"
                .to_string(),
            false,
        )),
        DoNotDisrupt::Invalid(why) => Some((
            "InvalidDoNotDisruptAnnotation",
            format!("Invalid karpenter.sh/do-not-disrupt annotation: {why}, ignoring annotation"),
            true,
        )),
        DoNotDisrupt::No | DoNotDisrupt::Always => None,
    }
}

/// A pod's `status.startTime` (when its kubelet took it), from the Unix epoch.
pub fn pod_started(pod: &Pod) -> Option<Duration> {
    let at = pod.status.as_ref()?.start_time.as_ref()?.0.as_millisecond();
    Some(Duration::from_millis(u64::try_from(at).ok()?))
}

/// The order a draining node's pods go in: non-critical pods before critical ones, and
/// within each, workload pods before daemonset pods (which serve the others to the end).
/// Critical means the `system-cluster-critical` or `system-node-critical` priority class.
pub fn drain_tier(pod: &Pod, daemon: bool) -> u8 {
    let critical = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|c| c == "system-cluster-critical" || c == "system-node-critical");
    u8::from(critical) * 2 + u8::from(daemon)
}

/// Whether a node carries `karpenter.sh/do-not-disrupt: "true"`.
pub fn node_blocks(annotations: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(labels::DO_NOT_DISRUPT))
        .is_some_and(|v| v == "true")
}

/// How many more pods a PodDisruptionBudget lets go, given how many pods it selects
/// (`selected`) and how many of those are running on a ready node (`healthy`).
///
/// The number of pods expected is the one kube-controller-manager's disruption controller
/// wrote to `status.expectedPods` (the scale of the pods' controllers), when it has written
/// one: pods deleted with their node and not yet replaced are still expected, so they count
/// as unavailable. Without a status, the selected pods are all that is known.
pub fn pdb_allowance(pdb: &PodDisruptionBudget, selected: usize, healthy: usize) -> usize {
    let expected = pdb
        .status
        .as_ref()
        .filter(|s| s.observed_generation.is_some())
        .and_then(|s| usize::try_from(s.expected_pods).ok())
        .unwrap_or(selected);
    let spec = pdb.spec.as_ref();
    let amount = |v: &IntOrString| -> usize {
        match v {
            IntOrString::Int(n) => usize::try_from(*n).unwrap_or(0),
            IntOrString::String(s) => s
                .strip_suffix('%')
                .and_then(|p| p.parse::<usize>().ok())
                .map_or(0, |p| (expected * p).div_ceil(100)),
        }
    };
    if let Some(min) = spec.and_then(|s| s.min_available.as_ref()) {
        return healthy.saturating_sub(amount(min));
    }
    if let Some(max) = spec.and_then(|s| s.max_unavailable.as_ref()) {
        let unavailable = expected.saturating_sub(healthy);
        return amount(max).saturating_sub(unavailable);
    }
    // no field set: the API server's default is minAvailable 1
    healthy.saturating_sub(1)
}

/// Whether a PodDisruptionBudget selects a pod.
pub fn pdb_selects(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    let same_ns = pdb.metadata.namespace.as_deref().unwrap_or("default")
        == pod.metadata.namespace.as_deref().unwrap_or("default");
    let selector = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
    let Some(sel) = selector.filter(|_| same_ns) else {
        return false;
    };
    // read in place: the simulator asks this of every budget and pod at each change
    let labels = pod.metadata.labels.as_ref();
    let label = |k: &String| labels.and_then(|l| l.get(k));
    let matches_labels = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| label(k) == Some(v));
    let matches_exprs = sel.match_expressions.iter().flatten().all(|e| {
        let value = label(&e.key);
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    matches_labels && matches_exprs
}

/// When a node quiet since `last_event` becomes consolidatable, if ever.
pub fn consolidatable_at(np: &NodePool, last_event: Duration) -> Option<Duration> {
    match np.spec.disruption.consolidate_after {
        NillableDuration::Never => None,
        NillableDuration::After(d) => Some(last_event + d),
    }
}

/// Karpenter's annotation a pod's owner sets to steer consolidation away from (or toward)
/// its node.
pub const DISRUPTION_COST_ANNOTATION: &str = "karpenter.sh/disruption-cost";
/// The ReplicaSet controller's annotation, read when the one above is absent.
pub const POD_DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// What evicting a pod costs, as Karpenter weighs it: 1, plus its disruption-cost (else
/// pod-deletion-cost) annotation over 2^27, plus its priority over 2^25, within [-10, 10].
/// A value that is not a 32-bit integer is ignored. With `PodDeletionCostManagement` on
/// (`deletion_cost_managed`) the pod-deletion-cost is Kerf's own ranking, never read back.
pub fn eviction_cost(pod: &Pod, deletion_cost_managed: bool) -> f64 {
    let annotations = pod.metadata.annotations.as_ref();
    let annotated = |key: &str| {
        let text = annotations.and_then(|a| a.get(key))?;
        Some(text.parse::<i32>().ok())
    };
    let steer = annotated(DISRUPTION_COST_ANNOTATION)
        .or_else(|| (!deletion_cost_managed).then(|| annotated(POD_DELETION_COST_ANNOTATION))?)
        .flatten()
        .unwrap_or(0);
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    let cost = 1.0 + f64::from(steer) / 2f64.powi(27) + f64::from(priority) / 2f64.powi(25);
    cost.clamp(-10.0, 10.0)
}

/// What disrupting a node costs, as Karpenter's Balanced policy weighs it: 1 for the node,
/// plus each pod that would move at its [`eviction_cost`], none below zero.
pub fn node_disruption_cost<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    deletion_cost_managed: bool,
) -> f64 {
    1.0 + pods
        .into_iter()
        .map(|p| eviction_cost(p, deletion_cost_managed).max(0.0))
        .sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_tiers_put_critical_and_daemon_pods_last() {
        let with_class = |class: Option<&str>| Pod {
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                priority_class_name: class.map(str::to_string),
                ..Default::default()
            }),
            ..Pod::default()
        };
        let plain = with_class(None);
        let critical = with_class(Some("system-node-critical"));
        let other = with_class(Some("high"));
        assert_eq!(drain_tier(&plain, false), 0);
        assert_eq!(drain_tier(&other, false), 0);
        assert_eq!(drain_tier(&plain, true), 1);
        assert_eq!(drain_tier(&critical, false), 2);
        assert_eq!(drain_tier(&critical, true), 3);
    }

    #[test]
    fn eviction_costs_weigh_annotations_and_priority_as_karpenter_does() {
        let pod = |annotations: &[(&str, &str)], priority: Option<i32>| Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                annotations: Some(
                    (annotations.iter())
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                priority,
                ..Default::default()
            }),
            ..Pod::default()
        };
        assert_eq!(eviction_cost(&pod(&[], None), false), 1.0);
        let steered = pod(&[(DISRUPTION_COST_ANNOTATION, "134217728")], None);
        assert_eq!(eviction_cost(&steered, false), 2.0);
        assert_eq!(eviction_cost(&steered, true), 2.0);
        // disruption-cost wins over pod-deletion-cost; the latter counts alone
        let both = [
            (DISRUPTION_COST_ANNOTATION, "0"),
            (POD_DELETION_COST_ANNOTATION, "134217728"),
        ];
        assert_eq!(eviction_cost(&pod(&both, None), false), 1.0);
        let deletion = [(POD_DELETION_COST_ANNOTATION, "-134217728")];
        assert_eq!(eviction_cost(&pod(&deletion, None), false), 0.0);
        // with PodDeletionCostManagement on, the annotation is Kerf's ranking, not a cost
        assert_eq!(eviction_cost(&pod(&deletion, None), true), 1.0);
        // priority 2^25 adds one; a billion is clamped at ten
        assert_eq!(eviction_cost(&pod(&[], Some(33_554_432)), false), 2.0);
        assert_eq!(eviction_cost(&pod(&[], Some(1_000_000_000)), false), 10.0);
        // a bad value is ignored, not a failure
        let bad = [(DISRUPTION_COST_ANNOTATION, "lots")];
        assert_eq!(eviction_cost(&pod(&bad, None), false), 1.0);
        let negative = pod(&[(DISRUPTION_COST_ANNOTATION, "-2147483648")], None);
        assert_eq!(
            node_disruption_cost([&negative, &pod(&[], None)], false),
            2.0
        );
    }

    fn pool(budgets: &str) -> NodePool {
        let yaml = format!(
            r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: p}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements: []
  disruption:
    consolidateAfter: 1m
    budgets: {budgets}
"#
        );
        serde_yaml::from_str(&yaml).unwrap()
    }

    #[test]
    fn budgets_take_the_smallest_active_one_naming_the_reason() {
        let np = pool(r#"[{nodes: "20%"}, {nodes: "3", reasons: [Drifted]}]"#);
        assert_eq!(allowed_disruptions(&np, DisruptionReason::Empty, 11, 0), 3);
        assert_eq!(
            allowed_disruptions(&np, DisruptionReason::Drifted, 100, 0),
            3
        );
        let zero = pool(r#"[{nodes: "0"}]"#);
        assert_eq!(
            allowed_disruptions(&zero, DisruptionReason::Underutilized, 50, 0),
            0
        );
        // a reason no budget names, or no budget at all: no limit (not a default 10%)
        let drift_only = pool(r#"[{nodes: "0", reasons: [Drifted]}]"#);
        assert_eq!(
            allowed_disruptions(&drift_only, DisruptionReason::Empty, 30, 0),
            UNLIMITED
        );
        assert_eq!(
            allowed_disruptions(&pool("[]"), DisruptionReason::Empty, 30, 0),
            UNLIMITED
        );
        // business hours (09:00–17:00 UTC) allow nothing; outside them, no limit
        let window = pool(r#"[{nodes: "0", schedule: "0 9 * * *", duration: 8h}]"#);
        let day = 20_454 * 86_400;
        let at = |h: u64| day + h * 3600;
        assert_eq!(
            allowed_disruptions(&window, DisruptionReason::Empty, 30, at(10)),
            0
        );
        assert_eq!(
            allowed_disruptions(&window, DisruptionReason::Empty, 30, at(20)),
            UNLIMITED
        );
        // a budget that cannot be read stops every reason, whatever it names
        let unreadable = pool(
            r#"[{nodes: "0", schedule: "61 * * * *", duration: 1h, reasons: [Drifted]}, {nodes: "10"}]"#,
        );
        assert_eq!(
            allowed_disruptions(&unreadable, DisruptionReason::Empty, 30, at(10)),
            0
        );
        let orphan = pool(r#"[{nodes: "5", duration: 1h}]"#);
        assert_eq!(
            allowed_disruptions(&orphan, DisruptionReason::Empty, 30, at(10)),
            0
        );
        // a schedule without a duration never opens
        let instant = pool(r#"[{nodes: "0", schedule: "@hourly"}, {nodes: "4"}]"#);
        assert_eq!(
            allowed_disruptions(&instant, DisruptionReason::Empty, 30, at(10)),
            4
        );
    }

    #[test]
    fn do_not_disrupt_is_true_or_a_running_duration() {
        let pod = |v: &str| -> Pod {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p", "annotations": {labels::DO_NOT_DISRUPT: v}}})).unwrap()
        };
        let m = Duration::from_secs(60);
        assert!(pod_blocks(&pod("true"), Some(Duration::ZERO), 100 * m));
        assert!(pod_blocks(&pod("30m"), Some(10 * m), 39 * m));
        assert!(!pod_blocks(&pod("30m"), Some(10 * m), 40 * m));
        // a pod not started yet is kept; a zero duration and other values keep nothing
        assert!(pod_blocks(&pod("30m"), None, 100 * m));
        assert!(!pod_blocks(&pod("0s"), Some(10 * m), 10 * m));
        assert!(!pod_blocks(&pod("false"), Some(Duration::ZERO), m));
    }

    #[test]
    fn pdb_allowances_follow_min_available_and_max_unavailable() {
        let pdb = |spec: serde_json::Value| -> PodDisruptionBudget {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "b", "namespace": "default"}, "spec": spec})).unwrap()
        };
        assert_eq!(
            pdb_allowance(&pdb(serde_json::json!({"minAvailable": 2})), 3, 3),
            1
        );
        assert_eq!(
            pdb_allowance(&pdb(serde_json::json!({"minAvailable": "100%"})), 3, 3),
            0
        );
        assert_eq!(
            pdb_allowance(&pdb(serde_json::json!({"maxUnavailable": 1})), 3, 2),
            0
        );
        assert_eq!(
            pdb_allowance(&pdb(serde_json::json!({"maxUnavailable": "50%"})), 4, 4),
            2
        );
        // eight replicas expected, five of them gone with their node: three selected and
        // healthy is two short of maxUnavailable 1
        let mut gone = pdb(serde_json::json!({"maxUnavailable": 1}));
        gone.status = serde_json::from_value(
            serde_json::json!({"observedGeneration": 1, "expectedPods": 8, "currentHealthy": 3,
                "desiredHealthy": 7, "disruptionsAllowed": 0}),
        )
        .unwrap();
        assert_eq!(pdb_allowance(&gone, 3, 3), 0);
        let p =
            pdb(serde_json::json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}));
        let pod: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "x", "namespace": "default", "labels": {"app": "db"}}})).unwrap();
        assert!(pdb_selects(&p, &pod));
    }
}
