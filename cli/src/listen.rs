//! `hooklatch listen`: a receiver built from the tower layer and a claim
//! store, printing one line per request.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use clap::Args;
use hooklatch::RedisConnection;
use hooklatch::dedup::{AnyInbox, DedupError, InboxQueue, LeaseStore, RedisInbox};
use hooklatch::sender::guard::{Forbidden, check_url};
use hooklatch::sender::{AddressPolicy, HttpTransport, Transport};
use hooklatch::verify::Signer;
use hooklatch::worker::{Event, Failure, Handler, Worker};
use hooklatch_tower::{Rejection, VerifiedEvent, WebhookLayer};

use crate::{SchemeArgs, UsageError, rfc3339};

#[derive(Debug, Args)]
pub(crate) struct ListenArgs {
    #[command(flatten)]
    scheme: SchemeArgs,
    #[command(flatten)]
    secrets: crate::SecretArgs,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = crate::serve::socket_address)]
    addr: SocketAddr,
    /// How long a client may take to send a request's head (and, on a
    /// kept-alive connection, to start its next request) before the
    /// connection is closed.
    #[arg(long, default_value = "10s", value_parser = crate::serve::timeout)]
    header_timeout: std::time::Duration,
    /// How long a whole request may take, its body included, before it is
    /// answered 408.
    #[arg(long, default_value = "30s", value_parser = crate::serve::timeout)]
    request_timeout: std::time::Duration,
    /// Claim store: `sqlite:PATH`, `postgres://…`, `redis://…` (`rediss://`
    /// for TLS), `redis+cluster://host1:port1,host2:port2` for a Redis
    /// Cluster, or `memory`.
    #[arg(long, default_value = "sqlite:hooklatch-listen.db")]
    store: String,
    /// A Redis Cluster to keep claims in, as comma-separated node URLs
    /// (`redis://host:port,...`): the same as `--store redis+cluster://…`.
    #[arg(long, env = "REDIS_CLUSTER_NODES", conflicts_with = "store")]
    redis_cluster_nodes: Option<String>,
    /// With a Redis store: answer only once this many replicas have each
    /// claim's completion (Redis `WAIT`), else 503 so the sender retries.
    #[arg(long, env = "REDIS_WAIT_REPLICAS", default_value_t = 0)]
    redis_wait_replicas: u32,
    /// How long to wait for those replicas (such as `500ms`, `2s`).
    #[arg(long, env = "REDIS_WAIT_TIMEOUT", default_value = "1s", value_parser = crate::send::parse_duration)]
    redis_wait_timeout: std::time::Duration,
    /// Namespace the claims are kept under.
    #[arg(long, default_value = "listen")]
    namespace: String,
    /// Pass each accepted event on, body and headers unchanged, to this URL
    /// (such as your app on localhost), and answer with its status; with
    /// --inbox, a worker passes each on after the 202, signed again.
    #[arg(long, value_parser = forward_url)]
    forward_to: Option<String>,
    /// Seconds a timestamp may be in the past or the future [default: 300].
    #[arg(long)]
    tolerance: Option<u64>,
    /// The largest body accepted, in bytes [default: 1 MiB]. A bigger body
    /// is answered 413. (`--max-body` is its earlier name.)
    #[arg(long, alias = "max-body", value_parser = body_limit)]
    body_limit: Option<usize>,
    /// Accept each event into an inbox (202 once it is stored), for a
    /// worker to take, instead of claiming it while it is forwarded. With
    /// --forward-to, a worker here takes each event and POSTs it to your
    /// app, signed again with the first secret, retries a failure with
    /// backoff and dead-letters it after --max-attempts; `hooklatch inbox`
    /// shows what waits and what died.
    #[arg(long)]
    inbox: bool,
    /// With --inbox and --forward-to: the attempts before an event is
    /// dead-lettered (at most 10, the store's own limit).
    #[arg(
        long,
        default_value_t = 5,
        value_parser = clap::value_parser!(u32).range(1..=10),
        requires_all = ["inbox", "forward_to"]
    )]
    max_attempts: u32,
}

/// `--body-limit`: at least one byte (0 would refuse every request).
fn body_limit(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("`0` would refuse every body; give a size in bytes, such as 1048576".into()),
        Ok(limit) => Ok(limit),
        Err(_) => Err(format!("`{text}` is not a size in bytes, such as 1048576")),
    }
}

/// What signs the events `--inbox --forward-to` passes on: the first of
/// `secrets` that can sign (a public key only verifies).
pub(crate) fn resigner(
    scheme: &hooklatch::verify::Scheme,
    secrets: &[String],
) -> Result<Signer, UsageError> {
    secrets
        .iter()
        .find_map(|secret| Signer::new(scheme.clone(), [secret]).ok())
        .ok_or_else(|| {
            UsageError(
                "--inbox with --forward-to signs each event again for the app, and none of the \
                 secrets can sign (a public key only verifies): give a signing secret too"
                    .into(),
            )
        })
}

/// The addresses events may be forwarded to: the app is the user's own,
/// usually on loopback.
pub(crate) fn forward_policy() -> AddressPolicy {
    AddressPolicy::strict()
        .insecure_allow_loopback()
        .insecure_allow_private()
}

/// `--forward-to`: an `http://` or `https://` URL with a host that the
/// transport may reach, checked by the transport's own parse at start-up
/// rather than on every event. `localhost:3000` parses as a URL of scheme
/// `localhost`, so it is named, with the URL meant.
pub(crate) fn forward_url(text: &str) -> Result<String, String> {
    match check_url(text, &forward_policy()) {
        Ok(_) => Ok(text.to_owned()),
        Err(Forbidden::NotHttp) if !text.contains("://") => Err(format!(
            "`{text}` has no scheme: give a URL such as http://{text}"
        )),
        Err(Forbidden::NotHttp) => Err(format!(
            "`{text}`: give an http:// or https:// URL with a host, such as http://localhost:3000/webhooks"
        )),
        Err(forbidden) => Err(format!("`{text}`: its host is a {forbidden}, refused")),
    }
}

/// Why the app did not take an event [`post_signed`] sent.
pub(crate) enum Unsent {
    /// The event cannot be signed in the scheme (its id, say).
    Unsignable(hooklatch::verify::VerifyError),
    /// The app answered this status, not a 2xx.
    Answered(u16),
    /// The app could not be reached.
    Unreachable(hooklatch::sender::transport::TransportError),
}

impl std::fmt::Display for Unsent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unsignable(error) => write!(f, "cannot sign it: {error}"),
            Self::Answered(status) => write!(f, "the app answered {status}"),
            Self::Unreachable(error) => write!(f, "could not reach the app: {error}"),
        }
    }
}

/// POSTs `body` as event `id` to `url`, signed by `signer` at `at`, with
/// `extra` headers after the signature's (those the receiver kept, a
/// provider's own): what `listen --forward-to`, `inbox replay` and
/// `trigger` send. The status of a 2xx answer, or why not.
pub(crate) async fn post_signed(
    transport: &HttpTransport,
    url: &str,
    signer: &Signer,
    (id, at): (&str, SystemTime),
    body: &[u8],
    extra: &[(String, String)],
) -> Result<u16, Unsent> {
    let signed = signer.sign(id, at, body).map_err(Unsent::Unsignable)?;
    let headers: Vec<(String, String)> = signed
        .iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .chain(extra.iter().cloned())
        .collect();
    match transport.post(url, &headers, body).await {
        Ok(answer) if (200..300).contains(&answer.status) => Ok(answer.status),
        Ok(answer) => Err(Unsent::Answered(answer.status)),
        Err(error) => Err(Unsent::Unreachable(error)),
    }
}

/// What the handler did with an accepted event, for the printed line.
#[derive(Clone, Default)]
struct Verdict(Arc<Mutex<Option<(String, String)>>>);

impl Verdict {
    fn set(&self, id: String, text: String) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((id, text));
    }

    fn take(&self) -> Option<(String, String)> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// Where accepted events go on to.
#[derive(Clone)]
struct Forward {
    url: String,
    transport: Arc<HttpTransport>,
}

/// How long a claim is held while an event is being forwarded.
const LEASE: Duration = Duration::from_secs(30);

pub(crate) fn listen(args: ListenArgs) -> Result<ExitCode, UsageError> {
    let scheme = args.scheme.scheme()?;
    let verifier =
        crate::verifier_builder(scheme.clone(), &args.secrets.secrets()?, args.tolerance)?
            .build()?;
    // Events are claimed by what the signature covers: the signed id
    // header, Stripe's body `id`, or a digest of the signed content.
    let mut layer = WebhookLayer::new(verifier);
    if let Some(limit) = args.body_limit {
        layer = layer.with_body_limit(limit);
    }
    let forward = match &args.forward_to {
        Some(url) => Some(Forward {
            url: url.clone(),
            // The app is the user's own, usually on loopback.
            transport: Arc::new(HttpTransport::new(forward_policy())?),
        }),
        None => None,
    };
    let id_header = scheme.id_header().map(str::to_owned);
    let resigner = if args.inbox && args.forward_to.is_some() {
        // Kept so the app is sent the content type the sender gave.
        layer = layer.with_receiver(|receiver| receiver.with_kept_headers(["content-type"]))?;
        Some(resigner(&scheme, &args.secrets.secrets()?)?)
    } else {
        None
    };
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let store = args.store.as_str();
        let setup = Setup {
            layer,
            forward,
            resigner,
            id_header,
            args: &args,
        };
        let redis = |store: RedisInbox| {
            store.with_replica_acks(args.redis_wait_replicas, args.redis_wait_timeout)
        };
        let is_redis = [
            "redis://",
            "rediss://",
            "redis+cluster://",
            "rediss+cluster://",
        ]
        .iter()
        .any(|scheme| store.starts_with(scheme));
        if let Some(nodes) = &args.redis_cluster_nodes {
            let seeds: Vec<&str> = nodes.split(',').map(str::trim).collect();
            let opened = match RedisConnection::open_cluster(&seeds).await {
                Ok(connection) => RedisInbox::new(connection).await,
                Err(error) => Err(error.into()),
            };
            match opened {
                Ok(inbox) => setup.serve(redis(inbox)).await,
                Err(error) => Ok(cannot_open(
                    &format!("--redis-cluster-nodes {nodes}"),
                    &error,
                )),
            }
        } else if args.redis_wait_replicas > 0 && !is_redis {
            Err(UsageError(format!(
                "--redis-wait-replicas needs a Redis store, not `{}`",
                crate::shown(store)
            )))
        } else if is_redis {
            match RedisInbox::connect(store).await {
                Ok(inbox) => setup.serve(redis(inbox)).await,
                Err(error) => Ok(cannot_open(store, &error)),
            }
        } else {
            // `memory` is the CLI's older spelling of `memory:`.
            let url = if store == "memory" { "memory:" } else { store };
            match AnyInbox::connect(url).await {
                Ok(store) => setup.serve(store).await,
                Err(DedupError::StoreUrl(why)) => Err(UsageError(format!("--store: {why}"))),
                Err(error) => Ok(cannot_open(store, &error)),
            }
        }
    })
}

/// Says a store could not be opened, naming it (its password masked), and
/// exits 1 as the operator commands do: the flags were fine, the store
/// was not there.
fn cannot_open(spec: &str, error: &DedupError) -> ExitCode {
    eprintln!("hooklatch: cannot open {}: {error}", crate::shown(spec));
    ExitCode::from(1)
}

struct Setup<'a> {
    layer: WebhookLayer,
    forward: Option<Forward>,
    /// With --inbox: signs what the worker forwards.
    resigner: Option<Signer>,
    id_header: Option<String>,
    args: &'a ListenArgs,
}

impl Setup<'_> {
    async fn serve<St: LeaseStore + InboxQueue + Clone + Send + Sync + 'static>(
        self,
        store: St,
    ) -> Result<ExitCode, UsageError> {
        let namespace = &self.args.namespace;
        let router = Router::new()
            .fallback(handle)
            .with_state(self.forward.clone());
        let mut worker = None;
        let router = if self.args.inbox {
            if let (Some(forward), Some(signer)) = (self.forward.clone(), self.resigner.clone()) {
                worker = Some(
                    Worker::new(
                        store.clone(),
                        namespace,
                        forwarder(forward, signer, self.args.max_attempts),
                    )
                    .with_max_attempts(self.args.max_attempts)
                    .start(),
                );
            }
            router.layer(self.layer.clone().with_inbox(store, namespace)?)
        } else {
            router.layer(self.layer.clone().with_lease(store, namespace, LEASE)?)
        };
        let app = router.layer(middleware::from_fn_with_state(
            Arc::new(self.id_header.clone()),
            print_verdict,
        ));
        let served = self.run(app).await;
        if let Some(worker) = worker {
            // What is under way gets a moment; the rest runs again next time.
            worker.stop(Duration::from_secs(5)).await;
        }
        served
    }

    async fn run(self, app: Router) -> Result<ExitCode, UsageError> {
        let listener = tokio::net::TcpListener::bind(self.args.addr)
            .await
            .map_err(|error| format!("cannot listen on {}: {error}", self.args.addr))?;
        let address = listener.local_addr()?;
        println!(
            "listening on http://{address} (store {}, namespace {}{})",
            self.args.redis_cluster_nodes.as_ref().map_or_else(
                || crate::shown(&self.args.store),
                |nodes| {
                    let nodes: Vec<String> = nodes
                        .split(',')
                        .map(|node| crate::shown(node.trim()))
                        .collect();
                    format!("redis cluster {}", nodes.join(","))
                }
            ),
            self.args.namespace,
            match (&self.forward, self.args.inbox) {
                (Some(forward), false) => format!(", forwarding to {}", crate::shown(&forward.url)),
                (Some(forward), true) => format!(
                    ", into the inbox; a worker forwards to {}, {} attempts at most",
                    crate::shown(&forward.url),
                    self.args.max_attempts
                ),
                (None, true) => ", into the inbox".to_owned(),
                (None, false) => String::new(),
            }
        );
        let limits = crate::serve::Limits {
            head: self.args.header_timeout,
            whole: self.args.request_timeout,
        };
        crate::serve::serve(listener, app, limits, stop_signal()).await;
        println!("stopped");
        Ok(ExitCode::SUCCESS)
    }
}

/// The worker's handler with --inbox --forward-to: POSTs each event to
/// the app, signed again (the sender's signature is not kept with the
/// event), prints what happened, and fails with the app's answer so the
/// worker retries it, then dead-letters it.
fn forwarder(forward: Forward, signer: Signer, max_attempts: u32) -> impl Handler {
    let shared = Arc::new((forward, signer));
    move |event: Event| {
        let shared = Arc::clone(&shared);
        async move {
            let (forward, signer) = &*shared;
            let id = event.id().to_owned();
            let attempt = event.attempt();
            let say = |text: &str| println!("{} {id} {text}", rfc3339(SystemTime::now()));
            let sent = post_signed(
                &forward.transport,
                &forward.url,
                signer,
                (&id, SystemTime::now()),
                event.body(),
                &event.meta().headers,
            )
            .await;
            let failure = match sent {
                Ok(status) => {
                    say(&format!("forwarded: {status} (attempt {attempt})"));
                    return Ok(());
                }
                Err(Unsent::Unsignable(error)) => {
                    return Err(Failure::dead_letter(format!(
                        "cannot sign it again: {error}"
                    )));
                }
                Err(unsent) => unsent.to_string(),
            };
            if attempt >= max_attempts {
                say(&format!(
                    "forward failed (attempt {attempt} of {max_attempts}): {failure}; dead-lettered \
                     (`hooklatch inbox dead` shows it, `inbox requeue` sends it again)"
                ));
            } else {
                say(&format!(
                    "forward failed (attempt {attempt} of {max_attempts}): {failure}; retried after a backoff"
                ));
            }
            Err(Failure::retry(failure))
        }
    }
}

/// Ctrl-C or SIGTERM.
pub(crate) async fn stop_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

/// Runs for each event the layer verified and claimed: answers 202 (a
/// duplicate gets the layer's 200), or passes the event on and answers with
/// the app's status (a non-2xx releases the claim, so the sender's retry
/// comes through again).
async fn handle(State(forward): State<Option<Forward>>, request: Request) -> Response {
    let verdict = request.extensions().get::<Verdict>().cloned();
    let Some(event) = request.extensions().get::<VerifiedEvent>().cloned() else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "not verified").into_response();
    };
    let id = event.key().unwrap_or("-").to_owned();
    let say = |text: String| {
        if let Some(verdict) = &verdict {
            verdict.set(id.clone(), text);
        }
    };
    let Some(forward) = forward else {
        say("accepted".to_owned());
        // As the library answers a new event: 202, and 200 for a duplicate.
        return (StatusCode::ACCEPTED, "accepted").into_response();
    };
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .filter(|(name, _)| {
            !matches!(
                name.as_str(),
                "host" | "content-length" | "connection" | "transfer-encoding" | "expect"
            )
        })
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
        .collect();
    match forward
        .transport
        .post(&forward.url, &headers, &event.body)
        .await
    {
        Ok(answer) => {
            let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
            let note = if status.is_success() {
                ""
            } else {
                " (claim released: the next retry is passed on again)"
            };
            say(format!("accepted, forwarded: {}{note}", answer.status));
            (status, answer.body).into_response()
        }
        Err(error) => {
            say(format!(
                "accepted, forward failed: {error} (claim released; answered 502)"
            ));
            (StatusCode::BAD_GATEWAY, "could not reach the app").into_response()
        }
    }
}

/// Prints `time id verdict` for every request.
async fn print_verdict(
    State(id_header): State<Arc<Option<String>>>,
    mut request: Request,
    next: Next,
) -> Response {
    let header_id = id_header
        .as_deref()
        .and_then(|name| request.headers().get(name))
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    // Webhooks are POSTed, and this receiver answers no handshake: a
    // browser's GET is told so, not that a signature header is missing.
    if request.method() != axum::http::Method::POST {
        println!(
            "{} - {} answered 405: webhooks are sent with POST",
            rfc3339(SystemTime::now()),
            request.method()
        );
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(axum::http::header::ALLOW, "POST")],
            "webhooks are sent with POST\n",
        )
            .into_response();
    }
    let verdict = Verdict::default();
    request.extensions_mut().insert(verdict.clone());
    let response = next.run(request).await;
    let status = response.status();
    let (id, text) = match verdict.take() {
        Some(said) => said,
        None => {
            let text = match response.extensions().get::<Rejection>() {
                Some(Rejection::InProgress { retry_after }) => format!(
                    "in progress elsewhere ({}; retry in {} s)",
                    status.as_u16(),
                    retry_after.as_secs().max(1)
                ),
                Some(rejection) => {
                    format!("rejected ({}): {}", status.as_u16(), rejection.reason())
                }
                None if status == StatusCode::OK => "duplicate".to_owned(),
                // Inbox mode: stored for the worker; no handler ran here.
                None if status == StatusCode::ACCEPTED => "accepted into the inbox".to_owned(),
                None => format!("answered {}", status.as_u16()),
            };
            // The layer's duplicate answer carries the event, whose key may
            // come from the body (Stripe).
            let key = response
                .extensions()
                .get::<VerifiedEvent>()
                .and_then(|event| event.key().ok().map(str::to_owned));
            (key.or(header_id).unwrap_or_else(|| "-".to_owned()), text)
        }
    };
    println!("{} {id} {text}", rfc3339(SystemTime::now()));
    response
}
