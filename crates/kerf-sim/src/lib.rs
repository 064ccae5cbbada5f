//! Kerf's simulator: a simulated Kubernetes cluster and AWS cloud on a virtual clock,
//! driving Kerf's decision core. Same scenario and seed, same output, byte for byte.

pub mod clock;
pub mod cloud;
pub use kerf_kube_scheduler as kube_scheduler;
pub mod log;
pub mod report;
pub mod scenario;
pub mod swarm;
pub mod world;

use std::path::Path;
use std::time::Duration;

pub use report::Report;
pub use scenario::{Scenario, ScenarioError};
pub use world::{RunOptions, SimError, Standing, World};

/// The scenarios shipped in the binary (`scenarios/` in the repository), by name.
pub const BUILT_IN: &[(&str, &str)] = &[
    (
        "api-outage",
        include_str!("../../../scenarios/api-outage.yaml"),
    ),
    ("day", include_str!("../../../scenarios/day.yaml")),
    (
        "getting-started",
        include_str!("../../../scenarios/getting-started.yaml"),
    ),
    (
        "spot-fallback",
        include_str!("../../../scenarios/spot-fallback.yaml"),
    ),
    (
        "reservations",
        include_str!("../../../scenarios/reservations.yaml"),
    ),
    ("volumes", include_str!("../../../scenarios/volumes.yaml")),
    (
        "spot-refused",
        include_str!("../../../scenarios/spot-refused.yaml"),
    ),
];

/// The scenario `kerf simulate` runs without an argument.
pub const DEFAULT: &str = "day";

/// Reads a built-in scenario by name, or a scenario file by path.
pub fn load(name_or_path: &str) -> Result<Scenario, ScenarioError> {
    if let Some((_, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
        return scenario::parse(text, None);
    }
    let path = Path::new(name_or_path);
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        path: String::new(),
        message: format!(
            "not a built-in scenario ({}) and cannot be read: {e}",
            BUILT_IN
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })?;
    scenario::parse(&text, path.parent())
}

/// Runs a scenario to its end; `progress(now, nodes, pending)` is called as time advances
/// (at most once per sample interval of simulated time).
pub fn run(
    scenario: Scenario,
    options: RunOptions,
    progress: &mut dyn FnMut(Duration, usize, usize),
) -> Result<Report, SimError> {
    World::new(scenario, options)?.run(progress)
}
