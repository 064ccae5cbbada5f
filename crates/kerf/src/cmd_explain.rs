//! `kerf explain pod NAMESPACE/NAME | node NAME`: why a pod is pending, or runs where it
//! runs, and why a node is or is not about to be disrupted. Reads manifests (`-f`, as
//! `kerf schedule` does) or, without them, the objects of the kubeconfig's cluster
//! (read-only: it lists, and writes nothing).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use kerf_core::controllers::Controllers;

use crate::inputs::Offerings;

/// Arguments of `kerf explain`.
#[derive(clap::Args)]
pub struct Args {
    /// What to explain.
    kind: Kind,
    /// A pod's `NAMESPACE/NAME` (`NAME` alone is in `default`), or a node's name.
    name: String,
    /// Manifest files (multi-document YAML, `kubectl get -o yaml` lists too): NodePools,
    /// EC2NodeClasses, NodeClaims, Nodes, Pods, DaemonSets, PodDisruptionBudgets and
    /// workloads; `-` reads standard input. Without files, the cluster of the current
    /// kubeconfig is read.
    #[arg(short = 'f', long = "filename", num_args = 1..)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    offerings: Offerings,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    output: Format,
}

/// What `kerf explain` (and `kerf simulate --explain-at`) explains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// A pod: where it runs, or why it is pending, NodePool by NodePool.
    Pod,
    /// A node: why it is or is not about to be disrupted.
    Node,
}

/// Output formats of an explanation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Sentences.
    Text,
    /// The explanation's fields.
    Json,
}

/// Explains; exit 2 when the input is invalid or names no such pod or node.
pub fn run(args: &Args) -> Result<ExitCode> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let inputs = if args.files.is_empty() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(crate::inputs::live())?
    } else {
        match crate::inputs::load(&args.files, &[])? {
            Ok(i) => i,
            Err(problems) => {
                eprint!("{problems}");
                return Ok(ExitCode::from(2));
            }
        }
    };
    let mut core = crate::inputs::cluster_of(inputs, &args.offerings.reading(0, true), now)?;
    match answer(&mut core, args.kind, &args.name, args.output, now)? {
        Ok(text) => {
            crate::emit(&text)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(unknown) => {
            eprintln!("{unknown}");
            Ok(ExitCode::from(2))
        }
    }
}

/// A pod's `namespace/name` as the cluster keys it: a name alone is in `default`, as
/// kubectl takes it.
pub fn pod_key(name: &str) -> String {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("default/{name}")
    }
}

/// The explanation of a pod or node of `core`'s cluster, as text or JSON; `Ok(Err(..))`
/// says there is no such object and names some that exist.
pub fn answer(
    core: &mut Controllers,
    kind: Kind,
    name: &str,
    format: Format,
    now: Duration,
) -> Result<std::result::Result<String, String>> {
    let render = |value: serde_json::Result<serde_json::Value>, text: String| -> Result<String> {
        Ok(match format {
            Format::Json => serde_json::to_string_pretty(&value?)? + "\n",
            Format::Text => text,
        })
    };
    match kind {
        Kind::Pod => {
            let key = pod_key(name);
            match core.explain_pod(&key, now) {
                Some(e) => Ok(Ok(render(serde_json::to_value(&e), e.to_string())?)),
                None => Ok(Err(unknown(
                    "pod",
                    &key,
                    core.cluster().pods().keys().map(String::as_str),
                ))),
            }
        }
        Kind::Node => match core.explain_node(name, now) {
            Some(e) => Ok(Ok(render(serde_json::to_value(&e), e.to_string())?)),
            None => Ok(Err(unknown(
                "node",
                name,
                core.cluster().nodes().keys().map(String::as_str),
            ))),
        },
    }
}

/// "no pod x; there are: …", with the names that share the most leading characters.
fn unknown<'a>(what: &str, name: &str, known: impl Iterator<Item = &'a str>) -> String {
    let mut known: Vec<&str> = known.collect();
    if known.is_empty() {
        return format!("no {what} {name}: there are none");
    }
    let shared = |k: &str| {
        k.chars()
            .zip(name.chars())
            .take_while(|(a, b)| a == b)
            .count()
    };
    known.sort_by_key(|k| (std::cmp::Reverse(shared(k)), *k));
    let more = known.len().saturating_sub(8);
    known.truncate(8);
    format!(
        "no {what} {name}; there are: {}{}",
        known.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}
