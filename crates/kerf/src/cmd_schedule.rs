//! `kerf schedule -f MANIFESTS...`: a dry run of provisioning. Reads NodePools,
//! EC2NodeClasses, Nodes, DaemonSets and workloads, and prints the NodeClaims Kerf would
//! launch, the pods that fit on existing nodes, and the pods that stay pending and why.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kerf_api::manifest::{Checked, KarpenterObject, check_document, field_line, read_documents};
use kerf_api::{EC2NodeClass, NodePool};
use kerf_aws::capacity::NodeSettings;
use kerf_aws::instance_type::scheduler_options;
use kerf_core::cluster::NodeRecord;
use kerf_core::controllers::provisioning::Solved;
use kerf_core::controllers::{Controllers, Settings};
use kerf_core::nodepools::daemon_runs_on;
use kerf_core::objects::node_record;
use kerf_core::provisioner::{nodeclaim, nodeclaim_name};
use kerf_core::unavailable::Pattern;
use kerf_core::workloads::{ClusterObject, read};
use kerf_scheduling::PlannedNodeClaim;
use kerf_scheduling::pods::pod_key;
use kerf_scheduling::resources::Resources;
use kerf_sim::report::plural;
use rand::SeedableRng;
use serde_json::json;

/// Arguments of `kerf schedule`.
#[derive(clap::Args)]
pub struct Args {
    /// Manifest files (multi-document YAML): NodePools, EC2NodeClasses, Nodes, DaemonSets,
    /// Pods, Deployments, ReplicaSets, StatefulSets, Jobs; `-` reads standard input.
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    files: Vec<PathBuf>,
    /// AWS region whose zones and instance types are offered.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Treat offerings as out of capacity: CAPACITY_TYPE[:INSTANCE_TYPE[:ZONE]], `*` for any
    /// (repeatable; `spot` means every spot offering).
    #[arg(long, value_parser = Pattern::parse)]
    unavailable: Vec<Pattern>,
    /// Output format: text, json, or the NodeClaim objects as YAML.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    output: Format,
    /// Set a workload's replicas, as `kubectl scale` would: NAME=N (repeatable).
    #[arg(long = "replicas", value_parser = parse_replicas)]
    replicas: Vec<(String, i64)>,
    /// Seed of the NodeClaim name suffixes (`-o nodeclaims`).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Text,
    Json,
    Nodeclaims,
}

/// What the manifests hold.
#[derive(Default)]
struct Inputs {
    node_pools: Vec<NodePool>,
    node_classes: HashMap<String, EC2NodeClass>,
    nodes: Vec<Node>,
    daemonsets: Vec<Pod>,
    pods: Vec<Pod>,
}

fn parse_replicas(text: &str) -> std::result::Result<(String, i64), String> {
    let (name, n) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected NAME=N"))?;
    let n: i64 = n
        .parse()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| format!("{text:?}: N must be a whole number"))?;
    Ok((name.to_string(), n))
}

fn load(
    files: &[PathBuf],
    replicas: &[(String, i64)],
) -> Result<std::result::Result<Inputs, String>> {
    let mut inputs = Inputs::default();
    let mut problems = String::new();
    let mut scalable_names = Vec::new();
    for file in files {
        let shown = file.display();
        let text = if file.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin())
        } else {
            std::fs::read_to_string(file)
        }
        .with_context(|| format!("{shown}: cannot read"))?;
        let docs = read_documents(&text).map_err(|e| {
            anyhow::anyhow!(
                "{shown}:{}:{}: cannot parse YAML: {}",
                e.line,
                e.column,
                e.message
            )
        })?;
        for mut doc in docs {
            let scalable = matches!(doc.kind(), "Deployment" | "ReplicaSet" | "StatefulSet");
            if scalable {
                scalable_names.push(doc.name().to_string());
            }
            if let Some((_, n)) = replicas
                .iter()
                .find(|(name, _)| scalable && name == doc.name())
                && let Some(spec) = doc.value.get_mut("spec").and_then(|s| s.as_object_mut())
            {
                spec.insert("replicas".into(), (*n).into());
            }
            let doc = &doc;
            let what = format!("{}/{}", doc.kind(), doc.name());
            match check_document(doc) {
                Checked::Valid(KarpenterObject::NodePool(np)) => inputs.node_pools.push(*np),
                Checked::Valid(KarpenterObject::EC2NodeClass(nc)) => {
                    let name = nc.metadata.name.clone().unwrap_or_default();
                    inputs.node_classes.insert(name, *nc);
                }
                Checked::Valid(KarpenterObject::NodeClaim(_)) => {}
                Checked::Invalid(list) => {
                    for p in list {
                        let line = field_line(&text, doc.line, &p.path);
                        let _ = writeln!(
                            problems,
                            "{shown}:{line}: {what}: {}: {}",
                            p.path, p.message
                        );
                    }
                }
                Checked::Other => match read(doc) {
                    Ok(Some(ClusterObject::Pods(pods))) => inputs.pods.extend(pods),
                    Ok(Some(ClusterObject::DaemonSet(pod))) => inputs.daemonsets.push(*pod),
                    Ok(Some(ClusterObject::Node(node))) => {
                        let bad = node_quantity_problems(&node);
                        for (path, e) in &bad {
                            let line = field_line(&text, doc.line, path);
                            let _ = writeln!(problems, "{shown}:{line}: {what}: {path}: {e}");
                        }
                        if bad.is_empty() {
                            inputs.nodes.push(*node);
                        }
                    }
                    // one scheduling round disrupts nothing: budgets do not apply
                    Ok(Some(ClusterObject::Pdb(_)) | None) => {}
                    Err(e) => {
                        let line = field_line(&text, doc.line, &e.path);
                        let _ = writeln!(problems, "{shown}:{line}: {e}");
                    }
                },
            }
        }
    }
    for (name, _) in replicas {
        if !scalable_names.contains(name) {
            scalable_names.sort();
            scalable_names.dedup();
            let known = if scalable_names.is_empty() {
                "there are none".to_string()
            } else {
                format!("there are: {}", scalable_names.join(", "))
            };
            let _ = writeln!(
                problems,
                "--replicas {name}: no Deployment, ReplicaSet or StatefulSet of that name ({known})"
            );
        }
    }
    Ok(if problems.is_empty() {
        Ok(inputs)
    } else {
        Err(problems)
    })
}

/// The Node's capacity and allocatable quantities that do not parse, with their paths: the
/// solver would read them as zero.
fn node_quantity_problems(node: &Node) -> Vec<(String, String)> {
    let status = node.status.as_ref();
    [
        ("capacity", status.and_then(|s| s.capacity.as_ref())),
        ("allocatable", status.and_then(|s| s.allocatable.as_ref())),
    ]
    .into_iter()
    .flat_map(|(field, list)| {
        list.into_iter().flatten().filter_map(move |(name, q)| {
            kerf_api::quantity::Quantity::parse(&q.0)
                .err()
                .map(|e| (format!("status.{field}.{name}"), e.to_string()))
        })
    })
    .collect()
}

/// Runs the dry run; exit 2 when a manifest is invalid or `--replicas` names no workload.
pub fn run(args: &Args) -> Result<ExitCode> {
    let inputs = match load(&args.files, &args.replicas)? {
        Ok(i) => i,
        Err(problems) => {
            eprint!("{problems}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut core = cluster_of(inputs, args)?;
    let solved = core.dry_run();
    let text = match args.output {
        Format::Json => serde_json::to_string_pretty(&to_json(&solved))? + "\n",
        Format::Text => to_text(&solved),
        Format::Nodeclaims => {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
            let mut out = String::new();
            for plan in &solved.decision.nodeclaims {
                let pool = &solved.node_pools[plan.node_pool];
                let np = &core.cluster.node_pools[pool];
                let name = nodeclaim_name(pool, &mut rng);
                out.push_str("---\n");
                out.push_str(&serde_yaml::to_string(&nodeclaim(plan, np, name))?);
            }
            out
        }
    };
    crate::emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The cluster the manifests describe, as the controllers hold it: every unbound pod is
/// pending (kube-scheduler found it no room), a node is Ready unless its status says
/// otherwise, and each DaemonSet has its pod on every node it would run on.
fn cluster_of(inputs: Inputs, args: &Args) -> Result<Controllers> {
    let mut core = Controllers::new(Settings::default(), args.seed);
    let now = Duration::ZERO;
    let cluster = &mut core.cluster;
    let unavailable =
        |ct: &str, it: &str, zone: &str| args.unavailable.iter().any(|p| p.matches(ct, it, zone));
    for class in inputs.node_classes.into_values() {
        cluster.apply_node_class(class);
    }
    for np in inputs.node_pools {
        let class = np.spec.template.spec.node_class_ref.name.clone();
        if !cluster.instance_types.contains_key(&class) {
            let settings = match cluster.node_classes.get(&class) {
                Some(nc) => NodeSettings::from_node_class(&nc.spec),
                None => {
                    eprintln!(
                        "note: nodepool {}: EC2NodeClass {class} not in the manifests; assuming its defaults",
                        np.metadata.name.as_deref().unwrap_or("")
                    );
                    NodeSettings::default()
                }
            };
            let types = kerf_aws::instance_types(&args.region, &settings)?;
            cluster.set_instance_types(&class, scheduler_options(&types, unavailable).into());
        }
        cluster.apply_node_pool(np);
    }
    for ds in inputs.daemonsets {
        let key = pod_key(&ds);
        cluster.apply_daemonset(key, ds);
    }
    for mut node in inputs.nodes {
        let status = node.status.get_or_insert_with(Default::default);
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        if !conditions.iter().any(|c| c.type_ == "Ready") {
            conditions.push(NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            });
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        cluster.apply_node(name, node_record(&node, now), now);
    }
    for pod in inputs.pods {
        let key = pod_key(&pod);
        match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            Some(node) if !cluster.nodes.contains_key(node) => {
                eprintln!(
                    "note: pod {key} is bound to node {node}, which is not in the manifests; ignored"
                );
            }
            Some(_) => cluster.apply_pod(pod, now),
            None => {
                cluster.apply_pod(pod, now);
                cluster.mark_unschedulable(&key, now);
            }
        }
    }
    let nodes: Vec<(String, NodeRecord)> = cluster
        .nodes
        .iter()
        .map(|(k, n)| (k.clone(), n.clone()))
        .collect();
    let daemonsets: Vec<Pod> = cluster.daemonsets.values().cloned().collect();
    for (node, record) in nodes {
        for ds in &daemonsets {
            let ds_name = ds.metadata.name.clone().unwrap_or_default();
            let running = cluster.pods.values().any(|p| {
                p.node.as_deref() == Some(node.as_str())
                    && p.pod
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.kind == "DaemonSet" && o.name == ds_name)
            });
            if running || !daemon_runs_on(ds, &record.labels, &record.taints) {
                continue;
            }
            let mut pod = ds.clone();
            pod.metadata.name = Some(format!("{ds_name}-{node}"));
            pod.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: ds_name,
                controller: Some(true),
                ..Default::default()
            }]);
            pod.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
            cluster.apply_pod(pod, now);
        }
    }
    Ok(core)
}

fn pod_names<'a>(solved: &'a Solved, pods: &[usize]) -> Vec<&'a str> {
    pods.iter().map(|i| solved.pods[*i].as_str()).collect()
}

fn to_json(solved: &Solved) -> serde_json::Value {
    let d = &solved.decision;
    let resources = |r: &Resources| -> BTreeMap<String, String> {
        r.to_resource_list()
            .into_iter()
            .map(|(k, v)| (k, v.as_str().to_string()))
            .collect()
    };
    json!({
        "nodeclaims": d.nodeclaims.iter().map(|c| json!({
            "nodepool": solved.node_pools[c.node_pool],
            "instance_type": c.launch.instance_type,
            "capacity_type": c.launch.capacity_type,
            "zone": c.launch.zone,
            "price_per_hour": c.launch.price_per_hour,
            "instance_type_options": c.instance_types.iter().map(|o| o.name.clone()).collect::<Vec<_>>(),
            "pods": pod_names(solved, &c.pods),
            "requests": resources(&c.requests),
            "requirements": c.requirements,
        })).collect::<Vec<_>>(),
        "existing": d.existing.iter().map(|e| json!({
            "node": solved.nodes[e.node],
            "pods": pod_names(solved, &e.pods),
        })).collect::<Vec<_>>(),
        "unschedulable": d.unschedulable.iter().map(|u| json!({
            "pod": solved.pods[u.pod],
            "reasons": u.reasons.iter().map(|r| json!({
                "nodepool": r.node_pool,
                "message": r.message(),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "cost_per_hour": d.cost_per_hour(),
    })
}

fn to_text(solved: &Solved) -> String {
    let d = &solved.decision;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "NodeClaims to launch: {} (${:.4}/hour)",
        d.nodeclaims.len(),
        d.cost_per_hour()
    );
    // NodeClaims alike (NodePool, launch, options) are told once, with their count
    let mut groups: Vec<(&PlannedNodeClaim, usize, Vec<usize>)> = Vec::new();
    for c in &d.nodeclaims {
        let alike = |g: &&mut (&PlannedNodeClaim, usize, Vec<usize>)| {
            let o = g.0;
            o.node_pool == c.node_pool
                && o.launch.instance_type == c.launch.instance_type
                && o.launch.capacity_type == c.launch.capacity_type
                && o.launch.zone == c.launch.zone
                && o.instance_types
                    .iter()
                    .map(|t| &t.name)
                    .eq(c.instance_types.iter().map(|t| &t.name))
        };
        match groups.iter_mut().find(alike) {
            Some(g) => {
                g.1 += 1;
                g.2.extend(&c.pods);
            }
            None => groups.push((c, 1, c.pods.clone())),
        }
    }
    for (c, count, pods) in groups {
        let options: Vec<&str> = c
            .instance_types
            .iter()
            .take(5)
            .map(|o| o.name.as_str())
            .collect();
        let more = c.instance_types.len().saturating_sub(options.len());
        let _ = writeln!(
            out,
            "  {}nodepool {}: {} {} in {} at ${:.4}/hour{}, {}; options {}{}",
            if count > 1 {
                format!("{count} × ")
            } else {
                String::new()
            },
            solved.node_pools[c.node_pool],
            c.launch.instance_type,
            c.launch.capacity_type,
            c.launch.zone,
            c.launch.price_per_hour,
            if count > 1 { " each" } else { "" },
            plural(pods.len(), "pod"),
            options.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
        let _ = writeln!(out, "    {}", pod_names(solved, &pods).join(" "));
    }
    if !d.existing.is_empty() {
        let _ = writeln!(out, "Pods on existing nodes:");
        for e in &d.existing {
            let _ = writeln!(
                out,
                "  {}: {}",
                solved.nodes[e.node],
                pod_names(solved, &e.pods).join(" ")
            );
        }
    }
    if !d.unschedulable.is_empty() {
        let _ = writeln!(out, "Unschedulable pods: {}", d.unschedulable.len());
        for u in &d.unschedulable {
            let reasons: Vec<String> = u.reasons.iter().map(ToString::to_string).collect();
            let _ = writeln!(out, "  {}: {}", solved.pods[u.pod], reasons.join("; "));
        }
    }
    out
}
