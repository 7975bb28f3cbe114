//! The CLI's HTTP servers (`listen`, `console`): an axum router on hyper
//! with the bounds `axum::serve` leaves out, so that clients that send
//! slowly cannot pin the server. A request's head must arrive within a
//! time (also the wait for the next request on a kept-alive connection),
//! and connections past a cap wait to be accepted.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// Connections open at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 1024;

/// How long requests under way get to finish once the server stops.
const GRACE: Duration = Duration::from_secs(10);

/// The longest `--header-timeout` or `--request-timeout` taken.
const LONGEST_TIMEOUT: Duration = Duration::from_secs(3600);

/// `--header-timeout` and `--request-timeout`: a duration from 1 ms to an
/// hour.
pub(crate) fn timeout(text: &str) -> Result<Duration, String> {
    let timeout = crate::send::parse_duration(text)?;
    if timeout.is_zero() || timeout > LONGEST_TIMEOUT {
        return Err(format!("`{text}`: give a time from 1ms to 1h"));
    }
    Ok(timeout)
}

/// `--addr`: a socket address; a bare port gets a hint, since
/// `SocketAddr`'s own error ("invalid socket address syntax") gives none.
pub(crate) fn socket_address(text: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(address) = text.parse() {
        return Ok(address);
    }
    if let Ok(port) = text.trim_start_matches(':').parse::<u16>() {
        return Err(format!(
            "`{text}` is a port, not an address: give 127.0.0.1:{port} (this machine only) or 0.0.0.0:{port} (every interface)"
        ));
    }
    if let Some(port) = text.strip_prefix("localhost:") {
        return Err(format!(
            "`{text}`: give an IP address, such as 127.0.0.1:{port}"
        ));
    }
    Err(format!(
        "`{text}` is not an address such as 127.0.0.1:8080 or [::1]:8080"
    ))
}

/// How long a request may take: its head, and the whole of it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// For the request's head (and the next request on a kept-alive
    /// connection).
    pub(crate) head: Duration,
    /// For the whole request, its body read included: a client that sends
    /// a body a byte at a time is answered 408 by then.
    pub(crate) whole: Duration,
}

/// Answers 408 to a request that takes longer than `limit`.
async fn within(
    limit: Duration,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (
            http::StatusCode::REQUEST_TIMEOUT,
            "the request took too long",
        )
            .into_response(),
    }
}

/// Serves `app` on `listener` until `stop` ends, within `limits`.
pub(crate) async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: Limits,
    stop: impl Future<Output = ()>,
) {
    let whole = limits.whole;
    let app = app.layer(axum::middleware::from_fn(move |request, next| {
        within(whole, request, next)
    }));
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let (stopping, stopped) = watch::channel(());
    let mut connections = JoinSet::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let slot = tokio::select! {
            () = &mut stop => break,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors, say: wait for some to close.
                    eprintln!("cannot accept a connection: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        while connections.try_join_next().is_some() {}
        let service = TowerToHyperService::new(app.clone());
        let mut stopped = stopped.clone();
        connections.spawn(async move {
            let _slot = slot;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.head);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = stopped.changed() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.as_mut().await;
                }
            }
        });
    }
    drop(stopping);
    let finished = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(GRACE, finished).await.is_err() {
        eprintln!("requests still under way after {GRACE:?}: closing them");
    }
}
