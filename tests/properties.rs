//! Property tests: interoperability with the `standardwebhooks` crate, and
//! no input that makes verification panic.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hooklatch::verify::{Scheme, Signer, Verifier};
use proptest::prelude::*;

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn at(seconds: i64) -> SystemTime {
    if seconds >= 0 {
        UNIX_EPOCH + Duration::from_secs(seconds.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs())
    }
}

fn standard_headers(id: &str, timestamp: i64, signature: &str) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert("webhook-id", id.parse().unwrap());
    headers.insert("webhook-timestamp", timestamp.into());
    headers.insert("webhook-signature", signature.parse().unwrap());
    headers
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn their_signatures_verify_with_ours(
        key in proptest::collection::vec(any::<u8>(), 1..64),
        id in "[A-Za-z0-9_-]{1,64}",
        skew in -200i64..200,
        body in any::<String>(),
    ) {
        let secret = format!("whsec_{}", STANDARD.encode(&key));
        let timestamp = unix_now() + skew;
        let signature = standardwebhooks::Webhook::new(&secret)
            .unwrap()
            .sign(&id, timestamp, body.as_bytes())
            .unwrap();
        let headers = standard_headers(&id, timestamp, &signature);
        let ours = Verifier::builder(Scheme::standard_webhooks())
            .with_secret(&secret)
            .unwrap()
            .build()
            .unwrap();
        let event = ours.verify(&headers, body.as_bytes()).unwrap();
        prop_assert_eq!(event.id(), Some(id.as_str()));
        prop_assert_eq!(event.timestamp(), Some(timestamp));
    }

    #[test]
    fn our_signatures_verify_with_theirs(
        key in proptest::collection::vec(any::<u8>(), 1..64),
        id in "[A-Za-z0-9_-]{1,64}",
        skew in -200i64..200,
        body in any::<String>(),
    ) {
        let secret = format!("whsec_{}", STANDARD.encode(&key));
        let timestamp = unix_now() + skew;
        let signed = Signer::new(Scheme::standard_webhooks(), [&secret])
            .unwrap()
            .sign(&id, at(timestamp), body.as_bytes())
            .unwrap();
        let theirs = standardwebhooks::Webhook::new(&secret).unwrap();
        prop_assert!(theirs.verify(body.as_bytes(), &signed.to_header_map()).is_ok());
        // And a changed body fails on both sides.
        let mut changed = body.clone().into_bytes();
        changed.push(b'!');
        prop_assert!(theirs.verify(&changed, &signed.to_header_map()).is_err());
    }

    #[test]
    fn every_scheme_round_trips_signing_and_verification(
        scheme in prop_oneof![
            Just("standard"), Just("svix"), Just("stripe"),
            Just("github"), Just("shopify"), Just("slack"),
        ],
        secret in "[ -~]{1,40}",
        id in "[!-~]{1,80}",
        body in proptest::collection::vec(any::<u8>(), 0..2048),
        flip in any::<prop::sample::Index>(),
    ) {
        let scheme = Scheme::by_name(scheme).unwrap();
        let secret = match scheme.name() {
            "standard" | "svix" => format!("whsec_{}", STANDARD.encode(secret.as_bytes())),
            _ => secret,
        };
        let now = SystemTime::now();
        let signer = Signer::new(scheme.clone(), [&secret]).unwrap();
        if matches!(scheme.name(), "standard" | "svix") && id.contains('.') {
            // The `.` after the id in what is signed: such an id is refused.
            let refused = matches!(
                signer.sign(&id, now, &body),
                Err(hooklatch::verify::VerifyError::MalformedHeader {
                    reason: hooklatch::verify::Malformed::IdContainsDelimiter,
                    ..
                })
            );
            prop_assert!(refused, "an id with a dot is refused");
            return Ok(());
        }
        let signed = signer.sign(&id, now, &body).unwrap();
        let verifier = Verifier::builder(scheme).with_secret(&secret).unwrap().build().unwrap();
        prop_assert!(verifier.verify_at(&signed, &body, now).is_ok());
        if !body.is_empty() {
            let mut changed = body.clone();
            changed[flip.index(body.len())] ^= 0x80;
            prop_assert!(verifier.verify_at(&signed, &changed, now).is_err());
        }
    }

    #[test]
    fn no_header_or_body_input_panics(
        scheme in prop_oneof![
            Just("standard"), Just("svix"), Just("stripe"),
            Just("github"), Just("shopify"), Just("slack"),
        ],
        values in proptest::collection::vec(header_value(), 0..6),
        names in proptest::collection::vec(0usize..8, 0..6),
        body in proptest::collection::vec(any::<u8>(), 0..256),
        now in any::<i64>(),
        skip_timestamp in any::<bool>(),
    ) {
        const NAMES: [&str; 8] = [
            "webhook-id", "webhook-timestamp", "webhook-signature", "svix-signature",
            "stripe-signature", "x-hub-signature-256", "x-slack-request-timestamp",
            "x-slack-signature",
        ];
        let headers: Vec<(&str, Vec<u8>)> = names
            .iter()
            .zip(values)
            .map(|(name, value)| (NAMES[*name], value))
            .collect();
        let mut builder = Verifier::builder(Scheme::by_name(scheme).unwrap())
            .with_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap()
            .with_body_limit(200);
        if skip_timestamp {
            builder = builder.insecure_skip_timestamp_check();
        }
        let verifier = builder.build().unwrap();
        let outcome = verifier.verify_at(&headers, &body, at(now));
        // Display must not panic either.
        if let Err(error) = outcome {
            let _ = error.to_string();
        }
    }

    #[test]
    fn no_secret_text_panics(text in any::<String>(), scheme in 0usize..3) {
        let scheme = [Scheme::standard_webhooks(), Scheme::stripe(), Scheme::github()][scheme].clone();
        let _ = Verifier::builder(scheme.clone()).with_secret(&text).map(|b| b.build());
        let _ = Signer::new(scheme, [&text]);
    }

    #[test]
    fn no_custom_scheme_config_panics(
        header in any::<String>(),
        template in any::<String>(),
        prefix in any::<String>(),
    ) {
        if let Ok(scheme) = Scheme::custom("fuzz", &header)
            && let Ok(scheme) = scheme.with_prefix(&prefix).with_template(&template)
        {
            let _ = Verifier::builder(scheme).with_secret("k").map(|b| b.build());
        }
    }
}

/// Header values that look like what the schemes read, with random damage.
fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        "(v1|v1a|v2|t|v0|sha256)[,=][A-Za-z0-9+/=]{0,90}( (v1|v1a),[A-Za-z0-9+/=]{0,90}){0,20}"
            .prop_map(String::into_bytes),
        "-?[0-9]{0,22}".prop_map(String::into_bytes),
        "t=-?[0-9]{0,20},v1=[0-9a-f]{0,70}(,v1=[0-9a-fA-Z]{0,70}){0,20}"
            .prop_map(String::into_bytes),
        "[ -~]{0,5000}".prop_map(String::into_bytes),
    ]
}

#[cfg(feature = "ed25519")]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn v1a_signatures_verify_with_the_public_key(
        seed in any::<[u8; 32]>(),
        body in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let signing = ed25519_dalek::SigningKey::from_bytes(&seed);
        let secret = format!("whsk_{}", STANDARD.encode(seed));
        let public = format!("whpk_{}", STANDARD.encode(signing.verifying_key().to_bytes()));
        let now = SystemTime::now();
        let signed = Signer::new(Scheme::standard_webhooks(), [&secret])
            .unwrap()
            .sign("msg_1", now, &body)
            .unwrap();
        prop_assert!(signed.get("webhook-signature").unwrap().starts_with("v1a,"));
        let verifier = Verifier::builder(Scheme::standard_webhooks())
            .with_secret(&public)
            .unwrap()
            .build()
            .unwrap();
        prop_assert!(verifier.verify_at(&signed, &body, now).is_ok());
        let mut changed = body.clone();
        changed.push(0);
        prop_assert!(verifier.verify_at(&signed, &changed, now).is_err());
    }
}

/// With one public key, only the first `ASYMMETRIC_CHECKS_PER_KEY` `v1a`
/// signatures of a header are checked, so junk ones cannot make a request
/// cost more than that many body hashes; `v1` signatures do not count
/// against the cap.
#[cfg(feature = "ed25519")]
#[test]
fn with_one_key_only_the_first_two_v1a_signatures_are_checked() {
    use hooklatch::verify::ASYMMETRIC_CHECKS_PER_KEY;

    let seed = [7u8; 32];
    let signing = ed25519_dalek::SigningKey::from_bytes(&seed);
    let secret = format!("whsk_{}", STANDARD.encode(seed));
    let public = format!(
        "whpk_{}",
        STANDARD.encode(signing.verifying_key().to_bytes())
    );
    let now = SystemTime::now();
    let body = b"{\"type\":\"ping\"}";
    let signed = Signer::new(Scheme::standard_webhooks(), [&secret])
        .unwrap()
        .sign("msg_1", now, body)
        .unwrap();
    let genuine = signed.get("webhook-signature").unwrap().to_owned();
    let verifier = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(&public)
        .unwrap()
        .build()
        .unwrap();
    let junk_v1a = format!("v1a,{}", STANDARD.encode([9u8; 64]));
    let junk_v1 = format!("v1,{}", STANDARD.encode([9u8; 32]));
    let with_signature = |signature: String| {
        let mut headers: Vec<(String, String)> = ["webhook-id", "webhook-timestamp"]
            .iter()
            .map(|name| ((*name).to_owned(), signed.get(name).unwrap().to_owned()))
            .collect();
        headers.push(("webhook-signature".into(), signature));
        verifier.verify_at(&headers, body, now).is_ok()
    };
    let header = |junk: &str, count: usize| {
        let mut parts = vec![junk.to_owned(); count];
        parts.push(genuine.clone());
        parts.join(" ")
    };
    assert!(with_signature(header(
        &junk_v1a,
        ASYMMETRIC_CHECKS_PER_KEY - 1
    )));
    assert!(!with_signature(header(
        &junk_v1a,
        ASYMMETRIC_CHECKS_PER_KEY
    )));
    assert!(with_signature(header(&junk_v1, 10)));
}

/// The cap on asymmetric checks is pooled over the request: with four
/// keys of which the last is the signer's, the pool holds eight checks.
/// One junk signature ahead of the genuine one spends four (junk against
/// each key) and the genuine one is found; two spend all eight and the
/// request is refused, where a cap per key (each key against the first
/// signatures) would have let it through. Every pairing of two signatures
/// and two keys is still tried.
#[cfg(feature = "ed25519")]
#[test]
fn asymmetric_checks_are_capped_per_request_not_per_key() {
    let key = |seed: u8| {
        let signing = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
        (
            format!("whsk_{}", STANDARD.encode([seed; 32])),
            format!(
                "whpk_{}",
                STANDARD.encode(signing.verifying_key().to_bytes())
            ),
        )
    };
    let now = SystemTime::now();
    let body = b"{\"type\":\"ping\"}";
    let sign = |secrets: &[&String]| {
        Signer::new(Scheme::standard_webhooks(), secrets.iter().copied())
            .unwrap()
            .sign("msg_1", now, body)
            .unwrap()
    };
    let verifies =
        |publics: &[&String], signed: &hooklatch::verify::SignedHeaders, signature: &str| {
            let mut builder = Verifier::builder(Scheme::standard_webhooks());
            for public in publics {
                builder = builder.with_secret(public).unwrap();
            }
            let verifier = builder.build().unwrap();
            let mut headers: Vec<(String, String)> = ["webhook-id", "webhook-timestamp"]
                .iter()
                .map(|name| ((*name).to_owned(), signed.get(name).unwrap().to_owned()))
                .collect();
            headers.push(("webhook-signature".into(), signature.to_owned()));
            verifier.verify_at(&headers, body, now).is_ok()
        };
    let keys: Vec<(String, String)> = (1..=4).map(key).collect();
    let publics: Vec<&String> = keys.iter().map(|(_, public)| public).collect();
    let signed = sign(&[&keys[3].0]);
    let genuine = signed.get("webhook-signature").unwrap().to_owned();
    let junk = format!("v1a,{}", STANDARD.encode([9u8; 64]));
    assert!(
        verifies(&publics, &signed, &genuine),
        "the fourth key's own"
    );
    assert!(
        verifies(&publics, &signed, &format!("{junk} {genuine}")),
        "four checks on the junk signature, four left"
    );
    assert!(
        !verifies(&publics, &signed, &format!("{junk} {junk} {genuine}")),
        "eight checks spent on the junk signatures"
    );

    // Both sides mid-rotation: every order of two keys and two signatures.
    let (old, new) = (&keys[0], &keys[1]);
    for senders in [vec![&old.0, &new.0], vec![&new.0], vec![&old.0]] {
        let signed = sign(&senders);
        let header = signed.get("webhook-signature").unwrap().to_owned();
        for receivers in [vec![&old.1, &new.1], vec![&new.1, &old.1]] {
            assert!(verifies(&receivers, &signed, &header), "{senders:?}");
        }
    }
}
