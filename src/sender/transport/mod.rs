//! The [`Transport`]: how one signed POST goes out, and what came back.
//! `HttpTransport` (with the `sender-http` feature) is the one over
//! reqwest, with the SSRF guard.

#[cfg(feature = "sender-http")]
mod http;

use std::error::Error;
use std::future::Future;
use std::time::Duration;

use super::guard::Forbidden;
use super::rules::AttemptError;

#[cfg(feature = "sender-http")]
pub use http::{
    DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, HttpTransport, HttpTransportBuilder,
    TransportConfigError,
};

pub use super::rules::policy::EXCERPT_LEN;

/// What a receiver answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The `Retry-After` header, if any.
    pub retry_after: Option<String>,
    /// The start of the body (a transport may send more; it is cut to
    /// [`EXCERPT_LEN`]).
    pub body: Vec<u8>,
}

impl Response {
    /// An answer with `status`, no `Retry-After` and an empty body.
    pub fn new(status: u16) -> Self {
        Self {
            status,
            retry_after: None,
            body: Vec::new(),
        }
    }

    /// With this `Retry-After` header.
    #[must_use]
    pub fn with_retry_after(mut self, value: &str) -> Self {
        self.retry_after = Some(value.to_owned());
        self
    }

    /// With this body (an attempt's record keeps its first
    /// [`EXCERPT_LEN`] bytes).
    #[must_use]
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }
}

/// Sends one signed POST. Implemented over an HTTP client; redirects must
/// not be followed, and addresses must pass the SSRF guard at connect time.
pub trait Transport: Send + Sync {
    /// POSTs `body` with `headers` to `url`. `Err` says why no answer came
    /// (a forbidden address, a timeout, no connection).
    fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> impl Future<Output = Result<Response, TransportError>> + Send;
}

/// A [`Transport`] that answers every POST with `answer`, called with the
/// URL, headers and body: for tests, benches and in-process receivers (as
/// tower's `service_fn` makes a service of a function). The future it
/// returns owns what it needs; it cannot borrow the arguments.
///
/// ```
/// use hooklatch::sender::Transport;
/// use hooklatch::sender::transport::{Response, transport_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let gone = transport_fn(|_url, _headers, _body| async { Ok(Response::new(410)) });
/// let answer = gone.post("https://example.com/hooks", &[], b"{}").await.unwrap();
/// assert_eq!(answer.status, 410);
/// # }
/// ```
pub fn transport_fn<F, Fut>(answer: F) -> TransportFn<F>
where
    F: Fn(&str, &[(String, String)], &[u8]) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Response, TransportError>> + Send,
{
    TransportFn(answer)
}

/// The [`Transport`] [`transport_fn`] makes.
#[derive(Clone, Copy)]
pub struct TransportFn<F>(F);

impl<F> std::fmt::Debug for TransportFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportFn").finish_non_exhaustive()
    }
}

impl<F, Fut> Transport for TransportFn<F>
where
    F: Fn(&str, &[(String, String)], &[u8]) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Response, TransportError>> + Send,
{
    fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> impl Future<Output = Result<Response, TransportError>> + Send {
        (self.0)(url, headers, body)
    }
}

/// What an attempt's record says of an address the SSRF guard refused.
pub(crate) const REFUSED: &str = "refused: not an address webhooks may be sent to";

/// The error of the HTTP client under a transport.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// Why an attempt got no answer.
///
/// An attempt's record keeps it as text ([`AttemptError`]):
/// this error's message followed by each of its sources, `: `-separated,
/// as in `could not connect: error sending request: connection refused`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The SSRF guard refused the URL or every address its host resolved
    /// to; nothing was sent.
    #[error("refused")]
    Refused(#[source] Forbidden),
    /// No answer in time: the policy's attempt timeout ran out (`after`),
    /// or the client's own timeout did (`source`).
    #[error("timed out{}", after.map_or_else(String::new, |after| format!(" after {} ms", after.as_millis())))]
    Timeout {
        /// The attempt timeout that ran out, when the sender's.
        after: Option<Duration>,
        /// The client's error, when its own timeout ran out.
        #[source]
        source: Option<BoxError>,
    },
    /// No connection: the name did not resolve, the connection or the TLS
    /// handshake failed.
    #[error("could not connect")]
    Connect(#[source] BoxError),
    /// The request failed otherwise.
    #[error("request failed")]
    Other(#[source] BoxError),
}

impl TransportError {
    /// The message and every source's, `: `-separated: the text an
    /// attempt's record keeps.
    pub fn report(&self) -> String {
        let mut text = self.to_string();
        let mut source = self.source();
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    }
}

impl AttemptError {
    /// The transport's error, kept with its text. A refusal by the SSRF
    /// guard is recorded as "refused" only: the record reaches the
    /// endpoint's owner (the console, notices), and which class of address
    /// a name resolved to tells an outsider what exists inside the network.
    /// The class goes to the operator's log, and stays in
    /// [`transport_error`](Self::transport_error).
    pub(crate) fn transport(error: TransportError) -> Self {
        let text = match &error {
            TransportError::Refused(class) => {
                tracing::warn!(%class, "the address guard refused an attempt");
                REFUSED.to_owned()
            }
            _ => error.report(),
        };
        Self::with_cause(text, std::sync::Arc::new(error))
    }

    /// The transport's error, while the attempt is fresh.
    pub fn transport_error(&self) -> Option<&TransportError> {
        self.cause()?.downcast_ref()
    }
}
