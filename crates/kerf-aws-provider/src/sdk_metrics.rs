//! Karpenter's AWS SDK families, which its dashboards and users' alerts read beside its own:
//! `aws_sdk_go_request_total`, `aws_sdk_go_request_attempt_total`,
//! `aws_sdk_go_request_duration_seconds`, `aws_sdk_go_request_attempt_duration_seconds` and
//! `aws_sdk_go_request_retry_count`, labelled `service` (the SDK's service id: `EC2`, `SQS`…),
//! `action` (the operation: `CreateFleet`) and `code` (the HTTP status, `0` without an
//! answer), with the buckets Karpenter's SDK middleware gives them. An interceptor on every
//! client this crate makes ([`client!`]) counts each call once the operator has installed the
//! families ([`install`]); until then it counts nothing (the tests, `kerf` itself).

use std::sync::OnceLock;
use std::time::Instant;

use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
    FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// The five families and the registry that serves them.
#[derive(Debug)]
pub struct SdkMetrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    attempts: Family<Labels, Counter>,
    durations: Histograms,
    attempt_durations: Histograms,
    retries: Histograms,
}

/// The request latencies' buckets: 10 ms growing by half, twenty of them.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 1.5, 20))
}

/// Retries per request: 0 to 10.
fn retry_count() -> Histogram {
    Histogram::new((0..=10).map(f64::from))
}

impl Default for SdkMetrics {
    fn default() -> SdkMetrics {
        let mut registry = Registry::default();
        let requests = Family::<Labels, Counter>::default();
        registry.register(
            "aws_sdk_go_request",
            "The total number of AWS SDK Go requests",
            requests.clone(),
        );
        let attempts = Family::<Labels, Counter>::default();
        registry.register(
            "aws_sdk_go_request_attempt",
            "The total number of AWS SDK Go request attempts",
            attempts.clone(),
        );
        let durations = Histograms::new_with_constructor(latency);
        registry.register(
            "aws_sdk_go_request_duration_seconds",
            "Latency of AWS SDK Go requests",
            durations.clone(),
        );
        let attempt_durations = Histograms::new_with_constructor(latency);
        registry.register(
            "aws_sdk_go_request_attempt_duration_seconds",
            "Latency of AWS SDK Go request attempts",
            attempt_durations.clone(),
        );
        let retries = Histograms::new_with_constructor(retry_count);
        registry.register(
            "aws_sdk_go_request_retry_count",
            "The total number of AWS SDK Go retry attempts per request",
            retries.clone(),
        );
        SdkMetrics {
            registry,
            requests,
            attempts,
            durations,
            attempt_durations,
            retries,
        }
    }
}

impl SdkMetrics {
    /// The registry, for the operator's `/metrics`.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts one finished call: its attempts' codes and durations, the final code and the
    /// whole call's duration. As Karpenter's middleware does, each attempt's duration is
    /// labelled with the call's final code, its count with the attempt's own.
    fn record(&self, service: &str, action: &str, code: u16, seconds: f64, tries: &[Try]) {
        let labels = |code: u16| -> Labels {
            vec![
                ("service", service.to_string()),
                ("action", action.to_string()),
                ("code", code.to_string()),
            ]
        };
        let last = labels(code);
        self.requests.get_or_create(&last).inc();
        self.durations.get_or_create(&last).observe(seconds);
        let retried = tries.len().saturating_sub(1);
        self.retries.get_or_create(&last).observe(retried as f64);
        for t in tries {
            self.attempts.get_or_create(&labels(t.code)).inc();
            self.attempt_durations
                .get_or_create(&last)
                .observe(t.seconds);
        }
    }
}

static INSTALLED: OnceLock<SdkMetrics> = OnceLock::new();

/// Makes the families and starts counting every client's calls into them; the operator calls
/// it once, before it makes its clients, and serves the registry it returns.
pub fn install() -> &'static SdkMetrics {
    INSTALLED.get_or_init(SdkMetrics::default)
}

/// The families, once [`install`]ed.
pub fn installed() -> Option<&'static SdkMetrics> {
    INSTALLED.get()
}

/// One attempt: its HTTP status (0 without an answer) and duration.
#[derive(Clone, Debug)]
struct Try {
    code: u16,
    seconds: f64,
}

/// What a call has seen so far, kept in its config bag.
#[derive(Clone, Debug)]
struct Call {
    started: Instant,
    attempt_started: Instant,
    tries: Vec<Try>,
}

impl Storable for Call {
    type Storer = StoreReplace<Call>;
}

/// The interceptor every client carries: times each call and each of its attempts.
#[derive(Debug, Default)]
pub struct Counting;

fn status(context: &FinalizerInterceptorContextRef<'_>) -> u16 {
    context.response().map_or(0, |r| r.status().as_u16())
}

impl Intercept for Counting {
    fn name(&self) -> &'static str {
        "KerfSdkMetrics"
    }

    fn read_before_execution(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if INSTALLED.get().is_some() {
            let now = Instant::now();
            cfg.interceptor_state().store_put(Call {
                started: now,
                attempt_started: now,
                tries: Vec::new(),
            });
        }
        Ok(())
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(mut call) = cfg.load::<Call>().cloned() {
            call.attempt_started = Instant::now();
            cfg.interceptor_state().store_put(call);
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(mut call) = cfg.load::<Call>().cloned() {
            call.tries.push(Try {
                code: status(context),
                seconds: call.attempt_started.elapsed().as_secs_f64(),
            });
            cfg.interceptor_state().store_put(call);
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (Some(metrics), Some(call), Some(op)) =
            (INSTALLED.get(), cfg.load::<Call>(), cfg.load::<Metadata>())
        else {
            return Ok(());
        };
        metrics.record(
            op.service(),
            op.name(),
            status(context),
            call.started.elapsed().as_secs_f64(),
            &call.tries,
        );
        Ok(())
    }
}

/// A client of an SDK crate made from an `SdkConfig`, carrying the [`Counting`] interceptor.
#[macro_export]
macro_rules! client {
    ($sdk:ident, $config:expr) => {
        $sdk::Client::from_conf(
            $sdk::config::Builder::from($config)
                .interceptor($crate::sdk_metrics::Counting)
                .build(),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn a_call_counts_its_attempts_with_their_codes_and_its_final_code() {
        let metrics = SdkMetrics::default();
        let tries = [
            Try {
                code: 503,
                seconds: 0.02,
            },
            Try {
                code: 200,
                seconds: 0.03,
            },
        ];
        metrics.record("EC2", "CreateFleet", 200, 0.3, &tries);
        let mut text = String::new();
        encode(&mut text, metrics.registry()).expect("encoded");
        for line in [
            r#"aws_sdk_go_request_total{service="EC2",action="CreateFleet",code="200"} 1"#,
            r#"aws_sdk_go_request_attempt_total{service="EC2",action="CreateFleet",code="503"} 1"#,
            r#"aws_sdk_go_request_attempt_total{service="EC2",action="CreateFleet",code="200"} 1"#,
            r#"aws_sdk_go_request_attempt_duration_seconds_count{service="EC2",action="CreateFleet",code="200"} 2"#,
            r#"aws_sdk_go_request_retry_count_sum{service="EC2",action="CreateFleet",code="200"} 1.0"#,
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}
