//! kube-controller-manager's disruption controller, as far as Kerf reads it: each
//! PodDisruptionBudget's `status.expectedPods` is the scale of the controllers of the pods it
//! selects (a pod without a controller counts itself), so pods that went with their node
//! still count as expected until their controller has replaced them.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus;
use kerf_core::disruption::rules::pdb_selects;

use super::{World, owner_workload};

/// What the disruption controller needs to know between passes: whether anything it counts
/// (the pods, their workloads' scale, the budgets) changed since it last wrote. Counting every
/// budget over every pod at each settling round cost a twentieth of a 10,000-pod day.
pub(super) struct DisruptionController {
    /// A pod, a workload's scale or a budget changed since the last count.
    pub stale: bool,
}

impl Default for DisruptionController {
    fn default() -> DisruptionController {
        DisruptionController { stale: true }
    }
}

impl World {
    /// A pod came or went: the budgets that select it count again.
    pub(super) fn counted_by_budgets(&mut self, pod: &k8s_openapi::api::core::v1::Pod) {
        if self.api.objects.pdbs.values().any(|b| pdb_selects(b, pod)) {
            self.disruption.stale = true;
        }
    }

    /// Writes every budget's expected pod count where it changed, when what it counts changed.
    pub(super) fn update_pdb_status(&mut self) {
        if !std::mem::take(&mut self.disruption.stale) {
            return;
        }
        let mut changed = Vec::new();
        for pdb in self.api.objects.pdbs.values() {
            let mut scales: BTreeMap<&str, i64> = BTreeMap::new();
            let mut bare = 0;
            for p in self.api.pods.values().filter(|p| pdb_selects(pdb, &p.pod)) {
                match owner_workload(&p.pod).and_then(|w| self.workloads.specs.get_key_value(w)) {
                    Some((w, workload)) => {
                        scales.insert(w, workload.replicas);
                    }
                    None => bare += 1,
                }
            }
            let expected = scales.values().sum::<i64>() + bare;
            let expected = i32::try_from(expected).unwrap_or(i32::MAX);
            let status = pdb.status.as_ref();
            if status.is_none_or(|s| s.observed_generation.is_none() || s.expected_pods != expected)
            {
                let mut pdb = pdb.clone();
                pdb.status = Some(PodDisruptionBudgetStatus {
                    expected_pods: expected,
                    observed_generation: Some(pdb.metadata.generation.unwrap_or(1)),
                    ..status.cloned().unwrap_or_default()
                });
                changed.push(pdb);
            }
        }
        for pdb in changed {
            self.write(kerf_core::observe::Object::Pdb(Box::new(pdb)));
        }
    }
}
