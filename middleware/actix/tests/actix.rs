//! The extractors under a real actix-web server on 127.0.0.1:0 with a real
//! HTTP client, for every store.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use actix_web::{App, HttpResponse, HttpServer, web};
use hooklatch::dedup::{LeaseStore, MemoryInbox, PostgresInbox};
use hooklatch::verify::{Scheme, Signer, Verifier};
use hooklatch_actix::{InboxWebhook, LeasedWebhook, RawWebhook, Webhook, WebhookConfig};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const LIMIT: usize = 4096;

type HeaderPairs = Vec<(String, String)>;

fn verifier() -> Verifier {
    Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .unwrap()
        .build()
        .unwrap()
}

fn sign_at(secret: &str, id: &str, at: SystemTime, body: &[u8]) -> HeaderPairs {
    Signer::new(Scheme::standard_webhooks(), [secret])
        .unwrap()
        .sign(id, at, body)
        .unwrap()
        .iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

fn sign(id: &str, body: &[u8]) -> HeaderPairs {
    sign_at(SECRET, id, SystemTime::now(), body)
}

/// Starts `config`'s app on a free loopback port; returns the URL.
fn serve(config: WebhookConfig, configure: fn(&mut web::ServiceConfig)) -> String {
    let server = HttpServer::new(move || App::new().app_data(config.clone()).configure(configure))
        .workers(2)
        .bind("127.0.0.1:0")
        .unwrap();
    let address = server.addrs()[0];
    actix_web::rt::spawn(server.run());
    format!("http://{address}/webhooks")
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    headers: &HeaderPairs,
    body: Vec<u8>,
) -> (u16, String) {
    let mut request = client.post(url).body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

fn inbox_routes(config: &mut web::ServiceConfig) {
    config.route(
        "/webhooks",
        web::post().to(|webhook: InboxWebhook| async move { webhook }),
    );
}

#[actix_web::test]
async fn postgres_outage_answers_503_then_the_retry_is_accepted() {
    let server = support::Postgres::start();
    let pool = sqlx_pool(&server.url()).await;
    let store = PostgresInbox::new(pool, "hooklatch").unwrap();
    store.migrate().await.unwrap();
    let config = WebhookConfig::new(verifier())
        .with_inbox(store.clone(), "outage")
        .unwrap();
    let url = serve(config, inbox_routes);
    let client = reqwest::Client::new();
    let body = b"{}".to_vec();
    let headers = sign("msg_outage", &body);
    server.stop_immediately();
    let (status, _) = post(&client, &url, &headers, body.clone()).await;
    assert_eq!(status, 503);
    server.start_again();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        let (status, _) = post(&client, &url, &headers, body.clone()).await;
        if status != 503 || std::time::Instant::now() > deadline {
            break status;
        }
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status, 202, "nothing was claimed during the outage");
    assert_eq!(support::drain(&store, "outage").await, ["msg_outage"]);
}

async fn sqlx_pool(url: &str) -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect(url)
        .await
        .unwrap()
}

#[actix_web::test]
async fn concurrent_delivery_gets_409_while_the_first_runs() {
    static GATE: std::sync::OnceLock<Arc<tokio::sync::Notify>> = std::sync::OnceLock::new();
    static ENTERED: std::sync::OnceLock<Arc<tokio::sync::Notify>> = std::sync::OnceLock::new();
    let gate = GATE
        .get_or_init(|| Arc::new(tokio::sync::Notify::new()))
        .clone();
    let entered = ENTERED
        .get_or_init(|| Arc::new(tokio::sync::Notify::new()))
        .clone();
    fn routes(config: &mut web::ServiceConfig) {
        config.route(
            "/webhooks",
            web::post().to(|webhook: LeasedWebhook| async move {
                ENTERED.get().unwrap().notify_one();
                GATE.get().unwrap().notified().await;
                webhook.complete().await.unwrap();
                HttpResponse::Ok().body("handled")
            }),
        );
    }
    let config = WebhookConfig::new(verifier())
        .with_lease(MemoryInbox::new(), "slow", Duration::from_secs(30))
        .unwrap();
    let url = serve(config, routes);
    let client = reqwest::Client::new();
    let body = b"{}".to_vec();
    let headers = sign("msg_slow", &body);
    let first = {
        let (client, url, headers, body) =
            (client.clone(), url.clone(), headers.clone(), body.clone());
        actix_web::rt::spawn(async move { post(&client, &url, &headers, body).await.0 })
    };
    entered.notified().await;
    let mut request = client.post(&url).body(body.clone());
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status().as_u16(), 409);
    assert!(response.headers().contains_key("retry-after"));
    gate.notify_one();
    assert_eq!(first.await.unwrap(), 200);
}

#[actix_web::test]
async fn json_and_raw_extractors_verify() {
    #[derive(serde::Deserialize)]
    struct Paid {
        invoice: String,
    }
    fn routes(config: &mut web::ServiceConfig) {
        config
            .route(
                "/webhooks",
                web::post().to(|Webhook(paid): Webhook<Paid>| async move { paid.invoice }),
            )
            .route(
                "/raw",
                web::post().to(|RawWebhook(event): RawWebhook| async move {
                    event.key().unwrap().to_owned()
                }),
            );
    }
    let url = serve(WebhookConfig::new(verifier()), routes);
    let client = reqwest::Client::new();
    let body = br#"{"invoice":"in_42"}"#.to_vec();
    let headers = sign("msg_x", &body);
    assert_eq!(
        post(&client, &url, &headers, body.clone()).await,
        (200, "in_42".into())
    );
    assert_eq!(
        post(
            &client,
            &url.replace("/webhooks", "/raw"),
            &headers,
            body.clone()
        )
        .await,
        (200, "msg_x".into())
    );
    let not_json = b"plain".to_vec();
    let headers = sign("msg_y", &not_json);
    assert_eq!(post(&client, &url, &headers, not_json).await.0, 422);
}

#[actix_web::test]
async fn missing_config_is_a_500() {
    fn routes(config: &mut web::ServiceConfig) {
        config.route(
            "/webhooks",
            web::post().to(|webhook: InboxWebhook| async move { webhook }),
        );
    }
    // Verification works, but no inbox store is configured.
    let url = serve(WebhookConfig::new(verifier()), routes);
    let body = b"{}".to_vec();
    let headers = sign("msg", &body);
    assert_eq!(
        post(&reqwest::Client::new(), &url, &headers, body).await.0,
        500
    );
}

#[actix_web::test]
async fn chunked_body_over_the_limit_is_refused() {
    let store = MemoryInbox::new();
    let config = WebhookConfig::new(verifier())
        .with_body_limit(LIMIT)
        .with_inbox(store.clone(), "chunked")
        .unwrap();
    let url = serve(config, inbox_routes);
    // 1 MiB in 1 KiB chunks, without Content-Length.
    let chunks =
        futures_util::stream::iter((0..1024).map(|_| Ok::<_, std::io::Error>(vec![b'x'; 1024])));
    let mut request = reqwest::Client::new()
        .post(&url)
        .body(reqwest::Body::wrap_stream(chunks));
    for (name, value) in sign("msg_chunked", b"irrelevant") {
        request = request.header(name, value);
    }
    // The server answers 413, or closes the connection while we send.
    if let Ok(response) = request.send().await {
        assert_eq!(response.status().as_u16(), 413);
    }
    assert!(support::drain(&store, "chunked").await.is_empty());
}

#[actix_web::test]
async fn slow_loris_body_is_cut_off_at_the_timeout() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let config = WebhookConfig::new(verifier())
        .with_body_timeout(Duration::from_secs(1))
        .with_inbox(MemoryInbox::new(), "slow")
        .unwrap();
    let url = serve(config, inbox_routes);
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/webhooks")
        .to_owned();
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let body = vec![b'x'; 100];
    let mut head = String::from("POST /webhooks HTTP/1.1\r\nhost: test\r\ncontent-length: 100\r\n");
    for (name, value) in sign("msg_slow", &body) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    let (mut reader, mut writer) = stream.into_split();
    let trickle = actix_web::rt::spawn(async move {
        for byte in body {
            if writer.write_all(&[byte]).await.is_err() {
                return;
            }
            actix_web::rt::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut response = vec![0u8; 1024];
    let read = reader.read(&mut response).await.unwrap();
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&response[..read]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    // What happened, not how fast: the answer came while the client still
    // had most of its 20 s body to send, and not before the deadline.
    assert!(
        !trickle.is_finished(),
        "the server answered before the client finished"
    );
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    trickle.abort();
}

/// Stripe's event id is the `id` of its signed body: inbox mode claims by
/// it with no configuration, and a retry signed anew is a duplicate.
#[actix_web::test]
async fn stripe_events_are_claimed_by_the_body_id_by_default() {
    let store = MemoryInbox::new();
    let stripe = Verifier::builder(Scheme::stripe())
        .with_secret("whsec_stripe")
        .unwrap()
        .build()
        .unwrap();
    let config = WebhookConfig::new(stripe)
        .with_inbox(store.clone(), "stripe")
        .unwrap();
    let url = serve(config, inbox_routes);
    let client = reqwest::Client::new();
    let body = br#"{"id":"evt_1","type":"invoice.paid"}"#.to_vec();
    let signer = Signer::new(Scheme::stripe(), ["whsec_stripe"]).unwrap();
    for expected in [202, 200] {
        let headers: HeaderPairs = signer
            .sign("ignored", SystemTime::now(), &body)
            .unwrap()
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        assert_eq!(
            post(&client, &url, &headers, body.clone()).await.0,
            expected
        );
    }
    assert_eq!(support::drain(&store, "stripe").await, ["evt_1"]);
}

/// A `LeasedWebhook` may be moved into a `tokio::spawn`ed task or another
/// thread and dropped there: that never panics, and on a runtime the lease
/// is released so the sender's retry runs the handler again.
#[actix_web::test]
async fn a_leased_webhook_dropped_in_any_task_or_thread_never_panics() {
    fn routes(config: &mut web::ServiceConfig) {
        config.route(
            "/webhooks",
            web::post().to(|webhook: LeasedWebhook| async move {
                match webhook.event.body.as_ref() {
                    b"\"spawned\"" => {
                        let dropped = tokio::spawn(async move { drop(webhook) }).await;
                        assert!(
                            dropped.is_ok(),
                            "dropped in a spawned task without panicking"
                        );
                        HttpResponse::InternalServerError().body("released")
                    }
                    b"\"thread\"" => {
                        let dropped = std::thread::spawn(move || drop(webhook)).join();
                        assert!(
                            dropped.is_ok(),
                            "dropped on a plain thread without panicking"
                        );
                        HttpResponse::InternalServerError().body("left to expire")
                    }
                    _ => {
                        webhook.extend(Duration::from_secs(30)).await.unwrap();
                        webhook.complete().await.unwrap();
                        HttpResponse::Ok().body("handled")
                    }
                }
            }),
        );
    }
    let store = MemoryInbox::new();
    let config = WebhookConfig::new(verifier())
        .with_lease(store.clone(), "actix-drop", Duration::from_millis(2500))
        .unwrap();
    let url = serve(config, routes);
    let client = reqwest::Client::new();

    let body = br#""spawned""#.to_vec();
    let headers = sign("msg_spawned", &body);
    assert_eq!(post(&client, &url, &headers, body.clone()).await.0, 500);
    // The release runs in a task of its own: looked for until 2 s in, still
    // half a second before the lease would end by itself.
    let released_by = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        match store
            .claim("actix-drop", "msg_spawned", Duration::from_secs(1))
            .await
            .unwrap()
        {
            hooklatch::dedup::Claim::Fresh(_) => break,
            other => {
                assert!(
                    std::time::Instant::now() < released_by,
                    "released at once, long before the lease would end: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    let body = br#""thread""#.to_vec();
    let headers = sign("msg_thread", &body);
    assert_eq!(post(&client, &url, &headers, body.clone()).await.0, 500);
    assert_eq!(
        post(&client, &url, &headers, body.clone()).await.0,
        409,
        "no runtime on that thread: the lease stands until it ends"
    );
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let body = br#""done""#.to_vec();
    let headers = sign("msg_thread", &body);
    assert_eq!(post(&client, &url, &headers, body).await.0, 200);
}

/// `with_rejection_response` answers rejections the application's way
/// wherever the hook returns a response; `None` keeps the default.
#[actix_web::test]
async fn rejections_are_answered_by_the_applications_hook_where_it_gives_one() {
    let config = WebhookConfig::new(verifier())
        .with_body_limit(64)
        .with_rejection_response(|rejection| {
            if rejection.status().as_u16() == 413 {
                return None;
            }
            let status = actix_web::http::StatusCode::from_u16(rejection.status().as_u16()).ok()?;
            Some(
                HttpResponse::build(status)
                    .content_type("application/problem+json")
                    .body(format!(r#"{{"title":"{}"}}"#, rejection.body_text())),
            )
        });
    let url = serve(config, |routes| {
        routes.route(
            "/webhooks",
            web::post()
                .to(|RawWebhook(event): RawWebhook| async move { event.key().unwrap().to_owned() }),
        );
    });
    let client = reqwest::Client::new();
    let body = b"{}".to_vec();
    let mut headers = sign("msg_hook", &body);
    for (name, value) in &mut headers {
        if name == "webhook-signature" {
            *value = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".into();
        }
    }
    let mut request = client.post(&url).body(body);
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"title":"webhook verification failed"}"#
    );
    let oversized = vec![b'x'; 65];
    let (status, text) = post(&client, &url, &sign("msg_big", &oversized), oversized).await;
    assert_eq!((status, text.as_str()), (413, "payload too large"));
}

/// A second secret, so a leak of how many there are or which matched
/// would have something to leak.
const OTHER_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

fn header(headers: &HeaderPairs, name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
}

/// The base64 of each signature in a `webhook-signature` value.
fn signatures(value: Option<String>) -> Vec<String> {
    value
        .unwrap_or_default()
        .split(' ')
        .filter_map(|s| s.split_once(',').map(|(_, b64)| b64.to_owned()))
        .collect()
}

/// Opted in with `with_reason_in_body(true)`, a refused request's 400 says
/// the reason's kind (a stale timestamp, a bad signature, a missing
/// header) after the generic text; by default it says the generic text
/// alone. Neither ever holds a secret, a signature, or how many secrets
/// there are.
#[actix_web::test]
async fn reason_in_body_names_the_kind_only_when_opted_in() {
    fn routes(config: &mut web::ServiceConfig) {
        config.route(
            "/webhooks",
            web::post().to(|RawWebhook(_): RawWebhook| async { "handled" }),
        );
    }
    let two_secrets = || {
        Verifier::builder(Scheme::standard_webhooks())
            .with_secret(SECRET)
            .unwrap()
            .with_secret(OTHER_SECRET)
            .unwrap()
            .build()
            .unwrap()
    };
    let opted_in = serve(
        WebhookConfig::new(two_secrets()).with_reason_in_body(true),
        routes,
    );
    let by_default = serve(WebhookConfig::new(two_secrets()), routes);
    let client = reqwest::Client::new();

    let body = br#"{"invoice":"in_1"}"#.to_vec();
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let unsigned: HeaderPairs = sign("msg_unsigned", &body)
        .into_iter()
        .filter(|(name, _)| name != "webhook-signature")
        .collect();
    let refused = [
        (
            "timestamp_too_old",
            sign_at(SECRET, "msg_stale", an_hour_ago, &body),
            body.clone(),
        ),
        (
            "signature_mismatch",
            sign("msg_tampered", &body),
            br#"{"invoice":"in_2"}"#.to_vec(),
        ),
        ("missing_header", unsigned, body.clone()),
    ];
    for (kind, headers, body) in refused {
        let (status, text) = post(&client, &opted_in, &headers, body.clone()).await;
        assert_eq!(status, 400, "{kind}");
        let prefix = format!("webhook verification failed: {kind} (");
        assert!(text.starts_with(&prefix), "{kind}: {text}");
        assert!(text.ends_with(')'), "{kind}: {text}");
        assert_eq!(
            post(&client, &by_default, &headers, body.clone()).await,
            (400, "webhook verification failed".into()),
            "{kind}"
        );

        let mut never = signatures(header(&headers, "webhook-signature"));
        for secret in [SECRET, OTHER_SECRET] {
            never.push(secret.to_owned());
            never.push(secret.trim_start_matches("whsec_").to_owned());
            // What this secret would have signed the body with, at the
            // sent time.
            if let (Some(id), Some(at)) = (
                header(&headers, "webhook-id"),
                header(&headers, "webhook-timestamp"),
            ) {
                let at = SystemTime::UNIX_EPOCH + Duration::from_secs(at.parse().unwrap());
                let expected = sign_at(secret, &id, at, &body);
                never.extend(signatures(header(&expected, "webhook-signature")));
            }
        }
        for never in never {
            assert!(!text.contains(&never), "{kind}: {text} holds {never}");
        }
        assert!(
            !text.chars().any(|c| c.is_ascii_digit()),
            "{kind}: {text} holds a number"
        );
    }
}

/// A store of the user's own that implements only `Inbox::accept` is all
/// `with_inbox` needs: a new event is 202, its retry 200, and the store
/// saw it once.
#[actix_web::test]
async fn a_store_that_only_accepts_serves_the_extractor() {
    let store = support::AcceptOnly::default();
    let config = WebhookConfig::new(verifier())
        .with_inbox(store.clone(), "own")
        .unwrap();
    let url = serve(config, inbox_routes);
    let client = reqwest::Client::new();
    let body = br#"{"n":1}"#.to_vec();
    let headers = sign("msg_own_store", &body);
    let (first, _) = post(&client, &url, &headers, body.clone()).await;
    let (retry, _) = post(&client, &url, &headers, body.clone()).await;
    assert_eq!((first, retry), (202, 200));
    let handed = store.handed();
    assert_eq!(
        handed.seen,
        std::collections::HashSet::from(["own/msg_own_store".to_owned()])
    );
    assert_eq!(handed.bodies, [body]);
}
