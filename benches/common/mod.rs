//! What the benches share: reading criterion's medians for the same-run
//! tables they print, a runtime for the store benches, and the servers and
//! files those benches start from.

#![allow(dead_code)] // each bench uses its own part

#[path = "../../tests/support/mod.rs"]
pub(crate) mod support;

use criterion::Criterion;

/// Criterion's median estimate, in nanoseconds, for the benchmark `id`
/// (`group/function/parameter`), once it has run.
pub(crate) fn median_ns(id: &str) -> Option<f64> {
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = format!("{target}/criterion/{id}/new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["median"]["point_estimate"].as_f64()
}

/// A multi-threaded tokio runtime with timers and I/O.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// What a store bench starts from: criterion configured from the command
/// line, a runtime, Postgres and Redis (the servers in
/// `HOOKLATCH_TEST_POSTGRES_URL` and `HOOKLATCH_TEST_REDIS_URL`, or private
/// ones), and a directory for SQLite files, removed when dropped.
pub(crate) struct StoreBench {
    pub(crate) criterion: Criterion,
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) postgres: support::Server,
    pub(crate) redis: support::Server,
    pub(crate) sqlite_dir: support::TempDir,
}

impl StoreBench {
    /// Starts the servers; `name` names the SQLite directory.
    pub(crate) fn start(name: &str) -> Self {
        Self {
            criterion: Criterion::default().configure_from_args(),
            runtime: runtime(),
            postgres: support::postgres(),
            redis: support::redis(),
            sqlite_dir: support::TempDir::new(name),
        }
    }
}

/// Accepts `count` 1 KiB events into `namespace`, 64 callers at once.
pub(crate) async fn accept_events<S: hooklatch::dedup::Inbox + Clone + 'static>(
    store: &S,
    namespace: &str,
    count: u64,
) {
    const CALLERS: u64 = 64;
    let body = vec![b'x'; 1024];
    let tasks: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let (store, namespace, body) = (store.clone(), namespace.to_owned(), body.clone());
            tokio::spawn(async move {
                for n in (caller..count).step_by(CALLERS as usize) {
                    let id = format!("evt_{n}");
                    let event = hooklatch::dedup::IncomingEvent::new(&namespace, &id, &body);
                    let accepted = store.accept(&event).await.expect("accept");
                    assert_eq!(accepted, hooklatch::dedup::Acceptance::Accepted);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("filler");
    }
}
