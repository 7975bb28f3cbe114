//! [`ResponseFuture`]: the future a [`WebhookService`](crate::WebhookService) returns.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

type Running<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

/// The response future of [`WebhookService`](crate::WebhookService).
///
/// A request refused before its body is read (Content-Length over the
/// limit) is answered without allocating; otherwise reading, verifying and
/// claiming run in one boxed future.
pub struct ResponseFuture<B, E> {
    kind: Kind<B, E>,
}

enum Kind<B, E> {
    Rejected { response: Option<Response<B>> },
    Running { future: Running<B, E> },
}

impl<B, E> ResponseFuture<B, E> {
    pub(crate) fn rejected(response: Response<B>) -> Self {
        Self {
            kind: Kind::Rejected {
                response: Some(response),
            },
        }
    }

    pub(crate) fn running(future: Running<B, E>) -> Self {
        Self {
            kind: Kind::Running { future },
        }
    }
}

// Nothing is pinned in place: the running future is boxed, and the
// rejected response is moved out.
impl<B, E> Unpin for ResponseFuture<B, E> {}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<B>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.kind {
            Kind::Rejected { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after completion"))),
            Kind::Running { future } => future.as_mut().poll(cx),
        }
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Rejected { .. } => "Rejected",
            Kind::Running { .. } => "Running",
        };
        f.debug_struct("ResponseFuture")
            .field("kind", &kind)
            .finish()
    }
}
