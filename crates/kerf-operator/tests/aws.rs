//! `kerf-operator --cloud-provider aws` against a real control plane and moto's EC2, SSM and
//! IAM: seed 004's EC2NodeClass is resolved into a Ready status, its NodePool's pending pods
//! become an instance launched through EC2 Fleet, the test plays the kubelet registering that
//! instance's Node, the pods run on it; a spot interruption warning on the SQS queue replaces
//! the node (a malformed message beside it is logged and dropped); deleting the NodeClaim
//! terminates the instance; an instance whose NodeClaim never existed is garbage collected.

#[path = "../../kerf-aws-provider/tests/support/mod.rs"]
mod moto;
// both supports pick their servers' ports with the one `port.rs`
#[allow(clippy::duplicate_mod)]
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_ec2::types::{InstanceStateName, InstanceType, ResourceType};
use moto::{
    CLUSTER, Moto, REGION, SEED_AMI_PARAMETERS, check_launched, network, seed_node_class, tags,
};
use serde_json::{Value, json};
use support::{ControlPlane, Operator, chart_env, http_get, root, wait_for};

/// The version scripts/e2e-cluster.sh builds.
const KUBERNETES: &str = "1.35";
const LIMIT: Duration = Duration::from_secs(120);
/// How long the operator remembers insufficient capacity here.
const MEMORY: Duration = Duration::from_secs(45);
const OPERATOR: &str = env!("CARGO_BIN_EXE_kerf-operator");

fn json_of(cp: &ControlPlane, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&cp.kubectl_ok(&all, None)).expect("kubectl json")
}

fn condition(object: &Value, type_: &str) -> Option<String> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
        .map(str::to_string)
}

fn running(cp: &ControlPlane) -> usize {
    json_of(cp, &["get", "pods", "-l", "app=inflate"])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["status"]["phase"] == "Running")
        .count()
}

/// The instances moto runs for a NodeClaim, with their states.
async fn instances_of(ec2: &aws_sdk_ec2::Client, claim: &str) -> Vec<(String, InstanceStateName)> {
    let out = ec2
        .describe_instances()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag:karpenter.sh/nodeclaim")
                .values(claim)
                .build(),
        )
        .send()
        .await
        .expect("describe instances");
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| {
            (
                i.instance_id().unwrap_or_default().to_string(),
                i.state()
                    .and_then(|s| s.name())
                    .cloned()
                    .unwrap_or(InstanceStateName::Pending),
            )
        })
        .collect()
}

/// Whether a NodeClaim has its instance and the labels of it (two patches: status, then
/// labels).
fn launched_and_labelled(claim: &Value) -> bool {
    claim["status"]["providerID"]
        .as_str()
        .is_some_and(|p| p.starts_with("aws:///"))
        && claim["metadata"]["labels"]["node.kubernetes.io/instance-type"].is_string()
}

/// A NodeClaim (of the NodePool `pool`, when given; other than `except`) that has its
/// instance and the labels of it.
fn launched_claim(cp: &ControlPlane, pool: Option<&str>, except: &str) -> Option<Value> {
    let selector = pool.map(|p| format!("karpenter.sh/nodepool={p}"));
    let mut args = vec!["get", "nodeclaims"];
    if let Some(s) = &selector {
        args.extend(["-l", s.as_str()]);
    }
    json_of(cp, &args)["items"]
        .as_array()?
        .iter()
        .find(|c| c["metadata"]["name"] != except && launched_and_labelled(c))
        .cloned()
}

/// Registers a Node for every launched NodeClaim not in `registered` yet, as each instance's
/// kubelet would: a packing may spread pods over more than one new node.
fn register_every_launched(cp: &ControlPlane, registered: &mut BTreeSet<String>) {
    let claims = json_of(cp, &["get", "nodeclaims"]);
    for claim in claims["items"].as_array().into_iter().flatten() {
        let name = claim["metadata"]["name"].as_str().unwrap_or_default();
        if launched_and_labelled(claim) && !registered.contains(name) {
            registered.insert(register(cp, claim));
        }
    }
}

/// The NodeClaim's instance as EC2 describes it, checked against its EC2NodeClass as the API
/// server holds it (`check_launched`), and the NodeClaim not `Drifted`: a fresh node must match
/// the class it was launched from.
async fn check_claim(cp: &ControlPlane, ec2: &aws_sdk_ec2::Client, claim: &Value) {
    let name = claim["metadata"]["name"].as_str().expect("name");
    let claim = json_of(cp, &["get", "nodeclaim", name]);
    let instance = claim["status"]["providerID"]
        .as_str()
        .and_then(|p| p.rsplit('/').next())
        .expect("a provider id");
    let class_name = claim["spec"]["nodeClassRef"]["name"]
        .as_str()
        .expect("a class");
    let class: kerf_api::EC2NodeClass =
        serde_json::from_value(json_of(cp, &["get", "ec2nodeclass", class_name]))
            .expect("the class reads");
    let pool = claim["metadata"]["labels"]["karpenter.sh/nodepool"]
        .as_str()
        .expect("a pool");
    // the NodeClaim's tag is written after the launch, a second apart per instance
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match check_launched(ec2, instance, class_name, &class, name, pool).await {
            Ok(()) => break,
            Err(wrong) if std::time::Instant::now() < deadline => {
                let untagged =
                    wrong.len() == 1 && wrong[0].starts_with("tag karpenter.sh/nodeclaim=");
                assert!(
                    untagged,
                    "{name}'s instance {instance} is not its class's: {wrong:#?}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(wrong) => panic!("{name}'s instance {instance} is not its class's: {wrong:#?}"),
        }
    }
    assert_ne!(
        condition(&claim, "Drifted").as_deref(),
        Some("True"),
        "{claim}"
    );
}

/// What a kubelet does when its instance boots: registers the Node with the provider id, the
/// labels its user data passes (NodePool, capacity type) and its own, and the capacity the
/// NodeClaim reports (kwok then keeps it Ready). The instance type's labels are Kerf's to add.
fn register(cp: &ControlPlane, claim: &Value) -> String {
    let name = claim["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    let from_user_data = ["karpenter.sh/nodepool", "karpenter.sh/capacity-type"];
    let mut labels = serde_json::Map::new();
    for key in from_user_data {
        labels.insert(key.into(), claim["metadata"]["labels"][key].clone());
    }
    labels.insert("kubernetes.io/hostname".into(), json!(name));
    labels.insert("kubernetes.io/os".into(), json!("linux"));
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"providerID": claim["status"]["providerID"]},
        "status": {
            "capacity": claim["status"]["capacity"],
            "allocatable": claim["status"]["allocatable"],
        },
    });
    cp.kubectl_ok(&["create", "-f", "-"], Some(node.to_string().as_bytes()));
    name
}

/// moto as seed 004's cluster has it on AWS: the EKS-optimized AMIs' public parameters, the
/// tagged network, the node role, the EKS cluster and its interruption queue. Returns moto,
/// its EC2 client and the first subnet.
async fn seeded_moto(name: &str) -> (Moto, aws_sdk_ec2::Client, String) {
    // the aliases read the parameters of the control plane's Kubernetes version
    let parameters: Vec<(String, &str)> = SEED_AMI_PARAMETERS
        .iter()
        .map(|(name, id)| (name.replace("1.33", KUBERNETES), *id))
        .collect();
    let parameters: Vec<(&str, &str)> = parameters.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let mut moto = Moto::start(name, &parameters);
    let config = moto.config().await;
    let (subnet, _, _) = network(&aws_sdk_ec2::Client::new(&config)).await;
    let role = seed_node_class().spec.role.expect("the seed names a role");
    let iam = aws_sdk_iam::Client::new(&config);
    iam.create_role()
        .role_name(&role)
        .assume_role_policy_document(r#"{"Version":"2012-10-17","Statement":[]}"#)
        .send()
        .await
        .expect("create role");

    // only the cluster's name is given: its endpoint, CA and service CIDR come from EKS
    moto.create_cluster().await;
    aws_sdk_sqs::Client::new(&config)
        .create_queue()
        .queue_name(CLUSTER)
        .send()
        .await
        .expect("create the interruption queue");
    moto.enforce_iam(
        &format!("KarpenterControllerRole-{CLUSTER}"),
        &controller_policy(),
    )
    .await;
    let ec2 = aws_sdk_ec2::Client::new(&moto.config().await);
    (moto, ec2, subnet)
}

/// The controller policy as `deploy/aws/controller-policy.json` grants it, filled in for this
/// cluster, with every statement's `Resource` widened to `*`: moto checks each call's action
/// (and the conditions it can read) against `*`, never against the resource it touches, so a
/// scoped statement would match nothing there.
fn controller_policy() -> String {
    let text = std::fs::read_to_string(root().join("deploy/aws/controller-policy.json"))
        .expect("deploy/aws/controller-policy.json");
    let text = text
        .replace("${AWS_PARTITION}", "aws")
        .replace("${AWS_DEFAULT_REGION}", REGION)
        .replace("${AWS_ACCOUNT_ID}", "123456789012")
        .replace("${CLUSTER_NAME}", CLUSTER);
    let mut policy: Value = serde_json::from_str(&text).expect("the policy is JSON");
    for statement in policy["Statement"].as_array_mut().expect("statements") {
        statement["Resource"] = json!("*");
    }
    policy.to_string()
}

/// Every action the controller policy grants.
fn granted_actions() -> BTreeSet<String> {
    let policy: Value = serde_json::from_str(&controller_policy()).expect("the policy");
    policy["Statement"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| match &s["Action"] {
            Value::String(a) => vec![a.clone()],
            actions => actions
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect(),
        })
        .collect()
}

/// The actions the operator called under its role, after checking that moto refused none.
fn actions_called(moto: &Moto) -> BTreeSet<String> {
    let key = moto.controller().access_key_id().to_string();
    let calls: Vec<_> = moto.calls().into_iter().filter(|c| c.key == key).collect();
    let refused: BTreeSet<&str> = calls
        .iter()
        .filter(|c| !c.allowed)
        .map(|c| c.action.as_str())
        .collect();
    assert!(
        refused.is_empty(),
        "the controller policy lacks what the operator called: {refused:?}"
    );
    calls.into_iter().map(|c| c.action).collect()
}

/// A control plane on Karpenter's CRDs with seed 004 applied, and `kerf-operator
/// --cloud-provider aws` on it as the chart runs it (its ServiceAccount, no permission beyond
/// the chart's), pointed at moto.
fn aws_operator(name: &str, moto: &Moto) -> (ControlPlane, Operator) {
    let cp = aws_cluster(name);
    let env = aws_env(&cp, moto);
    let op = Operator::spawn(&cp, OPERATOR, 1, &["--cloud-provider", "aws"], &env);
    (cp, op)
}

/// A control plane on Karpenter's CRDs with seed 004 applied.
fn aws_cluster(name: &str) -> ControlPlane {
    let cp = ControlPlane::start(name);
    // on EKS, Kerf replaces Karpenter on the CRDs Karpenter installed: its EC2NodeClass
    // schema (stricter than Kerf's) must take every status Kerf writes
    cp.install_karpenter_crds();
    let seed =
        std::fs::read(root().join("fixtures/seeds/004-getting-started.yaml")).expect("seed 004");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&seed));
    cp
}

/// The environment the chart gives `kerf-operator --cloud-provider aws` on `cp`, with the
/// controller role's credentials for moto.
fn aws_env(cp: &ControlPlane, moto: &Moto) -> Vec<(&'static str, String)> {
    let mut env = chart_env(cp, false);
    // the controller role's credentials, as IRSA or Pod Identity hands them out
    let credentials = moto.controller();
    if let Some(token) = credentials.session_token() {
        env.push(("AWS_SESSION_TOKEN", token.to_string()));
    }
    env.extend([
        ("AWS_ENDPOINT_URL", moto.endpoint()),
        ("AWS_ACCESS_KEY_ID", credentials.access_key_id().to_string()),
        (
            "AWS_SECRET_ACCESS_KEY",
            credentials.secret_access_key().to_string(),
        ),
        ("AWS_REGION", REGION.to_string()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
        ("CLUSTER_NAME", CLUSTER.to_string()),
        ("INTERRUPTION_QUEUE", CLUSTER.to_string()),
        // spot's return is waited for: 45 s of memory rather than Karpenter's 3 minutes
        (
            "UNAVAILABLE_OFFERINGS_TTL",
            format!("{}s", MEMORY.as_secs()),
        ),
    ]);
    env
}

#[tokio::test(flavor = "multi_thread")]
async fn the_seed_launches_an_instance_in_moto_that_runs_its_pods_and_is_terminated_with_its_nodeclaim()
 {
    let (moto, ec2, subnet) = seeded_moto("operator").await;
    let config = moto.config().await;
    let iam = aws_sdk_iam::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    let queue_url = sqs
        .get_queue_url()
        .queue_name(CLUSTER)
        .send()
        .await
        .expect("the interruption queue")
        .queue_url()
        .expect("url")
        .to_string();
    let (cp, op) = aws_operator("aws", &moto);
    let log = || std::fs::read_to_string(&op.log).unwrap_or_default();

    // the class resolves: Ready, with the seed's subnets and an instance profile for its role
    let class = wait_for(
        "the EC2NodeClass Ready",
        LIMIT,
        || {
            let c = json_of(&cp, &["get", "ec2nodeclass", "default"]);
            (condition(&c, "Ready").as_deref() == Some("True")).then_some(c)
        },
        || {
            format!(
                "{}\n{}",
                json_of(&cp, &["get", "ec2nodeclass", "default"]),
                log()
            )
        },
    );
    assert_eq!(class["status"]["subnets"].as_array().map(Vec::len), Some(2));
    assert!(
        class["status"]["instanceProfile"]
            .as_str()
            .is_some_and(|p| p.starts_with(CLUSTER)),
        "{class}"
    );

    // an instance the cluster never asked for: garbage collection terminates it
    let orphan = ec2
        .run_instances()
        .image_id("ami-ekslinux")
        .instance_type(InstanceType::M5Large)
        .subnet_id(&subnet)
        .min_count(1)
        .max_count(1)
        .tag_specifications(tags(
            &[
                ("karpenter.sh/nodeclaim", "default-ghost"),
                ("karpenter.sh/nodepool", "default"),
                ("eks:eks-cluster-name", CLUSTER),
            ],
            ResourceType::Instance,
        ))
        .send()
        .await
        .expect("run an orphan");
    assert_eq!(orphan.instances().len(), 1);

    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=5"], None);
    let claim = wait_for(
        "a launched NodeClaim",
        LIMIT,
        || launched_claim(&cp, None, ""),
        || format!("{}\n{}", cp.kubectl_ok(&["get", "nodeclaims"], None), log()),
    );
    let name = claim["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    let provider_id = claim["status"]["providerID"]
        .as_str()
        .expect("id")
        .to_string();
    // (waits for the NodeClaim's tag, written after the launch)
    check_claim(&cp, &ec2, &claim).await;
    let launched = instances_of(&ec2, &name).await;
    assert_eq!(launched.len(), 1, "{launched:?}");
    assert!(
        provider_id.ends_with(&launched[0].0),
        "{provider_id} {launched:?}"
    );
    assert_eq!(
        claim["metadata"]["labels"]["karpenter.sh/capacity-type"],
        "on-demand"
    );

    let node = register(&cp, &claim);
    // registration gives the node its NodeClaim's labels
    let synced = wait_for(
        "the node labelled",
        LIMIT,
        || {
            let n = json_of(&cp, &["get", "node", &node]);
            n["metadata"]["labels"]["node.kubernetes.io/instance-type"]
                .is_string()
                .then_some(n)
        },
        || cp.kubectl_ok(&["get", "node", &node, "--show-labels"], None),
    );
    let labels = &synced["metadata"]["labels"];
    for key in [
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
    ] {
        assert_eq!(labels[key], claim["metadata"]["labels"][key], "{key}");
    }
    let family = labels["karpenter.k8s.aws/instance-family"]
        .as_str()
        .unwrap_or_default();
    assert!(
        !family.is_empty()
            && labels["node.kubernetes.io/instance-type"]
                .as_str()
                .is_some_and(|t| t.starts_with(&format!("{family}."))),
        "{labels}"
    );
    wait_for(
        "5 pods running on the registered node",
        LIMIT,
        || (running(&cp) == 5).then_some(()),
        || cp.kubectl_ok(&["get", "pods", "-o", "wide"], None),
    );
    wait_for(
        "the NodeClaim Ready",
        LIMIT,
        || {
            let c = json_of(&cp, &["get", "nodeclaim", &name]);
            (condition(&c, "Ready").as_deref() == Some("True")).then_some(())
        },
        || cp.kubectl_ok(&["get", "nodeclaims"], None),
    );

    let terminated = |claim: String| {
        let ec2 = ec2.clone();
        move || {
            let ec2 = ec2.clone();
            let claim = claim.clone();
            let states = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current()
                    .block_on(async move { instances_of(&ec2, &claim).await })
            });
            (states.len() == 1 && states[0].1 == InstanceStateName::Terminated).then_some(())
        }
    };
    // the orphan is gone by now (garbage collection runs every 30 s)
    wait_for(
        "the orphan terminated",
        LIMIT,
        terminated("default-ghost".to_string()),
        log,
    );
    // the instances have been listed since the launch (that is how the orphan was found):
    // the NodeClaim is still the class's, not Drifted by what EC2 reports of it
    check_claim(&cp, &ec2, &claim).await;

    // a spot interruption warning for the instance replaces its node; a malformed message
    // beside it is logged and dropped
    let instance_id = launched[0].0.clone();
    let warning = json!({
        "version": "0", "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
        "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
        "account": "123456789012", "time": "2026-11-25T10:00:00Z", "region": REGION,
        "resources": [format!("arn:aws:ec2:ap-northeast-2a:instance/{instance_id}")],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"},
    });
    for body in ["{not json".to_string(), warning.to_string()] {
        sqs.send_message()
            .queue_url(&queue_url)
            .message_body(body)
            .send()
            .await
            .expect("send");
    }
    let replacement = wait_for(
        "a replacement NodeClaim launched",
        LIMIT,
        || launched_claim(&cp, None, &name),
        || format!("{}\n{}", cp.kubectl_ok(&["get", "nodeclaims"], None), log()),
    );
    assert!(
        log().contains("failed parsing interruption message"),
        "{}",
        log()
    );
    wait_for(
        "the interrupted instance terminated",
        LIMIT,
        terminated(name.clone()),
        log,
    );
    check_claim(&cp, &ec2, &replacement).await;
    register(&cp, &replacement);
    wait_for(
        "5 pods running on the replacement",
        LIMIT,
        || (running(&cp) == 5).then_some(()),
        || cp.kubectl_ok(&["get", "pods", "-o", "wide"], None),
    );

    let second = replacement["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();

    // three pods that each need a node of their own: three NodeClaims of one shape, launched
    // as one fleet request of three instances, each tagged with its own NodeClaim
    let fleets = || {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current()
                .block_on(ec2.describe_fleets().send())
                .map(|out| out.fleets().len())
                .expect("describe fleets")
        })
    };
    let fleets_before = fleets();
    let apart = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "apart", "namespace": "default"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "apart"}},
            "template": {
                "metadata": {"labels": {"app": "apart"}},
                "spec": {
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchExpressions": [
                            {"key": "app", "operator": "In", "values": ["apart", "inflate"]},
                        ]},
                    }]}},
                    "containers": [{
                        "name": "pause", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "100m"}},
                    }],
                },
            },
        },
    });
    cp.kubectl_ok(&["apply", "-f", "-"], Some(apart.to_string().as_bytes()));
    let apart_claims = || {
        (json_of(&cp, &["get", "nodeclaims"])["items"].as_array())
            .into_iter()
            .flatten()
            .filter(|c| c["metadata"]["name"] != second.as_str() && launched_and_labelled(c))
            .cloned()
            .collect::<Vec<Value>>()
    };
    let burst = wait_for(
        "three NodeClaims launched for the pods apart",
        LIMIT,
        || Some(apart_claims()).filter(|c| c.len() == 3),
        || format!("{}\n{}", cp.kubectl_ok(&["get", "nodeclaims"], None), log()),
    );
    let said = |m: &str| {
        (log().lines())
            .filter(|l| l.contains(m))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        fleets(),
        fleets_before + 1,
        "one fleet request for the three: {}\n{}",
        said("created nodeclaim"),
        said("launched nodeclaim")
    );
    for claim in &burst {
        check_claim(&cp, &ec2, claim).await;
    }
    // a tag lost (an operator restarted before its turn) is found missing by the next
    // listing and written again from the NodeClaim's provider id
    let lost = burst[0]["metadata"]["name"].as_str().expect("name");
    let lost_instance = (burst[0]["status"]["providerID"].as_str())
        .and_then(|p| p.rsplit('/').next())
        .expect("a provider id");
    ec2.delete_tags()
        .resources(lost_instance)
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key("karpenter.sh/nodeclaim")
                .build(),
        )
        .send()
        .await
        .expect("delete the tag");
    assert!(instances_of(&ec2, lost).await.is_empty());
    let tagged_again = || {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(instances_of(&ec2, lost))
        })
    };
    wait_for(
        "the lost tag written again",
        LIMIT,
        || (!tagged_again().is_empty()).then_some(()),
        || format!("{}\n{}", cp.kubectl_ok(&["get", "nodeclaims"], None), log()),
    );
    // and its NodeClaim lived through it: never taken for gone, its instance never an orphan
    let states = tagged_again();
    assert!(
        states
            .iter()
            .all(|(_, s)| *s != InstanceStateName::Terminated
                && *s != InstanceStateName::ShuttingDown),
        "{states:?}"
    );
    assert!(
        cp.kubectl(&["get", "nodeclaim", lost], None)
            .status
            .success(),
        "{}",
        log()
    );
    cp.kubectl_ok(&["delete", "deployment", "apart"], None);
    for claim in &burst {
        let name = claim["metadata"]["name"].as_str().expect("name");
        cp.kubectl_ok(&["delete", "nodeclaim", name, "--wait=false"], None);
    }

    // deleting a NodeClaim drains the node and terminates the instance
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=0"], None);
    cp.kubectl_ok(&["delete", "nodeclaim", &second, "--wait=false"], None);
    wait_for(
        "the instance terminated",
        LIMIT,
        terminated(second.clone()),
        log,
    );
    wait_for(
        "the NodeClaims gone",
        LIMIT,
        || {
            let claims = json_of(&cp, &["get", "nodeclaims"]);
            claims["items"]
                .as_array()
                .is_some_and(Vec::is_empty)
                .then_some(())
        },
        || cp.kubectl_ok(&["get", "nodeclaims"], None),
    );
    // a deleted class waits on its NodeClaims (none now), then its launch templates and the
    // instance profile made for its role are deleted before its finalizer comes off
    let class = json_of(&cp, &["get", "ec2nodeclass", "default"]);
    assert_eq!(
        class["metadata"]["finalizers"],
        json!(["karpenter.k8s.aws/termination"]),
        "{class}"
    );
    let templates = || {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current()
                .block_on(ec2.describe_launch_templates().send())
                .map(|out| out.launch_templates().len())
                .unwrap_or(usize::MAX)
        })
    };
    let profile = kerf_aws_provider::instance_profile::profile_name(CLUSTER, REGION, "default");
    let profile_exists = || {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current()
                .block_on(
                    iam.get_instance_profile()
                        .instance_profile_name(&profile)
                        .send(),
                )
                .is_ok()
        })
    };
    assert!(profile_exists(), "the class's role got a profile");
    assert!(templates() > 0, "the launches made launch templates");
    cp.kubectl_ok(&["delete", "ec2nodeclass", "default", "--wait=false"], None);
    wait_for(
        "the EC2NodeClass gone",
        LIMIT,
        || {
            (!cp.kubectl(&["get", "ec2nodeclass", "default"], None)
                .status
                .success())
            .then_some(())
        },
        log,
    );
    assert_eq!(templates(), 0, "{}", log());
    assert!(!profile_exists(), "{}", log());
    // the chart's RBAC was enough: no call was refused
    assert!(!log().contains("forbidden"), "{}", log());
    // the region's instance types were read from EC2, not only embedded
    assert!(log().contains("discovered instance types"), "{}", log());
    // each AWS call counted as Karpenter's SDK middleware counts it
    let metrics = http_get(op.metrics_port, "/metrics").1;
    for series in [
        r#"aws_sdk_go_request_total{service="EC2",action="CreateFleet",code="200"}"#,
        r#"aws_sdk_go_request_total{service="EKS",action="DescribeCluster",code="200"}"#,
        r#"aws_sdk_go_request_attempt_duration_seconds_count{service="SQS",action="ReceiveMessage",code="200"}"#,
    ] {
        assert!(metrics.contains(series), "{series} not in\n{metrics}");
    }
    // least privilege on AWS: the controller policy allowed every call the operator made,
    // and it grants nothing this run did not use but what moto cannot check and what the
    // reservation test calls
    let called = actions_called(&moto);
    let unused: Vec<String> = granted_actions()
        .into_iter()
        .filter(|a| !called.contains(a) && !UNCHECKED.iter().any(|(u, _)| u == a))
        .filter(|a| !CALLED_WITH_A_RESERVATION.contains(&a.as_str()))
        .collect();
    assert!(
        unused.is_empty(),
        "granted and never called: {unused:?} (called: {called:?})"
    );
}

/// Permissions of the controller policy that only a class with a capacity reservation and a
/// placement group calls for (checked in the reservation test).
const CALLED_WITH_A_RESERVATION: [&str; 2] = [
    "ec2:DescribeCapacityReservations",
    "ec2:DescribePlacementGroups",
];

/// Permissions of the controller policy that moto never checks, with why.
const UNCHECKED: [(&str, &str); 4] = [
    ("pricing:GetProducts", "moto serves no Price List API"),
    (
        "iam:PassRole",
        "EC2 checks it when a launch template names an instance profile; moto does not",
    ),
    (
        "ec2:RunInstances",
        "EC2 checks it for each instance an instant CreateFleet launches; moto does not",
    ),
    (
        "iam:TagInstanceProfile",
        "IAM checks it when CreateInstanceProfile carries tags; moto does not",
    ),
];

/// Merges `patch` into the seed's EC2NodeClass.
fn patch_class(cp: &ControlPlane, patch: &Value) {
    let patch = patch.to_string();
    let args = [
        "patch",
        "ec2nodeclass",
        "default",
        "--type",
        "merge",
        "-p",
        &patch,
    ];
    cp.kubectl_ok(&args, None);
}

/// Seconds since the Unix epoch of a log line's `time`.
fn at(line: &Value) -> f64 {
    line["time"]
        .as_str()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map_or(0.0, |t| t.as_millisecond() as f64 / 1000.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn when_spot_runs_out_seed_000s_on_demand_fallback_launches_within_seconds() {
    let (moto, ec2, _) = seeded_moto("fallback").await;
    // every spot request is refused for capacity, as when a region's spot pools run dry
    moto.refuse_spot(true);
    let (cp, op) = aws_operator("aws-fallback", &moto);
    // seed 000's NodePools in place of seed 004's: spot first (weight 100), on-demand after
    cp.kubectl_ok(&["delete", "nodepool", "default"], None);
    let pools =
        std::fs::read(root().join("fixtures/seeds/000-spot-fallback.yaml")).expect("seed 000");
    cp.kubectl_ok(&["apply", "-f", "-"], Some(&pools));
    let log = || std::fs::read_to_string(&op.log).unwrap_or_default();
    wait_for(
        "the EC2NodeClass Ready",
        LIMIT,
        || {
            let c = json_of(&cp, &["get", "ec2nodeclass", "default"]);
            (condition(&c, "Ready").as_deref() == Some("True")).then_some(())
        },
        log,
    );
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=3"], None);
    let fallback = wait_for(
        "a batch-fallback NodeClaim launched",
        LIMIT,
        || launched_claim(&cp, Some("batch-fallback"), ""),
        || format!("{:?}\n{}", moto.refused(), log()),
    );
    assert_eq!(
        fallback["metadata"]["labels"]["karpenter.sh/capacity-type"],
        "on-demand"
    );
    check_claim(&cp, &ec2, &fallback).await;
    let name = fallback["metadata"]["name"].as_str().expect("name");
    let lines = op.lines();
    // the seed's class boots no GPU types: said once, however often its catalog is built
    // again (prices, the region's types discovered)
    let unbooted = (lines.iter())
        .filter(|l| {
            l["message"] == "instance types without an image of the class are not offered"
                && l["EC2NodeClass"]["name"] == "default"
        })
        .count();
    assert_eq!(unbooted, 1, "{}", log());
    // every error is one line of AWS's code and message, or of what kept AWS from answering
    // (moto serves no Pricing API), never the SDK's debug account of it
    let dumps: Vec<&Value> = (lines.iter())
        .filter(|l| {
            ["ServiceError", "Unhandled", "source:"]
                .iter()
                .any(|d| l.to_string().contains(d))
        })
        .collect();
    assert!(dumps.is_empty(), "{dumps:?}");
    let pricing = lines
        .iter()
        .find(|l| l["message"] == "refreshing on-demand prices, keeping the ones held")
        .expect("moto's missing Pricing API is logged");
    assert!(
        pricing["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("GetProducts: ")),
        "{pricing}"
    );
    let launched = lines
        .iter()
        .find(|l| l["message"] == "launched nodeclaim" && l["NodeClaim"]["name"] == name)
        .map(at)
        .expect("the fallback's launch is logged");
    let refused = moto.refused();
    let first = refused
        .first()
        .map(|r| r.0)
        .expect("spot was asked for first");
    let before: Vec<&(f64, usize)> = refused.iter().filter(|r| r.0 <= launched).collect();
    assert!(
        launched - first <= 15.0,
        "the fallback launched {:.1} s after the first refused spot request",
        launched - first
    );
    assert!(
        before.len() <= 3,
        "{} spot requests refused first: {before:?}",
        before.len()
    );
    let blamed: Vec<&Value> = lines
        .iter()
        .filter(|l| l.to_string().contains("no subnet"))
        .collect();
    assert!(blamed.is_empty(), "a subnet blamed: {blamed:?}");
    // each refusal is counted as the cloud's capacity answer, for the NodePool it was for
    let metrics = http_get(op.metrics_port, "/metrics").1;
    let refusals = metrics.lines().find(|l| {
        l.starts_with("karpenter_cloudprovider_errors_total{")
            && l.contains("method=\"Create\"")
            && l.contains("provider=\"aws\"")
            && l.contains("error=\"InsufficientCapacityError\"")
            && l.contains("nodepool=\"batch\"")
    });
    assert!(refusals.is_some(), "no spot refusal counted:\n{metrics}");
    assert!(
        metrics.contains("karpenter_cloudprovider_duration_seconds_count{controller=\"nodeclaim.lifecycle\",method=\"Create\",provider=\"aws\"}"),
        "{metrics}"
    );
    println!(
        "fallback launched {:.1} s after the first refused spot request, after {} refused",
        launched - first,
        before.len()
    );

    // spot returns: once the refusals age out of the unavailable-offerings memory
    // (`MEMORY`), consolidation replaces the on-demand node with a spot node of the heavier
    // NodePool, and the pods move to it
    let mut registered = BTreeSet::new();
    wait_for(
        "3 pods running on the on-demand fallback",
        LIMIT,
        || {
            register_every_launched(&cp, &mut registered);
            (running(&cp) == 3).then_some(())
        },
        || {
            let claims = cp.kubectl_ok(&["get", "nodeclaims"], None);
            let pods = cp.kubectl_ok(&["get", "pods", "-o", "wide"], None);
            format!("{claims}\n{pods}\n{}", log())
        },
    );
    moto.refuse_spot(false);
    let spot = wait_for(
        "a spot NodeClaim of batch launched",
        MEMORY + Duration::from_secs(180),
        || launched_claim(&cp, Some("batch"), ""),
        || format!("{}\n{}", cp.kubectl_ok(&["get", "nodeclaims"], None), log()),
    );
    assert_eq!(
        spot["metadata"]["labels"]["karpenter.sh/capacity-type"],
        "spot"
    );
    // a spot instance is its class's too (moto gives spot instances the VPC's default group)
    check_claim(&cp, &ec2, &spot).await;
    wait_for(
        "the pods moved to spot nodes",
        LIMIT,
        || {
            register_every_launched(&cp, &mut registered);
            let spot_nodes = json_of(
                &cp,
                &["get", "nodes", "-l", "karpenter.sh/capacity-type=spot"],
            );
            let spot_nodes: BTreeSet<&str> = (spot_nodes["items"].as_array()?.iter())
                .filter_map(|n| n["metadata"]["name"].as_str())
                .collect();
            let pods = json_of(&cp, &["get", "pods", "-l", "app=inflate"]);
            let on_spot = pods["items"].as_array()?.iter().all(|p| {
                p["status"]["phase"] == "Running"
                    && spot_nodes.contains(p["spec"]["nodeName"].as_str().unwrap_or_default())
            });
            (on_spot && running(&cp) == 3).then_some(())
        },
        || {
            format!(
                "{}\n{}",
                cp.kubectl_ok(&["get", "pods", "-o", "wide"], None),
                log()
            )
        },
    );
    actions_called(&moto);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_capacity_reservation_is_resolved_filled_first_and_launched_into_then_on_demand_follows()
{
    const RESERVATION: &str = "cr-0a1b2c3d4e5f60789";
    let (moto, ec2, _) = seeded_moto("reserved").await;
    moto.set_capacity_reservations(json!([{
        "id": RESERVATION, "instanceType": "m5.xlarge", "zone": "ap-northeast-2a", "count": 1,
    }]));
    let (cp, op) = aws_operator("aws-reserved", &moto);
    let log = || std::fs::read_to_string(&op.log).unwrap_or_default();
    // seed 004 with its reservation: the class selects it, the NodePool allows reserved
    patch_class(
        &cp,
        &json!({"spec": {"capacityReservationSelectorTerms": [{"id": RESERVATION}]}}),
    );
    let pool_patch = json!({"spec": {"template": {"spec": {"requirements": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In",
             "values": ["reserved", "on-demand"]},
            {"key": "karpenter.k8s.aws/instance-category", "operator": "In",
             "values": ["c", "m", "r"]},
    ]}}}});
    cp.patch_nodepool("default", &pool_patch.to_string());
    let status = wait_for(
        "the reservation in the class's status",
        LIMIT,
        || {
            let c = json_of(&cp, &["get", "ec2nodeclass", "default"]);
            let listed = c["status"]["capacityReservations"].as_array()?.clone();
            (condition(&c, "CapacityReservationsReady").as_deref() == Some("True")
                && condition(&c, "Ready").as_deref() == Some("True"))
            .then_some(listed)
        },
        log,
    );
    assert_eq!(status.len(), 1, "{status:?}");
    assert_eq!(status[0]["id"], RESERVATION);
    assert_eq!(status[0]["instanceType"], "m5.xlarge");
    assert_eq!(status[0]["availabilityZone"], "ap-northeast-2a");
    assert_eq!(status[0]["reservationType"], "default");

    // the first NodeClaim goes into the reservation: it is all but free
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=1"], None);
    let reserved = wait_for(
        "a NodeClaim launched",
        LIMIT,
        || launched_claim(&cp, Some("default"), ""),
        log,
    );
    let labels = &reserved["metadata"]["labels"];
    assert_eq!(
        labels["karpenter.sh/capacity-type"], "reserved",
        "{reserved}"
    );
    assert_eq!(
        labels["karpenter.k8s.aws/capacity-reservation-id"],
        RESERVATION
    );
    assert_eq!(
        labels["karpenter.k8s.aws/capacity-reservation-type"],
        "default"
    );
    assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.xlarge");
    assert_eq!(labels["topology.kubernetes.io/zone"], "ap-northeast-2a");
    let pinned = reserved["spec"]["requirements"]
        .as_array()
        .expect("requirements");
    assert!(
        pinned
            .iter()
            .any(|r| r["key"] == "karpenter.k8s.aws/capacity-reservation-id"
                && r["values"] == json!([RESERVATION])),
        "{pinned:?}"
    );
    check_claim(&cp, &ec2, &reserved).await;
    // it was launched from a template that targets the reservation alone
    let mut targeted = 0;
    for t in ec2
        .describe_launch_templates()
        .send()
        .await
        .expect("templates")
        .launch_templates()
    {
        let versions = ec2
            .describe_launch_template_versions()
            .launch_template_id(t.launch_template_id().expect("id"))
            .send()
            .await
            .expect("versions");
        for v in versions.launch_template_versions() {
            let spec = v
                .launch_template_data()
                .and_then(|d| d.capacity_reservation_specification());
            let target = spec
                .and_then(|s| s.capacity_reservation_target())
                .and_then(|t| t.capacity_reservation_id());
            if target == Some(RESERVATION) {
                assert_eq!(
                    spec.and_then(|s| s.capacity_reservation_preference())
                        .map(|p| p.as_str()),
                    Some("capacity-reservations-only")
                );
                targeted += 1;
            }
        }
    }
    assert_eq!(targeted, 1, "one template targets the reservation");

    // the reservation is full: more pods go to on-demand
    let name = reserved["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=6"], None);
    let second = wait_for(
        "a second NodeClaim launched",
        LIMIT,
        || launched_claim(&cp, Some("default"), &name),
        log,
    );
    assert_eq!(
        second["metadata"]["labels"]["karpenter.sh/capacity-type"], "on-demand",
        "{second}"
    );
    assert!(
        second["metadata"]["labels"]
            .get("karpenter.k8s.aws/capacity-reservation-id")
            .is_none()
    );
    check_claim(&cp, &ec2, &second).await;
    // no launch met a full reservation: the count was kept
    assert!(!log().contains("ReservationCapacityExceeded"), "{}", log());
    // a placement group for the class: resolved under the controller policy too
    ec2.create_placement_group()
        .group_name("training")
        .strategy(aws_sdk_ec2::types::PlacementStrategy::Cluster)
        .send()
        .await
        .expect("create the placement group");
    patch_class(
        &cp,
        &json!({"spec": {"placementGroupSelector": {"name": "training"}}}),
    );
    // the class is resolved again with it: moto sees the group read
    let key = moto.controller().access_key_id().to_string();
    wait_for(
        "the placement group read",
        LIMIT,
        || {
            (moto.calls().iter())
                .any(|c| c.key == key && c.action == "ec2:DescribePlacementGroups")
                .then_some(())
        },
        || json_of(&cp, &["get", "ec2nodeclass", "default"]).to_string(),
    );
    // the controller policy allowed the reservation's and the group's reads
    let called = actions_called(&moto);
    for action in CALLED_WITH_A_RESERVATION {
        assert!(called.contains(action), "{action} not called: {called:?}");
    }
}

/// The controller policy without the statement `sid`.
fn policy_without(sid: &str) -> String {
    let mut policy: Value = serde_json::from_str(&controller_policy()).expect("the policy");
    let statements = policy["Statement"].as_array_mut().expect("statements");
    let before = statements.len();
    statements.retain(|s| s["Sid"] != sid);
    assert_eq!(statements.len() + 1, before, "no statement {sid}");
    policy.to_string()
}

/// Puts `policy` on the controller's role in place of what it holds (moto reads a role's
/// policies at each call, as IAM does); the new one is attached before the old goes, so no
/// call meets a role without a policy.
async fn hold_policy(iam: &aws_sdk_iam::Client, name: &str, policy: &str) {
    let role = format!("KarpenterControllerRole-{CLUSTER}");
    let arn = match iam
        .create_policy()
        .policy_name(name)
        .policy_document(policy)
        .send()
        .await
    {
        Ok(made) => made.policy.and_then(|p| p.arn).expect("an arn"),
        // made in an earlier phase: the same document under the same name
        Err(_) => format!("arn:aws:iam::123456789012:policy/{name}"),
    };
    let attached = iam
        .list_attached_role_policies()
        .role_name(&role)
        .send()
        .await
        .expect("the role's policies");
    iam.attach_role_policy()
        .role_name(&role)
        .policy_arn(&arn)
        .send()
        .await
        .expect("attach the policy");
    for held in attached.attached_policies() {
        let held = held.policy_arn().unwrap_or_default();
        if held != arn {
            iam.detach_role_policy()
                .role_name(&role)
                .policy_arn(held)
                .send()
                .await
                .expect("detach a policy");
        }
    }
}

/// The operator's log lines naming `permission`: (time, message and the class it is of).
fn naming(op: &Operator, permission: &str) -> Vec<(f64, String)> {
    op.lines()
        .into_iter()
        .filter(|l| l.to_string().contains(permission))
        .map(|l| {
            let class = l["EC2NodeClass"]["name"].as_str().unwrap_or("");
            let message = l["message"].as_str().unwrap_or("");
            (at(&l), format!("{message} ({class})"))
        })
        .collect()
}

/// `karpenter_nodeclaims_created_total` as the operator serves it, summed.
fn nodeclaims_created(op: &Operator) -> f64 {
    let (_, text) = http_get(op.metrics_port, "/metrics");
    (text.lines())
        .filter(|l| l.starts_with("karpenter_nodeclaims_created_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The conditions of every EC2NodeClass that name `permission`, as `Type=Status reason`.
fn conditions_naming(cp: &ControlPlane, permission: &str) -> Vec<String> {
    let classes = json_of(cp, &["get", "ec2nodeclasses"]);
    (classes["items"].as_array().into_iter().flatten())
        .flat_map(|c| {
            c["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|c| {
            c["message"]
                .as_str()
                .is_some_and(|m| m.contains(permission))
        })
        .map(|c| format!("{}={} {}", c["type"], c["status"], c["reason"]).replace('"', ""))
        .collect()
}

/// Each statement of the controller policy dropped in turn from a running operator's role:
/// the operator names the permission it lacks in a log line, says it again at most once a
/// minute rather than at every try, writes it on the status of the EC2NodeClass it keeps from
/// working (the resolution's condition, or `ValidationSucceeded` False as Karpenter's
/// authorization check writes it, so the class's NodePools launch nothing rather than making
/// and deleting NodeClaims in a loop), and carries on once the permission is back. moto
/// cannot check four statements' actions, and four more share every action with another
/// statement once moto matches them against `*` (deploy/aws/README.md says which).
#[tokio::test(flavor = "multi_thread")]
async fn each_statement_of_the_controller_policy_dropped_is_named_not_looped() {
    let (moto, _, _) = seeded_moto("dropped").await;
    let iam = aws_sdk_iam::Client::new(&moto.config().await);
    let (cp, op) = aws_operator("dropped", &moto);
    let log = || std::fs::read_to_string(&op.log).unwrap_or_default();
    let ready = |cp: &ControlPlane| {
        let class = json_of(cp, &["get", "ec2nodeclass", "default"]);
        condition(&class, "Ready").as_deref() == Some("True")
    };
    wait_for(
        "the EC2NodeClass Ready",
        LIMIT,
        || ready(&cp).then_some(()),
        log,
    );
    let full = controller_policy();
    let change_class = |n: usize| {
        let patch = json!({"spec": {"tags": {"kerf.test/change": n.to_string()}}});
        patch_class(&cp, &patch);
    };
    let another_class = |name: &str| {
        let mut class = json_of(&cp, &["get", "ec2nodeclass", "default"]);
        class["metadata"] = json!({"name": name});
        class.as_object_mut().map(|c| c.remove("status"));
        cp.kubectl_ok(&["apply", "-f", "-"], Some(class.to_string().as_bytes()));
    };
    // (statement, a permission it alone grants, what makes the operator need it, whether a
    // class's status names it)
    let phases = [
        (
            "AllowInstanceProfileReadActions",
            "iam:GetInstanceProfile",
            "class second",
            true,
        ),
        (
            "AllowScopedInstanceProfileCreationActions",
            "iam:CreateInstanceProfile",
            "class third",
            true,
        ),
        (
            "AllowRegionalReadActions",
            "ec2:DescribeSubnets",
            "change",
            true,
        ),
        ("AllowSSMReadActions", "ssm:GetParameter", "change", true),
        (
            "AllowInterruptionQueueActions",
            "sqs:ReceiveMessage",
            "none",
            false,
        ),
        (
            "AllowScopedEC2InstanceActionsWithTags",
            "ec2:CreateLaunchTemplate",
            "scale",
            true,
        ),
        (
            "AllowScopedDeletion",
            "ec2:TerminateInstances",
            "delete",
            false,
        ),
    ];
    for (i, (sid, permission, provoke, on_status)) in phases.into_iter().enumerate() {
        hold_policy(&iam, sid, &policy_without(sid)).await;
        let since = naming(&op, permission).len();
        let created = nodeclaims_created(&op);
        let mut deleted = None;
        match provoke {
            "change" => change_class(i),
            "scale" => {
                cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=2"], None);
            }
            "delete" => {
                let claim = wait_for(
                    "a launched NodeClaim",
                    LIMIT,
                    || launched_claim(&cp, None, ""),
                    || cp.kubectl_ok(&["get", "nodeclaims"], None),
                );
                let name = claim["metadata"]["name"].as_str().unwrap_or("").to_string();
                cp.kubectl_ok(&["delete", "nodeclaim", &name, "--wait=false"], None);
                deleted = Some(name);
            }
            "none" => {}
            other => another_class(other.trim_start_matches("class ")),
        }
        let first = wait_for(
            &format!("a line naming {permission} without {sid}"),
            LIMIT,
            || naming(&op, permission).get(since).cloned(),
            || {
                let calls: Vec<String> = (moto.calls().iter().rev().take(40))
                    .map(|c| format!("{} {}", c.action, c.allowed))
                    .collect();
                format!(
                    "{}\n{calls:?}\n{}",
                    json_of(&cp, &["get", "ec2nodeclasses"]),
                    log()
                )
            },
        );
        if on_status {
            wait_for(
                &format!("a class condition naming {permission}"),
                LIMIT,
                || (!conditions_naming(&cp, permission).is_empty()).then_some(()),
                || json_of(&cp, &["get", "ec2nodeclasses"]).to_string(),
            );
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
        // not looped: each kind of line at most twice in the half minute after the first
        let said = naming(&op, permission).split_off(since);
        let mut by_message: std::collections::BTreeMap<&str, usize> = Default::default();
        for (t, message) in &said {
            if *t <= first.0 + 30.0 {
                *by_message.entry(message.as_str()).or_default() += 1;
            }
        }
        assert!(
            by_message.values().all(|n| *n <= 2),
            "{sid}: said again and again: {by_message:?}"
        );
        // not looped either: a refused launch stops the class's launches
        let made = nodeclaims_created(&op) - created;
        assert!(made <= 2.0, "{sid}: {made} NodeClaims made while refused");
        eprintln!(
            "{sid}: {permission} named by {by_message:?}; on {:?}; {made} NodeClaims made",
            conditions_naming(&cp, permission)
        );

        // the permission back (and the class changed, as Karpenter's check of a launch's
        // authorization is held until then): it works again
        hold_policy(&iam, "full", &full).await;
        change_class(100 + i);
        wait_for(
            &format!("the class Ready again after {sid}"),
            LIMIT,
            || ready(&cp).then_some(()),
            || json_of(&cp, &["get", "ec2nodeclasses"]).to_string(),
        );
        match (provoke, &deleted) {
            ("scale", _) => {
                wait_for(
                    "a NodeClaim launched once CreateLaunchTemplate is granted",
                    LIMIT,
                    || launched_claim(&cp, None, ""),
                    log,
                );
            }
            (_, Some(name)) => wait_for(
                "the NodeClaim gone once TerminateInstances is granted",
                LIMIT,
                || {
                    let claims = json_of(&cp, &["get", "nodeclaims"]);
                    let names = claims["items"].to_string();
                    (!names.contains(name.as_str())).then_some(())
                },
                log,
            ),
            _ => {}
        }
    }
}

/// The class's `ValidationSucceeded` as (status, reason, message), once written for its
/// current generation.
fn validation_now(cp: &ControlPlane) -> Option<(String, String, String)> {
    let class = json_of(cp, &["get", "ec2nodeclass", "default"]);
    let generation = &class["metadata"]["generation"];
    let conditions = class["status"]["conditions"].as_array()?;
    let c = conditions
        .iter()
        .find(|c| c["type"] == "ValidationSucceeded")?;
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (c["observedGeneration"] == *generation)
        .then(|| (text("status"), text("reason"), text("message")))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_launch_the_role_may_not_make_fails_the_class_before_any_nodeclaim() {
    let (moto, ec2, _) = seeded_moto("authorization").await;
    let iam = aws_sdk_iam::Client::new(&moto.config().await);
    let (cp, op) = aws_operator("authorization", &moto);
    let key = moto.controller().access_key_id().to_string();
    let calls_of = |action: &str| {
        (moto.calls().iter())
            .filter(|c| c.key == key && c.action == action)
            .count()
    };
    let validated = |status: &str| {
        let cp = &cp;
        let status = status.to_string();
        move || validation_now(cp).filter(|(s, _, _)| *s == status)
    };
    let classes = || json_of(&cp, &["get", "ec2nodeclasses"]).to_string();
    wait_for("the class validated", LIMIT, validated("True"), classes);
    // checked before it was: a launch template made, a fleet and an instance tried as dry
    // runs, and nothing launched
    for action in [
        "ec2:CreateLaunchTemplate",
        "ec2:CreateFleet",
        "ec2:RunInstances",
    ] {
        assert!(
            calls_of(action) >= 1,
            "{action} never tried: {:?}",
            moto.calls()
        );
    }
    let instances = ec2.describe_instances().send().await.expect("instances");
    assert!(instances.reservations().is_empty(), "{instances:?}");

    // RunInstances denied outright (a service control policy would be worded so too), and
    // the class changed: refused on the class, in Karpenter's words, before any launch
    let mut denying: Value = serde_json::from_str(&controller_policy()).expect("the policy");
    denying["Statement"].as_array_mut().expect("statements").push(json!({
        "Sid": "DenyRunInstances", "Effect": "Deny", "Action": "ec2:RunInstances", "Resource": "*",
    }));
    hold_policy(&iam, "deny-run-instances", &denying.to_string()).await;
    patch_class(&cp, &json!({"spec": {"tags": {"kerf.test/check": "1"}}}));
    let (_, reason, message) = wait_for("the class refused", LIMIT, validated("False"), classes);
    assert_eq!(reason, "RunInstancesAuthCheckFailed");
    assert_eq!(
        message,
        "Controller isn't authorized to call ec2:RunInstances: User is not authorized to perform this operation because no identity-based policy allows it"
    );
    let class = json_of(&cp, &["get", "ec2nodeclass", "default"]);
    assert_eq!(condition(&class, "Ready").as_deref(), Some("False"));
    let said = (op.lines().into_iter())
        .filter(|l| {
            l["level"] == "ERROR" && l["message"] == "unauthorized to call ec2:RunInstances"
        })
        .count();
    assert!(said >= 1, "no error line: {:?}", op.lines());
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=2"], None);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(nodeclaims_created(&op), 0.0, "launched for a refused class");

    // granted again and the class changed: validated, and the pods' NodeClaim launched
    hold_policy(&iam, "full", &controller_policy()).await;
    patch_class(&cp, &json!({"spec": {"tags": {"kerf.test/check": "2"}}}));
    wait_for(
        "the class validated again",
        LIMIT,
        validated("True"),
        classes,
    );
    wait_for(
        "a NodeClaim launched",
        LIMIT,
        || launched_claim(&cp, None, ""),
        || json_of(&cp, &["get", "nodeclaims"]).to_string(),
    );
    // held while the class is unchanged: the next resolution, a minute on, tries nothing
    let tried = calls_of("ec2:RunInstances");
    tokio::time::sleep(Duration::from_secs(70)).await;
    assert_eq!(
        calls_of("ec2:RunInstances"),
        tried,
        "checked again within the hold"
    );

    // DISABLE_DRY_RUN: a new operator checks nothing, and validates a changed class
    drop(op);
    hold_policy(&iam, "deny-run-instances", &denying.to_string()).await;
    let mut env = aws_env(&cp, &moto);
    env.push(("DISABLE_DRY_RUN", "true".into()));
    let _op = Operator::spawn(&cp, OPERATOR, 2, &["--cloud-provider", "aws"], &env);
    patch_class(&cp, &json!({"spec": {"tags": {"kerf.test/check": "3"}}}));
    wait_for(
        "the class validated unchecked",
        LIMIT,
        validated("True"),
        classes,
    );
    assert_eq!(
        calls_of("ec2:RunInstances"),
        tried,
        "a dry run under DISABLE_DRY_RUN"
    );
}

/// The events of `reason` about the NodePool `default` as (type, message), once there are.
fn told_once(cp: &ControlPlane, reason: &str, log: impl Fn() -> String) -> Vec<(String, String)> {
    let what = format!("{reason} on the NodePool");
    let told = || Some(pool_events(cp, "default", reason)).filter(|e| !e.is_empty());
    wait_for(&what, LIMIT, told, log)
}

/// The messages of the events of `reason` about the NodePool `pool`.
fn pool_events(cp: &ControlPlane, pool: &str, reason: &str) -> Vec<(String, String)> {
    let selector =
        format!("involvedObject.kind=NodePool,involvedObject.name={pool},reason={reason}");
    let events = json_of(cp, &["get", "events", "-A", "--field-selector", &selector]);
    (events["items"].as_array().into_iter().flatten())
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (text("type"), text("message"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zonal_shift_keeps_launches_and_terminations_out_of_its_zone_and_is_told_to_the_nodepool()
{
    let (moto, ec2, _) = seeded_moto("zonal").await;
    // the one permission zonal shift needs, which Karpenter's policy leaves to the user
    let mut policy: Value = serde_json::from_str(&controller_policy()).expect("the policy");
    policy["Statement"]
        .as_array_mut()
        .expect("statements")
        .push(json!({
            "Sid": "AllowZonalShiftRead", "Effect": "Allow",
            "Action": "arc-zonal-shift:GetManagedResource", "Resource": "*",
        }));
    let iam = aws_sdk_iam::Client::new(&moto.config().await);
    hold_policy(&iam, "zonal", &policy.to_string()).await;
    let cp = aws_cluster("zonal");
    let mut env = aws_env(&cp, &moto);
    env.push(("ENABLE_ZONAL_SHIFT", "true".into()));

    // a cluster ARC does not manage: the operator does not start, in Karpenter's words
    let refused = Operator::spawn(&cp, OPERATOR, 1, &["--cloud-provider", "aws"], &env);
    let said = wait_for(
        "the operator to refuse",
        LIMIT,
        || {
            let log = std::fs::read_to_string(&refused.log).unwrap_or_default();
            log.contains("in Zonal Shift").then_some(log)
        },
        String::new,
    );
    assert!(
        said.contains("Unable to find Cluster arn:aws:eks:"),
        "{said}"
    );
    drop(refused);

    moto.set_zonal_shifts(Some(json!([])));
    let op = Operator::spawn(&cp, OPERATOR, 2, &["--cloud-provider", "aws"], &env);
    let log = || std::fs::read_to_string(&op.log).unwrap_or_default();
    cp.kubectl_ok(&["scale", "deployment/inflate", "--replicas=1"], None);
    let first = wait_for(
        "a launched NodeClaim",
        LIMIT,
        || launched_claim(&cp, None, ""),
        log,
    );
    let first_name = first["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let zone = first["metadata"]["labels"]["topology.kubernetes.io/zone"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let class = json_of(&cp, &["get", "ec2nodeclass", "default"]);
    let zone_id = (class["status"]["subnets"].as_array().into_iter().flatten())
        .find(|s| s["zone"] == zone.as_str())
        .and_then(|s| s["zoneID"].as_str())
        .expect("the zone's id")
        .to_string();

    // shifted away from the first NodeClaim's zone: the NodePool is told
    moto.set_zonal_shifts(Some(json!([{"awayFrom": zone_id}])));
    let active = format!(
        "Zonal shift detected: offerings in zone {zone} ({zone_id}) are unavailable for this NodePool"
    );
    let told = told_once(&cp, "ZonalShiftActive", log);
    assert_eq!(told, [("Warning".to_string(), active)]);

    // its NodeClaim deleted: the instance is left alone while the shift lasts, and the pod's
    // next NodeClaim launches in another zone
    cp.kubectl_ok(&["delete", "nodeclaim", &first_name, "--wait=false"], None);
    let second = wait_for(
        "a NodeClaim launched elsewhere",
        LIMIT,
        || launched_claim(&cp, None, &first_name),
        log,
    );
    let second_zone = &second["metadata"]["labels"]["topology.kubernetes.io/zone"];
    assert_ne!(
        second_zone.as_str(),
        Some(zone.as_str()),
        "launched into the shifted zone"
    );
    wait_for(
        "the termination skipped",
        LIMIT,
        || {
            log()
                .contains("is in zonally shifted availability zone")
                .then_some(())
        },
        log,
    );
    let first_instances = instances_of(&ec2, &first_name).await;
    assert!(
        first_instances
            .iter()
            .all(|(_, state)| *state == InstanceStateName::Running),
        "{first_instances:?}"
    );

    // the shift over: told as restored, and the first instance terminated with its NodeClaim
    moto.set_zonal_shifts(Some(json!([])));
    let cleared = format!(
        "Zonal shift cleared: offerings in zone {zone} ({zone_id}) are restored for this NodePool"
    );
    let told = told_once(&cp, "ZonalShiftCleared", log);
    assert_eq!(told, [("Normal".to_string(), cleared)]);
    wait_for(
        "the first NodeClaim gone",
        LIMIT,
        || {
            let claims = json_of(&cp, &["get", "nodeclaims"]).to_string();
            (!claims.contains(&first_name)).then_some(())
        },
        log,
    );
}
