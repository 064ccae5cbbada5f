//! A fixed-size set of small integers: the scheduler's instance-type sets.

/// A set of indices below the capacity it was made with.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BitSet {
    words: Box<[u64]>,
}

impl BitSet {
    /// The empty set over `0..n`.
    pub fn empty(n: usize) -> BitSet {
        BitSet {
            words: vec![0; n.div_ceil(64)].into_boxed_slice(),
        }
    }

    /// Adds `i`.
    pub fn insert(&mut self, i: usize) {
        self.words[i / 64] |= 1 << (i % 64);
    }

    /// Removes `i`.
    pub fn remove(&mut self, i: usize) {
        self.words[i / 64] &= !(1 << (i % 64));
    }

    /// Whether `i` is in the set.
    pub fn contains(&self, i: usize) -> bool {
        self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Keeps only the members `other` also has (both made over the same range).
    pub fn intersect_with(&mut self, other: &BitSet) {
        for (a, b) in self.words.iter_mut().zip(other.words.iter()) {
            *a &= b;
        }
    }

    /// Whether the set has no members.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The members, ascending.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(wi, &w)| {
            let mut rest = w;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                Some(wi * 64 + bit)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_come_back_in_order_and_intersect() {
        let mut a = BitSet::empty(130);
        for i in [0, 63, 64, 129] {
            a.insert(i);
        }
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![0, 63, 64, 129]);
        assert_eq!(a.len(), 4);
        let mut b = BitSet::empty(130);
        b.insert(64);
        b.insert(5);
        a.intersect_with(&b);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![64]);
        a.remove(64);
        assert!(a.is_empty() && !a.contains(64));
    }
}
