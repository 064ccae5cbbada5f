//! Offerings the cloud recently could not fill (insufficient capacity): skipped for a while
//! so the next launch picks something else — this is what turns spot exhaustion into a
//! fallback to the next NodePool or capacity type.

use rustc_hash::FxHashMap as HashMap;
use std::time::Duration;

/// How long an insufficient-capacity error is remembered (Karpenter: 3 minutes).
pub const TTL: Duration = Duration::from_secs(180);

/// Which offerings an entry covers; `None` matches anything.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pattern {
    /// Capacity type (`spot`, `on-demand`).
    pub capacity_type: Option<String>,
    /// Instance type.
    pub instance_type: Option<String>,
    /// Zone.
    pub zone: Option<String>,
}

impl Pattern {
    /// Reads `CAPACITY_TYPE[:INSTANCE_TYPE[:ZONE]]`, `*` matching anything.
    pub fn parse(text: &str) -> Result<Pattern, String> {
        let parts: Vec<&str> = text.split(':').collect();
        if parts.is_empty() || parts.len() > 3 || parts.iter().any(|p| p.is_empty()) {
            return Err(format!(
                "{text:?}: expected CAPACITY_TYPE[:INSTANCE_TYPE[:ZONE]] (use * for any)"
            ));
        }
        let field = |i: usize| parts.get(i).filter(|p| **p != "*").map(|p| p.to_string());
        let capacity_type = field(0);
        if let Some(ct) = &capacity_type
            && !["spot", "on-demand", "reserved"].contains(&ct.as_str())
        {
            return Err(format!(
                "{text:?}: capacity type must be spot, on-demand, reserved or *"
            ));
        }
        Ok(Pattern {
            capacity_type,
            instance_type: field(1),
            zone: field(2),
        })
    }

    /// Whether the pattern covers an offering.
    pub fn matches(&self, capacity_type: &str, instance_type: &str, zone: &str) -> bool {
        let ok = |p: &Option<String>, v: &str| p.as_deref().is_none_or(|p| p == v);
        ok(&self.capacity_type, capacity_type)
            && ok(&self.instance_type, instance_type)
            && ok(&self.zone, zone)
    }
}

/// The remembered errors, each with when it stops counting.
#[derive(Clone, Debug)]
pub struct UnavailableOfferings {
    /// How long an error counts ([`TTL`] unless the operator is told otherwise).
    ttl: Duration,
    /// Entries naming an instance type, by that type: a crunch marks hundreds, and a lookup
    /// then reads only the few for its type.
    by_type: HashMap<String, HashMap<Pattern, Duration>>,
    /// Entries for any instance type.
    any_type: HashMap<Pattern, Duration>,
    generation: u64,
}

impl Default for UnavailableOfferings {
    fn default() -> UnavailableOfferings {
        UnavailableOfferings::new()
    }
}

impl UnavailableOfferings {
    /// Nothing unavailable; errors remembered for [`TTL`].
    pub fn new() -> UnavailableOfferings {
        UnavailableOfferings::with_ttl(TTL)
    }

    /// Nothing unavailable; errors remembered for `ttl` (a test that waits for spot to
    /// come back need not wait Karpenter's 3 minutes).
    pub fn with_ttl(ttl: Duration) -> UnavailableOfferings {
        UnavailableOfferings {
            ttl,
            by_type: HashMap::default(),
            any_type: HashMap::default(),
            generation: 0,
        }
    }

    /// Remembers an insufficient-capacity error seen at `now` for the TTL.
    pub fn mark(&mut self, pattern: Pattern, now: Duration) {
        let entries = match &pattern.instance_type {
            Some(t) => self.by_type.entry(t.clone()).or_default(),
            None => &mut self.any_type,
        };
        entries.insert(pattern, now + self.ttl);
        self.generation += 1;
    }

    /// Whether an offering is unavailable at `now`.
    pub fn is_unavailable(
        &self,
        capacity_type: &str,
        instance_type: &str,
        zone: &str,
        now: Duration,
    ) -> bool {
        self.by_type
            .get(instance_type)
            .into_iter()
            .flatten()
            .chain(&self.any_type)
            .any(|(p, until)| now < *until && p.matches(capacity_type, instance_type, zone))
    }

    /// Forgets entries that expired by `now`.
    pub fn expire(&mut self, now: Duration) {
        let before = self.len();
        self.any_type.retain(|_, until| now < *until);
        for entries in self.by_type.values_mut() {
            entries.retain(|_, until| now < *until);
        }
        self.by_type.retain(|_, entries| !entries.is_empty());
        if self.len() != before {
            self.generation += 1;
        }
    }

    /// A number that changes whenever the set of entries does, so derived views (instance
    /// types with unavailable offerings marked) can be cached between changes.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// How many entries are remembered.
    pub fn len(&self) -> usize {
        self.any_type.len() + self.by_type.values().map(HashMap::len).sum::<usize>()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.any_type.is_empty() && self.by_type.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse_and_match_with_wildcards() {
        let p = Pattern::parse("spot").unwrap();
        assert!(p.matches("spot", "c5.large", "us-east-1a"));
        assert!(!p.matches("on-demand", "c5.large", "us-east-1a"));
        let p = Pattern::parse("*:c5.large:us-east-1b").unwrap();
        assert!(p.matches("on-demand", "c5.large", "us-east-1b"));
        assert!(!p.matches("on-demand", "c5.large", "us-east-1a"));
        assert!(Pattern::parse("cheap").is_err());
        assert!(Pattern::parse("spot::x").is_err());
        assert!(Pattern::parse("spot:a:b:c").is_err());
    }

    #[test]
    fn errors_are_remembered_for_three_minutes() {
        let mut u = UnavailableOfferings::new();
        let t0 = Duration::from_secs(1000);
        u.mark(Pattern::parse("spot:c5.large:us-east-1a").unwrap(), t0);
        assert!(u.is_unavailable(
            "spot",
            "c5.large",
            "us-east-1a",
            t0 + Duration::from_secs(179)
        ));
        assert!(!u.is_unavailable("spot", "c5.large", "us-east-1b", t0));
        assert!(!u.is_unavailable("spot", "c5.large", "us-east-1a", t0 + TTL));
        u.expire(t0 + TTL);
        assert!(u.is_empty());
    }
}
