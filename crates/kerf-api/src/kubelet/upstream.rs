//! `spec.kubelet` read as Karpenter reads it against the upstream KubeletConfiguration
//! (`k8s.io/kubelet/config/v1beta1` at the version Karpenter v1.15 pins): Go's strict JSON
//! decoder, case-sensitive, refusing unknown fields. Its behaviour is kept here as Go has it,
//! since users see its words: every unknown field is reported (`unknown field
//! "logging.vmodule[0].bogus"`), but a wrong type stops all that — the first one is reported
//! alone (`json: cannot unmarshal string into Go struct field
//! KubeletConfiguration.podsPerCore of type int32`), and an error from a type that decodes
//! itself (a duration, a quantity) ends the decoding at once and wins over an earlier one.
//!
//! The shape of the upstream type is data (`v1beta1-shape.json`), printed by
//! `scripts/karpenter-hash` from the Go type itself; a test keeps the copy equal to it.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::Value;

use super::go_quote;
use crate::duration::parse_go_duration_nanos;
use crate::quantity::Quantity;

/// A Go type as the JSON decoder reads it (see `scripts/karpenter-hash`'s `shape`).
#[derive(Debug, Deserialize)]
struct Shape {
    /// A Go kind (`struct`, `map`, `slice`, `int32`…) or `unmarshaler`.
    kind: String,
    /// The type as Go's error messages print it (`v1.VerbosityLevel`, `[]string`).
    go: String,
    /// Reached through a pointer: a null sets it to nil rather than being handed to it.
    #[serde(default)]
    pointer: bool,
    /// A struct's own name (error messages name the innermost struct).
    #[serde(default)]
    name: String,
    /// A struct's fields by JSON name.
    #[serde(default)]
    fields: BTreeMap<String, Shape>,
    /// A map's, slice's or array's element.
    elem: Option<Box<Shape>>,
}

/// The upstream KubeletConfiguration, read once from the copy compiled in.
static KUBELET: LazyLock<Shape> = LazyLock::new(|| {
    serde_json::from_str(include_str!("v1beta1-shape.json"))
        .expect("the compiled-in KubeletConfiguration shape is JSON (a unit test reads it)")
});

/// What Karpenter's message for a quantity that does not parse says.
const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// The problems Go's strict decoding of `raw` into the upstream type reports, each prefixed
/// `spec.kubelet: ` as Karpenter words them. A `maxPods` held as text (an expression) is
/// read as a number here, as Karpenter does.
pub(super) fn decode_problems(raw: &BTreeMap<String, Value>) -> Vec<String> {
    let mut raw = raw.clone();
    if let Some(max_pods) = raw.get_mut("maxPods")
        && max_pods.is_string()
    {
        *max_pods = Value::from(0);
    }
    let root = &*KUBELET;
    let mut decoder = Decoder::default();
    let ended = raw
        .iter()
        .try_for_each(|(key, value)| decoder.field(root, key, value, &Place::default()));
    let problems = match (ended, decoder.first_wrong_type) {
        (Err(stop), _) => vec![stop],
        (Ok(()), Some(wrong)) => vec![wrong],
        (Ok(()), None) => decoder.unknown,
    };
    problems
        .into_iter()
        .map(|p| format!("spec.kubelet: {p}"))
        .collect()
}

/// Where the decoder is: the struct whose field it reads and the field's names from the
/// root (as a wrong type names them), and the strict path with slice indices (as an unknown
/// field names it).
#[derive(Default)]
struct Place {
    within: String,
    field: String,
    path: String,
}

#[derive(Default)]
struct Decoder {
    first_wrong_type: Option<String>,
    unknown: Vec<String>,
}

/// A JSON value's kind as Go's decoder names it in a type error.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn joined(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

impl Decoder {
    /// Field `key` of struct `of`.
    fn field(&mut self, of: &Shape, key: &str, value: &Value, at: &Place) -> Result<(), String> {
        let path = joined(&at.path, key);
        match of.fields.get(key) {
            Some(shape) => {
                let here = Place {
                    within: of.name.clone(),
                    field: joined(&at.field, key),
                    path,
                };
                self.value(shape, value, &here)
            }
            None => {
                self.unknown
                    .push(format!("unknown field {}", go_quote(&path)));
                Ok(())
            }
        }
    }

    /// Remembers the first wrong type; decoding goes on.
    fn wrong_type(&mut self, what: &str, to: &str, at: &Place) {
        self.first_wrong_type
            .get_or_insert_with(|| type_error(what, to, at));
    }

    /// Decodes `value` into `shape`; `Err` ends the decoding with its message.
    fn value(&mut self, shape: &Shape, value: &Value, at: &Place) -> Result<(), String> {
        if shape.kind == "unmarshaler" {
            return decodes_itself(shape, value, at);
        }
        if value.is_null() {
            return Ok(());
        }
        match (shape.kind.as_str(), value) {
            ("struct", Value::Object(m)) => {
                for (key, v) in m {
                    self.field(shape, key, v, at)?;
                }
            }
            ("map", Value::Object(m)) => {
                if let Some(elem) = &shape.elem {
                    for v in m.values() {
                        self.value(elem, v, at)?;
                    }
                }
            }
            ("slice" | "array", Value::Array(items)) => {
                if let Some(elem) = &shape.elem {
                    for (i, v) in items.iter().enumerate() {
                        let here = Place {
                            within: at.within.clone(),
                            field: at.field.clone(),
                            path: format!("{}[{i}]", at.path),
                        };
                        self.value(elem, v, &here)?;
                    }
                }
            }
            ("string", Value::String(_)) | ("bool", Value::Bool(_)) => {}
            ("float32" | "float64", Value::Number(_)) => {}
            (int, Value::Number(n)) if integer_kind(int) && fits(int, n) => {}
            (int, Value::Number(n)) if integer_kind(int) => {
                self.wrong_type(&format!("number {n}"), &shape.go, at)
            }
            ("struct" | "map" | "slice" | "array" | "string" | "bool", v) => {
                self.wrong_type(kind(v), &shape.go, at)
            }
            (k, v) if integer_kind(k) || k.starts_with("float") => {
                self.wrong_type(kind(v), &shape.go, at)
            }
            // a kind the upstream type does not use today (an interface): taken as is
            _ => {}
        }
        Ok(())
    }
}

fn type_error(what: &str, to: &str, at: &Place) -> String {
    format!(
        "json: cannot unmarshal {what} into Go struct field {}.{} of type {to}",
        at.within, at.field
    )
}

fn integer_kind(kind: &str) -> bool {
    matches!(
        kind,
        "int"
            | "int8"
            | "int16"
            | "int32"
            | "int64"
            | "uint"
            | "uint8"
            | "uint16"
            | "uint32"
            | "uint64"
    )
}

/// Whether Go's `strconv.Parse{Int,Uint}` reads the number's text and it fits the kind.
fn fits(kind: &str, n: &serde_json::Number) -> bool {
    if kind.starts_with('u') {
        let Some(v) = n.as_u64() else { return false };
        match kind {
            "uint8" => v <= u8::MAX.into(),
            "uint16" => v <= u16::MAX.into(),
            "uint32" => v <= u32::MAX.into(),
            _ => true,
        }
    } else {
        let Some(v) = n.as_i64() else { return false };
        match kind {
            "int8" => i8::try_from(v).is_ok(),
            "int16" => i16::try_from(v).is_ok(),
            "int32" => i32::try_from(v).is_ok(),
            _ => true,
        }
    }
}

/// A type with its own `UnmarshalJSON`, as each of those the upstream type holds decodes.
fn decodes_itself(shape: &Shape, value: &Value, at: &Place) -> Result<(), String> {
    let duration = |text: &str| {
        parse_go_duration_nanos(text)
            .map(drop)
            .map_err(|e| e.to_string())
    };
    match (shape.go.as_str(), value) {
        // metav1.Duration: a string Go parses as a duration; a null where no pointer is
        // reads as the empty string
        ("v1.Duration", Value::String(s)) => duration(s),
        ("v1.Duration", Value::Null) if shape.pointer => Ok(()),
        ("v1.Duration", Value::Null) => duration(""),
        ("v1.Duration", v) => Err(type_error(kind(v), "string", at)),
        // component-base's TimeOrMetaDuration: a duration string or nanoseconds
        ("v1.TimeOrMetaDuration", Value::String(s)) => duration(s),
        ("v1.TimeOrMetaDuration", Value::Null) => Ok(()),
        ("v1.TimeOrMetaDuration", Value::Number(n)) if n.is_i64() => Ok(()),
        ("v1.TimeOrMetaDuration", v) => {
            let what = match v {
                Value::Number(n) => format!("number {n}"),
                v => kind(v).to_string(),
            };
            Err(format!(
                "invalid duration {}: json: cannot unmarshal {what} into Go value of type time.Duration",
                go_quote(&v.to_string())
            ))
        }
        // resource.Quantity (and QuantityValue): the text, quoted or not
        ("resource.Quantity" | "resource.QuantityValue", Value::Null) => Ok(()),
        ("resource.Quantity" | "resource.QuantityValue", v) => {
            let text = match v {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            Quantity::parse(text.trim())
                .map(drop)
                .map_err(|_| QUANTITY_FORMAT.to_string())
        }
        // metav1.Time: RFC 3339 text
        ("v1.Time", Value::Null) => Ok(()),
        ("v1.Time", Value::String(s)) if rfc3339(s) => Ok(()),
        ("v1.Time", Value::String(s)) => Err(format!(
            "parsing time {} as \"2006-01-02T15:04:05Z07:00\": cannot parse {} as \"2006\"",
            go_quote(s),
            go_quote(s)
        )),
        ("v1.Time", v) => Err(type_error(kind(v), "string", at)),
        // a type that decodes itself and the upstream type does not hold today (the shape's
        // test lists those it holds): taken as is
        _ => Ok(()),
    }
}

/// Whether `s` is an RFC 3339 time as Go's `time.RFC3339` layout reads one
/// (`2006-01-02T15:04:05Z`, fractional seconds and a `±hh:mm` offset allowed).
fn rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    if !(digits(0..4)
        && b.get(4) == Some(&b'-')
        && digits(5..7)
        && b.get(7) == Some(&b'-')
        && digits(8..10)
        && b.get(10) == Some(&b'T')
        && digits(11..13)
        && b.get(13) == Some(&b':')
        && digits(14..16)
        && b.get(16) == Some(&b':')
        && digits(17..19))
    {
        return false;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &frac[n..];
    }
    let r = rest.as_bytes();
    rest == "Z"
        || (r.len() == 6
            && matches!(r[0], b'+' | b'-')
            && r[1..3].iter().all(u8::is_ascii_digit)
            && r[3] == b':'
            && r[4..6].iter().all(u8::is_ascii_digit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(v: Value) -> Vec<String> {
        let raw: BTreeMap<String, Value> = serde_json::from_value(v).expect("an object");
        decode_problems(&raw)
    }

    #[test]
    fn the_compiled_in_shape_holds_only_types_this_decoder_knows() {
        fn walk(s: &Shape, out: &mut Vec<String>) {
            if s.kind == "unmarshaler" {
                out.push(s.go.clone());
            }
            s.fields.values().for_each(|f| walk(f, out));
            if let Some(e) = &s.elem {
                walk(e, out);
            }
        }
        let mut found = Vec::new();
        walk(&KUBELET, &mut found);
        found.sort();
        found.dedup();
        assert_eq!(
            found,
            [
                "resource.Quantity",
                "resource.QuantityValue",
                "v1.Duration",
                "v1.Time",
                "v1.TimeOrMetaDuration"
            ]
        );
        assert_eq!(KUBELET.name, "KubeletConfiguration");
        assert!(KUBELET.fields.len() > 100, "{}", KUBELET.fields.len());
    }

    #[test]
    fn unknown_fields_are_each_named_with_their_path() {
        assert_eq!(
            problems(json!({"MaxPods": 1, "logging": {"vmodule": [{"bogus": 1}]}})),
            [
                "spec.kubelet: unknown field \"MaxPods\"",
                "spec.kubelet: unknown field \"logging.vmodule[0].bogus\""
            ]
        );
    }

    #[test]
    fn the_first_wrong_type_is_said_alone_and_a_self_decoding_type_wins() {
        assert_eq!(
            problems(json!({"a": 1, "podsPerCore": "ten", "maxPods": true})),
            [
                "spec.kubelet: json: cannot unmarshal bool into Go struct field KubeletConfiguration.maxPods of type int32"
            ]
        );
        assert_eq!(
            problems(json!({"podsPerCore": "ten", "shutdownGracePeriod": "5x"})),
            ["spec.kubelet: time: unknown unit \"x\" in duration \"5x\""]
        );
        assert_eq!(
            problems(json!({"logging": {"vmodule": [{"verbosity": -1}]}})),
            [
                "spec.kubelet: json: cannot unmarshal number -1 into Go struct field VModuleItem.logging.vmodule.verbosity of type v1.VerbosityLevel"
            ]
        );
        assert!(problems(json!({"maxPods": "vcpus * 10", "crashLoopBackOff": {"maxContainerRestartPeriod": null}})).is_empty());
    }
}
