//! `kerf schedule -f MANIFESTS...`: a dry run of provisioning. Reads NodePools,
//! EC2NodeClasses, Nodes, DaemonSets and workloads, and prints the NodeClaims Kerf would
//! launch, the pods that fit on existing nodes, and the pods that stay pending and why.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use kerf_core::cluster::PodOwner;
use kerf_core::controllers::provisioning::Solved;
use kerf_core::provisioning::rules::{nodeclaim, nodeclaim_name};
use kerf_scheduling::PlannedNodeClaim;
use kerf_scheduling::resources::Resources;
use kerf_sim::report::plural;
use rand::SeedableRng;
use serde_json::json;

use crate::inputs::Offerings;

/// Arguments of `kerf schedule`.
#[derive(clap::Args)]
pub struct Args {
    /// Manifest files (multi-document YAML): NodePools, EC2NodeClasses, Nodes, DaemonSets,
    /// Pods, Deployments, ReplicaSets, StatefulSets, Jobs; `-` reads standard input.
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    offerings: Offerings,
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

/// Runs the dry run; exit 2 when a manifest is invalid or `--replicas` names no workload.
pub fn run(args: &Args) -> Result<ExitCode> {
    let inputs = match crate::inputs::load(&args.files, &args.replicas)? {
        Ok(i) => i,
        Err(problems) => {
            eprint!("{problems}");
            return Ok(ExitCode::from(2));
        }
    };
    let reading = args.offerings.reading(args.seed, false);
    let mut core = crate::inputs::cluster_of(inputs, &reading, Duration::ZERO)?;
    let solved = core.dry_run(Duration::ZERO);
    let text = match args.output {
        Format::Json => serde_json::to_string_pretty(&to_json(&solved))? + "\n",
        Format::Text => to_text(&solved, &|key: &str| owner_of(&core, key)),
        Format::Nodeclaims => {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
            let mut out = String::new();
            for plan in &solved.decision.nodeclaims {
                let pool = &solved.node_pools[plan.node_pool];
                let np = &core.cluster().node_pools()[pool];
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
            "min_values_relaxed": c.min_values_relaxed,
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
        "ignored": solved.ignored.iter().map(|(pod, why)| json!({"pod": pod, "reason": why}))
            .collect::<Vec<_>>(),
        "cost_per_hour": d.cost_per_hour(),
        "bound": match &solved.bound {
            Some(Ok(b)) => json!({
                "per_hour": b.per_hour,
                "unplaceable_pods": b.unplaceable,
                "groups": b.groups,
                "columns": b.columns,
            }),
            Some(Err(e)) => json!({"error": e}),
            None => serde_json::Value::Null,
        },
    })
}

/// `cost $X/hour, bound $Y/hour, 1.0Z× the bound`: how far the plan is from the lower bound.
fn bound_line(solved: &Solved) -> Option<String> {
    let cost = solved.decision.cost_per_hour();
    Some(match solved.bound.as_ref()? {
        Ok(b) if b.per_hour > 0.0 => format!(
            "cost ${cost:.4}/hour, bound ${:.4}/hour, {:.2}× the bound",
            b.per_hour,
            cost / b.per_hour
        ),
        Ok(b) => format!("cost ${cost:.4}/hour, bound ${:.4}/hour", b.per_hour),
        Err(e) => format!("cost ${cost:.4}/hour, no bound: {e}"),
    })
}

/// The workload a pod belongs to, as people name it: its Deployment, StatefulSet, Job, …
/// (a Deployment's ReplicaSet counts as the Deployment); a pod of none is its own.
fn owner_of(core: &kerf_core::controllers::Controllers, key: &str) -> String {
    let name = key.rsplit_once('/').map_or(key, |(_, n)| n);
    let Some(record) = core.cluster().pods().get(key) else {
        return name.to_string();
    };
    let meta = &record.shape.metadata;
    let hash = (meta.labels.as_ref()).and_then(|l| l.get("pod-template-hash"));
    let controller = (meta.owner_references.iter().flatten()).find(|o| o.controller == Some(true));
    match (controller, hash) {
        // a Deployment's ReplicaSet: DEPLOYMENT-HASH
        (Some(o), Some(h)) => (o.name.strip_suffix(&format!("-{h}")))
            .unwrap_or(&o.name)
            .to_string(),
        (Some(o), None) => o.name.clone(),
        // a Deployment's pod as the manifests make it: DEPLOYMENT-HASH-SUFFIX
        (None, Some(h)) => (name.split_once(&format!("-{h}-")))
            .map_or(name, |(d, _)| d)
            .to_string(),
        // another workload's: NAME-SUFFIX (or NAME-ORDINAL)
        (None, None) if record.owner == PodOwner::Controller => {
            name.rsplit_once('-').map_or(name, |(w, _)| w).to_string()
        }
        (None, None) => name.to_string(),
    }
}

/// A NodeClaim's pods by workload, most first: `285 pods: large × 245, small × 40`; the
/// names themselves are in `-o json`.
fn pods_by_owner(solved: &Solved, pods: &[usize], owner: &dyn Fn(&str) -> String) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for i in pods {
        *counts.entry(owner(&solved.pods[*i])).or_default() += 1;
    }
    let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let parts: Vec<String> = (counts.into_iter())
        .map(|(o, n)| if n > 1 { format!("{o} × {n}") } else { o })
        .collect();
    format!("{}: {}", plural(pods.len(), "pod"), parts.join(", "))
}

fn to_text(solved: &Solved, owner: &dyn Fn(&str) -> String) -> String {
    let d = &solved.decision;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "NodeClaims to launch: {} (${:.4}/hour)",
        d.nodeclaims.len(),
        d.cost_per_hour()
    );
    if let Some(line) = bound_line(solved) {
        let _ = writeln!(out, "{line}");
    }
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
            "  {}nodepool {}: {} {} in {} at ${:.4}/hour{}; options {}{}",
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
            options.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
        let _ = writeln!(out, "    {}", pods_by_owner(solved, &pods, owner));
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
    if !solved.ignored.is_empty() {
        let _ = writeln!(
            out,
            "Ignored pods (no node is planned until their claims are right): {}",
            solved.ignored.len()
        );
        for (pod, why) in &solved.ignored {
            let _ = writeln!(out, "  {pod}: {why}");
        }
    }
    out
}
