//! `hooklatch verify --message-key`: an HTTP message signature (RFC 9421)
//! made by the library's `MessageSigner`, captured as a raw request, checked
//! as it arrived; then changed on its way the usual ways (a proxy's scheme,
//! host or path, a body changed after it was digested, an old capture), each
//! rejected and, with `--explain`, named.

mod common;

use base64::Engine as _;
use hooklatch::verify::message::{MessageRequest, MessageSigner, content_digest};

const KEY_ID: &str = "partner-7";
const SECRET: &[u8] = b"a shared secret of 32 bytes or more";
const CREATED: i64 = 1_700_000_000;
const BODY: &[u8] = br#"{"type":"invoice.paid"}"#;

/// A raw request for `target_uri` as the sender signed it at `CREATED`,
/// with `covering` covered (the signer's defaults when empty), written as
/// the receiver got it: `request_target` in the request line and `host`
/// (plus `extra` headers) as a proxy may have set them, and `body`.
struct Capture<'a> {
    target_uri: &'a str,
    covering: &'a [&'a str],
    request_target: &'a str,
    host: &'a str,
    extra: &'a [&'a str],
    body: &'a [u8],
}

impl Capture<'_> {
    fn signed(target_uri: &str) -> Capture<'_> {
        let path = target_uri.splitn(4, '/').nth(3).unwrap_or_default();
        Capture {
            target_uri,
            covering: &[],
            request_target: Box::leak(format!("/{path}").into_boxed_str()),
            host: target_uri.split('/').nth(2).unwrap(),
            extra: &[],
            body: BODY,
        }
    }

    fn raw(&self) -> Vec<u8> {
        let mut headers = http::HeaderMap::new();
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("content-digest", content_digest(BODY).parse().unwrap());
        let request = MessageRequest::new("POST", self.target_uri, &headers).unwrap();
        let mut signer = MessageSigner::hmac_sha256(KEY_ID, SECRET).unwrap();
        if !self.covering.is_empty() {
            signer = signer.covering(self.covering.iter().copied());
        }
        let signed = signer
            .sign("sig1", &request, CREATED, Some("evt_1"))
            .unwrap();
        let mut raw = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Digest: {}\r\nSignature-Input: {}\r\nSignature: {}\r\n",
            self.request_target,
            self.host,
            content_digest(BODY),
            signed.signature_input,
            signed.signature
        );
        for line in self.extra {
            raw.push_str(line);
            raw.push_str("\r\n");
        }
        raw.push_str(&format!("Content-Length: {}\r\n\r\n", self.body.len()));
        let mut raw = raw.into_bytes();
        raw.extend_from_slice(self.body);
        raw
    }
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn hooklatch(args: &[&str], stdin: &[u8]) -> Run {
    let output = common::hooklatch(args, stdin);
    Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

fn key_arg() -> String {
    format!(
        "{KEY_ID}=hmac-sha256:{}",
        base64::engine::general_purpose::STANDARD.encode(SECRET)
    )
}

/// `verify --message-key` on `capture` at `now`, with `--explain` and
/// `more` flags.
fn verify(capture: &Capture<'_>, now: i64, more: &[&str]) -> Run {
    let now = now.to_string();
    verify_with(capture, &[&["--now", &now], more].concat())
}

/// `verify --message-key --explain` on `capture` with `more` flags.
fn verify_with(capture: &Capture<'_>, more: &[&str]) -> Run {
    let key = key_arg();
    let mut args = vec![
        "verify",
        "--message-key",
        &key,
        "--request",
        "-",
        "--explain",
    ];
    args.extend_from_slice(more);
    hooklatch(&args, &capture.raw())
}

/// Rejected (exit 1), with exactly one finding, the one holding `finding`.
fn assert_explains(run: &Run, finding: &str) {
    assert_eq!(run.code, Some(1), "{}{}", run.stdout, run.stderr);
    let mut lines = run.stdout.lines();
    assert!(
        lines.next().unwrap().starts_with("rejected: "),
        "{}",
        run.stdout
    );
    let findings: Vec<&str> = lines.collect();
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert!(findings[0].contains(finding), "{findings:?}");
}

#[test]
fn a_captured_message_signature_verifies_with_its_key_and_prints_its_claim() {
    let capture = Capture::signed("https://hooks.example/in/acme?x=1");
    let run = verify(&capture, CREATED + 5, &[]);
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stdout.trim(),
        "ok key=partner-7 label=sig1 created=1700000000 nonce=evt_1 claim=nonce:partner-7:evt_1"
    );
    // The same request given by flags instead of a capture.
    let raw = capture.raw();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let (key, now) = (key_arg(), (CREATED + 5).to_string());
    let mut args = vec![
        "verify",
        "--message-key",
        &key,
        "--url",
        "https://hooks.example/in/acme?x=1",
        "--now",
        &now,
        "--body-file",
        "-",
    ];
    for line in head.lines().skip(1) {
        args.extend(["-H", line]);
    }
    let run = hooklatch(&args, body.as_bytes());
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
}

#[test]
fn explain_names_the_scheme_a_proxy_ended_tls_for() {
    // Signed for http, checked as https (the default).
    let capture = Capture::signed("http://hooks.example/in/acme");
    assert_explains(
        &verify(&capture, CREATED, &[]),
        "the client used http, not https",
    );
}

#[test]
fn explain_names_the_scheme_of_an_absolute_url() {
    // Signed for http, checked with --url naming https.
    let capture = Capture::signed("http://hooks.example/in/acme");
    assert_explains(
        &verify(
            &capture,
            CREATED,
            &["--url", "https://hooks.example/in/acme"],
        ),
        "the client used http, not https (the URL's scheme)",
    );
}

#[test]
fn explain_names_the_host_or_port_a_proxy_rewrote() {
    let capture = Capture {
        host: "backend.internal:8080",
        extra: &["X-Forwarded-Host: hooks.example"],
        ..Capture::signed("https://hooks.example/in/acme")
    };
    assert_explains(&verify(&capture, CREATED, &[]), "X-Forwarded-Host");
    let capture = Capture {
        host: "hooks.example:8443",
        ..Capture::signed("https://hooks.example/in/acme")
    };
    assert_explains(
        &verify(&capture, CREATED, &[]),
        "the host without its port, `hooks.example`",
    );
}

#[test]
fn explain_names_the_path_prefix_a_proxy_stripped() {
    let capture = Capture {
        request_target: "/acme",
        extra: &["X-Forwarded-Prefix: /in"],
        ..Capture::signed("https://hooks.example/in/acme")
    };
    assert_explains(&verify(&capture, CREATED, &[]), "prefix `/in`");
}

#[test]
fn explain_names_a_body_changed_after_it_was_digested() {
    let changed = [BODY, b"\n"].concat();
    let capture = Capture {
        body: &changed,
        ..Capture::signed("https://hooks.example/in/acme")
    };
    assert_explains(
        &verify(&capture, CREATED, &[]),
        "the body without its trailing newline",
    );
}

#[test]
fn explain_names_an_expired_capture_and_a_body_outside_the_signature() {
    let capture = Capture::signed("https://hooks.example/in/acme");
    assert_explains(
        &verify(&capture, CREATED + 3600, &[]),
        "signature matches: only its time failed",
    );
    let run = verify_with(&capture, &["--ignore-timestamp"]);
    assert_eq!(run.code, Some(0), "{}", run.stdout);

    let unbound = Capture {
        covering: &["@method", "@target-uri"],
        ..Capture::signed("https://hooks.example/in/acme")
    };
    assert_explains(
        &verify(&unbound, CREATED, &[]),
        "does not cover content-digest, so nothing binds the body",
    );
}

#[test]
fn bad_message_flags_are_usage_errors() {
    let capture = Capture::signed("https://hooks.example/in/acme");
    for args in [
        &[
            "verify",
            "--message-key",
            "no-equals-sign",
            "--request",
            "-",
        ][..],
        &[
            "verify",
            "--message-key",
            "k=rsa-pss:AAAA",
            "--request",
            "-",
        ],
        &[
            "verify",
            "--message-key",
            "k=hmac-sha256:not base64!",
            "--request",
            "-",
        ],
        &[
            "verify",
            "--url",
            "https://a.example/",
            "--secret",
            "s",
            "--request",
            "-",
        ],
        &[
            "verify",
            "--message-key",
            "k=hmac-sha256:AAAA",
            "--scheme",
            "github",
            "--request",
            "-",
        ],
    ] {
        let run = hooklatch(args, &capture.raw());
        assert_eq!(run.code, Some(2), "{args:?}: {}{}", run.stdout, run.stderr);
        assert!(!run.stderr.is_empty(), "{args:?}");
    }
    // No request line and no --url: nothing to say what was signed.
    let key = key_arg();
    let run = hooklatch(
        &[
            "verify",
            "--message-key",
            &key,
            "-H",
            "host: a.example",
            "--body-file",
            "-",
        ],
        b"{}",
    );
    assert_eq!(run.code, Some(2), "{}", run.stdout);
    assert!(run.stderr.contains("--url"), "{}", run.stderr);
}

/// A capture signed by another implementation: Python's own `hmac` and
/// `hashlib` (`fixtures/rfc9421_capture.py`), building the signature base
/// from RFC 9421's text, not from this library. It verifies as sent, and
/// one byte of its body changed fails the digest.
#[test]
fn a_capture_signed_by_python_verifies() {
    let capture = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/rfc9421-hmac.http"
    ))
    .unwrap();
    let key = key_arg();
    let args = [
        "verify",
        "--message-key",
        &key,
        "--request",
        "-",
        "--now",
        "1700000010",
    ];
    let run = hooklatch(&args, &capture);
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stdout.trim(),
        "ok key=partner-7 label=sig1 created=1700000000 nonce=evt_1 claim=nonce:partner-7:evt_1"
    );
    let mut changed = capture;
    *changed.last_mut().unwrap() = b']';
    let run = hooklatch(&args, &changed);
    assert_eq!(run.code, Some(1), "{}", run.stdout);
    assert!(run.stdout.contains("Content-Digest"), "{}", run.stdout);
}
