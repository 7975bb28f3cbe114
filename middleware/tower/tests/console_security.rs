//! What the console does against a page of another site (or a sibling on
//! the same site): every answer forbids framing, caching, sniffing and
//! referrers; the login cookie is a session that expires, not the token;
//! it is scoped to the console's path and `Secure` over HTTPS; a decoy
//! cookie of the same name does not lock an operator out; signing out ends
//! a session; a CSRF token is good for its own session only; a change from
//! another site is refused; wrong tokens are throttled.
#![cfg(feature = "console")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, StatusCode, header};
use hmac::{Hmac, KeyInit as _, Mac as _};
use hooklatch::dedup::MemoryInbox;
use hooklatch::sender::MemoryOutbox;
use hooklatch_tower::console::Console;
use sha2::Sha256;

#[path = "../../../tests/support/outbox_seed.rs"]
mod seed;
mod support;
use support::csrf;

const TOKEN: &str = "security-console-token-0123456789";

/// The console with an outbox (endpoint `orders`, one dead delivery),
/// nested under `/ops` as an app mounts it, served on a loopback socket:
/// the headers checked are those a browser gets, after hyper wrote them.
async fn app() -> Served {
    let outbox = MemoryOutbox::new();
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    seed::seed_endpoint(&outbox, "orders", &[("dead_1", an_hour_ago, Ok(500))]).await;
    let console = Console::new(MemoryInbox::new(), TOKEN, ["stripe"])
        .unwrap()
        .with_outbox(outbox);
    serve(console).await
}

/// Serves `console` under `/ops` on a loopback socket.
async fn serve(console: Console<MemoryInbox>) -> Served {
    let app = axum::Router::new().nest("/ops", console.router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    Served { base, client }
}

/// The console's address, and a client that follows no redirect.
struct Served {
    base: String,
    client: reqwest::Client,
}

/// Sends `method path` with `headers` (and a form body for a POST); the
/// status, the headers and the body.
async fn send(
    app: &Served,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    form: &str,
) -> (StatusCode, HeaderMap, String) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let post = method == reqwest::Method::POST;
    let mut request = app.client.request(method, format!("{}{path}", app.base));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if post {
        request = request
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form.to_owned());
    }
    let response = request.send().await.unwrap();
    let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
    let mut headers = HeaderMap::new();
    for (name, value) in response.headers() {
        headers.append(
            name.as_str().parse::<header::HeaderName>().unwrap(),
            value.as_bytes().try_into().unwrap(),
        );
    }
    (status, headers, response.text().await.unwrap())
}

/// A request to send: method, path, headers and form.
type Sent<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], String);

/// The token as a header.
const BEARER: (&str, &str) = ("authorization", "Bearer security-console-token-0123456789");

/// The `Set-Cookie` of a login with `token`, and any extra headers.
async fn login(app: &Served, extra: &[(&str, &str)]) -> String {
    let (status, headers, _) =
        send(app, "POST", "/ops/login", extra, &format!("token={TOKEN}")).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "a good token signs in");
    headers[header::SET_COOKIE].to_str().unwrap().to_owned()
}

/// `hooklatch_console=...` out of a `Set-Cookie`.
fn cookie_pair(set_cookie: &str) -> &str {
    set_cookie.split(';').next().unwrap()
}

/// A session cookie as the console makes one, for a given expiry.
fn session(expires: u64) -> String {
    let nonce = "5eed";
    let mut mac = Hmac::<Sha256>::new_from_slice(TOKEN.as_bytes()).unwrap();
    mac.update(format!("session {expires} {nonce}").as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("hooklatch_console={expires}.{nonce}.{hex}")
}

fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn every_console_answer_forbids_framing_caching_sniffing_and_referrers() {
    let app = app().await;
    assert_eq!(BEARER.1, format!("Bearer {TOKEN}"));
    let (_, _, page) = send(
        &app,
        "GET",
        "/ops/outbox/endpoint?name=orders",
        &[BEARER],
        "",
    )
    .await;
    let csrf = csrf(&page);
    let cookie = cookie_pair(&login(&app, &[]).await).to_owned();
    let as_cookie = [("cookie", cookie.as_str())];
    let bearer = [BEARER];
    let none: [(&str, &str); 0] = [];
    let with_csrf = format!("csrf={csrf}&name=orders&namespace=stripe&id=dead_1");
    let requests: Vec<Sent<'_>> = vec![
        ("GET", "/ops", &none, String::new()),
        ("GET", "/ops", &bearer, String::new()),
        ("GET", "/ops", &as_cookie, String::new()),
        ("POST", "/ops/login", &none, "token=wrong".to_owned()),
        ("POST", "/ops/login", &none, format!("token={TOKEN}")),
        ("POST", "/ops/requeue", &none, with_csrf.clone()),
        (
            "POST",
            "/ops/requeue",
            &bearer,
            "csrf=00&namespace=stripe".to_owned(),
        ),
        ("POST", "/ops/requeue", &bearer, with_csrf.clone()),
        ("GET", "/ops/outbox", &none, String::new()),
        ("GET", "/ops/outbox", &bearer, String::new()),
        (
            "GET",
            "/ops/outbox/endpoint?name=orders",
            &as_cookie,
            String::new(),
        ),
        (
            "GET",
            "/ops/outbox/endpoint?name=nobody",
            &bearer,
            String::new(),
        ),
        ("POST", "/ops/outbox/replay", &bearer, with_csrf.clone()),
        (
            "POST",
            "/ops/outbox/disable",
            &bearer,
            "csrf=00&name=orders".to_owned(),
        ),
        ("POST", "/ops/outbox/disable", &bearer, with_csrf.clone()),
        ("POST", "/ops/outbox/enable", &bearer, with_csrf.clone()),
    ];
    let mut statuses = std::collections::BTreeSet::new();
    for (method, path, headers, form) in requests {
        let (status, answer, _) = send(&app, method, path, headers, &form).await;
        statuses.insert(status.as_u16());
        let header = |name: header::HeaderName| {
            answer
                .get(&name)
                .map(|value| value.to_str().unwrap().to_owned())
                .unwrap_or_else(|| panic!("{method} {path} ({status}) has no {name}"))
        };
        let policy = header(header::CONTENT_SECURITY_POLICY);
        for directive in [
            "frame-ancestors 'none'",
            "default-src 'none'",
            "form-action 'self'",
        ] {
            assert!(policy.contains(directive), "{method} {path}: {policy}");
        }
        assert!(!policy.contains("script-src"), "no script is ever allowed");
        assert_eq!(header(header::X_FRAME_OPTIONS), "DENY", "{method} {path}");
        assert_eq!(header(header::CACHE_CONTROL), "no-store", "{method} {path}");
        assert_eq!(
            header(header::X_CONTENT_TYPE_OPTIONS),
            "nosniff",
            "{method} {path}"
        );
        assert_eq!(
            header(header::REFERRER_POLICY),
            "no-referrer",
            "{method} {path}"
        );
    }
    // Pages, sign-in, redirects after a change, refusals and failures alike.
    for status in [200, 303, 401, 403] {
        assert!(
            statuses.contains(&status),
            "checked a {status}: {statuses:?}"
        );
    }
}

#[tokio::test]
async fn the_login_cookie_is_a_session_not_the_token_scoped_to_the_console() {
    let app = app().await;
    let set_cookie = login(&app, &[]).await;
    assert!(
        !set_cookie.contains(TOKEN),
        "the cookie holds no token: {set_cookie}"
    );
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ops", "Max-Age=43200"] {
        assert!(
            set_cookie.split("; ").any(|part| part == attribute),
            "{attribute} in {set_cookie}"
        );
    }
    assert!(!set_cookie.contains("Secure"), "plain HTTP: {set_cookie}");

    let cookie = cookie_pair(&set_cookie);
    let (status, _, _) = send(&app, "GET", "/ops", &[("cookie", cookie)], "").await;
    assert_eq!(status, StatusCode::OK, "the session signs the operator in");

    // Its expiry cannot be moved without the token.
    let (expires, mac) = cookie
        .strip_prefix("hooklatch_console=")
        .unwrap()
        .split_once('.')
        .unwrap();
    let later: u64 = expires.parse::<u64>().unwrap() + 3600;
    let moved = format!("hooklatch_console={later}.{mac}");
    let (status, _, _) = send(&app, "GET", "/ops", &[("cookie", &moved)], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // The token itself as the cookie is no session.
    let token_cookie = format!("hooklatch_console={TOKEN}");
    let (status, _, _) = send(&app, "GET", "/ops", &[("cookie", &token_cookie)], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    for proxy in [
        ("x-forwarded-proto", "https"),
        ("forwarded", "for=10.0.0.1;proto=https"),
    ] {
        let set_cookie = login(&app, &[proxy]).await;
        assert!(
            set_cookie.split("; ").any(|part| part == "Secure"),
            "over HTTPS ({proxy:?}): {set_cookie}"
        );
    }
}

#[tokio::test]
async fn a_session_past_its_expiry_is_refused() {
    let app = app().await;
    let fresh = session(now_seconds() + 100);
    let (status, _, _) = send(&app, "GET", "/ops", &[("cookie", &fresh)], "").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a session made as the console makes one"
    );
    let expired = session(now_seconds() - 1);
    let (status, _, _) = send(&app, "GET", "/ops", &[("cookie", &expired)], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_decoy_cookie_of_the_same_name_does_not_lock_an_operator_out() {
    let app = app().await;
    let cookie = cookie_pair(&login(&app, &[]).await).to_owned();
    let one_header = format!("hooklatch_console=decoy; {cookie}");
    let (status, _, _) = send(&app, "GET", "/ops", &[("cookie", &one_header)], "").await;
    assert_eq!(status, StatusCode::OK, "decoy first in one header");
    let (status, _, _) = send(
        &app,
        "GET",
        "/ops/outbox",
        &[("cookie", "hooklatch_console=decoy"), ("cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "decoy in a header of its own");
    let (status, _, _) = send(
        &app,
        "GET",
        "/ops",
        &[("cookie", "hooklatch_console=decoy")],
        "",
    )
    .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the decoy alone is nothing"
    );
}

#[tokio::test]
async fn endpoint_urls_are_shown_without_their_credentials() {
    use hooklatch::sender::EndpointConfig;
    use hooklatch::sender::outbox::EndpointRegistry as _;
    let outbox = MemoryOutbox::new();
    let url =
        "https://ops:hunter2@hooks.slack.com/services/T0SECRET/B0SECRET/XSECRET?token=QSECRET";
    let config =
        EndpointConfig::new(url, "standard", ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap();
    outbox
        .save_endpoint("slack", &config.to_json())
        .await
        .unwrap();
    let console = Console::new(MemoryInbox::new(), TOKEN, ["stripe"])
        .unwrap()
        .with_outbox(outbox);
    let app = serve(console).await;
    let (status, _, page) = send(&app, "GET", "/ops/outbox", &[BEARER], "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("https://***@hooks.slack.com/***?***"),
        "{page}"
    );
    for secret in ["hunter2", "T0SECRET", "B0SECRET", "XSECRET", "QSECRET"] {
        assert!(!page.contains(secret), "{secret} shown");
    }
}

/// The CSRF token on the first page for `cookie`.
async fn csrf_of(app: &Served, cookie: &str) -> String {
    let (status, _, page) = send(app, "GET", "/ops", &[("cookie", cookie)], "").await;
    assert_eq!(status, StatusCode::OK);
    csrf(&page)
}

#[tokio::test]
async fn signing_out_ends_the_session() {
    let app = app().await;
    let cookie = cookie_pair(&login(&app, &[]).await).to_owned();
    let token = csrf_of(&app, &cookie).await;
    let (status, headers, _) = send(
        &app,
        "POST",
        "/ops/logout",
        &[("cookie", &cookie)],
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let cleared = headers[header::SET_COOKIE].to_str().unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    let (status, _, _) = send(&app, "GET", "/ops", &[("cookie", &cookie)], "").await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the cookie, kept by a browser or a thief, is refused"
    );
}

#[tokio::test]
async fn a_csrf_token_is_good_for_its_own_session_only() {
    let app = app().await;
    let first = cookie_pair(&login(&app, &[]).await).to_owned();
    let second = cookie_pair(&login(&app, &[]).await).to_owned();
    let (first_csrf, second_csrf) = (csrf_of(&app, &first).await, csrf_of(&app, &second).await);
    assert_ne!(first_csrf, second_csrf);
    let requeue = |csrf: &str| format!("csrf={csrf}&namespace=stripe");
    let (status, _, _) = send(
        &app,
        "POST",
        "/ops/requeue",
        &[("cookie", &second)],
        &requeue(&first_csrf),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "another session's token");
    let (status, _, _) = send(
        &app,
        "POST",
        "/ops/requeue",
        &[("cookie", &second)],
        &requeue(&second_csrf),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "its own token");
}

#[tokio::test]
async fn a_change_from_another_site_is_refused() {
    let app = app().await;
    let cookie = cookie_pair(&login(&app, &[]).await).to_owned();
    let form = format!("csrf={}&namespace=stripe", csrf_of(&app, &cookie).await);
    let host = app.base.trim_start_matches("http://").to_owned();
    let own_origin = format!("http://{host}");
    let cases: [(&[(&str, &str)], StatusCode); 6] = [
        (&[("origin", "https://evil.example")], StatusCode::FORBIDDEN),
        (&[("sec-fetch-site", "cross-site")], StatusCode::FORBIDDEN),
        (&[("sec-fetch-site", "same-site")], StatusCode::FORBIDDEN),
        (&[("origin", "null")], StatusCode::FORBIDDEN),
        (
            &[("origin", "null"), ("sec-fetch-site", "same-origin")],
            StatusCode::SEE_OTHER,
        ),
        (
            &[("origin", &own_origin), ("sec-fetch-site", "same-origin")],
            StatusCode::SEE_OTHER,
        ),
    ];
    for (extra, expected) in cases {
        let mut headers = vec![("cookie", cookie.as_str())];
        headers.extend_from_slice(extra);
        let (status, _, _) = send(&app, "POST", "/ops/requeue", &headers, &form).await;
        assert_eq!(status, expected, "{extra:?}");
    }
    // Nor may another site's page sign its visitors in (or spend the limit
    // on wrong tokens through their browsers).
    let (status, _, _) = send(
        &app,
        "POST",
        "/ops/login",
        &[("origin", "https://evil.example")],
        &format!("token={TOKEN}"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

/// The console's router, called in this process: no socket, so a test
/// may pause the clock and move it.
async fn in_process() -> axum::Router {
    let outbox = MemoryOutbox::new();
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    seed::seed_endpoint(&outbox, "orders", &[("dead_1", an_hour_ago, Ok(500))]).await;
    let console = Console::new(MemoryInbox::new(), TOKEN, ["stripe"])
        .unwrap()
        .with_outbox(outbox);
    axum::Router::new().nest("/ops", console.router())
}

/// [`send`] through [`in_process`]'s router: the status and the headers.
async fn call(
    router: &axum::Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    form: &str,
) -> (StatusCode, HeaderMap) {
    use tower::ServiceExt as _;
    let mut request = axum::http::Request::builder()
        .method(method)
        .uri(format!("http://console.example{path}"))
        .header(header::HOST, "console.example");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if method == "POST" {
        request = request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let request = request
        .body(axum::body::Body::from(form.to_owned()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    (response.status(), response.headers().clone())
}

/// Wrong tokens are allowed ten in a burst, then one a second; the clock
/// is paused, so the test holds however slow the machine.
#[tokio::test(start_paused = true)]
async fn wrong_tokens_are_throttled_and_sessions_go_on() {
    let app = in_process().await;
    let login = |app| async move {
        let (status, headers) =
            call(app, "POST", "/ops/login", &[], &format!("token={TOKEN}")).await;
        assert_eq!(status, StatusCode::SEE_OTHER, "a good token signs in");
        headers[header::SET_COOKIE].to_str().unwrap().to_owned()
    };
    let cookie = cookie_pair(&login(&app).await).to_owned();
    let mut answers = Vec::new();
    for _ in 0..20 {
        let (status, _) = call(
            &app,
            "POST",
            "/ops/login",
            &[],
            "token=guess-guess-guess-guess",
        )
        .await;
        answers.push(status);
    }
    let unauthorized = StatusCode::UNAUTHORIZED;
    let throttled = StatusCode::TOO_MANY_REQUESTS;
    assert_eq!(answers[..10], [unauthorized; 10], "a burst of ten");
    assert_eq!(answers[10..], [throttled; 10], "then throttled");
    let wrong_bearer = ("authorization", "Bearer guess-guess-guess-guess");
    let (status, _) = call(&app, "GET", "/ops", &[wrong_bearer], "").await;
    assert_eq!(status, throttled, "a header guess too");
    let (status, _) = call(&app, "GET", "/ops", &[("cookie", &cookie)], "").await;
    assert_eq!(status, StatusCode::OK, "a session already issued goes on");
    // One wrong token a second comes back: the right one signs in again,
    // and one more wrong one is answered, not throttled.
    tokio::time::advance(Duration::from_millis(1_100)).await;
    login(&app).await;
    let (status, _) = call(
        &app,
        "POST",
        "/ops/login",
        &[],
        "token=wrong-wrong-wrong-wrong",
    )
    .await;
    assert_eq!(status, unauthorized);
    let (status, _) = call(
        &app,
        "POST",
        "/ops/login",
        &[],
        "token=wrong-wrong-wrong-wrong",
    )
    .await;
    assert_eq!(status, throttled, "one a second");
}
