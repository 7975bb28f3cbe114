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
}

/// One secret of an [`EndpointConfig`] and when it signs.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct StoredSecret {
    secret: String,
    #[serde(default)]
    valid: Validity,
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
}

impl fmt::Debug for EndpointConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointConfig")
            .field("url", &self.url)
            .field("scheme", &self.scheme)
            .field("secrets", &self.secrets.len())
            .field("policy", &self.policy)
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
