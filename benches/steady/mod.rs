//! An open-loop load at a steady rate, for the receiver bench's latency
//! table: each request is sent when it is due, whether or not earlier
//! ones were answered, and its latency counts from when it was due, so a
//! receiver that stalls shows the whole wait of the requests queued behind
//! the stall (what wrk's closed loop hides, and `oha -q` or wrk2 correct
//! for). It runs in a process of its own (this bench's binary, started
//! again), so that its CPU is not counted as the receiver's.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// The variable that makes the bench's binary the load's process.
const CHILD: &str = "RECEIVER_STEADY_CHILD";

/// What the open-loop load measured.
pub(crate) struct Steady {
    /// Requests answered.
    pub(crate) answered: u64,
    /// Answered with a status other than 2xx, or not answered (a
    /// connection that failed).
    pub(crate) failed: u64,
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) p999: Duration,
    pub(crate) max: Duration,
    /// When the slowest request was due, from the load's start.
    pub(crate) max_due: Duration,
}

/// Runs the load in a process of its own: `rate` requests a second for
/// `seconds` to `port`, the requests read from the files `{stem}.{n}`
/// (`files` of them, each request `size` bytes, taken in turn).
pub(crate) fn steady(
    port: u16,
    rate: u64,
    seconds: u64,
    (stem, files, size): (&Path, usize, usize),
) -> Steady {
    let output = Command::new(std::env::current_exe().expect("the bench's binary"))
        .env(
            CHILD,
            format!("{port} {rate} {seconds} {files} {size} {}", stem.display()),
        )
        .output()
        .expect("the load's process runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the load failed: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let numbers: Vec<u64> = text
        .lines()
        .find_map(|line| line.strip_prefix("steady "))
        .expect("the load's figures")
        .split_whitespace()
        .map(|n| n.parse().expect("a number"))
        .collect();
    let micros = Duration::from_micros;
    Steady {
        answered: numbers[0],
        failed: numbers[1],
        p50: micros(numbers[2]),
        p99: micros(numbers[3]),
        p999: micros(numbers[4]),
        max: micros(numbers[5]),
        max_due: micros(numbers[6]),
    }
}

/// In the load's process (started by [`steady`]): runs the load, prints
/// its figures and exits. Does nothing in the bench's own process.
pub(crate) fn run_if_child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let mut parts = spec.splitn(6, ' ');
    let mut number = || -> u64 { parts.next().and_then(|n| n.parse().ok()).expect("a number") };
    let (port, rate, seconds, files, size) = (number(), number(), number(), number(), number());
    let stem = PathBuf::from(parts.next().expect("the requests' files"));
    let count = usize::try_from(rate * seconds).expect("a count");
    let requests = read_requests(&stem, files as usize, size as usize, count);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let port = u16::try_from(port).expect("a port");
    let (latencies, failed) = runtime.block_on(load(port, rate, requests));
    let worst_due = latencies
        .iter()
        .max_by_key(|(latency, _)| *latency)
        .map_or(0, |(_, due)| due.as_micros());
    let mut latencies: Vec<Duration> = latencies.into_iter().map(|(latency, _)| latency).collect();
    latencies.sort_unstable();
    let at = |quantile: f64| {
        let index = ((latencies.len() as f64 * quantile) as usize).min(latencies.len() - 1);
        latencies[index].as_micros()
    };
    println!(
        "steady {} {failed} {} {} {} {} {worst_due}",
        latencies.len(),
        at(0.5),
        at(0.99),
        at(0.999),
        latencies.last().map_or(0, Duration::as_micros)
    );
    std::process::exit(0);
}

/// The first `count` requests, taken from the files in turn.
fn read_requests(stem: &Path, files: usize, size: usize, count: usize) -> Vec<Vec<u8>> {
    let mut readers: Vec<_> = (0..files)
        .map(|n| {
            std::io::BufReader::new(
                std::fs::File::open(format!("{}.{n}", stem.display())).expect("requests file"),
            )
        })
        .collect();
    (0..count)
        .map(|n| {
            let mut request = vec![0; size];
            readers[n % files]
                .read_exact(&mut request)
                .expect("enough requests");
            request
        })
        .collect()
}

/// Sends each request when it is due, on an idle connection or a new one;
/// the latencies of those answered 2xx, counted from when each was due
/// (with when that was, from the start), and how many failed.
async fn load(port: u16, rate: u64, requests: Vec<Vec<u8>>) -> (Vec<(Duration, Duration)>, u64) {
    let (idle_tx, mut idle_rx) = tokio::sync::mpsc::unbounded_channel::<TcpStream>();
    let (done_tx, mut done_rx) =
        tokio::sync::mpsc::unbounded_channel::<Option<(Duration, Duration)>>();
    let start = Instant::now();
    let every = Duration::from_secs(1) / u32::try_from(rate).expect("a rate");
    let total = requests.len();
    for (n, request) in requests.into_iter().enumerate() {
        let due = start + every * u32::try_from(n).expect("a count");
        tokio::time::sleep_until(due.into()).await;
        let idle = idle_rx.try_recv().ok();
        let (idle_tx, done_tx) = (idle_tx.clone(), done_tx.clone());
        tokio::spawn(async move {
            let answer = match idle {
                Some(connection) => send(connection, &request).await,
                None => match TcpStream::connect(("127.0.0.1", port)).await {
                    Ok(connection) => {
                        let _ = connection.set_nodelay(true);
                        send(connection, &request).await
                    }
                    Err(_) => None,
                },
            };
            let latency = match answer {
                Some((connection, status)) => {
                    let _ = idle_tx.send(connection);
                    (200..300)
                        .contains(&status)
                        .then(|| (due.elapsed(), due - start))
                }
                None => None,
            };
            let _ = done_tx.send(latency);
        });
    }
    drop(done_tx);
    let mut latencies = Vec::with_capacity(total);
    let mut failed = 0;
    while let Some(latency) = done_rx.recv().await {
        match latency {
            Some(latency) => latencies.push(latency),
            None => failed += 1,
        }
    }
    (latencies, failed)
}

/// Writes `request` and reads the answer's head and body; the connection
/// and the status, or `None` if the connection failed.
async fn send(mut connection: TcpStream, request: &[u8]) -> Option<(TcpStream, u16)> {
    connection.write_all(request).await.ok()?;
    let mut buffer = Vec::with_capacity(512);
    let mut chunk = [0; 4096];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break at + 4;
        }
        let read = connection.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = std::str::from_utf8(&buffer[..head_end]).ok()?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let read = connection.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    Some((connection, status))
}
