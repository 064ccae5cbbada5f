//! Swarm testing: random but valid scenarios built from a seed, run with every invariant
//! checked; a failing scenario is shrunk (events, workloads, NodePools and cloud incidents
//! dropped while it still fails) so the file a developer gets is small.
//!
//! A scenario is generated as the YAML document it would be written as, and run from that
//! document, so the file written for a failure is exactly what failed.

use std::panic::{AssertUnwindSafe, catch_unwind};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use crate::world::Plant;
use crate::{RunOptions, SimError};

/// Names of the NodePools a generated scenario may have.
const POOLS: [&str; 5] = ["general", "spot", "fallback", "gpu-less", "batch"];

/// Builds the scenario of `seed`.
pub fn generate(seed: u64) -> Value {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let minutes = rng.random_range(30..=90u64);
    let pools = rng.random_range(1..=5usize);
    let mut manifests = vec![json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-swarm",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "swarm"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "swarm"}}],
        }
    })];
    let mut tainted = Vec::new();
    for name in &POOLS[..pools] {
        let pool = node_pool(&mut rng, name);
        if pool["spec"]["template"]["spec"]["taints"].is_array() {
            tainted.push(name.to_string());
        }
        manifests.push(pool);
    }
    for i in 0..rng.random_range(0..=2) {
        manifests.push(daemonset(&mut rng, i));
    }
    let workloads = rng.random_range(1..=20usize);
    for i in 0..workloads {
        manifests.extend(workload(&mut rng, i, &POOLS[..pools], &tainted));
    }
    let mut times: Vec<u64> = (0..rng.random_range(0..=10))
        .map(|_| rng.random_range(1..minutes))
        .collect();
    times.sort_unstable();
    // a deleted Deployment is neither scaled nor deleted again
    let mut alive: Vec<usize> = (0..workloads).collect();
    let mut events = Vec::new();
    for at in times {
        let kind = rng.random_range(0..10);
        let event = match kind {
            7 | 8 => {
                let name = POOLS[rng.random_range(0..pools)];
                json!({"at": format!("{at}m"), "apply": node_pool(&mut rng, name)})
            }
            _ if alive.is_empty() => continue,
            9 => {
                let app = alive.remove(rng.random_range(0..alive.len()));
                json!({"at": format!("{at}m"), "delete": {
                    "kind": "Deployment", "name": format!("app-{app}"), "namespace": "default",
                }})
            }
            _ => json!({"at": format!("{at}m"), "scale": {
                "kind": "Deployment",
                "name": format!("app-{}", pick(&mut rng, &alive)),
                "namespace": "default",
                "replicas": rng.random_range(0..=10),
            }}),
        };
        events.push((at, event));
    }
    events.sort_by_key(|(at, _)| *at);
    let events: Vec<Value> = events.into_iter().map(|(_, e)| e).collect();
    let cloud = cloud(&mut rng, minutes, &POOLS[..pools]);
    // one scenario in five has Kerf crash and restart, at any second of the run
    let mut restarts: Vec<u64> = Vec::new();
    if rng.random_bool(0.2) {
        for _ in 0..rng.random_range(1..=2) {
            restarts.push(rng.random_range(1..minutes * 60));
        }
        restarts.sort_unstable();
    }
    let restarts: Vec<String> = restarts.iter().map(|s| format!("{s}s")).collect();
    let mut scenario = json!({
        "apiVersion": "kerf.sh/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": format!("swarm-{seed}")},
        "spec": {
            "duration": format!("{minutes}m"),
            "seed": seed,
            "featureGates": {
                "SpotToSpotConsolidation": rng.random_bool(0.25),
                "NodeRepair": rng.random_bool(0.5),
            },
            "cloud": cloud,
            "manifests": manifests,
            "events": events,
            "operatorRestarts": restarts,
        }
    });
    // drawn last, so that the rest of a seed's scenario stays what it was before
    scenario["spec"]["apiServer"] = api_server(&mut rng, minutes);
    make_static(&mut rng, &mut scenario, &POOLS[..pools]);
    add_overlays(&mut rng, &mut scenario);
    add_policies(&mut rng, &mut scenario, &POOLS[..pools]);
    add_reservations(&mut rng, &mut scenario, minutes);
    add_volumes(&mut rng, &mut scenario, minutes, &tainted);
    scenario
}

/// One scenario in four has StatefulSets whose pods mount volumes: claims of a default
/// WaitForFirstConsumer class, of one that provisions in a single zone, or of an Immediate
/// one that provisions at once in one of two zones; sometimes thirty tiny pods with a
/// volume each (attachment limits decide their nodes), sometimes spread over zones; scaled
/// once during the run.
fn add_volumes(rng: &mut ChaCha8Rng, scenario: &mut Value, minutes: u64, tainted: &[String]) {
    if !rng.random_bool(0.25) {
        return;
    }
    let zones = ["us-east-1a", "us-east-1b", "us-east-1c"];
    let zone = *pick(rng, &zones);
    let other = *pick(rng, &zones);
    let spec = &mut scenario["spec"];
    let manifests = spec["manifests"].as_array_mut().expect("manifests");
    manifests.push(json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "gp3", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"}));
    manifests.push(json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "zonal"}, "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": [zone]}]}]}));
    manifests.push(json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "immediate"}, "provisioner": "kubernetes.io/aws-ebs",
        "volumeBindingMode": "Immediate",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": [zone, other]}]}]}));
    let mut events = Vec::new();
    for i in 0..rng.random_range(1..=3) {
        let name = format!("db-{i}");
        let tiny = rng.random_bool(0.2);
        let (cpu, memory, replicas) = if tiny {
            ("50m", "64Mi", 30)
        } else {
            (
                *pick(rng, &["250m", "500m", "1", "2"]),
                *pick(rng, &["512Mi", "1Gi", "4Gi"]),
                rng.random_range(1..=8),
            )
        };
        let mut pod = json!({"containers": [{"name": "c", "image": "db",
            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]});
        if !tainted.is_empty() && rng.random_bool(0.3) {
            pod["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]);
        }
        if rng.random_bool(0.3) {
            pod["topologySpreadConstraints"] = json!([{"maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": name}}}]);
        }
        let templates: Vec<Value> = (0..rng.random_range(1..=2))
            .map(|t| {
                let mut claim = json!({"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "10Gi"}}});
                let class = *pick(rng, &["", "gp3", "zonal", "immediate"]);
                if !class.is_empty() {
                    claim["storageClassName"] = json!(class);
                }
                json!({"metadata": {"name": format!("data{t}")}, "spec": claim})
            })
            .collect();
        manifests.push(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "serviceName": name,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
                "volumeClaimTemplates": templates}}));
        if rng.random_bool(0.5) {
            let at = rng.random_range(1..minutes);
            events.push((
                at,
                json!({"at": format!("{at}m"), "scale": {"kind": "StatefulSet",
                "name": name, "namespace": "default", "replicas": rng.random_range(0..=replicas)}}),
            ));
        }
    }
    let all = spec["events"].as_array_mut().expect("events");
    for (at, e) in events {
        let pos = all
            .iter()
            .position(|x| {
                x["at"]
                    .as_str()
                    .and_then(|t| t.trim_end_matches('m').parse::<u64>().ok())
                    .is_some_and(|t| t > at)
            })
            .unwrap_or(all.len());
        all.insert(pos, e);
    }
}

/// One scenario in five has one to three capacity reservations (On-Demand Capacity
/// Reservations, or capacity blocks that end within the run), selected by the class by id,
/// and every NodePool allowing `reserved` beside its other capacity types.
fn add_reservations(rng: &mut ChaCha8Rng, scenario: &mut Value, minutes: u64) {
    if !rng.random_bool(0.2) {
        return;
    }
    let types = [
        "m5.xlarge",
        "c5.2xlarge",
        "r5.large",
        "m6i.large",
        "c6a.xlarge",
        "m6g.xlarge",
    ];
    let zones = ["us-east-1a", "us-east-1b", "us-east-1c"];
    let spec = &mut scenario["spec"];
    let mut terms = Vec::new();
    let mut reservations = Vec::new();
    for i in 0..rng.random_range(1..=3) {
        let id = format!("cr-0{i:016x}");
        let mut r = json!({"id": id, "instanceType": pick(rng, &types),
                           "zone": pick(rng, &zones), "count": rng.random_range(1..=4)});
        if rng.random_bool(0.4) {
            r["type"] = json!("capacity-block");
            r["end"] = json!(format!("{}m", rng.random_range(1..=minutes)));
        } else if rng.random_bool(0.3) {
            r["end"] = json!(format!("{}m", rng.random_range(1..=minutes)));
        }
        terms.push(json!({"id": id}));
        reservations.push(r);
    }
    spec["cloud"]["reservations"] = json!(reservations);
    let allow_reserved = |pool: &mut Value| {
        let requirements = &mut pool["spec"]["template"]["spec"]["requirements"];
        for r in requirements.as_array_mut().into_iter().flatten() {
            if r["key"] == "karpenter.sh/capacity-type"
                && let Some(values) = r["values"].as_array_mut()
            {
                values.push(json!("reserved"));
            }
        }
    };
    for m in spec["manifests"].as_array_mut().into_iter().flatten() {
        match m["kind"].as_str() {
            Some("EC2NodeClass") => m["spec"]["capacityReservationSelectorTerms"] = json!(terms),
            Some("NodePool") => allow_reserved(m),
            _ => {}
        }
    }
    for e in spec["events"].as_array_mut().into_iter().flatten() {
        if e["apply"]["kind"] == "NodePool" {
            allow_reserved(&mut e["apply"]);
        }
    }
}

/// One scenario in five ignores preferences (PREFERENCE_POLICY=Ignore); one in five asks one
/// NodePool for several instance families (minValues 2–40, more than some can give), half of those with
/// MIN_VALUES_POLICY=BestEffort.
fn add_policies(rng: &mut ChaCha8Rng, scenario: &mut Value, pools: &[&str]) {
    let spec = &mut scenario["spec"];
    if rng.random_bool(0.2) {
        spec["preferencePolicy"] = json!("Ignore");
    }
    if !rng.random_bool(0.2) {
        return;
    }
    let name = *pick(rng, pools);
    let families = json!({"key": "karpenter.k8s.aws/instance-family", "operator": "Exists",
                          "minValues": rng.random_range(2..=40)});
    for m in spec["manifests"].as_array_mut().into_iter().flatten() {
        if m["kind"] == "NodePool" && m["metadata"]["name"] == name {
            with_requirement(m, &families);
        }
    }
    for e in spec["events"].as_array_mut().into_iter().flatten() {
        if e["apply"]["kind"] == "NodePool" && e["apply"]["metadata"]["name"] == name {
            with_requirement(&mut e["apply"], &families);
        }
    }
    if rng.random_bool(0.5) {
        spec["minValuesPolicy"] = json!("BestEffort");
    }
}

fn with_requirement(pool: &mut Value, requirement: &Value) {
    if let Some(r) = pool["spec"]["template"]["spec"]["requirements"].as_array_mut() {
        r.push(requirement.clone());
    }
}

/// One scenario in five lays one to three NodeOverlays (of distinct weights) over the prices,
/// with the NodeOverlay gate on: a percent or amount off or on, or a fixed price, for an
/// instance family, category or capacity type.
fn add_overlays(rng: &mut ChaCha8Rng, scenario: &mut Value) {
    if !rng.random_bool(0.2) {
        return;
    }
    let selectors: &[(&str, &[&str])] = &[
        (
            "karpenter.k8s.aws/instance-family",
            &["c6a", "m6i", "c7g", "r6i", "m5", "c5"],
        ),
        ("karpenter.k8s.aws/instance-category", &["c", "m", "r"]),
        ("karpenter.sh/capacity-type", &["spot", "on-demand"]),
    ];
    let mut weights = vec![10, 20, 30];
    let count = rng.random_range(1..=3usize);
    let spec = &mut scenario["spec"];
    for i in 0..count {
        let weight = weights.remove(rng.random_range(0..weights.len()));
        let (key, values) = *pick(rng, selectors);
        let value = *pick(rng, values);
        let mut overlay = json!({
            "apiVersion": "karpenter.sh/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": format!("overlay-{i}")},
            "spec": {
                "weight": weight,
                "requirements": [{"key": key, "operator": "In", "values": [value]}],
            },
        });
        let (field, price) = match rng.random_range(0..4) {
            0 => ("priceAdjustment", format!("-{}%", rng.random_range(5..=60))),
            1 => ("priceAdjustment", format!("+{}%", rng.random_range(5..=60))),
            2 => (
                "priceAdjustment",
                format!("-{:.3}", rng.random_range(0.001..0.05)),
            ),
            _ => ("price", format!("{:.4}", rng.random_range(0.005..0.5))),
        };
        overlay["spec"][field] = json!(price);
        if let Some(manifests) = spec["manifests"].as_array_mut() {
            manifests.push(overlay);
        }
    }
    spec["featureGates"]["NodeOverlay"] = json!(true);
}

/// One scenario in five turns one NodePool static (`replicas` 0–4, `limits.nodes` in one of
/// three, no weight), with the StaticCapacity gate on in four of five of those; each later
/// apply of that NodePool keeps it static with a new replica count (a scale).
fn make_static(rng: &mut ChaCha8Rng, scenario: &mut Value, pools: &[&str]) {
    if !rng.random_bool(0.2) {
        return;
    }
    let name = *pick(rng, pools);
    let limit = rng
        .random_bool(0.3)
        .then(|| rng.random_range(1..=4u32).to_string());
    let staticize = |pool: &mut Value, rng: &mut ChaCha8Rng| {
        let spec = &mut pool["spec"];
        spec["replicas"] = json!(rng.random_range(0..=4u32));
        if let Some(obj) = spec.as_object_mut() {
            obj.remove("weight");
            obj.remove("limits");
        }
        if let Some(l) = &limit {
            spec["limits"] = json!({"nodes": l});
        }
    };
    let spec = &mut scenario["spec"];
    for m in spec["manifests"].as_array_mut().into_iter().flatten() {
        if m["kind"] == "NodePool" && m["metadata"]["name"] == name {
            staticize(m, rng);
        }
    }
    for e in spec["events"].as_array_mut().into_iter().flatten() {
        if e["apply"]["kind"] == "NodePool" && e["apply"]["metadata"]["name"] == name {
            staticize(&mut e["apply"], rng);
        }
    }
    spec["featureGates"]["StaticCapacity"] = json!(rng.random_bool(0.8));
}

/// One scenario in four has the API server fail: outages of up to two minutes, and writes
/// that meet conflicts or lose their answers.
fn api_server(rng: &mut ChaCha8Rng, minutes: u64) -> Value {
    if !rng.random_bool(0.25) {
        return json!({});
    }
    let outages: Vec<Value> = (0..rng.random_range(0..=2))
        .map(|_| {
            let from = rng.random_range(1..minutes * 60);
            let until = from + rng.random_range(5..=120);
            json!({"from": format!("{from}s"), "until": format!("{until}s")})
        })
        .collect();
    let chance = |rng: &mut ChaCha8Rng| {
        if rng.random_bool(0.5) {
            f64::from(rng.random_range(1..=20u8)) / 100.0
        } else {
            0.0
        }
    };
    json!({"outages": outages, "lostResponses": chance(rng), "conflicts": chance(rng)})
}

fn pick<'a, T>(rng: &mut ChaCha8Rng, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

fn node_pool(rng: &mut ChaCha8Rng, name: &str) -> Value {
    let capacity_types: &[&[&str]] = &[&["spot"], &["on-demand"], &["spot", "on-demand"]];
    let categories: &[&[&str]] = &[&["c", "m"], &["c", "m", "r"], &["m"], &["c", "r"]];
    let mut requirements = vec![
        json!({"key": "karpenter.sh/capacity-type", "operator": "In",
               "values": pick(rng, capacity_types)}),
        json!({"key": "karpenter.k8s.aws/instance-category", "operator": "In",
               "values": pick(rng, categories)}),
    ];
    if rng.random_bool(0.5) {
        requirements.push(json!({"key": "kubernetes.io/arch", "operator": "In",
                                 "values": [pick(rng, &["amd64", "arm64"])]}));
    }
    if rng.random_bool(0.3) {
        requirements.push(
            json!({"key": "karpenter.k8s.aws/instance-size", "operator": "NotIn",
                                 "values": ["metal", "24xlarge", "48xlarge"]}),
        );
    }
    let mut template = json!({
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": requirements,
    });
    if rng.random_bool(0.2) {
        template["taints"] = json!([{"key": "dedicated", "value": name, "effect": "NoSchedule"}]);
    }
    if rng.random_bool(0.3) {
        template["expireAfter"] = json!(pick(rng, &["30m", "1h", "2h", "Never"]));
    }
    let mut disruption = json!({
        "consolidationPolicy": pick(rng, &["WhenEmpty", "WhenEmptyOrUnderutilized"]),
        "consolidateAfter": pick(rng, &["0s", "30s", "1m", "5m", "Never"]),
    });
    match rng.random_range(0..4) {
        0 => disruption["budgets"] = json!([{"nodes": pick(rng, &["10%", "1", "50%"])}]),
        1 => {
            disruption["budgets"] = json!([
                {"nodes": "20%"},
                {"nodes": "0", "schedule": pick(rng, &["0 * * * *", "30 * * * *"]),
                 "duration": pick(rng, &["10m", "20m"])},
            ])
        }
        2 => {
            disruption["budgets"] = json!([
                {"nodes": "0", "reasons": [pick(rng, &["Drifted", "Underutilized", "Empty"])]},
                {"nodes": "2"},
            ])
        }
        _ => {}
    }
    let mut spec = json!({"template": {"spec": template}, "disruption": disruption});
    if rng.random_bool(0.6) {
        spec["weight"] = json!(rng.random_range(1..=100));
    }
    if rng.random_bool(0.3) {
        spec["limits"] = json!({"cpu": rng.random_range(16..=256).to_string()});
        if rng.random_bool(0.3) {
            spec["limits"]["nodes"] = json!(rng.random_range(1..=8).to_string());
        }
    }
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
           "spec": spec})
}

fn daemonset(rng: &mut ChaCha8Rng, i: usize) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": format!("agent-{i}"), "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": format!("agent-{i}")}},
            "template": {
                "metadata": {"labels": {"app": format!("agent-{i}")}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "agent", "image": "agent", "resources": {"requests": {
                        "cpu": format!("{}m", rng.random_range(50..=300)),
                        "memory": format!("{}Mi", rng.random_range(64..=512)),
                    }}}],
                }
            }
        }
    })
}

/// A Deployment `app-<i>`, and sometimes its PodDisruptionBudget.
fn workload(rng: &mut ChaCha8Rng, i: usize, pools: &[&str], tainted: &[String]) -> Vec<Value> {
    let app = format!("app-{i}");
    let cpu = *pick(rng, &["100m", "250m", "500m", "1", "2", "3500m"]);
    let memory = *pick(rng, &["128Mi", "512Mi", "1Gi", "2Gi", "4Gi", "7Gi"]);
    let mut spec = json!({
        "containers": [{"name": "c", "image": "app", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    });
    if rng.random_bool(0.3) {
        let pool = pick(rng, pools);
        spec["nodeSelector"] = json!({"karpenter.sh/nodepool": pool});
        if tainted.iter().any(|t| t == pool) {
            spec["tolerations"] = json!([{"key": "dedicated", "operator": "Equal", "value": pool, "effect": "NoSchedule"}]);
        }
    } else if !tainted.is_empty() && rng.random_bool(0.3) {
        spec["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]);
    }
    if rng.random_bool(0.2) {
        spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "karpenter.sh/capacity-type",
                "operator": "In", "values": [pick(rng, &["spot", "on-demand"])]}]}]}}});
    }
    let mut replicas_max = 10;
    match rng.random_range(0..6) {
        0 => {
            spec["topologySpreadConstraints"] = json!([{"maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": pick(rng, &["DoNotSchedule", "ScheduleAnyway"]),
                "labelSelector": {"matchLabels": {"app": app}}}])
        }
        1 => {
            spec["topologySpreadConstraints"] = json!([{"maxSkew": rng.random_range(1..=2),
                "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": app}}}])
        }
        2 => {
            replicas_max = 6;
            let affinity = spec["affinity"].as_object().cloned().unwrap_or_default();
            let mut affinity = Value::Object(affinity);
            affinity["podAntiAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": app}}}]});
            spec["affinity"] = affinity;
        }
        _ => {}
    }
    let mut metadata = json!({"labels": {"app": app}});
    match rng.random_range(0..20) {
        0 => metadata["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"}),
        1 => metadata["annotations"] = json!({"karpenter.sh/do-not-disrupt": "10m"}),
        _ => {}
    }
    let mut out = vec![json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "namespace": "default"},
        "spec": {
            "replicas": rng.random_range(0..=replicas_max),
            "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": metadata, "spec": spec},
        }
    })];
    if rng.random_bool(0.2) {
        let budget = if rng.random_bool(0.5) {
            json!({"maxUnavailable": pick(rng, &[0, 1])})
        } else {
            json!({"minAvailable": pick(rng, &[json!("50%"), json!(1)])})
        };
        let mut spec = budget;
        spec["selector"] = json!({"matchLabels": {"app": app}});
        out.push(
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                        "metadata": {"name": app, "namespace": "default"}, "spec": spec}),
        );
    }
    out
}

fn cloud(rng: &mut ChaCha8Rng, minutes: u64, pools: &[&str]) -> Value {
    let mut windows = Vec::new();
    for _ in 0..rng.random_range(0..=2) {
        let from = rng.random_range(0..minutes);
        let until = rng.random_range(from + 1..=minutes);
        let mut w = json!({"from": format!("{from}m"), "until": format!("{until}m"),
                           "capacityType": pick(rng, &["spot", "on-demand"])});
        if rng.random_bool(0.3) {
            w["zones"] = json!(["us-east-1a"]);
        }
        windows.push(w);
    }
    let mut interruptions = Vec::new();
    for _ in 0..rng.random_range(0..=2) {
        let mut i = json!({"at": format!("{}m", rng.random_range(1..minutes)),
                           "count": rng.random_range(1..=3)});
        if rng.random_bool(0.3) {
            i["nodepool"] = json!(pick(rng, pools));
        }
        interruptions.push(i);
    }
    let mut notices = Vec::new();
    for _ in 0..rng.random_range(0..=3) {
        notices.push(json!({
            "at": format!("{}m", rng.random_range(1..minutes)),
            "kind": pick(rng, &["scheduledChange", "stopping", "terminated", "rebalance"]),
            "count": rng.random_range(1..=2),
        }));
    }
    // one scenario in five has launches whose nodes never register
    let never_register = if rng.random_bool(0.2) {
        f64::from(rng.random_range(1..=3u8)) / 10.0
    } else {
        0.0
    };
    // and one in five nodes that register but never report Ready
    let never_ready = if rng.random_bool(0.2) {
        f64::from(rng.random_range(1..=3u8)) / 10.0
    } else {
        0.0
    };
    json!({
        "launchDelay": format!("{}s", rng.random_range(5..=60)),
        "readyDelay": format!("{}s", rng.random_range(5..=30)),
        "launchJitter": format!("{}s", rng.random_range(0..=20)),
        "readyJitter": format!("{}s", rng.random_range(0..=15)),
        "faults": {"neverRegister": never_register, "neverReady": never_ready},
        "insufficientCapacity": windows,
        "spotInterruptions": interruptions,
        "notices": notices,
    })
}

/// Runs a scenario document with every invariant checked: `Err` with what went wrong (an
/// invariant, an unusable scenario, or a panic).
pub fn check(scenario: &Value) -> Result<(), String> {
    check_planted(scenario, None)
}

/// [`check`] with a bug planted: how the tests show the checkers catch one.
pub fn check_planted(scenario: &Value, plant: Option<Plant>) -> Result<(), String> {
    let text = to_yaml(scenario);
    let parsed = crate::scenario::parse(&text, None).map_err(|e| format!("unusable: {e}"))?;
    let options = RunOptions {
        check: true,
        plant,
        skip_floor: true,
    };
    let run = catch_unwind(AssertUnwindSafe(|| {
        crate::run(parsed, options, &mut |_, _, _| {})
    }));
    match run {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e @ SimError::Invariant { .. })) => Err(e.to_string()),
        Ok(Err(e)) => Err(format!("unusable: {e}")),
        Err(panic) => Err(format!(
            "panicked: {}",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)")
        )),
    }
}

/// The scenario as the YAML file written for a failure.
pub fn to_yaml(scenario: &Value) -> String {
    serde_yaml::to_string(scenario).unwrap_or_default()
}

/// Drops events, cloud incidents, workloads (with their events and budgets), DaemonSets and
/// NodePools one at a time for as long as the scenario keeps failing (`fails`), until no
/// single removal keeps it failing.
pub fn shrink(mut scenario: Value, fails: &mut dyn FnMut(&Value) -> bool) -> Value {
    loop {
        let mut smaller = false;
        for candidate in removals(&scenario) {
            if fails(&candidate) {
                scenario = candidate;
                smaller = true;
                break;
            }
        }
        if !smaller {
            return scenario;
        }
    }
}

/// Every scenario one removal smaller than `scenario`, biggest cuts first.
fn removals(scenario: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let spec = &scenario["spec"];
    // a workload with everything that names it
    let manifests = spec["manifests"].as_array().cloned().unwrap_or_default();
    for m in &manifests {
        let kind = m["kind"].as_str().unwrap_or("");
        let name = m["metadata"]["name"].as_str().unwrap_or("").to_string();
        let removable = match kind {
            "Deployment" | "DaemonSet" | "PodDisruptionBudget" | "NodeOverlay" => true,
            "NodePool" => manifests.iter().filter(|m| m["kind"] == "NodePool").count() > 1,
            _ => false,
        };
        if !removable {
            continue;
        }
        let mut s = scenario.clone();
        let same = |v: &Value| v["metadata"]["name"] == name.as_str();
        if let Some(list) = s["spec"]["manifests"].as_array_mut() {
            list.retain(|v| {
                !(v["kind"] == kind && same(v)
                    || kind == "Deployment" && v["kind"] == "PodDisruptionBudget" && same(v))
            });
        }
        if let Some(list) = s["spec"]["events"].as_array_mut() {
            list.retain(|e| {
                let target = ["scale", "apply", "delete"]
                    .iter()
                    .find_map(|k| e.get(*k))
                    .cloned()
                    .unwrap_or(Value::Null);
                let named =
                    target["name"] == name.as_str() || target["metadata"]["name"] == name.as_str();
                let kind_of = target["kind"].as_str().unwrap_or("");
                !(named && kind_of == kind)
            });
        }
        out.push(s);
    }
    for list in [
        "/spec/events",
        "/spec/cloud/insufficientCapacity",
        "/spec/cloud/spotInterruptions",
        "/spec/cloud/notices",
        "/spec/operatorRestarts",
    ] {
        let len = scenario
            .pointer(list)
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        for i in 0..len {
            let mut s = scenario.clone();
            if let Some(items) = s.pointer_mut(list).and_then(Value::as_array_mut) {
                items.remove(i);
            }
            out.push(s);
        }
    }
    out
}

/// A swarm run's failure: the seed, what broke, and the shrunk scenario.
#[derive(Debug)]
pub struct Failure {
    /// The generator's seed.
    pub seed: u64,
    /// What broke in the generated scenario.
    pub message: String,
    /// The smallest scenario found that still fails.
    pub shrunk: Value,
    /// What broke in the shrunk scenario.
    pub shrunk_message: String,
}

/// How many runs shrinking one failure may take.
const SHRINK_RUNS: usize = 150;

/// What kind of failure a message reports, without the time, names and numbers that change
/// as the scenario shrinks: shrinking keeps a removal only if the same kind still fails.
pub fn kind_of(message: &str) -> String {
    let body = message.split_once("Z: ").map_or(message, |(_, rest)| rest);
    body.split_whitespace()
        .map(|w| {
            let name = POOLS.contains(&w.trim_matches(|c: char| !c.is_alphanumeric()));
            if name
                || w.chars()
                    .any(|c| c.is_ascii_digit() || c == '/' || c == '-' || c == '.')
            {
                "*"
            } else {
                w
            }
        })
        .take(8)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the scenario of one seed; on a failure, shrinks it while the same kind of failure
/// remains.
pub fn run_seed(seed: u64) -> Option<Failure> {
    let scenario = generate(seed);
    let message = check(&scenario).err()?;
    let kind = kind_of(&message);
    let mut runs = 0;
    let shrunk = shrink(scenario, &mut |s| {
        runs += 1;
        runs <= SHRINK_RUNS && check(s).is_err_and(|m| kind_of(&m) == kind)
    });
    let shrunk_message = check(&shrunk).err().unwrap_or_default();
    Some(Failure {
        seed,
        message,
        shrunk,
        shrunk_message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_gives_the_same_scenario_and_seeds_differ() {
        assert_eq!(to_yaml(&generate(7)), to_yaml(&generate(7)));
        assert_ne!(to_yaml(&generate(7)), to_yaml(&generate(8)));
    }

    #[test]
    fn generated_scenarios_are_valid() {
        for seed in 0..50 {
            let text = to_yaml(&generate(seed));
            if let Err(e) = crate::scenario::parse(&text, None) {
                panic!("seed {seed}: {e}\n{text}");
            }
        }
    }

    #[test]
    fn the_generator_reaches_api_faults_static_nodepools_and_overlays_all_valid() {
        let (mut faults, mut statics, mut overlays) = (0, 0, 0);
        for seed in 0..100 {
            let s = generate(seed);
            let spec = &s["spec"];
            faults += usize::from(spec["apiServer"].as_object().is_some_and(|a| !a.is_empty()));
            for m in spec["manifests"].as_array().into_iter().flatten() {
                statics +=
                    usize::from(m["spec"]["replicas"].is_number() && m["kind"] == "NodePool");
                overlays += usize::from(m["kind"] == "NodeOverlay");
                let doc = kerf_api::manifest::RawDocument {
                    line: 0,
                    value: m.clone(),
                };
                if m["apiVersion"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("karpenter."))
                {
                    let checked = kerf_api::manifest::check_document(&doc);
                    assert!(
                        matches!(checked, kerf_api::manifest::Checked::Valid(_)),
                        "seed {seed}: {checked:?}\n{m}"
                    );
                }
            }
        }
        assert!(
            faults >= 10 && statics >= 10 && overlays >= 10,
            "{faults} {statics} {overlays}"
        );
    }

    #[test]
    fn failure_kinds_ignore_time_names_and_numbers() {
        let a = "invariant violated at 2026-01-01T00:34:00.000Z: nodepool gpu-less exceeds its cpu limit: 140000 > 125000";
        let b = "invariant violated at 2026-01-01T01:02:00.000Z: nodepool spot exceeds its cpu limit: 9 > 8";
        assert_eq!(kind_of(a), kind_of(b));
        let c = "invariant violated at 2026-01-01T00:34:00.000Z: evicted pod default/app-4-9 although its PodDisruptionBudget allows no disruption";
        assert_ne!(kind_of(a), kind_of(c));
    }

    #[test]
    fn shrinking_keeps_only_what_the_failure_needs() {
        // a "failure" that needs one workload and one NodePool: everything else goes
        let scenario = generate(3);
        let needs = |s: &Value| {
            let m = s["spec"]["manifests"].as_array().unwrap();
            m.iter()
                .any(|v| v["metadata"]["name"] == "app-0" && v["kind"] == "Deployment")
        };
        let shrunk = shrink(scenario, &mut |s| needs(s));
        let kinds: Vec<&str> = shrunk["spec"]["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["EC2NodeClass", "NodePool", "Deployment"],
            "{shrunk}"
        );
        assert!(shrunk["spec"]["events"].as_array().unwrap().is_empty());
    }
}
