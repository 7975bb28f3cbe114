//! What the layer does with a verified request: pass it on, accept it
//! into an inbox, or run the handler under a lease.

use std::any::Any;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hooklatch::dedup::{Acceptance, DedupError, Inbox, LeaseStore, tenant_namespace};
use hooklatch::receive::adapter::{Claimed, accept, claim, settle};
use hooklatch::receive::{Rejection, VerifiedEvent};

use crate::response::Answers;
use http::{Request, Response, StatusCode};
use tower_service::Service;

mod sealed {
    pub trait Sealed {}
}

/// The inner service, as a mode calls it: once, with the request body
/// type the layer was given, answering a body the layer can also write its
/// own answers in.
#[doc(hidden)]
pub trait Next: Send + 'static {
    /// The request body.
    type ReqBody: Send + 'static;
    /// The response body.
    type ResBody: AnswerBody;
    /// The inner service's error.
    type Error: Send;

    /// Calls the inner service.
    fn call(
        self,
        request: Request<Self::ReqBody>,
    ) -> impl Future<Output = Result<Response<Self::ResBody>, Self::Error>> + Send + 'static;
}

/// A tower service that was polled ready, to be called once.
#[doc(hidden)]
pub struct Ready<S, ReqBody> {
    service: S,
    body: PhantomData<fn(ReqBody)>,
}

impl<S, ReqBody> Ready<S, ReqBody> {
    pub(crate) fn new(service: S) -> Self {
        Self {
            service,
            body: PhantomData,
        }
    }
}

impl<S, ReqBody, ResBody> Next for Ready<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    ReqBody: Send + 'static,
    ResBody: AnswerBody,
{
    type ReqBody = ReqBody;
    type ResBody = ResBody;
    type Error = S::Error;

    fn call(
        mut self,
        request: Request<ReqBody>,
    ) -> impl Future<Output = Result<Response<ResBody>, S::Error>> + Send + 'static {
        self.service.call(request)
    }
}

/// The inner service of an endpoint whose mode never calls one
/// ([`WebhookLayer::into_endpoint`](crate::WebhookLayer::into_endpoint)):
/// if it were called, it would answer 500.
pub struct NoHandler<B> {
    body: PhantomData<fn() -> B>,
}

impl<B> Clone for NoHandler<B> {
    fn clone(&self) -> Self {
        Self { body: PhantomData }
    }
}

impl<B> std::fmt::Debug for NoHandler<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NoHandler")
    }
}

impl<B> Default for NoHandler<B> {
    fn default() -> Self {
        Self { body: PhantomData }
    }
}

impl<B: From<&'static str>, ReqBody> Service<Request<ReqBody>> for NoHandler<B> {
    type Response = Response<B>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Response<B>, std::convert::Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<ReqBody>) -> Self::Future {
        std::future::ready(Ok(plain(StatusCode::INTERNAL_SERVER_ERROR, "no handler")))
    }
}

/// Response bodies the layer can write its own answers in.
#[doc(hidden)]
pub trait AnswerBody: From<&'static str> + From<String> + Send + 'static {}

impl<B: From<&'static str> + From<String> + Send + 'static> AnswerBody for B {}

/// One verified request on its way through a mode.
#[doc(hidden)]
pub struct Call<'a, N: Next> {
    pub(crate) event: VerifiedEvent,
    /// The request with its body read back in, for the inner service.
    pub(crate) request: Request<N::ReqBody>,
    pub(crate) next: N,
    pub(crate) answers: &'a Answers,
    /// The namespace of the request's tenant, for a layer of tenants.
    pub(crate) tenant: Option<&'a str>,
}

/// The namespace a mode configured with `namespace` claims in: its own, or
/// for a tenant's request the two joined ([`tenant_namespace`]).
fn namespace_for<'a>(namespace: &'a str, tenant: Option<&str>) -> std::borrow::Cow<'a, str> {
    match tenant {
        None => std::borrow::Cow::Borrowed(namespace),
        Some(tenant) => std::borrow::Cow::Owned(tenant_namespace(namespace, tenant)),
    }
}

/// How a [`WebhookLayer`](crate::WebhookLayer) handles a verified request:
/// [`VerifyOnly`], [`InboxMode`] or [`LeaseMode`].
pub trait Mode: sealed::Sealed + Clone + Send + Sync + 'static {
    /// Handles one verified request.
    #[doc(hidden)]
    fn run<N: Next>(
        &self,
        call: Call<'_, N>,
    ) -> impl Future<Output = Result<Response<N::ResBody>, N::Error>> + Send;
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
    async fn run<N: Next>(&self, call: Call<'_, N>) -> Result<Response<N::ResBody>, N::Error> {
        let Call {
            event,
            mut request,
            next,
            ..
        } = call;
        request.extensions_mut().insert(event);
        next.call(request).await
    }
}

impl<St: Inbox + Clone + 'static> Mode for InboxMode<St> {
    async fn run<N: Next>(&self, call: Call<'_, N>) -> Result<Response<N::ResBody>, N::Error> {
        let namespace = namespace_for(&self.namespace, call.tenant);
        let (status, text) = match accept(&self.store, &namespace, &call.event).await {
            Ok(Acceptance::Accepted) => (StatusCode::ACCEPTED, "accepted"),
            Ok(Acceptance::Duplicate) => (StatusCode::OK, "duplicate"),
            Err(rejection) => return Ok(call.answers.reject(rejection)),
        };
        Ok(about(call.event, status, text))
    }
}

impl<St: LeaseStore + Clone + 'static> Mode for LeaseMode<St> {
    async fn run<N: Next>(&self, call: Call<'_, N>) -> Result<Response<N::ResBody>, N::Error> {
        let Call {
            event,
            mut request,
            next,
            answers,
            tenant,
        } = call;
        let namespace = namespace_for(&self.namespace, tenant);
        // The handler's deadline is the lease's end, counted from before the
        // claim, so it never outlives the lease in the store.
        let deadline = tokio::time::Instant::now() + self.lease_for;
        let lease = match claim(&self.store, &namespace, &event, self.lease_for).await {
            Ok(Claimed::Fresh(lease)) => lease,
            Ok(Claimed::Done) => return Ok(about(event, StatusCode::OK, "duplicate")),
            Err(rejection) => return Ok(answers.reject(rejection)),
        };
        // The event goes on with its key taken, so the handler does not
        // take it again.
        request.extensions_mut().insert(event.clone());
        let key = event.key().unwrap_or_default();
        // The handler and the settling of its lease run in a task of their
        // own: a client that hangs up drops this future, not the task, so
        // the lease is always completed or released.
        let store = self.store.clone();
        let handled = tokio::spawn(async move {
            let outcome =
                tokio::time::timeout_at(deadline, CatchUnwind(Box::pin(next.call(request)))).await;
            let succeeded =
                matches!(&outcome, Ok(Ok(Ok(response))) if response.status().is_success());
            let settled = settle(&store, &lease, succeeded).await;
            (outcome, settled)
        });
        let handled = match handled.await {
            // Handled, but not yet safe from a failover: the sender retries
            // and finds it done.
            Ok((_, Err(error @ DedupError::ReplicasBehind { .. }))) => {
                return Ok(answers.reject(Rejection::from_store(error)));
            }
            Ok((outcome, _)) => Ok(outcome),
            Err(error) => Err(error),
        };
        match handled {
            Ok(Ok(Ok(result))) => result,
            Ok(Ok(Err(_panic))) => {
                tracing::error!(%namespace, id = key, "webhook handler panicked");
                Ok(plain(StatusCode::INTERNAL_SERVER_ERROR, "handler failed"))
            }
            Ok(Err(_elapsed)) => Ok(answers.reject(Rejection::HandlerTimedOut {
                lease: self.lease_for,
            })),
            Err(error) => {
                tracing::error!(%namespace, id = key, %error, "webhook handler task failed");
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
