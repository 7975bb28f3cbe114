//! Providers' subscription checks (Slack, Meta, Twitch, Zoom) through the
//! layer under a real axum server, each with the request its provider
//! documents: answered as the provider expects, never claimed, never
//! passed to the handler; a forged one is refused; the provider's
//! webhooks are still accepted.

#[path = "../../../tests/support/handshakes.rs"]
mod handshakes;

use handshakes::send;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::routing::post;
use hooklatch::dedup::{InboxQueue as _, MemoryInbox};
use hooklatch_tower::WebhookLayer;

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}/webhooks")
}

#[tokio::test]
async fn each_providers_handshake_is_answered_by_the_layer_never_claimed_nor_handled() {
    for case in handshakes::cases() {
        let provider = case.provider;
        let calls = Arc::new(AtomicUsize::new(0));
        let store = MemoryInbox::new();
        let inbox = Router::new()
            .route("/webhooks", post(|| async { "never called" }))
            .layer(
                WebhookLayer::new(case.verifier.clone())
                    .with_handshake(case.handshake.clone())
                    .unwrap()
                    .with_inbox(store.clone(), "hooks")
                    .unwrap(),
            );
        let counted = Arc::clone(&calls);
        let handled = Router::new()
            .route(
                "/webhooks",
                post(move || {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async { "handled" }
                }),
            )
            .layer(
                WebhookLayer::new(case.verifier.clone())
                    .with_handshake(case.handshake.clone())
                    .unwrap(),
            );
        for url in [serve(inbox).await, serve(handled).await] {
            case.check_answered(&url).await;
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "{provider}: the handler never ran"
        );
        let taken = store.take("hooks", "test", 10).await.unwrap();
        assert!(taken.is_empty(), "{provider}: nothing claimed or enqueued");

        // The provider's webhooks go on as before.
        let inbox = Router::new()
            .route("/webhooks", post(|| async { "never called" }))
            .layer(
                WebhookLayer::new(case.verifier.clone())
                    .with_handshake(case.handshake.clone())
                    .unwrap()
                    .with_inbox(store.clone(), "hooks")
                    .unwrap(),
            );
        let url = serve(inbox).await;
        let (headers, body) = &case.webhook;
        let (status, _, answer) = send("POST", &url, "", headers, body).await;
        assert_eq!(status, 202, "{provider}'s webhook: {answer}");
        let taken = store.take("hooks", "test", 10).await.unwrap();
        assert_eq!(taken.len(), 1, "{provider}'s webhook enqueued");
    }
}

/// Without the handshake configured, a handshake is a webhook like any
/// other (Meta's unsigned GET is refused).
#[tokio::test]
async fn a_handshake_not_configured_is_not_answered() {
    for case in handshakes::cases() {
        let app = Router::new()
            .route("/webhooks", post(|| async { "handled" }))
            .layer(WebhookLayer::new(case.verifier.clone()));
        let url = serve(app).await;
        let (status, _, answer) =
            send(case.method, &url, case.query, &case.headers, &case.body).await;
        assert_ne!(answer, case.answer, "{}", case.provider);
        if case.method == "GET" {
            assert_eq!(status, 400, "{}: unsigned", case.provider);
        }
    }
}

/// `VerifiedBody` and `VerifiedJson`, without a layer, answer the
/// handshakes of the `Receiver` in the router's state the same way.
#[tokio::test]
async fn the_state_extractors_answer_their_receivers_handshakes() {
    use hooklatch::receive::Receiver;
    use hooklatch_tower::VerifiedBody;
    for case in handshakes::cases() {
        let provider = case.provider;
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let receiver = Receiver::new(case.verifier.clone())
            .with_handshake(case.handshake.clone())
            .unwrap();
        let app = Router::new()
            .route(
                "/webhooks",
                axum::routing::any(move |VerifiedBody(_): VerifiedBody| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async { "handled" }
                }),
            )
            .with_state(receiver);
        let url = serve(app).await;
        case.check_answered(&url).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "{provider}: the handler never ran"
        );
        let (headers, body) = &case.webhook;
        let (status, _, answer) = send("POST", &url, "", headers, body).await;
        assert_eq!(
            (status, answer.as_str()),
            (200, "handled"),
            "{provider}'s webhook"
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "{provider}'s webhook handled"
        );
    }
}
