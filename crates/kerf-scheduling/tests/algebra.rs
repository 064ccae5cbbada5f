//! Property tests of the requirements algebra: intersection is set intersection, and it is
//! commutative, for random requirements over a small value universe.

use kerf_api::Operator;
use kerf_scheduling::Requirement;
use proptest::prelude::*;

const UNIVERSE: &[&str] = &["0", "1", "2", "3", "5", "8", "13", "a", "b", "c"];

fn requirement() -> impl Strategy<Value = Requirement> {
    let op = prop_oneof![
        Just(Operator::In),
        Just(Operator::NotIn),
        Just(Operator::Exists),
        Just(Operator::DoesNotExist),
        Just(Operator::Gt),
        Just(Operator::Lt),
        Just(Operator::Gte),
        Just(Operator::Lte),
    ];
    (op, proptest::sample::subsequence(UNIVERSE, 0..4), 0i64..14).prop_map(|(op, values, bound)| {
        if op.is_numeric() {
            Requirement::new("k", op, [bound.to_string()])
        } else {
            Requirement::new("k", op, values)
        }
    })
}

proptest! {
    #[test]
    fn intersection_is_set_intersection(a in requirement(), b in requirement()) {
        let both = a.intersection(&b);
        for v in UNIVERSE.iter().copied().chain(["21", "-1", "z"]) {
            prop_assert_eq!(both.has(v), a.has(v) && b.has(v), "value {} of {} ∩ {} = {}", v, a, b, both);
        }
    }

    #[test]
    fn intersection_commutes(a in requirement(), b in requirement()) {
        let (ab, ba) = (a.intersection(&b), b.intersection(&a));
        for v in UNIVERSE {
            prop_assert_eq!(ab.has(v), ba.has(v));
        }
        prop_assert_eq!(ab.is_empty(), ba.is_empty());
    }
}
