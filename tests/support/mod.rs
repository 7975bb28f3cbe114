//! Throwaway Postgres and Redis servers for tests, on loopback and free
//! ports, in temporary folders.
//!
//! Tests use the servers `scripts/test` started (`HOOKLATCH_TEST_POSTGRES_URL`,
//! `HOOKLATCH_TEST_REDIS_URL`) or start private ones; fault tests always
//! start private ones, since they stop them. A missing server binary is a
//! test failure, never a skip.

#![allow(dead_code, unreachable_pub)]

mod cluster;
pub use cluster::RedisCluster;

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A folder removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "hooklatch-{label}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a temporary folder");
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A unique name for a test's namespace or table prefix.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}{}x{nanos:x}x{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind a free loopback port")
        .port()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

fn postgres_bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("HOOKLATCH_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    candidates.sort();
    candidates.pop().unwrap_or_else(|| {
        panic!(
            "Postgres server binaries not found (no /usr/lib/postgresql/*/bin/initdb, \
             HOOKLATCH_PG_BIN unset): install them (apt-get install postgresql) or run scripts/test"
        )
    })
}

/// A Postgres server of this test's own.
pub struct Postgres {
    dir: TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl Postgres {
    pub fn start() -> Self {
        let bin = postgres_bin_dir();
        let dir = TempDir::new("pg");
        let as_postgres = is_root();
        if as_postgres {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(status.success());
        }
        let server = Self {
            dir,
            bin,
            port: free_port(),
            as_postgres,
        };
        let data = server.data_dir();
        server.run(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "hooklatch",
                "--no-sync",
            ],
        );
        server.start_again();
        server
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let program = self.bin.join(tool);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        };
        let output = command
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|error| panic!("run {}: {error}", program.display()));
        assert!(
            output.status.success(),
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Starts the server (again) on the same port and data.
    pub fn start_again(&self) {
        let data = self.data_dir();
        let log = self.dir.path().join("log");
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        self.run(
            "pg_ctl",
            &[
                "start",
                "-w",
                "-D",
                data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-o",
                &options,
            ],
        );
    }

    /// Turns TLS on with `certificate` and `key` (PEM files) and reloads:
    /// clients may then ask for `sslmode=verify-full`.
    pub fn enable_tls(&self, certificate: &Path, key: &Path) {
        let data = self.data_dir();
        std::fs::copy(certificate, data.join("server.crt")).expect("copy the certificate");
        std::fs::copy(key, data.join("server.key")).expect("copy the key");
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .expect("postgresql.conf");
        conf.write_all(b"\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n")
            .expect("write postgresql.conf");
        for file in ["server.crt", "server.key"] {
            let path = data.join(file);
            if self.as_postgres {
                let status = Command::new("chown")
                    .arg("postgres:postgres")
                    .arg(&path)
                    .status()
                    .expect("chown");
                assert!(status.success());
            }
            let status = Command::new("chmod")
                .arg("600")
                .arg(&path)
                .status()
                .expect("chmod");
            assert!(status.success());
        }
        self.run("pg_ctl", &["reload", "-D", data.to_str().unwrap()]);
        // The reload is a signal; give the server a moment to read it.
        std::thread::sleep(Duration::from_millis(500));
    }

    /// Stops the server the way a crash would: no shutdown checkpoint.
    pub fn stop_immediately(&self) {
        let data = self.data_dir();
        self.run(
            "pg_ctl",
            &[
                "stop",
                "-w",
                "-m",
                "immediate",
                "-D",
                data.to_str().unwrap(),
            ],
        );
    }

    pub fn url(&self) -> String {
        format!("postgres://hooklatch@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.data_dir();
        let program = self.bin.join("pg_ctl");
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        let _ = command
            .args(["stop", "-w", "-m", "immediate", "-D"])
            .arg(data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A Redis server of this test's own, with AOF and `appendfsync always`
/// unless started with other settings.
pub struct Redis {
    dir: TempDir,
    port: u16,
    child: Option<Child>,
    settings: Vec<String>,
}

impl Redis {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A server with `settings` (`redis-server` flags) after the usual
    /// ones, which they override: `["--appendonly", "no"]`. A port taken
    /// between choosing it and the server's start (tests bind and connect
    /// all the time) is given up for another.
    pub fn start_with(settings: &[&str]) -> Self {
        let mut server = Self {
            dir: TempDir::new("redis"),
            port: free_port(),
            child: None,
            settings: settings.iter().map(|&s| s.to_owned()).collect(),
        };
        for _ in 0..10 {
            let mut child = server.spawn();
            if started(&mut child, server.port) {
                server.child = Some(child);
                return server;
            }
            let _ = child.kill();
            let _ = child.wait();
            server.port = free_port();
        }
        panic!("redis did not start on any of 10 free ports");
    }

    /// Starts the server again on its port, after [`kill`](Self::kill).
    pub fn start_again(&mut self) {
        let child = self.spawn();
        self.child = Some(child);
        wait_for_redis(self.port);
    }

    fn spawn(&self) -> Child {
        let program =
            std::env::var("HOOKLATCH_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        Command::new(&program)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", self.dir.path().to_str().unwrap()])
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .args(["--protected-mode", "no", "--daemonize", "no"])
            .args(&self.settings)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot start {program}: {error}; install it (apt-get install redis-server) \
                     or run scripts/test"
                )
            })
    }

    /// Kills the server with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether `child` is the Redis server answering on `port`: `false` when
/// it exited (the port was taken) or another process answers there.
pub(crate) fn started(child: &mut Child, port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if child.try_wait().ok().flatten().is_some() {
            return false;
        }
        if let Some(pid) = redis_pid(port) {
            return pid == child.id();
        }
        assert!(
            Instant::now() < deadline,
            "redis on port {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The process id of the Redis server on `port`, once it answers.
fn redis_pid(port: u16) -> Option<u32> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream.write_all(b"INFO server\r\n").ok()?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while reply.len() < 64 * 1024 {
        let read = stream.read(&mut chunk).ok()?;
        if read == 0 {
            return None;
        }
        reply.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&reply);
        if let Some(rest) = text.split("\r\nprocess_id:").nth(1)
            && let Some((pid, _)) = rest.split_once("\r\n")
        {
            return pid.parse().ok();
        }
    }
    None
}

fn wait_for_redis(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
            let mut reply = [0u8; 16];
            if stream.write_all(b"PING\r\n").is_ok()
                && stream
                    .read(&mut reply)
                    .is_ok_and(|n| reply[..n].starts_with(b"+PONG"))
            {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "redis on port {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A server for one test: the shared one scripts/test started, or a
/// private one stopped when this is dropped.
pub enum Server {
    Shared(String),
    PrivatePostgres(Postgres),
    PrivateRedis(Redis),
    PrivateRedisCluster(RedisCluster),
}

impl Server {
    pub fn url(&self) -> String {
        match self {
            Self::Shared(url) => url.clone(),
            Self::PrivatePostgres(server) => server.url(),
            Self::PrivateRedis(server) => server.url(),
            Self::PrivateRedisCluster(cluster) => cluster.url(),
        }
    }
}

fn shared(variable: &str) -> Option<Server> {
    if let Ok(url) = std::env::var(variable) {
        return Some(Server::Shared(url));
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but {variable} is unset: run the tests through scripts/test"
    );
    None
}

/// Postgres for a test: scripts/test's server, or a private one.
pub fn postgres() -> Server {
    shared("HOOKLATCH_TEST_POSTGRES_URL")
        .unwrap_or_else(|| Server::PrivatePostgres(Postgres::start()))
}

/// Redis for a test: scripts/test's server, or a private one.
pub fn redis() -> Server {
    shared("HOOKLATCH_TEST_REDIS_URL").unwrap_or_else(|| Server::PrivateRedis(Redis::start()))
}

/// A Redis Cluster (3 masters, 3 replicas) for a test: scripts/test's
/// cluster, or a private one.
pub fn redis_cluster() -> Server {
    shared("HOOKLATCH_TEST_REDIS_CLUSTER_URL")
        .unwrap_or_else(|| Server::PrivateRedisCluster(RedisCluster::start()))
}

/// The script calls (`EVALSHA`, `EVAL`) the Redis server at `url`
/// (`redis://host:port`) has run, from `INFO commandstats`.
pub fn script_calls(url: &str) -> u64 {
    info(url, "commandstats")
        .lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:"))
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// How many error replies the Redis server at `url` has sent, from
/// `INFO stats`.
pub fn error_replies(url: &str) -> u64 {
    info(url, "stats")
        .lines()
        .find_map(|line| line.strip_prefix("total_error_replies:"))
        .and_then(|count| count.trim().parse().ok())
        .expect("INFO stats has total_error_replies")
}

/// `INFO section` of the Redis server at `url`, on a connection of its own.
pub fn info(url: &str, section: &str) -> String {
    let address = url.trim_start_matches("redis://").trim_end_matches('/');
    let mut stream = TcpStream::connect(address).expect("connect to redis");
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    stream
        .write_all(format!("INFO {section}\r\n").as_bytes())
        .expect("send INFO");
    let mut reply = Vec::new();
    let mut buffer = [0u8; 4096];
    // A bulk reply: `$LENGTH\r\nTEXT\r\n`.
    loop {
        let read = stream.read(&mut buffer).expect("read INFO");
        assert!(read > 0, "redis closed the connection");
        reply.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&reply).into_owned();
        if let Some((head, body)) = text.split_once("\r\n") {
            let length: usize = head[1..].parse().expect("a bulk reply");
            if body.len() >= length {
                return body[..length].to_owned();
            }
        }
    }
}

/// Takes everything ready in `namespace` from `store`, acking each, and
/// returns the ids in the order taken.
pub async fn drain<S: hooklatch::dedup::InboxQueue>(store: &S, namespace: &str) -> Vec<String> {
    let mut ids = Vec::new();
    loop {
        let batch = store.take(namespace, "drain", 500).await.expect("take");
        if batch.is_empty() {
            return ids;
        }
        for delivery in batch {
            store.ack(&delivery).await.expect("ack");
            ids.push(delivery.id);
        }
    }
}

/// A store of a user's own that implements only `Inbox::accept`: it keeps
/// each claimed `namespace/id` and hands each new event's body on, in
/// memory. Enough for the receivers, which call nothing else.
#[derive(Clone, Default)]
pub struct AcceptOnly(std::sync::Arc<std::sync::Mutex<Handed>>);

/// What an [`AcceptOnly`] store was given.
#[derive(Debug, Default)]
pub struct Handed {
    /// Every `namespace/id` claimed.
    pub seen: std::collections::HashSet<String>,
    /// The bodies of the new events, in order.
    pub bodies: Vec<Vec<u8>>,
}

impl AcceptOnly {
    /// What the store was given so far.
    pub fn handed(&self) -> std::sync::MutexGuard<'_, Handed> {
        self.0.lock().unwrap()
    }
}

impl hooklatch::dedup::Inbox for AcceptOnly {
    async fn accept(
        &self,
        event: &hooklatch::dedup::IncomingEvent<'_>,
    ) -> Result<hooklatch::dedup::Acceptance, hooklatch::dedup::DedupError> {
        let mut handed = self.handed();
        if !handed
            .seen
            .insert(format!("{}/{}", event.namespace, event.id))
        {
            return Ok(hooklatch::dedup::Acceptance::Duplicate);
        }
        handed.bodies.push(event.body.to_vec());
        Ok(hooklatch::dedup::Acceptance::Accepted)
    }
}
