//! Replicas compile once per solve (`pods::Replicas`): what decides whether two pods are
//! alike, and a solve that copies replicas' compiled terms decides as one that compiles every
//! pod on its own.

use k8s_openapi::api::core::v1::Pod;
use kerf_scheduling::pods::{alike, terms_of};
use kerf_scheduling::{Problem, benchmark, solve};
use serde_json::{Value, json};

/// A Deployment's pod with every field the solver reads set.
fn replica(name: &str, owner: &str, cpu: &str) -> Value {
    json!({
        "metadata": {
            "name": name,
            "namespace": "shop",
            "labels": {"app": owner, "pod-template-hash": "5d9c"},
            "annotations": {"note": "not read"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                "uid": "u-1", "controller": true
            }]
        },
        "spec": {
            "nodeSelector": {"kubernetes.io/arch": "amd64"},
            "tolerations": [{"key": "team", "operator": "Exists"}],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 10,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app": owner}}
                }
            }]}},
            "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": owner}}
            }],
            "containers": [{
                "name": "c", "image": "x",
                "ports": [{"containerPort": 8080}],
                "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}
            }]
        }
    })
}

fn pod(v: Value) -> Pod {
    serde_json::from_value(v).expect("a valid pod")
}

/// `base` with the JSON at `path` (slash-separated, array indices as numbers) set to `value`.
fn with(base: &Value, path: &str, value: Value) -> Pod {
    let mut v = base.clone();
    let mut at = &mut v;
    for step in path.split('/') {
        at = match step.parse::<usize>() {
            Ok(i) => &mut at[i],
            Err(_) => &mut at[step],
        };
    }
    *at = value;
    pod(v)
}

#[test]
fn pods_differing_in_any_field_the_solver_reads_are_not_alike() {
    let base = replica("api-1", "api", "250m");
    let first = pod(base.clone());
    let changes: [(&str, Change); 8] = [
        ("namespace", |v| v["metadata"]["namespace"] = json!("other")),
        ("labels", |v| v["metadata"]["labels"]["app"] = json!("web")),
        ("volume topology", |v| {
            v["metadata"]["annotations"][kerf_api::labels::VOLUME_TOPOLOGY] = json!(ZONE)
        }),
        ("node selector", |v| {
            v["spec"]["nodeSelector"]["kubernetes.io/arch"] = json!("arm64")
        }),
        ("tolerations", |v| {
            v["spec"]["tolerations"][0]["key"] = json!("other-team")
        }),
        ("affinity", |v| {
            v["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
                [0]["weight"] = json!(20)
        }),
        ("spread", |v| {
            v["spec"]["topologySpreadConstraints"][0]["maxSkew"] = json!(2)
        }),
        ("host port", |v| {
            v["spec"]["containers"][0]["ports"][0]["hostPort"] = json!(8080)
        }),
    ];
    for (what, change) in changes {
        let mut v = base.clone();
        change(&mut v);
        let other = pod(v);
        assert!(!alike(&first, &other), "{what}");
        assert_ne!(terms_of(&first), terms_of(&other), "{what}");
    }
}

/// One field of a pod's JSON changed.
type Change = fn(&mut Value);

/// A volume-topology annotation as the core stamps it.
const ZONE: &str = r#"[[{"key":"topology.kubernetes.io/zone","operator":"In","values":["a"]}]]"#;

#[test]
fn replicas_differing_only_in_name_node_and_requests_are_alike() {
    let base = replica("api-1", "api", "250m");
    let first = pod(base.clone());
    for other in [
        with(&base, "metadata/name", json!("api-2")),
        with(&base, "spec/nodeName", json!("node-7")),
        with(&base, "metadata/annotations/note", json!("still not read")),
        // resized in place: requests are taken per pod, not copied
        with(
            &base,
            "spec/containers/0/resources/requests/cpu",
            json!("500m"),
        ),
    ] {
        assert!(alike(&first, &other));
        assert_eq!(terms_of(&first), terms_of(&other));
    }
}

/// Pods of three Deployments (spread, anti-affinity, a resized replica, a replica relabelled
/// by hand) and the benchmark's varied pods.
fn workload() -> Vec<Pod> {
    let mut pods = Vec::new();
    for (owner, n) in [("api", 9), ("web", 5), ("batch", 7)] {
        for i in 0..n {
            let cpu = if owner == "batch" && i == 3 {
                "2"
            } else {
                "500m"
            };
            pods.push(pod(replica(&format!("{owner}-{i}"), owner, cpu)));
        }
    }
    let relabelled = with(
        &replica("web-9", "web", "500m"),
        "metadata/labels/app",
        json!("canary"),
    );
    pods.push(relabelled);
    pods.extend(benchmark::diverse_pods(60, 7));
    pods
}

#[test]
fn a_solve_that_copies_replicas_decides_as_one_that_compiles_each_pod() {
    let pools = [benchmark::node_pool()];
    let pods = workload();
    let refs: Vec<&Pod> = pods.iter().collect();
    // every pod compiled on its own: no controller to group them by
    let alone: Vec<Pod> = (pods.iter().cloned())
        .map(|mut p| {
            p.metadata.owner_references = None;
            p
        })
        .collect();
    let alone_refs: Vec<&Pod> = alone.iter().collect();
    let each = solve(&Problem::new(&pools, &alone_refs));
    assert!(each.unschedulable.is_empty(), "{:?}", each.unschedulable);
    // grouped by controller, compared field by field
    let by_owner = solve(&Problem::new(&pools, &refs));
    // grouped by the fingerprints a caller keeps
    let terms: Vec<u64> = pods.iter().map(terms_of).collect();
    let by_terms = solve(&Problem {
        terms: &terms,
        ..Problem::new(&pools, &refs)
    });
    assert_eq!(by_owner, each);
    assert_eq!(by_terms, each);
}
