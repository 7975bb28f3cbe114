//! `verify --message-key`: an HTTP message signature (RFC 9421) checked by
//! the library's `MessageVerifier`, and with `--explain` the usual reasons
//! a correctly signed request stops verifying on its way: the scheme, host
//! or path a proxy changed, a body changed after it was digested, the time.
//!
//! Each guess is the request rebuilt one way and verified again; nothing
//! here computes a signature, and no line prints a key.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use hooklatch::verify::message::{
    MessageKey, MessageRequest, MessageSignatureError, MessageVerified, MessageVerifier,
};

use crate::UsageError;

/// A trusted key as `--message-key` gives it: `KEYID=ALG:KEY`.
#[derive(Debug, Clone)]
pub(crate) struct KeyArg {
    key_id: String,
    algorithm: String,
    material: Vec<u8>,
}

/// Parses `KEYID=ALG:KEY`, the key in base64 (standard or URL-safe).
pub(crate) fn parse_key(text: &str) -> Result<KeyArg, String> {
    let shape = "expected KEYID=ALG:KEY, ALG one of hmac-sha256, ed25519, ecdsa-p256-sha256, \
                 KEY in base64";
    let (key_id, rest) = text.split_once('=').ok_or(shape)?;
    let (algorithm, key) = rest.split_once(':').ok_or(shape)?;
    let key = key.trim();
    let material = STANDARD
        .decode(key)
        .or_else(|_| URL_SAFE_NO_PAD.decode(key.trim_end_matches('=')))
        .map_err(|_| format!("the key of `{key_id}` is not base64"))?;
    Ok(KeyArg {
        key_id: key_id.to_owned(),
        algorithm: algorithm.to_owned(),
        material,
    })
}

impl KeyArg {
    fn key(&self) -> Result<MessageKey, UsageError> {
        let key = match self.algorithm.as_str() {
            "hmac-sha256" => MessageKey::hmac_sha256(&self.key_id, &self.material),
            "ed25519" => MessageKey::ed25519(&self.key_id, &self.material),
            "ecdsa-p256-sha256" => MessageKey::ecdsa_p256(&self.key_id, &self.material),
            other => {
                return Err(UsageError(format!(
                    "--message-key {}: `{other}` is not hmac-sha256, ed25519 or ecdsa-p256-sha256",
                    self.key_id
                )));
            }
        };
        key.map_err(|error| UsageError(format!("--message-key: {error}")))
    }
}

/// How `verify` checks a message signature.
pub(crate) struct Check<'a> {
    pub(crate) keys: &'a [KeyArg],
    pub(crate) require: &'a [String],
    pub(crate) tag: Option<&'a str>,
    /// The request's method and target: absolute, or origin form with the
    /// authority from `Host`.
    pub(crate) method: &'a str,
    pub(crate) target: &'a str,
    /// The URI scheme the client used, for an origin-form target.
    pub(crate) uri_scheme: &'a str,
    pub(crate) headers: &'a [(String, String)],
    pub(crate) body: &'a [u8],
    pub(crate) now: i64,
    pub(crate) ignore_time: bool,
}

impl Check<'_> {
    fn verifier(&self, ignore_time: bool) -> Result<MessageVerifier, UsageError> {
        let mut builder = MessageVerifier::builder();
        for key in self.keys {
            builder = builder.with_key(key.key()?);
        }
        if !self.require.is_empty() {
            builder = builder.require(self.require.iter().cloned());
        }
        if let Some(tag) = self.tag {
            builder = builder.with_tag(tag);
        }
        if ignore_time {
            builder = builder
                .with_max_age(None)
                .with_future_tolerance(Duration::MAX);
        }
        builder
            .build()
            .map_err(|error| UsageError(format!("--message-key: {error}")))
    }

    /// Verifies the request as given, with `target`, `uri_scheme`, the
    /// headers and the body changed where asked.
    fn verify_as(
        &self,
        verifier: &MessageVerifier,
        target: &str,
        uri_scheme: &str,
        headers: &http::HeaderMap,
        body: &[u8],
        now: i64,
    ) -> Result<MessageVerified, MessageSignatureError> {
        let request = if target.contains("://") {
            MessageRequest::new(self.method, target, headers)?
        } else {
            let method = http::Method::from_bytes(self.method.as_bytes()).map_err(|_| {
                MessageSignatureError::InvalidTarget(format!("`{}` is no method", self.method))
            })?;
            let uri: http::Uri = target
                .parse()
                .map_err(|_| MessageSignatureError::InvalidTarget(target.to_owned()))?;
            return verifier.verify_at(
                &MessageRequest::from_server(&method, &uri, uri_scheme, headers)?,
                body,
                now,
            );
        };
        verifier.verify_at(&request, body, now)
    }
}

/// The headers as `http` holds them; a line it cannot hold is a usage
/// error naming it.
fn header_map(headers: &[(String, String)]) -> Result<http::HeaderMap, UsageError> {
    let mut map = http::HeaderMap::new();
    for (name, value) in headers {
        let bad = || UsageError(format!("the header `{name}: {value}` is not valid HTTP"));
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?,
            http::HeaderValue::from_str(value).map_err(|_| bad())?,
        );
    }
    Ok(map)
}

/// Verifies; prints `ok …` or `rejected: …` (and with `explain` what would
/// have matched). Returns whether it verified.
pub(crate) fn verify(check: &Check<'_>, explain: bool) -> Result<bool, UsageError> {
    let verifier = check.verifier(check.ignore_time)?;
    let headers = header_map(check.headers)?;
    let result = check.verify_as(
        &verifier,
        check.target,
        check.uri_scheme,
        &headers,
        check.body,
        check.now,
    );
    match result {
        Ok(verified) => {
            let mut line = format!(
                "ok key={} label={} created={}",
                verified.key_id(),
                verified.label(),
                verified.created()
            );
            if let Some(nonce) = verified.nonce() {
                line.push_str(&format!(" nonce={nonce}"));
            }
            line.push_str(&format!(" claim={}", verified.claim_key()));
            println!("{line}");
            Ok(true)
        }
        Err(error) => {
            println!("rejected: {error}");
            if explain {
                for line in explanations(check, &headers, &error)? {
                    println!("{line}");
                }
            }
            Ok(false)
        }
    }
}

/// One line per finding, or one `no match: …` line.
fn explanations(
    check: &Check<'_>,
    headers: &http::HeaderMap,
    error: &MessageSignatureError,
) -> Result<Vec<String>, UsageError> {
    use MessageSignatureError as E;
    let mut notes = Vec::new();
    match error {
        E::MissingComponent(component) if component == "content-digest" => notes.push(
            "the signature does not cover content-digest, so nothing binds the body: the sender \
             must set Content-Digest (RFC 9530) and cover it"
                .to_owned(),
        ),
        E::MissingComponent(component) => notes.push(format!(
            "the sender does not cover `{component}`: ask it to, or require less (--require)"
        )),
        E::AbsentComponent(component) => notes.push(format!(
            "the signature covers `{component}`, which the request no longer has: a proxy on the \
             way may have removed or renamed it"
        )),
        E::NoTrustedSignature { .. } => notes.push(
            "no signature names a key given with --message-key (its keyid), or the tag differs"
                .to_owned(),
        ),
        _ => {}
    }
    let relaxed = check.verifier(true)?;
    let matches_as = |target: &str, uri_scheme: &str, headers: &http::HeaderMap, body: &[u8]| {
        check
            .verify_as(&relaxed, target, uri_scheme, headers, body, 0)
            .is_ok()
    };
    if matches!(
        error,
        E::TooOld { .. } | E::CreatedInFuture { .. } | E::Expired { .. }
    ) && matches_as(check.target, check.uri_scheme, headers, check.body)
    {
        notes.push(format!(
            "signature matches: only its time failed ({error}); a capture checked later needs \
             --now or --ignore-timestamp, a live one a clock put right"
        ));
        return Ok(notes);
    }
    if matches!(error, E::DigestMismatch(_)) {
        for (change, body) in body_guesses(check.body) {
            if matches_as(check.target, check.uri_scheme, headers, &body) {
                notes.push(format!("would match: the body {change}"));
            }
        }
    }
    if matches!(
        error,
        E::SignatureMismatch { .. } | E::WrongAuthority { .. }
    ) {
        for (change, target, uri_scheme, headers) in request_guesses(check, headers) {
            if matches_as(&target, &uri_scheme, &headers, check.body) {
                notes.push(format!("would match: {change}"));
            }
        }
    }
    if notes.is_empty() {
        notes.push(
            "no match: not a changed scheme, host, port, path prefix or query, nor a changed \
             line end in the body; check the key and what the sender covers"
                .to_owned(),
        );
    }
    Ok(notes)
}

/// The body as it often was before a change on the way.
fn body_guesses(body: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let mut guesses = Vec::new();
    if let Some(trimmed) = body.strip_suffix(b"\n") {
        guesses.push(("without its trailing newline", trimmed.to_vec()));
    } else {
        guesses.push(("with a trailing newline", [body, b"\n"].concat()));
    }
    if body.windows(2).any(|pair| pair == b"\r\n") {
        let unix: Vec<u8> = String::from_utf8_lossy(body)
            .replace("\r\n", "\n")
            .into_bytes();
        guesses.push(("with LF line ends instead of CRLF", unix));
    }
    guesses
}

/// The request as the sender may have addressed it before a proxy
/// changed it: another scheme, the forwarded host, the host with or
/// without a port, a path prefix the proxy stripped, the query dropped.
fn request_guesses(
    check: &Check<'_>,
    headers: &http::HeaderMap,
) -> Vec<(String, String, String, http::HeaderMap)> {
    let mut guesses = Vec::new();
    let (target, uri_scheme) = (check.target.to_owned(), check.uri_scheme.to_owned());
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(|value| value.split(',').next().unwrap_or(value).trim().to_owned())
    };
    let other_scheme = if uri_scheme == "https" {
        "http"
    } else {
        "https"
    };
    // An absolute --url names its own scheme and host.
    if let Some((scheme, rest)) = target.split_once("://") {
        let other = if scheme == "https" { "http" } else { "https" };
        guesses.push((
            format!("the client used {other}, not {scheme} (the URL's scheme)"),
            format!("{other}://{rest}"),
            uri_scheme,
            headers.clone(),
        ));
        return guesses;
    }
    guesses.push((
        format!(
            "the client used {other_scheme}, not {uri_scheme} (--uri-scheme {other_scheme}; the \
             receiver's scheme)"
        ),
        target.clone(),
        other_scheme.to_owned(),
        headers.clone(),
    ));
    let with_host = |host: &str| {
        let mut changed = headers.clone();
        if let Ok(value) = host.parse() {
            changed.insert(http::header::HOST, value);
        }
        changed
    };
    if let Some(forwarded) = header("x-forwarded-host") {
        guesses.push((
            format!(
                "the host the client addressed, `{forwarded}` (X-Forwarded-Host): a proxy \
                 rewrote Host"
            ),
            target.clone(),
            header("x-forwarded-proto").unwrap_or_else(|| uri_scheme.clone()),
            with_host(&forwarded),
        ));
    }
    // `name:port`, or `[v6]:port`; a bare IPv6 literal has no port.
    let host = header("host");
    if let Some((name, _port)) = host
        .as_deref()
        .and_then(|host| host.rsplit_once(':'))
        .filter(|(name, port)| {
            !port.is_empty()
                && port.bytes().all(|byte| byte.is_ascii_digit())
                && (!name.contains(':') || name.ends_with(']'))
        })
    {
        guesses.push((
            format!("the host without its port, `{name}`: a proxy added the port"),
            target.clone(),
            uri_scheme.clone(),
            with_host(name),
        ));
    }
    if !target.contains("://") {
        if let Some(prefix) = header("x-forwarded-prefix") {
            let prefixed = format!("{}{target}", prefix.trim_end_matches('/'));
            guesses.push((
                format!(
                    "the path with the prefix `{prefix}` the proxy stripped (X-Forwarded-Prefix)"
                ),
                prefixed,
                uri_scheme.clone(),
                headers.clone(),
            ));
        }
        if let Some((path, _)) = target.split_once('?') {
            guesses.push((
                "the path without its query: the query was added on the way".to_owned(),
                path.to_owned(),
                uri_scheme.clone(),
                headers.clone(),
            ));
        }
    }
    guesses
}
