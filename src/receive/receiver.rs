//! [`Receiver`]: from a request's headers and body stream to a
//! [`VerifiedEvent`], the same way in every adapter.

use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use futures_core::Stream;

use super::body::{DEFAULT_BODY_TIMEOUT, check_declared_length, read_limited};
use super::handshake::{self, Handshake, HandshakeAnswer};
use super::{Rejection, VerifiedEvent, metrics};
use crate::verify::{
    ConfigError, EventKey, HeaderKey, HeaderLookup, Headers, Verifier, VerifyError,
};

/// How a request becomes a [`VerifiedEvent`]: the verifier, the body's
/// limit and deadline, and the key events are claimed by. Both framework
/// adapters keep one and call [`receive`](Self::receive) on each request.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use bytes::Bytes;
/// use hooklatch::receive::{Receiver, Rejection};
/// use hooklatch::verify::{Scheme, Verifier};
///
/// let verifier = Verifier::builder(Scheme::github()).with_secret("s3cret")?.build()?;
/// let receiver = Receiver::new(verifier).with_body_limit(1024);
///
/// // An unsigned request is refused with the verifier's error (400).
/// let headers = [("x-github-delivery", "72d3162e")];
/// let body = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from("{}"))]);
/// let refused = receiver.receive(&headers[..], body).await;
/// assert!(matches!(refused, Err(Rejection::Unverified(_))));
///
/// // A declared length over the limit is refused before reading (413).
/// let headers = [("content-length", "4096")];
/// let body = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from("{}"))]);
/// let refused = receiver.receive(&headers[..], body).await;
/// assert_eq!(refused.unwrap_err(), Rejection::BodyTooLarge { limit: 1024 });
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Receiver {
    verifier: Verifier,
    key: EventKey,
    body_limit: usize,
    body_timeout: Duration,
    keep: Vec<HeaderKey>,
    handshakes: Vec<Handshake>,
}

impl Receiver {
    /// Verifies with `verifier`, reads at most the verifier's body limit
    /// (1 MiB by default) within [`DEFAULT_BODY_TIMEOUT`], and claims
    /// events by [`EventKey::Signed`].
    pub fn new(verifier: Verifier) -> Self {
        Self {
            body_limit: verifier.body_limit(),
            body_timeout: DEFAULT_BODY_TIMEOUT,
            key: EventKey::default(),
            verifier,
            keep: super::provider::TRACE_HEADERS
                .into_iter()
                .map(HeaderKey::from_static)
                .collect(),
            handshakes: Vec::new(),
        }
    }

    /// Answers the provider's subscription check itself ([`Handshake`]):
    /// hooklatch-tower's layer and `VerifiedBody` / `VerifiedJson`, and
    /// hooklatch-actix's extractors, ask
    /// [`answer_before_body`](Self::answer_before_body) and
    /// [`answer_verified`](Self::answer_verified) and send the answer; the
    /// handshake is never claimed and never reaches the handler. A Meta
    /// verify token that is empty never matches.
    ///
    /// Fails with [`ConfigError::HandshakeScheme`] when the handshake
    /// belongs to another provider's scheme than the verifier's (X's on a
    /// GitHub receiver, say): a handshake that proves a secret is only
    /// safe beside the scheme it was made for. Graph's and Event Grid's,
    /// which compute nothing with a secret, go with any scheme.
    ///
    /// ```
    /// use hooklatch::receive::{Handshake, Receiver};
    /// use hooklatch::verify::{Scheme, Verifier};
    ///
    /// let verifier = Verifier::builder(Scheme::meta()).with_secret("app-secret")?.build()?;
    /// let receiver = Receiver::new(verifier).with_handshake(Handshake::meta("my-verify-token"))?;
    /// let query = "hub.mode=subscribe&hub.verify_token=my-verify-token&hub.challenge=1158201444";
    /// let answer = receiver.answer_before_body("GET", Some(query), &[("accept", "*/*")]).unwrap();
    /// assert_eq!((answer.status, answer.body.as_str()), (200, "1158201444"));
    /// # Ok::<(), hooklatch::verify::ConfigError>(())
    /// ```
    pub fn with_handshake(mut self, handshake: Handshake) -> Result<Self, ConfigError> {
        handshake.check_scheme(self.verifier.scheme())?;
        self.handshakes.push(handshake);
        Ok(self)
    }

    /// The answer to an unsigned handshake (Meta's `GET`, Event Grid's
    /// `OPTIONS`), from the request's method, URI query and headers,
    /// before any body is read: `None` when the request is not one, and a
    /// handshake with a wrong verify token is answered 403.
    pub fn answer_before_body<H: Headers + ?Sized>(
        &self,
        method: &str,
        query: Option<&str>,
        headers: &H,
    ) -> Option<HandshakeAnswer> {
        let answer =
            handshake::before_body(&self.handshakes, &self.verifier, method, query, headers)?;
        tracing::info!(
            provider = answer.provider,
            status = answer.status,
            "answered a handshake"
        );
        Some(answer)
    }

    /// The answer to a signed handshake (Slack, Twitch, Zoom) once `event`
    /// verified: `None` when it is a webhook to claim.
    pub fn answer_verified<H: Headers + ?Sized>(
        &self,
        headers: &H,
        event: &VerifiedEvent,
    ) -> Option<HandshakeAnswer> {
        let answer = handshake::verified(&self.handshakes, &self.verifier, headers, event)?;
        tracing::info!(provider = answer.provider, "answered a handshake");
        Some(answer)
    }

    /// Keeps the headers called `names` with each event
    /// ([`VerifiedEvent::kept_headers`]), such as a provider's
    /// installation or account id, besides `traceparent` and `tracestate`
    /// (up to 512 bytes), which every receiver keeps so that a worker's
    /// span continues the request's trace. Fails on a name that is not a
    /// header name.
    pub fn with_kept_headers<S: AsRef<str>>(
        mut self,
        names: impl IntoIterator<Item = S>,
    ) -> Result<Self, ConfigError> {
        for name in names {
            self.keep.push(HeaderKey::new(name.as_ref())?);
        }
        Ok(self)
    }

    /// The header names kept with each event.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> &[HeaderKey] {
        &self.keep
    }

    /// Reads at most `limit` bytes of body: 413 before reading when
    /// Content-Length says more, and as soon as more arrives otherwise.
    #[must_use]
    pub fn with_body_limit(mut self, limit: usize) -> Self {
        self.body_limit = limit;
        self
    }

    /// How long the whole body may take to arrive; a slower request is
    /// answered 408. The deadline uses tokio's timers.
    #[must_use]
    pub fn with_body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// Claims events by `key` (see [`EventKey`]).
    #[must_use]
    pub fn with_event_key(mut self, key: EventKey) -> Self {
        self.key = key;
        self
    }

    /// The verifier.
    pub fn verifier(&self) -> &Verifier {
        &self.verifier
    }

    /// The body limit in bytes.
    pub fn body_limit(&self) -> usize {
        self.body_limit
    }

    /// How long the whole body may take to arrive.
    pub fn body_timeout(&self) -> Duration {
        self.body_timeout
    }

    /// What events are claimed by.
    pub fn event_key(&self) -> &EventKey {
        &self.key
    }

    /// Refuses a declared Content-Length over the limit (413), reads the
    /// body through the limit and the deadline (413, 408), and verifies it
    /// (400). The event keeps the body exactly as read.
    pub async fn receive<H, S, D, E>(
        &self,
        headers: &H,
        body: S,
    ) -> Result<VerifiedEvent, Rejection>
    where
        H: Headers + ?Sized,
        S: Stream<Item = Result<D, E>>,
        D: Buf,
    {
        let scheme = self.verifier.scheme().name();
        let refused = |rejection: Rejection| {
            metrics::rejected(&rejection, scheme, "");
            rejection
        };
        let body = self.read_body(headers, body).await?;
        if handshake::shaped_as_proof(&self.handshakes, &body) {
            return Err(refused(Rejection::Unverified(VerifyError::MalformedBody {
                reason: "an X delivery is a JSON object, never a body of a CRC token's shape",
            })));
        }
        let started = Instant::now();
        let verified = self.verifier.verify(headers, &body);
        metrics::verify_took(scheme, started.elapsed());
        let verified = verified.map_err(|error| refused(Rejection::Unverified(error)))?;
        let event = VerifiedEvent::new(&self.key, &self.verifier, &verified, body.clone())
            .with_provider_headers(headers, &self.keep);
        let span = tracing::Span::current();
        span.record("scheme", scheme);
        if let Some(id) = &event.id {
            span.record("id", id.as_str());
        }
        Ok(event)
    }
}

/// What [`Receiver::receive_or_answer`] made of a request.
#[derive(Debug)]
// The event is the common case and is moved on at once: boxing it would
// cost every request an allocation to spare a rare handshake's bytes.
#[allow(clippy::large_enum_variant)]
pub enum Received {
    /// A verified event, to claim (or a signed handshake, which
    /// [`Receiver::answer_verified`] answers).
    Event(VerifiedEvent),
    /// An unsigned handshake whose answer is in its body (Event Grid's
    /// subscription validation), answered: never verified, never claimed.
    Answered(HandshakeAnswer),
}

impl Receiver {
    /// [`receive`](Self::receive), except that an unsigned handshake
    /// answered from its body ([`Handshake::AzureEventGrid`]'s
    /// subscription validation) is read within the same limits and
    /// answered instead of verified.
    pub async fn receive_or_answer<D: Buf, E>(
        &self,
        headers: &(impl Headers + ?Sized),
        body: impl Stream<Item = Result<D, E>>,
    ) -> Result<Received, Rejection> {
        if !handshake::wants_unsigned_body(&self.handshakes, headers) {
            return self.receive(headers, body).await.map(Received::Event);
        }
        // Read within the validation's own small limit: it is unsigned, so
        // a stranger's megabyte must cost no more than a forged event's.
        let limit = self.body_limit.min(handshake::MAX_VALIDATION_BODY);
        let body = self.read_body_within(headers, body, limit).await?;
        let answer = handshake::event_grid_validation(&body);
        tracing::info!(
            provider = answer.provider,
            status = answer.status,
            "answered a handshake"
        );
        Ok(Received::Answered(answer))
    }
}

impl Receiver {
    /// Refuses a declared Content-Length over the limit (413) and reads
    /// the body through the limit and the deadline (413, 408); each
    /// refusal is counted.
    async fn read_body<D: Buf, E>(
        &self,
        headers: &(impl Headers + ?Sized),
        body: impl Stream<Item = Result<D, E>>,
    ) -> Result<Bytes, Rejection> {
        self.read_body_within(headers, body, self.body_limit).await
    }

    /// [`read_body`](Self::read_body) with `limit` for the limit.
    async fn read_body_within<D: Buf, E>(
        &self,
        headers: &(impl Headers + ?Sized),
        body: impl Stream<Item = Result<D, E>>,
        limit: usize,
    ) -> Result<Bytes, Rejection> {
        let refused = |rejection: Rejection| {
            metrics::rejected(&rejection, self.verifier.scheme().name(), "");
            rejection
        };
        check_declared_length(declared_length(headers), limit).map_err(refused)?;
        read_limited(body, limit, self.body_timeout)
            .await
            .map_err(refused)
    }
}

/// The Content-Length a request declares, if it declares exactly one
/// number. A server refuses a repeated or malformed one before the
/// receiver sees it; if one gets through, the limited read still holds.
fn declared_length<H: Headers + ?Sized>(headers: &H) -> Option<u64> {
    match headers.lookup(&HeaderKey::from_static("content-length")) {
        HeaderLookup::One(value) => std::str::from_utf8(value).ok()?.trim().parse().ok(),
        _ => None,
    }
}
