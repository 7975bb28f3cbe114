//! [`VerifierBuilder`]: a verifier's secrets (with their validity
//! windows), tolerances, body limit and clock, checked when it is built.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::clock::{Clock, SystemClock};
use super::error::ConfigError;
use super::scheme::Scheme;
use super::secrets::{Algorithm, Key, SecretFormat};
use super::validity::Validity;
use super::verifier::{DEFAULT_MAX_BODY_LEN, DEFAULT_TOLERANCE, Inner, Verifier};

/// Builds a [`Verifier`]. Start with [`Verifier::builder`].
#[must_use]
pub struct VerifierBuilder {
    pub(super) scheme: Scheme,
    pub(super) keys: Vec<Key>,
    pub(super) validity: Vec<Validity>,
    pub(super) hint: Option<&'static str>,
    pub(super) past_tolerance: Duration,
    pub(super) future_tolerance: Duration,
    pub(super) check_timestamp: bool,
    pub(super) max_body_len: usize,
    pub(super) clock: Arc<dyn Clock>,
    #[cfg(feature = "jwks")]
    pub(super) jwks: Option<Arc<super::message::Jwks>>,
}

impl Verifier {
    /// Starts building a verifier for `scheme`.
    pub fn builder(scheme: Scheme) -> VerifierBuilder {
        VerifierBuilder {
            max_body_len: scheme.own_body_limit().unwrap_or(DEFAULT_MAX_BODY_LEN),
            scheme,
            keys: Vec::new(),
            validity: Vec::new(),
            hint: None,
            past_tolerance: DEFAULT_TOLERANCE,
            future_tolerance: DEFAULT_TOLERANCE,
            check_timestamp: true,
            clock: Arc::new(SystemClock),
            #[cfg(feature = "jwks")]
            jwks: None,
        }
    }
}

impl fmt::Debug for VerifierBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifierBuilder")
            .field("scheme", &self.scheme.name())
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl VerifierBuilder {
    /// Adds a secret in the scheme's text form: for Standard Webhooks and
    /// Svix `whsec_` + base64 (the prefix is optional) or a `whpk_` /
    /// `whsk_` ed25519 key; for the other providers the text itself.
    ///
    /// Add several to accept any of them while rotating secrets.
    pub fn with_secret(self, secret: &str) -> Result<Self, ConfigError> {
        self.with_secret_valid(secret, Validity::ALWAYS)
    }

    /// Adds a secret, as [`with_secret`](Self::with_secret) does, that is
    /// only tried while `validity` holds at the time of the check: give
    /// the old secret an end and the new one a start, overlapping, and
    /// the rotation needs no restart.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use hooklatch::verify::{Scheme, Signer, Validity, Verifier, VerifyError};
    ///
    /// let old = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    /// let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    /// let verifier = Verifier::builder(Scheme::standard_webhooks())
    ///     .with_secret_valid(old, Validity::until(hour_ago))?
    ///     .with_secret("whsec_dGhlIG5ldyBzZWNyZXQgZm9yIHRoZSB0ZXN0")?
    ///     .build()?;
    /// let headers = Signer::new(Scheme::standard_webhooks(), [old])?.sign("msg_1", SystemTime::now(), b"{}")?;
    /// assert!(matches!(verifier.verify(&headers, b"{}"), Err(VerifyError::SignatureMismatch { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_secret_valid(
        mut self,
        secret: &str,
        validity: Validity,
    ) -> Result<Self, ConfigError> {
        if validity.is_empty() {
            return Err(ConfigError::EmptyValidity);
        }
        if let SecretFormat::Raw {
            expected_prefix: Some(prefix),
        } = self.scheme.secret_format
            && !secret.starts_with(prefix)
        {
            self.hint = Some(
                "this provider's secrets start with `whsec_` and are used whole, \
                 prefix included; one configured secret has no such prefix",
            );
        }
        let key = Key::parse(secret, self.scheme.secret_format)?;
        if key.algorithm() == Algorithm::EcdsaP256 && !self.scheme.has_ecdsa_p256() {
            return Err(ConfigError::AsymmetricUnsupported {
                prefix: "ECDSA P-256",
                needs: "SendGrid's scheme",
            });
        }
        if key.algorithm() == Algorithm::Ed25519 && !self.scheme.has_ed25519() {
            return Err(ConfigError::AsymmetricUnsupported {
                prefix: if key.can_sign() { "whsk_" } else { "whpk_" },
                needs: "a scheme with `v1a` signatures (Standard Webhooks or Svix)",
            });
        }
        self.keys.push(key);
        self.validity.push(validity);
        Ok(self)
    }

    /// Adds a secret given as raw key bytes, used as they are.
    pub fn with_secret_bytes(mut self, secret: &[u8]) -> Result<Self, ConfigError> {
        if self.scheme.secret_format == SecretFormat::Whsec && secret.starts_with(b"whsec_") {
            self.hint = Some(
                "a `whsec_` secret was given as raw bytes; give it as text so that \
                 its base64 is decoded",
            );
        }
        self.keys
            .push(Key::hmac_for(self.scheme.secret_format, secret)?);
        self.validity.push(Validity::ALWAYS);
        Ok(self)
    }

    /// Sets both the past and the future tolerance. Defaults to 5 minutes each.
    pub fn with_tolerance(self, tolerance: Duration) -> Self {
        self.with_past_tolerance(tolerance)
            .with_future_tolerance(tolerance)
    }

    /// How old a timestamp may be. Defaults to 5 minutes.
    pub fn with_past_tolerance(mut self, tolerance: Duration) -> Self {
        self.past_tolerance = tolerance;
        self
    }

    /// How far in the future a timestamp may be (clock skew). Defaults to
    /// 5 minutes.
    pub fn with_future_tolerance(mut self, tolerance: Duration) -> Self {
        self.future_tolerance = tolerance;
        self
    }

    /// The largest body accepted, in bytes. Defaults to 1 MiB (64 KiB for
    /// Twilio, whose forms are small). The same
    /// name as the receivers' and adapters' `with_body_limit`, which
    /// default to this.
    pub fn with_body_limit(mut self, limit: usize) -> Self {
        self.max_body_len = limit;
        self
    }

    /// Uses `clock` for [`Verifier::verify`]. Defaults to [`SystemClock`](super::SystemClock).
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Accepts any timestamp, however old. This removes replay protection:
    /// use it only to check old, captured requests by hand.
    pub fn insecure_skip_timestamp_check(mut self) -> Self {
        self.check_timestamp = false;
        self
    }

    /// Also trusts the Ed25519 public keys `jwks` publishes, for Standard
    /// Webhooks' and Svix's `v1a` signatures (which name no key: each is
    /// tried against every key, as secrets in a rotation are). The set is
    /// fetched by [`Verifier::verify_fetching`] (and the adapters' receivers)
    /// when stale, and when no key verifies a signature at most once per
    /// refresh interval; [`Verifier::verify`] uses the keys as last
    /// fetched. A verifier with a key set needs no secret of its own.
    ///
    /// Fails for a scheme without `v1a` signatures.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use hooklatch::verify::message::Jwks;
    /// use hooklatch::verify::{Scheme, Verifier};
    ///
    /// # async fn run(headers: http::HeaderMap, body: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
    /// let keys = Arc::new(Jwks::new("https://sender.example/.well-known/jwks.json")?);
    /// let verifier = Verifier::builder(Scheme::standard_webhooks()).with_jwks(keys)?.build()?;
    /// let verified = verifier.verify_fetching(&headers, body).await?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "jwks")]
    pub fn with_jwks(mut self, jwks: Arc<super::message::Jwks>) -> Result<Self, ConfigError> {
        if !self.scheme.has_ed25519() {
            return Err(ConfigError::AsymmetricUnsupported {
                prefix: "jwks",
                needs: "a scheme with `v1a` signatures (Standard Webhooks, Svix)",
            });
        }
        self.jwks = Some(jwks);
        Ok(self)
    }

    /// Builds the verifier. Fails without secrets or with a template that
    /// uses a header the scheme does not read.
    pub fn build(self) -> Result<Verifier, ConfigError> {
        #[cfg(feature = "jwks")]
        let fetched = self.jwks.is_some();
        #[cfg(not(feature = "jwks"))]
        let fetched = false;
        if self.keys.is_empty() && !fetched {
            return Err(ConfigError::NoSecrets);
        }
        self.scheme.validate()?;
        let accepts = |algorithm| self.keys.iter().any(|k| k.algorithm() == algorithm);
        Ok(Verifier {
            inner: Arc::new(Inner {
                accepts_hmac: accepts(Algorithm::Hmac),
                accepts_ed25519: accepts(Algorithm::Ed25519) || fetched,
                accepts_ecdsa_p256: accepts(Algorithm::EcdsaP256),
                id_delimiters: self.scheme.id_delimiters(),
                scheme: self.scheme,
                keys: self.keys,
                validity: self.validity,
                past_tolerance: self.past_tolerance.as_secs(),
                future_tolerance: self.future_tolerance.as_secs(),
                check_timestamp: self.check_timestamp,
                max_body_len: self.max_body_len,
                hint: self.hint,
                clock: self.clock,
                #[cfg(feature = "jwks")]
                jwks: self.jwks,
            }),
        })
    }
}
