//! The cloud provider interface the operator drives: what an instance type can be bought as,
//! launch a NodeClaim, delete and list instances. It lives with the operator because it does
//! I/O; the core only sees its answers as values (instance types, launched instances,
//! insufficient-capacity offerings), which the simulator's cloud gives it too.

use std::sync::Arc;

use kerf_api::{EC2NodeClass, NodePool};
use kerf_core::cluster::{ClaimRecord, Launched};
use kerf_core::controllers::lifecycle::Offering;
use kerf_scheduling::InstanceTypeOption;

use crate::watch::Queue;

/// Why a cloud call failed.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// No offering of the NodeClaim had capacity; these were tried.
    #[error("insufficient capacity ({} offerings tried)", .0.len())]
    InsufficientCapacity(Vec<Offering>),
    /// The provider's API failed; the call may be retried.
    #[error("cloud provider API: {0}")]
    Api(String),
    /// The provider is misconfigured.
    #[error("cloud provider configuration: {0}")]
    Config(String),
}

/// A cloud the operator launches nodes in.
pub trait CloudProvider {
    /// The name `--cloud-provider` selects it by.
    fn name(&self) -> &'static str;

    /// The instance types a node class can launch, every offering available.
    fn instance_types(&self, class: Option<&EC2NodeClass>) -> Arc<[InstanceTypeOption]>;

    /// Launches the instance of a NodeClaim named `name`.
    fn create(
        &self,
        name: &str,
        claim: &ClaimRecord,
        pool: &NodePool,
        class: Option<&EC2NodeClass>,
    ) -> impl Future<Output = Result<Launched, CloudError>>;

    /// Terminates an instance (gone already is not an error).
    fn delete(&self, provider_id: &str) -> impl Future<Output = Result<(), CloudError>>;

    /// Starts the cloud's background work, which reports into `queue`: interruption notices
    /// ([`Observed::Notice`](crate::watch::Observed::Notice)) and refreshed prices
    /// ([`Observed::PricesChanged`](crate::watch::Observed::PricesChanged)). A cloud with
    /// neither starts nothing.
    fn start(&self, queue: Arc<Queue>) {
        drop(queue);
    }

    /// The instances it runs for this cluster: provider id and the NodeClaim it was launched
    /// for.
    fn list(&self) -> impl Future<Output = Result<Vec<(String, String)>, CloudError>>;
}
