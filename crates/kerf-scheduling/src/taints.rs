//! Taints and tolerations, with kube-scheduler's matching rules.
//!
//! A NodePool's taints must all be tolerated by a pod that lands on its nodes (startup taints
//! need no toleration: they are expected to go away). Like Karpenter, Kerf treats
//! PreferNoSchedule as binding at first and tolerates it only as the last relaxation step.

use k8s_openapi::api::core::v1::Toleration;
use kerf_api::{Taint, TaintEffect};

fn effect_name(effect: TaintEffect) -> &'static str {
    match effect {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

/// Whether one toleration tolerates one taint: the effect matches (or the toleration names
/// none), the key matches (or the toleration names none, with `Exists`), and the value is
/// equal (`Equal`, the default) or anything (`Exists`).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != effect_name(taint.effect)
    {
        return false;
    }
    if let Some(key) = toleration.key.as_deref().filter(|k| !k.is_empty())
        && key != taint.key
    {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// The first taint the tolerations leave untolerated, if any. PreferNoSchedule taints are
/// skipped when `tolerate_prefer_no_schedule` (the last relaxation step) is set.
pub fn first_untolerated<'a>(
    tolerations: &[Toleration],
    taints: &'a [Taint],
    tolerate_prefer_no_schedule: bool,
) -> Option<&'a Taint> {
    taints.iter().find(|taint| {
        let relaxed = tolerate_prefer_no_schedule && taint.effect == TaintEffect::PreferNoSchedule;
        let tolerated = relaxed || tolerations.iter().any(|t| tolerates(t, taint));
        !tolerated
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect,
            time_added: None,
        }
    }

    fn toleration(
        key: Option<&str>,
        operator: Option<&str>,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: operator.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    }

    #[test]
    fn kube_scheduler_matching() {
        let gpu = taint("nvidia.com/gpu", Some("true"), TaintEffect::NoSchedule);
        // seed 001's GPU pool: only pods with the toleration land there
        assert!(tolerates(
            &toleration(
                Some("nvidia.com/gpu"),
                Some("Equal"),
                Some("true"),
                Some("NoSchedule")
            ),
            &gpu
        ));
        assert!(tolerates(
            &toleration(Some("nvidia.com/gpu"), None, Some("true"), None),
            &gpu
        ));
        assert!(tolerates(
            &toleration(Some("nvidia.com/gpu"), Some("Exists"), None, None),
            &gpu
        ));
        assert!(tolerates(
            &toleration(None, Some("Exists"), None, None),
            &gpu
        ));
        assert!(!tolerates(
            &toleration(Some("nvidia.com/gpu"), Some("Equal"), Some("false"), None),
            &gpu
        ));
        assert!(!tolerates(
            &toleration(
                Some("nvidia.com/gpu"),
                Some("Exists"),
                None,
                Some("NoExecute")
            ),
            &gpu
        ));
        assert!(!tolerates(
            &toleration(Some("other"), Some("Exists"), None, None),
            &gpu
        ));
        assert!(!tolerates(
            &toleration(Some("nvidia.com/gpu"), Some("Bogus"), Some("true"), None),
            &gpu
        ));
        // seed 002's spot pool: spot=only:NoSchedule
        let spot = taint("spot", Some("only"), TaintEffect::NoSchedule);
        assert!(tolerates(
            &toleration(
                Some("spot"),
                Some("Equal"),
                Some("only"),
                Some("NoSchedule")
            ),
            &spot
        ));
    }

    #[test]
    fn prefer_no_schedule_binds_until_relaxed() {
        let taints = [
            taint("dedicated", Some("batch"), TaintEffect::PreferNoSchedule),
            taint("gpu", None, TaintEffect::NoSchedule),
        ];
        let gpu_only = [toleration(Some("gpu"), Some("Exists"), None, None)];
        assert_eq!(
            first_untolerated(&gpu_only, &taints, false).map(|t| t.key.as_str()),
            Some("dedicated")
        );
        assert_eq!(first_untolerated(&gpu_only, &taints, true), None);
        assert_eq!(
            first_untolerated(&[], &taints, true).map(|t| t.key.as_str()),
            Some("gpu")
        );
    }
}
