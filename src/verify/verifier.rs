//! The [`Verifier`]: built once, used on every request.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::clock::{Clock, unix_seconds};
use super::encoding::MAX_SIGNATURE_BYTES;
use super::envelope::{self, Envelope};
use super::error::{Malformed, VerifyError};
use super::headers::Headers;
use super::scheme::{CoveredHeaders, Scheme};
use super::secrets::{Algorithm, Key};
use super::validity::Validity;

/// The default tolerance for timestamps in the past and in the future.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// The default largest body a verifier accepts: 1 MiB.
pub const DEFAULT_MAX_BODY_LEN: usize = 1024 * 1024;

/// How many asymmetric signature checks (ed25519: `v1a`, Discord's; ECDSA
/// P-256: SendGrid's) one request may cost per public key valid now,
/// pooled over the request: each signature in turn is checked against
/// each key until the pool is spent. Each check hashes the whole body and
/// anyone can send junk signatures, so a forged request costs at most two
/// checks per key (it was four per key), twice a genuine request signed
/// by the last key, while every pairing of two signatures and two keys (a
/// rotation on both sides) is still tried.
pub const ASYMMETRIC_CHECKS_PER_KEY: usize = 2;

/// Checks webhook signatures for one scheme against one or more secrets.
///
/// Build it once with [`Verifier::builder`] and share it: it is cheap to
/// clone (an [`Arc`] inside) and `Send + Sync`.
///
/// ```
/// use hooklatch::verify::{Scheme, Signer, Verifier};
///
/// let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// let verifier = Verifier::builder(Scheme::standard_webhooks())
///     .with_secret(secret)?
///     .build()?;
///
/// // A request as a sender would make it.
/// let body = br#"{"type":"invoice.paid"}"#;
/// let now = std::time::SystemTime::now();
/// let headers = Signer::new(Scheme::standard_webhooks(), [secret])?
///     .sign("msg_1", now, body)?;
///
/// let event = verifier.verify(&headers, body)?;
/// assert_eq!(event.id(), Some("msg_1"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Verifier {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) scheme: Scheme,
    /// The scheme's [`Scheme::id_delimiters`], worked out once.
    pub(super) id_delimiters: u128,
    pub(super) keys: Vec<Key>,
    /// When each key may be used, in the order of `keys`.
    pub(super) validity: Vec<Validity>,
    pub(super) accepts_hmac: bool,
    pub(super) accepts_ed25519: bool,
    pub(super) accepts_ecdsa_p256: bool,
    pub(super) past_tolerance: u64,
    pub(super) future_tolerance: u64,
    pub(super) check_timestamp: bool,
    pub(super) max_body_len: usize,
    pub(super) hint: Option<&'static str>,
    pub(super) clock: Arc<dyn Clock>,
    /// Ed25519 keys fetched for `v1a`, tried after `keys`
    /// ([`VerifierBuilder::with_jwks`](super::VerifierBuilder::with_jwks)).
    #[cfg(feature = "jwks")]
    pub(super) jwks: Option<Arc<super::message::Jwks>>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("Verifier")
            .field("scheme", &inner.scheme.name())
            .field("keys", &inner.keys)
            .field("past_tolerance_secs", &inner.past_tolerance)
            .field("future_tolerance_secs", &inner.future_tolerance)
            .field("check_timestamp", &inner.check_timestamp)
            .field("max_body_len", &inner.max_body_len)
            .finish_non_exhaustive()
    }
}

/// A request that passed verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified<'a> {
    id: Option<&'a str>,
    id_signed: bool,
    timestamp: Option<i64>,
    timestamp_text: Option<&'a [u8]>,
    /// The headers the signature covered besides id and timestamp
    /// (Hook0's).
    covered: Option<Box<CoveredHeaders<'a>>>,
    body: &'a [u8],
    key_index: usize,
}

impl<'a> Verified<'a> {
    /// The event id from the scheme's id header (`None` for schemes without
    /// one, such as Stripe and Slack, and when an unsigned id header is
    /// absent). See [`id_is_signed`](Self::id_is_signed) before trusting it.
    pub fn id(&self) -> Option<&'a str> {
        self.id
    }

    /// Whether the signature covers [`id`](Self::id). GitHub's and
    /// Shopify's delivery ids are not covered: anyone can resend a captured
    /// request under a new one.
    pub fn id_is_signed(&self) -> bool {
        self.id_signed
    }

    /// The timestamp, in seconds since the Unix epoch (`None` for schemes
    /// that read none, such as GitHub and Shopify). It is signed when the
    /// scheme's [`has_timestamp`](Scheme::has_timestamp) is true.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// What the signed content holds before `.{body}` where a scheme
    /// signs a timestamp: the timestamp as sent, or for Hook0 the
    /// timestamp, the covered headers' names and their values, so that a
    /// digest of the signed content covers all of it.
    pub(crate) fn signed_prefix(&self) -> Option<std::borrow::Cow<'a, [u8]>> {
        let Some(covered) = &self.covered else {
            return self.timestamp_text.map(std::borrow::Cow::Borrowed);
        };
        let mut prefix = Vec::with_capacity(128);
        prefix.extend_from_slice(self.timestamp_text.unwrap_or_default());
        prefix.push(b'.');
        prefix.extend_from_slice(covered.names);
        prefix.push(b'.');
        for (at, value) in covered.values().enumerate() {
            if at > 0 {
                prefix.push(b'.');
            }
            prefix.extend_from_slice(value);
        }
        Some(std::borrow::Cow::Owned(prefix))
    }

    /// A verified request put together again from what it was made of, to
    /// take its claim key later (`receive::VerifiedEvent::key`).
    #[cfg(feature = "http")]
    pub(crate) fn from_parts(
        id: Option<&'a str>,
        id_signed: bool,
        signed_prefix: Option<&'a [u8]>,
        body: &'a [u8],
    ) -> Self {
        Self {
            id,
            id_signed,
            timestamp: None,
            timestamp_text: signed_prefix,
            covered: None,
            body,
            key_index: 0,
        }
    }

    /// The body, exactly as received and verified.
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// The position, in the order they were added, of the secret that
    /// matched; useful to see when an old secret can be retired. A key
    /// from the verifier's key set (`VerifierBuilder::with_jwks`, feature
    /// `jwks`) counts after the configured ones, among the set's Ed25519 keys as
    /// last fetched (so the same key may count differently after a
    /// rotation).
    pub fn key_index(&self) -> usize {
        self.key_index
    }
}

impl Verifier {
    /// Whether `other` is this verifier or a clone of it (the same secrets,
    /// built once).
    #[cfg(feature = "http")]
    pub(crate) fn is(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The scheme this verifier checks.
    pub fn scheme(&self) -> &Scheme {
        &self.inner.scheme
    }

    /// The largest body this verifier accepts, in bytes
    /// ([`VerifierBuilder::with_body_limit`](super::VerifierBuilder::with_body_limit)).
    pub fn body_limit(&self) -> usize {
        self.inner.max_body_len
    }

    /// Verifies a request at the time the verifier's clock gives.
    ///
    /// `body` must be the bytes exactly as received: a body parsed and
    /// serialized again will not match.
    pub fn verify<'a>(
        &self,
        headers: &'a (impl Headers + ?Sized),
        body: &'a [u8],
    ) -> Result<Verified<'a>, VerifyError> {
        self.verify_at(headers, body, self.inner.clock.now())
    }

    /// Verifies a request as if the time were `now`.
    pub fn verify_at<'a>(
        &self,
        headers: &'a (impl Headers + ?Sized),
        body: &'a [u8],
        now: SystemTime,
    ) -> Result<Verified<'a>, VerifyError> {
        let inner = &*self.inner;
        if body.len() > inner.max_body_len {
            return Err(VerifyError::BodyTooLarge {
                len: body.len(),
                limit: inner.max_body_len,
            });
        }
        let now_seconds = unix_seconds(now);
        let envelope =
            Envelope::read(
                &inner.scheme,
                inner.id_delimiters,
                headers,
                |algorithm| match algorithm {
                    Algorithm::Hmac => inner.accepts_hmac,
                    Algorithm::Ed25519 => inner.accepts_ed25519,
                    Algorithm::EcdsaP256 => inner.accepts_ecdsa_p256,
                },
            )?;
        if let Some(timestamp) = envelope.timestamp
            && inner.check_timestamp
        {
            inner.check_time(timestamp.seconds, now_seconds)?;
        }
        let matched = match inner.scheme.rebuilt_contents(body) {
            None => inner.find_match(&envelope, body, now_seconds)?,
            Some(contents) => {
                let mut matched = None;
                for content in contents? {
                    matched = inner.find_match(&envelope, &content, now_seconds)?;
                    if matched.is_some() {
                        break;
                    }
                }
                matched
            }
        };
        match matched {
            Some(key_index) => Ok(Verified {
                id: envelope.id,
                id_signed: envelope.id_signed,
                timestamp: envelope.timestamp.map(|t| t.seconds),
                timestamp_text: envelope.timestamp.map(|t| t.text),
                covered: envelope.covered,
                body,
                key_index,
            }),
            None => {
                let now = unix_seconds(now);
                let valid = inner
                    .validity
                    .iter()
                    .filter(|v| v.contains_unix(now))
                    .count();
                // Keys fetched for `v1a` count too: a verifier given only a
                // key set would otherwise say it tried none.
                #[cfg(feature = "jwks")]
                let fetched = inner
                    .jwks
                    .as_ref()
                    .map_or(0, |jwks| jwks.cached_ed25519().len());
                #[cfg(not(feature = "jwks"))]
                let fetched = 0;
                let hint = if valid < inner.keys.len() {
                    Some(
                        "a configured secret is outside its validity window now (expired, or \
                         not yet valid): a sender still signing with it is refused",
                    )
                } else {
                    inner.hint
                };
                Err(VerifyError::SignatureMismatch {
                    signatures: envelope.accepted(),
                    keys: valid + fetched,
                    hint,
                })
            }
        }
    }
}

#[cfg(feature = "jwks")]
impl Verifier {
    /// Verifies as [`verify`](Self::verify) does; then, for a well-formed,
    /// timely request, fetches the verifier's key set
    /// ([`VerifierBuilder::with_jwks`](super::VerifierBuilder::with_jwks))
    /// where it is stale, or where no key verified the request (at most
    /// once per refresh interval, so forged requests cannot make it fetch
    /// more), and verifies once more with the set fetched. A request that
    /// does not parse, or whose timestamp is out of bounds, fetches
    /// nothing.
    ///
    /// # Errors
    ///
    /// As [`verify`](Self::verify).
    pub async fn verify_fetching<'a>(
        &self,
        headers: &'a (impl Headers + ?Sized),
        body: &'a [u8],
    ) -> Result<Verified<'a>, VerifyError> {
        let now = self.inner.clock.now();
        let Some(jwks) = &self.inner.jwks else {
            return self.verify_at(headers, body, now);
        };
        let seconds = unix_seconds(now);
        // Only a request that parsed and is timely may cause a fetch: one
        // that verified, when the set is stale (a key removed since must
        // stop verifying), or one no key verified (a rotation, as far as
        // the refresh interval allows).
        let first = self.verify_at(headers, body, now);
        let no_key_matched = match &first {
            Ok(_) => false,
            Err(VerifyError::SignatureMismatch { .. }) => true,
            Err(_) => return first,
        };
        if jwks.refresh(no_key_matched, seconds).await {
            return self.verify_at(headers, body, now);
        }
        first
    }
}

impl Verifier {
    /// See [`Inner::mac`].
    #[cfg(feature = "http")]
    pub(crate) fn mac(&self, key_index: usize, message: &[u8]) -> Option<Vec<u8>> {
        self.inner.mac(key_index, message)
    }

    /// The index of the first HMAC secret valid now, on the verifier's
    /// clock: the one a handshake without a request to verify proves.
    #[cfg(feature = "http")]
    pub(crate) fn first_hmac(&self) -> Option<usize> {
        self.inner.first_hmac(self.inner.clock.now())
    }
}

impl Inner {
    fn check_time(&self, timestamp: i64, now: i64) -> Result<(), VerifyError> {
        if timestamp <= now {
            let age_secs = now.abs_diff(timestamp);
            if age_secs > self.past_tolerance {
                return Err(VerifyError::TimestampTooOld {
                    age_secs,
                    tolerance_secs: self.past_tolerance,
                });
            }
            return Ok(());
        }
        let ahead_secs = timestamp.abs_diff(now);
        if ahead_secs <= self.future_tolerance {
            return Ok(());
        }
        let window = self.past_tolerance.max(self.future_tolerance);
        if (timestamp / 1000).abs_diff(now) <= window {
            return Err(VerifyError::MalformedHeader {
                name: self.scheme.timestamp_header(),
                reason: Malformed::TimestampInMilliseconds,
            });
        }
        Err(VerifyError::TimestampInFuture {
            ahead_secs,
            tolerance_secs: self.future_tolerance,
        })
    }

    /// HMAC-SHA256 of `message` with the secret at `key_index` (the one
    /// a request verified with, [`Verified::key_index`], or the first one
    /// valid now): what a provider's handshake asks a receiver to prove it
    /// holds that secret with (Zoom's `encryptedToken`, X's
    /// `response_token`). `None` for an asymmetric key.
    #[cfg(feature = "http")]
    pub(crate) fn mac(&self, key_index: usize, message: &[u8]) -> Option<Vec<u8>> {
        #[cfg_attr(
            not(feature = "ed25519"),
            allow(clippy::infallible_destructuring_match)
        )]
        let keyed = match self.keys.get(key_index)? {
            Key::Hmac(keyed) => keyed,
            #[cfg(feature = "ed25519")]
            Key::Ed25519Public(_) | Key::Ed25519Secret(_) => return None,
            #[cfg(feature = "p256")]
            Key::EcdsaP256Public(_) => return None,
        };
        Some(keyed.tag(|sink| sink(message)).to_vec())
    }

    /// The index of the first HMAC secret valid at `now`.
    #[cfg(feature = "http")]
    pub(crate) fn first_hmac(&self, now: SystemTime) -> Option<usize> {
        let now = unix_seconds(now);
        (0..self.keys.len()).find(|index| {
            self.keys[*index].algorithm() == Algorithm::Hmac
                && self.validity[*index].contains_unix(now)
        })
    }

    /// Tries every accepted signature against every key of its algorithm:
    /// one HMAC per secret, and at most [`ASYMMETRIC_CHECKS_PER_KEY`]
    /// ed25519 or ECDSA P-256 checks per public key, pooled. Returns the index of the key that
    /// matched, or an error when no signature tried could even be decoded.
    fn find_match(
        &self,
        envelope: &Envelope<'_>,
        body: &[u8],
        now: i64,
    ) -> Result<Option<usize>, VerifyError> {
        let scheme = &self.scheme;
        let id = envelope.id.map(str::as_bytes);
        let timestamp = envelope.timestamp.map(|t| t.text);
        let covered = envelope.covered.as_deref();
        let mut buffer = [0u8; MAX_SIGNATURE_BYTES];
        let mut decoded_any = false;
        #[cfg(any(feature = "ed25519", feature = "p256"))]
        let message = std::cell::OnceCell::new();
        // Decodes each accepted signature of `algorithm` (at most `limit`)
        // and asks `matches` of it.
        let mut any = |algorithm, limit, matches: &mut dyn FnMut(&[u8]) -> bool| {
            for text in envelope.signatures(algorithm).take(limit) {
                let Ok(decoded) = scheme.encoding.decode(text, &mut buffer) else {
                    continue;
                };
                decoded_any = true;
                if matches(decoded) {
                    return true;
                }
            }
            false
        };
        // The signed content in one piece, for the asymmetric keys: built
        // once, for the first that needs it.
        #[cfg(any(feature = "ed25519", feature = "p256"))]
        let whole_message = || {
            message.get_or_init(|| {
                let mut whole = Vec::with_capacity(body.len() + 64);
                scheme.signed_content(id, timestamp, covered, body, |piece| {
                    whole.extend_from_slice(piece)
                });
                whole
            })
        };
        for (index, key) in self.keys.iter().enumerate() {
            if !self.validity[index].contains_unix(now) {
                continue;
            }
            // Irrefutable without the asymmetric features.
            #[allow(irrefutable_let_patterns)]
            if let Key::Hmac(keyed) = key {
                let tag =
                    keyed.tag(|sink| scheme.signed_content(id, timestamp, covered, body, sink));
                let matched = any(Algorithm::Hmac, usize::MAX, &mut |decoded| {
                    tag.matches(decoded)
                });
                if matched {
                    return Ok(Some(index));
                }
            }
        }
        #[cfg(any(feature = "ed25519", feature = "p256"))]
        {
            let fetched = self.fetched_keys(envelope);
            let asymmetric_keys = (0..self.keys.len())
                .filter(|&index| {
                    self.keys[index].algorithm() != Algorithm::Hmac
                        && self.validity[index].contains_unix(now)
                })
                .count()
                + fetched.len();
            let mut checks_left = ASYMMETRIC_CHECKS_PER_KEY * asymmetric_keys;
            for algorithm in [Algorithm::Ed25519, Algorithm::EcdsaP256] {
                // A fetched key counts after the configured ones.
                let keys: Vec<(usize, &Key)> = (0..self.keys.len())
                    .filter(|&index| {
                        self.keys[index].algorithm() == algorithm
                            && self.validity[index].contains_unix(now)
                    })
                    .map(|index| (index, &self.keys[index]))
                    .chain(
                        fetched
                            .iter()
                            .enumerate()
                            .filter(|(_, key)| key.algorithm() == algorithm)
                            .map(|(at, key)| (self.keys.len() + at, key)),
                    )
                    .collect();
                if keys.is_empty() {
                    // With a key set that holds none of these yet, the
                    // signatures are still read: a well-formed one is a
                    // mismatch (which may fetch the set), not bad input.
                    if self.fetches_keys(algorithm) {
                        any(algorithm, usize::MAX, &mut |_| false);
                    }
                    continue;
                }
                let mut matched = None;
                any(algorithm, usize::MAX, &mut |decoded| {
                    for &(index, key) in &keys {
                        if checks_left == 0 {
                            return true;
                        }
                        checks_left -= 1;
                        if asymmetric_match(key, whole_message(), decoded) {
                            matched = Some(index);
                            return true;
                        }
                    }
                    false
                });
                if matched.is_some() {
                    return Ok(matched);
                }
            }
        }
        if decoded_any {
            Ok(None)
        } else {
            Err(envelope::bad_encoding(scheme))
        }
    }
}

impl Inner {
    /// Whether keys of `algorithm` may come from the verifier's key set.
    #[cfg(any(feature = "ed25519", feature = "p256"))]
    fn fetches_keys(&self, algorithm: Algorithm) -> bool {
        #[cfg(feature = "jwks")]
        return self.jwks.is_some() && algorithm == Algorithm::Ed25519;
        #[cfg(not(feature = "jwks"))]
        {
            let _ = algorithm;
            false
        }
    }

    /// The keys fetched for `v1a` as last kept, when the request carries
    /// a `v1a` signature: none otherwise, so that other requests allocate
    /// nothing for them.
    #[cfg(any(feature = "ed25519", feature = "p256"))]
    fn fetched_keys(&self, envelope: &Envelope<'_>) -> Vec<Key> {
        #[cfg(feature = "jwks")]
        if let Some(jwks) = &self.jwks
            && envelope.signatures(Algorithm::Ed25519).next().is_some()
        {
            return jwks
                .cached_ed25519()
                .into_iter()
                .map(Key::Ed25519Public)
                .collect();
        }
        let _ = envelope;
        Vec::new()
    }
}

/// Whether `signature` (decoded) is `key`'s over `message`, for an
/// asymmetric key; `false` for an HMAC secret.
#[cfg(any(feature = "ed25519", feature = "p256"))]
fn asymmetric_match(key: &Key, message: &[u8], signature: &[u8]) -> bool {
    match key {
        #[cfg(feature = "ed25519")]
        Key::Ed25519Public(_) | Key::Ed25519Secret(_) => {
            let public = match key {
                Key::Ed25519Secret(secret) => secret.verifying_key(),
                Key::Ed25519Public(public) => *public,
                _ => return false,
            };
            ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|signature| public.verify_strict(message, &signature).is_ok())
        }
        #[cfg(feature = "p256")]
        Key::EcdsaP256Public(public) => {
            use p256::ecdsa::signature::Verifier as _;
            p256::ecdsa::Signature::from_der(signature)
                .is_ok_and(|signature| public.verify(message, &signature).is_ok())
        }
        Key::Hmac(_) => false,
    }
}
