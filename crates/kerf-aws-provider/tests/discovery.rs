//! EC2NodeClass discovery against moto's EC2 and SSM: the seed node class resolves into
//! status, and selectors that match nothing say what is missing.

mod support;

use kerf_api::common::Operator;
use kerf_api::labels;
use kerf_aws_provider::Discovery;
use kerf_aws_provider::instance_profile::InstanceProfiles;
use kerf_aws_provider::node_class::{self, READY};
use kerf_aws_provider::node_class::{
    AMIS_READY, PLACEMENT_GROUP_READY, SECURITY_GROUPS_READY, SUBNETS_READY,
};
use serde_json::json;
use support::{
    ARM64_IMAGE, CLUSTER, Moto, NOW, REGION, SEED_AMI_PARAMETERS, network, seed_node_class,
};

fn condition<'a>(
    resolved: &'a kerf_aws_provider::Resolved,
    type_: &str,
) -> &'a kerf_api::common::Condition {
    resolved
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

/// A status's `Ready` condition.
fn ready_of(status: &kerf_api::ec2nodeclass::EC2NodeClassStatus) -> &kerf_api::common::Condition {
    (status.conditions.iter())
        .find(|c| c.type_ == READY)
        .expect("Ready")
}

#[tokio::test]
async fn the_seed_node_class_resolves_its_subnets_security_groups_and_al2023_amis() {
    // the seed's pinned AL2023 release: moto's EKS image for x86_64, one of moto's Amazon
    // arm64 images for arm64, and no GPU builds published
    let moto = Moto::start("seed", &SEED_AMI_PARAMETERS);
    let config = moto.config().await;
    let (small, large, group) = network(&aws_sdk_ec2::Client::new(&config)).await;

    let resolved = Discovery::new(&config)
        .resolve(&seed_node_class().spec, "1.33", NOW)
        .await
        .expect("discovery");

    // the /20 has more free addresses, so it comes first
    let subnets: Vec<&str> = resolved.subnets.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(subnets, [large.as_str(), small.as_str()]);
    assert_eq!(resolved.subnets[0].zone, "ap-northeast-2c");
    assert!(resolved.subnets.iter().all(|s| s.zone_id.is_some()));
    assert_eq!(resolved.security_groups.len(), 1);
    assert_eq!(resolved.security_groups[0].id, group);
    assert_eq!(resolved.security_groups[0].name.as_deref(), Some("nodes"));

    let amis: Vec<(&str, &str)> = resolved
        .amis
        .iter()
        .map(|a| {
            let arch = a
                .requirements
                .iter()
                .find(|r| r.key == labels::ARCH)
                .map(|r| r.values[0].as_str())
                .unwrap_or("?");
            (a.id.as_str(), arch)
        })
        .collect();
    assert!(amis.contains(&("ami-ekslinux", "amd64")), "{amis:?}");
    assert!(amis.contains(&(ARM64_IMAGE, "arm64")), "{amis:?}");
    assert_eq!(amis.len(), 2, "{amis:?}");
    // a standard build serves instance types without GPUs or accelerators
    let standard = &resolved.amis[0].requirements;
    assert!(
        standard
            .iter()
            .any(|r| r.key == labels::INSTANCE_GPU_COUNT && r.operator == Operator::DoesNotExist)
    );
    for type_ in [SUBNETS_READY, SECURITY_GROUPS_READY, AMIS_READY] {
        assert_eq!(condition(&resolved, type_).status, "True", "{type_}");
    }
}

#[tokio::test]
async fn selectors_that_match_nothing_say_what_is_missing() {
    let moto = Moto::start("missing", &[]);
    let config = moto.config().await;
    network(&aws_sdk_ec2::Client::new(&config)).await;
    let mut spec = seed_node_class().spec;
    for term in &mut spec.subnet_selector_terms {
        term.tags = Some(
            [(
                "karpenter.sh/discovery".to_string(),
                "my-cluster".to_string(),
            )]
            .into(),
        );
    }
    spec.security_group_selector_terms[0].tags = None;
    spec.security_group_selector_terms[0].name = Some("absent".into());
    spec.ami_selector_terms[0].alias = Some("al2023@latest".into());
    let discovery = Discovery::new(&config);
    let resolved = discovery
        .resolve(&spec, "1.33", NOW)
        .await
        .expect("discovery");
    assert!(resolved.subnets.is_empty() && resolved.security_groups.is_empty());
    let subnets = condition(&resolved, SUBNETS_READY);
    assert_eq!(
        (subnets.status.as_str(), subnets.reason.as_str()),
        ("False", "SubnetsNotFound")
    );
    assert_eq!(
        subnets.message,
        "SubnetSelector did not match any Subnets: no subnet matches karpenter.sh/discovery=my-cluster"
    );
    let groups = condition(&resolved, SECURITY_GROUPS_READY);
    assert_eq!(groups.reason, "SecurityGroupsNotFound");
    assert!(
        groups
            .message
            .ends_with("no security group matches name=absent"),
        "{}",
        groups.message
    );
    let amis = condition(&resolved, AMIS_READY);
    assert_eq!(amis.reason, "AMINotFound");
    assert!(
        amis.message.ends_with("no AMI matches alias=al2023@latest"),
        "{}",
        amis.message
    );

    // an alias the cluster cannot use is its own reason
    spec.ami_selector_terms[0].alias = Some("al2@latest".into());
    let resolved = discovery
        .resolve(&spec, "1.33", NOW)
        .await
        .expect("discovery");
    let amis = condition(&resolved, AMIS_READY);
    assert_eq!(amis.reason, "UnsupportedAlias");
    assert!(
        amis.message
            .contains("AL2 aliases are no longer supported on EKS 1.33+")
    );
}

#[tokio::test]
async fn a_name_selector_keeps_one_image_per_architecture() {
    let moto = Moto::start("names", &[]);
    let config = moto.config().await;
    let mut spec = seed_node_class().spec;
    spec.ami_selector_terms[0] = kerf_api::ec2nodeclass::AmiSelectorTerm {
        name: Some("amzn2-ami-hvm-*".into()),
        owner: Some("amazon".into()),
        ..Default::default()
    };
    let resolved = Discovery::new(&config)
        .resolve(&spec, "1.33", NOW)
        .await
        .expect("discovery");
    let mut arches: Vec<&str> = resolved
        .amis
        .iter()
        .flat_map(|a| a.requirements.iter().filter(|r| r.key == labels::ARCH))
        .map(|r| r.values[0].as_str())
        .collect();
    arches.sort();
    // moto has three x86_64 and one arm64 `amzn2-ami-hvm-*` image: one of each is kept
    assert_eq!(arches, ["amd64", "arm64"], "{:?}", resolved.amis);
    assert_eq!(condition(&resolved, AMIS_READY).status, "True");
}

#[tokio::test]
async fn the_seed_class_is_ready_with_an_instance_profile_for_its_role() {
    let moto = Moto::start("profile", &SEED_AMI_PARAMETERS);
    let config = moto.config().await;
    network(&aws_sdk_ec2::Client::new(&config)).await;
    let class = seed_node_class();
    let role = class.spec.role.clone().expect("the seed names a role");
    aws_sdk_iam::Client::new(&config)
        .create_role()
        .role_name(&role)
        .assume_role_policy_document(r#"{"Version":"2012-10-17","Statement":[]}"#)
        .send()
        .await
        .expect("create role");
    let discovery = Discovery::new(&config);
    let profiles = InstanceProfiles::new(&config, CLUSTER, REGION);
    let status = node_class::status(&discovery, &profiles, "default", &class.spec, "1.33", NOW)
        .await
        .expect("status")
        .status;
    let ready = ready_of(&status);
    assert_eq!(ready.status, "True", "{:?}", status.conditions);
    let profile = status.instance_profile.clone().expect("a profile");
    assert!(profile.starts_with(&format!("{CLUSTER}_")), "{profile}");
    let made = aws_sdk_iam::Client::new(&config)
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await
        .expect("the profile exists");
    let made = made.instance_profile().expect("profile");
    let roles: Vec<&str> = made.roles().iter().map(|r| r.role_name()).collect();
    assert_eq!(roles, [role.as_str()]);
    assert!(
        made.tags()
            .iter()
            .any(|t| t.key() == "karpenter.k8s.aws/ec2nodeclass" && t.value() == "default")
    );
    // a second reconcile finds the same profile and leaves it as it is
    let again = node_class::status(&discovery, &profiles, "default", &class.spec, "1.33", NOW)
        .await
        .expect("status")
        .status;
    assert_eq!(again.instance_profile, Some(profile));

    // without a role or a profile the class is not ready, and says why in Karpenter's words
    let mut spec = class.spec.clone();
    spec.role = None;
    let status = node_class::status(&discovery, &profiles, "default", &spec, "1.33", NOW)
        .await
        .expect("status")
        .status;
    let ready = ready_of(&status);
    assert_eq!(
        (
            ready.status.as_str(),
            ready.reason.as_str(),
            ready.message.as_str()
        ),
        (
            "False",
            "UnhealthyDependents",
            "InstanceProfileReady=False, ValidationSucceeded=False"
        )
    );
}

#[tokio::test]
async fn the_clusters_endpoint_ca_and_service_cidr_come_from_eks() {
    let moto = Moto::start("eks", &[]);
    let config = moto.config().await;
    let eks = aws_sdk_eks::Client::new(&config);
    eks.create_cluster()
        .name(CLUSTER)
        .role_arn("arn:aws:iam::123456789012:role/eks")
        .resources_vpc_config(aws_sdk_eks::types::VpcConfigRequest::builder().build())
        .kubernetes_network_config(
            aws_sdk_eks::types::KubernetesNetworkConfigRequest::builder()
                .service_ipv4_cidr("10.100.0.0/16")
                .build(),
        )
        .send()
        .await
        .expect("create cluster");
    let info = kerf_aws_provider::cluster::describe(&config, CLUSTER)
        .await
        .expect("describe");
    assert_eq!(info.name, CLUSTER);
    assert!(
        info.endpoint.starts_with("https://") && !info.endpoint.ends_with('/'),
        "{}",
        info.endpoint
    );
    assert!(info.ca_bundle.is_some_and(|ca| !ca.is_empty()));
    assert_eq!(info.cidr.as_deref(), Some("10.100.0.0/16"));

    let missing = kerf_aws_provider::cluster::describe(&config, "no-such-cluster")
        .await
        .expect_err("no cluster");
    assert!(
        missing.to_string().starts_with("DescribeCluster: "),
        "{missing}"
    );
}

#[tokio::test]
async fn a_placement_group_resolves_by_name_or_id_and_a_missing_one_is_not_ready() {
    let moto = Moto::start("placement", &SEED_AMI_PARAMETERS);
    let config = moto.config().await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    network(&ec2).await;
    ec2.create_placement_group()
        .group_name("training")
        .strategy(aws_sdk_ec2::types::PlacementStrategy::Partition)
        .partition_count(3)
        .send()
        .await
        .expect("create the placement group");
    let discovery = Discovery::new(&config);
    let with = |selector: serde_json::Value| {
        let mut class = seed_node_class();
        let mut spec = serde_json::to_value(&class.spec).expect("spec");
        spec["placementGroupSelector"] = selector;
        class.spec = serde_json::from_value(spec).expect("a valid spec");
        class
    };

    // without a selector the condition is True, with no group
    let none = (discovery
        .resolve(&seed_node_class().spec, "1.33", NOW)
        .await)
        .expect("discovery");
    assert_eq!(condition(&none, PLACEMENT_GROUP_READY).status, "True");
    assert_eq!(none.placement_group, None);

    let by_name = discovery
        .resolve(&with(json!({"name": "training"})).spec, "1.33", NOW)
        .await
        .expect("discovery");
    assert_eq!(condition(&by_name, PLACEMENT_GROUP_READY).status, "True");
    let group = by_name.placement_group.clone().expect("the group");
    assert!(group.id.starts_with("pg-"), "{group:?}");
    assert_eq!(
        (
            group.name.as_str(),
            group.strategy.as_str(),
            group.partitions
        ),
        ("training", "partition", 3)
    );
    let by_id = discovery
        .resolve(&with(json!({"id": group.id})).spec, "1.33", NOW)
        .await
        .expect("discovery");
    assert_eq!(by_id.placement_group, Some(group));

    // a group that does not exist: not ready, named, and so the class is not Ready
    let missing = with(json!({"name": "gone"}));
    let resolved = (discovery.resolve(&missing.spec, "1.33", NOW).await).expect("discovery");
    let c = condition(&resolved, PLACEMENT_GROUP_READY);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
        (
            "False",
            "PlacementGroupNotFound",
            "Placement group \"gone\" not found"
        )
    );
    assert_eq!(resolved.placement_group, None);
    let profiles = InstanceProfiles::new(&config, CLUSTER, REGION);
    let status = node_class::status(&discovery, &profiles, "default", &missing.spec, "1.33", NOW)
        .await
        .expect("status")
        .status;
    let ready = ready_of(&status);
    assert_eq!(ready.status, "False", "{:?}", status.conditions);
    assert!(ready.message.contains(PLACEMENT_GROUP_READY), "{ready:?}");
}

#[tokio::test]
async fn an_alias_naming_an_image_that_does_not_exist_is_said_on_the_class() {
    // the seed's x86_64 parameter names an image EC2 does not list
    let parameters = [
        (SEED_AMI_PARAMETERS[0].0, "ami-0deleted000000000"),
        SEED_AMI_PARAMETERS[1],
    ];
    let moto = Moto::start("ami-gone", &parameters);
    let config = moto.config().await;
    network(&aws_sdk_ec2::Client::new(&config)).await;

    let resolved = Discovery::new(&config)
        .resolve(&seed_node_class().spec, "1.33", NOW)
        .await
        .expect("discovery");

    let ids: Vec<&str> = resolved.amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, [ARM64_IMAGE]);
    assert_eq!(
        resolved.missing_images,
        [node_class::MissingImage {
            parameter: SEED_AMI_PARAMETERS[0].0.to_string(),
            image: "ami-0deleted000000000".to_string(),
        }]
    );
    // Ready on the image found, as Karpenter is, with the missing one named
    let amis = condition(&resolved, AMIS_READY);
    assert_eq!(amis.status, "True");
    assert!(
        amis.message.contains("ami-0deleted000000000")
            && amis.message.contains(SEED_AMI_PARAMETERS[0].0),
        "{}",
        amis.message
    );
}
