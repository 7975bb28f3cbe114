//! HTTP Message Signatures ([RFC 9421]): `Signature-Input` and `Signature`
//! over chosen parts of a request, with the body bound through
//! `Content-Digest` ([RFC 9530]).
//!
//! A [`MessageVerifier`] holds the keys it trusts, each under its `keyid`
//! (HMAC-SHA256, and with the features `ed25519` / `p256` Ed25519 and
//! ECDSA P-256 public keys), the components every signature must cover,
//! an optional `tag`, and how old `created` may be. It checks, before any
//! cryptography: that both headers parse as structured fields, that the
//! signature names a trusted key (and its algorithm, when it says one), the
//! tag, the covered components, `created` and `expires`; then the body
//! against a covered `Content-Digest`; then the signature over the
//! signature base built as section 2.5 says. At most
//! [`MAX_MESSAGE_SIGNATURES`] signatures of a request are looked at, and at
//! most one signature check is made per trusted key.
//!
//! ```
//! use hooklatch::verify::message::{MessageKey, MessageRequest, MessageVerifier};
//!
//! // RFC 9421's own example (Appendix B.2.5) and its shared secret.
//! let secret = base64::Engine::decode(
//!     &base64::engine::general_purpose::STANDARD,
//!     "uzvJfB4u3N0Jy4T7NZ75MDVcr8zSTInedJtkgcu46YW4XByzNJjxBdtjUkdJPBtbmHhIDi6pcl8jsasjlTMtDQ==",
//! )?;
//! let verifier = MessageVerifier::builder()
//!     .with_key(MessageKey::hmac_sha256("test-shared-secret", &secret)?)
//!     .require(["@authority", "content-type"])
//!     .with_max_age(None)
//!     .build()?;
//! let mut headers = http::HeaderMap::new();
//! headers.insert("date", "Tue, 20 Apr 2021 02:07:55 GMT".parse()?);
//! headers.insert("content-type", "application/json".parse()?);
//! headers.insert(
//!     "signature-input",
//!     r#"sig-b25=("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret""#
//!         .parse()?,
//! );
//! headers.insert("signature", "sig-b25=:pxcQw6G3AjtMBQjwo8XzkZf/bws5LelbaMk5rGIGtE8=:".parse()?);
//! let request = MessageRequest::new("POST", "https://example.com/foo?param=Value&Pet=dog", &headers)?;
//! // The example covers no body, so it is checked without one: with a body,
//! // `content-digest` must be covered (see `MessageSigner`).
//! let verified = verifier.verify_at(&request, b"", 1_618_884_473)?;
//! assert_eq!(verified.key_id(), "test-shared-secret");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [RFC 9421]: https://www.rfc-editor.org/rfc/rfc9421
//! [RFC 9530]: https://www.rfc-editor.org/rfc/rfc9530

mod base;
#[cfg(feature = "jwks")]
mod jwks;
mod keys;
mod request;
mod signer;
mod verifier;

pub use base::content_digest;
#[cfg(feature = "jwks")]
pub use jwks::{InvalidJwksUrl, Jwks};
pub use keys::{InvalidKeySet, InvalidMessageKey, MessageKey};
pub use request::MessageRequest;
pub use signer::{MessageSigner, SignedMessage};
pub use verifier::{InvalidMessageVerifier, MessageVerifier, MessageVerifierBuilder};

use sha2::Digest as _;

use std::fmt::Write as _;

/// The most signatures of one request that are looked at; a request with
/// more labels is refused unread.
pub const MAX_MESSAGE_SIGNATURES: usize = 8;

/// The most components one signature may cover.
pub const MAX_COVERED_COMPONENTS: usize = 32;

/// The longest `Signature-Input` or `Signature`, all lines together.
pub(super) const MAX_FIELD_LEN: usize = 8 * 1024;

/// Why a request's message signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageSignatureError {
    /// `Signature-Input` or `Signature` is missing.
    #[error("the request has no `{0}` header")]
    MissingHeader(&'static str),
    /// A header is not the structured field it must be, or too long.
    #[error("`{header}` is malformed: {reason}")]
    Malformed {
        /// The header.
        header: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// More signatures than [`MAX_MESSAGE_SIGNATURES`].
    #[error("the request carries more than {MAX_MESSAGE_SIGNATURES} signatures")]
    TooManySignatures,
    /// No signature names a trusted key (by `keyid`) and the tag asked for.
    #[error("no signature names a trusted key{}", tag_note(.tag))]
    NoTrustedSignature {
        /// The tag the verifier asks for, if any.
        tag: Option<String>,
    },
    /// The signature's `alg` is not the algorithm of the key it names.
    #[error("the signature says `alg=\"{alg}\"`, but key `{key_id}` is {expected}")]
    AlgorithmMismatch {
        /// The key named.
        key_id: String,
        /// What the signature says.
        alg: String,
        /// The key's algorithm.
        expected: &'static str,
    },
    /// A component the verifier requires is not covered.
    #[error("the signature does not cover `{0}`, which this verifier requires")]
    MissingComponent(String),
    /// A covered component is not in the request (a proxy may have
    /// removed or renamed a header).
    #[error("the signature covers `{0}`, which the request does not have")]
    AbsentComponent(String),
    /// A covered component this library does not derive.
    #[error("the component `{0}` is not supported")]
    UnsupportedComponent(String),
    /// The signature has no `created` time.
    #[error("the signature has no `created` parameter")]
    NoCreated,
    /// `created` is older than the verifier's maximum age.
    #[error("the signature was created {age_secs} s ago; the limit is {max_age_secs} s")]
    TooOld {
        /// How old it is.
        age_secs: u64,
        /// The limit.
        max_age_secs: u64,
    },
    /// `created` is later than now, beyond the tolerance.
    #[error("the signature is created {ahead_secs} s in the future")]
    CreatedInFuture {
        /// How far ahead.
        ahead_secs: u64,
    },
    /// `expires` has passed.
    #[error("the signature expired {ago_secs} s ago")]
    Expired {
        /// How long ago.
        ago_secs: u64,
    },
    /// The body is not what `Content-Digest` says, or the header names no
    /// algorithm this library computes (`sha-256`, `sha-512`).
    #[error("the body does not match `Content-Digest`: {0}")]
    DigestMismatch(&'static str),
    /// The signature does not verify with the key it names: a component
    /// changed on the way (a proxy rewriting `@authority` or `@path`, a
    /// header re-encoded), or another key signed it.
    #[error("signature `{label}` does not verify with key `{key_id}`")]
    SignatureMismatch {
        /// The signature's label.
        label: String,
        /// The key tried.
        key_id: String,
    },
    /// The request was sent to another authority than this verifier's
    /// ([`MessageVerifierBuilder::with_authority`]).
    #[error("the request is for `{got}`, not `{expected}`")]
    WrongAuthority {
        /// This verifier's authority.
        expected: String,
        /// The request's.
        got: String,
    },
    /// A target URI this library cannot read.
    #[error("invalid target URI: {0}")]
    InvalidTarget(String),
}

fn tag_note(tag: &Option<String>) -> String {
    tag.as_ref()
        .map_or_else(String::new, |tag| format!(" with tag `{tag}`"))
}

/// What passed verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageVerified {
    pub(super) label: String,
    pub(super) key_id: String,
    /// The key's [`sender`](MessageKey::sender): what its nonces are
    /// unique within.
    pub(super) sender: String,
    pub(super) created: i64,
    pub(super) expires: Option<i64>,
    pub(super) nonce: Option<String>,
    pub(super) tag: Option<String>,
    pub(super) components: Vec<String>,
    pub(super) base_digest: [u8; 32],
}

impl MessageVerified {
    /// The signature's label in the headers (`sig1`).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The `keyid` of the key that verified it.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// Its `created` time, in seconds since the Unix epoch.
    pub fn created(&self) -> i64 {
        self.created
    }

    /// Its `expires` time, if it has one.
    pub fn expires(&self) -> Option<i64> {
        self.expires
    }

    /// Its `nonce`, if it has one.
    pub fn nonce(&self) -> Option<&str> {
        self.nonce.as_deref()
    }

    /// Its `tag`, if it has one.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The components it covers, as their serialized identifiers.
    pub fn components(&self) -> &[String] {
        &self.components
    }

    /// The key to claim the request by: `nonce:`, the sender (the key's
    /// [`sender`](MessageKey::sender), its `keyid` unless named), `:` and
    /// the signature's nonce where it has one, the sender holds no `:` and
    /// the whole is at most 256 visible ASCII characters (`nonce-sha256:`
    /// and a digest of sender and nonce otherwise), so that one sender's
    /// nonces never claim another's events; without a nonce, `sha256:` and
    /// the digest of the signature base, which every signed part of the
    /// request feeds. A request signed by two keys (a rotation) has a base
    /// per signature, so require a nonce
    /// ([`MessageVerifierBuilder::with_required_nonce`]) and name both keys'
    /// sender ([`MessageKey::with_sender`]) where that matters.
    pub fn claim_key(&self) -> String {
        let hex = |digest: &[u8]| {
            let mut text = String::with_capacity(64);
            for byte in digest {
                let _ = write!(text, "{byte:02x}");
            }
            text
        };
        let Some(nonce) = &self.nonce else {
            return format!("sha256:{}", hex(&self.base_digest));
        };
        let key = format!("nonce:{}:{nonce}", self.sender);
        // A `:` in the sender would let `a:b` + `c` and `a` + `b:c` meet.
        if !self.sender.contains(':')
            && key.len() <= 256
            && key.bytes().all(|byte| byte.is_ascii_graphic())
        {
            return key;
        }
        let mut hash = sha2::Sha256::new();
        hash.update(self.sender.as_bytes());
        hash.update([0]);
        hash.update(nonce.as_bytes());
        format!("nonce-sha256:{}", hex(&hash.finalize()))
    }
}
