//! Mutation fuzzing of the parsers that take outside input: manifests, scenario files, AWS
//! interruption message bodies, cron schedules, quantities, Go durations, the operator's
//! settings, Karpenter kwok's instance-types file and Karpenter's objects as watches bring
//! them.
//!
//! Stable Rust has no coverage-guided fuzzer that builds here, so this is a plain mutator
//! (byte flips, insertions, deletions, splices, dictionary tokens) over a committed corpus,
//! seeded and deterministic. An input that makes a parser panic is a finding; one that
//! returns an error is fine. Inputs that reach an outcome not seen before (a new error
//! text) join the corpus in memory, a crude stand-in for coverage.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// One parser under test: it takes the input as text and returns a short outcome label
/// (`ok` or the start of the error), or panics.
pub struct Target {
    /// The name used for its corpus directory (`fuzz/corpus/<name>/`).
    pub name: &'static str,
    /// Runs the parser.
    pub run: fn(&str) -> String,
}

fn outcome<T, E: std::fmt::Display>(r: Result<T, E>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => e.to_string().chars().take(48).collect(),
    }
}

/// Every fuzz target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "manifest",
        run: |text| match kerf_api::manifest::read_documents(text) {
            Err(e) => outcome::<(), _>(Err(e.message)),
            Ok(docs) => {
                let mut out = String::from("ok");
                for d in &docs {
                    let checked = kerf_api::manifest::check_document(d);
                    out = format!("{:.40}", format!("{checked:?}"));
                    if let Err(e) = kerf_core::workloads::read(d) {
                        out = e.to_string().chars().take(48).collect();
                    }
                }
                out
            }
        },
    },
    Target {
        name: "scenario",
        run: |text| outcome(kerf_sim::scenario::parse(text, None)),
    },
    Target {
        name: "interruption",
        run: |text| outcome(kerf_aws::interruption::parse(text)),
    },
    Target {
        name: "cron",
        run: |text| match kerf_api::cron::CronSchedule::parse(text) {
            Ok(c) => {
                // a window check walks the schedule: it must end for any schedule
                let _ = c.active_at(1_795_392_000, std::time::Duration::from_secs(7 * 86_400));
                "ok".into()
            }
            Err(e) => outcome::<(), _>(Err(e)),
        },
    },
    Target {
        name: "quantity",
        run: |text| match kerf_api::Quantity::parse(text) {
            Ok(q) => {
                let _ = (q.milli(), q.units_ceil());
                "ok".into()
            }
            Err(e) => outcome::<(), _>(Err(e)),
        },
    },
    Target {
        name: "duration",
        run: |text| outcome(kerf_api::duration::parse_go_duration(text)),
    },
    Target {
        name: "settings",
        run: settings,
    },
    Target {
        name: "kwok-types",
        run: |text| match serde_json::from_str::<Vec<kerf_operator::kwok_types::TypeSpec>>(text) {
            Ok(specs) => {
                let _ = kerf_operator::kwok_types::options(&specs);
                "ok".into()
            }
            Err(e) => outcome::<(), _>(Err(e)),
        },
    },
    Target {
        name: "watched",
        run: watched,
    },
];

/// The operator's settings as its environment gives them: each `NAME=value` line is the
/// setting of Karpenter's variable NAME, read as its flag (`--name=value`) and checked.
fn settings(text: &str) -> String {
    use clap::Parser as _;
    let mut args = vec!["kerf-operator".to_string()];
    for line in text.lines() {
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        args.push(format!(
            "--{}={value}",
            name.trim().to_lowercase().replace('_', "-")
        ));
    }
    match kerf_operator::settings::Settings::try_parse_from(&args) {
        Ok(s) => outcome(s.validate()),
        Err(e) => e.to_string().chars().take(48).collect(),
    }
}

/// An object of Karpenter's kinds as a watch brings it, read forward-compatibly
/// (`kerf_api::cluster_read`, the operator's lenient reader) as its `kind` says.
fn watched(text: &str) -> String {
    use kerf_api::cluster_read::read;
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return "not json".into();
    };
    let kind = value["kind"].as_str().unwrap_or("NodePool").to_string();
    let problem = match kind.as_str() {
        "NodeClaim" => read::<kerf_api::NodeClaim>(&kind, &value).object.err(),
        "EC2NodeClass" => read::<kerf_api::EC2NodeClass>(&kind, &value).object.err(),
        _ => read::<kerf_api::NodePool>(&kind, &value).object.err(),
    };
    problem.map_or_else(|| "ok".into(), |p| p.to_string().chars().take(48).collect())
}

/// The corpus files of a target under `root` (`fuzz/corpus`), sorted.
pub fn corpus(root: &Path, target: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(target))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs one input; `Err` with the panic message when the parser panicked.
pub fn run_one(target: &Target, input: &str) -> Result<String, String> {
    catch_unwind(AssertUnwindSafe(|| (target.run)(input))).map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into())
    })
}

/// Tokens the mutator splices in: the syntax the parsers care about.
const DICTIONARY: &[&str] = &[
    "\n",
    ": ",
    "- ",
    "{",
    "}",
    "[",
    "]",
    "'",
    "\"",
    "---\n",
    "*",
    "/",
    ",",
    "-",
    "@",
    "%",
    "Ki",
    "Mi",
    "Gi",
    "Ti",
    "Pi",
    "Ei",
    "m",
    "k",
    "M",
    "G",
    "e",
    "E",
    "h",
    "s",
    "ms",
    "us",
    "ns",
    "0",
    "9",
    "99999999999999999999",
    "-1",
    "1e308",
    ".",
    "nodes",
    "apiVersion: karpenter.sh/v1",
    "kind: NodePool",
    "spec",
    "metadata",
    "name",
    "&a",
    "*a",
    "!!binary",
    "<<: ",
    "\t",
    "\u{0}",
    "\u{feff}",
    "é",
    "detail",
    "detail-type",
    "EC2 Spot Instance Interruption Warning",
    "instance-id",
    "@hourly",
    "@every 1h",
    "JAN",
    "SUN",
    "L",
    "#",
    "?",
];

/// One mutation of `input`, drawing splice partners from `corpus`.
pub fn mutate(rng: &mut ChaCha8Rng, input: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let at = if out.is_empty() {
            0
        } else {
            rng.random_range(0..=out.len())
        };
        match rng.random_range(0..6) {
            0 if !out.is_empty() => {
                let i = at.min(out.len() - 1);
                out[i] ^= 1 << rng.random_range(0..8);
            }
            1 if !out.is_empty() => {
                let end = (at + rng.random_range(1..=16)).min(out.len());
                out.drain(at.min(end)..end);
            }
            2 => {
                let token = DICTIONARY[rng.random_range(0..DICTIONARY.len())];
                out.splice(at..at, token.bytes());
            }
            3 if !corpus.is_empty() => {
                let other = &corpus[rng.random_range(0..corpus.len())];
                if !other.is_empty() {
                    let from = rng.random_range(0..other.len());
                    let to = (from + rng.random_range(1..=64)).min(other.len());
                    out.splice(at..at, other[from..to].iter().copied());
                }
            }
            4 if !out.is_empty() => {
                // repeat a chunk: deep nesting, long lists
                let end = (at + rng.random_range(1..=8)).min(out.len());
                let chunk: Vec<u8> = out[at.min(end)..end].to_vec();
                for _ in 0..rng.random_range(1..=32) {
                    out.splice(at..at, chunk.iter().copied());
                }
            }
            _ => out.insert(at, rng.random::<u8>()),
        }
    }
    out.truncate(64 * 1024);
    out
}
