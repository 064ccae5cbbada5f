//! `kerf schedule` scenarios: one per scheduling behaviour, each with the placement a
//! Karpenter user expects, checked on the JSON output.

use std::collections::BTreeMap;

use serde_json::Value;

mod common;
use common::{CLASS, deploy, kerf_stdin, pool};

/// Runs `kerf schedule` on `yaml` (stdin) plus extra files and flags.
fn run(yaml: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["schedule", "-f", "-"];
    all.extend_from_slice(args);
    kerf_stdin(yaml, &all)
}

/// Runs `kerf schedule -o json` on `yaml` (stdin) plus extra files and flags.
fn schedule(yaml: &str, args: &[&str]) -> Value {
    let mut all = vec!["-o", "json"];
    all.extend_from_slice(args);
    let out = run(yaml, &all);
    assert!(
        out.status.success(),
        "kerf schedule failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json output")
}

/// The Deployment a pod belongs to: `default/web-6d4f9c8b7-x2k9p` is `default/web`'s, as
/// Kubernetes names a Deployment's pods (`NAME-HASH-XXXXX`).
fn deployment_of(pod: &str) -> String {
    pod.rsplitn(3, '-').nth(2).unwrap_or(pod).to_string()
}

/// The Deployments of these pod names.
fn deployments(pods: &Value) -> Vec<String> {
    pods.as_array()
        .expect("pod names")
        .iter()
        .map(|p| deployment_of(p.as_str().expect("a name")))
        .collect()
}

fn claims(v: &Value) -> &Vec<Value> {
    v["nodeclaims"].as_array().expect("nodeclaims")
}

fn pending(v: &Value) -> Vec<(String, Vec<String>)> {
    v["unschedulable"]
        .as_array()
        .expect("unschedulable")
        .iter()
        .map(|u| {
            let reasons = u["reasons"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| match r["nodepool"].as_str() {
                    Some(np) => format!("nodepool {np}: {}", r["message"].as_str().unwrap()),
                    None => r["message"].as_str().unwrap().to_string(),
                })
                .collect();
            (u["pod"].as_str().unwrap().to_string(), reasons)
        })
        .collect()
}

fn pods_of(claim: &Value) -> Vec<String> {
    claim["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

/// How many pods each zone got.
fn per_zone(v: &Value) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for c in claims(v) {
        *out.entry(c["zone"].as_str().unwrap().to_string())
            .or_insert(0) += pods_of(c).len();
    }
    out
}

fn on_demand() -> String {
    pool(
        "default",
        0,
        "      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n",
        "",
    )
}

#[test]
fn inflate_five_one_cpu_pods_share_one_getting_started_node() {
    let v = schedule(
        "",
        &[
            "-f",
            "fixtures/seeds/004-getting-started.yaml",
            "--replicas",
            "inflate=5",
        ],
    );
    assert_eq!(claims(&v).len(), 1);
    let c = &claims(&v)[0];
    assert_eq!(c["nodepool"], "default");
    assert_eq!(pods_of(c).len(), 5);
    assert_eq!(c["capacity_type"], "on-demand");
    // 5 cpu of requests need more than the 4 vCPU of an xlarge
    assert!(
        c["instance_type"].as_str().unwrap().ends_with(".2xlarge"),
        "{c}"
    );
    assert!(pending(&v).is_empty());
}

#[test]
fn zonal_spread_of_nine_pods_over_three_zones_is_three_each() {
    let spread = r#"      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}"#;
    let yaml = format!("{CLASS}{}{}", on_demand(), deploy("web", 9, "1", spread));
    let v = schedule(&yaml, &[]);
    let zones: Vec<usize> = per_zone(&v).into_values().collect();
    assert_eq!(zones, [3, 3, 3]);
}

#[test]
fn hostname_anti_affinity_puts_four_pods_on_four_nodes() {
    let anti = r#"      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: db}}}"#;
    let yaml = format!("{CLASS}{}{}", on_demand(), deploy("db", 4, "100m", anti));
    let v = schedule(&yaml, &[]);
    assert_eq!(claims(&v).len(), 4);
    assert!(claims(&v).iter().all(|c| pods_of(c).len() == 1));
}

#[test]
fn pods_without_the_gpu_toleration_never_land_on_the_gpu_pool() {
    let v = schedule(
        "",
        &[
            "-f",
            "fixtures/seeds/001-best-practices.yaml",
            "-f",
            "examples/001-workloads.yaml",
        ],
    );
    for c in claims(&v) {
        let pods = pods_of(c);
        if c["nodepool"] == "gpu" {
            assert!(pods.iter().all(|p| p.starts_with("ml/train-")), "{pods:?}");
        } else {
            assert_eq!(c["nodepool"], "generalcompute");
            assert!(
                pods.iter().all(|p| p.starts_with("billing/web-")),
                "{pods:?}"
            );
        }
    }
    let stuck = pending(&v);
    assert_eq!(stuck.len(), 1);
    assert_eq!(stuck[0].0, "ml/forgot-toleration");
    assert!(
        stuck[0].1.contains(
            &"nodepool gpu: taint nvidia.com/gpu=true:NoSchedule not tolerated".to_string()
        ),
        "{:?}",
        stuck[0].1
    );
}

#[test]
fn spot_capacity_exhausted_falls_back_to_the_on_demand_pool() {
    let normal = schedule("", &["-f", "fixtures/seeds/000-spot-fallback.yaml"]);
    assert_eq!(claims(&normal)[0]["nodepool"], "batch");
    assert_eq!(claims(&normal)[0]["capacity_type"], "spot");
    let ice = schedule(
        "",
        &[
            "-f",
            "fixtures/seeds/000-spot-fallback.yaml",
            "--unavailable",
            "spot",
        ],
    );
    assert_eq!(claims(&ice).len(), 1);
    assert_eq!(claims(&ice)[0]["nodepool"], "batch-fallback");
    assert_eq!(claims(&ice)[0]["capacity_type"], "on-demand");
    assert!(pending(&ice).is_empty());
}

#[test]
fn a_cpu_limit_of_16_caps_planned_capacity_and_leaves_the_rest_pending() {
    let v = schedule(
        "",
        &[
            "-f",
            "fixtures/seeds/002-spot-provisioning.yaml",
            "-f",
            "examples/002-workloads.yaml",
        ],
    );
    // t3a.large has 2 vCPU; Karpenter counts instance capacity against limits
    let vcpus: usize = claims(&v)
        .iter()
        .map(|c| {
            assert_eq!(c["instance_type"], "t3a.large");
            2
        })
        .sum();
    assert!(vcpus <= 16, "{vcpus} vCPU planned");
    assert_eq!(claims(&v).len(), 8);
    let stuck = pending(&v);
    assert_eq!(stuck.len(), 2);
    for (_, reasons) in stuck {
        assert_eq!(
            reasons,
            [
                "nodepool spot: limit cpu=16 reached (16 in use or planned, the smallest instance type adds 2)"
            ]
        );
    }
}

#[test]
fn a_label_no_nodepool_defines_is_reported_once() {
    let sel = "      nodeSelector: {workload: batch}";
    let yaml = format!(
        "{CLASS}{}{}{}",
        on_demand(),
        pool("other", 5, "", ""),
        deploy("job", 1, "1", sel)
    );
    let v = schedule(&yaml, &[]);
    assert!(claims(&v).is_empty());
    let pending: Vec<(String, Vec<String>)> = pending(&v)
        .into_iter()
        .map(|(p, r)| (deployment_of(&p), r))
        .collect();
    assert_eq!(
        pending,
        [(
            "default/job".to_string(),
            vec!["no nodepool defines label workload".to_string()]
        )]
    );
}

#[test]
fn a_label_the_nodepool_defines_is_honoured() {
    let labels = "    metadata: {labels: {workload: batch}}\n";
    let labelled =
        pool("batch", 0, "", "").replace("  template:\n", &format!("  template:\n{labels}"));
    let yaml = format!(
        "{CLASS}{}{labelled}{}",
        on_demand(),
        deploy("job", 1, "1", "      nodeSelector: {workload: batch}")
    );
    let v = schedule(&yaml, &[]);
    assert_eq!(claims(&v)[0]["nodepool"], "batch");
}

#[test]
fn pod_affinity_follows_the_selected_pod_into_its_zone() {
    let db = "      nodeSelector: {topology.kubernetes.io/zone: us-east-1b}";
    let app = r#"      affinity:
        podAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: db}}}"#;
    let yaml = format!(
        "{CLASS}{}{}{}",
        on_demand(),
        deploy("db", 1, "4", db),
        deploy("app", 3, "4", app)
    );
    let v = schedule(&yaml, &[]);
    assert!(pending(&v).is_empty());
    assert_eq!(per_zone(&v).keys().collect::<Vec<_>>(), ["us-east-1b"]);
}

#[test]
fn preferred_node_affinity_is_honoured_when_possible_and_relaxed_when_not() {
    let prefer = |zone: &str| {
        format!(
            r#"      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 50
            preference: {{matchExpressions: [{{key: topology.kubernetes.io/zone, operator: In, values: [{zone}]}}]}}"#
        )
    };
    let v = schedule(
        &format!(
            "{CLASS}{}{}",
            on_demand(),
            deploy("w", 2, "1", &prefer("us-east-1c"))
        ),
        &[],
    );
    assert_eq!(per_zone(&v).keys().collect::<Vec<_>>(), ["us-east-1c"]);
    let v = schedule(
        &format!(
            "{CLASS}{}{}",
            on_demand(),
            deploy("w", 2, "1", &prefer("eu-west-1a"))
        ),
        &[],
    );
    assert!(pending(&v).is_empty());
    assert_eq!(per_zone(&v).values().sum::<usize>(), 2);
}

#[test]
fn required_node_affinity_terms_are_tried_in_order() {
    let terms = r#"      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-west-2a]}]
            - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1b]}]"#;
    let v = schedule(
        &format!("{CLASS}{}{}", on_demand(), deploy("w", 1, "1", terms)),
        &[],
    );
    assert_eq!(per_zone(&v).keys().collect::<Vec<_>>(), ["us-east-1b"]);
}

#[test]
fn host_ports_keep_pods_apart() {
    let port = "      hostNetwork: false\n";
    let yaml = format!("{CLASS}{}{}", on_demand(), deploy("agent", 3, "100m", port)).replace(
        "        resources: {requests: {cpu: \"100m\", memory: 256Mi}}",
        "        resources: {requests: {cpu: \"100m\", memory: 256Mi}}\n        ports: [{containerPort: 9100, hostPort: 9100}]",
    );
    let v = schedule(&yaml, &[]);
    assert_eq!(claims(&v).len(), 3);
}

#[test]
fn daemonset_overhead_is_added_to_new_nodes_it_would_run_on() {
    let ds = r#"
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: logs, namespace: kube-system}
spec:
  selector: {matchLabels: {app: logs}}
  template:
    metadata: {labels: {app: logs}}
    spec:
      tolerations: [{operator: Exists}]
      containers: [{name: c, image: fluent-bit, resources: {requests: {cpu: "1", memory: 1Gi}}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: arm-only, namespace: kube-system}
spec:
  selector: {matchLabels: {app: arm}}
  template:
    metadata: {labels: {app: arm}}
    spec:
      nodeSelector: {kubernetes.io/arch: arm64}
      containers: [{name: c, image: x, resources: {requests: {cpu: "2"}}}]
"#;
    let yaml = format!("{CLASS}{}{ds}{}", on_demand(), deploy("w", 1, "1", ""));
    let v = schedule(&yaml, &[]);
    // the pod's 1 cpu plus the logs daemonset's 1 cpu; the arm64-only daemonset never runs here
    assert_eq!(claims(&v)[0]["requests"]["cpu"], "2");
    assert_eq!(claims(&v)[0]["requests"]["memory"], "1280Mi");
}

#[test]
fn existing_nodes_with_room_are_used_first() {
    let node = r#"
---
apiVersion: v1
kind: Node
metadata:
  name: ip-10-0-1-1.ec2.internal
  labels: {kubernetes.io/hostname: ip-10-0-1-1.ec2.internal, topology.kubernetes.io/zone: us-east-1a, kubernetes.io/arch: amd64}
status:
  allocatable: {cpu: 3920m, memory: 6584Mi, pods: "58"}
  capacity: {cpu: "4", memory: 7936Mi, pods: "58"}
---
apiVersion: v1
kind: Pod
metadata: {name: running, namespace: default}
spec:
  nodeName: ip-10-0-1-1.ec2.internal
  containers: [{name: c, image: x, resources: {requests: {cpu: "2"}}}]
"#;
    let yaml = format!(
        "{CLASS}{}{node}{}{}",
        on_demand(),
        deploy("small", 1, "1", ""),
        deploy("big", 1, "2", "")
    );
    let v = schedule(&yaml, &[]);
    assert_eq!(v["existing"][0]["node"], "ip-10-0-1-1.ec2.internal");
    assert_eq!(deployments(&v["existing"][0]["pods"]), ["default/small"]);
    assert_eq!(deployments(&claims(&v)[0]["pods"]), ["default/big"]);
}

#[test]
fn an_existing_pods_anti_affinity_keeps_selected_pods_off_its_node() {
    let node = r#"
---
apiVersion: v1
kind: Node
metadata:
  name: n1
  labels: {kubernetes.io/hostname: n1, topology.kubernetes.io/zone: us-east-1a}
status:
  allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
---
apiVersion: v1
kind: Pod
metadata: {name: loner, namespace: default, labels: {app: loner}}
spec:
  nodeName: n1
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}
  containers: [{name: c, image: x}]
"#;
    let yaml = format!(
        "{CLASS}{}{node}{}{}",
        on_demand(),
        deploy("web", 1, "1", ""),
        deploy("api", 1, "1", "")
    );
    let v = schedule(&yaml, &[]);
    assert_eq!(deployments(&v["existing"][0]["pods"]), ["default/api"]);
    assert_eq!(deployments(&claims(&v)[0]["pods"]), ["default/web"]);
}

#[test]
fn schedule_anyway_spreads_relax_and_do_not_schedule_spreads_hold() {
    let spread = |when: &str| {
        format!(
            r#"      nodeSelector: {{topology.kubernetes.io/zone: us-east-1a}}
      topologySpreadConstraints:
      - {{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: {when}, nodeAffinityPolicy: Ignore, labelSelector: {{matchLabels: {{app: w}}}}}}"#
        )
    };
    let v = schedule(
        &format!(
            "{CLASS}{}{}",
            on_demand(),
            deploy("w", 2, "1", &spread("ScheduleAnyway"))
        ),
        &[],
    );
    assert!(pending(&v).is_empty());
    let v = schedule(
        &format!(
            "{CLASS}{}{}",
            on_demand(),
            deploy("w", 2, "1", &spread("DoNotSchedule"))
        ),
        &[],
    );
    let stuck = pending(&v);
    assert_eq!(stuck.len(), 1);
    assert!(
        stuck[0].1[0].contains("topology spread on topology.kubernetes.io/zone"),
        "{stuck:?}"
    );
}

#[test]
fn prefer_no_schedule_taints_are_tolerated_as_the_last_resort() {
    let tainted = pool(
        "soft",
        0,
        "",
        "      taints: [{key: dedicated, value: batch, effect: PreferNoSchedule}]\n",
    );
    let v = schedule(&format!("{CLASS}{tainted}{}", deploy("w", 1, "1", "")), &[]);
    assert_eq!(claims(&v)[0]["nodepool"], "soft");
}

#[test]
fn preference_policy_ignore_drops_preferences_up_front() {
    // a hostname spread the pods would rather keep: two NodeClaims when respected, one when
    // PREFERENCE_POLICY=Ignore drops it
    let anyway = r#"      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: w}}}"#;
    let yaml = format!("{CLASS}{}{}", on_demand(), deploy("w", 2, "1", anyway));
    assert_eq!(claims(&schedule(&yaml, &[])).len(), 2);
    let ignored = schedule(&yaml, &["--preference-policy", "Ignore"]);
    assert_eq!(claims(&ignored).len(), 1);
    let out = run(&yaml, &["--preference-policy", "ignore"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("must be Respect or Ignore"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn min_values_policy_best_effort_lowers_what_cannot_be_met_and_says_so() {
    // t3 stops at 8 cpu: a 10-cpu pod leaves two of the three families
    let req = "      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [t3, m5, c5], minValues: 3}\n";
    let yaml = format!(
        "{CLASS}{}{}{}",
        pool("flex", 50, req, ""),
        pool("fallback", 10, "", ""),
        deploy("w", 1, "10", "")
    );
    let strict = schedule(&yaml, &[]);
    assert_eq!(claims(&strict)[0]["nodepool"], "fallback");
    assert_eq!(claims(&strict)[0]["min_values_relaxed"], false);
    // BestEffort keeps the heavier NodePool, relaxed, rather than falling back
    let relaxed = schedule(&yaml, &["--min-values-policy", "BestEffort"]);
    let c = &claims(&relaxed)[0];
    assert_eq!(c["nodepool"], "flex");
    assert_eq!(c["min_values_relaxed"], true);
    let family = c["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "karpenter.k8s.aws/instance-family")
        .unwrap();
    assert_eq!(family["minValues"], 2, "{family}");
    let options: std::collections::BTreeSet<&str> = c["instance_type_options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap().split('.').next().unwrap())
        .collect();
    assert_eq!(options, ["c5", "m5"].into(), "{options:?}");
}

#[test]
fn higher_weight_nodepools_win_and_ties_go_by_name() {
    let yaml = format!(
        "{CLASS}{}{}{}{}",
        pool("b-light", 10, "", ""),
        pool("a-heavy", 50, "", ""),
        pool("c-heavy", 50, "", ""),
        deploy("w", 1, "1", "")
    );
    let v = schedule(&yaml, &[]);
    assert_eq!(claims(&v)[0]["nodepool"], "a-heavy");
}

#[test]
fn min_values_keep_enough_instance_families_in_the_launch() {
    let req = "      - {key: karpenter.k8s.aws/instance-family, operator: Exists, minValues: 5}\n";
    let v = schedule(
        &format!(
            "{CLASS}{}{}",
            pool("flex", 0, req, ""),
            deploy("w", 1, "1", "")
        ),
        &[],
    );
    let c = &claims(&v)[0];
    let options = c["instance_type_options"].as_array().unwrap();
    assert!(options.len() <= 60);
    let families: std::collections::BTreeSet<&str> = options
        .iter()
        .map(|o| o.as_str().unwrap().split('.').next().unwrap())
        .collect();
    assert!(families.len() >= 5, "{families:?}");
}

#[test]
fn numeric_requirements_bound_the_instance_types() {
    let req = "      - {key: karpenter.k8s.aws/instance-cpu, operator: Gt, values: [\"8\"]}\n";
    let v = schedule(
        &format!(
            "{CLASS}{}{}",
            pool("big", 0, req, ""),
            deploy("w", 1, "1", "")
        ),
        &[],
    );
    let c = &claims(&v)[0];
    let t = c["instance_type"].as_str().unwrap();
    let size = t.split('.').nth(1).unwrap();
    assert!(
        !["medium", "large", "xlarge", "2xlarge"].contains(&size),
        "{t}"
    );
}

#[test]
fn init_containers_size_the_node_by_their_peak() {
    let init = r#"      initContainers:
      - {name: warm, image: x, resources: {requests: {cpu: "6"}}}"#;
    let v = schedule(
        &format!("{CLASS}{}{}", on_demand(), deploy("w", 1, "1", init)),
        &[],
    );
    assert_eq!(claims(&v)[0]["requests"]["cpu"], "6");
}

#[test]
fn a_pod_too_big_for_any_type_says_which_resource() {
    let v = schedule(
        &format!("{CLASS}{}{}", on_demand(), deploy("huge", 1, "500", "")),
        &[],
    );
    let pending: Vec<(String, Vec<String>)> = pending(&v)
        .into_iter()
        .map(|(p, r)| (deployment_of(&p), r))
        .collect();
    assert_eq!(
        pending,
        [(
            "default/huge".to_string(),
            vec![
                "nodepool default: no instance type has 500 cpu after daemonset overhead (the largest, r8in.96xlarge, leaves 382970m cpu)"
                    .to_string()
            ]
        )]
    );
}

#[test]
fn a_nodepools_existing_nodes_count_against_its_limits_and_a_cordoned_node_takes_no_pods() {
    // 4 of the pool's 6 cpu are taken by its existing node, which is full
    let node = |name: &str, cordoned: bool| {
        format!(
            r#"
---
apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels: {{kubernetes.io/hostname: {name}, topology.kubernetes.io/zone: us-east-1a, karpenter.sh/nodepool: default}}
spec: {{unschedulable: {cordoned}}}
status:
  allocatable: {{cpu: 3920m, memory: 6584Mi, pods: "58"}}
  capacity: {{cpu: "4", memory: 7936Mi, pods: "58"}}
"#
        )
    };
    let limited = pool(
        "default",
        0,
        "      - {key: node.kubernetes.io/instance-type, operator: In, values: [c6a.large]}\n",
        "  limits: {cpu: \"6\"}\n",
    );
    let full = r#"
---
apiVersion: v1
kind: Pod
metadata: {name: running, namespace: default}
spec:
  nodeName: n1
  containers: [{name: c, image: x, resources: {requests: {cpu: "3"}}}]
"#;
    let yaml = format!(
        "{CLASS}{limited}{}{full}{}",
        node("n1", false),
        deploy("web", 3, "1", "")
    );
    let v = schedule(&yaml, &[]);
    // room for one 2-cpu c6a.large (one pod) under the limit; the others wait
    assert_eq!(claims(&v).len(), 1, "{v:#}");
    assert_eq!(pods_of(&claims(&v)[0]).len(), 1);
    let stuck = pending(&v);
    assert_eq!(stuck.len(), 2);
    for (_, reasons) in stuck {
        assert_eq!(
            reasons,
            [
                "nodepool default: limit cpu=6 reached (6 in use or planned, the smallest instance type adds 2)"
            ]
        );
    }
    // the same node with room, but cordoned: nothing goes there
    let yaml = format!(
        "{CLASS}{}{}{}",
        on_demand(),
        node("n2", true),
        deploy("web", 1, "1", "")
    );
    let v = schedule(&yaml, &[]);
    assert!(v["existing"].as_array().unwrap().is_empty(), "{v:#}");
    assert_eq!(claims(&v).len(), 1);
}

#[test]
fn a_node_quantity_that_does_not_parse_is_an_error_naming_its_path() {
    let out = run(
        "apiVersion: v1\nkind: Node\nmetadata: {name: x}\nstatus: {capacity: {cpu: lots}}\n",
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(":4: Node/x: status.capacity.cpu: \"lots\" is not a quantity"),
        "{err}"
    );
}

#[test]
fn workload_typos_and_negative_counts_are_errors_with_their_lines() {
    let job = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\nspec:\n  paralelism: 3\n  template:\n    spec:\n      containers:\n      - name: c\n        image: x\n";
    let typo = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  template:\n    spec:\n      containers:\n      - name: c\n        image: x\n        resources:\n          reqests:\n            cpu: \"1\"\n";
    let replica =
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: r\nspec:\n  replica: 0\n";
    let negative =
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: neg\nspec:\n  replicas: -3\n";
    let yaml = format!(
        "{CLASS}{}---\n{job}---\n{typo}---\n{replica}---\n{negative}",
        on_demand()
    );
    let out = run(&yaml, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    // each names its field and the line of that field
    let line_of = |needle: &str| {
        yaml.lines()
            .position(|l| l.trim_start().starts_with(needle))
            .map(|i| i + 1)
            .expect(needle)
    };
    for (what, field, needle) in [
        ("Job/j", "spec.paralelism: unknown field", "paralelism:"),
        (
            "Deployment/web",
            "spec.template.spec.containers[0].resources.reqests: unknown field",
            "reqests:",
        ),
        ("Deployment/r", "spec.replica: unknown field", "replica:"),
        (
            "Deployment/neg",
            "spec.replicas: -3: must be greater than or equal to 0",
            "replicas: -3",
        ),
    ] {
        let expected = format!(":{}: {what}: {field}", line_of(needle));
        assert!(
            lines.iter().any(|l| l.ends_with(&expected)),
            "{expected}\n{err}"
        );
    }
}

#[test]
fn replicas_for_a_workload_that_does_not_exist_names_those_that_do() {
    let yaml = format!("{CLASS}{}{}", on_demand(), deploy("web", 1, "1", ""));
    let out = run(&yaml, &["--replicas", "nosuch=2"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--replicas nosuch: no Deployment, ReplicaSet or StatefulSet of that name (there are: web)"),
        "{err}"
    );
}

#[test]
fn alike_nodeclaims_are_told_once_with_their_count() {
    let spread = "      topologySpreadConstraints:\n      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: spread}}}";
    let text = |yaml: String| {
        let out = run(&yaml, &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = |deployment| text(format!("{CLASS}{}{deployment}", on_demand()));
    let one = text(deploy("one", 1, "1", ""));
    assert!(one.lines().any(|l| l.trim() == "1 pod: one"), "{one}");
    let text = text(deploy("spread", 3, "100m", spread));
    assert!(text.starts_with("NodeClaims to launch: 3 "), "{text}");
    let grouped: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" × nodepool "))
        .collect();
    assert_eq!(grouped.len(), 1, "{text}");
    assert!(
        grouped[0]
            .trim_start()
            .starts_with("3 × nodepool default: "),
        "{text}"
    );
    assert!(grouped[0].contains("/hour each; options "), "{text}");
    // the pods by their workload, not by name
    assert!(
        text.lines().any(|l| l.trim() == "3 pods: spread × 3"),
        "{text}"
    );
}

#[test]
fn a_nodeclaims_pods_are_told_by_workload_most_first() {
    let yaml = format!(
        "{CLASS}{}{}{}",
        on_demand(),
        deploy("small", 2, "100m", ""),
        deploy("large", 5, "100m", "")
    );
    let out = run(&yaml, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.trim() == "7 pods: large × 5, small × 2"),
        "{text}"
    );
    // the names are in the JSON output
    let json = run(&yaml, &["-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let pods = v["nodeclaims"][0]["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 7, "{v}");
    assert!(
        pods.iter()
            .all(|p| p.as_str().unwrap().starts_with("default/")),
        "{v}"
    );
}

#[test]
fn limits_nodes_caps_the_nodeclaims_and_explain_names_it() {
    let yaml = format!(
        "{CLASS}{}{}",
        pool("default", 0, "", "  limits: {nodes: 2}\n"),
        deploy(
            "spread",
            6,
            "1",
            "      affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchLabels: {app: spread}}, topologyKey: kubernetes.io/hostname}]}}\n"
        )
    );
    let v = schedule(&yaml, &[]);
    assert_eq!(claims(&v).len(), 2, "{v}");
    let left = pending(&v);
    assert_eq!(left.len(), 4, "{left:?}");
    assert!(
        left.iter()
            .all(|(_, reasons)| reasons.iter().any(|r| r.contains("limit nodes=2 reached"))),
        "{left:?}"
    );
}

#[test]
fn pod_level_resources_size_the_node() {
    let yaml = format!(
        "{CLASS}{}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: big, namespace: default}}\nspec:\n  resources: {{requests: {{cpu: \"6\", memory: 12Gi}}}}\n  containers: [{{name: c, image: x}}]\n",
        pool("default", 0, "", "")
    );
    let v = schedule(&yaml, &[]);
    assert_eq!(claims(&v).len(), 1, "{v}");
    // the pod's own requests, not its containers' (none): no type of 4 vCPUs or fewer
    assert_eq!(claims(&v)[0]["requests"]["cpu"], "6", "{v}");
    assert_eq!(claims(&v)[0]["requests"]["memory"], "12Gi", "{v}");
    let small = ["large", "xlarge", "medium", "small", "micro", "nano"];
    assert!(
        claims(&v)[0]["instance_type_options"]
            .as_array()
            .expect("options")
            .iter()
            .all(|t| !small
                .iter()
                .any(|s| t.as_str().unwrap_or("").ends_with(&format!(".{s}")))),
        "{v}"
    );
}

#[test]
fn a_statefulset_pod_goes_to_the_zone_of_its_bound_volume() {
    let yaml = format!(
        r#"{CLASS}{}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db, namespace: default}}
spec:
  replicas: 1
  serviceName: db
  selector: {{matchLabels: {{app: db}}}}
  template:
    metadata: {{labels: {{app: db}}}}
    spec:
      containers: [{{name: c, image: x, resources: {{requests: {{cpu: "1"}}}}}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 10Gi}}}}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data-db-0, namespace: default}}
spec: {{accessModes: [ReadWriteOnce], volumeName: pv-db, resources: {{requests: {{storage: 10Gi}}}}}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-db}}
spec:
  capacity: {{storage: 10Gi}}
  accessModes: [ReadWriteOnce]
  csi: {{driver: ebs.csi.aws.com, volumeHandle: vol-1}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1c]}}
"#,
        pool("default", 0, "", "")
    );
    let v = schedule(&yaml, &[]);
    assert_eq!(claims(&v).len(), 1, "{v}");
    assert_eq!(claims(&v)[0]["zone"], "us-east-1c", "{v}");
}

/// Thirty small StatefulSet pods with an EBS volume each, on a NodePool of m5.xlarge (58
/// pods, 26 EBS attachments with the root volume's slot kept): the volumes, not cpu or pod
/// slots, decide how many nodes they need. With a class the cluster does not know, or
/// claims of a driver without limits, one node hosts all thirty.
#[test]
fn ebs_attachment_slots_count_as_node_capacity() {
    let workload = |class: &str, provisioner: &str| {
        format!(
            r#"{CLASS}{}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: {class}}}
provisioner: {provisioner}
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db, namespace: default}}
spec:
  replicas: 30
  serviceName: db
  selector: {{matchLabels: {{app: db}}}}
  template:
    metadata: {{labels: {{app: db}}}}
    spec:
      containers: [{{name: c, image: x, resources: {{requests: {{cpu: 50m}}}}}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec: {{storageClassName: gp3, accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}
"#,
            pool(
                "default",
                0,
                "      - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}\n",
                ""
            )
        )
    };
    let ebs = schedule(&workload("gp3", "ebs.csi.aws.com"), &[]);
    let hosted: Vec<usize> = claims(&ebs)
        .iter()
        .map(|c| c["pods"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(hosted.iter().sum::<usize>(), 30, "{ebs}");
    assert!(hosted.iter().all(|n| *n <= 26), "{hosted:?}");
    assert_eq!(hosted.len(), 2, "{hosted:?}");
    let unlimited = schedule(&workload("gp3", "efs.csi.aws.com"), &[]);
    assert_eq!(claims(&unlimited).len(), 1, "{unlimited}");
}

#[test]
fn a_node_overlay_discount_changes_the_cheapest_fit() {
    let args = [
        "-f",
        "fixtures/seeds/004-getting-started.yaml",
        "--replicas",
        "inflate=5",
    ];
    let plain = schedule("", &args);
    let chosen = claims(&plain)[0]["instance_type"]
        .as_str()
        .unwrap()
        .to_string();
    // a Reserved Instance makes the memory-optimized 2xlarge all but free: it is the
    // cheapest fit now, at the overlaid price
    let overlay = "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: ri}\n\
                   spec:\n  price: \"0.01\"\n  requirements:\n  - {key: node.kubernetes.io/instance-type, operator: In, values: [r6i.2xlarge]}\n";
    let v = schedule(overlay, &args);
    let c = &claims(&v)[0];
    assert_ne!(chosen, "r6i.2xlarge");
    assert_eq!(c["instance_type"], "r6i.2xlarge", "{c}");
    assert!(
        (c["price_per_hour"].as_f64().unwrap() - 0.01).abs() < 1e-9,
        "{c}"
    );
}

/// As Karpenter v1.15 does, a pod whose claim the cluster does not have (or whose unbound
/// claim's class binds immediately) gets no node planned: it is listed as ignored, with why.
#[test]
fn a_pod_whose_claims_are_not_right_is_ignored_and_says_why() {
    let yaml = format!(
        r#"{CLASS}{}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: now}}
provisioner: ebs.csi.aws.com
volumeBindingMode: Immediate
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: fresh, namespace: default}}
spec: {{storageClassName: now, accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: typo, namespace: default}}
spec:
  containers: [{{name: c, image: x, resources: {{requests: {{cpu: "1"}}}}}}]
  volumes: [{{name: d, persistentVolumeClaim: {{claimName: dta}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: early, namespace: default}}
spec:
  containers: [{{name: c, image: x, resources: {{requests: {{cpu: "1"}}}}}}]
  volumes: [{{name: d, persistentVolumeClaim: {{claimName: fresh}}}}]
"#,
        pool("default", 0, "", "")
    );
    let v = schedule(&yaml, &[]);
    assert!(claims(&v).is_empty(), "{v}");
    let ignored: Vec<(String, String)> = v["ignored"]
        .as_array()
        .expect("ignored")
        .iter()
        .map(|i| {
            (
                i["pod"].as_str().unwrap().into(),
                i["reason"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        ignored,
        [
            (
                "default/early".to_string(),
                "persistentvolumeclaim default/fresh: pvc with immediate volume binding mode must be bound".to_string()
            ),
            (
                "default/typo".to_string(),
                "persistentvolumeclaim default/dta not found".to_string()
            ),
        ]
    );
}

/// A volume's zone narrows where its pod goes, not the domains its zonal spread counts (as
/// kube-scheduler counts them): three pods whose volumes are all in us-east-1a, spread over
/// zones with maxSkew 1, get one node; the other two would break the skew and wait.
#[test]
fn volumes_pin_the_zone_without_shrinking_a_spreads_domains() {
    let mut yaml = format!("{CLASS}{}", pool("default", 0, "", ""));
    for i in 0..3 {
        yaml += &format!(
            r#"
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data-{i}, namespace: default}}
spec: {{accessModes: [ReadWriteOnce], volumeName: pv-{i}, resources: {{requests: {{storage: 1Gi}}}}}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-{i}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  csi: {{driver: ebs.csi.aws.com, volumeHandle: vol-{i}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: db-{i}, namespace: default, labels: {{app: db}}}}
spec:
  topologySpreadConstraints:
  - {{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: db}}}}}}
  containers: [{{name: c, image: x, resources: {{requests: {{cpu: "1"}}}}}}]
  volumes: [{{name: d, persistentVolumeClaim: {{claimName: data-{i}}}}}]
"#
        );
    }
    let v = schedule(&yaml, &[]);
    let placed: usize = claims(&v)
        .iter()
        .map(|c| c["pods"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(placed, 1, "{v}");
    assert!(claims(&v).iter().all(|c| c["zone"] == "us-east-1a"), "{v}");
    assert_eq!(pending(&v).len(), 2, "{v}");
}

#[test]
fn the_plan_is_compared_with_its_cost_lower_bound() {
    let yaml = format!(
        "{CLASS}{}{}{}",
        on_demand(),
        deploy("small", 20, "900m", ""),
        deploy("large", 6, "3500m", "")
    );
    let out = run(&yaml, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().nth(1).unwrap_or_default();
    assert!(
        line.starts_with("cost $") && line.contains(", bound $") && line.ends_with("× the bound"),
        "{text}"
    );
    let json = run(&yaml, &["-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let (cost, bound) = (
        v["cost_per_hour"].as_f64().unwrap(),
        v["bound"]["per_hour"].as_f64().unwrap(),
    );
    // a lower bound, and not a trivial one: the pods' own resources are worth something
    assert!(bound > 0.0 && bound <= cost + 1e-9, "{v}");
    assert_eq!(v["bound"]["unplaceable_pods"], 0, "{v}");
}
