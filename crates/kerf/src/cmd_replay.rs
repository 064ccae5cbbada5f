//! `kerf replay`: plays a scenario file against a live cluster (its manifests, then its
//! scale, apply and delete events on the wall clock) while an operator manages the nodes,
//! samples what happened, and sets it beside what `kerf simulate` predicts for the same file:
//! node counts over time, the nodes at the end, and the longest pending time.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use kerf_api::labels;
use kerf_sim::scenario::{CapacityWindow, Scenario};
use kerf_sim::{Report, RunOptions};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use serde::Serialize;
use serde_json::{Value, json};

/// Arguments of `kerf replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A built-in scenario name or a scenario file.
    scenario: String,
    /// Stop after this long (Go duration, e.g. `5m`) instead of the scenario's duration.
    #[arg(long, value_parser = parse_duration)]
    until: Option<Duration>,
    /// How often to sample the cluster.
    #[arg(long, value_parser = parse_interval, default_value = "5s")]
    every: Duration,
    /// The file `kerf-operator --kwok-no-capacity` reads: the scenario's
    /// insufficient-capacity windows are written to it while they are open.
    #[arg(long, value_name = "FILE")]
    no_capacity: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Output,
}

/// How the result is printed.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Output {
    /// A side-by-side table.
    Text,
    /// The replay and the simulation as JSON.
    Json,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    kerf_api::duration::parse_go_duration(s).map_err(|e| e.to_string())
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d < Duration::from_secs(1) => Err("must be at least 1s".into()),
        d => Ok(d),
    }
}

/// What the cluster looked like at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Seconds since the manifests were applied.
    pub t: f64,
    /// Nodes with a NodePool label.
    pub nodes: usize,
    /// Of which spot.
    pub spot_nodes: usize,
    /// Pods without a node (daemonset pods left out).
    pub pending_pods: usize,
}

/// A node at the end.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct EndNode {
    /// Its NodePool.
    pub nodepool: String,
    /// Instance type.
    pub instance_type: String,
    /// `spot` or `on-demand`.
    pub capacity_type: String,
    /// Zone.
    pub zone: String,
    /// Node name.
    pub name: String,
}

/// What the replay saw.
#[derive(Clone, Debug, Serialize)]
pub struct Replay {
    /// Scenario name.
    pub scenario: String,
    /// Seconds replayed.
    pub duration_seconds: f64,
    /// Samples over time.
    pub timeline: Vec<Sample>,
    /// Nodes at the end.
    pub nodes: Vec<EndNode>,
    /// Distinct nodes seen.
    pub nodes_launched: usize,
    /// The longest a pod went from creation to being bound (or to the end, if never).
    pub max_pod_pending_seconds: f64,
    /// That pod.
    pub slowest_pod: Option<String>,
}

/// Runs `kerf replay`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let scenario = kerf_sim::load(&args.scenario).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Err(unplayable) = playable(&scenario, args.no_capacity.is_some()) {
        eprintln!(
            "kerf replay: {}: a live cluster cannot play {unplayable}",
            args.scenario
        );
        return Ok(ExitCode::from(2));
    }
    let until = args
        .until
        .unwrap_or(scenario.spec.duration.0)
        .min(scenario.spec.duration.0);
    let predicted = kerf_sim::run(
        scenario.clone(),
        RunOptions {
            check: false,
            ..Default::default()
        },
        &mut |_, _, _| {},
    )
    .map_err(|e| anyhow::anyhow!("simulating {}: {e}", args.scenario))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let replay = runtime.block_on(replay(&scenario, args, until))?;
    let text = match args.output {
        Output::Json => {
            serde_json::to_string_pretty(&json!({"replay": replay, "simulation": predicted}))?
                + "\n"
        }
        Output::Text => side_by_side(&replay, &predicted, until),
    };
    crate::emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Names the first thing in the scenario only a simulated cloud can do.
fn playable(s: &Scenario, capacity_file: bool) -> Result<(), String> {
    let cloud = &s.spec.cloud;
    if !cloud.spot_interruptions.is_empty() {
        return Err("spec.cloud.spotInterruptions (no interruption queue)".into());
    }
    if !cloud.notices.is_empty() {
        return Err("spec.cloud.notices (no interruption queue)".into());
    }
    if cloud.faults.never_register > 0.0 {
        return Err("spec.cloud.faults".into());
    }
    let api = &s.spec.api_server;
    if !api.outages.is_empty() || api.lost_responses > 0.0 || api.conflicts > 0.0 {
        return Err("spec.apiServer (fail the API server by hand)".into());
    }
    if !s.spec.operator_restarts.is_empty() {
        return Err("spec.operatorRestarts (restart the operator by hand)".into());
    }
    if !cloud.insufficient_capacity.is_empty() && !capacity_file {
        return Err("spec.cloud.insufficientCapacity without --no-capacity FILE (the file kerf-operator --kwok-no-capacity reads)".into());
    }
    Ok(())
}

/// The API version of a kind a scenario event names.
fn api_version_of(kind: &str) -> anyhow::Result<&'static str> {
    Ok(match kind {
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" => "apps/v1",
        "Job" => "batch/v1",
        "Pod" => "v1",
        "PodDisruptionBudget" => "policy/v1",
        "NodePool" => "karpenter.sh/v1",
        "EC2NodeClass" => "karpenter.k8s.aws/v1",
        other => bail!("kind {other} cannot be replayed"),
    })
}

/// The API for a kind in a namespace (ignored for cluster-scoped kinds).
async fn api_for(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
) -> anyhow::Result<Api<DynamicObject>> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("{api_version} {kind} is not served by this cluster"))?;
    Ok(match caps.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    })
}

async fn apply(client: &Client, doc: &Value) -> anyhow::Result<()> {
    let field = |k: &str| doc.pointer(k).and_then(Value::as_str);
    let (Some(api_version), Some(kind), Some(name)) = (
        field("/apiVersion"),
        field("/kind"),
        field("/metadata/name"),
    ) else {
        bail!("a manifest without apiVersion, kind or metadata.name");
    };
    let namespace = field("/metadata/namespace").unwrap_or("default");
    let api = api_for(client, api_version, kind, namespace).await?;
    api.patch(
        name,
        &PatchParams::apply("kerf-replay").force(),
        &Patch::Apply(doc),
    )
    .await
    .with_context(|| format!("applying {kind} {namespace}/{name}"))?;
    Ok(())
}

async fn event(client: &Client, e: &kerf_sim::scenario::Event) -> anyhow::Result<()> {
    if let Some(s) = &e.scale {
        let api = api_for(client, api_version_of(&s.kind)?, &s.kind, &s.namespace).await?;
        let field = if s.kind == "Job" {
            "parallelism"
        } else {
            "replicas"
        };
        api.patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {field: s.replicas}})),
        )
        .await
        .with_context(|| format!("scaling {} {}/{}", s.kind, s.namespace, s.name))?;
    }
    if let Some(doc) = &e.apply {
        apply(client, doc).await?;
    }
    if let Some(d) = &e.delete {
        let api = api_for(client, api_version_of(&d.kind)?, &d.kind, &d.namespace).await?;
        api.delete(&d.name, &DeleteParams::background())
            .await
            .with_context(|| format!("deleting {} {}/{}", d.kind, d.namespace, d.name))?;
    }
    Ok(())
}

/// The lines of the kwok provider's no-capacity file for the windows open at `t`.
fn no_capacity_lines(windows: &[CapacityWindow], t: Duration) -> BTreeSet<String> {
    let mut lines = BTreeSet::new();
    for w in windows {
        let from = w.from.map_or(Duration::ZERO, |d| d.0);
        if t < from || w.until.is_some_and(|u| t >= u.0) {
            continue;
        }
        let ct = w.capacity_type.as_deref().unwrap_or("*");
        let types: Vec<&str> = if w.instance_types.is_empty() {
            vec!["*"]
        } else {
            w.instance_types.iter().map(String::as_str).collect()
        };
        let zones: Vec<&str> = if w.zones.is_empty() {
            vec!["*"]
        } else {
            w.zones.iter().map(String::as_str).collect()
        };
        for ty in &types {
            for z in &zones {
                lines.insert(format!("{ct}:{ty}:{z}"));
            }
        }
    }
    lines
}

fn unix_seconds(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> f64 {
    t.0.as_millisecond() as f64 / 1000.0
}

/// Pods and nodes as one sample sees them.
struct Seen {
    sample: Sample,
    nodes: Vec<EndNode>,
    /// Each pod's pending time so far (bound: creation to scheduled; unbound: creation to now).
    waits: Vec<(String, f64)>,
}

async fn look(client: &Client, t: f64, wall_now: f64) -> anyhow::Result<Seen> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing nodes")?;
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing pods")?;
    let label = |n: &Node, k: &str| {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(k))
            .cloned()
            .unwrap_or_default()
    };
    let managed: Vec<EndNode> = nodes
        .items
        .iter()
        .filter(|n| !label(n, labels::NODEPOOL).is_empty())
        .map(|n| EndNode {
            nodepool: label(n, labels::NODEPOOL),
            instance_type: label(n, labels::INSTANCE_TYPE),
            capacity_type: label(n, labels::CAPACITY_TYPE),
            zone: label(n, labels::ZONE),
            name: n.metadata.name.clone().unwrap_or_default(),
        })
        .collect();
    let mut waits = Vec::new();
    let mut pending = 0;
    for p in &pods.items {
        let daemon = p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "DaemonSet");
        let finished = p
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|ph| ph == "Succeeded" || ph == "Failed");
        let Some(created) = p.metadata.creation_timestamp.as_ref().map(unix_seconds) else {
            continue;
        };
        if daemon || finished {
            continue;
        }
        let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
        let scheduled = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled" && c.status == "True")
            .and_then(|c| c.last_transition_time.as_ref())
            .map(unix_seconds);
        let key = format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap_or("default"),
            p.metadata.name.as_deref().unwrap_or("")
        );
        if !bound {
            pending += 1;
        }
        let end = if bound {
            scheduled.unwrap_or(wall_now)
        } else {
            wall_now
        };
        waits.push((key, (end - created).max(0.0)));
    }
    let spot = managed
        .iter()
        .filter(|n| n.capacity_type == labels::CAPACITY_TYPE_SPOT)
        .count();
    Ok(Seen {
        sample: Sample {
            t,
            nodes: managed.len(),
            spot_nodes: spot,
            pending_pods: pending,
        },
        nodes: managed,
        waits,
    })
}

fn wall_clock() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A client of the kubeconfig's cluster, or an error naming where the kubeconfig was
/// looked for.
pub async fn client() -> anyhow::Result<Client> {
    Client::try_default().await.map_err(|e| {
        let why = anyhow::Error::from(e);
        anyhow::anyhow!(
            "no usable kubeconfig (KUBECONFIG={}, ~/.kube/config or in-cluster): {}",
            std::env::var("KUBECONFIG").unwrap_or_else(|_| "unset".into()),
            why.root_cause()
        )
    })
}

async fn replay(scenario: &Scenario, args: &Args, until: Duration) -> anyhow::Result<Replay> {
    let client = client().await?;
    let windows = &scenario.spec.cloud.insufficient_capacity;
    let mut no_capacity: Option<BTreeSet<String>> = None;
    let write_no_capacity = |lines: &BTreeSet<String>| -> anyhow::Result<()> {
        if let Some(path) = &args.no_capacity {
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    };
    let first = no_capacity_lines(windows, Duration::ZERO);
    write_no_capacity(&first)?;
    no_capacity.replace(first);
    for doc in &scenario.spec.manifests {
        apply(&client, doc).await?;
    }
    let start = Instant::now();
    let mut next_event = 0;
    let mut timeline = Vec::new();
    let mut launched: BTreeSet<String> = BTreeSet::new();
    let mut slowest: BTreeMap<String, f64> = BTreeMap::new();
    let mut last_nodes = Vec::new();
    let mut next_sample = Duration::ZERO;
    loop {
        let t = start.elapsed();
        while let Some(e) = scenario.spec.events.get(next_event) {
            if e.at.0 > t {
                break;
            }
            event(&client, e).await?;
            next_event += 1;
        }
        let lines = no_capacity_lines(windows, t);
        if no_capacity.as_ref() != Some(&lines) {
            write_no_capacity(&lines)?;
            no_capacity = Some(lines);
        }
        if t >= next_sample {
            let seen = look(&client, t.as_secs_f64(), wall_clock()).await?;
            launched.extend(seen.nodes.iter().map(|n| n.name.clone()));
            for (pod, wait) in seen.waits {
                let w = slowest.entry(pod).or_default();
                *w = w.max(wait);
            }
            timeline.push(seen.sample);
            last_nodes = seen.nodes;
            next_sample += args.every;
        }
        if t >= until {
            break;
        }
        let next_at = scenario
            .spec
            .events
            .get(next_event)
            .map_or(until, |e| e.at.0)
            .min(next_sample)
            .min(until);
        tokio::time::sleep(
            next_at
                .saturating_sub(start.elapsed())
                .max(Duration::from_millis(10)),
        )
        .await;
    }
    last_nodes.sort();
    let slowest_pod = slowest
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(k, w)| (k.clone(), *w));
    Ok(Replay {
        scenario: scenario.metadata.name.clone(),
        duration_seconds: until.as_secs_f64(),
        timeline,
        nodes: last_nodes,
        nodes_launched: launched.len(),
        max_pod_pending_seconds: slowest_pod.as_ref().map_or(0.0, |s| s.1),
        slowest_pod: slowest_pod.map(|s| s.0),
    })
}

/// The nodes at the end, counted by NodePool, instance type and capacity type.
fn by_shape<'a>(
    nodes: impl Iterator<Item = (&'a str, &'a str, &'a str)>,
) -> BTreeMap<(String, String, String), usize> {
    let mut out = BTreeMap::new();
    for (pool, ty, ct) in nodes {
        *out.entry((pool.to_string(), ty.to_string(), ct.to_string()))
            .or_default() += 1;
    }
    out
}

fn side_by_side(replay: &Replay, predicted: &Report, until: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scenario {}: replayed {:.0} s against the cluster, beside the simulation",
        replay.scenario, replay.duration_seconds
    );
    let _ = writeln!(
        out,
        "{:>8}  {:>15}  {:>15}  {:>15}",
        "t", "nodes sim/real", "spot sim/real", "pending sim/real"
    );
    let mut shown = None;
    for s in predicted
        .timeline
        .iter()
        .filter(|s| s.t <= until.as_secs_f64())
    {
        // the simulation's last sample repeats its end time
        if shown.replace(s.t) == Some(s.t) {
            continue;
        }
        // the last real sample at or before the simulated one
        let Some(r) = replay.timeline.iter().rev().find(|r| r.t <= s.t + 0.5) else {
            continue;
        };
        let _ = writeln!(
            out,
            "{:>7.0}s  {:>15}  {:>15}  {:>15}",
            s.t,
            format!("{}/{}", s.nodes, r.nodes),
            format!("{}/{}", s.spot_nodes, r.spot_nodes),
            format!("{}/{}", s.pending_pods, r.pending_pods),
        );
    }
    let sim_end = by_shape(predicted.end.nodes.iter().map(|n| {
        (
            n.nodepool.as_str(),
            n.instance_type.as_str(),
            n.capacity_type.as_str(),
        )
    }));
    let real_end = by_shape(replay.nodes.iter().map(|n| {
        (
            n.nodepool.as_str(),
            n.instance_type.as_str(),
            n.capacity_type.as_str(),
        )
    }));
    let _ = writeln!(
        out,
        "nodes at the end (NodePool / type / capacity: sim real):"
    );
    let shapes: BTreeSet<_> = sim_end.keys().chain(real_end.keys()).collect();
    for k in shapes {
        let _ = writeln!(
            out,
            "  {} / {} / {}: {} {}",
            k.0,
            k.1,
            k.2,
            sim_end.get(k).copied().unwrap_or(0),
            real_end.get(k).copied().unwrap_or(0)
        );
    }
    let _ = writeln!(
        out,
        "nodes launched: sim {} real {}",
        predicted.totals.nodes_launched, replay.nodes_launched
    );
    let _ = writeln!(
        out,
        "longest wait: sim {:.0}s ({}) real {:.0}s ({})",
        predicted.totals.max_pod_pending_seconds,
        predicted.totals.slowest_pod.as_deref().unwrap_or("-"),
        replay.max_pod_pending_seconds,
        replay.slowest_pod.as_deref().unwrap_or("-")
    );
    if until < Duration::from_secs_f64(predicted.duration_seconds) {
        let _ = writeln!(
            out,
            "(the simulation ran the whole {:.0} s; its end state is beside the replay's at {:.0} s)",
            predicted.duration_seconds,
            until.as_secs_f64()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_capacity_windows_become_the_kwok_providers_lines() {
        let windows: Vec<CapacityWindow> = serde_yaml::from_str(
            "- {capacityType: spot, from: 10s, until: 1m}\n\
             - {instanceTypes: [m5.large, c5.large], zones: [us-east-1a]}\n",
        )
        .unwrap();
        let at = |s| no_capacity_lines(&windows, Duration::from_secs(s));
        assert_eq!(
            at(0).into_iter().collect::<Vec<_>>(),
            ["*:c5.large:us-east-1a", "*:m5.large:us-east-1a"]
        );
        assert!(at(10).contains("spot:*:*"));
        assert!(!at(60).contains("spot:*:*"), "until is exclusive");
    }

    #[test]
    fn what_only_a_simulated_cloud_does_is_refused_by_name() {
        let s = kerf_sim::load("spot-fallback").unwrap();
        let refused = playable(&s, false).unwrap_err();
        assert!(refused.starts_with("spec.cloud."), "{refused}");
        assert!(playable(&kerf_sim::load("getting-started").unwrap(), false).is_ok());
    }
}
