//! Interned strings: the scheduler compares label keys and values as integers.
//!
//! One table holds keys and values alike. Interning order is the order strings are first
//! seen, so a solve that reads the same input interns the same numbers.

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
#[derive(Debug, Default)]
pub struct Symbols {
    by_name: FxHashMap<Box<str>, Sym>,
    names: Vec<Box<str>>,
    ints: Vec<Option<i64>>,
}

impl Symbols {
    /// An empty table.
    pub fn new() -> Symbols {
        Symbols::default()
    }

    /// The symbol for `name`, adding it on first sight.
    pub fn intern(&mut self, name: &str) -> Sym {
        if let Some(&s) = self.by_name.get(name) {
            return s;
        }
        let s = Sym(u32::try_from(self.names.len()).expect("fewer than 2^32 distinct strings"));
        self.by_name.insert(name.into(), s);
        self.names.push(name.into());
        self.ints.push(name.parse().ok());
        s
    }

    /// The symbol for `name` if it has been seen.
    pub fn get(&self, name: &str) -> Option<Sym> {
        self.by_name.get(name).copied()
    }

    /// The string behind a symbol.
    pub fn name(&self, s: Sym) -> &str {
        &self.names[s.index()]
    }

    /// The string behind a symbol read as an integer, if it is one.
    pub fn int(&self, s: Sym) -> Option<i64> {
        self.ints[s.index()]
    }

    /// How many symbols exist.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
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
}
