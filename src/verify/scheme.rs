//! Signature schemes as data: where the id, timestamp and signatures are,
//! what bytes are signed, and how signatures are written.
//!
//! Every provider's scheme runs through the same header reader
//! (`envelope.rs`) and comparison loop (`verifier.rs`), so each gets the
//! same caps, constant-time comparison and error reporting. The signed
//! content is a template (`template.rs`); `signer.rs` writes the headers.

use std::borrow::Cow;

use super::encoding::Encoding;
use super::error::{ConfigError, VerifyError};
use super::headers::HeaderKey;
use super::secrets::SecretFormat;
use super::template::{Segment, Template};
use super::twilio::{BodyProblem, SignedUrls};

/// The most headers one Hook0 signature may cover (`h=`); each costs a
/// lookup before the HMAC.
pub const MAX_COVERED_HEADERS: usize = 16;

/// The headers a signature names as covered (Hook0's `h=`): their names
/// as the header lists them, and their values, in that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CoveredHeaders<'h> {
    pub(crate) names: &'h [u8],
    values: [&'h [u8]; MAX_COVERED_HEADERS],
    len: usize,
}

impl<'h> CoveredHeaders<'h> {
    /// Covered headers `names` (as a signature header lists them) with
    /// these values.
    pub(crate) fn new(names: &'h [u8], values: &[&'h [u8]]) -> Self {
        let mut covered = Self {
            names,
            values: [&[]; MAX_COVERED_HEADERS],
            len: values.len().min(MAX_COVERED_HEADERS),
        };
        covered.values[..covered.len].copy_from_slice(&values[..covered.len]);
        covered
    }

    /// The values, in the order the names list them.
    pub(crate) fn values(&self) -> impl Iterator<Item = &'h [u8]> + '_ {
        self.values[..self.len].iter().copied()
    }
}

/// A webhook signature scheme: the headers it reads, the content it signs
/// and how it writes signatures.
///
/// Build one with a provider's constructor, or [`Scheme::custom`] for
/// anything else. A scheme holds no secret; pair it with secrets in a
/// [`Verifier`](super::Verifier) or [`Signer`](super::Signer).
///
/// ```
/// use hooklatch::verify::{Encoding, Scheme};
///
/// let acme = Scheme::custom("acme", "X-Acme-Signature")?
///     .with_prefix("sha256=")
///     .with_encoding(Encoding::Hex)
///     .with_timestamp_header("X-Acme-Timestamp")?
///     .with_template("{timestamp}.{body}")?;
/// assert_eq!(acme.name(), "acme");
/// # Ok::<(), hooklatch::verify::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheme {
    name: Cow<'static, str>,
    pub(super) signature_header: HeaderKey,
    pub(super) format: Format,
    pub(super) encoding: Encoding,
    pub(super) id_header: Option<HeaderKey>,
    pub(super) timestamp: TimestampSource,
    pub(super) timestamp_format: TimestampFormat,
    pub(super) template: Template,
    /// The id header may be read though the template does not sign it:
    /// then it is metadata, never required (GitHub, Shopify, or opted in).
    unsigned_id: bool,
    /// Likewise for a timestamp header, opted in only.
    unsigned_timestamp: bool,
    /// A top-level string field of the JSON body that holds the event id
    /// (Stripe's `id`): signed with the body.
    body_id_field: Option<Cow<'static, str>>,
    pub(crate) secret_format: SecretFormat,
    /// Twilio's: the signed content is a webhook URL and the body's form
    /// parameters, built from the body before signing.
    pub(super) signed_urls: Option<Box<SignedUrls>>,
}

/// How signatures sit in the signature header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Format {
    /// Space-separated `version,signature` entries: `v1` is HMAC-SHA256,
    /// `v1a` ed25519 (Standard Webhooks, Svix).
    Versioned,
    /// `key=value` fields: one holds the timestamp, those of the
    /// signature's key an HMAC-SHA256 signature each (Stripe, Paddle).
    Fields(Fields),
    /// One signature after a fixed prefix (GitHub's `sha256=`, Slack's `v0=`).
    Single { prefix: Cow<'static, str> },
    /// Comma-separated signatures after one fixed prefix (Outpost's
    /// `v0=<hex>,<hex>` while a secret rotates).
    Listed { prefix: &'static str },
    /// One ed25519 signature, nothing around it (Discord's).
    Ed25519,
    /// One DER-encoded ECDSA P-256 signature, nothing around it
    /// (SendGrid's).
    EcdsaP256,
}

/// How a timestamp header writes the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimestampFormat {
    /// Whole seconds since the Unix epoch, in decimal.
    UnixSeconds,
    /// An RFC 3339 date-time (Twitch's, with up to nine fraction digits).
    Rfc3339,
}

/// The names and separator of a [`Format::Fields`] header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fields {
    /// Between fields.
    pub(super) separator: u8,
    /// The timestamp's key.
    pub(super) timestamp: &'static str,
    /// The key of each HMAC-SHA256 signature.
    pub(super) signature: &'static str,
    /// Hook0's: the key of the names of the headers a signature also
    /// covers (`h=x-event-id content-type`), whose values are then signed
    /// between the timestamp and the body.
    pub(super) covered: Option<Covered>,
}

/// The key of the field that names the headers a signature covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Covered {
    /// The field naming the covered headers, space-separated.
    pub(super) names: &'static str,
}

impl Fields {
    /// `t=<ts>,v1=<sig>[,v1=<sig>..]`.
    pub(super) const STRIPE: Self = Self {
        separator: b',',
        timestamp: "t",
        signature: "v1",
        covered: None,
    };

    /// `t=<ts>,h=<names>,v1=<sig>`: Hook0's.
    pub(super) const HOOK0: Self = Self {
        separator: b',',
        timestamp: "t",
        signature: "v1",
        covered: Some(Covered { names: "h" }),
    };

    /// `ts=<ts>;h1=<sig>[;h1=<sig>..]`.
    pub(super) const PADDLE: Self = Self {
        separator: b';',
        timestamp: "ts",
        signature: "h1",
        covered: None,
    };
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// Where the timestamp is read from.
pub(super) enum TimestampSource {
    None,
    Header(HeaderKey),
    /// The timestamp field of a [`Format::Fields`] signature header.
    Field,
}

impl Scheme {
    fn versioned(name: &'static str, [id, timestamp, signature]: [&'static str; 3]) -> Self {
        Self {
            name: Cow::Borrowed(name),
            signature_header: HeaderKey::from_static(signature),
            format: Format::Versioned,
            encoding: Encoding::Base64,
            id_header: Some(HeaderKey::from_static(id)),
            timestamp: TimestampSource::Header(HeaderKey::from_static(timestamp)),
            timestamp_format: TimestampFormat::UnixSeconds,
            template: Template::ID_DOT_TIMESTAMP_DOT_BODY,
            unsigned_id: false,
            unsigned_timestamp: false,
            body_id_field: None,
            secret_format: SecretFormat::Whsec,
            signed_urls: None,
        }
    }

    /// [Standard Webhooks](https://www.standardwebhooks.com/): headers
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature`; signs
    /// `{id}.{timestamp}.{body}`; signatures `v1,<base64>` (HMAC-SHA256) and
    /// `v1a,<base64>` (ed25519, feature `ed25519`), space separated.
    /// Secrets are `whsec_` + base64 (the prefix is optional), or `whpk_` /
    /// `whsk_` ed25519 keys.
    pub fn standard_webhooks() -> Self {
        Self::versioned(
            "standard",
            ["webhook-id", "webhook-timestamp", "webhook-signature"],
        )
    }

    /// Svix: Standard Webhooks with `svix-id`, `svix-timestamp` and
    /// `svix-signature` headers.
    pub fn svix() -> Self {
        Self::versioned("svix", ["svix-id", "svix-timestamp", "svix-signature"])
    }

    /// Stripe: `Stripe-Signature: t=<ts>,v1=<hex>[,v1=<hex>..]` over
    /// `{t}.{body}`. The secret (`whsec_...`) is used whole, prefix included.
    /// Stripe sends no id header; the event id is the body's `id` field,
    /// which the signature covers, and events are claimed by it.
    pub fn stripe() -> Self {
        Self {
            name: Cow::Borrowed("stripe"),
            signature_header: HeaderKey::from_static("stripe-signature"),
            format: Format::Fields(Fields::STRIPE),
            encoding: Encoding::Hex,
            id_header: None,
            timestamp: TimestampSource::Field,
            timestamp_format: TimestampFormat::UnixSeconds,
            template: Template::TIMESTAMP_DOT_BODY,
            unsigned_id: false,
            unsigned_timestamp: false,
            body_id_field: Some(Cow::Borrowed("id")),
            secret_format: SecretFormat::Raw {
                expected_prefix: Some("whsec_"),
            },
            signed_urls: None,
        }
    }

    /// GitHub: `X-Hub-Signature-256: sha256=<hex>` over the body alone.
    /// `X-GitHub-Delivery` is read when present, as metadata: the signature
    /// does not cover it, so anyone holding a captured request can resend
    /// it under a fresh delivery id, and it is never required. Events are
    /// claimed by a digest of the signed body instead (see
    /// [`EventKey`](super::EventKey)).
    pub fn github() -> Self {
        Self::body_only(
            "github",
            "x-hub-signature-256",
            "sha256=",
            Encoding::Hex,
            Some("x-github-delivery"),
        )
    }

    /// Shopify: `X-Shopify-Hmac-Sha256: <base64>` over the body alone.
    /// `X-Shopify-Webhook-Id` is read when present, as metadata (it is not
    /// signed); no timestamp is signed. Events are claimed by a digest of
    /// the signed body.
    pub fn shopify() -> Self {
        Self::body_only(
            "shopify",
            "x-shopify-hmac-sha256",
            "",
            Encoding::Base64,
            Some("x-shopify-webhook-id"),
        )
    }

    /// A provider that signs the body alone with one HMAC, and sends an
    /// unsigned delivery id that is read as metadata.
    fn body_only(
        name: &'static str,
        signature_header: &'static str,
        prefix: &'static str,
        encoding: Encoding,
        id_header: Option<&'static str>,
    ) -> Self {
        Self {
            format: Format::Single {
                prefix: Cow::Borrowed(prefix),
            },
            encoding,
            id_header: id_header.map(HeaderKey::from_static),
            unsigned_id: true,
            ..Self::plain(
                Cow::Borrowed(name),
                HeaderKey::from_static(signature_header),
            )
        }
    }

    /// Slack: `X-Slack-Signature: v0=<hex>` over `v0:{timestamp}:{body}`,
    /// timestamp in `X-Slack-Request-Timestamp`. Slack sends no event id
    /// header.
    pub fn slack() -> Self {
        Self {
            format: Format::Single {
                prefix: Cow::Borrowed("v0="),
            },
            timestamp: TimestampSource::Header(HeaderKey::from_static("x-slack-request-timestamp")),
            template: Template::SLACK,
            ..Self::plain(
                Cow::Borrowed("slack"),
                HeaderKey::from_static("x-slack-signature"),
            )
        }
    }

    /// Meta (Facebook, Instagram, WhatsApp, Messenger):
    /// `X-Hub-Signature-256: sha256=<hex>` over the body alone, keyed with
    /// the app secret. Meta signs no id and no timestamp: events are
    /// claimed by a digest of the signed body, and a replay is a duplicate
    /// only while its claim is kept.
    pub fn meta() -> Self {
        Self::body_only(
            "meta",
            "x-hub-signature-256",
            "sha256=",
            Encoding::Hex,
            None,
        )
    }

    /// Twitch EventSub: `Twitch-Eventsub-Message-Signature: sha256=<hex>`
    /// over the message id, the timestamp and the body with nothing
    /// between; the id in `Twitch-Eventsub-Message-Id`, the timestamp (RFC
    /// 3339, such as `2019-11-16T10:11:12.634234626Z`) in
    /// `Twitch-Eventsub-Message-Timestamp`, both signed. The timestamp is
    /// read strictly, which keeps the signed bytes to one split into id,
    /// timestamp and body.
    pub fn twitch() -> Self {
        Self {
            name: Cow::Borrowed("twitch"),
            signature_header: HeaderKey::from_static("twitch-eventsub-message-signature"),
            format: Format::Single {
                prefix: Cow::Borrowed("sha256="),
            },
            id_header: Some(HeaderKey::from_static("twitch-eventsub-message-id")),
            timestamp: TimestampSource::Header(HeaderKey::from_static(
                "twitch-eventsub-message-timestamp",
            )),
            timestamp_format: TimestampFormat::Rfc3339,
            template: Template::ID_TIMESTAMP_BODY,
            ..Self::slack()
        }
    }

    /// Zoom: `x-zm-signature: v0=<hex>` over `v0:{timestamp}:{body}`, the
    /// timestamp (seconds) in `x-zm-request-timestamp`, keyed with the
    /// app's secret token. Zoom sends no id header: events are claimed by
    /// a digest of the signed content.
    pub fn zoom() -> Self {
        Self {
            name: Cow::Borrowed("zoom"),
            signature_header: HeaderKey::from_static("x-zm-signature"),
            timestamp: TimestampSource::Header(HeaderKey::from_static("x-zm-request-timestamp")),
            ..Self::slack()
        }
    }

    /// Paddle Billing: `Paddle-Signature: ts=<ts>;h1=<hex>[;h1=<hex>..]`
    /// over `{ts}:{body}`, keyed with the whole secret
    /// (`pdl_ntfset_...`). Every `h1` is tried, so a header carrying
    /// several while a secret rotates verifies with either. Events are
    /// claimed by the body's `event_id`, which the signature covers.
    pub fn paddle() -> Self {
        Self {
            name: Cow::Borrowed("paddle"),
            signature_header: HeaderKey::from_static("paddle-signature"),
            format: Format::Fields(Fields::PADDLE),
            template: Template::TIMESTAMP_COLON_BODY,
            body_id_field: Some(Cow::Borrowed("event_id")),
            secret_format: SecretFormat::Raw {
                expected_prefix: None,
            },
            ..Self::stripe()
        }
    }

    /// Square: `x-square-hmacsha256-signature: <base64>` over the
    /// notification URL followed by the body, keyed with the subscription's
    /// signature key. `notification_url` is the URL as configured in
    /// Square, exactly: behind a proxy it is not the URL the request
    /// reached. Square signs no timestamp; events are claimed by the body's
    /// `event_id`, and a replay is a duplicate only while its claim is
    /// kept.
    ///
    /// ```
    /// use hooklatch::verify::Scheme;
    ///
    /// let square = Scheme::square("https://example.com/hooks/square")?;
    /// assert_eq!(square.name(), "square");
    /// # Ok::<(), hooklatch::verify::ConfigError>(())
    /// ```
    pub fn square(notification_url: &str) -> Result<Self, ConfigError> {
        if notification_url.is_empty() || notification_url.contains(['{', '}']) {
            return Err(ConfigError::InvalidTemplate(
                "the notification URL must be non-empty and hold no `{` or `}`",
            ));
        }
        Ok(Self {
            name: Cow::Borrowed("square"),
            template: Template::parse(&format!("{notification_url}{{body}}"))?,
            body_id_field: Some(Cow::Borrowed("event_id")),
            ..Self::body_only(
                "square",
                "x-square-hmacsha256-signature",
                "",
                Encoding::Base64,
                None,
            )
        })
    }

    /// Twilio: `X-Twilio-Signature: <base64>`, HMAC-SHA1 (feature `sha1`)
    /// keyed with the account's auth token, over the webhook URL followed
    /// by the body's form parameters sorted by name, each name then its
    /// value with nothing between. A JSON body (a `{` or `[` first) is
    /// signed as Twilio signs one: the URL with `bodySHA256=<hex SHA-256
    /// of the body>` added to its query, which covers the body.
    ///
    /// `webhook_url` is the URL exactly as configured in Twilio, query
    /// included: behind a proxy it is not the URL the request reached.
    /// The URL with its port written the other way (the default port added,
    /// or the port given removed) verifies too, as in Twilio's own
    /// libraries, unless nothing follows the host and port. Twilio signs
    /// no id and no timestamp: requests are claimed by a digest of the
    /// body, and a replay is a duplicate only while its claim is kept.
    /// `I-Twilio-Idempotency-Token` is read as metadata (it is not
    /// signed). Form names that are empty or hold `?`, `&` or `=` are
    /// refused: with them, sorted parameters could spell another
    /// request's signed URL. Twilio's signature does not mark where one
    /// parameter ends or say how often it appears (`Body=hi&From=x` and
    /// `Body=hiFromx` sign alike; repeats count once): such a rewritten
    /// replay verifies, and is claimed as the same request. A URL that
    /// ends at its host and port verifies only as given. Parameters sent
    /// in the query of a `GET` are not read: configure Twilio to `POST`.
    ///
    /// ```
    /// use hooklatch::verify::Scheme;
    ///
    /// let twilio = Scheme::twilio("https://example.com/hooks/sms")?;
    /// assert_eq!(twilio.name(), "twilio");
    /// assert!(Scheme::twilio("example.com/hooks/sms").is_err());
    /// assert!(Scheme::twilio("https:///hooks/sms").is_err());
    /// # Ok::<(), hooklatch::verify::ConfigError>(())
    /// ```
    pub fn twilio(webhook_url: &str) -> Result<Self, ConfigError> {
        let lower = webhook_url.to_ascii_lowercase();
        let host = lower
            .strip_prefix("https://")
            .or_else(|| lower.strip_prefix("http://"));
        let has_host = host.is_some_and(|rest| !rest.starts_with(['/', '?', ':', '@']));
        if !has_host
            || webhook_url.contains('#')
            || webhook_url.bytes().any(|byte| !byte.is_ascii_graphic())
        {
            return Err(ConfigError::InvalidTemplate(
                "the webhook URL must be an absolute http:// or https:// URL with a host, \
                 without spaces or a fragment",
            ));
        }
        Ok(Self {
            secret_format: SecretFormat::RawSha1,
            signed_urls: Some(Box::new(SignedUrls::new(webhook_url))),
            ..Self::body_only(
                "twilio",
                "x-twilio-signature",
                "",
                Encoding::Base64,
                Some("i-twilio-idempotency-token"),
            )
        })
    }

    /// Convoy's advanced signatures: `X-Convoy-Signature:
    /// t=<ts>,v1=<hex>[,v1=<hex>..]` over `{t},{body}` (HMAC-SHA256, hex:
    /// a project's default). Every `v1` is tried while a secret rotates;
    /// `v2` and later (other hashes) are passed over. Convoy signs no id:
    /// events are claimed by a digest of the signed content.
    pub fn convoy() -> Self {
        Self {
            name: Cow::Borrowed("convoy"),
            signature_header: HeaderKey::from_static("x-convoy-signature"),
            template: Template::TIMESTAMP_COMMA_BODY,
            body_id_field: None,
            secret_format: SecretFormat::Raw {
                expected_prefix: None,
            },
            ..Self::stripe()
        }
    }

    /// Outpost's default: `x-outpost-signature: v0=<hex>[,<hex>]` over the
    /// body alone, keyed with the whole secret (`whsec_` included, not
    /// decoded); the current secret's signature first, then the previous
    /// one's while it rotates. `x-outpost-event-id` is read as metadata
    /// (it is not signed): events are claimed by a digest of the body.
    pub fn outpost() -> Self {
        Self {
            format: Format::Listed { prefix: "v0=" },
            ..Self::body_only(
                "outpost",
                "x-outpost-signature",
                "v0=",
                Encoding::Hex,
                Some("x-outpost-event-id"),
            )
        }
    }

    /// Discord interactions: `X-Signature-Ed25519: <hex>`, an ed25519
    /// signature over the timestamp (`X-Signature-Timestamp`, seconds)
    /// followed by the body, checked with the application's public key
    /// given in hex as Discord's developer portal shows it (feature
    /// `ed25519`). Interactions are claimed by the body's `id`, which the
    /// signature covers. A key pair in hex (128 characters) signs, for
    /// tests.
    pub fn discord() -> Self {
        Self {
            name: Cow::Borrowed("discord"),
            signature_header: HeaderKey::from_static("x-signature-ed25519"),
            format: Format::Ed25519,
            encoding: Encoding::Hex,
            id_header: None,
            timestamp: TimestampSource::Header(HeaderKey::from_static("x-signature-timestamp")),
            timestamp_format: TimestampFormat::UnixSeconds,
            template: Template::TIMESTAMP_BODY,
            unsigned_id: false,
            unsigned_timestamp: false,
            body_id_field: Some(Cow::Borrowed("id")),
            secret_format: SecretFormat::HexEd25519,
            signed_urls: None,
        }
    }

    /// X (Twitter) Account Activity: `x-twitter-webhooks-signature:
    /// sha256=<base64>` over the body alone, keyed with the app's consumer
    /// secret. X signs no id and no timestamp: events are claimed by a
    /// digest of the body, and a replay is a duplicate only while its
    /// claim is kept.
    pub fn x() -> Self {
        Self::body_only(
            "x",
            "x-twitter-webhooks-signature",
            "sha256=",
            Encoding::Base64,
            None,
        )
    }

    /// SendGrid's event webhook: `X-Twilio-Email-Event-Webhook-Signature`,
    /// a base64 DER ECDSA P-256 signature (SHA-256) over the timestamp
    /// (`X-Twilio-Email-Event-Webhook-Timestamp`, seconds) followed by the
    /// body, checked with the verification key as SendGrid's settings show
    /// it (base64 DER; feature `p256`). SendGrid signs no id: a batch is
    /// claimed by a digest of the signed content. Verify only: no secret
    /// signs. Signatures with a high S are accepted: SendGrid's own
    /// published signatures have one, and the second form of a signature
    /// claims nothing new (the claim key is the content's digest).
    pub fn sendgrid() -> Self {
        Self {
            name: Cow::Borrowed("sendgrid"),
            signature_header: HeaderKey::from_static("x-twilio-email-event-webhook-signature"),
            format: Format::EcdsaP256,
            encoding: Encoding::Base64,
            timestamp: TimestampSource::Header(HeaderKey::from_static(
                "x-twilio-email-event-webhook-timestamp",
            )),
            body_id_field: None,
            secret_format: SecretFormat::Base64DerP256,
            ..Self::discord()
        }
    }

    /// A scheme of your own: one HMAC-SHA256 signature in `signature_header`,
    /// hex encoded, over the body. Adjust it with [`with_prefix`](Self::with_prefix),
    /// [`with_encoding`](Self::with_encoding), [`with_id_header`](Self::with_id_header),
    /// [`with_timestamp_header`](Self::with_timestamp_header) and
    /// [`with_template`](Self::with_template). Secrets are used as raw bytes.
    pub fn custom(name: &str, signature_header: &str) -> Result<Self, ConfigError> {
        Ok(Self::plain(
            Cow::Owned(name.to_owned()),
            HeaderKey::new(signature_header)?,
        ))
    }

    /// One hex HMAC-SHA256 signature over the body, with the secret's
    /// bytes as the key, and nothing else read: what each scheme changes.
    fn plain(name: Cow<'static, str>, signature_header: HeaderKey) -> Self {
        Self {
            name,
            signature_header,
            format: Format::Single {
                prefix: Cow::Borrowed(""),
            },
            encoding: Encoding::Hex,
            id_header: None,
            timestamp: TimestampSource::None,
            timestamp_format: TimestampFormat::UnixSeconds,
            template: Template::BODY,
            unsigned_id: false,
            unsigned_timestamp: false,
            body_id_field: None,
            secret_format: SecretFormat::Raw {
                expected_prefix: None,
            },
            signed_urls: None,
        }
    }

    /// Shopify Events, the subscriptions Shopify says will become its main
    /// mechanism: the same signature as [`shopify`](Self::shopify), in
    /// `Shopify-Hmac-Sha256` (no `X-`); `Shopify-Webhook-Id` is read as
    /// metadata, and the event's type is the body's `topic`. Events are
    /// claimed by a digest of the signed body.
    pub fn shopify_events() -> Self {
        Self::body_only(
            "shopify-events",
            "shopify-hmac-sha256",
            "",
            Encoding::Base64,
            Some("shopify-webhook-id"),
        )
    }

    /// Hook0 (and Coinbase's developer platform, which sends Hook0's
    /// header): `X-Hook0-Signature: t=<ts>,h=<names>,v1=<hex>`, an
    /// HMAC-SHA256 (hex) with the subscription secret as it is written,
    /// over `{t}.{names}.{values}.{body}`: the names of the covered headers
    /// as `h` lists them, then their values joined by `.`. Every covered
    /// header must arrive once (at most [`MAX_COVERED_HEADERS`]), named
    /// once in lowercase without a `.` and not the signature header, or the
    /// request is refused before any HMAC.
    ///
    /// The older `v0=<hex>` (over `{t}.{body}` alone) is not accepted: it
    /// leaves the headers unsigned, and a captured request stripped of its
    /// `v1` would verify by it under another claim key. Hook0 and Coinbase
    /// send `v1` beside it.
    ///
    /// `X-Event-Id` is the claim key when `h` covers it and no covered
    /// value holds a `.`: a `.` in a value lets a replay move the borders
    /// between covered values and the body without changing what was
    /// signed. Otherwise events are claimed by a digest of the whole
    /// signed text, which such a replay does not change. A
    /// [`Signer`](super::Signer) of this scheme writes `t`,
    /// `h=x-event-id` and `v1`, and refuses an id holding a `.`.
    pub fn hook0() -> Self {
        Self {
            name: Cow::Borrowed("hook0"),
            signature_header: HeaderKey::from_static("x-hook0-signature"),
            format: Format::Fields(Fields::HOOK0),
            encoding: Encoding::Hex,
            id_header: Some(HeaderKey::from_static("x-event-id")),
            timestamp: TimestampSource::Field,
            timestamp_format: TimestampFormat::UnixSeconds,
            template: Template::TIMESTAMP_DOT_BODY,
            unsigned_id: true,
            unsigned_timestamp: false,
            body_id_field: None,
            secret_format: SecretFormat::Raw {
                expected_prefix: None,
            },
            signed_urls: None,
        }
    }

    /// Looks a provider's scheme up by its short name: `standard`, `svix`,
    /// `stripe`, `github`, `shopify`, `shopify-events`, `slack`, `meta`, `twitch`, `zoom`,
    /// `paddle`, `convoy`, `outpost`, `discord`, `sendgrid`, `x` or `hook0`
    /// ([`NAMES`](Self::NAMES)). Square's and Twilio's need the URL
    /// they sign: [`Scheme::square`], [`Scheme::twilio`].
    pub fn by_name(name: &str) -> Option<Self> {
        Some(match name {
            "standard" => Self::standard_webhooks(),
            "svix" => Self::svix(),
            "stripe" => Self::stripe(),
            "github" => Self::github(),
            "shopify" => Self::shopify(),
            "shopify-events" => Self::shopify_events(),
            "slack" => Self::slack(),
            "meta" => Self::meta(),
            "twitch" => Self::twitch(),
            "zoom" => Self::zoom(),
            "paddle" => Self::paddle(),
            "convoy" => Self::convoy(),
            "outpost" => Self::outpost(),
            "discord" => Self::discord(),
            "sendgrid" => Self::sendgrid(),
            "x" => Self::x(),
            "hook0" => Self::hook0(),
            _ => return None,
        })
    }

    /// Every name [`by_name`](Self::by_name) knows.
    pub const NAMES: &'static [&'static str] = &[
        "standard",
        "svix",
        "stripe",
        "github",
        "shopify",
        "shopify-events",
        "slack",
        "meta",
        "twitch",
        "zoom",
        "paddle",
        "convoy",
        "outpost",
        "discord",
        "sendgrid",
        "x",
        "hook0",
    ];

    /// Sets the text before a single signature, such as `sha256=`.
    /// Versioned (Standard Webhooks) and field (Stripe) formats become a
    /// single signature with this prefix.
    #[must_use]
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        self.format = Format::Single {
            prefix: Cow::Owned(prefix.to_owned()),
        };
        self
    }

    /// Sets how signature bytes are written: hex or base64.
    #[must_use]
    pub fn with_encoding(mut self, encoding: Encoding) -> Self {
        self.encoding = encoding;
        self
    }

    /// Reads the event id from this header. The template must sign it
    /// (`{id}`), unless [`insecure_allow_unsigned_id`](Self::insecure_allow_unsigned_id).
    pub fn with_id_header(mut self, name: &str) -> Result<Self, ConfigError> {
        self.id_header = Some(HeaderKey::new(name)?);
        Ok(self)
    }

    /// Reads the timestamp (whole seconds since the Unix epoch) from this
    /// header and checks it against the verifier's tolerance. The template
    /// must sign it (`{timestamp}`), unless
    /// [`insecure_allow_unsigned_timestamp`](Self::insecure_allow_unsigned_timestamp).
    pub fn with_timestamp_header(mut self, name: &str) -> Result<Self, ConfigError> {
        self.timestamp = TimestampSource::Header(HeaderKey::new(name)?);
        Ok(self)
    }

    /// Lets the id header be one the template does not sign. Anyone can
    /// change such an id, so it is metadata only: read when present and
    /// well formed, never required, and not what events are claimed by
    /// unless you choose [`EventKey::UnsignedHeader`](super::EventKey::UnsignedHeader).
    #[must_use]
    pub fn insecure_allow_unsigned_id(mut self) -> Self {
        self.unsigned_id = true;
        self
    }

    /// Lets the timestamp header be one the template does not sign. It is
    /// then read and checked against the tolerance when present, but never
    /// required, and it stops no replay: anyone can change it.
    /// [`has_timestamp`](Self::has_timestamp) stays false.
    #[must_use]
    pub fn insecure_allow_unsigned_timestamp(mut self) -> Self {
        self.unsigned_timestamp = true;
        self
    }

    /// Names the top-level string field of the JSON body that holds the
    /// event id, as Stripe's `id`. The body is signed, so the id is too,
    /// and events are claimed by it by default.
    #[must_use]
    pub fn with_body_id_field(mut self, field: &str) -> Self {
        self.body_id_field = Some(Cow::Owned(field.to_owned()));
        self
    }

    /// Sets the signed content: `{body}` exactly once, optionally `{id}`
    /// and `{timestamp}` (each needs its header), other text verbatim.
    /// For example `{id}.{timestamp}.{body}` or `v0:{timestamp}:{body}`.
    pub fn with_template(mut self, template: &str) -> Result<Self, ConfigError> {
        self.template = Template::parse(template)?;
        Ok(self)
    }

    /// The scheme's short name, such as `standard` or `stripe`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The header that carries the signatures, lowercase.
    pub fn signature_header(&self) -> &str {
        self.signature_header.as_str()
    }

    /// The header that carries the event id, if the scheme has one.
    pub fn id_header(&self) -> Option<&str> {
        self.id_header.as_ref().map(HeaderKey::as_str)
    }

    /// Whether the scheme reads a timestamp and signs it, and so resists
    /// replays on its own within the tolerance.
    pub fn has_timestamp(&self) -> bool {
        self.timestamp != TimestampSource::None && self.signs(&Segment::Timestamp)
    }

    /// Whether the signature covers the id header's value.
    pub fn signs_id(&self) -> bool {
        self.id_header.is_some() && self.signs(&Segment::Id)
    }

    /// The JSON body field that holds the event id, if the scheme names one.
    pub fn body_id_field(&self) -> Option<&str> {
        self.body_id_field.as_deref()
    }

    fn signs(&self, segment: &Segment) -> bool {
        self.template.signs(segment)
    }

    /// Checks that the template only uses what the scheme reads, and that
    /// every id or timestamp read is signed unless opted out.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let reads_timestamp = self.timestamp != TimestampSource::None;
        if self.signs(&Segment::Id) && self.id_header.is_none() {
            return Err(ConfigError::InvalidTemplate(
                "`{id}` is used but the scheme has no id header",
            ));
        }
        if self.signs(&Segment::Timestamp) && !reads_timestamp {
            return Err(ConfigError::InvalidTemplate(
                "`{timestamp}` is used but the scheme has no timestamp header",
            ));
        }
        if let Some(name) = &self.id_header
            && !self.signs(&Segment::Id)
            && !self.unsigned_id
        {
            return Err(ConfigError::UnsignedHeader {
                what: "id",
                header: name.as_str().to_owned(),
            });
        }
        if reads_timestamp && !self.signs(&Segment::Timestamp) && !self.unsigned_timestamp {
            return Err(ConfigError::UnsignedHeader {
                what: "timestamp",
                header: self.timestamp_header().into_owned(),
            });
        }
        Ok(())
    }

    /// Feeds the signed content, piece by piece, to `sink`.
    pub(crate) fn signed_content(
        &self,
        id: Option<&[u8]>,
        timestamp: Option<&[u8]>,
        covered: Option<&CoveredHeaders<'_>>,
        body: &[u8],
        mut sink: impl FnMut(&[u8]),
    ) {
        let Some(covered) = covered else {
            self.template.feed(id, timestamp, body, sink);
            return;
        };
        // Hook0's `v1`: the timestamp, the covered headers' names, their
        // values, and the body, each after a `.`.
        sink(timestamp.unwrap_or_default());
        sink(b".");
        sink(covered.names);
        sink(b".");
        for (at, value) in covered.values().enumerate() {
            if at > 0 {
                sink(b".");
            }
            sink(value);
        }
        sink(b".");
        sink(body);
    }

    /// The keys of the header's covered-header fields, for a scheme whose
    /// signatures name the headers they cover (Hook0's).
    pub(super) fn covered(&self) -> Option<Covered> {
        match &self.format {
            Format::Fields(fields) => fields.covered,
            _ => None,
        }
    }

    /// Whether a signed `id` holds a character it may not: one of what
    /// separates the id from its neighbours in the signed content (`.` for
    /// Standard Webhooks and Svix). One signature would otherwise verify
    /// two splits into id, timestamp and body, and so two ids. The
    /// characters are gathered once a call, not once a character: this runs
    /// on every request.
    pub(crate) fn id_holds_delimiter(&self, id: &str) -> bool {
        let excluded = self.id_delimiters();
        id.bytes().any(|byte| {
            excluded
                .checked_shr(u32::from(byte))
                .is_some_and(|bits| bits & 1 == 1)
        })
    }

    /// The characters an id may not hold (see
    /// [`id_holds_delimiter`](Self::id_holds_delimiter)), as a mask of
    /// bits by ASCII code.
    pub(crate) fn id_delimiters(&self) -> u128 {
        let mut excluded = self.template.id_border_mask();
        // With an RFC 3339 timestamp right after the id (Twitch), an id
        // holding a `:` could hold the real timestamp and more, leaving a
        // date-time in the body to be read as the timestamp: every
        // date-time has a `:`, so no id may.
        if self.timestamp_format == TimestampFormat::Rfc3339 && self.template.id_touches_timestamp()
        {
            excluded |= 1 << b':';
        }
        excluded
    }

    /// The header the timestamp is read from.
    pub(crate) fn timestamp_header(&self) -> Cow<'static, str> {
        match &self.timestamp {
            TimestampSource::Header(name) => name.to_cow(),
            TimestampSource::None | TimestampSource::Field => self.signature_header.to_cow(),
        }
    }

    /// Whether the header can carry more than one signature.
    pub(crate) fn carries_several(&self) -> bool {
        !matches!(
            self.format,
            Format::Single { .. } | Format::Ed25519 | Format::EcdsaP256
        )
    }

    /// Whether the scheme signs with a shared secret (HMAC), not a key
    /// pair.
    #[cfg(all(test, feature = "http"))]
    pub(crate) fn signs_with_a_secret(&self) -> bool {
        !matches!(self.format, Format::Ed25519 | Format::EcdsaP256)
    }

    /// Whether the scheme has `v1a` (ed25519) signatures.
    pub(crate) fn has_ed25519(&self) -> bool {
        matches!(self.format, Format::Versioned | Format::Ed25519)
    }

    /// For a scheme whose signed content is built from the body (Twilio's),
    /// the content signed under each URL it may have signed; `None` for
    /// every other scheme, which signs its template.
    pub(crate) fn rebuilt_contents(
        &self,
        body: &[u8],
    ) -> Option<Result<Vec<Vec<u8>>, VerifyError>> {
        let urls = self.signed_urls.as_ref()?;
        Some(
            urls.contents(body)
                .map_err(|problem| VerifyError::MalformedBody {
                    reason: match problem {
                        BodyProblem::NotAForm => {
                            "not a form: a pair does not decode (a bad escape, or not UTF-8)"
                        }
                        BodyProblem::UnusualName => {
                            "a form name is empty, holds `?`, `&` or `=`, or is `bodySHA256`"
                        }
                        BodyProblem::TooManyPairs => "more than 256 form pairs",
                    },
                }),
        )
    }

    /// The body limit a verifier of this scheme has unless told
    /// otherwise, where it is not the verifier's default: 64 KiB for
    /// Twilio's forms.
    pub(crate) fn own_body_limit(&self) -> Option<usize> {
        self.signed_urls
            .is_some()
            .then_some(super::twilio::TWILIO_BODY_LIMIT)
    }

    /// Whether the scheme has ECDSA P-256 signatures.
    pub(crate) fn has_ecdsa_p256(&self) -> bool {
        self.format == Format::EcdsaP256
    }
}

#[cfg(test)]
mod tests;
