//! Node repair as Karpenter v1.15 defines it: the cloud provider's repair policies (a node
//! condition and status, a reason filter, how long it is tolerated, how long the drain may
//! take, and whether the node is rebooted or replaced), which node conditions match them,
//! when a match is due, and which policy governs a node. The disruption controller turns due
//! nodes into repair commands.

use std::time::Duration;

/// What a node condition's reason must show for a policy to match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasonFilter {
    /// Any reason (`.*`).
    Any,
    /// A reason naming one of these NVIDIA XID codes (`.*XID(46|48|…).*`).
    Xid(&'static [u32]),
    /// No filter: the one fallback, for a condition no other policy of its type and status
    /// matches.
    Fallback,
}

impl ReasonFilter {
    fn matches(self, reason: &str) -> bool {
        match self {
            ReasonFilter::Any | ReasonFilter::Fallback => true,
            ReasonFilter::Xid(codes) => codes.iter().any(|c| reason.contains(&format!("XID{c}"))),
        }
    }

    /// The filter as Karpenter's log field `reason-regex` writes it.
    pub fn regex(self) -> String {
        match self {
            ReasonFilter::Any => ".*".into(),
            ReasonFilter::Fallback => String::new(),
            ReasonFilter::Xid(codes) => {
                let codes: Vec<String> = codes.iter().map(u32::to_string).collect();
                format!(".*XID({}).*", codes.join("|"))
            }
        }
    }
}

/// What repair does with a node a policy is due on (Karpenter's `RepairAction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RepairAction {
    /// Reboot the instance in place, its pods drained first (`RebootNode`).
    Reboot,
    /// Replace the node (`ReplaceNode`): the more disruptive, so it wins over a reboot.
    Replace,
}

impl RepairAction {
    /// The action as Karpenter's log field `action` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            RepairAction::Reboot => "RebootNode",
            RepairAction::Replace => "ReplaceNode",
        }
    }
}

/// A cloud provider's repair policy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RepairPolicy {
    /// The node condition's type.
    pub condition: &'static str,
    /// Its status.
    pub status: &'static str,
    /// What its reason must show.
    pub reason: ReasonFilter,
    /// How long the condition is tolerated before the node is replaced.
    pub toleration: Duration,
    /// How long the node's drain may take before its pods are deleted (replaced) or left to
    /// ride through the reboot (rebooted); its NodeClaim's own grace period, if shorter, wins.
    pub drain_bound: Duration,
    /// Reboot or replace.
    pub action: RepairAction,
}

const fn policy(
    condition: &'static str,
    status: &'static str,
    reason: ReasonFilter,
    toleration: Duration,
    drain_bound: Duration,
) -> RepairPolicy {
    RepairPolicy {
        condition,
        status,
        reason,
        toleration,
        drain_bound,
        action: RepairAction::Replace,
    }
}

/// The AWS provider's policies with its `RebootForRepair` gate on: the XID errors a reboot
/// clears reboot the node instead of replacing it.
const fn rebooting(mut policies: [RepairPolicy; 9]) -> [RepairPolicy; 9] {
    policies[2].action = RepairAction::Reboot;
    policies
}

const fn minutes(n: u64) -> Duration {
    Duration::from_secs(n * 60)
}

/// XID errors a reboot clears (Karpenter replaces the node unless rebooting is enabled).
const XID_REBOOTABLE: &[u32] = &[
    46, 48, 54, 62, 63, 95, 109, 110, 136, 140, 143, 155, 156, 158,
];
/// XID errors that need a new node.
const XID_FATAL: &[u32] = &[64, 74, 79, 119, 120];

/// The AWS provider's repair policies (Karpenter v1.15, node monitoring agent conditions),
/// in its order: all replace (see [`AWS_POLICIES_REBOOTING`]).
pub const AWS_POLICIES: [RepairPolicy; 9] = [
    policy(
        "Ready",
        "False",
        ReasonFilter::Any,
        minutes(30),
        minutes(10),
    ),
    policy(
        "Ready",
        "Unknown",
        ReasonFilter::Any,
        minutes(30),
        minutes(10),
    ),
    policy(
        "AcceleratedHardwareReady",
        "False",
        ReasonFilter::Xid(XID_REBOOTABLE),
        minutes(10),
        minutes(5),
    ),
    policy(
        "AcceleratedHardwareReady",
        "False",
        ReasonFilter::Xid(XID_FATAL),
        minutes(10),
        minutes(5),
    ),
    policy(
        "AcceleratedHardwareReady",
        "False",
        ReasonFilter::Fallback,
        minutes(30),
        minutes(10),
    ),
    policy(
        "StorageReady",
        "False",
        ReasonFilter::Any,
        minutes(30),
        minutes(10),
    ),
    policy(
        "NetworkingReady",
        "False",
        ReasonFilter::Any,
        minutes(30),
        minutes(10),
    ),
    policy(
        "KernelReady",
        "False",
        ReasonFilter::Any,
        minutes(30),
        minutes(10),
    ),
    policy(
        "ContainerRuntimeReady",
        "False",
        ReasonFilter::Any,
        minutes(30),
        minutes(10),
    ),
];

/// [`AWS_POLICIES`] under the AWS provider's `RebootForRepair` gate
/// (`AWS_FEATURE_GATES=RebootForRepair=true`).
pub const AWS_POLICIES_REBOOTING: [RepairPolicy; 9] = rebooting(AWS_POLICIES);

/// Karpenter's kwok provider's repair policies (v1.15): the kubelet's `Ready` False (the
/// fallback) or Unknown for 10 minutes, replaced at once; the simulated fault `KWOKUnhealthy`
/// for 30 seconds, replaced after a drain of at most 45; and the simulated fault
/// `KWOKRebootRequired` for 30 seconds, rebooted after a drain of at most a minute (ungated in
/// that provider).
pub const KWOK_POLICIES: [RepairPolicy; 4] = [
    policy(
        "Ready",
        "False",
        ReasonFilter::Fallback,
        minutes(10),
        Duration::ZERO,
    ),
    policy(
        "Ready",
        "Unknown",
        ReasonFilter::Any,
        minutes(10),
        Duration::ZERO,
    ),
    policy(
        "KWOKUnhealthy",
        "True",
        ReasonFilter::Any,
        Duration::from_secs(30),
        Duration::from_secs(45),
    ),
    RepairPolicy {
        action: RepairAction::Reboot,
        ..policy(
            "KWOKRebootRequired",
            "True",
            ReasonFilter::Any,
            Duration::from_secs(30),
            Duration::from_secs(60),
        )
    },
];

/// A node condition as repair reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCondition {
    /// Its type.
    pub kind: String,
    /// Its status.
    pub status: String,
    /// Its reason.
    pub reason: String,
    /// Its lastTransitionTime, on the controllers' clock.
    pub since: Duration,
}

/// A policy matched by a node condition.
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    /// The policy.
    pub policy: RepairPolicy,
    /// The condition (its own type, status and reason, also under the fallback).
    pub condition: NodeCondition,
    /// When the toleration ends: the condition's transition (not before the node was
    /// created) plus the policy's toleration.
    pub due: Duration,
}

/// Every policy a node's conditions match: per condition, the policies of its type and
/// status whose filter its reason passes, else the fallback (when any policy has its type and
/// status).
pub fn matches(
    policies: &[RepairPolicy],
    conditions: &[NodeCondition],
    node_created: Duration,
) -> Vec<Match> {
    let fallback = policies.iter().find(|p| p.reason == ReasonFilter::Fallback);
    let mut out = Vec::new();
    for c in conditions {
        let pair: Vec<&RepairPolicy> = (policies.iter())
            .filter(|p| p.condition == c.kind && p.status == c.status)
            .collect();
        if pair.is_empty() {
            continue;
        }
        let start = c.since.max(node_created);
        let specific: Vec<&RepairPolicy> = (pair.iter().copied())
            .filter(|p| p.reason != ReasonFilter::Fallback && p.reason.matches(&c.reason))
            .collect();
        let chosen = if specific.is_empty() {
            fallback.into_iter().collect()
        } else {
            specific
        };
        for p in chosen {
            out.push(Match {
                policy: *p,
                condition: c.clone(),
                due: start + p.toleration,
            });
        }
    }
    out
}

/// Whether any condition's type and status is one a policy watches (the unhealthy count the
/// 20 % guard takes, whatever the reason or toleration).
pub fn unhealthy(policies: &[RepairPolicy], conditions: &[NodeCondition]) -> bool {
    conditions
        .iter()
        .any(|c| (policies.iter()).any(|p| p.condition == c.kind && p.status == c.status))
}

/// How long repair tolerates unhealthy nodes' ageing before their order weighs it as much as
/// a priority step (Karpenter's ageing constant).
const AGEING: Duration = Duration::from_secs(30 * 60);

/// What repair does with a node at `now`, from its matches.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The match that governs: the most disruptive action's (a replacement over a reboot),
    /// then the earliest due, then the smaller condition type.
    pub governing: Match,
    /// What is done: the governing policy's action, unless escalated by the caller.
    pub action: RepairAction,
    /// The drain bound: the shortest of the due policies'.
    pub drain_bound: Duration,
    /// Its place in line: how long past due, in ageing steps (more first).
    pub score: f64,
}

/// The decision for a node whose matches are `matches`, if any is due at `now`. No
/// toleration counts from before `not_before` (the end of the node's last reboot, so that a
/// fault a reboot did not clear is tolerated again before the next).
pub fn decide(matches: &[Match], now: Duration, not_before: Option<Duration>) -> Option<Decision> {
    let due: Vec<Match> = (matches.iter())
        .map(|m| Match {
            due: not_before.map_or(m.due, |t| m.due.max(t + m.policy.toleration)),
            ..m.clone()
        })
        .filter(|m| m.due <= now)
        .collect();
    let governing = due.iter().min_by(|a, b| {
        (b.policy.action.cmp(&a.policy.action))
            .then(a.due.cmp(&b.due))
            .then_with(|| a.condition.kind.cmp(&b.condition.kind))
    })?;
    let drain_bound = due
        .iter()
        .map(|m| m.policy.drain_bound)
        .min()
        .unwrap_or_default();
    let score = due
        .iter()
        .map(|m| now.saturating_sub(m.due).as_secs_f64() / AGEING.as_secs_f64())
        .fold(0.0, f64::max);
    Some(Decision {
        action: governing.policy.action,
        governing: governing.clone(),
        drain_bound,
        score,
    })
}

/// The share of a NodePool's nodes that may be unhealthy at once for repair to go on, in
/// percent (rounded up to whole nodes).
pub const UNHEALTHY_SHARE: usize = 20;

/// Whether a NodePool with `nodes` nodes, `unhealthy` of them unhealthy, is past the guard:
/// that is an outage to look at, not nodes to replace.
pub fn tripped(nodes: usize, unhealthy: usize) -> bool {
    unhealthy > (nodes * UNHEALTHY_SHARE).div_ceil(100)
}

/// A duration as Go's `time.Duration` prints it in Karpenter's logs (`5m0s`, `1h0m0s`).
pub fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

/// A condition type as Karpenter's metric label writes it (`AcceleratedHardwareReady` →
/// `accelerated_hardware_ready`).
pub fn snake_case(kind: &str) -> String {
    let mut out = String::new();
    for (i, ch) in kind.chars().enumerate() {
        if ch.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(kind: &str, status: &str, reason: &str, since: u64) -> NodeCondition {
        NodeCondition {
            kind: kind.into(),
            status: status.into(),
            reason: reason.into(),
            since: Duration::from_secs(since),
        }
    }

    #[test]
    fn an_xid_reason_is_due_sooner_than_an_unnamed_accelerator_fault() {
        let fatal = [condition(
            "AcceleratedHardwareReady",
            "False",
            "NvidiaXID79Error",
            100,
        )];
        let m = matches(&AWS_POLICIES, &fatal, Duration::ZERO);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].due, Duration::from_secs(100 + 600));
        assert_eq!(m[0].policy.drain_bound, Duration::from_secs(300));
        // a reason neither XID family names falls back: 30 minutes, a 10-minute drain
        let other = [condition(
            "AcceleratedHardwareReady",
            "False",
            "NvidiaXID142Error",
            100,
        )];
        let m = matches(&AWS_POLICIES, &other, Duration::ZERO);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].policy.reason, ReasonFilter::Fallback);
        assert_eq!(m[0].due, Duration::from_secs(100 + 1800));
        // a condition no policy watches matches nothing, and is not unhealthy
        let pressure = [condition("DiskPressure", "True", "", 0)];
        assert!(matches(&AWS_POLICIES, &pressure, Duration::ZERO).is_empty());
        assert!(!unhealthy(&AWS_POLICIES, &pressure));
    }

    #[test]
    fn the_toleration_counts_from_the_nodes_creation_at_the_earliest() {
        let old = [condition("Ready", "Unknown", "NodeStatusUnknown", 0)];
        let m = matches(&AWS_POLICIES, &old, Duration::from_secs(500));
        assert_eq!(m[0].due, Duration::from_secs(500 + 1800));
        assert_eq!(decide(&m, Duration::from_secs(2299), None), None);
        let d = decide(&m, Duration::from_secs(2300 + 900), None).expect("due");
        assert_eq!(d.governing.condition.kind, "Ready");
        assert_eq!(d.drain_bound, Duration::from_secs(600));
        assert!((d.score - 0.5).abs() < 1e-9, "{}", d.score);
    }

    #[test]
    fn the_shortest_drain_of_the_due_policies_bounds_the_drain() {
        let both = [
            condition("Ready", "False", "KubeletNotReady", 0),
            condition("AcceleratedHardwareReady", "False", "NvidiaXID48Error", 0),
        ];
        let m = matches(&AWS_POLICIES, &both, Duration::ZERO);
        let d = decide(&m, Duration::from_secs(3600), None).expect("due");
        assert_eq!(d.governing.condition.kind, "AcceleratedHardwareReady");
        assert_eq!(d.drain_bound, Duration::from_secs(300));
        assert_eq!(
            snake_case("AcceleratedHardwareReady"),
            "accelerated_hardware_ready"
        );
        assert_eq!(ReasonFilter::Xid(&[64, 74]).regex(), ".*XID(64|74).*");
    }

    #[test]
    fn a_replacement_wins_over_a_reboot_and_a_reboot_restarts_the_toleration() {
        let both = [
            condition("KWOKRebootRequired", "True", "Injected", 0),
            condition("KWOKUnhealthy", "True", "Injected", 10),
        ];
        let m = matches(&KWOK_POLICIES, &both, Duration::ZERO);
        // only the reboot is due: it governs
        let d = decide(&m, Duration::from_secs(35), None).expect("due");
        assert_eq!(d.action, RepairAction::Reboot);
        assert_eq!(d.drain_bound, Duration::from_secs(60));
        // both due: the replacement governs, though the reboot was due first
        let d = decide(&m, Duration::from_secs(45), None).expect("due");
        assert_eq!(d.action, RepairAction::Replace);
        assert_eq!(d.governing.condition.kind, "KWOKUnhealthy");
        assert_eq!(d.drain_bound, Duration::from_secs(45));
        // a reboot ended at 100: the fault is tolerated 30 s again from then
        let reboot = &m[..1];
        assert_eq!(
            decide(
                reboot,
                Duration::from_secs(129),
                Some(Duration::from_secs(100))
            ),
            None
        );
        let d = decide(
            reboot,
            Duration::from_secs(130),
            Some(Duration::from_secs(100)),
        );
        assert_eq!(d.map(|d| d.action), Some(RepairAction::Reboot));
        // the AWS gate turns the XID errors a reboot clears into reboots, and only those
        let xid = [condition(
            "AcceleratedHardwareReady",
            "False",
            "NvidiaXID48Error",
            0,
        )];
        let at = Duration::from_secs(600);
        let act = |p: &[RepairPolicy]| decide(&matches(p, &xid, Duration::ZERO), at, None);
        assert_eq!(
            act(&AWS_POLICIES).map(|d| d.action),
            Some(RepairAction::Replace)
        );
        assert_eq!(
            act(&AWS_POLICIES_REBOOTING).map(|d| d.action),
            Some(RepairAction::Reboot)
        );
        let fatal = [condition(
            "AcceleratedHardwareReady",
            "False",
            "NvidiaXID79Error",
            0,
        )];
        let m = matches(&AWS_POLICIES_REBOOTING, &fatal, Duration::ZERO);
        assert_eq!(
            decide(&m, at, None).map(|d| d.action),
            Some(RepairAction::Replace)
        );
    }

    #[test]
    fn more_than_a_fifth_of_a_nodepool_unhealthy_stops_repair() {
        assert!(!tripped(5, 1));
        assert!(tripped(5, 2));
        assert!(!tripped(10, 2));
        assert!(tripped(10, 3));
        assert!(tripped(3, 2));
    }
}
