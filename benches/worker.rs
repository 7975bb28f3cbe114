//! The worker on each store, in one run:
//!
//! - **throughput**: events a second through `take` and `ack_many` with a
//!   `Worker` running a no-op handler, in this process and in a second
//!   one, next to a bare loop of `take(256)` + `ack_many` on the same
//!   backlog (the floor), and next to apalis doing the same work when its
//!   peer program is built (`benches/apalis-peer`, see `WORKER_APALIS`);
//! - **lag**: from an accept's return (the 202) to its handler's start, at
//!   a steady rate (open loop: accepts leave on a schedule, whatever the
//!   worker does), p50 and p99, with the worker in this process and in a
//!   second one;
//! - **idle CPU**: what a worker with nothing to do costs, in a process of
//!   its own, as a share of one core.
//!
//! Run with: cargo bench --bench worker --features sqlite,postgres,redis
//!
//! Settings: `WORKER_EVENTS` (backlog, 20,000), `WORKER_STORES` (among
//! `sqlite,postgres,redis`), `WORKER_LAG_RATE` (events a second, 1,000),
//! `WORKER_LAG_SECONDS` (5), `WORKER_IDLE_SECONDS` (10), `WORKER_APALIS`
//! (`0` skips apalis; else its peer is built with cargo, in release, the
//! first time). Uses the Postgres and Redis servers in
//! `HOOKLATCH_TEST_POSTGRES_URL` and `HOOKLATCH_TEST_REDIS_URL`, or
//! private ones.

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::support;
use hooklatch::dedup::{
    Acceptance, AnyInbox, Inbox, IncomingEvent, PostgresInbox, RedisInbox, SqliteInbox,
};
use hooklatch::worker::{Event, Failure, Worker};

/// Set in a child process: what it runs (see [`Child`]).
const CHILD: &str = "HOOKLATCH_WORKER_BENCH_CHILD";

/// A store as a child process opens it: `sqlite <path>`, `postgres <url>`
/// or `redis <url>`.
#[derive(Clone)]
struct StoreSpec {
    kind: &'static str,
    location: String,
}

impl StoreSpec {
    fn label(&self) -> &'static str {
        match self.kind {
            "sqlite" => "SQLite",
            "postgres" => "Postgres",
            _ => "Redis",
        }
    }

    async fn open(&self) -> AnyInbox {
        match self.kind {
            "sqlite" => AnyInbox::new(SqliteInbox::open(&self.location).await.expect("sqlite")),
            "postgres" => AnyInbox::new(
                PostgresInbox::connect(&self.location)
                    .await
                    .expect("postgres"),
            ),
            _ => AnyInbox::new(RedisInbox::connect(&self.location).await.expect("redis")),
        }
    }

    fn parse(text: &str) -> Self {
        let (kind, location) = text.split_once(' ').expect("a store spec");
        let kind = match kind {
            "sqlite" => "sqlite",
            "postgres" => "postgres",
            "redis" => "redis",
            other => panic!("no store {other}"),
        };
        Self {
            kind,
            location: location.to_owned(),
        }
    }
}

/// The wall clock in nanoseconds: the one clock two processes share.
fn wall_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

/// Events a second through a bare loop of `take(256)` and `ack_many`.
async fn floor(store: &AnyInbox, namespace: &str, count: u64) -> f64 {
    use hooklatch::dedup::InboxQueue as _;
    let started = Instant::now();
    let mut done = 0;
    while done < count {
        let batch = store.take(namespace, "floor", 256).await.expect("take");
        let acked = store.ack_many(&batch).await.expect("ack");
        done += acked.iter().filter(|acked| **acked).count() as u64;
        assert!(
            !batch.is_empty() || done == count,
            "the backlog ran out early"
        );
    }
    count as f64 / started.elapsed().as_secs_f64()
}

/// Events a second through a `Worker` with a no-op handler, 256 at once,
/// from its start until `count` are handled.
async fn drain(store: AnyInbox, namespace: &str, count: u64) -> f64 {
    let started = Instant::now();
    let running = Worker::new(store, namespace, |_event: Event| async {
        Ok::<(), Failure>(())
    })
    .with_concurrency(256)
    .start();
    while running.report().handled < count {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = count as f64 / started.elapsed().as_secs_f64();
    running.stop(Duration::from_secs(5)).await;
    rate
}

/// Accepts `count` events into `namespace` at `rate` a second, each on
/// its own task so that a slow accept does not hold back the next, and
/// gives the wall time each accept returned at.
async fn accept_steadily(
    store: &AnyInbox,
    namespace: &str,
    rate: u64,
    count: u64,
) -> HashMap<String, u128> {
    let returned = Arc::new(Mutex::new(HashMap::new()));
    let mut schedule = tokio::time::interval(Duration::from_secs(1) / rate as u32);
    schedule.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let body = Arc::new(vec![b'x'; 1024]);
    let mut accepts = tokio::task::JoinSet::new();
    for n in 0..count {
        schedule.tick().await;
        let (store, namespace, body, returned) = (
            store.clone(),
            namespace.to_owned(),
            Arc::clone(&body),
            Arc::clone(&returned),
        );
        accepts.spawn(async move {
            let id = format!("lag_{n}");
            let event = IncomingEvent::new(&namespace, &id, &body);
            let accepted = store.accept(&event).await.expect("accept");
            assert_eq!(accepted, Acceptance::Accepted);
            returned.lock().unwrap().insert(id, wall_nanos());
        });
    }
    while accepts.join_next().await.is_some() {}
    Arc::try_unwrap(returned)
        .expect("every accept ended")
        .into_inner()
        .unwrap()
}

/// Accepts one event that the lag is not measured on: a namespace's first
/// use costs a store more than any later (Redis scans its keyspace once
/// for keys of an older layout), and a worker's first take waits for it.
async fn warm_up(store: &AnyInbox, namespace: &str) {
    let event = IncomingEvent::new(namespace, "warm_up", b"{}");
    let _ = store.accept(&event).await.expect("accept");
}

/// p50 and p99, in milliseconds, of handler starts after their accepts'
/// returns (a handler that started before its accept returned counts 0).
fn lag_percentiles(
    returned: &HashMap<String, u128>,
    started: &HashMap<String, u128>,
) -> (f64, f64) {
    let mut lags: Vec<u128> = returned
        .iter()
        .map(|(id, at)| {
            let start = started.get(id).expect("every accepted event was handled");
            start.saturating_sub(*at)
        })
        .collect();
    lags.sort_unstable();
    let at = |share: f64| lags[((lags.len() - 1) as f64 * share).round() as usize] as f64 / 1e6;
    (at(0.50), at(0.99))
}

/// A worker whose handler writes down when each event started.
fn recording_worker(
    store: AnyInbox,
    namespace: &str,
) -> (
    hooklatch::worker::Running,
    Arc<Mutex<HashMap<String, u128>>>,
) {
    let started = Arc::new(Mutex::new(HashMap::new()));
    let written = Arc::clone(&started);
    let running = Worker::new(store, namespace, move |event: Event| {
        written
            .lock()
            .unwrap()
            .insert(event.id().to_owned(), wall_nanos());
        async { Ok::<(), Failure>(()) }
    })
    .with_concurrency(256)
    .start();
    (running, started)
}

/// Waits until `count` events are handled by `running`.
async fn handled(running: &hooklatch::worker::Running, count: u64) {
    while running.report().handled < count {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What a child process of this bench does, named in [`CHILD`].
enum Child {
    /// Handle `count` events of `namespace` with a no-op handler; print
    /// the rate.
    Drain { namespace: String, count: u64 },
    /// Handle a warm-up event, say `ready`, then handle `count` more,
    /// printing `id wall-nanos` as each started.
    Record { namespace: String, count: u64 },
    /// Run a worker on an empty namespace for `seconds`; print the CPU
    /// seconds the process spent meanwhile.
    Idle { namespace: String, seconds: u64 },
}

impl Child {
    fn describe(&self, store: &StoreSpec) -> String {
        let (mode, namespace, n) = match self {
            Child::Drain { namespace, count } => ("drain", namespace, count),
            Child::Record { namespace, count } => ("record", namespace, count),
            Child::Idle { namespace, seconds } => ("idle", namespace, seconds),
        };
        format!("{mode} {namespace} {n} {} {}", store.kind, store.location)
    }

    fn parse(text: &str) -> (Self, StoreSpec) {
        let mut parts = text.splitn(4, ' ');
        let mut next = || parts.next().expect("a child spec").to_owned();
        let (mode, namespace, n) = (next(), next(), next().parse().expect("a number"));
        let store = StoreSpec::parse(&next());
        let child = match mode.as_str() {
            "drain" => Child::Drain {
                namespace,
                count: n,
            },
            "record" => Child::Record {
                namespace,
                count: n,
            },
            _ => Child::Idle {
                namespace,
                seconds: n,
            },
        };
        (child, store)
    }

    /// Starts this bench again as a child doing `self`, stdout piped.
    fn spawn(&self, store: &StoreSpec) -> std::process::Child {
        Command::new(std::env::current_exe().expect("this bench"))
            .env(CHILD, self.describe(store))
            .stdout(Stdio::piped())
            .spawn()
            .expect("the child starts")
    }

    async fn run(self, store: StoreSpec) {
        let store = store.open().await;
        match self {
            Child::Drain { namespace, count } => {
                let rate = drain(store, &namespace, count).await;
                println!("{rate}");
            }
            Child::Record { namespace, count } => {
                let (running, started) = recording_worker(store, &namespace);
                // The parent's warm-up event: past the worker's first take.
                handled(&running, 1).await;
                println!("ready");
                handled(&running, count + 1).await;
                running.stop(Duration::from_secs(5)).await;
                let mut out = std::io::stdout().lock();
                for (id, at) in started.lock().unwrap().iter() {
                    writeln!(out, "{id} {at}").unwrap();
                }
            }
            Child::Idle { namespace, seconds } => {
                let running = Worker::new(store, &namespace, |_event: Event| async {
                    Ok::<(), Failure>(())
                })
                .start();
                // Past the worker's start and first empty takes.
                tokio::time::sleep(Duration::from_secs(1)).await;
                let before = cpu_seconds();
                tokio::time::sleep(Duration::from_secs(seconds)).await;
                let spent = cpu_seconds() - before;
                running.stop(Duration::from_secs(5)).await;
                println!("{spent}");
            }
        }
    }
}

/// CPU seconds (user and system) this process has spent: fields 14 and 15
/// of `/proc/self/stat`, in the kernel's fixed 100 ticks a second.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // The command name (field 2) is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("a stat line")
        .1
        .split_whitespace()
        .collect();
    let ticks = |index: usize| fields[index].parse::<f64>().expect("ticks");
    (ticks(11) + ticks(12)) / 100.0
}

/// The last line a child printed, after it ended.
fn child_output(child: std::process::Child) -> String {
    let output = child.wait_with_output().expect("the child ran");
    assert!(output.status.success(), "the child failed");
    String::from_utf8(output.stdout).expect("text")
}

/// One store's row of every table.
struct Row {
    store: &'static str,
    floor: f64,
    worker: f64,
    worker_elsewhere: f64,
    apalis: Option<ApalisRun>,
    lag_here: (f64, f64),
    lag_elsewhere: (f64, f64),
    idle_cpu: f64,
}

/// What the apalis peer printed for one store.
struct ApalisRun {
    jobs: u64,
    handled_per_s: f64,
    handled: u64,
    error: Option<String>,
    /// Where apalis failed on the whole backlog, a run on a smaller one.
    smaller: Option<Box<ApalisRun>>,
}

/// The backlog apalis is tried on again where it fails on the whole one
/// (its Redis backend fails from about 8,000 jobs waiting).
const APALIS_SMALLER: u64 = 5_000;

struct Settings {
    count: u64,
    lag_rate: u64,
    lag_seconds: u64,
    idle_seconds: u64,
    apalis: Option<PathBuf>,
}

async fn measure(spec: &StoreSpec, settings: &Settings) -> Row {
    let store = spec.open().await;
    let count = settings.count;

    let namespace = support::unique("floor");
    common::accept_events(&store, &namespace, count).await;
    let floor = floor(&store, &namespace, count).await;

    let namespace = support::unique("worker");
    common::accept_events(&store, &namespace, count).await;
    let worker = drain(store.clone(), &namespace, count).await;

    let namespace = support::unique("elsewhere");
    common::accept_events(&store, &namespace, count).await;
    let child = Child::Drain { namespace, count }.spawn(spec);
    let worker_elsewhere: f64 = tokio::task::spawn_blocking(move || child_output(child))
        .await
        .unwrap()
        .trim()
        .parse()
        .expect("a rate");

    let apalis = settings.apalis.as_deref().map(|peer| {
        let mut run = run_apalis(peer, spec, count);
        if run.error.is_some() && count > APALIS_SMALLER {
            run.smaller = Some(Box::new(run_apalis(peer, spec, APALIS_SMALLER)));
        }
        run
    });

    let lag_events = settings.lag_rate * settings.lag_seconds;
    let namespace = support::unique("lag");
    let (running, started) = recording_worker(store.clone(), &namespace);
    warm_up(&store, &namespace).await;
    handled(&running, 1).await;
    let returned = accept_steadily(&store, &namespace, settings.lag_rate, lag_events).await;
    handled(&running, lag_events + 1).await;
    running.stop(Duration::from_secs(5)).await;
    let lag_here = lag_percentiles(&returned, &started.lock().unwrap());

    let namespace = support::unique("lag");
    let mut child = Child::Record {
        namespace: namespace.clone(),
        count: lag_events,
    }
    .spawn(spec);
    warm_up(&store, &namespace).await;
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut ready = String::new();
    lines
        .read_line(&mut ready)
        .expect("the child says it is ready");
    let returned = accept_steadily(&store, &namespace, settings.lag_rate, lag_events).await;
    let started: HashMap<String, u128> = tokio::task::spawn_blocking(move || {
        let started = lines
            .lines()
            .map(|line| {
                let line = line.expect("a line");
                let (id, at) = line.split_once(' ').expect("id and time");
                (id.to_owned(), at.parse().expect("nanoseconds"))
            })
            .collect();
        assert!(child.wait().expect("the child ran").success());
        started
    })
    .await
    .unwrap();
    let lag_elsewhere = lag_percentiles(&returned, &started);

    let child = Child::Idle {
        namespace: support::unique("idle"),
        seconds: settings.idle_seconds,
    }
    .spawn(spec);
    let spent: f64 = tokio::task::spawn_blocking(move || child_output(child))
        .await
        .unwrap()
        .trim()
        .parse()
        .expect("seconds");
    let idle_cpu = spent / settings.idle_seconds as f64;

    Row {
        store: spec.label(),
        floor,
        worker,
        worker_elsewhere,
        apalis,
        lag_here,
        lag_elsewhere,
        idle_cpu,
    }
}

/// The apalis peer's release binary, built now with cargo if it is not.
fn apalis_peer() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = root.join("benches/apalis-peer/Cargo.toml");
    // A target of its own: the peer has its own lock file and workspace.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("apalis-peer");
    let built = Command::new(env!("CARGO"))
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("cargo runs");
    assert!(built.success(), "the apalis peer did not build");
    target.join("release/apalis-peer")
}

/// apalis pushing `count` jobs into `spec`'s store and running a no-op
/// handler on them, as its peer program reports it.
fn run_apalis(peer: &Path, spec: &StoreSpec, count: u64) -> ApalisRun {
    let location = match spec.kind {
        "sqlite" => String::new(),
        _ => spec.location.clone(),
    };
    let output = Command::new(peer)
        .args([
            "--store",
            spec.kind,
            "--url",
            &location,
            "--jobs",
            &count.to_string(),
            // apalis on SQLite takes about two minutes for 20,000 jobs here.
            "--max-seconds",
            "600",
        ])
        .output()
        .expect("the apalis peer runs");
    let line = String::from_utf8_lossy(&output.stdout);
    let report: serde_json::Value = serde_json::from_str(line.trim()).unwrap_or_else(|_| {
        panic!(
            "the apalis peer printed no report: {line} {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    ApalisRun {
        jobs: count,
        handled_per_s: report["handled_per_s"].as_f64().unwrap_or(0.0),
        handled: report["handled"].as_u64().unwrap_or(0),
        error: report["error"].as_str().map(str::to_owned),
        smaller: None,
    }
}

fn number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let runtime = common::runtime();
    if let Ok(spec) = std::env::var(CHILD) {
        let (child, store) = Child::parse(&spec);
        runtime.block_on(child.run(store));
        return;
    }
    let settings = Settings {
        count: number("WORKER_EVENTS", 20_000),
        lag_rate: number("WORKER_LAG_RATE", 1_000),
        lag_seconds: number("WORKER_LAG_SECONDS", 5),
        idle_seconds: number("WORKER_IDLE_SECONDS", 10),
        apalis: (std::env::var("WORKER_APALIS").as_deref() != Ok("0")).then(apalis_peer),
    };
    let stores = std::env::var("WORKER_STORES").unwrap_or_else(|_| "sqlite,postgres,redis".into());
    let measured = |store: &str| stores.split(',').any(|name| name.trim() == store);
    let postgres = measured("postgres").then(support::postgres);
    let redis = measured("redis").then(support::redis);
    let dir = support::TempDir::new("worker-bench");
    let mut specs = Vec::new();
    if measured("sqlite") {
        let location = dir.path().join("worker.db").display().to_string();
        specs.push(StoreSpec {
            kind: "sqlite",
            location,
        });
    }
    if let Some(server) = &postgres {
        specs.push(StoreSpec {
            kind: "postgres",
            location: server.url(),
        });
    }
    if let Some(server) = &redis {
        specs.push(StoreSpec {
            kind: "redis",
            location: server.url(),
        });
    }
    let rows: Vec<Row> = specs
        .iter()
        .map(|spec| runtime.block_on(measure(spec, &settings)))
        .collect();
    print_tables(&rows, &settings);
}

fn print_tables(rows: &[Row], settings: &Settings) {
    let count = settings.count;
    println!(
        "\n| store ({count} events, 1 KiB) | take + ack_many loop | Worker | worker / loop | Worker in a second process | apalis 1.0 | Worker / apalis |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in rows {
        let (apalis, versus) = match &row.apalis {
            None => ("not run".to_owned(), "-".to_owned()),
            Some(run) => {
                let counted = run.smaller.as_deref().unwrap_or(run);
                let mut said = format!("{:.0}/s", counted.handled_per_s);
                if let Some(smaller) = &run.smaller {
                    let _ = write!(said, " on {} jobs", smaller.jobs);
                }
                for failed in [Some(run), run.smaller.as_deref()].into_iter().flatten() {
                    if let Some(error) = &failed.error {
                        let _ = write!(
                            said,
                            " ({} jobs: {} handled, then: {error})",
                            failed.jobs, failed.handled
                        );
                    }
                }
                let versus = if counted.error.is_some() || counted.handled_per_s == 0.0 {
                    "-".to_owned()
                } else {
                    format!("{:.0}x", row.worker / counted.handled_per_s)
                };
                (said, versus)
            }
        };
        println!(
            "| {} | {:.0}/s | {:.0}/s | {:.2}x | {:.0}/s | {apalis} | {versus} |",
            row.store,
            row.floor,
            row.worker,
            row.worker / row.floor,
            row.worker_elsewhere,
        );
    }
    println!(
        "\n| store, {}/s for {} s (open loop) | lag p50, same process | p99 | lag p50, second process | p99 | idle worker, share of one core |",
        settings.lag_rate, settings.lag_seconds
    );
    println!("|---|---|---|---|---|---|");
    for row in rows {
        println!(
            "| {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2}% |",
            row.store,
            row.lag_here.0,
            row.lag_here.1,
            row.lag_elsewhere.0,
            row.lag_elsewhere.1,
            row.idle_cpu * 100.0
        );
    }
}
