//! The verifier and its builder.

use std::time::{SystemTime, UNIX_EPOCH};

use sfv::ListEntry;
use sha2::{Digest as _, Sha256};

use super::base::{Candidate, check_digest, dictionary, malformed};
use super::{
    MAX_MESSAGE_SIGNATURES, MessageKey, MessageRequest, MessageSignatureError, MessageVerified,
};

/// Verifies RFC 9421 message signatures; see the [module](super).
#[derive(Debug, Clone)]
pub struct MessageVerifier {
    keys: Vec<MessageKey>,
    required: Vec<String>,
    tag: Option<String>,
    max_age: Option<u64>,
    future_tolerance: u64,
    authority: Option<String>,
    require_nonce: bool,
    #[cfg(feature = "jwks")]
    jwks: Option<std::sync::Arc<super::Jwks>>,
}

/// Seconds since the epoch, on the system clock.
fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        })
}

/// What one request's signatures have cost so far.
#[derive(Default)]
struct Seen {
    /// The keys (by position) a signature was checked with.
    keys_tried: Vec<usize>,
    /// The body's check against `Content-Digest`, once made.
    digest: Option<Result<(), MessageSignatureError>>,
}

/// The derived components a covered `@target-uri` holds.
const PARTS_OF_TARGET_URI: [&str; 5] = [
    "@scheme",
    "@authority",
    "@path",
    "@query",
    "@request-target",
];

/// Builds a [`MessageVerifier`].
#[derive(Debug, Clone)]
pub struct MessageVerifierBuilder {
    verifier: MessageVerifier,
}

/// Why a [`MessageVerifier`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid message verifier: {0}")]
pub struct InvalidMessageVerifier(&'static str);

impl MessageVerifier {
    /// A builder that requires `@method`, `@authority` and `@path` to be
    /// covered (and `content-digest` whenever the request has a body),
    /// `created` at most 5 minutes old and at most 60 s ahead.
    pub fn builder() -> MessageVerifierBuilder {
        MessageVerifierBuilder {
            verifier: Self {
                keys: Vec::new(),
                required: ["@method", "@authority", "@path"]
                    .map(String::from)
                    .to_vec(),
                tag: None,
                max_age: Some(300),
                future_tolerance: 60,
                authority: None,
                require_nonce: false,
                #[cfg(feature = "jwks")]
                jwks: None,
            },
        }
    }

    /// Whether requests must be for one authority
    /// ([`MessageVerifierBuilder::with_authority`]).
    pub(crate) fn binds_authority(&self) -> bool {
        self.authority.is_some()
    }

    /// A digest of what this verifier trusts and requires: equal for two
    /// verifiers built alike (a tenant's, made again from the same
    /// configuration), different when a key or a rule differs.
    pub(crate) fn fingerprint(&self) -> [u8; 32] {
        let mut hash = Sha256::new();
        for key in &self.keys {
            for part in [key.id.as_bytes(), key.sender().as_bytes(), &key.fingerprint] {
                hash.update((part.len() as u64).to_be_bytes());
                hash.update(part);
            }
        }
        let rules = format!(
            "{:?}|{:?}|{:?}|{}|{:?}|{}",
            self.required,
            self.tag,
            self.max_age,
            self.future_tolerance,
            self.authority,
            self.require_nonce
        );
        hash.update(rules.as_bytes());
        #[cfg(feature = "jwks")]
        if let Some(jwks) = &self.jwks {
            hash.update(jwks.url().as_bytes());
        }
        hash.finalize().into()
    }

    /// Verifies `request` with `body` (the bytes as received) at the time
    /// the system clock gives.
    ///
    /// # Errors
    ///
    /// A [`MessageSignatureError`] naming the first check that failed
    /// for the last signature looked at.
    pub fn verify(
        &self,
        request: &MessageRequest<'_>,
        body: &[u8],
    ) -> Result<MessageVerified, MessageSignatureError> {
        self.verify_at(request, body, unix_now())
    }

    /// Verifies as if the time were `now`, in seconds since the epoch.
    ///
    /// # Errors
    ///
    /// As [`verify`](Self::verify).
    pub fn verify_at(
        &self,
        request: &MessageRequest<'_>,
        body: &[u8],
        now: i64,
    ) -> Result<MessageVerified, MessageSignatureError> {
        #[cfg(feature = "jwks")]
        if let Some(jwks) = &self.jwks {
            return self.verify_among(&self.with_fetched(jwks.cached()), request, body, now);
        }
        self.verify_among(&self.keys, request, body, now)
    }

    /// Verifies as [`verify`](Self::verify) does, first fetching the
    /// verifier's key set ([`with_jwks`](MessageVerifierBuilder::with_jwks))
    /// where it is stale or lacks a `keyid` the request names, as far as
    /// its refresh interval allows.
    ///
    /// # Errors
    ///
    /// As [`verify`](Self::verify).
    #[cfg(feature = "jwks")]
    pub async fn verify_fetching(
        &self,
        request: &MessageRequest<'_>,
        body: &[u8],
    ) -> Result<MessageVerified, MessageSignatureError> {
        self.verify_fetching_at(request, body, unix_now()).await
    }

    /// [`verify_fetching`](Self::verify_fetching) as if the time were
    /// `now`, in seconds since the epoch (the key set's cache counts on it
    /// too).
    ///
    /// # Errors
    ///
    /// As [`verify`](Self::verify).
    #[cfg(feature = "jwks")]
    pub async fn verify_fetching_at(
        &self,
        request: &MessageRequest<'_>,
        body: &[u8],
        now: i64,
    ) -> Result<MessageVerified, MessageSignatureError> {
        let Some(jwks) = &self.jwks else {
            return self.verify_among(&self.keys, request, body, now);
        };
        let inputs = dictionary(request.headers, "signature-input")?;
        let wanted: Vec<String> = inputs
            .values()
            .take(MAX_MESSAGE_SIGNATURES)
            .filter_map(|input| match input {
                ListEntry::InnerList(input) => input.params.get("keyid")?.as_string(),
                ListEntry::Item(_) => None,
            })
            .map(|id| id.as_str().to_owned())
            .filter(|id| !self.keys.iter().any(|key| key.id == *id))
            .collect();
        let fetched = jwks.keys(&wanted, now).await;
        self.verify_among(&self.with_fetched(fetched), request, body, now)
    }

    /// The configured keys, then those fetched under another `keyid`: a
    /// fetched key never stands in for a configured one.
    #[cfg(feature = "jwks")]
    fn with_fetched(&self, fetched: Vec<MessageKey>) -> Vec<MessageKey> {
        let mut keys = self.keys.clone();
        keys.extend(
            fetched
                .into_iter()
                .filter(|key| !self.keys.iter().any(|configured| configured.id == key.id)),
        );
        keys
    }

    /// What can be checked before the body is read: both headers parse,
    /// and a signature names a key this verifier trusts (or, with a key
    /// set, may fetch) under its tag. Else the error `verify` would give,
    /// so that a request signed for someone else costs no body read.
    pub(crate) fn precheck(&self, headers: &http::HeaderMap) -> Result<(), MessageSignatureError> {
        let inputs = dictionary(headers, "signature-input")?;
        dictionary(headers, "signature")?;
        if inputs.len() > MAX_MESSAGE_SIGNATURES {
            return Err(MessageSignatureError::TooManySignatures);
        }
        #[cfg(feature = "jwks")]
        let fetches = self.jwks.is_some();
        #[cfg(not(feature = "jwks"))]
        let fetches = false;
        let param = |input: &sfv::InnerList, name: &str| {
            input
                .params
                .get(name)
                .and_then(|value| value.as_string())
                .map(|value| value.as_str().to_owned())
        };
        let names_a_trusted_key = inputs.values().any(|input| {
            let ListEntry::InnerList(input) = input else {
                return false;
            };
            let tag_matches = self.tag.is_none() || param(input, "tag") == self.tag;
            tag_matches
                && param(input, "keyid")
                    .is_some_and(|id| fetches || self.keys.iter().any(|key| key.id == id))
        });
        if names_a_trusted_key {
            Ok(())
        } else {
            Err(MessageSignatureError::NoTrustedSignature {
                tag: self.tag.clone(),
            })
        }
    }

    /// Verifies with `keys` trusted.
    pub(super) fn verify_among(
        &self,
        keys: &[MessageKey],
        request: &MessageRequest<'_>,
        body: &[u8],
        now: i64,
    ) -> Result<MessageVerified, MessageSignatureError> {
        let inputs = dictionary(request.headers, "signature-input")?;
        let signatures = dictionary(request.headers, "signature")?;
        if inputs.len() > MAX_MESSAGE_SIGNATURES {
            return Err(MessageSignatureError::TooManySignatures);
        }
        let mut last_error = None;
        // Work a forged request can cause is bounded by what one genuine
        // signature costs per trusted key: each key is tried once whatever
        // the labels, and the body is hashed once.
        let mut seen = Seen::default();
        for (label, input) in &inputs {
            let ListEntry::InnerList(input) = input else {
                last_error = Some(malformed(
                    "signature-input",
                    "a member is not an inner list",
                ));
                continue;
            };
            let candidate = Candidate::read(label.as_str(), input, &signatures);
            match candidate
                .and_then(|candidate| self.check(keys, request, body, now, &candidate, &mut seen))
            {
                Ok(Some(verified)) => return Ok(verified),
                Ok(None) => {}
                Err(error) => last_error = Some(error),
            }
        }
        Err(
            last_error.unwrap_or_else(|| MessageSignatureError::NoTrustedSignature {
                tag: self.tag.clone(),
            }),
        )
    }

    /// Checks one signature: `None` when it is not for this verifier (no
    /// `keyid`, none trusted or one tried already, another tag).
    fn check(
        &self,
        keys: &[MessageKey],
        request: &MessageRequest<'_>,
        body: &[u8],
        now: i64,
        candidate: &Candidate<'_>,
        seen: &mut Seen,
    ) -> Result<Option<MessageVerified>, MessageSignatureError> {
        if self.tag.is_some() && candidate.tag != self.tag {
            return Ok(None);
        }
        let Some((index, key)) = candidate
            .key_id
            .as_ref()
            .and_then(|id| keys.iter().enumerate().find(|(_, key)| key.id == *id))
        else {
            return Ok(None);
        };
        if seen.keys_tried.contains(&index) {
            return Ok(None);
        }
        if let Some(alg) = &candidate.alg
            && alg != key.algorithm()
        {
            return Err(MessageSignatureError::AlgorithmMismatch {
                key_id: key.id.clone(),
                alg: alg.clone(),
                expected: key.algorithm(),
            });
        }
        let covers = |name: &str| {
            candidate
                .components
                .iter()
                .any(|c| c.name == name && c.plain)
        };
        // `@target-uri` holds the scheme, authority, path and query.
        let covers_required = |name: &str| {
            covers(name) || (PARTS_OF_TARGET_URI.contains(&name) && covers("@target-uri"))
        };
        if candidate.components.is_empty() {
            return Err(MessageSignatureError::MissingComponent(
                "any component".to_owned(),
            ));
        }
        for required in &self.required {
            if !covers_required(required) {
                return Err(MessageSignatureError::MissingComponent(required.clone()));
            }
        }
        if !body.is_empty() && !covers("content-digest") {
            return Err(MessageSignatureError::MissingComponent(
                "content-digest".to_owned(),
            ));
        }
        if self.require_nonce && candidate.nonce.is_none() {
            return Err(MessageSignatureError::MissingComponent("nonce".to_owned()));
        }
        self.check_times(candidate, now)?;
        if let Some(expected) = &self.authority
            && request.authority != *expected
        {
            return Err(MessageSignatureError::WrongAuthority {
                expected: expected.clone(),
                got: request.authority.clone(),
            });
        }
        if covers("content-digest") {
            seen.digest
                .get_or_insert_with(|| check_digest(request, body))
                .clone()?;
        }
        let base = candidate.base(request)?;
        seen.keys_tried.push(index);
        if key.material.verifies(base.as_bytes(), candidate.signature) {
            return Ok(Some(MessageVerified {
                label: candidate.label.to_owned(),
                key_id: key.id.clone(),
                sender: key.sender().to_owned(),
                created: candidate.created.unwrap_or_default(),
                expires: candidate.expires,
                nonce: candidate.nonce.clone(),
                tag: candidate.tag.clone(),
                components: candidate
                    .components
                    .iter()
                    .map(|component| component.identifier.clone())
                    .collect(),
                base_digest: Sha256::digest(base.as_bytes()).into(),
            }));
        }
        Err(MessageSignatureError::SignatureMismatch {
            label: candidate.label.to_owned(),
            key_id: key.id.clone(),
        })
    }

    fn check_times(
        &self,
        candidate: &Candidate<'_>,
        now: i64,
    ) -> Result<(), MessageSignatureError> {
        let created = candidate.created.ok_or(MessageSignatureError::NoCreated)?;
        if created > now {
            let ahead_secs = created.abs_diff(now);
            if ahead_secs > self.future_tolerance {
                return Err(MessageSignatureError::CreatedInFuture { ahead_secs });
            }
        } else if let Some(max_age_secs) = self.max_age {
            let age_secs = now.abs_diff(created);
            if age_secs > max_age_secs {
                return Err(MessageSignatureError::TooOld {
                    age_secs,
                    max_age_secs,
                });
            }
        }
        if let Some(expires) = candidate.expires
            && expires < now
        {
            return Err(MessageSignatureError::Expired {
                ago_secs: now.abs_diff(expires),
            });
        }
        Ok(())
    }
}

impl MessageVerifierBuilder {
    /// Trusts `key` for signatures that name its `keyid` (a signature
    /// without one is not looked at).
    #[must_use]
    pub fn with_key(mut self, key: MessageKey) -> Self {
        self.verifier.keys.push(key);
        self
    }

    /// The components every signature must cover, in place of the default
    /// (`@method`, `@authority`, `@path`). A covered `@target-uri` counts
    /// as `@scheme`, `@authority`, `@path`, `@query` and `@request-target`. `content-digest` is required
    /// whenever the request has a body, whatever this says.
    #[must_use]
    pub fn require<I: IntoIterator<Item = S>, S: Into<String>>(mut self, components: I) -> Self {
        self.verifier.required = components.into_iter().map(Into::into).collect();
        self
    }

    /// The authority (`host` or `host:port`, as clients address this
    /// service) a request must have been sent to. Set it: `@authority`
    /// comes from the request's `Host`, so without it an event signed for
    /// another receiver of the same sender verifies here too.
    #[must_use]
    pub fn with_authority(mut self, authority: &str) -> Self {
        self.verifier.authority = Some(authority.to_ascii_lowercase());
        self
    }

    /// Refuses signatures without a `nonce`, so every request is claimed
    /// by one the sender chose (see [`MessageVerified::claim_key`]).
    #[must_use]
    pub fn with_required_nonce(mut self) -> Self {
        self.verifier.require_nonce = true;
        self
    }

    /// Trusts the keys `jwks` publishes too, under their `kid`s (a key
    /// configured with [`with_key`](Self::with_key) wins over a fetched one
    /// of the same id). Verify with
    /// [`verify_fetching`](MessageVerifier::verify_fetching) to fetch;
    /// [`verify`](MessageVerifier::verify) uses the set as last fetched.
    #[cfg(feature = "jwks")]
    #[must_use]
    pub fn with_jwks(mut self, jwks: std::sync::Arc<super::Jwks>) -> Self {
        self.verifier.jwks = Some(jwks);
        self
    }

    /// Looks only at signatures with this `tag` (the application's name
    /// for its signatures, so one meant for another verifier is not
    /// taken for this one's).
    #[must_use]
    pub fn with_tag(mut self, tag: &str) -> Self {
        self.verifier.tag = Some(tag.to_owned());
        self
    }

    /// How old `created` may be (default 5 minutes); `None` for any age
    /// (replays are then stopped by the claim alone).
    #[must_use]
    pub fn with_max_age(mut self, max_age: Option<std::time::Duration>) -> Self {
        self.verifier.max_age = max_age.map(|age| age.as_secs());
        self
    }

    /// How far ahead `created` may be, for clocks apart (default 60 s).
    #[must_use]
    pub fn with_future_tolerance(mut self, tolerance: std::time::Duration) -> Self {
        self.verifier.future_tolerance = tolerance.as_secs();
        self
    }

    /// The verifier.
    ///
    /// # Errors
    ///
    /// No key, two keys under one `keyid`, or a required component that
    /// is not a lowercase name.
    pub fn build(self) -> Result<MessageVerifier, InvalidMessageVerifier> {
        let verifier = self.verifier;
        #[cfg(feature = "jwks")]
        let has_source = verifier.jwks.is_some();
        #[cfg(not(feature = "jwks"))]
        let has_source = false;
        if verifier.keys.is_empty() && !has_source {
            return Err(InvalidMessageVerifier("it trusts no key"));
        }
        for (at, key) in verifier.keys.iter().enumerate() {
            if verifier.keys[..at].iter().any(|before| before.id == key.id) {
                return Err(InvalidMessageVerifier("two keys have one keyid"));
            }
        }
        let lowercase = |name: &String| {
            !name.is_empty()
                && name.bytes().all(|byte| {
                    byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"-_.*@".contains(&byte)
                })
        };
        if !verifier.required.iter().all(lowercase) {
            return Err(InvalidMessageVerifier(
                "a required component is not a lowercase field or derived name",
            ));
        }
        Ok(verifier)
    }
}
