//! [`VerifiedEvent`]: what the adapters hand on, and the key it is claimed
//! by, taken when first asked for.

use std::sync::OnceLock;

use bytes::Bytes;

use super::Rejection;
use super::provider::ProviderInfo;
use crate::dedup::EventMeta;
use crate::verify::{EventKey, HeaderKey, Headers, KeyError, Verified, Verifier};

/// A request that passed verification, as every framework adapter hands it
/// on (the tower layer puts it into the request extensions).
///
/// Its claim key ([`key`](Self::key)) is taken when first asked for and then
/// kept: for schemes that sign the body alone it is a SHA-256 pass over the
/// body, which a receiver that claims nothing never pays.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct VerifiedEvent {
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
    claim: Claim,
    provider: ProviderInfo,
}

/// Where the claim key comes from, and the key once taken.
#[derive(Debug, Clone)]
struct Claim {
    source: EventKey,
    /// The verifier, for keys taken from what it signs; `None` for a
    /// message signature's event, whose key is set when it is made.
    verifier: Option<Verifier>,
    /// What the signed content holds before the body, for a digest key.
    signed_prefix: Option<Vec<u8>>,
    key: OnceLock<Result<String, Rejection>>,
}

impl VerifiedEvent {
    /// The event for a request that `verifier` accepted, to be claimed by
    /// the key `key` says. Other framework adapters use it to build the same
    /// event the layer does.
    pub fn new(key: &EventKey, verifier: &Verifier, verified: &Verified<'_>, body: Bytes) -> Self {
        let signed_prefix = verified.signed_prefix().map(std::borrow::Cow::into_owned);
        Self {
            id: verified.id().map(str::to_owned),
            id_is_signed: verified.id_is_signed(),
            timestamp: verified.timestamp(),
            scheme: verifier.scheme().name().to_owned(),
            body,
            claim: Claim {
                source: key.clone(),
                verifier: Some(verifier.clone()),
                signed_prefix,
                key: OnceLock::new(),
            },
            provider: ProviderInfo::default(),
        }
    }

    /// The event for a request whose HTTP message signature verified,
    /// claimed by the signature's [`claim_key`](crate::verify::message::MessageVerified::claim_key),
    /// which is also its id.
    #[cfg(feature = "http-signatures")]
    pub(crate) fn from_message(
        scheme: &str,
        verified: &crate::verify::message::MessageVerified,
        body: Bytes,
    ) -> Self {
        let key = verified.claim_key();
        Self {
            id: Some(key.clone()),
            id_is_signed: true,
            timestamp: Some(verified.created()),
            scheme: scheme.to_owned(),
            body,
            claim: Claim {
                source: EventKey::default(),
                verifier: None,
                signed_prefix: None,
                key: OnceLock::from(Ok(key)),
            },
            provider: ProviderInfo::default(),
        }
    }

    /// The event with what its provider's headers say (its type, delivery
    /// id, retry number) and the headers in `keep`; a [`Receiver`](super::Receiver)
    /// does this for every event.
    #[must_use]
    pub fn with_provider_headers<H: Headers + ?Sized>(
        mut self,
        headers: &H,
        keep: &[HeaderKey],
    ) -> Self {
        self.provider = ProviderInfo::read(&self.scheme, headers, keep);
        self
    }

    /// The event's type: GitHub's `X-GitHub-Event`, Shopify's
    /// `X-Shopify-Topic`, Outpost's `x-outpost-topic`; Twitch's body
    /// `subscription.type` (its type header is not signed); Zoom's body `event`, Paddle's
    /// `event_type`, Meta's `field` of the first change (else its
    /// `object`); or the body's top-level `type` for Stripe, Standard
    /// Webhooks, Svix, Slack (the `payload`'s for interactive actions),
    /// Square, Convoy and custom schemes. Read from the body when first
    /// asked for.
    pub fn event_type(&self) -> Option<&str> {
        self.provider.event_type(&self.body)
    }

    /// The body deserialized from JSON into `T`; a body that does not
    /// parse as `T` is [`Rejection::InvalidJson`] (422). With
    /// [`event_type`](Self::event_type) this dispatches a provider's
    /// events to typed payloads, whether the type is in a header (GitHub,
    /// Shopify) or in the body:
    ///
    /// ```
    /// use hooklatch::receive::{Rejection, VerifiedEvent};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Push { after: String }
    ///
    /// fn handle(event: &VerifiedEvent) -> Result<String, Rejection> {
    ///     Ok(match event.event_type() {
    ///         Some("push") => event.json::<Push>()?.after,
    ///         _ => "ignored".to_owned(),
    ///     })
    /// }
    /// # let _ = handle;
    /// ```
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Rejection> {
        serde_json::from_slice(&self.body)
            .map_err(|error| Rejection::InvalidJson(error.to_string()))
    }

    /// The provider's id for this delivery, where it sends one apart from
    /// the signed id: GitHub's `X-GitHub-Delivery`, Shopify's
    /// `X-Shopify-Webhook-Id`.
    pub fn delivery_id(&self) -> Option<&str> {
        self.provider.delivery_id.as_deref()
    }

    /// How many times the provider says it retried this delivery, where it
    /// says so (Slack's `X-Slack-Retry-Num`).
    pub fn retry(&self) -> Option<u32> {
        self.provider.retry
    }

    /// All of the above, as the inbox keeps it with the event.
    pub fn meta(&self) -> EventMeta {
        EventMeta {
            event_type: self.event_type().map(str::to_owned),
            delivery_id: self.delivery_id().map(str::to_owned),
            retry: self.retry(),
            headers: self.kept_headers().to_vec(),
        }
    }

    /// The headers the receiver was asked to keep
    /// ([`Receiver::with_kept_headers`](super::Receiver::with_kept_headers)),
    /// lowercase name first.
    pub fn kept_headers(&self) -> &[(String, String)] {
        &self.provider.kept
    }

    /// The key the event is claimed by (see [`EventKey`]), taken on first
    /// use. Fails when the configured source has none: a body that is not
    /// JSON (422), a missing field or id header (400), or a key a store
    /// cannot take (400).
    pub fn key(&self) -> Result<&str, Rejection> {
        let claim = &self.claim;
        let key = claim.key.get_or_init(|| {
            let verified = Verified::from_parts(
                self.id.as_deref(),
                self.id_is_signed,
                claim.signed_prefix.as_deref(),
                &self.body,
            );
            let Some(verifier) = &claim.verifier else {
                return Err(Rejection::MissingEventId);
            };
            claim
                .source
                .key(verifier, &verified)
                .map_err(|error| match error {
                    KeyError::NotJson => Rejection::InvalidJson(error.to_string()),
                    KeyError::Invalid(_) => Rejection::InvalidEventId(error.to_string()),
                    _ => Rejection::MissingEventId,
                })
        });
        key.as_deref().map_err(Clone::clone)
    }
}
