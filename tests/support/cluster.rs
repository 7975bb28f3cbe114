//! A Redis Cluster of a test's own: three masters with one or two replicas
//! each, from the `redis-server` binary, on loopback, in a temporary
//! folder; and a proxy that can hold back what a master sends its
//! replicas, so that they lag as far as a test wants.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::{TempDir, wait_for_redis};

/// `redis-server --cluster-enabled yes` processes joined by `redis-cli
/// --cluster create`: three masters and one or two replicas each. A node
/// is declared failed after one second, so a replica is promoted about
/// 2.5 s after its master dies.
pub struct RedisCluster {
    _dir: TempDir,
    dir_path: std::path::PathBuf,
    ports: Vec<u16>,
    children: Vec<Option<Child>>,
}

/// `count` free loopback ports below 55535 whose cluster bus port
/// (+10000) is free too.
fn cluster_ports(count: usize) -> Vec<u16> {
    let mut ports = Vec::new();
    while ports.len() < count {
        let port = super::free_port();
        let bus_free = std::net::TcpListener::bind(("127.0.0.1", port.wrapping_add(10000))).is_ok();
        if port < 55535 && bus_free && !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let output = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| {
            panic!("cannot run redis-cli: {error}; install redis-tools or run scripts/test")
        });
    String::from_utf8_lossy(&output.stdout).into_owned()
}

impl RedisCluster {
    /// Three masters with one replica each.
    pub fn start() -> Self {
        Self::start_with_replicas(1)
    }

    /// Three masters with `replicas` replicas each.
    pub fn start_with_replicas(replicas: usize) -> Self {
        let dir = TempDir::new("redis-cluster");
        let dir_path = dir.path().to_path_buf();
        let ports = cluster_ports(3 * (1 + replicas));
        let mut cluster = Self {
            _dir: dir,
            dir_path,
            ports: ports.clone(),
            children: Vec::new(),
        };
        for index in 0..ports.len() {
            // A port taken between choosing it and the node's start (tests
            // bind and connect all the time) is given up for another.
            let mut tries = 0;
            let child = loop {
                let mut child = cluster.spawn(index);
                if super::started(&mut child, cluster.ports[index]) {
                    break child;
                }
                let _ = child.kill();
                let _ = child.wait();
                tries += 1;
                assert!(
                    tries < 10,
                    "a cluster node did not start on any of 10 free ports"
                );
                let taken = cluster.ports.clone();
                cluster.ports[index] = cluster_ports(taken.len() + 1)
                    .into_iter()
                    .find(|port| !taken.contains(port))
                    .expect("a free port");
            };
            cluster.children.push(Some(child));
        }
        let nodes: Vec<String> = cluster
            .ports
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            created.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        cluster.wait_until_ready();
        cluster
    }

    fn spawn(&self, index: usize) -> Child {
        let port = self.ports[index].to_string();
        let node_dir = self.dir_path.join(&port);
        std::fs::create_dir_all(&node_dir).expect("node folder");
        let program =
            std::env::var("HOOKLATCH_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        Command::new(&program)
            .args(["--port", &port, "--bind", "127.0.0.1"])
            .args(["--dir", node_dir.to_str().unwrap()])
            .args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ])
            .args(["--cluster-node-timeout", "1000"])
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
            ])
            .args(["--repl-diskless-sync-delay", "0"])
            .args(["--protected-mode", "no", "--daemonize", "no"])
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

    /// Waits until every live node says the cluster is ok and every
    /// replica is in sync with its master.
    pub fn wait_until_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let live: Vec<u16> = self.live_ports();
            let ok = live
                .iter()
                .all(|&port| redis_cli(port, &["cluster", "info"]).contains("cluster_state:ok"));
            let synced = live.iter().all(|&port| {
                let replication = redis_cli(port, &["info", "replication"]);
                replication.contains("role:master") || replication.contains("master_link_status:up")
            });
            if ok && synced {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not become ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn live_ports(&self) -> Vec<u16> {
        self.ports
            .iter()
            .zip(&self.children)
            .filter(|(_, child)| child.is_some())
            .map(|(&port, _)| port)
            .collect()
    }

    /// The address the stores take: `redis+cluster://` and every node.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .ports
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// The ports of the nodes that are masters now.
    pub fn masters(&self) -> Vec<u16> {
        self.live_ports()
            .into_iter()
            .filter(|&port| redis_cli(port, &["info", "replication"]).contains("role:master"))
            .collect()
    }

    /// The port of the master that holds `key`'s slot now.
    pub fn master_of(&self, key: &str) -> u16 {
        self.live_master_of(key)
            .unwrap_or_else(|| panic!("no live master holds the slot of {key}"))
    }

    /// The live master that holds `key`'s slot, if one does.
    fn live_master_of(&self, key: &str) -> Option<u16> {
        let any = self.live_ports()[0];
        let slot: u16 = redis_cli(any, &["cluster", "keyslot", key])
            .trim()
            .parse()
            .expect("a slot number");
        for port in self.masters() {
            let nodes = redis_cli(port, &["cluster", "nodes"]);
            let myself = nodes
                .lines()
                .find(|line| line.contains("myself"))
                .expect("the node's own line");
            let holds = myself.split_whitespace().skip(8).any(|range| {
                let (start, end) = range.split_once('-').unwrap_or((range, range));
                match (start.parse::<u16>(), end.parse::<u16>()) {
                    (Ok(start), Ok(end)) => (start..=end).contains(&slot),
                    _ => false,
                }
            });
            if holds {
                return Some(port);
            }
        }
        None
    }

    /// The ports of the replicas of the master on `port`.
    pub fn replicas_of(&self, master: u16) -> Vec<u16> {
        redis_cli(master, &["info", "replication"])
            .lines()
            .filter(|line| line.starts_with("slave"))
            .filter_map(|line| {
                let port = line
                    .split(',')
                    .find_map(|field| field.strip_prefix("port="))?;
                port.parse().ok()
            })
            .collect()
    }

    /// Routes everything that reaches the master on `port` (clients and
    /// its replicas alike) through a [`ReplicationHold`], by announcing the
    /// proxy's port as the master's; returns once every replica replicates
    /// through it.
    pub async fn hold_replication_of(&self, master: u16) -> ReplicationHold {
        let hold = ReplicationHold::start(master).await;
        let proxy = hold.port.to_string();
        let replicas = self.replicas_of(master);
        assert!(
            !replicas.is_empty(),
            "the master on {master} has no replica"
        );
        tokio::task::block_in_place(|| {
            let set = redis_cli(master, &["config", "set", "cluster-announce-port", &proxy]);
            assert!(
                set.contains("OK"),
                "cannot announce the proxy's port: {set}"
            );
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let through_proxy = replicas.iter().all(|&replica| {
                    let info = redis_cli(replica, &["info", "replication"]);
                    info.contains(&format!("master_port:{proxy}"))
                        && info.contains("master_link_status:up")
                });
                if through_proxy {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "the replicas of {master} never reconnected through the proxy"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        hold
    }

    /// Makes the replica on `port` its master's master at once, without
    /// the master's agreement (`CLUSTER FAILOVER TAKEOVER`), as an operator
    /// does when the master is gone.
    pub fn take_over(&self, replica: u16) {
        let answer = redis_cli(replica, &["cluster", "failover", "takeover"]);
        assert!(answer.contains("OK"), "takeover refused: {answer}");
    }

    /// How many keys the node on `port` holds.
    pub fn keys_on(&self, port: u16) -> u64 {
        redis_cli(port, &["dbsize"]).trim().parse().unwrap_or(0)
    }

    /// Kills the node on `port` with SIGKILL, as a crash would.
    pub fn kill(&mut self, port: u16) {
        let index = self.ports.iter().position(|&p| p == port).expect("a node");
        if let Some(mut child) = self.children[index].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the node on `port` again, from its folder: a master that was
    /// failed over comes back as a replica of the one that took over.
    pub fn restart(&mut self, port: u16) {
        let index = self.ports.iter().position(|&p| p == port).expect("a node");
        assert!(self.children[index].is_none(), "the node is running");
        self.children[index] = Some(self.spawn(index));
        wait_for_redis(port);
    }

    /// Waits until a replica has taken over from the killed master of
    /// `key`, and returns the new master.
    pub fn wait_for_failover(&self, key: &str) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let live = self.live_ports();
            let ok = live
                .iter()
                .all(|&port| redis_cli(port, &["cluster", "info"]).contains("cluster_state:ok"));
            if let Some(master) = self.live_master_of(key).filter(|_| ok) {
                return master;
            }
            assert!(Instant::now() < deadline, "no replica took over");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().filter_map(Option::take) {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A TCP proxy in front of one Redis master. It passes everything through
/// at once, except that while [held](Self::hold) what the master sends on
/// replication links (connections whose other end sent `REPLCONF`) waits
/// in the proxy: the replicas lag, and `WAIT` on the master blocks. If the
/// master dies, what waits is dropped, as a network that had not delivered
/// it yet would drop it.
pub struct ReplicationHold {
    port: u16,
    held: Arc<AtomicBool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl ReplicationHold {
    async fn start(master: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
        let port = listener.local_addr().expect("an address").port();
        let held = Arc::new(AtomicBool::new(false));
        let accepting = tokio::spawn({
            let held = Arc::clone(&held);
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(relay(client, master, Arc::clone(&held)));
                }
            }
        });
        Self {
            port,
            held,
            accepting,
        }
    }

    /// Holds back (or, with `false`, lets through) what the master sends
    /// its replicas.
    pub fn hold(&self, held: bool) {
        self.held.store(held, Ordering::SeqCst);
    }
}

impl Drop for ReplicationHold {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

async fn relay(client: TcpStream, master: u16, held: Arc<AtomicBool>) {
    let Ok(upstream) = TcpStream::connect(("127.0.0.1", master)).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_master, mut to_master) = upstream.into_split();
    let replication = Arc::new(AtomicBool::new(false));
    let upward = {
        let replication = Arc::clone(&replication);
        async move {
            let mut buffer = vec![0_u8; 16 * 1024];
            loop {
                let read = from_client.read(&mut buffer).await.unwrap_or(0);
                if read == 0 {
                    return;
                }
                if buffer[..read].windows(8).any(|w| w == b"REPLCONF") {
                    replication.store(true, Ordering::SeqCst);
                }
                if to_master.write_all(&buffer[..read]).await.is_err() {
                    return;
                }
            }
        }
    };
    let downward = async move {
        let mut buffer = vec![0_u8; 16 * 1024];
        let mut waiting: Vec<u8> = Vec::new();
        loop {
            let holding = replication.load(Ordering::SeqCst) && held.load(Ordering::SeqCst);
            if !holding && !waiting.is_empty() {
                if to_client.write_all(&waiting).await.is_err() {
                    return;
                }
                waiting.clear();
            }
            tokio::select! {
                read = from_master.read(&mut buffer) => {
                    // The master is gone: what waits is dropped with it.
                    let read = read.unwrap_or(0);
                    if read == 0 {
                        return;
                    }
                    let holding =
                        replication.load(Ordering::SeqCst) && held.load(Ordering::SeqCst);
                    if holding || !waiting.is_empty() {
                        waiting.extend_from_slice(&buffer[..read]);
                    } else if to_client.write_all(&buffer[..read]).await.is_err() {
                        return;
                    }
                }
                () = tokio::time::sleep(Duration::from_millis(10)), if !waiting.is_empty() => {}
            }
        }
    };
    tokio::select! {
        () = upward => {}
        () = downward => {}
    }
}
