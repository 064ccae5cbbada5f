//! The operator's HTTP endpoints, on Karpenter's two ports: `/metrics` (METRICS_PORT) and
//! `/healthz` and `/readyz` (HEALTH_PROBE_PORT). The controllers' state belongs to the main
//! loop alone, so a scrape is a request to it, answered with the rendered text.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::{mpsc, oneshot};

/// A scrape waiting for the main loop's answer.
pub type Scrape = oneshot::Sender<String>;

/// How long a scrape waits for the main loop (Prometheus's default scrape timeout).
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The OpenMetrics text content type.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether the operator is ready: every watch has listed once and the instance types of every
/// node class are loaded; and, since, the API server has not been unreachable, nor a watch
/// relisting, for longer than [`GRACE`]. It recovers by itself when they do.
#[derive(Debug, Default)]
pub struct Readiness {
    synced: AtomicBool,
    troubles: Mutex<Troubles>,
}

#[derive(Debug, Default)]
struct Troubles {
    /// Since when the API server has not answered the probe.
    unreachable: Option<Instant>,
    /// The watches relisting, since when.
    relisting: BTreeMap<&'static str, Instant>,
}

/// How long the API server may be unreachable, or a watch relist, before `/readyz` fails.
pub const GRACE: Duration = Duration::from_secs(5);

impl Readiness {
    /// Marks the operator ready: every watch has listed once.
    pub fn set(&self) {
        self.synced.store(true, Ordering::Relaxed);
    }

    fn troubles(&self) -> std::sync::MutexGuard<'_, Troubles> {
        self.troubles.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the latest probe of the API server found.
    pub fn reachable(&self, reachable: bool) {
        let mut t = self.troubles();
        match (reachable, t.unreachable) {
            (true, _) => t.unreachable = None,
            (false, None) => t.unreachable = Some(Instant::now()),
            (false, Some(_)) => {}
        }
    }

    /// A watch of `kind` started listing again (after its resource version expired).
    pub fn relisting(&self, kind: &'static str) {
        self.troubles()
            .relisting
            .entry(kind)
            .or_insert_with(Instant::now);
    }

    /// A watch of `kind` has listed.
    pub fn listed(&self, kind: &'static str) {
        self.troubles().relisting.remove(kind);
    }

    /// How long the watches have not all been listed (the first listing, or a relist after
    /// an expired resource version), or none while they are.
    pub fn unsynced_for(&self) -> Option<Duration> {
        let t = self.troubles();
        match t.relisting.values().min() {
            Some(since) => Some(since.elapsed()),
            None if !self.synced.load(Ordering::Relaxed) => Some(Duration::ZERO),
            None => None,
        }
    }

    /// Ready, or why not.
    pub fn check(&self) -> Result<(), String> {
        if !self.synced.load(Ordering::Relaxed) {
            return Err("caches not synced yet".into());
        }
        let t = self.troubles();
        if let Some(since) = t.unreachable.filter(|s| s.elapsed() > GRACE) {
            return Err(format!(
                "the API server has not answered for {}s",
                since.elapsed().as_secs()
            ));
        }
        if let Some((kind, since)) = t.relisting.iter().find(|(_, s)| s.elapsed() > GRACE) {
            return Err(format!(
                "the {kind} watch has been relisting for {}s",
                since.elapsed().as_secs()
            ));
        }
        Ok(())
    }
}

/// Binds both ports and serves them until the process ends; scrapes are sent to `scrapes`.
pub async fn serve(
    metrics: SocketAddr,
    health: SocketAddr,
    ready: Arc<Readiness>,
    scrapes: mpsc::Sender<Scrape>,
) -> std::io::Result<()> {
    let metrics_listener = tokio::net::TcpListener::bind(metrics).await.map_err(|e| {
        std::io::Error::new(e.kind(), format!("METRICS_PORT: binding {metrics}: {e}"))
    })?;
    let health_listener = tokio::net::TcpListener::bind(health).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("HEALTH_PROBE_PORT: binding {health}: {e}"),
        )
    })?;
    let metrics_app = Router::new()
        .route("/metrics", get(scrape))
        .with_state(scrapes);
    let health_app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(ready);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(metrics_listener, metrics_app).await {
            crate::log::error("serving /metrics", &e.to_string());
        }
    });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(health_listener, health_app).await {
            crate::log::error("serving health probes", &e.to_string());
        }
    });
    Ok(())
}

async fn readyz(State(ready): State<Arc<Readiness>>) -> impl IntoResponse {
    match ready.check() {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn scrape(State(scrapes): State<mpsc::Sender<Scrape>>) -> impl IntoResponse {
    let (reply, answer) = oneshot::channel();
    if scrapes.send(reply).await.is_err() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down".to_string()).into_response();
    }
    match tokio::time::timeout(SCRAPE_TIMEOUT, answer).await {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the controllers did not answer in time".to_string(),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsynced_from_the_first_listing_until_every_watch_has_listed_and_during_a_relist() {
        let ready = Readiness::default();
        assert!(ready.unsynced_for().is_some(), "nothing listed yet");
        ready.relisting("Pod");
        ready.relisting("Node");
        ready.listed("Pod");
        assert!(
            ready.unsynced_for().is_some(),
            "the nodes are still listing"
        );
        ready.listed("Node");
        ready.set();
        assert_eq!(ready.unsynced_for(), None);
        ready.relisting("NodeClaim");
        std::thread::sleep(Duration::from_millis(20));
        let relisting = ready.unsynced_for().expect("a relist");
        assert!(relisting >= Duration::from_millis(20), "{relisting:?}");
        ready.listed("NodeClaim");
        assert_eq!(ready.unsynced_for(), None);
    }
}
