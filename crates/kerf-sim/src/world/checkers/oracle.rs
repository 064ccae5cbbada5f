//! The arithmetic `--check` judges disruptions by, worked out again from the raw objects:
//! NodePool disruption budgets (with their own reading of cron windows) and
//! PodDisruptionBudgets as the Kubernetes disruption controller counts them.
//!
//! Nothing here calls Kerf's disruption code: an invariant that recomputed a budget with the
//! function that decided it would agree with that function's every mistake.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kerf_api::NodePool;
use kerf_api::nodepool::DisruptionReason;

use crate::kube_scheduler::selector_matches;

/// How many nodes of a NodePool with `nodes` nodes, `disrupting` of them already going,
/// its budgets let `reason` take at `unix_now`: the tightest active budget naming the reason
/// (or none), a percentage of the nodes rounded up; no limit when no active budget names it;
/// and nothing while any budget cannot be read (a schedule this reading rejects, a duration
/// without a schedule, an active budget's node count that is not one), as Karpenter's
/// `NodePool.MustGetAllowedDisruptions` fails closed. A schedule without a duration never
/// opens (Karpenter's `Budget.IsActive` looks for a firing within no time).
pub fn budget_room(
    np: &NodePool,
    reason: DisruptionReason,
    nodes: i64,
    disrupting: i64,
    unix_now: i64,
) -> i64 {
    let mut room = i64::from(i32::MAX);
    for b in &np.spec.disruption.budgets {
        let active = match (&b.schedule, &b.duration) {
            (None, None) => true,
            (Some(s), d) => {
                if expand(s).is_none() {
                    return 0;
                }
                window_open(s, d.map_or(0, |d| d.0.as_secs() as i64), unix_now)
            }
            (None, Some(_)) => return 0,
        };
        if !active {
            continue;
        }
        // (a count is read only inside the window, as Karpenter reads it)
        let count = match b.nodes.strip_suffix('%') {
            // ceil(nodes × p / 100)
            Some(p) => p.parse::<i64>().ok().map(|p| (nodes * p + 99) / 100),
            None => b.nodes.parse::<i64>().ok(),
        };
        let Some(count) = count else {
            return 0;
        };
        if b.reasons.is_empty() || b.reasons.contains(&reason) {
            room = room.min(count);
        }
    }
    (room - disrupting).max(0)
}

/// Whether every scheduled budget of the NodePool has a schedule this reading understands
/// (Karpenter allows no disruption under a budget whose schedule does not parse).
pub fn schedules_understood(np: &NodePool) -> bool {
    (np.spec.disruption.budgets.iter())
        .filter_map(|b| b.schedule.as_deref())
        .all(|s| expand(s).is_some())
}

/// Whether a budget window is open at `now`: the schedule fired at some minute `m` with
/// `now − duration < m ≤ now`. Checked minute by minute, the plainest reading there is.
fn window_open(schedule: &str, duration_secs: i64, now: i64) -> bool {
    let Some(fields) = expand(schedule) else {
        return false;
    };
    let mut minute = now.div_euclid(60) * 60;
    while minute > now - duration_secs {
        if fires(&fields, minute) {
            return true;
        }
        minute -= 60;
    }
    false
}

/// The allowed values of a cron line's five fields, and whether day-of-month and
/// day-of-week were both restricted (then either may match, as cron has it).
struct Fields {
    sets: [BTreeSet<u32>; 5],
    either_day: bool,
}

fn expand(schedule: &str) -> Option<Fields> {
    let line = match schedule.trim() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        other => other,
    };
    let parts: Vec<&str> = line.split_whitespace().collect();
    if parts.len() != 5 {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ];
    const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
    let ranges: [(u32, u32, &[&str], u32); 5] = [
        (0, 59, &[], 0),
        (0, 23, &[], 0),
        (1, 31, &[], 0),
        (1, 12, &MONTHS, 1),
        (0, 6, &DAYS, 0),
    ];
    let mut sets: [BTreeSet<u32>; 5] = Default::default();
    for (i, (part, (lo, hi, names, base))) in parts.iter().zip(ranges).enumerate() {
        let value = |s: &str| -> Option<u32> {
            let upper = s.to_ascii_uppercase();
            match names.iter().position(|n| *n == upper) {
                Some(p) => Some(p as u32 + base),
                None => s.parse().ok(),
            }
        };
        for item in part.split(',') {
            let (range, step) = match item.split_once('/') {
                Some((r, s)) => (r, s.parse::<u32>().ok().filter(|s| *s > 0)?),
                None => (item, 1),
            };
            let (from, to) = match range {
                "*" | "?" => (lo, hi),
                r => match r.split_once('-') {
                    Some((a, b)) => (value(a)?, value(b)?),
                    None if item.contains('/') => (value(r)?, hi),
                    None => (value(r)?, value(r)?),
                },
            };
            // Karpenter's cron (robfig's) knows no day-of-week 7
            if from < lo || to > hi || from > to {
                return None;
            }
            for v in (from..=to).step_by(step as usize) {
                sets[i].insert(v);
            }
        }
    }
    Some(Fields {
        sets,
        either_day: !parts[2].starts_with('*') && !parts[4].starts_with('*'),
    })
}

fn fires(f: &Fields, unix: i64) -> bool {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (minute, hour) = ((secs / 60 % 60) as u32, (secs / 3600) as u32);
    let (_, month, day) = civil(days);
    // 1970-01-01 was a Thursday
    let weekday = (days + 4).rem_euclid(7) as u32;
    let dom = f.sets[2].contains(&day);
    let dow = f.sets[4].contains(&weekday);
    let day_ok = if f.either_day { dom || dow } else { dom && dow };
    f.sets[0].contains(&minute) && f.sets[1].contains(&hour) && f.sets[3].contains(&month) && day_ok
}

/// (year, month 1–12, day 1–31) of a day count since 1970-01-01, by the proleptic
/// Gregorian calendar (Howard Hinnant's days-to-civil).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// A pod as the disruption controller sees it.
pub struct PodView<'a> {
    /// The pod object.
    pub pod: &'a Pod,
    /// Whether it runs on a Ready node (the controller's "healthy").
    pub healthy: bool,
    /// Replicas of its controlling workload, by the workload's name (`None` for a bare pod).
    pub workload: Option<(&'a str, i64)>,
}

/// The PodDisruptionBudget that forbids evicting `victim` now, if one does: one selecting
/// it whose `disruptionsAllowed` (healthy pods less the desired healthy count) is zero.
/// The expected count is the selected pods for an integer minAvailable, else the replicas
/// of their controllers, as the disruption controller computes it.
pub fn blocking_pdb<'a>(
    pdbs: &'a BTreeMap<String, PodDisruptionBudget>,
    pods: &[PodView<'_>],
    victim: &Pod,
) -> Option<&'a str> {
    let namespace = |p: &Pod| {
        p.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into())
    };
    pdbs.iter().find_map(|(name, pdb)| {
        let spec = pdb.spec.as_ref()?;
        let selector = spec.selector.as_ref()?;
        let selects = |p: &Pod| {
            pdb.metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into())
                == namespace(p)
                && selector_matches(
                    selector,
                    p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
                )
        };
        if !selects(victim) {
            return None;
        }
        let selected: Vec<&PodView<'_>> = pods.iter().filter(|v| selects(v.pod)).collect();
        let healthy = selected.iter().filter(|v| v.healthy).count() as i64;
        let scale = || {
            let mut seen = BTreeMap::new();
            let mut bare = 0;
            for v in &selected {
                match v.workload {
                    Some((w, replicas)) => {
                        seen.insert(w, replicas);
                    }
                    None => bare += 1,
                }
            }
            seen.values().sum::<i64>() + bare
        };
        let scaled = |v: &IntOrString, of: i64| match v {
            IntOrString::Int(n) => i64::from(*n),
            IntOrString::String(s) => {
                let p = s.trim_end_matches('%').parse::<i64>().unwrap_or(0);
                (of * p + 99) / 100
            }
        };
        let desired = match (&spec.max_unavailable, &spec.min_available) {
            (Some(max), _) => {
                let expected = scale();
                expected - scaled(max, expected)
            }
            (None, Some(IntOrString::Int(n))) => i64::from(*n),
            (None, Some(min)) => scaled(min, scale()),
            (None, None) => 0,
        };
        (healthy - desired <= 0).then_some(name.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-23 (a Monday) at the given hour and minute, UTC.
    fn monday(hour: i64, minute: i64) -> i64 {
        1_795_392_000 + hour * 3600 + minute * 60
    }

    #[test]
    fn civil_dates_and_weekdays() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(1_795_392_000 / 86_400), (2026, 11, 23));
        assert_eq!(civil(11_016), (2000, 2, 29));
        let f = expand("0 9 * * MON").unwrap();
        assert!(fires(&f, monday(9, 0)));
        assert!(!fires(&f, monday(9, 0) + 86_400));
    }

    #[test]
    fn windows_open_for_their_duration_after_each_firing() {
        // weekdays 09:00 for 8 hours
        let s = "0 9 * * 1-5";
        assert!(!window_open(s, 8 * 3600, monday(8, 59)));
        assert!(window_open(s, 8 * 3600, monday(9, 0)));
        assert!(window_open(s, 8 * 3600, monday(16, 59)));
        assert!(!window_open(s, 8 * 3600, monday(17, 0)));
        assert!(window_open("@hourly", 600, monday(3, 9)));
        assert!(!window_open("@hourly", 600, monday(3, 10)));
        assert!(window_open("*/15 * * * *", 60, monday(3, 45)));
        assert!(!window_open("*/15 * * * *", 60, monday(3, 46)));
        // day-of-month and day-of-week both restricted: either matches
        assert!(window_open("0 0 1 * MON", 60, monday(0, 0)));
        assert!(expand("0 0 * *").is_none());
        assert!(expand("61 * * * *").is_none());
    }

    fn pool(budgets: &str) -> NodePool {
        serde_yaml::from_str(&format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: p}}\nspec:\n  \
             template: {{spec: {{nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, \
             name: default}}, requirements: []}}}}\n  disruption: {{budgets: {budgets}}}\n"
        ))
        .unwrap()
    }

    #[test]
    fn budgets_take_the_tightest_active_one_rounded_up() {
        let np = pool("[{nodes: '25%'}, {nodes: '3', reasons: [Drifted]}]");
        // 25 % of 10 is 2.5, rounded up to 3; the Drifted budget does not apply to Empty
        assert_eq!(budget_room(&np, DisruptionReason::Empty, 10, 0, 0), 3);
        assert_eq!(budget_room(&np, DisruptionReason::Empty, 10, 2, 0), 1);
        assert_eq!(budget_room(&np, DisruptionReason::Drifted, 20, 0, 0), 3);
        let closed = pool("[{nodes: '0', schedule: '0 9 * * *', duration: 8h}]");
        assert_eq!(
            budget_room(&closed, DisruptionReason::Empty, 10, 0, monday(12, 0)),
            0
        );
        // outside the window no budget applies: no limit (Karpenter's MaxInt32)
        assert_eq!(
            budget_room(&closed, DisruptionReason::Empty, 11, 0, monday(18, 0)),
            i64::from(i32::MAX)
        );
        // a budget that cannot be read stops every reason
        let unreadable =
            pool("[{nodes: '0', schedule: '0 25 * * *', duration: 1h, reasons: [Drifted]}]");
        assert_eq!(
            budget_room(&unreadable, DisruptionReason::Empty, 10, 0, 0),
            0
        );
    }

    fn pod(name: &str, workload: &str) -> Pod {
        serde_yaml::from_str(&format!(
            "metadata: {{name: {name}, namespace: default, labels: {{app: {workload}}}}}"
        ))
        .unwrap()
    }

    fn pdb(spec: &str) -> BTreeMap<String, PodDisruptionBudget> {
        let b: PodDisruptionBudget = serde_yaml::from_str(&format!(
            "metadata: {{name: web, namespace: default}}\n\
             spec: {{selector: {{matchLabels: {{app: web}}}}, {spec}}}"
        ))
        .unwrap();
        BTreeMap::from([("default/web".to_string(), b)])
    }

    #[test]
    fn pod_disruption_budgets_count_replicas_not_just_pods_present() {
        let pods: Vec<Pod> = (0..3).map(|i| pod(&format!("web-{i}"), "web")).collect();
        // three of four replicas exist and are healthy: one is already unavailable
        let views: Vec<PodView<'_>> = pods
            .iter()
            .map(|p| PodView {
                pod: p,
                healthy: true,
                workload: Some(("web", 4)),
            })
            .collect();
        assert_eq!(
            blocking_pdb(&pdb("maxUnavailable: 1"), &views, &pods[0]),
            Some("default/web")
        );
        assert_eq!(
            blocking_pdb(&pdb("maxUnavailable: 2"), &views, &pods[0]),
            None
        );
        // an integer minAvailable counts the pods present
        assert_eq!(
            blocking_pdb(&pdb("minAvailable: 2"), &views, &pods[0]),
            None
        );
        assert!(blocking_pdb(&pdb("minAvailable: 3"), &views, &pods[0]).is_some());
        // a percentage of the replicas, rounded up: 75 % of 4 is 3
        assert!(blocking_pdb(&pdb("minAvailable: '75%'"), &views, &pods[0]).is_some());
        let other = pod("db-0", "db");
        assert_eq!(blocking_pdb(&pdb("minAvailable: 3"), &views, &other), None);
    }
}
