//! An EC2NodeClass's selector terms as the questions that resolve them. Each subnet, security
//! group or AMI term becomes one set of EC2 `Describe*` filters (terms are ORed, a term's
//! fields ANDed; every `id` term shares one query), and an AMI alias becomes the SSM
//! parameters of that family's EKS-optimized images, each with the image variants it holds
//! and what each variant asks of an instance type. The AWS provider sends them; nothing here
//! does I/O.

use std::collections::BTreeMap;

use kerf_api::common::{NodeSelectorRequirementWithMinValues as Requirement, Operator};
use kerf_api::ec2nodeclass::{
    AmiSelectorTerm, CapacityReservationSelectorTerm, SecurityGroupSelectorTerm, SubnetSelectorTerm,
};
use kerf_api::labels;
use thiserror::Error;

/// One EC2 `Describe*` filter: the resource's `name` attribute equals one of `values`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    /// The filter name (`subnet-id`, `tag:Name`, `tag-key`, …).
    pub name: String,
    /// Accepted values; EC2 takes `*` as a wildcard in names and tag values.
    pub values: Vec<String>,
}

impl Filter {
    fn new(name: impl Into<String>, values: Vec<String>) -> Filter {
        Filter {
            name: name.into(),
            values,
        }
    }
}

/// A tag selector as filters: `*` asks only that the key exists.
fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(key, value)| {
            if value == "*" {
                Filter::new("tag-key", vec![key.clone()])
            } else {
                Filter::new(format!("tag:{key}"), vec![value.clone()])
            }
        })
        .collect()
}

/// The id terms as one filter set (first), then one set per other term.
fn filter_sets<T>(
    terms: &[T],
    id_filter: &str,
    id: impl Fn(&T) -> Option<&String>,
    others: impl Fn(&T) -> Vec<Filter>,
) -> Vec<Vec<Filter>> {
    let ids: Vec<String> = terms.iter().filter_map(|t| id(t).cloned()).collect();
    let mut sets = Vec::new();
    if !ids.is_empty() {
        sets.push(vec![Filter::new(id_filter, ids)]);
    }
    sets.extend(
        terms
            .iter()
            .filter(|t| id(t).is_none())
            .map(others)
            .filter(|f| !f.is_empty()),
    );
    sets
}

/// `DescribeSubnets` filter sets for `spec.subnetSelectorTerms`.
pub fn subnet_filter_sets(terms: &[SubnetSelectorTerm]) -> Vec<Vec<Filter>> {
    filter_sets(
        terms,
        "subnet-id",
        |t| t.id.as_ref(),
        |t| t.tags.as_ref().map(tag_filters).unwrap_or_default(),
    )
}

/// `DescribeSecurityGroups` filter sets for `spec.securityGroupSelectorTerms`.
pub fn security_group_filter_sets(terms: &[SecurityGroupSelectorTerm]) -> Vec<Vec<Filter>> {
    filter_sets(
        terms,
        "group-id",
        |t| t.id.as_ref(),
        |t| {
            let mut filters = t.tags.as_ref().map(tag_filters).unwrap_or_default();
            if let Some(name) = &t.name {
                filters.push(Filter::new("group-name", vec![name.clone()]));
            }
            filters
        },
    )
}

/// One `DescribeCapacityReservations` call, as Karpenter v1.15 asks: the `id` terms by id
/// (one call), every other term by owner, tags and match criteria; always only `active`
/// reservations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationQuery {
    /// `CapacityReservationIds`; empty for a filter query.
    pub ids: Vec<String>,
    /// The filters, `state=active` first.
    pub filters: Vec<Filter>,
}

/// The queries that resolve `spec.capacityReservationSelectorTerms`.
pub fn capacity_reservation_queries(
    terms: &[CapacityReservationSelectorTerm],
) -> Vec<ReservationQuery> {
    let active = || Filter::new("state", vec!["active".into()]);
    let ids: Vec<String> = terms.iter().filter_map(|t| t.id.clone()).collect();
    let mut out = Vec::new();
    if !ids.is_empty() {
        out.push(ReservationQuery {
            ids,
            filters: vec![active()],
        });
    }
    for t in terms.iter().filter(|t| t.id.is_none()) {
        let mut filters = vec![active()];
        if let Some(owner) = &t.owner_id {
            filters.push(Filter::new("owner-id", vec![owner.clone()]));
        }
        filters.extend(t.tags.as_ref().map(tag_filters).unwrap_or_default());
        if let Some(c) = &t.instance_match_criteria {
            filters.push(Filter::new("instance-match-criteria", vec![c.clone()]));
        }
        // an owner alone selects nothing, as in Karpenter
        if t.tags.is_some() || t.instance_match_criteria.is_some() {
            out.push(ReservationQuery {
                ids: Vec::new(),
                filters,
            });
        }
    }
    out
}

/// One `DescribeImages` call: its filters and owners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageQuery {
    /// The filters.
    pub filters: Vec<Filter>,
    /// The owners to search (`self`, `amazon`, account ids); empty means any.
    pub owners: Vec<String>,
}

/// `DescribeImages` queries for the id, name, owner and tag terms of
/// `spec.amiSelectorTerms` (aliases and SSM parameters are read from SSM first). A term with
/// a name or tags but no owner searches the account's own AMIs and Amazon's only, so that
/// another account's AMI of the same name is never picked up by accident.
pub fn image_queries(terms: &[AmiSelectorTerm]) -> Vec<ImageQuery> {
    let ids: Vec<String> = terms.iter().filter_map(|t| t.id.clone()).collect();
    let mut queries = Vec::new();
    if !ids.is_empty() {
        queries.push(ImageQuery {
            filters: vec![Filter::new("image-id", ids)],
            owners: Vec::new(),
        });
    }
    for term in terms.iter().filter(|t| t.id.is_none() && t.alias.is_none()) {
        let mut filters = term.tags.as_ref().map(tag_filters).unwrap_or_default();
        if let Some(name) = &term.name {
            filters.push(Filter::new("name", vec![name.clone()]));
        }
        let owners = match &term.owner {
            Some(owner) => vec![owner.clone()],
            None if filters.is_empty() => continue,
            None => vec!["self".to_string(), "amazon".to_string()],
        };
        queries.push(ImageQuery { filters, owners });
    }
    queries
}

/// Which build of a family's EKS-optimized AMI: plain, for NVIDIA GPUs, or for AWS Neuron.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Variant {
    /// For instance types without GPUs or accelerators.
    Standard,
    /// For NVIDIA GPU instance types.
    Nvidia,
    /// For AWS Inferentia and Trainium instance types.
    Neuron,
}

impl Variant {
    /// What the variant asks of an instance type, as the AMI's status requirements say it.
    pub fn requirements(self) -> Vec<Requirement> {
        let req = |key: &str, operator| Requirement {
            key: key.to_string(),
            operator,
            values: Vec::new(),
            min_values: None,
        };
        match self {
            Variant::Standard => vec![
                req(labels::INSTANCE_ACCELERATOR_COUNT, Operator::DoesNotExist),
                req(labels::INSTANCE_GPU_COUNT, Operator::DoesNotExist),
            ],
            Variant::Nvidia => vec![req(labels::INSTANCE_GPU_COUNT, Operator::Exists)],
            Variant::Neuron => vec![req(labels::INSTANCE_ACCELERATOR_COUNT, Operator::Exists)],
        }
    }
}

/// An SSM parameter holding an AMI id, and what that AMI is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmiParameter {
    /// The parameter's name.
    pub name: String,
    /// The AMI's `kubernetes.io/arch` (`amd64`, `arm64`).
    pub arch: &'static str,
    /// The variants the AMI serves (the AL2 GPU AMI serves both NVIDIA and Neuron).
    pub variants: Vec<Variant>,
    /// Whether the parameter moves to new releases (`latest`), so a cached value expires.
    pub mutable: bool,
}

/// Why an alias names no parameters.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AliasError {
    /// Not `family@version`.
    #[error("alias {0:?} is improperly formatted, must match the format 'family@version'")]
    Format(String),
    /// An unknown family.
    #[error(
        "alias {0:?}: family is not supported, must be one of 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'"
    )]
    Family(String),
    /// A pinned Windows release.
    #[error("alias {0:?}: windows families may only specify version 'latest'")]
    WindowsVersion(String),
    /// AL2 on a cluster that no longer has AL2 AMIs.
    #[error(
        "alias {alias:?}: AL2 aliases are no longer supported on EKS 1.33+ (cluster is {kubernetes})"
    )]
    Al2Retired {
        /// The alias.
        alias: String,
        /// The cluster's Kubernetes minor version.
        kubernetes: String,
    },
    /// The cluster version is not `major.minor`.
    #[error("Kubernetes version {0:?} is not major.minor (e.g. 1.33)")]
    KubernetesVersion(String),
}

/// The SSM parameters an alias (`al2023@latest`, `al2023@v20250505`, `bottlerocket@1.46.0`,
/// `al2@v20240917`, `windows2022@latest`) reads on a cluster of Kubernetes `kubernetes`
/// (`1.33`): one per architecture and variant the family publishes.
pub fn alias_parameters(alias: &str, kubernetes: &str) -> Result<Vec<AmiParameter>, AliasError> {
    let (family, version) = alias
        .split_once('@')
        .filter(|(f, v)| !f.is_empty() && !v.is_empty())
        .ok_or_else(|| AliasError::Format(alias.to_string()))?;
    let minor: u32 = kubernetes
        .split_once('.')
        .filter(|(major, _)| *major == "1")
        .and_then(|(_, minor)| minor.parse().ok())
        .ok_or_else(|| AliasError::KubernetesVersion(kubernetes.to_string()))?;
    let latest = version == "latest";
    let param = |name: String, arch, variants: &[Variant]| AmiParameter {
        name,
        arch,
        variants: variants.to_vec(),
        mutable: latest,
    };
    use Variant::{Neuron, Nvidia, Standard};
    Ok(match family {
        "al2023" => {
            let path = |arch: &str, variant: &str| {
                let release = if latest {
                    "recommended".to_string()
                } else {
                    format!("amazon-eks-node-al2023-{arch}-{variant}-{kubernetes}-{version}")
                };
                format!(
                    "/aws/service/eks/optimized-ami/{kubernetes}/amazon-linux-2023/{arch}/{variant}/{release}/image_id"
                )
            };
            vec![
                param(path("x86_64", "standard"), "amd64", &[Standard]),
                param(path("x86_64", "nvidia"), "amd64", &[Nvidia]),
                param(path("x86_64", "neuron"), "amd64", &[Neuron]),
                param(path("arm64", "standard"), "arm64", &[Standard]),
                param(path("arm64", "nvidia"), "arm64", &[Nvidia]),
            ]
        }
        "al2" => {
            if minor >= 33 {
                return Err(AliasError::Al2Retired {
                    alias: alias.to_string(),
                    kubernetes: kubernetes.to_string(),
                });
            }
            let path = |suffix: &str, node: &str| {
                let release = if latest {
                    "recommended".to_string()
                } else {
                    format!("amazon-eks-{node}-{kubernetes}-{version}")
                };
                format!(
                    "/aws/service/eks/optimized-ami/{kubernetes}/amazon-linux-2{suffix}/{release}/image_id"
                )
            };
            vec![
                param(path("", "node"), "amd64", &[Standard]),
                param(path("-arm64", "arm64-node"), "arm64", &[Standard]),
                param(path("-gpu", "gpu-node"), "amd64", &[Neuron, Nvidia]),
            ]
        }
        "bottlerocket" => {
            // releases are tagged `v1.46.0` on GitHub but the parameters say `1.46.0`
            let release = version.trim_start_matches('v');
            let path = |flavor: &str, arch: &str| {
                format!(
                    "/aws/service/bottlerocket/aws-k8s-{kubernetes}{flavor}/{arch}/{release}/image_id"
                )
            };
            vec![
                param(path("", "x86_64"), "amd64", &[Standard, Neuron]),
                param(path("", "arm64"), "arm64", &[Standard]),
                param(path("-nvidia", "x86_64"), "amd64", &[Nvidia]),
                param(path("-nvidia", "arm64"), "arm64", &[Nvidia]),
            ]
        }
        "windows2019" | "windows2022" | "windows2025" => {
            if !latest {
                return Err(AliasError::WindowsVersion(alias.to_string()));
            }
            let year = &family["windows".len()..];
            vec![param(
                format!(
                    "/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{kubernetes}/image_id"
                ),
                "amd64",
                &[Standard],
            )]
        }
        _ => return Err(AliasError::Family(alias.to_string())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn reservation_terms_become_one_id_query_and_one_filter_query_each() {
        let terms: Vec<CapacityReservationSelectorTerm> = serde_yaml::from_str(
            "- {id: cr-1}\n- {id: cr-2}\n- {tags: {team: ml, any: '*'}, ownerID: '123456789012'}\n\
             - {instanceMatchCriteria: open}\n- {ownerID: '123456789012'}\n",
        )
        .unwrap();
        let q = capacity_reservation_queries(&terms);
        assert_eq!(q.len(), 3);
        assert_eq!(q[0].ids, ["cr-1", "cr-2"]);
        assert_eq!(q[0].filters, [f("state", &["active"])]);
        assert_eq!(
            q[1].filters,
            [
                f("state", &["active"]),
                f("owner-id", &["123456789012"]),
                f("tag-key", &["any"]),
                f("tag:team", &["ml"]),
            ]
        );
        assert_eq!(
            q[2].filters,
            [
                f("state", &["active"]),
                f("instance-match-criteria", &["open"])
            ]
        );
    }

    fn f(name: &str, values: &[&str]) -> Filter {
        Filter::new(name, values.iter().map(|v| v.to_string()).collect())
    }

    #[test]
    fn subnet_terms_become_one_id_query_and_one_query_per_tag_term() {
        let terms = [
            SubnetSelectorTerm {
                tags: tags(&[("karpenter.sh/discovery", "my-cluster"), ("tier", "*")]),
                id: None,
            },
            SubnetSelectorTerm {
                tags: None,
                id: Some("subnet-0a".into()),
            },
            SubnetSelectorTerm {
                tags: None,
                id: Some("subnet-0b".into()),
            },
        ];
        assert_eq!(
            subnet_filter_sets(&terms),
            [
                vec![f("subnet-id", &["subnet-0a", "subnet-0b"])],
                vec![
                    f("tag:karpenter.sh/discovery", &["my-cluster"]),
                    f("tag-key", &["tier"]),
                ],
            ]
        );
    }

    #[test]
    fn a_security_group_term_ands_its_name_and_tags() {
        let terms = [SecurityGroupSelectorTerm {
            tags: tags(&[("kubernetes.io/cluster/dev", "owned")]),
            id: None,
            name: Some("eks-cluster-sg-*".into()),
        }];
        assert_eq!(
            security_group_filter_sets(&terms),
            [vec![
                f("tag:kubernetes.io/cluster/dev", &["owned"]),
                f("group-name", &["eks-cluster-sg-*"]),
            ]]
        );
    }

    #[test]
    fn an_ami_name_without_an_owner_searches_the_account_and_amazon_only() {
        let terms = [
            AmiSelectorTerm {
                name: Some("my-ami-*".into()),
                ..AmiSelectorTerm::default()
            },
            AmiSelectorTerm {
                tags: tags(&[("team", "ml")]),
                owner: Some("123456789012".into()),
                ..AmiSelectorTerm::default()
            },
            AmiSelectorTerm {
                id: Some("ami-0abc".into()),
                ..AmiSelectorTerm::default()
            },
        ];
        let queries = image_queries(&terms);
        assert_eq!(queries[0].filters, [f("image-id", &["ami-0abc"])]);
        assert!(queries[0].owners.is_empty());
        assert_eq!(queries[1].filters, [f("name", &["my-ami-*"])]);
        assert_eq!(queries[1].owners, ["self", "amazon"]);
        assert_eq!(queries[2].filters, [f("tag:team", &["ml"])]);
        assert_eq!(queries[2].owners, ["123456789012"]);
        assert_eq!(queries.len(), 3);
    }

    #[test]
    fn al2023_latest_reads_the_recommended_parameters_of_every_arch_and_variant() {
        let params = alias_parameters("al2023@latest", "1.33").unwrap();
        assert_eq!(params.len(), 5);
        assert_eq!(
            params[0].name,
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"
        );
        assert!(params.iter().all(|p| p.mutable));
        let arm_gpu = params
            .iter()
            .find(|p| p.arch == "arm64" && p.variants == [Variant::Nvidia])
            .unwrap();
        assert!(arm_gpu.name.contains("/arm64/nvidia/"));
    }

    #[test]
    fn a_pinned_al2023_release_names_its_image() {
        let params = alias_parameters("al2023@v20250505", "1.32").unwrap();
        assert_eq!(
            params[3].name,
            "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/arm64/standard/amazon-eks-node-al2023-arm64-standard-1.32-v20250505/image_id"
        );
        assert!(params.iter().all(|p| !p.mutable));
    }

    #[test]
    fn bottlerocket_takes_its_github_tag_and_al2_stops_at_1_33() {
        let params = alias_parameters("bottlerocket@v1.46.0", "1.33").unwrap();
        assert_eq!(
            params[0].name,
            "/aws/service/bottlerocket/aws-k8s-1.33/x86_64/1.46.0/image_id"
        );
        assert_eq!(params[0].variants, [Variant::Standard, Variant::Neuron]);
        let gpu = alias_parameters("al2@latest", "1.32").unwrap();
        assert_eq!(
            gpu[2].name,
            "/aws/service/eks/optimized-ami/1.32/amazon-linux-2-gpu/recommended/image_id"
        );
        assert_eq!(
            alias_parameters("al2@latest", "1.33")
                .unwrap_err()
                .to_string(),
            "alias \"al2@latest\": AL2 aliases are no longer supported on EKS 1.33+ (cluster is 1.33)"
        );
    }

    #[test]
    fn windows_is_latest_only_and_bad_aliases_say_why() {
        let params = alias_parameters("windows2025@latest", "1.34").unwrap();
        assert_eq!(
            params[0].name,
            "/aws/service/ami-windows-latest/Windows_Server-2025-English-Core-EKS_Optimized-1.34/image_id"
        );
        assert!(matches!(
            alias_parameters("windows2022@v1", "1.34"),
            Err(AliasError::WindowsVersion(_))
        ));
        assert!(matches!(
            alias_parameters("ubuntu@latest", "1.34"),
            Err(AliasError::Family(_))
        ));
        assert!(matches!(
            alias_parameters("al2023", "1.34"),
            Err(AliasError::Format(_))
        ));
        assert!(matches!(
            alias_parameters("al2023@latest", "v1.34"),
            Err(AliasError::KubernetesVersion(_))
        ));
    }

    #[test]
    fn variants_ask_for_gpus_accelerators_or_neither() {
        let standard = Variant::Standard.requirements();
        assert!(
            standard
                .iter()
                .all(|r| r.operator == Operator::DoesNotExist)
        );
        assert_eq!(standard.len(), 2);
        assert_eq!(
            Variant::Nvidia.requirements()[0].key,
            labels::INSTANCE_GPU_COUNT
        );
        assert_eq!(Variant::Neuron.requirements()[0].operator, Operator::Exists);
    }
}
