//! Providers' subscription checks (Slack, Meta, Twitch, Zoom) through the
//! extractors under a real actix-web server, each with the request its
//! provider documents: answered as the provider expects, never claimed,
//! never passed to the handler; a forged one is refused; the provider's
//! webhooks are still accepted.

#[path = "../../../tests/support/handshakes.rs"]
mod handshakes;

use handshakes::send;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix_web::{App, HttpServer, web};
use hooklatch::dedup::{InboxQueue as _, MemoryInbox};
use hooklatch_actix::{InboxWebhook, RawWebhook, WebhookConfig};

/// Serves `config` with `/webhooks` taking every method (Meta's check is
/// a GET) through an [`InboxWebhook`], and `/handled` through a
/// [`RawWebhook`] handler that counts its calls.
fn serve(config: WebhookConfig, calls: Arc<AtomicUsize>) -> String {
    let server = HttpServer::new(move || {
        let calls = Arc::clone(&calls);
        App::new()
            .app_data(config.clone())
            .route(
                "/webhooks",
                web::route().to(|webhook: InboxWebhook| async move { webhook }),
            )
            .route(
                "/handled",
                web::route().to(move |_: RawWebhook| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async { "handled" }
                }),
            )
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let address = server.addrs()[0];
    actix_web::rt::spawn(server.run());
    format!("http://{address}")
}

#[actix_web::test]
async fn each_providers_handshake_is_answered_by_the_extractor_never_claimed_nor_handled() {
    for case in handshakes::cases() {
        let provider = case.provider;
        let store = MemoryInbox::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let config = WebhookConfig::new(case.verifier.clone())
            .with_handshake(case.handshake.clone())
            .unwrap()
            .with_inbox(store.clone(), "hooks")
            .unwrap();
        let base = serve(config, Arc::clone(&calls));
        for path in ["/webhooks", "/handled"] {
            case.check_answered(&format!("{base}{path}")).await;
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "{provider}: the handler never ran"
        );
        let taken = store.take("hooks", "test", 10).await.unwrap();
        assert!(taken.is_empty(), "{provider}: nothing claimed or enqueued");
        let (headers, body) = &case.webhook;
        let (status, _, answer) =
            send("POST", &format!("{base}/webhooks"), "", headers, body).await;
        assert_eq!(status, 202, "{provider}'s webhook: {answer}");
        let taken = store.take("hooks", "test", 10).await.unwrap();
        assert_eq!(taken.len(), 1, "{provider}'s webhook enqueued");
    }
}
