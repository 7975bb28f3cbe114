//! Run with: cargo run -p hooklatch-tower --example axum_receiver
//!
//! A complete webhook receiver: Standard Webhooks signatures, each event
//! accepted once into an inbox, and a worker that drains the inbox and logs
//! each event once.
//!
//! Settings come from the environment, as `example_support.rs` says:
//! `HOOKLATCH_SECRET` (required), `HOOKLATCH_ADDR`, and `DATABASE_URL` or
//! `REDIS_URL` for a shared store (otherwise the SQLite file `hooklatch.db`).
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
use axum::routing::post;
use hooklatch::dedup::Inbox;
use hooklatch::verify::Verifier;
use hooklatch_tower::WebhookLayer;

#[path = "../../example_support.rs"]
mod support;

use support::{NAMESPACE, Serve, Served, Settings, worker};

/// The receiver: verifies, accepts each event once into `store`.
fn app<S: Inbox + Clone + 'static>(verifier: Verifier, store: S) -> Router {
    Router::new().route("/webhooks", post(|| async {})).layer(
        WebhookLayer::new(verifier)
            .with_inbox(store, NAMESPACE)
            .expect("the namespace is valid"),
    )
}

struct Axum(Settings);

impl Serve for Axum {
    async fn serve<S: Inbox + Clone + 'static>(self, store: S) -> Served {
        let Axum(settings) = self;
        let (handled, _) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(worker(store.clone(), handled));
        let listener = tokio::net::TcpListener::bind(&settings.address).await?;
        println!("listening on http://{}/webhooks", listener.local_addr()?);
        axum::serve(listener, app(settings.verifier, store)).await?;
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    support::with_store_from_env(Axum(support::settings_from_env()?)).await
}

#[cfg(test)]
mod tests {
    use hooklatch::dedup::MemoryStore;

    use super::support::check;
    use super::*;

    #[tokio::test]
    async fn each_event_is_handled_once_however_often_it_is_sent() {
        let store = MemoryStore::new();
        let (handled, mut handled_ids) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(worker(store.clone(), handled));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/webhooks", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app(check::verifier(), store)).await });
        check::each_event_is_handled_once(&url, &mut handled_ids).await;
    }
}
