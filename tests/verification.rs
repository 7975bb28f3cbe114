//! Verification, one rule a test: headers, timestamps, encodings, secrets and the errors that name each failure.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hooklatch::verify::{
    ConfigError, Encoding, MAX_HEADER_LEN, MAX_ID_LEN, MAX_SIGNATURES, Malformed, Scheme, Signer,
    Verifier, VerifyError,
};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const OTHER_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const TIMESTAMP: i64 = 1_614_265_330;
const BODY: &[u8] = br#"{"test": 2432232314}"#;
const VALID: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

fn at(seconds: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds.unsigned_abs())
}

fn verifier(secrets: &[&str]) -> Verifier {
    let mut builder = Verifier::builder(Scheme::standard_webhooks());
    for secret in secrets {
        builder = builder.with_secret(secret).unwrap();
    }
    builder.build().unwrap()
}

fn headers(id: &str, timestamp: &str, signature: &str) -> Vec<(String, String)> {
    vec![
        ("webhook-id".into(), id.into()),
        ("webhook-timestamp".into(), timestamp.into()),
        ("webhook-signature".into(), signature.into()),
    ]
}

fn verify_signature(signature: &str) -> Result<(), VerifyError> {
    verifier(&[SECRET])
        .verify_at(
            &headers(ID, &TIMESTAMP.to_string(), signature),
            BODY,
            at(TIMESTAMP),
        )
        .map(drop)
}

fn verify_timestamp(timestamp: &str) -> Result<(), VerifyError> {
    verifier(&[SECRET])
        .verify_at(&headers(ID, timestamp, VALID), BODY, at(TIMESTAMP))
        .map(drop)
}

fn malformed(reason: Malformed, header: &str) -> Result<(), VerifyError> {
    Err(VerifyError::MalformedHeader {
        name: header.to_owned().into(),
        reason,
    })
}

fn mismatch(signatures: usize, keys: usize) -> Result<(), VerifyError> {
    Err(VerifyError::SignatureMismatch {
        signatures,
        keys,
        hint: None,
    })
}

#[test]
fn accepts_the_reference_request() {
    assert_eq!(verify_signature(VALID), Ok(()));
}

#[test]
fn rejects_empty_v1_signature() {
    assert_eq!(verify_signature("v1,"), mismatch(1, 1));
}

#[test]
fn rejects_signature_of_wrong_length() {
    // A prefix of the valid signature: a zip-and-compare would accept it.
    assert_eq!(verify_signature("v1,g0hM9SsE+OTPJTGt/tmI"), mismatch(1, 1));
    assert_eq!(verify_signature("v1,g0hM"), mismatch(1, 1));
    // 33 bytes: the valid signature with one byte more.
    assert_eq!(
        verify_signature("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OEA"),
        mismatch(1, 1)
    );
}

#[test]
fn rejects_non_base64_garbage() {
    assert_eq!(
        verify_signature("v1,not*base64!"),
        malformed(Malformed::BadEncoding("base64"), "webhook-signature")
    );
    // One undecodable signature next to a decodable one is just a non-match.
    assert_eq!(verify_signature(&format!("v1,@@@@ {VALID}")), Ok(()));
}

#[test]
fn rejects_non_hex_garbage() {
    let verifier = Verifier::builder(Scheme::github())
        .with_secret("It's a Secret to Everybody")
        .unwrap()
        .build()
        .unwrap();
    let headers = [
        ("x-github-delivery", "1"),
        ("x-hub-signature-256", "sha256=xyz!"),
    ];
    assert_eq!(
        verifier.verify(&headers, b"Hello, World!").map(drop),
        malformed(Malformed::BadEncoding("hex"), "x-hub-signature-256")
    );
}

#[test]
fn rejects_a_thousand_signatures_in_one_header() {
    // A thousand real signatures exceed the header length cap first.
    let many = vec![VALID; 1000].join(" ");
    assert_eq!(
        verify_signature(&many),
        malformed(
            Malformed::TooLong {
                max: MAX_HEADER_LEN
            },
            "webhook-signature"
        )
    );
}

#[test]
fn rejects_one_signature_more_than_the_cap() {
    let mut entries = vec!["v1,AAAA"; MAX_SIGNATURES];
    entries.push(VALID);
    assert_eq!(
        verify_signature(&entries.join(" ")),
        malformed(
            Malformed::TooManySignatures {
                max: MAX_SIGNATURES
            },
            "webhook-signature"
        )
    );
}

#[test]
fn accepts_the_valid_signature_last_of_the_most_allowed() {
    let mut entries = vec!["v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="; MAX_SIGNATURES - 1];
    entries.push(VALID);
    assert_eq!(verify_signature(&entries.join(" ")), Ok(()));
}

#[test]
fn rejects_header_longer_than_the_cap() {
    let long = format!("{VALID} v9,{}", "A".repeat(MAX_HEADER_LEN));
    assert_eq!(
        verify_signature(&long),
        malformed(
            Malformed::TooLong {
                max: MAX_HEADER_LEN
            },
            "webhook-signature"
        )
    );
}

#[test]
fn rejects_negative_timestamp_unless_timestamps_are_ignored() {
    assert_eq!(
        verify_timestamp("-1"),
        Err(VerifyError::TimestampTooOld {
            age_secs: TIMESTAMP as u64 + 1,
            tolerance_secs: 300
        })
    );
    // With the check off, -1 is read and signed as sent: it is the
    // signature, not the parser, that refuses it.
    let lenient = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .unwrap()
        .insecure_skip_timestamp_check()
        .build()
        .unwrap();
    let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap();
    let signed = signer.sign(ID, at(TIMESTAMP), BODY).unwrap();
    assert!(
        lenient
            .verify_at(&signed, BODY, at(TIMESTAMP + 86_400 * 365))
            .is_ok()
    );
    let negative = headers(ID, "-1", VALID);
    assert_eq!(
        lenient.verify_at(&negative, BODY, at(TIMESTAMP)).map(drop),
        mismatch(1, 1)
    );
}

#[test]
fn rejects_timestamp_zero_as_too_old() {
    assert!(matches!(
        verify_timestamp("0"),
        Err(VerifyError::TimestampTooOld { age_secs, .. }) if age_secs == TIMESTAMP as u64
    ));
}

#[test]
fn rejects_timestamp_i64_max_as_future_without_overflow() {
    assert_eq!(
        verify_timestamp(&i64::MAX.to_string()),
        Err(VerifyError::TimestampInFuture {
            ahead_secs: (i64::MAX - TIMESTAMP) as u64,
            tolerance_secs: 300
        })
    );
}

#[test]
fn rejects_timestamp_beyond_i64() {
    assert_eq!(
        verify_timestamp("99999999999999999999"),
        malformed(Malformed::TimestampOutOfRange, "webhook-timestamp")
    );
}

#[test]
fn rejects_fractional_and_padded_timestamps() {
    for text in ["1.5", " 123", "123 ", "+123", "1e9", "0x5f"] {
        assert_eq!(
            verify_timestamp(text),
            malformed(Malformed::TimestampNotInteger, "webhook-timestamp"),
            "{text:?}"
        );
    }
}

#[test]
fn rejects_timestamp_in_milliseconds_with_a_hint() {
    let outcome = verify_timestamp(&(TIMESTAMP * 1000).to_string());
    assert_eq!(
        outcome,
        malformed(Malformed::TimestampInMilliseconds, "webhook-timestamp")
    );
    assert!(outcome.unwrap_err().to_string().contains("milliseconds"));
}

#[test]
fn rejects_timestamp_just_outside_each_tolerance() {
    let verifier = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .unwrap()
        .with_past_tolerance(Duration::from_secs(10))
        .with_future_tolerance(Duration::from_secs(2))
        .build()
        .unwrap();
    let request = headers(ID, &TIMESTAMP.to_string(), VALID);
    assert!(
        verifier
            .verify_at(&request, BODY, at(TIMESTAMP + 10))
            .is_ok()
    );
    assert!(matches!(
        verifier.verify_at(&request, BODY, at(TIMESTAMP + 11)),
        Err(VerifyError::TimestampTooOld {
            age_secs: 11,
            tolerance_secs: 10
        })
    ));
    assert!(
        verifier
            .verify_at(&request, BODY, at(TIMESTAMP - 2))
            .is_ok()
    );
    assert!(matches!(
        verifier.verify_at(&request, BODY, at(TIMESTAMP - 3)),
        Err(VerifyError::TimestampInFuture {
            ahead_secs: 3,
            tolerance_secs: 2
        })
    ));
}

#[test]
fn rejects_duplicate_headers() {
    for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
        let mut request = headers(ID, &TIMESTAMP.to_string(), VALID);
        let copy = request.iter().find(|(key, _)| key == name).unwrap().clone();
        request.push((name.to_uppercase(), copy.1));
        assert_eq!(
            verifier(&[SECRET])
                .verify_at(&request, BODY, at(TIMESTAMP))
                .map(drop),
            Err(VerifyError::RepeatedHeader { name: name.into() })
        );
    }
}

#[test]
fn accepts_unknown_version_next_to_a_valid_one() {
    assert_eq!(verify_signature(&format!("v2,abc {VALID} v9,zz")), Ok(()));
}

#[test]
fn rejects_only_unknown_versions_naming_what_is_expected() {
    let outcome = verify_signature("v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    assert_eq!(
        outcome,
        Err(VerifyError::NoSupportedSignature {
            name: "webhook-signature".into(),
            expected: "v1".into(),
            found: 1
        })
    );
}

#[test]
fn rejects_v1a_without_a_public_key_with_a_hint() {
    let outcome = verify_signature(
        "v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg==",
    );
    let message = outcome.unwrap_err().to_string();
    assert!(message.contains("whpk_"), "{message}");
}

#[test]
fn rejects_entry_without_version_label() {
    assert_eq!(
        verify_signature("g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
        malformed(Malformed::MissingVersion, "webhook-signature")
    );
}

#[test]
fn accepts_a_secret_rotated_in_and_refuses_it_once_rotated_out() {
    let old = Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap();
    let new = Signer::new(Scheme::standard_webhooks(), [OTHER_SECRET]).unwrap();
    let both = Signer::new(Scheme::standard_webhooks(), [OTHER_SECRET, SECRET]).unwrap();
    let now = at(TIMESTAMP);
    let by_old = old.sign(ID, now, BODY).unwrap();
    let by_new = new.sign(ID, now, BODY).unwrap();
    let by_both = both.sign(ID, now, BODY).unwrap();
    assert_eq!(
        by_both.get("webhook-signature").unwrap().split(' ').count(),
        2
    );

    // During the rotation the receiver accepts either secret.
    let rotating = verifier(&[SECRET, OTHER_SECRET]);
    assert_eq!(
        rotating.verify_at(&by_old, BODY, now).unwrap().key_index(),
        0
    );
    assert_eq!(
        rotating.verify_at(&by_new, BODY, now).unwrap().key_index(),
        1
    );
    assert!(rotating.verify_at(&by_both, BODY, now).is_ok());

    // Afterwards only the new one.
    let rotated = verifier(&[OTHER_SECRET]);
    assert_eq!(
        rotated.verify_at(&by_old, BODY, now).map(drop),
        mismatch(1, 1)
    );
    assert!(rotated.verify_at(&by_new, BODY, now).is_ok());
    assert!(rotated.verify_at(&by_both, BODY, now).is_ok());
}

#[test]
fn mismatch_counts_every_signature_against_every_secret() {
    let outcome = verifier(&[OTHER_SECRET, "whsec_AAAA"])
        .verify_at(
            &headers(ID, &TIMESTAMP.to_string(), &format!("{VALID} {VALID} v2,x")),
            BODY,
            at(TIMESTAMP),
        )
        .map(drop);
    assert_eq!(outcome, mismatch(2, 2));
}

#[test]
fn error_text_never_contains_the_expected_signature() {
    let expected = Signer::new(Scheme::standard_webhooks(), [SECRET])
        .unwrap()
        .sign(ID, at(TIMESTAMP), b"other body")
        .unwrap();
    let expected = expected.get("webhook-signature").unwrap();
    let error = verifier(&[SECRET])
        .verify_at(
            &headers(ID, &TIMESTAMP.to_string(), VALID),
            b"other body",
            at(TIMESTAMP),
        )
        .unwrap_err();
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains(&expected[3..]), "{shown}");
    assert!(shown.contains("re-serialized"), "{shown}");
}

#[test]
fn debug_never_prints_secrets() {
    let shown = format!(
        "{:?} {:?}",
        verifier(&[SECRET]),
        Signer::new(Scheme::stripe(), ["whsec_plain"]).unwrap()
    );
    assert!(!shown.contains("MfKQ"), "{shown}");
    assert!(!shown.contains("plain"), "{shown}");
    assert!(shown.contains("REDACTED"), "{shown}");
}

#[test]
fn rejects_body_over_the_limit() {
    let verifier = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .unwrap()
        .with_body_limit(8)
        .build()
        .unwrap();
    assert_eq!(verifier.body_limit(), 8);
    assert_eq!(
        verifier
            .verify_at(
                &headers(ID, &TIMESTAMP.to_string(), VALID),
                BODY,
                at(TIMESTAMP)
            )
            .map(drop),
        Err(VerifyError::BodyTooLarge {
            len: BODY.len(),
            limit: 8
        })
    );
}

#[test]
fn rejects_ids_too_long_or_not_visible_ascii() {
    let long = "m".repeat(MAX_ID_LEN + 1);
    for (id, reason) in [
        (long.as_str(), Malformed::TooLong { max: MAX_ID_LEN }),
        ("msg 1", Malformed::NotVisibleAscii),
        ("msg_é", Malformed::NotVisibleAscii),
    ] {
        assert_eq!(
            verifier(&[SECRET])
                .verify_at(
                    &headers(id, &TIMESTAMP.to_string(), VALID),
                    BODY,
                    at(TIMESTAMP)
                )
                .map(drop),
            malformed(reason, "webhook-id"),
            "{id}"
        );
        assert!(
            Signer::new(Scheme::standard_webhooks(), [SECRET])
                .unwrap()
                .sign(id, at(TIMESTAMP), BODY)
                .is_err()
        );
    }
}

#[test]
fn rejects_empty_header_values() {
    assert_eq!(
        verify_signature(""),
        malformed(Malformed::Empty, "webhook-signature")
    );
}

#[test]
fn github_signature_without_its_prefix_is_not_supported() {
    let verifier = Verifier::builder(Scheme::github())
        .with_secret("It's a Secret to Everybody")
        .unwrap()
        .build()
        .unwrap();
    let headers = [
        ("x-github-delivery", "1"),
        (
            "x-hub-signature-256",
            "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        ),
    ];
    assert!(matches!(
        verifier.verify(&headers, b"Hello, World!"),
        Err(VerifyError::NoSupportedSignature { .. })
    ));
}

#[test]
fn stripe_header_needs_exactly_one_timestamp() {
    let verifier = Verifier::builder(Scheme::stripe())
        .with_secret("whsec_x")
        .unwrap()
        .build()
        .unwrap();
    for (value, reason) in [
        ("v1=00", Malformed::MissingField("t")),
        ("t=1,t=2,v1=00", Malformed::RepeatedField("t")),
    ] {
        assert_eq!(
            verifier
                .verify(&[("stripe-signature", value)], b"{}")
                .map(drop),
            malformed(reason, "stripe-signature")
        );
    }
}

#[test]
fn stripe_secret_without_prefix_gets_a_hint_on_mismatch() {
    let verifier = Verifier::builder(Scheme::stripe())
        .with_secret("abc")
        .unwrap()
        .build()
        .unwrap();
    let signer = Signer::new(Scheme::stripe(), ["whsec_abc"]).unwrap();
    let now = SystemTime::now();
    let signed = signer.sign("evt_1", now, b"{}").unwrap();
    let message = verifier
        .verify_at(&signed, b"{}", now)
        .unwrap_err()
        .to_string();
    assert!(message.contains("prefix included"), "{message}");
}

#[test]
fn whsec_secret_given_as_bytes_gets_a_hint_on_mismatch() {
    let verifier = Verifier::builder(Scheme::standard_webhooks())
        .with_secret_bytes(SECRET.as_bytes())
        .unwrap()
        .build()
        .unwrap();
    let message = verifier
        .verify_at(
            &headers(ID, &TIMESTAMP.to_string(), VALID),
            BODY,
            at(TIMESTAMP),
        )
        .unwrap_err()
        .to_string();
    assert!(message.contains("as raw bytes"), "{message}");
}

#[test]
fn building_without_secrets_fails() {
    assert_eq!(
        Verifier::builder(Scheme::slack()).build().unwrap_err(),
        ConfigError::NoSecrets
    );
    assert_eq!(
        Signer::new(Scheme::slack(), Vec::<String>::new()).unwrap_err(),
        ConfigError::NoSecrets
    );
}

#[test]
fn custom_scheme_signs_and_verifies_its_template() {
    let scheme = Scheme::custom("acme", "X-Acme-Signature")
        .unwrap()
        .with_prefix("sha256=")
        .with_encoding(Encoding::Base64)
        .with_id_header("X-Acme-Id")
        .unwrap()
        .with_timestamp_header("X-Acme-Time")
        .unwrap()
        .with_template("{timestamp}:{id}:{body}")
        .unwrap();
    let signer = Signer::new(scheme.clone(), ["k3y"]).unwrap();
    let now = SystemTime::now();
    let signed = signer.sign("evt_9", now, b"payload").unwrap();
    assert!(
        signed
            .get("x-acme-signature")
            .unwrap()
            .starts_with("sha256=")
    );
    let verifier = Verifier::builder(scheme)
        .with_secret("k3y")
        .unwrap()
        .build()
        .unwrap();
    let event = verifier.verify_at(&signed, b"payload", now).unwrap();
    assert_eq!(event.id(), Some("evt_9"));
    assert!(verifier.verify_at(&signed, b"payloaD", now).is_err());
}

#[test]
fn custom_template_must_not_use_headers_the_scheme_lacks() {
    let scheme = Scheme::custom("acme", "x-sig")
        .unwrap()
        .with_template("{timestamp}.{body}")
        .unwrap();
    assert!(matches!(
        Verifier::builder(scheme).with_secret("k").unwrap().build(),
        Err(ConfigError::InvalidTemplate(_))
    ));
}

#[cfg(feature = "http")]
#[test]
fn verifies_an_http_header_map() {
    let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap();
    let now = SystemTime::now();
    let map: http::HeaderMap = signer.sign(ID, now, BODY).unwrap().to_header_map();
    let event = verifier(&[SECRET]).verify(&map, BODY).unwrap();
    assert_eq!(event.id(), Some(ID));
    assert_eq!(event.body(), BODY);
}

#[test]
fn injected_clock_is_used_by_verify() {
    let verifier = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .unwrap()
        .with_clock(|| at(TIMESTAMP + 60))
        .build()
        .unwrap();
    let request = headers(ID, &TIMESTAMP.to_string(), VALID);
    let event = verifier.verify(&request, BODY).unwrap();
    assert_eq!(event.timestamp(), Some(TIMESTAMP));
}

#[test]
fn signer_refuses_more_secrets_than_verifiers_examine() {
    let secrets: Vec<String> = (0..=MAX_SIGNATURES)
        .map(|n| format!("whsec_{}", "QUFB".repeat(n + 1)))
        .collect();
    assert_eq!(
        Signer::new(Scheme::stripe(), &secrets).unwrap_err(),
        ConfigError::TooManySecrets {
            max: MAX_SIGNATURES
        }
    );
    // Exactly the cap signs, and verifies.
    let signer = Signer::new(Scheme::standard_webhooks(), &secrets[..MAX_SIGNATURES]).unwrap();
    let now = SystemTime::now();
    let signed = signer.sign(ID, now, BODY).unwrap();
    assert!(
        verifier(&[&secrets[0]])
            .verify_at(&signed, BODY, now)
            .is_ok()
    );
}

mod secret_windows {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use hooklatch::verify::{ConfigError, Scheme, Signer, Validity, Verifier, VerifyError};

    const OLD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const NEW: &str = "whsec_dGhlIG5ldyBzZWNyZXQgZm9yIHRoZSB0ZXN0";

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    /// The old secret until 2000, the new one from 1000: both accepted in
    /// the overlap, each refused outside its own window.
    fn rotating() -> Verifier {
        Verifier::builder(Scheme::standard_webhooks())
            .with_secret_valid(OLD, Validity::until(at(2000)))
            .unwrap()
            .with_secret_valid(NEW, Validity::from(at(1000)))
            .unwrap()
            .insecure_skip_timestamp_check()
            .build()
            .unwrap()
    }

    fn signed_with(secret: &str, when: SystemTime) -> Vec<(String, String)> {
        Signer::new(Scheme::standard_webhooks(), [secret])
            .unwrap()
            .sign("msg_1", when, b"{}")
            .unwrap()
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect()
    }

    #[test]
    fn an_expired_secret_is_refused_and_the_error_says_why() {
        let verifier = rotating();
        let headers = signed_with(OLD, at(2500));
        let refused = verifier
            .verify_at(&headers[..], b"{}", at(2500))
            .unwrap_err();
        match refused {
            VerifyError::SignatureMismatch { keys, hint, .. } => {
                assert_eq!(keys, 1, "only the new secret was tried");
                assert!(hint.unwrap_or_default().contains("validity window"));
            }
            other => panic!("expected a mismatch, got {other:?}"),
        }
        assert!(verifier.verify_at(&headers[..], b"{}", at(1999)).is_ok());
    }

    #[test]
    fn a_secret_not_yet_valid_is_refused() {
        let verifier = rotating();
        let headers = signed_with(NEW, at(500));
        assert!(matches!(
            verifier.verify_at(&headers[..], b"{}", at(500)),
            Err(VerifyError::SignatureMismatch { .. })
        ));
        assert!(verifier.verify_at(&headers[..], b"{}", at(1000)).is_ok());
    }

    #[test]
    fn in_the_overlap_either_secret_verifies_and_the_signer_signs_with_both() {
        let verifier = rotating();
        for secret in [OLD, NEW] {
            let headers = signed_with(secret, at(1500));
            assert!(verifier.verify_at(&headers[..], b"{}", at(1500)).is_ok());
        }
        let signer = Signer::with_windows(
            Scheme::standard_webhooks(),
            [
                (OLD, Validity::until(at(2000))),
                (NEW, Validity::from(at(1000))),
            ],
        )
        .unwrap();
        let count = |when| {
            let signed = signer.sign("msg_1", at(when), b"{}").unwrap();
            signed.get("webhook-signature").unwrap().split(' ').count()
        };
        assert_eq!((count(500), count(1500), count(2500)), (1, 2, 1));
        // A verifier that only knows the new secret accepts what the
        // signer sends during the overlap.
        let only_new = Verifier::builder(Scheme::standard_webhooks())
            .with_secret(NEW)
            .unwrap()
            .insecure_skip_timestamp_check()
            .build()
            .unwrap();
        let signed = signer.sign("msg_1", at(1500), b"{}").unwrap();
        assert!(only_new.verify_at(&signed, b"{}", at(1500)).is_ok());
    }

    #[test]
    fn an_empty_window_is_a_configuration_error_and_signing_outside_every_window_fails() {
        assert!(matches!(
            Verifier::builder(Scheme::standard_webhooks())
                .with_secret_valid(OLD, Validity::between(at(10), at(10))),
            Err(ConfigError::EmptyValidity)
        ));
        let signer = Signer::with_windows(
            Scheme::standard_webhooks(),
            [(OLD, Validity::until(at(10)))],
        )
        .unwrap();
        assert!(matches!(
            signer.sign("msg_1", at(20), b"{}"),
            Err(VerifyError::NoSecretValid)
        ));
    }
}

/// One Standard Webhooks signature over `evt.<T-10>.<T>.<body>` reads as
/// id `evt.<T-10>`, timestamp `T`, body `B`, or as id `evt`, timestamp
/// `T-10`, body `T.B`: two ids, so two claim keys for one signed request.
/// An id containing the `.` that follows it in the signed content is
/// refused, so only one split verifies; the signer refuses such an id too.
#[test]
fn an_id_containing_the_signed_delimiter_is_refused_so_one_signature_is_one_id() {
    use base64::Engine as _;
    use hmac::{Hmac, KeyInit as _, Mac as _};
    let key = base64::engine::general_purpose::STANDARD
        .decode(SECRET.strip_prefix("whsec_").unwrap())
        .unwrap();
    let now = TIMESTAMP;
    let earlier = now - 10;
    let content = format!("evt.{earlier}.{now}.B");
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(content.as_bytes());
    let signature = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    let verifier = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .unwrap()
        .build()
        .unwrap();
    let at = UNIX_EPOCH + Duration::from_secs(u64::try_from(now).unwrap());
    let request = |id: &str, timestamp: i64| {
        [
            ("webhook-id", id.to_owned()),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", signature.clone()),
        ]
    };
    let with_dot = request(&format!("evt.{earlier}"), now);
    assert!(matches!(
        verifier.verify_at(&with_dot, b"B", at),
        Err(VerifyError::MalformedHeader {
            reason: Malformed::IdContainsDelimiter,
            ..
        })
    ));
    let other_split = request("evt", earlier);
    let body = format!("{now}.B");
    let verified = verifier
        .verify_at(&other_split, body.as_bytes(), at)
        .expect("the split whose id has no dot");
    assert_eq!(verified.id(), Some("evt"));

    let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap();
    assert!(matches!(
        signer.sign("evt.1", SystemTime::now(), b"{}"),
        Err(VerifyError::MalformedHeader {
            reason: Malformed::IdContainsDelimiter,
            ..
        })
    ));
    // A custom template: the id may hold no character of the literals on
    // either side of it (`{body}.{id}` or `{id}::{body}` split two ways too).
    for (template, refused, taken) in [
        ("{timestamp}.{body}.{id}", "x.y", "x_y"),
        ("{id}::{body}", "a:", "a-b"),
    ] {
        let mut scheme = Scheme::custom("acme", "X-Acme-Signature")
            .unwrap()
            .with_id_header("X-Acme-Id")
            .unwrap();
        if template.contains("{timestamp}") {
            scheme = scheme.with_timestamp_header("X-Acme-Time").unwrap();
        }
        let signer = Signer::new(scheme.with_template(template).unwrap(), ["k3y"]).unwrap();
        assert!(
            matches!(
                signer.sign(refused, SystemTime::now(), b"B"),
                Err(VerifyError::MalformedHeader {
                    reason: Malformed::IdContainsDelimiter,
                    ..
                })
            ),
            "{template}: {refused}"
        );
        assert!(
            signer.sign(taken, SystemTime::now(), b"B").is_ok(),
            "{template}: {taken}"
        );
    }
    // Schemes that sign no id, or nothing after it, take any id.
    assert!(
        Signer::new(Scheme::github(), ["secret"])
            .unwrap()
            .sign("evt.1", SystemTime::now(), b"{}")
            .is_ok()
    );
}

/// Stripe's thin events (event destinations, `v2.core.event`) are signed
/// as its snapshot events are: `Stripe-Signature: t=..,v1=<hex>`, HMAC-SHA256
/// of `{t}.{body}` with the endpoint's `whsec_` secret used as it is. The
/// signature here is made with `hmac` by that rule, not with our signer:
/// `Scheme::stripe()` verifies it, and the claim key is the event's own
/// `id`, not its related object's, so each thin event is accepted once.
#[test]
fn stripe_thin_events_verify_and_are_claimed_by_their_event_id() {
    use hmac::{Hmac, KeyInit as _, Mac as _};
    let secret = "whsec_test_thin_events_secret";
    let body = br#"{"id":"evt_test_65R9Ijk8fN4Vc5oYtD2Ag8S1kVHR9TB2rA4eQmgfq","object":"v2.core.event","type":"v1.billing.meter.error_report_triggered","livemode":false,"created":"2026-12-07T10:00:00.000Z","context":null,"related_object":{"id":"mtr_test_61R9IjkBvQRkN1DfN41B2rA4eQmgfvS","type":"billing.meter","url":"/v1/billing/meters/mtr_test_61R9IjkBvQRkN1DfN41B2rA4eQmgfvS"}}"#;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{TIMESTAMP}.").as_bytes());
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let headers = [("stripe-signature", format!("t={TIMESTAMP},v1={hex}"))];
    let verifier = Verifier::builder(Scheme::stripe())
        .with_secret(secret)
        .unwrap()
        .build()
        .unwrap();
    let verified = verifier.verify_at(&headers, body, at(TIMESTAMP)).unwrap();
    assert_eq!(
        hooklatch::verify::EventKey::default()
            .key(&verifier, &verified)
            .unwrap(),
        "evt_test_65R9Ijk8fN4Vc5oYtD2Ag8S1kVHR9TB2rA4eQmgfq"
    );
    let mut changed = body.to_vec();
    changed[10] ^= 1;
    assert!(
        verifier
            .verify_at(&headers, &changed, at(TIMESTAMP))
            .is_err()
    );
}
