//! Run with: cargo run -p hooklatch-actix --example actix_receiver
//!
//! A complete webhook receiver on actix-web: Standard Webhooks signatures,
//! each event accepted once into an inbox, and a worker that drains the
//! inbox and logs each event once.
//!
//! - `HOOKLATCH_SECRET`: the `whsec_` signing secret (required);
//! - `HOOKLATCH_ADDR`: where to listen (default `127.0.0.1:3000`);
//! - `DATABASE_URL` (`postgres://...`) or `REDIS_URL` (`redis://...`) for a
//!   shared store; otherwise the SQLite file `hooklatch.db`.

use std::time::Duration;

use actix_web::{App, HttpServer, web};
use hooklatch::dedup::{Inbox, PostgresStore, RedisStore, SqliteStore};
use hooklatch::verify::{Scheme, Verifier};
use hooklatch_actix::{InboxWebhook, WebhookConfig};

const NAMESPACE: &str = "example";

/// The receiver's routes: the extractor verifies and accepts; returning it
/// answers 202 (new) or 200 (duplicate).
fn app(config: &mut web::ServiceConfig) {
    config.route(
        "/webhooks",
        web::post().to(|webhook: InboxWebhook| async move { webhook }),
    );
}

/// Drains the inbox: each event is logged once, then acked.
async fn worker<S: Inbox>(store: S, handled: tokio::sync::mpsc::UnboundedSender<String>) {
    loop {
        match store.take(NAMESPACE, "example-worker", 16).await {
            Ok(batch) if batch.is_empty() => {
                actix_web::rt::time::sleep(Duration::from_millis(200)).await
            }
            Ok(batch) => {
                for delivery in batch {
                    println!(
                        "event {} (attempt {}): {}",
                        delivery.id,
                        delivery.attempt,
                        String::from_utf8_lossy(&delivery.body)
                    );
                    match store.ack(&delivery).await {
                        Ok(()) => {
                            let _ = handled.send(delivery.id);
                        }
                        Err(error) => eprintln!("ack failed, the event will come back: {error}"),
                    }
                }
            }
            Err(error) => {
                eprintln!("inbox unavailable: {error}");
                actix_web::rt::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

async fn serve<S: Inbox + Clone + 'static>(
    verifier: Verifier,
    store: S,
    address: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let (handled, _) = tokio::sync::mpsc::unbounded_channel();
    actix_web::rt::spawn(worker(store.clone(), handled));
    let config = WebhookConfig::new(verifier).with_inbox(store, NAMESPACE)?;
    let server = HttpServer::new(move || App::new().app_data(config.clone()).configure(app))
        .bind(address)?;
    println!("listening on http://{}/webhooks", server.addrs()[0]);
    server.run().await?;
    Ok(())
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secret = std::env::var("HOOKLATCH_SECRET")
        .map_err(|_| "set HOOKLATCH_SECRET to the whsec_ signing secret")?;
    let verifier = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(&secret)?
        .build()?;
    let address = std::env::var("HOOKLATCH_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    if let Ok(url) = std::env::var("DATABASE_URL") {
        serve(verifier, PostgresStore::connect(&url).await?, &address).await
    } else if let Ok(url) = std::env::var("REDIS_URL") {
        serve(verifier, RedisStore::connect(&url).await?, &address).await
    } else {
        serve(verifier, SqliteStore::open("hooklatch.db").await?, &address).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use hooklatch::dedup::MemoryStore;
    use hooklatch::verify::Signer;

    use super::*;

    #[actix_web::test]
    async fn each_event_is_handled_once_however_often_it_is_sent() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let verifier = Verifier::builder(Scheme::standard_webhooks())
            .with_secret(secret)
            .unwrap()
            .build()
            .unwrap();
        let store = MemoryStore::new();
        let (handled, mut handled_ids) = tokio::sync::mpsc::unbounded_channel();
        actix_web::rt::spawn(worker(store.clone(), handled));
        let config = WebhookConfig::new(verifier)
            .with_inbox(store, NAMESPACE)
            .unwrap();
        let server = HttpServer::new(move || App::new().app_data(config.clone()).configure(app))
            .workers(1)
            .bind("127.0.0.1:0")
            .unwrap();
        let url = format!("http://{}/webhooks", server.addrs()[0]);
        actix_web::rt::spawn(server.run());

        let signer = Signer::new(Scheme::standard_webhooks(), [secret]).unwrap();
        let client = reqwest::Client::new();
        for (id, times) in [("evt_a", 3), ("evt_b", 1), ("evt_c", 2)] {
            for _ in 0..times {
                let body = format!("{{\"id\":\"{id}\"}}");
                let mut request = client.post(&url).body(body.clone());
                let headers = signer.sign(id, SystemTime::now(), body.as_bytes()).unwrap();
                for (name, value) in headers.iter() {
                    request = request.header(name, value);
                }
                assert!(request.send().await.unwrap().status().is_success());
            }
        }
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let id = tokio::time::timeout(Duration::from_secs(5), handled_ids.recv())
                .await
                .expect("the worker handles every event")
                .unwrap();
            seen.push(id);
        }
        seen.sort();
        assert_eq!(seen, ["evt_a", "evt_b", "evt_c"]);
        assert!(
            tokio::time::timeout(Duration::from_millis(600), handled_ids.recv())
                .await
                .is_err(),
            "each event was handled exactly once"
        );
    }
}
