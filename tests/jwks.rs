//! Keys from a JWKS URL, served by a local HTTP server on loopback: a
//! rotation, a flood of made-up key ids, the source down, a malformed
//! set, and a configured key a fetched one cannot replace.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hooklatch::verify::message::{
    Jwks, MessageKey, MessageRequest, MessageSignatureError, MessageSigner, MessageVerifier,
    content_digest,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const HOOK: &str = "https://hooks.example/in";
const NOW: i64 = 1_700_000_000;

/// What the key server answers: a status, a body and its `Cache-Control`.
#[derive(Clone)]
struct Served {
    status: u16,
    body: String,
    cache_control: &'static str,
}

/// A key server on 127.0.0.1 that counts the requests it answers.
struct KeyServer {
    url: String,
    served: Arc<Mutex<Served>>,
    requests: Arc<AtomicUsize>,
}

impl KeyServer {
    async fn start(served: Served) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
        let served = Arc::new(Mutex::new(served));
        let requests = Arc::new(AtomicUsize::new(0));
        let (answer, count) = (Arc::clone(&served), Arc::clone(&requests));
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let mut read = vec![0; 4096];
                let _ = socket.read(&mut read).await;
                count.fetch_add(1, Ordering::SeqCst);
                let Served {
                    status,
                    body,
                    cache_control,
                } = answer.lock().unwrap().clone();
                let response = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                     cache-control: {cache_control}\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            }
        });
        Self {
            url,
            served,
            requests,
        }
    }

    fn serve(&self, served: Served) {
        *self.served.lock().unwrap() = served;
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

fn ok(body: String) -> Served {
    Served {
        status: 200,
        body,
        cache_control: "max-age=600",
    }
}

/// A sender's Ed25519 key: its signer and its JWK.
fn sender(kid: &str, seed: u8) -> (MessageSigner, String) {
    let signer = MessageSigner::ed25519(kid, &[seed; 32]).unwrap();
    let x = URL_SAFE_NO_PAD.encode(signer.public_key().unwrap());
    let jwk = format!(r#"{{"kty":"OKP","crv":"Ed25519","kid":"{kid}","x":"{x}","use":"sig"}}"#);
    (signer, jwk)
}

fn set(jwks: &[&str]) -> String {
    format!(r#"{{"keys":[{}]}}"#, jwks.join(","))
}

fn signed(signer: &MessageSigner, id: &str) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert("content-type", "application/json".parse().unwrap());
    headers.insert("content-digest", content_digest(b"{}").parse().unwrap());
    let request = MessageRequest::new("POST", HOOK, &headers).unwrap();
    let signed = signer.sign("sig1", &request, NOW, Some(id)).unwrap();
    headers.insert("signature-input", signed.signature_input.parse().unwrap());
    headers.insert("signature", signed.signature.parse().unwrap());
    headers
}

fn trusting(jwks: &Arc<Jwks>) -> MessageVerifier {
    MessageVerifier::builder()
        .with_jwks(Arc::clone(jwks))
        .with_max_age(None)
        .build()
        .unwrap()
}

async fn verify(
    verifier: &MessageVerifier,
    headers: &http::HeaderMap,
    now: i64,
) -> Result<String, MessageSignatureError> {
    let request = MessageRequest::new("POST", HOOK, headers).unwrap();
    verifier
        .verify_fetching_at(&request, b"{}", now)
        .await
        .map(|verified| verified.key_id().to_owned())
}

#[tokio::test]
async fn a_rotated_key_is_fetched_once_it_signs_and_the_old_one_goes() {
    let (old, old_jwk) = sender("2026-01", 1);
    let (new, new_jwk) = sender("2026-02", 2);
    let server = KeyServer::start(ok(set(&[&old_jwk]))).await;
    let jwks = Arc::new(Jwks::new(&server.url).unwrap());
    let verifier = trusting(&jwks);
    assert_eq!(
        verify(&verifier, &signed(&old, "e1"), NOW).await.unwrap(),
        "2026-01"
    );
    assert_eq!(server.requests(), 1);
    // Fresh for 10 minutes: no fetch for a known key.
    assert!(
        verify(&verifier, &signed(&old, "e2"), NOW + 30)
            .await
            .is_ok()
    );
    assert_eq!(server.requests(), 1);
    // The sender rotates; its first signature with the new key fetches.
    server.serve(ok(set(&[&new_jwk])));
    assert_eq!(
        verify(&verifier, &signed(&new, "e3"), NOW + 61)
            .await
            .unwrap(),
        "2026-02"
    );
    assert_eq!(server.requests(), 2);
    assert!(matches!(
        verify(&verifier, &signed(&old, "e4"), NOW + 62).await,
        Err(MessageSignatureError::NoTrustedSignature { .. })
    ));
    // Stale after max-age: fetched again on the next request.
    assert!(
        verify(&verifier, &signed(&new, "e5"), NOW + 61 + 601)
            .await
            .is_ok()
    );
    assert_eq!(server.requests(), 3);
}

#[tokio::test]
async fn made_up_key_ids_fetch_at_most_once_per_refresh_interval() {
    let (known, jwk) = sender("known", 1);
    let server = KeyServer::start(ok(set(&[&jwk]))).await;
    let jwks = Arc::new(Jwks::new(&server.url).unwrap());
    let verifier = trusting(&jwks);
    assert!(verify(&verifier, &signed(&known, "e1"), NOW).await.is_ok());
    for n in 0..200 {
        let (stranger, _) = sender(&format!("made-up-{n}"), 9);
        let answer = verify(&verifier, &signed(&stranger, "x"), NOW + 1 + n / 10).await;
        assert!(matches!(
            answer,
            Err(MessageSignatureError::NoTrustedSignature { .. })
        ));
    }
    // 200 unknown ids within 21 s: no fetch, the interval is a minute.
    assert_eq!(server.requests(), 1);
    let (stranger, _) = sender("made-up-late", 9);
    let _ = verify(&verifier, &signed(&stranger, "x"), NOW + 60).await;
    assert_eq!(server.requests(), 2, "one more once the interval passed");
    assert_eq!(jwks.fetches(), 2);
}

#[tokio::test]
async fn the_last_good_set_serves_while_the_source_is_down_or_malformed() {
    let (signer, jwk) = sender("k1", 1);
    let server = KeyServer::start(ok(set(&[&jwk]))).await;
    let jwks = Arc::new(Jwks::new(&server.url).unwrap().with_cache_bounds(
        std::time::Duration::from_secs(60),
        std::time::Duration::from_secs(60),
    ));
    let verifier = trusting(&jwks);
    assert!(verify(&verifier, &signed(&signer, "e1"), NOW).await.is_ok());
    server.serve(Served {
        status: 503,
        body: "down".to_owned(),
        cache_control: "no-store",
    });
    assert!(
        verify(&verifier, &signed(&signer, "e2"), NOW + 120)
            .await
            .is_ok()
    );
    assert_eq!(
        server.requests(),
        2,
        "the stale set was refreshed, and that failed"
    );
    assert!(
        jwks.last_error().unwrap().contains("503"),
        "{:?}",
        jwks.last_error()
    );
    server.serve(ok("<html>not a key set</html>".to_owned()));
    assert!(
        verify(&verifier, &signed(&signer, "e3"), NOW + 240)
            .await
            .is_ok()
    );
    assert_eq!(server.requests(), 3);
    assert!(jwks.last_error().unwrap().contains("not JSON"));
    // A source that never answered: nothing to verify with, said plainly.
    let nowhere = Arc::new(Jwks::new("http://127.0.0.1:9/jwks.json").unwrap());
    assert!(matches!(
        verify(&trusting(&nowhere), &signed(&signer, "e4"), NOW).await,
        Err(MessageSignatureError::NoTrustedSignature { .. })
    ));
    assert!(nowhere.last_error().unwrap().starts_with("fetch failed"));
}

#[tokio::test]
async fn a_fetched_key_never_replaces_a_configured_one() {
    let (configured, _) = sender("partner", 1);
    let (impostor, impostor_jwk) = sender("partner", 2);
    let server = KeyServer::start(ok(set(&[&impostor_jwk]))).await;
    let jwks = Arc::new(Jwks::new(&server.url).unwrap());
    let verifier = MessageVerifier::builder()
        .with_key(MessageKey::ed25519("partner", &configured.public_key().unwrap()).unwrap())
        .with_jwks(Arc::clone(&jwks))
        .with_max_age(None)
        .build()
        .unwrap();
    assert!(
        verify(&verifier, &signed(&configured, "e1"), NOW)
            .await
            .is_ok()
    );
    assert!(matches!(
        verify(&verifier, &signed(&impostor, "e2"), NOW + 61).await,
        Err(MessageSignatureError::SignatureMismatch { .. })
    ));
}

#[tokio::test]
async fn a_p256_key_from_the_set_verifies_what_it_signed() {
    use p256::ecdsa::signature::Signer as _;
    let signing = p256::ecdsa::SigningKey::from_slice(&[7; 32]).unwrap();
    let point = signing.verifying_key().to_sec1_point(false);
    let (x, y) = (&point.as_bytes()[1..33], &point.as_bytes()[33..65]);
    let jwk = format!(
        r#"{{"kty":"EC","crv":"P-256","kid":"ec1","x":"{}","y":"{}"}}"#,
        URL_SAFE_NO_PAD.encode(x),
        URL_SAFE_NO_PAD.encode(y)
    );
    let server = KeyServer::start(ok(set(&[&jwk]))).await;
    let jwks = Arc::new(Jwks::new(&server.url).unwrap());
    let params = format!(r#"("@method" "@authority" "@path");created={NOW};keyid="ec1""#);
    let base = format!(
        "\"@method\": POST\n\"@authority\": hooks.example\n\"@path\": /in\n\"@signature-params\": {params}"
    );
    let signature: p256::ecdsa::Signature = signing.sign(base.as_bytes());
    let mut headers = http::HeaderMap::new();
    headers.insert("signature-input", format!("sig1={params}").parse().unwrap());
    headers.insert(
        "signature",
        format!(
            "sig1=:{}:",
            base64::engine::general_purpose::STANDARD.encode(signature.to_bytes())
        )
        .parse()
        .unwrap(),
    );
    let request = MessageRequest::new("POST", HOOK, &headers).unwrap();
    let verified = trusting(&jwks)
        .verify_fetching_at(&request, b"", NOW)
        .await
        .unwrap();
    assert_eq!(verified.key_id(), "ec1");
}

/// A clock a test moves.
#[derive(Clone)]
struct TestClock(Arc<std::sync::atomic::AtomicI64>);

impl hooklatch::verify::Clock for TestClock {
    fn now(&self) -> std::time::SystemTime {
        let seconds = self.0.load(Ordering::SeqCst);
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds.try_into().unwrap())
    }
}

/// The Standard Webhooks `v1a` headers of `body` signed with the key of
/// `seed` (the `sender` of that seed's) at `at`.
fn signed_v1a(seed: u8, id: &str, at: i64, body: &[u8]) -> Vec<(String, String)> {
    use hooklatch::verify::{Scheme, Signer};
    let secret = format!(
        "whsk_{}",
        base64::engine::general_purpose::STANDARD.encode([seed; 32])
    );
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(at.try_into().unwrap());
    Signer::new(Scheme::standard_webhooks(), [secret])
        .unwrap()
        .sign(id, at, body)
        .unwrap()
        .iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// Standard Webhooks `v1a` signatures name no key: a verifier given a key
/// set tries its Ed25519 keys, fetches it when stale, fetches it again
/// when a timely request verifies with none (a rotation) at most once per
/// refresh interval, and keeps the last good set while the source is down.
#[tokio::test]
async fn standard_webhooks_v1a_keys_come_from_a_jwks_and_a_rotation_is_fetched_once() {
    use hooklatch::verify::{ConfigError, Scheme, Verifier, VerifyError};

    let (_, first) = sender("2026-01", 4);
    let server = KeyServer::start(ok(set(&[&first]))).await;
    let jwks = Arc::new(Jwks::new(&server.url).unwrap());
    let clock = TestClock(Arc::new(std::sync::atomic::AtomicI64::new(NOW)));
    let verifier = Verifier::builder(Scheme::standard_webhooks())
        .with_jwks(Arc::clone(&jwks))
        .unwrap()
        .with_clock(clock.clone())
        .build()
        .unwrap();
    let body = br#"{"type":"invoice.paid"}"#;

    let headers = signed_v1a(4, "msg_1", NOW, body);
    let verified = verifier.verify_fetching(&headers[..], body).await.unwrap();
    assert_eq!(verified.id(), Some("msg_1"));
    assert_eq!(verified.key_index(), 0, "the set's first key");
    assert_eq!(server.requests(), 1);

    // A forger's timely requests, signed with a key not in the set: each
    // may be a rotation, but within the refresh interval of the last fetch
    // none fetches.
    for n in 0..50 {
        let forged = signed_v1a(9, &format!("msg_f{n}"), NOW, body);
        let refused = verifier.verify_fetching(&forged[..], body).await;
        assert!(
            matches!(refused, Err(VerifyError::SignatureMismatch { keys: 1, .. })),
            "the set's one key was tried: {refused:?}"
        );
    }
    assert_eq!(server.requests(), 1);

    // The sender rotates: its new key signs a minute later and is fetched
    // once; the old key, gone from the set, no longer verifies.
    let (_, second) = sender("2026-02", 5);
    server.serve(ok(set(&[&second])));
    clock.0.store(NOW + 61, Ordering::SeqCst);
    let rotated = signed_v1a(5, "msg_2", NOW + 61, body);
    assert!(verifier.verify_fetching(&rotated[..], body).await.is_ok());
    assert_eq!(server.requests(), 2);
    let old = signed_v1a(4, "msg_3", NOW + 61, body);
    assert!(verifier.verify_fetching(&old[..], body).await.is_err());
    assert_eq!(server.requests(), 2, "within the interval: no fetch");

    // Once the set is stale, a request that is not even signed, or whose
    // timestamp is out of bounds, fetches nothing.
    clock.0.store(NOW + 700, Ordering::SeqCst);
    assert!(
        verifier
            .verify_fetching(&[("webhook-id", "msg_x")][..], body)
            .await
            .is_err()
    );
    let stale = signed_v1a(5, "msg_y", NOW, body);
    assert!(matches!(
        verifier.verify_fetching(&stale[..], body).await,
        Err(VerifyError::TimestampTooOld { .. })
    ));
    assert_eq!(server.requests(), 2);

    // The source goes down: the last good set serves.
    server.serve(Served {
        status: 503,
        body: "down".into(),
        cache_control: "no-store",
    });
    clock.0.store(NOW + 61 + 700, Ordering::SeqCst);
    let later = signed_v1a(5, "msg_4", NOW + 761, body);
    assert!(verifier.verify_fetching(&later[..], body).await.is_ok());
    assert_eq!(server.requests(), 3, "stale: fetched, failed, kept");
    assert!(jwks.last_error().is_some());

    // HMAC-only schemes have no `v1a` to take keys for.
    assert!(matches!(
        Verifier::builder(Scheme::github()).with_jwks(Arc::clone(&jwks)),
        Err(ConfigError::AsymmetricUnsupported { .. })
    ));
}
