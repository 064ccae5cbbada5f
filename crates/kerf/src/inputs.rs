//! Manifests (files, or a live cluster's objects) read into the controllers' cluster state:
//! what `kerf schedule` dry-runs and `kerf explain` explains.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kerf_api::manifest::{
    Checked, KarpenterObject, RawDocument, check_document, field_line, read_documents,
};
use kerf_api::{EC2NodeClass, NodeClaim, NodePool};
use kerf_aws::capacity::NodeSettings;
use kerf_aws::instance_type::scheduler_options;
use kerf_core::cluster::{Cluster, set_pod_scheduled};
use kerf_core::controllers::{Controllers, Settings};
use kerf_core::nodepools::daemon_runs_on;
use kerf_core::observe::{Object, Observation, finished, namespaced_key};
use kerf_core::unavailable::Pattern;
use kerf_core::workloads::{ClusterObject, VolumeObject, claim_for, claim_templates, read};
use kerf_scheduling::pods::pod_key;
use kerf_scheduling::{MinValues, Preferences};

/// What the manifests hold.
#[derive(Default)]
pub struct Inputs {
    node_pools: Vec<NodePool>,
    node_classes: HashMap<String, EC2NodeClass>,
    node_overlays: Vec<kerf_api::NodeOverlay>,
    nodeclaims: Vec<NodeClaim>,
    nodes: Vec<Node>,
    daemonsets: Vec<Pod>,
    pods: Vec<Pod>,
    pdbs: Vec<PodDisruptionBudget>,
    volumes: Vec<VolumeObject>,
    /// Claims a StatefulSet's controller would make; a declared claim of the same name wins.
    template_claims: Vec<VolumeObject>,
}

/// The offerings settings `kerf schedule` and `kerf explain` share.
#[derive(clap::Args)]
pub struct Offerings {
    /// AWS region whose zones and instance types are offered.
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    /// Treat offerings as out of capacity: CAPACITY_TYPE[:INSTANCE_TYPE[:ZONE]], `*` for any
    /// (repeatable; `spot` means every spot offering).
    #[arg(long, value_parser = Pattern::parse)]
    pub unavailable: Vec<Pattern>,
    /// Karpenter's PREFERENCE_POLICY: Respect (preferred affinities and ScheduleAnyway
    /// spreads count, relaxed one by one) or Ignore (they are dropped).
    #[arg(long, default_value = "Respect", value_parser = Preferences::parse)]
    pub preference_policy: Preferences,
    /// Karpenter's MIN_VALUES_POLICY: Strict (a NodePool whose minValues cannot be met takes
    /// no pod) or BestEffort (minValues lowered to what the instance types give).
    #[arg(long, default_value = "Strict", value_parser = MinValues::parse)]
    pub min_values_policy: MinValues,
}

impl Offerings {
    /// How manifests are read with these offerings.
    pub fn reading(&self, seed: u64, snapshot: bool) -> Reading<'_> {
        Reading {
            region: &self.region,
            unavailable: &self.unavailable,
            preference_policy: self.preference_policy,
            min_values_policy: self.min_values_policy,
            seed,
            snapshot,
        }
    }
}

/// Where the manifests' objects land and what they are taken to mean.
pub struct Reading<'a> {
    /// The AWS region whose instance types are offered.
    pub region: &'a str,
    /// Offerings treated as out of capacity.
    pub unavailable: &'a [Pattern],
    /// PREFERENCE_POLICY.
    pub preference_policy: Preferences,
    /// MIN_VALUES_POLICY.
    pub min_values_policy: MinValues,
    /// Seed of generated names.
    pub seed: u64,
    /// A snapshot of a running cluster: its NodeClaims count, and the objects' timestamps
    /// place them on the controllers' clock (wall-clock time, as the operator keeps it).
    /// Otherwise NodeClaims are left out and everything happens at time zero.
    pub snapshot: bool,
}

/// Reads manifest files (`-` is standard input); `Ok(Err(problems))` lists every invalid
/// document as `FILE:LINE: Kind/name: field.path: message`. `replicas` sets workloads'
/// replicas by name, as `kubectl scale` would.
pub fn load(
    files: &[PathBuf],
    replicas: &[(String, i64)],
) -> Result<std::result::Result<Inputs, String>> {
    let mut sources = Vec::new();
    for file in files {
        sources.push(read_file(file)?);
    }
    Ok(classify(sources, replicas))
}

/// A manifest file (`-` is standard input) as it is shown in messages, its text and its
/// documents; an error names the file, and the line and column YAML could not parse.
pub fn read_file(file: &std::path::Path) -> Result<(String, String, Vec<RawDocument>)> {
    let shown = file.display().to_string();
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(file)
    }
    .with_context(|| format!("{shown}: cannot read"))?;
    let docs = read_documents(&text).map_err(|e| {
        anyhow::anyhow!(
            "{shown}:{}:{}: cannot parse YAML: {}",
            e.line,
            e.column,
            e.message
        )
    })?;
    Ok((shown, text, docs))
}

/// Sorts documents (with the file name and text they came from, for lines in messages)
/// into inputs, or lists what is wrong with them.
pub fn classify(
    sources: Vec<(String, String, Vec<RawDocument>)>,
    replicas: &[(String, i64)],
) -> std::result::Result<Inputs, String> {
    let mut inputs = Inputs::default();
    let mut problems = String::new();
    let mut scalable_names = Vec::new();
    for (shown, text, docs) in sources {
        for mut doc in docs {
            let scalable = matches!(doc.kind(), "Deployment" | "ReplicaSet" | "StatefulSet");
            if scalable {
                scalable_names.push(doc.name().to_string());
            }
            if let Some((_, n)) = replicas
                .iter()
                .find(|(name, _)| scalable && name == doc.name())
                && let Some(spec) = doc.value.get_mut("spec").and_then(|s| s.as_object_mut())
            {
                spec.insert("replicas".into(), (*n).into());
            }
            let doc = &doc;
            let what = format!("{}/{}", doc.kind(), doc.name());
            let mut problem = |path: &str, message: &str| {
                let line = field_line(&text, doc.line, path);
                let _ = writeln!(problems, "{shown}:{line}: {what}: {path}: {message}");
            };
            match check_document(doc) {
                Checked::Valid(KarpenterObject::NodePool(np)) => inputs.node_pools.push(*np),
                Checked::Valid(KarpenterObject::EC2NodeClass(nc)) => {
                    let name = nc.metadata.name.clone().unwrap_or_default();
                    inputs.node_classes.insert(name, *nc);
                }
                Checked::Valid(KarpenterObject::NodeClaim(nc)) => inputs.nodeclaims.push(*nc),
                Checked::Valid(KarpenterObject::NodeOverlay(o)) => inputs.node_overlays.push(*o),
                Checked::Invalid(list) => {
                    for p in list {
                        problem(&p.path, &p.message);
                    }
                }
                Checked::Other => match read(doc) {
                    Ok(Some(ClusterObject::Pods(pods))) => {
                        // a StatefulSet's pods come with the claims its controller makes
                        let templates = claim_templates(doc);
                        for pod in &pods {
                            let name = pod.metadata.name.as_deref().unwrap_or_default();
                            for t in &templates {
                                let claim = Box::new(claim_for(t, name));
                                inputs.template_claims.push(VolumeObject::Claim(claim));
                            }
                        }
                        inputs.pods.extend(pods);
                    }
                    Ok(Some(ClusterObject::DaemonSet(pod))) => inputs.daemonsets.push(*pod),
                    Ok(Some(ClusterObject::Node(node))) => {
                        let bad = node_quantity_problems(&node);
                        for (path, e) in &bad {
                            problem(path, e);
                        }
                        if bad.is_empty() {
                            inputs.nodes.push(*node);
                        }
                    }
                    Ok(Some(ClusterObject::Pdb(pdb))) => inputs.pdbs.push(*pdb),
                    Ok(Some(ClusterObject::Volume(v))) => inputs.volumes.push(v),
                    Ok(None) => {}
                    Err(e) => {
                        let line = field_line(&text, doc.line, &e.path);
                        let _ = writeln!(problems, "{shown}:{line}: {e}");
                    }
                },
            }
        }
    }
    for (name, _) in replicas {
        if !scalable_names.contains(name) {
            scalable_names.sort();
            scalable_names.dedup();
            let known = if scalable_names.is_empty() {
                "there are none".to_string()
            } else {
                format!("there are: {}", scalable_names.join(", "))
            };
            let _ = writeln!(
                problems,
                "--replicas {name}: no Deployment, ReplicaSet or StatefulSet of that name ({known})"
            );
        }
    }
    if problems.is_empty() {
        Ok(inputs)
    } else {
        Err(problems)
    }
}

/// The Node's capacity and allocatable quantities that do not parse, with their paths: the
/// solver would read them as zero.
fn node_quantity_problems(node: &Node) -> Vec<(String, String)> {
    let status = node.status.as_ref();
    [
        ("capacity", status.and_then(|s| s.capacity.as_ref())),
        ("allocatable", status.and_then(|s| s.allocatable.as_ref())),
    ]
    .into_iter()
    .flat_map(|(field, list)| {
        list.into_iter().flatten().filter_map(move |(name, q)| {
            kerf_api::quantity::Quantity::parse(&q.0)
                .err()
                .map(|e| (format!("status.{field}.{name}"), e.to_string()))
        })
    })
    .collect()
}

fn since_epoch(t: &Time) -> Duration {
    Duration::from_millis(u64::try_from(t.0.as_millisecond()).unwrap_or(0))
}

/// The cluster the manifests describe, as the controllers hold it at `now`: every unbound
/// pod is pending (kube-scheduler found it no room), a node is Ready unless its status
/// says otherwise, and each DaemonSet has its pod on every node it would run on.
pub fn cluster_of(inputs: Inputs, how: &Reading<'_>, now: Duration) -> Result<Controllers> {
    // NodeOverlays given are laid over the prices, as with Karpenter's NodeOverlay gate on
    let settings = Settings {
        node_overlay: !inputs.node_overlays.is_empty(),
        preference_policy: how.preference_policy,
        min_values_policy: how.min_values_policy,
        ..Settings::default()
    };
    let mut core = Controllers::new(settings, how.seed);
    // the controllers' clock starts where the snapshot was taken; what its first look asks
    // for (the cloud's instances, node classes resolved) no dry run carries out
    let _first_look = core.poll(now);
    let at = |t: Option<&Time>| {
        t.filter(|_| how.snapshot)
            .map_or(now, |t| since_epoch(t).min(now))
    };
    observe_catalog(&mut core, &inputs, how, now)?;
    if how.snapshot {
        for claim in inputs.nodeclaims {
            core.observe(Observation::Applied(Object::nodeclaim(claim)), now);
        }
    }
    observe_volumes(&mut core, inputs.template_claims, inputs.volumes, now);
    for pdb in inputs.pdbs {
        core.observe(Observation::Applied(Object::Pdb(Box::new(pdb))), now);
    }
    for template in inputs.daemonsets {
        let key = pod_key(&template);
        let template = Box::new(template);
        core.observe(
            Observation::Applied(Object::DaemonSet { key, template }),
            now,
        );
    }
    observe_nodes_and_pods(&mut core, inputs.nodes, inputs.pods, &at, now);
    // a DaemonSet's pod is no pod event of its node's: it is observed at the node's last one
    for (at, pod) in missing_daemon_pods(core.cluster()) {
        core.observe(Observation::Applied(Object::Pod(Box::new(pod))), at);
    }
    Ok(core)
}

/// The node classes, NodeOverlays and NodePools, and each class's instance types from the
/// region's catalog: the cloud's answer, as a shell gives it.
fn observe_catalog(
    core: &mut Controllers,
    inputs: &Inputs,
    how: &Reading<'_>,
    now: Duration,
) -> Result<()> {
    let unavailable =
        |ct: &str, it: &str, zone: &str| how.unavailable.iter().any(|p| p.matches(ct, it, zone));
    let mut classes: BTreeMap<String, Option<&EC2NodeClass>> = BTreeMap::new();
    for class in inputs.node_classes.values() {
        let name = class.metadata.name.clone().unwrap_or_default();
        classes.insert(name, Some(class));
        core.observe(Observation::Applied(Object::node_class(class.clone())), now);
    }
    for overlay in &inputs.node_overlays {
        let overlay = Object::node_overlay(overlay.clone());
        core.observe(Observation::Applied(overlay), now);
    }
    for np in &inputs.node_pools {
        let class = np.spec.template.spec.node_class_ref.name.clone();
        if let std::collections::btree_map::Entry::Vacant(missing) = classes.entry(class) {
            eprintln!(
                "note: nodepool {}: EC2NodeClass {} not in the manifests; assuming its defaults",
                np.metadata.name.as_deref().unwrap_or(""),
                missing.key()
            );
            missing.insert(None);
        }
        core.observe(Observation::Applied(Object::node_pool(np.clone())), now);
    }
    for (class, read) in classes {
        let settings = read.map_or_else(NodeSettings::default, |nc| {
            NodeSettings::from_node_class(&nc.spec)
        });
        let types = kerf_aws::instance_types(how.region, &settings)?;
        let types = scheduler_options(&types, unavailable).into();
        core.observe(
            Observation::InstanceTypes {
                node_class: class,
                spec: read.cloned().map(Box::new),
                types,
            },
            now,
        );
    }
    Ok(())
}

/// Claims, volumes and storage classes, before the pods: their volumes' topology is added
/// as they are read.
fn observe_volumes(
    core: &mut Controllers,
    template_claims: Vec<VolumeObject>,
    volumes: Vec<VolumeObject>,
    now: Duration,
) {
    // files with StatefulSets but no StorageClass: their claims get the class a cluster
    // names default (EKS's gp2: EBS, WaitForFirstConsumer, any zone) rather than leaving
    // their pods out as claims of no class
    let has_class = (volumes.iter()).any(|v| matches!(v, VolumeObject::Class(_)));
    let assumed = (!has_class && !template_claims.is_empty())
        .then(|| VolumeObject::Class(Box::new(assumed_default_class())));
    for v in template_claims.into_iter().chain(volumes).chain(assumed) {
        core.observe(Observation::Applied(Object::Volume(v)), now);
    }
}

/// The nodes, then the pods still running or pending, each at the time its object tells (a
/// snapshot's): a node when it was made, a pod when it started, in that order, so
/// consolidateAfter counts from the newest. An unbound pod is one kube-scheduler found no
/// room for.
fn observe_nodes_and_pods(
    core: &mut Controllers,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    at: &dyn Fn(Option<&Time>) -> Duration,
    now: Duration,
) {
    let mut made_at = BTreeMap::new();
    for mut node in nodes {
        let status = node.status.get_or_insert_with(Default::default);
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        if !conditions.iter().any(|c| c.type_ == "Ready") {
            conditions.push(NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            });
        }
        let made = at(node.metadata.creation_timestamp.as_ref());
        made_at.insert(node.metadata.name.clone().unwrap_or_default(), made);
        core.observe(Observation::Applied(Object::Node(Box::new(node))), made);
    }
    let mut timed: Vec<(Duration, Pod)> = Vec::new();
    for mut pod in pods {
        let key = pod_key(&pod);
        if finished(&pod) {
            continue;
        }
        let started = at(pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .or(pod.metadata.creation_timestamp.as_ref()));
        match pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            Some(node) if !made_at.contains_key(&node) => {
                eprintln!(
                    "note: pod {key} is bound to node {node}, which is not in the manifests; ignored"
                );
            }
            Some(node) => timed.push((started.max(made_at[&node]), pod)),
            None => {
                set_pod_scheduled(&mut pod, "False", Some("Unschedulable"));
                timed.push((now, pod));
            }
        }
    }
    timed.sort_by_key(|(at, _)| *at);
    for (at, pod) in timed {
        core.observe(Observation::Applied(Object::Pod(Box::new(pod))), at);
    }
}

/// Each DaemonSet's pod on every node it would run on and the manifests lack, with the
/// node's last pod event as its time.
fn missing_daemon_pods(cluster: &Cluster) -> Vec<(Duration, Pod)> {
    let mut out = Vec::new();
    for (node, record) in cluster.nodes() {
        for ds in cluster.daemonsets().values() {
            let ds_name = ds.metadata.name.clone().unwrap_or_default();
            let running = cluster.pods().values().any(|p| {
                p.node.as_deref() == Some(node.as_str())
                    && p.shape
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.kind == "DaemonSet" && o.name == ds_name)
            });
            if running || !daemon_runs_on(ds, &record.labels, &record.taints) {
                continue;
            }
            let mut pod = ds.clone();
            pod.metadata.name = Some(format!("{ds_name}-{node}"));
            pod.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: ds_name,
                controller: Some(true),
                ..Default::default()
            }]);
            pod.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
            out.push((record.last_pod_event, pod));
        }
    }
    out
}

/// The objects of the kubeconfig's cluster that bear on provisioning and disruption,
/// listed (never written). Objects come as the API server stores them, so they are read
/// as they are, without the strict field checks typed manifests get.
pub async fn live() -> Result<Inputs> {
    use kerf_api::cluster_read::{self, Read};
    use kube::api::{Api, ListParams};

    let client = crate::cmd_replay::client().await?;
    async fn list<K>(client: &kube::Client) -> Result<Vec<K>>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(client.clone());
        let what = K::kind(&K::DynamicType::default()).to_string();
        Ok(api
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing {what}s"))?
            .items)
    }
    let mut inputs = Inputs {
        pods: list::<Pod>(&client).await?,
        pdbs: list::<PodDisruptionBudget>(&client).await?,
        ..Inputs::default()
    };
    inputs.nodes = list::<Node>(&client).await?;
    for ds in list::<k8s_openapi::api::apps::v1::DaemonSet>(&client).await? {
        let mut value = serde_json::to_value(&ds)?;
        value["apiVersion"] = "apps/v1".into();
        value["kind"] = "DaemonSet".into();
        match read(&RawDocument { line: 0, value }) {
            Ok(Some(ClusterObject::DaemonSet(template))) => inputs.daemonsets.push(*template),
            Ok(_) => {}
            Err(e) => eprintln!(
                "note: DaemonSet {}: {e}; left out",
                namespaced_key(&ds.metadata)
            ),
        }
    }
    for (group, version, kind) in [
        ("karpenter.sh", "v1", "NodePool"),
        ("karpenter.sh", "v1", "NodeClaim"),
        ("karpenter.k8s.aws", "v1", "EC2NodeClass"),
        ("karpenter.sh", "v1alpha1", "NodeOverlay"),
    ] {
        let Some(items) = list_kind(&client, group, version, kind).await? else {
            if kind != "NodeOverlay" {
                eprintln!("note: this cluster serves no {group}/{version} {kind}");
            }
            continue;
        };
        for value in items {
            let name = (value
                .pointer("/metadata/name")
                .and_then(serde_json::Value::as_str))
            .unwrap_or_default()
            .to_string();
            // as the operator reads them: what a newer Karpenter added is noted, not fatal
            fn note<T>(kind: &str, name: &str, read: Read<T>) -> Option<T> {
                for p in &read.gaps.problems {
                    eprintln!("note: {kind} {name}: {p}");
                }
                read.object
                    .map_err(|e| eprintln!("note: {kind} {name}: {e}; left out"))
                    .ok()
            }
            match kind {
                "NodePool" => {
                    inputs
                        .node_pools
                        .extend(note(kind, &name, cluster_read::read(kind, &value)))
                }
                "NodeClaim" => {
                    inputs
                        .nodeclaims
                        .extend(note(kind, &name, cluster_read::read(kind, &value)))
                }
                "NodeOverlay" => {
                    inputs
                        .node_overlays
                        .extend(note(kind, &name, cluster_read::read(kind, &value)))
                }
                _ => {
                    if let Some(class) = note(kind, &name, cluster_read::read(kind, &value)) {
                        inputs.node_classes.insert(name.clone(), class);
                    }
                }
            }
        }
    }
    Ok(inputs)
}

/// Every object of one kind the cluster serves, listed (never written), each as JSON with
/// its `apiVersion` and `kind`; none when the cluster serves no such kind.
pub async fn list_kind(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
) -> Result<Option<Vec<serde_json::Value>>> {
    use kube::api::{Api, DynamicObject, ListParams};
    use kube::core::GroupVersionKind;

    let gvk = GroupVersionKind::gvk(group, version, kind);
    let Ok((resource, _)) = kube::discovery::pinned_kind(client, &gvk).await else {
        return Ok(None);
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let items = api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing {kind}s"))?
        .items;
    let api_version = match group {
        "" => version.to_string(),
        g => format!("{g}/{version}"),
    };
    let mut out = Vec::new();
    for item in items {
        let mut value = serde_json::to_value(&item)?;
        value["apiVersion"] = api_version.clone().into();
        value["kind"] = kind.into();
        out.push(value);
    }
    Ok(Some(out))
}

/// The default StorageClass `kerf schedule` assumes when the files have none.
fn assumed_default_class() -> k8s_openapi::api::storage::v1::StorageClass {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gp2", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "kubernetes.io/aws-ebs",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))
    .expect("a well-formed StorageClass")
}
