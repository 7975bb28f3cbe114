//! The fuzz targets' bodies, shared with `tests/fuzz_regressions.rs`, which
//! replays every crasher ever found in the normal test run.
//!
//! Each target asserts invariants, not just "no panic": a verified body
//! changed by one byte fails; whatever a signer signs, a verifier with the
//! same secrets accepts; the receiver answers only the statuses it
//! documents and never accepts an event twice; the sequence tracker never
//! applies a step twice and the reorder buffer stays within its bound.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arbitrary::Arbitrary;
use hooklatch::dedup::MemoryInbox;
use hooklatch::sender::AddressPolicy;
use hooklatch::sender::guard::{Forbidden, check_address, check_url};
use hooklatch::sender::rules::{MAX_RETRY_AFTER, parse_retry_after};
use hooklatch::sequence::{Held, MemorySequences, Observation, ReorderBuffer, Tracker};
use hooklatch::verify::{Scheme, Signer, Verifier};

const SCHEMES: &[&str] = Scheme::NAMES;

/// The schemes built around a signed URL, besides [`SCHEMES`].
const URL_SCHEMES: &[&str] = &["square", "twilio"];

/// The URL the structured target gives [`URL_SCHEMES`].
const SIGNED_URL: &str = "https://example.com/hooks/in?account=7";

/// The scheme `name` names: one of [`SCHEMES`], or of [`URL_SCHEMES`]
/// around `url`.
fn scheme_named(name: &str, url: &str) -> Option<Scheme> {
    match name {
        "square" => Scheme::square(url).ok(),
        "twilio" => Scheme::twilio(url).ok(),
        _ => Scheme::by_name(name),
    }
}

/// The secret each scheme's known-answer vector was signed with.
fn vector_secret(scheme: &str) -> &'static str {
    match scheme {
        "standard" | "svix" => "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "stripe" => "secret",
        "github" => "It's a Secret to Everybody",
        "shopify" => "shop-secret",
        _ => "8f742231b10e8888abcd99yyyzzz85a5",
    }
}

fn at(seconds: i64) -> SystemTime {
    let magnitude = Duration::from_secs(seconds.unsigned_abs());
    if seconds >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH.checked_sub(magnitude).unwrap_or(UNIX_EPOCH)
    }
}

/// Text input, so the known-answer vectors are readable seeds:
/// `scheme [secret]\nname: value\n...\n\nbody`, or `scheme secret url`
/// for Square and Twilio. Without a secret, the scheme's vector secret is
/// used.
pub fn verify_text(data: &[u8]) {
    let Some(split) = data.windows(2).position(|pair| pair == b"\n\n") else {
        return;
    };
    let (head, body) = (&data[..split], &data[split + 2..]);
    let mut lines = head.split(|byte| *byte == b'\n');
    let Some(first) = lines.next().and_then(|line| std::str::from_utf8(line).ok()) else {
        return;
    };
    let (name, secret) = first.split_once(' ').unwrap_or((first, ""));
    let (secret, url) = match secret.rsplit_once(' ') {
        Some((secret, url)) if URL_SCHEMES.contains(&name) => (secret, url),
        _ => (secret, SIGNED_URL),
    };
    let Some(scheme) = scheme_named(name, url) else {
        return;
    };
    let secret = if secret.is_empty() {
        vector_secret(name)
    } else {
        secret
    };
    let headers: Vec<(String, Vec<u8>)> = lines
        .filter_map(|line| {
            let colon = line.iter().position(|byte| *byte == b':')?;
            let name = String::from_utf8(line[..colon].to_vec()).ok()?;
            let value = line[colon + 1..].trim_ascii_start().to_vec();
            Some((name, value))
        })
        .collect();
    let Ok(builder) = Verifier::builder(scheme.clone()).with_secret(secret) else {
        return;
    };
    let verifier = builder
        .insecure_skip_timestamp_check()
        .build()
        .expect("a verifier with a secret builds");
    let verified = verifier.verify_at(&headers, body, UNIX_EPOCH).is_ok();
    if verified && !body.is_empty() {
        let mut changed = body.to_vec();
        let last = changed.len() - 1;
        changed[last] ^= 0x01;
        assert!(
            verifier.verify_at(&headers, &changed, UNIX_EPOCH).is_err(),
            "a body changed by one byte verified"
        );
    }
    // The tolerance path and the error text must not panic either.
    let strict = Verifier::builder(scheme)
        .with_secret(secret)
        .expect("accepted above")
        .build()
        .expect("builds");
    if let Err(error) = strict.verify_at(&headers, body, SystemTime::now()) {
        let _ = error.to_string();
    }
}

/// Structured input for [`verify_structured`].
#[derive(Debug, Arbitrary)]
pub struct VerifyInput {
    scheme: u8,
    secrets: Vec<String>,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    now: i64,
    past_tolerance: u16,
    future_tolerance: u16,
    id: String,
}

/// Arbitrary headers, body, secrets and clock against every scheme; and
/// what a signer signs, a verifier with the same secrets must accept.
pub fn verify_structured(input: VerifyInput) {
    let names = SCHEMES.len() + URL_SCHEMES.len();
    let index = usize::from(input.scheme) % names;
    let name = SCHEMES
        .get(index)
        .unwrap_or_else(|| &URL_SCHEMES[index - SCHEMES.len()]);
    let scheme = scheme_named(name, SIGNED_URL).expect("known scheme");
    let mut builder = Verifier::builder(scheme.clone())
        .with_past_tolerance(Duration::from_secs(input.past_tolerance.into()))
        .with_future_tolerance(Duration::from_secs(input.future_tolerance.into()));
    let mut accepted = Vec::new();
    for secret in &input.secrets {
        if let Ok(next) = Verifier::builder(scheme.clone()).with_secret(secret) {
            drop(next);
            builder = builder.with_secret(secret).expect("accepted just now");
            accepted.push(secret.as_str());
        }
    }
    let Ok(verifier) = builder.build() else {
        return;
    };
    let now = at(input.now);
    if let Err(error) = verifier.verify_at(&input.headers, &input.body, now) {
        let _ = error.to_string();
    }
    let Ok(signer) = Signer::new(scheme, &accepted) else {
        return;
    };
    let Ok(signed) = signer.sign(&input.id, now, &input.body) else {
        return;
    };
    if let Err(error) = verifier.verify_at(&signed, &input.body, now) {
        panic!("a request signed with the verifier's own secrets failed: {error}");
    }
}

/// An arbitrary request for [`tower_service`].
#[derive(Debug, Arbitrary)]
pub struct RequestInput {
    method: u8,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    declared_length: Option<u32>,
    signed_id: Option<String>,
}

/// The tower service end to end, with the memory inbox: only documented
/// statuses, and no event accepted twice.
pub fn tower_service(input: RequestInput) {
    use bytes::Bytes;
    use http_body_util::Full;
    use tower_service::Service as _;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let verifier = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .expect("valid")
        .build()
        .expect("builds");
    let layer = hooklatch_tower::WebhookLayer::new(verifier)
        .with_body_limit(256)
        .with_inbox(MemoryInbox::new(), "fuzz")
        .expect("valid namespace");
    let mut service = tower_layer_apply(layer);
    let request = || {
        let method = ["POST", "GET", "PUT", "DELETE"][usize::from(input.method) % 4];
        let mut builder = http::Request::builder().method(method).uri("/webhooks");
        for (name, value) in &input.headers {
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_bytes(value),
            ) {
                builder = builder.header(name, value);
            }
        }
        if let Some(length) = input.declared_length {
            builder = builder.header(http::header::CONTENT_LENGTH, length);
        }
        if let Some(id) = &input.signed_id
            && let Ok(signed) = Signer::new(Scheme::standard_webhooks(), [SECRET])
                .expect("valid")
                .sign(id, SystemTime::now(), &input.body)
        {
            for (name, value) in signed.iter() {
                builder = builder.header(name, value);
            }
        }
        builder.body(Full::new(Bytes::from(input.body.clone())))
    };
    let Ok(first) = request() else {
        return;
    };
    // The layer bounds the body read in time: it needs tokio's timers, as
    // any axum or hyper server runtime has.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let status = runtime
        .block_on(service.call(first))
        .expect("infallible")
        .status()
        .as_u16();
    assert!(
        [200, 202, 400, 413].contains(&status),
        "undocumented status {status}"
    );
    if status == 202 {
        let again = request().expect("built once already");
        let status = runtime
            .block_on(service.call(again))
            .expect("infallible")
            .status()
            .as_u16();
        assert_eq!(status, 200, "an accepted event was accepted again");
    }
}

fn tower_layer_apply(
    layer: hooklatch_tower::WebhookLayer<hooklatch_tower::InboxMode<MemoryInbox>>,
) -> hooklatch_tower::WebhookService<inner::Ok200, hooklatch_tower::InboxMode<MemoryInbox>> {
    use tower_layer::Layer as _;
    layer.layer(inner::Ok200)
}

mod inner {
    //! The inner service: answers 200 (inbox mode never calls it).
    use std::convert::Infallible;
    use std::future::{Ready, ready};
    use std::task::{Context, Poll};

    use bytes::Bytes;
    use http_body_util::Full;

    #[derive(Debug, Clone, Copy)]
    pub struct Ok200;

    impl tower_service::Service<http::Request<Full<Bytes>>> for Ok200 {
        type Response = http::Response<Full<Bytes>>;
        type Error = Infallible;
        type Future = Ready<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<Full<Bytes>>) -> Self::Future {
            ready(Ok(http::Response::new(Full::new(Bytes::from_static(
                b"inner",
            )))))
        }
    }
}

/// Operations for [`sequence`]: `(resource, number)` arrivals.
#[derive(Debug, Arbitrary)]
pub struct SequenceInput {
    arrivals: Vec<(u8, u64)>,
}

/// The tracker and the reorder buffer: no step applied twice, applied
/// numbers increasing per resource, the buffer within its bound.
pub fn sequence(input: SequenceInput) {
    const MAX_HELD: usize = 64;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let tracker = Tracker::new(MemorySequences::new());
        let mut buffer = ReorderBuffer::new(Duration::from_secs(60))
            .with_max_held(MAX_HELD)
            .with_max_ahead(32);
        let now = std::time::Instant::now();
        let mut applied: std::collections::HashMap<String, Vec<u64>> = Default::default();
        for (resource, sequence) in input.arrivals {
            let resource = format!("r{}", resource % 4);
            let Ok(observation) = tracker.observe(&resource, sequence).await else {
                continue;
            };
            match observation {
                Observation::Apply => {
                    assert!(tracker.commit(&resource, sequence).await.expect("commit"));
                    let log = applied.entry(resource.clone()).or_default();
                    log.push(sequence);
                    for (next, ()) in buffer.release(&resource, sequence) {
                        assert!(tracker.commit(&resource, next).await.expect("commit"));
                        log.push(next);
                    }
                }
                Observation::Stale { .. } => {}
                Observation::Gap { expected, got } => {
                    if let Held::Refused(()) = buffer.hold(&resource, expected, got, (), now) {
                        // A refetch would commit `got`; skip it here.
                    }
                }
            }
            assert!(buffer.len() <= MAX_HELD);
        }
        for (resource, log) in applied {
            assert!(
                log.windows(2).all(|pair| pair[0] < pair[1]),
                "{resource}: applied out of order or twice: {log:?}"
            );
        }
    });
}

/// `Retry-After` values: never a wait above the cap, and a plain number is
/// read as that many seconds.
pub fn retry_after(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let now = SystemTime::now();
    if let Some(wait) = parse_retry_after(text, now) {
        assert!(wait <= MAX_RETRY_AFTER, "{text:?} waits {wait:?}");
        if let Ok(seconds) = text.trim().parse::<u64>() {
            assert_eq!(wait.as_secs(), seconds.min(MAX_RETRY_AFTER.as_secs()));
        }
    }
}

/// The SSRF guard against the client's own reading of the same string.
/// For any URL the guard allows, the address reqwest would connect to is
/// allowed by the policy. reqwest sends to the guard's `Url`, turns it into
/// an `http::Uri` with `url.as_str().parse()` (its `try_uri`), and
/// hyper-util's connector strips the brackets and connects straight to a
/// host that parses as an `Ipv4Addr` or `Ipv6Addr`, resolving anything else
/// through the guarded resolver (which checks every address it returns).
/// Also: a looser policy allows whatever a stricter one does, and metadata
/// addresses are refused under every policy.
pub fn url_guard(data: &[u8]) {
    let policies = [
        AddressPolicy::strict(),
        AddressPolicy::strict()
            .insecure_allow_range("10.20.0.0/16".parse().expect("a range"))
            .with_denied_range("10.20.5.0/24".parse().expect("a range")),
        AddressPolicy::strict()
            .insecure_allow_loopback()
            .insecure_allow_private(),
    ];
    if data.len() == 16 || data.len() == 4 {
        let address = match <[u8; 16]>::try_from(data) {
            Ok(bytes) => std::net::IpAddr::from(bytes),
            Err(_) => std::net::IpAddr::from(<[u8; 4]>::try_from(data).expect("4 bytes")),
        };
        let verdicts = policies
            .each_ref()
            .map(|policy| check_address(address, policy));
        if verdicts[0].is_ok() {
            assert!(verdicts[2].is_ok(), "{address}");
        }
        if verdicts.contains(&Err(Forbidden::Metadata)) {
            assert!(
                verdicts
                    .iter()
                    .all(|verdict| *verdict == Err(Forbidden::Metadata))
            );
        }
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let verdicts = policies.each_ref().map(|policy| check_url(text, policy));
    if verdicts[0].is_ok() {
        assert!(verdicts[2].is_ok(), "{text:?}");
    }
    for (policy, verdict) in policies.iter().zip(&verdicts) {
        let Ok(url) = verdict else {
            continue;
        };
        // What the client does with the guard's `Url`.
        let Ok(uri) = url.as_str().parse::<http::Uri>() else {
            continue; // reqwest refuses to send it
        };
        let host = uri.host().expect("an http(s) URL has a host");
        let bare = host
            .strip_prefix('[')
            .and_then(|host| host.strip_suffix(']'))
            .unwrap_or(host);
        match bare.parse::<std::net::IpAddr>() {
            Ok(address) => assert_eq!(check_address(address, policy), Ok(()), "{text:?}"),
            // A name goes to the resolver as the guard saw it.
            Err(_) => assert_eq!(Some(bare), url.domain(), "{text:?}"),
        }
        assert_eq!(uri.port_u16(), url.port(), "{text:?}");
    }
}

/// RFC 9421 message signatures, as text: `METHOD URL\nname: value\n...
/// \n\nbody`, verified against the RFC's shared secret and Ed25519 key at
/// the RFC's time. Whatever verifies with a body fails with that body
/// changed by one byte (a body is always bound by `Content-Digest`).
pub fn message_signature(data: &[u8]) {
    // A JSON object is a key set: the other parser a message signature's
    // keys come through.
    if data.first() == Some(&b'{') {
        jwk_set(data);
        return;
    }
    let _ = message_signature_verifies(data);
}

/// Reads `data` as a JSON Web Key Set: never a panic, and what it keeps
/// is at most 64 keys, each with a distinct, non-empty `kid`.
pub fn jwk_set(data: &[u8]) {
    use hooklatch::verify::message::MessageKey;
    if let Ok(keys) = MessageKey::from_jwk_set(data) {
        assert!(!keys.is_empty() && keys.len() <= 64);
        for (at, key) in keys.iter().enumerate() {
            assert!(!key.id().is_empty());
            assert!(keys[..at].iter().all(|other| other.id() != key.id()));
        }
    }
}

/// [`message_signature`]'s body: whether `data` verified.
pub fn message_signature_verifies(data: &[u8]) -> bool {
    use hooklatch::verify::message::{MessageKey, MessageRequest, MessageVerifier};

    let Some(split) = data.windows(2).position(|pair| pair == b"\n\n") else {
        return false;
    };
    let (head, body) = (&data[..split], &data[split + 2..]);
    let Ok(head) = std::str::from_utf8(head) else {
        return false;
    };
    let mut lines = head.lines();
    let Some((method, target)) = lines.next().and_then(|line| line.split_once(' ')) else {
        return false;
    };
    let mut headers = http::HeaderMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_str(value.trim_start()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    let Ok(request) = MessageRequest::new(method, target, &headers) else {
        return false;
    };
    let secret = base64_decode(
        "uzvJfB4u3N0Jy4T7NZ75MDVcr8zSTInedJtkgcu46YW4XByzNJjxBdtjUkdJPBtbmHhIDi6pcl8jsasjlTMtDQ==",
    );
    let public = [
        0x26, 0xb4, 0x0b, 0x8f, 0x93, 0xff, 0xf3, 0xd8, 0x97, 0x11, 0x2f, 0x7e, 0xbc, 0x58, 0x2b,
        0x23, 0x2d, 0xbd, 0x72, 0x51, 0x7d, 0x08, 0x2f, 0xe8, 0x3c, 0xfb, 0x30, 0xdd, 0xce, 0x43,
        0xd1, 0xbb,
    ];
    let verifier = MessageVerifier::builder()
        .with_key(MessageKey::hmac_sha256("test-shared-secret", &secret).expect("the RFC's secret"))
        .with_key(MessageKey::ed25519("test-key-ed25519", &public).expect("the RFC's key"))
        .require(["@authority"])
        .with_max_age(None)
        .build()
        .expect("a verifier");
    let now = 1_618_884_473;
    let verified = verifier.verify_at(&request, body, now).is_ok();
    if verified && !body.is_empty() {
        let mut changed = body.to_vec();
        changed[0] ^= 1;
        assert!(
            verifier.verify_at(&request, &changed, now).is_err(),
            "a changed body verified"
        );
    }
    verified
}

fn base64_decode(text: &str) -> Vec<u8> {
    base64::Engine::decode(&base64::engine::general_purpose::STANDARD, text).expect("valid base64")
}
