//! Signature encodings: hex and base64, decoded into fixed buffers.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// How a scheme writes signature bytes into a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Encoding {
    /// Lowercase hexadecimal (uppercase is accepted when verifying).
    Hex,
    /// Standard base64 with padding (RFC 4648 section 4).
    Base64,
}

/// The largest decoded signature examined: a DER-encoded ECDSA P-256
/// signature (an ed25519 one is 64 bytes).
pub(crate) const MAX_SIGNATURE_BYTES: usize = 72;

impl Encoding {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Hex => "hex",
            Self::Base64 => "base64",
        }
    }

    pub(crate) fn encode(self, bytes: &[u8]) -> String {
        match self {
            Self::Hex => hex_encode(bytes),
            Self::Base64 => STANDARD.encode(bytes),
        }
    }

    /// Decodes `text` into `out` and returns the decoded bytes.
    ///
    /// `Err(())` means the text is not in this encoding. Text too long to be
    /// any supported signature decodes to an empty slice without being
    /// examined: a wrong length is a mismatch, not a malformed header.
    pub(crate) fn decode<'o>(
        self,
        text: &[u8],
        out: &'o mut [u8; MAX_SIGNATURE_BYTES],
    ) -> Result<&'o [u8], ()> {
        match self {
            Self::Hex => {
                if text.len() > 2 * MAX_SIGNATURE_BYTES {
                    return Ok(&[]);
                }
                if !text.len().is_multiple_of(2) {
                    return Err(());
                }
                let len = text.len() / 2;
                for (slot, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
                    *slot = (hex_value(pair[0])? << 4) | hex_value(pair[1])?;
                }
                Ok(&out[..len])
            }
            Self::Base64 => {
                // 96 characters encode 72 bytes.
                if text.len() > MAX_SIGNATURE_BYTES.div_ceil(3) * 4 {
                    return Ok(&[]);
                }
                match STANDARD.decode_slice(text, &mut out[..]) {
                    Ok(len) => Ok(&out[..len]),
                    Err(_) => Err(()),
                }
            }
        }
    }
}

fn hex_value(digit: u8) -> Result<u8, ()> {
    match digit {
        b'0'..=b'9' => Ok(digit - b'0'),
        b'a'..=b'f' => Ok(digit - b'a' + 10),
        b'A'..=b'F' => Ok(digit - b'A' + 10),
        _ => Err(()),
    }
}

pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_accepts_uppercase() {
        let mut out = [0; MAX_SIGNATURE_BYTES];
        assert_eq!(hex_encode(&[0x00, 0xab, 0xff]), "00abff");
        assert_eq!(
            Encoding::Hex.decode(b"00ABff", &mut out),
            Ok(&[0x00, 0xab, 0xff][..])
        );
    }

    #[test]
    fn hex_rejects_odd_length_and_non_digits() {
        let mut out = [0; MAX_SIGNATURE_BYTES];
        assert_eq!(Encoding::Hex.decode(b"abc", &mut out), Err(()));
        assert_eq!(Encoding::Hex.decode(b"zz", &mut out), Err(()));
        assert_eq!(Encoding::Hex.decode(&[b'a'; 300], &mut out), Ok(&[][..]));
    }

    #[test]
    fn overlong_base64_decodes_to_nothing_without_overflowing() {
        let mut out = [0; MAX_SIGNATURE_BYTES];
        let longest = STANDARD.encode([7u8; MAX_SIGNATURE_BYTES]);
        assert_eq!(
            Encoding::Base64.decode(longest.as_bytes(), &mut out),
            Ok(&[7u8; MAX_SIGNATURE_BYTES][..])
        );
        let long = STANDARD.encode([7u8; 200]);
        assert_eq!(
            Encoding::Base64.decode(long.as_bytes(), &mut out),
            Ok(&[][..])
        );
        assert_eq!(Encoding::Base64.decode(b"!!!!", &mut out), Err(()));
    }
}
