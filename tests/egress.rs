//! The SSRF guard against a real socket: hostile spellings of internal
//! addresses sent through `HttpTransport` to a listener on every local
//! address, which counts the connections it accepts. Where a policy allows
//! loopback, the same spellings are sent again and must arrive, so each
//! row is shown to reach the listener when the guard lets it.
//!
//! Only loopback is ever connected to: URLs for private, metadata and other
//! ranges are checked with `check_url` and never sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hooklatch::sender::guard::{Forbidden, check_url};
use hooklatch::sender::{AddressPolicy, HttpTransport, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A listener on `[::]` (both stacks) or, without IPv6, `0.0.0.0`, that
/// answers 204 and counts accepted connections.
struct Listener {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Listener {
    async fn start() -> Self {
        let listener = match TcpListener::bind("[::]:0").await {
            Ok(listener) => listener,
            Err(_) => TcpListener::bind("0.0.0.0:0").await.unwrap(),
        };
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(answer(stream, b"HTTP/1.1 204 No Content\r\n"));
            }
        });
        Self { port, accepted }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Reads one request head (and a short body) and answers with `status`.
async fn answer(mut stream: TcpStream, status: &'static [u8]) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => seen.extend_from_slice(&buffer[..read]),
        }
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
            let body_len = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|value| value.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if seen.len() >= end + 4 + body_len {
                break;
            }
        }
    }
    let _ = stream.write_all(status).await;
    let _ = stream
        .write_all(b"content-length: 0\r\nconnection: close\r\n\r\n")
        .await;
    let _ = stream.shutdown().await;
    seen
}

/// A spelling of an internal address, and whether a socket connect to what
/// the parser makes of it lands on this host's listener.
struct Hostile {
    url: String,
    reaches_here: bool,
}

/// Loopback, and the unspecified addresses (which Linux connects to the
/// local host): what the control policy opens so that every spelling that
/// points here is shown to arrive.
fn here() -> AddressPolicy {
    AddressPolicy::strict()
        .insecure_allow_loopback()
        .insecure_allow_range("0.0.0.0/32".parse().unwrap())
        .insecure_allow_range("::/128".parse().unwrap())
}

/// The spellings, for a listener on `port`: every textual IPv4 form the
/// WHATWG parser accepts (decimal, octal, hex, shortened, trailing dot,
/// percent-encoded, full-width), bracketed IPv6 forms, userinfo and
/// backslash tricks, and names that resolve to loopback.
fn hostile(port: u16) -> Vec<Hostile> {
    let reach = [
        "http://127.0.0.1:{p}/",
        "http://2130706433:{p}/",
        "http://127.1:{p}/",
        "http://127.0.1:{p}/",
        "http://0x7f.0.0.1:{p}/",
        "http://0x7f000001:{p}/",
        "http://0x7f.1:{p}/",
        "http://0x7F.0x0.0x0.0x1:{p}/",
        "http://0177.0.0.1:{p}/",
        "http://017700000001:{p}/",
        "http://0177.1:{p}/",
        "http://00000000177.0.0.1:{p}/",
        "http://127.000.000.001:{p}/",
        "http://0:{p}/",
        "http://0.0.0.0:{p}/",
        "http://0x00000000:{p}/",
        "http://0.0.0.0.:{p}/",
        "http://127.0.0.1.:{p}/",
        "http://127.42.42.42:{p}/",
        "http://%31%32%37.0.0.1:{p}/",
        "http://127%2E0%2E0%2E1:{p}/",
        "http://127\u{3002}0\u{3002}0\u{3002}1:{p}/",
        "http://\u{ff11}\u{ff12}\u{ff17}.0.0.1:{p}/",
        "http://[::1]:{p}/",
        "http://[0:0:0:0:0:0:0:1]:{p}/",
        "http://[::ffff:127.0.0.1]:{p}/",
        "http://[::ffff:7f00:1]:{p}/",
        "http://[0:0:0:0:0:ffff:127.0.0.1]:{p}/",
        "http://[::]:{p}/",
        "http://localhost:{p}/",
        "http://LOCALHOST:{p}/",
        "http://\u{ff4c}\u{ff4f}\u{ff43}\u{ff41}\u{ff4c}\u{ff48}\u{ff4f}\u{ff53}\u{ff54}:{p}/",
        "http://user:pass@127.0.0.1:{p}/",
        "http://example.com@127.0.0.1:{p}/",
        "http://127.0.0.1:{p}\\@example.com/",
        "http://127.0.0.1:{p}#@example.com/",
        "HTTP://127.0.0.1:{p}/",
        "http:/127.0.0.1:{p}/",
        "http:127.0.0.1:{p}/",
        " http://127.0.0.1:{p}/ ",
        "http://12\t7.0.0.1:{p}/",
        "http://127.0.0.1\n:{p}/",
    ];
    // Refused too, but a connect would not land here (or would leave the
    // host), so these are never sent with loopback allowed.
    let elsewhere = [
        "http://[::127.0.0.1]:{p}/",
        "http://[::ffff:0:127.0.0.1]:{p}/",
        "http://[64:ff9b::127.0.0.1]:{p}/",
        "http://[64:ff9b:1::127.0.0.1]:{p}/",
        "http://[2002:7f00:1::]:{p}/",
        "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]:{p}/",
        "http://localhost.:{p}/",
    ];
    let port = port.to_string();
    reach
        .iter()
        .map(|url| (url, true))
        .chain(elsewhere.iter().map(|url| (url, false)))
        .map(|(url, reaches_here)| Hostile {
            url: url.replace("{p}", &port),
            reaches_here,
        })
        .collect()
}

fn transport(policy: AddressPolicy) -> HttpTransport {
    HttpTransport::with_timeouts(
        policy,
        std::time::Duration::from_secs(2),
        std::time::Duration::from_secs(5),
    )
    .unwrap()
}

/// Sends every URL and returns the ones that got an answer.
async fn send_all<'a>(
    transport: &HttpTransport,
    urls: impl Iterator<Item = &'a str>,
) -> Vec<String> {
    let mut answered = Vec::new();
    for url in urls {
        if transport.post(url, &[], b"{}").await.is_ok() {
            answered.push(url.to_owned());
        }
    }
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_policy_connects_to_no_spelling_of_an_internal_address() {
    let listener = Listener::start().await;
    let rows = hostile(listener.port);
    assert!(rows.len() >= 40, "{} rows", rows.len());
    let strict = transport(AddressPolicy::strict());
    for row in &rows {
        let refused = strict
            .post(&row.url, &[], b"{}")
            .await
            .unwrap_err()
            .report();
        assert!(
            refused.starts_with("refused")
                || refused.contains("forbidden")
                || refused.contains("dns"),
            "{:?}: {refused}",
            row.url
        );
    }
    assert_eq!(listener.accepted(), 0, "a hostile URL reached the listener");

    // The control: with loopback (and 0.0.0.0, ::) allowed, each spelling
    // that points here does arrive, so the rows above were refused by the
    // guard alone.
    let loopback = transport(here());
    let reaching: Vec<&str> = rows
        .iter()
        .filter(|row| row.reaches_here)
        .map(|row| row.url.as_str())
        .collect();
    let answered = send_all(&loopback, reaching.iter().copied()).await;
    assert_eq!(
        answered, reaching,
        "every local spelling arrives when allowed"
    );
    assert_eq!(listener.accepted(), reaching.len());

    // Loopback allowed does not open the unspecified address.
    let only_loopback = transport(AddressPolicy::strict().insecure_allow_loopback());
    for host in ["0", "0.0.0.0", "[::]", "[::ffff:0.0.0.0]"] {
        let url = format!("http://{host}:{}/", listener.port);
        let refused = only_loopback
            .post(&url, &[], b"{}")
            .await
            .unwrap_err()
            .report();
        assert!(refused.contains("unspecified"), "{url}: {refused}");
    }
    assert_eq!(listener.accepted(), reaching.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowing_private_ranges_still_refuses_loopback_and_metadata() {
    let listener = Listener::start().await;
    let private = transport(AddressPolicy::strict().insecure_allow_private());
    let rows = hostile(listener.port);
    let answered = send_all(&private, rows.iter().map(|row| row.url.as_str())).await;
    assert_eq!(answered, Vec::<String>::new());
    assert_eq!(listener.accepted(), 0);

    // Checked, never sent.
    let policy = AddressPolicy::strict().insecure_allow_private();
    for (url, expected) in [
        ("http://10.0.0.1/", Ok(())),
        ("http://0xa000001/", Ok(())),
        ("http://012.1/", Ok(())),
        ("http://[fd12::1]/", Ok(())),
        ("http://192.168.0.1./", Ok(())),
        (
            "http://169.254.169.254/latest/meta-data/",
            Err(Forbidden::Metadata),
        ),
        ("http://2852039166/", Err(Forbidden::Metadata)),
        ("http://0xa9.0xfe.0xa9.0xfe/", Err(Forbidden::Metadata)),
        ("http://0251.0376.0251.0376/", Err(Forbidden::Metadata)),
        ("http://169.254.43518/", Err(Forbidden::Metadata)),
        ("http://[::ffff:169.254.169.254]/", Err(Forbidden::Metadata)),
        ("http://[fd00:ec2::254]/", Err(Forbidden::Metadata)),
        ("http://[fd00:ec2:0:0:0:0:0:254]/", Err(Forbidden::Metadata)),
        (
            "http://169.254.170.2/v2/credentials",
            Err(Forbidden::Metadata),
        ),
        (
            "http://100.100.100.200/latest/meta-data/",
            Err(Forbidden::Metadata),
        ),
        ("http://168.63.129.16/", Err(Forbidden::Metadata)),
        ("http://169.254.1.1/", Err(Forbidden::LinkLocal)),
        ("http://100.64.0.1/", Err(Forbidden::SharedAddressSpace)),
        ("http://198.18.0.1/", Err(Forbidden::Benchmarking)),
    ] {
        assert_eq!(check_url(url, &policy).map(|_| ()), expected, "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cidr_lists_open_exactly_their_range_and_deny_wins() {
    let listener = Listener::start().await;
    let port = listener.port;
    let url = |host: &str| format!("http://{host}:{port}/");

    // Allow one address of loopback and nothing else internal.
    let one =
        transport(AddressPolicy::strict().insecure_allow_range("127.0.0.2/32".parse().unwrap()));
    let rows = hostile(port);
    let answered = send_all(&one, rows.iter().map(|row| row.url.as_str())).await;
    assert_eq!(
        answered,
        Vec::<String>::new(),
        "127.0.0.1 in any spelling stays refused"
    );
    assert_eq!(listener.accepted(), 0);
    let allowed = [
        url("127.0.0.2"),
        url("2130706434"),
        url("127.2"),
        url("0x7f.0.0.2"),
    ];
    let answered = send_all(&one, allowed.iter().map(String::as_str)).await;
    assert_eq!(answered, allowed);
    assert_eq!(listener.accepted(), allowed.len());

    // Allow all of loopback but deny 127.0.0.1: the deny list wins.
    let denied = transport(
        AddressPolicy::strict()
            .insecure_allow_loopback()
            .insecure_allow_range("127.0.0.0/8".parse().unwrap())
            .with_denied_range("127.0.0.1/32".parse().unwrap())
            .with_denied_range("::1/128".parse().unwrap()),
    );
    let before = listener.accepted();
    for host in [
        "127.0.0.1",
        "2130706433",
        "127.1",
        "[::ffff:127.0.0.1]",
        "[::1]",
        "localhost",
    ] {
        let refused = denied
            .post(&url(host), &[], b"{}")
            .await
            .unwrap_err()
            .report();
        assert!(refused.contains("denied"), "{host}: {refused}");
    }
    assert_eq!(listener.accepted(), before);
    assert!(denied.post(&url("127.0.0.3"), &[], b"{}").await.is_ok());
    assert_eq!(listener.accepted(), before + 1);

    // Metadata loses to an allow list that covers it.
    let wide = AddressPolicy::strict().insecure_allow_range("169.254.0.0/16".parse().unwrap());
    assert_eq!(check_url("http://169.254.1.1/", &wide).map(|_| ()), Ok(()));
    assert_eq!(
        check_url("http://169.254.169.254/", &wide).map(|_| ()),
        Err(Forbidden::Metadata)
    );
}

/// A stand-in for a smokescreen-style egress proxy on loopback: records
/// each request head and answers 204 (403 to `CONNECT`).
async fn egress_proxy() -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut head = [0u8; 4096];
                let read = stream.read(&mut head).await.unwrap_or(0);
                let line = String::from_utf8_lossy(&head[..read])
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                let status: &[u8] = if line.starts_with("CONNECT") {
                    b"HTTP/1.1 403 Forbidden\r\n"
                } else {
                    b"HTTP/1.1 204 No Content\r\n"
                };
                log.lock().unwrap().push(line);
                let _ = stream.write_all(status).await;
                let _ = stream
                    .write_all(b"content-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (format!("http://{address}"), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_egress_proxy_carries_names_while_the_guard_refuses_literals() {
    let (proxy, seen) = egress_proxy().await;
    let transport = HttpTransport::builder(AddressPolicy::strict())
        .with_egress_proxy(&proxy)
        .unwrap()
        .build()
        .unwrap();
    // A name nothing here resolves goes to the proxy, which resolves it.
    let answer = transport
        .post("http://hooks.example.test/in", &[], b"{}")
        .await
        .unwrap();
    assert_eq!(answer.status, 204);
    let https = transport
        .post("https://hooks.example.test/in", &[], b"{}")
        .await;
    assert!(https.is_err(), "the proxy refused the tunnel");
    for literal in [
        "http://127.0.0.1:9/",
        "http://2130706433/",
        "http://[::1]/",
        "http://10.0.0.1/",
    ] {
        let refused = transport
            .post(literal, &[], b"{}")
            .await
            .unwrap_err()
            .report();
        assert!(refused.starts_with("refused"), "{literal}: {refused}");
    }
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "POST http://hooks.example.test/in HTTP/1.1",
            "CONNECT hooks.example.test:443 HTTP/1.1",
        ]
    );
}

#[test]
fn an_egress_proxy_must_be_an_http_url() {
    // The last one is too long for hyper-util to read again as a URI, which
    // would make it connect directly, around the proxy.
    let oversized = format!("http://127.0.0.1:4750/{}", "a".repeat(70_000));
    for proxy in [
        "socks5://127.0.0.1:1080",
        "not a url",
        "http://",
        "file:///tmp/x",
        &oversized,
    ] {
        assert!(
            HttpTransport::builder(AddressPolicy::strict())
                .with_egress_proxy(proxy)
                .is_err(),
            "{proxy}"
        );
    }
}
