//! The EC2NodeClass reconciler, as Karpenter's `nodeclass` controllers: every class's status
//! (subnets, security groups, AMIs, instance profile, conditions) kept current every minute
//! and whenever a class changes; a finalizer on each class, and on deletion, once no NodeClaim
//! uses the class any more, its launch templates and the instance profile made for its role
//! deleted before the finalizer is taken off.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kerf_api::{EC2NodeClass, NodeClaim};
use kerf_aws_provider::instance_profile::InstanceProfiles;
use kerf_aws_provider::launch::Fleet;
use kerf_aws_provider::{Discovery, node_class};
use kerf_core::objects::keep_transition_times;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::log;

/// How often every EC2NodeClass is resolved again (Karpenter's is a minute too).
pub const NODE_CLASS_INTERVAL: Duration = Duration::from_secs(60);
/// How soon a class being deleted is looked at again while NodeClaims still use it.
const TERMINATION_RETRY: Duration = Duration::from_secs(10);
/// The finalizer that holds a class until what Kerf made for it is deleted (Karpenter's).
pub const TERMINATION_FINALIZER: &str = "karpenter.k8s.aws/termination";

/// What the reconciler calls AWS with.
struct Reconciler {
    classes: Api<EC2NodeClass>,
    nodeclaims: Api<NodeClaim>,
    discovery: Discovery,
    profiles: InstanceProfiles,
    fleet: Arc<Fleet>,
    kubernetes: String,
}

/// `1.33` from the API server's version (EKS reports minors like `33+`).
pub fn kubernetes_version(info: &k8s_openapi::apimachinery::pkg::version::Info) -> String {
    let digits = |s: &str| {
        s.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
    };
    format!("{}.{}", digits(&info.major), digits(&info.minor))
}

/// Keeps every EC2NodeClass's status current: at start, when a class changes, and every
/// [`NODE_CLASS_INTERVAL`]. Runs until the process stops; failures are logged and retried at
/// the next round.
pub async fn reconcile_node_classes(
    client: kube::Client,
    config: aws_config::SdkConfig,
    cluster: String,
    fleet: Arc<Fleet>,
) {
    let classes: Api<EC2NodeClass> = Api::all(client.clone());
    let region = config.region().map(|r| r.to_string()).unwrap_or_default();
    let mut r = Reconciler {
        classes: classes.clone(),
        nodeclaims: Api::all(client.clone()),
        discovery: Discovery::new(&config),
        profiles: InstanceProfiles::new(&config, &cluster, &region),
        fleet,
        kubernetes: String::new(),
    };
    let mut changes = kube::runtime::watcher(classes.clone(), Default::default()).boxed();
    loop {
        r.kubernetes = match client.apiserver_version().await {
            Ok(info) => kubernetes_version(&info),
            Err(e) => {
                log::error("reading the Kubernetes version", &e.to_string());
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
        };
        let mut waiting = false;
        match classes.list(&Default::default()).await {
            Ok(list) => {
                for class in list.items {
                    waiting |= !r.reconcile(&class).await;
                }
            }
            Err(e) => log::error("listing ec2nodeclasses", &e.to_string()),
        }
        // the next round: the interval (sooner while a deletion waits on NodeClaims), or
        // when a class changes
        let deadline = tokio::time::sleep(if waiting {
            TERMINATION_RETRY
        } else {
            NODE_CLASS_INTERVAL
        });
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                () = &mut deadline => break,
                event = changes.next() => match event {
                    Some(Ok(kube::runtime::watcher::Event::Apply(c))) => {
                        let resolved = c.status.as_ref().is_some_and(|s| {
                            s.conditions.iter().any(|cond| {
                                cond.observed_generation == c.metadata.generation
                            })
                        });
                        if !resolved || c.metadata.deletion_timestamp.is_some() {
                            r.reconcile(&c).await;
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => log::error("watching ec2nodeclasses", &e.to_string()),
                    None => return,
                },
            }
        }
    }
}

impl Reconciler {
    /// Brings one class along: its finalizer and status, or its deletion. False while a
    /// deletion waits on NodeClaims.
    async fn reconcile(&self, class: &EC2NodeClass) -> bool {
        let name = class.metadata.name.clone().unwrap_or_default();
        let finalizers = class.metadata.finalizers.clone().unwrap_or_default();
        let held = finalizers.iter().any(|f| f == TERMINATION_FINALIZER);
        if class.metadata.deletion_timestamp.is_some() {
            return !held || self.terminate(class, &name, finalizers).await;
        }
        if !held {
            let mut with = finalizers;
            with.push(TERMINATION_FINALIZER.to_string());
            self.set_finalizers(class, &name, with).await;
        }
        self.resolve(class, &name).await;
        true
    }

    /// A class being deleted: waits while NodeClaims use it, then deletes its launch
    /// templates and the instance profile made for its role, and takes the finalizer off.
    /// False while it waits.
    async fn terminate(&self, class: &EC2NodeClass, name: &str, finalizers: Vec<String>) -> bool {
        let claims = match self.nodeclaims.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(e) => {
                log::error("listing nodeclaims", &e.to_string());
                return false;
            }
        };
        let using: Vec<String> = claims
            .iter()
            .filter(|c| c.spec.node_class_ref.name == name)
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        if !using.is_empty() {
            log::info(
                "nodeclass.termination",
                "waiting on nodeclaim termination",
                json!({"EC2NodeClass": {"name": name}, "NodeClaims": using}),
            );
            return false;
        }
        match self.fleet.delete_launch_templates(name).await {
            Ok(n) if n > 0 => log::info(
                "nodeclass.termination",
                "deleted launch templates",
                json!({"EC2NodeClass": {"name": name}, "count": n}),
            ),
            Ok(_) => {}
            Err(e) => {
                log::error("deleting launch templates", &format!("{name}: {e}"));
                return false;
            }
        }
        // a profile the user named is theirs; the one made for `role` is Kerf's
        if class.spec.role.is_some()
            && let Err(e) = self.profiles.delete(name).await
        {
            log::error("deleting instance profile", &format!("{name}: {e}"));
            return false;
        }
        let rest = finalizers
            .into_iter()
            .filter(|f| f != TERMINATION_FINALIZER)
            .collect();
        self.set_finalizers(class, name, rest).await
    }

    /// Writes a class's finalizers, on the version read (a class changed since is looked
    /// at again in the next round).
    async fn set_finalizers(
        &self,
        class: &EC2NodeClass,
        name: &str,
        finalizers: Vec<String>,
    ) -> bool {
        let patch = Patch::Merge(json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": class.metadata.resource_version,
        }}));
        match self
            .classes
            .patch(name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => true,
            Err(kube::Error::Api(e)) if e.code == 404 => true,
            Err(e) => {
                log::error("patching ec2nodeclass finalizers", &format!("{name}: {e}"));
                false
            }
        }
    }

    /// Resolves a class's selector terms and instance profile into its status.
    async fn resolve(&self, class: &EC2NodeClass, name: &str) {
        let name = name.to_string();
        let now = k8s_openapi::jiff::Timestamp::now();
        let (mut status, room) = match node_class::status(
            &self.discovery,
            &self.profiles,
            &name,
            &class.spec,
            &self.kubernetes,
            now.as_second(),
        )
        .await
        {
            Ok(s) => s,
            Err(e) => {
                log::error("resolving ec2nodeclass", &format!("{name}: {e}"));
                return;
            }
        };
        let previous = class
            .status
            .as_ref()
            .map(|s| &s.conditions[..])
            .unwrap_or(&[]);
        self.fleet.set_reservation_room(room);
        keep_transition_times(&mut status.conditions, previous, crate::execute::now());
        for c in &mut status.conditions {
            c.observed_generation = class.metadata.generation;
        }
        if class.status.as_ref() == Some(&status) {
            return;
        }
        let patch = Patch::Merge(json!({ "status": status }));
        if let Err(e) = self
            .classes
            .patch_status(&name, &PatchParams::default(), &patch)
            .await
        {
            log::error("patching ec2nodeclass status", &format!("{name}: {e}"));
        }
    }
}
