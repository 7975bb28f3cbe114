//! [`VerifiedEvent`]: what the layer hands on, with the key it is claimed by.

use bytes::Bytes;

use super::Rejection;
use crate::verify::{EventKey, KeyError, Verified, Verifier};

/// A request that passed verification, as every framework adapter hands it
/// on (the tower layer puts it into the request extensions).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifiedEvent {
    /// The key the event is claimed by, from what the signature covers
    /// (see [`EventKey`]).
    pub key: String,
    /// The id from the scheme's id header, if present.
    pub id: Option<String>,
    /// Whether the signature covers `id` (GitHub's and Shopify's delivery
    /// ids are not covered).
    pub id_is_signed: bool,
    /// The timestamp, if the scheme reads one.
    pub timestamp: Option<i64>,
    /// The scheme's short name, such as `standard`.
    pub scheme: String,
    /// The body exactly as received and verified.
    pub body: Bytes,
}

impl VerifiedEvent {
    /// The event for a request that `verifier` accepted, claimed by the key
    /// `key` says. Other framework adapters use it to build the same event
    /// the layer does.
    pub fn new(
        key: &EventKey,
        verifier: &Verifier,
        verified: &Verified<'_>,
        body: Bytes,
    ) -> Result<Self, Rejection> {
        let key = key.key(verifier, verified).map_err(|error| match error {
            KeyError::NotJson => Rejection::InvalidJson(error.to_string()),
            KeyError::Invalid(_) => Rejection::InvalidEventId(error.to_string()),
            _ => Rejection::MissingEventId,
        })?;
        Ok(Self {
            key,
            id: verified.id().map(str::to_owned),
            id_is_signed: verified.id_is_signed(),
            timestamp: verified.timestamp(),
            scheme: verifier.scheme().name().to_owned(),
            body,
        })
    }
}
