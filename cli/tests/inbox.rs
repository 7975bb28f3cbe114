//! `hooklatch inbox` against real stores: counts, dead letters and
//! requeueing, on SQLite and Postgres, checked against the store itself.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::Command;

use hooklatch::dedup::{
    EventMeta, GiveBack, Inbox, InboxQueue, IncomingEvent, NackOutcome, PostgresInbox, SqliteInbox,
    StoreOptions,
};

/// Three events, two of them dead-lettered (one attempt each).
async fn seed<S: InboxQueue>(store: &S, namespace: &str) {
    let meta = EventMeta::with_type("invoice.paid");
    for id in ["evt_a", "evt_b", "evt_c"] {
        let event = IncomingEvent::new(namespace, id, br#"{"amount":100}"#).with_meta(&meta);
        let _ = store.accept(&event).await.unwrap();
    }
    for entry in store.take(namespace, "w", 2).await.unwrap() {
        let reason = format!("no customer for {}", entry.id);
        assert_eq!(
            store
                .give_back(&entry, GiveBack::DeadLetter, &reason)
                .await
                .unwrap(),
            NackOutcome::DeadLettered
        );
    }
}

fn run(store: &str, namespace: &str, args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(["inbox", "--store", store, "--namespace", namespace])
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

async fn the_inbox_commands_show_and_requeue_what_the_store_holds<S: InboxQueue>(
    store: &S,
    spec: &str,
) {
    let namespace = support::unique("cli");
    seed(store, &namespace).await;
    assert_eq!(
        run(spec, &namespace, &["stats"]),
        (0, "waiting 1, taken 0, dead 2\n".into())
    );
    let (code, dead) = run(spec, &namespace, &["dead"]);
    assert_eq!(code, 0);
    let mut lines: Vec<String> = dead
        .lines()
        .map(|line| {
            // The time it died is the store's; its shape is checked here.
            let (start, rest) = line.split_once(" died=").unwrap();
            let (died, end) = rest.split_once(' ').unwrap();
            assert!(died.len() == 20 && died.ends_with('Z'), "{died}");
            format!("{start} {end}")
        })
        .collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            r#"evt_a attempts=1 type=invoice.paid reason="no customer for evt_a" {"amount":100}"#,
            r#"evt_b attempts=1 type=invoice.paid reason="no customer for evt_b" {"amount":100}"#,
        ]
    );
    // The same for scripts: an object a line.
    let json = |args: &[&str]| {
        let mut with_json = args.to_vec();
        with_json.push("--json");
        let (code, out) = run(spec, &namespace, &with_json);
        assert_eq!(code, 0, "{out}");
        out.lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        json(&["stats"]),
        [serde_json::json!({"namespace": namespace, "waiting": 1, "taken": 0, "dead": 2})]
    );
    let mut dead = json(&["dead"]);
    dead.sort_by_key(|letter| letter["id"].as_str().unwrap().to_owned());
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[0]["id"], "evt_a");
    assert_eq!(dead[0]["attempts"], 1);
    assert_eq!(dead[0]["type"], "invoice.paid");
    assert_eq!(dead[0]["reason"], "no customer for evt_a");
    assert_eq!(dead[0]["body"], r#"{"amount":100}"#);
    assert!(dead[0]["died"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        run(spec, &namespace, &["requeue", "--id", "evt_a"]),
        (0, "requeued 1\n".into())
    );
    assert_eq!(store.stats(&namespace).await.unwrap().dead, 1);
    assert_eq!(
        run(spec, &namespace, &["requeue", "--all"]),
        (0, "requeued 1\n".into())
    );
    let stats = store.stats(&namespace).await.unwrap();
    assert_eq!((stats.waiting, stats.dead), (3, 0));
    // Nothing found is said, not silent; as JSON, no line.
    assert_eq!(
        run(spec, &namespace, &["dead"]),
        (0, format!("no dead letters in namespace {namespace}\n"))
    );
    assert_eq!(
        run(spec, &namespace, &["dead", "--json"]),
        (0, String::new())
    );
    assert_eq!(
        run(spec, &namespace, &["requeue", "--all", "--json"]),
        (0, "{\"requeued\":0}\n".into())
    );
    assert_eq!(
        run(spec, &namespace, &["requeue", "--id", "nope"]).0,
        1,
        "no dead letter of that id"
    );
    assert_eq!(run(spec, &namespace, &["requeue"]).0, 2, "--id or --all");
    assert_eq!(
        run("mysql://x", &namespace, &["stats"]).0,
        2,
        "unknown store"
    );
}

#[tokio::test]
async fn the_inbox_commands_work_on_sqlite() {
    let dir = support::TempDir::new("cli-inbox");
    let path = dir.path().join("inbox.db");
    let store = SqliteInbox::open(&path)
        .await
        .unwrap()
        .with_options(StoreOptions::default().with_max_attempts(1));
    let spec = format!("sqlite:{}", path.display());
    the_inbox_commands_show_and_requeue_what_the_store_holds(&store, &spec).await;
}

#[tokio::test]
async fn the_inbox_commands_work_on_postgres() {
    let server = support::postgres();
    let store = PostgresInbox::connect(&server.url())
        .await
        .unwrap()
        .with_options(StoreOptions::default().with_max_attempts(1));
    the_inbox_commands_show_and_requeue_what_the_store_holds(&store, &server.url()).await;
}

/// A `sqlite:` path where no store is: said, exit 1, and no file created
/// (`stats` on a typo read zeros and left an empty database behind).
#[test]
fn a_sqlite_store_that_does_not_exist_is_refused_and_not_created() {
    let dir = support::TempDir::new("cli-inbox-missing");
    let path = dir.path().join("typo.db");
    let spec = format!("sqlite:{}", path.display());
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(["inbox", "--store", &spec, "stats"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("no store at"), "{said}");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "no file was created"
    );
}

#[test]
fn a_store_that_is_down_is_exit_one() {
    let port = support::free_port();
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args([
            "inbox",
            "--store",
            &format!("postgres://x@127.0.0.1:{port}/db"),
            "stats",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
}

/// A store URL of no store is a usage error (exit 2) that names the scheme
/// and never the rest of the URL, which may hold a password.
#[test]
fn a_store_url_of_no_store_is_a_usage_error_that_hides_the_password() {
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args([
            "inbox",
            "--store",
            "mysql://admin:hunter2@db/hooks",
            "stats",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("`mysql:`"), "{said}");
    assert!(!said.contains("hunter2"), "{said}");
}

/// A store that is down is named without its password (exit 1), and the
/// in-process `memory:` store, always empty to a separate command, is a
/// usage error.
#[test]
fn a_store_that_is_down_is_named_without_its_password() {
    let port = support::free_port();
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args([
            "inbox",
            "--store",
            &format!("postgres://app:hunter2@127.0.0.1:{port}/db"),
            "stats",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("cannot open postgres://***@127.0.0.1"),
        "{said}"
    );
    assert!(!said.contains("hunter2"), "{said}");

    // Both spellings `listen` takes.
    for memory in ["memory:", "memory"] {
        let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
            .args(["inbox", "--store", memory, "stats"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(
            said.contains("empty store in this process"),
            "{memory}: {said}"
        );
    }
}

/// A Postgres server that is not there is said as the connection's own
/// error, not the pool's "timed out".
#[test]
fn a_closed_postgres_port_is_said_as_refused() {
    let port = support::free_port();
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args([
            "inbox",
            "--store",
            &format!("postgres://app@127.0.0.1:{port}/db"),
            "stats",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("refused"), "{said}");
    assert!(!said.contains("timed out"), "{said}");
}

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// An app on loopback that verifies each request with the library and
/// sends what it accepted; `/fail` answers 500.
async fn verifying_app() -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<(String, Vec<u8>, Option<String>)>,
) {
    use axum::http::{HeaderMap, StatusCode};
    let verifier =
        hooklatch::verify::Verifier::builder(hooklatch::verify::Scheme::standard_webhooks())
            .with_secret(SECRET)
            .unwrap()
            .build()
            .unwrap();
    let (seen, seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::post(
                move |headers: HeaderMap, body: axum::body::Bytes| async move {
                    match verifier.verify(&headers, &body) {
                        Ok(verified) => {
                            let trace = headers
                                .get("traceparent")
                                .map(|value| value.to_str().unwrap().to_owned());
                            let id = verified.id().unwrap().to_owned();
                            let _ = seen.send((id, body.to_vec(), trace));
                            StatusCode::ACCEPTED
                        }
                        Err(_) => StatusCode::UNAUTHORIZED,
                    }
                },
            ),
        )
        .route(
            "/fail",
            axum::routing::post(|| async { StatusCode::INTERNAL_SERVER_ERROR }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen_rx)
}

/// `run` off the runtime that serves the app.
async fn run_beside(store: &str, namespace: &str, args: &[&str]) -> (i32, String, String) {
    let (store, namespace) = (store.to_owned(), namespace.to_owned());
    let args: Vec<String> = args.iter().map(|&arg| arg.to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
            .args(["inbox", "--store", &store, "--namespace", &namespace])
            .args(&args)
            .env_remove("HOOKLATCH_SECRET")
            .output()
            .unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// `inbox replay` POSTs dead letters to the app, signed again, which its
/// verifier accepts, with the headers the receiver kept; they stay dead
/// letters. One by `--id`, all by `--all`; an app that fails, or an id
/// with no dead letter, is exit 1; a secret that cannot sign is exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_sends_dead_letters_signed_again_and_keeps_them_dead() {
    let dir = support::TempDir::new("cli-replay");
    let path = dir.path().join("inbox.db");
    let store = SqliteInbox::open(&path).await.unwrap();
    let spec = format!("sqlite:{}", path.display());
    let namespace = support::unique("replay");
    let mut meta = EventMeta::with_type("invoice.paid");
    meta.headers.push((
        "traceparent".into(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
    ));
    for id in ["evt_a", "evt_b", "evt_c"] {
        let event = IncomingEvent::new(&namespace, id, br#"{"amount":100}"#).with_meta(&meta);
        let _ = store.accept(&event).await.unwrap();
    }
    for entry in store.take(&namespace, "w", 2).await.unwrap() {
        store
            .give_back(&entry, GiveBack::DeadLetter, "no customer")
            .await
            .unwrap();
    }
    let (url, mut seen) = verifying_app().await;

    let (code, out, _) = run_beside(
        &spec,
        &namespace,
        &["replay", "--id", "evt_b", "--url", &url, "--secret", SECRET],
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "evt_b replayed: 202\n"));
    let (id, body, trace) = seen.recv().await.unwrap();
    assert_eq!(id, "evt_b");
    assert_eq!(body, br#"{"amount":100}"#);
    assert_eq!(
        trace.as_deref(),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );

    let (code, out, _) = run_beside(
        &spec,
        &namespace,
        &[
            "replay", "--all", "--url", &url, "--secret", SECRET, "--json",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    let mut replayed: Vec<String> = out
        .lines()
        .map(|line| {
            let line: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(
                (&line["replayed"], &line["status"]),
                (&true.into(), &202.into())
            );
            line["id"].as_str().unwrap().to_owned()
        })
        .collect();
    replayed.sort();
    assert_eq!(replayed, ["evt_a", "evt_b"]);
    let mut received = vec![seen.recv().await.unwrap().0, seen.recv().await.unwrap().0];
    received.sort();
    assert_eq!(received, ["evt_a", "evt_b"]);
    let stats = store.stats(&namespace).await.unwrap();
    assert_eq!(
        (stats.waiting, stats.dead),
        (1, 2),
        "replayed letters stay dead"
    );

    let fail = format!("{url}/fail");
    let (code, out, _) = run_beside(
        &spec,
        &namespace,
        &[
            "replay", "--id", "evt_a", "--url", &fail, "--secret", SECRET,
        ],
    )
    .await;
    assert_eq!(
        (code, out.as_str()),
        (1, "evt_a not replayed: the app answered 500\n")
    );
    let (code, _, err) = run_beside(
        &spec,
        &namespace,
        &["replay", "--id", "evt_c", "--url", &url, "--secret", SECRET],
    )
    .await;
    assert_eq!(code, 1, "evt_c waits, it is no dead letter");
    assert!(err.contains("no dead letter evt_c"), "{err}");
    let (code, _, err) = run_beside(
        &spec,
        &namespace,
        &["replay", "--all", "--url", &url, "--secret", "whsec_???"],
    )
    .await;
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run_beside(
        &spec,
        &namespace,
        &[
            "replay",
            "--all",
            "--url",
            "localhost:3000",
            "--secret",
            SECRET,
        ],
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("http://localhost:3000"), "{err}");
    // `--limit 1` reads one of the two dead letters: an id not among it
    // may be beyond the page, and is said to be, not said missing.
    let (code, _, err) = run_beside(
        &spec,
        &namespace,
        &[
            "replay", "--id", "evt_zz", "--limit", "1", "--url", &url, "--secret", SECRET,
        ],
    )
    .await;
    assert_eq!(code, 1);
    assert!(err.contains("raise --limit"), "{err}");
    assert!(seen.try_recv().is_err(), "nothing else reached the app");
}
