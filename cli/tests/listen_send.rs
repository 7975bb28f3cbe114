//! Runs `hooklatch listen` and `hooklatch send` as child processes, against
//! real HTTP on 127.0.0.1. Postgres and Redis come from tests/support.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hooklatch::verify::{Scheme, Signer, Verifier};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const FORGED: &str = "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

fn scratch(name: &str) -> PathBuf {
    let folder = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{name}-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&folder).unwrap();
    folder
}

fn verifier() -> Verifier {
    Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .unwrap()
        .build()
        .unwrap()
}

/// The standard headers for `body` as event `id`, signed at `at`.
fn signed(secret: &str, id: &str, at: SystemTime, body: &[u8]) -> Vec<(String, String)> {
    Signer::new(Scheme::standard_webhooks(), [secret])
        .unwrap()
        .sign(id, at, body)
        .unwrap()
        .iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// A running `hooklatch listen` and the lines it prints.
struct Listener {
    child: Child,
    url: String,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Listener {
    fn start(extra: &[&str]) -> Self {
        let folder = scratch("listen");
        let store = format!("sqlite:{}", folder.join("claims.db").display());
        Self::start_on(&store, extra)
    }

    fn start_on(store: &str, extra: &[&str]) -> Self {
        let mut args = vec!["--store", store];
        args.extend(extra);
        Self::start_with(&args, &[])
    }

    /// `listen` with `args` after its own and `env` added to the
    /// environment.
    fn start_with(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut all = vec!["--body-limit", "4096"];
        all.extend(args);
        Self::launch(&all, env)
    }

    /// `listen` with only `args` after its secret and address.
    fn launch(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
            .args(["listen", "--secret", SECRET, "--addr", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .spawn()
            .expect("hooklatch listen runs");
        let (send, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let first = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("listen prints its address");
        let address = first
            .strip_prefix("listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line: {first}"));
        Self {
            child,
            url: format!("{address}/hooks"),
            lines,
        }
    }

    fn next_line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(10))
            .expect("a line per request")
    }

    /// Sends SIGINT, as Ctrl-C does, and waits for the process to end.
    fn interrupt(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        // The reader thread ends at the end of stdout: every line is in.
        (exit, self.lines.iter().collect())
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn post_to(url: &str, headers: &[(String, String)], body: Vec<u8>) -> (u16, String) {
    let mut request = reqwest::Client::new().post(url).body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().await.expect("listen answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// The time part of a line, then the rest.
fn after_time(line: &str) -> &str {
    let (time, rest) = line.split_once(' ').unwrap();
    assert!(
        time.ends_with('Z') && time.contains('T'),
        "a UTC time: {line}"
    );
    rest
}

#[tokio::test]
async fn listen_prints_a_verdict_per_request_and_stops_on_ctrl_c() {
    let listener = Listener::start(&[]);
    let now = SystemTime::now();
    let body = br#"{"paid":true}"#.to_vec();

    let valid = signed(SECRET, "msg_valid", now, &body);
    assert_eq!(post_to(&listener.url, &valid, body.clone()).await.0, 202);
    assert_eq!(after_time(&listener.next_line()), "msg_valid accepted");

    assert_eq!(
        post_to(&listener.url, &valid, body.clone()).await,
        (200, "duplicate".to_owned())
    );
    assert_eq!(after_time(&listener.next_line()), "msg_valid duplicate");

    let forged = signed(FORGED, "msg_forged", now, &body);
    assert_eq!(post_to(&listener.url, &forged, body.clone()).await.0, 400);
    let line = listener.next_line();
    assert!(
        after_time(&line).starts_with("msg_forged rejected (400): signature mismatch"),
        "{line}"
    );

    let stale = signed(SECRET, "msg_stale", now - Duration::from_secs(3600), &body);
    assert_eq!(post_to(&listener.url, &stale, body.clone()).await.0, 400);
    let line = listener.next_line();
    assert!(
        after_time(&line).starts_with("msg_stale rejected (400): timestamp"),
        "{line}"
    );

    let big = vec![b'x'; 8192];
    let oversized = signed(SECRET, "msg_big", now, &big);
    assert_eq!(post_to(&listener.url, &oversized, big).await.0, 413);
    let line = listener.next_line();
    assert!(
        after_time(&line).starts_with("msg_big rejected (413): body over the 4096-byte limit"),
        "{line}"
    );

    // The same words `hooklatch verify` prints for the forged request.
    let (exit, rest) = listener.interrupt();
    assert!(exit.success(), "Ctrl-C stops it cleanly: {exit:?}");
    assert_eq!(rest, ["stopped"]);
}

/// An app on loopback that verifies what it is passed and counts by id;
/// it fails the first request for `msg_flaky`.
#[derive(Clone, Default)]
struct App {
    seen: Arc<Mutex<HashMap<String, usize>>>,
}

async fn app_handler(
    State(app): State<App>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let pairs: Vec<(String, String)> = headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
        .collect();
    let event = verifier()
        .verify(&pairs, &body)
        .expect("forwarded with body and signature headers unchanged");
    let id = event.id().unwrap().to_owned();
    let count = {
        let mut seen = app.seen.lock().unwrap();
        let count = seen.entry(id.clone()).or_default();
        *count += 1;
        *count
    };
    if id == "msg_flaky" && count == 1 {
        return (StatusCode::INTERNAL_SERVER_ERROR, "not yet").into_response();
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn serve(router: Router) -> String {
    let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = socket.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(socket, router).await });
    format!("http://{address}")
}

/// `--max-body`, the flag's earlier name, still sets the body limit.
#[tokio::test]
async fn listen_takes_max_body_as_the_body_limit_s_earlier_name() {
    let listener = Listener::launch(&["--max-body", "64", "--store", "memory:"], &[]);
    let body = vec![b'x'; 65];
    let headers = signed(SECRET, "msg_65", SystemTime::now(), &body);
    assert_eq!(post_to(&listener.url, &headers, body).await.0, 413);
    let body = vec![b'x'; 64];
    let headers = signed(SECRET, "msg_64", SystemTime::now(), &body);
    assert_eq!(post_to(&listener.url, &headers, body).await.0, 202);
}

#[tokio::test]
async fn forward_to_passes_each_accepted_event_on_once() {
    let app = App::default();
    let app_url = serve(
        Router::new()
            .route("/app", post(app_handler))
            .with_state(app.clone()),
    )
    .await;
    let listener = Listener::start(&["--forward-to", &format!("{app_url}/app")]);
    let now = SystemTime::now();
    let body = br#"{"n":1}"#.to_vec();
    let send = |id: &'static str, secret: &'static str| {
        let (url, body) = (listener.url.clone(), body.clone());
        async move { post_to(&url, &signed(secret, id, now, &body), body).await.0 }
    };

    assert_eq!(send("msg_a", SECRET).await, 204);
    assert_eq!(
        after_time(&listener.next_line()),
        "msg_a accepted, forwarded: 204"
    );
    assert_eq!(send("msg_a", SECRET).await, 200);
    assert_eq!(after_time(&listener.next_line()), "msg_a duplicate");
    assert_eq!(send("msg_b", SECRET).await, 204);
    listener.next_line();
    assert_eq!(send("msg_c", FORGED).await, 400);
    listener.next_line();
    // The app fails: the claim is released and the retry is passed on.
    assert_eq!(send("msg_flaky", SECRET).await, 500);
    let line = listener.next_line();
    assert!(
        after_time(&line).starts_with("msg_flaky accepted, forwarded: 500"),
        "{line}"
    );
    assert_eq!(send("msg_flaky", SECRET).await, 204);
    listener.next_line();

    let seen = app.seen.lock().unwrap().clone();
    let expected: HashMap<String, usize> = [("msg_a", 1), ("msg_b", 1), ("msg_flaky", 2)]
        .into_iter()
        .map(|(id, n)| (id.to_owned(), n))
        .collect();
    assert_eq!(seen, expected);
}

/// A request the scripted receiver saw: when (both clocks) and its headers.
type Seen = (Instant, SystemTime, Vec<(String, String)>);

/// What the scripted receiver answers, in order, and what it saw.
#[derive(Clone)]
struct Script {
    answers: Arc<Mutex<Vec<Response>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// The body of each request seen, in order.
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
    elsewhere: Arc<Mutex<usize>>,
}

impl Script {
    fn new(answers: Vec<Response>) -> Self {
        Self {
            answers: Arc::new(Mutex::new(answers.into_iter().rev().collect())),
            seen: Arc::default(),
            bodies: Arc::default(),
            elsewhere: Arc::default(),
        }
    }

    async fn serve(&self) -> String {
        let router = Router::new()
            .route("/hook", post(scripted))
            .route(
                "/elsewhere",
                post(|State(script): State<Script>| async move {
                    *script.elsewhere.lock().unwrap() += 1;
                    StatusCode::OK
                }),
            )
            .with_state(self.clone());
        format!("{}/hook", serve(router).await)
    }
}

async fn scripted(State(script): State<Script>, request: Request) -> Response {
    let headers = request
        .headers()
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
        .collect();
    let body = axum::body::to_bytes(request.into_body(), usize::MAX)
        .await
        .unwrap();
    script.bodies.lock().unwrap().push(body.to_vec());
    script
        .seen
        .lock()
        .unwrap()
        .push((Instant::now(), SystemTime::now(), headers));
    script
        .answers
        .lock()
        .unwrap()
        .pop()
        .unwrap_or_else(|| StatusCode::OK.into_response())
}

async fn run_send(args: &[&str]) -> Output {
    let body = scratch("send").join("body.json");
    std::fs::write(&body, br#"{"paid":true}"#).unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_hooklatch"));
    command
        .args(["send", "--secret", SECRET, "--body-file"])
        .arg(&body)
        .args(args);
    command.output().await.expect("hooklatch send runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn send_retries_with_fresh_signatures_and_honours_retry_after() {
    let script = Script::new(vec![
        StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", "1")]).into_response(),
        StatusCode::OK.into_response(),
    ]);
    let url = script.serve().await;
    let output = run_send(&[
        "--url",
        &url,
        "--allow-private",
        "--schedule",
        "0,100ms,100ms,100ms,100ms",
    ])
    .await;
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    let seen = script.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "{stdout}");
    let verifier = verifier();
    let mut ids = Vec::new();
    let mut signed_at = Vec::new();
    for (_, received_at, headers) in &seen {
        let event = verifier
            .verify(headers, br#"{"paid":true}"#)
            .expect("valid signature");
        ids.push(event.id().unwrap().to_owned());
        let timestamp = event.timestamp().unwrap() as u64;
        assert!(
            UNIX_EPOCH + Duration::from_secs(timestamp) <= *received_at,
            "signed before it arrived"
        );
        signed_at.push(timestamp);
    }
    // The fourth attempt went out a whole second (Retry-After) after the
    // third arrived, so a signature made when it was sent carries a later
    // second than that arrival; a reused one cannot, however slow the machine.
    let third_arrived = seen[2].1.duration_since(UNIX_EPOCH).unwrap().as_secs();
    assert!(
        signed_at[3] > third_arrived,
        "signed when sent, not reused: {signed_at:?}, third arrived {third_arrived}"
    );
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "one webhook-id: {ids:?}"
    );
    assert!(
        seen[3].0 - seen[2].0 >= Duration::from_secs(1),
        "waited for Retry-After"
    );
    assert!(seen[1].0 - seen[0].0 >= Duration::from_millis(100));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[1].starts_with("attempt 1: 500"), "{stdout}");
    // How long the breaker held an attempt, if at all, depends on how
    // fast the attempts went: ", held 1 ms by the open breaker" may come
    // between the wait and the answer.
    let attempt = |line: &str, wait: &str, status: &str| {
        line.starts_with(wait) && line.contains(&format!(": {status} in "))
    };
    assert!(
        attempt(lines[2], "attempt 2 after 100 ms (schedule)", "500"),
        "{stdout}"
    );
    assert!(
        attempt(lines[3], "attempt 3 after 100 ms (schedule)", "503"),
        "{stdout}"
    );
    assert!(
        attempt(lines[4], "attempt 4 after 1.0 s (Retry-After)", "200"),
        "{stdout}"
    );
    assert_eq!(lines[5], "delivered after 4 attempts");
}

#[tokio::test]
async fn send_stops_at_gone_with_exit_one() {
    let script = Script::new(vec![StatusCode::GONE.into_response()]);
    let url = script.serve().await;
    let output = run_send(&["--url", &url, "--allow-private", "--schedule", "0,100ms"]).await;
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(script.seen.lock().unwrap().len(), 1);
    assert!(text(&output.stdout).contains("gone: the endpoint answered 410"));
}

#[tokio::test]
async fn send_does_not_follow_redirects() {
    let redirect = || (StatusCode::FOUND, [("location", "/elsewhere")]).into_response();
    let script = Script::new(vec![redirect(), redirect()]);
    let url = script.serve().await;
    let output = run_send(&["--url", &url, "--allow-private", "--schedule", "0,50ms"]).await;
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert_eq!(script.seen.lock().unwrap().len(), 2);
    assert_eq!(
        *script.elsewhere.lock().unwrap(),
        0,
        "the redirect was not followed"
    );
    assert!(
        stdout.contains("attempt 2 after 50 ms (schedule): 302"),
        "{stdout}"
    );
    assert!(stdout.contains("abandoned after 2 attempts"), "{stdout}");
}

#[tokio::test]
async fn send_retries_a_refused_connection_on_schedule() {
    // A port nobody listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let output = run_send(&[
        "--url",
        &format!("http://127.0.0.1:{port}/hook"),
        "--allow-private",
        "--schedule",
        "0,100ms,200ms",
    ])
    .await;
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    let attempts: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("attempt"))
        .collect();
    assert_eq!(attempts.len(), 3, "{stdout}");
    assert!(
        attempts
            .iter()
            .all(|l| l.contains("error: could not connect")),
        "{stdout}"
    );
    assert!(
        attempts[2].starts_with("attempt 3 after 200 ms (schedule)"),
        "{stdout}"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn send_refuses_private_targets_unless_allowed() {
    let script = Script::new(vec![]);
    let url = script.serve().await;
    let output = run_send(&["--url", &url]).await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("its host is a loopback address"),
        "{stderr}"
    );
    assert!(stderr.contains("--allow-private"), "{stderr}");
    for host in ["localhost", "2130706433", "0x7f.1", "[::ffff:127.0.0.1]"] {
        let output = run_send(&["--url", &url.replace("127.0.0.1", host)]).await;
        assert_eq!(output.status.code(), Some(2), "{host}");
    }
    // A denied range wins over --allow-private; metadata is never sent to.
    let output = run_send(&[
        "--url",
        &url,
        "--allow-private",
        "--deny-range",
        "127.0.0.0/8",
    ])
    .await;
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("denied range"));
    let output = run_send(&[
        "--url",
        "http://169.254.169.254/latest/meta-data/",
        "--allow-private",
        "--allow-range",
        "169.254.0.0/16",
    ])
    .await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("cloud metadata"), "{stderr}");
    // No flag lets it through, so none is suggested.
    assert!(stderr.contains("refused whatever the flags"), "{stderr}");
    assert!(!stderr.contains("pass --allow"), "{stderr}");
    assert!(script.seen.lock().unwrap().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn send_allow_range_opens_that_range_only() {
    let script = Script::new(vec![StatusCode::OK.into_response()]);
    let url = script.serve().await;
    let output = run_send(&["--url", &url, "--allow-range", "10.20.0.0/16"]).await;
    assert_eq!(
        output.status.code(),
        Some(2),
        "loopback is not in the range"
    );
    let output = run_send(&["--url", &url, "--allow-range", "127.0.0.1/32"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(script.seen.lock().unwrap().len(), 1);
    let output = run_send(&["--url", &url, "--allow-range", "not-a-range"]).await;
    assert_eq!(output.status.code(), Some(2));
}

#[tokio::test]
async fn send_usage_errors_exit_two() {
    let output = run_send(&["--url", "http://127.0.0.1:9/", "--schedule", "0,soon"]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("--schedule"));
    let output = run_send(&["--url", "ftp://example.com/"]).await;
    assert_eq!(output.status.code(), Some(2));
}

/// An id the scheme cannot sign is a usage error found before any attempt
/// (exit 2, the flag named), not a failed delivery (exit 1).
#[tokio::test]
async fn send_refuses_an_unsignable_id_before_sending() {
    let script = Script::new(vec![]);
    let url = script.serve().await;
    for id in ["a.b", ""] {
        let output = run_send(&["--url", &url, "--allow-private", "--id", id]).await;
        assert_eq!(output.status.code(), Some(2), "--id `{id}`");
        let stderr = text(&output.stderr);
        assert!(stderr.contains(&format!("--id `{id}`")), "{stderr}");
        assert!(
            !text(&output.stdout).contains("attempt"),
            "nothing was tried"
        );
    }
    assert!(script.seen.lock().unwrap().is_empty(), "nothing was sent");
}

/// One attempt is said in the singular, before and after.
#[tokio::test]
async fn send_of_one_attempt_says_attempt() {
    let script = Script::new(vec![StatusCode::OK.into_response()]);
    let url = script.serve().await;
    let output = run_send(&["--url", &url, "--allow-private", "--schedule", "0"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("(1 attempt over"), "{stdout}");
    assert!(stdout.contains("delivered after 1 attempt\n"), "{stdout}");
}

/// Runs `listen` with `args` (after its secret) until it ends by itself,
/// as it must on a usage error or a store it cannot open; one still
/// running after 60 s fails the test.
fn listen_that_ends(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(["listen", "--secret", SECRET])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hooklatch listen runs");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("listen {args:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Flags `listen` cannot use are usage errors at start-up (exit 2) whose
/// message gives the value meant; before, each of these started a server
/// (or said only "invalid socket address syntax").
#[test]
fn listen_refuses_bad_flags_at_start_with_the_fix() {
    let store = format!("sqlite:{}", scratch("listen-flags").join("c.db").display());
    let cases: [(&[&str], &str); 7] = [
        (&["--forward-to", "localhost:3000"], "http://localhost:3000"),
        (&["--forward-to", "ftp://localhost/"], "http:// or https://"),
        (
            &["--forward-to", "http://169.254.169.254/"],
            "cloud metadata",
        ),
        (&["--addr", "8090"], "127.0.0.1:8090"),
        (&["--body-limit", "0"], "refuse every body"),
        (&["--max-attempts", "3"], "--inbox"),
        (
            &[
                "--inbox",
                "--forward-to",
                "http://127.0.0.1:9/",
                "--max-attempts",
                "11",
            ],
            "1..=10",
        ),
    ];
    for (flags, fix) in cases {
        let mut args = vec!["--store", store.as_str()];
        if !flags.contains(&"--addr") {
            args.extend(["--addr", "127.0.0.1:0"]);
        }
        args.extend(flags);
        let output = listen_that_ends(&args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(fix), "{flags:?}: {stderr}");
    }
}

/// A store `listen` cannot open is named, password masked, with exit 1 as
/// the operator commands give: the flags were right, the store was not
/// there.
#[test]
fn listen_names_a_store_it_cannot_open_and_exits_one() {
    let port = support::free_port();
    let store = format!("redis://:hunter2@127.0.0.1:{port}");
    let output = listen_that_ends(&["--store", &store, "--addr", "127.0.0.1:0"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot open redis://***@127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// A GET (a browser opening the URL) is answered 405 with `Allow: POST`,
/// and the line printed says so, rather than a 400 for a missing
/// signature.
#[tokio::test]
async fn listen_answers_other_methods_405() {
    let listener = Listener::start(&[]);
    let response = reqwest::get(&listener.url).await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    let line = listener.next_line();
    assert!(after_time(&line).contains("GET answered 405"), "{line}");
}

/// Claims outlive the process: a second `listen` on the same store reports
/// a duplicate, for each kind of store.
async fn claims_survive_a_restart(store: &str) {
    let namespace = support::unique("cli");
    let body = br#"{"n":1}"#.to_vec();
    let headers = signed(SECRET, "msg_once", SystemTime::now(), &body);
    let first = Listener::start_on(store, &["--namespace", &namespace]);
    assert_eq!(post_to(&first.url, &headers, body.clone()).await.0, 202);
    assert_eq!(after_time(&first.next_line()), "msg_once accepted");
    assert!(first.interrupt().0.success());

    let second = Listener::start_on(store, &["--namespace", &namespace]);
    assert_eq!(
        post_to(&second.url, &headers, body).await,
        (200, "duplicate".to_owned())
    );
    assert_eq!(after_time(&second.next_line()), "msg_once duplicate");
}

#[tokio::test]
async fn listen_claims_survive_a_restart_in_sqlite() {
    let folder = scratch("listen-restart");
    claims_survive_a_restart(&format!("sqlite:{}", folder.join("claims.db").display())).await;
}

#[tokio::test]
async fn listen_claims_survive_a_restart_in_postgres() {
    let server = support::postgres();
    claims_survive_a_restart(&server.url()).await;
}

#[tokio::test]
async fn listen_claims_survive_a_restart_in_redis() {
    let server = support::redis();
    claims_survive_a_restart(&server.url()).await;
}

#[tokio::test]
async fn listen_claims_survive_a_restart_in_a_redis_cluster() {
    let cluster = support::redis_cluster();
    claims_survive_a_restart(&cluster.url()).await;
}

/// `REDIS_CLUSTER_NODES` (the node URLs, comma-separated) is the same as
/// `--store redis+cluster://…`: a claim made through one is a duplicate
/// through the other.
#[tokio::test]
async fn listen_takes_the_cluster_from_redis_cluster_nodes() {
    let cluster = support::redis_cluster();
    let url = cluster.url();
    let nodes: Vec<String> = url
        .trim_start_matches("redis+cluster://")
        .split(',')
        .map(|node| format!("redis://{node}"))
        .collect();
    let namespace = support::unique("cli");
    let body = br#"{"n":2}"#.to_vec();
    let headers = signed(SECRET, "msg_nodes", SystemTime::now(), &body);
    let by_env = Listener::start_with(
        &["--namespace", &namespace],
        &[("REDIS_CLUSTER_NODES", &nodes.join(","))],
    );
    assert_eq!(post_to(&by_env.url, &headers, body.clone()).await.0, 202);
    assert!(by_env.interrupt().0.success());
    let by_store = Listener::start_on(&url, &["--namespace", &namespace]);
    assert_eq!(
        post_to(&by_store.url, &headers, body).await,
        (200, "duplicate".to_owned())
    );
}

/// `REDIS_WAIT_REPLICAS` on a server with no replica: the handled event is
/// answered 503 (the sender retries), and a listener without the wait then
/// finds it done.
#[tokio::test]
async fn listen_with_replica_acks_answers_503_until_replicas_confirm() {
    let server = support::redis();
    let namespace = support::unique("cli");
    let body = br#"{"n":3}"#.to_vec();
    let headers = signed(SECRET, "msg_acks", SystemTime::now(), &body);
    let waiting = Listener::start_with(
        &["--store", &server.url(), "--namespace", &namespace],
        &[("REDIS_WAIT_REPLICAS", "1"), ("REDIS_WAIT_TIMEOUT", "50ms")],
    );
    assert_eq!(post_to(&waiting.url, &headers, body.clone()).await.0, 503);
    assert!(waiting.interrupt().0.success());
    let plain = Listener::start_on(&server.url(), &["--namespace", &namespace]);
    assert_eq!(
        post_to(&plain.url, &headers, body).await,
        (200, "duplicate".to_owned())
    );
}

#[test]
fn listen_refuses_replica_acks_without_redis_and_two_stores() {
    for args in [
        &["--store", "memory", "--redis-wait-replicas", "1"][..],
        &[
            "--store",
            "memory",
            "--redis-cluster-nodes",
            "redis://127.0.0.1:1",
        ][..],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
            .args(["listen", "--secret", SECRET])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn listen_refuses_an_unknown_store() {
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(["listen", "--secret", SECRET, "--store", "mysql://x"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("--store"));
}

/// Stripe carries the event id in the body: `listen` claims by it.
#[tokio::test]
async fn listen_claims_stripe_events_by_their_body_id() {
    let folder = scratch("listen-stripe");
    let store = format!("sqlite:{}", folder.join("claims.db").display());
    let listener = Listener::start_on(&store, &["--scheme", "stripe"]);
    let body = br#"{"id":"evt_1NG8Du2eZvKYlo2C","type":"invoice.paid"}"#.to_vec();
    let headers: Vec<(String, String)> = Signer::new(Scheme::stripe(), [SECRET])
        .unwrap()
        .sign("unused", SystemTime::now(), &body)
        .unwrap()
        .iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    assert_eq!(post_to(&listener.url, &headers, body.clone()).await.0, 202);
    assert_eq!(
        after_time(&listener.next_line()),
        "evt_1NG8Du2eZvKYlo2C accepted"
    );
    assert_eq!(post_to(&listener.url, &headers, body).await.0, 200);
    assert_eq!(
        after_time(&listener.next_line()),
        "evt_1NG8Du2eZvKYlo2C duplicate"
    );
}

/// GitHub and Shopify sign the body only. `listen` claims their events by a
/// digest of it: a captured request replayed under a fresh delivery id, or
/// with none, is a duplicate; a new body without a delivery id is
/// accepted; a forged body is refused 400.
#[tokio::test]
async fn listen_github_and_shopify_replays_under_any_delivery_id_are_duplicates() {
    for (scheme, name, id_header) in [
        ("github", Scheme::github(), "X-GitHub-Delivery"),
        ("shopify", Scheme::shopify(), "X-Shopify-Webhook-Id"),
    ] {
        let listener = Listener::start(&["--scheme", scheme]);
        let signer = Signer::new(name, [SECRET]).unwrap();
        let sign = |body: &[u8], delivery: Option<&str>| -> Vec<(String, String)> {
            let mut headers: Vec<(String, String)> = signer
                .sign("unused", SystemTime::now(), body)
                .unwrap()
                .iter()
                .filter(|(header, _)| !header.eq_ignore_ascii_case(id_header))
                .map(|(header, value)| (header.to_owned(), value.to_owned()))
                .collect();
            if let Some(delivery) = delivery {
                headers.push((id_header.to_owned(), delivery.to_owned()));
            }
            headers
        };
        let verdict = |line: String| after_time(&line).rsplit(' ').next().unwrap().to_owned();
        let body = br#"{"action":"opened","number":7}"#.to_vec();
        let captured = sign(&body, Some("delivery-1"));
        assert_eq!(post_to(&listener.url, &captured, body.clone()).await.0, 202);
        assert_eq!(verdict(listener.next_line()), "accepted", "{scheme}");
        for replay in [Some("delivery-2"), None] {
            let headers = sign(&body, replay);
            assert_eq!(post_to(&listener.url, &headers, body.clone()).await.0, 200);
            assert_eq!(
                verdict(listener.next_line()),
                "duplicate",
                "{scheme} {replay:?}"
            );
        }
        let other = br#"{"action":"closed","number":7}"#.to_vec();
        let headers = sign(&other, None);
        assert_eq!(post_to(&listener.url, &headers, other.clone()).await.0, 202);
        assert_eq!(verdict(listener.next_line()), "accepted", "{scheme}");
        let mut forged = other.clone();
        forged.extend_from_slice(b" ");
        assert_eq!(
            post_to(&listener.url, &headers, forged).await.0,
            400,
            "{scheme}"
        );
    }
}

/// Fifty clients that send half a request head and then nothing are cut
/// off once `--header-timeout` passes, and a whole request is answered
/// meanwhile: slow clients cannot pin `listen`. (The 30 s below only ends
/// a failing run; the server's limit is 1 s.)
#[tokio::test]
async fn listen_closes_connections_whose_request_head_never_arrives() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = Listener::start(&["--header-timeout", "1s"]);
    let address = listener
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/hooks")
        .to_owned();
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        stream
            .write_all(b"POST /hooks HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .unwrap();
        slow.push(stream);
    }
    let body = br#"{"paid":true}"#.to_vec();
    let valid = signed(SECRET, "msg_meanwhile", SystemTime::now(), &body);
    assert_eq!(post_to(&listener.url, &valid, body).await.0, 202);
    for mut stream in slow {
        let closed = tokio::time::timeout(Duration::from_secs(30), async {
            let mut buffer = [0u8; 1024];
            // Closed, with or without a 408 first.
            while let Ok(read) = stream.read(&mut buffer).await {
                if read == 0 {
                    break;
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "a half-sent request head was still open");
    }
}

/// A client that sends its body a byte at a time is answered 408 once
/// `--request-timeout` passes (the head arrived in time): a slow body
/// cannot hold a connection either. `--header-timeout 0s` is a usage
/// error. (The 30 s below only ends a failing run; the limit is 1 s.)
#[tokio::test]
async fn listen_answers_408_to_a_body_that_never_finishes() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = Listener::start(&["--request-timeout", "1s"]);
    let address = listener
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/hooks")
        .to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    stream
        .write_all(b"POST /hooks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"a\"")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        let mut buffer = [0u8; 1024];
        while let Ok(read) = stream.read(&mut buffer).await {
            if read == 0 {
                break;
            }
            answer.extend_from_slice(&buffer[..read]);
            if answer.windows(4).any(|window| window == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the slow body was still being read");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");

    let refused = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(["listen", "--secret", SECRET, "--header-timeout", "0s"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
}

/// The next `count` lines of `listener`, without their times, sorted: the
/// receiver's line and the worker's for one event may come in either
/// order.
fn next_lines(listener: &Listener, count: usize) -> Vec<String> {
    let mut lines: Vec<String> = (0..count)
        .map(|_| after_time(&listener.next_line()).to_owned())
        .collect();
    lines.sort();
    lines
}

/// `listen --inbox --forward-to`: each event is stored (202) and a worker
/// POSTs it to the app signed again, so the app can verify it; an app
/// that keeps failing gets `--max-attempts` tries, then the event is
/// dead-lettered with the app's answer as its reason, which `hooklatch
/// inbox dead` shows.
// Multi-threaded: the app serves while the test blocks reading lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_into_an_inbox_forwards_retries_and_dead_letters() {
    let failing = || StatusCode::INTERNAL_SERVER_ERROR.into_response();
    let script = Script::new(vec![
        StatusCode::NO_CONTENT.into_response(),
        failing(),
        failing(),
    ]);
    let app_url = script.serve().await;
    let store = format!(
        "sqlite:{}",
        scratch("listen-inbox").join("inbox.db").display()
    );
    let listener = Listener::start_on(
        &store,
        &["--inbox", "--forward-to", &app_url, "--max-attempts", "2"],
    );
    let body = br#"{"n":1}"#.to_vec();
    let send = |id: &'static str| {
        let (url, body) = (listener.url.clone(), body.clone());
        async move {
            post_to(&url, &signed(SECRET, id, SystemTime::now(), &body), body)
                .await
                .0
        }
    };

    assert_eq!(send("msg_ok").await, 202);
    assert_eq!(
        next_lines(&listener, 2),
        [
            "msg_ok accepted into the inbox",
            "msg_ok forwarded: 204 (attempt 1)"
        ]
    );
    assert_eq!(send("msg_ok").await, 200);
    assert_eq!(after_time(&listener.next_line()), "msg_ok duplicate");
    {
        let seen = script.seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        let (_, _, headers) = &seen[0];
        let event = verifier()
            .verify(headers, &body)
            .expect("the app can verify what it is sent");
        assert_eq!(event.id(), Some("msg_ok"));
    }

    assert_eq!(send("msg_bad").await, 202);
    let lines = next_lines(&listener, 3);
    assert_eq!(lines[0], "msg_bad accepted into the inbox", "{lines:?}");
    assert!(
        lines[1].starts_with(
            "msg_bad forward failed (attempt 1 of 2): the app answered 500; retried after a backoff"
        ),
        "{lines:?}"
    );
    assert!(
        lines[2].starts_with(
            "msg_bad forward failed (attempt 2 of 2): the app answered 500; dead-lettered"
        ),
        "{lines:?}"
    );
    let dead = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(["inbox", "--store", &store, "dead"])
        .output()
        .unwrap();
    let said = text(&dead.stdout);
    assert_eq!(dead.status.code(), Some(0), "{said}");
    assert!(said.contains("msg_bad"), "{said}");
    assert!(said.contains("the app answered 500"), "{said}");
    assert!(!said.contains("msg_ok"), "{said}");
    let (exit, _) = listener.interrupt();
    assert!(exit.success());
}

/// `send --outbox` keeps the delivery in the outbox and delivers it from
/// there with a dispatcher: each attempt is printed as the store records
/// it, signed so the app's verifier accepts it, and `outbox attempts`
/// then shows the same attempts from the store. The same id again sends
/// nothing and says so (exit 1); `--outbox` without `--endpoint` is a
/// usage error.
#[tokio::test]
async fn send_through_an_outbox_records_every_attempt_where_outbox_shows_them() {
    let script = Script::new(vec![
        StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        StatusCode::OK.into_response(),
    ]);
    let url = script.serve().await;
    let store = format!(
        "sqlite:{}",
        scratch("send-outbox").join("outbox.db").display()
    );
    let send = |extra: &'static [&'static str]| {
        let (url, store) = (url.clone(), store.clone());
        async move {
            let mut args = vec![
                "--url",
                url.as_str(),
                "--allow-private",
                "--schedule",
                "0,100ms,100ms",
                "--id",
                "msg_kept",
                "--outbox",
                store.as_str(),
            ];
            args.extend_from_slice(extra);
            run_send(&args).await
        }
    };
    let output = send(&["--endpoint", "acme"]).await;
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        text(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("sending msg_kept to ") && lines[0].contains("endpoint acme"),
        "{stdout}"
    );
    // The dispatcher polls, so an attempt may be held past its time:
    // ", held 4 ms by the dispatcher's polling ..." before the answer.
    assert!(lines[1].starts_with("attempt 1"), "{stdout}");
    assert!(lines[1].contains(": 500 in "), "{stdout}");
    assert!(
        lines[2].starts_with("attempt 2 after 100 ms (schedule)"),
        "{stdout}"
    );
    assert!(lines[2].contains(": 200 in "), "{stdout}");
    assert_eq!(lines[3], "delivered after 2 attempts");
    let seen = script.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for (_, _, headers) in &seen {
        let event = verifier()
            .verify(headers, br#"{"paid":true}"#)
            .expect("signed by the dispatcher with the secret given");
        assert_eq!(event.id(), Some("msg_kept"));
    }

    let listed = tokio::process::Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args([
            "outbox",
            "--store",
            &store,
            "--json",
            "attempts",
            "--endpoint",
            "acme",
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let answers: Vec<(String, u64)> = text(&listed.stdout)
        .lines()
        .map(|line| {
            let line: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                line["id"].as_str().unwrap().to_owned(),
                line["answer"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        answers,
        [("msg_kept".to_owned(), 200), ("msg_kept".to_owned(), 500)],
        "newest first"
    );

    let again = send(&["--endpoint", "acme"]).await;
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains("already has delivery msg_kept"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(script.seen.lock().unwrap().len(), 2, "nothing sent again");
    let no_endpoint = send(&[]).await;
    assert_eq!(no_endpoint.status.code(), Some(2));

    // An endpoint that answered 410 is disabled: a later send to it says
    // so at once rather than wait for an enable.
    let gone = Script::new(vec![StatusCode::GONE.into_response()]);
    let gone_url = gone.serve().await;
    let to_gone = |id: &'static str| {
        let (url, store) = (gone_url.clone(), store.clone());
        async move {
            run_send(&[
                "--url",
                &url,
                "--allow-private",
                "--schedule",
                "0,100ms",
                "--id",
                id,
                "--outbox",
                &store,
                "--endpoint",
                "gone-app",
            ])
            .await
        }
    };
    let first = to_gone("msg_to_gone").await;
    assert_eq!(first.status.code(), Some(1));
    assert!(text(&first.stdout).contains("gone: the endpoint answered 410"));
    let later = to_gone("msg_after_gone").await;
    assert_eq!(later.status.code(), Some(1));
    assert!(
        text(&later.stderr).contains("endpoint gone-app is disabled (it answered 410 Gone)"),
        "{}",
        text(&later.stderr)
    );
    assert_eq!(
        gone.seen.lock().unwrap().len(),
        1,
        "nothing sent to a disabled endpoint"
    );

    // A name saved in the outbox is a service's endpoint: refused.
    let path = store.strip_prefix("sqlite:").unwrap();
    let outbox = hooklatch::sender::SqliteOutbox::open(path).await.unwrap();
    let dispatcher = hooklatch::sender::Dispatcher::new(
        outbox,
        hooklatch::sender::HttpTransport::new(hooklatch::sender::AddressPolicy::strict()).unwrap(),
    );
    dispatcher
        .save_endpoint(
            "billing",
            &hooklatch::sender::EndpointConfig::new(
                "https://example.com/hooks",
                "standard",
                [SECRET],
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let clash = run_send(&[
        "--url",
        &url,
        "--allow-private",
        "--id",
        "msg_clash",
        "--outbox",
        &store,
        "--endpoint",
        "billing",
    ])
    .await;
    assert_eq!(clash.status.code(), Some(2));
    assert!(
        text(&clash.stderr).contains("saved under that name"),
        "{}",
        text(&clash.stderr)
    );
}

/// `trigger` sends every listed event of every provider, signed in the
/// provider's scheme so that the library's verifier for that scheme
/// accepts it, with the event's type where the provider puts it (GitHub's,
/// Shopify's and Hook0's headers, the body's `type` otherwise), and a fresh event
/// each time: the same trigger twice makes two claim keys. `--list` needs
/// no secret; an unknown event is a usage error naming the known ones.
#[tokio::test]
async fn trigger_sends_each_listed_event_signed_so_the_providers_scheme_verifies_it() {
    let list = tokio::process::Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(["trigger", "--list"])
        .env_remove("HOOKLATCH_SECRET")
        .output()
        .await
        .unwrap();
    assert_eq!(list.status.code(), Some(0), "{}", text(&list.stderr));
    let events: Vec<(String, String)> = text(&list.stdout)
        .lines()
        .map(|line| {
            let mut words = line.split_whitespace();
            let provider = words.next().unwrap().to_owned();
            let event = words.next().unwrap().to_owned();
            assert!(line.contains("(shaped after https://"), "{line}");
            (provider, event)
        })
        .collect();
    assert!(events.len() >= 11, "{events:?}");
    assert!(
        events.iter().any(|(provider, _)| provider == "hook0"),
        "{events:?}"
    );

    let script = Script::new(Vec::new());
    let url = script.serve().await;
    let secret_of = |provider: &str| match provider {
        "stripe" | "standard" => SECRET,
        _ => "a-shared-secret-of-the-provider",
    };
    let scheme_of = |provider: &str| match provider {
        "stripe" => Scheme::stripe(),
        "github" => Scheme::github(),
        "shopify" => Scheme::shopify(),
        "slack" => Scheme::slack(),
        "hook0" => Scheme::hook0(),
        _ => Scheme::standard_webhooks(),
    };
    for (provider, event) in &events {
        let mut keys = Vec::new();
        for _ in 0..2 {
            let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_hooklatch"))
                .args(["trigger", provider, event, "--url", &url, "--secret"])
                .arg(secret_of(provider))
                .output()
                .await
                .unwrap();
            assert_eq!(
                output.status.code(),
                Some(0),
                "{provider} {event}: {}{}",
                text(&output.stdout),
                text(&output.stderr)
            );
            let (_, _, headers) = script.seen.lock().unwrap().last().unwrap().clone();
            let body = script.bodies.lock().unwrap().last().unwrap().clone();
            let verifier = Verifier::builder(scheme_of(provider))
                .with_secret(secret_of(provider))
                .unwrap()
                .build()
                .unwrap();
            let verified = verifier
                .verify(&headers, &body)
                .unwrap_or_else(|error| panic!("{provider} {event}: {error}"));
            keys.push(
                hooklatch::verify::EventKey::default()
                    .key(&verifier, &verified)
                    .unwrap(),
            );
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let header = |name: &str| {
                headers
                    .iter()
                    .find(|(kept, _)| kept == name)
                    .map(|(_, value)| value.clone())
            };
            let kind = match provider.as_str() {
                "github" => header("x-github-event"),
                "shopify" => header("x-shopify-topic"),
                "hook0" => header("x-event-type"),
                "slack" => json["event"]["type"].as_str().map(str::to_owned),
                _ => json["type"].as_str().map(str::to_owned),
            };
            let expected = match provider.as_str() {
                "github" => event.split('.').next().unwrap(),
                _ => event.as_str(),
            };
            assert_eq!(kind.as_deref(), Some(expected), "{provider} {event}");
        }
        assert_ne!(
            keys[0], keys[1],
            "{provider} {event}: a new event each time"
        );
    }

    let unknown = tokio::process::Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args([
            "trigger",
            "stripe",
            "charge.teleported",
            "--url",
            &url,
            "--secret",
            SECRET,
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        text(&unknown.stderr).contains("payment_intent.succeeded"),
        "{}",
        text(&unknown.stderr)
    );
}
