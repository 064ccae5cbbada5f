//! The Helm charts: `helm lint` and `helm template` (helm built from the Go module proxy) with
//! default and seed-like values, the rendered manifests applied to a real kube-apiserver, and
//! the CRD chart kept equal to the CRDs Kerf generates. The RBAC is exercised by the operator
//! itself in e2e.rs (the walkthrough runs under exactly the chart's ServiceAccount).

mod support;

use std::path::PathBuf;

use kerf_operator::settings::SETTINGS_NOT_ACTED_ON;
use serde_json::Value;
use support::{ControlPlane, root, run_helm};

/// Renders charts/kerf as release `kerf` in kube-system with these extra arguments; each
/// document as JSON.
fn render(extra: &[&str]) -> Result<Vec<Value>, String> {
    let mut args = vec![
        "template",
        "kerf",
        "charts/kerf",
        "--namespace",
        "kube-system",
    ];
    args.extend(extra);
    let text = run_helm(&args)?;
    Ok(documents(&text))
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .filter_map(|d| serde::Deserialize::deserialize(d).ok())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// The Deployment's container env, in order: each variable's name and literal value (`""`
/// for one taken from a fieldRef).
fn env_of(deployment: &Value) -> Vec<(String, String)> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let value = e["value"].as_str().unwrap_or("").to_string();
            (e["name"].as_str().unwrap_or("").to_string(), value)
        })
        .collect()
}

/// The rendered Deployment's env, from a successful render.
fn deployment_env(extra: &[&str]) -> Vec<(String, String)> {
    let docs = render(extra).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
    env_of(kind(&docs, "Deployment")[0])
}

fn get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Karpenter v1.15.0's own chart values, from the Go module cache (where
/// scripts/install-test-deps.sh puts the module, building scripts/karpenter-hash over it).
fn karpenters_values() -> PathBuf {
    const MODULE: &str = "github.com/aws/karpenter-provider-aws@v1.15.0";
    let hint = "run scripts/install-test-deps.sh (scripts/e2e-cluster.sh karpenter-hash fetches the module)";
    let cache = ["go", "/usr/local/go/bin/go"]
        .iter()
        .find_map(|go| {
            let out = std::process::Command::new(go)
                .args(["env", "GOMODCACHE"])
                .output()
                .ok()?;
            let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (out.status.success() && !dir.is_empty()).then_some(dir)
        })
        .unwrap_or_else(|| panic!("no `go env GOMODCACHE` (Go not installed?): {hint}"));
    let values = PathBuf::from(cache)
        .join(MODULE)
        .join("charts/karpenter/values.yaml");
    assert!(
        values.is_file(),
        "{} is missing: Karpenter v1.15.0's chart values are read from the Go module cache; {hint}",
        values.display()
    );
    values
}

/// Flags that set Kerf's image back after a Karpenter values file pinned Karpenter's.
const KERF_IMAGE: [&str; 6] = [
    "--set",
    "controller.image.repository=ghcr.io/kerf-autoscaler/kerf-operator",
    "--set",
    "controller.image.tag=",
    "--set",
    "controller.image.digest=",
];

/// Every leaf of a values tree (a scalar, a list, or an empty map) by its path of keys.
fn leaves(value: &Value, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, Value)>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                path.push(key.clone());
                leaves(child, path, out);
                path.pop();
            }
        }
        _ => out.push((path.clone(), value.clone())),
    }
}

fn values_file(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Checks that the controller starts on what the chart wrote: each variable it acts on given
/// as its flag (`BATCH_IDLE_DURATION` as `--batch-idle-duration`) to the operator's own parser
/// (the ones it does not act on are only logged, and have no flag).
fn the_controller_accepts(env: &[(String, String)]) {
    use clap::Parser;
    let not_acted_on: Vec<&str> = SETTINGS_NOT_ACTED_ON.iter().map(|(n, _)| *n).collect();
    let mut args = vec!["kerf-operator".to_string()];
    for (name, value) in env {
        if not_acted_on.contains(&name.as_str())
            || (name.starts_with("LEADER_ELECTION_") && value.is_empty())
        {
            continue;
        }
        args.push(format!(
            "--{}={value}",
            name.to_lowercase().replace('_', "-")
        ));
    }
    let settings = kerf_operator::settings::Settings::try_parse_from(&args)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    settings
        .validate()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(settings.feature_gates.unknown.is_empty(), "{args:?}");
}

/// Seed 004's `helm upgrade --install` flags, Karpenter's value names.
const SEED_VALUES: [&str; 12] = [
    "--set",
    "settings.clusterName=my-cluster",
    "--set",
    "settings.interruptionQueue=my-cluster",
    "--set",
    "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::111122223333:role/KarpenterControllerRole-my-cluster",
    "--set",
    "controller.resources.requests.cpu=1",
    "--set",
    "settings.featureGates.spotToSpotConsolidation=true",
    "--set",
    "serviceMonitor.enabled=true",
];

#[test]
fn the_charts_lint_and_a_cluster_name_is_required() {
    run_helm(&["lint", "charts/kerf", "--set", "settings.clusterName=x"])
        .unwrap_or_else(|e| panic!("helm lint charts/kerf: {e}"));
    run_helm(&["lint", "charts/kerf-crd"]).unwrap_or_else(|e| panic!("{e}"));
    let e = render(&[]).unwrap_err();
    assert!(e.contains("settings.clusterName is required"), "{e}");
}

#[test]
fn a_value_of_the_wrong_kind_is_refused_by_its_path() {
    for (value, path) in [
        ("replicas=two", "/replicas"),
        ("logLevel=verbose", "/logLevel"),
        (
            "settings.batchIdleDuration=soon",
            "/settings/batchIdleDuration",
        ),
        (
            "settings.featureGates.spotToSpotConsolidation=yes",
            "/settings/featureGates/spotToSpotConsolidation",
        ),
    ] {
        let e = render(&["--set", "settings.clusterName=c", "--set", value]).expect_err(value);
        assert!(e.contains(&format!("at '{path}'")), "{value}: {e}");
    }
    // a key that is not Karpenter v1.15's (its chart has no `webhook` since v1.0) or Kerf's
    // is refused by its name, at any depth
    let karpenter = values_file(&karpenters_values());
    assert!(karpenter.get("webhook").is_none());
    for (value, at, name) in [
        ("webhook.enabled=false", "''", "webhook"),
        (
            "settings.minValuePolicy=BestEffort",
            "'/settings'",
            "minValuePolicy",
        ),
        (
            "settings.featureGates.nodeRepiar=true",
            "'/settings/featureGates'",
            "nodeRepiar",
        ),
        ("controller.image.name=x", "'/controller/image'", "name"),
        (
            "podSecurityContext.fsgroup=1",
            "'/podSecurityContext'",
            "fsgroup",
        ),
    ] {
        let e = render(&["--set", "settings.clusterName=c", "--set", value]).expect_err(value);
        assert!(
            e.contains(&format!(
                "at {at}: additional properties '{name}' not allowed"
            )),
            "{value}: {e}"
        );
    }
}

#[test]
fn every_key_of_karpenters_values_is_in_kerfs_with_karpenters_default() {
    let mut theirs = Vec::new();
    leaves(
        &values_file(&karpenters_values()),
        &mut Vec::new(),
        &mut theirs,
    );
    let ours = values_file(&root().join("charts/kerf/values.yaml"));
    assert!(theirs.len() > 80, "{} leaves", theirs.len());
    // Kerf's own image and object names, on purpose
    let own = [
        "controller.image.repository",
        "controller.image.tag",
        "controller.image.digest",
        "podDisruptionBudget.name",
    ];
    let mut missing = Vec::new();
    let mut differ = Vec::new();
    for (path, value) in &theirs {
        let name = path.join(".");
        let held = path.iter().try_fold(&ours, |v, key| v.get(key));
        match held {
            None => missing.push(name),
            Some(held) if held != value && !own.contains(&name.as_str()) => {
                differ.push(format!("{name}: Karpenter's {value}, Kerf's {held}"))
            }
            Some(_) => {}
        }
    }
    assert!(
        missing.is_empty(),
        "Karpenter v1.15's keys missing from charts/kerf/values.yaml: {missing:?}"
    );
    assert!(
        differ.is_empty(),
        "defaults differing from Karpenter v1.15's: {differ:?}"
    );
}

#[test]
fn karpenters_own_values_file_renders_and_a_misspelt_key_is_named() {
    let karpenter = karpenters_values();
    let file = karpenter.to_str().expect("path");
    let mut args = vec!["-f", file, "--set", "settings.clusterName=c"];
    args.extend(KERF_IMAGE);
    let docs = render(&args).unwrap_or_else(|e| panic!("-f {file}: {e}"));
    let deployment = kind(&docs, "Deployment")[0];
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        spec["containers"][0]["image"],
        "ghcr.io/kerf-autoscaler/kerf-operator:0.1.0"
    );
    assert_eq!(spec["schedulerName"], "default-scheduler");
    assert!(spec.get("initContainers").is_none());
    let env = env_of(deployment);
    // Karpenter's defaults are Kerf's: the same gates as Karpenter's chart writes, and none of
    // the settings Kerf does not act on
    assert_eq!(
        get(&env, "FEATURE_GATES"),
        Some(
            "ReservedCapacity=true,SpotToSpotConsolidation=false,NodeRepair=false,\
             NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false,\
             TerminateFirstDrift=false,TerminateFirstRepair=false,\
             PodDeletionCostManagement=false"
        )
    );
    for (name, _) in SETTINGS_NOT_ACTED_ON {
        assert!(get(&env, name).is_none(), "{name} written: {env:?}");
    }
    the_controller_accepts(&env);
    // a misspelt key beside that file stops the render, naming it
    let mut typo = args.clone();
    typo.extend(["--set", "settings.minValuePolicy=BestEffort"]);
    let e = render(&typo).expect_err("settings.minValuePolicy");
    assert!(
        e.contains("at '/settings': additional properties 'minValuePolicy' not allowed"),
        "{e}"
    );
    // as does a misspelt key in a values file
    let dir = std::env::temp_dir().join(format!("kerf-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let typo_file = dir.join("typo.yaml");
    std::fs::write(
        &typo_file,
        "settings:\n  clusterName: c\n  batchIdelDuration: 2s\n",
    )
    .unwrap();
    let e = render(&["-f", typo_file.to_str().unwrap()]).expect_err("batchIdelDuration");
    assert!(e.contains("'batchIdelDuration' not allowed"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_scheduling_policies_reach_the_controller() {
    let env = deployment_env(&["--set", "settings.clusterName=c"]);
    assert_eq!(get(&env, "PREFERENCE_POLICY"), Some("Respect"));
    assert_eq!(get(&env, "MIN_VALUES_POLICY"), Some("Strict"));
    let env = deployment_env(&[
        "--set",
        "settings.clusterName=c",
        "--set",
        "settings.minValuesPolicy=BestEffort",
        "--set",
        "settings.preferencePolicy=Ignore",
    ]);
    assert_eq!(get(&env, "PREFERENCE_POLICY"), Some("Ignore"));
    assert_eq!(get(&env, "MIN_VALUES_POLICY"), Some("BestEffort"));
    the_controller_accepts(&env);
    // case-sensitive, as Karpenter's
    for value in [
        "settings.preferencePolicy=ignore",
        "settings.minValuesPolicy=bestEffort",
    ] {
        let e = render(&["--set", "settings.clusterName=c", "--set", value]).expect_err(value);
        let path = value.split('=').next().unwrap().replace('.', "/");
        assert!(e.contains(&format!("at '/{path}'")), "{value}: {e}");
    }
}

#[test]
fn every_feature_gate_is_written_and_unimplemented_ones_stay_false() {
    let env = deployment_env(&["--set", "settings.clusterName=c"]);
    let gates = get(&env, "FEATURE_GATES").expect("FEATURE_GATES");
    for gate in [
        "ReservedCapacity=true",
        "SpotToSpotConsolidation=false",
        "NodeRepair=false",
        "NodeOverlay=false",
        "StaticCapacity=false",
        "CapacityBuffer=false",
        "TerminateFirstDrift=false",
        "TerminateFirstRepair=false",
        "PodDeletionCostManagement=false",
    ] {
        assert!(gates.split(',').any(|g| g == gate), "{gate} not in {gates}");
    }
    assert_eq!(gates.split(',').count(), 9, "{gates}");
    assert_eq!(
        get(&env, "AWS_FEATURE_GATES"),
        Some("NodeClassCEL=false,DRANVIDIAGPU=false,DRAEFA=false,RebootForRepair=false")
    );
    // the implemented gates turn on, and ReservedCapacity off
    let env = deployment_env(&[
        "--set",
        "settings.clusterName=c",
        "--set",
        "settings.featureGates.reservedCapacity=false",
        "--set",
        "settings.featureGates.spotToSpotConsolidation=true",
        "--set",
        "settings.featureGates.nodeRepair=true",
        "--set",
        "settings.featureGates.nodeOverlay=true",
        "--set",
        "settings.featureGates.staticCapacity=true",
        "--set",
        "settings.featureGates.terminateFirstDrift=true",
        "--set",
        "settings.featureGates.terminateFirstRepair=true",
        "--set",
        "settings.featureGates.podDeletionCostManagement=true",
        "--set",
        "settings.featureGates.capacityBuffer=true",
        "--set",
        "settings.awsFeatureGates.draEFA=false",
        "--set",
        "settings.awsFeatureGates.rebootForRepair=true",
    ]);
    assert_eq!(
        get(&env, "FEATURE_GATES"),
        Some(
            "ReservedCapacity=false,SpotToSpotConsolidation=true,NodeRepair=true,\
             NodeOverlay=true,StaticCapacity=true,CapacityBuffer=true,\
             TerminateFirstDrift=true,TerminateFirstRepair=true,\
             PodDeletionCostManagement=true"
        )
    );
    the_controller_accepts(&env);
    let gates =
        kerf_operator::settings::FeatureGates::parse(get(&env, "FEATURE_GATES").unwrap()).unwrap();
    assert!(gates.spot_to_spot && gates.node_repair && gates.node_overlay && gates.static_capacity);
    assert!(gates.terminate_first_drift && gates.terminate_first_repair);
    assert!(gates.pod_deletion_cost && gates.capacity_buffer);
    assert!(!gates.reserved_capacity);
    let aws = get(&env, "AWS_FEATURE_GATES").unwrap();
    assert!(kerf_operator::settings::reboot_for_repair(aws), "{aws}");
    // what Kerf does not implement is refused at helm time, by its path
    for path in [
        "settings.awsFeatureGates.nodeClassCEL",
        "settings.awsFeatureGates.draNVIDIAGPU",
        "settings.awsFeatureGates.draEFA",
        "settings.enableDRA",
    ] {
        let set = format!("{path}=true");
        let e = render(&["--set", "settings.clusterName=c", "--set", &set]).expect_err(&set);
        assert!(
            e.contains(&format!("at '/{}'", path.replace('.', "/"))),
            "{set}: {e}"
        );
    }
    let e = render(&[
        "--set",
        "settings.clusterName=c",
        "--set",
        "settings.ignoreDRARequests=false",
    ])
    .expect_err("ignoreDRARequests=false");
    assert!(e.contains("at '/settings/ignoreDRARequests'"), "{e}");
    // Karpenter's chart refuses legacy repair with terminate-first repair; so does Kerf's,
    // even past the schema
    let e = render(&[
        "--skip-schema-validation",
        "--set",
        "settings.clusterName=c",
        "--set",
        "settings.legacyNodeRepair=true",
        "--set",
        "settings.featureGates.terminateFirstRepair=true",
    ])
    .expect_err("legacyNodeRepair with terminateFirstRepair");
    assert!(
        e.contains("settings.legacyNodeRepair and settings.featureGates.terminateFirstRepair"),
        "{e}"
    );
}

#[test]
fn settings_kerf_does_not_act_on_are_written_only_when_changed() {
    let not_acted_on: Vec<&str> = SETTINGS_NOT_ACTED_ON.iter().map(|(n, _)| *n).collect();
    let env = deployment_env(&["--set", "settings.clusterName=c"]);
    for (name, _) in &env {
        assert!(
            !not_acted_on.contains(&name.as_str()),
            "{name} written by default"
        );
    }
    // Karpenter's default values written out are defaults too
    let env = deployment_env(&[
        "--set",
        "settings.clusterName=c",
        "--set",
        "settings.amiRefreshInterval=1m",
        "--set-json",
        "logOutputPaths=[\"stdout\"]",
        "--set-json",
        "logErrorOutputPaths=[]",
    ]);
    for (name, _) in &env {
        assert!(
            !not_acted_on.contains(&name.as_str()),
            "{name} written for a default"
        );
    }
    for (set, name, value) in [
        (
            "logOutputPaths={stdout,/tmp/log}",
            "LOG_OUTPUT_PATHS",
            "stdout,/tmp/log",
        ),
        (
            "logErrorOutputPaths={stdout}",
            "LOG_ERROR_OUTPUT_PATHS",
            "stdout",
        ),
        ("settings.eksControlPlane=true", "EKS_CONTROL_PLANE", "true"),
        (
            "settings.legacyNodeRepair=true",
            "LEGACY_NODE_REPAIR",
            "true",
        ),
        (
            "settings.disableClusterStateObservability=true",
            "DISABLE_CLUSTER_STATE_OBSERVABILITY",
            "true",
        ),
        (
            "settings.amiRefreshInterval=5m",
            "AMI_REFRESH_INTERVAL",
            "5m",
        ),
        (
            "settings.subnetRefreshInterval=90s",
            "SUBNET_REFRESH_INTERVAL",
            "90s",
        ),
        (
            "settings.securityGroupRefreshInterval=1h",
            "SECURITY_GROUP_REFRESH_INTERVAL",
            "1h",
        ),
    ] {
        assert!(not_acted_on.contains(&name), "{name}");
        let env = deployment_env(&["--set", "settings.clusterName=c", "--set", set]);
        assert_eq!(get(&env, name), Some(value), "{set}");
        let others: Vec<&String> = env
            .iter()
            .map(|(n, _)| n)
            .filter(|n| not_acted_on.contains(&n.as_str()) && *n != name)
            .collect();
        assert!(others.is_empty(), "{set}: {others:?}");
        the_controller_accepts(&env);
    }
    // acted on, and written as Karpenter's chart writes them: only when true
    for (value, name) in [
        ("disableDryRun", "DISABLE_DRY_RUN"),
        ("enableZonalShift", "ENABLE_ZONAL_SHIFT"),
    ] {
        let env = deployment_env(&["--set", "settings.clusterName=c"]);
        assert_eq!(get(&env, name), None);
        let set = format!("settings.{value}=true");
        let env = deployment_env(&["--set", "settings.clusterName=c", "--set", &set]);
        assert_eq!(get(&env, name), Some("true"));
        assert!(!not_acted_on.contains(&name));
        the_controller_accepts(&env);
    }
    // the refresh intervals are at least a minute, as Karpenter validates them
    for value in ["30s", "59s", "0", "-1m", "1ms"] {
        let set = format!("settings.amiRefreshInterval={value}");
        let e = render(&["--set", "settings.clusterName=c", "--set-string", &set]).expect_err(&set);
        assert!(
            e.contains("at '/settings/amiRefreshInterval'"),
            "{set}: {e}"
        );
    }
}

#[test]
fn batch_windows_take_any_go_duration() {
    for value in [
        "0", "1.5s", "500us", "500µs", "-1s", "1h2m3.5s", ".5s", "+2s",
    ] {
        let set = format!("settings.batchIdleDuration={value}");
        let env = deployment_env(&["--set", "settings.clusterName=c", "--set-string", &set]);
        assert_eq!(get(&env, "BATCH_IDLE_DURATION"), Some(value), "{set}");
        the_controller_accepts(&env);
    }
    // empty, or the number 0, writes nothing (as Karpenter's chart): the default applies
    for set in ["settings.batchMaxDuration=", "settings.batchMaxDuration=0"] {
        let env = deployment_env(&["--set", "settings.clusterName=c", "--set", set]);
        assert_eq!(get(&env, "BATCH_MAX_DURATION"), None, "{set}");
    }
    for value in ["soon", "5", "1x", "1.2.3s", "s"] {
        let set = format!("settings.batchMaxDuration={value}");
        let e = render(&["--set", "settings.clusterName=c", "--set-string", &set]).expect_err(&set);
        assert!(e.contains("at '/settings/batchMaxDuration'"), "{set}: {e}");
    }
    // the memory overhead is a fraction below 1, as the controller reads it
    let e = render(&[
        "--set",
        "settings.clusterName=c",
        "--set",
        "settings.vmMemoryOverheadPercent=1",
    ])
    .expect_err("vmMemoryOverheadPercent=1");
    assert!(e.contains("at '/settings/vmMemoryOverheadPercent'"), "{e}");
}

/// Values for the pod-spec keys of Karpenter's chart.
const POD_VALUES: &str = r#"
schedulerName: my-scheduler
initContainers:
  - name: wait
    image: busybox
    command: [sh, -c, "true"]
controller:
  containerName: ""
  securityContext:
    appArmorProfile: {type: RuntimeDefault}
    seLinuxOptions: {level: "s0:c123,c456"}
    seccompProfile: {type: RuntimeDefault}
  extraVolumeMounts: [{name: shared, mountPath: /shared}]
  sidecarVolumeMounts: [{name: side, mountPath: /side}]
  sidecarContainer:
    - name: proxy
      image: busybox
      volumeMounts: [{name: own, mountPath: /own}]
extraVolumes: [{name: shared, emptyDir: {}}, {name: side, emptyDir: {}}, {name: own, emptyDir: {}}]
serviceMonitor:
  enabled: true
  sampleLimit: 5000
affinity:
  podAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 10
        podAffinityTerm: {topologyKey: topology.kubernetes.io/zone}
settings:
  clusterName: "{{ .Release.Name }}-cluster"
"#;

fn pod_values_file() -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "kerf-chart-pod-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("values.yaml");
    std::fs::write(&file, POD_VALUES).unwrap();
    (dir, file)
}

#[test]
fn karpenters_pod_spec_keys_are_acted_on() {
    let (dir, file) = pod_values_file();
    let file = file.to_str().unwrap();
    let docs = render(&["-f", file, "--api-versions", "monitoring.coreos.com/v1"])
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(&dir);
    let deployment = kind(&docs, "Deployment")[0];
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(spec["schedulerName"], "my-scheduler");
    assert_eq!(spec["initContainers"][0]["name"], "wait");
    let controller = &spec["containers"][0];
    assert_eq!(controller["name"], "controller");
    let security = &controller["securityContext"];
    assert_eq!(security["appArmorProfile"]["type"], "RuntimeDefault");
    assert_eq!(security["seLinuxOptions"]["level"], "s0:c123,c456");
    assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(security["readOnlyRootFilesystem"], true);
    let sidecar = &spec["containers"][1];
    assert_eq!(sidecar["name"], "proxy");
    let mounts: Vec<&str> = sidecar["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(mounts, ["own", "shared", "side"]);
    let term = &spec["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        [0]["podAffinityTerm"];
    assert_eq!(
        term["labelSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "kerf"
    );
    // settings may hold templates, as in Karpenter's chart
    assert_eq!(
        get(&env_of(deployment), "CLUSTER_NAME"),
        Some("kerf-cluster")
    );
    let monitor = kind(&docs, "ServiceMonitor")[0];
    assert_eq!(monitor["spec"]["sampleLimit"], 5000);
    // no ServiceMonitor where prometheus-operator's API is not served
    let docs = render(&[
        "--set",
        "settings.clusterName=c",
        "--set",
        "serviceMonitor.enabled=true",
    ])
    .unwrap();
    assert!(kind(&docs, "ServiceMonitor").is_empty());
}

#[test]
fn seed_values_render_as_karpenters_chart_would() {
    // the ServiceMonitor is made where prometheus-operator's API is served
    let mut seed = SEED_VALUES.to_vec();
    seed.extend(["--api-versions", "monitoring.coreos.com/v1"]);
    let docs = render(&seed).unwrap_or_else(|e| panic!("{e}"));
    let deployment = kind(&docs, "Deployment")[0];
    let env = env_of(deployment);
    let get = |name: &str| get(&env, name);
    assert_eq!(get("CLUSTER_NAME"), Some("my-cluster"));
    assert_eq!(get("INTERRUPTION_QUEUE"), Some("my-cluster"));
    assert_eq!(get("BATCH_IDLE_DURATION"), Some("1s"));
    assert_eq!(get("BATCH_MAX_DURATION"), Some("10s"));
    assert_eq!(
        get("FEATURE_GATES"),
        Some(
            "ReservedCapacity=true,SpotToSpotConsolidation=true,NodeRepair=false,\
             NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false,\
             TerminateFirstDrift=false,TerminateFirstRepair=false,\
             PodDeletionCostManagement=false"
        )
    );
    the_controller_accepts(&env);
    assert_eq!(
        get("LEADER_ELECTION_NAME"),
        Some("karpenter-leader-election")
    );
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(spec["priorityClassName"], "system-cluster-critical");
    assert_eq!(spec["containers"][0]["resources"]["requests"]["cpu"], 1);
    // the default image is the one scripts/image.sh builds and names
    let name = std::process::Command::new(root().join("scripts/image.sh"))
        .arg("name")
        .output()
        .expect("scripts/image.sh name");
    assert_eq!(
        spec["containers"][0]["image"],
        String::from_utf8_lossy(&name.stdout).trim()
    );
    // kept off the nodes it manages, one replica per host and zone, each term selecting the
    // chart's pods
    let term = &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchExpressions"][0];
    assert_eq!(term["key"], "karpenter.sh/nodepool");
    assert_eq!(term["operator"], "DoesNotExist");
    let anti =
        &spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(
        anti["labelSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "kerf"
    );
    assert_eq!(
        spec["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"],
        "kerf"
    );
    // IRSA on the ServiceAccount the pods run as
    let sa = kind(&docs, "ServiceAccount")[0];
    assert_eq!(spec["serviceAccountName"], sa["metadata"]["name"]);
    assert!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
            .as_str()
            .is_some_and(|a| a.ends_with("KarpenterControllerRole-my-cluster"))
    );
    let monitor = kind(&docs, "ServiceMonitor")[0];
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http-metrics");
    let service = kind(&docs, "Service")[0];
    assert_eq!(service["spec"]["ports"][0]["port"], 8080);
    assert_eq!(kind(&docs, "PodDisruptionBudget").len(), 1);
    // one replica: no PodDisruptionBudget that would block every drain of its node
    let single = render(&["--set", "settings.clusterName=x", "--set", "replicas=1"]).unwrap();
    assert!(kind(&single, "PodDisruptionBudget").is_empty());
}

#[test]
fn the_crd_chart_holds_the_crds_kerf_generates() {
    // UPDATE_CHARTS=1 writes them after a change to the API types
    let update = std::env::var_os("UPDATE_CHARTS").is_some();
    for crd in kerf_api::crds::all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let (plural, group) = name.split_once('.').expect("plural.group");
        let file = format!("{group}_{plural}.yaml");
        let yaml = serde_yaml::to_string(&crd).expect("CRD as YAML");
        for dir in ["charts/kerf-crd/templates", "charts/kerf/crds"] {
            let path = root().join(dir).join(&file);
            if update {
                std::fs::write(&path, &yaml).expect("write chart CRD");
            }
            let held = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                held == yaml,
                "{} differs from `kerf crds`: run UPDATE_CHARTS=1 cargo test -p kerf-operator \
                 --test chart",
                path.display()
            );
        }
    }
}

#[test]
fn the_rendered_charts_apply_to_a_real_api_server() {
    let cp = ControlPlane::start("chart");
    // the CRD chart for real, as `helm install kerf-crd` would
    let crds = run_helm(&["template", "kerf-crd", "charts/kerf-crd"]).unwrap();
    cp.kubectl_ok(
        &["apply", "--server-side", "-f", "-"],
        Some(crds.as_bytes()),
    );
    cp.wait_for_crds();
    // the controller chart as `helm template charts/kerf --set settings.clusterName=my-cluster`
    // renders it, and with the seed's values (less the ServiceMonitor, whose CRD belongs to
    // prometheus-operator), through the server's admission and validation
    // and with Karpenter v1.15.0's own values file, and with every pod-spec key of Karpenter's
    // chart set
    let mut seed: Vec<&str> = SEED_VALUES.to_vec();
    seed.extend(["--set", "serviceMonitor.enabled=false"]);
    let karpenter = karpenters_values();
    let mut theirs = vec![
        "-f",
        karpenter.to_str().expect("path"),
        "--set",
        "settings.clusterName=my-cluster",
    ];
    theirs.extend(KERF_IMAGE);
    let (dir, pod_file) = pod_values_file();
    let pods = ["-f", pod_file.to_str().expect("path")];
    for values in [
        &["--set", "settings.clusterName=my-cluster"][..],
        &seed,
        &theirs,
        &pods,
    ] {
        let mut args = vec![
            "template",
            "kerf",
            "charts/kerf",
            "--namespace",
            "kube-system",
        ];
        args.extend(values);
        let rendered = run_helm(&args).unwrap();
        let out = cp.kubectl(
            &["apply", "--dry-run=server", "-f", "-"],
            Some(rendered.as_bytes()),
        );
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{values:?}: {}{said}",
            String::from_utf8_lossy(&out.stderr)
        );
        for object in [
            "deployment.apps/kerf",
            "clusterrole.rbac.authorization.k8s.io/kerf",
        ] {
            assert!(said.contains(object), "{said}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The book's settings page (`docs/src/settings.md`) between these two lines is generated here.
const SETTINGS_BEGIN: &str = "<!-- generated from crates/kerf-operator/src/settings.rs by the test the_books_settings_tables_are_the_operators -->";
const SETTINGS_END: &str = "<!-- end of generated tables -->";

/// One Markdown table cell: a single line, its pipes escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The settings tables as the operator's own parser defines them: every variable with its
/// flag, default and help, then the variables Karpenter has that Kerf reads only to log.
fn settings_tables() -> String {
    use clap::CommandFactory;
    let command = kerf_operator::settings::Settings::command();
    let mut out = String::from(
        "| Environment variable | Flag | Default | What it sets |\n|---|---|---|---|\n",
    );
    for arg in command.get_arguments() {
        let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) else {
            continue;
        };
        let default = arg
            .get_default_values()
            .iter()
            .filter(|v| !v.is_empty())
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(", ");
        let mut help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        // clap drops a one-line help's closing period
        if !help.ends_with('.') {
            help.push('.');
        }
        let choices: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if !choices.is_empty() {
            help.push_str(&format!(" One of {}.", choices.join(", ")));
        }
        out.push_str(&format!(
            "| `{}` | `--{long}` | {} | {} |\n",
            env.to_string_lossy(),
            if default.is_empty() {
                "–".into()
            } else {
                default
            },
            cell(&help)
        ));
    }
    out.push_str("\nKarpenter v1.15's settings that Kerf accepts and, when set, logs once at start as `setting not acted on`, with why:\n\n| Environment variable | Why Kerf does not act on it |\n|---|---|\n");
    for (name, why) in SETTINGS_NOT_ACTED_ON {
        out.push_str(&format!("| `{name}` | {} |\n", cell(why)));
    }
    out
}

#[test]
fn the_books_settings_tables_are_the_operators() {
    let path = root().join("docs/src/settings.md");
    let page = std::fs::read_to_string(&path).expect("docs/src/settings.md");
    let (Some(begin), Some(end)) = (page.find(SETTINGS_BEGIN), page.find(SETTINGS_END)) else {
        panic!("docs/src/settings.md lost its markers:\n{SETTINGS_BEGIN}\n{SETTINGS_END}");
    };
    let held = &page[begin + SETTINGS_BEGIN.len()..end];
    let generated = format!("\n{}", settings_tables());
    if held.trim() == generated.trim() {
        return;
    }
    if std::env::var_os("KERF_BLESS").is_some() {
        let page = format!(
            "{}{generated}{}",
            &page[..begin + SETTINGS_BEGIN.len()],
            &page[end..]
        );
        std::fs::write(&path, page).expect("write docs/src/settings.md");
        return;
    }
    let first = held
        .trim()
        .lines()
        .zip(generated.trim().lines())
        .find(|(a, b)| a != b);
    panic!(
        "docs/src/settings.md no longer matches the operator's settings (first difference: {first:?}); \
         rewrite it with KERF_BLESS=1 cargo test -p kerf-operator --test chart the_books_settings_tables_are_the_operators"
    );
}

/// The rows of the values table in charts/kerf/README.md (the book includes it): each row's
/// keys, spelt out (`serviceAccount.create`, `.name` is `serviceAccount.create` and
/// `serviceAccount.name`), and its default cell.
fn values_table_rows() -> Vec<(Vec<String>, String)> {
    let readme =
        std::fs::read_to_string(root().join("charts/kerf/README.md")).expect("chart README");
    let table = readme
        .split("ANCHOR: values")
        .nth(1)
        .and_then(|rest| rest.split("ANCHOR_END: values").next())
        .expect(
            "charts/kerf/README.md marks its values table with ANCHOR: values … ANCHOR_END: values",
        );
    let mut rows = Vec::new();
    for line in table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        assert!(
            cells.len() >= 3,
            "a values row of fewer than three cells: {line}"
        );
        let mut keys: Vec<String> = Vec::new();
        for key in cells[0].split(", ") {
            let key = key.trim().trim_matches('`');
            let full = match key.strip_prefix('.') {
                Some(tail) => {
                    let previous = keys
                        .last()
                        .unwrap_or_else(|| panic!("{line}: starts with a relative key"));
                    let parent = previous.rsplit_once('.').map_or("", |(p, _)| p);
                    // `.rollingUpdate.maxSurge` after `strategy.type` is `strategy.rollingUpdate.maxSurge`
                    let depth = tail.matches('.').count();
                    let parent =
                        (0..depth).fold(parent, |p, _| p.rsplit_once('.').map_or("", |(q, _)| q));
                    format!("{parent}.{tail}")
                }
                None => key.to_string(),
            };
            keys.push(full);
        }
        rows.push((keys, cells[1].trim().to_string()));
    }
    rows
}

/// A default as the table writes it: `true`, `""`, `{}`, `[stdout]`, `0.075`.
fn shown(value: &Value) -> String {
    match value {
        // a string YAML would read as another kind is quoted, as the file must write it
        Value::String(s)
            if s.is_empty() || serde_yaml::from_str::<Value>(s).is_ok_and(|v| !v.is_string()) =>
        {
            format!("\"{s}\"")
        }
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(|v| v.is_string()) && !items.is_empty() => format!(
            "[{}]",
            items
                .iter()
                .filter_map(|v| v.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

#[test]
fn the_values_table_names_every_value_with_its_default() {
    let ours = values_file(&root().join("charts/kerf/values.yaml"));
    let mut held = Vec::new();
    leaves(&ours, &mut Vec::new(), &mut held);
    let rows = values_table_rows();
    assert!(rows.len() > 40, "{} rows", rows.len());
    let named: Vec<&String> = rows.iter().flat_map(|(keys, _)| keys).collect();
    // every value is in some row (a row may name a whole map, such as `podSecurityContext`)
    let unnamed: Vec<String> = held
        .iter()
        .map(|(path, _)| path.join("."))
        .filter(|leaf| {
            !named
                .iter()
                .any(|k| leaf == *k || leaf.starts_with(&format!("{k}.")))
        })
        .collect();
    assert!(
        unnamed.is_empty(),
        "values missing from the table in charts/kerf/README.md: {unnamed:?}"
    );
    // every key the table names is a value
    let unknown: Vec<&&String> = named
        .iter()
        .filter(|k| k.split('.').try_fold(&ours, |v, key| v.get(key)).is_none())
        .collect();
    assert!(
        unknown.is_empty(),
        "the table names keys values.yaml does not have: {unknown:?}"
    );
    // a default given as plain values, one per key (or one for all), is the file's
    let mut differ = Vec::new();
    for (keys, default) in &rows {
        let parts: Vec<&str> = default.split(", ").collect();
        if !parts.iter().all(|p| {
            p.starts_with('`')
                && p.ends_with('`')
                && p.len() > 1
                && p[1..p.len() - 1].find('`').is_none()
        }) {
            continue; // prose ("looked up", "Kerf's image (…)"): read by people, not checked
        }
        let value_of = |key: &String| key.split('.').try_fold(&ours, |v, k| v.get(k));
        // maps and lists of maps are told in prose (`CriticalAddonsOnly`): read by people
        let plain = |v: &Value| match v {
            Value::Object(m) => m.is_empty(),
            Value::Array(items) => items.iter().all(|i| !i.is_object()),
            _ => true,
        };
        if !keys.iter().all(|k| value_of(k).is_some_and(plain)) {
            continue;
        }
        if parts.len() != keys.len() && parts.len() != 1 {
            differ.push(format!(
                "{keys:?}: {} defaults for {} keys",
                parts.len(),
                keys.len()
            ));
            continue;
        }
        for (i, key) in keys.iter().enumerate() {
            let said = parts[if parts.len() == 1 { 0 } else { i }].trim_matches('`');
            let value = value_of(key).expect("checked above");
            if shown(value) != said {
                differ.push(format!(
                    "{key}: the table says `{said}`, values.yaml has {}",
                    shown(value)
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "defaults in charts/kerf/README.md's table that are not values.yaml's: {differ:?}"
    );
}

#[test]
fn the_capacity_buffer_gate_grants_what_its_watches_and_status_writes_need() {
    let grants = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["--set", "settings.clusterName=c"];
        args.extend(extra);
        let docs = render(&args).unwrap();
        let role = kind(&docs, "ClusterRole")[0];
        (role["rules"].as_array().unwrap().iter())
            .flat_map(|r| {
                let verbs: Vec<String> = serde_json::from_value(r["verbs"].clone()).unwrap();
                let resources: Vec<String> =
                    serde_json::from_value(r["resources"].clone()).unwrap();
                resources.into_iter().flat_map(move |res| {
                    verbs
                        .iter()
                        .map(move |v| format!("{v} {res}"))
                        .collect::<Vec<_>>()
                })
            })
            .collect()
    };
    let off = grants(&[]);
    let on = grants(&["--set", "settings.featureGates.capacityBuffer=true"]);
    for grant in [
        "get capacitybuffers",
        "watch capacitybuffers",
        "patch capacitybuffers/status",
        "watch podtemplates",
        "watch deployments",
        "watch statefulsets",
        "watch replicasets",
    ] {
        assert!(on.iter().any(|g| g == grant), "{grant} not in {on:?}");
        assert!(
            !off.iter().any(|g| g == grant),
            "{grant} granted without the gate"
        );
    }
}
