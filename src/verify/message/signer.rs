//! Signing, for the sending side.

use std::fmt::{self, Write as _};

use base64::Engine as _;
use hmac::Mac as _;
use sfv::{Dictionary, ListEntry};
use sha2::Sha256;

use super::base::{components_of, malformed, signature_base};
use super::keys::hmac_key;
#[cfg(feature = "ed25519")]
use super::keys::{check_key_id, invalid};
use super::{InvalidMessageKey, MessageRequest, MessageSignatureError};

/// Signs requests with RFC 9421 message signatures, for a sender whose
/// receivers verify them (a [`MessageVerifier`](super::MessageVerifier) on the other end).
///
/// ```
/// # #[cfg(feature = "ed25519")] {
/// use hooklatch::verify::message::{
///     MessageKey, MessageRequest, MessageSigner, MessageVerifier, content_digest,
/// };
///
/// let seed = [7u8; 32];
/// let signer = MessageSigner::ed25519("sender-2026", &seed)?.with_tag("acme-webhooks");
/// let body = br#"{"type":"invoice.paid"}"#;
/// let mut headers = http::HeaderMap::new();
/// headers.insert("content-type", "application/json".parse()?);
/// headers.insert("content-digest", content_digest(body).parse()?);
/// let request = MessageRequest::new("POST", "https://hooks.example/in", &headers)?;
/// let signed = signer.sign("sig1", &request, 1_700_000_000, Some("evt_1"))?;
/// headers.insert("signature-input", signed.signature_input.parse()?);
/// headers.insert("signature", signed.signature.parse()?);
///
/// let verifier = MessageVerifier::builder()
///     .with_key(MessageKey::ed25519("sender-2026", &signer.public_key().unwrap())?)
///     .with_tag("acme-webhooks")
///     .build()?;
/// let request = MessageRequest::new("POST", "https://hooks.example/in", &headers)?;
/// let verified = verifier.verify_at(&request, body, 1_700_000_010)?;
/// assert_eq!(verified.claim_key(), "nonce:sender-2026:evt_1");
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct MessageSigner {
    key_id: String,
    key: SigningMaterial,
    components: Vec<String>,
    tag: Option<String>,
}

#[derive(Clone)]
enum SigningMaterial {
    HmacSha256(hmac::Hmac<Sha256>),
    #[cfg(feature = "ed25519")]
    Ed25519(Box<ed25519_dalek::SigningKey>),
}

impl fmt::Debug for MessageSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageSigner")
            .field("key_id", &self.key_id)
            .field("components", &self.components)
            .field("tag", &self.tag)
            .finish_non_exhaustive()
    }
}

/// The two headers a [`MessageSigner`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedMessage {
    /// The `Signature-Input` value.
    pub signature_input: String,
    /// The `Signature` value.
    pub signature: String,
}

impl MessageSigner {
    /// Signs with `hmac-sha256` under a shared secret.
    ///
    /// # Errors
    ///
    /// As [`MessageKey::hmac_sha256`](super::MessageKey::hmac_sha256).
    pub fn hmac_sha256(key_id: &str, secret: &[u8]) -> Result<Self, InvalidMessageKey> {
        let keyed = hmac_key(key_id, secret)?;
        Ok(Self::new(
            key_id.to_owned(),
            SigningMaterial::HmacSha256(keyed),
        ))
    }

    /// Signs with `ed25519` under the private key's 32-byte seed (a JWK's
    /// `d`, decoded).
    ///
    /// # Errors
    ///
    /// A seed that is not 32 bytes, or a bad `keyid`.
    #[cfg(feature = "ed25519")]
    pub fn ed25519(key_id: &str, seed: &[u8]) -> Result<Self, InvalidMessageKey> {
        check_key_id(key_id)?;
        let seed: [u8; 32] = seed
            .try_into()
            .map_err(|_| invalid(key_id, "an Ed25519 seed is 32 bytes"))?;
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        Ok(Self::new(
            key_id.to_owned(),
            SigningMaterial::Ed25519(Box::new(key)),
        ))
    }

    fn new(key_id: String, key: SigningMaterial) -> Self {
        Self {
            key_id,
            key,
            components: ["@method", "@target-uri", "content-digest", "content-type"]
                .map(String::from)
                .to_vec(),
            tag: None,
        }
    }

    /// The components to cover, in place of the default (`@method`,
    /// `@target-uri`, `content-digest`, `content-type`).
    #[must_use]
    pub fn covering<I: IntoIterator<Item = S>, S: Into<String>>(mut self, components: I) -> Self {
        self.components = components.into_iter().map(Into::into).collect();
        self
    }

    /// Puts `tag` on every signature.
    #[must_use]
    pub fn with_tag(mut self, tag: &str) -> Self {
        self.tag = Some(tag.to_owned());
        self
    }

    /// The public key to give receivers, for an Ed25519 signer.
    pub fn public_key(&self) -> Option<[u8; 32]> {
        match &self.key {
            SigningMaterial::HmacSha256(_) => None,
            #[cfg(feature = "ed25519")]
            SigningMaterial::Ed25519(key) => Some(key.verifying_key().to_bytes()),
        }
    }

    /// Signs `request` as signature `label`, created at `created` (seconds
    /// since the epoch), with `nonce` (the event's id makes a good one:
    /// the receiver claims the request by it). Set `Content-Digest`
    /// ([`content_digest`](super::content_digest)) before signing when it is covered.
    ///
    /// # Errors
    ///
    /// A covered component the request lacks, or a label, nonce, tag or
    /// component that cannot be written in the header.
    pub fn sign(
        &self,
        label: &str,
        request: &MessageRequest<'_>,
        created: i64,
        nonce: Option<&str>,
    ) -> Result<SignedMessage, MessageSignatureError> {
        let refuse = |what: &str| malformed("signature-input", &format!("cannot write {what}"));
        let quotable = |text: &str| {
            text.bytes().all(|byte| (0x20..0x7f).contains(&byte)) && !text.contains(['"', '\\'])
        };
        // A label is a structured-field key.
        let key_like = label.starts_with(|c: char| c.is_ascii_lowercase() || c == '*')
            && label.bytes().all(|byte| {
                byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"_-.*".contains(&byte)
            });
        if !key_like {
            return Err(refuse("the label"));
        }
        let mut input = format!("{label}=(");
        for (at, component) in self.components.iter().enumerate() {
            if !quotable(component) {
                return Err(refuse("a component"));
            }
            if at > 0 {
                input.push(' ');
            }
            let _ = write!(input, "\"{component}\"");
        }
        let _ = write!(input, ");created={created};keyid=\"{}\"", self.key_id);
        let alg = match &self.key {
            SigningMaterial::HmacSha256(_) => "hmac-sha256",
            #[cfg(feature = "ed25519")]
            SigningMaterial::Ed25519(_) => "ed25519",
        };
        let _ = write!(input, ";alg=\"{alg}\"");
        for (name, value) in [("nonce", nonce), ("tag", self.tag.as_deref())] {
            if let Some(value) = value {
                if !quotable(value) {
                    return Err(refuse(name));
                }
                let _ = write!(input, ";{name}=\"{value}\"");
            }
        }
        let parsed: Dictionary = sfv::Parser::new(&input)
            .parse_dictionary()
            .map_err(|_| refuse("the label"))?;
        let Some((_, ListEntry::InnerList(inner))) = parsed.first() else {
            return Err(refuse("the label"));
        };
        let base = signature_base(&components_of(inner)?, inner, request)?;
        let signature = match &self.key {
            SigningMaterial::HmacSha256(keyed) => {
                let mut mac = keyed.clone();
                mac.update(base.as_bytes());
                mac.finalize().into_bytes().to_vec()
            }
            #[cfg(feature = "ed25519")]
            SigningMaterial::Ed25519(key) => {
                use ed25519_dalek::Signer as _;
                key.sign(base.as_bytes()).to_bytes().to_vec()
            }
        };
        Ok(SignedMessage {
            signature_input: input,
            signature: format!(
                "{label}=:{}:",
                base64::engine::general_purpose::STANDARD.encode(signature)
            ),
        })
    }
}
