//! [`Receiver`]: from a request's headers and body stream to a
//! [`VerifiedEvent`], the same way in every adapter.

#[cfg(feature = "http-signatures")]
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use futures_core::Stream;

use super::body::{DEFAULT_BODY_TIMEOUT, check_declared_length, read_limited};
use super::handshake::{self, Handshake, HandshakeAnswer};
use super::{Rejection, VerifiedEvent, metrics};
#[cfg(feature = "http-signatures")]
use crate::verify::message::{MessageRequest, MessageSignatureError, MessageVerifier};
use crate::verify::{
    ConfigError, EventKey, HeaderKey, HeaderLookup, Headers, Verifier, VerifyError,
};

/// [`Receiver::scheme_name`] of a receiver of HTTP message signatures.
#[cfg(feature = "http-signatures")]
const MESSAGE_SCHEME: &str = "message-signature";

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
    check: Check,
    key: EventKey,
    body_limit: usize,
    body_timeout: Duration,
    keep: Vec<HeaderKey>,
    handshakes: Vec<Handshake>,
}

/// What a receiver checks a request's signature with.
#[derive(Debug, Clone)]
enum Check {
    /// A provider's or Standard Webhooks' scheme, over headers and body.
    Scheme(Verifier),
    /// HTTP message signatures, over the method, target URI, headers and
    /// body: the verifier, and the URI scheme clients use to reach this
    /// receiver.
    #[cfg(feature = "http-signatures")]
    Message(Arc<MessageCheck>),
}

/// A receiver's check of HTTP message signatures.
#[cfg(feature = "http-signatures")]
#[derive(Debug)]
struct MessageCheck {
    verifier: MessageVerifier,
    /// The URI scheme clients use to reach this receiver.
    uri_scheme: String,
    /// [`MessageVerifier::fingerprint`], taken once.
    fingerprint: [u8; 32],
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
            check: Check::Scheme(verifier),
            keep: super::provider::TRACE_HEADERS
                .into_iter()
                .map(HeaderKey::from_static)
                .collect(),
            handshakes: Vec::new(),
        }
    }

    /// Verifies HTTP message signatures (RFC 9421) with `verifier`, for
    /// requests that clients send to this receiver over `uri_scheme`
    /// (`"https"`, also behind a proxy that ends TLS; `"http"` only where
    /// they really use it): the scheme is part of `@target-uri` and
    /// `@scheme`. The authority is the request's `Host` (bind it with
    /// [`MessageVerifierBuilder::with_authority`](crate::verify::message::MessageVerifierBuilder::with_authority)).
    /// Events are claimed by [`MessageVerified::claim_key`](crate::verify::message::MessageVerified::claim_key):
    /// the signature's nonce, else a digest of what it signs. Reads at most
    /// 1 MiB of body. Takes no [`Handshake`]; a key set from a JWKS
    /// ([`MessageVerifierBuilder::with_jwks`](crate::verify::message::MessageVerifierBuilder::with_jwks))
    /// is fetched as the requests need it.
    ///
    /// The adapters pass the request line for it (hooklatch-tower's layer
    /// and `VerifiedBody`/`VerifiedJson`, hooklatch-actix's extractors);
    /// by hand, call [`receive_request`](Self::receive_request).
    ///
    /// ```
    /// use hooklatch::receive::Receiver;
    /// use hooklatch::verify::message::{MessageKey, MessageVerifier};
    ///
    /// let verifier = MessageVerifier::builder()
    ///     .with_key(MessageKey::hmac_sha256("partner-7", b"a shared secret of 32 bytes or more")?)
    ///     .with_authority("hooks.example.com")
    ///     .build()?;
    /// let receiver = Receiver::for_message_signatures(verifier, "https");
    /// # let _ = receiver;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "http-signatures")]
    pub fn for_message_signatures(verifier: MessageVerifier, uri_scheme: &str) -> Self {
        if !verifier.binds_authority() {
            // `@authority` comes from `Host`, which the client chooses.
            tracing::warn!(
                "a receiver of message signatures without with_authority accepts a request \
                 signed for another host of the same sender"
            );
        }
        Self {
            body_limit: crate::verify::DEFAULT_MAX_BODY_LEN,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            key: EventKey::default(),
            check: Check::Message(Arc::new(MessageCheck {
                fingerprint: verifier.fingerprint(),
                verifier,
                uri_scheme: uri_scheme.to_ascii_lowercase(),
            })),
            keep: super::provider::TRACE_HEADERS
                .into_iter()
                .map(HeaderKey::from_static)
                .collect(),
            handshakes: Vec::new(),
        }
    }

    /// The name this receiver's checks are known by in metrics and in
    /// [`VerifiedEvent::scheme`]: the scheme's (`standard`, `github`), or
    /// `message-signature`.
    pub fn scheme_name(&self) -> &str {
        match &self.check {
            Check::Scheme(verifier) => verifier.scheme().name(),
            #[cfg(feature = "http-signatures")]
            Check::Message(_) => MESSAGE_SCHEME,
        }
    }

    /// Whether this receiver checks HTTP message signatures, and so needs
    /// the request's method and URI ([`receive_request`](Self::receive_request)).
    pub fn needs_request_line(&self) -> bool {
        match &self.check {
            Check::Scheme(_) => false,
            #[cfg(feature = "http-signatures")]
            Check::Message(_) => true,
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
        match &self.check {
            Check::Scheme(verifier) => handshake.check_scheme(verifier.scheme())?,
            #[cfg(feature = "http-signatures")]
            Check::Message(_) => {
                return Err(ConfigError::HandshakeScheme {
                    handshake: handshake.provider(),
                    expected: handshake.provider(),
                    scheme: MESSAGE_SCHEME.to_owned(),
                });
            }
        }
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
        let verifier = self.verifier()?;
        let answer = handshake::before_body(&self.handshakes, verifier, method, query, headers)?;
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
        let verifier = self.verifier()?;
        let answer = handshake::verified(&self.handshakes, verifier, headers, event)?;
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

    /// The verifier, unless this receiver checks message signatures.
    pub fn verifier(&self) -> Option<&Verifier> {
        match &self.check {
            Check::Scheme(verifier) => Some(verifier),
            #[cfg(feature = "http-signatures")]
            Check::Message(_) => None,
        }
    }

    /// The message signature verifier, if this receiver checks message
    /// signatures.
    #[cfg(feature = "http-signatures")]
    pub fn message_verifier(&self) -> Option<&MessageVerifier> {
        match &self.check {
            Check::Scheme(_) => None,
            Check::Message(message) => Some(&message.verifier),
        }
    }

    /// Whether `self` and `other` check with the same verifier (clones of
    /// one; for message signatures, also one built alike again): a
    /// tenant's receiver that is, had its secrets not changed.
    pub(crate) fn checks_as(&self, other: &Self) -> bool {
        match (&self.check, &other.check) {
            (Check::Scheme(mine), Check::Scheme(theirs)) => mine.is(theirs),
            #[cfg(feature = "http-signatures")]
            (Check::Message(mine), Check::Message(theirs)) => {
                Arc::ptr_eq(mine, theirs)
                    || (mine.fingerprint == theirs.fingerprint
                        && mine.uri_scheme == theirs.uri_scheme)
            }
            #[cfg(feature = "http-signatures")]
            _ => false,
        }
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
        let scheme = self.scheme_name();
        let refused = |rejection: Rejection| {
            metrics::rejected(&rejection, scheme, "");
            rejection
        };
        let Some(verifier) = self.verifier() else {
            return Err(refused(needs_request_line()));
        };
        let body = self.read_body(headers, body).await?;
        if handshake::shaped_as_proof(&self.handshakes, &body) {
            return Err(refused(Rejection::Unverified(VerifyError::MalformedBody {
                reason: "an X delivery is a JSON object, never a body of a CRC token's shape",
            })));
        }
        let started = Instant::now();
        #[cfg(feature = "jwks")]
        let verified = verifier.verify_fetching(headers, &body).await;
        #[cfg(not(feature = "jwks"))]
        let verified = verifier.verify(headers, &body);
        metrics::verify_took(scheme, started.elapsed());
        let verified = verified.map_err(|error| refused(Rejection::Unverified(error)))?;
        let event = VerifiedEvent::new(&self.key, verifier, &verified, body.clone())
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
    /// [`receive_or_answer`](Self::receive_or_answer) for a request whose
    /// method and URI (origin form, as servers hand it over, or absolute)
    /// are at hand: what a receiver of HTTP message signatures
    /// (`Receiver::for_message_signatures`, feature `http-signatures`) needs;
    /// any other receiver reads only the headers and body, as
    /// `receive_or_answer` does.
    pub async fn receive_request<D: Buf, E>(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        body: impl Stream<Item = Result<D, E>>,
    ) -> Result<Received, Rejection> {
        match &self.check {
            Check::Scheme(_) => {
                let _ = (method, uri);
                self.receive_or_answer(headers, body).await
            }
            #[cfg(feature = "http-signatures")]
            Check::Message(message) => {
                let MessageCheck {
                    verifier,
                    uri_scheme,
                    ..
                } = &**message;
                self.receive_message(verifier, uri_scheme, method, uri, headers, body)
                    .await
                    .map(Received::Event)
            }
        }
    }

    /// Reads the body and verifies its message signature; the claim key
    /// is the signature's.
    #[cfg(feature = "http-signatures")]
    async fn receive_message<D: Buf, E>(
        &self,
        verifier: &MessageVerifier,
        uri_scheme: &str,
        method: &http::Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        body: impl Stream<Item = Result<D, E>>,
    ) -> Result<VerifiedEvent, Rejection> {
        let refused = |rejection: Rejection| {
            metrics::rejected(&rejection, MESSAGE_SCHEME, "");
            rejection
        };
        // A request that names no trusted key is refused before its body
        // is read; nothing is computed with a key before the body is.
        verifier
            .precheck(headers)
            .map_err(|error| refused(Rejection::MessageUnverified(error)))?;
        let body = self.read_body(headers, body).await?;
        let request = MessageRequest::from_server(method, uri, uri_scheme, headers)
            .map_err(|error| refused(Rejection::MessageUnverified(error)))?;
        let started = Instant::now();
        #[cfg(feature = "jwks")]
        let verified = verifier.verify_fetching(&request, &body).await;
        #[cfg(not(feature = "jwks"))]
        let verified = verifier.verify(&request, &body);
        metrics::verify_took(MESSAGE_SCHEME, started.elapsed());
        let verified = verified.map_err(|error| refused(Rejection::MessageUnverified(error)))?;
        let event = VerifiedEvent::from_message(MESSAGE_SCHEME, &verified, body)
            .with_provider_headers(headers, &self.keep);
        let span = tracing::Span::current();
        span.record("scheme", MESSAGE_SCHEME);
        if let Some(id) = &event.id {
            span.record("id", id.as_str());
        }
        Ok(event)
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
            metrics::rejected(&rejection, self.scheme_name(), "");
            rejection
        };
        check_declared_length(declared_length(headers), limit).map_err(refused)?;
        read_limited(body, limit, self.body_timeout)
            .await
            .map_err(refused)
    }
}

/// The refusal of a request given without its method and URI to a
/// receiver of message signatures, which cover them.
fn needs_request_line() -> Rejection {
    #[cfg(feature = "http-signatures")]
    return Rejection::MessageUnverified(MessageSignatureError::InvalidTarget(
        "this receiver checks message signatures, which cover the method and URI: \
         call receive_request"
            .to_owned(),
    ));
    #[cfg(not(feature = "http-signatures"))]
    Rejection::NotConfigured
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
