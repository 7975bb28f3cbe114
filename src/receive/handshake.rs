//! Providers' subscription checks: the requests some providers send before
//! their first webhook, which a receiver answers itself. A handshake is
//! never claimed, never enqueued and never reaches the handler.

use std::time::SystemTime;

use subtle::ConstantTimeEq as _;

use super::VerifiedEvent;
use crate::verify::{HeaderKey, HeaderLookup, Headers, Verifier};

/// The longest challenge echoed back. Providers send tens of characters.
const MAX_CHALLENGE_LEN: usize = 1024;

/// A provider's subscription check that a [`Receiver`](super::Receiver)
/// answers by itself ([`with_handshake`](super::Receiver::with_handshake)).
///
/// Signed handshakes (Slack, Twitch, Zoom) are answered only after their
/// signature verified: a forged one is refused as any forged request is.
/// Meta's is an unsigned `GET`, answered only when its verify token
/// matches (compared in constant time); a wrong token is 403.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Handshake {
    /// Slack Events API: a signed `{"type":"url_verification","challenge":..}`
    /// is answered with the challenge, as text.
    Slack,
    /// Meta (Facebook, Instagram, WhatsApp): `GET ?hub.mode=subscribe&
    /// hub.verify_token=..&hub.challenge=..` is answered with the challenge
    /// when the verify token is this one (the one typed into Meta's
    /// console; not the app secret).
    Meta {
        /// The verify token configured in Meta's console.
        verify_token: String,
    },
    /// Twitch EventSub: a signed request with
    /// `Twitch-Eventsub-Message-Type: webhook_callback_verification` is
    /// answered with the body's `challenge`, as text.
    Twitch,
    /// Zoom: a signed `{"event":"endpoint.url_validation","payload":
    /// {"plainToken":..}}` is answered with `{"plainToken":..,
    /// "encryptedToken": hex HMAC-SHA256(secret, plainToken)}`.
    Zoom,
}

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Slack => "Slack",
            Self::Meta { .. } => "Meta { verify_token: *** }",
            Self::Twitch => "Twitch",
            Self::Zoom => "Zoom",
        })
    }
}

impl Handshake {
    /// Meta's subscription check with `verify_token`.
    pub fn meta(verify_token: impl Into<String>) -> Self {
        Self::Meta {
            verify_token: verify_token.into(),
        }
    }
}

/// What a receiver answers to a handshake: a status, a content type and a
/// body. The adapters send it as it is, with `Cache-Control: no-store` and
/// `X-Content-Type-Options: nosniff` (the body echoes the provider's text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeAnswer {
    /// The HTTP status: 200, or 403 for a Meta check with a wrong token.
    pub status: u16,
    /// `text/plain; charset=utf-8` or `application/json`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
    /// The provider, for logs: `slack`, `meta`, `twitch` or `zoom`.
    pub provider: &'static str,
}

impl HandshakeAnswer {
    fn text(provider: &'static str, body: String) -> Self {
        Self {
            status: 200,
            content_type: "text/plain; charset=utf-8",
            body,
            provider,
        }
    }
}

/// A challenge fit to echo: 1 to [`MAX_CHALLENGE_LEN`] visible ASCII.
fn echoable(challenge: &str) -> Option<String> {
    let fits = (1..=MAX_CHALLENGE_LEN).contains(&challenge.len())
        && challenge.bytes().all(|byte| byte.is_ascii_graphic());
    fits.then(|| challenge.to_owned())
}

/// The answer to an unsigned handshake in a request's method and query
/// (Meta's `GET`), if one of `handshakes` is one.
pub(super) fn before_body(
    handshakes: &[Handshake],
    method: &str,
    query: Option<&str>,
) -> Option<HandshakeAnswer> {
    let verify_token = handshakes.iter().find_map(|handshake| match handshake {
        Handshake::Meta { verify_token } => Some(verify_token),
        _ => None,
    })?;
    if !method.eq_ignore_ascii_case("GET") {
        return None;
    }
    let (mut mode, mut token, mut challenge) = (None, None, None);
    for (name, value) in query_pairs(query?) {
        match name.as_str() {
            "hub.mode" => mode = Some(value),
            "hub.verify_token" => token = Some(value),
            "hub.challenge" => challenge = Some(value),
            _ => {}
        }
    }
    if mode.is_none() && token.is_none() && challenge.is_none() {
        return None;
    }
    let forbidden = HandshakeAnswer {
        status: 403,
        content_type: "text/plain; charset=utf-8",
        body: "the verify token does not match".to_owned(),
        provider: "meta",
    };
    let matches =
        token.is_some_and(|token| bool::from(token.as_bytes().ct_eq(verify_token.as_bytes())));
    if mode.as_deref() != Some("subscribe") || !matches {
        return Some(forbidden);
    }
    match challenge.as_deref().and_then(echoable) {
        Some(challenge) => Some(HandshakeAnswer::text("meta", challenge)),
        None => Some(HandshakeAnswer {
            status: 400,
            body: "hub.challenge is missing or not visible ASCII".to_owned(),
            ..forbidden
        }),
    }
}

/// The answer to a signed handshake, once `event` verified, if one of
/// `handshakes` is one.
pub(super) fn verified(
    handshakes: &[Handshake],
    verifier: &Verifier,
    headers: &(impl Headers + ?Sized),
    event: &VerifiedEvent,
) -> Option<HandshakeAnswer> {
    for handshake in handshakes {
        let answer = match handshake {
            Handshake::Meta { .. } => None,
            Handshake::Slack => {
                let body: serde_json::Value = serde_json::from_slice(&event.body).ok()?;
                (body["type"] == "url_verification")
                    .then(|| body["challenge"].as_str().and_then(echoable))
                    .flatten()
                    .map(|challenge| HandshakeAnswer::text("slack", challenge))
            }
            Handshake::Twitch => {
                let kind = HeaderKey::from_static("twitch-eventsub-message-type");
                let verification = matches!(
                    headers.lookup(&kind),
                    HeaderLookup::One(value) if value == b"webhook_callback_verification"
                );
                verification
                    .then(|| {
                        let body: serde_json::Value = serde_json::from_slice(&event.body).ok()?;
                        body["challenge"].as_str().and_then(echoable)
                    })
                    .flatten()
                    .map(|challenge| HandshakeAnswer::text("twitch", challenge))
            }
            Handshake::Zoom => {
                let body: serde_json::Value = serde_json::from_slice(&event.body).ok()?;
                let plain = (body["event"] == "endpoint.url_validation")
                    .then(|| body["payload"]["plainToken"].as_str().and_then(echoable))
                    .flatten();
                plain.and_then(|plain| {
                    let encrypted = verifier.mac_hex(plain.as_bytes(), SystemTime::now())?;
                    Some(HandshakeAnswer {
                        status: 200,
                        content_type: "application/json",
                        body: serde_json::json!({
                            "plainToken": plain,
                            "encryptedToken": encrypted,
                        })
                        .to_string(),
                        provider: "zoom",
                    })
                })
            }
        };
        if answer.is_some() {
            return answer;
        }
    }
    None
}

/// The `name=value` pairs of a URL query, percent-decoded (`+` as a
/// space); pairs that do not decode to UTF-8 are passed over.
fn query_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query.split('&').filter_map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        Some((decode(name)?, decode(value)?))
    })
}

fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(at + 1..at + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                at += 2;
            }
            byte => out.push(byte),
        }
        at += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_as_forms_do() {
        let pairs: Vec<(String, String)> =
            query_pairs("hub.mode=subscribe&hub.challenge=a%2Bb+c&hub.verify_token=t%C3%A9&x")
                .collect();
        assert_eq!(
            pairs,
            [
                ("hub.mode".into(), "subscribe".into()),
                ("hub.challenge".into(), "a+b c".into()),
                ("hub.verify_token".into(), "té".into()),
                ("x".into(), String::new()),
            ]
        );
        assert_eq!(
            query_pairs("a=%zz&b=%e9").count(),
            0,
            "bad escapes and bad UTF-8 pass over"
        );
    }

    #[test]
    fn meta_answers_the_challenge_only_with_its_verify_token() {
        let meta = [Handshake::meta("my-verify-token")];
        let query = "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=my-verify-token";
        let answer = before_body(&meta, "GET", Some(query)).unwrap();
        assert_eq!((answer.status, answer.body.as_str()), (200, "1158201444"));
        for wrong in [
            "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=my-verify-tokeN",
            "hub.mode=subscribe&hub.challenge=1158201444",
            "hub.mode=unsubscribe&hub.challenge=1158201444&hub.verify_token=my-verify-token",
        ] {
            assert_eq!(
                before_body(&meta, "GET", Some(wrong)).unwrap().status,
                403,
                "{wrong}"
            );
        }
        assert_eq!(
            before_body(&meta, "POST", Some(query)),
            None,
            "a POST is a webhook"
        );
        assert_eq!(
            before_body(&meta, "GET", Some("page=2")),
            None,
            "not a handshake"
        );
        assert_eq!(before_body(&meta, "GET", None), None);
        assert_eq!(
            before_body(&[Handshake::Slack], "GET", Some(query)),
            None,
            "not configured"
        );
        let no_challenge =
            "hub.mode=subscribe&hub.verify_token=my-verify-token&hub.challenge=a%20b";
        assert_eq!(
            before_body(&meta, "GET", Some(no_challenge))
                .unwrap()
                .status,
            400
        );
        assert!(
            !format!("{:?}", meta[0]).contains("my-verify-token"),
            "never logged"
        );
    }
}
