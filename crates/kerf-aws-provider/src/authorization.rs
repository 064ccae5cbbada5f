//! The EC2NodeClass authorization check, as Karpenter's validation controller makes it: before
//! a class launches anything, the calls a launch makes are tried — its launch template made
//! for real, `CreateFleet` and `RunInstances` as dry runs — so that a permission the
//! controller's role lacks shows on the class's `ValidationSucceeded` (and so on its NodePools)
//! instead of as a NodeClaim that fails to launch.

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{
    FleetLaunchTemplateConfigRequest, FleetLaunchTemplateOverridesRequest,
    FleetLaunchTemplateSpecificationRequest, InstanceNetworkInterfaceSpecification,
    LaunchTemplateSpecification, ResourceType,
};
use kerf_api::common::Condition;
use kerf_api::ec2nodeclass::{EC2NodeClassSpec, EC2NodeClassStatus};
use kerf_api::labels;

use crate::AwsError;
use crate::launch::{Choice, Fleet, LaunchError, LaunchOrder, admits, tag_specifications};
use crate::node_class::{VALIDATION_SUCCEEDED, condition};

/// What the check tries a class's launch with.
#[derive(Clone, Copy, Debug)]
pub struct Probe<'a> {
    /// The class's name.
    pub node_class: &'a str,
    /// Its spec.
    pub spec: &'a EC2NodeClassSpec,
    /// Its status as just resolved (subnets, security groups, images, instance profile).
    pub status: &'a EC2NodeClassStatus,
    /// The instance type the launch is tried with, and the zone of none in particular.
    pub choice: &'a Choice,
}

/// What the check found.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every call would have been allowed.
    Authorized,
    /// A call was refused: `ValidationSucceeded` False with Karpenter's reason and message,
    /// held (Karpenter caches it) until the class changes or the check's time is up; `said`
    /// is Karpenter's error line for it.
    Refused {
        /// The condition.
        condition: Condition,
        /// The log line's message (`unauthorized to call ec2:CreateFleet`).
        said: String,
    },
    /// `ValidationSucceeded` False for a cause that is not held: the next resolution checks
    /// again (an instance profile EC2 does not know).
    NotHeld(Condition),
    /// No answer to go by (throttled, a server error, an error of another kind): the
    /// condition stays as it was and the next resolution checks again.
    Unanswered(String),
}

/// The sentence Karpenter gives a refused call, from AWS's message: a permission boundary's
/// or a service control policy's explicit deny, images the account may not launch, else no
/// identity-based policy allowing it.
pub fn refusal_sentence(message: &str) -> &'static str {
    if message.contains("with an explicit deny in a permissions boundary") {
        "User is not authorized to perform this operation due to a permission boundary"
    } else if message.contains("with an explicit deny in a service control policy") {
        "User is not authorized to perform this operation due to a service control policy"
    } else if message.contains("Not authorized for images") {
        "User is not authorized for AMI used in instance launch"
    } else {
        "User is not authorized to perform this operation because no identity-based policy allows it"
    }
}

/// `ValidationSucceeded` False as Karpenter's check writes it for a refused call: its reason
/// for the call (`CreateFleetAuthCheckFailed`, `CreateLaunchTemplateAuthCheckFailed`,
/// `RunInstancesAuthCheckFailed`) and `Controller isn't authorized to call ec2:CreateFleet:
/// <the sentence for AWS's message>`.
pub fn refused(permission: &str, message: &str) -> Condition {
    let reason = match permission {
        "ec2:CreateFleet" => "CreateFleetAuthCheckFailed",
        "ec2:CreateLaunchTemplate" => "CreateLaunchTemplateAuthCheckFailed",
        "ec2:RunInstances" => "RunInstancesAuthCheckFailed",
        _ => crate::node_class::UNAUTHORIZED,
    };
    let sentence = refusal_sentence(message);
    let message = format!("Controller isn't authorized to call {permission}: {sentence}");
    condition(VALIDATION_SUCCEEDED, false, reason, message)
}

/// A refused call's verdict.
fn refusal(permission: &str, message: &str) -> Verdict {
    Verdict::Refused {
        condition: refused(permission, message),
        said: format!("unauthorized to call {permission}"),
    }
}

/// Whether an error code is one a call that was refused for want of a permission answers.
fn denied(code: Option<&str>) -> bool {
    matches!(
        code,
        Some("UnauthorizedOperation" | "AccessDenied" | "AccessDeniedException")
    )
}

/// The code a dry run that would have succeeded answers.
const DRY_RUN_PASSED: &str = "DryRunOperation";

/// How one dry run went.
enum DryRun {
    Passed,
    Refused(String),
    Other(String),
}

fn dry_run<E: ProvideErrorMetadata + std::error::Error + 'static, R>(
    answer: Result<R, aws_sdk_ec2::error::SdkError<E>>,
) -> DryRun {
    match answer {
        // a dry run never succeeds: an answer without an error is taken as allowed
        Ok(_) => DryRun::Passed,
        Err(e) => match e.code() {
            Some(DRY_RUN_PASSED) => DryRun::Passed,
            code if denied(code) => DryRun::Refused(e.message().unwrap_or_default().to_string()),
            _ => DryRun::Other(crate::one_line(&e)),
        },
    }
}

impl Fleet {
    /// Tries a launch of the class as Karpenter's validation does: the launch template for
    /// the probe's instance type (on-demand, no NodePool's labels) found or made, then one
    /// `CreateFleet` dry run over every subnet, then `RunInstances` dry runs subnet by subnet
    /// until one would pass.
    pub async fn authorize(&self, probe: &Probe<'_>) -> Verdict {
        let status = probe.status;
        let Some(image) =
            (status.amis.iter()).find(|a| admits(&a.requirements, &probe.choice.labels))
        else {
            let text = format!("no image of the class boots {}", probe.choice.instance_type);
            return Verdict::Unanswered(text);
        };
        let Some(profile) =
            (status.instance_profile.clone()).or_else(|| probe.spec.instance_profile.clone())
        else {
            return Verdict::Unanswered("no instance profile resolved".into());
        };
        let no_labels = Default::default();
        let order = LaunchOrder {
            nodeclaim: "",
            node_pool: "",
            node_class: probe.node_class,
            spec: probe.spec,
            status,
            capacity_type: labels::CAPACITY_TYPE_ON_DEMAND,
            choices: std::slice::from_ref(probe.choice),
            labels: &no_labels,
            taints: &[],
            reservation: None,
        };
        let template = match self.template(&order, &image.id, &probe.choice.sizing, &profile) {
            Ok(t) => t,
            Err(e) => return Verdict::Unanswered(e.to_string()),
        };
        let template = match self.ensure(template, probe.node_class).await {
            Ok(id) => id,
            // finding the template is no part of the check: another refusal is no verdict
            Err(AwsError::Unauthorized {
                permission: permission @ "ec2:CreateLaunchTemplate",
                message,
            }) => {
                return refusal(permission, &message);
            }
            Err(e @ AwsError::Api { .. }) if e.to_string().contains("User data is limited to") => {
                return Verdict::Refused {
                    condition: condition(
                        VALIDATION_SUCCEEDED,
                        false,
                        "UserDataSizeLimitExceeded",
                        "ec2:CreateLaunchTemplate rejected the rendered user data as too large: Rendered user data exceeds the EC2 user data size limit".into(),
                    ),
                    said: "ec2:CreateLaunchTemplate rejected the rendered user data as exceeding the size limit".into(),
                };
            }
            Err(e) => return Verdict::Unanswered(LaunchError::Aws(e).to_string()),
        };
        let instance_type = probe.choice.instance_type.as_str();
        let overrides: Vec<FleetLaunchTemplateOverridesRequest> = (status.subnets.iter())
            .map(|s| {
                FleetLaunchTemplateOverridesRequest::builder()
                    .instance_type(instance_type.into())
                    .subnet_id(&s.id)
                    .build()
            })
            .collect();
        let config = FleetLaunchTemplateConfigRequest::builder()
            .launch_template_specification(
                FleetLaunchTemplateSpecificationRequest::builder()
                    .launch_template_id(&template)
                    .version("$Latest")
                    .build(),
            )
            .set_overrides(Some(overrides))
            .build();
        // the request a launch of the class makes, as a dry run
        let fleet = (self.fleet_request(&order, vec![config]))
            .dry_run(true)
            .send()
            .await;
        match dry_run(fleet) {
            DryRun::Passed => {}
            DryRun::Refused(message) => return refusal("ec2:CreateFleet", &message),
            DryRun::Other(text) => return Verdict::Unanswered(format!("CreateFleet: {text}")),
        }
        // subnet by subnet: the first that would pass is enough; else the first's answer
        let tags = self.instance_tags(&order);
        let kinds = [
            ResourceType::Instance,
            ResourceType::Volume,
            ResourceType::NetworkInterface,
        ];
        let mut first = None;
        for subnet in &status.subnets {
            let interfaces: Vec<InstanceNetworkInterfaceSpecification> =
                match probe.spec.network_interfaces.as_deref() {
                    Some(nics) if !nics.is_empty() => (nics.iter())
                        .map(|n| {
                            InstanceNetworkInterfaceSpecification::builder()
                                .network_card_index(n.network_card_index)
                                .device_index(n.device_index)
                                .interface_type(n.interface_type.as_str())
                                .subnet_id(&subnet.id)
                                .build()
                        })
                        .collect(),
                    _ => vec![
                        InstanceNetworkInterfaceSpecification::builder()
                            .device_index(0)
                            .subnet_id(&subnet.id)
                            .build(),
                    ],
                };
            let run = self
                .ec2
                .run_instances()
                .dry_run(true)
                .min_count(1)
                .max_count(1)
                .launch_template(
                    LaunchTemplateSpecification::builder()
                        .launch_template_id(&template)
                        .version("$Latest")
                        .build(),
                )
                .instance_type(instance_type.into())
                .set_network_interfaces(Some(interfaces))
                .set_tag_specifications(Some(tag_specifications(&tags, &kinds)))
                .send()
                .await;
            let answer = match run {
                // a profile the class names that EC2 does not know (one made for a role is
                // known by the time it is resolved)
                Err(e)
                    if probe.spec.instance_profile.is_some()
                        && e.code() == Some("InvalidParameterValue")
                        && e.message()
                            .is_some_and(|m| m.contains("Invalid IAM Instance Profile name")) =>
                {
                    Some(Verdict::NotHeld(condition(
                        VALIDATION_SUCCEEDED,
                        false,
                        "InstanceProfileNotFound",
                        format!("Instance profile {profile:?} not found"),
                    )))
                }
                other => match dry_run(other) {
                    DryRun::Passed => return Verdict::Authorized,
                    DryRun::Refused(message) => Some(refusal("ec2:RunInstances", &message)),
                    DryRun::Other(text) => {
                        Some(Verdict::Unanswered(format!("RunInstances: {text}")))
                    }
                },
            };
            if first.is_none() {
                first = answer;
            }
        }
        first.unwrap_or_else(|| Verdict::Unanswered("the class resolved no subnet".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_says_karpenters_sentence_for_awss_message() {
        let plain = refused(
            "ec2:RunInstances",
            "You are not authorized to perform this operation. User: arn:aws:sts::1:assumed-role/k is not authorized to perform: ec2:RunInstances",
        );
        assert_eq!(plain.reason, "RunInstancesAuthCheckFailed");
        assert_eq!(
            plain.message,
            "Controller isn't authorized to call ec2:RunInstances: User is not authorized to perform this operation because no identity-based policy allows it"
        );
        let boundary = refused(
            "ec2:CreateFleet",
            "... with an explicit deny in a permissions boundary",
        );
        assert_eq!(boundary.reason, "CreateFleetAuthCheckFailed");
        assert!(
            boundary.message.ends_with("due to a permission boundary"),
            "{}",
            boundary.message
        );
        let scp = refused(
            "ec2:CreateLaunchTemplate",
            "... with an explicit deny in a service control policy",
        );
        assert_eq!(scp.reason, "CreateLaunchTemplateAuthCheckFailed");
        assert!(scp.message.ends_with("due to a service control policy"));
        let images = refused("ec2:RunInstances", "Not authorized for images: [ami-1]");
        assert!(
            images
                .message
                .ends_with("User is not authorized for AMI used in instance launch")
        );
    }
}
