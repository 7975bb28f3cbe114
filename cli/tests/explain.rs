//! `hooklatch verify --explain`: a request signed correctly with the
//! library's `Signer`, then changed on the receiving side the way requests
//! usually are, is rejected as before, and the change is named.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, UNIX_EPOCH};

use hooklatch::verify::{Scheme, Signer};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The secret after `whsec_`.
const UNPREFIXED: &str = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const AT: u64 = 1_614_265_330;
const BODY: &[u8] = br#"{"test": 2432232314}"#;

/// The headers a sender attaches to `body`, as `name: value` lines.
fn sign(signer: &Signer, at: u64, body: &[u8]) -> Vec<String> {
    let at = UNIX_EPOCH + Duration::from_secs(at);
    signer
        .sign("msg_p5jXN8AQM9LWM0D4loKWxJek", at, body)
        .unwrap()
        .iter()
        .map(|(name, value)| format!("{name}: {value}"))
        .collect()
}

fn signer(scheme: Scheme, secret: &str) -> Signer {
    Signer::new(scheme, [secret]).unwrap()
}

/// `headers` with the value of `name` replaced.
fn with_header(headers: &[String], name: &str, value: &str) -> Vec<String> {
    headers
        .iter()
        .map(|line| match line.split_once(": ") {
            Some((key, _)) if key == name => format!("{name}: {value}"),
            _ => line.clone(),
        })
        .collect()
}

struct Run {
    code: Option<i32>,
    stdout: String,
}

/// Runs `hooklatch verify` at the time of signing, the body on stdin.
fn verify(scheme: &str, secret: &str, headers: &[String], body: &[u8], explain: bool) -> Run {
    verify_with(&["--scheme", scheme], secret, headers, body, explain)
}

/// [`verify`] with the scheme given by `scheme_args` (`--scheme square
/// --signed-url ...`).
fn verify_with(
    scheme_args: &[&str],
    secret: &str,
    headers: &[String],
    body: &[u8],
    explain: bool,
) -> Run {
    let now = AT.to_string();
    let mut args = vec!["verify"];
    args.extend_from_slice(scheme_args);
    args.extend(["--secret", secret]);
    for header in headers {
        args.extend(["-H", header]);
    }
    args.extend(["--now", &now, "--body-file", "-"]);
    if explain {
        args.push("--explain");
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut input = child.stdin.take().unwrap();
    input.write_all(body).unwrap();
    drop(input);
    let output = child.wait_with_output().unwrap();
    assert!(output.stderr.is_empty(), "{output:?}");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
    }
}

/// `verify --explain` exits 1 as without it, prints the same `rejected:`
/// line, then exactly one finding: the one that contains `finding`.
fn assert_explains(scheme: &str, secret: &str, headers: &[String], body: &[u8], finding: &str) {
    assert_explains_with(&["--scheme", scheme], secret, headers, body, finding);
}

fn assert_explains_with(
    scheme_args: &[&str],
    secret: &str,
    headers: &[String],
    body: &[u8],
    finding: &str,
) {
    let plain = verify_with(scheme_args, secret, headers, body, false);
    let explained = verify_with(scheme_args, secret, headers, body, true);
    assert_eq!(plain.code, Some(1), "{}", plain.stdout);
    assert_eq!(explained.code, Some(1), "{}", explained.stdout);
    let mut lines = explained.stdout.lines();
    assert_eq!(lines.next(), plain.stdout.lines().next());
    let findings: Vec<&str> = lines.collect();
    assert_eq!(findings.len(), 1, "{}", explained.stdout);
    let prefix = if finding.starts_with("signature matches") {
        ""
    } else {
        "would match: "
    };
    assert!(
        findings[0].starts_with(&format!("{prefix}{finding}")),
        "wanted `{prefix}{finding}`, got:\n{}",
        explained.stdout
    );
}

#[test]
fn explain_finds_a_trailing_newline_the_framework_added() {
    let headers = sign(&signer(Scheme::standard_webhooks(), SECRET), AT, BODY);
    let received = [BODY, b"\n"].concat();
    assert_explains(
        "standard",
        SECRET,
        &headers,
        &received,
        r#"body had a trailing newline added (the sender signed it without the "\n" at the end)"#,
    );
}

#[test]
fn explain_finds_a_trailing_newline_that_was_trimmed() {
    let signed = [BODY, b"\n"].concat();
    let headers = sign(&signer(Scheme::standard_webhooks(), SECRET), AT, &signed);
    assert_explains(
        "standard",
        SECRET,
        &headers,
        BODY,
        r#"body had a trailing newline removed (the sender signed the body with "\n" at the end)"#,
    );
}

#[test]
fn explain_finds_line_endings_turned_into_crlf() {
    let headers = sign(&signer(Scheme::github(), "s3cret"), AT, b"one\ntwo\nthree");
    assert_explains(
        "github",
        "s3cret",
        &headers,
        b"one\r\ntwo\r\nthree",
        r#"body had its line endings changed from LF to CRLF (the sender signed "\n" line endings)"#,
    );
}

#[test]
fn explain_finds_line_endings_turned_into_lf() {
    let headers = sign(
        &signer(Scheme::github(), "s3cret"),
        AT,
        b"one\r\ntwo\r\nthree",
    );
    assert_explains(
        "github",
        "s3cret",
        &headers,
        b"one\ntwo\nthree",
        r#"body had its line endings changed from CRLF to LF (the sender signed "\r\n" line endings)"#,
    );
}

#[test]
fn explain_finds_pretty_json_the_framework_compacted() {
    let signed = b"{\n  \"type\": \"invoice.paid\",\n  \"items\": [\n    1,\n    2\n  ]\n}";
    let headers = sign(&signer(Scheme::standard_webhooks(), SECRET), AT, signed);
    assert_explains(
        "standard",
        SECRET,
        &headers,
        br#"{"type":"invoice.paid","items":[1,2]}"#,
        "body was re-serialized as JSON (the sender signed it pretty-printed, indented by 2 spaces)",
    );
}

#[test]
fn explain_finds_compact_json_that_was_pretty_printed() {
    let signed = br#"{"type":"invoice.paid","items":[1,2]}"#;
    let headers = sign(&signer(Scheme::stripe(), SECRET), AT, signed);
    assert_explains(
        "stripe",
        SECRET,
        &headers,
        b"{\n  \"type\": \"invoice.paid\",\n  \"items\": [\n    1,\n    2\n  ]\n}",
        "body was re-serialized as JSON (the sender signed it compact, with no spaces)",
    );
}

#[test]
fn explain_finds_python_spaced_json_the_framework_compacted() {
    let signed = br#"{"type": "invoice.paid", "items": [1, 2]}"#;
    let headers = sign(&signer(Scheme::standard_webhooks(), SECRET), AT, signed);
    assert_explains(
        "standard",
        SECRET,
        &headers,
        br#"{"type":"invoice.paid","items":[1,2]}"#,
        r#"body was re-serialized as JSON (the sender signed it with ", " and ": " between items"#,
    );
}

#[test]
fn explain_finds_a_body_url_encoded_after_signing() {
    let signed = br#"{"text":"hello world"}"#;
    let headers = sign(&signer(Scheme::standard_webhooks(), SECRET), AT, signed);
    assert_explains(
        "standard",
        SECRET,
        &headers,
        b"%7B%22text%22%3A%22hello+world%22%7D",
        "body was URL-encoded after signing (the sender signed the decoded text)",
    );
}

#[test]
fn explain_finds_a_form_body_a_parser_decoded() {
    let signed = b"token=abc&text=hello+world&payload=%7B%22a%22%3A1%7D";
    let headers = sign(
        &signer(Scheme::slack(), "8f742231b10e8888abcd99yyyzzz85a5"),
        AT,
        signed,
    );
    assert_explains(
        "slack",
        "8f742231b10e8888abcd99yyyzzz85a5",
        &headers,
        br#"token=abc&text=hello world&payload={"a":1}"#,
        "body was URL-decoded (the sender signed it form-encoded)",
    );
}

#[test]
fn explain_finds_a_whsec_secret_used_as_text_instead_of_decoded() {
    let sender = Signer::from_secret_bytes(Scheme::standard_webhooks(), SECRET.as_bytes()).unwrap();
    let headers = sign(&sender, AT, BODY);
    assert_explains(
        "standard",
        SECRET,
        &headers,
        BODY,
        "the secret used as text, not base64-decoded",
    );
}

#[test]
fn explain_finds_a_secret_the_sender_used_without_its_prefix() {
    let headers = sign(&signer(Scheme::stripe(), UNPREFIXED), AT, BODY);
    assert_explains(
        "stripe",
        SECRET,
        &headers,
        BODY,
        "the secret without its `whsec_` prefix",
    );
}

#[test]
fn explain_finds_a_secret_given_without_its_prefix() {
    let headers = sign(&signer(Scheme::stripe(), SECRET), AT, BODY);
    assert_explains(
        "stripe",
        UNPREFIXED,
        &headers,
        BODY,
        "the secret with a `whsec_` prefix",
    );
}

#[test]
fn explain_finds_a_secret_the_sender_base64_decoded() {
    let sender = Signer::from_secret_bytes(Scheme::github(), b"secret-key-bytes").unwrap();
    let headers = sign(&sender, AT, BODY);
    assert_explains(
        "github",
        "c2VjcmV0LWtleS1ieXRlcw==",
        &headers,
        BODY,
        "the secret base64-decoded (the sender keys its HMAC with the decoded bytes)",
    );
}

#[test]
fn explain_finds_a_timestamp_header_rewritten_in_milliseconds() {
    let millis = format!("{AT}123");
    let standard = sign(&signer(Scheme::standard_webhooks(), SECRET), AT, BODY);
    assert_explains(
        "standard",
        SECRET,
        &with_header(&standard, "webhook-timestamp", &millis),
        BODY,
        &format!("the timestamp as {AT}, in seconds, where `webhook-timestamp` has {millis}"),
    );
    let stripe = sign(&signer(Scheme::stripe(), SECRET), AT, BODY);
    let field = stripe[0].replace(&format!("t={AT}"), &format!("t={millis}"));
    assert_explains(
        "stripe",
        SECRET,
        &[field],
        BODY,
        &format!("the timestamp as {AT}, in seconds, where the `t=` field of `stripe-signature`"),
    );
}

#[test]
fn explain_finds_milliseconds_signed_under_a_seconds_header() {
    let headers = sign(
        &signer(Scheme::standard_webhooks(), SECRET),
        AT * 1000 + 123,
        BODY,
    );
    let seconds = AT.to_string();
    assert_explains(
        "standard",
        SECRET,
        &with_header(&headers, "webhook-timestamp", &seconds),
        BODY,
        &format!("the timestamp as {AT}123, in milliseconds, where `webhook-timestamp` has {AT}"),
    );
}

#[test]
fn explain_finds_a_sender_that_signs_and_sends_milliseconds() {
    let headers = sign(
        &signer(Scheme::standard_webhooks(), SECRET),
        AT * 1000 + 123,
        BODY,
    );
    assert_explains(
        "standard",
        SECRET,
        &headers,
        BODY,
        "signature matches: over the timestamp as sent, which counts milliseconds",
    );
}

#[test]
fn explain_finds_the_scheme_the_request_was_signed_with() {
    // GitHub and Meta sign alike, so a GitHub request names both.
    for (signed_as, verified_as, secret, names) in [
        (Scheme::svix(), "standard", SECRET, "svix"),
        (
            Scheme::github(),
            "shopify",
            "s3cret",
            "github or --scheme meta",
        ),
        (Scheme::zoom(), "slack", "s3cret", "zoom"),
        (Scheme::paddle(), "stripe", "s3cret", "paddle"),
    ] {
        let headers = sign(&signer(signed_as, secret), AT, BODY);
        // The header the scheme reads is missing: said first, then the
        // scheme that signed.
        let lines = explained_missing(verified_as, secret, &headers);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("header: the request has no `"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with(&format!(
                "would match: --scheme {names} instead of --scheme {verified_as}"
            )),
            "{lines:?}"
        );
    }
}

/// Square and Twilio sign the URL configured in their console; behind a
/// proxy the app sees another (http for https, a slash added or lost, the
/// query dropped), and `--explain` names the URL that was signed.
#[test]
fn explain_finds_the_url_square_or_twilio_signed() {
    let configured = "https://example.com/hooks/in?account=7";
    for (name, scheme) in [
        ("square", Scheme::square(configured).unwrap()),
        ("twilio", Scheme::twilio(configured).unwrap()),
    ] {
        let body: &[u8] = if name == "twilio" {
            b"From=%2B14158675309&Body=Hello"
        } else {
            BODY
        };
        let headers = sign(&signer(scheme, "s3cret"), AT, body);
        for (seen, change) in [
            ("http://example.com/hooks/in?account=7", "https, not http"),
            (
                "https://example.com/hooks/in/?account=7",
                "without the trailing slash",
            ),
            ("https://example.com/hooks/in", "no"),
        ] {
            if change == "no" {
                // The query is not a URL's variant to add back: nothing found.
                let run = verify_with(
                    &["--scheme", name, "--signed-url", seen],
                    "s3cret",
                    &headers,
                    body,
                    true,
                );
                assert_eq!(run.code, Some(1));
                assert!(run.stdout.contains("no match: "), "{name}: {}", run.stdout);
                assert!(
                    run.stdout.contains("the signed URL"),
                    "{name}: {}",
                    run.stdout
                );
                continue;
            }
            assert_explains_with(
                &["--scheme", name, "--signed-url", seen],
                "s3cret",
                &headers,
                body,
                &format!("--signed-url {configured} ({change};"),
            );
        }
    }
}

/// A JSON body parsed and written again with its keys sorted cannot be
/// put back in the sender's order: `--explain` says so, where it finds
/// no match, and says nothing of key order for a body in the sender's
/// own order.
#[test]
fn explain_says_sorted_json_keys_cannot_be_put_back_in_order() {
    let sent: &[u8] =
        br#"{"type":"invoice.paid","id":"evt_1","data":{"total":3,"currency":"eur"}}"#;
    let sorted: &[u8] =
        br#"{"data":{"currency":"eur","total":3},"id":"evt_1","type":"invoice.paid"}"#;
    let headers = sign(&signer(Scheme::standard_webhooks(), SECRET), AT, sent);
    let run = verify("standard", SECRET, &headers, sorted, true);
    assert_eq!(run.code, Some(1));
    assert!(run.stdout.contains("no match: "), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("body: its JSON keys are in alphabetical order at every level"),
        "{}",
        run.stdout
    );
    let other_secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let run = verify("standard", other_secret, &headers, sent, true);
    assert_eq!(run.code, Some(1));
    assert!(!run.stdout.contains("alphabetical"), "{}", run.stdout);
}

/// Twilio adds `bodySHA256=<the body's SHA-256>` to the URL of a JSON
/// request and signs that URL; given as the signed URL (copied from the
/// request), it is counted twice, and `--explain` says to drop it.
#[test]
fn explain_finds_a_twilio_url_that_already_carries_body_sha256() {
    use sha2::Digest as _;
    let configured = "https://example.com/hooks/status?account=7";
    let body: &[u8] = br#"{"CallSid":"CA123","CallStatus":"completed"}"#;
    let headers = sign(
        &signer(Scheme::twilio(configured).unwrap(), "s3cret"),
        AT,
        body,
    );
    let digest: String = sha2::Sha256::digest(body)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let copied = format!("{configured}&bodySHA256={digest}");
    let run = verify_with(
        &["--scheme", "twilio", "--signed-url", &copied],
        "s3cret",
        &headers,
        body,
        true,
    );
    assert_eq!(run.code, Some(1), "{}", run.stdout);
    assert!(
        run.stdout.contains(&format!(
            "would match: --signed-url {configured} (the URL given carries the `bodySHA256=`"
        )),
        "{}",
        run.stdout
    );
}

/// A Discord key given in any form but the developer portal's hex is a
/// usage error that says which key to copy.
#[test]
fn a_discord_key_not_in_hex_names_the_portals_public_key() {
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args([
            "verify",
            "--scheme",
            "discord",
            "--secret",
            "11VrmAGCsQq31Uv+08lkBzoO4XLz2qYjJa8CGmj3B1E=",
            "-H",
            "x-signature-ed25519: 00",
            "-H",
            "x-signature-timestamp: 1614265330",
            "--body-file",
            "-",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("hex characters") && stderr.contains("public key"),
        "{stderr}"
    );
}

#[test]
fn explain_says_when_no_usual_mistake_matches() {
    let headers = sign(&signer(Scheme::standard_webhooks(), SECRET), AT, BODY);
    let other = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let run = verify("standard", other, &headers, BODY, true);
    assert_eq!(run.code, Some(1));
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(lines[0].starts_with("rejected: signature mismatch"));
    assert!(
        lines[1].starts_with(
            "no match: none of the usual mistakes makes the signature match (tried a trailing \
             newline, JSON re-serialized, URL encoding, the secret's form, a timestamp in \
             milliseconds, the other schemes)"
        ),
        "{}",
        lines[1]
    );
    assert!(!run.stdout.contains(UNPREFIXED), "no secret is printed");
}

#[test]
fn explain_says_the_signature_matches_when_only_the_timestamp_failed() {
    let headers = sign(
        &signer(Scheme::standard_webhooks(), SECRET),
        AT - 3600,
        BODY,
    );
    assert_explains(
        "standard",
        SECRET,
        &headers,
        BODY,
        "signature matches: only the timestamp check failed",
    );
}

#[test]
fn explain_leaves_an_accepted_request_as_it_was() {
    let headers = sign(&signer(Scheme::standard_webhooks(), SECRET), AT, BODY);
    let plain = verify("standard", SECRET, &headers, BODY, false);
    let explained = verify("standard", SECRET, &headers, BODY, true);
    assert_eq!(explained.code, Some(0));
    assert_eq!(
        explained.stdout,
        "ok id=msg_p5jXN8AQM9LWM0D4loKWxJek timestamp=1614265330 secret=1\n"
    );
    assert_eq!(explained.stdout, plain.stdout);
}

#[test]
fn explain_takes_any_body_and_headers_without_failing() {
    let headers = [
        "webhook-id: msg_1".to_owned(),
        "webhook-timestamp: 99999999999999999999".to_owned(),
        "webhook-signature: v1,AAAA v1,%%%".to_owned(),
    ];
    for body in [&b"\xff\xfe%zz+\r\r\n\n"[..], b"", b"[", b"%"] {
        let run = verify("standard", SECRET, &headers, body, true);
        assert_eq!(run.code, Some(1), "{}", run.stdout);
        assert!(run.stdout.lines().count() >= 2, "{}", run.stdout);
    }
}

#[test]
fn explain_with_a_value_is_a_usage_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args([
            "verify",
            "--secret",
            SECRET,
            "--body-file",
            "-",
            "--explain=yes",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(output.stdout.is_empty());
}

/// `headers` with the header `from` renamed `to`.
fn renamed(headers: &[String], from: &str, to: &str) -> Vec<String> {
    headers
        .iter()
        .map(|line| match line.split_once(": ") {
            Some((key, value)) if key == from => format!("{to}: {value}"),
            _ => line.clone(),
        })
        .collect()
}

/// The lines `verify --explain` prints after its `rejected:` line, which
/// must say the header is missing.
fn explained_missing(scheme: &str, secret: &str, headers: &[String]) -> Vec<String> {
    let run = verify(scheme, secret, headers, BODY, true);
    assert_eq!(run.code, Some(1), "{}", run.stdout);
    let mut lines = run.stdout.lines().map(str::to_owned);
    let first = lines.next().unwrap_or_default();
    assert!(
        first.starts_with("rejected: missing header"),
        "{}",
        run.stdout
    );
    lines.collect()
}

#[test]
fn explain_names_githubs_legacy_sha1_header_and_tries_no_body() {
    let headers = sign(&signer(Scheme::github(), "s3cret"), AT, BODY);
    let headers = renamed(&headers, "x-hub-signature-256", "x-hub-signature");
    let lines = explained_missing("github", "s3cret", &headers);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("header: `x-hub-signature` is GitHub's legacy SHA-1 signature"),
        "{lines:?}"
    );
}

#[test]
fn explain_names_a_near_miss_header_and_tries_no_body() {
    let headers = sign(&signer(Scheme::standard_webhooks(), SECRET), AT, BODY);
    for near in [
        "x-webhook-signature",
        "webhook_signature",
        "webhook-signatures",
    ] {
        let lines = explained_missing(
            "standard",
            SECRET,
            &renamed(&headers, "webhook-signature", near),
        );
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with(&format!(
                "header: the request has no `webhook-signature`, but `{near}`: a near miss"
            )),
            "{lines:?}"
        );
    }
    // Nothing like it: the headers given are listed.
    let lines = explained_missing(
        "standard",
        SECRET,
        &renamed(&headers, "webhook-signature", "authorization"),
    );
    assert!(
        lines[0].contains("(given: `webhook-id`, `webhook-timestamp`, `authorization`)"),
        "{lines:?}"
    );
}

#[test]
fn explain_of_a_missing_header_still_finds_the_scheme_that_signed() {
    let headers = sign(&signer(Scheme::svix(), SECRET), AT, BODY);
    let lines = explained_missing("standard", SECRET, &headers);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with("header: the request has no `webhook-"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("would match: --scheme svix instead of --scheme standard"),
        "{lines:?}"
    );
}

#[test]
fn explain_finds_a_header_name_pasted_into_its_value() {
    let headers = sign(&signer(Scheme::standard_webhooks(), SECRET), AT, BODY);
    let signature = headers
        .iter()
        .find_map(|line| line.strip_prefix("webhook-signature: "))
        .unwrap()
        .to_owned();
    let pasted = with_header(
        &headers,
        "webhook-signature",
        &format!("webhook-signature: {signature}"),
    );
    let run = verify("standard", SECRET, &pasted, BODY, true);
    assert_eq!(run.code, Some(1), "{}", run.stdout);
    let lines: Vec<&str> = run.stdout.lines().skip(1).collect();
    assert_eq!(
        lines,
        [
            "header: the value of `webhook-signature` begins with `webhook-signature:` again: \
             its name was pasted into its value; give `-H 'webhook-signature: <value>'`",
            "would match: `webhook-signature` given without its name repeated in its value",
        ],
        "{}",
        run.stdout
    );
}

#[test]
fn explain_names_a_stripe_api_key_given_as_the_secret() {
    let headers = sign(&signer(Scheme::stripe(), "whsec_test_secret"), AT, BODY);
    for key in ["sk_test_51Habc", "rk_live_51Habc"] {
        let run = verify("stripe", key, &headers, BODY, true);
        assert_eq!(run.code, Some(1), "{}", run.stdout);
        let prefix = &key[..3];
        assert!(
            run.stdout.contains(&format!(
                "secret: `{prefix}…` is a Stripe API key, not a webhook signing secret"
            )),
            "{}",
            run.stdout
        );
        assert!(
            !run.stdout.contains(key),
            "the key is not printed: {}",
            run.stdout
        );
    }
}

/// A header the scheme does not read is never taken for a pasted name,
/// though its value begins with it (`host: host:8080`).
#[test]
fn explain_takes_no_unread_header_for_a_pasted_name() {
    let mut headers = sign(&signer(Scheme::standard_webhooks(), SECRET), AT, BODY);
    headers.push("host: host:8080".to_owned());
    let other = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    let run = verify("standard", other, &headers, BODY, true);
    assert_eq!(run.code, Some(1), "{}", run.stdout);
    assert!(!run.stdout.contains("pasted"), "{}", run.stdout);
    assert!(run.stdout.contains("\nno match: "), "{}", run.stdout);
}

/// Hook0: a covered header changed on the way is named with the values
/// received, and a covered header dropped on the way is named as covered
/// (not as a near miss), with no HMAC computed.
#[test]
fn explain_names_hook0s_covered_headers() {
    let secret = "a-hook0-subscription-secret";
    let signed = sign(&signer(Scheme::hook0(), secret), AT, BODY);
    let changed = with_header(&signed, "x-event-id", "msg_other");
    let run = verify("hook0", secret, &changed, BODY, true);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stdout.contains(
            "covered headers: the signature also covers `x-event-id: msg_other` (its `h=`"
        ),
        "{}",
        run.stdout
    );
    let dropped: Vec<String> = signed
        .iter()
        .filter(|line| !line.starts_with("x-event-id:"))
        .cloned()
        .collect();
    let run = verify("hook0", secret, &dropped, BODY, true);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stdout
            .contains("header: the signature covers `x-event-id` (its `h=` names it)"),
        "{}",
        run.stdout
    );
}
