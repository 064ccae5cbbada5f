//! EC2NodeClass discovery against moto's EC2 and SSM: the seed node class resolves into
//! status, and selectors that match nothing say what is missing.

mod support;

use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
use kerf_api::EC2NodeClass;
use kerf_api::common::Operator;
use kerf_api::labels;
use kerf_aws_provider::Discovery;
use kerf_aws_provider::node_class::{AMIS_READY, SECURITY_GROUPS_READY, SUBNETS_READY};
use serde::Deserialize;
use support::Moto;

const CLUSTER: &str = "gasida-karpenter-demo";
const NOW: i64 = 1_795_000_000;
/// An arm64 Amazon Linux 2023 image moto (5.2.5, pinned) ships in every region.
const ARM64_IMAGE: &str = "ami-0f1b193e4899d91a2";

/// The EC2NodeClass of seed 004's getting-started manifests.
fn seed_node_class() -> EC2NodeClass {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/seeds/004-getting-started.yaml"),
    )
    .expect("the seed fixture");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde_yaml::Value::deserialize(doc).expect("YAML"))
        .find(|doc| doc["kind"] == "EC2NodeClass")
        .map(|doc| serde_yaml::from_value(doc).expect("an EC2NodeClass"))
        .expect("the seed has an EC2NodeClass")
}

fn tags(pairs: &[(&str, &str)], kind: ResourceType) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(kind)
        .set_tags(Some(
            pairs
                .iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                .collect(),
        ))
        .build()
}

/// A VPC with two discovery-tagged subnets (a /24 and a /20), an untagged one, and a tagged
/// and an untagged security group; returns the subnets' and the tagged group's ids.
async fn network(ec2: &aws_sdk_ec2::Client) -> (String, String, String) {
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .expect("create vpc");
    let vpc = vpc
        .vpc()
        .and_then(|v| v.vpc_id())
        .expect("vpc id")
        .to_string();
    let discovery = [("karpenter.sh/discovery", CLUSTER)];
    let mut ids = Vec::new();
    for (cidr, zone, tagged) in [
        ("10.0.0.0/24", "ap-northeast-2a", true),
        ("10.0.16.0/20", "ap-northeast-2c", true),
        ("10.0.1.0/24", "ap-northeast-2b", false),
    ] {
        let mut req = ec2
            .create_subnet()
            .vpc_id(&vpc)
            .cidr_block(cidr)
            .availability_zone(zone);
        if tagged {
            req = req.tag_specifications(tags(&discovery, ResourceType::Subnet));
        }
        let out = req.send().await.expect("create subnet");
        ids.push(
            out.subnet()
                .and_then(|s| s.subnet_id())
                .expect("id")
                .to_string(),
        );
    }
    let group = ec2
        .create_security_group()
        .group_name("nodes")
        .description("nodes")
        .vpc_id(&vpc)
        .tag_specifications(tags(&discovery, ResourceType::SecurityGroup))
        .send()
        .await
        .expect("create security group");
    ec2.create_security_group()
        .group_name("other")
        .description("other")
        .vpc_id(&vpc)
        .send()
        .await
        .expect("create security group");
    (
        ids[0].clone(),
        ids[1].clone(),
        group.group_id().expect("group id").to_string(),
    )
}

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

#[tokio::test]
async fn the_seed_node_class_resolves_its_subnets_security_groups_and_al2023_amis() {
    // the seed's pinned AL2023 release: moto's EKS image for x86_64, one of moto's Amazon
    // arm64 images for arm64, and no GPU builds published
    let moto = Moto::start(
        "seed",
        &[
            (
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.33-v20250228/image_id",
                "ami-ekslinux",
            ),
            (
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/standard/amazon-eks-node-al2023-arm64-standard-1.33-v20250228/image_id",
                ARM64_IMAGE,
            ),
        ],
    );
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
