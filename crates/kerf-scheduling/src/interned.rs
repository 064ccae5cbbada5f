//! The requirements algebra over interned symbols: the scheduler's fast path.
//!
//! Same semantics as [`crate::requirements`] (the readable reference it is property-tested
//! against), but values are sorted symbol vectors and keys a sorted vector, so intersections
//! are merges of integer lists and a set of requirements hashes cheaply for caches.

use std::cmp::Ordering;

use kerf_api::Operator;

use crate::requirements::Requirement;
use crate::symbols::{Sym, Symbols};

/// The values one key may take (see [`Requirement`]): a finite set, or the complement of one,
/// narrowed by exclusive integer bounds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Req {
    complement: bool,
    values: Vec<Sym>,
    greater_than: Option<i64>,
    less_than: Option<i64>,
    /// The least number of distinct values the launch choice must keep open.
    pub min_values: Option<u32>,
}

impl Req {
    /// Exactly these values (`In`).
    pub fn any_of(mut values: Vec<Sym>) -> Req {
        values.sort_unstable();
        values.dedup();
        Req {
            complement: false,
            values,
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    /// Exactly one value.
    pub fn one(value: Sym) -> Req {
        Req::any_of(vec![value])
    }

    /// Any value at all (`Exists`).
    pub fn exists() -> Req {
        Req {
            complement: true,
            ..Req::any_of(Vec::new())
        }
    }

    /// The interned form of a reference requirement.
    pub fn from_requirement(r: &Requirement, symbols: &mut Symbols) -> Req {
        let (complement, list) = match r.values() {
            Some(v) => (false, v.iter().collect::<Vec<_>>()),
            None => (true, r.excluded().collect()),
        };
        let (greater_than, less_than) = r.bounds();
        let mut out = Req::any_of(list.into_iter().map(|v| symbols.intern(v)).collect());
        out.complement = complement;
        out.greater_than = greater_than;
        out.less_than = less_than;
        out.min_values = r.min_values;
        out
    }

    /// Whether the key may take `value`.
    pub fn has(&self, value: Sym, symbols: &Symbols) -> bool {
        self.within_bounds(value, symbols)
            && (self.values.binary_search(&value).is_ok() != self.complement)
    }

    fn within_bounds(&self, value: Sym, symbols: &Symbols) -> bool {
        if self.greater_than.is_none() && self.less_than.is_none() {
            return true;
        }
        symbols.int(value).is_some_and(|v| {
            self.greater_than.is_none_or(|g| v > g) && self.less_than.is_none_or(|l| v < l)
        })
    }

    /// The values both allow.
    pub fn intersection(&self, other: &Req, symbols: &Symbols) -> Req {
        let greater_than = self.greater_than.max(other.greater_than);
        let less_than = match (self.less_than, other.less_than) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let min_values = self.min_values.max(other.min_values);
        if let (Some(g), Some(l)) = (greater_than, less_than)
            && g >= l
        {
            return Req {
                min_values,
                ..Req::any_of(Vec::new())
            };
        }
        let complement = self.complement && other.complement;
        let values = match (self.complement, other.complement) {
            (true, true) => merge(&self.values, &other.values, |a, b| a || b),
            (true, false) => merge(&other.values, &self.values, |a, b| a && !b),
            (false, true) => merge(&self.values, &other.values, |a, b| a && !b),
            (false, false) => merge(&self.values, &other.values, |a, b| a && b),
        };
        let bounded = greater_than.is_some() || less_than.is_some();
        // a finite set keeps only values within the bounds; a complement need not exclude
        // values the bounds already exclude
        let values = if bounded {
            values
                .into_iter()
                .filter(|v| {
                    symbols.int(*v).is_some_and(|n| {
                        greater_than.is_none_or(|g| n > g) && less_than.is_none_or(|l| n < l)
                    })
                })
                .collect()
        } else {
            values
        };
        Req {
            complement,
            values,
            greater_than: if complement { greater_than } else { None },
            less_than: if complement { less_than } else { None },
            min_values,
        }
    }

    /// Whether no value is admitted.
    pub fn is_empty(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// The finite values, when the requirement is a finite set.
    pub fn values(&self) -> Option<&[Sym]> {
        (!self.complement).then_some(&self.values)
    }

    /// The single value, when exactly one is admitted.
    pub fn single(&self) -> Option<Sym> {
        match self.values() {
            Some([one]) => Some(*one),
            _ => None,
        }
    }

    /// The operator that describes the set (as [`Requirement::operator`]).
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (true, false) => Operator::NotIn,
            (true, true) => Operator::Exists,
            (false, false) => Operator::In,
            (false, true) => Operator::DoesNotExist,
        }
    }

    /// Whether the requirement only excludes (NotIn, DoesNotExist): it needs no definition.
    pub fn only_excludes(&self) -> bool {
        matches!(self.operator(), Operator::NotIn | Operator::DoesNotExist)
    }

    /// The reference form, for messages and for checking against the reference algebra.
    pub fn to_requirement(&self, key: &str, symbols: &Symbols) -> Requirement {
        let names = self.values.iter().map(|v| symbols.name(*v).to_string());
        let mut r = if self.complement {
            Requirement::new(key, Operator::NotIn, names)
        } else {
            Requirement::new(key, Operator::In, names)
        };
        if let Some(g) = self.greater_than {
            r = r.intersection(&Requirement::new(key, Operator::Gt, [g.to_string()]));
        }
        if let Some(l) = self.less_than {
            r = r.intersection(&Requirement::new(key, Operator::Lt, [l.to_string()]));
        }
        r.min_values = self.min_values;
        r
    }
}

/// Merges two sorted lists, keeping a value by `keep(in_a, in_b)`.
fn merge(a: &[Sym], b: &[Sym], keep: impl Fn(bool, bool) -> bool) -> Vec<Sym> {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let (v, ina, inb) = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => match x.cmp(y) {
                Ordering::Less => (*x, true, false),
                Ordering::Greater => (*y, false, true),
                Ordering::Equal => (*x, true, true),
            },
            (Some(x), None) => (*x, true, false),
            (None, Some(y)) => (*y, false, true),
            (None, None) => unreachable!("loop condition"),
        };
        i += usize::from(ina);
        j += usize::from(inb);
        if keep(ina, inb) {
            out.push(v);
        }
    }
    out
}

/// Why one set of requirements cannot meet another, in symbols (turned into text only when
/// a reason is reported).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// The incoming side needs a custom key the other never defines.
    Undefined(Sym),
    /// The key has no value both sides allow.
    Disjoint(Sym),
}

/// Requirements on many keys, sorted by key, one (intersected) requirement each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Reqs {
    by_key: Vec<(Sym, Req)>,
}

impl Reqs {
    /// No requirements.
    pub fn new() -> Reqs {
        Reqs::default()
    }

    /// Adds a requirement on `key`, intersecting with any already there.
    pub fn add(&mut self, key: Sym, req: Req, symbols: &Symbols) {
        match self.by_key.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(i) => self.by_key[i].1 = self.by_key[i].1.intersection(&req, symbols),
            Err(i) => self.by_key.insert(i, (key, req)),
        }
    }

    /// Takes the requirement on `key` out.
    pub fn remove(&mut self, key: Sym) -> Option<Req> {
        self.by_key
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| self.by_key.remove(i).1)
    }

    /// Whether no key is constrained.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The requirement on `key`, if constrained.
    pub fn get(&self, key: Sym) -> Option<&Req> {
        self.by_key
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| &self.by_key[i].1)
    }

    /// Lowers `key`'s minValues to `min` (MIN_VALUES_POLICY=BestEffort: what the instance
    /// types can give); a key without minValues is left alone.
    pub fn lower_min_values(&mut self, key: Sym, min: u32) {
        if let Ok(i) = self.by_key.binary_search_by_key(&key, |(k, _)| *k) {
            let r = &mut self.by_key[i].1;
            r.min_values = r.min_values.map(|m| m.min(min));
        }
    }

    /// Whether `key` is constrained.
    pub fn has(&self, key: Sym) -> bool {
        self.get(key).is_some()
    }

    /// Whether the key may take `value` (an unconstrained key takes anything).
    pub fn allows(&self, key: Sym, value: Sym, symbols: &Symbols) -> bool {
        self.get(key).is_none_or(|r| r.has(value, symbols))
    }

    /// The requirements, by key.
    pub fn iter(&self) -> impl Iterator<Item = (Sym, &Req)> {
        self.by_key.iter().map(|(k, r)| (*k, r))
    }

    /// Both sets together: every key of either, intersected where shared.
    pub fn intersection(&self, other: &Reqs, symbols: &Symbols) -> Reqs {
        let mut out = Vec::with_capacity(self.by_key.len() + other.by_key.len());
        let (a, b) = (&self.by_key, &other.by_key);
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            match (a.get(i), b.get(j)) {
                (Some((ka, ra)), Some((kb, rb))) if ka == kb => {
                    out.push((*ka, ra.intersection(rb, symbols)));
                    i += 1;
                    j += 1;
                }
                (Some((ka, ra)), Some((kb, _))) if ka < kb => {
                    out.push((*ka, ra.clone()));
                    i += 1;
                }
                (Some(_), Some((kb, rb))) | (None, Some((kb, rb))) => {
                    out.push((*kb, rb.clone()));
                    j += 1;
                }
                (Some((ka, ra)), None) => {
                    out.push((*ka, ra.clone()));
                    i += 1;
                }
                (None, None) => unreachable!("loop condition"),
            }
        }
        Reqs { by_key: out }
    }

    /// Every shared key keeps a value in common, unless both sides only exclude
    /// (Karpenter's `Intersects`).
    pub fn intersects(&self, incoming: &Reqs, symbols: &Symbols) -> Result<(), Conflict> {
        for (key, theirs) in &incoming.by_key {
            let Some(ours) = self.get(*key) else { continue };
            if ours.intersection(theirs, symbols).is_empty()
                && !(theirs.only_excludes() && ours.only_excludes())
            {
                return Err(Conflict::Disjoint(*key));
            }
        }
        Ok(())
    }

    /// Whether `incoming` (a pod's) can be met by these (a NodePool's or a planned node's):
    /// custom keys it needs must be defined here unless `well_known(key)` or the key only
    /// excludes; shared keys must intersect (Karpenter's `Compatible`).
    pub fn compatible(
        &self,
        incoming: &Reqs,
        well_known: impl Fn(Sym) -> bool,
        symbols: &Symbols,
    ) -> Result<(), Conflict> {
        for (key, theirs) in &incoming.by_key {
            if !self.has(*key) && !well_known(*key) && !theirs.only_excludes() {
                return Err(Conflict::Undefined(*key));
            }
        }
        self.intersects(incoming, symbols)
    }

    /// Whether labels (sorted by key) satisfy every requirement; an absent label satisfies
    /// only NotIn and DoesNotExist.
    pub fn matches_labels(&self, labels: &[(Sym, Sym)], symbols: &Symbols) -> bool {
        self.by_key.iter().all(
            |(key, r)| match labels.binary_search_by_key(key, |(k, _)| *k) {
                Ok(i) => r.has(labels[i].1, symbols),
                Err(_) => r.only_excludes(),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_follow_set_rules() {
        let mut t = Symbols::new();
        let [a, b, c] = ["a", "b", "c"].map(|s| t.intern(s));
        let ab = Req::any_of(vec![b, a]);
        let bc = Req::any_of(vec![c, b]);
        assert_eq!(ab.intersection(&bc, &t).values(), Some(&[b][..]));
        let not_b = Req {
            complement: true,
            ..Req::one(b)
        };
        assert_eq!(ab.intersection(&not_b, &t).values(), Some(&[a][..]));
        assert_eq!(
            not_b.intersection(&Req::exists(), &t).operator(),
            Operator::NotIn
        );
        assert!(Req::one(c).intersection(&ab, &t).is_empty());
    }
}
