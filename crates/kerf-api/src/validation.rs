//! Validation of NodePools, NodeClaims and EC2NodeClasses, with field paths.
//!
//! The rules live in two places: here, in Rust, returning every problem at once; and in the
//! generated CRDs, as Karpenter's OpenAPI constraints and `x-kubernetes-validations` CEL
//! rules. Rust checks more, as Karpenter's controllers do after the API server admitted an
//! object ([`NodePool::runtime_problems`]); the tests run one set of fixtures and rule cases
//! through both and say which rules only Kerf's Rust side holds.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use crate::common::{NodeSelectorRequirementWithMinValues, Operator, Taint};
use crate::cron::CronSchedule;
use crate::ec2nodeclass::{
    AmiFamily, EC2NodeClass, EC2NodeClassSpec, InterfaceType, KubeletConfiguration,
};
use crate::labels::restricted_label_reason;
use crate::nodeclaim::NodeClaim;
use crate::nodeoverlay::{NodeOverlay, PRICE_ADJUSTMENT_PATTERN, PRICE_PATTERN};
use crate::nodepool::NodePool;

/// One problem with a manifest: where it is and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    /// Field path from the document root, e.g. `spec.disruption.budgets[0].nodes`.
    pub path: String,
    /// What rule the value breaks, and how to fix it where that is known.
    pub message: String,
}

impl Problem {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// A resource that can check itself.
pub trait Validate {
    /// Every problem with the resource; empty when it is valid.
    fn validate(&self) -> Vec<Problem>;
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters.
const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// A label value: at most 63 characters, alphanumeric at both ends.
const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$";

static QUALIFIED_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(QUALIFIED_NAME_PATTERN).expect("static regex"));
static LABEL_VALUE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(LABEL_VALUE_PATTERN).expect("static regex"));
static DNS_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
        .expect("static regex")
});
static PRICE: LazyLock<Regex> = LazyLock::new(|| Regex::new(PRICE_PATTERN).expect("static regex"));
static PRICE_ADJUSTMENT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(PRICE_ADJUSTMENT_PATTERN).expect("static regex"));
/// A key in the `karpenter.sh` domain (its prefix, up to the first `/`, ends in it).
static KARPENTER_DOMAIN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[^/]*karpenter\.sh(/|$)").expect("static regex"));
static BUDGET_NODES: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^((100|[0-9]{1,2})%|[0-9]+)$").expect("static regex"));
static BUDGET_DURATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$").expect("static regex")
});
static VOLUME_SIZE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$")
        .expect("static regex")
});

/// Checks a label or taint key: a qualified name of at most 316 characters (63 after the prefix).
fn check_key(path: &str, key: &str, problems: &mut Vec<Problem>) {
    if key.len() > 316 || !QUALIFIED_NAME.is_match(key) {
        problems.push(Problem::new(
            path,
            format!("{key:?} is not a valid label key (a DNS prefix and '/', then at most 63 alphanumerics, '-', '_' or '.')"),
        ));
    }
}

fn check_label_value(path: &str, value: &str, problems: &mut Vec<Problem>) {
    if !LABEL_VALUE.is_match(value) {
        problems.push(Problem::new(
            path,
            format!("{value:?} is not a valid label value (at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric)"),
        ));
    }
}

fn check_name(path: &str, name: Option<&str>, problems: &mut Vec<Problem>) {
    match name {
        None | Some("") => problems.push(Problem::new(path, "is required")),
        Some(n) if n.len() > 253 || !DNS_SUBDOMAIN.is_match(n) => problems.push(Problem::new(
            path,
            format!("{n:?} must be a lowercase DNS subdomain (a-z, 0-9, '-', '.')"),
        )),
        Some(_) => {}
    }
}

/// Rules every requirement list obeys (NodePools and NodeClaims alike).
fn check_requirements(
    path: &str,
    requirements: &[NodeSelectorRequirementWithMinValues],
    restrict_keys: bool,
    problems: &mut Vec<Problem>,
) {
    for (i, r) in requirements.iter().enumerate() {
        let at = format!("{path}[{i}]");
        check_key(&format!("{at}.key"), &r.key, problems);
        if restrict_keys && let Some(reason) = restricted_label_reason(&r.key) {
            problems.push(Problem::new(format!("{at}.key"), reason));
        }
        match r.operator {
            Operator::In if r.values.is_empty() => problems.push(Problem::new(
                format!("{at}.values"),
                "requirements with operator 'In' must have a value defined",
            )),
            op if op.is_numeric() => {
                let single_int = r.values.len() == 1 && r.values[0].parse::<u64>().is_ok();
                if !single_int {
                    problems.push(Problem::new(
                        format!("{at}.values"),
                        format!("requirements with operator '{op:?}' must have a single non-negative integer value"),
                    ));
                }
            }
            _ => {}
        }
        if r.values.len() > 100 {
            problems.push(Problem::new(
                format!("{at}.values"),
                "must have at most 100 items",
            ));
        }
        if !r.operator.is_numeric() {
            for (j, v) in r.values.iter().enumerate() {
                check_label_value(&format!("{at}.values[{j}]"), v, problems);
            }
        }
        if let Some(min) = r.min_values {
            if !(1..=50).contains(&min) {
                problems.push(Problem::new(
                    format!("{at}.minValues"),
                    "must be between 1 and 50",
                ));
            } else if r.operator == Operator::In && (r.values.len() as i32) < min {
                problems.push(Problem::new(
                    format!("{at}.minValues"),
                    format!(
                        "requirements with 'minValues' must have at least that many values specified in the 'values' field ({} < {min})",
                        r.values.len()
                    ),
                ));
            }
        }
    }
}

/// Taint keys and values must be label-shaped; a key/effect pair may appear once.
fn check_taints(lists: &[(&str, &[Taint])], problems: &mut Vec<Problem>) {
    let mut seen = BTreeSet::new();
    for (path, taints) in lists {
        for (i, t) in taints.iter().enumerate() {
            let at = format!("{path}[{i}]");
            check_key(&format!("{at}.key"), &t.key, problems);
            if let Some(v) = &t.value {
                check_label_value(&format!("{at}.value"), v, problems);
            }
            if !seen.insert((t.key.clone(), t.effect)) {
                problems.push(Problem::new(
                    at,
                    format!(
                        "duplicate taint {}:{:?}: a key and effect may appear only once",
                        t.key, t.effect
                    ),
                ));
            }
        }
    }
}

impl NodePool {
    /// The problems Karpenter's NodePool controller finds in a NodePool its CRD admitted
    /// (`RuntimeValidate`: the template's labels, requirements and taints): a NodePool with
    /// any launches nothing, and its `ValidationSucceeded` says why.
    pub fn runtime_problems(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        let tmpl = &self.spec.template;
        for (key, value) in &tmpl.metadata.labels {
            let at = format!("spec.template.metadata.labels[{key}]");
            check_key(&at, key, &mut p);
            if let Some(reason) = restricted_label_reason(key) {
                p.push(Problem::new(&at, reason));
            }
            check_label_value(&at, value, &mut p);
        }
        check_requirements(
            "spec.template.spec.requirements",
            &tmpl.spec.requirements,
            true,
            &mut p,
        );
        check_taints(
            &[
                ("spec.template.spec.taints", &tmpl.spec.taints),
                (
                    "spec.template.spec.startupTaints",
                    &tmpl.spec.startup_taints,
                ),
            ],
            &mut p,
        );
        p
    }
}

impl Validate for NodePool {
    fn validate(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        check_name("metadata.name", self.metadata.name.as_deref(), &mut p);
        p.extend(self.runtime_problems());
        let spec = &self.spec;
        let tmpl = &spec.template;
        check_node_class_ref(
            "spec.template.spec.nodeClassRef",
            &tmpl.spec.node_class_ref,
            &mut p,
        );
        if let Some(w) = spec.weight
            && !(1..=100).contains(&w)
        {
            p.push(Problem::new("spec.weight", "must be between 1 and 100"));
        }
        if let Some(replicas) = spec.replicas {
            if replicas < 0 {
                p.push(Problem::new("spec.replicas", "must be ≥ 0"));
            }
            if spec.limits.keys().any(|k| k != "nodes") {
                p.push(Problem::new(
                    "spec.limits",
                    "only 'limits.nodes' is supported on static NodePools",
                ));
            }
            if spec.weight.is_some() {
                p.push(Problem::new(
                    "spec.weight",
                    "'weight' is not supported on static NodePools",
                ));
            }
        }
        for (key, q) in &spec.limits {
            if q.milli() < 0 {
                p.push(Problem::new(
                    format!("spec.limits[{key}]"),
                    "must not be negative",
                ));
            }
        }
        let budgets = &spec.disruption.budgets;
        if budgets.len() > 50 {
            p.push(Problem::new(
                "spec.disruption.budgets",
                "must have at most 50 items",
            ));
        }
        for (i, b) in budgets.iter().enumerate() {
            let at = format!("spec.disruption.budgets[{i}]");
            if !BUDGET_NODES.is_match(&b.nodes) {
                p.push(Problem::new(
                    format!("{at}.nodes"),
                    format!(
                        "must be a percentage or count (\"10%\", \"5\"), got {:?}",
                        b.nodes
                    ),
                ));
            }
            match (&b.schedule, &b.duration) {
                (Some(_), None) | (None, Some(_)) => {
                    p.push(Problem::new(&at, "'schedule' must be set with 'duration'"))
                }
                _ => {}
            }
            if let Some(schedule) = &b.schedule
                && let Err(e) = CronSchedule::parse(schedule)
            {
                p.push(Problem::new(
                    format!("{at}.schedule"),
                    format!("invalid cron schedule {schedule:?}: {e}"),
                ));
            }
            if let Some(d) = &b.duration
                && !BUDGET_DURATION.is_match(&d.to_string())
            {
                p.push(Problem::new(
                    format!("{at}.duration"),
                    "must be whole hours and/or minutes, such as 8h or 1h30m",
                ));
            }
        }
        p
    }
}

fn check_node_class_ref(path: &str, r: &crate::common::NodeClassReference, p: &mut Vec<Problem>) {
    for (field, value) in [("group", &r.group), ("kind", &r.kind), ("name", &r.name)] {
        if value.is_empty() {
            p.push(Problem::new(format!("{path}.{field}"), "must not be empty"));
        }
    }
}

impl Validate for NodeClaim {
    fn validate(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        check_name("metadata.name", self.metadata.name.as_deref(), &mut p);
        check_requirements("spec.requirements", &self.spec.requirements, false, &mut p);
        check_taints(
            &[
                ("spec.taints", &self.spec.taints),
                ("spec.startupTaints", &self.spec.startup_taints),
            ],
            &mut p,
        );
        check_node_class_ref("spec.nodeClassRef", &self.spec.node_class_ref, &mut p);
        p
    }
}

/// Tag keys Karpenter sets itself and users may not.
const RESTRICTED_TAGS: &[&str] = &[
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "karpenter.k8s.aws/ec2nodeclass",
    "eks:eks-cluster-name",
];

impl Validate for NodeOverlay {
    fn validate(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        check_name("metadata.name", self.metadata.name.as_deref(), &mut p);
        let spec = &self.spec;
        check_requirements("spec.requirements", &spec.requirements, false, &mut p);
        for (i, r) in spec.requirements.iter().enumerate() {
            let at = format!("spec.requirements[{i}]");
            if r.operator == Operator::NotIn && r.values.is_empty() {
                p.push(Problem::new(
                    format!("{at}.values"),
                    "requirements with operator 'NotIn' must have a value defined",
                ));
            }
            let allowed = [crate::labels::CAPACITY_TYPE, crate::labels::NODEPOOL];
            if !allowed.contains(&r.key.as_str()) && KARPENTER_DOMAIN.is_match(&r.key) {
                p.push(Problem::new(
                    format!("{at}.key"),
                    "label domain \"karpenter.sh\" is restricted",
                ));
            }
            if r.key == crate::labels::HOSTNAME {
                p.push(Problem::new(
                    format!("{at}.key"),
                    "label \"kubernetes.io/hostname\" is restricted",
                ));
            }
        }
        if spec.price.is_some() && spec.price_adjustment.is_some() {
            p.push(Problem::new(
                "spec",
                "cannot set both 'price' and 'priceAdjustment'",
            ));
        }
        if let Some(price) = &spec.price
            && !PRICE.is_match(price)
        {
            p.push(Problem::new(
                "spec.price",
                format!("must be a price such as \"0.0326\", got {price:?}"),
            ));
        }
        if let Some(change) = &spec.price_adjustment
            && !PRICE_ADJUSTMENT.is_match(change)
        {
            p.push(Problem::new(
                "spec.priceAdjustment",
                format!(
                    "must be a signed amount or percent (\"-10%\", \"+0.5\"; at most \"-100%\"), \
                     got {change:?}"
                ),
            ));
        }
        for key in spec.capacity.keys() {
            if ["cpu", "memory", "ephemeral-storage", "pods"].contains(&key.as_str()) {
                p.push(Problem::new(
                    format!("spec.capacity[{key}]"),
                    "invalid resource restricted",
                ));
            }
        }
        if let Some(w) = spec.weight
            && !(1..=10000).contains(&w)
        {
            p.push(Problem::new("spec.weight", "must be between 1 and 10000"));
        }
        p
    }
}

impl Validate for EC2NodeClass {
    fn validate(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        check_name("metadata.name", self.metadata.name.as_deref(), &mut p);
        check_ec2nodeclass_spec(&self.spec, &mut p);
        p
    }
}

fn check_tag_selector(
    path: &str,
    tags: &Option<std::collections::BTreeMap<String, String>>,
    p: &mut Vec<Problem>,
) {
    if let Some(tags) = tags
        && tags.iter().any(|(k, v)| k.is_empty() || v.is_empty())
    {
        p.push(Problem::new(
            path,
            "empty tag keys or values aren't supported",
        ));
    }
}

fn check_pattern(path: &str, value: &Option<String>, re: &str, what: &str, p: &mut Vec<Problem>) {
    if let Some(v) = value
        && !Regex::new(re).expect("static regex").is_match(v)
    {
        p.push(Problem::new(path, format!("{v:?} is not {what}")));
    }
}

fn check_ec2nodeclass_spec(spec: &EC2NodeClassSpec, p: &mut Vec<Problem>) {
    match (&spec.role, &spec.instance_profile) {
        (Some(_), Some(_)) | (None, None) => p.push(Problem::new(
            "spec",
            "must specify exactly one of ['role', 'instanceProfile']",
        )),
        _ => {}
    }
    for (at, value, what) in [
        ("spec.role", &spec.role, "role"),
        (
            "spec.instanceProfile",
            &spec.instance_profile,
            "instanceProfile",
        ),
    ] {
        if value.as_deref() == Some("") {
            p.push(Problem::new(at, format!("{what} cannot be empty")));
        }
    }
    check_subnet_terms(spec, p);
    check_security_group_terms(spec, p);
    check_reservation_terms(spec, p);
    check_ami_terms(spec, p);
    check_tags(spec, p);
    if let Some(k) = &spec.kubelet {
        check_kubelet(spec, k, p);
    }
    check_block_devices(spec, p);
    if let Some(hops) = spec.metadata_options.http_put_response_hop_limit
        && !(1..=64).contains(&hops)
    {
        p.push(Problem::new(
            "spec.metadataOptions.httpPutResponseHopLimit",
            "must be between 1 and 64",
        ));
    }
}

/// `spec.subnetSelectorTerms`: 1 to 30 terms, each with tags or an id, not both.
fn check_subnet_terms(spec: &EC2NodeClassSpec, p: &mut Vec<Problem>) {
    if spec.subnet_selector_terms.is_empty() || spec.subnet_selector_terms.len() > 30 {
        p.push(Problem::new(
            "spec.subnetSelectorTerms",
            "must have between 1 and 30 items",
        ));
    }
    for (i, t) in spec.subnet_selector_terms.iter().enumerate() {
        let at = format!("spec.subnetSelectorTerms[{i}]");
        if t.tags.is_none() && t.id.is_none() {
            p.push(Problem::new(
                &at,
                "expected at least one, got none, ['tags', 'id']",
            ));
        }
        if t.id.is_some() && t.tags.is_some() {
            p.push(Problem::new(&at, "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term"));
        }
        check_tag_selector(&format!("{at}.tags"), &t.tags, p);
        check_pattern(
            &format!("{at}.id"),
            &t.id,
            "^subnet-[0-9a-z]+$",
            "a subnet id (subnet-…)",
            p,
        );
    }
}

/// `spec.securityGroupSelectorTerms`: 1 to 30 terms, each with tags, an id or a name.
fn check_security_group_terms(spec: &EC2NodeClassSpec, p: &mut Vec<Problem>) {
    if spec.security_group_selector_terms.is_empty()
        || spec.security_group_selector_terms.len() > 30
    {
        p.push(Problem::new(
            "spec.securityGroupSelectorTerms",
            "must have between 1 and 30 items",
        ));
    }
    for (i, t) in spec.security_group_selector_terms.iter().enumerate() {
        let at = format!("spec.securityGroupSelectorTerms[{i}]");
        if t.tags.is_none() && t.id.is_none() && t.name.is_none() {
            p.push(Problem::new(
                &at,
                "expected at least one, got none, ['tags', 'id', 'name']",
            ));
        }
        if t.id.is_some() && (t.tags.is_some() || t.name.is_some()) {
            p.push(Problem::new(&at, "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"));
        }
        if t.name.is_some() && (t.tags.is_some() || t.id.is_some()) {
            p.push(Problem::new(&at, "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"));
        }
        check_tag_selector(&format!("{at}.tags"), &t.tags, p);
        check_pattern(
            &format!("{at}.id"),
            &t.id,
            "^sg-[0-9a-z]+$",
            "a security group id (sg-…)",
            p,
        );
    }
}

/// `spec.capacityReservationSelectorTerms`: each with tags, an id or match criteria.
fn check_reservation_terms(spec: &EC2NodeClassSpec, p: &mut Vec<Problem>) {
    for (i, t) in spec.capacity_reservation_selector_terms.iter().enumerate() {
        let at = format!("spec.capacityReservationSelectorTerms[{i}]");
        if t.tags.is_none() && t.id.is_none() && t.instance_match_criteria.is_none() {
            p.push(Problem::new(
                &at,
                "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
            ));
        }
        if t.id.is_some()
            && (t.tags.is_some() || t.owner_id.is_some() || t.instance_match_criteria.is_some())
        {
            p.push(Problem::new(&at, "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term"));
        }
        check_tag_selector(&format!("{at}.tags"), &t.tags, p);
        check_pattern(
            &format!("{at}.id"),
            &t.id,
            "^cr-[0-9a-z]+$",
            "a capacity reservation id (cr-…)",
            p,
        );
        check_pattern(
            &format!("{at}.ownerID"),
            &t.owner_id,
            "^[0-9]{12}$",
            "a 12-digit account id",
            p,
        );
    }
}

/// `spec.amiSelectorTerms` and `spec.amiFamily`: an alias alone, or terms with a family.
fn check_ami_terms(spec: &EC2NodeClassSpec, p: &mut Vec<Problem>) {
    let terms = &spec.ami_selector_terms;
    if terms.is_empty() || terms.len() > 30 {
        p.push(Problem::new(
            "spec.amiSelectorTerms",
            "must have between 1 and 30 items",
        ));
    }
    let has_alias = terms.iter().any(|t| t.alias.is_some());
    if has_alias && terms.len() != 1 {
        p.push(Problem::new(
            "spec.amiSelectorTerms",
            "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
        ));
    }
    for (i, t) in terms.iter().enumerate() {
        let at = format!("spec.amiSelectorTerms[{i}]");
        let others = t.tags.is_some() || t.name.is_some() || t.owner.is_some();
        if t.tags.is_none()
            && t.id.is_none()
            && t.name.is_none()
            && t.alias.is_none()
            && t.ssm_parameter.is_none()
        {
            p.push(Problem::new(
                &at,
                "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
            ));
        }
        if t.id.is_some() && (t.alias.is_some() || others) {
            p.push(Problem::new(&at, "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"));
        }
        if t.alias.is_some() && (t.id.is_some() || others) {
            p.push(Problem::new(&at, "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"));
        }
        check_tag_selector(&format!("{at}.tags"), &t.tags, p);
        check_pattern(
            &format!("{at}.id"),
            &t.id,
            "^ami-[0-9a-z]+$",
            "an AMI id (ami-…)",
            p,
        );
        if let Some(alias) = &t.alias {
            check_alias(&format!("{at}.alias"), alias, p);
        }
    }
    if spec.ami_family.is_none() && !has_alias {
        p.push(Problem::new(
            "spec.amiFamily",
            "amiFamily is required when amiSelectorTerms does not specify an alias",
        ));
    }
    // an alias names its family: a family set beside it must be that one, or Custom
    for alias in terms.iter().filter_map(|t| t.alias.as_deref()) {
        let aliased = alias.split('@').next().unwrap_or("");
        let Some(named) = AmiFamily::from_alias(aliased) else {
            continue;
        };
        if spec
            .ami_family
            .is_some_and(|f| f != named && f != AmiFamily::Custom)
        {
            let article = if matches!(named, AmiFamily::AL2 | AmiFamily::AL2023) {
                "an"
            } else {
                "a"
            };
            p.push(Problem::new(
                "spec.amiFamily",
                format!(
                    "if set, amiFamily must be '{named:?}' or 'Custom' when using {article} {named:?} alias"
                ),
            ));
        }
    }
}

/// `spec.tags`: no empty keys and none of the tags Karpenter keeps for itself.
fn check_tags(spec: &EC2NodeClassSpec, p: &mut Vec<Problem>) {
    for key in spec.tags.keys() {
        let at = format!("spec.tags[{key}]");
        if key.is_empty() {
            p.push(Problem::new(&at, "empty tag keys aren't supported"));
        } else if key.starts_with("kubernetes.io/cluster") {
            p.push(Problem::new(
                &at,
                "tag contains a restricted tag matching kubernetes.io/cluster/",
            ));
        } else if RESTRICTED_TAGS.contains(&key.as_str()) {
            p.push(Problem::new(
                &at,
                format!("tag contains a restricted tag matching {key}"),
            ));
        }
    }
}

/// `spec.blockDeviceMappings`: at most 50, one root volume, sizes and rates in range.
fn check_block_devices(spec: &EC2NodeClassSpec, p: &mut Vec<Problem>) {
    let roots = spec
        .block_device_mappings
        .iter()
        .filter(|b| b.root_volume)
        .count();
    if roots > 1 {
        p.push(Problem::new(
            "spec.blockDeviceMappings",
            "must have only one blockDeviceMappings with rootVolume",
        ));
    }
    if spec.block_device_mappings.len() > 50 {
        p.push(Problem::new(
            "spec.blockDeviceMappings",
            "must have at most 50 items",
        ));
    }
    for (i, b) in spec.block_device_mappings.iter().enumerate() {
        let at = format!("spec.blockDeviceMappings[{i}].ebs");
        if let Some(ebs) = &b.ebs {
            if ebs.snapshot_id.is_none() && ebs.volume_size.is_none() {
                p.push(Problem::new(
                    &at,
                    "snapshotID or volumeSize must be defined",
                ));
            }
            if let Some(size) = &ebs.volume_size
                && !VOLUME_SIZE.is_match(size)
            {
                p.push(Problem::new(
                    format!("{at}.volumeSize"),
                    format!(
                        "{size:?} must be a size in Gi, G, Ti or T of at most 64T (e.g. 100Gi)"
                    ),
                ));
            }
            if let Some(rate) = ebs.volume_initialization_rate
                && !(100..=300).contains(&rate)
            {
                p.push(Problem::new(
                    format!("{at}.volumeInitializationRate"),
                    "must be between 100 and 300",
                ));
            }
            if ebs.volume_initialization_rate.is_some()
                && ebs.snapshot_id.as_deref().unwrap_or("").is_empty()
            {
                p.push(Problem::new(
                    &at,
                    "snapshotID must be set when volumeInitializationRate is set",
                ));
            }
        }
    }
    check_launch_options(spec, p);
}

/// The v1.15 launch fields: placement group, prefixes, interfaces, connection tracking.
fn check_launch_options(spec: &EC2NodeClassSpec, p: &mut Vec<Problem>) {
    if let Some(pg) = &spec.placement_group_selector {
        let at = "spec.placementGroupSelector";
        match (&pg.name, &pg.id) {
            (None, None) => p.push(Problem::new(
                at,
                "expected at least one, got none, ['name', 'id']",
            )),
            (Some(_), Some(_)) => {
                p.push(Problem::new(at, "'name' and 'id' are mutually exclusive"))
            }
            _ => {}
        }
        if pg.name.as_deref() == Some("") {
            p.push(Problem::new(format!("{at}.name"), "must not be empty"));
        }
        if let Some(id) = &pg.id
            && !id.strip_prefix("pg-").is_some_and(|rest| {
                !rest.is_empty()
                    && rest
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
            })
        {
            p.push(Problem::new(
                format!("{at}.id"),
                format!("{id:?} must match ^pg-[0-9a-z]+$"),
            ));
        }
    }
    if spec.ip_prefix_count.is_some_and(|n| n < 0) {
        p.push(Problem::new("spec.ipPrefixCount", "must not be negative"));
    }
    if let Some(nics) = &spec.network_interfaces {
        let at = "spec.networkInterfaces";
        if nics.len() > 150 {
            p.push(Problem::new(at, "must have at most 150 items"));
        }
        for (i, n) in nics.iter().enumerate() {
            for (field, v) in [
                ("networkCardIndex", n.network_card_index),
                ("deviceIndex", n.device_index),
            ] {
                if v < 0 {
                    p.push(Problem::new(
                        format!("{at}[{i}].{field}"),
                        "must not be negative",
                    ));
                }
            }
        }
        if !nics.is_empty()
            && !nics.iter().any(|n| {
                n.network_card_index == 0
                    && n.device_index == 0
                    && n.interface_type == InterfaceType::Interface
            })
        {
            p.push(Problem::new(
                at,
                "networkInterfaces must include a primary interface with interfaceType='interface'",
            ));
        }
        let duplicate = nics.iter().any(|x| {
            let same_slot = nics
                .iter()
                .filter(|y| {
                    y.network_card_index == x.network_card_index && y.device_index == x.device_index
                })
                .count();
            let efa_on_card = nics
                .iter()
                .filter(|y| {
                    y.network_card_index == x.network_card_index
                        && y.interface_type == InterfaceType::EfaOnly
                })
                .count();
            same_slot != 1 || (x.interface_type == InterfaceType::EfaOnly && efa_on_card != 1)
        });
        if duplicate {
            p.push(Problem::new(
                at,
                "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card",
            ));
        }
    }
    if let Some(ct) = &spec.connection_tracking {
        let at = "spec.connectionTracking";
        if ct.tcp_established_timeout.is_none()
            && ct.udp_stream_timeout.is_none()
            && ct.udp_timeout.is_none()
        {
            p.push(Problem::new(
                at,
                "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
            ));
        }
        for (field, v, range) in [
            (
                "tcpEstablishedTimeout",
                ct.tcp_established_timeout,
                60..=432_000,
            ),
            ("udpStreamTimeout", ct.udp_stream_timeout, 60..=180),
            ("udpTimeout", ct.udp_timeout, 30..=60),
        ] {
            if let Some(v) = v
                && !range.contains(&v)
            {
                p.push(Problem::new(
                    format!("{at}.{field}"),
                    format!("must be between {} and {}", range.start(), range.end()),
                ));
            }
        }
    }
}

fn check_alias(path: &str, alias: &str, p: &mut Vec<Problem>) {
    let Some((family, version)) = alias.split_once('@').filter(|(f, v)| {
        !f.is_empty() && !v.is_empty() && f.chars().all(|c| c.is_ascii_alphanumeric())
    }) else {
        p.push(Problem::new(
            path,
            "'alias' is improperly formatted, must match the format 'family@version'",
        ));
        return;
    };
    if alias.len() > 30 {
        p.push(Problem::new(path, "must be at most 30 characters"));
    }
    match AmiFamily::from_alias(family) {
        None => p.push(Problem::new(
            path,
            "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",
        )),
        Some(AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025)
            if version != "latest" =>
        {
            p.push(Problem::new(path, "windows families may only specify version 'latest'"))
        }
        Some(_) => {}
    }
}

/// What Karpenter's EC2NodeClass validation refuses in `spec.kubelet` (the API server takes
/// any object there): each problem at the path its message names, or why the class's
/// family or Kerf's gates keep it from launching.
fn check_kubelet(spec: &EC2NodeClassSpec, k: &KubeletConfiguration, p: &mut Vec<Problem>) {
    // each message of Karpenter's starts with the path it is about
    let at_path = |problem: &str| -> Problem {
        match problem.split_once(": ") {
            Some((at, rule)) if !at.contains(' ') => Problem::new(at, rule),
            _ => Problem::new(
                "spec.kubelet",
                problem.strip_prefix("spec.kubelet ").unwrap_or(problem),
            ),
        }
    };
    p.extend(k.problems().iter().map(|problem| at_path(problem)));
    if let Some(refusal) = k.refusal(spec.family())
        && refusal.reason != "InvalidKubeletConfiguration"
    {
        p.extend(refusal.message.split("; ").map(at_path));
    }
}

// ---- The same rules as CEL, for the CRDs ----

fn rule(rule: &str, message: &str) -> Value {
    json!({"rule": rule, "message": message})
}

/// CEL over a tag map used as a selector.
pub fn tag_selector_rules() -> Value {
    json!([rule(
        "self.all(k, k != '' && self[k] != '')",
        "empty tag keys or values aren't supported"
    )])
}
