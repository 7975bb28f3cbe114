//! Who may use the console: the bearer token, or a session the login form
//! set; the CSRF token a change must carry; the origin a change may come
//! from; and the limit on wrong tokens.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, header};
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;
// Tokio's clock, so that tests can pause and move it.
use tokio::time::Instant;

/// The session cookie's name.
pub(super) const COOKIE: &str = "hooklatch_console";

/// How long a login lasts.
pub(super) const SESSION: Duration = Duration::from_secs(12 * 3600);

/// Wrong tokens (at the login form or as a bearer header) allowed in a
/// burst; then one a second. Past it, a token is not even compared: the
/// answer is 429. Sessions already issued are not affected.
const WRONG_TOKENS: f64 = 10.0;

/// The token check, sessions and CSRF tokens, shared by the inbox and
/// outbox pages.
#[derive(Clone)]
pub(super) struct Guard {
    token: Arc<str>,
    /// Sessions signed out before their expiry: nonce to expiry.
    revoked: Arc<Mutex<HashMap<String, u64>>>,
    wrong_tokens: Arc<Mutex<Bucket>>,
}

/// Who a request is from.
pub(super) enum Caller {
    /// An `Authorization: Bearer` header with the token: a script, not a
    /// browser (which never adds the header by itself).
    Bearer,
    /// A browser with a session cookie.
    Session {
        /// What tells this session from every other.
        nonce: String,
    },
}

/// Why a request is refused.
pub(super) enum Refused {
    /// No token and no valid session.
    Unauthorized,
    /// Too many wrong tokens lately.
    Throttled,
}

/// A token bucket of wrong tokens.
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Guard {
    pub(super) fn new(token: &str) -> Self {
        Self {
            token: Arc::from(token),
            revoked: Arc::default(),
            wrong_tokens: Arc::new(Mutex::new(Bucket {
                tokens: WRONG_TOKENS,
                at: Instant::now(),
            })),
        }
    }

    /// Who the request is from: the token in the header, or a valid session
    /// in any cookie of the console's name (a decoy a same-site page
    /// planted does not lock an operator out).
    pub(super) fn caller(&self, headers: &HeaderMap) -> Result<Caller, Refused> {
        let now = unix_now();
        let session = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
            .find_map(|session| self.session_nonce(session, now));
        if let Some(nonce) = session {
            return Ok(Caller::Session { nonce });
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        match bearer {
            Some(given) => self.check_token(given).map(|()| Caller::Bearer),
            None => Err(Refused::Unauthorized),
        }
    }

    /// Compares `given` with the token, unless too many wrong ones came
    /// lately; a wrong one counts against the limit.
    pub(super) fn check_token(&self, given: &str) -> Result<(), Refused> {
        let mut bucket = self
            .wrong_tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        bucket.tokens =
            (bucket.tokens + now.duration_since(bucket.at).as_secs_f64()).min(WRONG_TOKENS);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return Err(Refused::Throttled);
        }
        let right = given.len() == self.token.len()
            && bool::from(given.as_bytes().ct_eq(self.token.as_bytes()));
        if right {
            Ok(())
        } else {
            bucket.tokens -= 1.0;
            Err(Refused::Unauthorized)
        }
    }

    /// A new session that lasts [`SESSION`]: `{expires}.{nonce}.{hex HMAC
    /// of both under the token}`. It does not hold the token, and cannot be
    /// extended without it.
    pub(super) fn new_session(&self) -> String {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let expires = unix_now().saturating_add(SESSION.as_secs());
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let nonce = format!(
            "{:x}{nanos:x}{:x}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        self.session(expires, &nonce)
    }

    fn session(&self, expires: u64, nonce: &str) -> String {
        format!(
            "{expires}.{nonce}.{}",
            self.mac(&format!("session {expires} {nonce}"))
        )
    }

    /// The nonce of `given` if it is a session this console issued, not
    /// expired at `now` and not signed out.
    fn session_nonce(&self, given: &str, now: u64) -> Option<String> {
        let mut parts = given.splitn(3, '.');
        let (expires, nonce) = (parts.next()?, parts.next()?);
        let expires = expires.parse::<u64>().ok()?;
        if expires <= now || !nonce.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return None;
        }
        let expected = self.session(expires, nonce);
        let issued = given.len() == expected.len()
            && bool::from(given.as_bytes().ct_eq(expected.as_bytes()));
        let revoked = self
            .revoked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(nonce);
        (issued && !revoked).then(|| nonce.to_owned())
    }

    /// Signs the caller's session out: its cookie is refused from now on,
    /// whatever its expiry. (A new token signs every session out.)
    pub(super) fn sign_out(&self, caller: &Caller) {
        let Caller::Session { nonce } = caller else {
            return;
        };
        let now = unix_now();
        let mut revoked = self.revoked.lock().unwrap_or_else(PoisonError::into_inner);
        // A session past its expiry is refused anyway.
        revoked.retain(|_, expires| *expires > now);
        revoked.insert(nonce.clone(), now.saturating_add(SESSION.as_secs()));
    }

    /// The CSRF token the caller's forms carry: an HMAC under the bearer
    /// token of the session's nonce, which a page of another site cannot
    /// know and another session cannot use.
    pub(super) fn csrf(&self, caller: &Caller) -> String {
        match caller {
            Caller::Bearer => self.mac("csrf bearer"),
            Caller::Session { nonce } => self.mac(&format!("csrf {nonce}")),
        }
    }

    /// Whether a change (a POST) may go ahead: its form's CSRF token is the
    /// caller's, and the browser says it came from the console's own
    /// origin (an `Origin` naming another host, or `Sec-Fetch-Site:
    /// cross-site`, is refused).
    pub(super) fn allows_change(&self, headers: &HeaderMap, caller: &Caller, csrf: &str) -> bool {
        let expected = self.csrf(caller);
        let csrf_matches =
            csrf.len() == expected.len() && bool::from(csrf.as_bytes().ct_eq(expected.as_bytes()));
        csrf_matches && same_origin(headers)
    }

    /// Whether a sign-in may go ahead: sent from the console's own origin,
    /// so that pages of other sites cannot make their visitors' browsers
    /// spend the limit on wrong tokens.
    pub(super) fn allows_sign_in(&self, headers: &HeaderMap) -> bool {
        same_origin(headers)
    }

    /// The hex HMAC-SHA256 of `label` under the bearer token.
    fn mac(&self, label: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(self.token.as_bytes())
            .expect("HMAC takes any key length");
        mac.update(label.as_bytes());
        mac.finalize()
            .into_bytes()
            .iter()
            .fold(String::new(), |mut hex, byte| {
                let _ = write!(hex, "{byte:02x}");
                hex
            })
    }
}

/// Whether the request came from the page's own origin, as far as the
/// browser says: `Sec-Fetch-Site`, when sent, is `same-origin` (or `none`,
/// typed by the user); an `Origin`, when it names one, has the request's
/// `Host` (or the `X-Forwarded-Host` a proxy in front set). Under the
/// console's `Referrer-Policy: no-referrer` browsers send `Origin: null`
/// for its own forms too, so `null` passes only with `Sec-Fetch-Site:
/// same-origin`.
fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let site = text("sec-fetch-site");
    if site.is_some_and(|site| !matches!(site, "same-origin" | "none")) {
        return false;
    }
    match text("origin") {
        None => true,
        Some("null") => site == Some("same-origin"),
        Some(origin) => origin.split_once("://").is_some_and(|(_, authority)| {
            [text("x-forwarded-host"), text("host")]
                .into_iter()
                .flatten()
                .any(|host| host.eq_ignore_ascii_case(authority))
        }),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}
