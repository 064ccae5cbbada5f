//! A structural check of a raw document against a CRD's OpenAPI schema, as the API server
//! does before CEL rules run: types, required and unknown fields (strict field validation),
//! enums, patterns, lengths and ranges. It reports every problem, each with its path, which a
//! typed deserializer cannot do (it stops at the first). Offending values are pruned from
//! the document, so the typed rules can still run on the rest of it.

use std::collections::HashMap;

use regex::Regex;
use serde_json::Value;

use crate::validation::Problem;

/// What the structural check found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Every structural problem.
    pub problems: Vec<Problem>,
    /// Whether a required field is missing (the pruned document cannot be typed).
    pub missing_required: bool,
}

/// Checks `value` against `schema`, removing every value that breaks it.
pub fn check_and_prune(value: &mut Value, schema: &Value) -> Outcome {
    let mut checker = Checker::default();
    if checker.walk(value, schema, "") {
        *value = Value::Null;
    }
    Outcome {
        problems: checker.problems,
        missing_required: checker.missing_required,
    }
}

#[derive(Default)]
struct Checker {
    problems: Vec<Problem>,
    missing_required: bool,
    patterns: HashMap<String, Option<Regex>>,
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

impl Checker {
    fn problem(&mut self, path: &str, message: String) {
        let path = if path.is_empty() { "<root>" } else { path };
        self.problems.push(Problem::new(path, message));
    }

    /// Checks one value; returns whether it breaks the schema and should be pruned.
    fn walk(&mut self, value: &mut Value, schema: &Value, path: &str) -> bool {
        let before = self.problems.len();
        if value.is_null() {
            return false; // an explicit null is the same as leaving the field out
        }
        let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        if int_or_string {
            match value {
                Value::String(s) => self.check_string(s, schema, path),
                Value::Number(_) => {}
                other => self.problem(
                    path,
                    format!("must be an integer or a string, got {}", type_name(other)),
                ),
            }
            return self.problems.len() > before;
        }
        let Some(expected) = schema.get("type").and_then(Value::as_str) else {
            return false; // no type: anything goes (e.g. metadata sub-objects)
        };
        let actual = type_name(value);
        let type_ok = actual == expected || (expected == "number" && actual == "integer");
        if !type_ok {
            self.problem(
                path,
                format!(
                    "must be {} {expected}, got {actual} {}",
                    article(expected),
                    short(value)
                ),
            );
            return true;
        }
        match value {
            Value::Object(map) => {
                self.walk_object(map, schema, path);
                return false; // its bad fields are pruned; the object itself stays
            }
            Value::Array(items) => {
                self.check_len(items.len(), schema, "minItems", "maxItems", "items", path);
                if let Some(item_schema) = schema.get("items") {
                    let mut i = 0;
                    items.retain_mut(|item| {
                        let bad = self.walk(item, item_schema, &format!("{path}[{i}]"));
                        i += 1;
                        !bad
                    });
                }
                return false;
            }
            Value::String(s) => self.check_string(s, schema, path),
            Value::Number(n) => {
                let v = n.as_f64().unwrap_or(0.0);
                if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
                    && v < min
                {
                    self.problem(
                        path,
                        format!("must be greater than or equal to {min}, got {n}"),
                    );
                }
                if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
                    && v > max
                {
                    self.problem(
                        path,
                        format!("must be less than or equal to {max}, got {n}"),
                    );
                }
            }
            _ => {}
        }
        self.problems.len() > before
    }

    fn walk_object(
        &mut self,
        map: &mut serde_json::Map<String, Value>,
        schema: &Value,
        path: &str,
    ) {
        let properties = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties").filter(|a| a.is_object());
        let preserve =
            schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for field in required.iter().filter_map(Value::as_str) {
                if map.get(field).is_none_or(Value::is_null) {
                    self.problem(&join(path, field), "is required".into());
                    self.missing_required = true;
                }
            }
        }
        map.retain(|key, v| {
            if let Some(field_schema) = properties.and_then(|p| p.get(key)) {
                !self.walk(v, field_schema, &join(path, key))
            } else if let Some(add) = additional {
                !self.walk(v, add, &format!("{path}[{key}]"))
            } else if properties.is_some() && !preserve {
                self.problem(&join(path, key), "unknown field".into());
                false
            } else {
                true
            }
        });
    }

    fn check_len(
        &mut self,
        len: usize,
        schema: &Value,
        min: &str,
        max: &str,
        unit: &str,
        path: &str,
    ) {
        if let Some(m) = schema.get(min).and_then(Value::as_u64)
            && (len as u64) < m
        {
            self.problem(path, format!("must have at least {m} {unit}"));
        }
        if let Some(m) = schema.get(max).and_then(Value::as_u64)
            && (len as u64) > m
        {
            self.problem(path, format!("must have at most {m} {unit}"));
        }
    }

    fn check_string(&mut self, s: &str, schema: &Value, path: &str) {
        if let Some(options) = schema.get("enum").and_then(Value::as_array) {
            if !options.iter().any(|o| o.as_str() == Some(s)) {
                let list = options
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ");
                self.problem(
                    path,
                    format!("unsupported value {s:?}: must be one of {list}"),
                );
            }
            return;
        }
        self.check_len(
            s.chars().count(),
            schema,
            "minLength",
            "maxLength",
            "characters",
            path,
        );
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
            let re = self
                .patterns
                .entry(pattern.to_string())
                .or_insert_with(|| Regex::new(pattern).ok());
            if let Some(re) = re
                && !re.is_match(s)
            {
                let message = format!("{s:?} must match the pattern {pattern}");
                self.problem(path, message);
            }
        }
    }
}

fn article(t: &str) -> &'static str {
    if t.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}
