//! Swarm testing: generated scenarios pass every invariant, and every scenario the swarm
//! ever failed on (`tests/swarm/*.yaml`) replays clean.

use kerf_sim::swarm;

#[test]
fn every_scenario_the_swarm_failed_on_replays_clean() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/swarm");
    let mut paths: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/swarm")
        .map(|e| e.expect("entry").path())
        .collect();
    paths.sort();
    assert!(paths.len() >= 3, "the regression scenarios are there");
    // two at a time: they are independent, and the slowest take a minute each unoptimized
    let failures: Vec<String> = std::thread::scope(|s| {
        let halves: Vec<_> = (0..2)
            .map(|half| {
                let paths = &paths;
                s.spawn(move || {
                    paths
                        .iter()
                        .skip(half)
                        .step_by(2)
                        .filter_map(|path| {
                            let text = std::fs::read_to_string(path).expect("readable");
                            let scenario: serde_json::Value =
                                serde_yaml::from_str(&text).expect("YAML");
                            swarm::check(&scenario)
                                .err()
                                .map(|e| format!("{}: {e}", path.display()))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        halves
            .into_iter()
            .flat_map(|h| h.join().expect("a replay thread"))
            .collect()
    });
    assert!(failures.is_empty(), "{failures:#?}");
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
