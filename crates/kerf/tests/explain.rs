//! `kerf explain` and `kerf simulate --explain-at`: one test per kind of reason a user
//! asks about, checked on the JSON fields (kinds, NodePools) and on the words shown.

use serde_json::Value;

mod common;
use common::{CLASS, deploy, kerf_stdin, pool};

/// `kerf explain KIND NAME -f - -o json` on `yaml`, plus flags. A Deployment's pod is named
/// `WORKLOAD-HASH-XXXXX`, as Kubernetes names it: `WORKLOAD-0` stands for the first of them.
fn explain(yaml: &str, kind: &str, name: &str, flags: &[&str]) -> Value {
    let name = match name.strip_suffix("-0") {
        Some(workload) if kind == "pod" => pod_of(yaml, workload),
        _ => name.to_string(),
    };
    let mut args = vec!["explain", kind, &name, "-f", "-", "-o", "json"];
    args.extend_from_slice(flags);
    let out = kerf_stdin(yaml, &args);
    assert!(
        out.status.success(),
        "kerf explain failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json output")
}

/// The first pod of the Deployment `workload` (in `default`) as `kerf schedule` lists it.
fn pod_of(yaml: &str, workload: &str) -> String {
    let out = kerf_stdin(yaml, &["schedule", "-f", "-", "-o", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("schedule json");
    let listed = v["nodeclaims"]
        .as_array()
        .into_iter()
        .chain(v["existing"].as_array())
        .flatten()
        .flat_map(|c| c["pods"].as_array().cloned().unwrap_or_default())
        .chain(
            v["unschedulable"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|u| u["pod"].clone()),
        )
        .filter_map(|p| p.as_str().map(str::to_string));
    let prefix = format!("default/{workload}-");
    let mut names: Vec<String> = listed.filter(|p| p.starts_with(&prefix)).collect();
    names.sort();
    names
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no pod of {workload}"))
}

/// The verdicts as `(nodepool, reason or "fits: TYPE")`, in the order given.
fn verdicts(v: &Value) -> Vec<(String, String)> {
    v["node_pools"]
        .as_array()
        .expect("node_pools")
        .iter()
        .map(|p| {
            let said = match p["fits"].as_object() {
                Some(fit) => format!("fits: {}", fit["capacity_type"].as_str().unwrap()),
                None => p["reason"].as_str().expect("a reason").to_string(),
            };
            (p["node_pool"].as_str().unwrap().to_string(), said)
        })
        .collect()
}

const ON_DEMAND: &str =
    "      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n";
const SPOT: &str = "      - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}\n";

#[test]
fn a_pending_pod_gets_every_nodepool_in_weight_order_with_its_first_reason_and_a_fix() {
    let yaml = format!(
        "{CLASS}{}{}{}{}",
        pool(
            "gpu",
            50,
            ON_DEMAND,
            "      taints: [{key: nvidia.com/gpu, value: \"true\", effect: NoSchedule}]"
        ),
        pool("tiny", 20, ON_DEMAND, "  limits: {cpu: \"1\"}"),
        pool("default", 0, ON_DEMAND, ""),
        deploy("web", 1, "1", "")
    );
    let v = explain(&yaml, "pod", "web-0", &[]);
    assert_eq!(v["placement"]["state"], "would_launch");
    assert_eq!(v["placement"]["node_pool"], "default");
    assert_eq!(
        verdicts(&v),
        [
            (
                "gpu".to_string(),
                "taint nvidia.com/gpu=true:NoSchedule not tolerated".to_string()
            ),
            (
                "tiny".to_string(),
                "limit cpu=1 reached (0 in use or planned, the smallest instance type adds 2)"
                    .to_string()
            ),
            ("default".to_string(), "fits: on-demand".to_string()),
        ]
    );
    let fixes: Vec<&str> = v["node_pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["fix"].as_str().unwrap_or(""))
        .collect();
    assert!(fixes[0].contains("toleration for nvidia.com/gpu=true:NoSchedule"));
    assert!(fixes[1].contains("spec.limits.cpu"));
    assert_eq!(fixes[2], "");
}

#[test]
fn requirement_label_and_size_reasons_name_what_each_side_asks() {
    let yaml = format!(
        "{CLASS}{}{}{}{}",
        pool("default", 0, ON_DEMAND, ""),
        deploy(
            "arm",
            1,
            "1",
            "      nodeSelector: {kubernetes.io/arch: arm64}"
        ),
        deploy("team", 1, "1", "      nodeSelector: {team: payments}"),
        deploy("huge", 1, "500", "")
    );
    let reason = |pod: &str| {
        let v = explain(&yaml, "pod", pod, &[]);
        assert_eq!(v["placement"]["state"], "unschedulable", "{v:#}");
        verdicts(&v).remove(0).1
    };
    assert_eq!(
        reason("arm-0"),
        "requirement kubernetes.io/arch In [arm64] not satisfied by kubernetes.io/arch In [amd64]"
    );
    assert_eq!(reason("team-0"), "label team is not defined");
    let huge = reason("huge-0");
    assert!(
        huge.starts_with("no instance type has 500 cpu after daemonset overhead (the largest, "),
        "{huge}"
    );
}

#[test]
fn unavailable_capacity_and_topology_are_told_apart() {
    let spot_only = format!(
        "{CLASS}{}{}",
        pool("spot", 0, SPOT, ""),
        deploy("web", 1, "1", "")
    );
    let v = explain(&spot_only, "pod", "web-0", &["--unavailable", "spot"]);
    assert_eq!(
        verdicts(&v)[0].1,
        "every matching offering is unavailable (insufficient capacity) or outside the allowed zones and capacity types"
    );
    assert!(
        v["node_pools"][0]["fix"]
            .as_str()
            .unwrap()
            .contains("on-demand")
    );
    // one zone, already holding a pod the new one must not share a zone with
    let one_zone = format!(
        "{CLASS}{}{NODE}{BOUND}{}",
        pool(
            "a",
            0,
            "      - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}\n",
            ""
        ),
        deploy(
            "db",
            1,
            "100m",
            "      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n          - {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: db}}}"
        )
    );
    let v = explain(&one_zone, "pod", "db-0", &[]);
    assert_eq!(v["placement"]["state"], "unschedulable", "{v:#}");
    assert_eq!(
        verdicts(&v)[0].1,
        "pod anti-affinity on topology.kubernetes.io/zone (pods per domain: us-east-1a 1) cannot be satisfied"
    );
}

#[test]
fn no_nodepool_no_matching_type_and_min_values_are_reasons_too() {
    let alone = format!("{CLASS}{}", deploy("web", 1, "1", ""));
    let v = explain(&alone, "pod", "web-0", &[]);
    assert_eq!(v["placement"]["state"], "unschedulable");
    assert_eq!(v["node_pools"], serde_json::json!([]));
    let out = kerf_stdin(
        &alone,
        &["explain", "pod", &pod_of(&alone, "web"), "-f", "-"],
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("no NodePools exist: create one whose requirements the pod accepts")
    );
    let no_type = format!(
        "{CLASS}{}{}",
        pool(
            "odd",
            0,
            "      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [zz9]}\n",
            ""
        ),
        deploy("web", 1, "1", "")
    );
    assert_eq!(
        verdicts(&explain(&no_type, "pod", "web-0", &[]))[0].1,
        "no instance type matches the requirements"
    );
    let min_values = format!(
        "{CLASS}{}{}",
        pool(
            "wide",
            0,
            "      - {key: karpenter.k8s.aws/instance-generation, operator: In, values: [\"5\"]}\n      - {key: karpenter.k8s.aws/instance-family, operator: Exists, minValues: 50}\n",
            ""
        ),
        deploy("web", 1, "1", "")
    );
    assert_eq!(
        verdicts(&explain(&min_values, "pod", "web-0", &[]))[0].1,
        "fewer than 50 values of karpenter.k8s.aws/instance-family would remain (minValues)"
    );
}

const NODE: &str = r#"
---
apiVersion: v1
kind: Node
metadata:
  name: other-1
  labels: {topology.kubernetes.io/zone: us-east-1a, kubernetes.io/hostname: other-1, kubernetes.io/arch: amd64, kubernetes.io/os: linux}
status:
  capacity: {cpu: "2", memory: 4Gi, pods: "20"}
  allocatable: {cpu: "2", memory: 4Gi, pods: "20"}
"#;

const BOUND: &str = r#"
---
apiVersion: v1
kind: Pod
metadata: {name: db-old, namespace: default, labels: {app: db}}
spec:
  nodeName: other-1
  containers:
  - {name: c, image: pause, resources: {requests: {cpu: 1500m}}}
"#;

#[test]
fn a_running_pod_says_where_and_an_unknown_one_lists_the_pods_that_exist() {
    let yaml = format!("{CLASS}{}{NODE}{BOUND}", pool("a", 0, ON_DEMAND, ""));
    let v = explain(&yaml, "pod", "db-old", &[]);
    assert_eq!(v["placement"]["state"], "running");
    assert_eq!(v["placement"]["node"], "other-1");
    assert_eq!(v["placement"]["zone"], "us-east-1a");
    let out = kerf_stdin(&yaml, &["explain", "pod", "db-new", "-f", "-"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "no pod default/db-new; there are: default/db-old"
    );
    let out = kerf_stdin(&yaml, &["explain", "node", "other-1", "-f", "-"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("- [not-managed] node isn't managed by karpenter"),
        "{text}"
    );
}

/// A Kerf node as `kubectl get nodeclaims,nodes,pods -o yaml` shows one: an m5.2xlarge
/// NodeClaim of NodePool `default`, its Node, and `pods` bound to it.
fn managed_node(pods: &str) -> String {
    let mut yaml = format!(
        "{CLASS}{}",
        pool(
            "default",
            0,
            ON_DEMAND,
            "  disruption: {consolidateAfter: 0s}"
        )
    );
    yaml += r#"
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-abcde
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.2xlarge, topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: on-demand}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements:
  - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.2xlarge]}
status:
  providerID: aws:///us-east-1a/i-0123456789abcdef0
  nodeName: n1
  capacity: {cpu: "8", memory: 32Gi, pods: "58"}
  allocatable: {cpu: 7910m, memory: 29Gi, pods: "58"}
  conditions:
  - {type: Launched, status: "True", reason: Launched, message: "", lastTransitionTime: "2026-11-25T10:00:00Z"}
  - {type: Registered, status: "True", reason: Registered, message: "", lastTransitionTime: "2026-11-25T10:00:00Z"}
  - {type: Initialized, status: "True", reason: Initialized, message: "", lastTransitionTime: "2026-11-25T10:00:00Z"}
---
apiVersion: v1
kind: Node
metadata:
  name: n1
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.2xlarge, topology.kubernetes.io/zone: us-east-1a, karpenter.sh/capacity-type: on-demand, kubernetes.io/arch: amd64, kubernetes.io/os: linux, kubernetes.io/hostname: n1, karpenter.sh/registered: "true", karpenter.sh/initialized: "true"}
spec:
  providerID: aws:///us-east-1a/i-0123456789abcdef0
status:
  capacity: {cpu: "8", memory: 32Gi, pods: "58"}
  allocatable: {cpu: 7910m, memory: 29Gi, pods: "58"}
  conditions:
  - {type: Ready, status: "True", lastTransitionTime: "2026-11-25T10:00:00Z"}
"#;
    yaml + pods
}

const WEB: &str = r#"
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: default, labels: {app: web}}
spec:
  nodeName: n1
  containers:
  - {name: c, image: pause, resources: {requests: {cpu: 500m, memory: 256Mi}}}
"#;

/// The messages of the explanation's notes of one kind.
fn notes_of<'a>(v: &'a Value, kind: &str) -> Vec<&'a str> {
    (v["notes"].as_array().into_iter().flatten())
        .filter(|n| n["kind"] == kind)
        .filter_map(|n| n["message"].as_str())
        .collect()
}

fn kinds(v: &Value, field: &str) -> Vec<String> {
    v[field]
        .as_array()
        .expect(field)
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn an_oversized_node_in_a_snapshot_would_be_replaced_by_the_next_pass() {
    let v = explain(&managed_node(WEB), "node", "n1", &[]);
    assert_eq!(kinds(&v, "blockers"), Vec::<String>::new());
    let decision = v["decision"].as_str().expect("a decision");
    assert!(
        decision.starts_with("the next disruption pass would replace it with "),
        "{decision}"
    );
    assert!(
        decision.contains("(Underutilized, single-node consolidation, saving $"),
        "{decision}"
    );
    assert_eq!(v["pods"], serde_json::json!(["default/web-0"]));
}

#[test]
fn a_drifted_node_is_replaced_even_when_it_costs_more_and_a_cheapest_node_is_kept() {
    let drifted = managed_node(WEB).replace(
        "  - {type: Initialized,",
        "  - {type: Drifted, status: \"True\", reason: NodePoolDrifted, message: \"\", lastTransitionTime: \"2026-11-25T10:00:00Z\"}\n  - {type: Initialized,",
    );
    let v = explain(&drifted, "node", "n1", &[]);
    assert_eq!(kinds(&v, "notes"), ["drifted", "expires"]);
    assert_eq!(v["notes"][0]["message"], "drifted: NodePoolDrifted");
    let decision = v["decision"].as_str().expect("a decision");
    assert!(
        decision.contains("(Drifted, drift replacement, "),
        "{decision}"
    );
    // the cheapest type there is, already: nothing cheaper can take its pod
    let cheapest = managed_node(WEB)
        .replace("m5.2xlarge", "t3a.nano")
        .replace("cpu: \"8\", memory: 32Gi", "cpu: \"2\", memory: 2Gi")
        .replace("cpu: 7910m, memory: 29Gi", "cpu: 1930m, memory: 1Gi")
        .replace("cpu: 500m, memory: 256Mi", "cpu: 100m, memory: 64Mi");
    let v = explain(&cheapest, "node", "n1", &[]);
    assert!(v["decision"].is_null(), "{v:#}");
    assert_eq!(kinds(&v, "notes"), ["expires", "no-cheaper-replacement"]);
    let message = v["notes"][1]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Can't replace with a cheaper node: no instance type launches for less than $"
        ),
        "{message}"
    );
}

#[test]
fn do_not_disrupt_and_a_pdb_without_room_block_the_node_by_name() {
    let protected = WEB.replace(
        "labels: {app: web}}",
        "labels: {app: web}, annotations: {karpenter.sh/do-not-disrupt: \"true\"}}",
    );
    let v = explain(&managed_node(&protected), "node", "n1", &[]);
    assert_eq!(kinds(&v, "blockers"), ["do-not-disrupt"]);
    assert_eq!(
        v["blockers"][0]["message"],
        "pod has \"karpenter.sh/do-not-disrupt\" annotation (Pod=default/web-0)"
    );
    assert!(v["decision"].is_null());
    let pdb = r#"
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
"#;
    let v = explain(&managed_node(&format!("{WEB}{pdb}")), "node", "n1", &[]);
    assert_eq!(kinds(&v, "blockers"), ["pdb"]);
    assert_eq!(
        v["blockers"][0]["message"],
        "pdb prevents pod evictions (Pod=default/web-0, PodDisruptionBudget=[default/web])"
    );
    let node_annotated = managed_node(WEB).replace(
        "  name: n1\n",
        "  name: n1\n  annotations: {karpenter.sh/do-not-disrupt: \"true\"}\n",
    );
    let v = explain(&node_annotated, "node", "n1", &[]);
    assert_eq!(kinds(&v, "blockers"), ["do-not-disrupt"]);
    assert_eq!(
        v["blockers"][0]["message"],
        "disruption is blocked through the \"karpenter.sh/do-not-disrupt\" annotation"
    );
    // the pass itself leaves the node alone, not only the explanation
    assert!(v["decision"].is_null(), "{v:#}");
}

/// A scenario: one on-demand NodePool with `disruption`, a Deployment of `replicas` 1-cpu
/// pods with `annotations`, scaled up at 1m, and `extra` manifests.
fn scenario(disruption: &str, capacity: &str, annotations: &str, extra: &str) -> String {
    format!(
        r#"
apiVersion: kerf.sh/v1alpha1
kind: Scenario
metadata: {{name: explain}}
spec:
  duration: 2h
  manifests:
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata: {{name: default}}
    spec:
      role: KarpenterNodeRole-demo
      amiSelectorTerms: [{{alias: al2023@latest}}]
      subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
      securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {{name: default}}
    spec:
      template:
        spec:
          requirements:
          - {{key: karpenter.sh/capacity-type, operator: In, values: [{capacity}]}}
          - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}}
          nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      disruption: {disruption}
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: app, namespace: default}}
    spec:
      replicas: 0
      selector: {{matchLabels: {{app: app}}}}
      template:
        metadata: {{labels: {{app: app}}, annotations: {annotations}}}
        spec:
          containers:
          - name: c
            image: pause
            resources: {{requests: {{cpu: 1}}}}
{extra}
  events:
  - {{at: 1m, scale: {{kind: Deployment, name: app, namespace: default, replicas: 6}}}}
  - {{at: 10m, scale: {{kind: Deployment, name: app, namespace: default, replicas: 1}}}}
"#
    )
}

/// `kerf simulate SCENARIO --explain-at AT node <the first node> -o json`.
fn node_at(scenario: &str, at: &str) -> Value {
    let path =
        std::env::temp_dir().join(format!("kerf-explain-{}-{:x}.yaml", std::process::id(), {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (scenario, at).hash(&mut h);
            h.finish()
        }));
    std::fs::write(&path, scenario).expect("write scenario");
    let explained = explain_at(
        path.to_str().unwrap(),
        at,
        "ip-10-0-0-1.ec2.compute.internal",
    );
    let _ = std::fs::remove_file(&path);
    explained
}

/// `kerf simulate FILE --explain-at AT node NODE -o json`.
fn explain_at(file: &str, at: &str, node: &str) -> Value {
    let out = kerf_stdin(
        "",
        &[
            "simulate",
            file,
            "--explain-at",
            at,
            "node",
            node,
            "-o",
            "json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

#[test]
fn consolidate_after_policy_and_budgets_say_which_rule_and_until_when() {
    let quiet = node_at(
        &scenario(
            "{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 1h}",
            "on-demand",
            "{}",
            "",
        ),
        "30m",
    );
    assert_eq!(kinds(&quiet, "blockers"), ["consolidate-after"]);
    let message = quiet["blockers"][0]["message"].as_str().unwrap();
    assert!(
        message
            .starts_with("consolidateAfter 1h: pods last changed 20m ago, consolidatable in 40m"),
        "{message}"
    );
    let never = node_at(
        &scenario("{consolidateAfter: Never}", "on-demand", "{}", ""),
        "30m",
    );
    assert_eq!(
        never["blockers"][0]["message"],
        "NodePool \"default\" has consolidation disabled"
    );
    let when_empty = node_at(
        &scenario(
            "{consolidationPolicy: WhenEmpty, consolidateAfter: 0s}",
            "on-demand",
            "{}",
            "",
        ),
        "30m",
    );
    assert_eq!(
        when_empty["blockers"][0]["message"],
        "NodePool \"default\" has consolidation policy WhenEmpty, but node is not empty"
    );
    let no_budget = node_at(
        &scenario(
            "{consolidateAfter: 0s, budgets: [{nodes: \"0\"}]}",
            "on-demand",
            "{}",
            "",
        ),
        "30m",
    );
    assert_eq!(kinds(&no_budget, "blockers"), ["budget"]);
    assert_eq!(
        no_budget["blockers"][0]["message"],
        "No allowed disruptions for disruption reason Underutilized due to blocking budget: budgets[0] (nodes \"0\")"
    );
    // what consolidating it would come to, had the budget allowed it
    assert_eq!(
        kinds(&no_budget, "notes"),
        ["expires", "last-pass", "cheaper-replacement"]
    );
    // a scheduled window says when it closes (the simulation starts 2026-01-01 00:00 UTC)
    let window = node_at(
        &scenario(
            "{consolidateAfter: 0s, budgets: [{nodes: \"0\", schedule: \"0 0 * * *\", duration: 2h}]}",
            "on-demand",
            "{}",
            "",
        ),
        "30m",
    );
    assert_eq!(
        window["blockers"][0]["message"],
        "No allowed disruptions for disruption reason Underutilized due to blocking budget: budgets[0] (nodes \"0\", schedule \"0 0 * * *\" for 2h, until 2026-01-01T02:00:00.000Z (in 1h30m))"
    );
}

#[test]
fn the_events_the_api_server_keeps_about_the_node_come_with_its_explanation() {
    let protected = scenario(
        "{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s}",
        "on-demand",
        "{karpenter.sh/do-not-disrupt: \"true\"}",
        "",
    );
    let v = node_at(&protected, "30m");
    let events = v["events"].as_array().expect("events");
    let blocked: Vec<&Value> = (events.iter())
        .filter(|e| e["reason"] == "DisruptionBlocked")
        .collect();
    assert_eq!(blocked.len(), 1, "{v:#}");
    let message = blocked[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Pod has \"karpenter.sh/do-not-disrupt\" annotation (Pod=default/app-"),
        "{message}"
    );
    // the pass that told it keeps it as what it found for the node, and explain says so
    let last_pass = notes_of(&v, "last-pass");
    assert!(
        last_pass.len() == 1
            && last_pass[0].ends_with(&format!("left it out: {message}"))
            && last_pass[0].starts_with("the disruption pass "),
        "{last_pass:?}"
    );
    // said again while it lasts, counted in the one Event as a recorder counts a repeat
    assert!(blocked[0]["count"].as_u64().unwrap() > 1, "{v:#}");
    assert!(blocked[0]["firstTimestamp"].as_str() < blocked[0]["lastTimestamp"].as_str());
    // said once by 30m, counted once
    let never = node_at(
        &scenario("{consolidateAfter: Never}", "on-demand", "{}", ""),
        "30m",
    );
    let said: Vec<(&str, &str, u64)> = (never["events"].as_array().expect("events").iter())
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default();
            (
                text("reason"),
                text("message"),
                e["count"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        said,
        [(
            "Unconsolidatable",
            "NodePool \"default\" has consolidation disabled",
            1
        )]
    );
}

#[test]
fn a_timed_do_not_disrupt_ends_and_spot_to_spot_is_named() {
    let timed = scenario(
        "{consolidateAfter: 0s, budgets: [{nodes: \"0\"}]}",
        "on-demand",
        "{karpenter.sh/do-not-disrupt: 30m}",
        "",
    );
    let early = node_at(&timed, "20m");
    assert_eq!(kinds(&early, "blockers"), ["do-not-disrupt", "budget"]);
    let message = early["blockers"][0]["message"].as_str().unwrap();
    assert!(message.contains(" until in "), "{message}");
    let late = node_at(&timed, "1h");
    assert_eq!(kinds(&late, "blockers"), ["budget"]);
    // the six pods on one node (as Karpenter packs them), which the one left after the
    // scale-down no longer needs
    let together = "          affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchLabels: {app: app}}, topologyKey: kubernetes.io/hostname}]}}";
    let spot = node_at(
        &scenario(
            "{consolidateAfter: 0s, budgets: [{nodes: \"0\"}]}",
            "spot",
            "{}",
            together,
        ),
        "30m",
    );
    assert_eq!(
        kinds(&spot, "notes"),
        ["expires", "last-pass", "spot-to-spot"]
    );
    assert_eq!(
        spot["notes"][2]["message"],
        "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
    );
}

#[test]
fn a_move_below_the_minimum_saving_is_named_with_the_setting() {
    let together = "          affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchLabels: {app: app}}, topologyKey: kubernetes.io/hostname}]}}";
    let base = scenario(
        "{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s}",
        "on-demand",
        "{}",
        together,
    );
    // the six pods' node, one pod left: a cheaper node would do
    let free = node_at(&base, "10m20s");
    assert_eq!(kinds(&free, "notes"), ["expires", "cheaper-replacement"]);
    let strict = base.replacen(
        "  duration: 2h\n",
        "  duration: 2h\n  consolidationMinSavingsPerHour: 5\n",
        1,
    );
    let kept = node_at(&strict, "10m20s");
    assert!(
        kept["blockers"].as_array().is_some_and(Vec::is_empty),
        "{kept}"
    );
    let note = (kept["notes"].as_array().expect("notes").iter())
        .find(|n| n["kind"] == "not-worth-it")
        .expect("the minimum saving named");
    let message = note["message"].as_str().unwrap();
    assert!(
        message.contains("the minimum saving is $5.0000/hour"),
        "{message}"
    );
}

#[test]
fn explain_at_rejects_a_bad_time_and_kind_with_exit_2() {
    let out = kerf_stdin("", &["simulate", "--explain-at", "soon", "node", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("--explain-at soon: "));
    let out = kerf_stdin("", &["simulate", "--explain-at", "1h", "nodepool", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "--explain-at: \"nodepool\": expected pod or node"
    );
}

/// A pod whose bound volume lives in a zone its NodePool does not offer: the NodePool's
/// verdict names the zone, and the explanation says the requirement is the volume's.
#[test]
fn a_volumes_zone_is_named_as_the_volumes() {
    let yaml = format!(
        r#"{CLASS}{}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data, namespace: default}}
spec: {{accessModes: [ReadWriteOnce], volumeName: pv-1, resources: {{requests: {{storage: 1Gi}}}}}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-1}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  csi: {{driver: ebs.csi.aws.com, volumeHandle: vol-1}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1d]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: db, namespace: default}}
spec:
  containers: [{{name: c, image: x, resources: {{requests: {{cpu: "1"}}}}}}]
  volumes: [{{name: d, persistentVolumeClaim: {{claimName: data}}}}]
"#,
        pool("default", 0, ON_DEMAND, "")
    );
    let v = explain(&yaml, "pod", "default/db", &[]);
    assert_eq!(v["placement"]["state"], "unschedulable", "{v:#}");
    assert!(verdicts(&v)[0].1.contains("us-east-1d"), "{v:#}");
    assert_eq!(
        v["volumes"][0],
        "claim data: bound to PersistentVolume pv-1, reached from topology.kubernetes.io/zone In [us-east-1d]"
    );
}

/// `kerf explain` says what `kerf schedule` says of a pod a NodePool's limit leaves pending
/// once the pods planned before it take the room: not "fits", which the NodePool would say
/// of the pod alone.
#[test]
fn a_pod_left_pending_by_a_limit_the_others_use_up_is_told_the_limit() {
    let yaml = format!(
        "{CLASS}{}{}",
        pool("small", 10, "", "  limits: {cpu: \"4\"}"),
        deploy("web", 6, "1500m", "")
    );
    let out = kerf_stdin(&yaml, &["schedule", "-f", "-", "-o", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("schedule json");
    let pending = v["unschedulable"][0]["pod"]
        .as_str()
        .expect("a pod left pending");
    let name = pending.strip_prefix("default/").expect("namespaced");
    let v = explain(&yaml, "pod", name, &[]);
    assert_eq!(v["placement"]["state"], "unschedulable", "{v:#}");
    let said = verdicts(&v);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].1.starts_with("limit cpu=4 reached"), "{said:?}");
}

/// The node's move as `kerf explain` tells it ahead of a pass is the pass's own: swarm seed
/// 66157 at 52:39, where the cheapest move (a split over two new nodes) would leave a pod
/// without a node under kube-scheduler. Explain names that move as dropped, and the move the
/// next pass makes instead (all the node's pods on one spot node), which the pass at 52:40
/// then chooses word for word.
#[test]
fn explain_tells_the_move_the_next_pass_makes_and_the_one_its_rehearsal_drops() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../kerf-sim/tests/swarm/seed-66157.yaml"
    );
    let at = |t: &str| explain_at(file, t, "ip-10-0-0-9.ec2.compute.internal");
    let before = at("52m39s");
    let next = before["decision"].as_str().unwrap_or_default();
    let the_move = next
        .strip_prefix("the next disruption pass would ")
        .unwrap_or_else(|| panic!("a dry run of the next pass: {before}"));
    assert!(
        the_move.starts_with("replace it with c8gd.2xlarge (Underutilized, single-node"),
        "{the_move}"
    );
    let dropped = notes_of(&before, "rehearsal-dropped");
    assert!(
        dropped.len() == 1
            && dropped[0].contains("replace it with c6g.large, c6g.xlarge")
            && dropped[0].contains("kube-scheduler would leave pod(s) default/app-4-"),
        "{dropped:?}"
    );
    // what the last pass (at 52:30, before consolidateAfter ran out) found, as it recorded it
    assert_eq!(
        notes_of(&before, "last-pass"),
        ["the disruption pass 9s ago found no move for it"]
    );
    let after = at("52m41s");
    assert_eq!(
        after["decision"].as_str(),
        Some(format!("the disruption pass 1s ago chose to {the_move}").as_str()),
        "{after}"
    );
}

/// A node that a dropped multi-node move took is still single-node consolidation's, in the
/// same pass: swarm seed 139195, where the move of an on-demand m6g.large and two other nodes
/// onto an m6g.8xlarge and an r6g.large would leave an `app-13` pod without a node. Once the
/// heavier `fallback` NodePool offers on-demand arm64 (at 30:00), the pass that drops that move
/// again replaces the node alone with an r6g.medium.
#[test]
fn a_dropped_multi_node_move_leaves_its_nodes_to_single_node_consolidation() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../kerf-sim/tests/swarm/seed-139195.yaml"
    );
    let at = |t: &str| explain_at(file, t, "ip-10-0-0-15.ec2.compute.internal");
    let before = at("29m59s");
    let dropped = notes_of(&before, "rehearsal-dropped");
    assert!(
        dropped.len() == 1
            && dropped[0].contains("replace it and 2 other nodes with m6g.8xlarge, r6g.large")
            && dropped[0].contains("multi-node consolidation")
            && dropped[0].contains("kube-scheduler would leave pod(s) default/app-13-"),
        "{dropped:?}"
    );
    let after = at("30m01s");
    assert_eq!(
        after["decision"].as_str(),
        Some(
            "the disruption pass 1s ago chose to replace it with r6g.medium (Underutilized, \
             single-node consolidation, saving $0.0266/hour)"
        ),
        "{after}"
    );
}
