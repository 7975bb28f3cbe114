//! Known-answer vectors for Meta, Twitch, Zoom, Paddle, Square, Twilio,
//! Convoy, Outpost, Discord, SendGrid and X (tests/provider_vectors.json, each with its source): every
//! vector verifies at its own time, signing reproduces it, and one changed
//! byte of the body, a signed header or the signature makes it fail.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hooklatch::verify::{Encoding, EventKey, Malformed, Scheme, Signer, Verifier, VerifyError};
use serde_json::Value;

fn vectors() -> Value {
    serde_json::from_str(include_str!("provider_vectors.json")).expect("JSON")
}

fn text<'a>(vector: &'a Value, key: &str) -> &'a str {
    vector[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} in {vector}"))
}

fn at(seconds: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds.unsigned_abs())
}

fn verifier(scheme: Scheme, secrets: &[&str]) -> Verifier {
    let mut builder = Verifier::builder(scheme);
    for secret in secrets {
        builder = builder.with_secret(secret).unwrap();
    }
    builder.build().unwrap()
}

/// One character of `value` at byte `index` (from the end when negative)
/// changed to another of its kind.
fn change_one_char(value: &str, index: isize) -> String {
    let mut bytes = value.as_bytes().to_vec();
    let at = if index < 0 {
        bytes.len() - index.unsigned_abs()
    } else {
        index.unsigned_abs()
    };
    bytes[at] = match bytes[at] {
        b'0' => b'1',
        b'9' | b'f' | b'z' | b'Z' => bytes[at] - 1,
        other => other + 1,
    };
    String::from_utf8(bytes).unwrap()
}

fn assert_mismatch(outcome: Result<(), VerifyError>, what: &str) {
    assert!(
        matches!(outcome, Err(VerifyError::SignatureMismatch { .. })),
        "{what}: {outcome:?}"
    );
}

/// Verifies `headers` and `body` at `now`, then checks that a changed byte
/// of the body, of each header in `signed` (name and byte index) and of
/// the signature (at `signature_at`) each fails.
fn check(
    verifier: &Verifier,
    headers: &[(&str, String)],
    body: &[u8],
    now: SystemTime,
    signed: &[(&str, isize)],
) {
    let verify = |headers: &[(&str, String)], body: &[u8]| {
        let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        verifier.verify_at(&pairs, body, now).map(drop)
    };
    verify(headers, body).expect("the vector verifies");
    let mut changed = body.to_vec();
    changed[0] ^= 0x01;
    assert_mismatch(verify(headers, &changed), "body changed");
    for (name, index) in signed {
        let changed: Vec<(&str, String)> = headers
            .iter()
            .map(|(n, v)| {
                let value = if n.eq_ignore_ascii_case(name) {
                    change_one_char(v, *index)
                } else {
                    v.clone()
                };
                (*n, value)
            })
            .collect();
        let outcome = verify(&changed, body);
        assert!(
            matches!(
                outcome,
                Err(VerifyError::SignatureMismatch { .. } | VerifyError::MalformedHeader { .. })
            ),
            "{name} changed: {outcome:?}"
        );
    }
}

#[test]
fn meta_vector_verifies_signs_and_detects_any_change() {
    let vector = &vectors()["meta"][0];
    let verifier = verifier(Scheme::meta(), &[text(vector, "secret")]);
    let headers = [("X-Hub-Signature-256", text(vector, "header").to_owned())];
    let body = text(vector, "body").as_bytes();
    check(
        &verifier,
        &headers,
        body,
        SystemTime::now(),
        &[("x-hub-signature-256", -1)],
    );
    let signed = Signer::new(Scheme::meta(), [text(vector, "secret")]).unwrap();
    let signed = signed.sign("ignored", SystemTime::now(), body).unwrap();
    assert_eq!(
        signed.get("x-hub-signature-256"),
        Some(text(vector, "header"))
    );
    let alone = [("x-hub-signature-256", text(vector, "header"))];
    let event = verifier.verify(&alone, body).unwrap();
    let key = EventKey::default().key(&verifier, &event).unwrap();
    assert!(
        key.starts_with("sha256:"),
        "claimed by the signed body: {key}"
    );
}

#[test]
fn twitch_vectors_verify_sign_and_detect_any_change_in_id_timestamp_or_body() {
    for vector in vectors()["twitch"].as_array().unwrap() {
        let secret = text(vector, "secret");
        let verifier = verifier(Scheme::twitch(), &[secret]);
        let headers = [
            ("Twitch-Eventsub-Message-Id", text(vector, "id").to_owned()),
            (
                "Twitch-Eventsub-Message-Timestamp",
                text(vector, "timestamp").to_owned(),
            ),
            (
                "Twitch-Eventsub-Message-Signature",
                text(vector, "header").to_owned(),
            ),
        ];
        let body = text(vector, "body").as_bytes();
        let now = at(vector["unix"].as_i64().unwrap());
        check(
            &verifier,
            &headers,
            body,
            now,
            &[
                ("twitch-eventsub-message-id", -1),
                // A digit of the fraction: still a date-time, another one.
                ("twitch-eventsub-message-timestamp", -2),
                ("twitch-eventsub-message-signature", -1),
            ],
        );
        let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let event = verifier.verify_at(&pairs, body, now).unwrap();
        assert_eq!(event.id(), Some(text(vector, "id")));
        assert!(event.id_is_signed());
        assert_eq!(
            EventKey::default().key(&verifier, &event).unwrap(),
            text(vector, "id"),
            "claimed by the signed message id"
        );
        assert_eq!(event.timestamp(), vector["unix"].as_i64());
        // Signing at the vector's time writes its timestamp and signature.
        let nanos = text(vector, "timestamp")
            .split(['.', 'Z'])
            .nth(1)
            .map_or(0, |fraction| {
                format!("{fraction:0<9}").parse::<u32>().unwrap()
            });
        let signer = Signer::new(Scheme::twitch(), [secret]).unwrap();
        let signed = signer
            .sign(text(vector, "id"), now + Duration::new(0, nanos), body)
            .unwrap();
        assert_eq!(
            signed.get("twitch-eventsub-message-timestamp"),
            Some(text(vector, "timestamp"))
        );
        assert_eq!(
            signed.get("twitch-eventsub-message-signature"),
            Some(text(vector, "header"))
        );
    }
}

/// The id and the timestamp stand next to each other in Twitch's signed
/// bytes with nothing between: moving a character across the border keeps
/// the bytes, so the strict timestamp is what refuses the other reading.
#[test]
fn a_twitch_signature_verifies_one_split_into_id_and_timestamp_only() {
    let vector = &vectors()["twitch"][0];
    let verifier = verifier(Scheme::twitch(), &[text(vector, "secret")]);
    let (id, timestamp) = (text(vector, "id"), text(vector, "timestamp"));
    let body = text(vector, "body").as_bytes();
    let now = at(vector["unix"].as_i64().unwrap());
    let joined = format!("{id}{timestamp}");
    for border in (1..joined.len()).filter(|border| *border != id.len()) {
        let (id, timestamp) = joined.split_at(border);
        let headers = [
            ("twitch-eventsub-message-id", id),
            ("twitch-eventsub-message-timestamp", timestamp),
            ("twitch-eventsub-message-signature", text(vector, "header")),
        ];
        let outcome = verifier.verify_at(&headers, body, now);
        assert!(
            matches!(
                outcome,
                Err(VerifyError::MalformedHeader {
                    reason: Malformed::TimestampNotRfc3339 | Malformed::IdContainsDelimiter,
                    ..
                })
            ),
            "id {id:?} timestamp {timestamp:?}: {outcome:?}"
        );
    }
    // A date-time in the body could be read as the timestamp, with the real
    // one inside the id: an id may hold no `:`, which every date-time has.
    let signer = Signer::new(Scheme::twitch(), [text(vector, "secret")]).unwrap();
    let body = br#"{"event":{"followed_at":"2019-11-16T10:11:12.123Z","user":"x"}}"#;
    let signed = signer.sign(id, now, body).unwrap();
    let timestamp = signed.get("twitch-eventsub-message-timestamp").unwrap();
    let date = "2019-11-16T10:11:12.123Z";
    let at = std::str::from_utf8(body).unwrap().find(date).unwrap();
    let (inner, rest) = (&body[..at], &body[at + date.len()..]);
    let longer_id = format!("{id}{timestamp}{}", std::str::from_utf8(inner).unwrap());
    let headers = [
        ("twitch-eventsub-message-id", longer_id.as_str()),
        ("twitch-eventsub-message-timestamp", date),
        (
            "twitch-eventsub-message-signature",
            signed.get("twitch-eventsub-message-signature").unwrap(),
        ),
    ];
    let outcome = verifier.verify_at(&headers, rest, now);
    assert!(
        matches!(
            outcome,
            Err(VerifyError::MalformedHeader {
                reason: Malformed::IdContainsDelimiter,
                ..
            })
        ),
        "{outcome:?}"
    );
}

/// Twitch's timestamps are RFC 3339, which writes years 0000 to 9999
/// only: a signer asked to sign outside them refuses, rather than send what
/// no verifier reads (found by fuzzing).
#[test]
fn a_twitch_signer_refuses_a_time_rfc3339_cannot_write() {
    let signer = Signer::new(Scheme::twitch(), ["twitch-secret-0123"]).unwrap();
    let far = UNIX_EPOCH + Duration::from_secs(72_057_593_836_601_342);
    let refused = signer.sign("e76c6bd4", far, b"{}");
    assert!(
        matches!(
            refused,
            Err(VerifyError::MalformedHeader {
                reason: Malformed::TimestampOutOfRange,
                ..
            })
        ),
        "{refused:?}"
    );
    let last = UNIX_EPOCH + Duration::from_secs(253_402_300_799);
    let signed = signer.sign("e76c6bd4", last, b"{}").unwrap();
    let headers: Vec<(&str, &str)> = signed.iter().collect();
    verifier(Scheme::twitch(), &["twitch-secret-0123"])
        .verify_at(&headers, b"{}", last)
        .expect("the last second RFC 3339 writes verifies");
}

/// Zoom documents the rule Slack uses (`v0:{timestamp}:{body}`, hex,
/// `v0=`) under its own headers and publishes no vector with its secret:
/// Slack's published vector, sent under Zoom's header names, verifies.
#[test]
fn zoom_verifies_slacks_published_vector_under_zooms_headers() {
    let slack: Value = serde_json::from_str(include_str!("vectors.json")).unwrap();
    let vector = &slack["slack"][0];
    let verifier = verifier(Scheme::zoom(), &[text(vector, "secret")]);
    let timestamp = text(vector, "timestamp");
    let headers = [
        ("x-zm-request-timestamp", timestamp.to_owned()),
        ("x-zm-signature", text(vector, "expected").to_owned()),
    ];
    let body = text(vector, "payload").as_bytes();
    let now = at(timestamp.parse().unwrap());
    check(
        &verifier,
        &headers,
        body,
        now,
        &[("x-zm-request-timestamp", -1), ("x-zm-signature", -1)],
    );
    let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let event = verifier.verify_at(&pairs, body, now).unwrap();
    let key = EventKey::default().key(&verifier, &event).unwrap();
    assert!(
        key.starts_with("sha256:"),
        "claimed by the signed content: {key}"
    );
    let signer = Signer::new(Scheme::zoom(), [text(vector, "secret")]).unwrap();
    let signed = signer.sign("ignored", now, body).unwrap();
    assert_eq!(signed.get("x-zm-signature"), Some(text(vector, "expected")));
    assert_eq!(signed.get("x-zm-request-timestamp"), Some(timestamp));
}

#[test]
fn paddle_vectors_verify_with_any_of_several_h1_and_secrets() {
    for vector in vectors()["paddle"].as_array().unwrap() {
        let secrets: Vec<&str> = vector["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|secret| secret.as_str().unwrap())
            .collect();
        let verifier = verifier(Scheme::paddle(), &secrets);
        let header = text(vector, "header");
        let headers = [("Paddle-Signature", header.to_owned())];
        let body = text(vector, "body").as_bytes();
        let now = at(vector["unix"].as_i64().unwrap());
        // The last h1 that verifies, and the ts digit before `;`.
        let valid_h1_end = header
            .split(';')
            .scan(0, |end, field| {
                *end += field.len() + 1;
                Some((*end - 1, field))
            })
            .filter(|(_, field)| field.starts_with("h1=") && field.len() == 67)
            .map(|(end, _)| end as isize - 1)
            .last()
            .unwrap();
        let repeated = header.matches("h1=").count() > 1 && !header.contains("h1=dummy");
        let mut signed = vec![("paddle-signature", header.find(';').unwrap() as isize - 1)];
        if !repeated {
            signed.push(("paddle-signature", valid_h1_end));
        }
        check(&verifier, &headers, body, now, &signed);
        let alone = [("paddle-signature", header)];
        let event = verifier.verify_at(&alone, body, now).unwrap();
        if let Some(id) = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|json| json["event_id"].as_str().map(str::to_owned))
        {
            assert_eq!(EventKey::default().key(&verifier, &event).unwrap(), id);
        }
        if secrets.len() == 1 && !header.contains("h2=") {
            let signer = Signer::new(Scheme::paddle(), [secrets[0]]).unwrap();
            let signed = signer.sign("ignored", now, body).unwrap();
            assert_eq!(
                signed.get("paddle-signature"),
                Some(header),
                "{}",
                text(vector, "source")
            );
        }
    }
}

#[test]
fn square_vectors_verify_against_the_configured_url_only() {
    for vector in vectors()["square"].as_array().unwrap() {
        let url = text(vector, "url");
        let verifier = verifier(Scheme::square(url).unwrap(), &[text(vector, "secret")]);
        let header = text(vector, "header");
        let headers = [("x-square-hmacsha256-signature", header.to_owned())];
        let body = text(vector, "body").as_bytes();
        check(
            &verifier,
            &headers,
            body,
            SystemTime::now(),
            &[("x-square-hmacsha256-signature", 2)],
        );
        // Another URL (what a proxy in front would show) is another signature.
        let elsewhere = verifier_for_url(&format!("{url}/"), text(vector, "secret"));
        assert_mismatch(
            elsewhere
                .verify(&[("x-square-hmacsha256-signature", header)], body)
                .map(drop),
            "another URL",
        );
        let signer = Signer::new(Scheme::square(url).unwrap(), [text(vector, "secret")]).unwrap();
        let signed = signer.sign("ignored", SystemTime::now(), body).unwrap();
        assert_eq!(signed.get("x-square-hmacsha256-signature"), Some(header));
        if let Some(id) = vector.get("event_id").and_then(Value::as_str) {
            let alone = [("x-square-hmacsha256-signature", header)];
            let event = verifier.verify(&alone, body).unwrap();
            assert_eq!(EventKey::default().key(&verifier, &event).unwrap(), id);
        }
    }
    assert!(Scheme::square("https://example.com/{id}").is_err());
    assert!(Scheme::square("").is_err());
}

fn verifier_for_url(url: &str, secret: &str) -> Verifier {
    verifier(Scheme::square(url).unwrap(), &[secret])
}

/// Convoy's own vector file: every advanced SHA-256 case (hex and base64)
/// ends as Convoy's SDKs say; SHA-512 and simple-mode cases are other
/// schemes (a simple one is `Scheme::custom`, shown below).
#[test]
fn convoy_vectors_end_as_convoys_own_sdks_say() {
    let all = vectors();
    let mut checked = 0;
    for vector in all["convoy"].as_array().unwrap() {
        if vector["hash"] != "SHA256" {
            continue;
        }
        let encoding = match text(vector, "encoding") {
            "hex" => Encoding::Hex,
            _ => Encoding::Base64,
        };
        let secret = text(vector, "secret");
        let body = text(vector, "payload").as_bytes();
        let header = text(vector, "header");
        let scheme = if vector["advanced"].as_bool().unwrap() {
            Scheme::convoy().with_encoding(encoding)
        } else {
            Scheme::custom("convoy-simple", "x-convoy-signature")
                .unwrap()
                .with_encoding(encoding)
        };
        let verifier = verifier(scheme, &[secret]);
        // Convoy's tolerance is 300 s; its "expired" case is a valid
        // signature read long after.
        let now = if vector["tolerance"] == 300 {
            SystemTime::now()
        } else {
            at(1_700_000_000)
        };
        let alone = [("X-Convoy-Signature", header)];
        let outcome = verifier.verify_at(&alone, body, now).map(drop);
        assert_eq!(
            outcome.is_ok(),
            vector["valid"].as_bool().unwrap(),
            "{}: {outcome:?}",
            text(vector, "name")
        );
        checked += 1;
    }
    assert_eq!(checked, 13, "every SHA-256 case");
    let rotation = &all["convoy_rotation"];
    let secrets: Vec<&str> = rotation["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|secret| secret.as_str().unwrap())
        .collect();
    let body = text(rotation, "body").as_bytes();
    let now = at(rotation["unix"].as_i64().unwrap());
    let signer = Signer::new(Scheme::convoy(), secrets.iter().copied()).unwrap();
    let signed = signer.sign("ignored", now, body).unwrap();
    assert_eq!(
        signed.get("x-convoy-signature"),
        Some(text(rotation, "header"))
    );
    for secret in &secrets {
        let verifier = verifier(Scheme::convoy(), &[secret]);
        let headers = [("X-Convoy-Signature", text(rotation, "header").to_owned())];
        let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let event = verifier
            .verify_at(&pairs, body, now)
            .expect("each rotated secret verifies");
        let key = EventKey::default().key(&verifier, &event).unwrap();
        assert!(
            key.starts_with("sha256:"),
            "claimed by the signed content: {key}"
        );
    }
}

#[test]
fn outpost_vectors_verify_with_current_or_previous_secret() {
    let all = vectors();
    let single = &all["outpost"][0];
    let verifier1 = verifier(Scheme::outpost(), &[text(single, "secret")]);
    let headers = [("x-outpost-signature", text(single, "header").to_owned())];
    check(
        &verifier1,
        &headers,
        text(single, "body").as_bytes(),
        SystemTime::now(),
        &[("x-outpost-signature", -1)],
    );
    let rotating = &all["outpost"][1];
    let secrets: Vec<&str> = rotating["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|secret| secret.as_str().unwrap())
        .collect();
    let body = text(rotating, "body").as_bytes();
    let signer = Signer::new(Scheme::outpost(), secrets.iter().copied()).unwrap();
    let signed = signer.sign("evt_1", SystemTime::now(), body).unwrap();
    assert_eq!(
        signed.get("x-outpost-signature"),
        Some(text(rotating, "header"))
    );
    // Claimed by the signed body, whatever unsigned event id comes with it.
    let keys: Vec<String> = ["evt_1", "evt_replayed_under_a_fresh_id"]
        .into_iter()
        .map(|id| {
            let verifier = verifier(Scheme::outpost(), &[secrets[0]]);
            let headers = [
                ("x-outpost-signature", text(rotating, "header")),
                ("x-outpost-event-id", id),
            ];
            let event = verifier.verify(&headers, body).unwrap();
            EventKey::default().key(&verifier, &event).unwrap()
        })
        .collect();
    assert!(
        keys[0].starts_with("sha256:") && keys[0] == keys[1],
        "{keys:?}"
    );
    for secret in &secrets {
        let verifier = verifier(Scheme::outpost(), &[secret]);
        let headers = [
            ("x-outpost-signature", text(rotating, "header")),
            ("x-outpost-event-id", "evt_1"),
        ];
        let event = verifier
            .verify(&headers, body)
            .expect("current and previous secrets verify");
        assert_eq!(event.id(), Some("evt_1"));
        assert!(!event.id_is_signed());
    }
}

/// Discord checks an ed25519 signature over the timestamp and the body
/// with the application's public key in hex; a key pair in hex signs.
#[test]
fn discord_vectors_verify_with_the_hex_public_key_and_detect_any_change() {
    for vector in vectors()["discord"].as_array().unwrap() {
        let verifier = verifier(Scheme::discord(), &[text(vector, "public_key")]);
        let timestamp = text(vector, "timestamp");
        let headers = [
            ("X-Signature-Ed25519", text(vector, "signature").to_owned()),
            ("X-Signature-Timestamp", timestamp.to_owned()),
        ];
        let body = text(vector, "body").as_bytes();
        let now = at(timestamp.parse().unwrap());
        check(
            &verifier,
            &headers,
            body,
            now,
            &[("x-signature-timestamp", -1), ("x-signature-ed25519", -1)],
        );
        let signer = Signer::new(Scheme::discord(), [text(vector, "key_pair")]).unwrap();
        let signed = signer.sign("ignored", now, body).unwrap();
        assert_eq!(
            signed.get("x-signature-ed25519"),
            Some(text(vector, "signature"))
        );
        if let Some(id) = vector.get("id").and_then(Value::as_str) {
            let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let event = verifier.verify_at(&pairs, body, now).unwrap();
            assert_eq!(EventKey::default().key(&verifier, &event).unwrap(), id);
        }
    }
    for bad in [
        "d75a98",
        "zz5a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    ] {
        let built = Verifier::builder(Scheme::discord()).with_secret(bad);
        assert!(
            matches!(built, Err(hooklatch::verify::ConfigError::KeyNotHex { .. })),
            "{bad}: {built:?}"
        );
    }
}

/// SendGrid's published signatures are ECDSA P-256 with a high S (the
/// upper half of the group order), so its signer does not normalize S:
/// refusing high-S signatures would refuse SendGrid's own deliveries. They
/// are accepted (the next test verifies these very signatures); a
/// signature's other form gains nothing, since the claim key is a digest
/// of the signed content, not of the signature.
#[test]
fn sendgrids_published_signatures_are_high_s() {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    // The order of P-256's group, big-endian.
    const ORDER: [u8; 32] = [
        0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63,
        0x25, 0x51,
    ];
    for vector in vectors()["sendgrid"].as_array().unwrap() {
        let der = STANDARD.decode(text(vector, "signature")).unwrap();
        // SEQUENCE { INTEGER r, INTEGER s }, each at most 33 bytes.
        let r_len = usize::from(der[3]);
        let s_at = 4 + r_len;
        let s = &der[s_at + 2..s_at + 2 + usize::from(der[s_at + 1])];
        let s = &s[s.len() - 32..];
        // s > n / 2, compared as 2s > n on big-endian bytes.
        let mut doubled = [0u8; 33];
        let mut carry = 0u16;
        for at in (0..32).rev() {
            let sum = u16::from(s[at]) * 2 + carry;
            doubled[at + 1] = sum as u8;
            carry = sum >> 8;
        }
        doubled[0] = carry as u8;
        let mut order = [0u8; 33];
        order[1..].copy_from_slice(&ORDER);
        assert!(doubled > order, "{}: low S", text(vector, "source"));
    }
}

/// SendGrid's own vectors verify with the key as its settings show it, and
/// a changed byte of the body, the timestamp or the signature fails.
#[test]
fn sendgrid_vectors_verify_with_the_base64_der_key_and_detect_any_change() {
    for vector in vectors()["sendgrid"].as_array().unwrap() {
        let verifier = verifier(Scheme::sendgrid(), &[text(vector, "public_key")]);
        let timestamp = text(vector, "timestamp");
        let headers = [
            (
                "X-Twilio-Email-Event-Webhook-Signature",
                text(vector, "signature").to_owned(),
            ),
            (
                "X-Twilio-Email-Event-Webhook-Timestamp",
                timestamp.to_owned(),
            ),
        ];
        let body = text(vector, "body").as_bytes();
        check(
            &verifier,
            &headers,
            body,
            at(timestamp.parse().unwrap()),
            &[
                ("x-twilio-email-event-webhook-timestamp", -1),
                ("x-twilio-email-event-webhook-signature", 12),
            ],
        );
    }
    let built = Verifier::builder(Scheme::sendgrid()).with_secret("not a key");
    assert!(built.is_err(), "{built:?}");
    let signer = Signer::new(
        Scheme::sendgrid(),
        [text(&vectors()["sendgrid"][0], "public_key")],
    );
    assert!(signer.is_err(), "a public key does not sign");
}

#[test]
fn x_vector_verifies_signs_and_detects_any_change() {
    let vector = &vectors()["x"][0];
    let verifier = verifier(Scheme::x(), &[text(vector, "secret")]);
    let headers = [(
        "x-twitter-webhooks-signature",
        text(vector, "header").to_owned(),
    )];
    let body = text(vector, "body").as_bytes();
    check(
        &verifier,
        &headers,
        body,
        SystemTime::now(),
        &[("x-twitter-webhooks-signature", 10)],
    );
    let signer = Signer::new(Scheme::x(), [text(vector, "secret")]).unwrap();
    let signed = signer.sign("ignored", SystemTime::now(), body).unwrap();
    assert_eq!(
        signed.get("x-twitter-webhooks-signature"),
        Some(text(vector, "header"))
    );
}

#[test]
fn every_named_scheme_round_trips_through_its_signer() {
    let body = br#"{"event_id":"evt_round_trip","type":"demo"}"#;
    let now = SystemTime::now();
    // SendGrid's keys only verify.
    for name in Scheme::NAMES.iter().filter(|name| **name != "sendgrid") {
        let scheme = Scheme::by_name(name).unwrap();
        let (secret, public) = match *name {
            "standard" | "svix" => ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", None),
            "discord" => (
                "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60\
                 d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
                Some("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"),
            ),
            _ => ("a-provider-secret-0123456789", None),
        };
        let signed = Signer::new(scheme.clone(), [secret])
            .unwrap()
            .sign("msg_round_trip", now, body)
            .unwrap();
        let headers: Vec<(&str, &str)> = signed.iter().collect();
        let event = verifier(scheme, &[public.unwrap_or(secret)])
            .verify_at(&headers, body, now)
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(event.body(), body, "{name}");
    }
}

/// Twilio signs the webhook URL and the form parameters sorted by name
/// (HMAC-SHA1, base64), or a JSON body through `bodySHA256` in the URL:
/// every published vector verifies against the URL as configured, the one
/// signed with `:443` included, signing reproduces those signed without a
/// port, and a changed URL, parameter or signature fails.
#[cfg(feature = "sha1")]
#[test]
fn twilio_vectors_verify_form_and_json_bodies_against_the_configured_url() {
    for vector in vectors()["twilio"].as_array().unwrap() {
        let url = text(vector, "url");
        let secret = text(vector, "secret");
        let header = text(vector, "header");
        let body = text(vector, "body").as_bytes();
        let verifier = verifier(Scheme::twilio(url).unwrap(), &[secret]);
        check(
            &verifier,
            &[("X-Twilio-Signature", header.to_owned())],
            body,
            SystemTime::now(),
            &[("X-Twilio-Signature", 3)],
        );
        let elsewhere = verifier_for(Scheme::twilio(&format!("{url}&x=1")).unwrap(), secret);
        assert_mismatch(
            elsewhere
                .verify(&[("X-Twilio-Signature", header)], body)
                .map(drop),
            "another URL",
        );
        let signed = Signer::new(Scheme::twilio(url).unwrap(), [secret])
            .unwrap()
            .sign("ignored", SystemTime::now(), body)
            .unwrap();
        let signed_with_port = text(vector, "source").contains(":443");
        assert_eq!(
            signed.get("x-twilio-signature") == Some(header),
            !signed_with_port,
            "{url}"
        );
    }
    // The order of the form's pairs is not signed: Twilio sorts them.
    let vector = &vectors()["twilio"][0];
    let verifier = verifier(Scheme::twilio(text(vector, "url")).unwrap(), &["12345"]);
    let reordered = "To=%2B18005551212&From=%2B14158675309&Digits=1234&Caller=%2B14158675309\
                     &CallSid=CA1234567890ABCDE";
    let headers = [("X-Twilio-Signature", text(vector, "header"))];
    verifier.verify(&headers, reordered.as_bytes()).unwrap();
    // A form name that could spell `?bodySHA256=` is refused before any
    // signature is compared.
    let spelled = format!("%3FbodySHA256%3D={}", "0".repeat(64));
    assert!(matches!(
        verifier.verify(&headers, spelled.as_bytes()),
        Err(VerifyError::MalformedBody { .. })
    ));
    assert!(matches!(
        verifier.verify(&headers, b"Body=%zz"),
        Err(VerifyError::MalformedBody { .. })
    ));
    for bad in ["", "mycompany.com/myapp.php", "https://example.com/a b"] {
        assert!(Scheme::twilio(bad).is_err(), "{bad:?}");
    }
}

/// Twilio signs its form as decoded parameters sorted by name, so a
/// captured request resent with its pairs reordered, re-encoded or under
/// a fresh `I-Twilio-Idempotency-Token` verifies too: it is claimed by a
/// digest of what is signed, and so is the same event.
#[cfg(feature = "sha1")]
#[test]
fn a_twilio_replay_reordered_or_reencoded_is_claimed_as_the_same_event() {
    let vector = &vectors()["twilio"][0];
    let verifier = verifier(Scheme::twilio(text(vector, "url")).unwrap(), &["12345"]);
    let key = |token: &str, body: &str| {
        let headers = [
            ("X-Twilio-Signature", text(vector, "header")),
            ("I-Twilio-Idempotency-Token", token),
        ];
        let event = verifier.verify(&headers, body.as_bytes()).unwrap();
        EventKey::default().key(&verifier, &event).unwrap()
    };
    let original = key("t-1", text(vector, "body"));
    assert!(original.starts_with("sha256:"), "{original}");
    for replay in [
        "To=%2B18005551212&From=%2B14158675309&Digits=1234&Caller=%2B14158675309\
         &CallSid=CA1234567890ABCDE",
        "CallSid=%43A1234567890ABCDE&Caller=%2b14158675309&Digits=1234&From=%2B14158675309\
         &To=%2B18005551212&",
    ] {
        assert_eq!(key("t-2", replay), original, "{replay}");
    }
    let other = "CallSid=CA1234567890ABCDE&Caller=%2B14158675309&Digits=1235&From=%2B14158675309\
                 &To=%2B18005551212";
    let signed = Signer::new(Scheme::twilio(text(vector, "url")).unwrap(), ["12345"])
        .unwrap()
        .sign("-", SystemTime::now(), other.as_bytes())
        .unwrap();
    let headers: Vec<(&str, &str)> = signed.iter().collect();
    let event = verifier.verify(&headers, other.as_bytes()).unwrap();
    assert_ne!(
        EventKey::default().key(&verifier, &event).unwrap(),
        original
    );
}

#[cfg(feature = "sha1")]
fn verifier_for(scheme: Scheme, secret: &str) -> Verifier {
    verifier(scheme, &[secret])
}

/// The README's promise for schemes that sign no id (GitHub, Shopify,
/// Meta, Outpost, X, Twilio; Slack, Zoom and Convoy sign a timestamp but
/// no id): a request is claimed by a digest of what is signed, so the same
/// signed request under another unsigned id header, or none, is the same
/// event, and another body is another.
#[cfg(feature = "sha1")]
#[test]
fn schemes_that_sign_no_id_claim_by_a_digest_so_a_fresh_id_is_the_same_event() {
    let body = br#"{"type":"demo","n":1}"#;
    let now = SystemTime::now();
    let secret = "a-provider-secret-0123456789";
    let mut schemes: Vec<Scheme> = [
        "github",
        "shopify",
        "shopify-events",
        "meta",
        "outpost",
        "x",
        "slack",
        "zoom",
        "convoy",
    ]
    .iter()
    .map(|name| Scheme::by_name(name).unwrap())
    .collect();
    schemes.push(Scheme::twilio("https://example.com/hooks/in").unwrap());
    for scheme in schemes {
        let name = scheme.name().to_owned();
        assert!(
            !scheme.signs_id() && scheme.body_id_field().is_none(),
            "{name}"
        );
        let verifier = verifier(scheme.clone(), &[secret]);
        let signer = Signer::new(scheme.clone(), [secret]).unwrap();
        let key = |id: &str, body: &[u8], keep_id_header: bool| {
            let signed = signer.sign(id, now, body).unwrap();
            let headers: Vec<(&str, &str)> = signed
                .iter()
                .filter(|(header, _)| keep_id_header || Some(*header) != scheme.id_header())
                .collect();
            let event = verifier.verify_at(&headers, body, now).unwrap();
            EventKey::default().key(&verifier, &event).unwrap()
        };
        let first = key("delivery-1", body, true);
        assert!(first.starts_with("sha256:"), "{name}: {first}");
        assert_eq!(key("delivery-2", body, true), first, "{name}: a fresh id");
        assert_eq!(key("delivery-3", body, false), first, "{name}: no id");
        let other = br#"{"type":"demo","n":2}"#;
        assert_ne!(
            key("delivery-1", other, true),
            first,
            "{name}: another body"
        );
    }
}

/// A Shopify Events delivery as Shopify documents it: the body's
/// base64 HMAC-SHA256 under the app's client secret in
/// `Shopify-Hmac-Sha256` (no `X-`), its delivery id in
/// `Shopify-Webhook-Id`. `Scheme::shopify_events` accepts it, with the
/// body's `topic` as its type; the webhooks scheme, which reads
/// `X-Shopify-Hmac-Sha256`, refuses it as missing its header.
#[test]
fn a_shopify_events_delivery_verifies_with_its_own_header() {
    use base64::Engine as _;
    use hmac::{KeyInit as _, Mac as _};
    let secret = "shopify-app-client-secret";
    let body =
        br#"{"topic":"Product","action":"update","handle":"products","fields_changed":["title"]}"#;
    // Computed here as Shopify's docs say, not with our signer.
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    let headers = [
        ("Shopify-Hmac-Sha256", signature.as_str()),
        ("Shopify-Webhook-Id", "b1234c5d-0e6f-4a7b-8c9d-e0f1a2b3c4d5"),
        ("Content-Type", "application/json"),
    ];
    let now = SystemTime::now();
    let events = verifier(Scheme::shopify_events(), &[secret]);
    let event = events
        .verify_at(&headers, body, now)
        .expect("a Shopify Events delivery");
    // The delivery id is read, but not signed: it is no claim key.
    assert_eq!(event.id(), Some("b1234c5d-0e6f-4a7b-8c9d-e0f1a2b3c4d5"));
    assert!(!Scheme::shopify_events().signs_id());
    let key = EventKey::default().key(&events, &event).unwrap();
    assert!(
        key.starts_with("sha256:"),
        "claimed by the signed body: {key}"
    );
    let webhooks = verifier(Scheme::shopify(), &[secret]);
    assert!(matches!(
        webhooks.verify_at(&headers, body, now),
        Err(VerifyError::MissingHeader { .. })
    ));
}
