//! Property tests of the requirements algebra: intersection is set intersection, and it is
//! commutative, for random requirements over a small value universe; and the scheduler's
//! interned fast path agrees with the readable reference on every value.

use kerf_api::Operator;
use kerf_scheduling::Requirement;
use kerf_scheduling::interned::{Req, Reqs};
use kerf_scheduling::symbols::Symbols;
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

    #[test]
    fn interned_requirements_agree_with_the_reference(a in requirement(), b in requirement()) {
        let mut symbols = Symbols::new();
        let probes: Vec<&str> = UNIVERSE.iter().copied().chain(["21", "-1", "z"]).collect();
        let syms: Vec<_> = probes.iter().map(|v| symbols.intern(v)).collect();
        let (ia, ib) = (Req::from_requirement(&a, &mut symbols), Req::from_requirement(&b, &mut symbols));
        let (both, reference) = (ia.intersection(&ib, &symbols), a.intersection(&b));
        for (v, s) in probes.iter().zip(&syms) {
            prop_assert_eq!(ia.has(*s, &symbols), a.has(v), "{} in {}", v, a);
            prop_assert_eq!(both.has(*s, &symbols), reference.has(v), "{} in {} ∩ {}", v, a, b);
        }
        prop_assert_eq!(both.is_empty(), reference.is_empty());
        prop_assert_eq!(both.operator(), reference.operator());
        // back to the reference form without losing a value
        let round = both.to_requirement("k", &symbols);
        for v in &probes {
            prop_assert_eq!(round.has(v), reference.has(v));
        }
        // compatibility as sets of requirements matches too
        let key = symbols.intern("k");
        let (mut ra, mut rb) = (Reqs::new(), Reqs::new());
        ra.add(key, ia, &symbols);
        rb.add(key, ib, &symbols);
        let mut sa = kerf_scheduling::Requirements::new();
        sa.add(a.clone());
        let mut sb = kerf_scheduling::Requirements::new();
        sb.add(b.clone());
        prop_assert_eq!(ra.intersects(&rb, &symbols).is_ok(), sa.intersects(&sb).is_ok());
    }
}
