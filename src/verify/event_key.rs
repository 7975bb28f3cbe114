//! [`EventKey`]: what a verified event is claimed (deduplicated) by.
//!
//! A claim key must come from what the signature covers. An id header the
//! signature does not cover (GitHub's `X-GitHub-Delivery`, Shopify's
//! `X-Shopify-Webhook-Id`) can be changed by anyone who holds a captured
//! request, so a replay under a fresh id would be a new event.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use sha2::{Digest as _, Sha256};

use super::encoding::hex_encode;
use super::envelope::MAX_ID_LEN;
use super::verifier::{Verified, Verifier};

/// Where the claim key of a verified event comes from.
///
/// ```
/// use hooklatch::verify::{EventKey, Scheme, Signer, Verifier};
///
/// let secret = "It's a Secret to Everybody";
/// let verifier = Verifier::builder(Scheme::github()).with_secret(secret)?.build()?;
/// let body = br#"{"action":"opened"}"#;
/// let signed = Signer::new(Scheme::github(), [secret])?.sign("d1", std::time::SystemTime::now(), body)?;
/// let verified = verifier.verify(&signed, body)?;
///
/// // GitHub's delivery id is not signed: the default key is a digest of
/// // the signed body, the same under any delivery id.
/// let key = EventKey::default().key(&verifier, &verified)?;
/// assert!(key.starts_with("sha256:"));
/// assert_eq!(EventKey::UnsignedHeader.key(&verifier, &verified)?, "d1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum EventKey {
    /// The scheme's signed event id: its id header where the signature
    /// covers it (Standard Webhooks, Svix), the body's id field where the
    /// scheme names one (Stripe's `id`); otherwise, or when that field is
    /// missing, [`SignedContent`](Self::SignedContent). Never fails. The
    /// default.
    #[default]
    Signed,
    /// `sha256:` and the hex SHA-256 of the scheme's name and everything the
    /// signature covers (the body, and the signed id and timestamp where the
    /// scheme signs them). The same request replayed under any unsigned
    /// header is the same event; a sender that signs a retry with a new
    /// timestamp makes a new key for it (Slack: prefer its `event_id`).
    SignedContent,
    /// A top-level string field of the JSON body, such as `event_id`. The
    /// body is signed, so the field is too.
    JsonField(String),
    /// The id header even where the signature does not cover it. A captured
    /// request resent under a fresh id is then accepted again: choose it only
    /// when the sender's id matters more to you than replays.
    UnsignedHeader,
}

/// Why no claim key could be taken from a verified request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The body is not a JSON object.
    #[error("the body is not a JSON object")]
    NotJson,
    /// The JSON body has no string field of that name.
    #[error("the body has no string field `{0}`")]
    MissingField(String),
    /// The request carries no id header (or the scheme has none).
    #[error("the request has no event id header")]
    MissingId,
    /// The key is empty, longer than 256 bytes or not visible ASCII.
    #[error("the event key {0}")]
    Invalid(&'static str),
}

impl EventKey {
    /// The claim key of `verified`, a request that `verifier` accepted.
    pub fn key(&self, verifier: &Verifier, verified: &Verified<'_>) -> Result<String, KeyError> {
        match self {
            Self::Signed => {
                if let Some(id) = verified.id().filter(|_| verified.id_is_signed()) {
                    return Ok(id.to_owned());
                }
                let from_body = verifier
                    .scheme()
                    .body_id_field()
                    .and_then(|field| json_field(verified.body(), field).ok())
                    .filter(|id| check(id).is_ok());
                Ok(from_body.unwrap_or_else(|| content_digest(verifier, verified)))
            }
            Self::SignedContent => Ok(content_digest(verifier, verified)),
            Self::JsonField(field) => {
                let id = json_field(verified.body(), field)?;
                check(&id)?;
                Ok(id)
            }
            Self::UnsignedHeader => verified.id().map(str::to_owned).ok_or(KeyError::MissingId),
        }
    }
}

/// What is wrong with a key (a claim key, an event id, a resource): it must
/// be 1 to 256 bytes of visible ASCII, as every store takes it. `None` when
/// it is fine.
pub(crate) fn key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        Some("is empty")
    } else if key.len() > MAX_ID_LEN {
        Some("is longer than 256 bytes")
    } else if !key.bytes().all(|b| b.is_ascii_graphic()) {
        Some("has characters outside visible ASCII")
    } else {
        None
    }
}

fn check(key: &str) -> Result<(), KeyError> {
    key_problem(key).map_or(Ok(()), |reason| Err(KeyError::Invalid(reason)))
}

fn content_digest(verifier: &Verifier, verified: &Verified<'_>) -> String {
    let scheme = verifier.scheme();
    let mut hash = Sha256::new();
    // The name's length first, so no name and content run into each other.
    let name = scheme.name().as_bytes();
    hash.update(u64::try_from(name.len()).unwrap_or(u64::MAX).to_be_bytes());
    hash.update(name);
    let id = verified
        .id()
        .filter(|_| verified.id_is_signed())
        .map(str::as_bytes);
    // Twilio's form is signed as sorted, decoded parameters: a replay with
    // its pairs reordered or encoded anew is the same request.
    let rebuilt = scheme
        .rebuilt_contents(verified.body())
        .and_then(Result::ok)
        .and_then(|contents| contents.into_iter().next());
    let body = rebuilt.as_deref().unwrap_or(verified.body());
    // Hook0's covered headers are in the prefix: a replay that moves the
    // border between them and the body keeps the same digest.
    let prefix = verified.signed_prefix();
    scheme.signed_content(id, prefix.as_deref(), None, body, |piece| {
        hash.update(piece)
    });
    format!("sha256:{}", hex_encode(&hash.finalize()))
}

/// A top-level string field of a JSON object, read without building the
/// rest of the document.
pub(crate) fn json_field(body: &[u8], field: &str) -> Result<String, KeyError> {
    let mut reader = serde_json::Deserializer::from_slice(body);
    let found = FieldSeed(field)
        .deserialize(&mut reader)
        .map_err(|_| KeyError::NotJson)?;
    reader.end().map_err(|_| KeyError::NotJson)?;
    found.ok_or_else(|| KeyError::MissingField(field.to_owned()))
}

struct FieldSeed<'f>(&'f str);

impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
    type Value = Option<String>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if name == self.0 && found.is_none() {
                // A non-string value under the name counts as no id.
                found = map
                    .next_value::<serde_json::Value>()?
                    .as_str()
                    .map(str::to_owned);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_fields_are_read_from_the_top_level_only() {
        let body = br#"{"data":{"id":"inner"},"id":"evt_1","n":[1,2,{"id":3}]}"#;
        assert_eq!(json_field(body, "id"), Ok("evt_1".to_owned()));
        assert_eq!(
            json_field(br#"{"data":{"id":"inner"}}"#, "id"),
            Err(KeyError::MissingField("id".into()))
        );
        assert_eq!(
            json_field(br#"{"id":7}"#, "id"),
            Err(KeyError::MissingField("id".into()))
        );
        assert_eq!(json_field(b"[1]", "id"), Err(KeyError::NotJson));
        assert_eq!(json_field(br#"{"id":"a"} x"#, "id"), Err(KeyError::NotJson));
        assert_eq!(json_field(b"", "id"), Err(KeyError::NotJson));
    }
}
