//! The drift hashes Kerf writes on each NodeClaim at creation (`karpenter.sh/nodepool-hash`,
//! `karpenter.k8s.aws/ec2nodeclass-hash`) and compares with the current objects later. They
//! must come out the same across Rust releases and restarts, so they are FNV-1a over the
//! canonical JSON of the hashed part (map keys sorted, struct fields in declaration order),
//! not the standard library's randomly keyed hasher.

use kerf_api::{EC2NodeClass, NodePool};

/// The `karpenter.sh/nodepool-hash-version` Kerf writes: a hash from another version is not
/// compared (the NodeClaim is re-stamped instead), as Karpenter does.
pub const NODEPOOL_HASH_VERSION: &str = "v3";
/// The `karpenter.k8s.aws/ec2nodeclass-hash-version` Kerf writes.
pub const EC2NODECLASS_HASH_VERSION: &str = "v4";

/// FNV-1a, 64 bits: a fixed, documented function (no seed), so stored values stay valid.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn hash_json(v: &impl serde::Serialize) -> String {
    // serde_json::Value keeps maps sorted unless preserve_order is on, which it is in this
    // workspace: go through a sorted tree explicitly
    let value = serde_json::to_value(v).unwrap_or_default();
    fnv1a(canonical(&value).as_bytes()).to_string()
}

fn canonical(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        serde_json::Value::String(k.clone()),
                        canonical(&m[k])
                    )
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        serde_json::Value::Array(a) => {
            let items: Vec<String> = a.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

/// The drift-relevant part of a NodePool's template: expireAfter and terminationGracePeriod
/// changes apply without replacing nodes, and requirements drift only the nodes that no
/// longer meet them (both as in Karpenter).
pub fn node_pool_hash(np: &NodePool) -> String {
    let mut t = np.spec.template.clone();
    t.spec.expire_after = kerf_api::nodepool::default_expire_after();
    t.spec.termination_grace_period = None;
    t.spec.requirements.clear();
    hash_json(&t)
}

/// A node class's spec: any change drifts the nodes launched with it.
pub fn node_class_hash(class: &EC2NodeClass) -> String {
    hash_json(&class.spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn key_order_does_not_change_the_hash() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b":1,"a":{"y":2,"x":[1,2]}}"#).unwrap();
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a":{"x":[1,2],"y":2},"b":1}"#).unwrap();
        assert_eq!(hash_json(&a), hash_json(&b));
        let c: serde_json::Value =
            serde_json::from_str(r#"{"a":{"x":[2,1],"y":2},"b":1}"#).unwrap();
        assert_ne!(hash_json(&a), hash_json(&c));
    }

    #[test]
    fn a_node_pool_hash_is_pinned() {
        // a stored hash must survive new releases: this value may only change together
        // with NODEPOOL_HASH_VERSION
        let np: NodePool = serde_yaml::from_str(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
        )
        .unwrap();
        let h = node_pool_hash(&np);
        let mut changed = np.clone();
        changed
            .spec
            .template
            .metadata
            .labels
            .insert("team".into(), "a".into());
        assert_ne!(node_pool_hash(&changed), h);
        let mut reqs = np.clone();
        reqs.spec.template.spec.expire_after = kerf_api::duration::NillableDuration::Never;
        assert_eq!(node_pool_hash(&reqs), h);
        assert_eq!(h, PINNED_DEFAULT_POOL_HASH);
    }

    const PINNED_DEFAULT_POOL_HASH: &str = "1570557572443947839";
}
