//! What the layer does with a verified request: pass it on, accept it
//! into an inbox, or run the handler under a lease.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hooklatch::dedup::{Acceptance, Claim, Inbox, IncomingEvent, LeaseStore};
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
        mut inner: S,
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
        let outcome = CatchUnwind(Box::pin(inner.call(request))).await;
        let succeeded = matches!(&outcome, Ok(Ok(response)) if response.status().is_success());
        let settled = if succeeded {
            self.store.complete(&lease).await
        } else {
            self.store.release(&lease).await
        };
        if let Err(error) = settled {
            // The handler's answer stands; the lease will expire by itself.
            tracing::error!(namespace = %self.namespace, id = key, %error, "could not settle the lease");
        }
        match outcome {
            Ok(result) => result,
            Err(_panic) => {
                tracing::error!(namespace = %self.namespace, id = key, "webhook handler panicked");
                Ok(plain(StatusCode::INTERNAL_SERVER_ERROR, "handler failed"))
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
