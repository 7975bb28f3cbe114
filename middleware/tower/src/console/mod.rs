//! The ops console: a small, server-rendered page over an inbox and,
//! optionally, an outbox, to mount in your axum app (or run with
//! `hooklatch console`). For the inbox it shows each namespace's counts and
//! dead letters with a body preview, and requeues one dead letter or all of
//! them; for the outbox ([`Console::with_outbox`]) each endpoint's health,
//! deliveries by state and latest attempts, with replay (one delivery or a
//! time range) and enable / disable.
//!
//! It is safe to expose to operators:
//!
//! - every request needs the bearer token as an `Authorization: Bearer`
//!   header, or the session cookie the login form sets: not the token but
//!   an HMAC of it with an expiry (12 hours), `HttpOnly`, `SameSite=Strict`,
//!   scoped to the console's path, `Secure` when the request came over
//!   HTTPS (`X-Forwarded-Proto` or `Forwarded` from a proxy); any cookie
//!   of the name that is valid is accepted, so a decoy planted by a
//!   same-site page cannot lock operators out. Compared in constant time;
//!   without either the answer is 401;
//!   A session ends at its expiry or when its operator signs out (`POST
//!   /logout`); a new token ends every session. Wrong tokens, at the login
//!   form or in the header, are limited to a burst of 10 and then one a
//!   second, past which the answer is 429 without a comparison;
//! - a change is a POST that carries a CSRF token of its session (an HMAC
//!   under the bearer token), and whose `Origin` and `Sec-Fetch-Site` do
//!   not name another site, so another site cannot make an operator's
//!   browser send one;
//! - every answer forbids framing (`Content-Security-Policy:
//!   frame-ancestors 'none'`, `X-Frame-Options: DENY`), scripts and
//!   anything loaded from elsewhere (`default-src 'none'`), caching
//!   (`Cache-Control: no-store`), sniffing (`X-Content-Type-Options:
//!   nosniff`) and referrers (`Referrer-Policy: no-referrer`);
//! - everything shown is HTML-escaped; the page uses no JavaScript.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, OriginalUri, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use hooklatch::dedup::{InboxQueue, validate_namespace};
use hooklatch::sender::outbox::OutboxView;

/// The console's settings: the token, the store and the namespaces shown.
///
/// ```
/// use hooklatch::dedup::MemoryInbox;
/// use hooklatch_tower::console::Console;
///
/// let console = Console::new(MemoryInbox::new(), "a long random token", ["stripe", "github"])?;
/// let app: axum::Router = axum::Router::new().nest("/ops", console.router());
/// # let _ = app;
/// # Ok::<(), hooklatch_tower::console::ConsoleError>(())
/// ```
pub struct Console<S> {
    store: S,
    guard: Guard,
    namespaces: Vec<String>,
    outbox: Option<Router>,
    links_outbox: bool,
}

/// A console that cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsoleError {
    /// The token is shorter than 16 characters: too easy to guess.
    #[error("the console token must be at least 16 characters")]
    WeakToken,
    /// A namespace cannot be stored.
    #[error(transparent)]
    Namespace(#[from] hooklatch::dedup::DedupError),
}

mod guard;
mod outbox;
mod time;

use guard::{COOKIE, Caller, Guard, Refused, SESSION};

/// The headers on every answer (see the module's documentation). The page
/// has one inline `<style>` and forms that post to the console itself.
const SECURITY_HEADERS: [(header::HeaderName, &str); 5] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
    ),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::CACHE_CONTROL, "no-store"),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
];

/// Adds [`SECURITY_HEADERS`] to `response`.
async fn protect(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

impl<S: InboxQueue + Clone + 'static> Console<S> {
    /// A console over `store` for `namespaces`, for whoever holds `token`
    /// (16 characters or more).
    pub fn new<N: AsRef<str>>(
        store: S,
        token: &str,
        namespaces: impl IntoIterator<Item = N>,
    ) -> Result<Self, ConsoleError> {
        if token.chars().count() < 16 {
            return Err(ConsoleError::WeakToken);
        }
        let namespaces = namespaces
            .into_iter()
            .map(|namespace| {
                validate_namespace(namespace.as_ref())?;
                Ok(namespace.as_ref().to_owned())
            })
            .collect::<Result<_, ConsoleError>>()?;
        Ok(Self {
            store,
            guard: Guard::new(token),
            namespaces,
            outbox: None,
            links_outbox: false,
        })
    }

    /// Adds the outbox pages over `deliveries`: every endpoint the store
    /// knows with its health and deliveries by state, and per endpoint its
    /// latest attempts and dead deliveries, replay of one or of those last
    /// tried in a time range, and enable / disable.
    ///
    /// ```
    /// use hooklatch::dedup::MemoryInbox;
    /// use hooklatch::sender::MemoryOutbox;
    /// use hooklatch_tower::console::Console;
    ///
    /// let console = Console::new(MemoryInbox::new(), "a long random token", ["stripe"])?
    ///     .with_outbox(MemoryOutbox::new());
    /// let app: axum::Router = axum::Router::new().nest("/ops", console.router());
    /// # let _ = app;
    /// # Ok::<(), hooklatch_tower::console::ConsoleError>(())
    /// ```
    #[must_use]
    pub fn with_outbox<D: OutboxView + Clone>(mut self, deliveries: D) -> Self {
        self.outbox = Some(outbox::router(deliveries, self.guard.clone()));
        self
    }

    /// The console's routes: `GET /`, `POST /login`, `POST /logout`, `POST
    /// /requeue`, and
    /// with an outbox `GET /outbox`, `GET /outbox/endpoint`, `POST
    /// /outbox/replay`, `POST /outbox/enable` and `POST /outbox/disable`.
    pub fn router(mut self) -> Router {
        let outbox = self.outbox.take();
        self.links_outbox = outbox.is_some();
        let inbox = Router::new()
            .route("/", get(page::<S>))
            .route("/login", post(login::<S>))
            .route("/logout", post(logout::<S>))
            .route("/requeue", post(requeue::<S>))
            .with_state(Arc::new(self));
        let console = match outbox {
            Some(outbox) => inbox.nest("/outbox", outbox),
            None => inbox,
        };
        console.layer(axum::middleware::map_response(protect))
    }
}

/// The answer to a request refused by the guard under `root`: the login
/// page (401), or 429 after too many wrong tokens.
fn refused(refusal: &Refused, root: &str) -> Response {
    match refusal {
        Refused::Unauthorized => login_page(root),
        Refused::Throttled => too_many(),
    }
}

/// 429: too many wrong tokens lately.
fn too_many() -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, "1")],
        Html(shell(
            "hooklatch console",
            "<h1>hooklatch console</h1><p>Too many wrong tokens: try again in a moment.</p>",
        )),
    )
        .into_response()
}

/// Text made safe to put in HTML, in an element or a quoted attribute.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// The first 120 characters of a body, on one line.
fn preview(body: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(body)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(121)
        .collect();
    if text.chars().count() > 120 {
        format!("{}…", text.chars().take(120).collect::<String>())
    } else {
        text
    }
}

const STYLE: &str = "body{font:15px/1.5 system-ui,sans-serif;margin:2rem auto;max-width:64rem;\
color:#1d2330;padding:0 1rem}h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}\
.counts span{display:inline-block;margin-right:1.5rem;padding:.3rem .7rem;border-radius:.4rem;\
background:#eef2f8}.counts .dead{background:#fde8e8}table{border-collapse:collapse;width:100%}\
td,th{text-align:left;padding:.4rem .5rem;border-bottom:1px solid #e3e7ee;vertical-align:top}\
code{font-size:.85rem;word-break:break-all}button{font:inherit;padding:.25rem .8rem;\
border-radius:.3rem;border:1px solid #8aa0c8;background:#f6f8fc;cursor:pointer}";

fn shell(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>{}</title>\
         <style>{STYLE}</style></head><body>{body}</body></html>",
        escape(title)
    )
}

/// Where the console is mounted (`""` at the root, `/ops` under `/ops`),
/// from the request's path and the route that answers it (`/login`,
/// `/outbox/endpoint`; `""` for the first page), so that every link and
/// form names a full path, wherever the console is nested.
fn root_of(uri: &OriginalUri, route: &str) -> String {
    let path = uri.path().trim_end_matches('/');
    path.strip_suffix(route).unwrap_or(path).to_owned()
}

/// The console's first page under `root`.
fn home(root: &str) -> String {
    if root.is_empty() {
        "/".to_owned()
    } else {
        root.to_owned()
    }
}

fn login_page(root: &str) -> Response {
    let form = format!(
        "<h1>hooklatch console</h1><form method=post action=\"{}/login\">\
         <label>Token <input type=password name=token autocomplete=off></label> \
         <button type=submit id=login>Sign in</button></form>",
        escape(root)
    );
    (
        StatusCode::UNAUTHORIZED,
        Html(shell("hooklatch console", &form)),
    )
        .into_response()
}

async fn page<S: InboxQueue + Clone + 'static>(
    State(console): State<Arc<Console<S>>>,
    uri: OriginalUri,
    headers: HeaderMap,
) -> Response {
    let root = escape(&root_of(&uri, ""));
    let caller = match console.guard.caller(&headers) {
        Ok(caller) => caller,
        Err(refusal) => return refused(&refusal, &root),
    };
    let csrf = console.guard.csrf(&caller);
    let mut body = String::from("<h1>hooklatch console</h1>");
    if matches!(caller, Caller::Session { .. }) {
        let _ = write!(
            body,
            "<form method=post action=\"{root}/logout\"><input type=hidden name=csrf value={csrf}>\
             <button type=submit id=logout>Sign out</button></form>"
        );
    }
    if console.links_outbox {
        let _ = write!(
            body,
            "<p><a href=\"{root}/outbox\">Outbox: endpoints and deliveries</a></p>"
        );
    }
    for namespace in &console.namespaces {
        let ns = escape(namespace);
        let _ = write!(body, "<h2>Inbox <code>{ns}</code></h2>");
        let (stats, dead) = match (
            console.store.stats(namespace).await,
            console.store.dead_letters(namespace, 50).await,
        ) {
            (Ok(stats), Ok(dead)) => (stats, dead),
            (Err(error), _) | (_, Err(error)) => {
                let _ = write!(
                    body,
                    "<p>store unavailable: {}</p>",
                    escape(&error.to_string())
                );
                continue;
            }
        };
        let _ = write!(
            body,
            "<p class=counts><span>waiting {}</span><span>taken {}</span>\
             <span class=dead>dead {}</span></p>",
            stats.waiting, stats.taken, stats.dead
        );
        if dead.is_empty() {
            body.push_str("<p>No dead letters.</p>");
            continue;
        }
        let _ = write!(
            body,
            "<form method=post action=\"{root}/requeue\"><input type=hidden name=csrf value={csrf}>\
             <input type=hidden name=namespace value=\"{ns}\">\
             <button type=submit>Requeue all dead letters</button></form>\
             <table><tr><th>event</th><th>type</th><th>attempts</th><th>why it died</th><th>body</th><th></th></tr>"
        );
        for entry in dead {
            let id = escape(&entry.id);
            let _ = write!(
                body,
                "<tr><td><code>{id}</code></td><td>{}</td><td>{}</td><td class=reason>{}</td>\
                 <td><code>{}</code></td>\
                 <td><form method=post action=\"{root}/requeue\">\
                 <input type=hidden name=csrf value={csrf}>\
                 <input type=hidden name=namespace value=\"{ns}\">\
                 <input type=hidden name=id value=\"{id}\">\
                 <button type=submit data-requeue=\"{id}\">Requeue</button></form></td></tr>",
                escape(entry.meta.event_type.as_deref().unwrap_or("-")),
                entry.attempt,
                escape(
                    entry
                        .dead
                        .as_ref()
                        .map(|dead| dead.reason.as_str())
                        .filter(|reason| !reason.is_empty())
                        .unwrap_or("-")
                ),
                escape(&preview(&entry.body)),
            );
        }
        body.push_str("</table>");
    }
    Html(shell("hooklatch console", &body)).into_response()
}

#[derive(serde::Deserialize)]
struct Login {
    token: String,
}

async fn login<S: InboxQueue + Clone + 'static>(
    State(console): State<Arc<Console<S>>>,
    uri: OriginalUri,
    headers: HeaderMap,
    Form(form): Form<Login>,
) -> Response {
    let root = root_of(&uri, "/login");
    if !console.guard.allows_sign_in(&headers) {
        return (StatusCode::FORBIDDEN, "refused").into_response();
    }
    if let Err(refusal) = console.guard.check_token(&form.token) {
        return refused(&refusal, &escape(&root));
    }
    let secure = if over_https(&uri, &headers) {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{COOKIE}={}; HttpOnly; SameSite=Strict; Path={}; Max-Age={}{secure}",
        console.guard.new_session(),
        home(&root),
        SESSION.as_secs(),
    );
    ([(header::SET_COOKIE, cookie)], Redirect::to(&home(&root))).into_response()
}

/// Whether the request came over HTTPS: its own scheme, or what a proxy in
/// front says (`X-Forwarded-Proto: https`, `Forwarded: proto=https`).
fn over_https(uri: &OriginalUri, headers: &HeaderMap) -> bool {
    let said = |name: &str, https: fn(&str) -> bool| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .any(https)
    };
    uri.scheme_str() == Some("https")
        || said("x-forwarded-proto", |value| {
            value.trim().eq_ignore_ascii_case("https")
        })
        || said("forwarded", |value| {
            value
                .split([';', ','])
                .any(|pair| pair.trim().eq_ignore_ascii_case("proto=https"))
        })
}

#[derive(serde::Deserialize)]
struct RequeueForm {
    csrf: String,
    namespace: String,
    id: Option<String>,
}

async fn requeue<S: InboxQueue + Clone + 'static>(
    State(console): State<Arc<Console<S>>>,
    uri: OriginalUri,
    headers: HeaderMap,
    Form(form): Form<RequeueForm>,
) -> Response {
    let root = root_of(&uri, "/requeue");
    let caller = match console.guard.caller(&headers) {
        Ok(caller) => caller,
        Err(refusal) => return refused(&refusal, &escape(&root)),
    };
    if !console.guard.allows_change(&headers, &caller, &form.csrf)
        || !console.namespaces.contains(&form.namespace)
    {
        return (StatusCode::FORBIDDEN, "refused").into_response();
    }
    match console
        .store
        .requeue_dead(&form.namespace, form.id.as_deref())
        .await
    {
        Ok(_) => Redirect::to(&home(&root)).into_response(),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Html(shell("store unavailable", &escape(&error.to_string()))),
        )
            .into_response(),
    }
}

#[derive(serde::Deserialize)]
struct LogoutForm {
    csrf: String,
}

/// Signs the caller's session out and clears its cookie.
async fn logout<S: InboxQueue + Clone + 'static>(
    State(console): State<Arc<Console<S>>>,
    uri: OriginalUri,
    headers: HeaderMap,
    Form(form): Form<LogoutForm>,
) -> Response {
    let root = root_of(&uri, "/logout");
    let caller = match console.guard.caller(&headers) {
        Ok(caller) => caller,
        Err(refusal) => return refused(&refusal, &escape(&root)),
    };
    if !console.guard.allows_change(&headers, &caller, &form.csrf) {
        return (StatusCode::FORBIDDEN, "refused").into_response();
    }
    console.guard.sign_out(&caller);
    let cookie = format!(
        "{COOKIE}=; HttpOnly; SameSite=Strict; Path={}; Max-Age=0",
        home(&root)
    );
    ([(header::SET_COOKIE, cookie)], Redirect::to(&home(&root))).into_response()
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn everything_shown_is_escaped() {
        assert_eq!(
            escape(r#"<script>alert("x")</script>&'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"
        );
    }
}
