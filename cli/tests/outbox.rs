//! `hooklatch outbox` against real stores: endpoints, dead deliveries,
//! attempts, replay (one or a time range), disable and enable, on SQLite
//! and Postgres, checked against the store itself.

#[path = "../../tests/support/outbox_seed.rs"]
mod seed;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, SystemTime};

use hooklatch::sender::outbox::DeliveryStore;
use hooklatch::sender::outbox::{DeliveryState, DisableReason};
use hooklatch::sender::{PostgresOutbox, SqliteOutbox};

const HOUR: Duration = Duration::from_secs(3600);

/// A saved endpoint with two dead deliveries (last tried 1 h and 3 h ago)
/// and a delivered one.
async fn seed(store: &impl DeliveryStore, endpoint: &str) {
    let now = SystemTime::now();
    let plan = [
        ("dead_1", now - HOUR, Ok(500)),
        ("dead_2", now - 3 * HOUR, Ok(503)),
        ("fine", now - 2 * HOUR, Ok(200)),
    ];
    seed::seed_endpoint(store, endpoint, &plan).await;
}

fn run(store: &str, args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(["outbox", "--store", store])
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

async fn the_outbox_commands_show_and_change_what_the_store_holds(
    store: &impl DeliveryStore,
    spec: &str,
) {
    let endpoint = support::unique("cli");
    seed(store, &endpoint).await;
    let e = endpoint.as_str();

    let (code, listed) = run(spec, &["endpoints"]);
    assert_eq!(code, 0);
    let line = listed
        .lines()
        .find(|line| line.starts_with(&format!("{e} ")))
        .unwrap_or_else(|| panic!("{e} in {listed}"));
    assert!(
        line.starts_with(&format!("{e} enabled failing_since=")),
        "{line}"
    );
    assert!(
        line.ends_with("pending=0 due=0 dead=2 gone=0 delivered=1 url=https://hooks.example/***"),
        "{line}"
    );

    let (code, dead) = run(spec, &["dead", "--endpoint", e]);
    assert_eq!(code, 0);
    let mut dead: Vec<&str> = dead.lines().collect();
    dead.sort_unstable();
    assert_eq!(dead.len(), 2);
    assert!(dead[0].starts_with("dead_1 attempts=1 last=") && dead[0].ends_with("answer=500"));
    assert!(dead[1].starts_with("dead_2 attempts=1 last=") && dead[1].ends_with("answer=503"));

    // The same for scripts: an object a line.
    let json = |args: &[&str]| {
        let mut with_json = args.to_vec();
        with_json.push("--json");
        let (code, out) = run(spec, &with_json);
        assert_eq!(code, 0, "{out}");
        out.lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .collect::<Vec<_>>()
    };
    let listed = json(&["endpoints"]);
    let mine = listed
        .iter()
        .find(|endpoint| endpoint["name"] == e)
        .unwrap();
    assert_eq!(mine["health"], "enabled");
    assert!(mine["failing_since"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        (
            mine["pending"].as_u64(),
            mine["dead"].as_u64(),
            mine["delivered"].as_u64()
        ),
        (Some(0), Some(2), Some(1))
    );
    assert_eq!(mine["url"], "https://hooks.example/***");
    let mut dead = json(&["dead", "--endpoint", e]);
    dead.sort_by_key(|delivery| delivery["id"].as_str().unwrap().to_owned());
    assert_eq!(
        dead.iter()
            .map(|d| (d["id"].clone(), d["answer"].clone()))
            .collect::<Vec<_>>(),
        [
            (serde_json::json!("dead_1"), serde_json::json!(500)),
            (serde_json::json!("dead_2"), serde_json::json!(503))
        ]
    );
    let attempts = json(&["attempts", "--endpoint", e, "--limit", "2"]);
    assert_eq!(attempts[0]["id"], "dead_1");
    assert_eq!(attempts[0]["answer"], 500);
    assert!(attempts[0]["took_ms"].is_u64());

    let (code, attempts) = run(spec, &["attempts", "--endpoint", e, "--limit", "2"]);
    assert_eq!(code, 0);
    let ids: Vec<&str> = attempts
        .lines()
        .map(|line| line.split(' ').nth(1).unwrap())
        .collect();
    assert_eq!(ids, ["dead_1", "fine"], "newest first: {attempts}");

    // Only dead_1 was last tried in the past two hours.
    let replay = ["replay", "--endpoint", e, "--since", "2h"];
    assert_eq!(run(spec, &replay), (0, "replayed 1\n".into()));
    let state =
        |id: &'static str| async move { store.delivery(e, id).await.unwrap().unwrap().state };
    assert_eq!(state("dead_1").await, DeliveryState::Pending);
    assert_eq!(state("dead_2").await, DeliveryState::Dead);
    let one = ["replay", "--endpoint", e, "--id", "dead_2"];
    assert_eq!(run(spec, &one), (0, "replayed 1\n".into()));
    assert_eq!(state("dead_2").await, DeliveryState::Pending);

    assert_eq!(
        run(spec, &["disable", "--endpoint", e]),
        (0, "disabled\n".into())
    );
    let health = store.health(e).await.unwrap();
    assert_eq!(health.disabled, Some(DisableReason::Manual));
    assert_eq!(
        run(spec, &["enable", "--endpoint", e]),
        (0, "enabled\n".into())
    );
    assert_eq!(store.health(e).await.unwrap().disabled, None);

    assert_eq!(
        run(spec, &["replay", "--endpoint", e]).0,
        2,
        "--id or --since"
    );
    let bad_time = ["replay", "--endpoint", e, "--since", "yesterday"];
    assert_eq!(run(spec, &bad_time).0, 2);
    assert_eq!(run(spec, &["dead", "--endpoint", "no spaces"]).0, 2);

    // A name the outbox does not know: said, exit 1, and nothing created.
    for command in ["disable", "enable", "dead", "attempts"] {
        assert_eq!(
            run(spec, &[command, "--endpoint", "typo"]).0,
            1,
            "{command} of an unknown endpoint"
        );
    }
    let (_, listed) = run(spec, &["endpoints"]);
    assert!(
        !listed.contains("typo"),
        "no endpoint was created: {listed}"
    );
    assert_eq!(
        store.health("typo").await.unwrap().disabled,
        None,
        "nothing disabled"
    );
    assert_eq!(run("mysql://x", &["endpoints"]).0, 2, "unknown store");
}

#[tokio::test]
async fn the_outbox_commands_work_on_sqlite() {
    let dir = support::TempDir::new("cli-outbox");
    let path = dir.path().join("outbox.db");
    let store = SqliteOutbox::open(&path).await.unwrap();
    let spec = format!("sqlite:{}", path.display());
    the_outbox_commands_show_and_change_what_the_store_holds(&store, &spec).await;
}

#[tokio::test]
async fn the_outbox_commands_work_on_postgres() {
    let server = support::postgres();
    let store = PostgresOutbox::connect(&server.url()).await.unwrap();
    the_outbox_commands_show_and_change_what_the_store_holds(&store, &server.url()).await;
}

/// A `sqlite:` path where no store is: every outbox command says so and
/// exits 1, creating no file (a typo would otherwise read as an empty
/// outbox).
#[test]
fn a_sqlite_outbox_that_does_not_exist_is_refused_and_not_created() {
    let dir = support::TempDir::new("cli-outbox-missing");
    let path = dir.path().join("typo.db");
    let spec = format!("sqlite:{}", path.display());
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(["outbox", "--store", &spec, "endpoints"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no store at"));
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "no file was created"
    );
}

#[test]
fn an_outbox_that_is_down_is_exit_one() {
    let port = support::free_port();
    let store = format!("postgres://x@127.0.0.1:{port}/db");
    assert_eq!(run(&store, &["endpoints"]).0, 1);
}

/// `--store` naming no outbox, or the in-process `memory:` one, is a usage
/// error (exit 2) that names the scheme and never the rest of the URL.
#[test]
fn a_store_url_of_no_outbox_is_a_usage_error_without_its_password() {
    for (store, said) in [
        (
            "mysql://user:hunter2@db/outbox",
            "`mysql:` is no store's scheme",
        ),
        ("memory:", "empty outbox in this process"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
            .args(["outbox", "--store", store, "endpoints"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{store}: {stderr}");
        assert!(stderr.contains(said), "{store}: {stderr}");
        assert!(!stderr.contains("hunter2"), "{stderr}");
    }
    // The schemes it lists are those it takes: not the in-process one.
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args(["outbox", "--store", "mysql://db/outbox", "endpoints"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("sqlite:PATH"), "{stderr}");
    assert!(!stderr.contains("memory:"), "{stderr}");
}

#[test]
fn a_bad_endpoint_name_is_a_usage_error_that_calls_it_an_endpoint_name() {
    // The name is checked before the store is opened.
    let file = std::env::temp_dir().join(format!("hooklatch-cli-name-{}.db", std::process::id()));
    let store = format!("sqlite:{}", file.display());
    let output = Command::new(env!("CARGO_BIN_EXE_hooklatch"))
        .args([
            "outbox",
            "--store",
            &store,
            "disable",
            "--endpoint",
            "two words",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid endpoint name: "), "{stderr}");
    assert!(!stderr.contains("namespace"), "{stderr}");
    assert!(!file.exists(), "the store was opened");
}
