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
        })
    }

    /// The key's `keyid`.
    pub fn id(&self) -> &str {
        &self.id
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
