//! HTTP message signatures (RFC 9421) through the axum layer on a real
//! socket: hooklatch's own sender signs over HTTP, the layer verifies the
//! request line, headers and body, and claims each event once. The checks
//! are shared with the actix-web extractor's twin.

#![cfg(all(feature = "http-signatures", feature = "sender-http"))]

#[path = "../../../tests/support/message_signatures.rs"]
mod signed;

use axum::Router;
use axum::routing::post;
use hooklatch::dedup::MemoryInbox;
use hooklatch::receive::Receiver;
use hooklatch_tower::WebhookLayer;

/// Serves the layer for message signatures on a free loopback port, bound
/// to that authority; returns the hook's URL and the inbox.
async fn serve() -> (String, MemoryInbox) {
    serve_at(false).await
}

/// [`serve`], with the route in a router nested under `/hooks` when
/// `nested` (axum then hands the inner router the path without it).
async fn serve_at(nested: bool) -> (String, MemoryInbox) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let authority = listener.local_addr().unwrap().to_string();
    let inbox = MemoryInbox::new();
    let receiver = Receiver::for_message_signatures(signed::verifier(&authority), "http");
    let layer = WebhookLayer::from_receiver(receiver)
        .with_reason_in_body(true)
        .with_inbox(inbox.clone(), "partners")
        .unwrap();
    let route = post(|| async { "unused" }).layer(layer);
    let app = if nested {
        Router::new().nest("/hooks", Router::new().route("/partner", route))
    } else {
        Router::new().route("/hooks/partner", route)
    };
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{authority}/hooks/partner"), inbox)
}

#[tokio::test]
async fn the_axum_layer_accepts_a_message_signed_delivery_from_the_sender_once() {
    let (url, inbox) = serve().await;
    signed::a_message_signed_delivery_is_accepted_once(&url, &inbox).await;
}

#[tokio::test]
async fn the_axum_layer_refuses_a_changed_body_path_or_host_before_claiming() {
    let (url, inbox) = serve().await;
    signed::forgeries_are_refused_and_the_genuine_request_accepted_once(&url, &inbox).await;
}

#[tokio::test]
async fn the_axum_layer_verifies_the_whole_path_under_a_nested_router() {
    let (url, inbox) = serve_at(true).await;
    signed::a_message_signed_delivery_is_accepted_once(&url, &inbox).await;
}
