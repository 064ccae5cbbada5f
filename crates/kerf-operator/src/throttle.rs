//! What every call the controllers' actions make passes before it goes out: the Lease gate
//! (no request while this replica's Lease is overdue) and a client-side token bucket
//! (`KUBE_CLIENT_QPS` tokens a second, at most `KUBE_CLIENT_BURST` saved up), as client-go
//! limits Karpenter's client. Both sit in the action client's service stack, so a retry, the
//! second step of a read-then-write and a kwok launch wait on them like a first call.
//! The watches and the Lease's own renewals use another client and wait on neither: a burst
//! of writes never delays the renewal that keeps the replica leading.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tower::{Layer, Service};

use crate::leader::Leadership;

/// How often a closed gate looks again.
const GATE_LOOK: Duration = Duration::from_millis(100);

/// A token bucket: `qps` tokens a second, `burst` at most. A taker that finds it empty
/// reserves the next token and sleeps until it is due, so takers go out in the order they
/// came and never faster than the rate, as client-go's token bucket limiter does.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    /// Tokens held (negative: reserved ahead) as of `at`.
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(qps: f64, burst: u64) -> TokenBucket {
        let burst = burst.max(1) as f64;
        TokenBucket {
            qps: qps.max(f64::MIN_POSITIVE),
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// How long the caller must wait for its token, which is taken now.
    fn reserve(&self, now: Instant) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (tokens, at) = *state;
        let refilled =
            (tokens + now.saturating_duration_since(at).as_secs_f64() * self.qps).min(self.burst);
        let left = refilled - 1.0;
        *state = (left, now.max(at));
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-left / self.qps)
        }
    }

    /// Waits for a token.
    pub async fn take(&self) {
        let wait = self.reserve(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[derive(Debug)]
enum GateState {
    /// No leader election: always open.
    Open,
    /// Leader election, not won yet: closed.
    Candidate,
    /// Leading: open while the Lease is held.
    Leading(Arc<Leadership>),
}

/// Whether this replica may write: always without leader election, else only while its Lease
/// is held. Calls wait at a closed gate; none fails for it.
#[derive(Clone, Debug)]
pub struct Gate(Arc<Mutex<GateState>>);

impl Gate {
    /// A gate for a replica that elects a leader (`elects`), closed until it leads; or one
    /// that is always open.
    pub fn new(elects: bool) -> Gate {
        let state = if elects {
            GateState::Candidate
        } else {
            GateState::Open
        };
        Gate(Arc::new(Mutex::new(state)))
    }

    /// This replica won the Lease: open while it holds it.
    pub fn lead(&self, leadership: Arc<Leadership>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = GateState::Leading(leadership);
    }

    /// Whether a write may go out now.
    pub fn is_open(&self) -> bool {
        match &*self.0.lock().unwrap_or_else(PoisonError::into_inner) {
            GateState::Open => true,
            GateState::Candidate => false,
            GateState::Leading(l) => l.holds(),
        }
    }

    /// Waits until a write may go out.
    pub async fn open(&self) {
        while !self.is_open() {
            tokio::time::sleep(GATE_LOOK).await;
        }
    }
}

/// The layer that puts [`Gate`] and [`TokenBucket`] before every request of a client.
#[derive(Clone, Debug)]
pub struct Paced {
    bucket: Arc<TokenBucket>,
    gate: Gate,
}

impl Paced {
    /// Requests wait for `gate`, then for a token of `bucket`.
    pub fn new(bucket: TokenBucket, gate: Gate) -> Paced {
        Paced {
            bucket: Arc::new(bucket),
            gate,
        }
    }
}

impl<S> Layer<S> for Paced {
    type Service = PacedService<S>;

    fn layer(&self, inner: S) -> PacedService<S> {
        PacedService {
            inner,
            paced: self.clone(),
            permit: None,
            granted: false,
        }
    }
}

/// Waiting at the gate, then for a token.
type Permit = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A service that is ready only once its next request has passed the gate and has a token
/// ([`Paced`]). The client queues its requests in front of it, so they go out in order.
pub struct PacedService<S> {
    inner: S,
    paced: Paced,
    /// The wait under way for the next request's turn.
    permit: Option<Permit>,
    /// The next request has had its turn.
    granted: bool,
}

impl<S, R> Service<R> for PacedService<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if !self.granted {
            let paced = &self.paced;
            let permit = self.permit.get_or_insert_with(|| {
                let paced = paced.clone();
                Box::pin(async move {
                    paced.gate.open().await;
                    paced.bucket.take().await;
                })
            });
            if permit.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.permit = None;
            self.granted = true;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.granted = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_lets_its_burst_through_then_one_token_per_interval() {
        let bucket = TokenBucket::new(10.0, 3);
        let t = Instant::now();
        for _ in 0..3 {
            assert_eq!(bucket.reserve(t), Duration::ZERO);
        }
        // the fourth waits a tenth of a second, the fifth two, each reserving its own
        let fourth = bucket.reserve(t);
        let fifth = bucket.reserve(t);
        assert!((fourth.as_secs_f64() - 0.1).abs() < 1e-9, "{fourth:?}");
        assert!((fifth.as_secs_f64() - 0.2).abs() < 1e-9, "{fifth:?}");
        // a second later the reservations are paid and eight tokens came back (burst 3)
        let later = t + Duration::from_secs(1);
        for _ in 0..3 {
            assert_eq!(bucket.reserve(later), Duration::ZERO);
        }
        assert!(!bucket.reserve(later).is_zero());
    }

    #[test]
    fn a_candidates_gate_is_closed_and_a_gate_without_election_is_open() {
        assert!(!Gate::new(true).is_open());
        assert!(Gate::new(false).is_open());
    }

    /// Counts the requests that reach it.
    #[derive(Clone)]
    struct Server(Arc<std::sync::atomic::AtomicUsize>);

    impl Service<()> for Server {
        type Response = ();
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<(), Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, (): ()) -> Self::Future {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::future::ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_request_waits_while_the_lease_is_not_held_and_goes_once_it_is() {
        let reached = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count_of =
            |r: &std::sync::atomic::AtomicUsize| r.load(std::sync::atomic::Ordering::SeqCst);
        let count = || count_of(&reached);
        let reached_by_opener = Arc::clone(&reached);
        let gate = Gate::new(true);
        let mut service = Paced::new(TokenBucket::new(100.0, 10), gate.clone())
            .layer(Server(Arc::clone(&reached)));
        let opener = gate.clone();
        let now = std::time::Instant::now();
        // a candidate: the request waits; once leading, it goes
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(count_of(&reached_by_opener), 0);
            opener.lead(Arc::new(Leadership::held_until(
                now + Duration::from_secs(60),
            )));
        });
        std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .expect("ready");
        service.call(()).await.expect("answered");
        assert_eq!(count(), 1);
        // the Lease overdue: the next waits again, however long, until it is renewed
        gate.lead(Arc::new(Leadership::held_until(now)));
        let opener = gate.clone();
        let reached_by_opener = Arc::clone(&reached);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(count_of(&reached_by_opener), 1);
            let renewed = std::time::Instant::now() + Duration::from_secs(60);
            opener.lead(Arc::new(Leadership::held_until(renewed)));
        });
        std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .expect("ready");
        service.call(()).await.expect("answered");
        assert_eq!(count(), 2);
    }
}
