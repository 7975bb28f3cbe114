//! The keys a verifier trusts.

use std::fmt;

use hmac::{KeyInit as _, Mac as _};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

/// A key a [`MessageVerifier`](super::MessageVerifier) trusts, under its `keyid`.
#[derive(Clone)]
pub struct MessageKey {
    pub(super) id: String,
    pub(super) material: Material,
    /// Whose key it is: nonces are unique per sender
    /// ([`with_sender`](Self::with_sender)); `None` is its `keyid`.
    pub(super) sender: Option<String>,
    /// A digest of the algorithm and key, to tell a verifier rebuilt with
    /// the same keys from one with others.
    pub(super) fingerprint: [u8; 32],
}

/// A digest of `algorithm` and `key` (a secret or a public key's bytes):
/// one-way, so keeping it keeps nothing a signer could use.
fn fingerprint(algorithm: &str, key: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    let mut hash = Sha256::new();
    hash.update(algorithm.as_bytes());
    hash.update([0]);
    hash.update(key);
    hash.finalize().into()
}

#[derive(Clone)]
pub(super) enum Material {
    HmacSha256(hmac::Hmac<Sha256>),
    #[cfg(feature = "ed25519")]
    Ed25519(ed25519_dalek::VerifyingKey),
    #[cfg(feature = "p256")]
    EcdsaP256(p256::ecdsa::VerifyingKey),
}

impl Material {
    /// The algorithm's name in the HTTP Signature Algorithms registry.
    fn algorithm(&self) -> &'static str {
        match self {
            Self::HmacSha256(_) => "hmac-sha256",
            #[cfg(feature = "ed25519")]
            Self::Ed25519(_) => "ed25519",
            #[cfg(feature = "p256")]
            Self::EcdsaP256(_) => "ecdsa-p256-sha256",
        }
    }

    pub(super) fn verifies(&self, base: &[u8], signature: &[u8]) -> bool {
        match self {
            Self::HmacSha256(keyed) => {
                let mut mac = keyed.clone();
                mac.update(base);
                bool::from(mac.finalize().into_bytes().as_slice().ct_eq(signature))
            }
            #[cfg(feature = "ed25519")]
            Self::Ed25519(public) => ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|signature| public.verify_strict(base, &signature).is_ok()),
            // RFC 9421 section 3.3.4: r and s, 32 bytes each, not DER.
            #[cfg(feature = "p256")]
            Self::EcdsaP256(public) => {
                use p256::ecdsa::signature::Verifier as _;
                p256::ecdsa::Signature::from_slice(signature)
                    .is_ok_and(|signature| public.verify(base, &signature).is_ok())
            }
        }
    }
}

impl fmt::Debug for MessageKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageKey")
            .field("id", &self.id)
            .field("algorithm", &self.material.algorithm())
            .finish_non_exhaustive()
    }
}

/// Why a key could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid message signature key `{key_id}`: {reason}")]
pub struct InvalidMessageKey {
    key_id: String,
    reason: &'static str,
}

impl MessageKey {
    /// A shared secret for `hmac-sha256`, as raw bytes.
    ///
    /// # Errors
    ///
    /// An empty secret, or a `keyid` that is empty or holds a `"` or `\`.
    pub fn hmac_sha256(key_id: &str, secret: &[u8]) -> Result<Self, InvalidMessageKey> {
        Ok(Self {
            id: key_id.to_owned(),
            material: Material::HmacSha256(hmac_key(key_id, secret)?),
            sender: None,
            fingerprint: fingerprint("hmac-sha256", secret),
        })
    }

    /// An Ed25519 public key, its 32 bytes (a JWK's `x`, decoded).
    ///
    /// # Errors
    ///
    /// Bytes that are not a valid point, or a bad `keyid`.
    #[cfg(feature = "ed25519")]
    pub fn ed25519(key_id: &str, public: &[u8]) -> Result<Self, InvalidMessageKey> {
        check_key_id(key_id)?;
        let bytes: [u8; 32] = public
            .try_into()
            .map_err(|_| invalid(key_id, "an Ed25519 public key is 32 bytes"))?;
        let public = ed25519_dalek::VerifyingKey::from_bytes(&bytes)
            .map_err(|_| invalid(key_id, "not an Ed25519 public key"))?;
        Ok(Self {
            id: key_id.to_owned(),
            material: Material::Ed25519(public),
            sender: None,
            fingerprint: fingerprint("ed25519", &bytes),
        })
    }

    /// An ECDSA P-256 public key, as a SEC1 point (65 bytes from `04`, or
    /// 33 compressed).
    ///
    /// # Errors
    ///
    /// Bytes that are not a point on the curve, or a bad `keyid`.
    #[cfg(feature = "p256")]
    pub fn ecdsa_p256(key_id: &str, sec1_point: &[u8]) -> Result<Self, InvalidMessageKey> {
        check_key_id(key_id)?;
        let public = p256::ecdsa::VerifyingKey::from_sec1_bytes(sec1_point)
            .map_err(|_| invalid(key_id, "not a P-256 public key"))?;
        Ok(Self {
            id: key_id.to_owned(),
            material: Material::EcdsaP256(public),
            sender: None,
            fingerprint: fingerprint("ecdsa-p256-sha256", sec1_point),
        })
    }

    /// The key's `keyid`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Marks the key as `sender`'s: a sender's nonces are unique among all
    /// its keys, so its keys share one claim scope
    /// ([`MessageVerified::claim_key`](super::MessageVerified::claim_key)).
    /// Give a sender's old and new key the same name during a rotation:
    /// otherwise a request it signed with both, replayed with one
    /// signature removed, is claimed under the other key as a second
    /// event. Keys fetched from one [`Jwks`](super::Jwks) share its URL.
    #[must_use]
    pub fn with_sender(mut self, sender: &str) -> Self {
        self.sender = Some(sender.to_owned());
        self
    }

    /// Whose key it is: the name given to [`with_sender`](Self::with_sender),
    /// else its `keyid`.
    pub fn sender(&self) -> &str {
        self.sender.as_deref().unwrap_or(&self.id)
    }

    /// Its algorithm's registered name (`hmac-sha256`, `ed25519`,
    /// `ecdsa-p256-sha256`).
    pub fn algorithm(&self) -> &'static str {
        self.material.algorithm()
    }
}

/// `secret` keyed for HMAC-SHA256 under `key_id`, both checked: what a
/// verifier's key and a signer hold alike.
pub(super) fn hmac_key(
    key_id: &str,
    secret: &[u8],
) -> Result<hmac::Hmac<Sha256>, InvalidMessageKey> {
    check_key_id(key_id)?;
    if secret.is_empty() {
        return Err(invalid(key_id, "the secret is empty"));
    }
    hmac::Hmac::<Sha256>::new_from_slice(secret)
        .map_err(|_| invalid(key_id, "the secret cannot key HMAC-SHA256"))
}

pub(super) fn invalid(key_id: &str, reason: &'static str) -> InvalidMessageKey {
    InvalidMessageKey {
        key_id: key_id.to_owned(),
        reason,
    }
}

pub(super) fn check_key_id(key_id: &str) -> Result<(), InvalidMessageKey> {
    let printable = key_id.bytes().all(|byte| (0x20..0x7f).contains(&byte));
    if key_id.is_empty() || !printable || key_id.contains(['"', '\\']) {
        return Err(invalid(
            key_id,
            "a keyid is 1 or more printable ASCII characters, no `\"` or `\\`",
        ));
    }
    Ok(())
}

impl MessageKey {
    /// The keys of a JSON Web Key Set (RFC 7517) this library verifies
    /// with, under their `kid`: Ed25519 (`OKP`, with the feature `ed25519`)
    /// and P-256 (`EC`, with `p256`); other keys, keys without a `kid` and
    /// repeated `kid`s are skipped, and at most 64 are read. For a set kept
    /// in a file or a configuration; [`Jwks`](super::Jwks) fetches one from
    /// a URL.
    ///
    /// # Errors
    ///
    /// The text is not a JWK set, or holds no usable key.
    ///
    /// ```
    /// use hooklatch::verify::message::MessageKey;
    ///
    /// let set = br#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"2026-01","x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}]}"#;
    /// # #[cfg(feature = "ed25519")]
    /// assert_eq!(MessageKey::from_jwk_set(set)?[0].id(), "2026-01");
    /// assert!(MessageKey::from_jwk_set(b"<html>").is_err());
    /// # Ok::<(), hooklatch::verify::message::InvalidKeySet>(())
    /// ```
    pub fn from_jwk_set(text: &[u8]) -> Result<Vec<MessageKey>, InvalidKeySet> {
        let invalid = |reason: &str| InvalidKeySet(reason.to_owned());
        let set: serde_json::Value =
            serde_json::from_slice(text).map_err(|_| invalid("the set is not JSON"))?;
        let keys = set
            .get("keys")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| invalid("the set has no `keys` array"))?;
        let field = |key: &serde_json::Value, name: &str| {
            key.get(name)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        #[cfg(any(feature = "ed25519", feature = "p256"))]
        let bytes = |key: &serde_json::Value, name: &str| -> Option<Vec<u8>> {
            use base64::Engine as _;
            let text = field(key, name)?;
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(text)
                .ok()
        };
        let mut found: Vec<MessageKey> = Vec::new();
        for key in keys.iter().take(MAX_SET_KEYS) {
            let Some(id) = field(key, "kid") else {
                continue;
            };
            if found.iter().any(|seen| seen.id() == id) {
                continue;
            }
            let usable = match (field(key, "kty").as_deref(), field(key, "crv").as_deref()) {
                #[cfg(feature = "ed25519")]
                (Some("OKP"), Some("Ed25519")) => {
                    bytes(key, "x").and_then(|x| MessageKey::ed25519(&id, &x).ok())
                }
                #[cfg(feature = "p256")]
                (Some("EC"), Some("P-256")) => match (bytes(key, "x"), bytes(key, "y")) {
                    (Some(x), Some(y)) if x.len() == 32 && y.len() == 32 => {
                        let point = [&[4u8][..], &x, &y].concat();
                        MessageKey::ecdsa_p256(&id, &point).ok()
                    }
                    _ => None,
                },
                _ => None,
            };
            found.extend(usable);
        }
        if found.is_empty() {
            return Err(invalid("the set holds no Ed25519 or P-256 key with a kid"));
        }
        Ok(found)
    }
}

/// Why a JSON Web Key Set was refused ([`MessageKey::from_jwk_set`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JWK set: {0}")]
pub struct InvalidKeySet(String);

/// The most keys of a set read.
const MAX_SET_KEYS: usize = 64;
