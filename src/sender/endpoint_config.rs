//! [`EndpointConfig`]: an endpoint as data (URL, scheme, secrets with their
//! windows, policy), the form kept in an outbox's
//! [endpoint registry](super::outbox::EndpointRegistry) so that every dispatcher on
//! the store sends with the same settings.

use std::fmt;

use super::rules::Policy;
use crate::verify::{ConfigError, Scheme, Signer, Validity};

/// Why an [`EndpointConfig`] cannot be built or read back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointConfigError {
    /// The scheme is not one [`Scheme::by_name`] knows. A custom scheme
    /// cannot be stored: add such an endpoint with
    /// [`Dispatcher::add_endpoint`](super::Dispatcher::add_endpoint), in
    /// each process.
    #[error(
        "unknown scheme `{0}`: use standard, svix, stripe, github, shopify or slack (a custom scheme can only be added per process, with Dispatcher::add_endpoint)"
    )]
    UnknownScheme(String),
    /// A secret does not fit the scheme, or there is none.
    #[error("bad secret: {0}")]
    Secret(#[from] ConfigError),
    /// The stored text is not an endpoint's configuration.
    #[error("the stored endpoint is not valid JSON of an endpoint's configuration: {0}")]
    Json(#[from] serde_json::Error),
    /// The message signature's key, algorithm or tag cannot sign
    /// ([`EndpointConfig::with_message_signer`]).
    #[error("bad message signing key: {0}")]
    MessageKey(String),
}

/// One secret of an [`EndpointConfig`] and when it signs.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct StoredSecret {
    secret: String,
    #[serde(default)]
    valid: Validity,
}

/// The RFC 9421 signer of an [`EndpointConfig`], as stored.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct StoredMessageSigner {
    key_id: String,
    /// `hmac-sha256` or `ed25519`.
    algorithm: String,
    /// The HMAC secret or the Ed25519 seed, in base64.
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tag: Option<String>,
}

/// An endpoint as data: where to POST, the scheme and secrets to sign with
/// (each with its [`Validity`], for rotations), and the [`Policy`]. Saved
/// with [`Dispatcher::save_endpoint`](super::Dispatcher::save_endpoint), it
/// is kept in the store, as JSON, and every dispatcher on the store sends
/// with it.
///
/// The secrets are stored as given, in plain text: whoever can read the
/// store can sign as you. `Debug` leaves them out.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use hooklatch::sender::{EndpointConfig, Policy};
/// use hooklatch::verify::Validity;
///
/// let switch = SystemTime::now() + Duration::from_secs(3600);
/// let config = EndpointConfig::new(
///     "https://example.com/hooks",
///     "standard",
///     ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
/// )?
/// .with_secret_valid("whsec_dGhlIG5ldyBzZWNyZXQgZm9yIHRoZSB0ZXN0", Validity::from(switch))?
/// .with_policy(Policy::svix().with_concurrency(4));
///
/// let stored = config.to_json();
/// let read = EndpointConfig::from_json(&stored)?;
/// assert_eq!(read.url(), "https://example.com/hooks");
/// assert_eq!(read.policy().concurrency(), 4);
/// assert!(!format!("{read:?}").contains("whsec_"));
/// # Ok::<(), hooklatch::sender::EndpointConfigError>(())
/// ```
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct EndpointConfig {
    url: String,
    scheme: String,
    secrets: Vec<StoredSecret>,
    policy: Policy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message_signer: Option<StoredMessageSigner>,
}

impl fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("url", &self.url)
            .field("scheme", &self.scheme)
            .field("secrets", &self.secrets.len())
            .field("policy", &self.policy)
            .field(
                "message_signer",
                &self.message_signer.as_ref().map(|signer| &signer.key_id),
            )
            .finish()
    }
}

impl EndpointConfig {
    /// An endpoint at `url` signing with `secrets` (always valid) in the
    /// scheme named `scheme` (as [`Scheme::by_name`] names it: `standard`,
    /// `svix`, `stripe`, `github`, `shopify` or `slack`), under
    /// [`Policy::svix`] until [`with_policy`](Self::with_policy).
    pub fn new<S: AsRef<str>>(
        url: &str,
        scheme: &str,
        secrets: impl IntoIterator<Item = S>,
    ) -> Result<Self, EndpointConfigError> {
        let config = Self {
            url: url.to_owned(),
            scheme: scheme.to_owned(),
            secrets: secrets
                .into_iter()
                .map(|secret| StoredSecret {
                    secret: secret.as_ref().to_owned(),
                    valid: Validity::ALWAYS,
                })
                .collect(),
            policy: Policy::svix(),
            message_signer: None,
        };
        config.signer()?;
        Ok(config)
    }

    /// Adds `secret`, signing only within `valid`.
    pub fn with_secret_valid(
        mut self,
        secret: &str,
        valid: Validity,
    ) -> Result<Self, EndpointConfigError> {
        self.secrets.push(StoredSecret {
            secret: secret.to_owned(),
            valid,
        });
        self.signer()?;
        Ok(self)
    }

    /// Signs every attempt with an RFC 9421 message signature too, as
    /// [`Endpoint::with_message_signer`](super::Endpoint::with_message_signer)
    /// does: under `key_id`, with `algorithm` `hmac-sha256` (a shared
    /// secret) or `ed25519` (a 32-byte seed), and `tag` if given. Stored
    /// with the secrets, in plain text (base64), and used by every
    /// dispatcher on the store (feature `http-signatures` to sign).
    ///
    /// ```
    /// use hooklatch::sender::EndpointConfig;
    ///
    /// let config = EndpointConfig::new("https://example.com/hooks", "standard", ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])?
    ///     .with_message_signer("partner-7", "hmac-sha256", b"a shared secret of 32 bytes or more", Some("orders"))?;
    /// let read = EndpointConfig::from_json(&config.to_json())?;
    /// assert_eq!(read.message_key_id(), Some("partner-7"));
    /// # Ok::<(), hooklatch::sender::EndpointConfigError>(())
    /// ```
    pub fn with_message_signer(
        mut self,
        key_id: &str,
        algorithm: &str,
        key: &[u8],
        tag: Option<&str>,
    ) -> Result<Self, EndpointConfigError> {
        use base64::Engine as _;
        self.message_signer = Some(StoredMessageSigner {
            key_id: key_id.to_owned(),
            algorithm: algorithm.to_owned(),
            key: base64::engine::general_purpose::STANDARD.encode(key),
            tag: tag.map(str::to_owned),
        });
        self.check_message_signer()?;
        Ok(self)
    }

    /// The `keyid` of its message signer, if it has one.
    pub fn message_key_id(&self) -> Option<&str> {
        self.message_signer
            .as_ref()
            .map(|signer| signer.key_id.as_str())
    }

    /// Sends under `policy`. Its clock is not stored: a dispatcher that
    /// reads the endpoint from the store uses the system clock.
    #[must_use]
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The scheme's name.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// How many secrets it signs with (in their windows).
    pub fn secret_count(&self) -> usize {
        self.secrets.len()
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The signer for its scheme and secrets.
    pub fn signer(&self) -> Result<Signer, EndpointConfigError> {
        let scheme = Scheme::by_name(&self.scheme)
            .ok_or_else(|| EndpointConfigError::UnknownScheme(self.scheme.clone()))?;
        let secrets = self
            .secrets
            .iter()
            .map(|stored| (stored.secret.as_str(), stored.valid));
        Ok(Signer::with_windows(scheme, secrets)?)
    }

    /// The endpoint it describes: its URL, the signer for its scheme and
    /// secrets, and its message signer if it has one (which a build
    /// without the feature `http-signatures` refuses rather than send
    /// unsigned).
    pub fn endpoint(&self) -> Result<super::Endpoint, EndpointConfigError> {
        let endpoint = super::Endpoint::new(&self.url, self.signer()?);
        #[cfg(feature = "http-signatures")]
        if let Some(signer) = self.message_signer()? {
            return Ok(endpoint.with_message_signer(signer));
        }
        // A receiver that requires the signature would refuse every
        // attempt sent without it: leave the endpoint out instead.
        #[cfg(not(feature = "http-signatures"))]
        if self.message_signer.is_some() {
            return Err(EndpointConfigError::MessageKey(
                "the endpoint signs with a message signature, which this build cannot make \
                 (feature `http-signatures`)"
                    .to_owned(),
            ));
        }
        Ok(endpoint)
    }

    /// The stored message signer made into one.
    #[cfg(feature = "http-signatures")]
    fn message_signer(
        &self,
    ) -> Result<Option<crate::verify::message::MessageSigner>, EndpointConfigError> {
        use crate::verify::message::MessageSigner;
        use base64::Engine as _;
        let Some(stored) = &self.message_signer else {
            return Ok(None);
        };
        let bad = |reason: String| EndpointConfigError::MessageKey(reason);
        let key = zeroize::Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(&stored.key)
                .map_err(|_| bad(format!("the key of `{}` is not base64", stored.key_id)))?,
        );
        let signer = match stored.algorithm.as_str() {
            "hmac-sha256" => MessageSigner::hmac_sha256(&stored.key_id, &key),
            #[cfg(feature = "ed25519")]
            "ed25519" => MessageSigner::ed25519(&stored.key_id, &key),
            other => {
                return Err(bad(format!(
                    "`{other}` is not an algorithm this build signs with (hmac-sha256{})",
                    if cfg!(feature = "ed25519") {
                        ", ed25519"
                    } else {
                        "; ed25519 with the feature `ed25519`"
                    }
                )));
            }
        }
        .map_err(|error| bad(error.to_string()))?;
        Ok(Some(match &stored.tag {
            Some(tag) => signer.with_tag(tag),
            None => signer,
        }))
    }

    /// Checks the stored message signer can sign; without the feature
    /// `http-signatures`, that it names a known algorithm.
    fn check_message_signer(&self) -> Result<(), EndpointConfigError> {
        #[cfg(feature = "http-signatures")]
        self.message_signer()?;
        #[cfg(not(feature = "http-signatures"))]
        if let Some(stored) = &self.message_signer
            && !matches!(stored.algorithm.as_str(), "hmac-sha256" | "ed25519")
        {
            return Err(EndpointConfigError::MessageKey(format!(
                "`{}` is not hmac-sha256 or ed25519",
                stored.algorithm
            )));
        }
        Ok(())
    }

    /// The JSON kept in the store.
    pub fn to_json(&self) -> String {
        // Every field is a string, a number, a list or a map of them.
        serde_json::to_string(self).expect("an endpoint's configuration serializes")
    }

    /// Reads a configuration written by [`to_json`](Self::to_json),
    /// checking its scheme and secrets as [`new`](Self::new) does.
    pub fn from_json(json: &str) -> Result<Self, EndpointConfigError> {
        let mut config: Self = serde_json::from_str(json)?;
        config.policy = config.policy.normalized();
        config.signer()?;
        config.check_message_signer()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::sender::rules::{Breaker, Jitter, Schedule};

    #[test]
    fn every_policy_setting_survives_the_store() {
        let policy = Policy::new(Schedule::Exponential {
            base: Duration::from_millis(1500),
            cap: Duration::from_secs(3600),
            attempts: 7,
            jitter: Jitter::Proportional {
                below: 0.0,
                above: 0.1,
            },
        })
        .with_give_up_on(&[400, 422])
        .with_attempt_timeout(Duration::from_secs(9))
        .with_connect_timeout(Duration::from_secs(2))
        .with_breaker(
            Breaker::new()
                .with_failure_threshold(20)
                .with_cool_down(Duration::from_secs(60))
                .with_probes(2),
        )
        .with_concurrency(3)
        .with_disable_after(None)
        .with_excerpt_len(512)
        .with_pause_on_failure(true)
        .with_body_limit(Some(256 * 1024))
        .with_replay_on_enable(true)
        .with_test_prefix(Some("test_"))
        .with_idempotency_window(Some(Duration::from_secs(24 * 3600)))
        .with_retention(
            crate::sender::outbox::Retention::KEEP_ALL
                .with_dead(Some(Duration::from_secs(30 * 24 * 3600)))
                .with_pending(Some(Duration::from_secs(14 * 24 * 3600))),
        )
        .with_notices(Some(crate::sender::rules::Notices::new(
            Some(Duration::from_secs(3600)),
            Duration::from_secs(3600),
        )))
        .with_answers(
            crate::sender::rules::Answers::default()
                .with_status(410, crate::sender::rules::Handling::Retry),
        );
        let config = EndpointConfig::new(
            "https://example.com/a",
            "svix",
            ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        )
        .unwrap()
        .with_policy(policy.clone());
        let read = EndpointConfig::from_json(&config.to_json()).unwrap();
        assert_eq!(format!("{:?}", read.policy()), format!("{policy:?}"));
        assert_eq!(read.to_json(), config.to_json());
        assert_eq!(
            (read.url(), read.scheme(), read.secret_count()),
            ("https://example.com/a", "svix", 1)
        );
    }

    #[test]
    fn secret_windows_survive_the_store_and_sign_as_before() {
        let switch = std::time::UNIX_EPOCH + Duration::from_secs(1_900_000_000);
        let config = EndpointConfig::new(
            "https://e.example",
            "standard",
            ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        )
        .unwrap()
        .with_secret_valid(
            "whsec_dGhlIG5ldyBzZWNyZXQgZm9yIHRoZSB0ZXN0",
            Validity::from(switch),
        )
        .unwrap();
        let read = EndpointConfig::from_json(&config.to_json()).unwrap();
        let signatures = |config: &EndpointConfig, at| {
            let headers = config.signer().unwrap().sign("msg_1", at, b"{}").unwrap();
            headers
                .get("webhook-signature")
                .unwrap_or_default()
                .to_owned()
        };
        for at in [switch - Duration::from_secs(1), switch] {
            assert_eq!(signatures(&read, at), signatures(&config, at));
        }
        assert_eq!(signatures(&read, switch).split(' ').count(), 2);
    }

    #[test]
    fn a_policy_stored_before_keys_and_retention_reads_with_neither() {
        let json = EndpointConfig::new(
            "https://e.example",
            "standard",
            ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        )
        .unwrap()
        .to_json();
        let retention = r#","retention":{"delivered":null,"gone":null,"dead":null,"pending":null}"#;
        let before = json
            .replace(r#","idempotency_window":null"#, "")
            .replace(retention, "");
        assert!(!before.contains("retention"), "{before}");
        let read = EndpointConfig::from_json(&before).unwrap();
        assert_eq!(read.policy().idempotency_window(), None);
        assert_eq!(
            *read.policy().retention(),
            crate::sender::outbox::Retention::KEEP_ALL
        );
    }

    #[test]
    fn a_stored_policy_gets_the_limits_the_builders_enforce() {
        let json = EndpointConfig::new(
            "https://e.example",
            "standard",
            ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        )
        .unwrap()
        .to_json()
        .replace("\"concurrency\":10", "\"concurrency\":0");
        assert!(json.contains("\"concurrency\":0"), "{json}");
        assert_eq!(
            EndpointConfig::from_json(&json)
                .unwrap()
                .policy()
                .concurrency(),
            1
        );
    }

    #[test]
    fn unknown_schemes_bad_secrets_and_bad_json_are_typed_errors() {
        assert!(matches!(
            EndpointConfig::new("https://e.example", "mine", ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]),
            Err(EndpointConfigError::UnknownScheme(name)) if name == "mine"
        ));
        assert!(matches!(
            EndpointConfig::new("https://e.example", "standard", ["whsec_!!"]),
            Err(EndpointConfigError::Secret(_))
        ));
        assert!(matches!(
            EndpointConfig::new("https://e.example", "standard", Vec::<&str>::new()),
            Err(EndpointConfigError::Secret(ConfigError::NoSecrets))
        ));
        assert!(matches!(
            EndpointConfig::from_json("{\"url\": 7}"),
            Err(EndpointConfigError::Json(_))
        ));
    }
}
