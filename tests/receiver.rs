//! One HTTP receiver contract, stamped out for each framework adapter
//! (axum through `hooklatch-tower`, actix-web through `hooklatch-actix`) and
//! each claim store (memory, SQLite, real Postgres, real Redis): a real
//! server on 127.0.0.1:0 and a real HTTP client.

mod support;

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use std::collections::HashMap;

use hooklatch::dedup::{
    InboxQueue, LeaseStore, MemoryInbox, PostgresInbox, RedisInbox, SqliteInbox, tenant_namespace,
};
use hooklatch::receive::{Receiver, StaticTenants, Tenant, TenantKey, Tenants};
use hooklatch::verify::{Scheme, Signer, Validity, Verifier};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const WRONG_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const LIMIT: usize = 4096;

type HeaderPairs = Vec<(String, String)>;

fn verifier() -> Verifier {
    Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .unwrap()
        .build()
        .unwrap()
}

fn sign_with(secret: &str, id: &str, at: SystemTime, body: &[u8]) -> HeaderPairs {
    Signer::new(Scheme::standard_webhooks(), [secret])
        .unwrap()
        .sign(id, at, body)
        .unwrap()
        .iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

fn sign(id: &str, body: &[u8]) -> HeaderPairs {
    sign_with(SECRET, id, SystemTime::now(), body)
}

/// Posts and returns the status and body text; `None` when the server
/// closed the connection without answering (a handler panic may).
async fn post(
    client: &reqwest::Client,
    url: &str,
    headers: &HeaderPairs,
    body: Vec<u8>,
) -> Option<(u16, String)> {
    let mut request = client.post(url).body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.unwrap_or_default()))
}

/// The lease contract's handler: fails the first time, panics the second,
/// then succeeds; `runs` counts how often it ran.
#[derive(Clone, Default)]
struct Script {
    runs: Arc<AtomicUsize>,
}

enum Turn {
    Fail,
    Panic,
    Succeed,
}

impl Script {
    fn next(&self) -> Turn {
        match self.runs.fetch_add(1, Ordering::SeqCst) {
            0 => Turn::Fail,
            1 => Turn::Panic,
            _ => Turn::Succeed,
        }
    }
}

/// A framework adapter serving the receiver.
trait Framework {
    /// Inbox mode: 202 new, 200 duplicate.
    fn serve_inbox<S: InboxQueue + Clone + 'static>(store: S, namespace: &str) -> String;
    /// Lease mode, running `script` as the handler.
    fn serve_lease<S: LeaseStore + Clone + 'static>(
        store: S,
        namespace: &str,
        script: Script,
    ) -> String;
    /// Inbox mode for many tenants at `/webhooks/{tenant}`; returns the
    /// URL without the tenant.
    fn serve_tenants<S: InboxQueue + Clone + 'static>(
        store: S,
        namespace: &str,
        tenants: Tenants,
    ) -> String;
}

struct Axum;
impl Framework for Axum {
    fn serve_inbox<S: InboxQueue + Clone + 'static>(store: S, namespace: &str) -> String {
        use axum::{Router, routing::post};
        use hooklatch_tower::WebhookLayer;
        let app = Router::new()
            .route("/webhooks", post(|| async { "never called" }))
            .layer(
                WebhookLayer::new(verifier())
                    .with_body_limit(LIMIT)
                    .with_inbox(store, namespace)
                    .unwrap(),
            );
        serve_axum(app)
    }

    fn serve_lease<S: LeaseStore + Clone + 'static>(
        store: S,
        namespace: &str,
        script: Script,
    ) -> String {
        use axum::{Router, http::StatusCode, routing::post};
        use hooklatch_tower::WebhookLayer;
        let handler = move || {
            let script = script.clone();
            async move {
                match script.next() {
                    Turn::Fail => (StatusCode::INTERNAL_SERVER_ERROR, "failed"),
                    Turn::Panic => panic!("handler bug"),
                    Turn::Succeed => (StatusCode::OK, "handled"),
                }
            }
        };
        let app = Router::new().route("/webhooks", post(handler)).layer(
            WebhookLayer::new(verifier())
                .with_lease(store, namespace, Duration::from_secs(30))
                .unwrap(),
        );
        serve_axum(app)
    }

    fn serve_tenants<S: InboxQueue + Clone + 'static>(
        store: S,
        namespace: &str,
        tenants: Tenants,
    ) -> String {
        serve_axum(Self::tenants_app(store, namespace, tenants))
    }
}

impl Axum {
    fn tenants_app<S: InboxQueue + Clone + 'static>(
        store: S,
        namespace: &str,
        tenants: Tenants,
    ) -> axum::Router {
        use axum::{Router, routing::post};
        use hooklatch_tower::WebhookLayer;
        Router::new()
            .route("/webhooks/{tenant}", post(|| async { "never called" }))
            .layer(
                WebhookLayer::for_tenants(tenants)
                    .with_inbox(store, namespace)
                    .unwrap(),
            )
    }
}

/// Runs `app` on its own thread and runtime, like the actix servers.
fn serve_axum(app: axum::Router) -> String {
    let (address, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            address.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    format!("http://{}/webhooks", ready.recv().unwrap())
}

struct Actix;
impl Framework for Actix {
    fn serve_inbox<S: InboxQueue + Clone + 'static>(store: S, namespace: &str) -> String {
        use hooklatch_actix::{InboxWebhook, WebhookConfig};
        let config = WebhookConfig::new(verifier())
            .with_body_limit(LIMIT)
            .with_inbox(store, namespace)
            .unwrap();
        serve_actix(move || {
            actix_web::App::new().app_data(config.clone()).route(
                "/webhooks",
                actix_web::web::post().to(|webhook: InboxWebhook| async move { webhook }),
            )
        })
    }

    fn serve_lease<S: LeaseStore + Clone + 'static>(
        store: S,
        namespace: &str,
        script: Script,
    ) -> String {
        use actix_web::HttpResponse;
        use hooklatch_actix::{LeasedWebhook, WebhookConfig};
        let config = WebhookConfig::new(verifier())
            .with_lease(store, namespace, Duration::from_secs(30))
            .unwrap();
        serve_actix(move || {
            let script = script.clone();
            actix_web::App::new().app_data(config.clone()).route(
                "/webhooks",
                actix_web::web::post().to(move |webhook: LeasedWebhook| {
                    let script = script.clone();
                    async move {
                        match script.next() {
                            Turn::Fail => HttpResponse::InternalServerError().body("failed"),
                            Turn::Panic => panic!("handler bug"),
                            Turn::Succeed => {
                                webhook.complete().await.unwrap();
                                HttpResponse::Ok().body("handled")
                            }
                        }
                    }
                }),
            )
        })
    }

    fn serve_tenants<S: InboxQueue + Clone + 'static>(
        store: S,
        namespace: &str,
        tenants: Tenants,
    ) -> String {
        use hooklatch_actix::{InboxWebhook, WebhookConfig};
        let config = WebhookConfig::for_tenants(tenants)
            .with_inbox(store, namespace)
            .unwrap();
        serve_actix(move || {
            actix_web::App::new().app_data(config.clone()).route(
                "/webhooks/{tenant}",
                actix_web::web::post().to(|webhook: InboxWebhook| async move { webhook }),
            )
        })
    }
}

/// Runs an actix app on its own thread and actix system.
fn serve_actix<F, T>(app: F) -> String
where
    F: Fn() -> actix_web::App<T> + Send + Clone + 'static,
    T: actix_web::dev::ServiceFactory<
            actix_web::dev::ServiceRequest,
            Config = (),
            Response = actix_web::dev::ServiceResponse,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
{
    let (address, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let server = actix_web::HttpServer::new(app)
                .workers(2)
                .bind("127.0.0.1:0")
                .unwrap();
            address.send(server.addrs()[0]).unwrap();
            server.run().await.unwrap();
        });
    });
    format!("http://{}/webhooks", ready.recv().unwrap())
}

/// A claim store for one test, and what must live as long as it.
trait Store {
    type Store: InboxQueue + LeaseStore + Clone + 'static;
    async fn open() -> (Self::Store, Vec<Box<dyn Any + Send>>);
}

struct Memory;
impl Store for Memory {
    type Store = MemoryInbox;
    async fn open() -> (MemoryInbox, Vec<Box<dyn Any + Send>>) {
        (MemoryInbox::new(), Vec::new())
    }
}

struct Sqlite;
impl Store for Sqlite {
    type Store = SqliteInbox;
    async fn open() -> (SqliteInbox, Vec<Box<dyn Any + Send>>) {
        let dir = support::TempDir::new("receiver");
        let store = SqliteInbox::open(dir.path().join("claims.db"))
            .await
            .unwrap();
        (store, vec![Box::new(dir)])
    }
}

struct Postgres;
impl Store for Postgres {
    type Store = PostgresInbox;
    async fn open() -> (PostgresInbox, Vec<Box<dyn Any + Send>>) {
        let server = support::postgres();
        let store = PostgresInbox::connect(&server.url()).await.unwrap();
        (store, vec![Box::new(server)])
    }
}

struct Redis;
impl Store for Redis {
    type Store = RedisInbox;
    async fn open() -> (RedisInbox, Vec<Box<dyn Any + Send>>) {
        let server = support::redis();
        let store = RedisInbox::connect(&server.url()).await.unwrap();
        (store, vec![Box::new(server)])
    }
}

/// Valid -> 202 and one entry; again -> 200; 64 at once -> all 2xx and
/// still one entry; every kind of bad request -> 400 or 413, with the
/// generic text only, and nothing enqueued.
async fn inbox_accepts_once_and_refuses_bad_requests<F: Framework, B: Store>() {
    let (store, _guards) = B::open().await;
    let namespace = support::unique("ns");
    let url = F::serve_inbox(store.clone(), &namespace);
    let client = reqwest::Client::new();
    let body = br#"{"type":"invoice.paid"}"#.to_vec();
    let signed = sign("msg_1", &body);
    let answer = |headers: HeaderPairs, body: Vec<u8>| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            post(&client, &url, &headers, body)
                .await
                .expect("an answer")
        }
    };
    assert_eq!(
        answer(signed.clone(), body.clone()).await,
        (202, "accepted".into())
    );
    assert_eq!(
        answer(signed.clone(), body.clone()).await,
        (200, "duplicate".into())
    );

    let racing = sign("msg_64", &body);
    let tasks: Vec<_> = (0..64)
        .map(|_| tokio::spawn(answer(racing.clone(), body.clone())))
        .collect();
    let mut accepted = 0;
    for task in tasks {
        let (status, _) = task.await.unwrap();
        assert!((200..300).contains(&status), "{status}");
        accepted += usize::from(status == 202);
    }
    assert_eq!(accepted, 1, "64 concurrent deliveries, one acceptance");

    let now = SystemTime::now();
    let mut tampered = body.clone();
    tampered[3] ^= 1;
    let replacing = |name: &str, value: Option<&str>| -> HeaderPairs {
        signed
            .iter()
            .filter_map(|(key, old)| match (key == name, value) {
                (true, None) => None,
                (true, Some(value)) => Some((key.clone(), value.to_owned())),
                (false, _) => Some((key.clone(), old.clone())),
            })
            .collect()
    };
    let bad_requests: Vec<(&str, HeaderPairs, Vec<u8>)> = vec![
        (
            "bad signature",
            replacing(
                "webhook-signature",
                Some("v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="),
            ),
            body.clone(),
        ),
        (
            "wrong secret",
            sign_with(WRONG_SECRET, "msg_2", now, &body),
            body.clone(),
        ),
        (
            "stale",
            sign_with(SECRET, "msg_3", now - Duration::from_secs(600), &body),
            body.clone(),
        ),
        (
            "future",
            sign_with(SECRET, "msg_4", now + Duration::from_secs(600), &body),
            body.clone(),
        ),
        (
            "missing signature",
            replacing("webhook-signature", None),
            body.clone(),
        ),
        ("missing id", replacing("webhook-id", None), body.clone()),
        (
            "malformed timestamp",
            replacing("webhook-timestamp", Some("soon")),
            body.clone(),
        ),
        (
            "id too long",
            replacing("webhook-id", Some(&"i".repeat(300))),
            body.clone(),
        ),
        ("body changed by one byte", signed.clone(), tampered),
    ];
    for (what, headers, body) in bad_requests {
        assert_eq!(
            answer(headers, body).await,
            (400, "webhook verification failed".into()),
            "{what}: 400 with the generic text only"
        );
    }
    let oversized = vec![b'x'; LIMIT + 1];
    let (status, _) = answer(sign("msg_big", &oversized), oversized).await;
    assert_eq!(status, 413);

    let mut ids = support::drain(&store, &namespace).await;
    ids.sort();
    assert_eq!(
        ids,
        ["msg_1", "msg_64"],
        "only the valid events were enqueued"
    );
}

/// A handler that fails, then panics, then succeeds: each retry runs it
/// again, and once it succeeded a duplicate is answered 200 without it.
async fn lease_retries_after_failure_and_panic<F: Framework, B: Store>() {
    let (store, _guards) = B::open().await;
    let script = Script::default();
    let url = F::serve_lease(store, &support::unique("lease"), script.clone());
    let client = reqwest::Client::new();
    let body = b"{}".to_vec();
    let headers = sign("msg_lease", &body);
    // Deliver as a sender would: a 409 means come back shortly (a lease
    // may be released just after the answer went out).
    let deliver = || async {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match post(&client, &url, &headers, body.clone()).await {
                Some((409, _)) => {
                    assert!(std::time::Instant::now() < deadline, "never released");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => return other.map(|(status, _)| status),
            }
        }
    };
    assert_eq!(deliver().await, Some(500));
    let panicked = deliver().await;
    assert!(matches!(panicked, None | Some(500)), "{panicked:?}");
    assert_eq!(deliver().await, Some(200));
    assert_eq!(deliver().await, Some(200), "a duplicate after completion");
    assert_eq!(
        script.runs.load(Ordering::SeqCst),
        3,
        "done: the fourth is not run"
    );
}

const OLD: &str = "whsec_dGhlIG9sZCBzZWNyZXQgb2YgZ2xvYmV4IGluYw==";
const NEXT: &str = "whsec_dGhlIG5leHQgc2VjcmV0IG9mIGFjbWUgY29ycA==";

/// A tenant verified with `secrets` (each with its window), claimed in
/// the namespace named after it.
fn tenant(name: &str, secrets: &[(&str, Validity)]) -> (String, Tenant) {
    let mut builder = Verifier::builder(Scheme::standard_webhooks());
    for (secret, validity) in secrets {
        builder = builder.with_secret_valid(secret, *validity).unwrap();
    }
    let receiver = Receiver::new(builder.build().unwrap()).with_body_limit(LIMIT);
    (name.to_owned(), Tenant::new(receiver, name).unwrap())
}

/// Each tenant is verified with its own secrets, inside their windows,
/// and claims in its own namespace; an unknown tenant is 404; replacing
/// the tenants takes effect at once, with no restart.
async fn tenants_each_verify_with_their_own_secrets_and_namespace<F: Framework, B: Store>() {
    let (store, _guards) = B::open().await;
    let namespace = support::unique("t");
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let tenants = StaticTenants::default();
    tenants.replace(HashMap::from([
        tenant(
            "acme",
            &[
                (SECRET, Validity::ALWAYS),
                (NEXT, Validity::from(now + hour)),
            ],
        ),
        tenant(
            "globex",
            &[
                (OLD, Validity::until(now - hour)),
                (WRONG_SECRET, Validity::ALWAYS),
            ],
        ),
    ]));
    let base = F::serve_tenants(
        store.clone(),
        &namespace,
        Tenants::new(TenantKey::LastPathSegment, tenants.clone()),
    );
    let client = reqwest::Client::new();
    let body = br#"{"type":"ping"}"#.to_vec();
    let to = |tenant: &str, secret: &str, id: &str| {
        let (client, url) = (client.clone(), format!("{base}/{tenant}"));
        let (headers, body) = (
            sign_with(secret, id, SystemTime::now(), &body),
            body.clone(),
        );
        async move {
            post(&client, &url, &headers, body)
                .await
                .expect("an answer")
                .0
        }
    };
    assert_eq!(to("nobody", SECRET, "msg_1").await, 404, "unknown tenant");
    assert_eq!(to("acme", SECRET, "msg_1").await, 202);
    assert_eq!(
        to("globex", WRONG_SECRET, "msg_1").await,
        202,
        "same id, other tenant"
    );
    assert_eq!(
        to("globex", SECRET, "msg_2").await,
        400,
        "another tenant's secret"
    );
    assert_eq!(to("globex", OLD, "msg_3").await, 400, "an expired secret");
    assert_eq!(
        to("acme", NEXT, "msg_4").await,
        400,
        "a secret not yet valid"
    );

    // Rotation without a restart: acme's next secret starts now.
    tenants.replace(HashMap::from([tenant("acme", &[(NEXT, Validity::ALWAYS)])]));
    assert_eq!(
        to("acme", NEXT, "msg_5").await,
        202,
        "the new secret works at once"
    );
    assert_eq!(
        to("acme", SECRET, "msg_6").await,
        400,
        "the old one is gone"
    );
    assert_eq!(
        to("globex", WRONG_SECRET, "msg_7").await,
        404,
        "a removed tenant"
    );

    let acme = support::drain(&store, &tenant_namespace(&namespace, "acme")).await;
    let globex = support::drain(&store, &tenant_namespace(&namespace, "globex")).await;
    assert_eq!(
        (acme, globex),
        (
            vec!["msg_1".to_owned(), "msg_5".to_owned()],
            vec!["msg_1".to_owned()]
        )
    );
}

/// A tenant's events are claimed in the layer's namespace and the
/// tenant's joined by a character neither may hold: a tenant called
/// `stripe` under the layer `hooks` never lands in (or pre-claims the ids
/// of) the app's own `hooks:stripe`, and the longest names of both still
/// fit the store.
async fn a_tenant_namespace_never_collides_with_another_receivers<F: Framework, B: Store>() {
    let (store, _guards) = B::open().await;
    let namespace = support::unique("hooks");
    let long_tenant = "t".repeat(hooklatch::dedup::MAX_NAMESPACE_LEN);
    let tenants = StaticTenants::default();
    tenants.replace(HashMap::from([
        tenant(&long_tenant, &[(SECRET, Validity::ALWAYS)]),
        tenant("stripe", &[(SECRET, Validity::ALWAYS)]),
    ]));
    let base = F::serve_tenants(
        store.clone(),
        &namespace,
        Tenants::new(TenantKey::LastPathSegment, tenants),
    );
    let client = reqwest::Client::new();
    let body = br#"{"type":"payout.paid"}"#.to_vec();
    for tenant in [long_tenant.as_str(), "stripe"] {
        let headers = sign("msg_1", &body);
        let (status, text) = post(&client, &format!("{base}/{tenant}"), &headers, body.clone())
            .await
            .expect("an answer");
        assert_eq!(status, 202, "{tenant}: {text}");
    }
    assert_eq!(
        support::drain(&store, &format!("{namespace}:stripe")).await,
        Vec::<String>::new(),
        "the app's own namespace holds nothing of the tenant's"
    );
    for tenant in [long_tenant.as_str(), "stripe"] {
        assert_eq!(
            support::drain(&store, &tenant_namespace(&namespace, tenant)).await,
            vec!["msg_1".to_owned()]
        );
    }
}

/// Sends a signed request for `tenant` over a socket: the head at once,
/// the body once `release` says; the status.
async fn post_slowly(
    base: &str,
    tenant: &str,
    headers: &HeaderPairs,
    body: &[u8],
    release: tokio::sync::oneshot::Receiver<()>,
) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let rest = base.strip_prefix("http://").expect("an http URL");
    let (address, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let mut head = format!(
        "POST {path}/{tenant} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    release.await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP answer: {answer}"))
}

/// A request whose headers arrived before its tenant's secret was removed
/// is checked against the secrets as they are once its body is read: 400,
/// and nothing is claimed. The same slow request with no change is 202.
async fn a_secret_removed_while_the_body_arrives_no_longer_verifies_it<F: Framework, B: Store>() {
    let (store, _guards) = B::open().await;
    let namespace = support::unique("t");
    let tenants = StaticTenants::default();
    tenants.replace(HashMap::from([tenant(
        "acme",
        &[(SECRET, Validity::ALWAYS)],
    )]));
    let base = F::serve_tenants(
        store.clone(),
        &namespace,
        Tenants::new(TenantKey::LastPathSegment, tenants.clone()),
    );
    let body = br#"{"type":"ping"}"#;
    for (id, swap, expected) in [("msg_kept", false, 202), ("msg_revoked", true, 400)] {
        let headers = sign_with(SECRET, id, SystemTime::now(), body);
        let (release, released) = tokio::sync::oneshot::channel();
        let sent = tokio::spawn({
            let base = base.clone();
            async move { post_slowly(&base, "acme", &headers, body, released).await }
        });
        // The server has the head, and the tenant, and waits for the body.
        tokio::time::sleep(Duration::from_millis(300)).await;
        if swap {
            tenants.replace(HashMap::from([tenant("acme", &[(NEXT, Validity::ALWAYS)])]));
        }
        release.send(()).unwrap();
        assert_eq!(sent.await.unwrap(), expected, "{id}");
    }
    assert_eq!(
        support::drain(&store, &tenant_namespace(&namespace, "acme")).await,
        vec!["msg_kept".to_owned()],
        "the revoked secret's event is not claimed"
    );
}

macro_rules! contract {
    ($($module:ident => $framework:ident, $store:ident;)*) => {
        $(
            mod $module {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn inbox_accepts_once_and_refuses_bad_requests() {
                    super::inbox_accepts_once_and_refuses_bad_requests::<super::$framework, super::$store>().await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn tenants_each_verify_with_their_own_secrets_and_namespace() {
                    super::tenants_each_verify_with_their_own_secrets_and_namespace::<super::$framework, super::$store>().await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn a_tenant_namespace_never_collides_with_another_receivers() {
                    super::a_tenant_namespace_never_collides_with_another_receivers::<super::$framework, super::$store>().await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn a_secret_removed_while_the_body_arrives_no_longer_verifies_it() {
                    super::a_secret_removed_while_the_body_arrives_no_longer_verifies_it::<super::$framework, super::$store>().await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn lease_retries_after_failure_and_panic() {
                    super::lease_retries_after_failure_and_panic::<super::$framework, super::$store>().await;
                }
            }
        )*
    };
}

contract! {
    axum_memory => Axum, Memory;
    axum_sqlite => Axum, Sqlite;
    axum_postgres => Axum, Postgres;
    axum_redis => Axum, Redis;
    actix_memory => Actix, Memory;
    actix_sqlite => Actix, Sqlite;
    actix_postgres => Actix, Postgres;
    actix_redis => Actix, Redis;
}
