//! The Helm charts: `helm lint` and `helm template` (helm built from the Go module proxy) with
//! default and seed-like values, the rendered manifests applied to a real kube-apiserver, and
//! the CRD chart kept equal to the CRDs Kerf generates. The RBAC is exercised by the operator
//! itself in e2e.rs (the walkthrough runs under exactly the chart's ServiceAccount).

mod support;

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
    // keys of a Karpenter values file that Kerf has no use for are not an error
    render(&[
        "--set",
        "settings.clusterName=c",
        "--set",
        "webhook.enabled=false",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn seed_values_render_as_karpenters_chart_would() {
    let docs = render(&SEED_VALUES).unwrap_or_else(|e| panic!("{e}"));
    let deployment = kind(&docs, "Deployment")[0];
    let env = env_of(deployment);
    let get = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    assert_eq!(get("CLUSTER_NAME"), Some("my-cluster"));
    assert_eq!(get("INTERRUPTION_QUEUE"), Some("my-cluster"));
    assert_eq!(get("BATCH_IDLE_DURATION"), Some("1s"));
    assert_eq!(get("BATCH_MAX_DURATION"), Some("10s"));
    assert_eq!(
        get("FEATURE_GATES"),
        Some(
            "SpotToSpotConsolidation=true,NodeRepair=false,StaticCapacity=false,NodeOverlay=false"
        )
    );
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
    let mut seed: Vec<&str> = SEED_VALUES.to_vec();
    seed.extend(["--set", "serviceMonitor.enabled=false"]);
    for values in [&["--set", "settings.clusterName=my-cluster"][..], &seed] {
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
}
