//! The `kwok` cloud provider, as Karpenter's own kwok provider works for its e2e and
//! performance tests: a launch creates a Node object (labels from the instance type and
//! offering, capacity and allocatable from the catalog, provider id `kwok://<name>`, kwok's
//! node annotation) that kwok then plays the kubelet for; instances are those Nodes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint as K8sTaint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::{EC2NodeClass, NodePool, labels};
use kerf_aws::instance_type::scheduler_options;
use std::path::{Path, PathBuf};

use kerf_core::cluster::{CapacityType, ClaimRecord, CloudInstance, Launched};
use kerf_core::controllers::lifecycle::InsufficientOffering;
use kerf_core::controllers::provisioning::node_labels;
use kerf_core::controllers::reboot::RebootRefusal;
use kerf_core::fleet;
use kerf_core::unavailable::Pattern;
use kerf_scheduling::InstanceTypeOption;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::cloud::{Available, CapacitySettings, CloudError, CloudProvider, offerings};
use crate::kwok_types;

/// kwok's annotation on the Nodes it manages.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// The provider id prefix of kwok instances.
const PROVIDER_PREFIX: &str = "kwok://";
/// Nodes read per request when listing instances.
const LIST_PAGE: u32 = 100;

/// Nodes made for kwok to run.
pub struct Kwok {
    nodes: Api<Node>,
    region: String,
    no_capacity: Option<PathBuf>,
    capacity: CapacitySettings,
    /// The instance types per node class spec (as JSON): built once, not at every launch,
    /// and shared with the controllers.
    catalogs: Mutex<HashMap<String, Arc<[InstanceTypeOption]>>>,
    /// The instance types of KWOKNodeClasses (Karpenter kwok's).
    kwok_types: Arc<[InstanceTypeOption]>,
}

/// Reads the offerings that have no capacity: one `CAPACITY_TYPE[:INSTANCE_TYPE[:ZONE]]` a
/// line (`*` for any), blank lines and `#` comments skipped.
fn read_no_capacity(path: &Path) -> Result<Vec<Pattern>, CloudError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CloudError::Config(format!("{}: {e}", path.display())))?;
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            Pattern::parse(l).map_err(|e| CloudError::Config(format!("{}: {e}", path.display())))
        })
        .collect()
}

impl Kwok {
    /// A provider creating Nodes through `client`, with the instance types of `region`.
    /// Offerings listed in `no_capacity` (read at every launch) fail with insufficient
    /// capacity, as EC2 does when a pool runs dry: that is how tests take spot away.
    pub fn new(
        client: kube::Client,
        region: &str,
        no_capacity: Option<PathBuf>,
        instance_types_file: Option<&Path>,
        capacity: CapacitySettings,
    ) -> Result<Kwok, CloudError> {
        let specs = match instance_types_file {
            Some(path) => kwok_types::read_file(path)?,
            None => kwok_types::default_specs(),
        };
        kerf_aws::catalog::zones(region).map_err(|e| CloudError::Config(e.to_string()))?;
        if let Some(path) = &no_capacity {
            read_no_capacity(path)?;
        }
        Ok(Kwok {
            nodes: Api::all(client),
            region: region.to_string(),
            no_capacity,
            capacity,
            catalogs: Mutex::default(),
            kwok_types: kwok_types::options(&specs).into(),
        })
    }

    fn catalog(&self, class: Option<&EC2NodeClass>) -> Arc<[InstanceTypeOption]> {
        if class.is_some_and(kwok_types::is_kwok) {
            return Arc::clone(&self.kwok_types);
        }
        let key = class
            .and_then(|c| serde_json::to_string(&c.spec).ok())
            .unwrap_or_default();
        let mut catalogs = self.catalogs.lock().unwrap_or_else(PoisonError::into_inner);
        let built = catalogs.entry(key).or_insert_with(|| {
            let settings = self.capacity.node_settings(class);
            let types = kerf_aws::instance_types(&self.region, &settings).unwrap_or_default();
            scheduler_options(&types, |_, _, _| false).into()
        });
        Arc::clone(built)
    }
}

fn quantities(r: &kerf_scheduling::resources::Resources) -> BTreeMap<String, Quantity> {
    r.to_resource_list()
        .into_iter()
        .map(|(k, v)| (k, Quantity(v.as_str().to_string())))
        .collect()
}

impl CloudProvider for Kwok {
    fn name(&self) -> &'static str {
        "kwok"
    }

    fn repair_policies(&self) -> &'static [kerf_core::repair::RepairPolicy] {
        &kerf_core::repair::KWOK_POLICIES
    }

    fn instance_types(&self, class: Option<&EC2NodeClass>) -> Arc<[InstanceTypeOption]> {
        self.catalog(class)
    }

    async fn create(
        &self,
        name: &str,
        claim: &ClaimRecord,
        pool: &NodePool,
        class: Option<&EC2NodeClass>,
        available: &Available<'_>,
    ) -> Result<Launched, CloudError> {
        let catalog = self.catalog(class);
        let dry = match &self.no_capacity {
            Some(path) => read_no_capacity(path)?,
            None => Vec::new(),
        };
        let offers = fleet::request(&claim.requirements, offerings(&catalog, claim), available);
        let mut insufficient = Vec::new();
        let mut chosen = None;
        for c in offers {
            if dry
                .iter()
                .any(|p| p.matches(c.capacity_type, c.instance_type, c.zone))
            {
                insufficient.push(InsufficientOffering {
                    capacity_type: c.capacity_type.to_string(),
                    instance_type: c.instance_type.to_string(),
                    zone: c.zone.to_string(),
                });
                continue;
            }
            chosen = Some((c.price, c.item.0, c.item.1));
            break;
        }
        let Some((price, t, o)) = chosen else {
            return Err(CloudError::InsufficientCapacity(insufficient));
        };
        let mut type_labels = (*t.labels).clone();
        type_labels.insert(labels::REGION.into(), self.region.clone());
        let launched = Launched {
            provider_id: format!("{PROVIDER_PREFIX}{name}"),
            instance_type: t.name.clone(),
            zone: o.zone.clone(),
            capacity_type: CapacityType::parse(&o.capacity_type).unwrap_or(CapacityType::OnDemand),
            price_per_hour: price,
            capacity: t.capacity.clone(),
            allocatable: t.allocatable.clone(),
            labels: type_labels,
            image_id: None,
            network: None,
        };
        let taints: Vec<K8sTaint> = (claim.registration_taints().iter())
            .map(|t| K8sTaint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: format!("{:?}", t.effect),
                time_added: None,
            })
            .collect();
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                labels: Some(node_labels(&launched, pool, name)),
                annotations: Some(BTreeMap::from([(
                    KWOK_NODE_ANNOTATION.to_string(),
                    "fake".to_string(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(launched.provider_id.clone()),
                taints: (!taints.is_empty()).then_some(taints),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(quantities(&launched.capacity)),
                allocatable: Some(quantities(&launched.allocatable)),
                ..NodeStatus::default()
            }),
        };
        match self.nodes.create(&PostParams::default(), &node).await {
            Ok(_) => Ok(launched),
            // an earlier attempt already made it (a restart mid-launch): the same instance
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(launched),
            Err(e) => Err(CloudError::Api(e.to_string())),
        }
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        let Some(name) = provider_id.strip_prefix(PROVIDER_PREFIX) else {
            return Ok(());
        };
        crate::execute::delete_node(&self.nodes, name)
            .await
            .map_err(|e| CloudError::Api(e.to_string()))
    }

    /// As Karpenter's kwok provider reboots: the Node's boot id becomes `kwok-` and the
    /// operation id (kwok's kubelet never goes NotReady, so the node is back at once).
    async fn reboot(
        &self,
        node: &str,
        _provider_id: &str,
        operation_id: &str,
    ) -> Result<(), RebootRefusal> {
        let patch = Patch::Merge(
            json!({"status": {"nodeInfo": {"bootID": format!("kwok-{operation_id}")}}}),
        );
        match (self.nodes)
            .patch_status(node, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => {
                Err(RebootRefusal::Rejected(format!("node {node} not found")))
            }
            Err(e) => Err(RebootRefusal::Failed(e.to_string())),
        }
    }

    async fn list(&self) -> Result<Vec<CloudInstance>, CloudError> {
        // page by page: a thousand whole Nodes (managed fields, images, conditions) parsed at
        // once were the operator's largest allocation, for the provider IDs alone
        let mut ids = Vec::new();
        let mut params = ListParams::default().limit(LIST_PAGE);
        loop {
            let page = match self.nodes.list(&params).await {
                Ok(page) => page,
                // the pages' revision was compacted away while they were read (a 50,000-pod
                // burst's listing met it): the whole list at once, as client-go's pager falls
                // back to
                Err(kube::Error::Api(e)) if e.code == 410 && params.continue_token.is_some() => {
                    ids.clear();
                    params = ListParams::default();
                    continue;
                }
                Err(e) => return Err(CloudError::Api(e.to_string())),
            };
            ids.extend(
                page.items
                    .into_iter()
                    .filter_map(|n| n.spec?.provider_id)
                    .filter_map(|provider_id| {
                        let nodeclaim = provider_id.strip_prefix(PROVIDER_PREFIX)?.to_string();
                        Some(CloudInstance {
                            provider_id,
                            nodeclaim,
                            image_id: None,
                            network: None,
                            reservation: None,
                        })
                    }),
            );
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(ids),
            }
        }
    }
}
