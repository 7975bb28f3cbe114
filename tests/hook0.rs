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

/// Hook0's vectors with a `v1` get Hook0's verdicts for Hook0's
/// reasons. Those with `v0` alone are refused, as they should be here: `v0`
/// leaves the headers unsigned, so a captured request stripped of its `v1`
/// would verify by it, claimed under another key.
#[test]
fn hook0s_own_vectors_get_hook0s_verdicts_and_v0_alone_is_refused() {
    let vectors: Value = serde_json::from_str(include_str!("hook0_vectors.json")).unwrap();
    let vectors = vectors["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 13);
    let mut with_v1 = 0;
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
        if !vector["signature"].as_str().unwrap().contains("v1=") {
            assert!(
                matches!(&outcome, Err(VerifyError::NoSupportedSignature { expected, .. }) if expected == "v1"),
                "{name}: {outcome:?}"
            );
            continue;
        }
        with_v1 += 1;
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
            other => panic!("{name}: unexpected verdict {other:?} for a v1 vector"),
        }
    }
    assert_eq!(with_v1, 6);
}

/// Hook0's header-scheme vector: `h` covers `x-event-id`, then
/// `x-delivery-id`.
const COVERED: &str = "t=1800000000,h=x-event-id x-delivery-id,\
                       v1=19a6fb8f6581715b241a93af02a58611c3b0ac7b747a8d2a5b120ee418d0c347";
/// The same event as Hook0's vector signs it with `x-delivery-id` first.
const DELIVERY_FIRST: &str = "t=1800000000,h=x-delivery-id x-event-id,\
                              v1=bf5f4e5fe0c9143510ae192f983316a09ed392d0104d2ce0faa3d7bce3687acb";
/// `h` covers `x-delivery-id` alone (computed with Python's `hmac`).
const ID_UNCOVERED: &str = "t=1800000000,h=x-delivery-id,\
                            v1=b78a3ce79e6f227b5891ceb35a377f5c410581e7695f9f06c995220aff73f7e0";
const BODY: &[u8] = br#"{"event":"user.created"}"#;

fn request<'a>(signature: &'a str, pairs: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut headers = pairs.to_vec();
    headers.push(("x-hook0-signature", signature));
    headers
}

fn key(verifier: &Verifier, headers: &[(&str, &str)], body: &[u8]) -> Result<String, VerifyError> {
    let verified = verifier.verify_at(headers, body, at(1_800_000_000))?;
    Ok(EventKey::Signed.key(verifier, &verified).unwrap())
}

/// A captured request replayed in any of the ways Hook0's format allows
/// is claimed under the key of the original, or refused: `X-Event-Id` is
/// the key when `h` covers it, a `v1` cannot be stripped for the older
/// `v0`, and the bytes around the id cannot be split again into another
/// id.
#[test]
fn a_replayed_hook0_request_is_claimed_under_the_originals_key_or_refused() {
    let verifier = verifier("a-subscription-secret", 300);
    let original = [("x-event-id", "evt-1"), ("x-delivery-id", "dlv-1")];
    assert_eq!(
        key(&verifier, &request(COVERED, &original), BODY).unwrap(),
        "evt-1"
    );

    // The `v1` stripped, the genuine `v0` kept: nothing verifies it.
    let v0_only =
        "t=1800000000,v0=d17d66b66fca89390c5b967c45e8928fc732db07a0aabe8167b1e98213081ffe";
    assert!(matches!(
        key(&verifier, &request(v0_only, &original), BODY),
        Err(VerifyError::NoSupportedSignature { .. })
    ));

    // The signed text split again after the id: a value after it takes
    // the start of the body. The id is the same: a duplicate.
    let after = [
        ("x-event-id", "evt-1"),
        ("x-delivery-id", r#"dlv-1.{"event":"user"#),
    ];
    assert_eq!(
        key(&verifier, &request(COVERED, &after), br#"created"}"#).unwrap(),
        "evt-1"
    );

    // Split again before the id: the value before it takes the id, which
    // takes the start of the body. Refused, as it would claim another id.
    let original_first = [("x-delivery-id", "dlv-1"), ("x-event-id", "evt-1")];
    assert_eq!(
        key(&verifier, &request(DELIVERY_FIRST, &original_first), BODY).unwrap(),
        "evt-1"
    );
    let shifted = [
        ("x-delivery-id", "dlv-1.evt-1"),
        ("x-event-id", r#"{"event":"user"#),
    ];
    assert!(matches!(
        key(
            &verifier,
            &request(DELIVERY_FIRST, &shifted),
            br#"created"}"#
        ),
        Err(VerifyError::MalformedHeader {
            reason: Malformed::IdContainsDelimiter,
            ..
        })
    ));
}

/// Where `h` does not cover `X-Event-Id`, it is metadata and the event is
/// claimed by a digest of the whole signed text: a new id, or the border
/// between the covered values and the body moved, is the same event.
#[test]
fn an_uncovered_hook0_event_id_leaves_the_claim_to_a_digest_of_the_signed_text() {
    let verifier = verifier("a-subscription-secret", 300);
    let keys: Vec<String> = [
        (("evt-1", "dlv-1"), BODY),
        (("evt-2", "dlv-1"), BODY),
        (("evt-1", r#"dlv-1.{"event":"user"#), &br#"created"}"#[..]),
    ]
    .into_iter()
    .map(|((id, delivery), body)| {
        let headers = request(
            ID_UNCOVERED,
            &[("x-event-id", id), ("x-delivery-id", delivery)],
        );
        key(&verifier, &headers, body).unwrap()
    })
    .collect();
    assert!(keys[0].starts_with("sha256:"), "{keys:?}");
    assert!(keys.iter().all(|key| *key == keys[0]), "{keys:?}");
}

/// hooklatch's signer writes `t`, `h=x-event-id` and `v1` with the id in
/// `X-Event-Id`, and refuses an id holding a `.`; its verifier accepts
/// what it signs, with the id as the claim key.
#[test]
fn a_hook0_signer_covers_the_event_id_and_its_own_verifier_accepts_it() {
    let signer = Signer::new(Scheme::hook0(), ["a-subscription-secret"]).unwrap();
    assert!(matches!(
        signer.sign("evt.1", at(1_800_000_000), BODY),
        Err(VerifyError::MalformedHeader {
            reason: Malformed::IdContainsDelimiter,
            ..
        })
    ));
    let signed = signer.sign("evt-1", at(1_800_000_000), BODY).unwrap();
    let headers: Vec<(&str, &str)> = signed.iter().collect();
    let signature = signed.get("x-hook0-signature").unwrap();
    assert!(
        signature.starts_with("t=1800000000,h=x-event-id,v1="),
        "{signature}"
    );
    let verifier = verifier("a-subscription-secret", 300);
    assert_eq!(key(&verifier, &headers, BODY).unwrap(), "evt-1");
}

/// What a stranger can make the verifier read before any HMAC is bounded:
/// at most 16 covered headers, named in lowercase without a `.`, one space
/// apart, each once and none the signature header, and `h` once.
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
    let bad_names = |outcome: Result<(), VerifyError>| {
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
        "x.event.id",
        "",
        "x-event-id x-event-id",
        "x-event-id x-hook0-signature",
    ] {
        let signature = format!("t=1800000000,h={h},v1=00");
        let request = request(
            &signature,
            &[("x-event-id", "evt-1"), ("x.event.id", "evt-1")],
        );
        let outcome = verifier.verify_at(&request, BODY, now).map(|_| ());
        assert!(bad_names(outcome), "{h:?}");
    }
    let twice = "t=1800000000,h=x-event-id,h=x-delivery-id,v1=00";
    let request = request(
        twice,
        &[("x-event-id", "evt-1"), ("x-delivery-id", "dlv-1")],
    );
    assert!(matches!(
        verifier.verify_at(&request, BODY, now),
        Err(VerifyError::MalformedHeader {
            reason: Malformed::RepeatedField("h"),
            ..
        })
    ));
}
