//! Node selector requirements as sets of label values, with Karpenter's semantics.
//!
//! A [`Requirement`] is the set of values a label key may take: a finite set (`In`), the
//! complement of one (`NotIn`, `Exists`), or empty (`DoesNotExist`), narrowed by integer
//! bounds (`Gt`, `Lt`, `Gte`, `Lte`). [`Requirements`] holds one per key; adding a second
//! requirement on a key intersects the two. A NodePool's requirements are *compatible* with a
//! pod's when every custom key the pod needs is defined by the NodePool (well-known keys may
//! be left undefined; `NotIn` and `DoesNotExist` need nothing) and every shared key still has
//! a value in common.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use kerf_api::{NodeSelectorRequirementWithMinValues, Operator};

/// The values one label key may take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// When true the set is "every value except `values`"; when false it is `values`.
    complement: bool,
    values: BTreeSet<String>,
    /// Exclusive integer lower bound.
    greater_than: Option<i64>,
    /// Exclusive integer upper bound.
    less_than: Option<i64>,
    /// The least number of distinct values the launch choice must keep open.
    pub min_values: Option<u32>,
}

impl Requirement {
    /// The requirement `key operator values`. A numeric operator whose value is not an
    /// integer admits nothing (validation rejects such manifests before they get here).
    pub fn new<I, S>(key: &str, operator: Operator, values: I) -> Requirement
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let values: BTreeSet<String> = values.into_iter().map(Into::into).collect();
        let bound = values.iter().next().and_then(|v| v.parse::<i64>().ok());
        let base = |complement: bool, values: BTreeSet<String>| Requirement {
            key: key.to_string(),
            complement,
            values,
            greater_than: None,
            less_than: None,
            min_values: None,
        };
        match (operator, bound) {
            (Operator::In, _) => base(false, values),
            (Operator::NotIn, _) => base(true, values),
            (Operator::Exists, _) => base(true, BTreeSet::new()),
            (Operator::DoesNotExist, _) => base(false, BTreeSet::new()),
            (Operator::Gt, Some(b)) => Requirement {
                greater_than: Some(b),
                ..base(true, BTreeSet::new())
            },
            (Operator::Gte, Some(b)) => Requirement {
                greater_than: b.checked_sub(1),
                ..base(true, BTreeSet::new())
            },
            (Operator::Lt, Some(b)) => Requirement {
                less_than: Some(b),
                ..base(true, BTreeSet::new())
            },
            (Operator::Lte, Some(b)) => Requirement {
                less_than: b.checked_add(1),
                ..base(true, BTreeSet::new())
            },
            (_, None) => base(false, BTreeSet::new()),
        }
    }

    /// The requirement an API requirement states.
    pub fn from_api(r: &NodeSelectorRequirementWithMinValues) -> Requirement {
        let mut out = Requirement::new(&r.key, r.operator, r.values.iter().cloned());
        out.min_values = r.min_values.and_then(|m| u32::try_from(m).ok());
        out
    }

    /// Whether the label may take `value`.
    pub fn has(&self, value: &str) -> bool {
        self.within_bounds(value) && (self.values.contains(value) != self.complement)
    }

    fn within_bounds(&self, value: &str) -> bool {
        within(value, self.greater_than, self.less_than)
    }

    /// The values both requirements allow.
    pub fn intersection(&self, other: &Requirement) -> Requirement {
        let greater_than = self.greater_than.max(other.greater_than);
        let less_than = match (self.less_than, other.less_than) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let min_values = self.min_values.max(other.min_values);
        if let (Some(g), Some(l)) = (greater_than, less_than)
            && g >= l
        {
            let mut none =
                Requirement::new(&self.key, Operator::DoesNotExist, Vec::<String>::new());
            none.min_values = min_values;
            return none;
        }
        let complement = self.complement && other.complement;
        let values: BTreeSet<String> = match (self.complement, other.complement) {
            (true, true) => self.values.union(&other.values).cloned().collect(),
            (true, false) => other.values.difference(&self.values).cloned().collect(),
            (false, true) => self.values.difference(&other.values).cloned().collect(),
            (false, false) => self.values.intersection(&other.values).cloned().collect(),
        };
        let values = values
            .into_iter()
            .filter(|v| within(v, greater_than, less_than))
            .collect();
        Requirement {
            key: self.key.clone(),
            complement,
            values,
            // a finite set has had its bounds applied
            greater_than: if complement { greater_than } else { None },
            less_than: if complement { less_than } else { None },
            min_values,
        }
    }

    /// How many values the requirement admits (`usize::MAX` minus the exclusions for complements).
    pub fn len(&self) -> usize {
        if self.complement {
            usize::MAX - self.values.len()
        } else {
            self.values.len()
        }
    }

    /// Whether no value is admitted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The operator that describes the set: In, NotIn, Exists or DoesNotExist (bounded
    /// complements read as Exists with bounds, as Karpenter reports them).
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (true, false) => Operator::NotIn,
            (true, true) => Operator::Exists,
            (false, false) => Operator::In,
            (false, true) => Operator::DoesNotExist,
        }
    }

    /// The finite values, when the requirement is a finite set.
    pub fn values(&self) -> Option<&BTreeSet<String>> {
        (!self.complement).then_some(&self.values)
    }

    /// The values a complement excludes (empty for a finite set).
    pub fn excluded(&self) -> impl Iterator<Item = &String> {
        self.values.iter().filter(|_| self.complement)
    }

    /// The exclusive integer bounds `(greater_than, less_than)` a complement carries.
    pub fn bounds(&self) -> (Option<i64>, Option<i64>) {
        (self.greater_than, self.less_than)
    }
}

fn within(value: &str, greater_than: Option<i64>, less_than: Option<i64>) -> bool {
    if greater_than.is_none() && less_than.is_none() {
        return true;
    }
    let Ok(v) = value.parse::<i64>() else {
        return false;
    };
    greater_than.is_none_or(|g| v > g) && less_than.is_none_or(|l| v < l)
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.key, self.operator())
            .and_then(|()| {
                if self.values.is_empty() {
                    Ok(())
                } else {
                    let list: Vec<&str> = self.values.iter().map(String::as_str).collect();
                    write!(f, " [{}]", list.join(" "))
                }
            })
            .and_then(|()| match self.greater_than {
                Some(g) => write!(f, " >{g}"),
                None => Ok(()),
            })
            .and_then(|()| match self.less_than {
                Some(l) => write!(f, " <{l}"),
                None => Ok(()),
            })
    }
}

/// Why a set of requirements does not fit another: data, rendered as text at the edge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incompatibility {
    /// The incoming side needs a custom label the other side never defines.
    UndefinedLabel {
        /// The label key.
        key: String,
    },
    /// Both sides constrain the key and no value satisfies both.
    NoCommonValue {
        /// The label key.
        key: String,
        /// The incoming requirement, as text.
        incoming: String,
        /// The existing requirement, as text.
        existing: String,
    },
}

impl fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Incompatibility::UndefinedLabel { key } => {
                write!(f, "label {key:?} does not have known values")
            }
            Incompatibility::NoCommonValue {
                incoming, existing, ..
            } => {
                write!(f, "requirement {incoming} not in {existing}")
            }
        }
    }
}

/// Requirements on many keys; at most one (intersected) requirement per key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requirements {
    by_key: BTreeMap<String, Requirement>,
}

impl Requirements {
    /// No requirements.
    pub fn new() -> Requirements {
        Requirements::default()
    }

    /// Adds a requirement, intersecting it with any on the same key.
    pub fn add(&mut self, r: Requirement) {
        match self.by_key.get_mut(&r.key) {
            Some(existing) => *existing = existing.intersection(&r),
            None => {
                self.by_key.insert(r.key.clone(), r);
            }
        }
    }

    /// Requirements from API requirements.
    pub fn from_api<'a>(
        list: impl IntoIterator<Item = &'a NodeSelectorRequirementWithMinValues>,
    ) -> Requirements {
        let mut out = Requirements::new();
        for r in list {
            out.add(Requirement::from_api(r));
        }
        out
    }

    /// Whether the key is constrained.
    pub fn has(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
    }

    /// The requirement on a key; an undefined key admits any value (Exists).
    pub fn get(&self, key: &str) -> Requirement {
        self.by_key
            .get(key)
            .cloned()
            .unwrap_or_else(|| Requirement::new(key, Operator::Exists, Vec::<String>::new()))
    }

    /// The requirements, by key.
    pub fn iter(&self) -> impl Iterator<Item = &Requirement> {
        self.by_key.values()
    }

    /// Every shared key keeps a value in common, except where both sides only exclude.
    pub fn intersects(&self, incoming: &Requirements) -> Result<(), Vec<Incompatibility>> {
        let excluding = |op: Operator| matches!(op, Operator::NotIn | Operator::DoesNotExist);
        let mut problems = Vec::new();
        for (key, theirs) in &incoming.by_key {
            let Some(ours) = self.by_key.get(key) else {
                continue;
            };
            if ours.intersection(theirs).is_empty()
                && !(excluding(theirs.operator()) && excluding(ours.operator()))
            {
                problems.push(Incompatibility::NoCommonValue {
                    key: key.clone(),
                    incoming: theirs.to_string(),
                    existing: ours.to_string(),
                });
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// Whether `incoming` (a pod's requirements) can be met by these (a NodePool's): custom
    /// keys it needs must be defined here unless `allow_undefined` says the key is well known
    /// or its operator only excludes; shared keys must intersect.
    pub fn compatible(
        &self,
        incoming: &Requirements,
        allow_undefined: impl Fn(&str) -> bool,
    ) -> Result<(), Vec<Incompatibility>> {
        let mut problems: Vec<Incompatibility> = incoming
            .by_key
            .values()
            .filter(|r| {
                !allow_undefined(&r.key)
                    && !self.has(&r.key)
                    && !matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist)
            })
            .map(|r| Incompatibility::UndefinedLabel { key: r.key.clone() })
            .collect();
        if let Err(more) = self.intersects(incoming) {
            problems.extend(more);
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// Whether a node with these labels satisfies every requirement (absent labels are
    /// checked as absent: only NotIn and DoesNotExist admit them).
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        self.by_key.values().all(|r| match labels.get(&r.key) {
            Some(v) => r.has(v),
            None => matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist),
        })
    }
}

/// Whether Karpenter lets a pod require this key without a NodePool defining it.
pub fn is_well_known(key: &str) -> bool {
    kerf_api::labels::WELL_KNOWN_LABELS.contains(&key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
        Requirement::new(key, op, values.iter().copied())
    }

    fn reqs(list: &[Requirement]) -> Requirements {
        let mut r = Requirements::new();
        for x in list {
            r.add(x.clone());
        }
        r
    }

    #[test]
    fn operators_as_sets() {
        assert!(req("k", Operator::In, &["a"]).has("a"));
        assert!(!req("k", Operator::In, &["a"]).has("b"));
        assert!(req("k", Operator::NotIn, &["a"]).has("b"));
        assert!(req("k", Operator::Exists, &[]).has("anything"));
        assert!(!req("k", Operator::DoesNotExist, &[]).has("anything"));
        assert!(req("k", Operator::Gt, &["2"]).has("3"));
        assert!(!req("k", Operator::Gt, &["2"]).has("2"));
        assert!(!req("k", Operator::Gt, &["2"]).has("x"));
        assert!(req("k", Operator::Gte, &["2"]).has("2"));
        assert!(req("k", Operator::Lte, &["2"]).has("2"));
        assert!(!req("k", Operator::Lt, &["2"]).has("2"));
        assert!(
            !req("k", Operator::Gt, &["two"]).has("3"),
            "a non-integer bound admits nothing"
        );
    }

    #[test]
    fn intersections() {
        let i = req("k", Operator::In, &["a", "b", "c"]).intersection(&req(
            "k",
            Operator::NotIn,
            &["b"],
        ));
        assert_eq!(i.operator(), Operator::In);
        assert_eq!(i.values().unwrap().len(), 2);
        let n = req("k", Operator::NotIn, &["a"]).intersection(&req("k", Operator::NotIn, &["b"]));
        assert_eq!(
            (n.operator(), n.has("a"), n.has("b"), n.has("c")),
            (Operator::NotIn, false, false, true)
        );
        let bounded = req("k", Operator::In, &["1", "4", "8", "x"]).intersection(&req(
            "k",
            Operator::Gt,
            &["2"],
        ));
        assert_eq!(
            bounded.values().unwrap().iter().collect::<Vec<_>>(),
            ["4", "8"]
        );
        let empty = req("k", Operator::Gt, &["4"]).intersection(&req("k", Operator::Lt, &["4"]));
        assert_eq!(empty.operator(), Operator::DoesNotExist);
        let m = Requirement {
            min_values: Some(2),
            ..req("k", Operator::Exists, &[])
        }
        .intersection(&Requirement {
            min_values: Some(3),
            ..req("k", Operator::In, &["a"])
        });
        assert_eq!(m.min_values, Some(3));
    }

    #[test]
    fn compatibility_as_karpenter_defines_it() {
        let nodepool = reqs(&[
            req("karpenter.sh/capacity-type", Operator::In, &["spot"]),
            req("billing-team", Operator::In, &["my-team"]),
        ]);
        let ok = reqs(&[
            req("billing-team", Operator::In, &["my-team"]),
            req("topology.kubernetes.io/zone", Operator::In, &["us-east-1a"]),
        ]);
        assert_eq!(nodepool.compatible(&ok, is_well_known), Ok(()));

        // seed 003: the pod selects workload=gpu, the NodePool never defines it
        let gpu = reqs(&[req("workload", Operator::In, &["gpu"])]);
        assert_eq!(
            nodepool.compatible(&gpu, is_well_known),
            Err(vec![Incompatibility::UndefinedLabel {
                key: "workload".into()
            }])
        );
        // excluding a label the NodePool does not define is fine
        let not_gpu = reqs(&[req("workload", Operator::NotIn, &["gpu"])]);
        assert_eq!(nodepool.compatible(&not_gpu, is_well_known), Ok(()));
        // on-demand pods do not fit the spot pool
        let od = reqs(&[req(
            "karpenter.sh/capacity-type",
            Operator::In,
            &["on-demand"],
        )]);
        let err = nodepool.compatible(&od, is_well_known).unwrap_err();
        assert!(
            matches!(&err[0], Incompatibility::NoCommonValue { key, .. } if key == "karpenter.sh/capacity-type")
        );
        assert!(
            err[0]
                .to_string()
                .contains("not in karpenter.sh/capacity-type In [spot]"),
            "{}",
            err[0]
        );
        // both sides only exclude: compatible even with no common value
        let a = reqs(&[req("k", Operator::DoesNotExist, &[])]);
        let b = reqs(&[req("k", Operator::NotIn, &["x"])]);
        assert_eq!(a.intersects(&b), Ok(()));
    }

    #[test]
    fn labels_match_requirements() {
        let labels: BTreeMap<String, String> = [("a".to_string(), "1".to_string())].into();
        assert!(reqs(&[req("a", Operator::In, &["1"])]).matches_labels(&labels));
        assert!(reqs(&[req("b", Operator::NotIn, &["1"])]).matches_labels(&labels));
        assert!(reqs(&[req("b", Operator::DoesNotExist, &[])]).matches_labels(&labels));
        assert!(!reqs(&[req("b", Operator::Exists, &[])]).matches_labels(&labels));
        assert!(!reqs(&[req("b", Operator::Gt, &["0"])]).matches_labels(&labels));
        assert!(reqs(&[req("a", Operator::Lt, &["2"])]).matches_labels(&labels));
    }
}
