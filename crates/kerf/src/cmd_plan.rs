//! `kerf plan -f CHANGED.yaml`: what applying manifests would do to a running cluster,
//! before they are applied. The cluster as it stands (the kubeconfig's, listed and never
//! written; or `--from` snapshots) is put in the simulator: its NodeClaims' instances
//! running, its Nodes, its pods bound where they run, its NodePools, node classes,
//! PodDisruptionBudgets and DaemonSets. Kerf's own controllers are then run forward twice
//! on the simulated clock, once as things are and once with the changed manifests applied
//! at the start, and the two are set side by side: nodes and $/hour, which nodes are
//! replaced and when (how long a drift roll takes under the budgets), pods evicted, pods
//! left pending and why, and the cost over the horizon.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Node, Pod};
use kerf_api::cluster_read::{self, Read};
use kerf_api::manifest::{Checked, check_document};
use kerf_api::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use kerf_sim::report::Removal;
use kerf_sim::{Report, RunOptions, Scenario, Standing, World};

use crate::operator_settings::OperatorSettings;
use serde::Serialize;
use serde_json::{Value, json};

/// Arguments of `kerf plan`.
#[derive(clap::Args)]
pub struct Args {
    /// The changed manifests, as they would be applied: NodePools, EC2NodeClasses,
    /// NodeOverlays and PodDisruptionBudgets (multi-document YAML; `-` reads standard
    /// input).
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    files: Vec<PathBuf>,
    /// Read the cluster as it stands from these files instead of the kubeconfig's cluster:
    /// `kubectl get nodepools,ec2nodeclasses,nodeclaims,nodes,pods,pdb,daemonsets,deployments
    /// -A -o yaml` (lists are read item by item; the autoscaler's Deployment gives the
    /// settings played).
    #[arg(long, num_args = 1.., value_name = "FILE")]
    from: Vec<PathBuf>,
    /// When the `--from` snapshot was taken (RFC 3339, `2026-12-05T10:00:00Z`; default:
    /// now): NodeClaims' ages, and so their expiry, count to it.
    #[arg(long, value_name = "TIME", requires = "from", value_parser = timestamp)]
    at: Option<Duration>,
    /// How far ahead to look (`30m`, `6h`, `2h30m`).
    #[arg(long = "for", value_name = "DURATION", default_value = "6h", value_parser = duration)]
    horizon: Duration,
    /// Also write the run with the change as one self-contained HTML page, with the
    /// timeline without it drawn beside.
    #[arg(long, value_name = "FILE.html")]
    report: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    output: Format,
    /// AWS region whose instance types and prices are used (default: the nodes'
    /// `topology.kubernetes.io/region`, else us-east-1).
    #[arg(long)]
    region: Option<String>,
    /// How long a launched instance takes to register its Node (EC2: about 30s).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    launch_delay: Option<Duration>,
    /// How long a registered Node takes to be Ready (EC2: about 15s).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    ready_delay: Option<Duration>,
    /// The operator's feature gates, as its `FEATURE_GATES` (the chart's
    /// `settings.featureGates`) sets them: `NodeRepair=true,SpotToSpotConsolidation=true`.
    /// Default: those of the autoscaler Deployment the cluster runs (Kerf's or Karpenter's,
    /// read with its other settings), else Karpenter's defaults.
    #[arg(long, value_name = "GATES", value_parser = feature_gates)]
    feature_gates: Option<serde_json::Map<String, Value>>,
}

/// The gates the simulator plays, by the names `FEATURE_GATES` gives them.
const GATES: &[&str] = &[
    "SpotToSpotConsolidation",
    "NodeRepair",
    "StaticCapacity",
    "NodeOverlay",
    "PodDeletionCostManagement",
    "TerminateFirstDrift",
    "TerminateFirstRepair",
];

/// `Name=true,Other=false` as the scenario's `featureGates` (`{"Name": true, …}`).
fn feature_gates(text: &str) -> Result<serde_json::Map<String, Value>, String> {
    let mut out = serde_json::Map::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair}: a gate is written Name=true or Name=false"))?;
        let on = match value.trim().to_ascii_lowercase().as_str() {
            "true" | "t" | "1" => true,
            "false" | "f" | "0" => false,
            other => return Err(format!("{name}: {other:?} is not true or false")),
        };
        let name = name.trim();
        if !GATES.contains(&name) {
            return Err(format!(
                "{name}: not a gate the plan plays (known: {})",
                GATES.join(", ")
            ));
        }
        out.insert(name.to_string(), on.into());
    }
    Ok(out)
}

/// Output formats of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// A table and sentences.
    Text,
    /// The plan's fields.
    Json,
}

/// An RFC 3339 time, since the Unix epoch.
fn timestamp(text: &str) -> Result<Duration, String> {
    let t: k8s_openapi::jiff::Timestamp = text.parse().map_err(|e| format!("{e}"))?;
    u64::try_from(t.as_millisecond())
        .map(Duration::from_millis)
        .map_err(|_| "before 1970".into())
}

fn duration(text: &str) -> Result<Duration, String> {
    kerf_api::duration::parse_go_duration(text).map_err(|e| e.to_string())
}

/// The kinds a change may hold: what `kerf plan` answers for.
const CHANGEABLE: [&str; 4] = [
    "NodePool",
    "EC2NodeClass",
    "NodeOverlay",
    "PodDisruptionBudget",
];

/// Plans; exit 2 when the input is invalid.
pub fn run(args: &Args) -> Result<ExitCode> {
    let now = args.at.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    });
    let change = match changed_documents(&args.files)? {
        Ok(docs) => docs,
        Err(problems) => {
            eprint!("{problems}");
            return Ok(ExitCode::from(2));
        }
    };
    let documents = if args.from.is_empty() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(live_documents())?
    } else {
        let mut docs = Vec::new();
        for file in &args.from {
            docs.extend(documents_of(file)?);
        }
        docs
    };
    let current = Current::sort(documents, now);
    for note in &current.notes {
        eprintln!("note: {note}");
    }
    let plan = plan(&current, &change, args)?;
    for note in &plan.notes {
        eprintln!("note: {note}");
    }
    if let Some(path) = &args.report {
        let html = (plan.changed).html_beside("without the change", &plan.unchanged.timeline);
        std::fs::write(path, html).with_context(|| format!("{}: cannot write", path.display()))?;
    }
    let text = match args.output {
        Format::Text => plan.text(args.horizon, &change),
        Format::Json => serde_json::to_string_pretty(&plan.summary(&change))? + "\n",
    };
    crate::emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The documents of a file (`-`: standard input), each `List` read item by item.
fn documents_of(file: &std::path::Path) -> Result<Vec<Value>> {
    let (_, _, docs) = crate::inputs::read_file(file)?;
    let mut out = Vec::new();
    for doc in docs {
        flatten(doc.value, &mut out);
    }
    Ok(out)
}

/// A document, or the items of a `List`.
fn flatten(doc: Value, out: &mut Vec<Value>) {
    let is_list = (doc.get("kind").and_then(Value::as_str)).is_some_and(|k| k.ends_with("List"));
    match doc.get("items").and_then(Value::as_array) {
        Some(items) if is_list => {
            for item in items.clone() {
                flatten(item, out);
            }
        }
        _ => out.push(doc),
    }
}

/// The changed manifests, each valid and of a kind a plan answers for; `Ok(Err(..))` lists
/// every problem as `FILE: Kind/name: path: message`.
fn changed_documents(files: &[PathBuf]) -> Result<std::result::Result<Vec<Value>, String>> {
    let mut problems = String::new();
    let mut out = Vec::new();
    for file in files {
        let shown = file.display();
        for value in documents_of(file)? {
            let raw = kerf_api::manifest::RawDocument { line: 0, value };
            let what = format!("{}/{}", raw.kind(), raw.name());
            if !CHANGEABLE.contains(&raw.kind()) {
                let _ = writeln!(
                    problems,
                    "{shown}: {what}: kerf plan answers for changes to {}; workloads are read \
                     from the cluster as they run",
                    CHANGEABLE.join(", ")
                );
                continue;
            }
            if let Checked::Invalid(list) = check_document(&raw) {
                for p in list {
                    let _ = writeln!(problems, "{shown}: {what}: {}: {}", p.path, p.message);
                }
                continue;
            }
            out.push(raw.value);
        }
    }
    Ok(if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    })
}

/// Every object of the kubeconfig's cluster a plan reads, listed (never written), each
/// with its `apiVersion` and `kind`.
async fn live_documents() -> Result<Vec<Value>> {
    let client = crate::cmd_replay::client().await?;
    let mut out = Vec::new();
    for (group, version, kind) in [
        ("karpenter.sh", "v1", "NodePool"),
        ("karpenter.sh", "v1", "NodeClaim"),
        ("karpenter.k8s.aws", "v1", "EC2NodeClass"),
        ("karpenter.sh", "v1alpha1", "NodeOverlay"),
        ("", "v1", "Node"),
        ("", "v1", "Pod"),
        ("policy", "v1", "PodDisruptionBudget"),
        ("apps", "v1", "DaemonSet"),
        ("apps", "v1", "Deployment"),
        ("", "v1", "PersistentVolumeClaim"),
        ("", "v1", "PersistentVolume"),
        ("storage.k8s.io", "v1", "StorageClass"),
    ] {
        let Some(items) = crate::inputs::list_kind(&client, group, version, kind).await? else {
            if group.starts_with("karpenter") && kind != "NodeOverlay" {
                eprintln!("note: this cluster serves no {group}/{version} {kind}");
            }
            continue;
        };
        out.extend(items);
    }
    Ok(out)
}

/// The cluster as it stands, sorted for the simulator.
struct Current {
    /// NodePools, node classes, NodeOverlays, PodDisruptionBudgets, DaemonSets and
    /// storage objects: applied as a scenario's manifests.
    manifests: Vec<Value>,
    /// NodeClaims, Nodes and pods: in place at the start.
    standing: Standing,
    /// The region the nodes say they run in.
    region: Option<String>,
    /// The zones the nodes run in.
    zones: BTreeSet<String>,
    /// The autoscaler Deployments' settings.
    operators: Vec<OperatorSettings>,
    /// What was left out, and why.
    notes: Vec<String>,
}

impl Current {
    /// Sorts the objects read `now` (since the Unix epoch): Karpenter's kinds read as the
    /// operator reads them (what a newer Karpenter added is noted and left out), workloads
    /// left to their pods, other kinds ignored.
    fn sort(documents: Vec<Value>, now: Duration) -> Current {
        let mut current = Current {
            manifests: Vec::new(),
            standing: Standing::default(),
            region: None,
            zones: BTreeSet::new(),
            operators: Vec::new(),
            notes: Vec::new(),
        };
        let mut ignored: BTreeSet<String> = BTreeSet::new();
        for value in documents {
            let kind = value
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let name = (value.pointer("/metadata/name").and_then(Value::as_str))
                .unwrap_or_default()
                .to_string();
            match kind.as_str() {
                "NodePool" => {
                    current.karpenter::<NodePool>(&kind, &name, &value, "karpenter.sh/v1")
                }
                "EC2NodeClass" => {
                    current.karpenter::<EC2NodeClass>(&kind, &name, &value, "karpenter.k8s.aws/v1")
                }
                "NodeOverlay" => {
                    current.karpenter::<NodeOverlay>(&kind, &name, &value, "karpenter.sh/v1alpha1")
                }
                "NodeClaim" => {
                    let read: Read<NodeClaim> = cluster_read::read(&kind, &value);
                    if let Some(claim) = current.noted(&kind, &name, read) {
                        let created = (claim.metadata.creation_timestamp.as_ref())
                            .map(|t| Duration::from_millis(t.0.as_millisecond().max(0) as u64));
                        let age = created.map_or(Duration::ZERO, |c| now.saturating_sub(c));
                        current.standing.nodeclaims.push((claim, age));
                    }
                }
                "Node" => match serde_json::from_value::<Node>(value) {
                    Ok(node) => {
                        let labels = node.metadata.labels.clone().unwrap_or_default();
                        if let Some(r) = labels.get(kerf_api::labels::REGION) {
                            current.region.get_or_insert_with(|| r.clone());
                        }
                        current
                            .zones
                            .extend(labels.get(kerf_api::labels::ZONE).cloned());
                        current.standing.nodes.push(node);
                    }
                    Err(e) => current.notes.push(format!("Node {name}: {e}; left out")),
                },
                "Pod" => match serde_json::from_value::<Pod>(value) {
                    Ok(pod) => current.standing.pods.push(pod),
                    Err(e) => current.notes.push(format!("Pod {name}: {e}; left out")),
                },
                "PodDisruptionBudget"
                | "DaemonSet"
                | "PersistentVolumeClaim"
                | "PersistentVolume"
                | "StorageClass" => current.manifests.push(stripped(value)),
                "Deployment" if OperatorSettings::of(&value).is_some() => {
                    current.operators.extend(OperatorSettings::of(&value));
                }
                _ => {
                    ignored.insert(kind);
                }
            }
        }
        if !ignored.is_empty() {
            let kinds: Vec<String> = ignored.into_iter().collect();
            current.notes.push(format!(
                "{} left out: workloads are read from their pods, which keep their replicas",
                kinds.join(", ")
            ));
        }
        current
    }

    /// A Karpenter object read as the operator reads it, written back as a manifest.
    fn karpenter<T>(&mut self, kind: &str, name: &str, value: &Value, api_version: &str)
    where
        T: serde::de::DeserializeOwned + Serialize,
    {
        let read: Read<T> = cluster_read::read(kind, value);
        let Some(object) = self.noted(kind, name, read) else {
            return;
        };
        let Ok(mut value) = serde_json::to_value(&object) else {
            return;
        };
        value["apiVersion"] = api_version.into();
        value["kind"] = kind.into();
        self.manifests.push(stripped(value));
    }

    /// The object read, with what could not be read noted.
    fn noted<T>(&mut self, kind: &str, name: &str, read: Read<T>) -> Option<T> {
        for p in &read.gaps.problems {
            self.notes.push(format!("{kind} {name}: {p}"));
        }
        match read.object {
            Ok(o) => Some(o),
            Err(e) => {
                self.notes.push(format!("{kind} {name}: {e}; left out"));
                None
            }
        }
    }
}

/// An object as a manifest applies it: its name, namespace, labels, annotations, owners
/// and spec, without the status and bookkeeping the API server keeps; an EC2NodeClass keeps
/// its status, whose images are what its NodeClaims' images are compared with.
fn stripped(mut value: Value) -> Value {
    let class = value.get("kind").and_then(Value::as_str) == Some("EC2NodeClass");
    if let Some(object) = value.as_object_mut().filter(|_| !class) {
        object.remove("status");
    }
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, _| {
            matches!(
                k.as_str(),
                "name" | "namespace" | "labels" | "annotations" | "ownerReferences"
            )
        });
    }
    value
}

/// The two runs of a plan.
struct Plan {
    unchanged: Report,
    changed: Report,
    /// The first pods left pending with the change, each with `kerf explain`'s answer at
    /// the end of the horizon.
    pending_why: Vec<(String, String)>,
    /// What the simulator could not put in place, and where the settings came from.
    notes: Vec<String>,
    /// The operator settings played.
    settings: Played,
}

/// Runs the cluster forward without and with the change.
fn plan(current: &Current, change: &[Value], args: &Args) -> Result<Plan> {
    let region = (args.region.clone())
        .or_else(|| current.region.clone())
        .unwrap_or_else(|| "us-east-1".into());
    let known = kerf_aws::catalog::zones(&region)?;
    let zones: Vec<&String> = current.zones.iter().filter(|z| known.contains(z)).collect();
    let mut cloud = serde_json::Map::new();
    if let Some(d) = args.launch_delay {
        cloud.insert("launchDelay".into(), go(d).into());
    }
    if let Some(d) = args.ready_delay {
        cloud.insert("readyDelay".into(), go(d).into());
    }
    let (settings, mut notes) = settings(current, args);
    let scenario = |events: &[Value]| -> Result<Scenario> {
        let doc = json!({
            "apiVersion": "kerf.sh/v1alpha1",
            "kind": "Scenario",
            "metadata": {"name": "plan"},
            "spec": {
                "region": region,
                "zones": zones,
                "duration": go(args.horizon),
                "seed": 1,
                "cloud": cloud,
                "manifests": current.manifests,
                "events": events,
            },
        });
        let mut doc = doc;
        if let Some(spec) = doc["spec"].as_object_mut() {
            spec.extend(settings.fields.clone());
        }
        kerf_sim::scenario::parse(&serde_json::to_string(&doc)?, None)
            .map_err(|e| anyhow::anyhow!("the cluster as read: {e}"))
    };
    let events: Vec<Value> = (change.iter())
        .map(|doc| json!({"at": "0s", "apply": doc}))
        .collect();
    let options = RunOptions {
        check: false,
        plant: None,
        skip_floor: true,
    };
    let run = |scenario: Scenario| -> Result<(Report, Vec<String>)> {
        let mut world = World::new(scenario, options)?;
        let notes = world.stand(current.standing.clone());
        Ok((world.run(&mut |_, _, _| {})?, notes))
    };
    let (unchanged, standing_notes) = run(scenario(&[])?)?;
    notes.extend(standing_notes);
    let (changed, _) = run(scenario(&events)?)?;
    // why pods are left pending: the same run again, asked at its end
    let waiting: Vec<String> = (changed.end.pending_pods.iter())
        .take(PENDING_EXPLAINED)
        .cloned()
        .collect();
    let pending_why = if waiting.is_empty() {
        Vec::new()
    } else {
        let mut world = World::new(scenario(&events)?, options)?;
        world.stand(current.standing.clone());
        world.explain_at(args.horizon, |core, _, now| {
            (waiting.iter())
                .map(|pod| {
                    let why = core.explain_pod(pod, now).map(|e| e.to_string());
                    (pod.clone(), why.unwrap_or_default())
                })
                .collect()
        })?
    };
    Ok(Plan {
        unchanged,
        changed,
        pending_why,
        notes,
        settings,
    })
}

/// The settings a plan plays: the cluster's autoscaler's (its Deployment's environment),
/// `--feature-gates` over its gates; with notes on where they came from and what is not
/// played.
fn settings(current: &Current, args: &Args) -> (Played, Vec<String>) {
    let (operator, mut notes) = OperatorSettings::choose(current.operators.clone());
    let mut fields = serde_json::Map::new();
    if let Some(operator) = &operator {
        notes.push(operator.told());
        let (read, unplayed) = operator.scenario_fields(feature_gates);
        fields = read;
        notes.extend(unplayed);
    }
    if let Some(gates) = &args.feature_gates {
        fields.insert("featureGates".into(), Value::Object(gates.clone()));
    }
    let source = operator.map(|o| o.source);
    (Played { source, fields }, notes)
}

/// The operator settings a plan played.
#[derive(Clone, Debug, Serialize)]
struct Played {
    /// The Deployment they were read from (none: defaults, or only flags).
    source: Option<String>,
    /// The scenario fields they set (`featureGates`, `minValuesPolicy`, …).
    fields: serde_json::Map<String, Value>,
}

/// How many of the pods left pending a plan explains.
const PENDING_EXPLAINED: usize = 5;

/// A duration as a Go duration string.
fn go(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// A plan's figures, as `-o json` prints them.
#[derive(Serialize)]
struct Summary<'a> {
    /// The changed objects, `Kind/name`.
    change: Vec<String>,
    /// Seconds looked ahead.
    horizon_seconds: f64,
    /// The operator settings played.
    settings: &'a Played,
    /// The cluster at the start.
    now: Moment,
    /// Without the change.
    unchanged: Outcome<'a>,
    /// With the change.
    changed: Outcome<'a>,
}

/// Nodes, their price and pods waiting, at one moment.
#[derive(Serialize)]
struct Moment {
    nodes: usize,
    cost_per_hour: f64,
    pending_pods: usize,
}

/// How a run ends.
#[derive(Serialize)]
struct Outcome<'a> {
    /// At the end of the horizon.
    end: Moment,
    /// Dollars over the horizon.
    cost: f64,
    /// Pods evicted or deleted from nodes taken away.
    pods_evicted: usize,
    /// Instances launched.
    nodes_launched: usize,
    /// The NodeClaims taken away, in order.
    removals: &'a [Removal],
    /// Pods still pending at the end.
    pending_pods: &'a [String],
}

impl Plan {
    fn summary(&self, change: &[Value]) -> Summary<'_> {
        let start = self.unchanged.timeline.first();
        Summary {
            change: change.iter().map(named).collect(),
            horizon_seconds: self.changed.duration_seconds,
            settings: &self.settings,
            now: Moment {
                nodes: start.map_or(0, |s| s.nodes),
                cost_per_hour: start.map_or(0.0, |s| s.cost_per_hour),
                pending_pods: start.map_or(0, |s| s.pending_pods),
            },
            unchanged: outcome(&self.unchanged),
            changed: outcome(&self.changed),
        }
    }

    fn text(&self, horizon: Duration, change: &[Value]) -> String {
        let short = |s: f64| kerf_sim::clock::short(Duration::from_secs_f64(s));
        let s = self.summary(change);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "plan: {} over {}, from the cluster as it stands",
            s.change.join(", "),
            short(horizon.as_secs_f64())
        );
        let at = format!("in {}", short(horizon.as_secs_f64()));
        let _ = writeln!(
            out,
            "{:<22}{:>12}{:>22}{:>22}",
            "",
            "now",
            format!("{at}, as is"),
            format!("{at}, changed")
        );
        let row = |out: &mut String, what: &str, now: String, a: String, b: String| {
            let _ = writeln!(out, "{what:<22}{now:>12}{a:>22}{b:>22}");
        };
        let (a, b) = (&s.unchanged, &s.changed);
        row(
            &mut out,
            "nodes",
            s.now.nodes.to_string(),
            a.end.nodes.to_string(),
            b.end.nodes.to_string(),
        );
        let dollars = |d: f64| format!("${d:.4}");
        row(
            &mut out,
            "$/hour",
            dollars(s.now.cost_per_hour),
            dollars(a.end.cost_per_hour),
            dollars(b.end.cost_per_hour),
        );
        row(
            &mut out,
            "pods pending",
            s.now.pending_pods.to_string(),
            a.end.pending_pods.to_string(),
            b.end.pending_pods.to_string(),
        );
        row(
            &mut out,
            "cost over the horizon",
            String::new(),
            format!("${:.2}", a.cost),
            format!("${:.2}", b.cost),
        );
        row(
            &mut out,
            "nodes launched",
            String::new(),
            a.nodes_launched.to_string(),
            b.nodes_launched.to_string(),
        );
        row(
            &mut out,
            "nodes taken away",
            String::new(),
            a.removals.len().to_string(),
            b.removals.len().to_string(),
        );
        row(
            &mut out,
            "pods evicted",
            String::new(),
            a.pods_evicted.to_string(),
            b.pods_evicted.to_string(),
        );
        if b.removals.is_empty() {
            let _ = writeln!(out, "with the change, no node is taken away");
        } else {
            let _ = writeln!(out, "with the change, nodes taken away (decided → gone):");
            for r in b.removals {
                let gone = r
                    .terminated
                    .map_or_else(|| "still running at the end".into(), short);
                let _ = writeln!(
                    out,
                    "  {:>8} → {:<8} {} ({}, {}) {}",
                    short(r.decided),
                    gone,
                    r.node.as_deref().unwrap_or(&r.nodeclaim),
                    r.nodepool,
                    r.instance_type,
                    r.reason
                );
            }
            if let Some(roll) = roll(b.removals, "Drifted") {
                let _ = writeln!(
                    out,
                    "the drift roll takes {} under the budgets",
                    short(roll)
                );
            }
        }
        if !b.pending_pods.is_empty() {
            let _ = writeln!(
                out,
                "with the change, {} pods still pending at the end; why, for the first:",
                b.pending_pods.len()
            );
            for (pod, why) in &self.pending_why {
                let _ = writeln!(out, "  {pod}:");
                for line in why.lines() {
                    let _ = writeln!(out, "    {line}");
                }
            }
        }
        out
    }
}

/// From the first removal of `reason` decided to the last one's instance gone; none when
/// there is none, or one still runs at the end.
fn roll(removals: &[Removal], reason: &str) -> Option<f64> {
    let of: Vec<&Removal> = removals.iter().filter(|r| r.reason == reason).collect();
    let first = of.iter().map(|r| r.decided).reduce(f64::min)?;
    let last = of
        .iter()
        .map(|r| r.terminated)
        .collect::<Option<Vec<f64>>>()?;
    Some(last.into_iter().fold(first, f64::max) - first)
}

fn outcome(report: &Report) -> Outcome<'_> {
    Outcome {
        end: Moment {
            nodes: report.end.nodes.len(),
            cost_per_hour: report.end.cost_per_hour,
            pending_pods: report.end.pending_pods.len(),
        },
        cost: report.totals.cost,
        pods_evicted: report.totals.pods_evicted,
        nodes_launched: report.totals.nodes_launched,
        removals: &report.removals,
        pending_pods: &report.end.pending_pods,
    }
}

/// `Kind/name` of a manifest.
fn named(doc: &Value) -> String {
    let field = |p: &str| doc.pointer(p).and_then(Value::as_str).unwrap_or_default();
    format!("{}/{}", field("/kind"), field("/metadata/name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_gates_read_as_the_operator_takes_them_and_a_misspelt_one_is_named() {
        let gates = feature_gates("NodeRepair=true, SpotToSpotConsolidation=False").unwrap();
        assert_eq!(gates["NodeRepair"], true);
        assert_eq!(gates["SpotToSpotConsolidation"], false);
        let wrong = feature_gates("NodeRepai=true").unwrap_err();
        assert!(wrong.starts_with("NodeRepai: not a gate"), "{wrong}");
        assert!(
            feature_gates("NodeRepair")
                .unwrap_err()
                .contains("Name=true")
        );
        assert!(
            feature_gates("NodeRepair=yes")
                .unwrap_err()
                .contains("not true or false")
        );
    }
}
