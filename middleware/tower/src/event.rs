//! [`VerifiedEvent`]: what the layer hands on, and [`EventKey`]: what it
//! deduplicates by.

use bytes::Bytes;
use hooklatch::verify::{Verified, Verifier};

use crate::rejection::Rejection;

/// A request that passed verification, put into the request extensions by
/// the layer (and read by the extractors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedEvent {
    /// The id events are deduplicated by: the scheme's id header, or the
    /// configured JSON field.
    pub key: Option<String>,
    /// The id from the scheme's id header, if it has one.
    pub id: Option<String>,
    /// The signed timestamp, if the scheme has one.
    pub timestamp: Option<i64>,
    /// The scheme's short name, such as `standard`.
    pub scheme: String,
    /// The body exactly as received and verified.
    pub body: Bytes,
}

/// Where the dedup key comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum EventKey {
    /// The scheme's id header (`webhook-id`, `X-GitHub-Delivery`, ...). The
    /// default.
    #[default]
    IdHeader,
    /// A top-level string field of the JSON body, such as Stripe's `id`.
    JsonField(String),
}

impl EventKey {
    /// The [`VerifiedEvent`] for a request that `verifier` accepted, with
    /// its dedup key taken from where this says. Other framework adapters
    /// use it to build the same event the layer does.
    pub fn event(
        &self,
        verifier: &Verifier,
        verified: &Verified<'_>,
        body: Bytes,
    ) -> Result<VerifiedEvent, Rejection> {
        let key = match self {
            Self::IdHeader => verified.id().map(str::to_owned),
            Self::JsonField(field) => json_field(&body, field)?,
        };
        Ok(VerifiedEvent {
            key,
            id: verified.id().map(str::to_owned),
            timestamp: verified.timestamp(),
            scheme: verifier.scheme().name().to_owned(),
            body,
        })
    }
}

fn json_field(body: &[u8], field: &str) -> Result<Option<String>, Rejection> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|error| Rejection::InvalidJson(error.to_string()))?;
    Ok(value
        .get(field)
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned))
}
