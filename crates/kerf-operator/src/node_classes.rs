//! What the AWS cloud does for the controllers' node class status controller
//! (`kerf_core::controllers::node_classes`): resolves a class's subnets, security groups,
//! images, capacity reservations and instance profile into its status, and cleans up after a
//! deleted class (its launch templates, and the instance profile made for its role).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kerf_api::EC2NodeClass;
use kerf_api::ec2nodeclass::EC2NodeClassStatus;
use kerf_aws_provider::authorization::{self, Probe, Verdict};
use kerf_aws_provider::instance_profile::InstanceProfiles;
use kerf_aws_provider::launch::{Choice, Fleet};
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
    /// Each class's authorization check, held as Karpenter's validation cache holds it.
    checks: Mutex<HashMap<String, Check>>,
    /// How long a check is held: [`CHECK_TTL`] give or take [`CHECK_JITTER`], chosen once.
    check_ttl: Duration,
    /// `DISABLE_DRY_RUN`: the check makes no calls and the class is validated.
    disable_dry_run: bool,
}

/// An authorization check's outcome for a class as it was then.
#[derive(Clone)]
struct Check {
    /// What the class was checked as ([`check_key`]).
    key: u64,
    at: std::time::Instant,
    /// `ValidationSucceeded` as the check found it.
    condition: kerf_api::Condition,
}

/// How long a class's authorization check is held while the class is unchanged (Karpenter's
/// `ValidationTTL`), whether it passed or was refused.
const CHECK_TTL: Duration = Duration::from_secs(30 * 60);
/// The most the held time is moved either way, chosen once per process (as Karpenter's), so
/// that operators started together do not check together.
const CHECK_JITTER: Duration = Duration::from_secs(5 * 60);

/// What a class's check holds for: its name, spec (tags included), annotations, and what it
/// resolved to (subnets, security groups, images, instance profile). A change to any of them
/// checks again.
fn check_key(name: &str, class: &EC2NodeClass, status: &EC2NodeClassStatus) -> u64 {
    fn sorted(mut ids: Vec<&str>) -> Vec<&str> {
        ids.sort_unstable();
        ids
    }
    let key = json!({
        "name": name,
        "spec": class.spec,
        "annotations": class.metadata.annotations,
        "subnets": sorted(status.subnets.iter().map(|s| s.id.as_str()).collect()),
        "groups": sorted(status.security_groups.iter().map(|g| g.id.as_str()).collect()),
        "amis": sorted(status.amis.iter().map(|a| a.id.as_str()).collect()),
        "profile": status.instance_profile,
    });
    kerf_core::hash::fnv1a(key.to_string().as_bytes())
}

impl NodeClasses {
    /// Calls AWS with `config` for the EKS cluster `cluster`, launching through `fleet`.
    pub fn new(
        config: &aws_config::SdkConfig,
        cluster: &str,
        fleet: Arc<Fleet>,
        disable_dry_run: bool,
    ) -> NodeClasses {
        let region = config.region().map(|r| r.to_string()).unwrap_or_default();
        let jitter = rand::random_range(0..=2 * CHECK_JITTER.as_secs());
        let check_ttl = CHECK_TTL - CHECK_JITTER + Duration::from_secs(jitter);
        NodeClasses {
            discovery: Discovery::new(config),
            profiles: InstanceProfiles::new(config, cluster, &region),
            fleet,
            kubernetes: Arc::default(),
            missing_said: Mutex::default(),
            refusals_said: Mutex::default(),
            checks: Mutex::default(),
            check_ttl,
            disable_dry_run,
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

    /// The class's status as AWS resolves it now (conditions without transition times), its
    /// launch authorized with the instance type `probe_type` chooses from what it resolved to;
    /// the reservations' room goes to the fleet, which launches into them.
    pub async fn resolve(
        &self,
        name: &str,
        class: &EC2NodeClass,
        probe_type: impl FnOnce(&EC2NodeClassStatus) -> Option<Choice>,
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
        self.fleet.learn_zones(&status.subnets);
        self.authorize(name, class, &mut status, probe_type).await;
        self.say_refusals(name, &status.conditions);
        self.fleet.set_reservation_room(resolution.reservation_room);
        self.fleet
            .set_placement_group(name, resolution.placement_group);
        Ok(status)
    }

    /// Records that a launch of `class` was refused for want of `permission`: the class is
    /// not validated (so its NodePools launch nothing) until the class changes or the check's
    /// time is up, as a refused authorization check is held.
    pub fn launch_refused(
        &self,
        name: &str,
        class: &EC2NodeClass,
        permission: &str,
        message: &str,
    ) {
        let Some(status) = &class.status else { return };
        let check = Check {
            key: check_key(name, class, status),
            at: std::time::Instant::now(),
            condition: authorization::refused(permission, message),
        };
        let mut checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
        checks.insert(name.to_string(), check);
    }

    /// `ValidationSucceeded` of a class that passes every other check (its kubelet settings,
    /// its family, everything resolved), from Karpenter's authorization check: held while the
    /// class is unchanged, else made again (no calls under `DISABLE_DRY_RUN`); `Ready` follows.
    async fn authorize(
        &self,
        name: &str,
        class: &EC2NodeClass,
        status: &mut EC2NodeClassStatus,
        probe_type: impl FnOnce(&EC2NodeClassStatus) -> Option<Choice>,
    ) {
        let validated = (status.conditions.iter())
            .any(|c| c.type_ == node_class::VALIDATION_SUCCEEDED && c.status == "True");
        if !validated {
            return;
        }
        let key = check_key(name, class, status);
        let held = {
            let mut checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
            match checks.get(name) {
                Some(c) if c.key == key && c.at.elapsed() < self.check_ttl => {
                    Some(c.condition.clone())
                }
                Some(_) => checks.remove(name).and(None),
                None => None,
            }
        };
        let condition = match held {
            Some(condition) => condition,
            None => match self.check(name, class, status, probe_type).await {
                Some((condition, hold)) => {
                    if hold {
                        let at = std::time::Instant::now();
                        let check = Check {
                            key,
                            at,
                            condition: condition.clone(),
                        };
                        let mut checks = self.checks.lock().unwrap_or_else(|e| e.into_inner());
                        checks.insert(name.to_string(), check);
                    }
                    condition
                }
                // no answer to go by: as it was, or not known yet
                None => (class.status.iter())
                    .flat_map(|s| s.conditions.iter())
                    .find(|c| c.type_ == node_class::VALIDATION_SUCCEEDED)
                    .cloned()
                    .map(|mut c| {
                        c.last_transition_time = None;
                        c.observed_generation = None;
                        c
                    })
                    .unwrap_or_else(node_class::awaiting_validation),
            },
        };
        let conditions = &mut status.conditions;
        conditions.retain(|c| {
            c.type_ != node_class::VALIDATION_SUCCEEDED && c.type_ != node_class::READY
        });
        conditions.push(condition);
        let ready = node_class::ready(conditions);
        conditions.push(ready);
    }

    /// One authorization check of the class with the calls a launch makes: the condition it
    /// gives and whether that is held, or none when AWS gave no answer to go by.
    async fn check(
        &self,
        name: &str,
        class: &EC2NodeClass,
        status: &EC2NodeClassStatus,
        probe_type: impl FnOnce(&EC2NodeClassStatus) -> Option<Choice>,
    ) -> Option<(kerf_api::Condition, bool)> {
        if self.disable_dry_run {
            return Some((node_class::validated(), true));
        }
        const CHECKING: &str = "checking the class's launch authorization";
        let Some(choice) = probe_type(status) else {
            let error = format!("{name}: no instance type of the class to try a launch with");
            log::error_when_changed(CHECKING, &error);
            return None;
        };
        let probe = Probe {
            node_class: name,
            spec: &class.spec,
            status,
            choice: &choice,
        };
        let verdict = self.fleet.authorize(&probe).await;
        if !matches!(verdict, Verdict::Unanswered(_)) {
            log::recovered(CHECKING);
        }
        match verdict {
            Verdict::Authorized => Some((node_class::validated(), true)),
            Verdict::Refused { condition, said } => {
                let fields = json!({"EC2NodeClass": {"name": name}, "error": condition.message});
                log::error_in("nodeclass", &said, fields);
                Some((condition, true))
            }
            Verdict::NotHeld(condition) => Some((condition, false)),
            Verdict::Unanswered(error) => {
                log::error_when_changed(CHECKING, &format!("{name}: {error}"));
                None
            }
        }
    }

    /// One error line per class each time what AWS refuses it for want of a permission
    /// changes (the conditions say it at every resolution; the log once).
    fn say_refusals(&self, name: &str, conditions: &[kerf_api::Condition]) {
        let refused: Vec<String> = (conditions.iter())
            // a refused authorization check is said when it is made
            .filter(|c| c.reason == node_class::UNAUTHORIZED)
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
        // a class made again under the name is checked afresh
        (self.checks.lock().unwrap_or_else(|e| e.into_inner())).remove(name);
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
