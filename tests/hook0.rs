//! Hook0's scheme (`X-Hook0-Signature`) against Hook0's own vectors
//! (tests/hook0_vectors.json names them): each verdict, and each refusal
//! for the reason Hook0's SDKs give; then what hooklatch adds: the claim
//! key, the signer, and the limits on what a stranger can make it read.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hooklatch::verify::{
    EventKey, MAX_COVERED_HEADERS, Malformed, Scheme, Signer, Verifier, VerifyError,
};
use serde_json::Value;

fn at(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds)
}

fn verifier(secret: &str, tolerance_seconds: u64) -> Verifier {
    Verifier::builder(Scheme::hook0())
        .with_secret(secret)
        .unwrap()
        .with_tolerance(Duration::from_secs(tolerance_seconds))
        .build()
        .unwrap()
}

/// A vector's request: its headers with the signature header added.
fn headers(vector: &Value) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = vector["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| {
            (
                pair[0].as_str().unwrap().to_owned(),
                pair[1].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    headers.push((
        "X-Hook0-Signature".into(),
        vector["signature"].as_str().unwrap().to_owned(),
    ));
    headers
}

#[test]
fn hook0s_own_vectors_get_hook0s_verdicts_for_hook0s_reasons() {
    let vectors: Value = serde_json::from_str(include_str!("hook0_vectors.json")).unwrap();
    let vectors = vectors["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 13);
    for vector in vectors {
        let name = vector["name"].as_str().unwrap();
        let verifier = verifier(
            vector["secret"].as_str().unwrap(),
            vector["tolerance_seconds"].as_u64().unwrap(),
        );
        let headers = headers(vector);
        let body = vector["payload"].as_str().unwrap().as_bytes();
        let now = at(vector["current_time"].as_u64().unwrap());
        let outcome = verifier.verify_at(&headers, body, now).map(|_| ());
        match (vector["verdict"].as_str(), vector["refusal"].as_str()) {
            (Some("accepted"), _) => assert_eq!(outcome, Ok(()), "{name}"),
            (_, Some("code_mismatch")) => assert!(
                matches!(outcome, Err(VerifyError::SignatureMismatch { .. })),
                "{name}: {outcome:?}"
            ),
            (_, Some("header_not_delivered")) => assert!(
                matches!(&outcome, Err(VerifyError::MissingHeader { name }) if name == "x-missing"),
                "{name}: {outcome:?}"
            ),
            (_, Some("code_not_hexadecimal")) => assert!(
                matches!(
                    outcome,
                    Err(VerifyError::MalformedHeader {
                        reason: Malformed::BadEncoding(_),
                        ..
                    })
                ),
                "{name}: {outcome:?}"
            ),
            (_, Some("outside_tolerance")) => assert!(
                matches!(
                    outcome,
                    Err(VerifyError::TimestampTooOld { .. } | VerifyError::TimestampInFuture { .. })
                ),
                "{name}: {outcome:?}"
            ),
            other => panic!("{name}: unknown verdict {other:?}"),
        }
    }
}

/// Hook0's header-scheme vector, whose `h` covers `x-event-id`.
const COVERED: &str = "t=1800000000,h=x-event-id x-delivery-id,\
                       v1=19a6fb8f6581715b241a93af02a58611c3b0ac7b747a8d2a5b120ee418d0c347";
/// Hook0's body-scheme vector: `v0` alone.
const BODY_ONLY: &str =
    "t=1800000000,v0=d17d66b66fca89390c5b967c45e8928fc732db07a0aabe8167b1e98213081ffe";
const BODY: &[u8] = br#"{"event":"user.created"}"#;

fn request(signature: &str, event_id: &str) -> Vec<(&'static str, String)> {
    vec![
        ("x-event-id", event_id.to_owned()),
        ("x-delivery-id", "dlv-1".to_owned()),
        ("content-type", "application/json".to_owned()),
        ("x-hook0-signature", signature.to_owned()),
    ]
}

/// `X-Event-Id` is the claim key when `h` covers it; under `v0` alone it
/// is not signed, so events are claimed by a digest of the signed
/// timestamp and body, which a new `X-Event-Id` does not change.
#[test]
fn hook0s_event_id_is_the_claim_key_only_where_the_signature_covers_it() {
    let verifier = verifier("a-subscription-secret", 300);
    let now = at(1_800_000_000);
    let covered = request(COVERED, "evt-1");
    let verified = verifier.verify_at(&covered, BODY, now).unwrap();
    assert!(verified.id_is_signed());
    assert_eq!(EventKey::Signed.key(&verifier, &verified).unwrap(), "evt-1");
    // A covered id changed: the signature no longer matches.
    let changed = request(COVERED, "evt-2");
    assert!(matches!(
        verifier.verify_at(&changed, BODY, now),
        Err(VerifyError::SignatureMismatch { .. })
    ));

    let keys: Vec<String> = ["evt-1", "evt-2"]
        .iter()
        .map(|id| {
            let body_only = request(BODY_ONLY, id);
            let verified = verifier.verify_at(&body_only, BODY, now).unwrap();
            assert!(!verified.id_is_signed());
            assert_eq!(verified.id(), Some(*id), "read, as metadata");
            EventKey::Signed.key(&verifier, &verified).unwrap()
        })
        .collect();
    assert!(keys[0].starts_with("sha256:"), "{keys:?}");
    assert_eq!(
        keys[0], keys[1],
        "a resend under a new id is the same event"
    );
}

/// A covered id may not hold the `.` that separates covered values: else
/// `evt.1` and the value before it could be split two ways under one
/// signature, and one signature would verify two ids.
#[test]
fn a_covered_hook0_event_id_may_not_hold_a_dot() {
    let verifier = verifier("secret", 300);
    let signer = Signer::new(Scheme::hook0(), ["secret"]).unwrap();
    assert!(matches!(
        signer.sign("evt.1", at(1_800_000_000), BODY),
        Err(VerifyError::MalformedHeader {
            reason: Malformed::IdContainsDelimiter,
            ..
        })
    ));
    let forged = request("t=1800000000,h=x-event-id,v1=00", "evt.1");
    assert!(matches!(
        verifier.verify_at(&forged, BODY, at(1_800_000_000)),
        Err(VerifyError::MalformedHeader {
            reason: Malformed::IdContainsDelimiter,
            ..
        })
    ));
}

/// hooklatch's signer writes `t`, `h=x-event-id` and `v1` with the
/// id in `X-Event-Id`: Hook0's verifier would accept it (checked against
/// the header-scheme construction by hand), and so does ours.
#[test]
fn a_hook0_signer_covers_the_event_id_and_its_own_verifier_accepts_it() {
    let signer = Signer::new(Scheme::hook0(), ["a-subscription-secret"]).unwrap();
    let signed = signer.sign("evt-1", at(1_800_000_000), BODY).unwrap();
    let headers: Vec<(String, String)> = signed
        .iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    let signature = &headers
        .iter()
        .find(|(name, _)| name == "x-hook0-signature")
        .unwrap()
        .1;
    assert!(
        signature.starts_with("t=1800000000,h=x-event-id,v1="),
        "{signature}"
    );
    let verifier = verifier("a-subscription-secret", 300);
    let verified = verifier
        .verify_at(&headers, BODY, at(1_800_000_000))
        .unwrap();
    assert_eq!(verified.id(), Some("evt-1"));
    assert!(verified.id_is_signed());
}

/// What a stranger can make the verifier read before any HMAC is bounded:
/// at most 16 covered headers, named in lowercase one space apart, and
/// `h` once.
#[test]
fn hook0s_covered_headers_are_bounded_and_strictly_written() {
    let verifier = verifier("secret", 300);
    let now = at(1_800_000_000);
    let names: Vec<String> = (0..=MAX_COVERED_HEADERS)
        .map(|n| format!("x-h{n}"))
        .collect();
    let mut many: Vec<(String, String)> = names
        .iter()
        .map(|name| (name.clone(), "v".to_owned()))
        .collect();
    many.push((
        "x-hook0-signature".into(),
        format!("t=1800000000,h={},v1=00", names.join(" ")),
    ));
    let bad_names = |outcome: Result<_, VerifyError>| {
        matches!(
            outcome,
            Err(VerifyError::MalformedHeader {
                reason: Malformed::CoveredHeaders { max: 16 },
                ..
            })
        )
    };
    assert!(bad_names(verifier.verify_at(&many, BODY, now).map(|_| ())));
    for h in [
        "X-Event-Id",
        "x-event-id  x-delivery-id",
        " x-event-id",
        "x-event-id\tx-delivery-id",
        "",
    ] {
        let signature = format!("t=1800000000,h={h},v1=00");
        let request = request(&signature, "evt-1");
        let outcome = verifier.verify_at(&request, BODY, now).map(|_| ());
        assert!(bad_names(outcome), "{h:?}");
    }
    let twice = "t=1800000000,h=x-event-id,h=x-delivery-id,v1=00";
    assert!(matches!(
        verifier.verify_at(&request(twice, "evt-1"), BODY, now),
        Err(VerifyError::MalformedHeader {
            reason: Malformed::RepeatedField("h"),
            ..
        })
    ));
}
