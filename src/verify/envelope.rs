//! Reading one request's headers: the id, the timestamp and the signatures,
//! each read once. Every error about a header's presence or shape is made
//! here; the [`Verifier`](super::Verifier) only does the cryptography.

use super::clock::parse_rfc3339;
use super::error::{Malformed, VerifyError};
use super::headers::{HeaderKey, HeaderLookup, Headers};
use super::scheme::{
    CoveredHeaders, Format, MAX_COVERED_HEADERS, Scheme, TimestampFormat, TimestampSource,
};
use super::secrets::Algorithm;

/// The most signatures one header may carry. Rotation needs two or three;
/// the cap bounds the work an attacker can ask for.
pub const MAX_SIGNATURES: usize = 16;

/// The longest header value read, in bytes.
pub const MAX_HEADER_LEN: usize = 4096;

/// The longest event id accepted, in bytes.
pub const MAX_ID_LEN: usize = 256;

/// The id, timestamp and signatures read from one request's headers.
#[derive(Debug, Clone)]
pub(crate) struct Envelope<'h> {
    pub(crate) id: Option<&'h str>,
    /// Whether the signature covers `id`.
    pub(crate) id_signed: bool,
    pub(crate) timestamp: Option<Timestamp<'h>>,
    /// The headers the signatures cover besides the id and timestamp
    /// (Hook0's `h=`), for a scheme that names them. Boxed, so that the
    /// envelope every other scheme moves on each request stays small.
    pub(crate) covered: Option<Box<CoveredHeaders<'h>>>,
    /// The signatures of a version the verifier accepts, in header order;
    /// the first `len` are filled.
    candidates: [Candidate; MAX_SIGNATURES],
    len: usize,
    /// The signature header's text the candidates point into.
    signature_text: &'h [u8],
}

/// A timestamp as sent (the signed text) and as a number.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timestamp<'h> {
    pub(crate) seconds: i64,
    pub(crate) text: &'h [u8],
}

/// One signature: its algorithm and where its text lies in the signature
/// header, not yet decoded (decoding waits for the comparison). Offsets,
/// not a slice, keep the envelope that every request builds and moves
/// small; a header is at most [`MAX_HEADER_LEN`] bytes.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    algorithm: Algorithm,
    start: u16,
    len: u16,
}

impl<'h> Envelope<'h> {
    /// Reads id, timestamp and signature header and checks their shape:
    /// at most [`MAX_SIGNATURES`] signatures, each with a version label,
    /// at least one of a version that `accepts`. `id_delimiters` is the
    /// scheme's [`Scheme::id_delimiters`], worked out once per verifier.
    pub(crate) fn read(
        scheme: &Scheme,
        id_delimiters: u128,
        headers: &'h (impl Headers + ?Sized),
        accepts: impl Fn(Algorithm) -> bool,
    ) -> Result<Self, VerifyError> {
        // What the signature does not cover is never required: an unsigned
        // id or timestamp is read only when present and well formed.
        let id = match &scheme.id_header {
            Some(name) if scheme.signs_id() => {
                Some(read_id(name, required(headers, name)?, id_delimiters)?)
            }
            Some(name) => optional(headers, name).and_then(|value| read_id(name, value, 0).ok()),
            None => None,
        };
        let signatures = required(headers, &scheme.signature_header)?;
        let timestamp = match &scheme.timestamp {
            TimestampSource::None => None,
            TimestampSource::Header(name) if scheme.has_timestamp() => {
                Some(read_timestamp(scheme, name, required(headers, name)?)?)
            }
            TimestampSource::Header(name) => {
                optional(headers, name).and_then(|text| read_timestamp(scheme, name, text).ok())
            }
            TimestampSource::Field => {
                let text = timestamp_field(scheme, signatures)?;
                Some(read_timestamp(scheme, &scheme.signature_header, text)?)
            }
        };
        let mut envelope = Self {
            id,
            id_signed: id.is_some() && scheme.signs_id(),
            timestamp,
            covered: None,
            candidates: [Candidate {
                algorithm: Algorithm::Hmac,
                start: 0,
                len: 0,
            }; MAX_SIGNATURES],
            len: 0,
            signature_text: &[],
        };
        let prefix = match &scheme.format {
            Format::Single { prefix } => Some(prefix.as_bytes()),
            Format::Listed { prefix } => Some(prefix.as_bytes()),
            Format::Versioned | Format::Fields(_) | Format::Ed25519 | Format::EcdsaP256 => None,
        };
        let signatures = match prefix {
            Some(prefix) => match signatures.strip_prefix(prefix) {
                Some(rest) => rest,
                None => return Err(no_supported_signature(scheme, 1, &accepts)),
            },
            None => signatures,
        };
        envelope.signature_text = signatures;
        let mut total = 0;
        // Hook0's: the names of the headers the signatures cover.
        let mut covered_names = None;
        for entry in entries(&scheme.format, signatures) {
            let entry =
                classify(&scheme.format, entry).map_err(|reason| malformed(scheme, reason))?;
            let (algorithm, text) = match entry {
                Entry::Signature(algorithm, text) => (algorithm, text),
                Entry::CoveredNames(names) => {
                    if covered_names.replace(names).is_some() {
                        let field = scheme.covered().map_or("h", |covered| covered.names);
                        return Err(malformed(scheme, Malformed::RepeatedField(field)));
                    }
                    continue;
                }
                Entry::Other => continue,
            };
            total += 1;
            if total > MAX_SIGNATURES {
                return Err(malformed(
                    scheme,
                    Malformed::TooManySignatures {
                        max: MAX_SIGNATURES,
                    },
                ));
            }
            if let Some(algorithm) = algorithm.filter(|algorithm| accepts(*algorithm)) {
                envelope.candidates[envelope.len] = Candidate {
                    algorithm,
                    start: offset_in(signatures, text),
                    len: u16::try_from(text.len()).unwrap_or(u16::MAX),
                };
                envelope.len += 1;
            }
        }
        if scheme.covered().is_some() && envelope.len > 0 {
            envelope.read_covered(scheme, headers, covered_names)?;
        }
        if envelope.len == 0 {
            return Err(no_supported_signature(scheme, total, &accepts));
        }
        Ok(envelope)
    }

    /// Reads the headers `names` lists (Hook0's `h=`, space-separated
    /// lowercase names; none when there is no `h=`): each must be there
    /// once, before any HMAC is computed. The id counts as signed when it is among them, and then
    /// may not hold the `.` that separates covered values.
    fn read_covered(
        &mut self,
        scheme: &Scheme,
        headers: &'h (impl Headers + ?Sized),
        names: Option<&'h [u8]>,
    ) -> Result<(), VerifyError> {
        let bad_names = || {
            malformed(
                scheme,
                Malformed::CoveredHeaders {
                    max: MAX_COVERED_HEADERS,
                },
            )
        };
        let mut values = [&[][..]; MAX_COVERED_HEADERS];
        let mut len = 0;
        if let Some(names) = names {
            for name in names.split(|byte| *byte == b' ') {
                let lowercase_name = !name.is_empty()
                    && name.iter().all(|byte| {
                        byte.is_ascii_lowercase()
                            || byte.is_ascii_digit()
                            || b"!#$%&'*+-^_`|~".contains(byte)
                    });
                if !lowercase_name || len == MAX_COVERED_HEADERS {
                    return Err(bad_names());
                }
                let name = std::str::from_utf8(name).map_err(|_| bad_names())?;
                let key = HeaderKey::new(name).map_err(|_| bad_names())?;
                // A name twice, or the signature header itself: no sender
                // signs so, and each would only blur what was signed.
                let named_before = names
                    .split(|byte| *byte == b' ')
                    .take(len)
                    .any(|before| before == name.as_bytes());
                if named_before || key == scheme.signature_header {
                    return Err(bad_names());
                }
                values[len] = required(headers, &key)?;
                len += 1;
                if scheme.id_header.as_ref() == Some(&key) && !self.id_signed {
                    if let Some(at) = values[..len].iter().position(|value| value.contains(&b'.')) {
                        let holder = names
                            .split(|byte| *byte == b' ')
                            .nth(at)
                            .unwrap_or_default();
                        return Err(VerifyError::MalformedHeader {
                            name: std::borrow::Cow::Owned(
                                String::from_utf8_lossy(holder).into_owned(),
                            ),
                            reason: Malformed::IdContainsDelimiter,
                        });
                    }
                    self.id = Some(read_id(&key, values[len - 1], 0)?);
                    self.id_signed = true;
                }
            }
        }
        self.covered = Some(Box::new(CoveredHeaders::new(
            names.unwrap_or_default(),
            &values[..len],
        )));
        Ok(())
    }

    /// The encoded signatures of `algorithm`, in header order.
    pub(crate) fn signatures(&self, algorithm: Algorithm) -> impl Iterator<Item = &'h [u8]> + '_ {
        self.candidates[..self.len]
            .iter()
            .filter(move |candidate| candidate.algorithm == algorithm)
            .map(|candidate| {
                let start = usize::from(candidate.start);
                let end = start + usize::from(candidate.len);
                self.signature_text.get(start..end).unwrap_or_default()
            })
    }

    /// How many signatures of an accepted version the header carries.
    pub(crate) fn accepted(&self) -> usize {
        self.len
    }
}

/// Where `part`, a piece of `whole`, starts in it. Header values are at
/// most [`MAX_HEADER_LEN`] bytes, which a `u16` holds.
fn offset_in(whole: &[u8], part: &[u8]) -> u16 {
    let offset = (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize);
    u16::try_from(offset).unwrap_or(u16::MAX)
}

/// The error for a header none of whose accepted signatures decodes.
pub(crate) fn bad_encoding(scheme: &Scheme) -> VerifyError {
    malformed(scheme, Malformed::BadEncoding(scheme.encoding.name()))
}

fn malformed(scheme: &Scheme, reason: Malformed) -> VerifyError {
    VerifyError::MalformedHeader {
        name: scheme.signature_header.to_cow(),
        reason,
    }
}

fn no_supported_signature(
    scheme: &Scheme,
    found: usize,
    accepts: &impl Fn(Algorithm) -> bool,
) -> VerifyError {
    let expected = match (
        &scheme.format,
        accepts(Algorithm::Hmac),
        accepts(Algorithm::Ed25519),
    ) {
        (Format::Versioned, true, true) => "v1` or `v1a".into(),
        (Format::Versioned, false, true) => "v1a".into(),
        (Format::Versioned, _, _) => "v1".into(),
        (Format::Fields(fields), _, _) => fields.signature.into(),
        (Format::Single { prefix }, _, _) if prefix.is_empty() => scheme.encoding.name().into(),
        (Format::Single { prefix }, _, _) => format!("{prefix}...").into(),
        (Format::Listed { prefix }, _, _) => format!("{prefix}...").into(),
        (Format::Ed25519, _, _) => "a hex ed25519 signature".into(),
        (Format::EcdsaP256, _, _) => "a base64 ECDSA signature".into(),
    };
    VerifyError::NoSupportedSignature {
        name: scheme.signature_header.to_cow(),
        expected,
        found,
    }
}

/// The non-empty entries of a signature header, trimmed; a single-signature
/// header is one entry.
fn entries<'h>(format: &Format, signatures: &'h [u8]) -> impl Iterator<Item = &'h [u8]> {
    let separator = match format {
        Format::Versioned => Some(b' '),
        Format::Fields(fields) => Some(fields.separator),
        Format::Listed { .. } => Some(b','),
        Format::Single { .. } | Format::Ed25519 | Format::EcdsaP256 => None,
    };
    signatures
        .split(move |byte| Some(*byte) == separator)
        .map(<[u8]>::trim_ascii)
        .filter(|entry| !entry.is_empty())
}

/// What one entry of a signature header holds.
enum Entry<'h> {
    /// A signature: its algorithm (`None` for a version this library does
    /// not know) and its encoded text.
    Signature(Option<Algorithm>, &'h [u8]),
    /// No signature (Stripe's `t=` field).
    Other,
    /// The names of the headers the signatures cover (Hook0's `h=`).
    CoveredNames(&'h [u8]),
}

/// Reads an entry's version label; errors when it has none.
fn classify<'h>(format: &Format, entry: &'h [u8]) -> Result<Entry<'h>, Malformed> {
    let pair = match format {
        Format::Versioned => b',',
        Format::Fields(_) => b'=',
        Format::Single { .. } | Format::Listed { .. } => {
            return Ok(Entry::Signature(Some(Algorithm::Hmac), entry));
        }
        Format::Ed25519 => return Ok(Entry::Signature(Some(Algorithm::Ed25519), entry)),
        Format::EcdsaP256 => return Ok(Entry::Signature(Some(Algorithm::EcdsaP256), entry)),
    };
    let at = entry
        .iter()
        .position(|byte| *byte == pair)
        .ok_or(Malformed::MissingVersion)?;
    let (label, text) = (&entry[..at], &entry[at + 1..]);
    Ok(match format {
        Format::Fields(fields) if label == fields.timestamp.as_bytes() => Entry::Other,
        Format::Fields(fields) if label == fields.signature.as_bytes() => {
            Entry::Signature(Some(Algorithm::Hmac), text)
        }
        Format::Fields(fields) => match fields.covered {
            Some(covered) if label == covered.names.as_bytes() => Entry::CoveredNames(text),
            _ => Entry::Signature(None, text),
        },
        Format::Versioned if label == b"v1" => Entry::Signature(Some(Algorithm::Hmac), text),
        Format::Versioned if label == b"v1a" => Entry::Signature(Some(Algorithm::Ed25519), text),
        _ => Entry::Signature(None, text),
    })
}

/// The text of the one timestamp field of a Stripe-style header.
fn timestamp_field<'h>(scheme: &Scheme, value: &'h [u8]) -> Result<&'h [u8], VerifyError> {
    let Format::Fields(fields) = scheme.format else {
        return Err(malformed(scheme, Malformed::MissingField("t")));
    };
    let mut found = None;
    for field in value.split(|byte| *byte == fields.separator) {
        if let Some(text) = field
            .trim_ascii()
            .strip_prefix(fields.timestamp.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"="))
            && found.replace(text).is_some()
        {
            return Err(malformed(
                scheme,
                Malformed::RepeatedField(fields.timestamp),
            ));
        }
    }
    found.ok_or_else(|| malformed(scheme, Malformed::MissingField(fields.timestamp)))
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

/// Reads an id: visible ASCII, and none of the `delimiters` (where the
/// scheme signs it, the characters around it in the signed content). Written to compile to
/// a vector loop over the id and one `memchr` per delimiter (usually one),
/// as it runs on every request.
fn read_id<'h>(
    name: &HeaderKey,
    value: &'h [u8],
    delimiters: u128,
) -> Result<&'h str, VerifyError> {
    let malformed = |reason| VerifyError::MalformedHeader {
        name: name.to_cow(),
        reason,
    };
    if value.len() > MAX_ID_LEN {
        return Err(malformed(Malformed::TooLong { max: MAX_ID_LEN }));
    }
    // No early exit, so the loop vectorizes; ids are at most 256 bytes.
    let visible = value
        .iter()
        .fold(true, |visible, byte| visible & byte.is_ascii_graphic());
    if !visible {
        return Err(malformed(Malformed::NotVisibleAscii));
    }
    let mut delimiters = delimiters;
    while delimiters != 0 {
        // The lowest set bit is a character below 128.
        let delimiter = u8::try_from(delimiters.trailing_zeros()).unwrap_or(u8::MAX);
        if value.contains(&delimiter) {
            return Err(malformed(Malformed::IdContainsDelimiter));
        }
        delimiters &= delimiters - 1;
    }
    // Visible ASCII is valid UTF-8.
    std::str::from_utf8(value).map_err(|_| malformed(Malformed::NotVisibleAscii))
}

fn read_timestamp<'h>(
    scheme: &Scheme,
    name: &HeaderKey,
    text: &'h [u8],
) -> Result<Timestamp<'h>, VerifyError> {
    match scheme.timestamp_format {
        TimestampFormat::UnixSeconds => read_unix_seconds(name, text),
        TimestampFormat::Rfc3339 => match parse_rfc3339(text) {
            Some(seconds) => Ok(Timestamp { seconds, text }),
            None => Err(VerifyError::MalformedHeader {
                name: name.to_cow(),
                reason: Malformed::TimestampNotRfc3339,
            }),
        },
    }
}

fn read_unix_seconds<'h>(name: &HeaderKey, text: &'h [u8]) -> Result<Timestamp<'h>, VerifyError> {
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
        read_unix_seconds(&HeaderKey::from_static("t"), text.as_bytes()).map(|t| t.seconds)
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
    fn keeps_only_accepted_signatures_in_header_order() {
        let scheme = Scheme::standard_webhooks();
        let headers = [
            ("webhook-id", "msg_1"),
            ("webhook-timestamp", "1"),
            ("webhook-signature", " v1a,A  v2,B v1,C v1a,D "),
        ];
        let hmac_only = Envelope::read(&scheme, scheme.id_delimiters(), &headers, |a| {
            a == Algorithm::Hmac
        })
        .unwrap();
        assert_eq!(hmac_only.accepted(), 1);
        let both = Envelope::read(&scheme, scheme.id_delimiters(), &headers, |_| true).unwrap();
        assert_eq!(both.accepted(), 3);
        let texts = |algorithm| both.signatures(algorithm).collect::<Vec<_>>();
        assert_eq!(texts(Algorithm::Ed25519), [b"A", b"D"]);
        assert_eq!(texts(Algorithm::Hmac), [b"C"]);
    }
}
