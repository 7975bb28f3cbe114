//! Replays, in the normal test run, every fuzz crasher ever found
//! (`tests/fuzz_regressions/<target>/`) and every seed
//! (`fuzz/seeds/<target>/`) through the fuzz targets' own code.

#[allow(dead_code, unreachable_pub, missing_docs)]
#[path = "../fuzz/src/lib.rs"]
mod targets;

use arbitrary::{Arbitrary, Unstructured};

/// The package's folder as cargo names it to this run; the path compiled
/// in may be another checkout's, where a build cache is shared between
/// checkouts and this binary was found fresh.
fn package_root() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || env!("CARGO_MANIFEST_DIR").into(),
        std::path::PathBuf::from,
    )
}

/// Runs `target` on every file of the target's regression and seed folders;
/// returns how many ran.
fn replay(target: &str, run: impl Fn(&[u8])) -> usize {
    let root = package_root();
    let mut ran = 0;
    for folder in [
        root.join("tests/fuzz_regressions").join(target),
        root.join("fuzz/seeds").join(target),
    ] {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("readable folder").path();
            let data = std::fs::read(&path).expect("readable file");
            run(&data);
            ran += 1;
        }
    }
    ran
}

fn structured<T: for<'a> Arbitrary<'a>>(data: &[u8], run: impl Fn(T)) {
    if let Ok(input) = T::arbitrary_take_rest(Unstructured::new(data)) {
        run(input);
    }
}

#[test]
fn verify_text_replays_seeds_and_crashers() {
    let ran = replay("verify_text", targets::verify_text);
    assert!(ran >= 10, "the known-answer seeds are there: {ran}");
}

#[test]
fn verify_structured_replays_crashers() {
    replay("verify_structured", |data| {
        structured(data, targets::verify_structured)
    });
}

#[test]
fn tower_service_replays_crashers() {
    replay("tower_service", |data| {
        structured(data, targets::tower_service)
    });
}

#[test]
fn sequence_replays_crashers() {
    replay("sequence", |data| structured(data, targets::sequence));
}

#[test]
fn message_signature_replays_seeds_and_crashers() {
    let ran = replay("message_signature", targets::message_signature);
    assert!(
        ran >= 3,
        "the RFC's examples and a key set are seeds: {ran}"
    );
}

#[test]
fn the_key_set_seed_reads_as_its_two_usable_keys() {
    let data =
        std::fs::read(package_root().join("fuzz/seeds/message_signature/jwk-set-ed25519-p256"))
            .unwrap();
    let keys = hooklatch::verify::message::MessageKey::from_jwk_set(&data).unwrap();
    let ids: Vec<&str> = keys.iter().map(|key| key.id()).collect();
    assert_eq!(ids, ["test-key-ed25519", "test-key-ecc-p256"]);
}

#[test]
fn the_message_signature_seeds_are_the_rfcs_verified_examples() {
    // The seeds must verify, or the fuzzer starts from nothing signed.
    for name in ["rfc-9421-b-2-5", "rfc-9421-b-2-6"] {
        let path = package_root()
            .join("fuzz/seeds/message_signature")
            .join(name);
        let data = std::fs::read(path).unwrap();
        assert!(targets::message_signature_verifies(&data), "{name}");
    }
}

#[test]
fn retry_after_replays_seeds_and_crashers() {
    replay("retry_after", targets::retry_after);
}

#[test]
fn url_guard_replays_seeds_and_crashers() {
    replay("url_guard", targets::url_guard);
}

#[test]
fn every_seed_vector_verifies_through_the_text_target() {
    // The seeds are valid requests, so the target's "a changed body fails"
    // check runs on each; make sure the format keeps them valid.
    let root = package_root().join("fuzz/seeds/verify_text");
    for entry in std::fs::read_dir(root).expect("seeds") {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        let split = data.windows(2).position(|pair| pair == b"\n\n").unwrap();
        let text = String::from_utf8_lossy(&data[..split]).to_string();
        let mut lines = text.lines();
        let first = lines.next().unwrap();
        let (name, secret) = first.split_once(' ').unwrap_or((first, ""));
        let (scheme, secret) = match name {
            "square" | "twilio" => {
                let (secret, url) = secret.rsplit_once(' ').unwrap();
                let scheme = if name == "square" {
                    hooklatch::verify::Scheme::square(url)
                } else {
                    hooklatch::verify::Scheme::twilio(url)
                };
                (scheme.unwrap(), secret)
            }
            _ => (hooklatch::verify::Scheme::by_name(name).unwrap(), secret),
        };
        let secret = match (secret, name) {
            ("", "standard" | "svix") => "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            ("", "stripe") => "secret",
            ("", "github") => "It's a Secret to Everybody",
            ("", "shopify") => "shop-secret",
            ("", _) => "8f742231b10e8888abcd99yyyzzz85a5",
            (given, _) => given,
        };
        let headers: Vec<(String, String)> = lines
            .map(|line| {
                let (name, value) = line.split_once(": ").unwrap();
                (name.to_owned(), value.to_owned())
            })
            .collect();
        let verifier = hooklatch::verify::Verifier::builder(scheme)
            .with_secret(secret)
            .unwrap()
            .insecure_skip_timestamp_check()
            .build()
            .unwrap();
        let body = &data[split + 2..];
        assert!(
            verifier
                .verify_at(&headers, body, std::time::SystemTime::now())
                .is_ok(),
            "{text}"
        );
    }
}
