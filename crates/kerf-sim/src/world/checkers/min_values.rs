//! The minValues oracle: read from the NodeClaim object as stored, its NodePool object and
//! the catalog's instance type labels, never from Kerf's solver.

use std::collections::{BTreeMap, BTreeSet};

use kerf_api::{NodeClaim, labels};
use kerf_scheduling::MinValues;

use super::{Checkers, Sight, SimError};

impl Checkers {
    /// A NodeClaim just stored meets its NodePool's minValues: the instance types it may
    /// launch as carry at least that many distinct values of each key. Under BestEffort it
    /// may carry fewer, and then it must say so (`karpenter.sh/nodeclaim-min-values-relaxed`
    /// is `"true"` and its own minValues no more than what it carries); under Strict it
    /// never may.
    pub(in crate::world) fn check_min_values(
        &mut self,
        seen: &Sight<'_>,
        object: &NodeClaim,
    ) -> Result<(), SimError> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let Some(pool) = (object.metadata.labels.as_ref()).and_then(|l| l.get(labels::NODEPOOL))
        else {
            return Ok(());
        };
        let Some(np) = seen.api.objects.node_pools.get(pool).cloned() else {
            return Ok(());
        };
        if np.spec.replicas.is_some() {
            // a static NodePool's NodeClaims are not scheduled
            return Ok(());
        }
        let mins: Vec<(String, i32)> = (np.spec.template.spec.requirements.iter())
            .filter_map(|r| r.min_values.map(|m| (r.key.clone(), m)))
            .collect();
        if mins.is_empty() {
            return Ok(());
        }
        let requirements = &object.spec.requirements;
        let options: BTreeSet<&str> = requirements
            .iter()
            .filter(|r| r.key == labels::INSTANCE_TYPE)
            .flat_map(|r| r.values.iter().map(String::as_str))
            .collect();
        let catalog = seen.catalog(&object.spec.node_class_ref.name);
        let type_labels: BTreeMap<&str, &BTreeMap<String, String>> = catalog
            .iter()
            .filter(|t| options.contains(t.name()))
            .map(|t| (t.name(), &t.labels))
            .collect();
        let relaxed = (object.metadata.annotations.as_ref())
            .and_then(|a| a.get(labels::MIN_VALUES_RELAXED))
            .is_some_and(|v| v == "true");
        let best_effort = seen.scenario.spec.min_values_policy == MinValues::BestEffort;
        for (key, min) in mins {
            let given = if key == labels::INSTANCE_TYPE {
                type_labels.len()
            } else {
                let values: BTreeSet<&String> =
                    type_labels.values().filter_map(|l| l.get(&key)).collect();
                values.len()
            };
            if given >= min as usize {
                continue;
            }
            let own = requirements
                .iter()
                .filter(|r| r.key == key)
                .filter_map(|r| r.min_values)
                .min();
            let said = relaxed && own.is_some_and(|m| m as usize <= given);
            if !(best_effort && said) {
                return Err(seen.violation(format!(
                    "nodeclaim {name} of nodepool {pool} may launch as {given} distinct {key} \
                     value(s), below its minValues {min}{}",
                    if best_effort {
                        " without saying it was relaxed"
                    } else {
                        " (MIN_VALUES_POLICY=Strict)"
                    }
                )));
            }
        }
        Ok(())
    }
}
