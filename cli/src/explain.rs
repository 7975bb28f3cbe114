//! `verify --explain`: when a request is rejected, try the usual ways a
//! correctly signed request gets changed between sender and receiver, and
//! say which change would have made the signature match.
//!
//! Each guess is a candidate request (another body, secret, timestamp or
//! scheme) checked by the library's own [`Verifier`] with the timestamp
//! check off: the question is which bytes were signed, not when. Nothing
//! here computes a signature, and no line prints a secret.

use std::io::{self, Write};
use std::time::UNIX_EPOCH;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use hooklatch::verify::{Malformed, Scheme, Verifier, VerifyError};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode, percent_encode};
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};
use zeroize::Zeroizing;

/// The built-in schemes `--scheme` names, tried in this order (Square's
/// and Twilio's need their URL, so they are not among them).
const SCHEMES: &[&str] = Scheme::NAMES;

/// `application/x-www-form-urlencoded` leaves these bytes as they are
/// (and writes a space as `+`, which `%20` is turned into).
const FORM: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'*')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_');

/// A request `verify` rejected, and how it was checked.
pub(crate) struct Rejected<'a> {
    pub(crate) scheme: Scheme,
    /// The secrets as given on the command line.
    pub(crate) secrets: &'a [String],
    pub(crate) headers: &'a [(String, String)],
    pub(crate) body: &'a [u8],
    pub(crate) error: &'a VerifyError,
    /// `--timestamp-header` of a custom scheme.
    pub(crate) custom_timestamp_header: Option<&'a str>,
    /// `--signed-url` of Square's and Twilio's schemes.
    pub(crate) signed_url: Option<&'a str>,
    /// The largest body `verify` accepts; an encoded body may be three
    /// times as long.
    pub(crate) body_limit: usize,
}

/// A secret as a candidate verifier takes it.
enum Secret<'a> {
    /// In the scheme's text form, as `--secret` gives it.
    Text(&'a str),
    /// Raw key bytes.
    Bytes(Zeroizing<Vec<u8>>),
}

/// Where the scheme reads its timestamp: a header of its own, or the `t=`
/// field of a Stripe signature header.
struct Stamp<'a> {
    header: &'a str,
    field: bool,
}

/// One line per finding: `would match: …`; or `signature matches: …` when
/// only the timestamp failed; or one `no match: …` line. A body over the
/// limit is not explained: nothing was checked.
pub(crate) fn explain(rejected: &Rejected<'_>) -> Vec<String> {
    let given: Vec<_> = rejected.secrets.iter().map(|s| Secret::Text(s)).collect();
    let too_large = matches!(rejected.error, VerifyError::BodyTooLarge { .. });
    let Some(as_given) = rejected
        .verifier(&rejected.scheme, &given)
        .filter(|_| !too_large)
    else {
        return Vec::new();
    };
    if accepts(&as_given, rejected.headers, rejected.body) {
        return vec![rejected.signature_is_fine()];
    }
    let mut notes = if rejected.scheme.name() == "stripe" {
        api_keys_given(rejected.secrets)
    } else {
        Vec::new()
    };
    let read: Vec<&str> = [
        Some(rejected.scheme.signature_header()),
        rejected.scheme.id_header(),
        timestamp_at(&rejected.scheme, rejected.custom_timestamp_header).map(|stamp| stamp.header),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(pasted) = name_pasted_into_value(rejected.headers, &read) {
        notes.push(pasted.saying);
        if accepts(&as_given, &pasted.mended, rejected.body) {
            notes.push(format!(
                "would match: `{}` given without its name repeated in its value",
                pasted.name
            ));
        }
        return notes;
    }
    let mut search = Search {
        request: rejected,
        as_given,
        findings: Vec::new(),
        tried: Vec::new(),
    };
    let covered = covered_headers(rejected);
    if let VerifyError::MissingHeader { name } = rejected.error {
        // No body or secret brings a missing header back: only another
        // scheme, whose headers these may be, is worth trying.
        if covered.iter().any(|covered| covered == name) {
            notes.push(format!(
                "header: the signature covers `{name}` (its `h=` names it), and the request \
                 has no `{name}`: a proxy on the way dropped it, or the request was put \
                 together again without it; nothing was computed"
            ));
        } else {
            notes.push(missing_header(name, rejected.headers));
        }
        search.schemes(&given);
        notes.extend(
            search
                .findings
                .into_iter()
                .map(|finding| format!("would match: {finding}")),
        );
        return notes;
    }
    search.bodies();
    search.secrets();
    search.timestamps();
    search.urls(&given);
    search.schemes(&given);
    if search.findings.is_empty() {
        notes.push(format!(
            "no match: none of the usual mistakes makes the signature match (tried {}); \
             check that the secret is the one the sender signs with and that the body \
             is the raw request body",
            search.tried.join(", ")
        ));
        if !covered.is_empty() {
            let values: Vec<String> = covered
                .iter()
                .map(|name| {
                    let value = rejected
                        .headers
                        .iter()
                        .find(|(given, _)| given.eq_ignore_ascii_case(name))
                        .map_or("", |(_, value)| value.as_str());
                    format!("`{name}: {value}`")
                })
                .collect();
            notes.push(format!(
                "covered headers: the signature also covers {} (its `h=`, in that order), \
                 as received here: a proxy that rewrote one of them (a new content-type, a \
                 value trimmed or joined) breaks it",
                values.join(", ")
            ));
        }
        if keys_in_alphabetical_order(rejected.body) {
            notes.push(
                "body: its JSON keys are in alphabetical order at every level, as a JSON \
                 library writes them that sorts keys (serde_json's Value, Python's \
                 sort_keys=True, a Go map): if the body was parsed and written again, the \
                 sender's order is lost and cannot be rebuilt; verify the raw request body, \
                 before parsing it"
                    .to_owned(),
            );
        }
    }
    notes.extend(
        search
            .findings
            .into_iter()
            .map(|finding| format!("would match: {finding}")),
    );
    notes
}

/// The headers a Hook0 signature names as covered (its `h=`), when the
/// scheme is Hook0's and the request has one signature header.
fn covered_headers(rejected: &Rejected<'_>) -> Vec<String> {
    if rejected.scheme.name() != "hook0" {
        return Vec::new();
    }
    let mut signature = rejected
        .headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(rejected.scheme.signature_header()));
    let (Some((_, value)), None) = (signature.next(), signature.next()) else {
        return Vec::new();
    };
    value
        .split(',')
        .find_map(|field| field.trim().strip_prefix("h="))
        .map(|names| names.split(' ').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Headers that sound like the one the scheme reads: the same name but
/// for an `x-` prefix, `_` for `-` or case, or a few letters apart.
fn near_misses<'h>(wanted: &str, headers: &'h [(String, String)]) -> Vec<&'h str> {
    let plain = |name: &str| {
        let name = name.to_ascii_lowercase().replace('_', "-");
        name.strip_prefix("x-").map(str::to_owned).unwrap_or(name)
    };
    let wanted_plain = plain(wanted);
    let mut found: Vec<&str> = headers
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| {
            let candidate = plain(name);
            candidate == wanted_plain || edit_distance(&candidate, &wanted_plain) <= 2
        })
        .collect();
    found.dedup();
    found
}

/// Levenshtein distance, for header names (short, ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The line for a header the scheme reads and the request lacks: the near
/// miss it has instead (GitHub's SHA-1 header named as such), or the
/// headers it has.
fn missing_header(name: &str, headers: &[(String, String)]) -> String {
    let has = |wanted: &str| {
        headers
            .iter()
            .any(|(given, _)| given.eq_ignore_ascii_case(wanted))
    };
    if name == "x-hub-signature-256" && has("x-hub-signature") {
        return "header: `x-hub-signature` is GitHub's legacy SHA-1 signature; this scheme checks `x-hub-signature-256`, which GitHub sends with every delivery: pass that header"
            .to_owned();
    }
    let near = near_misses(name, headers);
    if let Some(first) = near.first() {
        return format!(
            "header: the request has no `{name}`, but `{first}`: a near miss (a proxy or the sender renamed it, or another scheme of the provider); no body or secret was tried, since the signature is read from `{name}`"
        );
    }
    let given: Vec<String> = headers
        .iter()
        .map(|(name, _)| format!("`{name}`"))
        .collect();
    format!(
        "header: the request has no `{name}`, which this scheme reads its signature or metadata from (given: {}); no body or secret was tried",
        if given.is_empty() {
            "none".to_owned()
        } else {
            given.join(", ")
        }
    )
}

/// A header whose value begins with its own name, as when `-H 'name:
/// name: value'` is pasted from a capture.
struct Pasted {
    name: String,
    saying: String,
    /// The headers with that repeated name taken out.
    mended: Vec<(String, String)>,
}

/// The first of the headers the scheme `read`s whose value begins with
/// its own name (`Host: host:8080` is no such mistake: the scheme does not
/// read it).
fn name_pasted_into_value(headers: &[(String, String)], read: &[&str]) -> Option<Pasted> {
    let (name, value) = headers.iter().find(|(name, value)| {
        read.iter().any(|wanted| wanted.eq_ignore_ascii_case(name))
            && value
                .get(..name.len() + 1)
                .is_some_and(|start| start.eq_ignore_ascii_case(&format!("{name}:")))
    })?;
    let mended_value = value[name.len() + 1..].trim_start().to_owned();
    let mended = headers
        .iter()
        .map(|(given, kept)| {
            if given == name {
                (given.clone(), mended_value.clone())
            } else {
                (given.clone(), kept.clone())
            }
        })
        .collect();
    Some(Pasted {
        name: name.clone(),
        saying: format!(
            "header: the value of `{name}` begins with `{name}:` again: its name was pasted into its value; give `-H '{name}: <value>'`"
        ),
        mended,
    })
}

/// A Stripe API key given where the webhook signing secret belongs.
fn api_keys_given(secrets: &[String]) -> Vec<String> {
    secrets
        .iter()
        .filter_map(|secret| {
            let kind = ["sk_", "rk_", "pk_"]
                .into_iter()
                .find(|prefix| secret.starts_with(prefix))?;
            Some(format!(
                "secret: `{kind}…` is a Stripe API key, not a webhook signing secret; the signing secret is the `whsec_…` shown on the endpoint's page (Workbench, Webhooks)"
            ))
        })
        .collect()
}

impl Rejected<'_> {
    /// A verifier for `scheme` with `secrets` that checks no timestamp: the
    /// question is which bytes were signed, not when. `None` when a secret
    /// does not fit the scheme (a `whpk_` key for GitHub, say).
    fn verifier(&self, scheme: &Scheme, secrets: &[Secret<'_>]) -> Option<Verifier> {
        let mut builder = Verifier::builder(scheme.clone())
            .insecure_skip_timestamp_check()
            .with_body_limit(self.body_limit.saturating_mul(3));
        for secret in secrets {
            builder = match secret {
                Secret::Text(text) => builder.with_secret(text),
                Secret::Bytes(bytes) => builder.with_secret_bytes(bytes),
            }
            .ok()?;
        }
        builder.build().ok()
    }

    /// The signature matches as received: only the timestamp failed.
    fn signature_is_fine(&self) -> String {
        let reason = match self.error {
            VerifyError::MalformedHeader { reason, .. } => Some(*reason),
            _ => None,
        };
        if reason == Some(Malformed::TimestampInMilliseconds) {
            "signature matches: over the timestamp as sent, which counts milliseconds (the \
             sender signs and sends milliseconds); the sender must sign and send seconds since \
             the epoch, the unit of this scheme"
                .to_owned()
        } else {
            "signature matches: only the timestamp check failed (to check a captured request, \
             pass --now with the time it arrived, or --ignore-timestamp)"
                .to_owned()
        }
    }
}

/// Whether `verifier` accepts the request (it checks no timestamp).
fn accepts(verifier: &Verifier, headers: &[(String, String)], body: &[u8]) -> bool {
    verifier.verify_at(headers, body, UNIX_EPOCH).is_ok()
}

/// The candidates tried so far, and those that matched.
struct Search<'r, 'a> {
    request: &'r Rejected<'a>,
    /// The verifier `verify` used, timestamps unchecked.
    as_given: Verifier,
    findings: Vec<String>,
    /// The kinds of mistake tried, for the `no match` line.
    tried: Vec<&'static str>,
}

impl Search<'_, '_> {
    /// The body as the sender may have signed it.
    fn bodies(&mut self) {
        let request = self.request;
        let mut seen: Vec<Vec<u8>> = vec![request.body.to_vec()];
        for (kind, candidates) in [
            ("a trailing newline", newline_candidates(request.body)),
            ("line endings", line_ending_candidates(request.body)),
            ("JSON re-serialized", json_candidates(request.body)),
            ("URL encoding", url_candidates(request.body)),
        ] {
            if !candidates.is_empty() {
                self.tried.push(kind);
            }
            for (body, finding) in candidates {
                if seen.contains(&body) {
                    continue;
                }
                if accepts(&self.as_given, request.headers, &body) {
                    self.findings.push(finding);
                }
                seen.push(body);
            }
        }
    }

    /// Each secret as the sender may have used it.
    fn secrets(&mut self) {
        let request = self.request;
        let decodes = matches!(request.scheme.name(), "standard" | "svix");
        self.tried.push("the secret's form");
        for (index, text) in request.secrets.iter().enumerate() {
            let which = match request.secrets.len() {
                1 => "the secret".to_owned(),
                _ => format!("secret {}", index + 1),
            };
            for (bytes, finding) in secret_candidates(text, decodes, &which) {
                let verifier = request.verifier(&request.scheme, &[Secret::Bytes(bytes)]);
                if verifier.is_some_and(|v| accepts(&v, request.headers, request.body)) {
                    self.findings.push(finding);
                }
            }
        }
    }

    /// The timestamp in the other unit.
    fn timestamps(&mut self) {
        let request = self.request;
        let Some(stamp) = timestamp_at(&request.scheme, request.custom_timestamp_header) else {
            return;
        };
        let Some(sent) = stamp.read(request.headers) else {
            return;
        };
        let signed_over = |timestamp: &str| {
            let headers = stamp.replace(request.headers, timestamp);
            accepts(&self.as_given, &headers, request.body)
        };
        let place = stamp.describe();
        self.tried.push("a timestamp in milliseconds");
        // Milliseconds since 1973 have 12 digits or more; seconds until
        // 5138 have 11 or fewer.
        if sent.len() >= 12 {
            let seconds = &sent[..sent.len() - 3];
            if signed_over(seconds) {
                self.findings.push(format!(
                    "the timestamp as {seconds}, in seconds, where {place} has {sent}, in \
                     milliseconds (the sender signed seconds but sent milliseconds): send the \
                     seconds that were signed"
                ));
            }
        } else if let Some(signed) = (0..1000)
            .map(|millis| format!("{sent}{millis:03}"))
            .find(|candidate| signed_over(candidate))
        {
            self.findings.push(format!(
                "the timestamp as {signed}, in milliseconds, where {place} has {sent}, in \
                 seconds (the sender signed milliseconds but sent seconds): the sender must \
                 sign the seconds it sends"
            ));
        }
    }

    /// The signed URL as the provider may have it: behind a proxy or a
    /// load balancer the URL a request reaches is not the one configured
    /// in the provider's console, which is the one it signs.
    fn urls(&mut self, given: &[Secret<'_>]) {
        let request = self.request;
        let Some(url) = request.signed_url else {
            return;
        };
        let rebuild = |url: &str| match request.scheme.name() {
            "square" => Scheme::square(url).ok(),
            "twilio" => Scheme::twilio(url).ok(),
            _ => None,
        };
        if rebuild(url).is_none() {
            return;
        }
        self.tried.push("the signed URL");
        for (candidate, change) in url_variants(url) {
            let verifier = rebuild(&candidate).and_then(|scheme| request.verifier(&scheme, given));
            if verifier.is_some_and(|v| accepts(&v, request.headers, request.body)) {
                self.findings.push(format!(
                    "--signed-url {candidate} ({change}; the provider signs the URL configured \
                     in its console, not the one a proxy or load balancer passes on): give \
                     the URL exactly as the provider's console shows it"
                ));
            }
        }
        // Twilio adds `bodySHA256=` to the URL of a JSON request: copied
        // from the request, it is counted twice.
        if request.scheme.name() == "twilio"
            && let Some(without) = without_body_digest(url)
        {
            let verifier = rebuild(&without).and_then(|scheme| request.verifier(&scheme, given));
            if verifier.is_some_and(|v| accepts(&v, request.headers, request.body)) {
                self.findings.push(format!(
                    "--signed-url {without} (the URL given carries the `bodySHA256=` that \
                     Twilio adds to the URL it signs for a JSON body, so it was counted twice): \
                     give the URL as configured in Twilio's console, without it"
                ));
            }
        }
    }

    /// Every other built-in scheme.
    fn schemes(&mut self, given: &[Secret<'_>]) {
        let request = self.request;
        self.tried.push("the other schemes");
        let current = request.scheme.name();
        // GitHub and Meta sign alike: one line names every scheme that
        // would match.
        let matching: Vec<&str> = SCHEMES
            .iter()
            .copied()
            .filter(|name| *name != current)
            .filter(|name| {
                let scheme = Scheme::by_name(name).expect("SCHEMES are the library's names");
                let verifier = request.verifier(&scheme, given);
                verifier.is_some_and(|v| accepts(&v, request.headers, request.body))
            })
            .collect();
        if let Some(first) = matching.first() {
            self.findings.push(format!(
                "--scheme {} instead of --scheme {current} (the request is signed the {first} \
                 way)",
                matching.join(" or --scheme ")
            ));
        }
    }
}

/// `url` without its `bodySHA256` query parameters, if it has any.
fn without_body_digest(url: &str) -> Option<String> {
    let (base, query) = url.split_once('?')?;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| pair.split('=').next() != Some("bodySHA256"))
        .collect();
    if kept.len() == query.split('&').count() {
        return None;
    }
    let kept = kept.join("&");
    Some(if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{kept}")
    })
}

/// URLs a provider may have signed where `url` was given, each with how
/// it differs: the other scheme, a trailing slash, no query, no `www.`.
fn url_variants(url: &str) -> Vec<(String, &'static str)> {
    let mut variants = Vec::new();
    let parts = url.split_once("://");
    if let Some((scheme, rest)) = parts {
        match scheme.to_ascii_lowercase().as_str() {
            "http" => variants.push((format!("https://{rest}"), "https, not http")),
            "https" => variants.push((format!("http://{rest}"), "http, not https")),
            _ => {}
        }
    }
    let (before_query, query) = match url.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (url, None),
    };
    let with_query = |path: &str| match query {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    };
    match before_query.strip_suffix('/') {
        Some(trimmed) => variants.push((with_query(trimmed), "without the trailing slash")),
        None => variants.push((
            with_query(&format!("{before_query}/")),
            "with a trailing slash",
        )),
    }
    if query.is_some() {
        variants.push((before_query.to_owned(), "without the query"));
    }
    // `www.` goes on the host, after any user information.
    if let Some((scheme, rest)) = parts {
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let host_at = rest[..authority_end].rfind('@').map_or(0, |at| at + 1);
        let (user, host) = rest.split_at(host_at);
        match host
            .get(..4)
            .filter(|prefix| prefix.eq_ignore_ascii_case("www."))
        {
            Some(_) => {
                variants.push((format!("{scheme}://{user}{}", &host[4..]), "without `www.`"))
            }
            None => variants.push((format!("{scheme}://{user}www.{host}"), "with `www.`")),
        }
    }
    variants
}

/// Bodies the sender may have signed, each with what happened to it.
type Candidates = Vec<(Vec<u8>, String)>;

fn newline_candidates(body: &[u8]) -> Candidates {
    // A body with CRLF line endings gains or loses "\r\n", others "\n".
    let crlf = body.windows(2).any(|pair| pair == b"\r\n");
    let (newline, shown): (&[u8], _) = if crlf {
        (b"\r\n", "\\r\\n")
    } else {
        (b"\n", "\\n")
    };
    let mut candidates = Vec::new();
    if let Some(trimmed) = body.strip_suffix(newline) {
        let finding = format!(
            "body had a trailing newline added (the sender signed it without the \"{shown}\" \
             at the end): verify the bytes as received; an editor or `echo` adds one to a \
             saved body"
        );
        candidates.push((trimmed.to_vec(), finding));
    }
    let finding = format!(
        "body had a trailing newline removed (the sender signed the body with \"{shown}\" at \
         the end): verify the bytes as received, before anything trims them"
    );
    candidates.push(([body, newline].concat(), finding));
    candidates
}

fn line_ending_candidates(body: &[u8]) -> Candidates {
    let (mut lf, mut crlf) = (Vec::new(), Vec::new());
    let mut previous = None;
    for &byte in body {
        if byte == b'\n' {
            if previous == Some(b'\r') {
                lf.pop();
            } else {
                crlf.push(b'\r');
            }
        }
        lf.push(byte);
        crlf.push(byte);
        previous = Some(byte);
    }
    let both = [(lf, "LF", "CRLF", "\\n"), (crlf, "CRLF", "LF", "\\r\\n")];
    let changed = both.into_iter().filter(|(signed, ..)| signed != body);
    let finding = |from, to, shown| {
        format!(
            "body had its line endings changed from {from} to {to} (the sender signed \
             \"{shown}\" line endings): read the body as bytes, not as text"
        )
    };
    changed
        .map(|(signed, from, to, shown)| (signed, finding(from, to, shown)))
        .collect()
}

fn json_candidates(body: &[u8]) -> Candidates {
    let written = [
        (reformat(body, CompactFormatter), "compact, with no spaces"),
        (
            reformat(body, PrettyFormatter::new()),
            "pretty-printed, indented by 2 spaces",
        ),
        (
            reformat(body, SpacedFormatter),
            "with \", \" and \": \" between items, as Python's json.dumps writes it",
        ),
    ];
    let changed = written
        .into_iter()
        .filter_map(|(json, how)| Some((json.filter(|json| json != body)?, how)));
    let finding = |how| {
        format!(
            "body was re-serialized as JSON (the sender signed it {how}): verify the raw \
             body, before parsing it"
        )
    };
    changed.map(|(json, how)| (json, finding(how))).collect()
}

/// Whether `body` is JSON whose objects' keys are all in alphabetical
/// order, with enough keys (three, two in one object) that a sender's own
/// order would rarely be that by chance.
fn keys_in_alphabetical_order(body: &[u8]) -> bool {
    fn count(value: &serde_json::Value, keys: &mut usize, widest: &mut usize) {
        match value {
            serde_json::Value::Object(map) => {
                *keys += map.len();
                *widest = (*widest).max(map.len());
                map.values().for_each(|value| count(value, keys, widest));
            }
            serde_json::Value::Array(items) => {
                items.iter().for_each(|value| count(value, keys, widest))
            }
            _ => {}
        }
    }
    let Some(as_sent) = reformat(body, CompactFormatter) else {
        return false;
    };
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    let (mut keys, mut widest) = (0, 0);
    count(&value, &mut keys, &mut widest);
    value.sort_all_objects();
    keys >= 3 && widest >= 2 && serde_json::to_vec(&value).is_ok_and(|sorted| sorted == as_sent)
}

/// The JSON document `body` written again by `formatter`, keys in their
/// order; `None` when `body` is not one JSON document.
fn reformat(body: &[u8], formatter: impl Formatter) -> Option<Vec<u8>> {
    let mut reader = serde_json::Deserializer::from_slice(body);
    let mut out = Vec::with_capacity(body.len() * 2);
    let mut writer = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde_transcode::transcode(&mut reader, &mut writer).ok()?;
    reader.end().ok()?;
    Some(out)
}

/// `{"a": 1, "b": [1, 2]}`: Python's `json.dumps` with its default
/// separators, which many senders sign.
struct SpacedFormatter;

impl Formatter for SpacedFormatter {
    fn begin_array_value<W: ?Sized + Write>(&mut self, out: &mut W, first: bool) -> io::Result<()> {
        out.write_all(if first { b"" } else { b", " })
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, out: &mut W, first: bool) -> io::Result<()> {
        self.begin_array_value(out, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, out: &mut W) -> io::Result<()> {
        out.write_all(b": ")
    }
}

fn url_candidates(body: &[u8]) -> Candidates {
    let mut candidates = Vec::new();
    if body.iter().any(|byte| matches!(byte, b'%' | b'+')) {
        let spaced: Vec<u8> = body
            .iter()
            .map(|&byte| if byte == b'+' { b' ' } else { byte })
            .collect();
        let decoded: Vec<u8> = percent_decode(&spaced).collect();
        candidates.push((
            decoded,
            "body was URL-encoded after signing (the sender signed the decoded text): \
             verify the body before anything encodes it"
                .to_owned(),
        ));
    }
    // As a form: `name=value` pairs joined by `&`, each side encoded.
    let encode = |part: &[u8]| percent_encode(part, FORM).to_string().replace("%20", "+");
    let pairs = body.split(|byte| *byte == b'&');
    let pairs = pairs.map(|pair| pair.splitn(2, |byte| *byte == b'=').map(encode));
    let encoded = pairs.map(|parts| parts.collect::<Vec<_>>().join("="));
    candidates.push((
        encoded.collect::<Vec<_>>().join("&").into_bytes(),
        "body was URL-decoded (the sender signed it form-encoded): verify the raw body, \
         not what a form parser gives"
            .to_owned(),
    ));
    candidates
}

/// Keys the sender may have used for the secret given as `text`, each with
/// what it did; `decodes` when the scheme reads secrets as base64.
fn secret_candidates(text: &str, decodes: bool, which: &str) -> Vec<(Zeroizing<Vec<u8>>, String)> {
    let key = |bytes: &[u8]| Zeroizing::new(bytes.to_vec());
    let rest = text.strip_prefix("whsec_");
    let mut candidates = Vec::new();
    if text.starts_with("whpk_") || text.starts_with("whsk_") {
        // ed25519 keys have no other reading.
    } else if decodes {
        let fix = "the sender must key its HMAC with the base64-decoded bytes after `whsec_`";
        let finding = format!(
            "{which} used as text, not base64-decoded (the sender keys its HMAC with the \
             secret's characters): {fix}"
        );
        candidates.push((key(text.as_bytes()), finding));
        if let Some(rest) = rest {
            let finding = format!(
                "{which} used as text without its `whsec_` prefix, not base64-decoded (the \
                 sender keys its HMAC with the characters after `whsec_`): {fix}"
            );
            candidates.push((key(rest.as_bytes()), finding));
        }
    } else {
        candidates.push(match rest {
            Some(rest) => (
                key(rest.as_bytes()),
                format!(
                    "{which} without its `whsec_` prefix (the sender keys its HMAC with the \
                     text after `whsec_`): pass --secret without `whsec_`, or have the sender \
                     use the whole secret"
                ),
            ),
            None => (
                key(&[b"whsec_", text.as_bytes()].concat()),
                format!(
                    "{which} with a `whsec_` prefix (the sender keys its HMAC with `whsec_` and \
                     then this text): pass --secret with `whsec_` in front"
                ),
            ),
        });
        let encoded = rest.unwrap_or(text).trim_end_matches('=');
        if let Some(decoded) = STANDARD_NO_PAD
            .decode(encoded)
            .ok()
            .filter(|d| !d.is_empty())
        {
            let finding = format!(
                "{which} base64-decoded (the sender keys its HMAC with the decoded bytes): this \
                 scheme uses the secret's text as it is, so the sender must too"
            );
            candidates.push((Zeroizing::new(decoded), finding));
        }
    }
    candidates
}

/// Where `scheme` reads its timestamp; `None` when it reads none.
fn timestamp_at<'a>(scheme: &'a Scheme, custom: Option<&'a str>) -> Option<Stamp<'a>> {
    let (header, field) = match scheme.name() {
        "standard" => ("webhook-timestamp", false),
        "svix" => ("svix-timestamp", false),
        "slack" => ("x-slack-request-timestamp", false),
        "zoom" => ("x-zm-request-timestamp", false),
        "discord" => ("x-signature-timestamp", false),
        "sendgrid" => ("x-twilio-email-event-webhook-timestamp", false),
        "stripe" | "convoy" | "hook0" => (scheme.signature_header(), true),
        // Paddle's `ts=` sits among `;` fields and Twitch writes a date:
        // neither is a count of seconds to read as milliseconds.
        "github" | "shopify" | "shopify-events" | "meta" | "square" | "twilio" | "outpost"
        | "paddle" | "twitch" | "x" => {
            return None;
        }
        _ => (custom?, false),
    };
    Some(Stamp { header, field })
}

impl Stamp<'_> {
    /// The timestamp's digits, when its header appears once and holds some.
    fn read<'h>(&self, headers: &'h [(String, String)]) -> Option<&'h str> {
        let mut values = headers.iter().filter(|(name, _)| self.is(name));
        let (_, value) = values.next().filter(|_| values.next().is_none())?;
        let mut fields = value.split(',').filter_map(|f| f.trim().strip_prefix("t="));
        let text = if self.field { fields.next()? } else { value };
        Some(text).filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
    }

    fn is(&self, name: &str) -> bool {
        name.eq_ignore_ascii_case(self.header)
    }

    /// `headers` with the timestamp replaced by `timestamp`.
    fn replace(&self, headers: &[(String, String)], timestamp: &str) -> Vec<(String, String)> {
        let stamped = |field: &str| match field.trim().strip_prefix("t=") {
            Some(_) => format!("t={timestamp}"),
            None => field.to_owned(),
        };
        let header = |(name, value): &(String, String)| {
            let value = match (self.is(name), self.field) {
                (false, _) => value.clone(),
                (true, false) => timestamp.to_owned(),
                (true, true) => value.split(',').map(stamped).collect::<Vec<_>>().join(","),
            };
            (name.clone(), value)
        };
        headers.iter().map(header).collect()
    }

    fn describe(&self) -> String {
        if self.field {
            format!("the `t=` field of `{}`", self.header)
        } else {
            format!("`{}`", self.header)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::url_variants;

    #[test]
    fn url_variants_change_one_thing_each_and_keep_user_information() {
        let variants: Vec<String> = url_variants("HTTPS://user@example.com/in?a=1")
            .into_iter()
            .map(|(url, _)| url)
            .collect();
        assert_eq!(
            variants,
            [
                "http://user@example.com/in?a=1",
                "HTTPS://user@example.com/in/?a=1",
                "HTTPS://user@example.com/in",
                "HTTPS://user@www.example.com/in?a=1",
            ]
        );
        let bare: Vec<String> = url_variants("example.com/in")
            .into_iter()
            .map(|(url, _)| url)
            .collect();
        assert_eq!(bare, ["example.com/in/"], "no scheme: only the slash");
        let www = url_variants("https://WWW.example.com/");
        assert_eq!(www.last().unwrap().0, "https://example.com/");
        for odd in [
            "",
            "https://",
            "https://@",
            "https://a@b@c/x",
            "https://hé/ü?ä",
        ] {
            let _ = url_variants(odd);
        }
    }
}
