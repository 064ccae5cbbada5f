//! The instance profile a node class's `role` needs: Karpenter creates one per class, named
//! `<cluster>_<hash of region and class>`, tags it for the cluster and class (the controller
//! policy's IAM conditions rely on those tags), and puts the role in it. A class that names its
//! own `instanceProfile` uses that one as it is.

use aws_sdk_iam::error::ProvideErrorMetadata;
use aws_sdk_iam::types::Tag;

use crate::launch::{EKS_CLUSTER_TAG, NODECLASS_TAG};
use crate::{AwsError, classify};

/// Makes and finds instance profiles.
#[derive(Clone, Debug)]
pub struct InstanceProfiles {
    iam: aws_sdk_iam::Client,
    cluster: String,
    region: String,
}

/// The profile name Kerf gives a class's role: stable across restarts and releases.
pub fn profile_name(cluster: &str, region: &str, class: &str) -> String {
    let hash = kerf_core::hash::fnv1a(format!("{region}{class}").as_bytes());
    format!("{cluster}_{hash}")
}

impl InstanceProfiles {
    /// An IAM client for the cluster's profiles in `region`.
    pub fn new(config: &aws_config::SdkConfig, cluster: &str, region: &str) -> InstanceProfiles {
        InstanceProfiles {
            iam: crate::client!(aws_sdk_iam, config),
            cluster: cluster.to_string(),
            region: region.to_string(),
        }
    }

    /// The profile named `name`, if it exists.
    async fn find(
        &self,
        name: &str,
    ) -> Result<Option<aws_sdk_iam::types::InstanceProfile>, AwsError> {
        match self
            .iam
            .get_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
        {
            Ok(out) => Ok(out.instance_profile),
            Err(e) if e.code() == Some("NoSuchEntity") => Ok(None),
            Err(e) => Err(classify("GetInstanceProfile", "iam:GetInstanceProfile", e)),
        }
    }

    /// The name of the profile holding `role` for `class`, created and filled when missing.
    pub async fn ensure(&self, class: &str, role: &str) -> Result<String, AwsError> {
        let name = profile_name(&self.cluster, &self.region, class);
        let existing = self.find(&name).await?;
        let roles: Vec<String> = match existing {
            Some(profile) => profile
                .roles()
                .iter()
                .map(|r| r.role_name().to_string())
                .collect(),
            None => {
                let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build();
                let tags = [
                    tag(&format!("kubernetes.io/cluster/{}", self.cluster), "owned"),
                    tag(EKS_CLUSTER_TAG, &self.cluster),
                    tag(NODECLASS_TAG, class),
                    tag("topology.kubernetes.io/region", &self.region),
                ];
                let mut create = self
                    .iam
                    .create_instance_profile()
                    .instance_profile_name(&name)
                    .path("/");
                for t in tags.into_iter().flatten() {
                    create = create.tags(t);
                }
                match create.send().await {
                    Ok(_) => {}
                    Err(e) if e.code() == Some("EntityAlreadyExists") => {}
                    Err(e) => {
                        return Err(classify(
                            "CreateInstanceProfile",
                            "iam:CreateInstanceProfile",
                            e,
                        ));
                    }
                }
                Vec::new()
            }
        };
        // a profile holds one role: a different one (the class's role changed) is swapped
        for other in roles.iter().filter(|r| r.as_str() != role) {
            self.iam
                .remove_role_from_instance_profile()
                .instance_profile_name(&name)
                .role_name(other)
                .send()
                .await
                .map_err(|e| {
                    classify(
                        "RemoveRoleFromInstanceProfile",
                        "iam:RemoveRoleFromInstanceProfile",
                        e,
                    )
                })?;
        }
        if !roles.iter().any(|r| r == role) {
            self.iam
                .add_role_to_instance_profile()
                .instance_profile_name(&name)
                .role_name(role)
                .send()
                .await
                .map_err(|e| {
                    classify(
                        "AddRoleToInstanceProfile",
                        "iam:AddRoleToInstanceProfile",
                        e,
                    )
                })?;
        }
        Ok(name)
    }

    /// Deletes the profile Kerf made for `class`, its role taken out first; one already gone
    /// is not an error.
    pub async fn delete(&self, class: &str) -> Result<(), AwsError> {
        let name = profile_name(&self.cluster, &self.region, class);
        let Some(profile) = self.find(&name).await? else {
            return Ok(());
        };
        for role in profile.roles() {
            self.iam
                .remove_role_from_instance_profile()
                .instance_profile_name(&name)
                .role_name(role.role_name())
                .send()
                .await
                .map_err(|e| {
                    classify(
                        "RemoveRoleFromInstanceProfile",
                        "iam:RemoveRoleFromInstanceProfile",
                        e,
                    )
                })?;
        }
        match self
            .iam
            .delete_instance_profile()
            .instance_profile_name(&name)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("NoSuchEntity") => Ok(()),
            Err(e) => Err(classify(
                "DeleteInstanceProfile",
                "iam:DeleteInstanceProfile",
                e,
            )),
        }
    }
}
