//! EC2NodeClass discovery: the subnets, security groups and AMIs a node class's selector
//! terms select, as the status Karpenter writes (`status.subnets` by free addresses,
//! `status.securityGroups`, `status.amis` with the requirements each AMI serves) and the
//! `SubnetsReady`, `SecurityGroupsReady` and `AMIsReady` conditions, whose messages name the
//! selector that matched nothing; [`status`] adds the instance profile (`InstanceProfileReady`)
//! and the overall `Ready`.

use std::collections::BTreeMap;

use aws_sdk_ec2::primitives::{DateTime, DateTimeFormat};
use aws_sdk_ec2::types::{Filter as Ec2Filter, Image};
use kerf_api::common::{Condition, NodeSelectorRequirementWithMinValues as Requirement, Operator};
use kerf_api::ec2nodeclass::{
    AmiFamily, AmiSelectorTerm, AmiStatus, CapacityReservationSelectorTerm,
    CapacityReservationStatus, EC2NodeClassSpec, EC2NodeClassStatus, PlacementGroupSelector,
    SecurityGroupSelectorTerm, SecurityGroupStatus, SubnetSelectorTerm, SubnetStatus,
};
use kerf_api::labels;
use kerf_aws::discovery::{self, Filter, Variant};

use crate::instance_profile::InstanceProfiles;
use crate::{AwsError, classify};

/// Condition types, as Karpenter names them.
pub const SUBNETS_READY: &str = "SubnetsReady";
/// See [`SUBNETS_READY`].
pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
/// See [`SUBNETS_READY`].
pub const AMIS_READY: &str = "AMIsReady";

/// Karpenter's condition for resolved capacity reservations (True once they were read).
pub const CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";

/// The placement group's condition: True without a selector or once the group is found.
pub const PLACEMENT_GROUP_READY: &str = "PlacementGroupReady";

/// The instance profile's condition.
pub const INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
/// The reason of a condition False because a call it needs was refused for want of a
/// permission; its message names the permission.
pub const UNAUTHORIZED: &str = "Unauthorized";
/// The class is ready to launch from when every other condition is.
pub const READY: &str = "Ready";
/// Condition type: the class is one Kerf can launch (Karpenter's validation condition).
pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";

/// What a node class resolves to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    /// `status.subnets`: most free addresses first.
    pub subnets: Vec<SubnetStatus>,
    /// `status.securityGroups`, by id.
    pub security_groups: Vec<SecurityGroupStatus>,
    /// `status.amis`: for each set of requirements, the newest image that is not deprecated
    /// (a deprecated one only when nothing else serves them).
    pub amis: Vec<AmiStatus>,
    /// `status.capacityReservations`: active ones, by id.
    pub capacity_reservations: Vec<CapacityReservationStatus>,
    /// How many more instances each reservation takes, as EC2 counted just now.
    pub reservation_room: BTreeMap<String, u32>,
    /// The placement group the class launches into (no status field holds it: Karpenter
    /// keeps it in memory too).
    pub placement_group: Option<PlacementGroup>,
    /// `SubnetsReady`, `SecurityGroupsReady`, `AMIsReady`, `PlacementGroupReady` (and
    /// `CapacityReservationsReady` where the class selects reservations).
    pub conditions: Vec<Condition>,
    /// Images an alias's SSM parameters name that EC2 does not list: the types they were to
    /// boot are not offered, which the user is told rather than left to guess.
    pub missing_images: Vec<MissingImage>,
}

/// An image an SSM parameter names that DescribeImages does not return (deleted, never
/// published in the region, or not shared with the account).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MissingImage {
    /// The SSM parameter's name.
    pub parameter: String,
    /// The image id it holds.
    pub image: String,
}

impl std::fmt::Display for MissingImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SSM parameter {} names {}, which EC2 does not list",
            self.parameter, self.image
        )
    }
}

/// A placement group as DescribePlacementGroups reports an available one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementGroup {
    /// `pg-…`: what instances are launched into and nodes are labelled with.
    pub id: String,
    /// Its name.
    pub name: String,
    /// `cluster`, `partition` or `spread`.
    pub strategy: String,
    /// Partitions of a `partition` group.
    pub partitions: u32,
}

/// What resolving a class gives: its status, and what no status field holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolution {
    /// The class's status.
    pub status: EC2NodeClassStatus,
    /// How many more instances each capacity reservation takes.
    pub reservation_room: BTreeMap<String, u32>,
    /// The placement group it launches into.
    pub placement_group: Option<PlacementGroup>,
    /// Images the class's aliases name that EC2 does not list.
    pub missing_images: Vec<MissingImage>,
}

/// Resolves node classes with EC2 and SSM.
#[derive(Clone, Debug)]
pub struct Discovery {
    ec2: aws_sdk_ec2::Client,
    ssm: aws_sdk_ssm::Client,
}

fn ec2_filters(filters: &[Filter]) -> Vec<Ec2Filter> {
    filters
        .iter()
        .map(|f| {
            Ec2Filter::builder()
                .name(&f.name)
                .set_values(Some(f.values.clone()))
                .build()
        })
        .collect()
}

/// A selector term list in words: `karpenter.sh/discovery=my-cluster or id=subnet-0a`.
fn describe_terms<'a>(terms: impl Iterator<Item = Vec<(&'a str, &'a str)>>) -> String {
    let terms: Vec<String> = terms
        .map(|pairs| {
            pairs
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .filter(|t| !t.is_empty())
        .collect();
    if terms.is_empty() {
        "no selector terms".to_string()
    } else {
        terms.join(" or ")
    }
}

fn tag_pairs(tags: &Option<BTreeMap<String, String>>) -> Vec<(&str, &str)> {
    tags.iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

pub(crate) fn condition(type_: &str, ready: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if ready { "True" } else { "False" }.to_string(),
        reason: if ready {
            type_.to_string()
        } else {
            reason.to_string()
        },
        message: if ready { String::new() } else { message },
        last_transition_time: None,
        observed_generation: None,
    }
}

/// An image's `kubernetes.io/arch` (EC2 says `x86_64`).
fn arch_of(image: &Image) -> Option<&'static str> {
    match image.architecture()?.as_str() {
        "x86_64" => Some("amd64"),
        "arm64" => Some("arm64"),
        _ => None,
    }
}

fn unix_seconds(time: Option<&str>) -> Option<i64> {
    DateTime::from_str(time?, DateTimeFormat::DateTime)
        .ok()
        .map(|t| t.secs())
}

/// One image and the requirements it serves.
struct Candidate {
    image: Image,
    requirements: Vec<Requirement>,
    deprecated: bool,
}

/// A lookup's answer, or `None` when it was refused for want of a permission: the refusal
/// becomes `kind`'s condition, False with reason `Unauthorized` and the permission to grant
/// (Karpenter keeps the class's last status and logs; Kerf says it where `kubectl describe`
/// shows it, and the class is not Ready until the permission is back). Any other failure
/// fails the resolution, as in Karpenter.
fn allowed<T>(
    answer: Result<T, AwsError>,
    kind: &str,
    refused: &mut Vec<Condition>,
) -> Result<Option<T>, AwsError> {
    match answer {
        Ok(v) => Ok(Some(v)),
        Err(e @ AwsError::Unauthorized { .. }) => {
            refused.push(condition(kind, false, UNAUTHORIZED, e.to_string()));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl Discovery {
    /// Clients from one SDK configuration.
    pub fn new(config: &aws_config::SdkConfig) -> Discovery {
        Discovery {
            ec2: crate::client!(aws_sdk_ec2, config),
            ssm: crate::client!(aws_sdk_ssm, config),
        }
    }

    /// Resolves `spec` on a cluster of Kubernetes `kubernetes` (`1.33`) at `now` (seconds
    /// since the Unix epoch, for AMI deprecation).
    pub async fn resolve(
        &self,
        spec: &EC2NodeClassSpec,
        kubernetes: &str,
        now: i64,
    ) -> Result<Resolved, AwsError> {
        let mut refused = Vec::new();
        let subnets = allowed(
            self.subnets(&spec.subnet_selector_terms).await,
            SUBNETS_READY,
            &mut refused,
        )?
        .unwrap_or_default();
        let security_groups = allowed(
            (self.security_groups(&spec.security_group_selector_terms)).await,
            SECURITY_GROUPS_READY,
            &mut refused,
        )?
        .unwrap_or_default();
        let amis = self.amis(&spec.ami_selector_terms, kubernetes, now).await;
        let (amis, missing_images) = match allowed(amis, AMIS_READY, &mut refused)? {
            Some(Ok((found, missing))) => (Ok(found), missing),
            Some(Err(unsupported)) => (Err(unsupported), Vec::new()),
            None => (Ok(Vec::new()), Vec::new()),
        };
        let reservations =
            (self.capacity_reservations(&spec.capacity_reservation_selector_terms, now)).await;
        let (capacity_reservations, reservation_room) =
            allowed(reservations, CAPACITY_RESERVATIONS_READY, &mut refused)?.unwrap_or_default();
        let subnet_terms =
            describe_terms(spec.subnet_selector_terms.iter().map(|t| subnet_pairs(t)));
        let group_terms = describe_terms(
            spec.security_group_selector_terms
                .iter()
                .map(|t| group_pairs(t)),
        );
        let ami_terms = describe_terms(spec.ami_selector_terms.iter().map(ami_pairs));
        let mut conditions = vec![
            condition(
                SUBNETS_READY,
                !subnets.is_empty(),
                "SubnetsNotFound",
                format!(
                    "SubnetSelector did not match any Subnets: no subnet matches {subnet_terms}"
                ),
            ),
            condition(
                SECURITY_GROUPS_READY,
                !security_groups.is_empty(),
                "SecurityGroupsNotFound",
                format!(
                    "SecurityGroupSelector did not match any SecurityGroups: no security group matches {group_terms}"
                ),
            ),
            match &amis {
                Ok(found) => {
                    let mut ready = condition(
                        AMIS_READY,
                        !found.is_empty(),
                        "AMINotFound",
                        format!("AMISelector did not match any AMIs: no AMI matches {ami_terms}"),
                    );
                    // still Ready on the images found, as Karpenter; the message says which
                    // were not, so a type left unoffered has a stated cause
                    if !found.is_empty() && !missing_images.is_empty() {
                        ready.message = missing_images
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ");
                    }
                    ready
                }
                Err(unsupported) => condition(
                    AMIS_READY,
                    false,
                    "UnsupportedAlias",
                    unsupported.to_string(),
                ),
            },
        ];
        // as Karpenter: a lookup that fails fails the resolution; one that finds nothing is
        // the condition's False
        let placement_group = match &spec.placement_group_selector {
            Some(selector) => {
                let group = self.placement_group(selector).await;
                allowed(group, PLACEMENT_GROUP_READY, &mut refused)?.flatten()
            }
            None => None,
        };
        conditions.push(condition(
            PLACEMENT_GROUP_READY,
            spec.placement_group_selector.is_none() || placement_group.is_some(),
            "PlacementGroupNotFound",
            format!(
                "Placement group {:?} not found",
                spec.placement_group_selector
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ),
        ));
        if !spec.capacity_reservation_selector_terms.is_empty() {
            // as Karpenter: True once looked up, whatever was found (a failed lookup fails
            // the whole resolution above and changes nothing)
            conditions.push(condition(
                CAPACITY_RESERVATIONS_READY,
                true,
                "",
                String::new(),
            ));
        }
        // a lookup refused for want of a permission says so in its own condition
        for denied in refused {
            conditions.retain(|c| c.type_ != denied.type_);
            conditions.push(denied);
        }
        Ok(Resolved {
            subnets,
            security_groups,
            amis: amis.unwrap_or_default(),
            capacity_reservations,
            reservation_room,
            placement_group,
            conditions,
            missing_images,
        })
    }

    /// The available placement group `selector` names (by id, else by name), if any.
    async fn placement_group(
        &self,
        selector: &PlacementGroupSelector,
    ) -> Result<Option<PlacementGroup>, AwsError> {
        let request = self.ec2.describe_placement_groups().filters(
            Ec2Filter::builder()
                .name("state")
                .values("available")
                .build(),
        );
        let request = match (&selector.id, &selector.name) {
            (Some(id), _) => request.group_ids(id),
            (None, Some(name)) => request.group_names(name),
            (None, None) => return Ok(None),
        };
        let answer = match request.send().await {
            Ok(a) => a,
            // EC2 refuses a name or id that does not exist rather than answering with none
            Err(e)
                if matches!(
                    e.as_service_error().and_then(|s| s.meta().code()),
                    Some(
                        "InvalidPlacementGroup.Unknown"
                            | "InvalidPlacementGroupId.NotFound"
                            | "InvalidGroupId.Malformed"
                    )
                ) =>
            {
                return Ok(None);
            }
            Err(e) => {
                return Err(classify(
                    "DescribePlacementGroups",
                    "ec2:DescribePlacementGroups",
                    e,
                ));
            }
        };
        Ok(answer.placement_groups().first().and_then(|g| {
            Some(PlacementGroup {
                id: g.group_id()?.to_string(),
                name: g.group_name().unwrap_or_default().to_string(),
                strategy: g
                    .strategy()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                partitions: g
                    .partition_count()
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0),
            })
        }))
    }

    /// The active reservations the terms select, by id, with their room; those that ended
    /// are dropped, and a capacity block is `expiring` from 40 minutes before its end.
    async fn capacity_reservations(
        &self,
        terms: &[CapacityReservationSelectorTerm],
        now: i64,
    ) -> Result<(Vec<CapacityReservationStatus>, BTreeMap<String, u32>), AwsError> {
        let mut found: BTreeMap<String, CapacityReservationStatus> = BTreeMap::new();
        let mut room: BTreeMap<String, u32> = BTreeMap::new();
        for q in discovery::capacity_reservation_queries(terms) {
            let reservations: Vec<aws_sdk_ec2::types::CapacityReservation> = self
                .ec2
                .describe_capacity_reservations()
                .set_capacity_reservation_ids((!q.ids.is_empty()).then(|| q.ids.clone()))
                .set_filters(Some(ec2_filters(&q.filters)))
                .into_paginator()
                .items()
                .send()
                .try_collect()
                .await
                .map_err(|e| {
                    classify(
                        "DescribeCapacityReservations",
                        "ec2:DescribeCapacityReservations",
                        e,
                    )
                })?;
            for r in reservations {
                let Some(status) = reservation_status(&r, now) else {
                    continue;
                };
                let available = r.available_instance_count().unwrap_or(0).max(0) as u32;
                room.insert(status.id.clone(), available);
                found.insert(status.id.clone(), status);
            }
        }
        Ok((found.into_values().collect(), room))
    }

    async fn subnets(&self, terms: &[SubnetSelectorTerm]) -> Result<Vec<SubnetStatus>, AwsError> {
        let mut found = BTreeMap::new();
        for filters in discovery::subnet_filter_sets(terms) {
            let subnets = self
                .ec2
                .describe_subnets()
                .set_filters(Some(ec2_filters(&filters)))
                .into_paginator()
                .items()
                .send()
                .try_collect()
                .await
                .map_err(|e| classify("DescribeSubnets", "ec2:DescribeSubnets", e))?;
            for s in subnets {
                if let (Some(id), Some(zone)) = (s.subnet_id(), s.availability_zone()) {
                    let status = SubnetStatus {
                        id: id.to_string(),
                        zone: zone.to_string(),
                        zone_id: s.availability_zone_id().map(str::to_string),
                    };
                    let free = s.available_ip_address_count().unwrap_or(0);
                    found.insert(id.to_string(), (free, status));
                }
            }
        }
        let mut subnets: Vec<(i32, SubnetStatus)> = found.into_values().collect();
        subnets.sort_by(|(a_free, a), (b_free, b)| b_free.cmp(a_free).then(a.id.cmp(&b.id)));
        Ok(subnets.into_iter().map(|(_, s)| s).collect())
    }

    async fn security_groups(
        &self,
        terms: &[SecurityGroupSelectorTerm],
    ) -> Result<Vec<SecurityGroupStatus>, AwsError> {
        let mut found = BTreeMap::new();
        for filters in discovery::security_group_filter_sets(terms) {
            let groups = self
                .ec2
                .describe_security_groups()
                .set_filters(Some(ec2_filters(&filters)))
                .into_paginator()
                .items()
                .send()
                .try_collect()
                .await
                .map_err(|e| classify("DescribeSecurityGroups", "ec2:DescribeSecurityGroups", e))?;
            for g in groups {
                if let Some(id) = g.group_id() {
                    let status = SecurityGroupStatus {
                        id: id.to_string(),
                        name: g.group_name().map(str::to_string),
                    };
                    found.insert(id.to_string(), status);
                }
            }
        }
        Ok(found.into_values().collect())
    }

    /// The AMIs and the images aliases name that EC2 does not list, or why an alias cannot
    /// be used.
    async fn amis(
        &self,
        terms: &[AmiSelectorTerm],
        kubernetes: &str,
        now: i64,
    ) -> Result<Result<(Vec<AmiStatus>, Vec<MissingImage>), discovery::AliasError>, AwsError> {
        let mut candidates = Vec::new();
        let mut missing = Vec::new();
        for alias in terms.iter().filter_map(|t| t.alias.as_deref()) {
            let parameters = match discovery::alias_parameters(alias, kubernetes) {
                Ok(p) => p,
                Err(e) => return Ok(Err(e)),
            };
            // image id -> (arch, variants, first parameter naming it) from the parameters
            // that exist
            let mut ids: BTreeMap<String, (&'static str, Vec<Variant>, String)> = BTreeMap::new();
            // one GetParameter a name, all at once: Karpenter's controller policy grants
            // `ssm:GetParameter`, not the `ssm:GetParameters` a batch would need
            let answers = futures::future::join_all(
                parameters
                    .iter()
                    .map(|p| self.ssm.get_parameter().name(p.name.clone()).send()),
            )
            .await;
            for (p, answer) in parameters.iter().zip(answers) {
                let value = match answer {
                    Ok(out) => out.parameter,
                    // a variant the region does not publish (no Neuron image of arm64…)
                    Err(e)
                        if e.as_service_error()
                            .is_some_and(|e| e.is_parameter_not_found()) =>
                    {
                        None
                    }
                    Err(e) => return Err(classify("GetParameter", "ssm:GetParameter", e)),
                };
                if let Some(id) = value.and_then(|v| v.value) {
                    let entry = ids
                        .entry(id)
                        .or_insert((p.arch, Vec::new(), p.name.clone()));
                    entry.1.extend(p.variants.iter().copied());
                }
            }
            if ids.is_empty() {
                continue;
            }
            let filters = vec![Filter {
                name: "image-id".into(),
                values: ids.keys().cloned().collect(),
            }];
            let images = self.describe_images(&filters, &[]).await?;
            for (id, (_, _, parameter)) in &ids {
                if !images.iter().any(|i| i.image_id() == Some(id.as_str())) {
                    missing.push(MissingImage {
                        parameter: parameter.clone(),
                        image: id.clone(),
                    });
                }
            }
            for image in images {
                let Some((arch, variants, _)) = image.image_id().and_then(|id| ids.get(id)) else {
                    continue;
                };
                for variant in variants {
                    let mut requirements = vec![arch_requirement(arch)];
                    requirements.extend(variant.requirements());
                    candidates.push(candidate(image.clone(), requirements, now));
                }
            }
        }
        for query in discovery::image_queries(terms) {
            for image in self.describe_images(&query.filters, &query.owners).await? {
                if let Some(arch) = arch_of(&image) {
                    candidates.push(candidate(image, vec![arch_requirement(arch)], now));
                }
            }
        }
        Ok(Ok((newest_per_requirements(candidates), missing)))
    }

    async fn describe_images(
        &self,
        filters: &[Filter],
        owners: &[String],
    ) -> Result<Vec<Image>, AwsError> {
        self.ec2
            .describe_images()
            .set_filters(Some(ec2_filters(filters)))
            .set_owners((!owners.is_empty()).then(|| owners.to_vec()))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| classify("DescribeImages", "ec2:DescribeImages", e))
    }
}

/// `ValidationSucceeded`: False for what Kerf cannot launch whatever AWS answers, said on the
/// class (and so on its NodePools' `NodeClassReady`) rather than at each launch: a kubelet
/// configuration Karpenter's validation refuses (with its reason and message), and Windows
/// families, whose PowerShell bootstrap Kerf does not write. As Karpenter, the class is not
/// validated while what it resolves to (`resolved`: images, instance profile, security groups,
/// subnets) is not all there.
fn validation(spec: &EC2NodeClassSpec, resolved: &[Condition]) -> Condition {
    let family = spec.family();
    if let Some(refusal) = spec.kubelet.as_ref().and_then(|k| k.refusal(family)) {
        return condition(VALIDATION_SUCCEEDED, false, refusal.reason, refusal.message);
    }
    let required = [
        AMIS_READY,
        INSTANCE_PROFILE_READY,
        SECURITY_GROUPS_READY,
        SUBNETS_READY,
    ];
    if resolved
        .iter()
        .any(|c| required.contains(&c.type_.as_str()) && c.status != "True")
    {
        return condition(
            VALIDATION_SUCCEEDED,
            false,
            "DependenciesNotReady",
            "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution".into(),
        );
    }
    if matches!(
        family,
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025
    ) {
        return condition(
            VALIDATION_SUCCEEDED,
            false,
            "UnsupportedAMIFamily",
            format!(
                "amiFamily {family:?}: Kerf does not bootstrap Windows nodes; use amiFamily Custom with your own userData"
            ),
        );
    }
    validated()
}

/// `ValidationSucceeded` True: the class passed every check.
pub fn validated() -> Condition {
    condition(VALIDATION_SUCCEEDED, true, "", String::new())
}

/// `ValidationSucceeded` before the class was ever checked, as Karpenter initializes a
/// condition: Unknown, awaiting reconciliation.
pub fn awaiting_validation() -> Condition {
    Condition {
        status: "Unknown".into(),
        reason: "AwaitingReconciliation".into(),
        message: "object is awaiting reconciliation".into(),
        ..validated()
    }
}

/// `Ready` over a class's other conditions, as Karpenter words it: True when all are, else
/// False naming those that are not (`SubnetsReady=False, ValidationSucceeded=False`).
pub fn ready(conditions: &[Condition]) -> Condition {
    let unready: Vec<String> = conditions
        .iter()
        .filter(|c| c.type_ != READY && c.status != "True")
        .map(|c| format!("{}={}", c.type_, c.status))
        .collect();
    condition(
        READY,
        unready.is_empty(),
        "UnhealthyDependents",
        unready.join(", "),
    )
}

/// A class's whole status: what its selectors resolve to, its instance profile (the one it
/// names, or the one made for its `role`), and `Ready` when all of them are; with how many
/// more instances each of its capacity reservations takes and its placement group (no status
/// field holds those).
pub async fn status(
    discovery: &Discovery,
    profiles: &InstanceProfiles,
    name: &str,
    spec: &EC2NodeClassSpec,
    kubernetes: &str,
    now: i64,
) -> Result<Resolution, AwsError> {
    let resolved = discovery.resolve(spec, kubernetes, now).await?;
    let (instance_profile, profile_condition) = match (&spec.instance_profile, &spec.role) {
        (Some(profile), _) => (
            Some(profile.clone()),
            condition(INSTANCE_PROFILE_READY, true, "", String::new()),
        ),
        (None, Some(role)) => match profiles.ensure(name, role).await {
            Ok(profile) => (
                Some(profile),
                condition(INSTANCE_PROFILE_READY, true, "", String::new()),
            ),
            Err(e) => {
                let reason = match e {
                    AwsError::Unauthorized { .. } => UNAUTHORIZED,
                    _ => "InstanceProfileCreationFailed",
                };
                let refused = condition(INSTANCE_PROFILE_READY, false, reason, e.to_string());
                (None, refused)
            }
        },
        (None, None) => (
            None,
            condition(
                INSTANCE_PROFILE_READY,
                false,
                "InstanceProfileNotFound",
                "neither spec.role nor spec.instanceProfile is set".into(),
            ),
        ),
    };
    let mut conditions = resolved.conditions;
    conditions.push(profile_condition);
    let validated = validation(spec, &conditions);
    conditions.push(validated);
    conditions.push(ready(&conditions));
    let status = EC2NodeClassStatus {
        subnets: resolved.subnets,
        security_groups: resolved.security_groups,
        amis: resolved.amis,
        instance_profile,
        capacity_reservations: resolved.capacity_reservations,
        conditions,
    };
    Ok(Resolution {
        status,
        reservation_room: resolved.reservation_room,
        placement_group: resolved.placement_group,
        missing_images: resolved.missing_images,
    })
}

/// A reservation as `status.capacityReservations` lists it; `None` for one that has ended or
/// that Karpenter would not read (an unknown match criteria or type).
fn reservation_status(
    r: &aws_sdk_ec2::types::CapacityReservation,
    now: i64,
) -> Option<CapacityReservationStatus> {
    let end = r.end_date().map(|d| d.secs());
    if end.is_some_and(|e| e <= now) {
        return None;
    }
    let criteria = r.instance_match_criteria()?.as_str();
    if criteria != "open" && criteria != "targeted" {
        return None;
    }
    let kind = match r.reservation_type().map(|t| t.as_str()) {
        None | Some("default") => "default",
        Some("capacity-block") => "capacity-block",
        Some(_) => return None,
    };
    let expiry = kerf_aws::reservations::CAPACITY_BLOCK_EXPIRY.as_secs() as i64;
    let expiring = kind == "capacity-block" && end.is_some_and(|e| now >= e - expiry);
    Some(CapacityReservationStatus {
        id: r.capacity_reservation_id()?.to_string(),
        instance_type: r.instance_type()?.to_string(),
        availability_zone: r.availability_zone()?.to_string(),
        owner_id: r.owner_id().unwrap_or_default().to_string(),
        instance_match_criteria: criteria.to_string(),
        reservation_type: kind.to_string(),
        state: if expiring { "expiring" } else { "active" }.to_string(),
        end_time: r
            .end_date()
            .and_then(|d| d.fmt(DateTimeFormat::DateTime).ok()),
        interruptible: r.interruptible().filter(|i| *i),
    })
}

fn subnet_pairs(t: &SubnetSelectorTerm) -> Vec<(&str, &str)> {
    let mut pairs = tag_pairs(&t.tags);
    if let Some(id) = &t.id {
        pairs.push(("id", id));
    }
    pairs
}

fn group_pairs(t: &SecurityGroupSelectorTerm) -> Vec<(&str, &str)> {
    let mut pairs = tag_pairs(&t.tags);
    for (key, value) in [("id", &t.id), ("name", &t.name)] {
        if let Some(v) = value {
            pairs.push((key, v));
        }
    }
    pairs
}

fn ami_pairs(t: &AmiSelectorTerm) -> Vec<(&str, &str)> {
    let mut pairs = tag_pairs(&t.tags);
    for (key, value) in [
        ("alias", &t.alias),
        ("id", &t.id),
        ("name", &t.name),
        ("owner", &t.owner),
        ("ssmParameter", &t.ssm_parameter),
    ] {
        if let Some(v) = value {
            pairs.push((key, v));
        }
    }
    pairs
}

fn arch_requirement(arch: &str) -> Requirement {
    Requirement {
        key: labels::ARCH.to_string(),
        operator: Operator::In,
        values: vec![arch.to_string()],
        min_values: None,
    }
}

fn candidate(image: Image, requirements: Vec<Requirement>, now: i64) -> Candidate {
    let deprecated = unix_seconds(image.deprecation_time()).is_some_and(|t| t <= now);
    Candidate {
        image,
        requirements,
        deprecated,
    }
}

/// For each set of requirements, the image to use: not deprecated before deprecated, then
/// the newest, then the lowest id (so the answer does not depend on EC2's order).
fn newest_per_requirements(mut candidates: Vec<Candidate>) -> Vec<AmiStatus> {
    candidates.sort_by(|a, b| {
        a.deprecated
            .cmp(&b.deprecated)
            .then_with(|| {
                let created = |c: &Candidate| unix_seconds(c.image.creation_date()).unwrap_or(0);
                created(b).cmp(&created(a))
            })
            .then_with(|| a.image.image_id().cmp(&b.image.image_id()))
    });
    let mut seen = Vec::new();
    let mut amis = Vec::new();
    for c in candidates {
        if seen.contains(&c.requirements) {
            continue;
        }
        seen.push(c.requirements.clone());
        amis.push(AmiStatus {
            id: c.image.image_id().unwrap_or_default().to_string(),
            name: c.image.name().map(str::to_string),
            requirements: c.requirements,
            deprecated: c.deprecated.then_some(true),
        });
    }
    amis
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::error::ErrorMetadata;
    use aws_sdk_ec2::operation::describe_subnets::DescribeSubnetsError;

    #[test]
    fn a_kubelet_configuration_karpenter_refuses_keeps_the_class_unvalidated() {
        let class = |family: &str, kubelet: serde_json::Value| -> EC2NodeClassSpec {
            serde_json::from_value(serde_json::json!({
                "amiSelectorTerms": [{"alias": format!("{family}@latest")}],
                "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
                "role": "r",
                "kubelet": kubelet,
            }))
            .unwrap()
        };
        let passed = validation(
            &class("al2023", serde_json::json!({"containerLogMaxSize": "50Mi"})),
            &[],
        );
        assert_eq!(passed.status, "True");
        let typo = validation(&class("al2023", serde_json::json!({"maxPod": 20})), &[]);
        assert_eq!(
            (
                typo.status.as_str(),
                typo.reason.as_str(),
                typo.message.as_str()
            ),
            (
                "False",
                "InvalidKubeletConfiguration",
                "spec.kubelet: unknown field \"maxPod\""
            )
        );
        let dropped = validation(
            &class(
                "bottlerocket",
                serde_json::json!({"containerLogMaxSize": "50Mi"}),
            ),
            &[],
        );
        assert_eq!(
            (dropped.status.as_str(), dropped.reason.as_str()),
            ("False", "UnsupportedKubeletConfiguration")
        );
        // and, as Karpenter, none while what the class resolves to is not all there
        let unresolved = [condition(
            SUBNETS_READY,
            false,
            "SubnetsNotFound",
            String::new(),
        )];
        let waiting = validation(&class("al2023", serde_json::json!({})), &unresolved);
        assert_eq!(
            (waiting.status.as_str(), waiting.reason.as_str()),
            ("False", "DependenciesNotReady")
        );
    }

    #[test]
    fn a_denied_call_names_the_permission_to_grant() {
        let denied = DescribeSubnetsError::generic(
            ErrorMetadata::builder()
                .code("UnauthorizedOperation")
                .message("You are not authorized to perform this operation.")
                .build(),
        );
        let e = classify("DescribeSubnets", "ec2:DescribeSubnets", denied);
        assert!(matches!(e, AwsError::Unauthorized { .. }));
        assert!(
            e.to_string().starts_with(
                "ec2:DescribeSubnets is not allowed for Kerf's role: grant it as deploy/aws/controller-policy.json does"
            ),
            "{e}"
        );
        let throttled = DescribeSubnetsError::generic(
            ErrorMetadata::builder()
                .code("RequestLimitExceeded")
                .message("Request limit exceeded.")
                .build(),
        );
        let e = classify("DescribeSubnets", "ec2:DescribeSubnets", throttled);
        assert!(
            matches!(
                e,
                AwsError::Api {
                    call: "DescribeSubnets",
                    ..
                }
            ),
            "{e}"
        );
    }

    fn image(id: &str, created: &str, deprecation: Option<&str>) -> Image {
        Image::builder()
            .image_id(id)
            .creation_date(created)
            .set_deprecation_time(deprecation.map(str::to_string))
            .build()
    }

    #[test]
    fn the_newest_image_serves_its_requirements_unless_it_is_deprecated() {
        let now = unix_seconds(Some("2026-06-01T00:00:00.000Z")).unwrap();
        let amd = vec![arch_requirement("amd64")];
        let arm = vec![arch_requirement("arm64")];
        let amis = newest_per_requirements(vec![
            candidate(
                image("ami-old", "2026-01-01T00:00:00.000Z", None),
                amd.clone(),
                now,
            ),
            candidate(
                image(
                    "ami-newest",
                    "2026-05-01T00:00:00.000Z",
                    Some("2026-05-15T00:00:00.000Z"),
                ),
                amd.clone(),
                now,
            ),
            candidate(
                image("ami-new", "2026-04-01T00:00:00.000Z", None),
                amd.clone(),
                now,
            ),
            candidate(
                image(
                    "ami-arm",
                    "2026-02-01T00:00:00.000Z",
                    Some("2026-03-01T00:00:00.000Z"),
                ),
                arm.clone(),
                now,
            ),
        ]);
        let picked: Vec<(&str, Option<bool>)> =
            amis.iter().map(|a| (a.id.as_str(), a.deprecated)).collect();
        // amd64: the newest not deprecated; arm64: only a deprecated one, kept and marked
        assert_eq!(picked, [("ami-new", None), ("ami-arm", Some(true))]);
    }
}
