//! Launching through EC2 Fleet against moto: the seed node class's NodeClaim becomes an
//! instance with Kerf's tags, from a launch template whose user data joins the cluster; list
//! and terminate find it by its tags. Errors moto cannot produce (insufficient capacity, a
//! subnet out of addresses, a denied call) come from the SDK's mock interceptor.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
use aws_sdk_ec2::operation::create_launch_template::CreateLaunchTemplateOutput;
use aws_sdk_ec2::operation::describe_launch_templates::DescribeLaunchTemplatesOutput;
use aws_sdk_ec2::types::{
    CreateFleetError, CreateFleetInstance, FleetLaunchTemplateOverrides,
    LaunchTemplate as Ec2LaunchTemplate, LaunchTemplateAndOverridesResponse,
};
use aws_smithy_mocks::{RuleMode, mock};
use base64::Engine;
use kerf_api::ec2nodeclass::{AmiStatus, EC2NodeClassStatus, SecurityGroupStatus, SubnetStatus};
use kerf_api::{Taint, TaintEffect, labels};
use kerf_aws_provider::Discovery;
use kerf_aws_provider::authorization::{Probe, Verdict};
use kerf_aws_provider::launch::{
    Choice, Fleet, LaunchError, LaunchOrder, RebootOutcome, Unavailable,
};
use kerf_aws_provider::user_data::{ClusterInfo, Sizing};
use kerf_core::cluster::InstanceNetwork;
use support::{CLUSTER, Moto, NOW, SEED_AMI_PARAMETERS, check_launched, network, seed_node_class};

fn cluster() -> ClusterInfo {
    ClusterInfo {
        name: CLUSTER.into(),
        endpoint: "https://ABCDEF.gr7.ap-northeast-2.eks.amazonaws.com".into(),
        ca_bundle: Some("Q0EK".into()),
        cidr: Some("10.100.0.0/16".into()),
    }
}

fn choice(instance_type: &str, zone: &str, arch: &str) -> Choice {
    Choice {
        instance_type: instance_type.into(),
        zone: zone.into(),
        labels: BTreeMap::from([(labels::ARCH.to_string(), arch.to_string())]),
        sizing: Sizing::new(2, 29, None),
    }
}

fn tag_of<'a>(tags: &'a [aws_sdk_ec2::types::Tag], key: &str) -> Option<&'a str> {
    tags.iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
}

#[tokio::test]
async fn a_nodeclaim_launches_from_the_seed_class_and_is_listed_and_terminated() {
    let moto = Moto::start("launch", &SEED_AMI_PARAMETERS);
    let config = moto.config().await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let (_, _, nodes_group) = network(&ec2).await;
    let mut class = seed_node_class();
    // EC2 launches only with an instance profile that exists
    aws_sdk_iam::Client::new(&config)
        .create_instance_profile()
        .instance_profile_name("KarpenterNodeInstanceProfile")
        .send()
        .await
        .expect("create the instance profile");
    let resolved = Discovery::new(&config)
        .resolve(&class.spec, "1.33", NOW)
        .await
        .expect("discovery");
    let status = status_of(resolved);
    class.status = Some(status.clone());
    let fleet = Fleet::new(&config, cluster());
    // ap-northeast-2b has no discovery-tagged subnet, so that choice is not asked for
    let choices = [
        choice("m5.large", "ap-northeast-2b", "amd64"),
        choice("m5.large", "ap-northeast-2c", "amd64"),
        choice("m6g.large", "ap-northeast-2a", "arm64"),
    ];
    let node_labels = BTreeMap::from([
        ("karpenter.sh/nodepool".to_string(), "default".to_string()),
        ("team".to_string(), "web".to_string()),
    ]);
    let taints = [Taint {
        key: "karpenter.sh/unregistered".into(),
        value: None,
        effect: TaintEffect::NoExecute,
        time_added: None,
    }];
    let request = LaunchOrder {
        nodeclaim: "default-abcde",
        node_pool: "default",
        node_class: "default",
        spec: &class.spec,
        status: &status,
        capacity_type: labels::CAPACITY_TYPE_ON_DEMAND,
        choices: &choices,
        labels: &node_labels,
        taints: &taints,
        reservation: None,
    };
    let first = fleet.launch(&request).await.expect("launch");
    assert!(first.id.starts_with("i-"), "{first:?}");
    // launched with its NodePool's tags; the NodeClaim's is written after, and until then the
    // listing has the instance young and untagged (garbage collection leaves it alone)
    let listed = fleet.list().await.expect("list");
    assert!(
        listed.len() == 1 && listed[0].nodeclaim.is_none() && listed[0].young,
        "{listed:?}"
    );
    fleet
        .tag_nodeclaim(&first.id, "default-abcde")
        .await
        .expect("tag");
    // the instance as EC2 describes it is the class's: groups, subnet, AMI, profile, user
    // data, tags, metadata options
    check_launched(
        &ec2,
        &first.id,
        "default",
        &class,
        "default-abcde",
        "default",
    )
    .await
    .expect("the instance matches its class");
    assert_eq!(
        (first.instance_type.as_str(), first.zone.as_str()),
        ("m5.large", "ap-northeast-2c"),
        "the cheapest choice with a subnet"
    );
    assert_eq!(
        first.provider_id(),
        format!("aws:///ap-northeast-2c/{}", first.id)
    );

    // the instance carries Kerf's tags and the seed class's own
    let described = ec2
        .describe_instances()
        .instance_ids(&first.id)
        .send()
        .await
        .expect("describe");
    let instance = &described.reservations()[0].instances()[0];
    let tags = instance.tags();
    assert_eq!(
        tag_of(tags, "karpenter.sh/nodeclaim"),
        Some("default-abcde")
    );
    assert_eq!(tag_of(tags, "karpenter.sh/nodepool"), Some("default"));
    assert_eq!(
        tag_of(tags, "karpenter.k8s.aws/ec2nodeclass"),
        Some("default")
    );
    assert_eq!(tag_of(tags, "eks:eks-cluster-name"), Some(CLUSTER));
    assert_eq!(
        tag_of(tags, &format!("kubernetes.io/cluster/{CLUSTER}")),
        Some("owned")
    );
    for (k, v) in &class.spec.tags {
        assert_eq!(tag_of(tags, k), Some(v.as_str()), "class tag {k}");
    }
    assert_eq!(instance.image_id(), Some("ami-ekslinux"));
    assert_eq!(first.image_id.as_deref(), Some("ami-ekslinux"));
    // its subnet (one of the class's in its zone) and the class's security groups, which
    // drift is judged by
    let placed = first.network.clone().expect("network");
    assert_eq!(instance.subnet_id(), Some(placed.subnet_id.as_str()));
    assert!(
        status
            .subnets
            .iter()
            .any(|s| s.id == placed.subnet_id && s.zone == "ap-northeast-2c"),
        "{placed:?}"
    );
    let groups: BTreeSet<String> = status
        .security_groups
        .iter()
        .map(|g| g.id.clone())
        .collect();
    assert!(!groups.is_empty());
    assert_eq!(placed.security_group_ids, groups);

    // a launch template per AMI the choices need; the amd64 one's user data joins the
    // cluster through nodeadm
    let templates = ec2
        .describe_launch_templates()
        .send()
        .await
        .expect("templates");
    assert_eq!(templates.launch_templates().len(), 2);
    let mut amd64 = None;
    for template in templates.launch_templates() {
        assert!(
            template
                .launch_template_name()
                .unwrap_or_default()
                .starts_with("karpenter.k8s.aws/")
        );
        let versions = ec2
            .describe_launch_template_versions()
            .launch_template_id(template.launch_template_id().unwrap_or_default())
            .send()
            .await
            .expect("versions");
        let data = versions.launch_template_versions()[0]
            .launch_template_data()
            .cloned()
            .expect("data");
        if data.image_id() == Some("ami-ekslinux") {
            amd64 = Some(data);
        }
    }
    let data = amd64.expect("a template for the amd64 AMI");
    assert_eq!(
        data.iam_instance_profile().and_then(|p| p.name()),
        Some("KarpenterNodeInstanceProfile")
    );
    let user_data = base64::engine::general_purpose::STANDARD
        .decode(data.user_data().unwrap_or_default())
        .expect("base64");
    let text = String::from_utf8(user_data).expect("utf-8");
    let node_config = text
        .split("--//")
        .find(|part| part.contains("application/node.eks.aws"))
        .expect("a NodeConfig part");
    assert!(node_config.contains(&format!("name: {CLUSTER}")), "{text}");
    assert!(node_config.contains("cidr: 10.100.0.0/16"), "{text}");
    assert!(
        node_config.contains("- --node-labels=\"karpenter.sh/nodepool=default,team=web\""),
        "{text}"
    );
    assert!(
        node_config.contains("key: karpenter.sh/unregistered"),
        "{text}"
    );

    // a second NodeClaim of the same class reuses the template
    let second = fleet
        .launch(&LaunchOrder {
            nodeclaim: "default-fghij",
            ..request
        })
        .await
        .expect("launch");
    fleet
        .tag_nodeclaim(&second.id, "default-fghij")
        .await
        .expect("tag");
    let templates = ec2
        .describe_launch_templates()
        .send()
        .await
        .expect("templates");
    assert_eq!(templates.launch_templates().len(), 2);

    // an instance whose groups were changed after launch no longer matches its class
    let other = ec2
        .describe_security_groups()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("group-name")
                .values("other")
                .build(),
        )
        .send()
        .await
        .expect("groups")
        .security_groups()[0]
        .group_id()
        .expect("id")
        .to_string();
    assert_ne!(other, nodes_group);
    ec2.modify_instance_attribute()
        .instance_id(&second.id)
        .groups(&other)
        .send()
        .await
        .expect("modify groups");
    let wrong = check_launched(
        &ec2,
        &second.id,
        "default",
        &class,
        "default-fghij",
        "default",
    )
    .await
    .expect_err("a wrong group is caught");
    assert!(
        wrong.len() == 1 && wrong[0].starts_with("SecurityGroups"),
        "{wrong:?}"
    );

    // listed with their subnets
    let subnet = |n: Option<InstanceNetwork>| n.map(|n| n.subnet_id);
    let listed: Vec<(String, Option<String>, Option<String>)> = fleet
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|i| (i.id, i.nodeclaim, subnet(i.network)))
        .collect();
    let mut expected = vec![
        (
            first.id.clone(),
            Some("default-abcde".to_string()),
            subnet(first.network.clone()),
        ),
        (
            second.id.clone(),
            Some("default-fghij".to_string()),
            subnet(second.network.clone()),
        ),
    ];
    expected.sort();
    assert_eq!(listed, expected);

    fleet
        .terminate(&first.provider_id())
        .await
        .expect("terminate");
    fleet
        .terminate(&first.provider_id())
        .await
        .expect("terminating twice is not an error");
    let listed: Vec<String> = fleet
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(listed, std::slice::from_ref(&second.id));

    // a reboot for repair: EC2 takes it; an instance that is not there has nothing to reboot
    let rebooted = fleet.reboot(&second.provider_id()).await;
    assert_eq!(rebooted.expect("reboot"), RebootOutcome::Rebooted);
    let gone = fleet.reboot("aws:///us-east-1a/i-0000000000000dead").await;
    assert_eq!(gone.expect("an answer"), RebootOutcome::NotFound);

    // three NodeClaims of one shape launched together are one fleet of three instances, one
    // for each, each tagged with its own NodeClaim
    let fleets = |ec2: aws_sdk_ec2::Client| async move {
        let described = ec2.describe_fleets().send().await.expect("fleets");
        described.fleets().len()
    };
    let before = fleets(ec2.clone()).await;
    let names = ["default-a", "default-b", "default-c"];
    let [a, b, c] = names.map(|nodeclaim| LaunchOrder {
        nodeclaim,
        ..request
    });
    let (a, b, c) = tokio::join!(fleet.launch(&a), fleet.launch(&b), fleet.launch(&c));
    assert_eq!(fleets(ec2.clone()).await, before + 1, "one fleet request");
    let burst = [a, b, c].map(|r| r.expect("launched"));
    let ids: BTreeSet<&str> = burst.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids.len(), 3, "{burst:?}");
    for (instance, name) in burst.iter().zip(names) {
        fleet.tag_nodeclaim(&instance.id, name).await.expect("tag");
    }
    for (instance, name) in burst.iter().zip(names) {
        check_launched(&ec2, &instance.id, "default", &class, name, "default")
            .await
            .expect("each instance is its class's, tagged with its own NodeClaim");
    }
}

/// The status a class resolves to, with the instance profile the tests make.
fn status_of(resolved: kerf_aws_provider::Resolved) -> EC2NodeClassStatus {
    EC2NodeClassStatus {
        subnets: resolved.subnets,
        security_groups: resolved.security_groups,
        amis: resolved.amis,
        instance_profile: Some("KarpenterNodeInstanceProfile".into()),
        capacity_reservations: resolved.capacity_reservations,
        conditions: resolved.conditions,
    }
}

/// A class status with one subnet in each of two zones and one amd64 AMI.
fn status() -> EC2NodeClassStatus {
    EC2NodeClassStatus {
        subnets: vec![
            SubnetStatus {
                id: "subnet-a".into(),
                zone: "ap-northeast-2a".into(),
                zone_id: None,
            },
            SubnetStatus {
                id: "subnet-a2".into(),
                zone: "ap-northeast-2a".into(),
                zone_id: None,
            },
            SubnetStatus {
                id: "subnet-c".into(),
                zone: "ap-northeast-2c".into(),
                zone_id: None,
            },
        ],
        security_groups: vec![SecurityGroupStatus {
            id: "sg-1".into(),
            name: None,
        }],
        amis: vec![AmiStatus {
            id: "ami-1".into(),
            name: None,
            requirements: vec![kerf_api::common::NodeSelectorRequirementWithMinValues {
                key: labels::ARCH.into(),
                operator: kerf_api::common::Operator::In,
                values: vec!["amd64".into()],
                min_values: None,
            }],
            deprecated: None,
        }],
        instance_profile: Some("profile".into()),
        capacity_reservations: Vec::new(),
        conditions: Vec::new(),
    }
}

fn fleet_error(code: &str, instance_type: &str, subnet: &str) -> CreateFleetError {
    CreateFleetError::builder()
        .error_code(code)
        .error_message(format!("{code} for {instance_type}"))
        .launch_template_and_overrides(
            LaunchTemplateAndOverridesResponse::builder()
                .overrides(
                    FleetLaunchTemplateOverrides::builder()
                        .instance_type(instance_type.into())
                        .subnet_id(subnet)
                        .build(),
                )
                .build(),
        )
        .build()
}

/// A Fleet whose EC2 answers the template calls and then `create_fleet` rules in order.
fn mocked(rules: &[&aws_smithy_mocks::Rule]) -> Fleet {
    let describe = mock!(aws_sdk_ec2::Client::describe_launch_templates).then_output(|| {
        DescribeLaunchTemplatesOutput::builder()
            .launch_templates(
                Ec2LaunchTemplate::builder()
                    .launch_template_id("lt-1")
                    .build(),
            )
            .build()
    });
    let create = mock!(aws_sdk_ec2::Client::create_launch_template)
        .then_output(|| CreateLaunchTemplateOutput::builder().build());
    let mut interceptor = aws_smithy_mocks::MockResponseInterceptor::new()
        .rule_mode(RuleMode::MatchAny)
        .with_rule(&describe)
        .with_rule(&create);
    for rule in rules {
        interceptor = interceptor.with_rule(rule);
    }
    let config = aws_sdk_ec2::Config::builder()
        .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
        .region(aws_sdk_ec2::config::Region::new("ap-northeast-2"))
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .http_client(aws_smithy_mocks::create_mock_http_client())
        .interceptor(interceptor)
        .build();
    Fleet::with_client(aws_sdk_ec2::Client::from_conf(config), cluster())
}

fn mocked_request<'a>(
    status: &'a EC2NodeClassStatus,
    spec: &'a kerf_api::EC2NodeClassSpec,
    choices: &'a [Choice],
    labels: &'a BTreeMap<String, String>,
) -> LaunchOrder<'a> {
    LaunchOrder {
        nodeclaim: "spot-abcde",
        node_pool: "spot",
        node_class: "default",
        spec,
        status,
        capacity_type: labels::CAPACITY_TYPE_SPOT,
        choices,
        labels,
        taints: &[],
        reservation: None,
    }
}

#[tokio::test]
async fn insufficient_capacity_names_the_offerings_to_mark_unavailable() {
    let ice = mock!(aws_sdk_ec2::Client::create_fleet).then_output(|| {
        CreateFleetOutput::builder()
            .errors(fleet_error(
                "InsufficientInstanceCapacity",
                "m5.large",
                "subnet-a",
            ))
            .errors(fleet_error("UnfulfillableCapacity", "c5.large", "subnet-c"))
            .build()
    });
    let fleet = mocked(&[&ice]);
    let status = status();
    let spec = seed_node_class().spec;
    let choices = [
        choice("m5.large", "ap-northeast-2a", "amd64"),
        choice("c5.large", "ap-northeast-2c", "amd64"),
    ];
    let node_labels = BTreeMap::new();
    let err = fleet
        .launch(&mocked_request(&status, &spec, &choices, &node_labels))
        .await
        .expect_err("no capacity");
    let LaunchError::InsufficientCapacity(offerings) = err else {
        panic!("{err}");
    };
    let spot = |t: &str, z: &str| Unavailable {
        capacity_type: "spot".into(),
        instance_type: t.into(),
        zone: z.into(),
    };
    assert_eq!(
        offerings,
        [
            spot("c5.large", "ap-northeast-2c"),
            spot("m5.large", "ap-northeast-2a")
        ]
    );
}

/// Launches of one shape in flight together go out as one fleet request for all of them, and
/// a launch of another shape apart; when EC2 fills a request in part, the launch left over is
/// told so (and tried again), never handed another's instance.
#[tokio::test]
async fn launches_of_one_shape_share_one_fleet_request() {
    let asked = |r: &aws_sdk_ec2::operation::create_fleet::CreateFleetInput| {
        (r.target_capacity_specification()).and_then(|t| t.total_target_capacity())
    };
    let three = mock!(aws_sdk_ec2::Client::create_fleet)
        .match_requests(move |r| asked(r) == Some(3))
        .then_output(|| {
            CreateFleetOutput::builder()
                .instances(
                    CreateFleetInstance::builder()
                        .instance_ids("i-1")
                        .instance_ids("i-2")
                        .instance_type("m5.large".into())
                        .build(),
                )
                .build()
        });
    let one = mock!(aws_sdk_ec2::Client::create_fleet)
        .match_requests(move |r| asked(r) == Some(1))
        .then_output(|| {
            CreateFleetOutput::builder()
                .instances(
                    CreateFleetInstance::builder()
                        .instance_ids("i-3")
                        .instance_type("c5.large".into())
                        .build(),
                )
                .build()
        });
    let fleet = mocked(&[&three, &one]);
    let status = status();
    let spec = seed_node_class().spec;
    let choices = [choice("m5.large", "ap-northeast-2a", "amd64")];
    let other = [choice("c5.large", "ap-northeast-2c", "amd64")];
    let node_labels = BTreeMap::new();
    let base = mocked_request(&status, &spec, &choices, &node_labels);
    let [a, b, c] =
        ["spot-a", "spot-b", "spot-c"].map(|nodeclaim| LaunchOrder { nodeclaim, ..base });
    let d = mocked_request(&status, &spec, &other, &node_labels);
    let (a, b, c, d) = tokio::join!(
        fleet.launch(&a),
        fleet.launch(&b),
        fleet.launch(&c),
        fleet.launch(&d),
    );
    assert_eq!((three.num_calls(), one.num_calls()), (1, 1));
    let launched: BTreeSet<String> = [&a, &b, &c]
        .into_iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|i| i.id.clone())
        .collect();
    assert_eq!(launched, BTreeSet::from(["i-1".into(), "i-2".into()]));
    let left: Vec<String> = [a, b, c]
        .into_iter()
        .filter_map(Result::err)
        .map(|e| e.to_string())
        .collect();
    assert!(
        left.len() == 1 && left[0].contains("too few instances returned"),
        "{left:?}"
    );
    assert_eq!(d.expect("the other shape").id, "i-3");
}

#[tokio::test]
async fn a_subnet_out_of_addresses_is_left_out_and_the_fleet_asked_again() {
    let exhausted = mock!(aws_sdk_ec2::Client::create_fleet)
        .match_requests(|r| {
            r.launch_template_configs()[0]
                .overrides()
                .iter()
                .any(|o| o.subnet_id() == Some("subnet-a"))
        })
        .then_output(|| {
            CreateFleetOutput::builder()
                .errors(fleet_error(
                    "InsufficientFreeAddressesInSubnet",
                    "m5.large",
                    "subnet-a",
                ))
                .build()
        });
    let launched = mock!(aws_sdk_ec2::Client::create_fleet)
        .match_requests(|r| {
            r.launch_template_configs()[0]
                .overrides()
                .iter()
                .any(|o| o.subnet_id() == Some("subnet-a2"))
        })
        .then_output(|| {
            CreateFleetOutput::builder()
                .instances(
                    CreateFleetInstance::builder()
                        .instance_ids("i-0abc")
                        .instance_type("m5.large".into())
                        .launch_template_and_overrides(
                            LaunchTemplateAndOverridesResponse::builder()
                                .overrides(
                                    FleetLaunchTemplateOverrides::builder()
                                        .subnet_id("subnet-a2")
                                        .build(),
                                )
                                .build(),
                        )
                        .build(),
                )
                .build()
        });
    let fleet = mocked(&[&exhausted, &launched]);
    let status = status();
    let spec = seed_node_class().spec;
    let choices = [choice("m5.large", "ap-northeast-2a", "amd64")];
    let node_labels = BTreeMap::new();
    let instance = fleet
        .launch(&mocked_request(&status, &spec, &choices, &node_labels))
        .await
        .expect("launched in the other subnet");
    assert_eq!(instance.id, "i-0abc");
    assert_eq!(instance.zone, "ap-northeast-2a");
    assert_eq!(exhausted.num_calls(), 1);
    assert_eq!(launched.num_calls(), 1);
}

#[tokio::test]
async fn a_denied_fleet_request_names_the_permission() {
    let denied = mock!(aws_sdk_ec2::Client::create_fleet).then_error(|| {
        aws_sdk_ec2::operation::create_fleet::CreateFleetError::generic(
            aws_sdk_ec2::error::ErrorMetadata::builder()
                .code("UnauthorizedOperation")
                .message("You are not authorized to perform this operation.")
                .build(),
        )
    });
    let fleet = mocked(&[&denied]);
    let status = status();
    let spec = seed_node_class().spec;
    let choices = [choice("m5.large", "ap-northeast-2a", "amd64")];
    let node_labels = BTreeMap::new();
    let err = fleet
        .launch(&mocked_request(&status, &spec, &choices, &node_labels))
        .await
        .expect_err("denied");
    let text = err.to_string();
    assert!(
        text.starts_with("ec2:CreateFleet is not allowed for Kerf's role"),
        "{text}"
    );

    // and a class with nothing resolved says so before calling EC2
    let empty = EC2NodeClassStatus::default();
    let err = fleet
        .launch(&mocked_request(&empty, &spec, &choices, &node_labels))
        .await
        .expect_err("not ready");
    assert_eq!(
        err.to_string(),
        "EC2NodeClass default: no subnets resolved (status.subnets is empty)"
    );
    assert_eq!(denied.num_calls(), 1);
}

/// The launch template data of the template `image` and `user_data` marker, as moto keeps it.
async fn template_with(
    ec2: &aws_sdk_ec2::Client,
    marker: &str,
) -> Option<(aws_sdk_ec2::types::ResponseLaunchTemplateData, String)> {
    let templates = ec2.describe_launch_templates().send().await.ok()?;
    for template in templates.launch_templates() {
        let versions = ec2
            .describe_launch_template_versions()
            .launch_template_id(template.launch_template_id().unwrap_or_default())
            .send()
            .await
            .ok()?;
        let data = versions.launch_template_versions()[0]
            .launch_template_data()
            .cloned()?;
        let text = base64::engine::general_purpose::STANDARD
            .decode(data.user_data().unwrap_or_default())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .unwrap_or_default();
        if text.contains(marker) {
            return Some((data, text));
        }
    }
    None
}

#[tokio::test]
async fn every_launch_option_of_the_class_reaches_the_template_in_each_family() {
    let moto = Moto::start("launch-options", &SEED_AMI_PARAMETERS);
    let config = moto.config().await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    network(&ec2).await;
    aws_sdk_iam::Client::new(&config)
        .create_instance_profile()
        .instance_profile_name("KarpenterNodeInstanceProfile")
        .send()
        .await
        .expect("create the instance profile");
    let fleet = Fleet::new(&config, cluster());
    ec2.create_placement_group()
        .group_name("training")
        .strategy(aws_sdk_ec2::types::PlacementStrategy::Cluster)
        .send()
        .await
        .expect("create the placement group");
    let options: serde_json::Value = serde_json::json!({
        "placementGroupSelector": {"name": "training"},
        "instanceStorePolicy": "RAID0",
        "ipPrefixCount": 2,
        "networkInterfaces": [
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"}
        ],
        "connectionTracking": {"udpTimeout": 45},
        "cpuOptions": {"nestedVirtualization": "enabled"},
        "enclaveOptions": {"enabled": true},
        "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true,
            "ebs": {"snapshotID": "snap-0123456789abcdef0", "volumeSize": "40Gi", "volumeInitializationRate": 200}}]
    });
    // each family's RAID0 setup, as Karpenter's AWS provider writes it
    let families = [
        (
            serde_json::json!([{"alias": "al2023@v20250228"}]),
            None,
            "strategy: RAID0",
        ),
        (
            serde_json::json!([{"id": "ami-ekslinux"}]),
            Some("AL2"),
            "--local-disks raid0",
        ),
        (
            serde_json::json!([{"id": "ami-ekslinux"}]),
            Some("Bottlerocket"),
            "[settings.bootstrap-commands.000-mount-instance-storage]",
        ),
    ];
    for (n, (terms, family, marker)) in families.into_iter().enumerate() {
        let mut class = seed_node_class();
        let mut spec = serde_json::to_value(&class.spec).expect("spec");
        for (k, v) in options.as_object().expect("options") {
            spec[k] = v.clone();
        }
        spec["amiSelectorTerms"] = terms;
        if let Some(f) = family {
            spec["amiFamily"] = f.into();
        }
        class.spec = serde_json::from_value(spec).expect("a valid spec");
        let resolved = Discovery::new(&config)
            .resolve(&class.spec, "1.33", NOW)
            .await
            .expect("discovery");
        let group = resolved
            .placement_group
            .clone()
            .expect("the placement group");
        let status = status_of(resolved);
        fleet.set_placement_group("default", Some(group.clone()));
        let choices = [choice("m5.large", "ap-northeast-2c", "amd64")];
        let node_labels = BTreeMap::from([("karpenter.sh/nodepool".into(), "default".into())]);
        let name = format!("default-{n}");
        fleet
            .launch(&LaunchOrder {
                nodeclaim: &name,
                node_pool: "default",
                node_class: "default",
                spec: &class.spec,
                status: &status,
                capacity_type: labels::CAPACITY_TYPE_ON_DEMAND,
                choices: &choices,
                labels: &node_labels,
                taints: &[],
                reservation: None,
            })
            .await
            .unwrap_or_else(|e| panic!("{family:?}: {e}"));
        let (data, text) = template_with(&ec2, marker)
            .await
            .unwrap_or_else(|| panic!("{family:?}: no template's user data holds {marker:?}"));
        if family == Some("Bottlerocket") {
            // an image picked by id has no release to read: the directories are named
            assert!(
                text.contains("'ephemeral-storage', 'bind', '--dirs', '/var/lib/containerd'")
                    || text.contains(
                        r#""ephemeral-storage", "bind", "--dirs", "/var/lib/containerd""#
                    ),
                "{text}"
            );
            assert!(text.contains("mode = \"always\""), "{text}");
        }
        // the interfaces: the primary one with the groups, prefixes and connection tracking,
        // the efa-only one with neither
        let nics = data.network_interfaces();
        assert_eq!(nics.len(), 2, "{family:?}: {nics:?}");
        let primary = nics
            .iter()
            .find(|i| i.device_index() == Some(0))
            .expect("the primary interface");
        assert_eq!(primary.ipv4_prefix_count(), Some(2));
        assert_eq!(primary.interface_type(), Some("interface"));
        assert!(!primary.groups().is_empty(), "{primary:?}");
        assert_eq!(
            primary
                .connection_tracking_specification()
                .and_then(|c| c.udp_timeout()),
            Some(45)
        );
        let efa = nics
            .iter()
            .find(|i| i.device_index() == Some(1))
            .expect("the efa interface");
        assert_eq!(efa.interface_type(), Some("efa-only"));
        assert_eq!(efa.ipv4_prefix_count(), None);
        assert!(efa.connection_tracking_specification().is_none());
        assert!(
            data.security_group_ids().is_empty(),
            "the groups are on the interfaces"
        );
        assert_eq!(
            data.cpu_options()
                .and_then(|c| c.nested_virtualization())
                .map(|n| n.as_str()),
            Some("enabled")
        );
        assert_eq!(data.enclave_options().and_then(|e| e.enabled()), Some(true));
        assert_eq!(
            data.placement().and_then(|p| p.group_id()),
            Some(group.id.as_str()),
            "launched into the class's placement group"
        );
        let ebs = data.block_device_mappings()[0].ebs().expect("ebs");
        assert_eq!(ebs.volume_initialization_rate(), Some(200));
        // nothing else of the family's user data was lost
        assert!(text.contains(CLUSTER), "{family:?}: {text}");
    }
}

/// An EC2 error with `code` and `message`, as a `T` operation's error.
fn ec2_error<T: aws_smithy_types::error::metadata::ProvideErrorMetadata>(
    make: fn(aws_sdk_ec2::error::ErrorMetadata) -> T,
    code: &str,
    message: &str,
) -> T {
    make(
        aws_sdk_ec2::error::ErrorMetadata::builder()
            .code(code)
            .message(message)
            .build(),
    )
}

/// What a dry run that would have succeeded answers, as EC2 says it.
const WOULD_SUCCEED: &str = "Request would have succeeded, but DryRun flag is set.";

/// `RunInstances` dry runs answered by subnet: `(subnet, code, message)`.
fn run_instances_answers(
    answers: &[(&'static str, &'static str, &'static str)],
) -> Vec<aws_smithy_mocks::Rule> {
    use aws_sdk_ec2::operation::run_instances::RunInstancesError;
    answers
        .iter()
        .map(|&(subnet, code, message)| {
            mock!(aws_sdk_ec2::Client::run_instances)
                .match_requests(move |r| {
                    r.dry_run() == Some(true)
                        && r.network_interfaces()
                            .iter()
                            .all(|n| n.subnet_id() == Some(subnet))
                })
                .then_error(move || ec2_error(RunInstancesError::generic, code, message))
        })
        .collect()
}

fn fleet_dry_run(code: &'static str, message: &'static str) -> aws_smithy_mocks::Rule {
    use aws_sdk_ec2::operation::create_fleet::CreateFleetError;
    mock!(aws_sdk_ec2::Client::create_fleet)
        .match_requests(|r| {
            let overrides: Vec<_> = (r.launch_template_configs().iter())
                .flat_map(|c| c.overrides())
                .collect();
            // the probe's one instance type in every subnet of the class
            r.dry_run() == Some(true)
                && overrides.len() == 3
                && overrides
                    .iter()
                    .all(|o| o.instance_type().map(|t| t.as_str()) == Some("m5.large"))
        })
        .then_error(move || ec2_error(CreateFleetError::generic, code, message))
}

async fn authorize(fleet: &Fleet, spec: &kerf_api::EC2NodeClassSpec) -> Verdict {
    let status = status();
    let choice = choice("m5.large", "", "amd64");
    let probe = Probe {
        node_class: "default",
        spec,
        status: &status,
        choice: &choice,
    };
    fleet.authorize(&probe).await
}

#[tokio::test]
async fn the_authorization_check_dry_runs_a_fleet_then_instances_until_a_subnet_passes() {
    let fleet_passes = fleet_dry_run("DryRunOperation", WOULD_SUCCEED);
    let runs = run_instances_answers(&[
        (
            "subnet-a",
            "InvalidSubnetID.NotFound",
            "The subnet ID 'subnet-a' does not exist",
        ),
        ("subnet-a2", "DryRunOperation", WOULD_SUCCEED),
        ("subnet-c", "DryRunOperation", WOULD_SUCCEED),
    ]);
    let mut rules = vec![&fleet_passes];
    rules.extend(runs.iter());
    let fleet = mocked(&rules);
    let spec = seed_node_class().spec;
    assert_eq!(authorize(&fleet, &spec).await, Verdict::Authorized);
    assert_eq!(fleet_passes.num_calls(), 1);
    // the first subnet's answer is no verdict; the second passes, the third is not asked
    let calls: Vec<usize> = runs.iter().map(|r| r.num_calls()).collect();
    assert_eq!(calls, [1, 1, 0]);
}

#[tokio::test]
async fn a_refused_dry_run_fails_validation_in_karpenters_words_for_its_call() {
    // the fleet refused: no instance is tried
    let refused = fleet_dry_run(
        "UnauthorizedOperation",
        "You are not authorized to perform this operation. User: arn:aws:sts::1:assumed-role/k/kerf is not authorized to perform: ec2:CreateFleet with an explicit deny in a service control policy",
    );
    let runs = run_instances_answers(&[("subnet-a", "DryRunOperation", WOULD_SUCCEED)]);
    let fleet = mocked(&[&refused, &runs[0]]);
    let spec = seed_node_class().spec;
    let Verdict::Refused { condition, said } = authorize(&fleet, &spec).await else {
        panic!("not refused");
    };
    assert_eq!(
        (
            condition.type_.as_str(),
            condition.status.as_str(),
            condition.reason.as_str()
        ),
        ("ValidationSucceeded", "False", "CreateFleetAuthCheckFailed")
    );
    assert_eq!(
        condition.message,
        "Controller isn't authorized to call ec2:CreateFleet: User is not authorized to perform this operation due to a service control policy"
    );
    assert_eq!(said, "unauthorized to call ec2:CreateFleet");
    assert_eq!(runs[0].num_calls(), 0);

    // every subnet refused: the first's refusal is the verdict
    let passes = fleet_dry_run("DryRunOperation", WOULD_SUCCEED);
    let denied =
        "User: arn:aws:sts::1:assumed-role/k/kerf is not authorized to perform: ec2:RunInstances";
    let runs = run_instances_answers(&[
        ("subnet-a", "UnauthorizedOperation", denied),
        ("subnet-a2", "AccessDenied", denied),
        ("subnet-c", "AccessDenied", denied),
    ]);
    let mut rules = vec![&passes];
    rules.extend(runs.iter());
    let fleet = mocked(&rules);
    let Verdict::Refused { condition, .. } = authorize(&fleet, &spec).await else {
        panic!("not refused");
    };
    assert_eq!(condition.reason, "RunInstancesAuthCheckFailed");
    assert_eq!(
        condition.message,
        "Controller isn't authorized to call ec2:RunInstances: User is not authorized to perform this operation because no identity-based policy allows it"
    );

    // a throttled fleet gives no verdict: the condition stays as it was
    let throttled = fleet_dry_run("RequestLimitExceeded", "Request limit exceeded.");
    let fleet = mocked(&[&throttled]);
    assert!(
        matches!(authorize(&fleet, &spec).await, Verdict::Unanswered(ref t) if t.contains("RequestLimitExceeded")),
    );

    // an instance profile the class names that EC2 does not know: said, not held
    let passes = fleet_dry_run("DryRunOperation", WOULD_SUCCEED);
    let runs = run_instances_answers(&[
        (
            "subnet-a",
            "InvalidParameterValue",
            "Value (profile) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name",
        ),
        (
            "subnet-a2",
            "InvalidParameterValue",
            "Invalid IAM Instance Profile name",
        ),
        (
            "subnet-c",
            "InvalidParameterValue",
            "Invalid IAM Instance Profile name",
        ),
    ]);
    let mut rules = vec![&passes];
    rules.extend(runs.iter());
    let fleet = mocked(&rules);
    let mut named = spec.clone();
    named.role = None;
    named.instance_profile = Some("profile".into());
    let Verdict::NotHeld(condition) = authorize(&fleet, &named).await else {
        panic!("not said");
    };
    assert_eq!(
        (condition.reason.as_str(), condition.message.as_str()),
        (
            "InstanceProfileNotFound",
            "Instance profile \"profile\" not found"
        )
    );
}
