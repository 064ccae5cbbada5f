//! Go values as `github.com/mitchellh/hashstructure/v2` hashes them (format v2), which is
//! how Karpenter computes the `karpenter.sh/nodepool-hash` and
//! `karpenter.k8s.aws/ec2nodeclass-hash` it writes on every NodeClaim. Kerf describes the
//! hashed Go structs as [`GoValue`] trees and hashes them the same way, so a NodeClaim
//! Karpenter launched keeps its hash under Kerf and the other way round.
//!
//! The rules, from hashstructure v2 with Karpenter's options (`SlicesAsSets`,
//! `IgnoreZeroValue`, `ZeroNil`), all over FNV-1 64 (not 1a) with little-endian integers:
//! - an integer is its little-endian bytes at its own width, hashed alone; a bool one byte;
//! - a string is the hash of its bytes;
//! - a struct starts from the hash of its type's name; each exported field that is not
//!   zero and not tagged `hash:"ignore"` adds `ordered(name, value)` by XOR, and the sum is
//!   re-hashed after every field;
//! - a map is the XOR of `ordered(key, value)` over its entries, re-hashed once at the end;
//! - a slice (as a set) is the XOR of its elements' hashes, not re-hashed;
//! - a nil pointer is the zero value of its type, a non-nil one its target.

/// A Go value in the shape hashstructure walks.
#[derive(Clone, Debug, PartialEq)]
pub enum GoValue {
    /// A `string` (or a type whose underlying type is string).
    Str(String),
    /// An `int`, `int64` or other 64-bit integer.
    Int64(i64),
    /// An `int32`.
    Int32(i32),
    /// A `bool`.
    Bool(bool),
    /// A `time.Time` as `metav1.Time` decodes it (in the local zone, UTC in a container):
    /// seconds and nanoseconds since the Unix epoch.
    Time(i64, i32),
    /// A struct: its type's name and its exported fields in declaration order. A field that
    /// is `None` is Go's zero value for it (skipped under `IgnoreZeroValue`).
    Struct(&'static str, Vec<(&'static str, Option<GoValue>)>),
    /// A non-nil map.
    Map(Vec<(GoValue, GoValue)>),
    /// A non-nil slice (hashed as a set).
    Slice(Vec<GoValue>),
}

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1, 64 bits (Go's `fnv.New64`): multiply, then XOR.
pub fn fnv1(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(OFFSET, |h, b| h.wrapping_mul(PRIME) ^ u64::from(*b))
}

fn ordered(a: u64, b: u64) -> u64 {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_le_bytes());
    bytes[8..].copy_from_slice(&b.to_le_bytes());
    fnv1(&bytes)
}

fn finish(a: u64) -> u64 {
    fnv1(&a.to_le_bytes())
}

impl GoValue {
    /// A string value.
    pub fn str(s: impl Into<String>) -> GoValue {
        GoValue::Str(s.into())
    }

    /// A string field, zero when empty.
    pub fn opt_str(s: &str) -> Option<GoValue> {
        (!s.is_empty()).then(|| GoValue::str(s))
    }

    /// The hash hashstructure v2 gives this value.
    pub fn hash(&self) -> u64 {
        match self {
            GoValue::Str(s) => fnv1(s.as_bytes()),
            GoValue::Int64(i) => fnv1(&i.to_le_bytes()),
            GoValue::Int32(i) => fnv1(&i.to_le_bytes()),
            GoValue::Bool(b) => fnv1(&[u8::from(*b)]),
            GoValue::Time(secs, nanos) => {
                // time.Time.MarshalBinary: version 1, seconds since year 1 and nanoseconds
                // big-endian, then the zone offset in minutes (0: a local zone, not UTC's -1)
                let mut bytes = vec![1u8];
                bytes.extend_from_slice(&(secs + 62_135_596_800).to_be_bytes());
                bytes.extend_from_slice(&nanos.to_be_bytes());
                bytes.extend_from_slice(&0i16.to_be_bytes());
                fnv1(&bytes)
            }
            GoValue::Struct(name, fields) => {
                let mut h = fnv1(name.as_bytes());
                for (field, value) in fields {
                    if let Some(v) = value {
                        h ^= ordered(fnv1(field.as_bytes()), v.hash());
                        h = finish(h);
                    }
                }
                h
            }
            GoValue::Map(entries) => {
                let h = entries
                    .iter()
                    .fold(0, |h, (k, v)| h ^ ordered(k.hash(), v.hash()));
                finish(h)
            }
            GoValue::Slice(items) => items.iter().fold(0, |h, v| h ^ v.hash()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1_matches_the_published_test_vectors() {
        assert_eq!(fnv1(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1(b"a"), 0xaf63_bd4c_8601_b7be);
        assert_eq!(fnv1(b"foobar"), 0x340d_8765_a4dd_a9c2);
    }

    #[test]
    fn zero_fields_and_slice_order_leave_the_hash_alone() {
        let a = GoValue::Struct("T", vec![("A", Some(GoValue::str("x"))), ("B", None)]);
        let b = GoValue::Struct("T", vec![("A", Some(GoValue::str("x")))]);
        assert_eq!(a.hash(), b.hash());
        let s1 = GoValue::Slice(vec![GoValue::str("a"), GoValue::str("b")]);
        let s2 = GoValue::Slice(vec![GoValue::str("b"), GoValue::str("a")]);
        assert_eq!(s1.hash(), s2.hash());
        let other = GoValue::Struct("U", vec![("A", Some(GoValue::str("x")))]);
        assert_ne!(b.hash(), other.hash(), "the type name counts");
    }
}
