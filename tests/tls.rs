//! TLS to Postgres and Redis with a private certificate authority: the
//! stores connect, verify the server's certificate, and accept each event
//! once; without the authority's certificate the connection is refused.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hooklatch::RedisConnection;
use hooklatch::dedup::{Acceptance, InboxQueue, IncomingEvent, PostgresInbox, RedisInbox};

/// A certificate authority and a server certificate for 127.0.0.1 and
/// localhost, made with `openssl`.
struct Certificates {
    dir: support::TempDir,
}

impl Certificates {
    fn make() -> Self {
        let dir = support::TempDir::new("tls");
        let run = |args: &[&str]| {
            let output = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .output()
                .expect("openssl runs (apt-get install openssl)");
            assert!(
                output.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        };
        std::fs::write(
            dir.path().join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
        )
        .unwrap();
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=hooklatch test authority",
        ]);
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ]);
        // Postgres and Redis may run as another user: let them read.
        for file in ["ca.crt", "server.crt", "server.key"] {
            Command::new("chmod")
                .arg("644")
                .arg(dir.path().join(file))
                .status()
                .unwrap();
        }
        Command::new("chmod")
            .arg("755")
            .arg(dir.path())
            .status()
            .unwrap();
        Self { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    fn authority(&self) -> Vec<u8> {
        std::fs::read(self.path("ca.crt")).unwrap()
    }
}

async fn accepts_once(store: &impl InboxQueue) {
    let namespace = support::unique("tls");
    let event = IncomingEvent::new(&namespace, "evt_tls", b"{}");
    assert_eq!(store.accept(&event).await.unwrap(), Acceptance::Accepted);
    assert_eq!(store.accept(&event).await.unwrap(), Acceptance::Duplicate);
}

/// A Redis server that speaks only TLS.
struct TlsRedis {
    child: Child,
    port: u16,
}

impl TlsRedis {
    fn start(certificates: &Certificates, dir: &Path) -> Self {
        let port = support::free_port();
        let path = |file: &str| certificates.path(file).to_str().unwrap().to_owned();
        let child = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .args([
                "--tls-cert-file",
                &path("server.crt"),
                "--tls-key-file",
                &path("server.key"),
            ])
            .args([
                "--tls-ca-cert-file",
                &path("ca.crt"),
                "--tls-auth-clients",
                "no",
            ])
            .args([
                "--dir",
                dir.to_str().unwrap(),
                "--save",
                "",
                "--appendonly",
                "yes",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, port }
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn redis_over_tls_verifies_the_server_and_accepts_each_event_once() {
    let certificates = Certificates::make();
    let dir = support::TempDir::new("tls-redis");
    let server = TlsRedis::start(&certificates, dir.path());
    let address = format!("rediss://127.0.0.1:{}", server.port);
    let connection =
        RedisConnection::open_with_root_certificate(&address, &certificates.authority())
            .await
            .expect("a TLS connection verified by the private authority");
    accepts_once(&RedisInbox::new(connection).await.unwrap()).await;
    // The system's roots do not include the private authority.
    assert!(RedisInbox::connect(&address).await.is_err());
}

#[tokio::test]
async fn postgres_over_tls_verifies_the_server_and_accepts_each_event_once() {
    let certificates = Certificates::make();
    let server = support::Postgres::start();
    server.enable_tls(
        &certificates.path("server.crt"),
        &certificates.path("server.key"),
    );
    let verified = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        server.url(),
        certificates.path("ca.crt").display()
    );
    accepts_once(&PostgresInbox::connect(&verified).await.unwrap()).await;
    // `verify-full` without the authority cannot verify the server.
    let unverified = format!("{}?sslmode=verify-full", server.url());
    assert!(PostgresInbox::connect(&unverified).await.is_err());
}
