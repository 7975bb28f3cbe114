//! Secrets and keys: decoded once, when a verifier or signer is built.

use std::fmt;

use base64::Engine as _;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, KeyInit};
use sha2::Sha256;
use zeroize::Zeroizing;

use super::error::ConfigError;

pub(crate) type HmacSha256 = Hmac<Sha256>;

// The keyed HMAC state (the inner and outer hash states) is as sensitive
// as the secret: make sure those states are wiped when dropped.
const _: fn() = || {
    fn zeroized_on_drop<T: zeroize::ZeroizeOnDrop>() {}
    zeroized_on_drop::<<Sha256 as hmac::digest::block_api::CoreProxy>::Core>();
    #[cfg(feature = "sha1")]
    zeroized_on_drop::<<sha1::Sha1 as hmac::digest::block_api::CoreProxy>::Core>();
};

/// A keyed HMAC state, cloned for each message: SHA-256 for every scheme
/// but Twilio's, which signs with SHA-1.
#[derive(Clone)]
pub(crate) enum HmacKey {
    Sha256(HmacSha256),
    #[cfg(feature = "sha1")]
    Sha1(Hmac<sha1::Sha1>),
}

/// An HMAC tag: 32 bytes (SHA-256) or 20 (SHA-1).
pub(crate) struct Tag {
    bytes: [u8; 32],
    len: usize,
}

impl Tag {
    /// Whether `signature` is this tag, in time that depends only on its
    /// length. Compared as four 64-bit words under `subtle`, not as 32
    /// bytes: `subtle` hides each element from the optimizer, which cost
    /// more per request than anything but the hash itself.
    pub(crate) fn matches(&self, signature: &[u8]) -> bool {
        use subtle::ConstantTimeEq as _;
        if signature.len() != self.len {
            return false;
        }
        let (mut padded, mut own) = ([0u8; 32], [0u8; 32]);
        padded[..signature.len()].copy_from_slice(signature);
        own[..self.len].copy_from_slice(&self.bytes[..self.len]);
        let words = |bytes: &[u8; 32]| -> [u64; 4] {
            std::array::from_fn(|word| {
                u64::from_le_bytes(std::array::from_fn(|byte| bytes[word * 8 + byte]))
            })
        };
        bool::from(words(&padded)[..].ct_eq(&words(&own)[..]))
    }
}

impl std::ops::Deref for Tag {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl HmacKey {
    /// The tag of the message `content` feeds, piece by piece, to its sink.
    pub(crate) fn tag(&self, content: impl FnOnce(&mut dyn FnMut(&[u8]))) -> Tag {
        use hmac::Mac as _;
        fn finish(output: &[u8]) -> Tag {
            let mut bytes = [0u8; 32];
            bytes[..output.len()].copy_from_slice(output);
            Tag {
                bytes,
                len: output.len(),
            }
        }
        match self {
            Self::Sha256(keyed) => {
                let mut mac = keyed.clone();
                content(&mut |piece| mac.update(piece));
                finish(&mac.finalize().into_bytes())
            }
            #[cfg(feature = "sha1")]
            Self::Sha1(keyed) => {
                let mut mac = keyed.clone();
                content(&mut |piece| mac.update(piece));
                finish(&mac.finalize().into_bytes())
            }
        }
    }
}

/// Secrets are configuration, not attacker input: accept base64 with or
/// without its padding and with stray trailing bits, as the Standard
/// Webhooks Python library does, since secrets get truncated in copying.
const LENIENT_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// How a scheme reads a secret given as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SecretFormat {
    /// Base64 after an optional `whsec_` prefix; `whpk_` / `whsk_` are
    /// ed25519 keys (Standard Webhooks, Svix).
    Whsec,
    /// The text's bytes are the key. `expected_prefix` is what the
    /// provider's secrets look like, used only for a hint on mismatch.
    Raw {
        expected_prefix: Option<&'static str>,
    },
    /// An ed25519 key in hex: 64 characters for a public key (Discord's,
    /// as its developer portal shows it), 128 for a key pair (seed, then
    /// public key: libsodium's secret key), which can sign.
    HexEd25519,
    /// An ECDSA P-256 public key as base64 DER (SubjectPublicKeyInfo), as
    /// SendGrid's settings show it.
    Base64DerP256,
    /// The text's bytes are an HMAC-SHA1 key (Twilio's auth token).
    RawSha1,
}

/// One configured key. `Debug` never shows key material.
pub(crate) enum Key {
    /// HMAC, keyed once; each request clones the keyed state.
    Hmac(HmacKey),
    /// Verifies `v1a` signatures.
    #[cfg(feature = "ed25519")]
    Ed25519Public(ed25519_dalek::VerifyingKey),
    /// Signs and verifies `v1a` signatures.
    #[cfg(feature = "ed25519")]
    Ed25519Secret(Box<ed25519_dalek::SigningKey>),
    /// Verifies ECDSA P-256 (SHA-256) signatures.
    #[cfg(feature = "p256")]
    EcdsaP256Public(p256::ecdsa::VerifyingKey),
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Self::Hmac(_) => "Hmac",
            #[cfg(feature = "ed25519")]
            Self::Ed25519Public(_) => "Ed25519Public",
            #[cfg(feature = "ed25519")]
            Self::Ed25519Secret(_) => "Ed25519Secret",
            #[cfg(feature = "p256")]
            Self::EcdsaP256Public(_) => "EcdsaP256Public",
        };
        write!(f, "{kind}([REDACTED])")
    }
}

/// The signature algorithm a key or a signature belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    /// HMAC-SHA256, or HMAC-SHA1 in Twilio's scheme: the key says which.
    Hmac,
    Ed25519,
    EcdsaP256,
}

impl Key {
    pub(crate) fn hmac(bytes: &[u8]) -> Result<Self, ConfigError> {
        if bytes.is_empty() {
            return Err(ConfigError::EmptySecret);
        }
        // HMAC takes keys of any length; this cannot fail.
        let mac = HmacSha256::new_from_slice(bytes).map_err(|_| ConfigError::EmptySecret)?;
        Ok(Self::Hmac(HmacKey::Sha256(mac)))
    }

    /// An HMAC key of raw bytes, with the hash `format` signs with.
    pub(crate) fn hmac_for(format: SecretFormat, bytes: &[u8]) -> Result<Self, ConfigError> {
        match format {
            #[cfg(feature = "sha1")]
            SecretFormat::RawSha1 => Self::hmac_sha1(bytes),
            _ => missing_feature("", format).map_or_else(|| Self::hmac(bytes), Err),
        }
    }

    #[cfg(feature = "sha1")]
    fn hmac_sha1(bytes: &[u8]) -> Result<Self, ConfigError> {
        if bytes.is_empty() {
            return Err(ConfigError::EmptySecret);
        }
        let mac =
            Hmac::<sha1::Sha1>::new_from_slice(bytes).map_err(|_| ConfigError::EmptySecret)?;
        Ok(Self::Hmac(HmacKey::Sha1(mac)))
    }

    pub(crate) fn algorithm(&self) -> Algorithm {
        match self {
            Self::Hmac(_) => Algorithm::Hmac,
            #[cfg(feature = "ed25519")]
            Self::Ed25519Public(_) | Self::Ed25519Secret(_) => Algorithm::Ed25519,
            #[cfg(feature = "p256")]
            Self::EcdsaP256Public(_) => Algorithm::EcdsaP256,
        }
    }

    pub(crate) fn can_sign(&self) -> bool {
        match self {
            Self::Hmac(_) => true,
            #[cfg(feature = "ed25519")]
            Self::Ed25519Public(_) => false,
            #[cfg(feature = "ed25519")]
            Self::Ed25519Secret(_) => true,
            #[cfg(feature = "p256")]
            Self::EcdsaP256Public(_) => false,
        }
    }

    /// Reads a secret given as text, the way `format` says.
    pub(crate) fn parse(text: &str, format: SecretFormat) -> Result<Self, ConfigError> {
        if let Some(error) = missing_feature(text, format) {
            return Err(error);
        }
        match format {
            SecretFormat::Raw { .. } => Self::hmac(text.as_bytes()),
            #[cfg(feature = "ed25519")]
            SecretFormat::HexEd25519 => hex_ed25519(text),
            #[cfg(feature = "p256")]
            SecretFormat::Base64DerP256 => der_p256(text),
            #[cfg(feature = "sha1")]
            SecretFormat::RawSha1 => Self::hmac_sha1(text.as_bytes()),
            SecretFormat::Whsec => {
                #[cfg(feature = "ed25519")]
                if let Some(public) = text.strip_prefix("whpk_") {
                    return ed25519_public(public);
                }
                #[cfg(feature = "ed25519")]
                if let Some(secret) = text.strip_prefix("whsk_") {
                    return ed25519_secret(secret);
                }
                let (prefix, encoded) = match text.strip_prefix("whsec_") {
                    Some(rest) => ("whsec_", rest),
                    None => ("", text),
                };
                let bytes = decode_base64(encoded, prefix)?;
                Self::hmac(&bytes)
            }
            // Refused above: its feature is off.
            #[allow(unreachable_patterns)]
            _ => Err(ConfigError::AsymmetricUnsupported {
                prefix: "this key",
                needs: "a feature that is off",
            }),
        }
    }
}

/// The error for a key whose algorithm's feature is off, if it is.
fn missing_feature(text: &str, format: SecretFormat) -> Option<ConfigError> {
    let (prefix, on, needs) = match format {
        SecretFormat::HexEd25519 => ("hex ed25519", cfg!(feature = "ed25519"), "ed25519"),
        SecretFormat::Base64DerP256 => ("ECDSA P-256", cfg!(feature = "p256"), "p256"),
        SecretFormat::RawSha1 => ("HMAC-SHA1 (Twilio)", cfg!(feature = "sha1"), "sha1"),
        SecretFormat::Whsec if text.starts_with("whpk_") => {
            ("whpk_", cfg!(feature = "ed25519"), "ed25519")
        }
        SecretFormat::Whsec if text.starts_with("whsk_") => {
            ("whsk_", cfg!(feature = "ed25519"), "ed25519")
        }
        SecretFormat::Whsec | SecretFormat::Raw { .. } => return None,
    };
    let needs = match needs {
        "ed25519" => "the `ed25519` feature",
        "p256" => "the `p256` feature",
        _ => "the `sha1` feature",
    };
    (!on).then_some(ConfigError::AsymmetricUnsupported { prefix, needs })
}

fn decode_base64(encoded: &str, prefix: &'static str) -> Result<Zeroizing<Vec<u8>>, ConfigError> {
    if encoded.is_empty() {
        return Err(ConfigError::EmptySecret);
    }
    LENIENT_BASE64
        .decode(encoded)
        .map(Zeroizing::new)
        .map_err(|_| ConfigError::SecretNotBase64 { prefix })
}

#[cfg(feature = "ed25519")]
fn ed25519_public(encoded: &str) -> Result<Key, ConfigError> {
    ed25519_verifying(&decode_base64(encoded, "whpk_")?, "whpk_")
}

/// A 32-byte ed25519 public key, or why `bytes` is none.
#[cfg(feature = "ed25519")]
fn ed25519_verifying(bytes: &[u8], prefix: &'static str) -> Result<Key, ConfigError> {
    let array: [u8; 32] = bytes.try_into().map_err(|_| ConfigError::KeyLength {
        prefix,
        expected: "32",
        actual: bytes.len(),
    })?;
    ed25519_dalek::VerifyingKey::from_bytes(&array)
        .map(Key::Ed25519Public)
        .map_err(|_| ConfigError::KeyLength {
            prefix,
            expected: "32 (a valid curve point)",
            actual: 32,
        })
}

#[cfg(feature = "ed25519")]
fn ed25519_secret(encoded: &str) -> Result<Key, ConfigError> {
    let bytes = decode_base64(encoded, "whsk_")?;
    let key = match bytes.len() {
        32 => {
            let mut seed = Zeroizing::new([0u8; 32]);
            seed.copy_from_slice(&bytes);
            ed25519_dalek::SigningKey::from_bytes(&seed)
        }
        64 => {
            let mut pair = Zeroizing::new([0u8; 64]);
            pair.copy_from_slice(&bytes);
            ed25519_dalek::SigningKey::from_keypair_bytes(&pair)
                .map_err(|_| ConfigError::KeyPairMismatch)?
        }
        actual => {
            return Err(ConfigError::KeyLength {
                prefix: "whsk_",
                expected: "32 or 64",
                actual,
            });
        }
    };
    Ok(Key::Ed25519Secret(Box::new(key)))
}

/// A hex ed25519 key: 32 bytes public, 64 bytes a key pair.
#[cfg(feature = "ed25519")]
fn hex_ed25519(text: &str) -> Result<Key, ConfigError> {
    let not_hex = ConfigError::KeyNotHex {
        expected: "64 (a public key) or 128 (a key pair)",
    };
    let text = text.trim();
    if !text.bytes().all(|byte| byte.is_ascii_hexdigit()) || text.len() % 2 == 1 {
        return Err(not_hex);
    }
    let bytes: Zeroizing<Vec<u8>> = Zeroizing::new(
        (0..text.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&text[at..at + 2], 16))
            .collect::<Result<_, _>>()
            .map_err(|_| not_hex.clone())?,
    );
    match bytes.len() {
        32 => ed25519_verifying(&bytes, "hex"),
        64 => {
            let mut pair = Zeroizing::new([0u8; 64]);
            pair.copy_from_slice(&bytes);
            ed25519_dalek::SigningKey::from_keypair_bytes(&pair)
                .map(|key| Key::Ed25519Secret(Box::new(key)))
                .map_err(|_| ConfigError::KeyPairMismatch)
        }
        _ => Err(not_hex),
    }
}

/// An ECDSA P-256 public key as base64 DER.
#[cfg(feature = "p256")]
fn der_p256(text: &str) -> Result<Key, ConfigError> {
    use p256::pkcs8::DecodePublicKey as _;
    let der = decode_base64(text.trim(), "")?;
    p256::ecdsa::VerifyingKey::from_public_key_der(&der)
        .map(Key::EcdsaP256Public)
        .map_err(|_| ConfigError::KeyNotP256)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tag matches exactly its own bytes: a flipped bit anywhere in any
    /// of the four words, or one byte more or less, does not match, for a
    /// SHA-256 tag and a shorter (SHA-1) one.
    #[test]
    fn a_tag_matches_only_its_own_bytes() {
        for len in [32, 20] {
            let bytes: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(37));
            let tag = Tag { bytes, len };
            assert!(tag.matches(&bytes[..len]));
            for at in 0..len {
                for bit in [0, 7] {
                    let mut other = bytes;
                    other[at] ^= 1 << bit;
                    assert!(!tag.matches(&other[..len]), "byte {at}, bit {bit}");
                }
            }
            assert!(!tag.matches(&bytes[..len - 1]));
            assert!(!tag.matches(&[bytes[..len].to_vec(), vec![0]].concat()));
            assert!(!tag.matches(&[]));
        }
    }

    #[test]
    fn debug_never_prints_key_material() {
        let key = Key::parse(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            SecretFormat::Whsec,
        )
        .unwrap();
        let shown = format!("{key:?}");
        assert_eq!(shown, "Hmac([REDACTED])");
    }

    #[test]
    fn empty_secrets_are_rejected() {
        for text in ["", "whsec_"] {
            assert_eq!(
                Key::parse(text, SecretFormat::Whsec).unwrap_err(),
                ConfigError::EmptySecret
            );
        }
        assert_eq!(
            Key::parse(
                "",
                SecretFormat::Raw {
                    expected_prefix: None
                }
            )
            .unwrap_err(),
            ConfigError::EmptySecret
        );
    }

    #[test]
    fn whsec_prefix_is_optional_and_padding_lenient() {
        for text in [
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS",
        ] {
            assert!(Key::parse(text, SecretFormat::Whsec).is_ok(), "{text}");
        }
        assert_eq!(
            Key::parse("whsec_not base64!", SecretFormat::Whsec).unwrap_err(),
            ConfigError::SecretNotBase64 { prefix: "whsec_" }
        );
    }
}
