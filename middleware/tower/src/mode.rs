//! What the layer does with a verified request: pass it on, accept it
//! into an inbox, or run the handler under a lease.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hooklatch::dedup::{Acceptance, Claim, DedupError, Inbox, IncomingEvent, Lease, LeaseStore};
use http::{Request, Response, StatusCode};
use tower_service::Service;

use crate::event::VerifiedEvent;
use crate::rejection::Rejection;

mod sealed {
    pub trait Sealed {}
}

/// How a [`WebhookLayer`](crate::WebhookLayer) handles a verified request:
/// [`VerifyOnly`], [`InboxMode`] or [`LeaseMode`].
pub trait Mode: sealed::Sealed + Clone + Send + Sync + 'static {
    /// Handles one verified request.
    #[doc(hidden)]
    fn run<S, ReqBody, ResBody>(
        &self,
        event: VerifiedEvent,
        request: Request<ReqBody>,
        inner: S,
    ) -> impl Future<Output = Result<Response<ResBody>, S::Error>> + Send
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send + 'static,
        S::Future: Send,
        S::Error: Send,
        ReqBody: Send + 'static,
        ResBody: From<&'static str> + Send + 'static;
}

/// Verify, then pass the request on to the inner service.
#[derive(Debug, Clone, Copy, Default)]
pub struct VerifyOnly;

/// Verify, then claim and enqueue into an [`Inbox`]: 202 when accepted, 200
/// for a duplicate; the inner service is not called.
#[derive(Debug, Clone)]
pub struct InboxMode<S> {
    pub(crate) store: S,
    pub(crate) namespace: String,
}

/// Verify, then run the inner service under a lease: the claim is
/// completed when it answers 2xx and released otherwise (or on a panic).
/// A duplicate while it runs gets 409 with `Retry-After`; one after it
/// succeeded gets 200 without calling it.
///
/// The lease is the handler's deadline: past it the handler is stopped, the
/// lease released and the sender answered 503 with `Retry-After`, so no
/// second delivery can start while the first still runs. The handler runs
/// in a task of its own, so a client that disconnects does not cancel it,
/// and its lease is settled either way. `complete` is tried three times.
#[derive(Debug, Clone)]
pub struct LeaseMode<S> {
    pub(crate) store: S,
    pub(crate) namespace: String,
    pub(crate) lease_for: Duration,
}

impl sealed::Sealed for VerifyOnly {}
impl<S> sealed::Sealed for InboxMode<S> {}
impl<S> sealed::Sealed for LeaseMode<S> {}

fn plain<B: From<&'static str>>(status: StatusCode, text: &'static str) -> Response<B> {
    let mut response = Response::new(B::from(text));
    *response.status_mut() = status;
    response
}

/// The layer's own answer about `event` (accepted, duplicate), with the
/// event in the response extensions so that outer layers can log its id.
fn about<B: From<&'static str>>(
    event: VerifiedEvent,
    status: StatusCode,
    text: &'static str,
) -> Response<B> {
    let mut response = plain(status, text);
    response.extensions_mut().insert(event);
    response
}

impl Mode for VerifyOnly {
    async fn run<S, ReqBody, ResBody>(
        &self,
        _event: VerifiedEvent,
        request: Request<ReqBody>,
        mut inner: S,
    ) -> Result<Response<ResBody>, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send + 'static,
        S::Future: Send,
        S::Error: Send,
        ReqBody: Send + 'static,
        ResBody: From<&'static str> + Send + 'static,
    {
        inner.call(request).await
    }
}

impl<St: Inbox + Clone + 'static> Mode for InboxMode<St> {
    async fn run<S, ReqBody, ResBody>(
        &self,
        event: VerifiedEvent,
        _request: Request<ReqBody>,
        _inner: S,
    ) -> Result<Response<ResBody>, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send + 'static,
        S::Future: Send,
        S::Error: Send,
        ReqBody: Send + 'static,
        ResBody: From<&'static str> + Send + 'static,
    {
        let key = event.key.as_str();
        let incoming =
            IncomingEvent::new(&self.namespace, key, &event.body).with_signed_at(event.timestamp);
        let (status, text) = match self.store.accept(&incoming).await {
            Ok(Acceptance::Accepted) => (StatusCode::ACCEPTED, "accepted"),
            Ok(Acceptance::Duplicate) => (StatusCode::OK, "duplicate"),
            Err(error) => return Ok(Rejection::from_store(error).into_response()),
        };
        tracing::debug!(namespace = %self.namespace, id = key, "webhook {text}");
        Ok(about(event, status, text))
    }
}

impl<St: LeaseStore + Clone + 'static> Mode for LeaseMode<St> {
    async fn run<S, ReqBody, ResBody>(
        &self,
        event: VerifiedEvent,
        request: Request<ReqBody>,
        inner: S,
    ) -> Result<Response<ResBody>, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send + 'static,
        S::Future: Send,
        S::Error: Send,
        ReqBody: Send + 'static,
        ResBody: From<&'static str> + Send + 'static,
    {
        let key = event.key.as_str();
        let lease = match self.store.claim(&self.namespace, key, self.lease_for).await {
            Ok(Claim::Fresh(lease)) => lease,
            Ok(Claim::Done) => {
                tracing::debug!(namespace = %self.namespace, id = key, "webhook duplicate");
                return Ok(about(event, StatusCode::OK, "duplicate"));
            }
            Ok(Claim::InProgress { retry_after }) => {
                return Ok(Rejection::InProgress { retry_after }.into_response());
            }
            Err(error) => return Ok(Rejection::from_store(error).into_response()),
        };
        tracing::debug!(namespace = %self.namespace, id = key, "webhook claimed");
        // The handler and the settling of its lease run in a task of their
        // own: a client that hangs up drops this future, not the task, so
        // the lease is always completed or released.
        let store = self.store.clone();
        let lease_for = self.lease_for;
        let handled = tokio::spawn(async move {
            let mut inner = inner;
            let outcome =
                tokio::time::timeout(lease_for, CatchUnwind(Box::pin(inner.call(request)))).await;
            let succeeded =
                matches!(&outcome, Ok(Ok(Ok(response))) if response.status().is_success());
            settle(&store, &lease, succeeded).await;
            outcome
        });
        match handled.await {
            Ok(Ok(Ok(result))) => result,
            Ok(Ok(Err(_panic))) => {
                tracing::error!(namespace = %self.namespace, id = key, "webhook handler panicked");
                Ok(plain(StatusCode::INTERNAL_SERVER_ERROR, "handler failed"))
            }
            Ok(Err(_elapsed)) => Ok(Rejection::HandlerTimedOut {
                lease: self.lease_for,
            }
            .into_response()),
            Err(error) => {
                tracing::error!(namespace = %self.namespace, id = key, %error, "webhook handler task failed");
                Ok(plain(StatusCode::INTERNAL_SERVER_ERROR, "handler failed"))
            }
        }
    }
}

/// How many times `complete` is tried before the lease is left to expire.
const COMPLETE_TRIES: u32 = 3;

/// Completes the lease after a 2xx (retrying a failing store a few times,
/// 100 ms then 400 ms apart) or releases it after anything else. What
/// cannot be settled is logged; the lease then expires by itself.
async fn settle<St: LeaseStore>(store: &St, lease: &Lease, succeeded: bool) {
    let (namespace, id) = (lease.namespace(), lease.id());
    if !succeeded {
        if let Err(error) = store.release(lease).await {
            tracing::warn!(namespace, id, %error, "could not release the lease; it will expire");
        }
        return;
    }
    let mut wait = Duration::from_millis(100);
    for attempt in 1..=COMPLETE_TRIES {
        match store.complete(lease).await {
            Ok(()) => return,
            Err(error @ DedupError::LeaseLost) => {
                tracing::error!(namespace, id, %error, "handled, but another delivery holds the event now");
                return;
            }
            Err(error) if attempt == COMPLETE_TRIES => {
                tracing::error!(namespace, id, %error, "handled, but could not record it; a retry after the lease may run it again");
            }
            Err(error) => {
                tracing::warn!(namespace, id, %error, attempt, "could not complete the lease; trying again");
                tokio::time::sleep(wait).await;
                wait *= 4;
            }
        }
    }
}

/// Turns a panic while polling the handler into an error value, so the
/// lease can be released.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let future = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(move || future.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}
