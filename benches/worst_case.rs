//! What a forged request can cost: per scheme, the worst request anyone can
//! send without a secret (a 1 MiB body and as many junk signatures as the
//! header may carry, 16, or the one a single-signature scheme takes) next to
//! one genuine verification of the same body, in one run.
//!
//! Run with: cargo bench --bench worst_case --features ed25519
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

const BODY_LEN: usize = 1024 * 1024;

/// One scheme to measure: how to build it, the secret it signs with, the
/// key its verifier holds, and how a junk signature is written.
struct Case {
    label: &'static str,
    scheme: fn() -> Scheme,
    signing_secret: String,
    verifying_secret: String,
    /// Builds the forged header value from the genuine one.
    forge: fn(&str) -> String,
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

fn cases() -> Vec<Case> {
    let seed = [7u8; 32];
    let public = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
    let hmac = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned();
    vec![
        Case {
            label: "standard_v1_hmac",
            scheme: Scheme::standard_webhooks,
            signing_secret: hmac.clone(),
            verifying_secret: hmac,
            forge: |genuine| repeat(&flip_last(genuine.trim_end_matches('=')), " "),
        },
        Case {
            label: "standard_v1a_ed25519",
            scheme: Scheme::standard_webhooks,
            signing_secret: format!("whsk_{}", STANDARD.encode(seed)),
            verifying_secret: format!("whpk_{}", STANDARD.encode(public.to_bytes())),
            forge: |_| repeat(&format!("v1a,{}", STANDARD.encode([9u8; 64])), " "),
        },
        Case {
            label: "stripe",
            scheme: Scheme::stripe,
            signing_secret: "whsec_stripe_bench_secret".into(),
            verifying_secret: "whsec_stripe_bench_secret".into(),
            forge: |genuine| {
                let (timestamp, signature) = genuine.split_once(',').expect("t=..,v1=..");
                format!("{timestamp},{}", repeat(&flip_last(signature), ","))
            },
        },
        Case {
            label: "github",
            scheme: Scheme::github,
            signing_secret: "It's a Secret to Everybody".into(),
            verifying_secret: "It's a Secret to Everybody".into(),
            forge: flip_last,
        },
        Case {
            label: "slack",
            scheme: Scheme::slack,
            signing_secret: "8f742231b10e8888abcd99yyyzzz85a5".into(),
            verifying_secret: "8f742231b10e8888abcd99yyyzzz85a5".into(),
            forge: flip_last,
        },
    ]
}

fn bench(c: &mut Criterion) {
    let body = vec![b'a'; BODY_LEN];
    let mut group = c.benchmark_group("worst_case");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .throughput(Throughput::Bytes(BODY_LEN as u64));
    for case in cases() {
        let scheme = (case.scheme)();
        let signature_header = scheme.signature_header().to_owned();
        let now = SystemTime::now();
        let signed = Signer::new(scheme.clone(), [&case.signing_secret])
            .unwrap()
            .sign("msg_p5jXN8AQM9LWM0D4loKWxJek", now, &body)
            .unwrap();
        let genuine: Vec<(String, String)> = signed
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        let forged: Vec<(String, String)> = genuine
            .iter()
            .map(|(name, value)| {
                let value = if name.eq_ignore_ascii_case(&signature_header) {
                    (case.forge)(value)
                } else {
                    value.clone()
                };
                (name.clone(), value)
            })
            .collect();
        let verifier = Verifier::builder(scheme)
            .with_secret(&case.verifying_secret)
            .unwrap()
            .with_body_limit(BODY_LEN)
            .build()
            .unwrap();
        assert!(
            verifier.verify_at(&genuine, &body, now).is_ok(),
            "{}",
            case.label
        );
        assert!(
            verifier.verify_at(&forged, &body, now).is_err(),
            "{}",
            case.label
        );
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
                    .verify_at(black_box(&forged), black_box(&body), now)
                    .is_err()
            })
        });
    }
    group.finish();
}

fn print_ratios() {
    println!("\n| scheme (1 MiB body) | genuine | worst forged | forged / genuine |");
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
