//! What a forged request can cost: per scheme, at its default body limit,
//! the worst request anyone can send without a secret (as many junk
//! signatures as the header may carry, 16, or the one a single-signature
//! scheme takes; for Twilio, a form of the most pairs it reads; for
//! ed25519, also a verifier holding 16 public keys) next to one genuine
//! verification of a body of the same size, in one run.
//!
//! Run with: cargo bench --bench worst_case --features ed25519,p256,sha1
//!
//! After criterion's own report, prints a table of medians and ratios.

#[path = "common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use criterion::{BenchmarkId, Criterion, Throughput};
use hooklatch::verify::{MAX_SIGNATURES, Scheme, Signer, Verifier};

const HEX_KEY_PAIR: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60\
                            d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
const TWILIO_URL: &str = "https://example.com/twilio/sms";

type Headers = Vec<(String, String)>;

/// A request as the bench sends it: headers and body.
type Request = (Headers, Vec<u8>);

/// Makes the forged request from the genuine one's headers and body.
type Forger = Box<dyn Fn(&Headers, &[u8]) -> Request>;

/// One scheme to measure: how to build it, the headers and body of a
/// genuine request, the key its verifier holds, and the forged request.
struct Case {
    label: &'static str,
    scheme: fn() -> Scheme,
    verifying_secrets: Vec<String>,
    /// The genuine request's headers and body, at the body limit given.
    genuine: Box<dyn Fn(SystemTime, usize) -> Request>,
    /// The forged request, from the genuine one.
    forge: Forger,
}

/// Changes the last character of a signature, keeping it decodable.
fn flip_last(signature: &str) -> String {
    let mut text = signature.to_owned();
    let last = text.pop().unwrap_or('0');
    text.push(if last == 'A' || last == '0' { 'B' } else { 'A' });
    text
}

fn repeat(token: &str, separator: &str) -> String {
    vec![token; MAX_SIGNATURES].join(separator)
}

/// A body of `len` bytes that is a JSON object, as most providers send.
fn json_body(len: usize) -> Vec<u8> {
    let mut body = br#"{"type":"bench.event","padding":""#.to_vec();
    body.resize(len - 2, b'a');
    body.extend_from_slice(b"\"}");
    body
}

/// Twilio's form of `len` bytes in `pairs` pairs.
fn twilio_form(len: usize, pairs: usize) -> Vec<u8> {
    let each = len / pairs;
    let mut body = Vec::with_capacity(len);
    for n in 0..pairs {
        if n > 0 {
            body.push(b'&');
        }
        let name = format!("P{n:03}=");
        body.extend_from_slice(name.as_bytes());
        body.resize(body.len() + each.saturating_sub(name.len() + 1), b'a');
    }
    body
}

/// The signature header's value changed by `change`; other headers kept.
fn with_signature(scheme: &Scheme, headers: &Headers, change: impl Fn(&str) -> String) -> Headers {
    headers
        .iter()
        .map(|(name, value)| {
            let value = if name.eq_ignore_ascii_case(scheme.signature_header()) {
                change(value)
            } else {
                value.clone()
            };
            (name.clone(), value)
        })
        .collect()
}

/// A case whose genuine request `Signer` makes with `secret`, whose body
/// is JSON at the scheme's default limit, and whose forgery rewrites the
/// signature header with `forge`.
fn signed(
    label: &'static str,
    scheme: fn() -> Scheme,
    secret: &str,
    verifying: &str,
    forge: fn(&str) -> String,
) -> Case {
    let secret = secret.to_owned();
    Case {
        label,
        scheme,
        verifying_secrets: vec![verifying.to_owned()],
        genuine: Box::new(move |now, limit| {
            let body = json_body(limit);
            (sign(&scheme(), &secret, now, &body), body)
        }),
        forge: Box::new(move |headers, body| {
            (with_signature(&scheme(), headers, forge), body.to_vec())
        }),
    }
}

fn sign(scheme: &Scheme, secret: &str, now: SystemTime, body: &[u8]) -> Headers {
    Signer::new(scheme.clone(), [secret])
        .unwrap()
        .sign("msg_p5jXN8AQM9LWM0D4loKWxJek", now, body)
        .unwrap()
        .iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

fn twilio() -> Scheme {
    Scheme::twilio(TWILIO_URL).unwrap()
}

fn cases() -> Vec<Case> {
    let seed = [7u8; 32];
    let public = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
    let whpk = |seed: [u8; 32]| {
        let public = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
        format!("whpk_{}", STANDARD.encode(public.to_bytes()))
    };
    let hmac = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let text = "It's a Secret to Everybody";
    let mut cases = vec![
        signed(
            "standard_v1_hmac",
            Scheme::standard_webhooks,
            hmac,
            hmac,
            |genuine| repeat(&flip_last(genuine.trim_end_matches('=')), " "),
        ),
        signed("svix", Scheme::svix, hmac, hmac, |genuine| {
            repeat(&flip_last(genuine.trim_end_matches('=')), " ")
        }),
        signed(
            "stripe",
            Scheme::stripe,
            "whsec_stripe_bench_secret",
            "whsec_stripe_bench_secret",
            |genuine| {
                let (timestamp, signature) = genuine.split_once(',').expect("t=..,v1=..");
                format!("{timestamp},{}", repeat(&flip_last(signature), ","))
            },
        ),
        signed("github", Scheme::github, text, text, flip_last),
        signed("shopify", Scheme::shopify, text, text, flip_last),
        signed("slack", Scheme::slack, text, text, flip_last),
        signed("meta", Scheme::meta, text, text, flip_last),
        signed("twitch", Scheme::twitch, text, text, flip_last),
        signed("zoom", Scheme::zoom, text, text, flip_last),
        signed("paddle", Scheme::paddle, text, text, |genuine| {
            let (timestamp, signature) = genuine.split_once(';').expect("ts=..;h1=..");
            format!("{timestamp};{}", repeat(&flip_last(signature), ";"))
        }),
        signed("convoy", Scheme::convoy, text, text, |genuine| {
            let (timestamp, signature) = genuine.split_once(',').expect("t=..,v1=..");
            format!("{timestamp},{}", repeat(&flip_last(signature), ","))
        }),
        signed("outpost", Scheme::outpost, text, text, |genuine| {
            let signature = genuine.strip_prefix("v0=").expect("v0=..");
            format!("v0={}", repeat(&flip_last(signature), ","))
        }),
        signed("x", Scheme::x, text, text, flip_last),
        signed(
            "standard_v1a_ed25519",
            Scheme::standard_webhooks,
            &format!("whsk_{}", STANDARD.encode(seed)),
            &format!("whpk_{}", STANDARD.encode(public.to_bytes())),
            |_| repeat(&format!("v1a,{}", STANDARD.encode([9u8; 64])), " "),
        ),
        signed(
            "discord_ed25519",
            Scheme::discord,
            HEX_KEY_PAIR,
            &HEX_KEY_PAIR[64..],
            flip_last,
        ),
    ];
    // Sixteen public keys, the signer's last: the cap is per request.
    let mut sixteen = signed(
        "standard_v1a_ed25519_16_keys",
        Scheme::standard_webhooks,
        &format!("whsk_{}", STANDARD.encode(seed)),
        &format!("whpk_{}", STANDARD.encode(public.to_bytes())),
        |_| repeat(&format!("v1a,{}", STANDARD.encode([9u8; 64])), " "),
    );
    let mut keys: Vec<String> = (1..16u8).map(|n| whpk([n; 32])).collect();
    keys.append(&mut sixteen.verifying_secrets);
    sixteen.verifying_secrets = keys;
    cases.push(sixteen);
    // SendGrid: ECDSA P-256, signed here with the p256 crate (the Signer
    // has no SendGrid signing); the forgery carries junk DER signatures.
    cases.push(sendgrid());
    // Twilio: a genuine form of a few dozen pairs at the limit, and a
    // forged one of the most pairs read.
    cases.push(Case {
        label: "twilio_form",
        scheme: twilio,
        verifying_secrets: vec![text.to_owned()],
        genuine: Box::new(|now, limit| {
            let body = twilio_form(limit, 30);
            (sign(&twilio(), text, now, &body), body)
        }),
        forge: Box::new(|headers, body| {
            let forged = twilio_form(body.len(), 256);
            (with_signature(&twilio(), headers, flip_last), forged)
        }),
    });
    cases
}

fn sendgrid() -> Case {
    use p256::ecdsa::signature::Signer as _;
    // SubjectPublicKeyInfo for an uncompressed P-256 point: this fixed
    // header (id-ecPublicKey, prime256v1), then the point's 65 bytes.
    const SPKI_HEADER: [u8; 26] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    let signing = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
    let point = signing.verifying_key().to_sec1_point(false);
    let public = STANDARD.encode([&SPKI_HEADER[..], point.as_bytes()].concat());
    Case {
        label: "sendgrid_p256",
        scheme: Scheme::sendgrid,
        verifying_secrets: vec![public],
        genuine: Box::new(move |now, limit| {
            let body = json_body(limit);
            let timestamp = now
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                .to_string();
            let signed = [timestamp.as_bytes(), &body].concat();
            let signature: p256::ecdsa::Signature = signing.sign(&signed);
            let headers = vec![
                (
                    "x-twilio-email-event-webhook-signature".to_owned(),
                    STANDARD.encode(signature.to_der().as_bytes()),
                ),
                (
                    "x-twilio-email-event-webhook-timestamp".to_owned(),
                    timestamp,
                ),
            ];
            (headers, body)
        }),
        // One signature per header: the forgery is one well-formed
        // signature by another key, checked in full.
        forge: Box::new(|headers, body| {
            let other = p256::ecdsa::SigningKey::from_slice(&[8u8; 32]).unwrap();
            let timestamp = &headers[1].1;
            let signed = [timestamp.as_bytes(), body].concat();
            let signature: p256::ecdsa::Signature = other.sign(&signed);
            let forged = STANDARD.encode(signature.to_der().as_bytes());
            let headers = with_signature(&Scheme::sendgrid(), headers, |_| forged.clone());
            (headers, body.to_vec())
        }),
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("worst_case");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    for case in cases() {
        let mut builder = Verifier::builder((case.scheme)());
        for secret in &case.verifying_secrets {
            builder = builder.with_secret(secret).unwrap();
        }
        let verifier = builder.build().unwrap();
        let now = SystemTime::now();
        let (genuine, body) = (case.genuine)(now, verifier.body_limit());
        let (forged, forged_body) = (case.forge)(&genuine, &body);
        assert!(
            verifier.verify_at(&genuine, &body, now).is_ok(),
            "{}",
            case.label
        );
        assert!(
            verifier.verify_at(&forged, &forged_body, now).is_err(),
            "{}",
            case.label
        );
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(BenchmarkId::new("genuine", case.label), |b| {
            b.iter(|| {
                verifier
                    .verify_at(black_box(&genuine), black_box(&body), now)
                    .is_ok()
            })
        });
        group.bench_function(BenchmarkId::new("forged", case.label), |b| {
            b.iter(|| {
                verifier
                    .verify_at(black_box(&forged), black_box(&forged_body), now)
                    .is_err()
            })
        });
    }
    group.finish();
}

fn print_ratios() {
    println!(
        "\n| scheme (body at its default limit) | genuine | worst forged | forged / genuine |"
    );
    println!("|---|---|---|---|");
    for case in cases() {
        let (Some(genuine), Some(forged)) = (
            common::median_ns(&format!("worst_case/genuine/{}", case.label)),
            common::median_ns(&format!("worst_case/forged/{}", case.label)),
        ) else {
            println!("| {} | (filtered out) | | |", case.label);
            continue;
        };
        println!(
            "| {} | {:.0} us | {:.0} us | {:.2}x |",
            case.label,
            genuine / 1000.0,
            forged / 1000.0,
            forged / genuine
        );
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    print_ratios();
}
