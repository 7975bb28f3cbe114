//! Errors of the verify module: [`VerifyError`] for requests, [`ConfigError`]
//! for building a [`Verifier`](super::Verifier) or [`Signer`](super::Signer).

use std::borrow::Cow;
use std::fmt;

/// Why a request failed verification.
///
/// Each variant names a cause the receiver's operator can act on. The
/// `Display` text adds a hint where a common mistake is likely, and never
/// contains the expected signature or any secret material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The signer has no secret valid at the signing time.
    #[error("no configured secret is valid at the signing time")]
    NoSecretValid,
    /// A header the scheme requires is absent.
    #[error("missing header `{name}`")]
    MissingHeader {
        /// The header's name, lowercase.
        name: Cow<'static, str>,
    },
    /// A header that must appear once appears several times; which one to
    /// trust would be ambiguous, so the request is refused.
    #[error("header `{name}` appears more than once")]
    RepeatedHeader {
        /// The header's name, lowercase.
        name: Cow<'static, str>,
    },
    /// A header is present but cannot be read.
    #[error("malformed header `{name}`: {reason}")]
    MalformedHeader {
        /// The header's name, lowercase.
        name: Cow<'static, str>,
        /// What is wrong with its value.
        reason: Malformed,
    },
    /// The timestamp is further in the past than the tolerance allows.
    #[error(
        "timestamp is {age_secs}s old, beyond the {tolerance_secs}s tolerance \
         (a replay, a delayed retry signed long ago, or a wrong clock on this host)"
    )]
    TimestampTooOld {
        /// How many seconds before now the request was signed.
        age_secs: u64,
        /// The configured past tolerance, in seconds.
        tolerance_secs: u64,
    },
    /// The timestamp is further in the future than the tolerance allows.
    #[error(
        "timestamp is {ahead_secs}s in the future, beyond the {tolerance_secs}s tolerance \
         (is the sender's clock or this host's clock wrong?)"
    )]
    TimestampInFuture {
        /// How many seconds after now the request claims to be signed.
        ahead_secs: u64,
        /// The configured future tolerance, in seconds.
        tolerance_secs: u64,
    },
    /// The signature header holds no signature of a version this verifier
    /// can check.
    #[error(
        "no `{expected}` signature in header `{name}` ({found} signatures of other versions{hint})",
        hint = if .expected == "v1" && *.found > 0 { "; a `v1a` signature needs a `whpk_` public key and the `ed25519` feature" } else { "" }
    )]
    NoSupportedSignature {
        /// The header's name, lowercase.
        name: Cow<'static, str>,
        /// The version (or prefix) this verifier checks, such as `v1`.
        expected: Cow<'static, str>,
        /// How many signatures of other versions were skipped.
        found: usize,
    },
    /// Signatures were present, but none matched any configured secret.
    #[error(
        "signature mismatch: none of {signatures} signature(s) matched any of {keys} secret(s); \
         verify the raw body bytes exactly as received (was the body parsed and re-serialized \
         before verification?) and check the secret{hint}",
        hint = .hint.map(|h| format!("; {h}")).unwrap_or_default()
    )]
    SignatureMismatch {
        /// How many signatures of a supported version were compared.
        signatures: usize,
        /// How many secrets each signature was compared against.
        keys: usize,
        /// A likely cause found in the configuration, if any.
        hint: Option<&'static str>,
    },
    /// The body cannot be what the scheme signs (Twilio's form
    /// parameters): refused before any signature is compared.
    #[error("malformed body: {reason}")]
    MalformedBody {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The body is larger than the verifier accepts.
    #[error("body is {len} bytes, over the {limit}-byte limit")]
    BodyTooLarge {
        /// The body's length in bytes.
        len: usize,
        /// The configured limit in bytes.
        limit: usize,
    },
}

impl VerifyError {
    /// The header this error is about, if it is about one.
    pub fn header(&self) -> Option<&str> {
        match self {
            Self::MissingHeader { name }
            | Self::RepeatedHeader { name }
            | Self::MalformedHeader { name, .. }
            | Self::NoSupportedSignature { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// What is wrong with a header's value, inside [`VerifyError::MalformedHeader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Malformed {
    /// The value is empty.
    Empty,
    /// The value is longer than the verifier reads.
    TooLong {
        /// The maximum length in bytes.
        max: usize,
    },
    /// The value contains bytes outside visible ASCII where only those are allowed.
    NotVisibleAscii,
    /// The timestamp is not a plain decimal integer (no sign but `-`, no
    /// spaces, no fraction).
    TimestampNotInteger,
    /// The timestamp is not a strict RFC 3339 date-time (such as
    /// `2019-11-16T10:11:12.634234626Z`), which the scheme writes.
    TimestampNotRfc3339,
    /// The timestamp does not fit a signed 64-bit number of seconds.
    TimestampOutOfRange,
    /// The timestamp is about now if read as milliseconds; the scheme
    /// counts seconds.
    TimestampInMilliseconds,
    /// More signatures than the verifier examines.
    TooManySignatures {
        /// How many signatures one header may carry.
        max: usize,
    },
    /// A signature entry lacks its version label (such as `v1,`).
    MissingVersion,
    /// A field the scheme requires inside the header is absent (such as
    /// Stripe's `t=`).
    MissingField(&'static str),
    /// A field that must appear once appears several times.
    RepeatedField(&'static str),
    /// No signature of a supported version could be decoded.
    BadEncoding(&'static str),
    /// The id contains what separates it from the rest of the signed
    /// content (`.` for Standard Webhooks and Svix), or a value signed
    /// before it does (Hook0's covered headers), so one signature would
    /// verify two ids.
    IdContainsDelimiter,
    /// The names of the headers a signature covers (Hook0's `h=`) are not
    /// lowercase header names without a `.`, one space apart, each once and
    /// none the signature header, or are more than the verifier reads.
    CoveredHeaders {
        /// How many covered headers one signature may name.
        max: usize,
    },
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("value is empty"),
            Self::TooLong { max } => write!(f, "value is longer than {max} bytes"),
            Self::NotVisibleAscii => f.write_str("value has characters outside visible ASCII"),
            Self::TimestampNotInteger => {
                f.write_str("timestamp is not an integer number of seconds")
            }
            Self::TimestampNotRfc3339 => f.write_str(
                "timestamp is not an RFC 3339 date-time like 2019-11-16T10:11:12.634234626Z",
            ),
            Self::TimestampOutOfRange => f.write_str("timestamp is out of range"),
            Self::TimestampInMilliseconds => f.write_str(
                "timestamp looks like milliseconds since the epoch; the scheme expects seconds",
            ),
            Self::TooManySignatures { max } => {
                write!(f, "more than {max} signatures in one header")
            }
            Self::MissingVersion => f.write_str("signature lacks its version label (like `v1,`)"),
            Self::MissingField(field) => write!(f, "no `{field}=` field"),
            Self::RepeatedField(field) => write!(f, "field `{field}=` appears more than once"),
            Self::BadEncoding(encoding) => write!(f, "signature is not valid {encoding}"),
            Self::IdContainsDelimiter => f.write_str(
                "id, or a value signed before it, contains the delimiter that separates them \
                 in the signed content (`.` for Standard Webhooks and Hook0), so one signature \
                 would verify two ids",
            ),
            Self::CoveredHeaders { max } => write!(
                f,
                "the covered headers (`h=`) are not at most {max} distinct lowercase header \
                 names without a `.`, one space apart, none the signature header"
            ),
        }
    }
}

/// Why a [`Verifier`](super::Verifier), [`Signer`](super::Signer) or
/// [`Scheme`](super::Scheme) could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A secret's validity window holds no time.
    #[error("a secret's validity window is empty: it starts at or after its end")]
    EmptyValidity,
    /// A secret is empty (or only a `whsec_` prefix).
    #[error("secret is empty")]
    EmptySecret,
    /// A secret that must be base64 is not.
    #[error(
        "secret is not valid base64 after its `{prefix}` prefix; \
         to use the text as raw key bytes, pass it as bytes instead"
    )]
    SecretNotBase64 {
        /// The prefix that was stripped (may be empty).
        prefix: &'static str,
    },
    /// An ed25519 key has the wrong length.
    #[error("`{prefix}` key must decode to {expected} bytes, not {actual}")]
    KeyLength {
        /// The key's prefix, `whpk_` or `whsk_`.
        prefix: &'static str,
        /// The accepted length(s).
        expected: &'static str,
        /// The decoded length.
        actual: usize,
    },
    /// A key given as hex (Discord's public key, as its developer portal
    /// shows it) is not hex of the right length.
    #[error(
        "the key must be {expected} hex characters (Discord's developer portal shows the \
         application's public key as 64; not its id, client secret or bot token)"
    )]
    KeyNotHex {
        /// The accepted length(s), in hex characters.
        expected: &'static str,
    },
    /// A key that must be an ECDSA P-256 public key in base64 DER
    /// (SendGrid's verification key, as its settings show it) is not one.
    #[error("the key is not a base64 DER ECDSA P-256 public key")]
    KeyNotP256,
    /// An ed25519 key's two halves do not belong together.
    #[error("`whsk_` key's public half does not match its secret half")]
    KeyPairMismatch,
    /// A key whose algorithm's feature is off (`ed25519`, `p256`, `sha1`),
    /// or an asymmetric key for a scheme without such signatures.
    #[error("`{prefix}` keys need {needs}")]
    AsymmetricUnsupported {
        /// The key's prefix.
        prefix: &'static str,
        /// What is needed to use it.
        needs: &'static str,
    },
    /// The verifier or signer has no secret.
    #[error("no secret configured")]
    NoSecrets,
    /// A signer has more secrets than a verifier examines signatures.
    #[error(
        "more than {max} signing secrets: verifiers examine at most {max} signatures per header"
    )]
    TooManySecrets {
        /// The most secrets a signer may sign with.
        max: usize,
    },
    /// A signer has only public keys, which cannot sign.
    #[error("no secret can sign: `whpk_` public keys only verify")]
    NoSigningKey,
    /// A header name is not a valid HTTP header name.
    #[error("`{0}` is not a valid header name")]
    InvalidHeaderName(String),
    /// A signed-content template is not valid.
    #[error("invalid signed-content template: {0}")]
    InvalidTemplate(&'static str),
    /// The scheme reads an id or timestamp header that its template does
    /// not sign: anyone could change it.
    #[error(
        "the {what} is read from `{header}` but the template does not sign it; \
         add `{{{what}}}` to the template, or opt in with `insecure_allow_unsigned_{what}`"
    )]
    UnsignedHeader {
        /// `id` or `timestamp`.
        what: &'static str,
        /// The header's name, lowercase.
        header: String,
    },
    /// A provider's handshake on a receiver that verifies another scheme:
    /// its answer would be computed for, or let in, requests that scheme
    /// does not sign.
    #[error(
        "the {handshake} handshake belongs to the `{expected}` scheme, not `{scheme}`; \
         give it to a receiver that verifies {handshake}'s deliveries"
    )]
    HandshakeScheme {
        /// The handshake's provider, such as `x`.
        handshake: &'static str,
        /// The scheme it belongs to.
        expected: &'static str,
        /// The receiver's scheme.
        scheme: String,
    },
}
