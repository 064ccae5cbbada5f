//! The settings an autoscaler runs with, as its Deployment sets them (`FEATURE_GATES`,
//! `PREFERENCE_POLICY`, …, Kerf's chart and Karpenter's alike): `kerf plan` plays a change
//! under the settings of the operator the cluster runs, not under defaults.

use std::collections::BTreeMap;

use serde_json::Value;

/// The environment variables a plan plays, by the scenario field each sets.
const PLAYED: [(&str, &str); 5] = [
    ("FEATURE_GATES", "featureGates"),
    ("PREFERENCE_POLICY", "preferencePolicy"),
    ("MIN_VALUES_POLICY", "minValuesPolicy"),
    (
        "CONSOLIDATION_MIN_SAVINGS_PER_HOUR",
        "consolidationMinSavingsPerHour",
    ),
    (
        "CONSOLIDATION_MIN_SAVINGS_PERCENT",
        "consolidationMinSavingsPercent",
    ),
];

/// One autoscaler Deployment's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorSettings {
    /// `Deployment namespace/name`.
    pub source: String,
    /// Whether it runs (replicas above zero, or unset).
    pub running: bool,
    /// The played variables set with a literal value, by name.
    pub env: BTreeMap<String, String>,
    /// The played variables set from a ConfigMap, Secret or field: not read.
    pub unread: Vec<String>,
}

impl OperatorSettings {
    /// The settings of a Deployment that runs an autoscaler (a container named `controller`,
    /// as both charts name it, or one with `FEATURE_GATES` in its environment); none for
    /// any other Deployment.
    pub fn of(deployment: &Value) -> Option<OperatorSettings> {
        let spec = deployment.get("spec")?;
        let containers = spec.pointer("/template/spec/containers")?.as_array()?;
        let env_of = |c: &Value| c.get("env").and_then(Value::as_array).cloned();
        let controller = containers.iter().find(|c| {
            let named = c.get("name").and_then(Value::as_str) == Some("controller");
            let gated = (env_of(c).into_iter().flatten())
                .any(|e| e.get("name").and_then(Value::as_str) == Some("FEATURE_GATES"));
            (named && is_autoscaler_image(c)) || gated
        })?;
        let mut env = BTreeMap::new();
        let mut unread = Vec::new();
        for e in env_of(controller).into_iter().flatten() {
            let Some(name) = e.get("name").and_then(Value::as_str) else {
                continue;
            };
            if !PLAYED.iter().any(|(n, _)| *n == name) {
                continue;
            }
            match e.get("value").and_then(Value::as_str) {
                Some(v) => {
                    env.insert(name.to_string(), v.to_string());
                }
                None if e.get("valueFrom").is_some() => unread.push(name.to_string()),
                None => {
                    env.insert(name.to_string(), String::new());
                }
            }
        }
        let meta = |k: &str| {
            (deployment.pointer(&format!("/metadata/{k}")))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Some(OperatorSettings {
            source: format!("Deployment {}/{}", meta("namespace"), meta("name")),
            running: spec.get("replicas").and_then(Value::as_i64) != Some(0),
            env,
            unread,
        })
    }

    /// The settings of the operator to plan under, from every autoscaler Deployment read:
    /// the running one (Kerf's before Karpenter's when both run, as after a takeover), with
    /// notes on what was passed over.
    pub fn choose(mut found: Vec<OperatorSettings>) -> (Option<OperatorSettings>, Vec<String>) {
        found.sort_by_key(|s| (!s.running, !s.source.contains("kerf"), s.source.clone()));
        let mut notes = Vec::new();
        let mut found = found.into_iter();
        let chosen = found.next();
        for other in found {
            notes.push(format!(
                "{} also runs an autoscaler; its settings are not played",
                other.source
            ));
        }
        if let Some(s) = &chosen {
            for name in &s.unread {
                notes.push(format!(
                    "{}: {name} is set from a reference, not read; its default is played",
                    s.source
                ));
            }
        }
        (chosen, notes)
    }

    /// The scenario fields these settings set, by field name, with a note for each value the
    /// simulator does not play (a gate it has no controller for, a value it cannot read).
    pub fn scenario_fields(
        &self,
        gates: impl Fn(&str) -> Result<serde_json::Map<String, Value>, String>,
    ) -> (serde_json::Map<String, Value>, Vec<String>) {
        let mut fields = serde_json::Map::new();
        let mut notes = Vec::new();
        for (name, field) in PLAYED {
            let Some(value) = self.env.get(name) else {
                continue;
            };
            let played = match name {
                "FEATURE_GATES" => {
                    let mut on = serde_json::Map::new();
                    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                        match gates(pair) {
                            Ok(g) => on.extend(g),
                            Err(e) => notes.push(format!("{}: FEATURE_GATES {e}", self.source)),
                        }
                    }
                    Some(Value::Object(on))
                }
                "PREFERENCE_POLICY" | "MIN_VALUES_POLICY" if !value.is_empty() => {
                    let known = match name {
                        "PREFERENCE_POLICY" => kerf_scheduling::Preferences::parse(value).err(),
                        _ => kerf_scheduling::MinValues::parse(value).err(),
                    };
                    match known {
                        None => Some(value.clone().into()),
                        Some(e) => {
                            notes.push(format!(
                                "{}: {name}: {e}; its default is played",
                                self.source
                            ));
                            None
                        }
                    }
                }
                _ => match value.parse::<f64>() {
                    Ok(v) if v.is_finite() => Some(v.into()),
                    _ if value.is_empty() => None,
                    _ => {
                        notes.push(format!(
                            "{}: {name}={value:?} is not a number; its default is played",
                            self.source
                        ));
                        None
                    }
                },
            };
            if let Some(v) = played {
                fields.insert(field.to_string(), v);
            }
        }
        (fields, notes)
    }

    /// `NAME=value` of each variable read, for the note that says where the settings came
    /// from.
    pub fn told(&self) -> String {
        let set: Vec<String> = (self.env.iter()).map(|(k, v)| format!("{k}={v}")).collect();
        if set.is_empty() {
            format!(
                "{}: no setting the plan plays is set; defaults",
                self.source
            )
        } else {
            format!("settings of {}: {}", self.source, set.join(" "))
        }
    }
}

/// Whether a container's image is Kerf's or Karpenter's controller.
fn is_autoscaler_image(container: &Value) -> bool {
    let image = container.get("image").and_then(Value::as_str).unwrap_or("");
    image.contains("kerf") || image.contains("karpenter")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::OperatorSettings;

    fn deployment(
        namespace: &str,
        name: &str,
        replicas: i64,
        env: serde_json::Value,
    ) -> serde_json::Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "controller", "image": format!("example.com/{name}:1"), "env": env},
            ]}}},
        })
    }

    #[test]
    fn the_running_kerf_is_chosen_and_its_settings_read_as_the_scenario_takes_them() {
        let kerf = deployment(
            "kube-system",
            "kerf",
            2,
            json!([
                {"name": "FEATURE_GATES", "value": "NodeRepair=true,ReservedCapacity=true"},
                {"name": "MIN_VALUES_POLICY", "value": "BestEffort"},
                {"name": "CONSOLIDATION_MIN_SAVINGS_PER_HOUR", "value": "0.5"},
                {"name": "PREFERENCE_POLICY", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}},
                {"name": "LOG_LEVEL", "value": "debug"},
            ]),
        );
        let karpenter = deployment(
            "karpenter",
            "karpenter",
            0,
            json!([
                {"name": "FEATURE_GATES", "value": "NodeRepair=false"},
            ]),
        );
        let web = json!({"kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
        assert_eq!(
            OperatorSettings::of(&web),
            None,
            "a workload is no autoscaler"
        );
        let found = [karpenter, kerf]
            .iter()
            .filter_map(OperatorSettings::of)
            .collect();
        let (chosen, notes) = OperatorSettings::choose(found);
        let chosen = chosen.expect("one chosen");
        assert_eq!(chosen.source, "Deployment kube-system/kerf");
        assert!(
            notes
                .iter()
                .any(|n| n.contains("karpenter/karpenter also runs")),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("PREFERENCE_POLICY is set from a reference")),
            "{notes:?}"
        );
        let gates = |pair: &str| match pair {
            "NodeRepair=true" => Ok(serde_json::Map::from_iter([(
                "NodeRepair".into(),
                true.into(),
            )])),
            other => Err(format!("{other}: not a gate the plan plays")),
        };
        let (fields, notes) = chosen.scenario_fields(gates);
        assert_eq!(
            serde_json::Value::Object(fields),
            json!({"featureGates": {"NodeRepair": true}, "minValuesPolicy": "BestEffort",
                "consolidationMinSavingsPerHour": 0.5})
        );
        assert_eq!(
            notes,
            [
                "Deployment kube-system/kerf: FEATURE_GATES ReservedCapacity=true: not a gate the plan plays"
            ]
        );
    }
}
