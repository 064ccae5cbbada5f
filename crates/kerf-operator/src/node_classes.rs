//! What the AWS cloud does for the controllers' node class status controller
//! (`kerf_core::controllers::node_classes`): resolves a class's subnets, security groups,
//! images, capacity reservations and instance profile into its status, and cleans up after a
//! deleted class (its launch templates, and the instance profile made for its role).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kerf_api::EC2NodeClass;
use kerf_api::ec2nodeclass::EC2NodeClassStatus;
use kerf_aws_provider::instance_profile::InstanceProfiles;
use kerf_aws_provider::launch::Fleet;
use kerf_aws_provider::node_class::MissingImage;
use kerf_aws_provider::{Discovery, node_class};
use serde_json::json;

use crate::cloud::CloudError;
use crate::log;

/// `1.33` from the API server's version (EKS reports minors like `33+`).
pub fn kubernetes_version(info: &k8s_openapi::apimachinery::pkg::version::Info) -> String {
    let digits = |s: &str| {
        s.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
    };
    format!("{}.{}", digits(&info.major), digits(&info.minor))
}

/// What resolving and cleaning up node classes calls AWS with.
pub struct NodeClasses {
    discovery: Discovery,
    profiles: InstanceProfiles,
    fleet: Arc<Fleet>,
    /// The cluster's Kubernetes version (images are chosen for it), once read.
    kubernetes: Arc<Mutex<String>>,
    /// Per class, the missing images last warned of: a resolution every few minutes that
    /// finds the same ones says nothing again.
    missing_said: Mutex<HashMap<String, Vec<MissingImage>>>,
    /// The refusals said of each class, so each is said once.
    refusals_said: Mutex<HashMap<String, Vec<String>>>,
    /// Launch calls refused for want of a permission, by class: (the class's generation
    /// then, when, the permission, AWS's message).
    launch_refusals: Mutex<HashMap<String, LaunchRefusal>>,
}

/// A launch refused for want of a permission.
#[derive(Clone)]
struct LaunchRefusal {
    generation: Option<i64>,
    at: std::time::Instant,
    permission: String,
    message: String,
}

/// How long a class stays not validated after a launch was refused for want of a permission,
/// unless the class changes: Karpenter keeps a failed authorization check as long.
const LAUNCH_REFUSAL_TTL: Duration = Duration::from_secs(30 * 60);

impl NodeClasses {
    /// Calls AWS with `config` for the EKS cluster `cluster`, launching through `fleet`.
    pub fn new(config: &aws_config::SdkConfig, cluster: &str, fleet: Arc<Fleet>) -> NodeClasses {
        let region = config.region().map(|r| r.to_string()).unwrap_or_default();
        NodeClasses {
            discovery: Discovery::new(config),
            profiles: InstanceProfiles::new(config, cluster, &region),
            fleet,
            kubernetes: Arc::default(),
            missing_said: Mutex::default(),
            refusals_said: Mutex::default(),
            launch_refusals: Mutex::default(),
        }
    }

    /// Reads the API server's version until it answers; until then a resolution fails and
    /// the controller's next round asks again.
    pub fn read_kubernetes_version(&self, client: kube::Client) {
        let kubernetes = Arc::clone(&self.kubernetes);
        tokio::spawn(async move {
            loop {
                match client.apiserver_version().await {
                    Ok(info) => {
                        *kubernetes.lock().unwrap_or_else(|e| e.into_inner()) =
                            kubernetes_version(&info);
                        return;
                    }
                    Err(e) => log::error("reading the Kubernetes version", &e.to_string()),
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        });
    }

    /// The class's status as AWS resolves it now (conditions without transition times);
    /// the reservations' room goes to the fleet, which launches into them.
    pub async fn resolve(
        &self,
        name: &str,
        class: &EC2NodeClass,
    ) -> Result<EC2NodeClassStatus, CloudError> {
        let kubernetes = self
            .kubernetes
            .lock()
            .map(|k| k.clone())
            .unwrap_or_default();
        if kubernetes.is_empty() {
            return Err(CloudError::Api(
                "the Kubernetes version is not read yet".into(),
            ));
        }
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let resolution = node_class::status(
            &self.discovery,
            &self.profiles,
            name,
            &class.spec,
            &kubernetes,
            now,
        )
        .await
        .map_err(|e| CloudError::Api(e.to_string()))?;
        self.warn_missing_images(name, resolution.missing_images);
        let mut status = resolution.status;
        self.hold_launch_refusal(name, class, &mut status.conditions);
        self.say_refusals(name, &status.conditions);
        self.fleet.set_reservation_room(resolution.reservation_room);
        self.fleet
            .set_placement_group(name, resolution.placement_group);
        Ok(status)
    }

    /// Records that a launch of `class` was refused for want of `permission`: the class is
    /// not validated (so its NodePools launch nothing) until the class changes or
    /// [`LAUNCH_REFUSAL_TTL`] passes, as Karpenter's authorization check holds it.
    pub fn launch_refused(
        &self,
        name: &str,
        class: &EC2NodeClass,
        permission: &str,
        message: &str,
    ) {
        let refusal = LaunchRefusal {
            generation: class.metadata.generation,
            at: std::time::Instant::now(),
            permission: permission.to_string(),
            message: message.to_string(),
        };
        (self
            .launch_refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner()))
        .insert(name.to_string(), refusal);
    }

    /// A launch refusal still held for the class, on its `ValidationSucceeded` (and so its
    /// `Ready`); one for an older generation of the class, or past its time, is dropped.
    fn hold_launch_refusal(
        &self,
        name: &str,
        class: &EC2NodeClass,
        conditions: &mut Vec<kerf_api::Condition>,
    ) {
        let mut refusals = self
            .launch_refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Some(refusal) = refusals.get(name).cloned() else {
            return;
        };
        if refusal.generation != class.metadata.generation
            || refusal.at.elapsed() > LAUNCH_REFUSAL_TTL
        {
            refusals.remove(name);
            return;
        }
        let refused = node_class::launch_refused(&refusal.permission, &refusal.message);
        conditions.retain(|c| c.type_ != refused.type_ && c.type_ != node_class::READY);
        conditions.push(refused);
        let ready = node_class::ready(conditions);
        conditions.push(ready);
    }

    /// One error line per class each time what AWS refuses it for want of a permission
    /// changes (the conditions say it at every resolution; the log once).
    fn say_refusals(&self, name: &str, conditions: &[kerf_api::Condition]) {
        let refused: Vec<String> = (conditions.iter())
            .filter(|c| {
                c.reason == node_class::UNAUTHORIZED || c.reason.ends_with("AuthCheckFailed")
            })
            .map(|c| format!("{}: {}", c.type_, c.message))
            .collect();
        let mut said = self.refusals_said.lock().unwrap_or_else(|e| e.into_inner());
        if said.get(name).map_or(refused.is_empty(), |s| *s == refused) {
            return;
        }
        for refusal in &refused {
            log::warn(
                "nodeclass.status",
                "a permission the class needs is not granted, it is not Ready until it is",
                json!({"EC2NodeClass": {"name": name}, "error": refusal}),
            );
        }
        said.insert(name.to_string(), refused);
    }

    /// One warning per class each time the images its aliases name but EC2 does not list
    /// change (the class stays Ready on the others; `AMIsReady`'s message names them too).
    fn warn_missing_images(&self, name: &str, missing: Vec<MissingImage>) {
        let mut said = self.missing_said.lock().unwrap_or_else(|e| e.into_inner());
        if said.get(name) == Some(&missing) || (missing.is_empty() && !said.contains_key(name)) {
            return;
        }
        for image in &missing {
            log::warn(
                "nodeclass.status",
                "AMI alias names an image that does not exist, its instance types are not offered",
                json!({
                    "EC2NodeClass": {"name": name},
                    "parameter": image.parameter,
                    "image": image.image,
                }),
            );
        }
        said.insert(name.to_string(), missing);
    }

    /// Deletes the launch templates made for the class, and the instance profile made for
    /// its role (a profile the user named is theirs).
    pub async fn clean_up(&self, name: &str, class: &EC2NodeClass) -> Result<(), CloudError> {
        let n = (self.fleet.delete_launch_templates(name).await)
            .map_err(|e| CloudError::Api(format!("deleting launch templates of {name}: {e}")))?;
        if n > 0 {
            let fields = json!({"EC2NodeClass": {"name": name}, "count": n});
            log::info("nodeclass.termination", "deleted launch templates", fields);
        }
        if class.spec.role.is_some() {
            (self.profiles.delete(name).await).map_err(|e| {
                CloudError::Api(format!("deleting instance profile of {name}: {e}"))
            })?;
        }
        Ok(())
    }
}
