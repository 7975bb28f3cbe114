//! Run with: cargo run -p hooklatch-tower --example axum_receiver
//!
//! A complete webhook receiver: Standard Webhooks signatures, each event
//! accepted once into an inbox, and a worker that drains the inbox and logs
//! each event once.
//!
//! Settings come from the environment, as `examples/support/mod.rs` says:
//! `HOOKLATCH_SECRET` (required), `HOOKLATCH_ADDR`, and `DATABASE_URL` or
//! `REDIS_URL` for a shared store (otherwise the SQLite file `hooklatch.db`).
//! With `HOOKLATCH_METRICS=1` it also serves Prometheus metrics at
//! `GET /metrics` on `HOOKLATCH_METRICS_ADDR` (default `127.0.0.1:9090`).
//!
//! Try it with the CLI:
//!
//! ```text
//! export HOOKLATCH_SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
//! cargo run -p hooklatch-tower --example axum_receiver &
//! echo '{"type":"ping"}' > body.json
//! curl -s localhost:3000/webhooks --data-binary @body.json \
//!   $(cargo run -q -p hooklatch-cli -- sign --scheme standard --secret $HOOKLATCH_SECRET \
//!       --body-file body.json | sed 's/^/-H /; s/: /:/')
//! ```

use axum::Router;
use axum::routing::{get, post_service};
use hooklatch::dedup::{Inbox, InboxQueue};
use hooklatch::receive::report_inbox_depth;
use hooklatch::verify::Verifier;
use hooklatch_tower::WebhookLayer;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

mod support;

use support::{NAMESPACE, Serve, Served, Settings, worker};

/// The receiver: verifies, accepts each event once into `store` under
/// `namespace`.
fn app<S: Inbox + Clone + 'static>(verifier: Verifier, store: S, namespace: &str) -> Router {
    let endpoint = WebhookLayer::new(verifier)
        .with_inbox(store, namespace)
        .expect("the namespace is valid")
        .into_endpoint();
    Router::new().route("/webhooks", post_service(endpoint))
}

/// `GET /metrics`: what the recorder `metrics` holds, in Prometheus' text
/// format.
fn metrics_app(metrics: PrometheusHandle) -> Router {
    Router::new().route("/metrics", get(move || async move { metrics.render() }))
}

/// The buckets of every `*_duration_seconds` histogram: from 50 µs (a
/// verification) to 10 s (a store that is struggling).
const DURATION_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// Installs the Prometheus recorder, once per process. The durations are
/// histograms with buckets (`_bucket` lines), which Prometheus can add up
/// across instances; without buckets the exporter writes summaries, whose
/// quantiles cannot be.
fn prometheus() -> PrometheusHandle {
    static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Suffix("_duration_seconds".into()),
                    DURATION_BUCKETS,
                )
                .expect("the buckets are not empty")
                .install_recorder()
                .expect("no other recorder is installed")
        })
        .clone()
}

struct Axum(Settings);

impl Serve for Axum {
    async fn serve<S: InboxQueue + Clone + 'static>(self, store: S) -> Served {
        let Axum(settings) = self;
        let (handled, _) = tokio::sync::mpsc::unbounded_channel();
        let worker = worker(store.clone(), handled);
        if std::env::var("HOOKLATCH_METRICS").as_deref() == Ok("1") {
            let store = store.clone();
            tokio::spawn(async move {
                loop {
                    if let Err(error) = report_inbox_depth(&store, &[NAMESPACE]).await {
                        eprintln!("cannot read the inbox's depth: {error}");
                    }
                    tokio::time::sleep(std::time::Duration::from_secs(15)).await;
                }
            });
            let address =
                std::env::var("HOOKLATCH_METRICS_ADDR").unwrap_or_else(|_| "127.0.0.1:9090".into());
            let listener = tokio::net::TcpListener::bind(&address).await?;
            println!("metrics on http://{}/metrics", listener.local_addr()?);
            tokio::spawn(axum::serve(listener, metrics_app(prometheus())).into_future());
        }
        let listener = tokio::net::TcpListener::bind(&settings.address).await?;
        println!("listening on http://{}/webhooks", listener.local_addr()?);
        axum::serve(listener, app(settings.verifier, store, NAMESPACE))
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        // Handlers in flight get 10 s; what did not finish runs again.
        let report = worker.stop(std::time::Duration::from_secs(10)).await;
        println!("worker stopped: {report:?}");
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    support::with_store_from_env(Axum(support::settings_from_env()?)).await
}

#[cfg(test)]
mod tests {
    use hooklatch::dedup::MemoryInbox;

    use super::support::check;
    use super::*;

    #[tokio::test]
    async fn each_event_is_handled_once_however_often_it_is_sent() {
        let store = MemoryInbox::new();
        let (handled, mut handled_ids) = tokio::sync::mpsc::unbounded_channel();
        let _worker = worker(store.clone(), handled);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/webhooks", listener.local_addr().unwrap());
        let app = app(check::verifier(), store, NAMESPACE);
        tokio::spawn(async move { axum::serve(listener, app).await });
        check::each_event_is_handled_once(&url, &mut handled_ids).await;
    }

    /// New, repeated and forged webhooks, then a scrape of `/metrics`: the
    /// counts are exactly what was sent, and the durations are histograms.
    #[tokio::test]
    async fn metrics_count_what_was_sent() {
        let metrics = prometheus();
        let serve = |app: Router| async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(listener, app).await });
            address
        };
        let store = MemoryInbox::new();
        let receiver = serve(app(check::verifier(), store.clone(), "metrics-test")).await;
        let scrape = serve(metrics_app(metrics)).await;
        let url = format!("http://{receiver}/webhooks");
        for (id, secret) in [
            ("msg_1", check::SECRET),
            ("msg_1", check::SECRET),
            ("msg_1", check::SECRET),
            ("msg_2", check::SECRET),
            ("msg_3", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"),
        ] {
            check::send(&url, id, secret, b"{}").await;
        }
        // No worker runs here: both new events wait.
        report_inbox_depth(&store, &["metrics-test"]).await.unwrap();
        let text = reqwest::get(format!("http://{scrape}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let count = |outcome: &str, reason: &str, namespace: &str| -> u64 {
            let labels = format!(
                r#"outcome="{outcome}",reason="{reason}",scheme="standard",namespace="{namespace}""#
            );
            text.lines()
                .find(|line| {
                    line.starts_with("hooklatch_requests_total{") && line.contains(&labels)
                })
                .and_then(|line| line.rsplit(' ').next()?.parse().ok())
                .unwrap_or(0)
        };
        assert_eq!(count("accepted", "", "metrics-test"), 2, "{text}");
        assert_eq!(count("duplicate", "", "metrics-test"), 2);
        assert_eq!(count("rejected", "signature", ""), 1);
        // Both durations are histograms with buckets, not summaries.
        for histogram in [
            "hooklatch_verify_duration_seconds",
            "hooklatch_store_duration_seconds",
        ] {
            assert!(
                text.lines()
                    .any(|line| line.starts_with(&format!("{histogram}_bucket{{"))),
                "{histogram}_bucket lines in {text}"
            );
            assert!(
                !text
                    .lines()
                    .any(|line| line.starts_with(histogram) && line.contains("quantile=")),
                "{histogram} is not a summary: {text}"
            );
        }
        for (state, count) in [("waiting", 2), ("taken", 0), ("dead", 0)] {
            let line = format!(
                r#"hooklatch_inbox_events{{namespace="metrics-test",state="{state}"}} {count}"#
            );
            assert!(text.lines().any(|seen| seen == line), "{line} in {text}");
        }
    }
}
