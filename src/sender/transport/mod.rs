//! The [`Transport`]: how one signed POST goes out, and what came back.
//! [`HttpTransport`] is the one over reqwest, with the SSRF guard.

#[cfg(feature = "sender-http")]
mod http;

use std::future::Future;

#[cfg(feature = "sender-http")]
pub use http::{
    DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, HttpTransport, HttpTransportBuilder,
    TransportConfigError,
};

/// How much of a response body an attempt record keeps.
pub const EXCERPT_LEN: usize = 1024;

/// What a receiver answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The `Retry-After` header, if any.
    pub retry_after: Option<String>,
    /// The start of the body (a transport may send more; it is cut to
    /// [`EXCERPT_LEN`]).
    pub body: Vec<u8>,
}

/// Sends one signed POST. Implemented over an HTTP client; redirects must
/// not be followed, and addresses must pass the SSRF guard at connect time.
pub trait Transport: Send + Sync {
    /// POSTs `body` with `headers` to `url`. `Err` holds why no answer came
    /// (timeout, refused connection, forbidden address).
    fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> impl Future<Output = Result<Response, String>> + Send;
}
