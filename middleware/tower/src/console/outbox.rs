//! The console's outbox pages: every endpoint with its health and
//! deliveries by state; per endpoint its latest attempts and dead
//! deliveries, replay of one or of a time range, and enable / disable.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::SystemTime;

use axum::Router;
use axum::extract::{Form, OriginalUri, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use hooklatch::dedup::validate_namespace;
use hooklatch::sender::outbox::{DeliveryState, DisableReason, EndpointHealth};
use hooklatch::sender::outbox::{OutboxView, RecentAttempt};

use super::time::{parse_utc, utc_text};
use super::{Guard, Refused, escape, home, preview, root_of, shell, too_many};

struct Outbox<D> {
    store: D,
    guard: Guard,
}

/// How many attempts and dead deliveries an endpoint's page lists, and the
/// most a range replay sends again at once.
const SHOWN: usize = 50;
const REPLAY_LIMIT: usize = 10_000;

pub(super) fn router<D: OutboxView + Clone>(store: D, guard: Guard) -> Router {
    Router::new()
        .route("/", get(endpoints::<D>))
        .route("/endpoint", get(endpoint::<D>))
        .route("/replay", post(replay::<D>))
        .route("/enable", post(enable::<D>))
        .route("/disable", post(disable::<D>))
        .with_state(Arc::new(Outbox { store, guard }))
}

/// The answer to a request the guard refused: 401 with a way back to the
/// sign-in, or 429 after too many wrong tokens.
fn refused(refusal: &Refused, root: &str) -> Response {
    match refusal {
        Refused::Unauthorized => unauthorized(root),
        Refused::Throttled => too_many(),
    }
}

/// 401 with a way back to the console's sign-in, the first page under
/// `root`.
fn unauthorized(root: &str) -> Response {
    let body = format!(
        "<h1>hooklatch console</h1><p><a href=\"{}\">Sign in</a> to see the outbox.</p>",
        escape(&home(root))
    );
    (
        StatusCode::UNAUTHORIZED,
        Html(shell("hooklatch console", &body)),
    )
        .into_response()
}

fn unavailable(error: &impl std::fmt::Display) -> Response {
    let body = format!("<p>store unavailable: {}</p>", escape(&error.to_string()));
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Html(shell("store unavailable", &body)),
    )
        .into_response()
}

fn health_text(health: &EndpointHealth) -> String {
    let disabled = match health.disabled {
        None => String::new(),
        Some(DisableReason::Gone) => "<span class=dead>disabled: answered 410 Gone</span> ".into(),
        Some(DisableReason::NoSuccessFor(after)) => format!(
            "<span class=dead>disabled: no success for {}</span> ",
            hours(after.as_secs())
        ),
        Some(DisableReason::Manual) => "<span class=dead>disabled by an operator</span> ".into(),
        Some(_) => "<span class=dead>disabled</span> ".into(),
    };
    let failing = health.failing_since.map_or_else(
        || "<span>healthy</span>".to_owned(),
        |since| {
            format!(
                "<span class=dead>failing since {} UTC</span>",
                utc_text(since)
            )
        },
    );
    format!("{disabled}{failing}")
}

fn hours(seconds: u64) -> String {
    if seconds.is_multiple_of(3600) {
        format!("{} h", seconds / 3600)
    } else {
        format!("{seconds} s")
    }
}

/// Endpoints on one page of the outbox list: each costs two store reads.
const PAGE: usize = 100;

/// Which page of the endpoint list: the endpoints named after `after`.
#[derive(serde::Deserialize)]
struct Page {
    after: Option<String>,
}

async fn endpoints<D: OutboxView + Clone>(
    State(outbox): State<Arc<Outbox<D>>>,
    uri: OriginalUri,
    headers: HeaderMap,
    Query(Page { after }): Query<Page>,
) -> Response {
    let root = root_of(&uri, "/outbox");
    if let Err(refusal) = outbox.guard.caller(&headers) {
        return refused(&refusal, &root);
    }
    // One more than a page tells whether a next page exists.
    let read = outbox
        .store
        .endpoint_page(after.as_deref(), PAGE + 1, SystemTime::now())
        .await;
    let mut page = match read {
        Ok(page) => page,
        Err(error) => return unavailable(&error),
    };
    let more = page.len() > PAGE;
    page.truncate(PAGE);
    let mut body = format!(
        "<p><a href=\"{}\">← inbox</a></p><h1>Outbox</h1>",
        escape(&home(&root))
    );
    if let (Some(first), Some(last)) = (page.first(), page.last()) {
        let _ = write!(
            body,
            "<p>Endpoints {} to {}</p>",
            escape(&first.name),
            escape(&last.name)
        );
    }
    body.push_str(
        "<table><tr><th>endpoint</th><th>URL</th><th>health</th><th>pending</th><th>due</th>\
         <th>dead</th><th>delivered</th></tr>",
    );
    for endpoint in &page {
        let url = endpoint
            .masked_url()
            .map_or_else(|| "-".to_owned(), |url| escape(&url));
        let counts = endpoint.counts;
        let _ = write!(
            body,
            "<tr data-endpoint=\"{n}\"><td><a href=\"{r}/outbox/endpoint?name={q}\">{n}</a></td>\
             <td><code>{url}</code></td><td class=counts>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td></tr>",
            health_text(&endpoint.health),
            counts.pending,
            counts.due,
            counts.dead,
            counts.delivered,
            n = escape(&endpoint.name),
            r = escape(&root),
            q = escape(&url_encoded(&endpoint.name)),
        );
    }
    body.push_str("</table>");
    if page.is_empty() && after.is_none() {
        body.push_str("<p>No endpoints yet.</p>");
    }
    if let Some(last) = page.last().filter(|_| more) {
        let _ = write!(
            body,
            "<p><a id=next href=\"{}/outbox?after={}\">Next {PAGE} →</a></p>",
            escape(&root),
            escape(&url_encoded(&last.name)),
        );
    }
    Html(shell("hooklatch outbox", &body)).into_response()
}

#[derive(serde::Deserialize)]
struct Named {
    name: String,
}

async fn endpoint<D: OutboxView + Clone>(
    State(outbox): State<Arc<Outbox<D>>>,
    uri: OriginalUri,
    headers: HeaderMap,
    Query(Named { name }): Query<Named>,
) -> Response {
    let root = root_of(&uri, "/outbox/endpoint");
    let caller = match outbox.guard.caller(&headers) {
        Ok(caller) => caller,
        Err(refusal) => return refused(&refusal, &root),
    };
    if let Err(error) = validate_namespace(&name) {
        return (StatusCode::BAD_REQUEST, error.to_string()).into_response();
    }
    let store = &outbox.store;
    let read = async {
        Ok::<_, hooklatch::sender::OutboxError>((
            store.health(&name).await?,
            store.counts(&name, SystemTime::now()).await?,
            store.recent_attempts(&name, SHOWN).await?,
            store.list(&name, DeliveryState::Dead, SHOWN).await?,
        ))
    };
    let (health, counts, recent, dead) = match read.await {
        Ok(read) => read,
        Err(error) => return unavailable(&error),
    };
    let (n, csrf, r) = (escape(&name), outbox.guard.csrf(&caller), escape(&root));
    let hidden = format!(
        "<input type=hidden name=csrf value={csrf}><input type=hidden name=name value=\"{n}\">"
    );
    let mut body = format!(
        "<p><a href=\"{r}/outbox\">← endpoints</a></p><h1>Endpoint <code>{n}</code></h1>\
         <p class=counts>{}</p><p class=counts><span>pending {}</span><span>due {}</span>\
         <span class=dead>dead {}</span><span>gone {}</span><span>delivered {}</span></p>",
        health_text(&health),
        counts.pending,
        counts.due,
        counts.dead,
        counts.gone,
        counts.delivered,
    );
    let (action, label) = if health.disabled.is_some() {
        ("enable", "Enable (forget its failures)")
    } else {
        ("disable", "Disable")
    };
    let _ = write!(
        body,
        "<form method=post action=\"{r}/outbox/{action}\">{hidden}\
         <button type=submit id={action}>{label}</button></form>"
    );
    attempts_table(&mut body, &recent);
    body.push_str("<h2>Dead deliveries</h2>");
    if dead.is_empty() {
        body.push_str("<p>None.</p>");
    }
    for id in &dead {
        let id = escape(id);
        let _ = write!(
            body,
            "<form method=post action=\"{r}/outbox/replay\">{hidden}\
             <input type=hidden name=id value=\"{id}\">\
             <code>{id}</code> <button type=submit data-replay=\"{id}\">Replay</button></form>"
        );
    }
    let _ = write!(
        body,
        "<h2>Replay a time range</h2><p>Dead and gone deliveries last tried in the range \
         (UTC) go out again.</p><form method=post action=\"{r}/outbox/replay\">{hidden}\
         <label>from <input type=datetime-local step=1 name=since required></label> \
         <label>until <input type=datetime-local step=1 name=until required></label> \
         <button type=submit id=replay-range>Replay range</button></form>"
    );
    Html(shell(&format!("{name}: hooklatch outbox"), &body)).into_response()
}

fn attempts_table(body: &mut String, recent: &[RecentAttempt]) {
    body.push_str("<h2>Latest attempts</h2>");
    if recent.is_empty() {
        body.push_str("<p>None yet.</p>");
        return;
    }
    body.push_str(
        "<table><tr><th>sent (UTC)</th><th>event</th><th>#</th><th>answer</th>\
         <th>took</th><th>response</th></tr>",
    );
    for RecentAttempt { id, attempt } in recent {
        let answer = match &attempt.result {
            Ok(status) => status.to_string(),
            Err(error) => escape(error.as_str()),
        };
        let _ = write!(
            body,
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{answer}</td>\
             <td>{} ms</td><td><code>{}</code></td></tr>",
            utc_text(attempt.sent_at),
            escape(id),
            attempt.number,
            attempt.duration.as_millis(),
            escape(&preview(&attempt.excerpt)),
        );
    }
    body.push_str("</table>");
}

#[derive(serde::Deserialize)]
struct Change {
    csrf: String,
    name: String,
    id: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

impl<D> Outbox<D> {
    /// The refusal of a form without the token or this console's CSRF
    /// token, or naming no valid endpoint; `None` for a form to act on.
    fn refusal(&self, headers: &HeaderMap, form: &Change, root: &str) -> Option<Response> {
        let caller = match self.guard.caller(headers) {
            Ok(caller) => caller,
            Err(refusal) => return Some(refused(&refusal, root)),
        };
        if !self.guard.allows_change(headers, &caller, &form.csrf) {
            return Some((StatusCode::FORBIDDEN, "refused").into_response());
        }
        if let Err(error) = validate_namespace(&form.name) {
            return Some((StatusCode::BAD_REQUEST, error.to_string()).into_response());
        }
        None
    }
}

/// Back to the endpoint's page.
fn back_to(root: &str, name: &str) -> Response {
    let query: String = url_encoded(name);
    Redirect::to(&format!("{root}/outbox/endpoint?name={query}")).into_response()
}

fn url_encoded(text: &str) -> String {
    text.bytes().fold(String::new(), |mut out, byte| {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
        out
    })
}

async fn replay<D: OutboxView + Clone>(
    State(outbox): State<Arc<Outbox<D>>>,
    uri: OriginalUri,
    headers: HeaderMap,
    Form(form): Form<Change>,
) -> Response {
    let root = root_of(&uri, "/outbox/replay");
    if let Some(refused) = outbox.refusal(&headers, &form, &root) {
        return refused;
    }
    let (store, now) = (&outbox.store, SystemTime::now());
    let replayed = match (&form.id, &form.since, &form.until) {
        (Some(id), _, _) => store.replay(&form.name, id, now).await.map(drop),
        (None, Some(since), Some(until)) => {
            let (Some(since), Some(until)) = (parse_utc(since), parse_utc(until)) else {
                return (StatusCode::BAD_REQUEST, "the range needs two UTC times").into_response();
            };
            let replayed = store.replay_between(&form.name, since, until, now, REPLAY_LIMIT);
            replayed.await.map(drop)
        }
        _ => return (StatusCode::BAD_REQUEST, "replay an id or a range").into_response(),
    };
    done(replayed, &root, &form.name)
}

async fn enable<D: OutboxView + Clone>(
    State(outbox): State<Arc<Outbox<D>>>,
    uri: OriginalUri,
    headers: HeaderMap,
    Form(form): Form<Change>,
) -> Response {
    let root = root_of(&uri, "/outbox/enable");
    if let Some(refused) = outbox.refusal(&headers, &form, &root) {
        return refused;
    }
    // As the saved policy says: its backlog too, if it replays on enable.
    let enabled = outbox.store.enable_as_saved(&form.name, SystemTime::now());
    done(enabled.await.map(drop), &root, &form.name)
}

async fn disable<D: OutboxView + Clone>(
    State(outbox): State<Arc<Outbox<D>>>,
    uri: OriginalUri,
    headers: HeaderMap,
    Form(form): Form<Change>,
) -> Response {
    let root = root_of(&uri, "/outbox/disable");
    if let Some(refused) = outbox.refusal(&headers, &form, &root) {
        return refused;
    }
    let now = SystemTime::now();
    let disabled = outbox.store.disable(&form.name, DisableReason::Manual, now);
    done(disabled.await.map(drop), &root, &form.name)
}

/// Back to the endpoint's page after a change, or why the store refused.
fn done(changed: Result<(), hooklatch::sender::OutboxError>, root: &str, name: &str) -> Response {
    match changed {
        Ok(()) => back_to(root, name),
        Err(error) => unavailable(&error),
    }
}
