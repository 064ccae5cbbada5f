//! Pods as the scheduler sees them: requests, node requirements, topology groups and host
//! ports, compiled once per solve; and Karpenter's relaxation of preferences.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, Pod, PodAffinityTerm, Toleration,
};
use kerf_api::{Operator, labels};

use crate::amounts::{Amounts, Dimensions};
use crate::input::Preferences;
use crate::interned::{Req, Reqs};
use crate::requirements::Requirement;
use crate::resources::{Resources, pod_requests};
use crate::selector::Selector;
use crate::symbols::{Sym, Symbols};
use crate::topology::{GroupDef, GroupId, Kind, Namespaces, Topology};

/// A host port a pod binds: two pods conflict on a node when protocol and port match and
/// either listens on every address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// Address (empty or `0.0.0.0` for all).
    pub ip: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// Port number.
    pub port: i32,
}

impl HostPort {
    /// Whether two bindings collide.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        let wildcard = |ip: &str| ip.is_empty() || ip == "0.0.0.0" || ip == "::";
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || wildcard(&self.ip) || wildcard(&other.ip))
    }
}

/// The host ports a pod's containers bind.
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            p.host_port.filter(|hp| *hp > 0).map(|port| HostPort {
                ip: p.host_ip.clone().unwrap_or_default(),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                port,
            })
        })
        .collect()
}

/// The namespace of a pod (`default` when unset).
pub fn namespace_of(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// `namespace/name` of a pod.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        namespace_of(pod),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// A pod's labels as sorted symbol pairs.
pub fn labels_of(
    labels: Option<&BTreeMap<String, String>>,
    symbols: &mut Symbols,
) -> Vec<(Sym, Sym)> {
    let mut out: Vec<(Sym, Sym)> = labels
        .into_iter()
        .flatten()
        .map(|(k, v)| (symbols.intern(k), symbols.intern(v)))
        .collect();
    out.sort_unstable();
    out
}

fn operator(text: &str) -> Option<Operator> {
    Some(match text {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::Gt,
        "Lt" => Operator::Lt,
        _ => return None,
    })
}

/// The requirements of one node selector term (match expressions; match fields are not
/// labels and are ignored, as Karpenter does). An unknown operator admits nothing.
pub fn term_reqs(term: &NodeSelectorTerm, symbols: &mut Symbols) -> Reqs {
    let mut out = Reqs::new();
    for e in term.match_expressions.iter().flatten() {
        let key = symbols.intern(&e.key);
        let req = match operator(&e.operator) {
            Some(op) => {
                let r = Requirement::new(&e.key, op, e.values.iter().flatten().cloned());
                Req::from_requirement(&r, symbols)
            }
            None => Req::any_of(Vec::new()),
        };
        out.add(key, req, symbols);
    }
    out
}

/// The alternatives Kerf's copy of a pod carries for its volumes' topology
/// ([`labels::VOLUME_TOPOLOGY`]), as node selector terms. An annotation that does not read
/// (a user's own, on a pod without claims) is not Kerf's and is ignored.
fn volume_alternatives(pod: &Pod) -> Option<Vec<NodeSelectorTerm>> {
    let text = pod
        .metadata
        .annotations
        .as_ref()?
        .get(labels::VOLUME_TOPOLOGY)?;
    let alternatives: Vec<Vec<NodeSelectorRequirement>> = serde_json::from_str(text).ok()?;
    Some(
        alternatives
            .into_iter()
            .map(|a| NodeSelectorTerm {
                match_expressions: Some(a),
                match_fields: None,
            })
            .collect(),
    )
}

/// Alternatives that each ask one value set of the same key (`zone In [a]` or `zone In
/// [b]`) as one requirement (`zone In [a b]`); `None` when they are not of that shape.
fn join_alternatives(alternatives: &[NodeSelectorTerm], symbols: &mut Symbols) -> Option<Reqs> {
    let mut key: Option<&str> = None;
    let mut values: Vec<String> = Vec::new();
    for a in alternatives {
        let [e] = a.match_expressions.as_deref()? else {
            return None;
        };
        if e.operator != "In" || key.is_some_and(|k| k != e.key) {
            return None;
        }
        key = Some(&e.key);
        values.extend(e.values.iter().flatten().cloned());
    }
    let key = key?;
    values.sort();
    values.dedup();
    let term = NodeSelectorTerm {
        match_expressions: Some(vec![NodeSelectorRequirement {
            key: key.to_string(),
            operator: "In".into(),
            values: Some(values),
        }]),
        match_fields: None,
    };
    Some(term_reqs(&term, symbols))
}

/// The requirements of a nodeSelector.
pub fn selector_reqs(selector: Option<&BTreeMap<String, String>>, symbols: &mut Symbols) -> Reqs {
    let mut out = Reqs::new();
    for (k, v) in selector.into_iter().flatten() {
        let key = symbols.intern(k);
        let value = symbols.intern(v);
        out.add(key, Req::one(value), symbols);
    }
    out
}

/// A pod, compiled.
#[derive(Clone, Debug)]
pub struct PodInfo {
    /// Requests (containers, init peak, overhead, one pod slot).
    pub requests: Amounts,
    /// Namespace.
    pub namespace: Sym,
    /// Labels, sorted.
    pub labels: Vec<(Sym, Sym)>,
    /// Tolerations, shared by the replicas compiled from one pod.
    pub tolerations: Arc<[Toleration]>,
    /// nodeSelector.
    pub node_selector: Reqs,
    /// Required node affinity terms (ORed; Karpenter uses the first, dropping it on failure).
    pub required_terms: Vec<Reqs>,
    /// What its volumes ask of a node ([`labels::VOLUME_TOPOLOGY`]): added to its
    /// requirements where it is placed, never to the domains its spreads count. Of several
    /// alternatives, one key's values are joined; otherwise the first is taken.
    pub volume_reqs: Option<Reqs>,
    /// Preferred node affinity terms, heaviest first.
    pub preferred_terms: Vec<Reqs>,
    /// Spread groups, with whether the spread is ScheduleAnyway.
    pub spreads: Vec<(GroupId, bool)>,
    /// Required pod affinity groups.
    pub affinity: Vec<GroupId>,
    /// Preferred pod affinity groups, heaviest first.
    pub preferred_affinity: Vec<GroupId>,
    /// Required anti-affinity groups.
    pub anti: Vec<GroupId>,
    /// Preferred anti-affinity groups, heaviest first.
    pub preferred_anti: Vec<GroupId>,
    /// Inverse groups of this pod's required anti-affinity: it is counted in them.
    pub owns_inverse: Vec<GroupId>,
    /// Inverse groups whose owners this pod must avoid.
    pub inverse: Vec<GroupId>,
    /// Groups (not inverse) that count this pod.
    pub counted_by: Vec<GroupId>,
    /// Host ports.
    pub host_ports: Vec<HostPort>,
}

/// Compiles pods, interning the groups they state.
pub struct Compiler<'s> {
    /// The solve's symbols.
    pub symbols: &'s mut Symbols,
    /// The solve's topology.
    pub topology: &'s mut Topology,
    /// The solve's resource slots.
    pub dims: &'s mut Dimensions,
    /// Whether preferences bind.
    pub preferences: Preferences,
}

impl Compiler<'_> {
    /// Compiles one pod; groups get counted_by/inverse links later (see [`link`]).
    pub fn compile(&mut self, pod: &Pod, requests: Option<&Resources>) -> PodInfo {
        let symbols = &mut *self.symbols;
        let namespace = symbols.intern(namespace_of(pod));
        let labels = labels_of(pod.metadata.labels.as_ref(), symbols);
        let spec = pod.spec.as_ref();
        let node_selector = selector_reqs(spec.and_then(|s| s.node_selector.as_ref()), symbols);
        let affinity = spec.and_then(|s| s.affinity.as_ref());
        let node_aff = affinity.and_then(|a| a.node_affinity.as_ref());
        let required_terms: Vec<Reqs> = node_aff
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|r| {
                r.node_selector_terms
                    .iter()
                    .map(|t| term_reqs(t, symbols))
                    .collect()
            })
            .unwrap_or_default();
        let respect = self.preferences == Preferences::Respect;
        let mut preferred: Vec<(i32, Reqs)> = if respect {
            node_aff
                .and_then(|n| {
                    n.preferred_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .into_iter()
                .flatten()
                .map(|p| (p.weight, term_reqs(&p.preference, symbols)))
                .collect()
        } else {
            Vec::new()
        };
        preferred.sort_by_key(|(w, _)| std::cmp::Reverse(*w));
        let tolerations: Arc<[Toleration]> = spec
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or_default()
            .into();

        let mut info = PodInfo {
            requests: self
                .dims
                .request(&requests.cloned().unwrap_or_else(|| pod_requests(pod))),
            namespace,
            labels,
            tolerations,
            node_selector,
            required_terms,
            volume_reqs: None,
            preferred_terms: preferred.into_iter().map(|(_, r)| r).collect(),
            spreads: Vec::new(),
            affinity: Vec::new(),
            preferred_affinity: Vec::new(),
            anti: Vec::new(),
            preferred_anti: Vec::new(),
            owns_inverse: Vec::new(),
            inverse: Vec::new(),
            counted_by: Vec::new(),
            host_ports: host_ports(pod),
        };

        for c in spec
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .into_iter()
            .flatten()
        {
            let anyway = c.when_unsatisfiable == "ScheduleAnyway";
            if anyway && !respect {
                continue;
            }
            let extra: Vec<(Sym, Sym)> = c
                .match_label_keys
                .iter()
                .flatten()
                .filter_map(|k| {
                    let k = self.symbols.get(k)?;
                    info.labels.iter().find(|(lk, _)| *lk == k).copied()
                })
                .collect();
            let honor_affinity = c.node_affinity_policy.as_deref() != Some("Ignore");
            let node_terms = honor_affinity.then(|| {
                let mut terms = info.required_terms.clone();
                if terms.is_empty() {
                    terms.push(Reqs::new());
                }
                terms
                    .iter()
                    .map(|t| t.intersection(&info.node_selector, self.symbols))
                    .collect()
            });
            let honor_taints = c.node_taints_policy.as_deref() == Some("Honor");
            let def = GroupDef {
                kind: Kind::Spread {
                    max_skew: u32::try_from(c.max_skew.max(1)).unwrap_or(1),
                    min_domains: c.min_domains.and_then(|m| u32::try_from(m).ok()),
                },
                key: self.symbols.intern(&c.topology_key),
                namespaces: Namespaces::Only(vec![namespace]),
                selector: Selector::compile(c.label_selector.as_ref(), &extra, self.symbols),
                node_terms,
                taint_policy: honor_taints
                    .then(|| info.tolerations.iter().map(|t| format!("{t:?}")).collect()),
            };
            let tolerations = if honor_taints {
                info.tolerations.to_vec()
            } else {
                Vec::new()
            };
            let id = self.topology.intern(def, &tolerations);
            info.spreads.push((id, anyway));
        }

        let pod_aff = affinity.and_then(|a| a.pod_affinity.as_ref());
        let pod_anti = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        for term in pod_aff
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .into_iter()
            .flatten()
        {
            let id = self.term_group(term, Kind::Affinity, namespace);
            info.affinity.push(id);
        }
        for term in pod_anti
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .into_iter()
            .flatten()
        {
            let id = self.term_group(term, Kind::AntiAffinity, namespace);
            info.anti.push(id);
            let inverse = self.term_group(term, Kind::InverseAnti, namespace);
            info.owns_inverse.push(inverse);
        }
        info.volume_reqs = volume_alternatives(pod).and_then(|alternatives| {
            let compiled: Vec<Reqs> = alternatives
                .iter()
                .map(|a| term_reqs(a, self.symbols))
                .collect();
            join_alternatives(&alternatives, self.symbols).or_else(|| compiled.into_iter().next())
        });
        if respect {
            let preferred_aff = pod_aff.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_deref()
            });
            info.preferred_affinity = self.heaviest_first(preferred_aff, Kind::Affinity, namespace);
            let preferred_anti = pod_anti.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_deref()
            });
            info.preferred_anti =
                self.heaviest_first(preferred_anti, Kind::AntiAffinity, namespace);
        }
        info
    }

    /// Groups of weighted terms, heaviest first (ties keep their order).
    fn heaviest_first(
        &mut self,
        terms: Option<&[k8s_openapi::api::core::v1::WeightedPodAffinityTerm]>,
        kind: Kind,
        namespace: Sym,
    ) -> Vec<GroupId> {
        let mut weighted: Vec<(i32, GroupId)> = terms
            .into_iter()
            .flatten()
            .map(|w| {
                (
                    w.weight,
                    self.term_group(&w.pod_affinity_term, kind.clone(), namespace),
                )
            })
            .collect();
        weighted.sort_by_key(|(w, _)| std::cmp::Reverse(*w));
        weighted.into_iter().map(|(_, g)| g).collect()
    }

    /// The group for a pod (anti-)affinity term. An empty namespaceSelector means every
    /// namespace; without namespace labels a non-empty one adds nothing to `namespaces`.
    pub fn term_group(&mut self, term: &PodAffinityTerm, kind: Kind, own: Sym) -> GroupId {
        let all = term.namespace_selector.as_ref().is_some_and(|s| {
            s.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
        });
        let namespaces = if all {
            Namespaces::All
        } else {
            let mut list: Vec<Sym> = term
                .namespaces
                .iter()
                .flatten()
                .map(|n| self.symbols.intern(n))
                .collect();
            if list.is_empty() {
                list.push(own);
            }
            list.sort_unstable();
            list.dedup();
            Namespaces::Only(list)
        };
        let def = GroupDef {
            kind,
            key: self.symbols.intern(&term.topology_key),
            namespaces,
            selector: Selector::compile(term.label_selector.as_ref(), &[], self.symbols),
            node_terms: None,
            taint_policy: None,
        };
        self.topology.intern(def, &[])
    }
}

/// Links pods to the groups that count them and the inverse groups they must respect; run
/// once every group exists.
pub fn link(pods: &mut [PodInfo], topology: &Topology) {
    for p in pods {
        for (id, g) in topology.groups().iter().enumerate() {
            if !topology.selects(id, p.namespace, &p.labels) {
                continue;
            }
            if g.def.kind == Kind::InverseAnti {
                p.inverse.push(id);
            } else {
                p.counted_by.push(id);
            }
        }
    }
}

/// How far a pod's preferences have been relaxed, step by step in Karpenter's order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Relaxation {
    dropped_required_terms: usize,
    dropped_preferred_affinity: usize,
    dropped_preferred_anti: usize,
    dropped_preferred_terms: usize,
    dropped_anyway_spreads: usize,
    /// Whether PreferNoSchedule taints are tolerated (the last step).
    pub tolerate_prefer_no_schedule: bool,
}

impl Relaxation {
    /// Takes the next relaxation step; false when there is none left.
    pub fn relax(&mut self, pod: &PodInfo) -> bool {
        if pod.required_terms.len() > self.dropped_required_terms + 1 {
            self.dropped_required_terms += 1;
        } else if self.dropped_preferred_affinity < pod.preferred_affinity.len() {
            self.dropped_preferred_affinity += 1;
        } else if self.dropped_preferred_anti < pod.preferred_anti.len() {
            self.dropped_preferred_anti += 1;
        } else if self.dropped_preferred_terms < pod.preferred_terms.len() {
            self.dropped_preferred_terms += 1;
        } else if self.dropped_anyway_spreads < pod.spreads.iter().filter(|(_, a)| *a).count() {
            self.dropped_anyway_spreads += 1;
        } else if !self.tolerate_prefer_no_schedule {
            self.tolerate_prefer_no_schedule = true;
        } else {
            return false;
        }
        true
    }

    /// The node requirements in force: nodeSelector, the first remaining required term and
    /// the heaviest remaining preferred term; the hostname requirement split off.
    pub fn node_reqs(
        &self,
        pod: &PodInfo,
        hostname: Sym,
        symbols: &Symbols,
    ) -> (Reqs, Option<Req>) {
        let mut reqs = pod.node_selector.clone();
        if let Some(t) = pod.required_terms.get(self.dropped_required_terms) {
            reqs = reqs.intersection(t, symbols);
        }
        if let Some(t) = pod.preferred_terms.get(self.dropped_preferred_terms) {
            reqs = reqs.intersection(t, symbols);
        }
        let host = reqs.remove(hostname);
        (reqs, host)
    }

    /// The topology groups in force, with how each binds the pod.
    pub fn groups(&self, pod: &PodInfo) -> Vec<GroupId> {
        let mut anyway_seen = 0;
        let mut out = Vec::new();
        for (id, anyway) in &pod.spreads {
            if *anyway {
                anyway_seen += 1;
                if anyway_seen <= self.dropped_anyway_spreads {
                    continue;
                }
            }
            out.push(*id);
        }
        out.extend(&pod.affinity);
        out.extend(
            &pod.preferred_affinity[self
                .dropped_preferred_affinity
                .min(pod.preferred_affinity.len())..],
        );
        out.extend(&pod.anti);
        out.extend(
            &pod.preferred_anti[self.dropped_preferred_anti.min(pod.preferred_anti.len())..],
        );
        out.extend(&pod.inverse);
        out
    }
}

/// The label keys Karpenter lets a pod require without a NodePool defining them, interned;
/// the number below which every symbol is one of them. Call it first on a fresh table (or
/// on a table over a base that did), so their symbols are the lowest.
pub fn intern_well_known(symbols: &mut Symbols) -> usize {
    let keys = labels::WELL_KNOWN_LABELS.iter().chain([&labels::HOSTNAME]);
    keys.map(|k| symbols.intern(k).index() + 1)
        .max()
        .unwrap_or(0)
}

/// Replicas compile once. A Deployment's pods differ in their names and nodes, not in what a
/// solve reads of them; the first pod of each kind is compiled and the others take a copy.
/// At 10,000 pods the disruption pass compiles the cluster every few seconds, and interning
/// each replica's labels again was most of it.
pub struct Replicas<'x, T> {
    /// By the pods' [`terms_of`], where the caller gives them.
    by_terms: rustc_hash::FxHashMap<u64, T>,
    /// By controller, the first replica compiled.
    first: rustc_hash::FxHashMap<(&'x str, &'x str, &'x str), (&'x Pod, T)>,
}

impl<T> Default for Replicas<'_, T> {
    fn default() -> Self {
        Replicas {
            by_terms: Default::default(),
            first: Default::default(),
        }
    }
}

impl<'x, T: Clone> Replicas<'x, T> {
    /// A copy of what `compile` gave for an earlier pod alike to `pod` (and `true`), else
    /// `compile`'s answer for it (and `false`). Pods are alike when the caller gives their
    /// [`terms_of`] and those are equal; else when they have one controller and [`alike`]
    /// holds.
    pub fn compile(
        &mut self,
        pod: &'x Pod,
        terms: Option<u64>,
        compile: impl FnOnce() -> T,
    ) -> (T, bool) {
        if let Some(terms) = terms {
            if let Some(compiled) = self.by_terms.get(&terms) {
                return (compiled.clone(), true);
            }
            let compiled = compile();
            self.by_terms.insert(terms, compiled.clone());
            return (compiled, false);
        }
        let Some(owner) = controller_of(pod) else {
            return (compile(), false);
        };
        let key = (namespace_of(pod), owner.kind.as_str(), owner.name.as_str());
        if let Some((first, compiled)) = self.first.get(&key)
            && alike(first, pod)
        {
            return (compiled.clone(), true);
        }
        let compiled = compile();
        self.first
            .entry(key)
            .or_insert_with(|| (pod, compiled.clone()));
        (compiled, false)
    }
}

/// The pod's controller (a ReplicaSet, StatefulSet, Job…), from its owner references.
fn controller_of(
    pod: &Pod,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    (pod.metadata.owner_references.iter().flatten()).find(|o| o.controller == Some(true))
}

/// Whether two pods compile alike apart from their requests: equal in every field
/// [`Compiler::compile`] reads (namespace, labels, the volume-topology annotation, node
/// selector, affinity, tolerations, spread constraints and container ports). A field
/// `compile` starts reading belongs here and in [`terms_of`] too; the tests change each one.
pub fn alike(a: &Pod, b: &Pod) -> bool {
    let (sa, sb) = (a.spec.as_ref(), b.spec.as_ref());
    namespace_of(a) == namespace_of(b)
        && a.metadata.labels == b.metadata.labels
        && volume_topology(a) == volume_topology(b)
        && sa.map(|s| &s.node_selector) == sb.map(|s| &s.node_selector)
        && sa.map(|s| &s.affinity) == sb.map(|s| &s.affinity)
        && sa.map(|s| &s.tolerations) == sb.map(|s| &s.tolerations)
        && sa.map(|s| &s.topology_spread_constraints) == sb.map(|s| &s.topology_spread_constraints)
        && ports(a).eq(ports(b))
}

/// A fingerprint of what [`Compiler::compile`] reads of a pod (the fields [`alike`]
/// compares), for a caller that keeps pods to work it out once per pod: pods with equal
/// fingerprints then compile once per solve, without being compared field by field.
pub fn terms_of(pod: &Pod) -> u64 {
    let spec = pod.spec.as_ref();
    let terms = (
        namespace_of(pod),
        &pod.metadata.labels,
        volume_topology(pod),
        spec.map(|s| &s.node_selector),
        spec.map(|s| &s.affinity),
        spec.map(|s| &s.tolerations),
        spec.map(|s| &s.topology_spread_constraints),
        ports(pod).collect::<Vec<_>>(),
    );
    json_hash(&terms)
}

/// SipHash over a value's JSON text, fed to the hasher without allocating. SipHash, not
/// Fx: values whose hashes are equal are taken as alike, so the hash must spread similar
/// texts well.
pub fn json_hash(value: &impl serde::Serialize) -> u64 {
    use std::hash::Hasher;
    struct Feed(std::hash::DefaultHasher);
    impl std::io::Write for Feed {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut feed = Feed(std::hash::DefaultHasher::new());
    // serializing Kubernetes types into a writer that cannot fail does not fail
    let _ = serde_json::to_writer(&mut feed, value);
    feed.0.finish()
}

/// Each container's ports (init containers' too), as declared.
fn ports(
    pod: &Pod,
) -> impl Iterator<Item = &Option<Vec<k8s_openapi::api::core::v1::ContainerPort>>> {
    (pod.spec.iter()).flat_map(|s| {
        (s.containers.iter())
            .chain(s.init_containers.iter().flatten())
            .map(|c| &c.ports)
    })
}

/// The volume-topology annotation the core stamps on a pod whose volumes bind it to zones.
fn volume_topology(pod: &Pod) -> Option<&String> {
    (pod.metadata.annotations.as_ref()).and_then(|a| a.get(labels::VOLUME_TOPOLOGY))
}
