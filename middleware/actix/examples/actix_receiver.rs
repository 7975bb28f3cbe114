//! Run with: cargo run -p hooklatch-actix --example actix_receiver
//!
//! A complete webhook receiver on actix-web: Standard Webhooks signatures,
//! each event accepted once into an inbox, and a worker that drains the
//! inbox and logs each event once.
//!
//! Settings come from the environment, as `examples/support/mod.rs` says:
//! `HOOKLATCH_SECRET` (required), `HOOKLATCH_ADDR`, and `DATABASE_URL` or
//! `REDIS_URL` for a shared store (otherwise the SQLite file `hooklatch.db`).

use actix_web::{App, HttpServer, web};
use hooklatch::dedup::InboxQueue;
use hooklatch_actix::{InboxWebhook, WebhookConfig};

mod support;

use support::{NAMESPACE, Serve, Served, Settings, worker};

/// The receiver's routes: the extractor verifies and accepts; returning it
/// answers 202 (new) or 200 (duplicate).
fn app(config: &mut web::ServiceConfig) {
    config.route(
        "/webhooks",
        web::post().to(|webhook: InboxWebhook| async move { webhook }),
    );
}

struct Actix(Settings);

impl Serve for Actix {
    async fn serve<S: InboxQueue + Clone + 'static>(self, store: S) -> Served {
        let Actix(settings) = self;
        let (handled, _) = tokio::sync::mpsc::unbounded_channel();
        let worker = worker(store.clone(), handled);
        let config = WebhookConfig::new(settings.verifier).with_inbox(store, NAMESPACE)?;
        let server = HttpServer::new(move || App::new().app_data(config.clone()).configure(app))
            .bind(&settings.address)?;
        println!("listening on http://{}/webhooks", server.addrs()[0]);
        // actix-web stops on Ctrl-C; then handlers in flight get 10 s, and
        // what did not finish runs again.
        server.run().await?;
        let report = worker.stop(std::time::Duration::from_secs(10)).await;
        println!("worker stopped: {report:?}");
        Ok(())
    }
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    support::with_store_from_env(Actix(support::settings_from_env()?)).await
}

#[cfg(test)]
mod tests {
    use hooklatch::dedup::MemoryInbox;

    use super::support::check;
    use super::*;

    #[actix_web::test]
    async fn each_event_is_handled_once_however_often_it_is_sent() {
        let store = MemoryInbox::new();
        let (handled, mut handled_ids) = tokio::sync::mpsc::unbounded_channel();
        let _worker = worker(store.clone(), handled);
        let config = WebhookConfig::new(check::verifier())
            .with_inbox(store, NAMESPACE)
            .unwrap();
        let server = HttpServer::new(move || App::new().app_data(config.clone()).configure(app))
            .workers(1)
            .bind("127.0.0.1:0")
            .unwrap();
        let url = format!("http://{}/webhooks", server.addrs()[0]);
        actix_web::rt::spawn(server.run());
        check::each_event_is_handled_once(&url, &mut handled_ids).await;
    }
}
