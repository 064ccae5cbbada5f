//! kube-scheduler as Kerf expects it to bind pods: its filter plugins (NodeResourcesFit,
//! NodeAffinity, TaintToleration, NodePorts, PodTopologySpread, InterPodAffinity,
//! VolumeBinding, NodeVolumeLimits) and its default LeastAllocated score, read straight from
//! the raw Pod objects and node labels. The simulator binds its pods with it, and the
//! provisioner rehearses a batch's placement with it before launching.
//!
//! It shares no code with Kerf's solver on purpose. A binder that reused the solver's
//! predicates would agree with every mistake the solver makes, and `--check`, which judges
//! placements with these same filters, could not catch one; a rehearsal by the solver's own
//! rules would find nothing the solver did not already plan for.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, NodeSelectorRequirement, PersistentVolume, PersistentVolumeClaim, Pod,
    PodAffinityTerm, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kerf_api::{Quantity, Taint, TaintEffect};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// Resource amounts in thousandths of a unit (millicores, millibytes), by resource name.
pub type Amounts = BTreeMap<String, i128>;

/// The resources every pod asks for, whose room on each node the scheduler keeps as plain
/// numbers beside its [`Amounts`]: a node without room for a pod is passed over without a
/// string compared, which in a burst onto thousands of full nodes is most of the work.
const COMMON: [&str; 3] = ["cpu", "memory", "pods"];

/// What `requested` leaves of `allocatable` of resource `r`.
fn left_of(r: &str, allocatable: &Amounts, requested: &Amounts) -> i128 {
    allocatable.get(r).copied().unwrap_or(0) - requested.get(r).copied().unwrap_or(0)
}

/// Each [`COMMON`] resource of `amounts`.
fn common_of(amounts: &Amounts) -> [i128; 3] {
    COMMON.map(|r| amounts.get(r).copied().unwrap_or(0))
}

/// What `requested` leaves of `allocatable` of each [`COMMON`] resource.
fn room_of(allocatable: &Amounts, requested: &Amounts) -> [i128; 3] {
    COMMON.map(|r| left_of(r, allocatable, requested))
}

/// A node as kube-scheduler's snapshot holds it.
#[derive(Debug)]
pub struct Node<'a> {
    /// The node's name.
    pub name: &'a str,
    /// Its labels (zone, hostname, instance type, NodePool, …).
    pub labels: &'a BTreeMap<String, String>,
    /// Its taints.
    pub taints: &'a [Taint],
    /// `status.allocatable`, in thousandths (borrowed from the node's record where it has
    /// one: a snapshot is taken at every binder pass).
    pub allocatable: Cow<'a, Amounts>,
    /// Whether pods may be bound to it (Ready); nodes that are not still count as
    /// topology domains, as they do for kube-scheduler.
    pub ready: bool,
    /// Its CSINode's attachment limits, by driver (a driver not listed takes any number).
    pub volume_limits: BTreeMap<&'a str, i64>,
}

/// The stored claims (by `namespace/name`), volumes and classes, for VolumeBinding and
/// NodeVolumeLimits.
#[derive(Clone, Copy, Debug)]
pub struct Storage<'a> {
    /// Claims by `namespace/name`.
    pub claims: &'a BTreeMap<String, PersistentVolumeClaim>,
    /// PersistentVolumes by name.
    pub volumes: &'a BTreeMap<String, PersistentVolume>,
    /// StorageClasses by name.
    pub classes: &'a BTreeMap<String, StorageClass>,
}

impl<'a> Storage<'a> {
    /// The class of a claim: its own, else the default one.
    pub fn class_of(&self, claim: &PersistentVolumeClaim) -> Option<&'a StorageClass> {
        match claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref())
        {
            Some(name) => self.classes.get(name),
            None => self.classes.values().find(|c| {
                c.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("storageclass.kubernetes.io/is-default-class"))
                    .is_some_and(|v| v == "true")
            }),
        }
    }

    /// Where the pod's claims can be reached from a node with `labels`, and with which
    /// drivers' slots (`None`: some claim cannot be, on that node or at all).
    fn attach(
        &self,
        pod: &Pod,
        labels: &BTreeMap<String, String>,
    ) -> Option<Vec<(String, String)>> {
        let mut out = Vec::new();
        for key in claims_of(pod) {
            let claim = self.claims.get(&key)?;
            let bound = claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .filter(|v| !v.is_empty());
            let driver = match bound {
                Some(name) => {
                    let spec = self.volumes.get(name)?.spec.as_ref()?;
                    let terms = spec
                        .node_affinity
                        .as_ref()
                        .and_then(|a| a.required.as_ref())
                        .map(|r| r.node_selector_terms.as_slice())
                        .unwrap_or_default();
                    let reachable = terms.is_empty()
                        || terms.iter().any(|t| {
                            t.match_expressions
                                .iter()
                                .flatten()
                                .all(|e| requirement_holds(e, labels))
                        });
                    if !reachable {
                        return None;
                    }
                    spec.csi.as_ref().map(|c| c.driver.clone())
                }
                None => {
                    // an unbound claim waits for its first consumer, or the pod waits
                    let class = self.class_of(claim)?;
                    if class.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer") {
                        return None;
                    }
                    let terms = class.allowed_topologies.as_deref().unwrap_or_default();
                    let allowed = terms.is_empty()
                        || terms.iter().any(|t| {
                            t.match_label_expressions
                                .iter()
                                .flatten()
                                .all(|e| labels.get(&e.key).is_some_and(|v| e.values.contains(v)))
                        });
                    if !allowed {
                        return None;
                    }
                    Some(match class.provisioner.as_str() {
                        "kubernetes.io/aws-ebs" => "ebs.csi.aws.com".to_string(),
                        other => other.to_string(),
                    })
                }
            };
            if let Some(d) = driver {
                out.push((d, key));
            }
        }
        Some(out)
    }
}

/// The `namespace/name` of every claim a pod's volumes name (a generic ephemeral volume's
/// claim is `<pod>-<volume>`).
pub fn claims_of(pod: &Pod) -> Vec<String> {
    let namespace = namespace_of(pod);
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(c), _) => Some(format!("{namespace}/{}", c.claim_name)),
            (None, Some(_)) => Some(format!("{namespace}/{name}-{}", v.name)),
            _ => None,
        })
        .collect()
}

/// What the scheduler reads of a pod before any node: its requests, host ports, whether it
/// mounts claims or repels others, and the class of pods just like it. Worked out once per
/// pod by a caller that keeps them with its pods ([`Scheduler::with_facts`]): a cluster of
/// 10,000 pods is snapshotted on every binding pass.
#[derive(Clone, Debug)]
pub struct Facts {
    requests: Amounts,
    ports: Vec<(i32, String)>,
    /// Whether its volumes name claims (attached where it is placed).
    claims: bool,
    /// Whether it carries required anti-affinity terms.
    repels: bool,
    /// Whether its DoNotSchedule spreads or required affinity count bound pods, so that a
    /// pod bound elsewhere can let it in.
    counts_peers: bool,
    /// The pod's namespace, labels and spec, as text.
    class: String,
    /// A hash of `class`.
    class_hash: u64,
}

impl Facts {
    /// A pod's facts.
    pub fn of(pod: &Pod) -> Facts {
        let class =
            serde_json::to_string(&(&pod.metadata.namespace, &pod.metadata.labels, &pod.spec))
                .unwrap_or_default();
        Facts {
            class_hash: {
                use std::hash::{Hash, Hasher};
                let mut h = std::hash::DefaultHasher::new();
                class.hash(&mut h);
                h.finish()
            },
            class,
            requests: requests(pod),
            ports: host_ports(pod),
            claims: !claims_of(pod).is_empty(),
            repels: !required_terms(pod, false).is_empty(),
            counts_peers: hard_spreads(pod).next().is_some()
                || !required_terms(pod, true).is_empty(),
        }
    }

    /// Whether kube-scheduler's filters that read the node alone pass for a node with these
    /// labels, taints and allocatable, empty: NodeAffinity, TaintToleration, and
    /// NodeResourcesFit against the whole allocatable. A pod that fails them is never bound
    /// there, whatever else runs on it.
    pub fn could_bind(
        &self,
        pod: &Pod,
        labels: &BTreeMap<String, String>,
        taints: &[Taint],
        allocatable: &Amounts,
    ) -> bool {
        node_affinity_matches(pod, labels)
            && !untolerated(pod, taints)
            && (self.requests.iter()).all(|(r, v)| *v <= allocatable.get(r).copied().unwrap_or(0))
    }

    /// The class of pods just like this one (namespace, labels and spec).
    pub fn class(&self) -> &str {
        &self.class
    }

    /// A hash of its class, for callers that fingerprint many pods at once.
    pub fn class_hash(&self) -> u64 {
        self.class_hash
    }

    /// Whether its volumes name claims: storage objects decide where it fits.
    pub fn mounts_claims(&self) -> bool {
        self.claims
    }

    /// Whether binding another pod can make room for it: its DoNotSchedule spreads (a pod
    /// bound in another domain raises the fewest any domain holds) or required affinity
    /// count bound pods. kube-scheduler requeues such a pod when a pod is bound.
    pub fn counts_peers(&self) -> bool {
        self.counts_peers
    }
}

/// A pod's DoNotSchedule spread constraints (the filter; ScheduleAnyway ones only score).
fn hard_spreads(pod: &Pod) -> impl Iterator<Item = &TopologySpreadConstraint> {
    (pod.spec.iter())
        .flat_map(|s| s.topology_spread_constraints.iter().flatten())
        .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
}

/// Whether `other`, bound somewhere, counts toward one of `pod`'s DoNotSchedule spread
/// constraints or required pod affinity terms: then the labels of the node it is bound to
/// decide where `pod` may go. (Anti-affinity only ever keeps `pod` away.)
pub fn counts_for(pod: &Pod, other: &Pod) -> bool {
    let spreads = hard_spreads(pod).any(|c| {
        namespace_of(other) == namespace_of(pod)
            && selector_matches(&with_match_label_keys(c, pod), labels_of(other))
    });
    spreads
        || required_terms(pod, true).iter().any(|term| {
            let selector = term.label_selector.clone().unwrap_or_else(nothing);
            in_namespaces(other, term_namespaces(term, pod).as_deref())
                && selector_matches(&selector, labels_of(other))
        })
}

/// Whether `other`, bound somewhere, takes part in any of `pod`'s inter-pod filters: it
/// counts toward a DoNotSchedule spread or required affinity term ([`counts_for`]), or a
/// required anti-affinity term of `pod` matches it. A bound pod that does so for no pending
/// pod, carries no anti-affinity of its own and mounts no claims weighs on the pending only
/// through its node's requests and ports ([`Scheduler::with_usage`]).
pub fn constrains(pod: &Pod, other: &Pod) -> bool {
    counts_for(pod, other)
        || required_terms(pod, false).iter().any(|term| {
            let selector = term.label_selector.clone().unwrap_or_else(nothing);
            in_namespaces(other, term_namespaces(term, pod).as_deref())
                && selector_matches(&selector, labels_of(other))
        })
}

/// What the pods bound to one node take of it, kept up to date by a caller that binds and
/// deletes pods one at a time, so a snapshot need not add them all up again.
#[derive(Clone, Debug, Default)]
pub struct Usage {
    requested: Amounts,
    ports: Vec<(i32, String)>,
    pods: usize,
}

impl Usage {
    /// A pod with these facts was bound here.
    pub fn add(&mut self, facts: &Facts) {
        self.add_many(facts, 1);
    }

    /// `n` pods with these facts were bound here (replicas: their requests added up once).
    pub fn add_many(&mut self, facts: &Facts, n: usize) {
        let times = i128::try_from(n).unwrap_or(i128::MAX);
        for (r, v) in &facts.requests {
            let v = v.saturating_mul(times);
            match self.requested.get_mut(r) {
                Some(sum) => *sum += v,
                None => {
                    self.requested.insert(r.clone(), v);
                }
            }
        }
        for _ in 0..n {
            self.ports.extend(facts.ports.iter().cloned());
        }
        self.pods += n;
    }

    /// A pod with these facts left; whether none is left.
    pub fn remove(&mut self, facts: &Facts) -> bool {
        for (r, v) in &facts.requests {
            if let Some(have) = self.requested.get_mut(r) {
                *have -= v;
                if *have == 0 {
                    self.requested.remove(r);
                }
            }
        }
        for p in &facts.ports {
            if let Some(i) = self.ports.iter().position(|have| have == p) {
                self.ports.swap_remove(i);
            }
        }
        self.pods = self.pods.saturating_sub(1);
        self.pods == 0
    }
}

/// Whether a bound pod must be among the `bound` of [`Scheduler::with_usage`] when `pending`
/// (one pod per class) wait: it repels others, mounts claims, or takes part in a pending
/// pod's inter-pod filters.
pub fn weighs_on(other: &Pod, facts: &Facts, pending: &[&Pod]) -> bool {
    facts.repels || facts.claims || pending.iter().any(|p| constrains(p, other))
}

/// kube-scheduler's view of the cluster: nodes and the pods bound to them, updated as it
/// binds.
pub struct Scheduler<'a> {
    nodes: Vec<Node<'a>>,
    /// Node indices by name (the last node added under a name).
    by_name: HashMap<&'a str, usize>,
    requested: Vec<Cow<'a, Amounts>>,
    /// Per node, its allocatable of the [`COMMON`] resources.
    capacity: Vec<[i128; 3]>,
    /// Per node, [`room_of`] its allocatable and `requested`.
    room: Vec<[i128; 3]>,
    /// The other resources pods have asked for, each with what is left of it per node.
    extended: Vec<(String, Vec<i128>)>,
    /// Per pod class ([`Facts::class_hash`]), whether each node passes the filters that read
    /// only the pod's spec and the node (NodeAffinity, TaintToleration), worked out once: a
    /// class is asked of every node for each of its pods.
    statics: HashMap<u64, Vec<bool>>,
    ports: Vec<Vec<(i32, String)>>,
    bound: Vec<(&'a Pod, usize)>,
    /// The bound pods by class ([`Facts::class_hash`]: the same namespace and labels), each
    /// class with one of its pods and the node of each: a count reads a class's labels
    /// once, not once per pod.
    groups: Vec<(&'a Pod, Vec<usize>)>,
    /// Each class's index in `groups`.
    group_of: HashMap<u64, usize>,
    /// Bound pods that carry required anti-affinity terms (checked against every newcomer).
    repelling: Vec<usize>,
    /// The counts the pods' spread and affinity terms read, by id (their index).
    counts: Vec<Count>,
    /// Each count's id by what it counts (its namespaces, selector and key, as JSON): a
    /// pod's plan finds its counts here once, and its filters then read them by index on
    /// every node.
    count_ids: HashMap<String, usize>,
    /// Each pod class's [`Shape`].
    shapes: HashMap<u64, std::rc::Rc<Shape<'a>>>,
    /// Pods (by the hash of their namespace, labels and spec) no node fitted since the
    /// last placement.
    unschedulable: HashSet<u64>,
    storage: Option<Storage<'a>>,
    /// Per node, the claims attached through each driver.
    attached: Vec<BTreeMap<String, BTreeSet<String>>>,
}

/// A pod's spread constraint, ready to check node by node.
struct Spread<'a> {
    key: String,
    count: usize,
    /// The domains of the nodes the pod's node affinity accepts that carry every key of
    /// its spreads (the eligible domains), each once.
    domains: Vec<&'a str>,
    max_skew: i64,
    /// Whether fewer eligible domains than this make the least count zero.
    min_domains: Option<i32>,
    /// Whether the pod matches its own selector (placing it adds one to the domain).
    itself: bool,
}

/// What of a pod's filters holds for its whole class ([`Facts::class_hash`]) over the
/// nodes it was worked out for: worked out once per class, not once per pod, as a burst's
/// pods come a class at a time.
struct Shape<'a> {
    /// How many nodes there were (a node added since asks for it again).
    nodes: usize,
    /// The [`COMMON`] resources of the pod's requests, where it names them.
    common: [Option<i128>; 3],
    /// The others, by their index in [`Scheduler::extended`].
    extended: Vec<(usize, i128)>,
    ports: Vec<(i32, String)>,
    spreads: Vec<Spread<'a>>,
    /// (topology key, count, whether the pod matches its own term)
    affinity: Vec<(String, usize, bool)>,
    anti: Vec<(String, usize)>,
}

/// The spread and affinity terms of one pod, with what the counts say now.
struct Plan<'a> {
    shape: std::rc::Rc<Shape<'a>>,
    /// Per spread, the most matching pods the node's domain may already hold.
    allowed: Vec<i64>,
    /// Per affinity term, whether the pod may start the group: it matches its own term and
    /// no pod anywhere does yet.
    first: Vec<bool>,
}

/// How many bound pods a selector matches in each domain of a topology key.
struct Count {
    namespaces: Option<Vec<String>>,
    selector: LabelSelector,
    key: String,
    by_domain: HashMap<String, i64>,
}

impl<'a> Scheduler<'a> {
    /// The snapshot: `bound` pairs each bound pod with the name of its node.
    /// `storage` is what the API server stores of claims, volumes and classes (`None`:
    /// the pods' volumes are not checked).
    pub fn new(
        nodes: Vec<Node<'a>>,
        bound: impl IntoIterator<Item = (&'a Pod, &'a str)>,
        storage: Option<Storage<'a>>,
    ) -> Self {
        let mut s = Scheduler::empty(nodes, storage);
        for (pod, node) in bound {
            if let Some(&i) = s.by_name.get(node) {
                s.place(pod, &Facts::of(pod), i);
            }
        }
        s
    }

    /// [`Scheduler::new`] with each bound pod's facts kept by the caller.
    pub fn with_facts(
        nodes: Vec<Node<'a>>,
        bound: impl IntoIterator<Item = (&'a Pod, &'a Facts, &'a str)>,
        storage: Option<Storage<'a>>,
    ) -> Self {
        let mut s = Scheduler::empty(nodes, storage);
        for (pod, facts, node) in bound {
            if let Some(&i) = s.by_name.get(node) {
                s.place(pod, facts, i);
            }
        }
        s
    }

    /// [`Scheduler::with_facts`] for a caller that keeps what each node's pods take
    /// (`usage`, by node name): `bound` need hold only the pods [`weighs_on`] picks.
    pub fn with_usage(
        nodes: Vec<Node<'a>>,
        usage: impl Fn(&str) -> Option<&'a Usage>,
        bound: impl IntoIterator<Item = (&'a Pod, &'a Facts, &'a str)>,
        storage: Option<Storage<'a>>,
    ) -> Self {
        let mut s = Scheduler::empty(nodes, storage);
        for (i, n) in s.nodes.iter().enumerate() {
            if let Some(u) = usage(n.name) {
                s.requested[i] = Cow::Borrowed(&u.requested);
                s.room[i] = room_of(&n.allocatable, &u.requested);
                s.ports[i].clone_from(&u.ports);
            }
        }
        for (pod, facts, node) in bound {
            if let Some(&i) = s.by_name.get(node) {
                s.note(pod, facts, i);
            }
        }
        s
    }

    fn empty(nodes: Vec<Node<'a>>, storage: Option<Storage<'a>>) -> Self {
        Scheduler {
            by_name: (nodes.iter().enumerate())
                .map(|(i, n)| (n.name, i))
                .collect(),
            requested: vec![Cow::Owned(Amounts::new()); nodes.len()],
            capacity: (nodes.iter()).map(|n| common_of(&n.allocatable)).collect(),
            room: (nodes.iter()).map(|n| common_of(&n.allocatable)).collect(),
            statics: HashMap::default(),
            extended: Vec::new(),
            ports: vec![Vec::new(); nodes.len()],
            attached: vec![BTreeMap::new(); nodes.len()],
            storage,
            nodes,
            bound: Vec::new(),
            groups: Vec::new(),
            group_of: HashMap::default(),
            repelling: Vec::new(),
            counts: Vec::new(),
            count_ids: HashMap::default(),
            shapes: HashMap::default(),
            unschedulable: HashSet::default(),
        }
    }

    /// Schedules one pod: the Ready node that passes every filter and scores best
    /// (`preferred` first when it passes), recorded as bound. `None` when no node fits.
    pub fn schedule(&mut self, pod: &'a Pod, preferred: Option<&str>) -> Option<&'a str> {
        self.schedule_with(pod, &Facts::of(pod), preferred)
    }

    /// [`Scheduler::schedule`] with the pod's facts kept by the caller.
    pub fn schedule_with(
        &mut self,
        pod: &'a Pod,
        facts: &Facts,
        preferred: Option<&str>,
    ) -> Option<&'a str> {
        // a pod just like one that found no node since the last binding finds none either
        if self.unschedulable.contains(&facts.class_hash) {
            return None;
        }
        let chosen = self.choose(pod, facts, preferred, |_| true);
        if chosen.is_none() {
            self.unschedulable.insert(facts.class_hash);
        }
        chosen.map(|i| self.nodes[i].name)
    }

    /// Schedules one pod among the Ready nodes `allowed` lets through (by index, in the
    /// order given to [`Scheduler::new`] and then [`Scheduler::add_node`]): how a checker
    /// fills the nodes it imagined before it imagines another.
    pub fn schedule_within(
        &mut self,
        pod: &'a Pod,
        facts: &Facts,
        allowed: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        self.choose(pod, facts, None, allowed)
    }

    /// Adds a node after the snapshot was taken; its index.
    pub fn add_node(&mut self, node: Node<'a>) -> usize {
        self.by_name.insert(node.name, self.nodes.len());
        self.capacity.push(common_of(&node.allocatable));
        self.room.push(common_of(&node.allocatable));
        for (r, room) in &mut self.extended {
            room.push(left_of(r, &node.allocatable, &Amounts::new()));
        }
        self.nodes.push(node);
        self.requested.push(Cow::Owned(Amounts::new()));
        self.ports.push(Vec::new());
        self.attached.push(BTreeMap::new());
        self.unschedulable.clear();
        self.nodes.len() - 1
    }

    fn choose(
        &mut self,
        pod: &'a Pod,
        facts: &Facts,
        preferred: Option<&str>,
        allowed: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let plan = self.plan(pod, facts);
        let statics = self.statics.entry(facts.class_hash).or_default();
        for n in &self.nodes[statics.len()..] {
            statics.push(node_affinity_matches(pod, n.labels) && !untolerated(pod, n.taints));
        }
        let statics = &self.statics[&facts.class_hash];
        let feasible =
            |i: usize| allowed(i) && self.nodes[i].ready && statics[i] && self.fits(pod, &plan, i);
        // the preferred node alone first, as kube-scheduler tries a nominated node
        let chosen = (preferred.and_then(|n| self.by_name.get(n).copied()))
            .filter(|&i| feasible(i))
            .or_else(|| {
                (0..self.nodes.len())
                    .filter(|&i| feasible(i))
                    .max_by_key(|&i| (self.least_allocated(&plan, i), std::cmp::Reverse(i)))
            })?;
        self.place(pod, facts, chosen);
        Some(chosen)
    }

    /// The index of resource `r` in `extended`, its room on every node worked out the first
    /// time a pod asks for it.
    fn extended_index(&mut self, r: &str) -> usize {
        if let Some(i) = self.extended.iter().position(|(name, _)| name == r) {
            return i;
        }
        let room = (self.nodes.iter().zip(&self.requested))
            .map(|(n, used)| left_of(r, &n.allocatable, used))
            .collect();
        self.extended.push((r.to_string(), room));
        self.extended.len() - 1
    }

    fn place(&mut self, pod: &'a Pod, facts: &Facts, node: usize) {
        add(self.requested[node].to_mut(), &facts.requests);
        self.room[node] = room_of(&self.nodes[node].allocatable, &self.requested[node]);
        for (r, room) in &mut self.extended {
            room[node] = left_of(r, &self.nodes[node].allocatable, &self.requested[node]);
        }
        self.ports[node].extend(facts.ports.iter().cloned());
        self.note(pod, facts, node);
    }

    /// Records a bound pod for the claims it attaches, the counts it is in and the
    /// anti-affinity it carries (its requests and ports are the caller's to add).
    fn note(&mut self, pod: &'a Pod, facts: &Facts, node: usize) {
        self.unschedulable.clear();
        let labels = self.nodes[node].labels;
        if facts.claims {
            let claims = self.storage.and_then(|st| st.attach(pod, labels));
            for (driver, claim) in claims.into_iter().flatten() {
                self.attached[node].entry(driver).or_default().insert(claim);
            }
        }
        for c in &mut self.counts {
            if let Some(d) = labels.get(&c.key)
                && in_namespaces(pod, c.namespaces.as_deref())
                && selector_matches(&c.selector, labels_of(pod))
            {
                *c.by_domain.entry(d.clone()).or_default() += 1;
            }
        }
        if facts.repels {
            self.repelling.push(self.bound.len());
        }
        self.bound.push((pod, node));
        let groups = &mut self.groups;
        let g = *(self.group_of.entry(facts.class_hash)).or_insert_with(|| {
            groups.push((pod, Vec::new()));
            groups.len() - 1
        });
        self.groups[g].1.push(node);
    }

    /// What the pod's filters need: its class's [`Shape`], and what the counts say now.
    fn plan(&mut self, pod: &Pod, facts: &Facts) -> Plan<'a> {
        let shape = match self.shapes.get(&facts.class_hash) {
            Some(s) if s.nodes == self.nodes.len() => s.clone(),
            _ => {
                let s = std::rc::Rc::new(self.shape(pod, facts));
                self.shapes.insert(facts.class_hash, s.clone());
                s
            }
        };
        let allowed = (shape.spreads.iter())
            .map(|s| {
                let counts = &self.counts[s.count].by_domain;
                let mut min = (s.domains.iter())
                    .map(|d| counts.get(*d).copied().unwrap_or(0))
                    .min()
                    .unwrap_or(0);
                if s.min_domains
                    .is_some_and(|m| (s.domains.len() as i64) < i64::from(m))
                {
                    min = 0;
                }
                min + s.max_skew - i64::from(s.itself)
            })
            .collect();
        let first = (shape.affinity.iter())
            .map(|(_, count, itself)| {
                *itself && self.counts[*count].by_domain.values().all(|&c| c == 0)
            })
            .collect();
        Plan {
            shape,
            allowed,
            first,
        }
    }

    /// Works out a pod class's [`Shape`] over the nodes there are.
    fn shape(&mut self, pod: &Pod, facts: &Facts) -> Shape<'a> {
        let constraints: Vec<&TopologySpreadConstraint> = hard_spreads(pod).collect();
        let keys: Vec<&str> = constraints
            .iter()
            .map(|c| c.topology_key.as_str())
            .collect();
        let mut spreads = Vec::new();
        for c in &constraints {
            let selector = with_match_label_keys(c, pod);
            let count = self.count(
                Some(vec![namespace_of(pod).to_string()]),
                &selector,
                &c.topology_key,
            );
            // eligible domains: nodes the pod's node affinity accepts that carry every key
            let mut domains: BTreeSet<&'a str> = BTreeSet::new();
            for n in &self.nodes {
                if keys.iter().all(|k| n.labels.contains_key(*k))
                    && node_affinity_matches(pod, n.labels)
                    && let Some(d) = n.labels.get(&c.topology_key)
                {
                    domains.insert(d);
                }
            }
            spreads.push(Spread {
                key: c.topology_key.clone(),
                count,
                domains: domains.into_iter().collect(),
                max_skew: i64::from(c.max_skew),
                min_domains: c.min_domains,
                itself: selector_matches(&selector, labels_of(pod)),
            });
        }
        let mut affinity = Vec::new();
        for term in required_terms(pod, true) {
            let namespaces = term_namespaces(term, pod);
            let selector = term.label_selector.clone().unwrap_or_else(nothing);
            let itself = in_namespaces(pod, namespaces.as_deref())
                && selector_matches(&selector, labels_of(pod));
            let count = self.count(namespaces, &selector, &term.topology_key);
            affinity.push((term.topology_key.clone(), count, itself));
        }
        let mut anti = Vec::new();
        for term in required_terms(pod, false) {
            let selector = term.label_selector.clone().unwrap_or_else(nothing);
            let count = self.count(term_namespaces(term, pod), &selector, &term.topology_key);
            anti.push((term.topology_key.clone(), count));
        }
        Shape {
            nodes: self.nodes.len(),
            common: COMMON.map(|r| facts.requests.get(r).copied()),
            extended: (facts.requests.iter())
                .filter(|(r, _)| !COMMON.contains(&r.as_str()))
                .map(|(r, v)| (self.extended_index(r), *v))
                .collect(),
            ports: facts.ports.clone(),
            spreads,
            affinity,
            anti,
        }
    }

    fn fits(&self, pod: &Pod, plan: &Plan<'a>, i: usize) -> bool {
        // NodeResourcesFit (NodeAffinity and TaintToleration are the caller's, per class)
        let shape = &plan.shape;
        let room = &self.room[i];
        if (shape.common.iter().zip(room)).any(|(want, room)| want.is_some_and(|w| w > *room)) {
            return false;
        }
        if (shape.extended.iter()).any(|(r, v)| *v > self.extended[*r].1[i]) {
            return false;
        }
        let node = &self.nodes[i];
        if shape
            .ports
            .iter()
            .any(|w| self.ports[i].iter().any(|have| have == w))
        {
            return false;
        }
        let here = |key: &str, count: usize| {
            node.labels
                .get(key)
                .map(|d| self.counts[count].by_domain.get(d).copied().unwrap_or(0))
        };
        // PodTopologySpread (DoNotSchedule): the node's domain stays within maxSkew of
        // the least populated eligible domain once the pod is placed
        let spread = (shape.spreads.iter())
            .zip(&plan.allowed)
            .all(|(s, allowed)| here(&s.key, s.count).is_some_and(|n| n <= *allowed));
        // InterPodAffinity: required affinity finds a match in the domain (or the pod is
        // the first of its kind), required anti-affinity finds none, and no bound pod's
        // anti-affinity repels this one
        let affinity = (shape.affinity.iter())
            .zip(&plan.first)
            .all(|((key, count, _), first)| *first || here(key, *count).is_some_and(|n| n > 0));
        let anti = shape
            .anti
            .iter()
            .all(|(key, count)| here(key, *count).is_none_or(|n| n == 0));
        spread && affinity && anti && !self.repelled(pod, node.labels) && self.volumes_fit(pod, i)
    }

    /// VolumeBinding (every claim reachable from the node, or waiting for its first
    /// consumer where its class allows the node) and NodeVolumeLimits (each driver's
    /// distinct claims within the node's CSINode limit).
    fn volumes_fit(&self, pod: &Pod, i: usize) -> bool {
        let Some(storage) = self.storage else {
            return true;
        };
        let node = &self.nodes[i];
        let Some(claims) = storage.attach(pod, node.labels) else {
            return false;
        };
        let mut by_driver: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (driver, claim) in &claims {
            by_driver.entry(driver).or_default().insert(claim);
        }
        by_driver.iter().all(|(driver, new)| {
            let Some(limit) = node.volume_limits.get(*driver) else {
                return true;
            };
            let have = self.attached[i].get(*driver);
            let added = new
                .iter()
                .filter(|c| have.is_none_or(|h| !h.contains(**c)))
                .count();
            let total = have.map_or(0, BTreeSet::len) + added;
            i64::try_from(total).unwrap_or(i64::MAX) <= *limit
        })
    }

    /// Whether a bound pod's required anti-affinity keeps `pod` out of a node with `labels`.
    fn repelled(&self, pod: &Pod, labels: &BTreeMap<String, String>) -> bool {
        self.repelling.iter().any(|&b| {
            let (other, node) = self.bound[b];
            required_terms(other, false).iter().any(|term| {
                let theirs = self.nodes[node].labels.get(&term.topology_key);
                theirs.is_some()
                    && theirs == labels.get(&term.topology_key)
                    && in_namespaces(pod, term_namespaces(term, other).as_deref())
                    && term
                        .label_selector
                        .as_ref()
                        .is_some_and(|s| selector_matches(s, labels_of(pod)))
            })
        })
    }

    /// The id of the count of bound pods matching `selector` in `namespaces` (all when
    /// `None`) by domain of `key`, counted now and kept up to date as pods are placed.
    fn count(
        &mut self,
        namespaces: Option<Vec<String>>,
        selector: &LabelSelector,
        key: &str,
    ) -> usize {
        let id = serde_json::to_string(&(&namespaces, selector, key)).unwrap_or_default();
        if let Some(&i) = self.count_ids.get(&id) {
            return i;
        }
        let mut by_domain = HashMap::default();
        // each node's domain read once, not once for each pod on it
        let domains: Vec<Option<&String>> = self.nodes.iter().map(|n| n.labels.get(key)).collect();
        // matching pods per node first, then per domain
        let mut per_node = vec![0i64; self.nodes.len()];
        for (pod, nodes) in &self.groups {
            if !(in_namespaces(pod, namespaces.as_deref())
                && selector_matches(selector, labels_of(pod)))
            {
                continue;
            }
            for n in nodes {
                per_node[*n] += 1;
            }
        }
        for (d, c) in domains.iter().zip(per_node).filter(|(_, c)| *c > 0) {
            if let Some(d) = d {
                *by_domain.entry((*d).clone()).or_default() += c;
            }
        }
        self.counts.push(Count {
            namespaces,
            selector: selector.clone(),
            key: key.to_string(),
            by_domain,
        });
        self.count_ids.insert(id, self.counts.len() - 1);
        self.counts.len() - 1
    }

    /// NodeResourcesFit's LeastAllocated score: the mean free share of CPU and memory
    /// after placing the pod, in thousandths.
    fn least_allocated(&self, plan: &Plan<'a>, i: usize) -> i128 {
        // cpu and memory, [`COMMON`]'s first two: what is free once the pod is placed, in
        // thousandths of what the node has
        let free = |k: usize| {
            let (room, cap) = (self.room[i][k], self.capacity[i][k]);
            if cap <= 0 {
                return 0;
            }
            let left = (room - plan.shape.common[k].unwrap_or(0)).max(0);
            // in 64 bits when it fits, as kube-scheduler's int64 does (a 128-bit division
            // was a sixth of the operator's CPU in a 50,000-pod burst's rehearsals); the
            // same quotient either way
            match (
                i64::try_from(left).ok().and_then(|l| l.checked_mul(1000)),
                i64::try_from(cap),
            ) {
                (Some(scaled), Ok(cap)) => i128::from(scaled / cap),
                _ => left * 1000 / cap,
            }
        };
        (free(0) + free(1)) / 2
    }
}

/// An empty selector's opposite: a missing `labelSelector` in an affinity term matches
/// no pod.
fn nothing() -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".into(),
                operator: "In".into(),
                values: Some(Vec::new()),
            },
        ]),
        match_labels: None,
    }
}

fn labels_of(pod: &Pod) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    pod.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

fn namespace_of(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

fn in_namespaces(pod: &Pod, namespaces: Option<&[String]>) -> bool {
    namespaces.is_none_or(|ns| ns.iter().any(|n| n == namespace_of(pod)))
}

/// The namespaces an affinity term looks in: its list, all of them for an empty
/// namespaceSelector, or the pod's own.
fn term_namespaces(term: &PodAffinityTerm, pod: &Pod) -> Option<Vec<String>> {
    if term.namespace_selector.as_ref().is_some_and(|s| {
        s.match_labels.iter().flatten().next().is_none()
            && s.match_expressions.iter().flatten().next().is_none()
    }) {
        return None;
    }
    match term.namespaces.as_ref().filter(|n| !n.is_empty()) {
        Some(ns) => Some(ns.clone()),
        None => Some(vec![namespace_of(pod).to_string()]),
    }
}

/// A spread constraint's selector with its `matchLabelKeys` pinned to the pod's values.
fn with_match_label_keys(c: &TopologySpreadConstraint, pod: &Pod) -> LabelSelector {
    let mut selector = c.label_selector.clone().unwrap_or_else(nothing);
    for key in c.match_label_keys.iter().flatten() {
        if let Some(v) = labels_of(pod).get(key) {
            selector
                .match_labels
                .get_or_insert_with(Default::default)
                .insert(key.clone(), v.clone());
        }
    }
    selector
}

/// The pod's required affinity (`true`) or anti-affinity (`false`) terms.
fn required_terms(pod: &Pod, affinity: bool) -> &[PodAffinityTerm] {
    let a = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if affinity {
        a.and_then(|a| a.pod_affinity.as_ref()).and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    } else {
        a.and_then(|a| a.pod_anti_affinity.as_ref()).and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    };
    terms.map(Vec::as_slice).unwrap_or(&[])
}

/// metav1.LabelSelector semantics: every matchLabels pair and every expression holds.
pub fn selector_matches(s: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    s.match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
        && s.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or(&[]);
            let have = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => have.is_some_and(|v| values.contains(v)),
                "NotIn" => have.is_none_or(|v| !values.contains(v)),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                _ => false,
            }
        })
}

/// NodeAffinity: `nodeSelector` pairs all present, and some required node selector term
/// whose expressions all hold.
pub fn node_affinity_matches(pod: &Pod, labels: &BTreeMap<String, String>) -> bool {
    let Some(spec) = &pod.spec else { return true };
    if spec
        .node_selector
        .iter()
        .flatten()
        .any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return true;
    };
    required.node_selector_terms.iter().any(|t| {
        let exprs = t.match_expressions.as_deref().unwrap_or(&[]);
        let fields = t.match_fields.as_deref().unwrap_or(&[]);
        !(exprs.is_empty() && fields.is_empty())
            && exprs.iter().all(|e| requirement_holds(e, labels))
            && fields.iter().all(|e| {
                let name = labels.get("kubernetes.io/hostname");
                e.key == "metadata.name" && requirement_holds_on(e, name)
            })
    })
}

/// Whether a node with `labels` meets one node selector requirement.
pub fn requirement_holds(e: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    requirement_holds_on(e, labels.get(&e.key))
}

fn requirement_holds_on(e: &NodeSelectorRequirement, have: Option<&String>) -> bool {
    let values = e.values.as_deref().unwrap_or(&[]);
    let number = |s: &str| s.parse::<i64>().ok();
    match e.operator.as_str() {
        "In" => have.is_some_and(|v| values.contains(v)),
        "NotIn" => have.is_none_or(|v| !values.contains(v)),
        "Exists" => have.is_some(),
        "DoesNotExist" => have.is_none(),
        "Gt" | "Lt" => {
            let (Some(h), Some(bound)) = (
                have.and_then(|v| number(v)),
                values.first().and_then(|v| number(v)),
            ) else {
                return false;
            };
            if e.operator == "Gt" {
                h > bound
            } else {
                h < bound
            }
        }
        _ => false,
    }
}

/// TaintToleration: some NoSchedule or NoExecute taint no toleration of the pod covers.
pub fn untolerated(pod: &Pod, taints: &[Taint]) -> bool {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[]);
    taints
        .iter()
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
        .any(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

fn tolerates(tol: &Toleration, t: &Taint) -> bool {
    let effect = match t.effect {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    };
    if tol
        .effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != effect)
    {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or("");
    match tol.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == t.key,
        "Equal" => {
            key == t.key && tol.value.as_deref().unwrap_or("") == t.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// The pod's effective requests, as the scheduler adds them up: containers summed, each
/// plain init container alone with the sidecars started before it, the larger of the two,
/// plus overhead, plus one pod slot.
pub fn requests(pod: &Pod) -> Amounts {
    let mut total = Amounts::new();
    total.insert("pods".into(), 1000);
    let Some(spec) = &pod.spec else { return total };
    let mut containers = Amounts::new();
    for c in &spec.containers {
        add(&mut containers, &container_requests(c));
    }
    let mut sidecars = Amounts::new();
    let mut init = Amounts::new();
    for c in spec.init_containers.iter().flatten() {
        let own = container_requests(c);
        if c.restart_policy.as_deref() == Some("Always") {
            add(&mut sidecars, &own);
            raise(&mut init, &sidecars);
        } else {
            let mut step = own;
            add(&mut step, &sidecars);
            raise(&mut init, &step);
        }
    }
    add(&mut containers, &sidecars);
    raise(&mut containers, &init);
    add(&mut total, &containers);
    for (r, q) in spec.overhead.iter().flatten() {
        add_one(&mut total, r, &q.0);
    }
    total
}

fn container_requests(c: &Container) -> Amounts {
    let mut out = Amounts::new();
    let Some(res) = &c.resources else { return out };
    // a limit without a request is the request
    for (r, q) in res.limits.iter().flatten() {
        add_one(&mut out, r, &q.0);
    }
    for (r, q) in res.requests.iter().flatten() {
        out.remove(r);
        add_one(&mut out, r, &q.0);
    }
    out
}

fn add_one(to: &mut Amounts, resource: &str, quantity: &str) {
    if let Ok(q) = Quantity::parse(quantity) {
        *to.entry(resource.to_string()).or_default() += q.milli();
    }
}

/// Adds `b` into `a`, resource by resource.
pub fn add(a: &mut Amounts, b: &Amounts) {
    for (r, v) in b {
        // a name is copied only the first time: snapshots add 10,000 pods' requests
        match a.get_mut(r) {
            Some(sum) => *sum += v,
            None => {
                a.insert(r.clone(), *v);
            }
        }
    }
}

fn raise(a: &mut Amounts, b: &Amounts) {
    for (r, v) in b {
        let e = a.entry(r.clone()).or_default();
        *e = (*e).max(*v);
    }
}

fn host_ports(pod: &Pod) -> Vec<(i32, String)> {
    pod.spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            p.host_port
                .filter(|h| *h > 0)
                .map(|h| (h, p.protocol.clone().unwrap_or_else(|| "TCP".into())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn cpu(millis: i128) -> Amounts {
        [
            ("cpu".to_string(), millis * 1000),
            ("pods".to_string(), 110_000),
        ]
        .into_iter()
        .collect()
    }

    const WEB: &str = "
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  containers: [{name: c, resources: {requests: {cpu: '1'}}}]
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}
";

    #[test]
    fn zonal_spread_holds_the_skew_and_counts_empty_zones() {
        let (a, b) = (labels(&[("zone", "a")]), labels(&[("zone", "b")]));
        let web = pod(WEB);
        let nodes = vec![
            Node {
                name: "n1",
                labels: &a,
                taints: &[],
                allocatable: Cow::Owned(cpu(8)),
                ready: true,
                volume_limits: BTreeMap::new(),
            },
            Node {
                name: "n2",
                labels: &b,
                taints: &[],
                allocatable: Cow::Owned(cpu(8)),
                ready: false,
                volume_limits: BTreeMap::new(),
            },
        ];
        let mut s = Scheduler::new(nodes, [], None);
        // zone b has a node that is not Ready: it is a domain with no pods
        assert_eq!(s.schedule(&web, None), Some("n1"));
        assert_eq!(
            s.schedule(&web, None),
            None,
            "a second pod in zone a makes skew 2"
        );
    }

    /// The snapshot from kept usage and the pods that weigh on the pending ones binds as
    /// the snapshot that adds up every bound pod; a pod left out of `bound` only because it
    /// weighs on nothing changes nothing.
    #[test]
    fn a_snapshot_from_kept_usage_binds_as_one_from_every_bound_pod() {
        let zones = [labels(&[("zone", "a")]), labels(&[("zone", "b")])];
        let names = ["n0", "n1", "n2", "n3"];
        let nodes = || -> Vec<Node<'_>> {
            (names.iter().enumerate())
                .map(|(i, name)| Node {
                    name,
                    labels: &zones[i % 2],
                    taints: &[],
                    allocatable: Cow::Owned(cpu(4)),
                    ready: true,
                    volume_limits: BTreeMap::new(),
                })
                .collect()
        };
        let web = pod(WEB);
        let batch = pod(
            "metadata: {name: b, namespace: batch, labels: {app: batch}}\nspec: {containers: [{name: c, resources: {requests: {cpu: '1'}}}]}",
        );
        let lonely = pod("
metadata: {name: l, namespace: default, labels: {app: lonely}}
spec:
  containers: [{name: c, resources: {requests: {cpu: '1'}}}]
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {topologyKey: zone, labelSelector: {matchLabels: {app: web}}}
");
        let (web_f, batch_f) = (Facts::of(&web), Facts::of(&batch));
        // zone a holds two web pods and three batch pods, zone b one batch pod
        let bound: Vec<(&Pod, &Facts, &str)> = vec![
            (&web, &web_f, "n0"),
            (&web, &web_f, "n2"),
            (&batch, &batch_f, "n0"),
            (&batch, &batch_f, "n0"),
            (&batch, &batch_f, "n2"),
            (&batch, &batch_f, "n1"),
        ];
        let mut usage: HashMap<&str, Usage> = HashMap::default();
        for (_, f, n) in &bound {
            usage.entry(n).or_default().add(f);
        }
        // a pod added and taken away leaves the usage as it was
        usage.entry("n3").or_default().add(&batch_f);
        assert!(usage.get_mut("n3").unwrap().remove(&batch_f));
        usage.remove("n3");
        let pending = [&web, &lonely];
        let weighing: Vec<_> = (bound.iter().copied())
            .filter(|(p, f, _)| weighs_on(p, f, &pending))
            .collect();
        assert_eq!(
            weighing.len(),
            2,
            "only the web pods weigh on web and lonely"
        );
        let mut all = Scheduler::with_facts(nodes(), bound.iter().copied(), None);
        let mut kept = Scheduler::with_usage(nodes(), |n| usage.get(n), weighing, None);
        let mut placed = Vec::new();
        for p in [&web, &web, &lonely, &web, &batch, &lonely, &web] {
            let (a, b) = (all.schedule(p, None), kept.schedule(p, None));
            assert_eq!(a, b);
            placed.push(a);
        }
        // web goes to zone b (the emptiest node there, then the first of two alike) until it
        // evens out; lonely finds web in both zones then
        assert_eq!(placed[..3], [Some("n3"), Some("n1"), None]);
    }

    #[test]
    fn resources_taints_and_selectors_filter_nodes() {
        let l = labels(&[("pool", "x")]);
        let taints = [Taint {
            key: "dedicated".into(),
            value: Some("x".into()),
            effect: TaintEffect::NoSchedule,
            time_added: None,
        }];
        let nodes = vec![Node {
            name: "n",
            labels: &l,
            taints: &taints,
            allocatable: Cow::Owned(cpu(2)),
            ready: true,
            volume_limits: BTreeMap::new(),
        }];
        let plain = pod(
            "metadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {cpu: '1'}}}]}",
        );
        let tolerant = pod(
            "metadata: {name: p}\nspec: {nodeSelector: {pool: x}, tolerations: [{key: dedicated, operator: Exists}], containers: [{name: c, resources: {requests: {cpu: '1500m'}}}]}",
        );
        let elsewhere = pod(
            "metadata: {name: p}\nspec: {nodeSelector: {pool: y}, tolerations: [{operator: Exists}], containers: [{name: c}]}",
        );
        let mut s = Scheduler::new(nodes, [], None);
        assert_eq!(s.schedule(&plain, None), None);
        assert_eq!(s.schedule(&elsewhere, None), None);
        assert_eq!(s.schedule(&tolerant, None), Some("n"));
        assert_eq!(s.schedule(&tolerant, None), None, "3 CPU > 2 allocatable");
    }

    #[test]
    fn pods_count_for_spreads_and_affinity_by_namespace_and_selector() {
        let spread = pod("
metadata: {name: s, namespace: a, labels: {app: web}}
spec:
  containers: [{name: c}]
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}
  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: log}}}
");
        let near = pod("
metadata: {name: n, namespace: a}
spec:
  containers: [{name: c}]
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {topologyKey: zone, labelSelector: {matchLabels: {app: db}}, namespaces: [b]}
");
        let other = |namespace: &str, app: &str| {
            pod(&format!(
                "{{metadata: {{name: o, namespace: {namespace}, labels: {{app: {app}}}}}}}"
            ))
        };
        assert!(counts_for(&spread, &other("a", "web")));
        assert!(
            !counts_for(&spread, &other("b", "web")),
            "another namespace"
        );
        assert!(
            !counts_for(&spread, &other("a", "log")),
            "a ScheduleAnyway spread"
        );
        assert!(counts_for(&near, &other("b", "db")));
        assert!(
            !counts_for(&near, &other("a", "db")),
            "outside the term's namespaces"
        );
        assert!(!counts_for(&near, &other("b", "web")));
    }

    #[test]
    fn anti_affinity_repels_both_ways() {
        let (h1, h2) = (labels(&[("host", "1")]), labels(&[("host", "2")]));
        let lonely = pod("
metadata: {name: l, labels: {app: l}}
spec:
  containers: [{name: c}]
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {topologyKey: host, labelSelector: {matchLabels: {app: l}}}
");
        let nodes = vec![
            Node {
                name: "n1",
                labels: &h1,
                taints: &[],
                allocatable: Cow::Owned(cpu(8)),
                ready: true,
                volume_limits: BTreeMap::new(),
            },
            Node {
                name: "n2",
                labels: &h2,
                taints: &[],
                allocatable: Cow::Owned(cpu(8)),
                ready: true,
                volume_limits: BTreeMap::new(),
            },
        ];
        let mut s = Scheduler::new(nodes, [], None);
        let first = s.schedule(&lonely, None).unwrap();
        let second = s.schedule(&lonely, None).unwrap();
        assert_ne!(first, second);
        assert_eq!(s.schedule(&lonely, None), None);
    }
}
