//! [`ResponseFuture`]: the future a [`WebhookService`](crate::WebhookService) returns.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

type Running<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

/// The response future of [`WebhookService`](crate::WebhookService):
/// reading, verifying and claiming, in one boxed future.
pub struct ResponseFuture<B, E> {
    future: Running<B, E>,
}

impl<B, E> ResponseFuture<B, E> {
    pub(crate) fn running(future: Running<B, E>) -> Self {
        Self { future }
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<B>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.future.as_mut().poll(cx)
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
