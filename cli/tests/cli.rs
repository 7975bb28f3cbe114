//! Runs the `hooklatch` binary as a user would.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const BODY: &str = r#"{"test": 2432232314}"#;

fn hooklatch(args: &[&str], stdin: Option<&[u8]>) -> Output {
    common::hooklatch(args, stdin.unwrap_or_default())
}

fn body_file(name: &str, contents: &[u8]) -> PathBuf {
    // Cargo gives integration tests a scratch folder inside target/.
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// `sign` output turned into `-H` arguments for `verify`.
fn header_args(signed: &str) -> Vec<String> {
    signed
        .lines()
        .flat_map(|line| ["-H".to_owned(), line.to_owned()])
        .collect()
}

#[test]
fn sign_prints_the_standard_webhooks_vector() {
    let body = body_file("vector.json", BODY.as_bytes());
    let output = hooklatch(
        &[
            "sign",
            "--scheme",
            "standard",
            "--secret",
            SECRET,
            "--id",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            "--timestamp",
            "1614265330",
            "--body-file",
            body.to_str().unwrap(),
        ],
        None,
    );
    assert!(output.status.success());
    assert_eq!(
        stdout(&output),
        "webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek\n\
         webhook-timestamp: 1614265330\n\
         webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=\n"
    );
}

#[test]
fn every_scheme_signs_and_verifies_from_stdin() {
    let custom = [
        "--signature-header",
        "x-acme-signature",
        "--prefix",
        "sha256=",
        "--encoding",
        "base64",
        "--id-header",
        "x-acme-id",
        "--timestamp-header",
        "x-acme-time",
        "--template",
        "{id}:{timestamp}:{body}",
    ];
    let square = ["--signed-url", "https://example.com/hooks/square"];
    for scheme in [
        "standard", "svix", "stripe", "github", "shopify", "slack", "meta", "twitch", "zoom",
        "paddle", "square", "twilio", "convoy", "outpost", "x", "custom",
    ] {
        let secret = if matches!(scheme, "standard" | "svix") {
            SECRET
        } else {
            "s3cret"
        };
        let extra: &[&str] = match scheme {
            "custom" => &custom,
            "square" | "twilio" => &square,
            _ => &[],
        };
        let mut sign = vec![
            "sign", "--scheme", scheme, "--secret", secret, "--id", "evt_42",
        ];
        sign.extend_from_slice(extra);
        sign.extend_from_slice(&["--body-file", "-"]);
        let signed = hooklatch(&sign, Some(BODY.as_bytes()));
        assert!(signed.status.success(), "{scheme}: {signed:?}");

        let headers = header_args(&stdout(&signed));
        let mut verify = vec!["verify", "--scheme", scheme, "--secret", secret];
        verify.extend_from_slice(extra);
        verify.extend(headers.iter().map(String::as_str));
        verify.extend_from_slice(&["--body-file", "-"]);
        let accepted = hooklatch(&verify, Some(BODY.as_bytes()));
        assert!(accepted.status.success(), "{scheme}: {accepted:?}");
        assert!(stdout(&accepted).starts_with("ok"), "{scheme}");
        let has_id_header = !matches!(
            scheme,
            "stripe" | "slack" | "meta" | "zoom" | "paddle" | "square" | "convoy" | "x"
        );
        assert_eq!(
            stdout(&accepted).contains("id=evt_42"),
            has_id_header,
            "{scheme}: {}",
            stdout(&accepted)
        );

        let rejected = hooklatch(&verify, Some(b"{\"test\": 2432232315}"));
        assert_eq!(rejected.status.code(), Some(1), "{scheme}");
        let line = stdout(&rejected);
        assert_eq!(line.lines().count(), 1, "{scheme}: {line}");
        assert!(
            line.starts_with("rejected: signature mismatch"),
            "{scheme}: {line}"
        );
    }
}

#[test]
fn verify_explains_a_stale_timestamp_and_accepts_it_with_now() {
    let body = body_file("stale.json", BODY.as_bytes());
    let args = [
        "verify",
        "--scheme",
        "standard",
        "--secret",
        SECRET,
        "-H",
        "webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek",
        "-H",
        "Webhook-Timestamp: 1614265330",
        "-H",
        "webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        "--body-file",
        body.to_str().unwrap(),
    ];
    let stale = hooklatch(&args, None);
    assert_eq!(stale.status.code(), Some(1));
    assert!(stdout(&stale).contains("s old, beyond the 300s tolerance"));

    let mut at_the_time = args.to_vec();
    at_the_time.extend_from_slice(&["--now", "1614265400", "--tolerance", "100"]);
    let ok = hooklatch(&at_the_time, None);
    assert_eq!(
        stdout(&ok),
        "ok id=msg_p5jXN8AQM9LWM0D4loKWxJek timestamp=1614265330 secret=1\n"
    );
}

#[test]
fn verify_checks_v1a_with_a_public_key() {
    let output = hooklatch(
        &[
            "verify",
            "--scheme",
            "standard",
            "--secret",
            "whpk_1SiA4o9hyqTCpIqC5V9HUakiiaeACeqfZTInDBbOir4=",
            "-H",
            "webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek",
            "-H",
            "webhook-timestamp: 1614265330",
            "-H",
            "webhook-signature: v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg==",
            "--now",
            "1614265330",
            "--body-file",
            "-",
        ],
        Some(BODY.as_bytes()),
    );
    assert!(output.status.success(), "{output:?}");
}

#[test]
fn bad_secret_is_a_usage_error() {
    let output = hooklatch(
        &[
            "verify",
            "--scheme",
            "standard",
            "--secret",
            "whsec_!!",
            "--body-file",
            "-",
        ],
        Some(b""),
    );
    assert_eq!(output.status.code(), Some(2));
    let error = String::from_utf8(output.stderr).unwrap();
    assert!(error.contains("not valid base64"), "{error}");
    // The library's advice ("pass it as bytes") names no flag the CLI has.
    assert!(error.contains("copy the whole signing secret"), "{error}");
    assert!(!error.contains("as bytes"), "{error}");
}

/// `--now` and `--timestamp` take seconds since the epoch; anything else
/// is a usage error that shows the form (not "invalid digit found in
/// string").
#[test]
fn a_time_that_is_not_unix_seconds_is_named_with_its_form() {
    for flag in ["--now", "--timestamp"] {
        let command = if flag == "--now" { "verify" } else { "sign" };
        let output = hooklatch(
            &[
                command,
                "--secret",
                SECRET,
                "--body-file",
                "-",
                flag,
                "yesterday",
            ],
            Some(b""),
        );
        assert_eq!(output.status.code(), Some(2), "{flag}");
        let error = String::from_utf8(output.stderr).unwrap();
        assert!(error.contains("seconds since the Unix epoch"), "{error}");
        assert!(error.contains("date +%s"), "{error}");
    }
}

#[test]
fn missing_header_is_named() {
    let output = hooklatch(
        &[
            "verify",
            "--scheme",
            "github",
            "--secret",
            "x",
            "--body-file",
            "-",
        ],
        Some(b"{}"),
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stdout(&output),
        "rejected: missing header `x-hub-signature-256`\n"
    );
}

/// GitHub's published vector verifies with its signature header alone:
/// the delivery id is not signed, so it is never required, and the event
/// is claimed by a digest of the signed body.
#[test]
fn verify_checks_the_github_vector_with_only_the_signature_header() {
    let verify = |extra: &[&str]| {
        let mut args = vec![
            "verify",
            "--scheme",
            "github",
            "--secret",
            "It's a Secret to Everybody",
            "-H",
            "X-Hub-Signature-256: sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--body-file", "-"]);
        hooklatch(&args, Some(b"Hello, World!"))
    };
    let alone = verify(&[]);
    assert!(alone.status.success(), "{alone:?}");
    let line = stdout(&alone);
    assert!(line.starts_with("ok secret=1 key=sha256:"), "{line}");
    let key = line.split(" key=").nth(1).unwrap().trim().to_owned();
    let with_id = verify(&[
        "-H",
        "X-GitHub-Delivery: 72d3162e-cc78-11e3-81ab-4c9367dc0958",
    ]);
    let line = stdout(&with_id);
    assert!(
        line.starts_with("ok id=72d3162e-cc78-11e3-81ab-4c9367dc0958 (unsigned) secret=1 key="),
        "{line}"
    );
    assert!(
        line.trim_end().ends_with(&key),
        "the same key under any delivery id"
    );
}

/// `verify --scheme NAME` accepts each provider's published vector (the
/// library's tests/provider_vectors.json), given as its console shows the
/// secret (Discord's hex public key, SendGrid's base64 verification key),
/// with `--signed-url` for Square and Twilio.
#[test]
fn verify_accepts_each_providers_published_vector() {
    let vectors: serde_json::Value =
        serde_json::from_str(include_str!("../../tests/provider_vectors.json")).unwrap();
    let text = |vector: &serde_json::Value, key: &str| vector[key].as_str().unwrap().to_owned();
    /// Scheme, extra flags, headers, body and the time to verify at.
    type Case<'a> = (
        &'a str,
        Vec<String>,
        Vec<(&'a str, String)>,
        String,
        Option<i64>,
    );
    let mut cases: Vec<Case<'_>> = Vec::new();
    let meta = &vectors["meta"][0];
    cases.push((
        "meta",
        vec![],
        vec![("x-hub-signature-256", text(meta, "header"))],
        text(meta, "body"),
        None,
    ));
    let twitch = &vectors["twitch"][0];
    cases.push((
        "twitch",
        vec![],
        vec![
            ("twitch-eventsub-message-id", text(twitch, "id")),
            (
                "twitch-eventsub-message-timestamp",
                text(twitch, "timestamp"),
            ),
            ("twitch-eventsub-message-signature", text(twitch, "header")),
        ],
        text(twitch, "body"),
        twitch["unix"].as_i64(),
    ));
    for paddle in vectors["paddle"].as_array().unwrap() {
        cases.push((
            "paddle",
            vec![],
            vec![("paddle-signature", text(paddle, "header"))],
            text(paddle, "body"),
            paddle["unix"].as_i64(),
        ));
    }
    let square = &vectors["square"][0];
    cases.push((
        "square",
        vec!["--signed-url".into(), text(square, "url")],
        vec![("x-square-hmacsha256-signature", text(square, "header"))],
        text(square, "body"),
        None,
    ));
    let twilio = &vectors["twilio"][0];
    cases.push((
        "twilio",
        vec!["--signed-url".into(), text(twilio, "url")],
        vec![("x-twilio-signature", text(twilio, "header"))],
        text(twilio, "body"),
        None,
    ));
    let discord = &vectors["discord"][0];
    cases.push((
        "discord",
        vec![],
        vec![
            ("x-signature-ed25519", text(discord, "signature")),
            ("x-signature-timestamp", text(discord, "timestamp")),
        ],
        text(discord, "body"),
        text(discord, "timestamp").parse().ok(),
    ));
    let sendgrid = &vectors["sendgrid"][0];
    cases.push((
        "sendgrid",
        vec![],
        vec![
            (
                "x-twilio-email-event-webhook-signature",
                text(sendgrid, "signature"),
            ),
            (
                "x-twilio-email-event-webhook-timestamp",
                text(sendgrid, "timestamp"),
            ),
        ],
        text(sendgrid, "body"),
        text(sendgrid, "timestamp").parse().ok(),
    ));
    // Slack's published vector, under Slack's headers and under Zoom's
    // (the same rule; Zoom publishes no vector with a secret).
    let first_set: serde_json::Value =
        serde_json::from_str(include_str!("../../tests/vectors.json")).unwrap();
    let slack = &first_set["slack"][0];
    for (scheme, timestamp_header, signature_header) in [
        ("slack", "x-slack-request-timestamp", "x-slack-signature"),
        ("zoom", "x-zm-request-timestamp", "x-zm-signature"),
    ] {
        cases.push((
            scheme,
            vec![],
            vec![
                (timestamp_header, text(slack, "timestamp")),
                (signature_header, text(slack, "expected")),
            ],
            text(slack, "payload"),
            text(slack, "timestamp").parse().ok(),
        ));
    }
    let x = &vectors["x"][0];
    cases.push((
        "x",
        vec![],
        vec![("x-twitter-webhooks-signature", text(x, "header"))],
        text(x, "body"),
        None,
    ));
    let convoy = &vectors["convoy"][4];
    assert_eq!(convoy["name"], "advanced_sha256_hex_valid");
    cases.push((
        "convoy",
        vec![],
        vec![("x-convoy-signature", text(convoy, "header"))],
        text(convoy, "payload"),
        Some(1_700_000_000),
    ));
    let outpost = &vectors["outpost"][0];
    cases.push((
        "outpost",
        vec![],
        vec![("x-outpost-signature", text(outpost, "header"))],
        text(outpost, "body"),
        None,
    ));
    let secrets = |name: &str, index: usize| -> Vec<String> {
        match name {
            "meta" => vec![text(meta, "secret")],
            "twitch" => vec![text(twitch, "secret")],
            "paddle" => vectors["paddle"][index]["secrets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|secret| secret.as_str().unwrap().to_owned())
                .collect(),
            "square" => vec![text(square, "secret")],
            "twilio" => vec![text(twilio, "secret")],
            "discord" => vec![text(discord, "public_key")],
            "sendgrid" => vec![text(sendgrid, "public_key")],
            "x" => vec![text(x, "secret")],
            "slack" | "zoom" => vec![text(slack, "secret")],
            "convoy" => vec![text(convoy, "secret")],
            _ => vec![text(outpost, "secret")],
        }
    };
    let mut paddle_index = 0;
    for (scheme, extra, headers, body, now) in &cases {
        let index = if *scheme == "paddle" {
            paddle_index += 1;
            paddle_index - 1
        } else {
            0
        };
        let body = body_file(&format!("{scheme}-{index}.json"), body.as_bytes());
        let mut args: Vec<String> = vec!["verify".into(), "--scheme".into(), (*scheme).into()];
        args.extend(extra.iter().cloned());
        for secret in secrets(scheme, index) {
            args.extend(["--secret".into(), secret]);
        }
        for (name, value) in headers {
            args.extend(["-H".into(), format!("{name}: {value}")]);
        }
        args.extend(["--body-file".into(), body.display().to_string()]);
        if let Some(now) = now {
            args.extend(["--now".into(), now.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = hooklatch(&args, None);
        assert!(
            output.status.success() && stdout(&output).starts_with("ok"),
            "{scheme} #{index}: {output:?}"
        );
    }
    assert_eq!(paddle_index, 6, "every Paddle vector");
}

/// A secret read from a file or from `HOOKLATCH_SECRET` signs as the same
/// secret given with `--secret`, so it need not appear in a command line
/// other users see; a missing file is a usage error (exit 2).
#[test]
fn secrets_come_from_a_file_or_the_environment_too() {
    let body = body_file("secret-sources.json", BODY.as_bytes());
    let body = body.to_str().unwrap();
    let fixed = [
        "--id",
        "msg_1",
        "--timestamp",
        "1614265330",
        "--body-file",
        body,
    ];
    let with_flag = hooklatch(
        &[&["sign", "--secret", SECRET][..], &fixed[..]].concat(),
        None,
    );
    assert!(with_flag.status.success());
    let secret_file = body_file("secret.txt", format!("  {SECRET}\n").as_bytes());
    let from_file = hooklatch(
        &[
            &["sign", "--secret-file", secret_file.to_str().unwrap()][..],
            &fixed[..],
        ]
        .concat(),
        None,
    );
    assert_eq!(stdout(&from_file), stdout(&with_flag));
    let from_environment = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args([&["sign"][..], &fixed[..]].concat())
        .env("HOOKLATCH_SECRET", SECRET)
        .output()
        .unwrap();
    assert_eq!(stdout(&from_environment), stdout(&with_flag));

    let missing = hooklatch(
        &[
            &["sign", "--secret-file", "/nonexistent/secret"][..],
            &fixed[..],
        ]
        .concat(),
        None,
    );
    assert_eq!(missing.status.code(), Some(2));
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(said.contains("cannot read the secret file"), "{said}");
    let none = hooklatch(&[&["sign"][..], &fixed[..]].concat(), None);
    assert_eq!(
        none.status.code(),
        Some(2),
        "no secret at all is a usage error"
    );
}

/// Output closed early (`hooklatch sign | head -1`) ends the command
/// quietly, as a killed pipe does, not with a panic.
#[test]
fn closed_output_ends_quietly_without_a_panic() {
    let body = body_file("closed-output.json", BODY.as_bytes());
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args([
            "sign",
            "--secret",
            SECRET,
            "--body-file",
            body.to_str().unwrap(),
        ])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!said.contains("panicked"), "{said}");
    assert_eq!(output.status.code(), Some(141));
}

/// `sign --curl` prints a command that a POSIX shell runs as curl with the
/// signed headers and the body. Run through `sh` with `curl` standing for
/// a function that prints its arguments (the shell's own quoting, no
/// network), the request they make verifies; quotes in the URL, the path
/// and the body survive.
#[test]
fn sign_curl_prints_a_command_whose_request_verifies() {
    let json = br#"{"it's": "quoted", "n": 1}"#;
    let path = body_file("curl body's.json", json);
    let url = "http://127.0.0.1:9/hooks?a=1&b='x'&c=[1]";
    let verifier =
        hooklatch::verify::Verifier::builder(hooklatch::verify::Scheme::standard_webhooks())
            .with_secret(SECRET)
            .unwrap()
            .build()
            .unwrap();
    for (body_arg, stdin) in [(path.to_str().unwrap(), None), ("-", Some(&json[..]))] {
        let output = hooklatch(
            &[
                "sign",
                "--secret",
                SECRET,
                "--body-file",
                body_arg,
                "--curl",
                url,
            ],
            stdin,
        );
        assert_eq!(output.status.code(), Some(0), "{output:?}");
        let command = stdout(&output);
        assert!(
            command.starts_with("curl -sS --globoff -X POST --url "),
            "{command}"
        );
        let run = Command::new("sh")
            .arg("-c")
            .arg(format!("curl() {{ printf '%s\\0' \"$@\"; }}\n{command}"))
            .output()
            .unwrap();
        assert!(run.status.success(), "{run:?}");
        let words: Vec<String> = String::from_utf8(run.stdout)
            .unwrap()
            .split_terminator('\0')
            .map(str::to_owned)
            .collect();
        assert_eq!(
            &words[..6],
            ["-sS", "--globoff", "-X", "POST", "--url", url]
        );
        let mut headers = Vec::new();
        let mut body = None;
        let mut rest = words[6..].iter();
        while let Some(flag) = rest.next() {
            let value = rest.next().expect("each flag has its value");
            match flag.as_str() {
                "-H" => {
                    let (name, value) = value.split_once(": ").unwrap();
                    headers.push((name.to_owned(), value.to_owned()));
                }
                "--data-binary" => {
                    body = Some(std::fs::read(value.strip_prefix('@').unwrap()).unwrap());
                }
                "--data-raw" => body = Some(value.as_bytes().to_vec()),
                other => panic!("unexpected flag {other}"),
            }
        }
        let body = body.expect("the command sends the body");
        assert_eq!(body, json);
        assert!(headers.contains(&("content-type".to_owned(), "application/json".to_owned())));
        verifier
            .verify(&headers, &body)
            .expect("the request verifies");
    }
}

/// `verify --request` reads a captured request, from a file or standard
/// input: its headers and its body as a receiver saw them, cut at
/// `Content-Length` (an editor's trailing newline dropped). It replaces
/// `-H` and `--body-file`; a broken capture is a usage error naming it.
#[test]
fn verify_reads_a_captured_request() {
    let body = body_file("captured-body.json", BODY.as_bytes());
    let signed = stdout(&hooklatch(
        &[
            "sign",
            "--secret",
            SECRET,
            "--id",
            "msg_captured",
            "--timestamp",
            "1614265330",
            "--body-file",
            body.to_str().unwrap(),
        ],
        None,
    ));
    let mut raw = format!(
        "POST /hooks HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Length: {}\r\n",
        BODY.len()
    );
    for line in signed.lines() {
        raw.push_str(line);
        raw.push_str("\r\n");
    }
    raw.push_str("\r\n");
    raw.push_str(BODY);
    raw.push('\n');
    let capture = body_file("captured.http", raw.as_bytes());
    let capture = capture.to_str().unwrap();
    let verify = |extra: &[&str], stdin: Option<&[u8]>| {
        let mut args = vec!["verify", "--secret", SECRET, "--now", "1614265330"];
        args.extend(extra);
        hooklatch(&args, stdin)
    };

    let output = verify(&["--request", capture], None);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stdout(&output).starts_with("ok id=msg_captured"));

    let tampered = raw.replace("2432232314", "2432232315");
    let output = verify(&["--request", "-", "--explain"], Some(tampered.as_bytes()));
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(stdout(&output).starts_with("rejected: signature mismatch"));

    let output = verify(&["--request", capture, "-H", "webhook-id: other"], None);
    assert_eq!(output.status.code(), Some(2), "--request with -H");

    let broken = body_file("broken.http", b"POST /hooks HTTP/1.1\r\nHost: a\r\n");
    let output = verify(&["--request", broken.to_str().unwrap()], None);
    assert_eq!(output.status.code(), Some(2));
    let error = String::from_utf8(output.stderr).unwrap();
    assert!(
        error.contains("--request") && error.contains("no blank line"),
        "{error}"
    );
}

/// `verify --request` also reads a curl command (as `sign --curl` prints
/// it, or as pasted from a provider's docs or a terminal): split as a
/// POSIX shell splits it (quotes, backslash-newline continuations), its
/// `-H` headers and its body (`--data-raw` text, `--data-binary @file`,
/// `-d`) are the request. A command that does not split is a usage error.
#[test]
fn verify_reads_a_curl_command_as_the_request_it_sends() {
    let json = br#"{"it's": "quoted", "n": 1}"#;
    let path = body_file("curl request's body.json", json);
    let verify = |request: &Path, stdin: Option<&[u8]>| {
        hooklatch(
            &[
                "verify",
                "--secret",
                SECRET,
                "--request",
                request.to_str().unwrap(),
            ],
            stdin,
        )
    };
    for (body_arg, stdin) in [(path.to_str().unwrap(), None), ("-", Some(&json[..]))] {
        let command = stdout(&hooklatch(
            &[
                "sign",
                "--secret",
                SECRET,
                "--id",
                "msg_curl",
                "--body-file",
                body_arg,
                "--curl",
                "http://127.0.0.1:9/hooks?a=1&b='x'",
            ],
            stdin,
        ));
        let saved = body_file("signed-curl.sh", command.as_bytes());
        let output = verify(&saved, None);
        assert_eq!(output.status.code(), Some(0), "{command}\n{output:?}");
        assert!(stdout(&output).starts_with("ok id=msg_curl"), "{output:?}");
    }

    // Typed by hand: double quotes, a continuation, `-d` with the body.
    let signed = stdout(&hooklatch(
        &[
            "sign",
            "--secret",
            SECRET,
            "--id",
            "msg_typed",
            "--body-file",
            body_file("typed.json", BODY.as_bytes()).to_str().unwrap(),
        ],
        None,
    ));
    let mut typed = String::from("curl -X POST https://example.com/webhooks \\\n");
    for line in signed.lines() {
        typed.push_str(&format!("  -H \"{line}\" \\\n"));
    }
    typed.push_str(&format!("  -d '{BODY}'\n"));
    let output = verify(&body_file("typed-curl.sh", typed.as_bytes()), None);
    assert_eq!(output.status.code(), Some(0), "{typed}\n{output:?}");
    assert!(stdout(&output).starts_with("ok id=msg_typed"));

    let open = body_file("open-quote.sh", b"curl -H 'webhook-id: msg_1 -d '{}'\n");
    let output = verify(&open, None);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("does not split"),
        "{output:?}"
    );
}
