//! Standard Webhooks verification: hooklatch against the raw HMAC-SHA256
//! floor and the `standardwebhooks` crate, in one run.
//!
//! Run with: cargo bench --bench verify
//!
//! After criterion's own report, prints a table of medians and ratios.

#[path = "common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use criterion::{BenchmarkId, Criterion, Throughput};
use hmac::{KeyInit, Mac};
use hooklatch::verify::{Scheme, Signer, Verifier};
use subtle::ConstantTimeEq;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const SIZES: [(usize, &str); 2] = [(1024, "1KiB"), (64 * 1024, "64KiB")];
const CONTENDERS: [&str; 3] = ["raw_hmac_sha256", "hooklatch", "standardwebhooks"];

fn body(len: usize) -> Vec<u8> {
    // JSON-looking ASCII, as the peer needs UTF-8.
    let mut body = br#"{"type":"invoice.paid","data":""#.to_vec();
    body.resize(len - 2, b'a');
    body.extend_from_slice(b"\"}");
    body
}

fn bench(c: &mut Criterion) {
    let key = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        &SECRET["whsec_".len()..],
    )
    .unwrap();
    let ours = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .unwrap()
        .build()
        .unwrap();
    let theirs = standardwebhooks::Webhook::new(SECRET).unwrap();
    let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap();

    let mut group = c.benchmark_group("verify");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (len, label) in SIZES {
        let body = body(len);
        // The peer reads the system clock, so sign at the current time.
        let now = SystemTime::now();
        let headers = signer.sign(ID, now, &body).unwrap().to_header_map();
        let timestamp = now.duration_since(UNIX_EPOCH).unwrap().as_secs();
        let signed_content = [
            ID.as_bytes(),
            b".",
            timestamp.to_string().as_bytes(),
            b".",
            &body,
        ]
        .concat();
        let expected = {
            let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
            mac.update(&signed_content);
            mac.finalize().into_bytes()
        };
        assert!(ours.verify(&headers, &body).is_ok());
        assert!(theirs.verify(&body, &headers).is_ok());

        group.throughput(Throughput::Bytes(len as u64));
        group.bench_function(BenchmarkId::new(CONTENDERS[0], label), |b| {
            b.iter(|| {
                let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
                mac.update(black_box(&signed_content));
                let tag = mac.finalize().into_bytes();
                assert!(bool::from(tag.ct_eq(&expected)));
            })
        });
        group.bench_function(BenchmarkId::new(CONTENDERS[1], label), |b| {
            b.iter(|| ours.verify(black_box(&headers), black_box(&body)).unwrap())
        });
        group.bench_function(BenchmarkId::new(CONTENDERS[2], label), |b| {
            b.iter(|| {
                theirs
                    .verify(black_box(&body), black_box(&headers))
                    .unwrap()
            })
        });
    }
    group.finish();
}

fn print_ratios() {
    println!(
        "\n| body | raw HMAC-SHA256 | hooklatch | standardwebhooks | hooklatch / raw | standardwebhooks / hooklatch |"
    );
    println!("|---|---|---|---|---|---|");
    for (_, size) in SIZES {
        let [raw, ours, theirs] =
            CONTENDERS.map(|c| common::median_ns(&format!("verify/{c}/{size}")));
        let (Some(raw), Some(ours), Some(theirs)) = (raw, ours, theirs) else {
            println!("| {size} | (filtered out) | | | | |");
            continue;
        };
        let show = |ns: f64| {
            if ns < 10_000.0 {
                format!("{ns:.0} ns")
            } else {
                format!("{:.1} us", ns / 1000.0)
            }
        };
        println!(
            "| {size} | {} | {} | {} | {:.2}x | {:.2}x |",
            show(raw),
            show(ours),
            show(theirs),
            ours / raw,
            theirs / ours
        );
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    print_ratios();
}
