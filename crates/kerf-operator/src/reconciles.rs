//! The operator's own metrics: controller-runtime's reconcile counters and durations, which
//! Karpenter's performance dashboard reads, with each action the controllers ask for counted
//! as a reconcile of the Karpenter controller that would have made it; the cloud provider's
//! call durations and errors (`karpenter_cloudprovider_*`); and the build info.

use std::time::Duration;

use kerf_core::controllers::Action;
use kerf_core::metrics::{Recorder, families};

use crate::cloud::CloudError;
use crate::execute::Fault;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::runtime_metrics::registered;

type Labels = Vec<(&'static str, String)>;

/// controller-runtime's reconcile-time buckets, in seconds.
const BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The Karpenter controller whose reconcile an action stands for; none for log lines and
/// events, which are not API writes of a controller's own.
pub fn controller_of(action: &Action) -> Option<&'static str> {
    Some(match action {
        // a question to the cloud's catalog, not a write of a controller's
        Action::Log(_) | Action::Event(_) | Action::ListInstanceTypes { .. } => return None,
        Action::CreateNodeClaim(_) => "provisioner",
        Action::Launch { .. } | Action::LabelNode { .. } | Action::PatchNodeClaimStatus { .. } => {
            "nodeclaim.lifecycle"
        }
        Action::Disrupting { .. } => "disruption",
        Action::Reboot { .. } => "nodeclaim.reboot",
        // a rebooting node's `initialized` label comes off; else a node leaves its reservation
        Action::RelabelNode { labels, .. }
            if labels.contains_key(kerf_api::labels::INITIALIZED) =>
        {
            "nodeclaim.reboot"
        }
        Action::RelabelNode { .. } | Action::RelabelNodeClaim { .. } => {
            "capacityreservation.capacitytype"
        }
        Action::Taint { .. } | Action::RemoveTaint { .. } => "disruption",
        Action::Evict { .. } | Action::DeletePod { .. } | Action::DeleteNode { .. } => {
            "node.termination"
        }
        Action::DeleteInstance { .. }
        | Action::AnnotateNodeClaim { .. }
        | Action::DeleteNodeClaim { .. }
        | Action::ReleaseNodeClaim { .. } => "nodeclaim.termination",
        Action::PatchNodePoolStatus { .. } => "nodepool.counter",
        Action::AnnotatePodDeletionCost { .. } => "pod.deletioncost",
        Action::ListInstances => "nodeclaim.garbagecollection",
        Action::PatchNodeOverlayStatus { .. } => "nodeoverlay.controller",
        Action::PatchCapacityBufferStatus { .. } => "capacitybuffer",
        Action::ResolveNodeClass { .. }
        | Action::PatchNodeClassStatus { .. }
        | Action::AddNodeClassFinalizer { .. } => "nodeclass",
        Action::FinalizeNodeClass { .. } => "nodeclass.termination",
    })
}

/// Prometheus' default buckets, which Karpenter's cloud provider histogram keeps.
/// Every call to the cloud provider, timed and its errors counted by category, as Karpenter's
/// decorated cloud provider reports them: `karpenter_cloudprovider_duration_seconds`
/// {controller, method, provider} and `karpenter_cloudprovider_errors_total` {controller,
/// method, provider, error, nodepool}, kept with the controllers' metrics. Cheap to clone:
/// the executor keeps one.
#[derive(Clone, Debug)]
pub struct CloudCalls {
    provider: &'static str,
    metrics: Recorder,
}

/// Which cloud provider method a call was, by Karpenter's interface's names.
#[derive(Clone, Copy, Debug)]
pub enum Method {
    /// Launching a NodeClaim.
    Create,
    /// Terminating an instance.
    Delete,
    /// Listing the instances (garbage collection).
    List,
    /// Rebooting an instance (node repair).
    Reboot,
}

impl CloudCalls {
    /// Calls to `provider`, recorded into the controllers' metrics.
    pub fn new(provider: &'static str, metrics: Recorder) -> CloudCalls {
        CloudCalls { provider, metrics }
    }

    /// Records one call of `method` made for `controller` (and the NodePool it was for, if
    /// any) that took `took` and ended as `result`.
    pub fn record<T>(
        &self,
        controller: &'static str,
        method: Method,
        node_pool: &str,
        result: &Result<T, CloudError>,
        took: Duration,
    ) {
        let method = format!("{method:?}");
        self.metrics.observe(
            &families::CLOUDPROVIDER_DURATION_SECONDS,
            &[controller, &method, self.provider],
            took.as_secs_f64(),
        );
        if let Err(e) = result {
            // Karpenter's categories: its NodeClaimNotFound never reaches here (a delete of
            // a gone instance succeeds), a class that cannot launch is NodeClassNotReady
            let error = match e {
                CloudError::InsufficientCapacity(_) => "InsufficientCapacityError",
                CloudError::Config(_) => "NodeClassNotReadyError",
                CloudError::Api(_) | CloudError::Refused(_) => "unknown",
            };
            self.metrics.inc(
                &families::CLOUDPROVIDER_ERRORS,
                &[controller, error, &method, node_pool, self.provider],
            );
        }
    }

    /// The controllers' metrics, for the cloud's own counters (launch and termination
    /// failures, interruption messages) and the executor's (pod annotation writes).
    pub fn metrics(&self) -> &Recorder {
        &self.metrics
    }
}

/// controller-runtime's reconcile metrics.
#[derive(Debug)]
pub struct Reconciles {
    registry: Registry,
    total: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    faults: Family<Labels, Counter>,
    time: Family<Labels, Histogram, fn() -> Histogram>,
    /// What controller-runtime counts that cannot happen here (a reconcile that panicked,
    /// timed out or failed for good: Kerf's actions are retried until they succeed or their
    /// object goes), at zero per controller as controller-runtime starts them.
    never: [Family<Labels, Counter>; 3],
    /// How many reconciles of a controller run at once (one: its lane), and how many are
    /// running.
    workers: [Family<Labels, Gauge>; 2],
}

impl Default for Reconciles {
    fn default() -> Reconciles {
        Reconciles::new()
    }
}

impl Reconciles {
    /// Every count at zero.
    fn new() -> Reconciles {
        let mut registry = Registry::default();
        let total = Family::<Labels, Counter>::default();
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            total.clone(),
        );
        let errors = Family::<Labels, Counter>::default();
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            errors.clone(),
        );
        // Kerf's: which kind of failure each error was (unreachable, throttled, conflict,
        // server, rejected, cloud, cloud_refused), which controller-runtime does not tell
        let faults = Family::<Labels, Counter>::default();
        registry.register(
            "kerf_reconcile_errors_by_kind",
            "Reconcile errors per controller and kind of failure",
            faults.clone(),
        );
        let time: Family<Labels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(histogram);
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            time.clone(),
        );
        let never = [
            (
                "controller_runtime_terminal_reconcile_errors",
                "Total number of terminal reconciliation errors per controller",
            ),
            (
                "controller_runtime_reconcile_panics",
                "Total number of reconciliation panics per controller",
            ),
            (
                "controller_runtime_reconcile_timeouts",
                "Total number of reconciliation timeouts per controller",
            ),
        ]
        .map(|(name, help)| registered(&mut registry, name, help, Family::default()));
        let workers = [
            (
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
            ),
            (
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
            ),
        ]
        .map(|(name, help)| registered(&mut registry, name, help, Family::default()));
        Reconciles {
            registry,
            total,
            errors,
            faults,
            time,
            never,
            workers,
        }
    }

    /// A controller's series as controller-runtime starts them: every result at zero.
    fn start(&self, controller: &'static str) {
        let named = vec![("controller", controller.to_string())];
        if self.workers[0].get(&named).is_some() {
            return;
        }
        self.workers[0].get_or_create(&named).set(1);
        self.workers[1].get_or_create(&named).set(0);
        self.errors.get_or_create(&named).inc_by(0);
        for family in &self.never {
            family.get_or_create(&named).inc_by(0);
        }
        for result in ["error", "requeue_after", "requeue", "success"] {
            let labels = vec![
                ("controller", controller.to_string()),
                ("result", result.to_string()),
            ];
            self.total.get_or_create(&labels).inc_by(0);
        }
    }

    /// One reconcile of `controller`, successful or failed with a kind of fault, that took
    /// `took`.
    pub fn record(&self, controller: &'static str, result: Result<(), Fault>, took: Duration) {
        self.start(controller);
        if let Err(fault) = result {
            self.faults
                .get_or_create(&vec![
                    ("controller", controller.to_string()),
                    ("kind", fault.as_str().to_string()),
                ])
                .inc();
        }
        let ok = result.is_ok();
        let result = if ok { "success" } else { "error" };
        self.total
            .get_or_create(&vec![
                ("controller", controller.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
        if !ok {
            self.errors
                .get_or_create(&vec![("controller", controller.to_string())])
                .inc();
        }
        self.time
            .get_or_create(&vec![("controller", controller.to_string())])
            .observe(took.as_secs_f64());
    }

    /// The registry, to render beside the controllers' metrics.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloud_errors_are_counted_by_karpenters_categories() {
        let mut core = kerf_core::controllers::Controllers::new(Default::default(), 0);
        let calls = CloudCalls::new("kwok", core.metrics());
        let took = Duration::from_millis(30);
        let short: Result<(), CloudError> = Err(CloudError::InsufficientCapacity(Vec::new()));
        calls.record("nodeclaim.lifecycle", Method::Create, "spot", &short, took);
        let broken: Result<(), CloudError> = Err(CloudError::Api("connection refused".into()));
        calls.record("nodeclaim.termination", Method::Delete, "", &broken, took);
        calls.record("nodeclaim.lifecycle", Method::Create, "spot", &Ok(()), took);
        let text = core.render_metrics(Duration::ZERO, &[]);
        assert!(text.contains(
            "karpenter_cloudprovider_errors_total{controller=\"nodeclaim.lifecycle\",error=\"InsufficientCapacityError\",method=\"Create\",nodepool=\"spot\",provider=\"kwok\"} 1"
        ), "{text}");
        assert!(text.contains(
            "karpenter_cloudprovider_errors_total{controller=\"nodeclaim.termination\",error=\"unknown\",method=\"Delete\",nodepool=\"\",provider=\"kwok\"} 1"
        ), "{text}");
        assert!(text.contains(
            "karpenter_cloudprovider_duration_seconds_count{controller=\"nodeclaim.lifecycle\",method=\"Create\",provider=\"kwok\"} 2"
        ), "{text}");
    }
}
