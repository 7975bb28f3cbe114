//! The checks both adapters' message signature tests run against a
//! receiver of HTTP message signatures (RFC 9421) on a real socket, bound
//! to its loopback authority, accepting into `inbox` under `partners`.

use std::time::{SystemTime, UNIX_EPOCH};

use hooklatch::dedup::{InboxQueue, MemoryInbox};
use hooklatch::sender::rules::{Jitter, Schedule};
use hooklatch::sender::{AddressPolicy, Endpoint, HttpTransport, Policy, deliver};
use hooklatch::verify::message::{
    MessageKey, MessageRequest, MessageSigner, MessageVerifier, content_digest,
};
use hooklatch::verify::{Scheme, Signer};

const KEY_ID: &str = "partner-7";
const SECRET: &[u8] = b"a shared secret of 32 bytes or more";

/// The verifier both receivers use: the partner's key, `@method`,
/// `@target-uri` and `content-type` covered, a nonce required, and the
/// authority the receiver listens on.
pub(crate) fn verifier(authority: &str) -> MessageVerifier {
    MessageVerifier::builder()
        .with_key(MessageKey::hmac_sha256(KEY_ID, SECRET).unwrap())
        .require(["@method", "@target-uri", "content-type"])
        .with_authority(authority)
        .with_required_nonce()
        .build()
        .unwrap()
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .try_into()
        .unwrap()
}

/// The headers a partner sends to `url` for `body`, signed with the
/// event id as the nonce.
fn signed(url: &str, id: &str, body: &[u8]) -> reqwest::header::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert("content-type", "application/json".parse().unwrap());
    headers.insert("content-digest", content_digest(body).parse().unwrap());
    let request = MessageRequest::new("POST", url, &headers).unwrap();
    let signature = MessageSigner::hmac_sha256(KEY_ID, SECRET)
        .unwrap()
        .sign("sig1", &request, now(), Some(id))
        .unwrap();
    headers.insert(
        "signature-input",
        signature.signature_input.parse().unwrap(),
    );
    headers.insert("signature", signature.signature.parse().unwrap());
    headers
}

async fn post_signed(
    url: &str,
    headers: reqwest::header::HeaderMap,
    body: &'static [u8],
) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(url)
        .headers(headers)
        .body(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The ids of the events accepted since the last call.
async fn accepted(inbox: &MemoryInbox) -> Vec<String> {
    let taken = inbox.take("partners", "test", 16).await.unwrap();
    taken.into_iter().map(|entry| entry.id).collect()
}

/// Sends one event twice from hooklatch's sender, signed with a message
/// signature; checks it was accepted once, by its nonce.
pub(crate) async fn a_message_signed_delivery_is_accepted_once(url: &str, inbox: &MemoryInbox) {
    let url = url.to_owned();
    let endpoint = Endpoint::new(
        &url,
        Signer::new(
            Scheme::standard_webhooks(),
            ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        )
        .unwrap(),
    )
    .with_message_signer(MessageSigner::hmac_sha256(KEY_ID, SECRET).unwrap());
    let policy = Policy::new(Schedule::Table {
        delays: vec![std::time::Duration::ZERO],
        jitter: Jitter::None,
    });
    let transport =
        HttpTransport::for_policy(AddressPolicy::strict().insecure_allow_loopback(), &policy)
            .unwrap();
    let body = br#"{"type":"order.paid"}"#;
    for _ in 0..2 {
        let record = deliver(&transport, &endpoint, &policy, "evt_1", body, || 0.0).await;
        assert!(
            matches!(record.attempts[0].result, Ok(200..=299)),
            "{record:?}"
        );
    }
    // Sent twice, accepted once, by the signature's nonce under its key.
    assert_eq!(accepted(inbox).await, ["nonce:partner-7:evt_1"]);
}

/// Sends forgeries (another body, path or host; no signature), each
/// refused with its kind and none claimed; then the genuine request and
/// its replay, accepted once.
pub(crate) async fn forgeries_are_refused_and_the_genuine_request_accepted_once(
    url: &str,
    inbox: &MemoryInbox,
) {
    let url = url.to_owned();
    let body: &[u8] = br#"{"type":"order.paid"}"#;

    // The signed headers with another body: the digest no longer matches.
    let headers = signed(&url, "evt_2", body);
    let (status, text) = post_signed(&url, headers.clone(), br#"{"type":"order.refunded"}"#).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("digest_mismatch"), "{text}");

    // Signed for another path of the same host, sent here.
    let elsewhere = url.replace("/hooks/partner", "/hooks/other");
    let (status, text) = post_signed(
        &url,
        signed(&elsewhere, "evt_3", body),
        b"{\"type\":\"order.paid\"}",
    )
    .await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("signature_mismatch"), "{text}");

    // Signed for another host (its Host header says so too).
    let other_host = url.replace("127.0.0.1", "localhost");
    let mut headers = signed(&other_host, "evt_4", body);
    let host = other_host.split('/').nth(2).unwrap();
    headers.insert("host", host.parse().unwrap());
    let (status, text) = post_signed(&url, headers, b"{\"type\":\"order.paid\"}").await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("wrong_authority"), "{text}");

    // Unsigned.
    let (status, text) = post_signed(&url, reqwest::header::HeaderMap::new(), b"{}").await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("missing_header"), "{text}");

    assert!(accepted(inbox).await.is_empty());

    // The genuine request is accepted, and its replay answered as a
    // duplicate without a second event.
    let headers = signed(&url, "evt_2", body);
    let (status, _) = post_signed(&url, headers.clone(), br#"{"type":"order.paid"}"#).await;
    assert_eq!(status, 202);
    let (status, _) = post_signed(&url, headers, br#"{"type":"order.paid"}"#).await;
    assert!((200..300).contains(&status), "{status}");
    assert_eq!(accepted(inbox).await, ["nonce:partner-7:evt_2"]);
}
