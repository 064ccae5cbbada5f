//! Topology groups: spread constraints and pod (anti-)affinity terms, with incremental
//! per-domain counts of the pods they select.
//!
//! Pods that state the same constraint share one group, so counts are kept once and never
//! rebuilt per pod. A planned node's domain for a key is what its requirements still allow
//! (its own placeholder name for `kubernetes.io/hostname`); a check narrows that to the
//! domains the constraint allows, and the pod is counted once the domain is single.

use rustc_hash::FxHashMap;

use k8s_openapi::api::core::v1::Toleration;
use kerf_api::Taint;

use crate::interned::{Req, Reqs};
use crate::selector::Selector;
use crate::symbols::{Sym, Symbols};
use crate::taints::first_untolerated;

/// Index of a group in [`Topology`].
pub type GroupId = usize;

/// What a group constrains.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Topology spread (DoNotSchedule, or ScheduleAnyway until relaxed).
    Spread {
        /// Largest allowed difference between a domain's count and the smallest.
        max_skew: u32,
        /// Fewer eligible domains than this makes the smallest count zero.
        min_domains: Option<u32>,
    },
    /// Required (or not yet relaxed preferred) pod affinity: go where selected pods are.
    Affinity,
    /// Pod anti-affinity: stay away from domains holding selected pods.
    AntiAffinity,
    /// The other side of anti-affinity: pods the term selects stay away from its owners.
    InverseAnti,
}

/// The namespaces whose pods a group counts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Namespaces {
    /// Every namespace (an empty namespaceSelector).
    All,
    /// These namespaces.
    Only(Vec<Sym>),
}

impl Namespaces {
    fn contains(&self, ns: Sym) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Only(list) => list.contains(&ns),
        }
    }
}

/// A group's identity: pods stating the same one share its counts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupDef {
    /// What it constrains.
    pub kind: Kind,
    /// The topology key.
    pub key: Sym,
    /// Whose pods it counts.
    pub namespaces: Namespaces,
    /// Which pods it counts.
    pub selector: Selector,
    /// nodeAffinityPolicy Honor: only nodes matching one of these terms count (spreads).
    pub node_terms: Option<Vec<Reqs>>,
    /// nodeTaintsPolicy Honor: only nodes whose taints these tolerate count (spreads); the
    /// tolerations as text for identity, kept whole in the group.
    pub taint_policy: Option<Vec<String>>,
}

/// A group with its domains and counts.
#[derive(Debug)]
pub struct Group {
    /// Its identity.
    pub def: GroupDef,
    /// Tolerations of nodeTaintsPolicy Honor.
    pub tolerations: Vec<Toleration>,
    /// Every domain value the key can take (not used for hostname), sorted by name.
    pub universe: Vec<Sym>,
    /// Pods per domain, indexed by the domain's symbol.
    counts: Vec<u32>,
    total: u32,
}

/// How a bin's domain for a key looks before a check.
#[derive(Clone, Copy, Debug)]
pub enum Domain<'a> {
    /// The bin's hostname (always a single domain).
    Host(Sym),
    /// The bin's requirement on the key; `None` means unconstrained.
    Req(Option<&'a Req>),
}

/// A spread group's eligible domains and their least count, for one pod
/// ([`Topology::spread_floor`]).
pub struct SpreadFloor {
    eligible: Vec<Sym>,
    min: u32,
}

/// Why a group rejects a bin; `permanent` when nothing later in the solve can change it
/// (counts only grow and a bin's domains only narrow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// Whether the rejection holds for the rest of the solve.
    pub permanent: bool,
}

/// Every group of one solve.
#[derive(Debug, Default)]
pub struct Topology {
    groups: Vec<Group>,
    index: FxHashMap<GroupDef, GroupId>,
    hostname: Option<Sym>,
    /// Count changes since journaling began (group, domain, +1 or -1), so a
    /// [`crate::solver::Session`] can take a tried move back.
    journal: Option<Vec<(GroupId, Sym, i32)>>,
}

impl Topology {
    /// An empty topology; `hostname` is the symbol of `kubernetes.io/hostname`.
    pub fn new(hostname: Sym) -> Topology {
        Topology {
            hostname: Some(hostname),
            ..Topology::default()
        }
    }

    /// The group for a definition, made on first sight.
    pub fn intern(&mut self, def: GroupDef, tolerations: &[Toleration]) -> GroupId {
        if let Some(&id) = self.index.get(&def) {
            return id;
        }
        let id = self.groups.len();
        self.index.insert(def.clone(), id);
        self.groups.push(Group {
            def,
            tolerations: tolerations.to_vec(),
            universe: Vec::new(),
            counts: Vec::new(),
            total: 0,
        });
        id
    }

    /// The groups.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// Sets the domain values a non-hostname group can take, sorted by name.
    pub fn set_universe(&mut self, id: GroupId, mut values: Vec<Sym>, symbols: &Symbols) {
        // each value once before they are ordered by name: a zone is named by hundreds of nodes
        values.sort_unstable();
        values.dedup();
        values.sort_by(|a, b| symbols.name(*a).cmp(symbols.name(*b)));
        self.groups[id].universe = values;
    }

    fn is_hostname(&self, key: Sym) -> bool {
        self.hostname == Some(key)
    }

    /// Whether `id` counts a pod in `namespace` with `labels` (selector and namespace only).
    pub fn selects(&self, id: GroupId, namespace: Sym, labels: &[(Sym, Sym)]) -> bool {
        let d = &self.groups[id].def;
        d.namespaces.contains(namespace) && d.selector.matches(labels)
    }

    /// Whether a node with these requirements and taints counts for the group (spread
    /// node policies).
    pub fn node_counts(
        &self,
        id: GroupId,
        reqs: &Reqs,
        taints: &[Taint],
        symbols: &Symbols,
    ) -> bool {
        let g = &self.groups[id];
        let affinity = g.def.node_terms.as_ref().is_none_or(|terms| {
            terms.is_empty() || terms.iter().any(|t| reqs.intersects(t, symbols).is_ok())
        });
        let tainted = g.def.taint_policy.is_some()
            && first_untolerated(&g.tolerations, taints, false).is_some();
        affinity && !tainted
    }

    /// Records a pod in the domains a bin can be in: every allowed domain for anti-affinity
    /// kinds, the single domain for the others (nothing while the bin's domain is open).
    pub fn record(&mut self, id: GroupId, domain: Domain<'_>, symbols: &Symbols) {
        self.tally(id, domain, symbols, 1);
    }

    /// Takes back a [`Topology::record`] of a pod that leaves the bin (same domain).
    pub fn forget(&mut self, id: GroupId, domain: Domain<'_>, symbols: &Symbols) {
        self.tally(id, domain, symbols, -1);
    }

    /// Starts (or restarts) keeping a journal of count changes.
    pub fn start_journal(&mut self) {
        self.journal = Some(Vec::new());
    }

    /// Undoes every count change since the journal (re)started.
    pub fn undo_journal(&mut self) {
        let entries = self.journal.replace(Vec::new()).unwrap_or_default();
        for (id, v, delta) in entries.into_iter().rev() {
            self.add(id, v, -delta);
        }
    }

    fn add(&mut self, id: GroupId, v: Sym, delta: i32) {
        let g = &mut self.groups[id];
        if g.counts.len() <= v.index() {
            g.counts.resize(v.index() + 1, 0);
        }
        g.counts[v.index()] = g.counts[v.index()].saturating_add_signed(delta);
        g.total = g.total.saturating_add_signed(delta);
    }

    fn tally(&mut self, id: GroupId, domain: Domain<'_>, symbols: &Symbols, delta: i32) {
        let values = self.domain_values(id, domain, symbols);
        self.add_values(id, &values, delta);
    }

    /// The values a pod in `domain` counts in for group `id`: every allowed one for the
    /// anti-affinity kinds, the single one for the others (none while the domain is open).
    pub fn domain_values(&self, id: GroupId, domain: Domain<'_>, symbols: &Symbols) -> Vec<Sym> {
        let anti = matches!(
            self.groups[id].def.kind,
            Kind::AntiAffinity | Kind::InverseAnti
        );
        match domain {
            Domain::Host(h) => vec![h],
            Domain::Req(Some(r)) => match (r.values(), anti) {
                (Some(v), true) => v.to_vec(),
                (Some([one]), false) => vec![*one],
                (Some(_), false) => Vec::new(),
                (None, true) => self.allowed_in_universe(id, Some(r), symbols),
                (None, false) => Vec::new(),
            },
            Domain::Req(None) if anti => self.groups[id].universe.clone(),
            Domain::Req(None) => Vec::new(),
        }
    }

    /// Adds `delta` pods to each of `values` of group `id` ([`Topology::domain_values`]).
    pub fn add_values(&mut self, id: GroupId, values: &[Sym], delta: i32) {
        for &v in values {
            self.add(id, v, delta);
            if let Some(j) = &mut self.journal {
                j.push((id, v, delta));
            }
        }
    }

    /// What a spread group's check compares each bin with: the domains the pod may go to
    /// (`pod_domains` within the group's universe) and the least count among them (zero
    /// while fewer than its minDomains exist). The same for every bin while the counts
    /// stand, so a scan over bins works it out once.
    pub fn spread_floor(
        &self,
        id: GroupId,
        pod_domains: Option<&Req>,
        symbols: &Symbols,
    ) -> SpreadFloor {
        let eligible = self.allowed_in_universe(id, pod_domains, symbols);
        let min_domains = match self.groups[id].def.kind {
            Kind::Spread { min_domains, .. } => min_domains,
            _ => None,
        };
        let too_few = min_domains.is_some_and(|m| (eligible.len() as u32) < m);
        let min = if too_few {
            0
        } else {
            (eligible.iter().map(|d| self.count(id, *d)).min()).unwrap_or(0)
        };
        SpreadFloor { eligible, min }
    }

    fn allowed_in_universe(&self, id: GroupId, r: Option<&Req>, symbols: &Symbols) -> Vec<Sym> {
        self.groups[id]
            .universe
            .iter()
            .copied()
            .filter(|d| r.is_none_or(|r| r.has(*d, symbols)))
            .collect()
    }

    fn count(&self, id: GroupId, domain: Sym) -> u32 {
        self.groups[id]
            .counts
            .get(domain.index())
            .copied()
            .unwrap_or(0)
    }

    /// Checks a pod against one group on one bin. `pod_domains` is the pod's own
    /// requirement on the key (when it limits eligible domains); `selects_self` whether the
    /// group counts the pod itself. On success returns the narrowed requirement for the key
    /// (none needed for hostname, or when the bin is already within it).
    /// `floor` is the group's [`Topology::spread_floor`] for this pod when the caller keeps
    /// it across bins (a spread group's check of a zone-like key reads it); else it is
    /// worked out here.
    pub fn check(
        &self,
        id: GroupId,
        pod_domains: Option<&Req>,
        selects_self: bool,
        domain: Domain<'_>,
        floor: Option<&SpreadFloor>,
        symbols: &Symbols,
    ) -> Result<Option<Req>, Rejected> {
        let g = &self.groups[id];
        let permanent = Err(Rejected { permanent: true });
        let transient = Err(Rejected { permanent: false });
        match (&g.def.kind, domain) {
            (Kind::Spread { max_skew, .. }, Domain::Host(h)) => {
                // a new node can always be made, so the smallest hostname count is zero
                let count = self.count(id, h) + u32::from(selects_self);
                if count <= *max_skew {
                    Ok(None)
                } else {
                    permanent
                }
            }
            (Kind::Spread { max_skew, .. }, Domain::Req(bin)) => {
                let own;
                let SpreadFloor { eligible, min } = match floor {
                    Some(f) => f,
                    None => {
                        own = self.spread_floor(id, pod_domains, symbols);
                        &own
                    }
                };
                let mut best: Option<(u32, Sym)> = None;
                for &d in eligible {
                    if bin.is_some_and(|r| !r.has(d, symbols)) {
                        continue;
                    }
                    let count = self.count(id, d) + u32::from(selects_self);
                    if count.saturating_sub(*min) <= *max_skew
                        && best.is_none_or(|(c, _)| count < c)
                    {
                        best = Some((count, d));
                    }
                }
                match best {
                    Some((_, d)) => Ok(Some(Req::one(d))),
                    None => transient,
                }
            }
            (Kind::Affinity, Domain::Host(h)) => {
                if self.count(id, h) > 0 || (selects_self && g.total == 0) {
                    Ok(None)
                } else {
                    transient
                }
            }
            (Kind::Affinity, Domain::Req(bin)) => {
                let eligible = self.allowed_in_universe(id, pod_domains, symbols);
                let mut options: Vec<Sym> = eligible
                    .iter()
                    .copied()
                    .filter(|d| self.count(id, *d) > 0)
                    .collect();
                if options.is_empty() && selects_self {
                    // nobody to follow yet: the first pod picks, preferring the bin's domain
                    let within_bin = eligible
                        .iter()
                        .find(|d| bin.is_none_or(|r| r.has(**d, symbols)));
                    options.extend(within_bin.or(eligible.first()).copied());
                }
                options.retain(|d| bin.is_none_or(|r| r.has(*d, symbols)));
                if options.is_empty() {
                    transient
                } else {
                    Ok(Some(Req::any_of(options)))
                }
            }
            (Kind::AntiAffinity | Kind::InverseAnti, Domain::Host(h)) => {
                if self.count(id, h) == 0 {
                    Ok(None)
                } else {
                    permanent
                }
            }
            (Kind::AntiAffinity | Kind::InverseAnti, Domain::Req(bin)) => {
                let options: Vec<Sym> = self
                    .allowed_in_universe(id, pod_domains, symbols)
                    .into_iter()
                    .filter(|d| self.count(id, *d) == 0 && bin.is_none_or(|r| r.has(*d, symbols)))
                    .collect();
                if options.is_empty() {
                    permanent
                } else {
                    Ok(Some(Req::any_of(options)))
                }
            }
        }
    }

    /// Describes a group for reasons, with the pods it counts per domain (zones and other
    /// keys; per-node counts would be as long as the node list).
    pub fn describe(&self, id: GroupId, symbols: &Symbols) -> String {
        let g = &self.groups[id];
        let key = symbols.name(g.def.key);
        let mut notes = Vec::new();
        if let Kind::Spread { max_skew, .. } = &g.def.kind {
            notes.push(format!("maxSkew {max_skew}"));
        }
        if !self.is_hostname(g.def.key) && !g.universe.is_empty() {
            let shown = 12;
            let mut counts: Vec<String> = g
                .universe
                .iter()
                .take(shown)
                .map(|d| format!("{} {}", symbols.name(*d), self.count(id, *d)))
                .collect();
            if g.universe.len() > shown {
                counts.push(format!("and {} more", g.universe.len() - shown));
            }
            notes.push(format!("pods per domain: {}", counts.join(", ")));
        }
        let what = match &g.def.kind {
            Kind::Spread { .. } => "topology spread",
            Kind::Affinity => "pod affinity",
            Kind::AntiAffinity => "pod anti-affinity",
            Kind::InverseAnti => "another pod's anti-affinity",
        };
        if notes.is_empty() {
            format!("{what} on {key}")
        } else {
            format!("{what} on {key} ({})", notes.join("; "))
        }
    }
}
