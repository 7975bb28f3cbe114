//! Published known-answer vectors (tests/vectors.json, sources inside) for
//! every scheme: each verifies, signing reproduces it, and one byte changed
//! in the body, id, timestamp or signature makes it fail.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hooklatch::verify::{ConfigError, EventKey, Scheme, Signer, Verifier, VerifyError};
use serde_json::Value;

fn vectors() -> Value {
    serde_json::from_str(include_str!("vectors.json")).expect("vectors.json is JSON")
}

fn group(name: &str) -> Vec<Value> {
    vectors()[name]
        .as_array()
        .expect("group is an array")
        .clone()
}

fn text<'a>(vector: &'a Value, key: &str) -> &'a str {
    vector[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} in {vector}"))
}

fn at(seconds: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds.unsigned_abs())
}

fn payload(vector: &Value) -> Vec<u8> {
    match vector.get("payload_repeat") {
        Some(repeat) => text(repeat, "char")
            .repeat(repeat["count"].as_u64().unwrap() as usize)
            .into_bytes(),
        None => text(vector, "payload").as_bytes().to_vec(),
    }
}

/// Changes one character of `value` at `index` (from the end when
/// negative) to another character of the same kind, so the header keeps its
/// shape and only the bytes differ.
fn change_one_char(value: &str, index: isize) -> String {
    let mut bytes = value.as_bytes().to_vec();
    let at = if index < 0 {
        bytes.len() - index.unsigned_abs()
    } else {
        index as usize
    };
    bytes[at] = match bytes[at] {
        b'0' => b'1',
        b'9' | b'f' | b'F' | b'z' | b'Z' => bytes[at] - 1,
        b'=' | b'+' | b'/' => panic!("pick a character that is not padding"),
        other => other + 1,
    };
    String::from_utf8(bytes).unwrap()
}

struct Case {
    scheme: Scheme,
    secret: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    now: SystemTime,
}

impl Case {
    fn verifier(&self) -> Verifier {
        Verifier::builder(self.scheme.clone())
            .with_secret(&self.secret)
            .unwrap()
            .build()
            .unwrap()
    }

    fn verify(&self, headers: &[(String, String)], body: &[u8]) -> Result<(), VerifyError> {
        self.verifier().verify_at(headers, body, self.now).map(drop)
    }

    fn with_header(&self, name: &str, change: impl Fn(&str) -> String) -> Vec<(String, String)> {
        let mut headers = self.headers.clone();
        let entry = headers
            .iter_mut()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .unwrap_or_else(|| panic!("no header {name}"));
        entry.1 = change(&entry.1);
        headers
    }

    /// Verifies, then checks that one changed byte anywhere signed breaks it.
    fn check(&self, signature_index: isize) {
        self.verify(&self.headers, &self.body)
            .expect("the vector verifies");

        let mut body = self.body.clone();
        body[0] ^= 0x01;
        assert_mismatch(self.verify(&self.headers, &body), "body changed");

        let signature = self.scheme.signature_header().to_owned();
        let changed = self.with_header(&signature, |v| change_one_char(v, signature_index));
        assert_mismatch(self.verify(&changed, &self.body), "signature changed");

        if let Some(id_header) = self.scheme.id_header() {
            let changed = self.with_header(id_header, |v| change_one_char(v, -1));
            let outcome = self.verify(&changed, &self.body);
            if self.scheme.signs_id() {
                assert_mismatch(outcome, "id changed");
            } else {
                // GitHub and Shopify sign the body only: the id header is
                // not protected, which is why dedup must not trust it alone.
                assert_eq!(outcome, Ok(()), "unsigned id header");
            }
        }
    }
}

fn assert_mismatch(outcome: Result<(), VerifyError>, what: &str) {
    assert!(
        matches!(outcome, Err(VerifyError::SignatureMismatch { .. })),
        "{what}: {outcome:?}"
    );
}

fn standard_case(vector: &Value) -> Case {
    let timestamp = vector["timestamp"].as_i64().unwrap();
    Case {
        scheme: Scheme::standard_webhooks(),
        secret: text(vector, "secret").to_owned(),
        headers: vec![
            ("webhook-id".into(), text(vector, "msg_id").into()),
            ("webhook-timestamp".into(), timestamp.to_string()),
            (
                "webhook-signature".into(),
                text(vector, "expected_signature").into(),
            ),
        ],
        body: payload(vector),
        now: at(timestamp),
    }
}

#[test]
fn standard_webhooks_vectors_verify_and_detect_any_change() {
    for vector in group("standard_webhooks_symmetric_sign") {
        let case = standard_case(&vector);
        case.check(3);
        // The timestamp is signed too.
        let changed = case.with_header("webhook-timestamp", |v| change_one_char(v, -1));
        assert_mismatch(case.verify(&changed, &case.body), "timestamp changed");
    }
}

#[test]
fn standard_webhooks_signing_reproduces_the_vectors() {
    for vector in group("standard_webhooks_symmetric_sign") {
        let signer = Signer::new(Scheme::standard_webhooks(), [text(&vector, "secret")]).unwrap();
        let headers = signer
            .sign(
                text(&vector, "msg_id"),
                at(vector["timestamp"].as_i64().unwrap()),
                &payload(&vector),
            )
            .unwrap();
        assert_eq!(
            headers.get("webhook-signature"),
            Some(text(&vector, "expected_signature")),
            "{}",
            vector["id"]
        );
    }
}

#[test]
fn svix_headers_carry_the_same_signature() {
    for vector in group("standard_webhooks_symmetric_sign") {
        let mut case = standard_case(&vector);
        case.scheme = Scheme::svix();
        for (name, _) in &mut case.headers {
            *name = name.replace("webhook-", "svix-");
        }
        case.check(3);
        assert!(matches!(
            standard_case(&vector)
                .verifier()
                .verify_at(&case.headers, &case.body, case.now),
            Err(VerifyError::MissingHeader { .. })
        ));
    }
}

#[cfg(feature = "ed25519")]
#[test]
fn standard_webhooks_v1a_vector_verifies_with_public_and_secret_key() {
    let mut vector = group("standard_webhooks_asymmetric_v1a")[0].clone();
    vector["secret"] = vector["public_key"].clone();
    let mut case = standard_case(&vector);
    let vector = &vector;
    for key in ["public_key", "secret_key"] {
        case.secret = text(vector, key).to_owned();
        case.check(4);
    }
    let signer = Signer::new(Scheme::standard_webhooks(), [text(vector, "secret_key")]).unwrap();
    let headers = signer
        .sign(
            text(vector, "msg_id"),
            at(vector["timestamp"].as_i64().unwrap()),
            &payload(vector),
        )
        .unwrap();
    assert_eq!(
        headers.get("webhook-signature"),
        Some(text(vector, "expected_signature"))
    );
    assert_eq!(
        Signer::new(Scheme::standard_webhooks(), [text(vector, "public_key")]).unwrap_err(),
        ConfigError::NoSigningKey
    );
}

#[test]
fn standard_webhooks_negative_vectors_are_rejected() {
    let sign1 = standard_case(&group("standard_webhooks_symmetric_sign")[0]);
    let sign2 = standard_case(&group("standard_webhooks_symmetric_sign")[1]);
    for vector in group("standard_webhooks_negative_and_behaviour") {
        let Some(signature) = vector["signature_header"].as_str() else {
            continue;
        };
        let case = if vector["based_on"].as_str() == Some("sw-sign-2 inputs") {
            &sign2
        } else {
            &sign1
        };
        let headers = case.with_header("webhook-signature", |_| signature.to_owned());
        let outcome = case.verify(&headers, &case.body);
        assert!(outcome.is_err(), "{}: {outcome:?}", vector["id"]);
    }
}

#[test]
fn standard_webhooks_multi_signature_vectors_accept_only_with_the_valid_one() {
    for vector in group("standard_webhooks_negative_and_behaviour") {
        let Some(template) = vector["signature_header_template"].as_str() else {
            continue;
        };
        let case = standard_case(&group("standard_webhooks_symmetric_sign")[0]);
        let valid = &case.headers[2].1;
        let with_valid =
            case.with_header("webhook-signature", |_| template.replace("<VALID>", valid));
        assert_eq!(
            case.verify(&with_valid, &case.body),
            Ok(()),
            "{}",
            vector["id"]
        );
        let without = case.with_header("webhook-signature", |_| template.replace("<VALID>", ""));
        assert_mismatch(case.verify(&without, &case.body), "valid signature removed");
    }
}

#[test]
fn standard_webhooks_timestamp_vectors() {
    let case = standard_case(&group("standard_webhooks_symmetric_sign")[0]);
    let signed = at(1_614_265_330);
    let verifier = case.verifier();
    let too_old = verifier.verify_at(&case.headers, &case.body, signed + Duration::from_secs(301));
    assert_eq!(
        too_old,
        Err(VerifyError::TimestampTooOld {
            age_secs: 301,
            tolerance_secs: 300
        })
    );
    let too_new = verifier.verify_at(&case.headers, &case.body, signed - Duration::from_secs(301));
    assert_eq!(
        too_new,
        Err(VerifyError::TimestampInFuture {
            ahead_secs: 301,
            tolerance_secs: 300
        })
    );
    for inside in [
        signed + Duration::from_secs(300),
        signed - Duration::from_secs(300),
    ] {
        assert!(
            verifier
                .verify_at(&case.headers, &case.body, inside)
                .is_ok()
        );
    }
    let hello = case.with_header("webhook-timestamp", |_| "hello".into());
    assert!(matches!(
        case.verify(&hello, &case.body),
        Err(VerifyError::MalformedHeader { .. })
    ));
}

#[test]
fn standard_webhooks_missing_headers_are_named() {
    let case = standard_case(&group("standard_webhooks_symmetric_sign")[0]);
    for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
        let headers: Vec<_> = case
            .headers
            .iter()
            .filter(|(key, _)| key != name)
            .cloned()
            .collect();
        assert_eq!(
            case.verify(&headers, &case.body),
            Err(VerifyError::MissingHeader { name: name.into() })
        );
    }
}

#[test]
fn standard_webhooks_secret_vectors() {
    for secret in ["", "whsec_"] {
        assert_eq!(
            Verifier::builder(Scheme::standard_webhooks())
                .with_secret(secret)
                .unwrap_err(),
            ConfigError::EmptySecret
        );
    }
    let mut case = standard_case(&group("standard_webhooks_symmetric_sign")[0]);
    // Prefix optional; unpadded base64 accepted (secrets are configuration,
    // not attacker input; the Python library accepts these too).
    for secret in [
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    ] {
        case.secret = secret.into();
        assert_eq!(case.verify(&case.headers, &case.body), Ok(()), "{secret}");
    }
}

#[test]
fn github_vectors_verify_and_detect_any_change() {
    for vector in group("github") {
        Case {
            scheme: Scheme::github(),
            secret: text(&vector, "secret").into(),
            headers: vec![
                (
                    text(&vector, "header").into(),
                    text(&vector, "expected").into(),
                ),
                (
                    "X-GitHub-Delivery".into(),
                    "72d3162e-cc78-11e3-81ab-4c9367dc0958".into(),
                ),
            ],
            body: payload(&vector),
            now: SystemTime::now(),
        }
        .check(-1);
    }
}

#[test]
fn shopify_vector_verifies_and_detects_any_change() {
    for vector in group("shopify") {
        Case {
            scheme: Scheme::shopify(),
            secret: text(&vector, "secret").into(),
            headers: vec![
                (
                    text(&vector, "header").into(),
                    text(&vector, "expected").into(),
                ),
                (
                    "X-Shopify-Webhook-Id".into(),
                    "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043".into(),
                ),
            ],
            body: payload(&vector),
            now: SystemTime::now(),
        }
        .check(0);
    }
}

/// GitHub and Shopify sign the body only. Their published vectors verify
/// with the signature header alone, and the claim key is the same with or
/// without a delivery id, under any delivery id.
#[test]
fn body_only_vectors_verify_with_only_the_signature_header() {
    // The key is stored: a change to how it is framed would turn every
    // retry after an upgrade into a new event. Pinned to SHA-256 over the
    // scheme name's length (8 bytes, big-endian), the name and the body,
    // computed outside this crate.
    for (name, scheme, id_header, pinned) in [
        (
            "github",
            Scheme::github(),
            "X-GitHub-Delivery",
            "72bdb143030d16cc59cf7e367e36b6293a45acbdd48ea5117db0cf3ada2a3e61",
        ),
        (
            "shopify",
            Scheme::shopify(),
            "X-Shopify-Webhook-Id",
            "cb25f9dc203d1d630e54bf0aeccc831c5901224d8d64d70234ecf61f0043f3e5",
        ),
    ] {
        let vector = &group(name)[0];
        let verifier = Verifier::builder(scheme)
            .with_secret(text(vector, "secret"))
            .unwrap()
            .build()
            .unwrap();
        let body = payload(vector);
        let signature = (text(vector, "header"), text(vector, "expected"));
        let alone = vec![signature];
        let verified = verifier.verify(&alone, &body).expect("verifies alone");
        assert_eq!(verified.id(), None);
        let key = EventKey::default().key(&verifier, &verified).unwrap();
        assert!(key.starts_with("sha256:"), "{key}");
        assert_eq!(key, format!("sha256:{pinned}"), "{name}");
        assert_eq!(
            EventKey::SignedContent.key(&verifier, &verified).unwrap(),
            key
        );
        for delivery in ["first-delivery", "a-fresh-replay-id"] {
            let with_id = vec![signature, (id_header, delivery)];
            let verified = verifier.verify(&with_id, &body).unwrap();
            assert_eq!(verified.id(), Some(delivery));
            assert!(!verified.id_is_signed());
            assert_eq!(
                EventKey::default().key(&verifier, &verified).unwrap(),
                key,
                "{name}"
            );
            assert_eq!(
                EventKey::UnsignedHeader.key(&verifier, &verified).unwrap(),
                delivery
            );
        }
        // An unusable unsigned id is ignored, not an error.
        let junk = vec![signature, (id_header, "two words")];
        assert_eq!(verifier.verify(&junk, &body).unwrap().id(), None);
    }
}

#[test]
fn slack_vector_verifies_and_detects_any_change() {
    let vector = &group("slack")[0];
    let timestamp = text(vector, "timestamp");
    let case = Case {
        scheme: Scheme::slack(),
        secret: text(vector, "secret").into(),
        headers: vec![
            ("X-Slack-Signature".into(), text(vector, "expected").into()),
            ("X-Slack-Request-Timestamp".into(), timestamp.into()),
        ],
        body: payload(vector),
        now: at(timestamp.parse().unwrap()),
    };
    case.check(-1);
    let changed = case.with_header("x-slack-request-timestamp", |v| change_one_char(v, -1));
    assert_mismatch(case.verify(&changed, &case.body), "timestamp changed");
}

#[test]
fn stripe_vector_verifies_and_detects_any_change() {
    let vector = &group("stripe")[0];
    let case = Case {
        scheme: Scheme::stripe(),
        secret: text(vector, "secret").into(),
        headers: vec![("Stripe-Signature".into(), text(vector, "header").into())],
        body: payload(vector),
        now: at(vector["timestamp"].as_i64().unwrap()),
    };
    // The last character belongs to the ignored v0 signature: change v1's.
    let v1_end = text(vector, "header").find(",v0=").unwrap() as isize - 1;
    case.check(v1_end);
    let changed = case.with_header("stripe-signature", |v| change_one_char(v, 11));
    assert_mismatch(case.verify(&changed, &case.body), "t= changed");
    let signer = Signer::new(Scheme::stripe(), [text(vector, "secret")]).unwrap();
    let signed = signer
        .sign(
            "evt_123",
            at(vector["timestamp"].as_i64().unwrap()),
            &case.body,
        )
        .unwrap();
    assert_eq!(
        signed.get("stripe-signature"),
        Some(format!("t=1533204620,v1={}", text(vector, "expected_v1")).as_str())
    );
}

#[test]
fn stripe_docs_header_parses_timestamp_and_ignores_v0() {
    let vector = &group("stripe")[1];
    let headers = [("stripe-signature", text(vector, "header"))];
    let verifier = Verifier::builder(Scheme::stripe())
        .with_secret("whsec_test")
        .unwrap()
        .build()
        .unwrap();
    // Secret and payload were not published: the header must parse, its
    // one v1 signature be compared, and the timestamp checked.
    assert!(matches!(
        verifier.verify_at(&headers, b"{}", at(1_492_774_577)),
        Err(VerifyError::SignatureMismatch {
            signatures: 1,
            keys: 1,
            ..
        })
    ));
    assert!(matches!(
        verifier.verify_at(&headers, b"{}", at(1_492_774_577 + 301)),
        Err(VerifyError::TimestampTooOld { age_secs: 301, .. })
    ));
}
