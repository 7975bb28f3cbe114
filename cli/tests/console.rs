//! The ops console in a real browser: headless Chromium, driven through
//! ChromeDriver's WebDriver API, signs in, sees the dead letters of a
//! Postgres store and requeues one through the page; then sees a failing
//! endpoint of a Postgres outbox and replays one of its dead deliveries.
//! The store changes each time.
//! Chromium and ChromeDriver come from Debian's `chromium` and
//! `chromium-driver` packages, which `scripts/test` installs: without them
//! this test fails, it does not skip.

#[path = "../../tests/support/outbox_seed.rs"]
mod seed;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use hooklatch::dedup::{GiveBack, Inbox, InboxQueue, IncomingEvent, PostgresInbox, StoreOptions};
use hooklatch::sender::PostgresOutbox;
use hooklatch::sender::outbox::DeliveryState;
use hooklatch::sender::outbox::DeliveryStore;
use serde_json::{Value, json};

const TOKEN: &str = "console-test-token-0123456789";

/// A child process killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `hooklatch console` on the store (and outbox), and its address.
fn start_console(store: &str, namespace: &str, outbox: Option<&str>) -> (Running, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(["console", "--store", store, "--namespace", namespace])
        .args(
            outbox
                .map(|outbox| ["--outbox", outbox])
                .into_iter()
                .flatten(),
        )
        .args(["--addr", "127.0.0.1:0"])
        .env("HOOKLATCH_CONSOLE_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .expect("hooklatch console runs");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("console on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    (Running(child), url)
}

/// A WebDriver session on a ChromeDriver of this test's own.
struct Browser {
    _driver: Running,
    client: reqwest::Client,
    session: String,
    _profile: support::TempDir,
}

/// Ends the session, so that ChromeDriver quits the browser: killing
/// ChromeDriver alone leaves Chromium running. From a thread of its own,
/// as a test's runtime cannot be blocked on; also when the test panicked.
impl Drop for Browser {
    fn drop(&mut self) {
        let session = self.session.clone();
        let ended = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(async {
                    reqwest::Client::new()
                        .delete(session)
                        .timeout(Duration::from_secs(10))
                        .send()
                        .await
                })
        })
        .join();
        if !matches!(ended, Ok(Ok(_))) {
            eprintln!("the WebDriver session did not end; Chromium may still run");
        }
    }
}

impl Browser {
    async fn start() -> Self {
        let port = support::free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver runs: install Debian's chromium and chromium-driver, or run scripts/test");
        let client = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.get(format!("{base}/status")).send().await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = support::TempDir::new("chromium");
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1200,900",
        ]
        .map(str::to_owned)
        .into_iter()
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .collect::<Vec<_>>();
        let created: Value = client
            .post(format!("{base}/session"))
            .body(
                json!({"capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}
                }}})
                .to_string(),
            )
            .send()
            .await
            .unwrap()
            .text()
            .await
            .map(|text| serde_json::from_str(&text).unwrap())
            .unwrap();
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        Self {
            _driver: Running(driver),
            client,
            session: format!("{base}/session/{session}"),
            _profile: profile,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.session));
        if !body.is_null() {
            request = request.body(body.to_string());
        }
        let answer: Value = request
            .send()
            .await
            .unwrap()
            .text()
            .await
            .map(|text| serde_json::from_str(&text).unwrap_or(Value::Null))
            .unwrap();
        answer["value"].clone()
    }

    async fn open(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", json!({ "url": url }))
            .await;
    }

    async fn find(&self, css: &str) -> String {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await;
        found
            .as_object()
            .and_then(|element| element.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned()
    }

    async fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/value"),
            json!({ "text": text }),
        )
        .await;
    }

    async fn click(&self, css: &str) {
        let element = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{element}/click"),
            json!({}),
        )
        .await;
    }

    async fn source(&self) -> String {
        let source = self
            .call(reqwest::Method::GET, "/source", Value::Null)
            .await;
        source
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no page source: {source}"))
    }

    /// The page's source once it contains `text` (a click's navigation
    /// may still be under way when the click returns).
    async fn source_with(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let source = self.source().await;
            if source.contains(text) {
                return source;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed {text}: {source}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn screenshot(&self) -> Vec<u8> {
        let png = self
            .call(reqwest::Method::GET, "/screenshot", Value::Null)
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap_or_default())
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_requeues_a_dead_letter_and_replays_a_failing_endpoints_delivery_in_a_real_browser()
 {
    let server = support::postgres();
    let store = PostgresInbox::connect(&server.url())
        .await
        .unwrap()
        .with_options(StoreOptions::default().with_max_attempts(1));
    let namespace = support::unique("console");
    for id in ["evt_a", "evt_b"] {
        let body = format!(r#"{{"id":"{id}","note":"<b>not bold</b>"}}"#);
        let _ = store
            .accept(&IncomingEvent::new(&namespace, id, body.as_bytes()))
            .await
            .unwrap();
    }
    for entry in store.take(&namespace, "w", 10).await.unwrap() {
        let reason = format!("<i>{} failed</i>", entry.id);
        store
            .give_back(&entry, GiveBack::DeadLetter, &reason)
            .await
            .unwrap();
    }
    assert_eq!(store.stats(&namespace).await.unwrap().dead, 2);

    let deliveries = PostgresOutbox::connect(&server.url()).await.unwrap();
    let endpoint = support::unique("console");
    seed_failing_endpoint(&deliveries, &endpoint).await;
    let (_console, url) = start_console(&server.url(), &namespace, Some(&server.url()));
    let anonymous = reqwest::get(&url).await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401, "no token, no console");

    let browser = Browser::start().await;
    browser.open(&url).await;
    browser.type_into("input[name=token]", TOKEN).await;
    browser.click("#login").await;
    let page = browser.source_with("dead 2").await;
    assert!(page.contains("evt_a") && page.contains("evt_b"), "{page}");
    assert!(page.contains("dead 2"), "{page}");
    assert!(
        page.contains("&lt;b&gt;not bold&lt;/b&gt;") && !page.contains("<b>not bold</b>"),
        "the body preview is escaped"
    );
    assert!(
        page.contains("&lt;i&gt;evt_a failed&lt;/i&gt;"),
        "each dead letter shows why it died, escaped: {page}"
    );
    let shot = browser.screenshot().await;
    let folder = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("console.png"), &shot).unwrap();
    assert!(shot.starts_with(b"\x89PNG"), "a PNG screenshot");

    browser.click("button[data-requeue=evt_a]").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.stats(&namespace).await.unwrap().dead != 1 {
        assert!(Instant::now() < deadline, "the requeue reached the store");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = browser.source().await;
    assert!(
        page.contains("dead 1") && page.contains("waiting 1"),
        "{page}"
    );
    let dead: Vec<String> = store
        .dead_letters(&namespace, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|entry| entry.id)
        .collect();
    assert_eq!(dead, ["evt_b"]);

    browser.open(&format!("{url}outbox")).await;
    let list = browser.source_with(&endpoint).await;
    let row_start = list.find(&format!("data-endpoint=\"{endpoint}\"")).unwrap();
    let row = &list[row_start..row_start + list[row_start..].find("</tr>").unwrap()];
    assert!(row.contains("failing since"), "{row}");
    assert!(row.contains("https://hooks.example/***"), "{row}");
    browser.click(&format!("a[href$=\"{endpoint}\"]")).await;
    let page = browser.source_with("Latest attempts").await;
    assert!(
        page.contains("dead 2") && page.contains("<td>503</td>"),
        "{page}"
    );
    assert!(page.contains("connection refused"), "{page}");
    let shot = browser.screenshot().await;
    std::fs::write(folder.join("console-outbox.png"), &shot).unwrap();
    assert!(shot.starts_with(b"\x89PNG"), "a PNG screenshot");

    browser.click("button[data-replay=dead_1]").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while deliveries
        .delivery(&endpoint, "dead_1")
        .await
        .unwrap()
        .unwrap()
        .state
        != DeliveryState::Pending
    {
        assert!(Instant::now() < deadline, "the replay reached the store");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = browser.source_with("dead 1").await;
    assert!(page.contains("pending 1"), "{page}");
    let state = deliveries
        .delivery(&endpoint, "dead_2")
        .await
        .unwrap()
        .unwrap()
        .state;
    assert_eq!(state, DeliveryState::Dead);
}

/// An endpoint whose two deliveries died (a 503 and a refused connection)
/// and that has been failing since.
async fn seed_failing_endpoint(store: &PostgresOutbox, endpoint: &str) {
    let now = SystemTime::now();
    let plan = [
        ("dead_1", now, Ok(503)),
        ("dead_2", now, Err("connection refused")),
    ];
    seed::seed_endpoint(store, endpoint, &plan).await;
}

/// `GET /` on the console at `url` with `token` as a bearer: the status.
fn status_with_bearer(url: &str, token: &str) -> u16 {
    use std::io::{Read as _, Write as _};
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(address).expect("the console listens");
    write!(
        stream,
        "GET / HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP answer: {answer}"))
}

#[test]
fn console_takes_its_token_from_a_file_or_the_environment_never_a_flag() {
    let dir = support::TempDir::new("console-token");
    let path = dir.path().join("console.db");
    // The console looks into a store something else writes: it must exist.
    let opened = std::process::Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(["console", "--store", &format!("sqlite:{}", path.display())])
        .env("HOOKLATCH_CONSOLE_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert_eq!(opened.status.code(), Some(1), "no store there yet");
    assert!(!path.exists(), "and none was created");
    drop(new_sqlite_store(&path));
    let store = format!("sqlite:{}", path.display());
    let console = |extra: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hooklatch"));
        command
            .args(["console", "--store", &store, "--addr", "127.0.0.1:0"])
            .args(extra)
            .env_remove("HOOKLATCH_CONSOLE_TOKEN");
        command
    };

    // A token on the command line would show in `ps`: no flag takes it.
    let flag = console(&["--token", TOKEN]).output().unwrap();
    assert_eq!(flag.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&flag.stderr).contains("--token"));

    let none = console(&[]).output().unwrap();
    assert_eq!(none.status.code(), Some(2));
    let said = String::from_utf8_lossy(&none.stderr);
    assert!(
        said.contains("HOOKLATCH_CONSOLE_TOKEN") && said.contains("--token-file"),
        "says where the token comes from: {said}"
    );

    let missing = dir.path().join("missing");
    let unreadable = console(&["--token-file", &missing.display().to_string()])
        .output()
        .unwrap();
    assert_eq!(unreadable.status.code(), Some(2));

    let file = dir.path().join("token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let mut child = console(&["--token-file", &file.display().to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let running = Running(child);
    let url = line.trim().strip_prefix("console on ").expect("it serves");
    assert_eq!(
        status_with_bearer(url, TOKEN),
        200,
        "the file's token, trimmed"
    );
    assert_eq!(status_with_bearer(url, "another-token-0123456789"), 401);
    drop(running);
}

/// Creates an empty SQLite inbox at `path`, on a runtime of its own.
fn new_sqlite_store(path: &std::path::Path) -> hooklatch::dedup::SqliteInbox {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(hooklatch::dedup::SqliteInbox::open(path))
        .unwrap()
}
