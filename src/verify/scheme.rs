//! Signature schemes as data: where the id, timestamp and signatures are,
//! what bytes are signed, and how signatures are written.
//!
//! Every provider's scheme runs through the same parser and comparison
//! loop, so each gets the same caps, constant-time comparison and error
//! reporting.

use std::borrow::Cow;

use super::encoding::Encoding;
use super::error::{ConfigError, Malformed, VerifyError};
use super::headers::{HeaderKey, HeaderLookup, Headers};
use super::keys::{Algorithm, SecretFormat};
use super::template::{Segment, Template};

/// The most signatures one header may carry. Rotation needs two or three;
/// the cap bounds the work an attacker can ask for.
pub const MAX_SIGNATURES: usize = 16;

/// The most `v1a` (ed25519) signatures of one header that are checked;
/// later ones are ignored. Each check hashes the whole body with SHA-512
/// and anyone can send junk ones, so this bounds the cost of a forged
/// request at four body hashes per ed25519 key, next to one HMAC per
/// secret for `v1`.
pub const MAX_ED25519_SIGNATURES: usize = 4;

/// The longest header value read, in bytes.
pub const MAX_HEADER_LEN: usize = 4096;

/// The longest event id accepted, in bytes.
pub const MAX_ID_LEN: usize = 256;

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
}

/// How signatures sit in the signature header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Format {
    /// Space-separated `version,signature` entries: `v1` is HMAC-SHA256,
    /// `v1a` ed25519 (Standard Webhooks, Svix).
    Versioned,
    /// Comma-separated `key=value` fields; `t` is the timestamp, `v1` an
    /// HMAC-SHA256 signature (Stripe).
    Fields,
    /// One signature after a fixed prefix (GitHub's `sha256=`, Slack's `v0=`).
    Single { prefix: Cow<'static, str> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// Where the timestamp is read from.
pub(super) enum TimestampSource {
    None,
    Header(HeaderKey),
    /// The `t=` field of a [`Format::Fields`] signature header.
    Field,
}

/// The id, timestamp and signatures read from one request's headers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Envelope<'h> {
    pub(crate) id: Option<&'h str>,
    pub(crate) timestamp: Option<Timestamp<'h>>,
    signatures: &'h [u8],
}

/// A timestamp as sent (the signed text) and as a number.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timestamp<'h> {
    pub(crate) seconds: i64,
    pub(crate) text: &'h [u8],
}

/// One signature found in a header: its algorithm (`None` for a version
/// this library does not know) and its encoded text.
pub(crate) type Candidate<'h> = (Option<Algorithm>, &'h [u8]);

impl Scheme {
    fn versioned(name: &'static str, [id, timestamp, signature]: [&'static str; 3]) -> Self {
        Self {
            name: Cow::Borrowed(name),
            signature_header: HeaderKey::from_static(signature),
            format: Format::Versioned,
            encoding: Encoding::Base64,
            id_header: Some(HeaderKey::from_static(id)),
            timestamp: TimestampSource::Header(HeaderKey::from_static(timestamp)),
            template: Template::ID_DOT_TIMESTAMP_DOT_BODY,
            unsigned_id: false,
            unsigned_timestamp: false,
            body_id_field: None,
            secret_format: SecretFormat::Whsec,
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
            format: Format::Fields,
            encoding: Encoding::Hex,
            id_header: None,
            timestamp: TimestampSource::Field,
            template: Template::TIMESTAMP_DOT_BODY,
            unsigned_id: false,
            unsigned_timestamp: false,
            body_id_field: Some(Cow::Borrowed("id")),
            secret_format: SecretFormat::Raw {
                expected_prefix: Some("whsec_"),
            },
        }
    }

    /// GitHub: `X-Hub-Signature-256: sha256=<hex>` over the body alone.
    /// `X-GitHub-Delivery` is read when present, as metadata: the signature
    /// does not cover it, so anyone holding a captured request can resend
    /// it under a fresh delivery id, and it is never required. Events are
    /// claimed by a digest of the signed body instead (see
    /// [`EventKey`](super::EventKey)).
    pub fn github() -> Self {
        Self {
            name: Cow::Borrowed("github"),
            signature_header: HeaderKey::from_static("x-hub-signature-256"),
            format: Format::Single {
                prefix: Cow::Borrowed("sha256="),
            },
            encoding: Encoding::Hex,
            id_header: Some(HeaderKey::from_static("x-github-delivery")),
            timestamp: TimestampSource::None,
            template: Template::BODY,
            unsigned_id: true,
            unsigned_timestamp: false,
            body_id_field: None,
            secret_format: SecretFormat::Raw {
                expected_prefix: None,
            },
        }
    }

    /// Shopify: `X-Shopify-Hmac-Sha256: <base64>` over the body alone.
    /// `X-Shopify-Webhook-Id` is read when present, as metadata (it is not
    /// signed); no timestamp is signed. Events are claimed by a digest of
    /// the signed body.
    pub fn shopify() -> Self {
        Self {
            name: Cow::Borrowed("shopify"),
            signature_header: HeaderKey::from_static("x-shopify-hmac-sha256"),
            format: Format::Single {
                prefix: Cow::Borrowed(""),
            },
            encoding: Encoding::Base64,
            id_header: Some(HeaderKey::from_static("x-shopify-webhook-id")),
            timestamp: TimestampSource::None,
            template: Template::BODY,
            unsigned_id: true,
            unsigned_timestamp: false,
            body_id_field: None,
            secret_format: SecretFormat::Raw {
                expected_prefix: None,
            },
        }
    }

    /// Slack: `X-Slack-Signature: v0=<hex>` over `v0:{timestamp}:{body}`,
    /// timestamp in `X-Slack-Request-Timestamp`. Slack sends no event id
    /// header.
    pub fn slack() -> Self {
        Self {
            name: Cow::Borrowed("slack"),
            signature_header: HeaderKey::from_static("x-slack-signature"),
            format: Format::Single {
                prefix: Cow::Borrowed("v0="),
            },
            encoding: Encoding::Hex,
            id_header: None,
            timestamp: TimestampSource::Header(HeaderKey::from_static("x-slack-request-timestamp")),
            template: Template::SLACK,
            unsigned_id: false,
            unsigned_timestamp: false,
            body_id_field: None,
            secret_format: SecretFormat::Raw {
                expected_prefix: None,
            },
        }
    }

    /// A scheme of your own: one HMAC-SHA256 signature in `signature_header`,
    /// hex encoded, over the body. Adjust it with [`with_prefix`](Self::with_prefix),
    /// [`with_encoding`](Self::with_encoding), [`with_id_header`](Self::with_id_header),
    /// [`with_timestamp_header`](Self::with_timestamp_header) and
    /// [`with_template`](Self::with_template). Secrets are used as raw bytes.
    pub fn custom(name: &str, signature_header: &str) -> Result<Self, ConfigError> {
        Ok(Self {
            name: Cow::Owned(name.to_owned()),
            signature_header: HeaderKey::new(signature_header)?,
            format: Format::Single {
                prefix: Cow::Borrowed(""),
            },
            encoding: Encoding::Hex,
            id_header: None,
            timestamp: TimestampSource::None,
            template: Template::BODY,
            unsigned_id: false,
            unsigned_timestamp: false,
            body_id_field: None,
            secret_format: SecretFormat::Raw {
                expected_prefix: None,
            },
        })
    }

    /// Looks a provider's scheme up by its short name: `standard`, `svix`,
    /// `stripe`, `github`, `shopify` or `slack`.
    pub fn by_name(name: &str) -> Option<Self> {
        Some(match name {
            "standard" => Self::standard_webhooks(),
            "svix" => Self::svix(),
            "stripe" => Self::stripe(),
            "github" => Self::github(),
            "shopify" => Self::shopify(),
            "slack" => Self::slack(),
            _ => return None,
        })
    }

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

    /// The version label a verifier with these algorithms looks for.
    pub(crate) fn expected_label(&self, hmac: bool, ed25519: bool) -> Cow<'static, str> {
        match (&self.format, hmac, ed25519) {
            (Format::Versioned, true, true) => Cow::Borrowed("v1` or `v1a"),
            (Format::Versioned, false, true) => Cow::Borrowed("v1a"),
            (Format::Versioned | Format::Fields, _, _) => Cow::Borrowed("v1"),
            (Format::Single { prefix }, _, _) if prefix.is_empty() => {
                Cow::Borrowed(self.encoding.name())
            }
            (Format::Single { prefix }, _, _) => Cow::Owned(format!("{prefix}...")),
        }
    }

    /// Reads id, timestamp and signature header; checks their shape.
    pub(crate) fn read<'h>(
        &self,
        headers: &'h (impl Headers + ?Sized),
        accepts: impl Fn(Algorithm) -> bool,
    ) -> Result<Envelope<'h>, VerifyError> {
        // What the signature does not cover is never required: an unsigned
        // id or timestamp is read only when present and well formed.
        let id = match &self.id_header {
            Some(name) if self.signs(&Segment::Id) => {
                Some(read_id(name, required(headers, name)?)?)
            }
            Some(name) => optional(headers, name).and_then(|value| read_id(name, value).ok()),
            None => None,
        };
        let signature_value = required(headers, &self.signature_header)?;
        let (signatures, timestamp) = match &self.timestamp {
            TimestampSource::None => (signature_value, None),
            TimestampSource::Header(name) if self.signs(&Segment::Timestamp) => {
                let text = required(headers, name)?;
                (signature_value, Some(read_timestamp(name, text)?))
            }
            TimestampSource::Header(name) => {
                let timestamp =
                    optional(headers, name).and_then(|text| read_timestamp(name, text).ok());
                (signature_value, timestamp)
            }
            TimestampSource::Field => {
                let text = self.timestamp_field(signature_value)?;
                let timestamp = read_timestamp(&self.signature_header, text)?;
                (signature_value, Some(timestamp))
            }
        };
        let signatures = match &self.format {
            Format::Single { prefix } => match signatures.strip_prefix(prefix.as_bytes()) {
                Some(rest) => rest,
                None => return Err(self.no_supported_signature(1, &accepts)),
            },
            Format::Versioned | Format::Fields => signatures,
        };
        let envelope = Envelope {
            id,
            timestamp,
            signatures,
        };
        self.check_signatures(&envelope, &accepts)?;
        Ok(envelope)
    }

    fn no_supported_signature(
        &self,
        found: usize,
        accepts: &impl Fn(Algorithm) -> bool,
    ) -> VerifyError {
        VerifyError::NoSupportedSignature {
            name: self.signature_header.to_cow(),
            expected: self
                .expected_label(accepts(Algorithm::HmacSha256), accepts(Algorithm::Ed25519)),
            found,
        }
    }

    fn malformed(&self, reason: Malformed) -> VerifyError {
        VerifyError::MalformedHeader {
            name: self.signature_header.to_cow(),
            reason,
        }
    }

    /// Counts signatures, enforces the cap, and makes sure at least one
    /// has a supported version. Decoding waits for the comparison.
    fn check_signatures(
        &self,
        envelope: &Envelope<'_>,
        accepts: &impl Fn(Algorithm) -> bool,
    ) -> Result<(), VerifyError> {
        let mut total = 0;
        let mut supported = 0;
        for candidate in self.candidates(envelope) {
            let (algorithm, _) = candidate?;
            total += 1;
            if total > MAX_SIGNATURES {
                return Err(self.malformed(Malformed::TooManySignatures {
                    max: MAX_SIGNATURES,
                }));
            }
            supported += usize::from(algorithm.is_some_and(accepts));
        }
        if supported == 0 {
            return Err(self.no_supported_signature(total, accepts));
        }
        Ok(())
    }

    /// The error for a header none of whose supported signatures decodes.
    pub(crate) fn bad_encoding(&self) -> VerifyError {
        self.malformed(Malformed::BadEncoding(self.encoding.name()))
    }

    /// The signatures in the header, in order. Errors on an entry without
    /// a version label.
    pub(crate) fn candidates<'h>(
        &self,
        envelope: &Envelope<'h>,
    ) -> impl Iterator<Item = Result<Candidate<'h>, VerifyError>> + use<'h, '_> {
        let (separator, pair): (u8, u8) = match self.format {
            Format::Versioned => (b' ', b','),
            Format::Fields => (b',', b'='),
            Format::Single { .. } => (0, 0),
        };
        let single = matches!(self.format, Format::Single { .. });
        let entries = envelope
            .signatures
            .split(move |byte| !single && *byte == separator)
            .map(<[u8]>::trim_ascii)
            .filter(|entry| !entry.is_empty());
        entries.filter_map(move |entry| {
            if single {
                return Some(Ok((Some(Algorithm::HmacSha256), entry)));
            }
            let Some(at) = entry.iter().position(|byte| *byte == pair) else {
                return Some(Err(self.malformed(Malformed::MissingVersion)));
            };
            let (label, text) = (&entry[..at], &entry[at + 1..]);
            match (&self.format, label) {
                (Format::Fields, b"t") => None,
                (_, b"v1") => Some(Ok((Some(Algorithm::HmacSha256), text))),
                (Format::Versioned, b"v1a") => Some(Ok((Some(Algorithm::Ed25519), text))),
                _ => Some(Ok((None, text))),
            }
        })
    }

    fn timestamp_field<'h>(&self, value: &'h [u8]) -> Result<&'h [u8], VerifyError> {
        let mut found = None;
        for field in value.split(|byte| *byte == b',') {
            if let Some(text) = field.trim_ascii().strip_prefix(b"t=")
                && found.replace(text).is_some()
            {
                return Err(self.malformed(Malformed::RepeatedField("t")));
            }
        }
        found.ok_or_else(|| self.malformed(Malformed::MissingField("t")))
    }

    /// Feeds the signed content, piece by piece, to `sink`.
    pub(crate) fn signed_content(
        &self,
        id: Option<&[u8]>,
        timestamp: Option<&[u8]>,
        body: &[u8],
        sink: impl FnMut(&[u8]),
    ) {
        self.template.feed(id, timestamp, body, sink);
    }

    pub(crate) fn encoding(&self) -> Encoding {
        self.encoding
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
        !matches!(self.format, Format::Single { .. })
    }

    /// Whether the scheme has `v1a` (ed25519) signatures.
    pub(crate) fn has_ed25519(&self) -> bool {
        self.format == Format::Versioned
    }
}

fn required<'h>(
    headers: &'h (impl Headers + ?Sized),
    name: &HeaderKey,
) -> Result<&'h [u8], VerifyError> {
    let malformed = |reason| VerifyError::MalformedHeader {
        name: name.to_cow(),
        reason,
    };
    match headers.lookup(name) {
        HeaderLookup::Missing => Err(VerifyError::MissingHeader {
            name: name.to_cow(),
        }),
        HeaderLookup::Repeated => Err(VerifyError::RepeatedHeader {
            name: name.to_cow(),
        }),
        HeaderLookup::One(value) => {
            if value.len() > MAX_HEADER_LEN {
                Err(malformed(Malformed::TooLong {
                    max: MAX_HEADER_LEN,
                }))
            } else if value.iter().all(u8::is_ascii_whitespace) {
                Err(malformed(Malformed::Empty))
            } else {
                // Each reader checks its own characters strictly: ids are
                // visible ASCII, timestamps digits, signatures their encoding.
                Ok(value)
            }
        }
    }
}

/// A header's value when it is present once, within the length cap and not
/// blank; `None` otherwise.
fn optional<'h>(headers: &'h (impl Headers + ?Sized), name: &HeaderKey) -> Option<&'h [u8]> {
    match headers.lookup(name) {
        HeaderLookup::One(value)
            if value.len() <= MAX_HEADER_LEN && !value.iter().all(u8::is_ascii_whitespace) =>
        {
            Some(value)
        }
        _ => None,
    }
}

fn read_id<'h>(name: &HeaderKey, value: &'h [u8]) -> Result<&'h str, VerifyError> {
    let malformed = |reason| VerifyError::MalformedHeader {
        name: name.to_cow(),
        reason,
    };
    if value.len() > MAX_ID_LEN {
        return Err(malformed(Malformed::TooLong { max: MAX_ID_LEN }));
    }
    if !value.iter().all(u8::is_ascii_graphic) {
        return Err(malformed(Malformed::NotVisibleAscii));
    }
    // Visible ASCII is valid UTF-8.
    std::str::from_utf8(value).map_err(|_| malformed(Malformed::NotVisibleAscii))
}

fn read_timestamp<'h>(name: &HeaderKey, text: &'h [u8]) -> Result<Timestamp<'h>, VerifyError> {
    let malformed = |reason| VerifyError::MalformedHeader {
        name: name.to_cow(),
        reason,
    };
    let negative = text.starts_with(b"-");
    let digits = if negative { &text[1..] } else { text };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(malformed(Malformed::TimestampNotInteger));
    }
    // Accumulate towards the sign, so that i64::MIN parses too.
    let mut seconds: i64 = 0;
    for digit in digits {
        let digit = i64::from(digit - b'0');
        seconds = seconds
            .checked_mul(10)
            .and_then(|s| {
                if negative {
                    s.checked_sub(digit)
                } else {
                    s.checked_add(digit)
                }
            })
            .ok_or_else(|| malformed(Malformed::TimestampOutOfRange))?;
    }
    Ok(Timestamp { seconds, text })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> Result<i64, VerifyError> {
        read_timestamp(&HeaderKey::from_static("t"), text.as_bytes()).map(|t| t.seconds)
    }

    #[test]
    fn timestamps_are_strict_decimal_integers() {
        assert_eq!(ts("1614265330"), Ok(1614265330));
        assert_eq!(ts("-1"), Ok(-1));
        assert_eq!(ts("0"), Ok(0));
        assert_eq!(ts("9223372036854775807"), Ok(i64::MAX));
        for bad in ["1.5", " 123", "+5", "-", "", "0x10", "1e9"] {
            assert!(
                matches!(
                    ts(bad),
                    Err(VerifyError::MalformedHeader {
                        reason: Malformed::TimestampNotInteger,
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
        assert_eq!(ts("-9223372036854775808"), Ok(i64::MIN));
        for huge in [
            "99999999999999999999",
            "9223372036854775808",
            "-9223372036854775809",
        ] {
            assert!(
                matches!(
                    ts(huge),
                    Err(VerifyError::MalformedHeader {
                        reason: Malformed::TimestampOutOfRange,
                        ..
                    })
                ),
                "{huge}"
            );
        }
    }

    #[test]
    fn templates_are_parsed_and_checked() {
        let scheme = Scheme::custom("x", "x-sig").unwrap();
        assert!(scheme.clone().with_template("{body}").is_ok());
        assert!(
            scheme
                .clone()
                .with_template("v0:{timestamp}:{body}")
                .is_ok()
        );
        for bad in [
            "",
            "{id}",
            "{body}{body}",
            "{body",
            "{nope}{body}",
            "}{body}",
        ] {
            assert!(scheme.clone().with_template(bad).is_err(), "{bad:?}");
        }
        let needs_id = scheme.clone().with_template("{id}.{body}").unwrap();
        assert!(needs_id.validate().is_err());
        assert!(needs_id.with_id_header("x-id").unwrap().validate().is_ok());
    }

    #[test]
    fn ids_and_timestamps_read_must_be_signed_unless_opted_out() {
        let unsigned_id = Scheme::custom("x", "x-sig")
            .unwrap()
            .with_id_header("x-id")
            .unwrap();
        assert_eq!(
            unsigned_id.validate(),
            Err(ConfigError::UnsignedHeader {
                what: "id",
                header: "x-id".into()
            })
        );
        let opted = unsigned_id.clone().insecure_allow_unsigned_id();
        assert!(opted.validate().is_ok());
        assert!(!opted.signs_id());
        let signed = unsigned_id.with_template("{id}.{body}").unwrap();
        assert!(signed.validate().is_ok());
        assert!(signed.signs_id());

        let unsigned_timestamp = Scheme::custom("x", "x-sig")
            .unwrap()
            .with_timestamp_header("x-ts")
            .unwrap();
        assert!(matches!(
            unsigned_timestamp.validate(),
            Err(ConfigError::UnsignedHeader {
                what: "timestamp",
                ..
            })
        ));
        let opted = unsigned_timestamp
            .clone()
            .insecure_allow_unsigned_timestamp();
        assert!(opted.validate().is_ok());
        assert!(
            !opted.has_timestamp(),
            "an unsigned timestamp stops no replay"
        );
        let signed = unsigned_timestamp
            .with_template("{timestamp}.{body}")
            .unwrap();
        assert!(signed.has_timestamp());
        // Stripe's `t=` field unsigned is refused the same way.
        assert!(
            Scheme::stripe()
                .with_template("{body}")
                .unwrap()
                .validate()
                .is_err()
        );
    }

    #[test]
    fn providers_say_what_they_sign() {
        for (scheme, signs_id, has_timestamp) in [
            (Scheme::standard_webhooks(), true, true),
            (Scheme::svix(), true, true),
            (Scheme::stripe(), false, true),
            (Scheme::github(), false, false),
            (Scheme::shopify(), false, false),
            (Scheme::slack(), false, true),
        ] {
            assert!(scheme.validate().is_ok(), "{}", scheme.name());
            assert_eq!(scheme.signs_id(), signs_id, "{}", scheme.name());
            assert_eq!(scheme.has_timestamp(), has_timestamp, "{}", scheme.name());
        }
        assert_eq!(Scheme::stripe().body_id_field(), Some("id"));
    }

    #[test]
    fn header_names_are_validated_and_lowercased() {
        let scheme = Scheme::custom("x", "X-Acme-Signature").unwrap();
        assert_eq!(scheme.signature_header(), "x-acme-signature");
        assert_eq!(
            Scheme::custom("x", "bad header").unwrap_err(),
            ConfigError::InvalidHeaderName("bad header".into())
        );
        assert!(Scheme::custom("x", "").is_err());
    }
}
