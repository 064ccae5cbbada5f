//! Interned strings: the scheduler compares label keys and values as integers.
//!
//! One table holds keys and values alike. Interning order is the order strings are first
//! seen: a solve over a fresh table that reads the same input interns the same numbers. Over
//! a kept base (the compiled catalog) the base's strings come first; no decision depends on
//! the numbers, only on the strings behind them.

use std::sync::Arc;

use rustc_hash::FxHashMap;

/// An interned string; equal strings get equal symbols within one [`Symbols`] table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(u32);

impl Sym {
    /// The symbol's position in its table, for dense per-symbol arrays.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The intern table: strings to symbols and back, plus each string read as an integer
/// (for `Gt`/`Lt` requirements) computed once.
///
/// A table may sit over a frozen, shared base ([`Symbols::over`]): the base's symbols keep
/// their numbers and new strings are numbered after them, so what was compiled against the
/// base (an instance-type catalog) is reused by many solves without interning it again.
#[derive(Clone, Debug, Default)]
pub struct Symbols {
    base: Option<Arc<Symbols>>,
    by_name: FxHashMap<Box<str>, Sym>,
    names: Vec<Box<str>>,
    ints: Vec<Option<i64>>,
}

impl Symbols {
    /// An empty table.
    pub fn new() -> Symbols {
        Symbols::default()
    }

    /// A table that starts with `base`'s symbols.
    pub fn over(base: Arc<Symbols>) -> Symbols {
        Symbols {
            base: Some(base),
            ..Symbols::default()
        }
    }

    fn offset(&self) -> usize {
        self.base.as_ref().map_or(0, |b| b.len())
    }

    /// The symbol for `name`, adding it on first sight.
    pub fn intern(&mut self, name: &str) -> Sym {
        if let Some(s) = self.get(name) {
            return s;
        }
        let index = self.offset() + self.names.len();
        let s = Sym(u32::try_from(index).expect("fewer than 2^32 distinct strings"));
        self.by_name.insert(name.into(), s);
        self.names.push(name.into());
        self.ints.push(name.parse().ok());
        s
    }

    /// The symbol for `name` if it has been seen.
    pub fn get(&self, name: &str) -> Option<Sym> {
        // a string is in the base or here, never both: the solve's own strings (pods')
        // are looked up most
        if let Some(&s) = self.by_name.get(name) {
            return Some(s);
        }
        self.base.as_ref().and_then(|b| b.get(name))
    }

    /// The string behind a symbol.
    pub fn name(&self, s: Sym) -> &str {
        match s.index().checked_sub(self.offset()) {
            Some(i) => &self.names[i],
            None => self.base.as_ref().map_or("", |b| b.name(s)),
        }
    }

    /// The string behind a symbol read as an integer, if it is one.
    pub fn int(&self, s: Sym) -> Option<i64> {
        match s.index().checked_sub(self.offset()) {
            Some(i) => self.ints[i],
            None => self.base.as_ref().and_then(|b| b.int(s)),
        }
    }

    /// How many symbols exist, the base's included.
    pub fn len(&self) -> usize {
        self.offset() + self.names.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_share_a_symbol_and_integers_are_read_once() {
        let mut t = Symbols::new();
        let a = t.intern("us-east-1a");
        let n = t.intern("16");
        assert_eq!(t.intern("us-east-1a"), a);
        assert_ne!(a, n);
        assert_eq!(t.name(a), "us-east-1a");
        assert_eq!(t.int(n), Some(16));
        assert_eq!(t.int(a), None);
        assert_eq!(t.get("missing"), None);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_table_over_a_base_keeps_its_numbers_and_adds_after_them() {
        let mut base = Symbols::new();
        let a = base.intern("us-east-1a");
        let n = base.intern("16");
        let mut t = Symbols::over(Arc::new(base));
        assert_eq!(t.intern("us-east-1a"), a);
        let b = t.intern("us-east-1b");
        assert_eq!(b.index(), 2);
        assert_eq!((t.name(a), t.name(b)), ("us-east-1a", "us-east-1b"));
        assert_eq!((t.int(n), t.int(b)), (Some(16), None));
        assert_eq!(t.get("16"), Some(n));
        assert_eq!(t.len(), 3);
    }
}
