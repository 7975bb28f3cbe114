//! Public keys found, not typed in: a JSON Web Key Set fetched from a URL
//! the receiver configures.

use std::sync::Mutex;
use std::time::Duration;

use super::MessageKey;

/// The largest key set read, in bytes.
const MAX_SET_BYTES: usize = 64 * 1024;

/// The public keys a JWKS URL publishes (Ed25519 as `OKP`, P-256 as
/// `EC`), fetched and kept for a [`MessageVerifier`](super::MessageVerifier).
///
/// A set is fetched on first use and kept as long as the server's
/// `Cache-Control: max-age` says, within a floor and a ceiling (defaults 1
/// minute and 1 day, 5 minutes when the server says nothing). A signature
/// naming a `keyid` the set lacks (a key the sender has just rotated in)
/// fetches it again, but at most once per refresh interval (default 1
/// minute), so a stranger sending made-up `keyid`s cannot make it fetch
/// more. While the URL is down or serves something that is not a key set,
/// the last good set keeps serving. A key configured on the verifier is
/// never replaced by a fetched one of the same `keyid`.
///
/// ```no_run
/// use std::sync::Arc;
/// use hooklatch::verify::message::{Jwks, MessageRequest, MessageVerifier};
///
/// # async fn run(request: MessageRequest<'_>, body: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
/// let keys = Arc::new(Jwks::new("https://partner.example/.well-known/jwks.json")?);
/// let verifier = MessageVerifier::builder()
///     .with_jwks(keys)
///     .with_authority("hooks.example.com")
///     .build()?;
/// let verified = verifier.verify_fetching(&request, body).await?;
/// # Ok(())
/// # }
/// ```
pub struct Jwks {
    url: String,
    client: reqwest::Client,
    floor: Duration,
    ceiling: Duration,
    refresh_interval: Duration,
    state: Mutex<State>,
    /// Held while a fetch runs, so that callers arriving meanwhile wait
    /// for it rather than fetch again.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    keys: Vec<MessageKey>,
    /// Until when the set is fresh, in seconds since the epoch.
    fresh_until: i64,
    /// When the last fetch began, successful or not.
    last_attempt: Option<i64>,
    fetches: u64,
    last_error: Option<String>,
}

impl std::fmt::Debug for Jwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwks")
            .field("url", &self.url)
            .field("fetches", &self.fetches())
            .finish_non_exhaustive()
    }
}

/// Why a [`Jwks`] could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JWKS URL `{0}`: it must be http or https")]
pub struct InvalidJwksUrl(String);

impl Jwks {
    /// The key set at `url` (`https://`, or `http://` for tests on
    /// loopback), fetched with a 5 s timeout and no redirects.
    ///
    /// # Errors
    ///
    /// A URL that is not `http` or `https`.
    pub fn new(url: &str) -> Result<Self, InvalidJwksUrl> {
        let parsed = url::Url::parse(url).map_err(|_| InvalidJwksUrl(url.to_owned()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(InvalidJwksUrl(url.to_owned()));
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|_| InvalidJwksUrl(url.to_owned()))?;
        Ok(Self {
            url: url.to_owned(),
            client,
            floor: Duration::from_secs(60),
            ceiling: Duration::from_secs(86_400),
            refresh_interval: Duration::from_secs(60),
            state: Mutex::new(State::default()),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    /// How long a set is kept at least and at most, whatever the server
    /// says (defaults 1 minute and 1 day).
    #[must_use]
    pub fn with_cache_bounds(mut self, floor: Duration, ceiling: Duration) -> Self {
        self.floor = floor;
        self.ceiling = ceiling.max(floor);
        self
    }

    /// The least time between two fetches (default 1 minute).
    #[must_use]
    pub fn with_refresh_interval(mut self, interval: Duration) -> Self {
        self.refresh_interval = interval;
        self
    }

    /// The URL the set is fetched from.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The keys as last fetched, without fetching.
    pub(super) fn cached(&self) -> Vec<MessageKey> {
        self.lock().keys.clone()
    }

    /// How many fetches were made.
    pub fn fetches(&self) -> u64 {
        self.lock().fetches
    }

    /// Why the last fetch failed, if it did.
    pub fn last_error(&self) -> Option<String> {
        self.lock().last_error.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The keys of the set as kept now, fetching first where the set is
    /// stale or lacks one of `wanted` and the refresh interval allows.
    pub(super) async fn keys(&self, wanted: &[String], now: i64) -> Vec<MessageKey> {
        if self.should_fetch(wanted, now) {
            let _fetching = self.fetching.lock().await;
            // Another caller may have fetched while this one waited.
            if self.should_fetch(wanted, now) {
                self.fetch(now).await;
            }
        }
        self.lock().keys.clone()
    }

    /// The Ed25519 keys of the set as last fetched, without fetching: the
    /// Standard Webhooks `v1a` keys of a [`Verifier`](crate::verify::Verifier)
    /// given this set.
    pub(crate) fn cached_ed25519(&self) -> Vec<ed25519_dalek::VerifyingKey> {
        self.lock()
            .keys
            .iter()
            .filter_map(|key| match &key.material {
                super::keys::Material::Ed25519(public) => Some(*public),
                _ => None,
            })
            .collect()
    }

    /// Fetches the set where it is stale or, with `no_key_matched`, where a
    /// signature none of its keys verified may be a rotated key's; either
    /// as far as the refresh interval allows. Whether it fetched.
    pub(crate) async fn refresh(&self, no_key_matched: bool, now: i64) -> bool {
        if !self.due(no_key_matched, now) {
            return false;
        }
        let _fetching = self.fetching.lock().await;
        if !self.due(no_key_matched, now) {
            return false;
        }
        self.fetch(now).await;
        true
    }

    fn should_fetch(&self, wanted: &[String], now: i64) -> bool {
        let missing = {
            let state = self.lock();
            wanted
                .iter()
                .any(|id| !state.keys.iter().any(|key| key.id() == id))
        };
        self.due(missing, now)
    }

    /// Whether to fetch now: the set is stale, or `missing` a key a
    /// request wants, and the last fetch was a refresh interval ago.
    fn due(&self, missing: bool, now: i64) -> bool {
        let state = self.lock();
        let interval = i64::try_from(self.refresh_interval.as_secs()).unwrap_or(i64::MAX);
        let allowed = state
            .last_attempt
            .is_none_or(|last| now.saturating_sub(last) >= interval);
        allowed && (missing || now >= state.fresh_until)
    }

    async fn fetch(&self, now: i64) {
        {
            let mut state = self.lock();
            state.last_attempt = Some(now);
            state.fetches += 1;
        }
        match self.download().await {
            Ok((keys, max_age)) => {
                let keep = max_age
                    .unwrap_or(Duration::from_secs(300))
                    .clamp(self.floor, self.ceiling);
                let mut state = self.lock();
                state.keys = keys;
                state.fresh_until =
                    now.saturating_add(i64::try_from(keep.as_secs()).unwrap_or(i64::MAX));
                state.last_error = None;
            }
            Err(error) => {
                tracing::warn!(url = %self.url, %error, "cannot refresh the JWKS; the last good set stays");
                self.lock().last_error = Some(error);
            }
        }
    }

    async fn download(&self) -> Result<(Vec<MessageKey>, Option<Duration>), String> {
        let response = self
            .client
            .get(&self.url)
            .header("accept", "application/jwk-set+json, application/json")
            .send()
            .await
            .map_err(|error| format!("fetch failed: {error}"))?;
        if !response.status().is_success() {
            return Err(format!("answered {}", response.status()));
        }
        let max_age = response
            .headers()
            .get("cache-control")
            .and_then(|value| value.to_str().ok())
            .and_then(max_age);
        if response
            .content_length()
            .is_some_and(|len| len > MAX_SET_BYTES as u64)
        {
            return Err("the set is larger than 64 KiB".to_owned());
        }
        let body = response
            .bytes()
            .await
            .map_err(|error| format!("reading failed: {error}"))?;
        if body.len() > MAX_SET_BYTES {
            return Err("the set is larger than 64 KiB".to_owned());
        }
        Ok((
            MessageKey::from_jwk_set(&body)
                .map_err(|error| error.to_string())?
                .into_iter()
                // One set is one sender's: its keys share their nonces.
                .map(|key| key.with_sender(&self.url))
                .collect(),
            max_age,
        ))
    }
}

/// `max-age` of a `Cache-Control` value.
fn max_age(cache_control: &str) -> Option<Duration> {
    cache_control.split(',').find_map(|directive| {
        let (name, value) = directive.trim().split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("max-age")
            .then(|| value.trim().trim_matches('"').parse().ok())
            .flatten()
            .map(Duration::from_secs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_age_reads_the_directive_among_others() {
        assert_eq!(
            max_age("public, max-age=600, must-revalidate"),
            Some(Duration::from_secs(600))
        );
        assert_eq!(max_age("no-store"), None);
        assert_eq!(max_age("max-age=soon"), None);
    }

    #[cfg(feature = "ed25519")]
    #[test]
    fn a_set_keeps_its_usable_keys_and_refuses_one_with_none() {
        let set = br#"{"keys":[
            {"kty":"OKP","crv":"Ed25519","kid":"a","x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"},
            {"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"},
            {"kty":"OKP","crv":"Ed25519","x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"},
            {"kty":"OKP","crv":"Ed25519","kid":"short","x":"AAAA"}
        ]}"#;
        let keys = MessageKey::from_jwk_set(set).unwrap();
        assert_eq!(keys.iter().map(MessageKey::id).collect::<Vec<_>>(), ["a"]);
        assert!(MessageKey::from_jwk_set(br#"{"keys":[]}"#).is_err());
        assert!(MessageKey::from_jwk_set(b"<html>").is_err());
    }
}
