//! The [`Signer`]: makes the headers a sender attaches to a webhook.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use super::clock::{rfc3339_nanos, unix_seconds};
use super::envelope::{MAX_ID_LEN, MAX_SIGNATURES};
use super::error::{ConfigError, Malformed, VerifyError};
use super::headers::{HeaderKey, HeaderLookup, Headers};
use super::scheme::{CoveredHeaders, Format, Scheme, TimestampFormat, TimestampSource};
use super::secrets::{Algorithm, Key};
use super::validity::Validity;

/// Signs webhooks for one scheme with one or more secrets.
///
/// During a rotation every secret signs (for schemes whose header carries
/// several signatures; single-signature schemes such as GitHub's use the
/// first secret). `whpk_` public keys are skipped: they only verify.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use hooklatch::verify::{Scheme, Signer};
///
/// let signer = Signer::new(
///     Scheme::standard_webhooks(),
///     ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
/// )?;
/// let at = UNIX_EPOCH + Duration::from_secs(1_614_265_330);
/// let headers = signer.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", at, br#"{"test": 2432232314}"#)?;
/// assert_eq!(
///     headers.get("webhook-signature"),
///     Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Signer {
    scheme: Scheme,
    keys: Arc<[(Key, Validity)]>,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("scheme", &self.scheme.name())
            .field("keys", &self.keys)
            .finish()
    }
}

impl Signer {
    /// A signer for `scheme` with `secrets` in the scheme's text form (see
    /// [`VerifierBuilder::with_secret`](super::VerifierBuilder::with_secret)).
    pub fn new<S: AsRef<str>>(
        scheme: Scheme,
        secrets: impl IntoIterator<Item = S>,
    ) -> Result<Self, ConfigError> {
        Self::with_windows(
            scheme,
            secrets.into_iter().map(|secret| (secret, Validity::ALWAYS)),
        )
    }

    /// Signs with each secret while its window holds: at any signing time,
    /// with every secret valid then (in a scheme that carries several
    /// signatures; otherwise the first valid), so a rotation can overlap
    /// and change over without a restart. Signing when none is valid fails
    /// with [`VerifyError::NoSecretValid`].
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use hooklatch::verify::{Scheme, Signer, Validity};
    ///
    /// let switch = SystemTime::now();
    /// let signer = Signer::with_windows(
    ///     Scheme::standard_webhooks(),
    ///     [
    ///         ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Validity::until(switch + Duration::from_secs(60))),
    ///         ("whsec_dGhlIG5ldyBzZWNyZXQgZm9yIHRoZSB0ZXN0", Validity::from(switch)),
    ///     ],
    /// )?;
    /// let during = signer.sign("msg_1", switch, b"{}")?;
    /// let signatures = during.get("webhook-signature").unwrap_or_default();
    /// assert_eq!(signatures.split(' ').count(), 2);
    /// let after = signer.sign("msg_1", switch + Duration::from_secs(120), b"{}")?;
    /// assert_eq!(after.get("webhook-signature").unwrap_or_default().split(' ').count(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_windows<S: AsRef<str>>(
        scheme: Scheme,
        secrets: impl IntoIterator<Item = (S, Validity)>,
    ) -> Result<Self, ConfigError> {
        let keys = secrets
            .into_iter()
            .map(|(secret, validity)| {
                if validity.is_empty() {
                    return Err(ConfigError::EmptyValidity);
                }
                Ok((Key::parse(secret.as_ref(), scheme.secret_format)?, validity))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_keys(scheme, keys)
    }

    /// A signer for `scheme` with one secret given as raw key bytes.
    pub fn from_secret_bytes(scheme: Scheme, secret: &[u8]) -> Result<Self, ConfigError> {
        let key = Key::hmac_for(scheme.secret_format, secret)?;
        Self::from_keys(scheme, vec![(key, Validity::ALWAYS)])
    }

    fn from_keys(scheme: Scheme, keys: Vec<(Key, Validity)>) -> Result<Self, ConfigError> {
        scheme.validate()?;
        if keys.is_empty() {
            return Err(ConfigError::NoSecrets);
        }
        if keys.iter().any(|(key, _)| {
            (key.algorithm() == Algorithm::Ed25519 && !scheme.has_ed25519())
                || (key.algorithm() == Algorithm::EcdsaP256 && !scheme.has_ecdsa_p256())
        }) {
            return Err(ConfigError::AsymmetricUnsupported {
                prefix: "whsk_",
                needs: "a scheme with `v1a` signatures (Standard Webhooks or Svix)",
            });
        }
        let signing: Vec<(Key, Validity)> =
            keys.into_iter().filter(|(key, _)| key.can_sign()).collect();
        if signing.is_empty() {
            return Err(ConfigError::NoSigningKey);
        }
        // A header with more signatures than verifiers examine would be
        // refused by every receiver (found by fuzzing).
        if scheme.carries_several() && signing.len() > MAX_SIGNATURES {
            return Err(ConfigError::TooManySecrets {
                max: MAX_SIGNATURES,
            });
        }
        Ok(Self {
            scheme,
            keys: signing.into(),
        })
    }

    /// The scheme this signer writes.
    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// Whether `id` can be signed: what [`sign`](Self::sign) checks of it
    /// first, so that a sender refuses an id before storing it.
    #[cfg(feature = "sender")]
    pub(crate) fn check_id(&self, id: &str) -> Result<(), VerifyError> {
        match self.scheme.id_header() {
            Some(header) => check_id(header, id, &self.scheme),
            None => Ok(()),
        }
    }

    /// Signs `body` as event `id` at time `at` and returns the headers to
    /// send. `id` must be 1 to 256 visible ASCII characters, without the
    /// characters that separate a signed id in the scheme's content (`.`
    /// for Standard Webhooks); schemes without an id header ignore it.
    pub fn sign(
        &self,
        id: &str,
        at: SystemTime,
        body: &[u8],
    ) -> Result<SignedHeaders, VerifyError> {
        if self.scheme.id_header().is_some() {
            check_id(
                self.scheme.id_header().unwrap_or_default(),
                id,
                &self.scheme,
            )?;
        }
        let timestamp = match self.scheme.timestamp_format {
            TimestampFormat::UnixSeconds => unix_seconds(at).to_string(),
            TimestampFormat::Rfc3339 => {
                rfc3339_nanos(at).ok_or_else(|| VerifyError::MalformedHeader {
                    name: self.scheme.timestamp_header(),
                    reason: Malformed::TimestampOutOfRange,
                })?
            }
        };
        let rebuilt = match self.scheme.rebuilt_contents(body) {
            Some(contents) => contents?.into_iter().next(),
            None => None,
        };
        let body = rebuilt.as_deref().unwrap_or(body);
        let id_bytes = Some(id.as_bytes());
        let timestamp_bytes = Some(timestamp.as_bytes());
        // Hook0's: the id header is the one covered header.
        let covered = match (self.scheme.covered(), &self.scheme.id_header) {
            (Some(_), Some(name)) => Some(CoveredHeaders::new(
                name.as_str().as_bytes(),
                &[id.as_bytes()],
            )),
            _ => None,
        };
        let covered = covered.as_ref();
        let how_many = if self.scheme.carries_several() {
            self.keys.len()
        } else {
            1
        };
        let now = unix_seconds(at);
        let signatures: Vec<(Algorithm, Vec<u8>)> = self
            .keys
            .iter()
            .filter(|(_, validity)| validity.contains_unix(now))
            .take(how_many)
            .map(|(key, _)| match key {
                Key::Hmac(keyed) => {
                    let tag = keyed.tag(|sink| {
                        self.scheme
                            .signed_content(id_bytes, timestamp_bytes, covered, body, sink)
                    });
                    (Algorithm::Hmac, tag.to_vec())
                }
                #[cfg(feature = "ed25519")]
                Key::Ed25519Secret(secret) => {
                    use ed25519_dalek::Signer as _;
                    let mut message = Vec::with_capacity(body.len() + 64);
                    self.scheme
                        .signed_content(id_bytes, timestamp_bytes, covered, body, |piece| {
                            message.extend_from_slice(piece)
                        });
                    (
                        Algorithm::Ed25519,
                        secret.sign(&message).to_bytes().to_vec(),
                    )
                }
                #[cfg(feature = "ed25519")]
                Key::Ed25519Public(_) => unreachable!("public keys are filtered out in from_keys"),
                #[cfg(feature = "p256")]
                Key::EcdsaP256Public(_) => {
                    unreachable!("public keys are filtered out in from_keys")
                }
            })
            .collect();
        if signatures.is_empty() {
            return Err(VerifyError::NoSecretValid);
        }
        Ok(SignedHeaders {
            headers: write_headers(&self.scheme, id, &timestamp, &signatures),
        })
    }
}

/// The headers that carry `signatures` (algorithm and raw bytes) in
/// `scheme`'s format.
fn write_headers(
    scheme: &Scheme,
    id: &str,
    timestamp: &str,
    signatures: &[(Algorithm, Vec<u8>)],
) -> Vec<(Cow<'static, str>, String)> {
    let mut headers = Vec::with_capacity(3);
    if let Some(name) = &scheme.id_header {
        headers.push((name.to_cow(), id.to_owned()));
    }
    if let TimestampSource::Header(name) = &scheme.timestamp {
        headers.push((name.to_cow(), timestamp.to_owned()));
    }
    let encoding = scheme.encoding;
    let value =
        match &scheme.format {
            Format::Versioned => signatures
                .iter()
                .map(|(algorithm, bytes)| {
                    let label = match algorithm {
                        Algorithm::Hmac => "v1",
                        Algorithm::Ed25519 => "v1a",
                        Algorithm::EcdsaP256 => unreachable!("ECDSA keys only verify"),
                    };
                    format!("{label},{}", encoding.encode(bytes))
                })
                .collect::<Vec<_>>()
                .join(" "),
            Format::Fields(fields) => {
                std::iter::once(format!("{}={timestamp}", fields.timestamp))
                    .chain(fields.covered.zip(scheme.id_header.as_ref()).map(
                        |(covered, id_header)| format!("{}={}", covered.names, id_header.as_str()),
                    ))
                    .chain(signatures.iter().map(|(_, bytes)| {
                        format!("{}={}", fields.signature, encoding.encode(bytes))
                    }))
                    .collect::<Vec<_>>()
                    .join(if fields.separator == b';' { ";" } else { "," })
            }
            Format::Listed { prefix } => format!(
                "{prefix}{}",
                signatures
                    .iter()
                    .map(|(_, bytes)| encoding.encode(bytes))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Format::Ed25519 | Format::EcdsaP256 => signatures
                .first()
                .map(|(_, bytes)| encoding.encode(bytes))
                .unwrap_or_default(),
            Format::Single { prefix } => signatures
                .first()
                .map(|(_, bytes)| format!("{prefix}{}", encoding.encode(bytes)))
                .unwrap_or_default(),
        };
    headers.push((scheme.signature_header.to_cow(), value));
    headers
}

fn check_id(header: &str, id: &str, scheme: &Scheme) -> Result<(), VerifyError> {
    let reason = if id.is_empty() {
        Malformed::Empty
    } else if id.len() > MAX_ID_LEN {
        Malformed::TooLong { max: MAX_ID_LEN }
    } else if !id.bytes().all(|b| b.is_ascii_graphic()) {
        Malformed::NotVisibleAscii
    } else if (scheme.signs_id() && scheme.id_holds_delimiter(id))
        || (scheme.covered().is_some() && id.contains('.'))
    {
        Malformed::IdContainsDelimiter
    } else {
        return Ok(());
    };
    Err(VerifyError::MalformedHeader {
        name: Cow::Owned(header.to_owned()),
        reason,
    })
}

/// The headers a [`Signer`] made, in the order to send them.
///
/// They implement [`Headers`], so a verifier can check them directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    headers: Vec<(Cow<'static, str>, String)>,
}

impl SignedHeaders {
    /// Each header as `(name, value)`; names are lowercase.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.headers
            .iter()
            .map(|(name, value)| (name.as_ref(), value.as_str()))
    }

    /// The value of header `name` (lowercase).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value)
    }

    /// The headers as an [`http::HeaderMap`].
    #[cfg(feature = "http")]
    pub fn to_header_map(&self) -> http::HeaderMap {
        self.iter()
            .filter_map(|(name, value)| {
                Some((
                    http::HeaderName::from_bytes(name.as_bytes()).ok()?,
                    http::HeaderValue::from_str(value).ok()?,
                ))
            })
            .collect()
    }
}

impl Headers for SignedHeaders {
    fn lookup(&self, name: &HeaderKey) -> HeaderLookup<'_> {
        self.headers.as_slice().lookup(name)
    }
}
