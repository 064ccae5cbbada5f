//! Swarm testing: generated scenarios pass every invariant, and every scenario the swarm
//! ever failed on (`tests/swarm/*.yaml`) replays clean.

use kerf_sim::swarm;

#[test]
fn every_scenario_the_swarm_failed_on_replays_clean() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/swarm");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/swarm") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("readable");
        let scenario: serde_json::Value = serde_yaml::from_str(&text).expect("YAML");
        if let Err(e) = swarm::check(&scenario) {
            panic!("{}: {e}", path.display());
        }
        seen += 1;
    }
    assert!(seen >= 3, "the regression scenarios are there");
}

#[test]
fn a_run_of_generated_scenarios_holds_every_invariant() {
    let failures: Vec<String> = [1, 2, 4, 5]
        .into_iter()
        .filter_map(swarm::run_seed)
        .map(|f| format!("seed {}: {}", f.seed, f.message))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
}
