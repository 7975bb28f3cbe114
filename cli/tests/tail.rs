//! `hooklatch tail` against real stores: it prints the events a receiver
//! accepts after it starts, as they come, on SQLite, Postgres and Redis.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use hooklatch::dedup::{
    Acceptance, EventMeta, Inbox, IncomingEvent, PostgresInbox, RedisInbox, SqliteInbox,
    tenant_namespace,
};
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// Starts `hooklatch tail` on `spec` following `namespaces`; returns once
/// it said it follows them (its first reads are done).
async fn start_tail(spec: &str, namespaces: &[&str], args: &[&str]) -> tokio::process::Child {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_hooklatch"));
    command.args(["tail", "--store", spec, "--interval", "20ms"]);
    for namespace in namespaces {
        command.args(["--namespace", namespace]);
    }
    let mut child = command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let said = stderr.next_line().await.unwrap().unwrap_or_default();
    assert!(said.starts_with("hooklatch: following "), "{said}");
    child
}

/// Waits for the tail to print `--count` events and exit; its stdout.
async fn printed(child: tokio::process::Child) -> String {
    // A guard against a hang, not a timing: it never bounds a pass.
    let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("tail printed its --count events")
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    String::from_utf8(output.stdout).unwrap()
}

async fn accept<S: Inbox>(store: &S, namespace: &str, id: &str) {
    let paid = EventMeta::with_type("invoice.paid");
    let event = IncomingEvent::new(namespace, id, b"{}").with_meta(&paid);
    assert_eq!(store.accept(&event).await.unwrap(), Acceptance::Accepted);
}

/// An event accepted before `tail` started is not printed; the three after
/// are, each once, with its type, status and tenant (one is a tenant's).
async fn tail_prints_what_the_receiver_accepts_after_it_starts<S: Inbox>(store: &S, spec: &str) {
    let namespace = support::unique("tail");
    let tenant = tenant_namespace(&namespace, "acme");
    accept(store, &namespace, "evt_before").await;
    let child = start_tail(spec, &[&namespace, &tenant], &["--json", "--count", "3"]).await;
    accept(store, &namespace, "evt_1").await;
    accept(store, &tenant, "evt_2").await;
    accept(store, &namespace, "evt_3").await;
    let mut lines: Vec<serde_json::Value> = printed(child)
        .await
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    lines.sort_by_key(|line| line["id"].as_str().unwrap_or_default().to_owned());
    let ids: Vec<&str> = lines
        .iter()
        .filter_map(|line| line["id"].as_str())
        .collect();
    assert_eq!(ids, ["evt_1", "evt_2", "evt_3"]);
    for line in &lines {
        assert_eq!(line["type"], "invoice.paid", "{line}");
        assert_eq!(line["status"], "waiting", "{line}");
        assert!(
            line["accepted_at"]
                .as_str()
                .is_some_and(|at| at.ends_with('Z')),
            "{line}"
        );
    }
    assert_eq!(lines[1]["tenant"], "acme");
    assert_eq!(lines[1]["namespace"], tenant.as_str());
    assert!(lines[0]["tenant"].is_null());
}

/// A SQLite store in `dir`, and its `--store` spec.
async fn sqlite_store(dir: &support::TempDir) -> (SqliteInbox, String) {
    let path = dir.path().join("inbox.db");
    let store = SqliteInbox::open(&path).await.unwrap();
    (store, format!("sqlite:{}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_prints_accepts_on_sqlite() {
    let dir = support::TempDir::new("cli-tail");
    let (store, spec) = sqlite_store(&dir).await;
    tail_prints_what_the_receiver_accepts_after_it_starts(&store, &spec).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_prints_accepts_on_postgres() {
    let server = support::postgres();
    let store = PostgresInbox::connect(&server.url()).await.unwrap();
    tail_prints_what_the_receiver_accepts_after_it_starts(&store, &server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_prints_accepts_on_redis() {
    let server = support::redis();
    let store = RedisInbox::connect(&server.url()).await.unwrap();
    tail_prints_what_the_receiver_accepts_after_it_starts(&store, &server.url()).await;
}

/// Without `--json`, a line a person reads: time, id, type, status, and
/// the tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_prints_a_line_a_person_reads() {
    let dir = support::TempDir::new("cli-tail");
    let (store, spec) = sqlite_store(&dir).await;
    let namespace = tenant_namespace("hooks", "acme");
    let child = start_tail(&spec, &[&namespace], &["--count", "1"]).await;
    let paid = EventMeta::with_type("invoice.paid");
    let event = IncomingEvent::new(&namespace, "evt_1", b"{}").with_meta(&paid);
    let _ = store.accept(&event).await.unwrap();
    let out = printed(child).await;
    let (time, rest) = out.split_once(' ').unwrap();
    assert!(time.len() == 24 && time.ends_with('Z'), "{time}");
    assert_eq!(rest, "evt_1 type=invoice.paid status=waiting tenant=acme\n");
}

fn run(args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .arg("tail")
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Bad flags are usage errors (exit 2) that say what is wrong; a store
/// that is not there is exit 1, and is not created.
#[test]
fn tail_refuses_bad_flags_and_a_missing_store() {
    let (code, said) = run(&["--interval", "0s"]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("outside 10ms to 1h"), "{said}");
    let (code, said) = run(&["--namespace", "two words"]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("--namespace two words"), "{said}");
    let (code, said) = run(&["--count", "0"]);
    assert_eq!(code, 2, "{said}");
    let dir = support::TempDir::new("cli-tail");
    let path = dir.path().join("typo.db");
    let (code, said) = run(&["--store", &format!("sqlite:{}", path.display())]);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("no store at"), "{said}");
    assert!(!path.exists());
}
