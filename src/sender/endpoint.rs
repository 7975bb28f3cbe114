//! [`Endpoint`]: where a delivery goes, and the pass through its breaker
//! that each attempt holds.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::rules::{Breaker, BreakerState};
use crate::verify::Signer;

/// Where a delivery goes: a URL, the signer for its secrets, and its
/// circuit breaker.
#[derive(Debug)]
pub struct Endpoint {
    url: String,
    signer: Signer,
    breaker: Mutex<Breaker>,
    #[cfg(feature = "http-signatures")]
    message_signer: Option<crate::verify::message::MessageSigner>,
}

impl Endpoint {
    /// An endpoint with a default [`Breaker`].
    pub fn new(url: &str, signer: Signer) -> Self {
        Self {
            url: url.to_owned(),
            signer,
            breaker: Mutex::new(Breaker::new()),
            #[cfg(feature = "http-signatures")]
            message_signer: None,
        }
    }

    /// Signs every attempt with an RFC 9421 message signature too
    /// (feature `http-signatures`), besides the scheme's headers: a
    /// `Content-Digest` of the body, then `Signature-Input` and
    /// `Signature` over the components `signer` covers, created when the
    /// attempt is sent, with the webhook id as the nonce (so the receiver
    /// claims the event by it).
    #[cfg(feature = "http-signatures")]
    #[must_use]
    pub fn with_message_signer(mut self, signer: crate::verify::message::MessageSigner) -> Self {
        self.message_signer = Some(signer);
        self
    }

    /// The RFC 9421 signer, if the endpoint has one.
    #[cfg(feature = "http-signatures")]
    pub(crate) fn message_signer(&self) -> Option<&crate::verify::message::MessageSigner> {
        self.message_signer.as_ref()
    }

    /// Uses `breaker` for this endpoint.
    #[must_use]
    pub fn with_breaker(mut self, breaker: Breaker) -> Self {
        self.breaker = Mutex::new(breaker);
        self
    }

    /// The URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The signer for its secrets.
    pub(crate) fn signer(&self) -> &Signer {
        &self.signer
    }

    /// A pass through the breaker for one attempt now, or how long until
    /// it might let one through.
    pub(crate) fn try_breaker(&self) -> Result<Pass<'_>, Duration> {
        self.breaker()
            .try_acquire(tokio::time::Instant::now().into_std())?;
        Ok(Pass {
            endpoint: self,
            resolved: false,
        })
    }

    /// Whether the breaker is open (sending nothing) now.
    pub(crate) fn breaker_open(&self) -> bool {
        self.breaker_state() == BreakerState::Open
    }

    /// The breaker's state now.
    pub(crate) fn breaker_state(&self) -> BreakerState {
        self.breaker().state(tokio::time::Instant::now().into_std())
    }

    pub(crate) fn breaker(&self) -> MutexGuard<'_, Breaker> {
        self.breaker.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One attempt's pass through its endpoint's breaker: the attempt gives
/// the breaker its verdict through it. A pass dropped without one (the
/// attempt panicked or was cancelled) counts as a failure, so a half-open
/// breaker's probe always comes back, whatever ends the attempt.
pub(crate) struct Pass<'a> {
    endpoint: &'a Endpoint,
    resolved: bool,
}

impl Pass<'_> {
    /// The attempt succeeded.
    pub(crate) fn succeeded(mut self) {
        self.resolved = true;
        self.endpoint
            .breaker()
            .on_success(tokio::time::Instant::now().into_std());
    }

    /// The attempt failed (an error status, a transport error, a timeout).
    pub(crate) fn failed(mut self) {
        self.resolved = true;
        self.endpoint
            .breaker()
            .on_failure(tokio::time::Instant::now().into_std());
    }

    /// Nothing was sent (the attempt could not be signed): no verdict.
    pub(crate) fn release(mut self) {
        self.resolved = true;
        self.endpoint.breaker().release();
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if !self.resolved {
            self.endpoint
                .breaker()
                .on_failure(tokio::time::Instant::now().into_std());
        }
    }
}
