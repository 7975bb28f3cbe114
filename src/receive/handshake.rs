//! Providers' subscription checks: the requests some providers send before
//! their first webhook, which a receiver answers itself. A handshake is
//! never claimed, never enqueued and never reaches the handler.

use subtle::ConstantTimeEq as _;

use super::VerifiedEvent;
use crate::verify::{ConfigError, HeaderKey, HeaderLookup, Headers, Scheme, Verifier};

/// The longest challenge echoed back. Providers send tens of characters.
const MAX_CHALLENGE_LEN: usize = 1024;

/// The largest body of an Event Grid subscription validation read (it
/// is unsigned): Event Grid sends about 500 bytes; more is answered 413.
pub(super) const MAX_VALIDATION_BODY: usize = 16 * 1024;

/// The longest token proved with a secret (X's `crc_token`, Zoom's
/// `plainToken`). Both providers send a few dozen characters.
const MAX_PROVED_TOKEN_LEN: usize = 256;

/// A provider's subscription check that a [`Receiver`](super::Receiver)
/// answers by itself ([`with_handshake`](super::Receiver::with_handshake)).
///
/// Signed handshakes (Slack, Twitch, Zoom, Discord) are answered only
/// after their signature verified: a forged one is refused as any forged
/// request is. Meta's, Graph's and X's come before any body: Meta's `GET`
/// is answered only when its verify token matches (compared in constant
/// time; a wrong or empty one is 403), Graph's token is echoed as plain
/// text, and X's is answered with a proof of the secret, not the secret.
/// A request recognized as a handshake whose challenge cannot be echoed is
/// answered 400, never passed on.
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
    /// Discord interactions: a signed `PING` (`{"type":1}`) is answered
    /// `{"type":1}`, as JSON.
    Discord,
    /// Microsoft Graph change notifications: a `POST` with
    /// `?validationToken=..` is answered with the token, as text, at once.
    /// Graph does not sign it; the token is echoed only as plain text.
    MicrosoftGraph,
    /// X (Twitter) Account Activity: `GET ?crc_token=..` is answered with
    /// `{"response_token":"sha256=" + base64 HMAC-SHA256(consumer secret,
    /// crc_token)}`, proved with the first secret valid now.
    X,
    /// Azure Event Grid's endpoint validation, in both of its schemas: a
    /// `POST` with `aeg-event-type: SubscriptionValidation` (Event Grid
    /// schema) is answered `{"validationResponse": <the event's
    /// data.validationCode>}`; an `OPTIONS` with `WebHook-Request-Origin`
    /// (CloudEvents 1.0 abuse protection) is answered with
    /// `WebHook-Allowed-Origin` naming that origin and
    /// `WebHook-Allowed-Rate: *`. Event Grid signs neither, nor its
    /// deliveries: answering only grants consent, and the deliveries still
    /// need a scheme this receiver verifies (such as a signing proxy).
    AzureEventGrid,
}

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Slack => "Slack",
            Self::Meta { .. } => "Meta { verify_token: *** }",
            Self::Twitch => "Twitch",
            Self::Zoom => "Zoom",
            Self::Discord => "Discord",
            Self::MicrosoftGraph => "MicrosoftGraph",
            Self::X => "X",
            Self::AzureEventGrid => "AzureEventGrid",
        })
    }
}

impl Handshake {
    /// The provider, as [`HandshakeAnswer::provider`] names it.
    pub(super) fn provider(&self) -> &'static str {
        match self {
            Self::Slack => "slack",
            Self::Meta { .. } => "meta",
            Self::Twitch => "twitch",
            Self::Zoom => "zoom",
            Self::Discord => "discord",
            Self::MicrosoftGraph => "microsoft-graph",
            Self::X => "x",
            Self::AzureEventGrid => "azure-event-grid",
        }
    }

    /// The scheme whose deliveries this handshake belongs with: `None` for
    /// the unsigned ones that compute nothing with a secret (Graph's and
    /// Event Grid's), which go with any scheme.
    fn scheme(&self) -> Option<(&'static str, Scheme)> {
        Some(match self {
            Self::Slack => ("slack", Scheme::slack()),
            Self::Meta { .. } => ("meta", Scheme::meta()),
            Self::Twitch => ("twitch", Scheme::twitch()),
            Self::Zoom => ("zoom", Scheme::zoom()),
            Self::Discord => ("discord", Scheme::discord()),
            Self::X => ("x", Scheme::x()),
            Self::MicrosoftGraph | Self::AzureEventGrid => return None,
        })
    }

    /// Refuses this handshake on a receiver verifying `scheme`, unless it
    /// is the provider's own (exactly: a scheme changed from the preset
    /// is another scheme).
    pub(super) fn check_scheme(&self, scheme: &Scheme) -> Result<(), ConfigError> {
        match self.scheme() {
            Some((expected, preset)) if *scheme != preset => Err(ConfigError::HandshakeScheme {
                handshake: self.provider(),
                expected,
                scheme: scheme.name().to_owned(),
            }),
            _ => Ok(()),
        }
    }

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
    /// The HTTP status: 200; 403 for a Meta check with a wrong token; 400
    /// for a challenge that cannot be echoed.
    pub status: u16,
    /// `text/plain; charset=utf-8` or `application/json`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
    /// The provider, for logs: `slack`, `meta`, `twitch`, `zoom`,
    /// `discord`, `microsoft-graph`, `x` or `azure-event-grid`.
    pub provider: &'static str,
    /// Headers to send with the answer (Event Grid's
    /// `WebHook-Allowed-Origin`), names lowercase.
    pub headers: Vec<(&'static str, String)>,
}

impl HandshakeAnswer {
    fn text(provider: &'static str, body: String) -> Self {
        Self {
            status: 200,
            content_type: "text/plain; charset=utf-8",
            body,
            provider,
            headers: Vec::new(),
        }
    }
}

/// A token fit to prove with a secret: 1 to [`MAX_PROVED_TOKEN_LEN`]
/// characters of base64 and base64url (`A-Z a-z 0-9 - _ = + /`), the
/// characters X and Zoom send. No JSON document and no signed string of
/// any scheme (which hold `{`, `.`, `:` or a space) has this shape, so a
/// proof is never a signature over content a stranger chose.
pub(crate) fn provable(token: &str) -> bool {
    (1..=MAX_PROVED_TOKEN_LEN).contains(&token.len())
        && token
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_=+/".contains(&byte))
}

/// Whether `body` could be what X's handshake proved for a stranger (a
/// body of a `crc_token`'s shape): such a body is never taken as an
/// event, so no CRC answer verifies as an X delivery. X's deliveries are
/// JSON objects.
pub(super) fn shaped_as_proof(handshakes: &[Handshake], body: &[u8]) -> bool {
    handshakes.contains(&Handshake::X) && std::str::from_utf8(body).is_ok_and(provable)
}

/// A challenge fit to echo: 1 to [`MAX_CHALLENGE_LEN`] visible ASCII.
fn echoable(challenge: &str) -> Option<String> {
    let fits = (1..=MAX_CHALLENGE_LEN).contains(&challenge.len())
        && challenge.bytes().all(|byte| byte.is_ascii_graphic());
    fits.then(|| challenge.to_owned())
}

/// The answer to an unsigned handshake in a request's method, query and
/// headers (Meta's and X's `GET`, Graph's `POST`, Event Grid's
/// `OPTIONS`), if one of `handshakes` is one.
pub(super) fn before_body(
    handshakes: &[Handshake],
    verifier: &Verifier,
    method: &str,
    query: Option<&str>,
    headers: &(impl Headers + ?Sized),
) -> Option<HandshakeAnswer> {
    let value = |name| query.and_then(|query| query_value(query, name));
    for handshake in handshakes {
        let answer = match handshake {
            Handshake::MicrosoftGraph if method.eq_ignore_ascii_case("POST") => {
                value("validationToken").map(|token| match printable(&token) {
                    Some(token) => HandshakeAnswer::text("microsoft-graph", token),
                    None => unusable("microsoft-graph"),
                })
            }
            Handshake::AzureEventGrid if method.eq_ignore_ascii_case("OPTIONS") => {
                cloudevents_origin(headers)
            }
            Handshake::X if method.eq_ignore_ascii_case("GET") => value("crc_token").map(|token| {
                let proof = provable(&token).then_some(token).and_then(|token| {
                    let tag = verifier.mac(verifier.first_hmac()?, token.as_bytes())?;
                    Some(crate::verify::Encoding::Base64.encode(&tag))
                });
                match proof {
                    Some(proof) => HandshakeAnswer {
                        status: 200,
                        content_type: "application/json",
                        body: serde_json::json!({ "response_token": format!("sha256={proof}") })
                            .to_string(),
                        provider: "x",
                        headers: Vec::new(),
                    },
                    None => unusable("x"),
                }
            }),
            _ => None,
        };
        if answer.is_some() {
            return answer;
        }
    }
    meta(handshakes, method, query)
}

/// The answer to a CloudEvents 1.0 validation request (`OPTIONS` with
/// `WebHook-Request-Origin`): the origin allowed, at any rate.
fn cloudevents_origin(headers: &(impl Headers + ?Sized)) -> Option<HandshakeAnswer> {
    let origin = match headers.lookup(&HeaderKey::from_static("webhook-request-origin")) {
        HeaderLookup::One(origin) => std::str::from_utf8(origin).ok().and_then(echoable),
        HeaderLookup::Missing => return None,
        HeaderLookup::Repeated => None,
    };
    Some(match origin {
        Some(origin) => HandshakeAnswer {
            headers: vec![
                ("webhook-allowed-origin", origin),
                ("webhook-allowed-rate", "*".to_owned()),
                ("allow", "POST, OPTIONS".to_owned()),
            ],
            ..HandshakeAnswer::text("azure-event-grid", String::new())
        },
        None => unusable("azure-event-grid"),
    })
}

/// Whether the request is an Event Grid subscription validation, whose
/// answer comes from its unsigned body ([`event_grid_validation`]).
pub(super) fn wants_unsigned_body(
    handshakes: &[Handshake],
    headers: &(impl Headers + ?Sized),
) -> bool {
    handshakes.contains(&Handshake::AzureEventGrid)
        && matches!(
            headers.lookup(&HeaderKey::from_static("aeg-event-type")),
            HeaderLookup::One(kind) if kind.eq_ignore_ascii_case(b"SubscriptionValidation")
        )
}

/// The answer to an Event Grid subscription validation: its one event's
/// `data.validationCode`, as `{"validationResponse": ..}`.
pub(super) fn event_grid_validation(body: &[u8]) -> HandshakeAnswer {
    let events = serde_json::from_slice::<serde_json::Value>(body).ok();
    let code = events.as_ref().and_then(|events| {
        let event = events.as_array()?.first()?;
        if event["eventType"] != "Microsoft.EventGrid.SubscriptionValidationEvent" {
            return None;
        }
        event["data"]["validationCode"].as_str().and_then(echoable)
    });
    match code {
        Some(code) => HandshakeAnswer {
            content_type: "application/json",
            ..HandshakeAnswer::text(
                "azure-event-grid",
                serde_json::json!({ "validationResponse": code }).to_string(),
            )
        },
        None => unusable("azure-event-grid"),
    }
}

/// The value of `name` in a URL query, percent-decoded.
fn query_value(query: &str, name: &str) -> Option<String> {
    query_pairs(query).find_map(|(key, value)| (key == name).then_some(value))
}

/// Text fit to echo with its spaces (Graph's tokens hold some): 1 to
/// [`MAX_CHALLENGE_LEN`] printable ASCII characters.
fn printable(text: &str) -> Option<String> {
    let fits = (1..=MAX_CHALLENGE_LEN).contains(&text.len())
        && text
            .bytes()
            .all(|byte| byte == b' ' || byte.is_ascii_graphic());
    fits.then(|| text.to_owned())
}

/// Meta's `GET` subscription check, if `handshakes` has Meta's.
fn meta(handshakes: &[Handshake], method: &str, query: Option<&str>) -> Option<HandshakeAnswer> {
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
        headers: Vec::new(),
    };
    // An empty configured token would let anyone's check through.
    let matches = !verify_token.is_empty()
        && token.is_some_and(|token| bool::from(token.as_bytes().ct_eq(verify_token.as_bytes())));
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
/// `handshakes` is one. A request recognized as a handshake is always
/// answered, with 400 when its challenge cannot be echoed: it never goes
/// on to be claimed.
pub(super) fn verified(
    handshakes: &[Handshake],
    verifier: &Verifier,
    headers: &(impl Headers + ?Sized),
    event: &VerifiedEvent,
) -> Option<HandshakeAnswer> {
    let json = || serde_json::from_slice::<serde_json::Value>(&event.body).ok();
    for handshake in handshakes {
        let (provider, challenge) = match handshake {
            Handshake::Meta { .. }
            | Handshake::MicrosoftGraph
            | Handshake::X
            | Handshake::AzureEventGrid => continue,
            Handshake::Slack => match json() {
                Some(body) if body["type"] == "url_verification" => {
                    ("slack", body["challenge"].as_str().and_then(echoable))
                }
                _ => continue,
            },
            // Decided from the signed body, not the unsigned
            // `Twitch-Eventsub-Message-Type`: a verification request (its
            // body holds a `challenge`) re-sent as a notification is still
            // a verification, never an event.
            Handshake::Twitch => match json() {
                Some(body) if body.get("challenge").is_some() => {
                    ("twitch", body["challenge"].as_str().and_then(echoable))
                }
                _ => continue,
            },
            Handshake::Discord => match json() {
                Some(body) if body["type"] == 1 => {
                    return Some(HandshakeAnswer {
                        status: 200,
                        content_type: "application/json",
                        body: r#"{"type":1}"#.to_owned(),
                        provider: "discord",
                        headers: Vec::new(),
                    });
                }
                _ => continue,
            },
            Handshake::Zoom => match json() {
                Some(body) if body["event"] == "endpoint.url_validation" => {
                    let plain = body["payload"]["plainToken"]
                        .as_str()
                        .filter(|plain| provable(plain))
                        .map(str::to_owned);
                    // Proved with the secret the request verified with:
                    // while secrets rotate, the one Zoom holds.
                    let encrypted = plain.as_ref().and_then(|plain| {
                        let verified = verifier.verify(headers, &event.body).ok()?;
                        let tag = verifier.mac(verified.key_index(), plain.as_bytes())?;
                        Some(crate::verify::Encoding::Hex.encode(&tag))
                    });
                    return Some(match (plain, encrypted) {
                        (Some(plain), Some(encrypted)) => HandshakeAnswer {
                            status: 200,
                            content_type: "application/json",
                            body: serde_json::json!({
                                "plainToken": plain,
                                "encryptedToken": encrypted,
                            })
                            .to_string(),
                            provider: "zoom",
                            headers: Vec::new(),
                        },
                        _ => unusable("zoom"),
                    });
                }
                _ => continue,
            },
        };
        return Some(match challenge {
            Some(challenge) => HandshakeAnswer::text(provider, challenge),
            None => unusable(provider),
        });
    }
    None
}

/// The answer to a handshake whose challenge cannot be echoed.
fn unusable(provider: &'static str) -> HandshakeAnswer {
    HandshakeAnswer {
        status: 400,
        content_type: "text/plain; charset=utf-8",
        body: "the handshake's challenge is missing or not 1 to 1024 visible ASCII characters"
            .to_owned(),
        provider,
        headers: Vec::new(),
    }
}

/// The `name=value` pairs of a URL query, decoded as a form's; pairs that
/// do not decode to UTF-8 are passed over.
fn query_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    crate::verify::form_pairs(query).filter_map(Result::ok)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::super::{Received, Rejection};
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

    const NO_HEADERS: &[(&str, &str)] = &[];

    fn any_verifier() -> Verifier {
        Verifier::builder(crate::verify::Scheme::meta())
            .with_secret("app-secret")
            .unwrap()
            .build()
            .unwrap()
    }

    #[test]
    fn meta_answers_the_challenge_only_with_its_verify_token() {
        let meta = [Handshake::meta("my-verify-token")];
        let query = "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=my-verify-token";
        let answer = before_body(&meta, &any_verifier(), "GET", Some(query), NO_HEADERS).unwrap();
        assert_eq!((answer.status, answer.body.as_str()), (200, "1158201444"));
        for wrong in [
            "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=my-verify-tokeN",
            "hub.mode=subscribe&hub.challenge=1158201444",
            "hub.mode=unsubscribe&hub.challenge=1158201444&hub.verify_token=my-verify-token",
        ] {
            assert_eq!(
                before_body(&meta, &any_verifier(), "GET", Some(wrong), NO_HEADERS)
                    .unwrap()
                    .status,
                403,
                "{wrong}"
            );
        }
        assert_eq!(
            before_body(&meta, &any_verifier(), "POST", Some(query), NO_HEADERS),
            None,
            "a POST is a webhook"
        );
        assert_eq!(
            before_body(&meta, &any_verifier(), "GET", Some("page=2"), NO_HEADERS),
            None,
            "not a handshake"
        );
        assert_eq!(
            before_body(&meta, &any_verifier(), "GET", None, NO_HEADERS),
            None
        );
        assert_eq!(
            before_body(
                &[Handshake::Slack],
                &any_verifier(),
                "GET",
                Some(query),
                NO_HEADERS
            ),
            None,
            "not configured"
        );
        let no_challenge =
            "hub.mode=subscribe&hub.verify_token=my-verify-token&hub.challenge=a%20b";
        assert_eq!(
            before_body(
                &meta,
                &any_verifier(),
                "GET",
                Some(no_challenge),
                NO_HEADERS
            )
            .unwrap()
            .status,
            400
        );
        assert!(
            !format!("{:?}", meta[0]).contains("my-verify-token"),
            "never logged"
        );
        let empty = [Handshake::meta("")];
        let guessed = "hub.mode=subscribe&hub.challenge=1&hub.verify_token=";
        let answer =
            before_body(&empty, &any_verifier(), "GET", Some(guessed), NO_HEADERS).unwrap();
        assert_eq!(answer.status, 403, "an empty token never matches");
    }

    /// Receives `body` signed by `signer` through a receiver with
    /// `verifier` and `handshake`; the handshake's answer.
    async fn answer(
        verifier: Verifier,
        handshake: Handshake,
        signer: &crate::verify::Signer,
        body: &'static [u8],
    ) -> Option<HandshakeAnswer> {
        let headers = signer.sign("-", SystemTime::now(), body).unwrap();
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        let receiver = super::super::Receiver::new(verifier)
            .with_handshake(handshake)
            .unwrap();
        let chunk = Ok::<_, std::io::Error>(bytes::Bytes::from_static(body));
        let event = receiver
            .receive(&headers[..], futures_util::stream::iter([chunk]))
            .await
            .unwrap();
        receiver.answer_verified(&headers[..], &event)
    }

    /// While Zoom's secret rotates, the token is proved with the secret the
    /// request verified with, whichever of the configured ones it is.
    #[tokio::test]
    async fn zoom_proves_its_token_with_the_secret_the_request_verified_with() {
        use crate::verify::{Scheme, Signer};
        let verifier = Verifier::builder(Scheme::zoom())
            .with_secret("the-old-secret")
            .unwrap()
            .with_secret("secretValueTest")
            .unwrap()
            .build()
            .unwrap();
        let signer = Signer::new(Scheme::zoom(), ["secretValueTest"]).unwrap();
        let body = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
        let answer = answer(verifier, Handshake::Zoom, &signer, body)
            .await
            .unwrap();
        let json: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(
            json["encryptedToken"],
            "70c1f2e2e6ca2d39297490d1f9142c7d701415ea8e6151f6562a08fa657a40ff"
        );
    }

    /// A request recognized as a handshake is answered even when its
    /// challenge cannot be echoed (400): it never goes on to be claimed.
    #[tokio::test]
    async fn a_handshake_with_an_unusable_challenge_is_answered_400_never_passed_on() {
        use crate::verify::{Scheme, Signer};
        let secret = "8f742231b10e8888abcd99yyyzzz85a5";
        let verifier = || {
            Verifier::builder(Scheme::slack())
                .with_secret(secret)
                .unwrap()
                .build()
                .unwrap()
        };
        let signer = Signer::new(Scheme::slack(), [secret]).unwrap();
        for body in [
            &br#"{"type":"url_verification"}"#[..],
            br#"{"type":"url_verification","challenge":""}"#,
            br#"{"type":"url_verification","challenge":"two words"}"#,
        ] {
            let answer = answer(verifier(), Handshake::Slack, &signer, body).await;
            assert_eq!(answer.map(|answer| answer.status), Some(400), "{body:?}");
        }
        let event = br#"{"type":"event_callback","challenge":"not a handshake"}"#;
        assert_eq!(
            answer(verifier(), Handshake::Slack, &signer, event).await,
            None
        );
    }

    /// Every handshake that belongs to a provider is refused on a
    /// receiver of any other scheme (or a preset changed); Graph's and
    /// Event Grid's, which compute nothing with a secret, go with any.
    #[test]
    fn a_handshake_is_refused_beside_a_scheme_it_does_not_belong_to() {
        use crate::verify::Scheme;
        for handshake in every_handshake() {
            for name in Scheme::NAMES {
                let scheme = Scheme::by_name(name).unwrap();
                let refused = handshake.check_scheme(&scheme).is_err();
                let own = handshake.scheme().map(|(own, _)| own);
                assert_eq!(
                    refused,
                    own.is_some_and(|own| own != *name),
                    "{handshake:?} beside {name}"
                );
            }
            if let Some((_, own)) = handshake.scheme() {
                let changed = own.with_prefix("changed=");
                assert!(handshake.check_scheme(&changed).is_err(), "{handshake:?}");
            }
        }
        let error = Handshake::X.check_scheme(&Scheme::github()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the x handshake belongs to the `x` scheme, not `github`; give it to a receiver \
             that verifies x's deliveries"
        );
    }

    fn every_handshake() -> [Handshake; 8] {
        [
            Handshake::Slack,
            Handshake::meta("the-verify-token"),
            Handshake::Twitch,
            Handshake::Zoom,
            Handshake::Discord,
            Handshake::MicrosoftGraph,
            Handshake::X,
            Handshake::AzureEventGrid,
        ]
    }

    /// The secret every scheme of the oracle test is verified with.
    const ORACLE_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn percent_encoded(text: &str) -> String {
        text.bytes()
            .map(|byte| match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    char::from(byte).to_string()
                }
                _ => format!("%{byte:02X}"),
            })
            .collect()
    }

    /// The byte strings a piece of text could carry as a MAC: each run of
    /// base64, base64url or hex characters, decoded every way it decodes.
    fn macs_in(text: &str) -> Vec<Vec<u8>> {
        use base64::Engine as _;
        let engines = [
            base64::engine::general_purpose::STANDARD,
            base64::engine::general_purpose::STANDARD_NO_PAD,
            base64::engine::general_purpose::URL_SAFE,
            base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ];
        let mut found = Vec::new();
        for run in text.split(|c: char| !(c.is_ascii_alphanumeric() || "+/-_=".contains(c))) {
            // Base64 may begin with `+` or `/` (a third of Svix's
            // signatures do), or the run with punctuation before the MAC.
            let trimmed = run.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
            // A prefix such as `sha256=` or `v1=` before the MAC itself.
            let runs = [
                Some(run),
                Some(trimmed),
                trimmed.split_once('=').map(|(_, rest)| rest),
            ];
            for run in runs.into_iter().flatten().filter(|run| run.len() >= 20) {
                found.extend(engines.iter().filter_map(|engine| engine.decode(run).ok()));
                if run.len() % 2 == 0 && run.bytes().all(|b| b.is_ascii_hexdigit()) {
                    found.push(
                        (0..run.len())
                            .step_by(2)
                            .map(|at| u8::from_str_radix(&run[at..at + 2], 16).unwrap())
                            .collect(),
                    );
                }
            }
        }
        found.retain(|mac| mac.len() >= 16);
        found
    }

    /// The MAC finder reads base64 that begins with `+` or `/`: the oracle
    /// test missed Svix's signature `v1,+n+CIS...` (a run of the test
    /// whose timestamp gave that signature failed).
    #[test]
    fn macs_are_found_whatever_character_they_begin_with() {
        for signature in [
            "v1,+n+CISoJlpTa/+bW0bF6zh3Vt9zibVb9HGvR+Rfrlt8=",
            "v1,/n+CISoJlpTa/+bW0bF6zh3Vt9zibVb9HGvR+Rfrlt8=",
            "sha256=6e2b0a4f1d9c3e7b8a5f2d1c0e9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b",
        ] {
            let found = macs_in(signature);
            assert!(
                found.iter().any(|mac| mac.len() == 32),
                "{signature}: {found:?}"
            );
        }
    }

    /// Everything a stranger can get a receiver with `handshake` to answer
    /// about `content` without its secret: the unsigned handshakes with
    /// `content` as their token, and the signed ones sent with a signature
    /// made with another secret. The answers' bodies and header values.
    async fn unsigned_answers(
        receiver: &super::super::Receiver,
        scheme: &crate::verify::Scheme,
        content: &str,
    ) -> Vec<String> {
        use crate::verify::Signer;
        let encoded = percent_encoded(content);
        let mut answers = Vec::new();
        let queries = [
            ("GET", format!("crc_token={encoded}")),
            ("POST", format!("validationToken={encoded}")),
            (
                "GET",
                format!(
                    "hub.mode=subscribe&hub.verify_token=the-verify-token&hub.challenge={encoded}"
                ),
            ),
        ];
        for (method, query) in &queries {
            answers.extend(receiver.answer_before_body(method, Some(query), NO_HEADERS));
        }
        let origin = [("webhook-request-origin", content)];
        answers.extend(receiver.answer_before_body("OPTIONS", None, &origin[..]));
        let json = |value: serde_json::Value| value.to_string().into_bytes();
        let grid = json(serde_json::json!([{
            "eventType": "Microsoft.EventGrid.SubscriptionValidationEvent",
            "data": { "validationCode": content },
        }]));
        let grid_headers = [("aeg-event-type", "SubscriptionValidation")];
        let stream =
            futures_util::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from(grid))]);
        if let Ok(Received::Answered(answer)) =
            receiver.receive_or_answer(&grid_headers[..], stream).await
        {
            answers.push(answer);
        }
        let forger = Signer::new(scheme.clone(), ["whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"]);
        for body in [
            content.as_bytes().to_vec(),
            json(serde_json::json!({"type": "url_verification", "challenge": content})),
            json(serde_json::json!({"challenge": content})),
            json(
                serde_json::json!({"event": "endpoint.url_validation", "payload": {"plainToken": content}}),
            ),
        ] {
            let Ok(forger) = &forger else { break };
            let Ok(headers) = forger.sign("msg_probe", SystemTime::now(), &body) else {
                continue;
            };
            let headers: Vec<(String, String)> = headers
                .iter()
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect();
            let stream =
                futures_util::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from(body))]);
            if let Ok(event) = receiver.receive(&headers[..], stream).await {
                answers.extend(receiver.answer_verified(&headers[..], &event));
            }
        }
        answers
            .into_iter()
            .flat_map(|answer| {
                std::iter::once(answer.body).chain(answer.headers.into_iter().map(|(_, v)| v))
            })
            .collect()
    }

    /// No handshake, beside any scheme it may stand with, answers a
    /// stranger (no secret) with a signature over content the stranger
    /// chose that the receiver then accepts: for each scheme, a forged
    /// event's signed content in every shape the presets sign (and a body
    /// of a token's shape) is offered to every handshake, and the answers
    /// are searched for the MAC a genuine signer would send.
    #[tokio::test]
    async fn no_handshake_signs_content_a_stranger_chose() {
        use super::super::Receiver;
        use crate::verify::{Scheme, Signer};
        let mut probed = 0;
        for handshake in every_handshake() {
            // Every scheme that signs with a secret, each verified with one.
            for name in Scheme::NAMES {
                let scheme = Scheme::by_name(name).unwrap();
                if !scheme.signs_with_a_secret() || handshake.check_scheme(&scheme).is_err() {
                    continue;
                }
                let verifier = Verifier::builder(scheme.clone())
                    .with_secret(ORACLE_SECRET)
                    .unwrap()
                    .build()
                    .unwrap();
                let receiver = Receiver::new(verifier)
                    .with_handshake(handshake.clone())
                    .unwrap();
                let signer = Signer::new(scheme.clone(), [ORACLE_SECRET]).unwrap();
                let (id, now) = ("msg_forged", SystemTime::now());
                let ts = now
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_secs();
                for body in [
                    r#"{"type":"payout.paid","amount":1000000}"#,
                    "Zm9yZ2VkLWV2ZW50",
                ] {
                    let headers = signer.sign(id, now, body.as_bytes()).unwrap();
                    let headers: Vec<(String, String)> = headers
                        .iter()
                        .map(|(name, value)| (name.to_owned(), value.to_owned()))
                        .collect();
                    let stream = futures_util::stream::iter([Ok::<_, std::io::Error>(
                        bytes::Bytes::from(body.to_owned()),
                    )]);
                    if receiver.receive(&headers[..], stream).await.is_err() {
                        // The receiver refuses this body even when signed:
                        // a signature over it is worth nothing.
                        continue;
                    }
                    let (_, signature) = headers
                        .iter()
                        .find(|(header, _)| header.eq_ignore_ascii_case(scheme.signature_header()))
                        .unwrap();
                    let genuine = macs_in(signature);
                    assert!(!genuine.is_empty(), "{name}: {signature}");
                    let shapes = [
                        body.to_owned(),
                        format!("{id}.{ts}.{body}"),
                        format!("v0:{ts}:{body}"),
                        format!("{ts}.{body}"),
                        format!("{ts}:{body}"),
                        format!("{id}{ts}{body}"),
                    ];
                    for content in &shapes {
                        for answer in unsigned_answers(&receiver, &scheme, content).await {
                            probed += 1;
                            let leaked = macs_in(&answer).iter().any(|mac| genuine.contains(mac));
                            assert!(
                                !leaked,
                                "{handshake:?} beside {name} signed {content:?} for a stranger: \
                                 {answer}"
                            );
                        }
                    }
                }
            }
        }
        assert!(probed > 50, "the handshakes answered {probed} probes");
    }

    /// X's CRC answer is a MAC over the token, as X's signature is over
    /// the body: a token-shaped body posted with that answer as its
    /// signature is refused, though the answer is X's signature over it.
    #[tokio::test]
    async fn an_x_crc_answer_posted_as_a_delivery_is_refused() {
        use super::super::Receiver;
        use crate::verify::Scheme;
        let verifier = Verifier::builder(Scheme::x())
            .with_secret("consumer-secret")
            .unwrap()
            .build()
            .unwrap();
        let receiver = Receiver::new(verifier)
            .with_handshake(Handshake::X)
            .unwrap();
        let token = "Zm9yZ2VkLWV2ZW50";
        let answer = receiver
            .answer_before_body("GET", Some(&format!("crc_token={token}")), NO_HEADERS)
            .unwrap();
        let json: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        let signature = json["response_token"].as_str().unwrap().to_owned();
        let headers = [("x-twitter-webhooks-signature", signature.as_str())];
        let stream = futures_util::stream::iter([Ok::<_, std::io::Error>(
            bytes::Bytes::from_static(token.as_bytes()),
        )]);
        let refused = receiver.receive(&headers[..], stream).await.unwrap_err();
        assert!(
            matches!(
                refused,
                Rejection::Unverified(crate::verify::VerifyError::MalformedBody { .. })
            ),
            "{refused:?}"
        );
        for unprovable in [r#"{"a":1}"#, "v0:1:{}", "a.b", "two words", ""] {
            let query = format!("crc_token={}", percent_encoded(unprovable));
            let answer = receiver
                .answer_before_body("GET", Some(&query), NO_HEADERS)
                .unwrap();
            assert_eq!(answer.status, 400, "{unprovable:?}");
        }
    }

    /// Twitch's handshake is decided from the signed body: a verification
    /// request re-sent with `message-type: notification` is answered as
    /// the verification it is, never taken as an event.
    #[tokio::test]
    async fn a_twitch_verification_relabelled_as_a_notification_is_still_a_handshake() {
        use crate::verify::{Scheme, Signer};
        let secret = "s3cRe7-twitch";
        let verifier = Verifier::builder(Scheme::twitch())
            .with_secret(secret)
            .unwrap()
            .build()
            .unwrap();
        let signer = Signer::new(Scheme::twitch(), [secret]).unwrap();
        let body = br#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"type":"channel.follow","status":"webhook_callback_verification_pending"}}"#;
        let headers = signer.sign("msg-1", SystemTime::now(), body).unwrap();
        let mut headers: Vec<(String, String)> = headers
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        headers.push((
            "twitch-eventsub-message-type".to_owned(),
            "notification".to_owned(),
        ));
        let receiver = super::super::Receiver::new(verifier)
            .with_handshake(Handshake::Twitch)
            .unwrap();
        let stream =
            futures_util::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from_static(body))]);
        let event = receiver.receive(&headers[..], stream).await.unwrap();
        let answer = receiver.answer_verified(&headers[..], &event).unwrap();
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (200, "pogchamp-kappa-360noscope-vohiyo")
        );
    }
}
