//! Reading the signature headers, the signature base, and the body's
//! digest.

use std::fmt::Write as _;

use base64::Engine as _;
use sfv::{BareItem, Dictionary, InnerList, ListEntry, Parameters};
use sha2::{Digest as _, Sha256, Sha512};
use subtle::ConstantTimeEq as _;

use super::{MAX_COVERED_COMPONENTS, MAX_FIELD_LEN, MessageRequest, MessageSignatureError};

/// One signature, read from both headers.
pub(super) struct Candidate<'d> {
    pub(super) label: &'d str,
    pub(super) input: &'d InnerList,
    pub(super) signature: &'d [u8],
    pub(super) components: Vec<Component>,
    pub(super) created: Option<i64>,
    pub(super) expires: Option<i64>,
    pub(super) key_id: Option<String>,
    pub(super) alg: Option<String>,
    pub(super) nonce: Option<String>,
    pub(super) tag: Option<String>,
}

/// A covered component: its name, whether it has no parameters, and its
/// serialized identifier (the name as an sf-string with its parameters).
pub(super) struct Component {
    pub(super) name: String,
    pub(super) plain: bool,
    pub(super) identifier: String,
}

impl<'d> Candidate<'d> {
    pub(super) fn read(
        label: &'d str,
        input: &'d InnerList,
        signatures: &'d Dictionary,
    ) -> Result<Self, MessageSignatureError> {
        let signature = match signatures.get(label) {
            Some(ListEntry::Item(item)) => item
                .bare_item
                .as_byte_sequence()
                .ok_or_else(|| malformed("signature", "a member is not a byte sequence"))?,
            Some(ListEntry::InnerList(_)) => {
                return Err(malformed("signature", "a member is not a byte sequence"));
            }
            None => {
                return Err(malformed(
                    "signature",
                    "no signature under an input's label",
                ));
            }
        };
        let components = components_of(input)?;
        let params = &input.params;
        let integer = |name: &str| -> Result<Option<i64>, MessageSignatureError> {
            match params.get(name) {
                None => Ok(None),
                Some(value) => value
                    .as_integer()
                    .map(|value| Some(i64::from(value)))
                    .ok_or_else(|| {
                        malformed("signature-input", "created or expires is not an integer")
                    }),
            }
        };
        let string = |name: &str| -> Result<Option<String>, MessageSignatureError> {
            match params.get(name) {
                None => Ok(None),
                Some(value) => value
                    .as_string()
                    .map(|value| Some(value.as_str().to_owned()))
                    .ok_or_else(|| {
                        malformed(
                            "signature-input",
                            "keyid, alg, nonce or tag is not a string",
                        )
                    }),
            }
        };
        Ok(Self {
            label,
            input,
            signature,
            components,
            created: integer("created")?,
            expires: integer("expires")?,
            key_id: string("keyid")?,
            alg: string("alg")?,
            nonce: string("nonce")?,
            tag: string("tag")?,
        })
    }

    pub(super) fn base(
        &self,
        request: &MessageRequest<'_>,
    ) -> Result<String, MessageSignatureError> {
        signature_base(&self.components, self.input, request)
    }
}

/// The components an input covers, each once, at most
/// [`MAX_COVERED_COMPONENTS`].
pub(super) fn components_of(input: &InnerList) -> Result<Vec<Component>, MessageSignatureError> {
    if input.items.len() > MAX_COVERED_COMPONENTS {
        return Err(malformed("signature-input", "too many components"));
    }
    let mut components: Vec<Component> = Vec::with_capacity(input.items.len());
    for item in &input.items {
        let name = item
            .bare_item
            .as_string()
            .ok_or_else(|| malformed("signature-input", "a component is not a string"))?
            .as_str()
            .to_owned();
        let identifier = serialize_item(&item.bare_item, &item.params);
        if components.iter().any(|seen| seen.identifier == identifier) {
            return Err(malformed("signature-input", "a component is covered twice"));
        }
        components.push(Component {
            plain: item.params.is_empty(),
            name,
            identifier,
        });
    }
    Ok(components)
}

/// The signature base (section 2.5): a line per covered component, then
/// `@signature-params`, the input re-serialized.
pub(super) fn signature_base(
    components: &[Component],
    input: &InnerList,
    request: &MessageRequest<'_>,
) -> Result<String, MessageSignatureError> {
    let mut base = String::new();
    for component in components {
        if !component.plain {
            return Err(MessageSignatureError::UnsupportedComponent(
                component.identifier.clone(),
            ));
        }
        let value = if component.name.starts_with('@') {
            request.derived(&component.name).ok_or_else(|| {
                MessageSignatureError::UnsupportedComponent(component.name.clone())
            })?
        } else if component.name.bytes().any(|byte| byte.is_ascii_uppercase()) {
            // Field names are covered lowercase (section 2.1).
            return Err(MessageSignatureError::UnsupportedComponent(
                component.name.clone(),
            ));
        } else {
            request
                .field(&component.name)
                .ok_or_else(|| MessageSignatureError::AbsentComponent(component.name.clone()))?
        };
        let _ = writeln!(base, "{}: {value}", component.identifier);
    }
    let mut params = sfv::ListSerializer::new();
    params.members([&ListEntry::InnerList(input.clone())]);
    let serialized = params.finish().unwrap_or_default();
    let _ = write!(base, "\"@signature-params\": {serialized}");
    Ok(base)
}

fn serialize_item(bare_item: &BareItem, params: &Parameters) -> String {
    sfv::ItemSerializer::new()
        .bare_item(bare_item)
        .parameters(params)
        .finish()
}

pub(super) fn malformed(header: &'static str, reason: &str) -> MessageSignatureError {
    MessageSignatureError::Malformed {
        header,
        reason: reason.to_owned(),
    }
}

/// A dictionary header, every line of it.
pub(super) fn dictionary(
    headers: &http::HeaderMap,
    name: &'static str,
) -> Result<Dictionary, MessageSignatureError> {
    let mut text = Vec::new();
    for (at, value) in headers.get_all(name).iter().enumerate() {
        if at > 0 {
            text.extend_from_slice(b", ");
        }
        text.extend_from_slice(value.as_bytes());
        if text.len() > MAX_FIELD_LEN {
            return Err(malformed(name, "longer than 8 KiB"));
        }
    }
    if text.is_empty() {
        return Err(MessageSignatureError::MissingHeader(name));
    }
    sfv::Parser::new(&text)
        .parse_dictionary()
        .map_err(|error| malformed(name, &error.to_string()))
}

/// Checks the body against `Content-Digest` (RFC 9530): every `sha-256`
/// and `sha-512` it carries must match, and it must carry one.
pub(super) fn check_digest(
    request: &MessageRequest<'_>,
    body: &[u8],
) -> Result<(), MessageSignatureError> {
    let digests = dictionary(request.headers, "content-digest")?;
    let mut checked = false;
    for (algorithm, value) in &digests {
        let ListEntry::Item(item) = value else {
            return Err(MessageSignatureError::DigestMismatch(
                "a member is not a byte sequence",
            ));
        };
        let Some(sent) = item.bare_item.as_byte_sequence() else {
            return Err(MessageSignatureError::DigestMismatch(
                "a member is not a byte sequence",
            ));
        };
        let matches = match algorithm.as_str() {
            "sha-256" => bool::from(Sha256::digest(body).as_slice().ct_eq(sent)),
            "sha-512" => bool::from(Sha512::digest(body).as_slice().ct_eq(sent)),
            _ => continue,
        };
        if !matches {
            return Err(MessageSignatureError::DigestMismatch("the digest differs"));
        }
        checked = true;
    }
    if checked {
        Ok(())
    } else {
        Err(MessageSignatureError::DigestMismatch(
            "it carries neither sha-256 nor sha-512",
        ))
    }
}

/// `Content-Digest: sha-256=:...:` for `body`, for a sender to set.
pub fn content_digest(body: &[u8]) -> String {
    format!(
        "sha-256=:{}:",
        base64::engine::general_purpose::STANDARD.encode(Sha256::digest(body))
    )
}
