//! The action clients' answer to the API server's own throttling. kube-rs's default retry
//! honours `Retry-After`, but doubles its wait at each 429 (up to 1,000 s) and leaves every
//! call in flight: on a priority-and-fairness level of one seat, the calls of a 1,000-pod
//! burst kept colliding and waiting out growing backoffs while the seat sat idle (4.5
//! requests a second dispatched, 272 pods Running after four minutes). Here each attempt
//! takes a place in a window of calls in flight that halves at each 429 and grows by one at
//! each other answer (TCP's slow start and multiplicative decrease: the window finds the
//! seats there are and is back to full within a hundred answers once the throttling ends),
//! and a 429, 503 or 504 is sent again after the answer's `Retry-After`
//! (1 s when it gives none, 10 s at most), up to [`ATTEMPTS`] times, as client-go does, once
//! the Lease gate is open (no retry goes out after the Lease lapsed).

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{Request, Response, StatusCode};
use kube::client::Body;
use tokio::sync::Notify;
use tower::buffer::Buffer;
use tower::{BoxError, Layer, Service, ServiceExt};

use crate::throttle::Gate;

/// How many times a throttled or unavailable call is sent in all (client-go: 10 retries).
pub const ATTEMPTS: u32 = 11;
/// The longest wait between two attempts, whatever `Retry-After` says.
const LONGEST_WAIT: Duration = Duration::from_secs(10);
/// The most calls in flight at once, and the window's size until the first 429.
pub const MOST_IN_FLIGHT: usize = 100;

/// The calls in flight a client allows itself: halved at each 429, grown by one at each
/// other answer.
#[derive(Debug)]
pub struct Window {
    state: Mutex<WindowState>,
    freed: Notify,
}

#[derive(Debug)]
struct WindowState {
    limit: usize,
    busy: usize,
}

impl Window {
    /// A window of [`MOST_IN_FLIGHT`].
    pub fn new() -> Arc<Window> {
        Arc::new(Window {
            state: Mutex::new(WindowState {
                limit: MOST_IN_FLIGHT,
                busy: 0,
            }),
            freed: Notify::new(),
        })
    }

    /// How many calls may be in flight now.
    pub fn limit(&self) -> usize {
        self.lock().limit
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WindowState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn try_take(&self) -> bool {
        let mut s = self.lock();
        let free = s.busy < s.limit;
        if free {
            s.busy += 1;
        }
        free
    }

    /// Waits for a place in the window.
    async fn take(self: &Arc<Self>) -> Place {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.try_take() {
                return Place {
                    window: Arc::clone(self),
                    throttled: false,
                };
            }
            freed.await;
        }
    }

    fn give_back(&self, throttled: bool) {
        let mut s = self.lock();
        s.busy = s.busy.saturating_sub(1);
        s.limit = if throttled {
            (s.limit / 2).max(1)
        } else {
            (s.limit + 1).min(MOST_IN_FLIGHT)
        };
        drop(s);
        self.freed.notify_waiters();
    }
}

/// A place in a [`Window`], given back when dropped (a call abandoned gives it back too).
struct Place {
    window: Arc<Window>,
    /// Whether the call was answered 429.
    throttled: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.window.give_back(self.throttled);
    }
}

/// The layer that puts a client's calls through a [`Window`] and sends throttled ones again;
/// the client is built with kube-rs's own retry off.
#[derive(Clone, Debug)]
pub struct Seats {
    window: Arc<Window>,
    gate: Gate,
}

impl Seats {
    /// Calls go through `window`; a call sent again waits for `gate` first, as a first call
    /// does in front of this layer, so that no retry goes out after the Lease lapsed.
    pub fn new(window: Arc<Window>, gate: Gate) -> Seats {
        Seats { window, gate }
    }
}

impl<S, B> Layer<S> for Seats
where
    S: Service<Request<Body>, Response = Response<B>> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError> + Send + Sync,
{
    type Service = SeatsService<Buffer<Request<Body>, S::Future>>;

    fn layer(&self, inner: S) -> Self::Service {
        // the retries call the service from the answer's future: a buffer makes it shareable
        SeatsService {
            inner: Buffer::new(inner, 1024),
            seats: self.clone(),
        }
    }
}

/// A client's service behind [`Seats`].
#[derive(Clone, Debug)]
pub struct SeatsService<T> {
    inner: T,
    seats: Seats,
}

impl<T, B> Service<Request<Body>> for SeatsService<T>
where
    T: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Clone + Send + 'static,
    T::Future: Send,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // the handle made ready goes with the call; a fresh one stays for the next
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let Seats { window, gate } = self.seats.clone();
        Box::pin(async move {
            let mut request = request;
            let mut attempt = 1;
            loop {
                let again = copy(&request);
                let mut place = window.take().await;
                let answer = inner.ready().await?.call(request).await;
                let status = answer.as_ref().ok().map(Response::status);
                place.throttled = status == Some(StatusCode::TOO_MANY_REQUESTS);
                drop(place);
                let (Ok(response), Some(next)) = (&answer, again) else {
                    return answer;
                };
                if attempt >= ATTEMPTS || !passing(response.status()) {
                    return answer;
                }
                tokio::time::sleep(wait(response)).await;
                gate.open().await;
                request = next;
                attempt += 1;
            }
        })
    }
}

/// Whether an answer asks to come back later: 429 (throttled), 503, 504.
fn passing(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT
    )
}

/// How long the answer asks to wait: its `Retry-After` in seconds, 1 s without one, at most
/// [`LONGEST_WAIT`].
fn wait<B>(response: &Response<B>) -> Duration {
    let asked = (response.headers().get("Retry-After"))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(1), Duration::from_secs);
    asked.min(LONGEST_WAIT)
}

/// The request again, when its body can be sent twice (every body kube-rs builds can).
fn copy(request: &Request<Body>) -> Option<Request<Body>> {
    let body = request.body().try_clone()?;
    let mut again = Request::new(body);
    *again.method_mut() = request.method().clone();
    *again.uri_mut() = request.uri().clone();
    *again.version_mut() = request.version();
    *again.headers_mut() = request.headers().clone();
    *again.extensions_mut() = request.extensions().clone();
    Some(again)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_window_halves_at_each_429_and_grows_by_one_at_each_other_answer() {
        let window = Window::new();
        assert_eq!(window.limit(), MOST_IN_FLIGHT);
        for expected in [50, 25, 12, 6, 3, 1, 1] {
            assert!(window.try_take());
            window.give_back(true);
            assert_eq!(window.limit(), expected);
        }
        // two answers without a 429: three
        for _ in 0..2 {
            assert!(window.try_take());
            window.give_back(false);
        }
        assert_eq!(window.limit(), 3);
        // a full window takes no more until a place is given back
        assert!((0..3).all(|_| window.try_take()));
        assert!(!window.try_take());
        window.give_back(false);
        assert!(window.try_take());
    }

    /// Answers 429 (Retry-After 2) to the first `throttle` calls, then 200; counts the calls
    /// and keeps each one's body.
    #[derive(Clone)]
    struct Server {
        calls: Arc<AtomicUsize>,
        throttle: usize,
        bodies: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    impl Service<Request<Body>> for Server {
        type Response = Response<()>;
        type Error = BoxError;
        type Future = Pin<Box<dyn Future<Output = Result<Response<()>, BoxError>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<Body>) -> Self::Future {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            let throttled = n < self.throttle;
            let bodies = Arc::clone(&self.bodies);
            Box::pin(async move {
                let body = request.into_body().collect_bytes().await?;
                bodies.lock().unwrap().push(body.to_vec());
                let mut answer = Response::new(());
                if throttled {
                    *answer.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                    answer
                        .headers_mut()
                        .insert("Retry-After", "2".parse().unwrap());
                }
                Ok(answer)
            })
        }
    }

    fn server(throttle: usize) -> Server {
        Server {
            calls: Arc::new(AtomicUsize::new(0)),
            throttle,
            bodies: Arc::new(Mutex::new(Vec::new())),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_call_is_sent_again_after_retry_after_with_its_body() {
        let server = server(3);
        let window = Window::new();
        let service = Seats::new(Arc::clone(&window), Gate::new(false)).layer(server.clone());
        let started = tokio::time::Instant::now();
        let request = Request::new(Body::from(b"{\"a\":1}".to_vec()));
        let answer = service.oneshot(request).await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(server.calls.load(Ordering::SeqCst), 4);
        // three waits of Retry-After: 2 s each
        assert!(
            started.elapsed() >= Duration::from_secs(6),
            "{:?}",
            started.elapsed()
        );
        let bodies = server.bodies.lock().unwrap().clone();
        assert!(bodies.iter().all(|b| b == b"{\"a\":1}"), "{bodies:?}");
        // three 429s halved the window three times; the answer that passed grew it by one
        assert_eq!(window.limit(), MOST_IN_FLIGHT / 8 + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_call_is_not_sent_again_while_the_lease_is_not_held() {
        let server = server(1);
        let gate = Gate::new(true);
        let service = Seats::new(Window::new(), gate.clone()).layer(server.clone());
        let call = tokio::spawn(service.oneshot(Request::new(Body::empty())));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(
            server.calls.load(Ordering::SeqCst),
            1,
            "sent again without the Lease"
        );
        let now = std::time::Instant::now();
        gate.lead(Arc::new(crate::leader::Leadership::held_until(
            now + Duration::from_secs(60),
        )));
        let answer = call.await.unwrap().unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(server.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_throttled_at_every_attempt_returns_the_last_429() {
        let server = server(usize::MAX);
        let service = Seats::new(Window::new(), Gate::new(false)).layer(server.clone());
        let answer = (service.oneshot(Request::new(Body::empty())).await).unwrap();
        assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(server.calls.load(Ordering::SeqCst), ATTEMPTS as usize);
    }
}
