//! Bugs planted between the controllers and the simulated cluster, each caught by the
//! checkers: a checker that cannot fail checks nothing.

use kerf_sim::swarm;
use kerf_sim::world::Plant;

/// The first generated seeds whose run the plant turns into a violation, with its message.
fn caught(plant: Plant, seeds: std::ops::Range<u64>) -> Option<(u64, String)> {
    seeds.into_iter().find_map(|seed| {
        let scenario = swarm::generate(seed);
        let message = swarm::check_planted(&scenario, Some(plant)).err()?;
        Some((seed, message))
    })
}

#[test]
fn the_swarm_catches_a_controller_that_never_taints() {
    let (seed, message) =
        caught(Plant::MissingTaint, 1..40).expect("some seed of the first 40 shows it");
    assert!(
        message.contains("karpenter.sh/disrupted"),
        "seed {seed}: {message}"
    );
    // (the same seeds without the plant hold every invariant: CI's swarm runs them)
}
