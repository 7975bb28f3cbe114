//! RFC 9421 HTTP Message Signatures: the RFC's own examples (Appendix B,
//! its test keys and signed requests) as known answers, then a signed
//! webhook through every check the verifier makes.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use hooklatch::verify::message::{
    MessageKey, MessageRequest, MessageSignatureError, MessageSigner, MessageVerifier,
    content_digest,
};

/// RFC 9421 B.1.5, `test-shared-secret`.
const SHARED_SECRET: &str =
    "uzvJfB4u3N0Jy4T7NZ75MDVcr8zSTInedJtkgcu46YW4XByzNJjxBdtjUkdJPBtbmHhIDi6pcl8jsasjlTMtDQ==";
/// RFC 9421 B.1.4, `test-key-ed25519`: the public `x` and private `d`.
const ED25519_PUBLIC: &str = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs";
const ED25519_SEED: &str = "n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU";
/// The RFC's example request (B.2): its target and headers.
const TARGET: &str = "https://example.com/foo?param=Value&Pet=dog";
const BODY: &[u8] = br#"{"hello": "world"}"#;
const CREATED: i64 = 1_618_884_473;

fn rfc_headers() -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    for (name, value) in [
        ("host", "example.com"),
        ("date", "Tue, 20 Apr 2021 02:07:55 GMT"),
        ("content-type", "application/json"),
        (
            "content-digest",
            "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:",
        ),
        ("content-length", "18"),
    ] {
        headers.insert(name, value.parse().unwrap());
    }
    headers
}

fn signed(mut headers: http::HeaderMap, input: &str, signature: &str) -> http::HeaderMap {
    headers.insert("signature-input", input.parse().unwrap());
    headers.insert("signature", signature.parse().unwrap());
    headers
}

fn hmac_key() -> MessageKey {
    let secret = STANDARD.decode(SHARED_SECRET).unwrap();
    MessageKey::hmac_sha256("test-shared-secret", &secret).unwrap()
}

/// The signer holding the RFC's Ed25519 key (B.1.4).
fn rfc_signer() -> MessageSigner {
    let seed = URL_SAFE_NO_PAD.decode(ED25519_SEED).unwrap();
    MessageSigner::ed25519("test-key-ed25519", &seed).unwrap()
}

/// A verifier trusting `key`, with the default components and no limit
/// on `created`'s age (the RFC's examples are from 2021).
fn any_age(key: MessageKey) -> MessageVerifier {
    MessageVerifier::builder()
        .with_key(key)
        .with_max_age(None)
        .build()
        .unwrap()
}

fn ed25519_key() -> MessageKey {
    let public = URL_SAFE_NO_PAD.decode(ED25519_PUBLIC).unwrap();
    MessageKey::ed25519("test-key-ed25519", &public).unwrap()
}

/// B.2.5: `hmac-sha256` over `date`, `@authority` and `content-type`.
/// The example covers no body, so it is verified with none.
#[test]
fn rfc_9421_b_2_5_hmac_sha256_example_verifies() {
    let headers = signed(
        rfc_headers(),
        r#"sig-b25=("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret""#,
        "sig-b25=:pxcQw6G3AjtMBQjwo8XzkZf/bws5LelbaMk5rGIGtE8=:",
    );
    let verifier = MessageVerifier::builder()
        .with_key(hmac_key())
        .require(["@authority"])
        .with_max_age(None)
        .build()
        .unwrap();
    let request = MessageRequest::new("POST", TARGET, &headers).unwrap();
    let verified = verifier.verify_at(&request, b"", CREATED).unwrap();
    assert_eq!(verified.label(), "sig-b25");
    assert_eq!(verified.key_id(), "test-shared-secret");
    assert_eq!(verified.created(), CREATED);
    assert!(verified.claim_key().starts_with("sha256:"));

    // Another authority (a proxy rewrote Host): the base differs.
    let request = MessageRequest::new("POST", "https://example.org/foo", &headers).unwrap();
    assert!(matches!(
        verifier.verify_at(&request, b"", CREATED),
        Err(MessageSignatureError::SignatureMismatch { .. })
    ));
    // Another secret under the same keyid.
    let other = MessageVerifier::builder()
        .with_key(MessageKey::hmac_sha256("test-shared-secret", b"another secret").unwrap())
        .require(["@authority"])
        .with_max_age(None)
        .build()
        .unwrap();
    let request = MessageRequest::new("POST", TARGET, &headers).unwrap();
    assert!(matches!(
        other.verify_at(&request, b"", CREATED),
        Err(MessageSignatureError::SignatureMismatch { .. })
    ));
}

/// B.2.6: `ed25519` over `date`, `@method`, `@path`, `@authority`,
/// `content-type` and `content-length`.
#[test]
fn rfc_9421_b_2_6_ed25519_example_verifies() {
    let headers = signed(
        rfc_headers(),
        r#"sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519""#,
        "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:",
    );
    let verifier = any_age(ed25519_key());
    let request = MessageRequest::new("POST", TARGET, &headers).unwrap();
    let verified = verifier.verify_at(&request, b"", CREATED).unwrap();
    assert_eq!(verified.key_id(), "test-key-ed25519");
    assert_eq!(
        verified.components(),
        [
            "\"date\"",
            "\"@method\"",
            "\"@path\"",
            "\"@authority\"",
            "\"content-type\"",
            "\"content-length\""
        ]
    );

    // The same request as a server receives it: origin form, Host.
    let method = http::Method::POST;
    let uri: http::Uri = "/foo?param=Value&Pet=dog".parse().unwrap();
    let request = MessageRequest::from_server(&method, &uri, "https", &headers).unwrap();
    assert!(verifier.verify_at(&request, b"", CREATED).is_ok());
    // Another method.
    let request = MessageRequest::new("PUT", TARGET, &headers).unwrap();
    assert!(matches!(
        verifier.verify_at(&request, b"", CREATED),
        Err(MessageSignatureError::SignatureMismatch { .. })
    ));
}

/// The signer holding the RFC's Ed25519 key signs the B.2.6 request so
/// that the RFC's public key verifies it. (It names its algorithm, which
/// the example leaves out, so its signature is not the example's.)
#[test]
fn the_signer_with_the_rfcs_key_signs_what_its_public_key_verifies() {
    let signer = rfc_signer().covering([
        "date",
        "@method",
        "@path",
        "@authority",
        "content-type",
        "content-length",
    ]);
    assert_eq!(
        signer.public_key().map(|key| URL_SAFE_NO_PAD.encode(key)),
        Some(ED25519_PUBLIC.to_owned())
    );
    let headers = rfc_headers();
    let request = MessageRequest::new("POST", TARGET, &headers).unwrap();
    let signed = signer.sign("sig-b26", &request, CREATED, None).unwrap();
    assert!(
        signed.signature_input.ends_with(r#";alg="ed25519""#),
        "{}",
        signed.signature_input
    );
    let headers = signed_headers(headers, &signed);
    let verifier = any_age(ed25519_key());
    let request = MessageRequest::new("POST", TARGET, &headers).unwrap();
    assert!(verifier.verify_at(&request, b"", CREATED).is_ok());
}

fn signed_headers(
    mut headers: http::HeaderMap,
    signed: &hooklatch::verify::message::SignedMessage,
) -> http::HeaderMap {
    headers.insert("signature-input", signed.signature_input.parse().unwrap());
    headers.insert("signature", signed.signature.parse().unwrap());
    headers
}

/// RFC 9530's `Content-Digest` of the example body (sha-512), checked
/// under a signature of the RFC's key that covers it.
#[test]
fn the_rfcs_content_digest_binds_its_body() {
    let signer = rfc_signer().covering(["@method", "@authority", "@path", "content-digest"]);
    let headers = rfc_headers();
    let request = MessageRequest::new("POST", TARGET, &headers).unwrap();
    let signed = signer.sign("sig1", &request, CREATED, None).unwrap();
    let headers = signed_headers(headers, &signed);
    let verifier = any_age(ed25519_key());
    let request = MessageRequest::new("POST", TARGET, &headers).unwrap();
    assert!(verifier.verify_at(&request, BODY, CREATED).is_ok());
    assert_eq!(
        verifier.verify_at(&request, br#"{"hello": "World"}"#, CREATED),
        Err(MessageSignatureError::DigestMismatch("the digest differs"))
    );
}

/// ECDSA P-256 (`ecdsa-p256-sha256`, r and s, not DER) with the RFC's
/// `test-key-ecc-p256` (B.1.3), over a signature base written out by
/// hand as section 2.5 lays it out.
#[test]
fn an_ecdsa_p256_signature_over_a_hand_written_base_verifies() {
    use p256::ecdsa::signature::Signer as _;
    let private = STANDARD
        .decode(concat!(
            "MHcCAQEEIFKbhfNZfpDsW43+0+JjUr9K+bTeuxopu653+hBaXGA7oAoGCCqGSM49",
            "AwEHoUQDQgAEqIVYZVLCrPZHGHjP17CTW0/+D9Lfw0EkjqF7xB4FivAxzic30tMM",
            "4GF+hR6Dxh71Z50VGGdldkkDXZCnTNnoXQ=="
        ))
        .unwrap();
    let public = STANDARD
        .decode(concat!(
            "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEqIVYZVLCrPZHGHjP17CTW0/+D9Lf",
            "w0EkjqF7xB4FivAxzic30tMM4GF+hR6Dxh71Z50VGGdldkkDXZCnTNnoXQ=="
        ))
        .unwrap();
    // The SEC1 private scalar sits at bytes 7..39; the SPKI's point is
    // its last 65 bytes.
    let signing = p256::ecdsa::SigningKey::from_slice(&private[7..39]).unwrap();
    let point = &public[public.len() - 65..];
    let params = r#"("@method" "@authority" "@path");created=1618884473;keyid="test-key-ecc-p256""#;
    let base = format!(
        "\"@method\": POST\n\"@authority\": example.com\n\"@path\": /foo\n\"@signature-params\": {params}"
    );
    let signature: p256::ecdsa::Signature = signing.sign(base.as_bytes());
    let headers = signed(
        rfc_headers(),
        &format!("sig-ecc={params}"),
        &format!("sig-ecc=:{}:", STANDARD.encode(signature.to_bytes())),
    );
    let verifier = any_age(MessageKey::ecdsa_p256("test-key-ecc-p256", point).unwrap());
    let request = MessageRequest::new("POST", TARGET, &headers).unwrap();
    assert_eq!(
        verifier.verify_at(&request, b"", CREATED).unwrap().key_id(),
        "test-key-ecc-p256"
    );
    // A DER signature, as other ECDSA schemes send, is not this one's.
    let der = signed(
        rfc_headers(),
        &format!("sig-ecc={params}"),
        &format!(
            "sig-ecc=:{}:",
            STANDARD.encode(signature.to_der().as_bytes())
        ),
    );
    let request = MessageRequest::new("POST", TARGET, &der).unwrap();
    assert!(matches!(
        verifier.verify_at(&request, b"", CREATED),
        Err(MessageSignatureError::SignatureMismatch { .. })
    ));
}

const NOW: i64 = 1_700_000_000;
const HOOK: &str = "https://hooks.example/in/acme";

/// A webhook as a sender signs it: the body bound by `Content-Digest`,
/// the event id as the nonce, a tag.
fn webhook(body: &[u8], signer: &MessageSigner, created: i64) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert("content-type", "application/json".parse().unwrap());
    headers.insert("content-digest", content_digest(body).parse().unwrap());
    let request = MessageRequest::new("POST", HOOK, &headers).unwrap();
    let signed = signer
        .sign("sig1", &request, created, Some("evt_1"))
        .unwrap();
    signed_headers(headers, &signed)
}

fn sender() -> MessageSigner {
    rfc_signer().with_tag("acme")
}

fn receiver() -> MessageVerifier {
    MessageVerifier::builder()
        .with_key(ed25519_key())
        .with_key(hmac_key())
        .require(["@method", "@target-uri"])
        .with_tag("acme")
        .build()
        .unwrap()
}

fn verify(
    headers: &http::HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<String, MessageSignatureError> {
    let request = MessageRequest::new("POST", HOOK, headers)?;
    receiver()
        .verify_at(&request, body, now)
        .map(|verified| verified.claim_key())
}

#[test]
fn a_signed_webhook_verifies_and_is_claimed_by_its_nonce() {
    let body = br#"{"type":"invoice.paid"}"#;
    let headers = webhook(body, &sender(), NOW);
    assert_eq!(
        verify(&headers, body, NOW + 10).unwrap(),
        "nonce:test-key-ed25519:evt_1"
    );
}

/// The signer's defaults satisfy the verifier's: a covered `@target-uri`
/// holds the required `@authority` and `@path`.
#[test]
fn a_covered_target_uri_counts_as_its_authority_and_path() {
    let body = b"{}";
    let headers = webhook(body, &sender(), NOW);
    let verifier = MessageVerifier::builder()
        .with_key(ed25519_key())
        .build()
        .unwrap();
    let request = MessageRequest::new("POST", HOOK, &headers).unwrap();
    assert!(verifier.verify_at(&request, body, NOW).is_ok());
    let strict = MessageVerifier::builder()
        .with_key(ed25519_key())
        .require(["@query-param"])
        .build()
        .unwrap();
    assert_eq!(
        strict.verify_at(&request, body, NOW),
        Err(MessageSignatureError::MissingComponent(
            "@query-param".to_owned()
        ))
    );
}

/// A verifier told its own authority refuses an event signed for another
/// receiver of the same sender, whatever `Host` says; one asking for a
/// nonce refuses a signature without one.
#[test]
fn another_receivers_event_or_a_missing_nonce_is_refused() {
    let body = b"{}";
    let headers = webhook(body, &sender(), NOW);
    let ours = MessageVerifier::builder()
        .with_key(ed25519_key())
        .with_authority("Hooks.Example")
        .with_required_nonce()
        .build()
        .unwrap();
    let request = MessageRequest::new("POST", HOOK, &headers).unwrap();
    assert!(ours.verify_at(&request, body, NOW).is_ok());
    let elsewhere = MessageVerifier::builder()
        .with_key(ed25519_key())
        .with_authority("other.example")
        .build()
        .unwrap();
    assert_eq!(
        elsewhere.verify_at(&request, body, NOW),
        Err(MessageSignatureError::WrongAuthority {
            expected: "other.example".to_owned(),
            got: "hooks.example".to_owned()
        })
    );
    let mut plain = http::HeaderMap::new();
    plain.insert("content-type", "application/json".parse().unwrap());
    plain.insert("content-digest", content_digest(body).parse().unwrap());
    let request = MessageRequest::new("POST", HOOK, &plain).unwrap();
    let signed = sender().sign("sig1", &request, NOW, None).unwrap();
    let plain = signed_headers(plain, &signed);
    let request = MessageRequest::new("POST", HOOK, &plain).unwrap();
    assert_eq!(
        ours.verify_at(&request, body, NOW),
        Err(MessageSignatureError::MissingComponent("nonce".to_owned()))
    );
    // A method that is not a token never reaches a signature base.
    assert!(MessageRequest::new("PO ST", HOOK, &plain).is_err());
}

#[test]
fn a_changed_body_fails_its_content_digest() {
    let headers = webhook(b"{}", &sender(), NOW);
    assert_eq!(
        verify(&headers, b"{\"forged\":1}", NOW),
        Err(MessageSignatureError::DigestMismatch("the digest differs"))
    );
}

#[test]
fn a_body_outside_the_signature_is_refused() {
    let signer = sender().covering(["@method", "@target-uri", "content-type"]);
    let headers = webhook(b"{}", &signer, NOW);
    assert_eq!(
        verify(&headers, b"{}", NOW),
        Err(MessageSignatureError::MissingComponent(
            "content-digest".to_owned()
        ))
    );
}

#[test]
fn a_required_component_left_out_is_named() {
    let signer = sender().covering(["@method", "content-digest"]);
    let headers = webhook(b"{}", &signer, NOW);
    assert_eq!(
        verify(&headers, b"{}", NOW),
        Err(MessageSignatureError::MissingComponent(
            "@target-uri".to_owned()
        ))
    );
}

#[test]
fn a_covered_header_that_went_missing_is_named() {
    let mut headers = webhook(b"{}", &sender(), NOW);
    headers.remove("content-type");
    assert_eq!(
        verify(&headers, b"{}", NOW),
        Err(MessageSignatureError::AbsentComponent(
            "content-type".to_owned()
        ))
    );
}

#[test]
fn created_and_expires_are_honoured() {
    let headers = webhook(b"{}", &sender(), NOW);
    assert_eq!(
        verify(&headers, b"{}", NOW + 301),
        Err(MessageSignatureError::TooOld {
            age_secs: 301,
            max_age_secs: 300
        })
    );
    assert_eq!(
        verify(&headers, b"{}", NOW - 61),
        Err(MessageSignatureError::CreatedInFuture { ahead_secs: 61 })
    );
    // An `expires` passed, on a signature that is otherwise fine.
    let mut expired = headers.clone();
    let input = headers["signature-input"].to_str().unwrap();
    expired.insert(
        "signature-input",
        format!("{input};expires={}", NOW + 5).parse().unwrap(),
    );
    assert_eq!(
        verify(&expired, b"{}", NOW + 6),
        Err(MessageSignatureError::Expired { ago_secs: 1 })
    );
}

#[test]
fn another_tag_an_unknown_key_or_another_algorithm_is_refused() {
    let other_tag = webhook(b"{}", &sender().with_tag("other-app"), NOW);
    assert!(matches!(
        verify(&other_tag, b"{}", NOW),
        Err(MessageSignatureError::NoTrustedSignature { .. })
    ));
    let seed = URL_SAFE_NO_PAD.decode(ED25519_SEED).unwrap();
    let stranger = MessageSigner::ed25519("someone-else", &seed)
        .unwrap()
        .with_tag("acme");
    assert!(matches!(
        verify(&webhook(b"{}", &stranger, NOW), b"{}", NOW),
        Err(MessageSignatureError::NoTrustedSignature { .. })
    ));
    // The HMAC secret's keyid, signed as if it were an Ed25519 key.
    let mut headers = webhook(b"{}", &sender(), NOW);
    let input = headers["signature-input"]
        .to_str()
        .unwrap()
        .replace("test-key-ed25519", "test-shared-secret");
    headers.insert("signature-input", input.parse().unwrap());
    assert!(matches!(
        verify(&headers, b"{}", NOW),
        Err(MessageSignatureError::AlgorithmMismatch { .. })
    ));
}

#[test]
fn without_a_nonce_the_claim_key_is_the_digest_of_what_was_signed() {
    let signer = rfc_signer().with_tag("acme");
    let mut headers = http::HeaderMap::new();
    headers.insert("content-type", "application/json".parse().unwrap());
    headers.insert("content-digest", content_digest(b"{}").parse().unwrap());
    let request = MessageRequest::new("POST", HOOK, &headers).unwrap();
    let signed = signer.sign("sig1", &request, NOW, None).unwrap();
    let headers = signed_headers(headers, &signed);
    let first = verify(&headers, b"{}", NOW).unwrap();
    assert!(first.starts_with("sha256:") && first.len() == 71, "{first}");
    // The same signed request again (a replay) has the same key.
    assert_eq!(verify(&headers, b"{}", NOW + 1).unwrap(), first);
}

#[test]
fn malformed_or_oversized_signature_headers_are_refused_unread() {
    let good = webhook(b"{}", &sender(), NOW);
    let mut broken = good.clone();
    broken.insert("signature-input", "sig1=(\"@method\"".parse().unwrap());
    assert!(matches!(
        verify(&broken, b"{}", NOW),
        Err(MessageSignatureError::Malformed {
            header: "signature-input",
            ..
        })
    ));
    let mut twice = good.clone();
    twice.insert(
        "signature-input",
        r#"sig1=("@method" "@method");created=1700000000;keyid="test-key-ed25519";tag="acme""#
            .parse()
            .unwrap(),
    );
    assert!(matches!(
        verify(&twice, b"{}", NOW),
        Err(MessageSignatureError::Malformed { .. })
    ));
    let mut many = good.clone();
    let labels: Vec<String> = (0..9).map(|n| format!("s{n}=(\"@method\")")).collect();
    many.insert("signature-input", labels.join(", ").parse().unwrap());
    assert_eq!(
        verify(&many, b"{}", NOW),
        Err(MessageSignatureError::TooManySignatures)
    );
    let mut missing = good;
    missing.remove("signature");
    assert_eq!(
        verify(&missing, b"{}", NOW),
        Err(MessageSignatureError::MissingHeader("signature"))
    );
}

#[test]
fn hmac_signatures_round_trip_too() {
    let secret = STANDARD.decode(SHARED_SECRET).unwrap();
    let signer = MessageSigner::hmac_sha256("test-shared-secret", &secret)
        .unwrap()
        .with_tag("acme");
    let headers = webhook(b"{\"n\":1}", &signer, NOW);
    assert_eq!(
        verify(&headers, b"{\"n\":1}", NOW).unwrap(),
        "nonce:test-shared-secret:evt_1"
    );
}

/// The sending side speaks it too: an endpoint with a message signer
/// sends every attempt with `Content-Digest`, `Signature-Input` and
/// `Signature` (the webhook id as the nonce), which a receiver's
/// `MessageVerifier` accepts, beside the scheme's own headers.
#[tokio::test(start_paused = true)]
async fn a_delivery_from_an_endpoint_with_a_message_signer_verifies_at_the_receiver() {
    use hooklatch::sender::rules::{Jitter, Schedule};
    use hooklatch::sender::{Endpoint, Policy, deliver};
    use hooklatch::verify::{Scheme, Signer, Verifier};

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let endpoint = Endpoint::new(
        HOOK,
        Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap(),
    )
    .with_message_signer(sender());
    let policy = Policy::new(Schedule::Table {
        delays: vec![std::time::Duration::ZERO],
        jitter: Jitter::None,
    })
    .with_clock(|| std::time::UNIX_EPOCH + std::time::Duration::from_secs(NOW as u64));
    let transport = Recorded::default();
    let body = br#"{"type":"invoice.paid"}"#;
    let record = deliver(&transport, &endpoint, &policy, "evt_42", body, || 0.0).await;
    assert_eq!(record.attempts.len(), 1);
    let sent = transport.0.lock().unwrap()[0].clone();
    let mut headers = header_map(&sent);
    let verifier = MessageVerifier::builder()
        .with_key(ed25519_key())
        .require(["@method", "@target-uri", "content-type"])
        .with_tag("acme")
        .with_authority("hooks.example")
        .with_required_nonce()
        .build()
        .unwrap();
    let method = http::Method::POST;
    let uri: http::Uri = "/in/acme".parse().unwrap();
    // A server reads the authority from Host, which the HTTP client sets.
    headers.insert("host", "hooks.example".parse().unwrap());
    let request = MessageRequest::from_server(&method, &uri, "https", &headers).unwrap();
    let verified = verifier.verify_at(&request, body, NOW + 1).unwrap();
    assert_eq!(verified.claim_key(), "nonce:test-key-ed25519:evt_42");
    assert_eq!(verified.created(), NOW);
    // The scheme's own headers are there and verify too.
    let standard = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .unwrap()
        .build()
        .unwrap();
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(NOW as u64);
    assert!(standard.verify_at(&headers, body, at).is_ok());
}

/// A `Receiver` for message signatures reads the method and URI
/// (`receive_request`); handed headers alone it refuses with a reason that
/// names the call to make, and it takes no handshake, whose answers prove
/// a scheme's secret.
#[tokio::test]
async fn a_message_signature_receiver_needs_the_request_line_and_takes_no_handshake() {
    use bytes::Bytes;
    use hooklatch::receive::{Handshake, Receiver, Rejection};

    let receiver = Receiver::for_message_signatures(receiver(), "https");
    assert!(receiver.needs_request_line());
    assert_eq!(receiver.scheme_name(), "message-signature");
    assert!(receiver.verifier().is_none());
    let body = || futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"{}"))]);
    let refused = receiver
        .receive(&http::HeaderMap::new(), body())
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, Rejection::MessageUnverified(MessageSignatureError::InvalidTarget(why)) if why.contains("receive_request")),
        "{refused:?}"
    );
    assert_eq!(refused.status(), 400);
    assert!(
        receiver
            .clone()
            .with_handshake(Handshake::meta("token"))
            .is_err()
    );

    // Through `receive_request`, a signed webhook becomes an event claimed
    // by its nonce, whose time is the signature's.
    let signed_body = br#"{"type":"invoice.paid"}"#;
    let mut headers = webhook(signed_body, &sender(), unix_now());
    headers.insert("host", "hooks.example".parse().unwrap());
    let uri: http::Uri = "/in/acme".parse().unwrap();
    let received = receiver
        .receive_request(&http::Method::POST, &uri, &headers, body_of(signed_body))
        .await
        .unwrap();
    let hooklatch::receive::Received::Event(event) = received else {
        panic!("not an event")
    };
    assert_eq!(event.key().unwrap(), "nonce:test-key-ed25519:evt_1");
    assert_eq!(event.scheme, "message-signature");
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .try_into()
        .unwrap()
}

fn body_of(
    body: &'static [u8],
) -> impl futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> {
    futures_util::stream::iter([Ok(bytes::Bytes::from_static(body))])
}

/// The headers of one attempt.
type Sent = Vec<(String, String)>;

/// A transport that keeps each attempt's headers and answers 204.
#[derive(Clone, Default)]
struct Recorded(std::sync::Arc<std::sync::Mutex<Vec<Sent>>>);

impl hooklatch::sender::Transport for Recorded {
    async fn post(
        &self,
        _url: &str,
        headers: &[(String, String)],
        _body: &[u8],
    ) -> Result<hooklatch::sender::transport::Response, hooklatch::sender::transport::TransportError>
    {
        self.0.lock().unwrap().push(headers.to_vec());
        Ok(hooklatch::sender::transport::Response::new(204))
    }
}

fn header_map(sent: &Sent) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    for (name, value) in sent {
        headers.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    headers
}

/// An endpoint saved in the store with a message signer: a dispatcher
/// that reads it from the store (as another process would) signs every
/// attempt with it, and a receiver trusting that key verifies it.
#[tokio::test]
async fn a_saved_endpoint_keeps_its_message_signer_for_every_dispatcher() {
    use hooklatch::sender::{Dispatcher, EndpointConfig, MemoryOutbox};
    use std::time::Duration;

    const PARTNER_KEY: &[u8] = b"a shared secret of 32 bytes or more";
    let store = MemoryOutbox::new();
    let config = EndpointConfig::new(HOOK, "standard", ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
        .unwrap()
        .with_message_signer("partner-7", "hmac-sha256", PARTNER_KEY, Some("acme"))
        .unwrap();
    let admin = Dispatcher::new(store.clone(), Recorded::default());
    admin.save_endpoint("partner", &config).await.unwrap();
    assert!(
        matches!(
            EndpointConfig::new(HOOK, "standard", ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
                .unwrap()
                .with_message_signer("k", "rsa-pss-sha512", PARTNER_KEY, None),
            Err(hooklatch::sender::EndpointConfigError::MessageKey(_))
        ),
        "an algorithm it cannot sign with is refused when saved"
    );

    let transport = Recorded::default();
    let worker = Dispatcher::new(store.clone(), transport.clone())
        .with_poll_interval(Duration::from_millis(10))
        .with_endpoint_refresh(Duration::from_millis(10));
    let running = worker.start();
    let body = br#"{"type":"order.paid"}"#;
    assert!(admin.send("partner", "evt_9", body).await.unwrap());
    for _ in 0..1000 {
        if !transport.0.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.stop().await;
    let sent = transport
        .0
        .lock()
        .unwrap()
        .first()
        .cloned()
        .expect("an attempt was sent");
    let mut headers = header_map(&sent);
    headers.insert("host", "hooks.example".parse().unwrap());
    let verifier = MessageVerifier::builder()
        .with_key(MessageKey::hmac_sha256("partner-7", PARTNER_KEY).unwrap())
        .require(["@method", "@target-uri"])
        .with_tag("acme")
        .with_required_nonce()
        .build()
        .unwrap();
    let uri: http::Uri = "/in/acme".parse().unwrap();
    let request =
        MessageRequest::from_server(&http::Method::POST, &uri, "https", &headers).unwrap();
    let verified = verifier.verify(&request, body).unwrap();
    assert_eq!(verified.claim_key(), "nonce:partner-7:evt_9");
}

/// The claim key scopes a nonce by its sender: a `:` in a key id cannot
/// make two senders' nonces meet, and a sender's keys named alike (a
/// rotation) share one scope, so a request signed with both and replayed
/// with one signature removed is the same event.
#[test]
fn claim_keys_scope_nonces_by_sender_and_a_rotation_shares_one() {
    let claim = |key_id: &str, sender: Option<&str>, nonce: &str| {
        let mut key = MessageKey::hmac_sha256(key_id, b"a shared secret").unwrap();
        if let Some(sender) = sender {
            key = key.with_sender(sender);
        }
        let verifier = MessageVerifier::builder()
            .with_key(key)
            .require(["@method"])
            .with_max_age(None)
            .build()
            .unwrap();
        let mut headers = http::HeaderMap::new();
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("content-digest", content_digest(b"{}").parse().unwrap());
        let request = MessageRequest::new("POST", HOOK, &headers).unwrap();
        let signed = MessageSigner::hmac_sha256(key_id, b"a shared secret")
            .unwrap()
            .sign("sig1", &request, NOW, Some(nonce))
            .unwrap();
        headers.insert("signature-input", signed.signature_input.parse().unwrap());
        headers.insert("signature", signed.signature.parse().unwrap());
        let request = MessageRequest::new("POST", HOOK, &headers).unwrap();
        verifier
            .verify_at(&request, b"{}", NOW)
            .unwrap()
            .claim_key()
    };
    assert_ne!(claim("a:b", None, "c"), claim("a", None, "b:c"));
    assert!(claim("a:b", None, "c").starts_with("nonce-sha256:"));
    assert_eq!(claim("a", None, "b:c"), "nonce:a:b:c");
    assert_eq!(
        claim("acme-2026-01", Some("acme"), "evt_1"),
        claim("acme-2026-02", Some("acme"), "evt_1")
    );
    assert_eq!(
        claim("acme-2026-02", Some("acme"), "evt_1"),
        "nonce:acme:evt_1"
    );
}
