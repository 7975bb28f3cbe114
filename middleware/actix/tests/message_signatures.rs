//! HTTP message signatures (RFC 9421) through the actix-web extractor on a
//! real socket: hooklatch's own sender signs over HTTP, the extractor
//! verifies the request line, headers and body, and claims each event
//! once. The checks are shared with the axum layer's twin.

#![cfg(all(feature = "http-signatures", feature = "sender-http"))]

#[path = "../../../tests/support/message_signatures.rs"]
mod signed;

use actix_web::{App, HttpServer, web};
use hooklatch::dedup::MemoryInbox;
use hooklatch::receive::Receiver;
use hooklatch_actix::{InboxWebhook, WebhookConfig};

/// Serves the extractor for message signatures on a free loopback port,
/// bound to that authority; returns the hook's URL and the inbox.
fn serve() -> (String, MemoryInbox) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let authority = listener.local_addr().unwrap().to_string();
    let inbox = MemoryInbox::new();
    let receiver = Receiver::for_message_signatures(signed::verifier(&authority), "http");
    let config = WebhookConfig::from_receiver(receiver)
        .with_reason_in_body(true)
        .with_inbox(inbox.clone(), "partners")
        .unwrap();
    let server = HttpServer::new(move || {
        App::new().app_data(config.clone()).route(
            "/hooks/partner",
            web::post().to(|webhook: InboxWebhook| async move { webhook }),
        )
    })
    .workers(1)
    .listen(listener)
    .unwrap();
    actix_web::rt::spawn(server.run());
    (format!("http://{authority}/hooks/partner"), inbox)
}

#[actix_web::test]
async fn the_actix_extractor_accepts_a_message_signed_delivery_from_the_sender_once() {
    let (url, inbox) = serve();
    signed::a_message_signed_delivery_is_accepted_once(&url, &inbox).await;
}

#[actix_web::test]
async fn the_actix_extractor_refuses_a_changed_body_path_or_host_before_claiming() {
    let (url, inbox) = serve();
    signed::forgeries_are_refused_and_the_genuine_request_accepted_once(&url, &inbox).await;
}
