//! The receiver as users run it: the release build of the `axum_receiver`
//! example, its worker draining the inbox, loaded by an external load
//! generator (`wrk`, 2 threads, 32 keep-alive connections) with unique
//! signed 1 KiB Standard Webhooks, next to a bare axum handler answering
//! 202 under the same load in the same run. Prints, per store, requests
//! per second, p50 and p99 (wrk's), the ratio to bare axum, and how long
//! the inbox took to empty after the load (what it still held 10 s after,
//! if it had not), the events handled a second over the load and that
//! drain together (a worker that falls behind cannot inflate it), and the
//! CPU time per request of the receiver, of the
//! store's server processes and of the whole machine over the load, which
//! says where the time goes. The store's figure counts every process named
//! `postgres` or `redis-server` on the machine: run the bench where no
//! other runs.
//!
//! The machine's own noise moves a single run's rate by a quarter either
//! way, so the bench runs in rounds (bare axum, then each store), gives
//! each store's ratio to the bare axum of its own round, and ends with the
//! medians over the rounds.
//!
//! Run with: cargo bench --bench receiver --all-features
//! (`RECEIVER_SECONDS` sets how long each target is loaded, default 10;
//! `RECEIVER_ROUNDS` how many rounds, default 3; `RECEIVER_STORES` picks
//! among `sqlite,postgres,redis`; `RECEIVER_BINARY` runs the example
//! binary at that path instead of building it, to compare two builds in
//! alternating runs: copy each build to a folder of its own, keeping the
//! file name `axum_receiver`; `RECEIVER_RATE=2000` loads at a steady 2,000
//! requests a second instead, open loop, each request sent when due and
//! its latency counted from then, which shows the tail a closed loop
//! hides; `RECEIVER_PEER=0` leaves out the hand-rolled receiver.)
//!
//! Needs `wrk` (`apt-get install wrk`). Uses the Postgres server in
//! `HOOKLATCH_TEST_POSTGRES_URL` (a database of its own per run) or a
//! private one, and a private Redis with AOF and `appendfsync everysec`.
//! Client, servers and databases share the machine's cores.

#[path = "common/mod.rs"]
mod common;
#[path = "hand_rolled/mod.rs"]
mod hand_rolled;
#[path = "steady/mod.rs"]
mod steady;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use common::support;
use hooklatch::dedup::{InboxQueue, PostgresInbox, RedisInbox, SqliteInbox};
use hooklatch::verify::{Scheme, Signer};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const THREADS: usize = 2;
const CONNECTIONS: usize = 32;
/// The example's inbox namespace.
const NAMESPACE: &str = "example";

/// Sends the requests written by [`write_requests`]: each wrk thread reads
/// its own file, one fixed-size request after another, so no event is sent
/// twice and no thread spends the run building requests (wrk starts its
/// first thread's load while it runs the next thread's `init`, so an `init`
/// that formats every request would share the cores with the load).
const SCRIPT: &str = r#"
local counter = 0
function setup(thread)
  thread:set("index", counter)
  counter = counter + 1
end
function init(args)
  file = assert(io.open(args[1] .. "." .. index, "rb"))
  size = tonumber(args[2])
end
function request()
  local request = file:read(size)
  if request == nil then
    file:seek("set", 0)
    request = file:read(size)
  end
  return request
end
"#;

/// The body of event `id`, 1 KiB with its padding.
fn body(id: &str, pad: &str) -> String {
    format!(r#"{{"id":"{id}","type":"bench","pad":"{pad}"}}"#)
}

/// Where [`write_requests`] put its requests: `{stem}.{thread}`, each
/// request `size` bytes.
struct Requests {
    stem: PathBuf,
    size: usize,
}

/// Writes `count` signed requests for events named `{run}_{n}` (`n` padded,
/// so that every request has the same length), request `n` into the file of
/// wrk thread `n % THREADS`.
fn write_requests(dir: &Path, run: &str, count: usize, pad: &str) -> Requests {
    let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).expect("signer");
    let now = SystemTime::now();
    let stem = dir.join(format!("{run}.requests"));
    let mut files: Vec<_> = (0..THREADS)
        .map(|thread| {
            let path = format!("{}.{thread}", stem.display());
            std::io::BufWriter::new(std::fs::File::create(path).expect("requests file"))
        })
        .collect();
    let mut size = None;
    for n in 0..count {
        let id = format!("{run}_{n:09}");
        let body = body(&id, pad);
        let headers = signer.sign(&id, now, body.as_bytes()).expect("sign");
        let field = |name: &str| headers.get(name).expect("a signed header").to_owned();
        let request = format!(
            "POST /webhooks HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             webhook-id: {id}\r\nwebhook-timestamp: {}\r\nwebhook-signature: {}\r\n\
             content-length: {}\r\n\r\n{body}",
            field("webhook-timestamp"),
            field("webhook-signature"),
            body.len(),
        );
        assert_eq!(
            *size.get_or_insert(request.len()),
            request.len(),
            "requests of one size"
        );
        files[n % THREADS]
            .write_all(request.as_bytes())
            .expect("write");
    }
    // On disk before the load, so that their writeback does not share
    // the load's cores and disk.
    for file in files {
        let file = file.into_inner().expect("flush");
        file.sync_all().expect("sync");
    }
    Requests {
        stem,
        size: size.expect("at least one request"),
    }
}

/// What wrk measured, and the CPU time spent while it ran.
struct Load {
    requests: u64,
    per_second: f64,
    p50: Duration,
    p99: Duration,
    failed: u64,
    cpu: CpuPerRequest,
}

/// CPU time per request, in microseconds, over the load.
struct CpuPerRequest {
    /// The receiver: the example, or this process for bare axum (it idles
    /// while a store is loaded, and is counted then too).
    receiver: f64,
    /// The store's server processes (`postgres`, `redis-server`), with the
    /// children they waited for; 0 for SQLite, which runs inside the
    /// receiver.
    store: f64,
    /// The whole machine, wrk included.
    machine: f64,
}

/// CPU ticks spent so far: by the receiver, by the store's servers, and by
/// the whole machine.
#[derive(Clone, Copy)]
struct CpuTicks {
    receiver: u64,
    store: u64,
    machine: u64,
}

impl CpuTicks {
    fn now() -> Self {
        let own = std::process::id().to_string();
        let mut ticks = Self {
            receiver: 0,
            store: 0,
            machine: machine_busy_ticks(),
        };
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            // A process may end between the listing and the read.
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid ...`: comm may hold spaces, so split
            // at its closing parenthesis. utime and stime are fields 14 and
            // 15; cutime and cstime (16, 17) are children waited for, such
            // as Redis's AOF rewrites and Postgres's autovacuum workers
            // that ended during the load.
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                continue;
            };
            let comm = &stat[open + 1..close];
            let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            let ticks_of = |range: std::ops::Range<usize>| -> u64 {
                fields[range]
                    .iter()
                    .filter_map(|f| f.parse::<u64>().ok())
                    .sum()
            };
            // Not the receiver's children: this process waits for wrk.
            if comm == "axum_receiver" || pid == own {
                ticks.receiver += ticks_of(11..13);
            } else if comm == "postgres" || comm == "redis-server" {
                ticks.store += ticks_of(11..15);
            }
        }
        ticks
    }

    /// Microseconds per request from `self` to `later`.
    fn per_request(self, later: Self, requests: u64) -> CpuPerRequest {
        let per = |before: u64, after: u64| {
            after.saturating_sub(before) as f64 * 1e6 / ticks_per_second() / requests.max(1) as f64
        };
        CpuPerRequest {
            receiver: per(self.receiver, later.receiver),
            store: per(self.store, later.store),
            machine: per(self.machine, later.machine),
        }
    }
}

/// Ticks the cores spent on this machine's work (`/proc/stat`'s `cpu`
/// line: user, nice, system, irq and softirq; not idle, iowait, or steal,
/// which a hypervisor gave to others).
fn machine_busy_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let line = stat.lines().next().expect("the cpu line");
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...; guest time is
    // already counted in user.
    fields[0] + fields[1] + fields[2] + fields[5] + fields[6]
}

fn ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        let output = Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .expect("getconf runs");
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .expect("CLK_TCK is a number")
    })
}

fn duration(text: &str) -> Duration {
    let (number, unit) = text
        .find(|c: char| c.is_ascii_alphabetic())
        .map_or((text, "s"), |at| text.split_at(at));
    let value: f64 = number.trim().parse().expect("a number");
    let seconds = match unit {
        "us" => value / 1e6,
        "ms" => value / 1e3,
        "m" => value * 60.0,
        _ => value,
    };
    Duration::from_secs_f64(seconds)
}

/// Runs wrk against `port` for `seconds` with `requests`.
fn wrk(port: u16, seconds: u64, script: &Path, requests: &Requests) -> Load {
    let before = CpuTicks::now();
    let output = Command::new("wrk")
        .args(["-t", &THREADS.to_string(), "-c", &CONNECTIONS.to_string()])
        .args(["-d", &format!("{seconds}s"), "--latency", "-s"])
        .arg(script)
        .arg(format!("http://127.0.0.1:{port}/webhooks"))
        .arg("--")
        .arg(&requests.stem)
        .arg(requests.size.to_string())
        .output()
        .expect("wrk runs: apt-get install wrk");
    let after_load = CpuTicks::now();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "wrk failed: {text}");
    let after = |prefix: &str| {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(prefix).map(str::trim))
    };
    let requests = text
        .lines()
        .find_map(|line| line.trim().split_once(" requests in "))
        .and_then(|(count, _)| count.trim().parse().ok())
        .expect("a request count");
    Load {
        requests,
        cpu: before.per_request(after_load, requests),
        per_second: after("Requests/sec:")
            .and_then(|rate| rate.parse().ok())
            .expect("a rate"),
        p50: duration(after("50%").expect("p50")),
        p99: duration(after("99%").expect("p99")),
        failed: after("Non-2xx or 3xx responses:")
            .and_then(|count| count.parse().ok())
            .unwrap_or(0),
    }
}

/// The steady open-loop load ([`steady::steady`]) as a [`Load`]; its
/// p99.9 and worst latency are printed as it ends.
fn open_loop(port: u16, rate: u64, seconds: u64, requests: &Requests) -> Load {
    let before = CpuTicks::now();
    let steady = steady::steady(
        port,
        rate,
        seconds,
        (&requests.stem, THREADS, requests.size),
    );
    let after = CpuTicks::now();
    println!(
        "  (open loop at {rate}/s on port {port}: p99.9 {:.2} ms, worst {:.2} ms (due {:.2} s \
         into the load), {} failed)",
        steady.p999.as_secs_f64() * 1e3,
        steady.max.as_secs_f64() * 1e3,
        steady.max_due.as_secs_f64(),
        steady.failed
    );
    let requests = steady.answered + steady.failed;
    Load {
        requests,
        cpu: before.per_request(after, requests),
        per_second: steady.answered as f64 / seconds as f64,
        p50: steady.p50,
        p99: steady.p99,
        failed: steady.failed,
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The release build of the example, built now if it is not current, or
/// the build `RECEIVER_BINARY` names.
fn example_binary() -> PathBuf {
    if let Some(binary) = std::env::var_os("RECEIVER_BINARY") {
        let binary = PathBuf::from(binary);
        // The CPU columns find the receiver by its process name.
        assert!(
            binary.file_name() == Some("axum_receiver".as_ref()),
            "RECEIVER_BINARY names {}: the build's file must be called axum_receiver",
            binary.display()
        );
        return std::fs::canonicalize(&binary).expect("the example's binary in RECEIVER_BINARY");
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(cargo)
        .args(["build", "--release", "-q", "-p", "hooklatch-tower"])
        .args(["--example", "axum_receiver"])
        .status()
        .expect("cargo runs");
    assert!(built.success(), "the example did not build");
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let binary = Path::new(&target).join("release/examples/axum_receiver");
    // Absolute: the example runs in a folder of its own.
    std::fs::canonicalize(&binary).expect("the example's binary")
}

/// The example, started in `dir` on `port` with the store `env` names.
struct Example(Child);

impl Example {
    fn start(binary: &Path, dir: &Path, port: u16, env: &[(&str, String)]) -> Self {
        let child = Command::new(binary)
            .current_dir(dir)
            .env("HOOKLATCH_SECRET", SECRET)
            .env("HOOKLATCH_ADDR", format!("127.0.0.1:{port}"))
            .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the example starts");
        wait_for_port(port);
        Self(child)
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How long the inbox took to empty after the load, or what it still held
/// after 10 s.
async fn drained<S: InboxQueue>(store: &S) -> Result<Duration, u64> {
    emptied(|| async {
        let stats = store.stats(NAMESPACE).await.expect("stats");
        stats.waiting + stats.taken
    })
    .await
}

/// How long until `left` (what a store still holds) said 0, or what it
/// said after 10 s.
async fn emptied<F, Fut>(mut left: F) -> Result<Duration, u64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = u64>,
{
    let started = Instant::now();
    loop {
        let now_left = left().await;
        if now_left == 0 {
            return Ok(started.elapsed());
        }
        if started.elapsed() > DRAIN_WAIT {
            return Err(now_left);
        }
        // Counting reads the whole inbox on the SQL stores: every 100 ms
        // costs the worker it watches little, and times a drain closely
        // enough for the handled rate over load and drain.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A database of its own named `name` on `server`, with the server's WAL
/// warmed ([`warm_wal`]); its URL.
async fn create_database(server: &support::Server, name: &str) -> String {
    let admin = sqlx::PgPool::connect(&server.url()).await.expect("pg");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await
        .expect("create database");
    warm_wal(&admin).await;
    let admin_url = server.url();
    let (base, _) = admin_url.rsplit_once('/').expect("a database in the url");
    format!("{base}/{name}")
}

/// Drops database `name`: a shared server keeps no round's database.
async fn drop_database(server: &support::Server, name: &str) {
    let admin = sqlx::PgPool::connect(&server.url()).await.expect("pg");
    if let Err(error) = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {name} WITH (FORCE)"
    )))
    .execute(&admin)
    .await
    {
        eprintln!("could not drop {name}: {error}");
    }
}

async fn bare(port: u16) -> tokio::task::JoinHandle<()> {
    let app = Router::new().route(
        "/webhooks",
        post(|body: axum::body::Bytes| async move {
            std::hint::black_box(body);
            (StatusCode::ACCEPTED, "accepted")
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}

struct Row {
    target: String,
    load: Load,
    drained: Option<Result<Duration, u64>>,
    /// Requests per second over bare axum's in the same round.
    ratio: f64,
}

/// Makes the server's WAL look like one that has been running: about
/// 600 MB written and checkpointed, so that the load reuses recycled
/// segments. A fresh cluster instead creates and zero-fills a new 16 MB
/// segment every second or so at this rate, inside some commit's flush,
/// which no server in service does.
async fn warm_wal(admin: &sqlx::PgPool) {
    for statement in [
        "CREATE TABLE hooklatch_bench_warm AS \
         SELECT repeat('x', 2000) AS pad FROM generate_series(1, 300000)",
        "DROP TABLE hooklatch_bench_warm",
        "CHECKPOINT",
    ] {
        sqlx::query(statement)
            .execute(admin)
            .await
            .expect("warm the WAL");
    }
}

fn main() {
    steady::run_if_child();
    let number = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(default)
    };
    let seconds = number("RECEIVER_SECONDS", 10);
    let rounds = number("RECEIVER_ROUNDS", 3).max(1);
    let stores =
        std::env::var("RECEIVER_STORES").unwrap_or_else(|_| "sqlite,postgres,redis".into());
    let mut stores: Vec<&str> = stores
        .split(',')
        .map(str::trim)
        .filter(|store| !store.is_empty())
        .collect();
    let mut seen = Vec::new();
    stores.retain(|store| {
        let new = !seen.contains(store);
        seen.push(*store);
        new
    });
    if let Some(other) = stores
        .iter()
        .find(|store| !["sqlite", "postgres", "redis"].contains(store))
    {
        panic!("RECEIVER_STORES names `{other}`: use sqlite, postgres or redis");
    }
    // The hand-rolled receiver on each store, after the example (set
    // RECEIVER_PEER=0 to leave it out, comparing builds of the example).
    let peer = std::env::var("RECEIVER_PEER").as_deref() != Ok("0");
    let rate = std::env::var("RECEIVER_RATE")
        .ok()
        .map(|rate| rate.parse().expect("RECEIVER_RATE: requests a second"));
    let bench = Bench::new(seconds, rate);
    match rate {
        None => println!(
            "\nThe axum_receiver example (release, worker draining) under wrk, {THREADS} \
             threads, {CONNECTIONS} connections, unique signed 1 KiB events, {seconds} s each; \
             each round loads bare axum, then each store, and the ratio is to that round's \
             bare axum."
        ),
        Some(rate) => println!(
            "\nThe axum_receiver example (release, worker draining) at a steady {rate} \
             requests a second, open loop (each sent when due, its latency counted from then), \
             unique signed 1 KiB events, {seconds} s each; p50 and p99 are the open loop's \
             (p99.9 and the worst below each table)."
        ),
    }
    let mut rows = Vec::new();
    for round in 1..=rounds {
        let bare = bench.bare(round);
        let bare_rate = bare.load.per_second;
        let mut round_rows = vec![bare];
        for store in &stores {
            let mut row = bench.store(store, round);
            row.ratio = row.load.per_second / bare_rate;
            round_rows.push(row);
            if peer {
                let mut row = bench.hand_rolled(store, round);
                row.ratio = row.load.per_second / bare_rate;
                round_rows.push(row);
            }
        }
        // Printed as each round ends, so that a later failure loses none.
        println!("\nRound {round}:\n{HEADER}");
        for row in &round_rows {
            print!("{}", row.line(bench.count, bench.seconds));
        }
        rows.extend(round_rows);
    }
    let per_round = 1 + stores.len() * if peer { 2 } else { 1 };
    if rounds > 1 {
        print_medians(&rows, rounds, per_round, seconds);
    }
    if peer {
        print_against_hand_rolled(&rows, per_round);
    }
}

/// hooklatch's requests per second over the hand-rolled receiver's on
/// the same store, each round's and the median of those.
fn print_against_hand_rolled(rows: &[Row], per_round: usize) {
    println!(
        "\nhooklatch (the example) against the hand-rolled receiver on the same store, \
         req/s of each round, and the median of the rounds' ratios:\n\
         | store | hooklatch / hand-rolled, each round | median | CPU µs/request in the receiver, hooklatch / hand-rolled (medians) |\n|---|---|---|---|"
    );
    for at in (1..per_round).step_by(2) {
        let pairs: Vec<(&Row, &Row)> = rows
            .chunks(per_round)
            .map(|round| (&round[at], &round[at + 1]))
            .collect();
        let ratios: Vec<f64> = pairs
            .iter()
            .map(|(ours, theirs)| ours.load.per_second / theirs.load.per_second)
            .collect();
        let each: Vec<String> = ratios.iter().map(|ratio| format!("{ratio:.2}x")).collect();
        println!(
            "| {} | {} | {:.2}x | {:.1} / {:.1} |",
            pairs[0].0.target,
            each.join(", "),
            median(ratios),
            median(
                pairs
                    .iter()
                    .map(|(ours, _)| ours.load.cpu.receiver)
                    .collect()
            ),
            median(
                pairs
                    .iter()
                    .map(|(_, theirs)| theirs.load.cpu.receiver)
                    .collect()
            ),
        );
    }
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[middle - 1] + values[middle]) / 2.0
    } else {
        values[middle]
    }
}

/// The tables' header.
const HEADER: &str = "| target | req/s | p50 | p99 | ratio to bare axum | non-2xx \
                      | inbox after the load | handled/s over load and drain \
                      | CPU µs/request: receiver | store server \
                      | whole machine |\n|---|---|---|---|---|---|---|---|---|---|---|";

impl Row {
    /// The row's line in its round's table (and a note if some event was
    /// sent twice).
    fn line(&self, count: usize, seconds: u64) -> String {
        let mut line = format!(
            "| {} | {:.0} | {:.2} ms | {:.2} ms | {:.3}x | {} | {} | {} | {:.1} | {:.1} | {:.1} |\n",
            self.target,
            self.load.per_second,
            self.load.p50.as_secs_f64() * 1e3,
            self.load.p99.as_secs_f64() * 1e3,
            self.ratio,
            self.load.failed,
            drained_text(self.drained.as_ref()),
            handled_text(self.handled_per_second(seconds)),
            self.load.cpu.receiver,
            self.load.cpu.store,
            self.load.cpu.machine,
        );
        if self.drained.is_some() && self.load.requests > count as u64 {
            let _ = writeln!(
                line,
                "  ({} sent {} requests for {count} events: some were duplicates)",
                self.target, self.load.requests
            );
        }
        line
    }
}

impl Row {
    /// The events accepted over the load and the drain after it, a second:
    /// what the receiver and its worker handled together, which a worker
    /// that falls behind cannot inflate. `None` for bare axum; the bound
    /// (`false`) when the inbox was not empty 10 s after the load.
    fn handled_per_second(&self, seconds: u64) -> Option<(f64, bool)> {
        let accepted = self.load.requests.saturating_sub(self.load.failed) as f64;
        let load = Duration::from_secs(seconds);
        match self.drained.as_ref()? {
            Ok(took) => Some((accepted / (load + *took).as_secs_f64(), true)),
            Err(_) => Some((accepted / (load + DRAIN_WAIT).as_secs_f64(), false)),
        }
    }
}

/// How long the bench waits for an inbox to empty after the load.
const DRAIN_WAIT: Duration = Duration::from_secs(10);

fn handled_text(handled: Option<(f64, bool)>) -> String {
    match handled {
        None => "-".to_owned(),
        Some((rate, true)) => format!("{rate:.0}"),
        Some((rate, false)) => format!("< {rate:.0}"),
    }
}

fn drained_text(drained: Option<&Result<Duration, u64>>) -> String {
    match drained {
        None => "-".to_owned(),
        Some(Ok(took)) => format!("empty after {:.1} s", took.as_secs_f64()),
        Some(Err(left)) => format!("{left} still waiting after 10 s"),
    }
}

/// What every run of a round shares: the example's binary, the wrk
/// script, the padding, and a folder for the requests and the stores.
struct Bench {
    seconds: u64,
    /// A steady rate, open loop, instead of wrk's closed loop
    /// (`RECEIVER_RATE`).
    rate: Option<u64>,
    /// How many events each run writes: enough that none is sent twice.
    count: usize,
    binary: PathBuf,
    dir: support::TempDir,
    script: PathBuf,
    pad: String,
    runtime: tokio::runtime::Runtime,
}

impl Bench {
    fn new(seconds: u64, rate: Option<u64>) -> Self {
        let binary = example_binary();
        let dir = support::TempDir::new("receiver-bench");
        let script = dir.path().join("requests.lua");
        std::fs::write(&script, SCRIPT).expect("script");
        let per_second = rate.unwrap_or(60_000);
        Self {
            seconds,
            rate,
            count: usize::try_from(seconds * per_second).unwrap_or(600_000),
            binary,
            dir,
            script,
            pad: "x".repeat(1024 - body("", "").len() - 20),
            runtime: common::runtime(),
        }
    }

    /// Loads `port` with requests of their own (`run` names their events),
    /// and removes them after: each run's requests take hundreds of
    /// megabytes.
    fn load(&self, port: u16, run: &str) -> Load {
        let requests = write_requests(self.dir.path(), run, self.count, &self.pad);
        let load = match self.rate {
            None => wrk(port, self.seconds, &self.script, &requests),
            Some(rate) => open_loop(port, rate, self.seconds, &requests),
        };
        for thread in 0..THREADS {
            let _ = std::fs::remove_file(format!("{}.{thread}", requests.stem.display()));
        }
        load
    }

    fn bare(&self, round: u64) -> Row {
        let port = free_port();
        let server = self.runtime.block_on(bare(port));
        wait_for_port(port);
        let load = self.load(port, &format!("bare{round}"));
        server.abort();
        Row {
            target: "bare axum (202)".into(),
            load,
            drained: None,
            ratio: 1.0,
        }
    }

    fn store(&self, store: &str, round: u64) -> Row {
        let run = format!("{store}{}_{round}", std::process::id());
        let port = free_port();
        let runtime = &self.runtime;
        let (target, load, drained) = match store {
            "sqlite" => {
                let home = self.dir.path().join(&run);
                std::fs::create_dir_all(&home).expect("dir");
                let example = Example::start(&self.binary, &home, port, &[]);
                let load = self.load(port, &run);
                let inbox = runtime
                    .block_on(SqliteInbox::open(home.join("hooklatch.db")))
                    .expect("sqlite");
                let drained = runtime.block_on(drained(&inbox));
                drop(example);
                ("SQLite", load, drained)
            }
            "postgres" => {
                let server = support::postgres();
                let database = format!("bench_{run}");
                let url = runtime.block_on(create_database(&server, &database));
                let example = Example::start(
                    &self.binary,
                    self.dir.path(),
                    port,
                    &[("DATABASE_URL", url.clone())],
                );
                let load = self.load(port, &run);
                let drained = runtime.block_on(async {
                    let inbox = PostgresInbox::connect(&url).await.expect("postgres");
                    drained(&inbox).await
                });
                drop(example);
                runtime.block_on(drop_database(&server, &database));
                ("Postgres", load, drained)
            }
            "redis" => {
                let server = support::Redis::start_with(&["--appendfsync", "everysec"]);
                let example = Example::start(
                    &self.binary,
                    self.dir.path(),
                    port,
                    &[("REDIS_URL", server.url())],
                );
                let load = self.load(port, &run);
                let drained = runtime.block_on(async {
                    let inbox = RedisInbox::connect(&server.url()).await.expect("redis");
                    drained(&inbox).await
                });
                drop(example);
                ("Redis (AOF everysec)", load, drained)
            }
            other => panic!("RECEIVER_STORES names `{other}`: use sqlite, postgres or redis"),
        };
        Row {
            target: target.into(),
            load,
            drained: Some(drained),
            ratio: 0.0,
        }
    }
}

impl Bench {
    /// The hand-rolled receiver ([`hand_rolled`]) on a fresh `store`, in
    /// this process (its CPU is this process's), loaded as the example is.
    fn hand_rolled(&self, store: &str, round: u64) -> Row {
        let run = format!("hand_{store}{}_{round}", std::process::id());
        let port = free_port();
        let runtime = &self.runtime;
        let mut kept_server = None;
        let mut database = None;
        let peer = runtime.block_on(async {
            match store {
                "sqlite" => {
                    let home = self.dir.path().join(&run);
                    std::fs::create_dir_all(&home).expect("dir");
                    hand_rolled::Store::sqlite(&home.join("hand.db")).await
                }
                "postgres" => {
                    let server = support::postgres();
                    let name = format!("bench_{run}");
                    let url = create_database(&server, &name).await;
                    let peer = hand_rolled::Store::postgres(&url).await;
                    database = Some((server, name));
                    peer
                }
                "redis" => {
                    let server = support::Redis::start_with(&["--appendfsync", "everysec"]);
                    let peer = hand_rolled::Store::redis(&server.url()).await;
                    kept_server = Some(server);
                    peer
                }
                other => panic!("RECEIVER_STORES names `{other}`: use sqlite, postgres or redis"),
            }
        });
        let tasks = runtime.block_on(hand_rolled::serve(peer.clone(), SECRET, port));
        wait_for_port(port);
        let load = self.load(port, &run);
        let drained = runtime.block_on(emptied(|| peer.waiting()));
        for task in tasks {
            task.abort();
        }
        drop(peer);
        drop(kept_server);
        if let Some((server, name)) = database {
            runtime.block_on(drop_database(&server, &name));
        }
        let target = match store {
            "sqlite" => "hand-rolled, SQLite",
            "postgres" => "hand-rolled, Postgres",
            _ => "hand-rolled, Redis (AOF everysec)",
        };
        Row {
            target: target.into(),
            load,
            drained: Some(drained),
            ratio: 0.0,
        }
    }
}

/// The medians over the rounds, each column's on its own (so a row need
/// not be any one round's); non-2xx is the most of any round, and the
/// inbox the slowest round's.
fn print_medians(rows: &[Row], rounds: u64, per_round: usize, seconds: u64) {
    println!(
        "\nMedians over the {rounds} rounds (each column's own; non-2xx: the most of a round; \
         inbox: the slowest round):\n{HEADER}"
    );
    for target in rows[..per_round].iter().map(|row| &row.target) {
        let of: Vec<&Row> = rows.iter().filter(|row| &row.target == target).collect();
        let median =
            |value: &dyn Fn(&Row) -> f64| median(of.iter().map(|row| value(row)).collect());
        let failed = of.iter().map(|row| row.load.failed).max().unwrap_or(0);
        let slowest = of
            .iter()
            .filter_map(|row| row.drained.as_ref())
            .max_by_key(|drained| match drained {
                Ok(took) => (0, took.as_millis() as u64),
                Err(left) => (1, *left),
            });
        let handled = of
            .iter()
            .all(|row| row.handled_per_second(seconds).is_some())
            .then(|| {
                let exact = of.iter().all(|row| {
                    row.handled_per_second(seconds)
                        .is_some_and(|(_, exact)| exact)
                });
                let rate = median(&|row| row.handled_per_second(seconds).map_or(0.0, |(r, _)| r));
                (rate, exact)
            });
        println!(
            "| {target} | {:.0} | {:.2} ms | {:.2} ms | {:.3}x | {failed} | {} | {} | {:.1} | {:.1} | {:.1} |",
            median(&|row| row.load.per_second),
            median(&|row| row.load.p50.as_secs_f64() * 1e3),
            median(&|row| row.load.p99.as_secs_f64() * 1e3),
            median(&|row| row.ratio),
            drained_text(slowest),
            handled_text(handled),
            median(&|row| row.load.cpu.receiver),
            median(&|row| row.load.cpu.store),
            median(&|row| row.load.cpu.machine),
        );
    }
}
