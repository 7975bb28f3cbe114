//! Form decoding (`application/x-www-form-urlencoded`), shared by Twilio's
//! signed parameters and the receivers' handshake queries.

/// Decodes one form component: `+` is a space, then percent-escapes.
/// `None` for a malformed escape or a result that is not UTF-8.
pub(crate) fn form_decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        match byte {
            b'%' => {
                let [high, low] = *tail.first_chunk::<2>()?;
                bytes.push(hex_value(high)? << 4 | hex_value(low)?);
                rest = &tail[2..];
            }
            b'+' => {
                bytes.push(b' ');
                rest = tail;
            }
            _ => {
                bytes.push(byte);
                rest = tail;
            }
        }
    }
    String::from_utf8(bytes).ok()
}

fn hex_value(digit: u8) -> Option<u8> {
    char::from(digit)
        .to_digit(16)
        .and_then(|value| u8::try_from(value).ok())
}

/// The `name=value` pairs of a form or URL query, decoded; a pair without
/// `=` has an empty value, and empty pairs (`a=1&&b=2`) are passed over.
/// `Err(())` when a pair does not decode.
pub(crate) fn form_pairs(text: &str) -> impl Iterator<Item = Result<(String, String), ()>> + '_ {
    text.split('&').filter(|pair| !pair.is_empty()).map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        Ok((form_decode(name).ok_or(())?, form_decode(value).ok_or(())?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_decode_as_browsers_encode_them() {
        assert_eq!(form_decode("a%2Bb+c%C3%A9").as_deref(), Some("a+b cé"));
        for bad in ["%zz", "%4", "%", "%e9", "%+f", "%-1"] {
            assert_eq!(form_decode(bad), None, "{bad}");
        }
        let pairs: Vec<_> = form_pairs("a=1&&b&c=%20").collect();
        assert_eq!(
            pairs,
            [
                Ok(("a".into(), "1".into())),
                Ok(("b".into(), String::new())),
                Ok(("c".into(), " ".into())),
            ]
        );
    }
}
