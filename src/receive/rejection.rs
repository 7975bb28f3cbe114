//! Why a webhook request was refused, and the HTTP answer for it.

use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};

use crate::dedup::DedupError;
#[cfg(feature = "http-signatures")]
use crate::verify::message::MessageSignatureError;
use crate::verify::{Malformed, VerifyError};

/// Why a receiver refused a request, the same for every framework.
///
/// Each has an HTTP status and a short, generic body text. The precise
/// reason ([`reason`](Self::reason)) is logged with `tracing` at `warn` and
/// put into the response's extensions; it never holds a secret or the
/// expected signature.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// The body is over the limit (413).
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body could not be read: the client went away or sent garbage
    /// (400).
    BodyUnreadable,
    /// The body did not arrive within the read timeout (408).
    BodyTimeout {
        /// The timeout.
        timeout: Duration,
    },
    /// The signature, timestamp or headers did not verify (400, or 413 for
    /// a body over the verifier's limit).
    Unverified(VerifyError),
    /// The request's HTTP message signature (RFC 9421) did not verify
    /// (400); see [`Receiver::for_message_signatures`](super::Receiver::for_message_signatures).
    #[cfg(feature = "http-signatures")]
    MessageUnverified(MessageSignatureError),
    /// No event id to deduplicate by: the scheme has no id header, or the
    /// configured JSON field is absent (400).
    MissingEventId,
    /// The event id cannot be stored (400).
    InvalidEventId(String),
    /// The namespace the receiver claims in cannot be stored (a store
    /// called with a namespace no configuration check saw). 500: a
    /// configuration error, not the sender's, so the sender retries (a
    /// 4xx would make many give the event up) until it is fixed.
    InvalidNamespace(String),
    /// Another delivery of this event is running; come back later (409).
    InProgress {
        /// When the other delivery's lease expires.
        retry_after: Duration,
    },
    /// The claim store failed or is unreachable: nothing was kept, the
    /// sender should retry (503).
    StoreUnavailable(String),
    /// The handler did not answer within the lease; it was stopped and the
    /// lease released, so the sender's retry runs it again (503).
    HandlerTimedOut {
        /// The lease, which is the handler's deadline.
        lease: Duration,
    },
    /// The body is not the JSON the handler expects (422; extractors only).
    InvalidJson(String),
    /// An extractor ran without what it needs: in axum, a `Webhook<T>` or
    /// `RawWebhook` on a route without a `WebhookLayer`; in actix-web, no
    /// `WebhookConfig`, or one without the receiver (or tenants), the inbox
    /// or the lease store that extractor uses. 500: a configuration error.
    NotConfigured,
    /// The request names no tenant, or one that does not exist (404: a
    /// retry cannot help, and a 5xx would keep the sender retrying).
    UnknownTenant,
    /// Looking the tenant up failed: nothing was kept, the sender should
    /// retry (503).
    TenantLookupFailed(String),
}

/// The kind of a message signature's refusal, and its fixed text.
#[cfg(feature = "http-signatures")]
fn message_kind_and_text(error: &MessageSignatureError) -> (&'static str, &'static str) {
    use MessageSignatureError as E;
    match error {
        E::MissingHeader(_) => (
            "missing_header",
            "the request has no Signature-Input or Signature header",
        ),
        E::Malformed { .. } | E::TooManySignatures | E::InvalidTarget(_) => (
            "malformed_header",
            "a header of the message signature could not be read",
        ),
        E::NoTrustedSignature { .. } | E::AlgorithmMismatch { .. } => (
            "no_supported_signature",
            "no signature names a key (and tag) this receiver trusts",
        ),
        E::MissingComponent(_) => (
            "missing_component",
            "the signature does not cover a component this receiver requires",
        ),
        E::AbsentComponent(_) => (
            "absent_component",
            "the signature covers a component the request does not have (a proxy may have removed it)",
        ),
        E::UnsupportedComponent(_) => (
            "unsupported_component",
            "the signature covers a component this receiver cannot derive",
        ),
        E::NoCreated => ("missing_created", "the signature has no created time"),
        E::TooOld { .. } => (
            "timestamp_too_old",
            "the signed timestamp is older than this receiver accepts",
        ),
        E::CreatedInFuture { .. } => (
            "timestamp_in_future",
            "the signed timestamp is further ahead than this receiver accepts",
        ),
        E::Expired { .. } => (
            "signature_expired",
            "the signature's expires time has passed",
        ),
        E::DigestMismatch(_) => (
            "digest_mismatch",
            "the body does not match its Content-Digest",
        ),
        E::SignatureMismatch { .. } => (
            "signature_mismatch",
            "the signature does not verify over the request as received",
        ),
        E::WrongAuthority { .. } => ("wrong_authority", "the request was signed for another host"),
    }
}

/// How long a sender should wait after a 503 before retrying.
const STORE_RETRY_AFTER_SECS: u64 = 5;

impl Rejection {
    /// The HTTP status to answer with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BodyTooLarge { .. } | Self::Unverified(VerifyError::BodyTooLarge { .. }) => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Self::BodyUnreadable
            | Self::Unverified(_)
            | Self::MissingEventId
            | Self::InvalidEventId(_) => StatusCode::BAD_REQUEST,
            #[cfg(feature = "http-signatures")]
            Self::MessageUnverified(_) => StatusCode::BAD_REQUEST,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::InProgress { .. } => StatusCode::CONFLICT,
            Self::StoreUnavailable(_)
            | Self::HandlerTimedOut { .. }
            | Self::TenantLookupFailed(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::InvalidJson(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::NotConfigured | Self::InvalidNamespace(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::UnknownTenant => StatusCode::NOT_FOUND,
        }
    }

    /// The body text sent to the client: generic on purpose.
    pub fn body_text(&self) -> &'static str {
        match self {
            Self::BodyTooLarge { .. } | Self::Unverified(VerifyError::BodyTooLarge { .. }) => {
                "payload too large"
            }
            Self::BodyUnreadable => "could not read the request body",
            Self::BodyTimeout { .. } => "request body too slow",
            Self::Unverified(_) => "webhook verification failed",
            #[cfg(feature = "http-signatures")]
            Self::MessageUnverified(_) => "webhook verification failed",
            Self::MissingEventId | Self::InvalidEventId(_) => "webhook has no usable event id",
            Self::InProgress { .. } => "webhook is being processed; retry later",
            Self::StoreUnavailable(_) => "temporarily unable to accept webhooks; retry later",
            Self::HandlerTimedOut { .. } => "webhook handler took too long; retry later",
            Self::InvalidJson(_) => "webhook body is not the expected JSON",
            Self::NotConfigured | Self::InvalidNamespace(_) => "webhook receiver is not configured",
            Self::UnknownTenant => "no such webhook receiver",
            Self::TenantLookupFailed(_) => "temporarily unable to accept webhooks; retry later",
        }
    }

    /// A short, fixed name for the reason: the `reason` label of the
    /// `hooklatch_requests_total` metric and the `reason` field of the
    /// request's span.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BodyTooLarge { .. } | Self::Unverified(VerifyError::BodyTooLarge { .. }) => {
                "body_too_large"
            }
            Self::BodyUnreadable => "body_unreadable",
            Self::BodyTimeout { .. } => "body_timeout",
            Self::Unverified(
                VerifyError::TimestampTooOld { .. } | VerifyError::TimestampInFuture { .. },
            ) => "timestamp",
            Self::Unverified(VerifyError::SignatureMismatch { .. }) => "signature",
            Self::Unverified(_) => "malformed",
            #[cfg(feature = "http-signatures")]
            Self::MessageUnverified(error) => match error {
                MessageSignatureError::TooOld { .. }
                | MessageSignatureError::CreatedInFuture { .. }
                | MessageSignatureError::Expired { .. } => "timestamp",
                MessageSignatureError::SignatureMismatch { .. }
                | MessageSignatureError::DigestMismatch(_) => "signature",
                _ => "malformed",
            },
            Self::MissingEventId => "missing_event_id",
            Self::InvalidEventId(_) => "invalid_event_id",
            Self::InvalidNamespace(_) => "invalid_namespace",
            Self::InProgress { .. } => "in_progress",
            Self::StoreUnavailable(_) => "store_unavailable",
            Self::HandlerTimedOut { .. } => "handler_timed_out",
            Self::InvalidJson(_) => "invalid_json",
            Self::NotConfigured => "not_configured",
            Self::UnknownTenant => "unknown_tenant",
            Self::TenantLookupFailed(_) => "tenant_lookup_failed",
        }
    }

    /// The reason's kind: a short, stable name, finer than
    /// [`code`](Self::code) (which stays coarse to bound metric labels),
    /// such as `timestamp_too_old`, `no_supported_signature` or
    /// `signature_mismatch`. Safe to send to the client: it says what kind
    /// of thing is wrong, never a secret, a signature, which secret matched
    /// or how many there are. An adapter opted in with `with_reason_in_body`
    /// sends it ([`body_text_with_kind`](Self::body_text_with_kind)).
    pub fn kind(&self) -> &'static str {
        self.kind_and_text().0
    }

    /// The reason's kind in words, for the client: a fixed text for each
    /// [`kind`](Self::kind), with nothing taken from the request or the
    /// configuration.
    pub fn kind_text(&self) -> &'static str {
        self.kind_and_text().1
    }

    fn kind_and_text(&self) -> (&'static str, &'static str) {
        match self {
            Self::Unverified(error) => match error {
                VerifyError::MissingHeader { .. } => (
                    "missing_header",
                    "a header the signature scheme requires is missing",
                ),
                VerifyError::RepeatedHeader { .. } => (
                    "repeated_header",
                    "a header that must appear once appears more than once",
                ),
                VerifyError::MalformedHeader { reason, .. } => match reason {
                    Malformed::TimestampInMilliseconds => (
                        "timestamp_in_milliseconds",
                        "the timestamp looks like milliseconds; the scheme counts seconds",
                    ),
                    Malformed::TimestampNotInteger
                    | Malformed::TimestampNotRfc3339
                    | Malformed::TimestampOutOfRange => (
                        "malformed_timestamp",
                        "the timestamp is not a whole number of seconds",
                    ),
                    Malformed::IdContainsDelimiter => (
                        "id_contains_delimiter",
                        "the id contains the delimiter of the signed content",
                    ),
                    Malformed::Empty
                    | Malformed::CoveredHeaders { .. }
                    | Malformed::TooLong { .. }
                    | Malformed::NotVisibleAscii
                    | Malformed::TooManySignatures { .. }
                    | Malformed::MissingVersion
                    | Malformed::MissingField(_)
                    | Malformed::RepeatedField(_)
                    | Malformed::BadEncoding(_) => (
                        "malformed_header",
                        "a header of the signature scheme could not be read",
                    ),
                },
                VerifyError::TimestampTooOld { .. } => (
                    "timestamp_too_old",
                    "the signed timestamp is older than this receiver accepts",
                ),
                VerifyError::TimestampInFuture { .. } => (
                    "timestamp_in_future",
                    "the signed timestamp is further ahead than this receiver accepts",
                ),
                VerifyError::NoSupportedSignature { .. } => (
                    "no_supported_signature",
                    "no signature of a version this receiver checks",
                ),
                // A verifier never answers `NoSecretValid` (only a signer
                // does); were it to, a client is told no more than that
                // its signature did not match.
                VerifyError::SignatureMismatch { .. } | VerifyError::NoSecretValid => (
                    "signature_mismatch",
                    "no signature matched; sign the raw body exactly as sent, with the endpoint's secret",
                ),
                VerifyError::BodyTooLarge { .. } => {
                    ("body_too_large", "the body is over this receiver's limit")
                }
                VerifyError::MalformedBody { .. } => (
                    "malformed_body",
                    "the body is not what the signature scheme signs",
                ),
            },
            #[cfg(feature = "http-signatures")]
            Self::MessageUnverified(error) => message_kind_and_text(error),
            Self::BodyTooLarge { .. } => {
                ("body_too_large", "the body is over this receiver's limit")
            }
            Self::BodyUnreadable => ("body_unreadable", "the request body could not be read"),
            Self::BodyTimeout { .. } => ("body_timeout", "the body did not arrive in time"),
            Self::MissingEventId => ("missing_event_id", "the request carries no event id"),
            Self::InvalidEventId(_) => ("invalid_event_id", "the event id cannot be stored"),
            Self::InvalidNamespace(_) => (
                "invalid_namespace",
                "the receiver's namespace cannot be stored",
            ),
            Self::InProgress { .. } => (
                "in_progress",
                "another delivery of this event is being handled",
            ),
            Self::StoreUnavailable(_) => {
                ("store_unavailable", "the receiver's store is unavailable")
            }
            Self::HandlerTimedOut { .. } => (
                "handler_timed_out",
                "the handler did not finish within its lease",
            ),
            Self::InvalidJson(_) => (
                "invalid_json",
                "the body is not the JSON the handler expects",
            ),
            Self::NotConfigured => ("not_configured", "the receiver is not configured"),
            Self::UnknownTenant => ("unknown_tenant", "the request names no known receiver"),
            Self::TenantLookupFailed(_) => (
                "tenant_lookup_failed",
                "the receiver could not be looked up",
            ),
        }
    }

    /// The body text with the reason's kind after it, what an adapter
    /// opted in with `with_reason_in_body` sends:
    /// `webhook verification failed: timestamp_too_old (the signed
    /// timestamp is older than this receiver accepts)`. Made of fixed texts
    /// only, like [`body_text`](Self::body_text).
    ///
    /// ```
    /// use hooklatch::receive::Rejection;
    /// use hooklatch::verify::VerifyError;
    ///
    /// let stale = Rejection::Unverified(VerifyError::TimestampTooOld { age_secs: 600, tolerance_secs: 300 });
    /// assert_eq!(stale.kind(), "timestamp_too_old");
    /// assert!(stale.body_text_with_kind().starts_with("webhook verification failed: timestamp_too_old ("));
    /// ```
    pub fn body_text_with_kind(&self) -> String {
        format!(
            "{}: {} ({})",
            self.body_text(),
            self.kind(),
            self.kind_text()
        )
    }

    /// The precise reason, for logs.
    pub fn reason(&self) -> String {
        match self {
            Self::BodyTooLarge { limit } => format!("body over the {limit}-byte limit"),
            Self::BodyUnreadable => "request body could not be read".to_owned(),
            Self::BodyTimeout { timeout } => {
                format!("request body not received within {timeout:?}")
            }
            Self::Unverified(error) => error.to_string(),
            #[cfg(feature = "http-signatures")]
            Self::MessageUnverified(error) => error.to_string(),
            Self::MissingEventId => "no event id in the request".to_owned(),
            Self::InvalidEventId(reason) => reason.clone(),
            Self::InvalidNamespace(reason) => format!("the receiver's {reason}"),
            Self::InProgress { retry_after } => {
                format!("in progress elsewhere; lease ends in {retry_after:?}")
            }
            Self::StoreUnavailable(reason) => format!("claim store failed: {reason}"),
            Self::HandlerTimedOut { lease } => {
                format!("handler still running when its {lease:?} lease ended; stopped")
            }
            Self::InvalidJson(reason) => format!("invalid JSON: {reason}"),
            Self::NotConfigured => {
                "the extractor is not configured (axum: put a WebhookLayer on the route, or \
                 verify with VerifiedJson and a Receiver in the state; actix-web: add a \
                 WebhookConfig with what the extractor uses: a receiver, an inbox or a lease \
                 store)"
                    .to_owned()
            }
            Self::UnknownTenant => "the request names no known tenant".to_owned(),
            Self::TenantLookupFailed(reason) => format!("tenant lookup failed: {reason}"),
        }
    }

    /// The `Retry-After` to send, in whole seconds, where waiting helps:
    /// until the other delivery's lease ends (409), or a few seconds after
    /// a store failure or a handler that ran out of time (503).
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Self::InProgress { retry_after } => Some(retry_after.as_secs().max(1)),
            Self::StoreUnavailable(_)
            | Self::HandlerTimedOut { .. }
            | Self::TenantLookupFailed(_) => Some(STORE_RETRY_AFTER_SECS),
            _ => None,
        }
    }

    /// The rejection for a claim store error: 400 for an event id the
    /// store cannot take, 500 for a namespace it cannot take (the
    /// receiver's configuration), 503 for everything else.
    pub fn from_store(error: DedupError) -> Self {
        match error {
            DedupError::InvalidKey {
                what: crate::dedup::NAMESPACE,
                ..
            } => Self::InvalidNamespace(error.to_string()),
            _ if error.is_bad_request() => Self::InvalidEventId(error.to_string()),
            _ => Self::StoreUnavailable(error.to_string()),
        }
    }

    /// The response for this rejection, with `Retry-After` where it helps
    /// and the rejection itself in the extensions.
    pub fn into_response<B: From<&'static str>>(self) -> Response<B> {
        let body = B::from(self.body_text());
        self.respond(body)
    }

    /// [`into_response`](Self::into_response) with the reason's kind in
    /// the body ([`body_text_with_kind`](Self::body_text_with_kind)), for a
    /// handler that takes an extractor's `Result` and answers it itself.
    pub fn into_response_with_kind<B: From<String>>(self) -> Response<B> {
        let body = B::from(self.body_text_with_kind());
        self.respond(body)
    }

    fn respond<B>(self, body: B) -> Response<B> {
        tracing::warn!(status = %self.status(), reason = %self.reason(), "webhook rejected");
        let mut response = Response::new(body);
        *response.status_mut() = self.status();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if let Some(seconds) = self.retry_after_secs() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response.extensions_mut().insert(self);
        response
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason())
    }
}

impl std::error::Error for Rejection {}

#[cfg(feature = "axum")]
impl axum_core::response::IntoResponse for Rejection {
    fn into_response(self) -> axum_core::response::Response {
        Rejection::into_response(self)
    }
}
