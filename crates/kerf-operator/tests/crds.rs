//! `kerf crds` against the CRDs Karpenter v1.15.0 ships (its release's files, fetched from the
//! Go module proxy): every schema keyword, CEL rule and message, default, pattern, enum,
//! required list, list and map type, printer column and name is Karpenter's, descriptions
//! aside (those are Kerf's own prose). What differs on purpose is listed below with its
//! reason; a listed difference that no longer differs fails the test too, so the list stays
//! true.

mod support;

use std::collections::BTreeMap;

use serde_json::Value;

/// Differences kept on purpose: (kind, path prefix, why). None today: `spec.kubelet`, the
/// last one, is the open map Karpenter v1.15 has.
const DELIBERATE: &[(&str, &str, &str)] = &[];

/// A CRD's spec without descriptions, with whole floats as integers.
fn normalized(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, v)| !(k.as_str() == "description" && v.is_string()))
                .map(|(k, v)| (k.clone(), normalized(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        Value::Number(n) => match n.as_f64() {
            Some(f) if !n.is_i64() && !n.is_u64() && f.fract() == 0.0 => Value::from(f as i64),
            _ => value.clone(),
        },
        _ => value.clone(),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 240 {
        format!("{}…", s.chars().take(240).collect::<String>())
    } else {
        s
    }
}

/// Every place where `ours` and `theirs` differ, as (path, what differs).
fn differences(ours: &Value, theirs: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let here = format!("{path}.{k}");
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => differences(x, y, &here, out),
                    (Some(x), None) => out.push((here, format!("only Kerf's: {}", short(x)))),
                    (None, Some(y)) => out.push((here, format!("only Karpenter's: {}", short(y)))),
                    (None, None) => {}
                }
            }
        }
        // versions and printer columns line up by position
        (Value::Array(a), Value::Array(b))
            if a.len() == b.len()
                && (path.ends_with(".versions") || path.ends_with(".additionalPrinterColumns")) =>
        {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(x, y, &format!("{path}[{i}]"), out);
            }
        }
        _ if ours != theirs => out.push((
            path.to_string(),
            format!("Kerf {} / Karpenter {}", short(ours), short(theirs)),
        )),
        _ => {}
    }
}

fn karpenters() -> BTreeMap<String, Value> {
    let dir = support::karpenter_crds_dir();
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("Karpenter's CRD folder") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("CRD file");
        let crd: Value = serde_yaml::from_str(&text).expect("CRD YAML");
        let kind = crd["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or("")
            .to_string();
        out.insert(kind, crd);
    }
    out
}

#[test]
fn kerfs_crds_are_karpenters_but_for_the_listed_differences() {
    let theirs = karpenters();
    let ours: BTreeMap<String, Value> = kerf_api::crds::all()
        .into_iter()
        .map(|crd| {
            let value = serde_json::to_value(&crd).expect("CRD as JSON");
            (crd.spec.names.kind.clone(), value)
        })
        .collect();
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "the same kinds"
    );
    let mut unexplained = Vec::new();
    let mut used = vec![false; DELIBERATE.len()];
    for (kind, crd) in &ours {
        assert_eq!(crd["metadata"]["name"], theirs[kind]["metadata"]["name"]);
        let mut found = Vec::new();
        differences(
            &normalized(&crd["spec"]),
            &normalized(&theirs[kind]["spec"]),
            "spec",
            &mut found,
        );
        for (path, what) in found {
            let excuse = DELIBERATE
                .iter()
                .position(|(k, prefix, _)| k == kind && path.starts_with(prefix));
            match excuse {
                Some(i) => used[i] = true,
                None => unexplained.push(format!("{kind} {path}: {what}")),
            }
        }
    }
    let stale: Vec<String> = DELIBERATE
        .iter()
        .zip(&used)
        .filter(|(_, used)| !**used)
        .map(|((kind, prefix, _), _)| format!("{kind} {prefix}"))
        .collect();
    assert!(
        unexplained.is_empty(),
        "{} differences from Karpenter's CRDs that are not listed:\n{}",
        unexplained.len(),
        unexplained.join("\n")
    );
    assert!(
        stale.is_empty(),
        "listed differences that no longer differ: {stale:?}"
    );
}
