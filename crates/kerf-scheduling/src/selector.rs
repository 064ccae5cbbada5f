//! Label selectors of affinity terms and spread constraints, over interned labels.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::symbols::{Sym, Symbols};

/// One selector expression's operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum SelectorOp {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// A compiled label selector; a missing selector selects nothing, an empty one everything.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Selector {
    terms: Vec<(Sym, SelectorOp, Vec<Sym>)>,
    nothing: bool,
}

impl Selector {
    /// Compiles a selector; `extra` adds `key In [value]` terms (matchLabelKeys).
    pub fn compile(
        selector: Option<&LabelSelector>,
        extra: &[(Sym, Sym)],
        symbols: &mut Symbols,
    ) -> Selector {
        let Some(sel) = selector else {
            return Selector {
                terms: Vec::new(),
                nothing: true,
            };
        };
        let mut terms = Vec::new();
        let mut nothing = false;
        for (k, v) in sel.match_labels.iter().flatten() {
            terms.push((symbols.intern(k), SelectorOp::In, vec![symbols.intern(v)]));
        }
        for e in sel.match_expressions.iter().flatten() {
            let op = match e.operator.as_str() {
                "In" => SelectorOp::In,
                "NotIn" => SelectorOp::NotIn,
                "Exists" => SelectorOp::Exists,
                "DoesNotExist" => SelectorOp::DoesNotExist,
                _ => {
                    nothing = true;
                    continue;
                }
            };
            let mut values: Vec<Sym> = e
                .values
                .iter()
                .flatten()
                .map(|v| symbols.intern(v))
                .collect();
            values.sort_unstable();
            terms.push((symbols.intern(&e.key), op, values));
        }
        for (k, v) in extra {
            terms.push((*k, SelectorOp::In, vec![*v]));
        }
        terms.sort();
        terms.dedup();
        Selector { terms, nothing }
    }

    /// Whether labels (sorted by key) are selected.
    pub fn matches(&self, labels: &[(Sym, Sym)]) -> bool {
        if self.nothing {
            return false;
        }
        self.terms.iter().all(|(key, op, values)| {
            let value = labels
                .binary_search_by_key(key, |(k, _)| *k)
                .ok()
                .map(|i| labels[i].1);
            match (op, value) {
                (SelectorOp::In, Some(v)) => values.binary_search(&v).is_ok(),
                (SelectorOp::In, None) => false,
                (SelectorOp::NotIn, Some(v)) => values.binary_search(&v).is_err(),
                (SelectorOp::NotIn, None) => true,
                (SelectorOp::Exists, v) => v.is_some(),
                (SelectorOp::DoesNotExist, v) => v.is_none(),
            }
        })
    }
}

impl PartialOrd for SelectorOp {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SelectorOp {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (*self as u8).cmp(&(*other as u8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn selectors_match_like_the_api_server() {
        let mut t = Symbols::new();
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["db".into()]),
            }]),
        };
        let s = Selector::compile(Some(&sel), &[], &mut t);
        let mut labels = |pairs: &[(&str, &str)]| {
            let mut v: Vec<(Sym, Sym)> = pairs
                .iter()
                .map(|(k, v)| (t.intern(k), t.intern(v)))
                .collect();
            v.sort();
            v
        };
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "api")])));
        let none = Selector::compile(None, &[], &mut t);
        assert!(!none.matches(&[]));
        let all = Selector::compile(Some(&LabelSelector::default()), &[], &mut t);
        assert!(all.matches(&[]));
    }
}
