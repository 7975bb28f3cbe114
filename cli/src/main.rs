//! `hooklatch`: sign and verify webhooks by hand, to find out why a
//! signature does not match; receive them (`listen`) and send them
//! (`send`) with the library's own receiver and sender.

mod console;
mod explain;
mod inbox;
mod listen;
mod message;
mod outbox;
mod request;
mod send;
mod serve;
mod tail;
mod trigger;

use std::io::Read as _;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Parser, Subcommand, ValueEnum};
use hooklatch::verify::{ConfigError, Encoding, EventKey, Scheme, Signer, Verifier};

#[derive(Debug, Parser)]
#[command(
    name = "hooklatch",
    version,
    about = "Sign, verify, receive and send webhooks by hand"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sign a body and print the headers to send, one `name: value` a line.
    Sign(SignArgs),
    /// Verify a request; exit 0 and print `ok` with the event id, or exit 1
    /// and print the reason (with --explain, also which usual mistake would
    /// have matched).
    Verify(VerifyArgs),
    /// Receive webhooks: verify each, claim its id once, print a line per
    /// request, and optionally pass accepted events on to your app.
    Listen(listen::ListenArgs),
    /// Deliver one signed event with retries, printing every attempt. Exit
    /// 0 when delivered, 1 when abandoned or gone (410), 2 on usage errors.
    Send(send::SendArgs),
    /// Look into an inbox: counts, dead letters, and requeueing them. Exit
    /// 1 when the store fails, 2 on usage errors.
    Inbox(inbox::InboxArgs),
    /// Print events as your receiver accepts them into its store: time,
    /// id, type, status now (waiting, taken, retrying, dead, done), tenant.
    /// Exit 1 when the store cannot be read, 2 on usage errors.
    Tail(tail::TailArgs),
    /// Look into an outbox: endpoints and their health, dead deliveries,
    /// latest attempts; replay, enable and disable. Exit 1 when the store
    /// fails, 2 on usage errors.
    Outbox(outbox::OutboxArgs),
    /// Send a realistic event of a provider (Stripe, GitHub, Shopify, Slack, Hook0,
    /// Standard Webhooks), signed in its scheme with your secret, to your
    /// app once. Exit 0 on a 2xx answer, 1 otherwise, 2 on usage errors.
    Trigger(trigger::TriggerArgs),
    /// Serve the ops console: counts and dead letters per namespace, with
    /// requeueing, and with --outbox the outbox's endpoints, behind a
    /// token.
    Console(console::ConsoleArgs),
}

/// The secrets, in the scheme's form: from flags, files or the
/// environment (at least one; several are all used, as in a rotation).
#[derive(Debug, Args)]
#[group(required = true, multiple = true)]
pub(crate) struct SecretArgs {
    /// A secret (repeat for several). A command line is visible to every
    /// user of the machine (`ps`): prefer --secret-file or
    /// HOOKLATCH_SECRET.
    #[arg(
        long = "secret",
        value_name = "SECRET",
        env = "HOOKLATCH_SECRET",
        hide_env_values = true
    )]
    given: Vec<String>,
    /// A file holding a secret, white space around it ignored (repeat for
    /// several).
    #[arg(long = "secret-file", value_name = "PATH")]
    files: Vec<std::path::PathBuf>,
}

impl SecretArgs {
    /// Every secret given, read from its file where named by one.
    fn secrets(&self) -> Result<Vec<String>, UsageError> {
        let mut secrets = self.given.clone();
        for path in &self.files {
            let text = std::fs::read_to_string(path).map_err(|error| {
                UsageError(format!(
                    "cannot read the secret file {}: {error}",
                    path.display()
                ))
            })?;
            let secret = text.trim();
            if secret.is_empty() {
                return Err(UsageError(format!(
                    "the secret file {} is empty",
                    path.display()
                )));
            }
            secrets.push(secret.to_owned());
        }
        Ok(secrets)
    }
}

#[derive(Debug, Args)]
struct SignArgs {
    #[command(flatten)]
    scheme: SchemeArgs,
    #[command(flatten)]
    secrets: SecretArgs,
    /// Event id [default: msg_ followed by the current time in hex].
    #[arg(long)]
    id: Option<String>,
    /// Timestamp in seconds since the Unix epoch [default: now].
    #[arg(long, value_parser = unix_seconds)]
    timestamp: Option<i64>,
    /// File holding the body, or `-` for standard input.
    #[arg(long)]
    body_file: String,
    /// Print a ready-to-run curl command that POSTs the signed body to
    /// this URL, instead of the headers alone.
    #[arg(long, value_name = "URL")]
    curl: Option<String>,
}

#[derive(Debug, Args)]
struct VerifyArgs {
    #[command(flatten)]
    scheme: SchemeArgs,
    #[command(flatten)]
    secrets: SecretArgs,
    /// A request header, `name: value` (repeat for each header).
    #[arg(short = 'H', long = "header", value_parser = parse_header)]
    headers: Vec<(String, String)>,
    /// File holding the body exactly as received, or `-` for standard input.
    #[arg(long, required_unless_present = "request")]
    body_file: Option<String>,
    /// A raw HTTP/1.1 request as captured (`nc -l`, a proxy's dump), or `-`
    /// for standard input: its request line, headers, a blank line and the
    /// body, instead of -H and --body-file. A `Content-Length` cuts the body
    /// there (an editor's trailing newline is dropped); a chunked body is
    /// joined. Or a curl command: its -H headers and its body (--data-raw,
    /// --data-binary @file, -d, --json).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["headers", "body_file"])]
    request: Option<String>,
    /// Check the timestamp against this time (seconds since the Unix epoch)
    /// instead of now.
    #[arg(long, value_parser = unix_seconds)]
    now: Option<i64>,
    /// Seconds a timestamp may be in the past or the future [default: 300].
    #[arg(long)]
    tolerance: Option<u64>,
    /// Accept any timestamp: only for checking an old, captured request.
    #[arg(long, conflicts_with_all = ["now", "tolerance"])]
    ignore_timestamp: bool,
    /// When rejected, try the usual mistakes (a trailing newline, line
    /// endings, JSON re-serialized, URL encoding, the secret's form, a
    /// timestamp in milliseconds, another scheme; for a message signature,
    /// a scheme, host or path a proxy changed, a changed body, the time)
    /// and print a line for each that would have matched. The exit code
    /// stays 1.
    #[arg(long)]
    explain: bool,
    #[command(flatten)]
    message: MessageArgs,
}

/// `verify` of an HTTP message signature (RFC 9421) instead of a scheme.
#[derive(Debug, Args)]
struct MessageArgs {
    /// Verify an HTTP message signature (RFC 9421, `Signature-Input` and
    /// `Signature`) with this trusted key instead of a scheme: `KEYID=ALG:KEY`,
    /// ALG one of hmac-sha256, ed25519, ecdsa-p256-sha256 (an uncompressed
    /// SEC1 point), KEY in base64 (repeat for several).
    #[arg(
        long = "message-key",
        value_name = "KEYID=ALG:KEY",
        value_parser = message::parse_key,
        conflicts_with = "scheme",
        // Given instead of a secret: it satisfies the secrets' group.
        group = "SecretArgs"
    )]
    keys: Vec<message::KeyArg>,
    /// The request's target: an absolute URL, or a path with the host
    /// from `Host` [default: the --request capture's request line].
    #[arg(long, requires = "keys")]
    url: Option<String>,
    /// The request's method [default: the capture's, else POST].
    #[arg(long, requires = "keys")]
    method: Option<String>,
    /// The URI scheme the client used, for a target without one.
    #[arg(long, default_value = "https", value_parser = ["https", "http"])]
    uri_scheme: String,
    /// A component every signature must cover (repeat for each)
    /// [default: @method, @authority, @path].
    #[arg(long, requires = "keys")]
    require: Vec<String>,
    /// The `tag` a signature must carry.
    #[arg(long, requires = "keys")]
    tag: Option<String>,
}

#[derive(Debug, Args)]
struct SchemeArgs {
    /// Signature scheme.
    #[arg(long, value_enum, default_value = "standard")]
    scheme: SchemeName,
    /// custom: the header carrying the signature.
    #[arg(long, required_if_eq("scheme", "custom"))]
    signature_header: Option<String>,
    /// custom: text before the signature, such as `sha256=`.
    #[arg(long)]
    prefix: Option<String>,
    /// custom: how the signature is encoded.
    #[arg(long, value_enum, default_value = "hex")]
    encoding: EncodingName,
    /// custom: the header carrying the event id.
    #[arg(long)]
    id_header: Option<String>,
    /// custom: the header carrying the timestamp.
    #[arg(long)]
    timestamp_header: Option<String>,
    /// custom: the signed content, from `{id}`, `{timestamp}`, `{body}` and text.
    #[arg(long)]
    template: Option<String>,
    /// square, twilio: the URL the provider signed, exactly as configured
    /// in its console, query included (behind a proxy, not the one the
    /// request reached).
    #[arg(long, required_if_eq_any([("scheme", "square"), ("scheme", "twilio")]))]
    signed_url: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SchemeName {
    Standard,
    Svix,
    Stripe,
    Github,
    Shopify,
    ShopifyEvents,
    Slack,
    Meta,
    Twitch,
    Zoom,
    Paddle,
    Square,
    Twilio,
    Convoy,
    Outpost,
    Discord,
    Sendgrid,
    X,
    Hook0,
    Custom,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum EncodingName {
    Hex,
    Base64,
}

impl SchemeArgs {
    fn scheme(&self) -> Result<Scheme, ConfigError> {
        let name = match self.scheme {
            SchemeName::Standard => "standard",
            SchemeName::Svix => "svix",
            SchemeName::Stripe => "stripe",
            SchemeName::Github => "github",
            SchemeName::Shopify => "shopify",
            SchemeName::ShopifyEvents => "shopify-events",
            SchemeName::Slack => "slack",
            SchemeName::Meta => "meta",
            SchemeName::Twitch => "twitch",
            SchemeName::Zoom => "zoom",
            SchemeName::Paddle => "paddle",
            SchemeName::Convoy => "convoy",
            SchemeName::Outpost => "outpost",
            SchemeName::Discord => "discord",
            SchemeName::Sendgrid => "sendgrid",
            SchemeName::X => "x",
            SchemeName::Hook0 => "hook0",
            SchemeName::Square => {
                return Scheme::square(self.signed_url.as_deref().unwrap_or_default());
            }
            SchemeName::Twilio => {
                return Scheme::twilio(self.signed_url.as_deref().unwrap_or_default());
            }
            SchemeName::Custom => return self.custom(),
        };
        Ok(Scheme::by_name(name).expect("every SchemeName but custom is a provider"))
    }

    fn custom(&self) -> Result<Scheme, ConfigError> {
        let header = self.signature_header.as_deref().unwrap_or_default();
        let mut scheme = Scheme::custom("custom", header)?.with_encoding(match self.encoding {
            EncodingName::Hex => Encoding::Hex,
            EncodingName::Base64 => Encoding::Base64,
        });
        if let Some(prefix) = &self.prefix {
            scheme = scheme.with_prefix(prefix);
        }
        if let Some(name) = &self.id_header {
            scheme = scheme.with_id_header(name)?;
        }
        if let Some(name) = &self.timestamp_header {
            scheme = scheme.with_timestamp_header(name)?;
        }
        if let Some(template) = &self.template {
            scheme = scheme.with_template(template)?;
        }
        Ok(scheme)
    }
}

fn parse_header(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| format!("`{text}` is not `name: value`"))?;
    Ok((name.trim().to_owned(), value.trim().to_owned()))
}

fn read_body(path: &str) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let read = if path == "-" {
        std::io::stdin().read_to_end(&mut body).map(drop)
    } else {
        std::fs::read(path).map(|bytes| body = bytes)
    };
    read.map_err(|error| format!("cannot read body from `{path}`: {error}"))?;
    Ok(body)
}

fn unix_time(seconds: i64) -> SystemTime {
    let magnitude = Duration::from_secs(seconds.unsigned_abs());
    if seconds >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}

/// `--now` and `--timestamp`: seconds since the Unix epoch, as `date +%s`
/// prints them; other forms are named with the fix.
fn unix_seconds(text: &str) -> Result<i64, String> {
    text.trim().parse().map_err(|_| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        format!("`{text}` is not a time in seconds since the Unix epoch, such as {now} (now, as `date +%s` prints it)")
    })
}

/// An event id for when none is given: `msg_` and the time in hex.
fn default_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("msg_{nanos:x}")
}

/// A failure before any signature was examined: bad flags, secrets or files.
struct UsageError(String);

/// The usage error for a `flag` whose URL names no store (`why`), for a
/// command that needs a store other processes share: the list of schemes
/// leaves out the in-process `memory:`, which such a command refuses.
fn no_shared_store(flag: &str, why: &str) -> UsageError {
    UsageError(format!("{flag}: {}", why.replace(" or memory:", "")))
}

/// A store URL as it may be shown in a message: a user and password, and a
/// query or fragment (which may carry a password too), replaced by `***`.
/// A password typed without escaping may hold `/`, `?`, `#` or `@`, so the
/// user-info ends at the last `@`, and the query is looked for after it.
fn shown(spec: &str) -> String {
    let (scheme, rest) = match spec.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), spec),
    };
    let (user_info, place) = match rest.rfind('@') {
        // An `@` in the query (`?user=app@corp&password=...`): where the
        // user-info ends cannot be told, so nothing past the scheme shows.
        Some(at) if !scheme.is_empty() && rest[at + 1..].contains(['=', '&']) => {
            return format!("{scheme}***");
        }
        Some(at) if !scheme.is_empty() => ("***@", &rest[at + 1..]),
        _ => ("", rest),
    };
    let end = place.find(['?', '#']).unwrap_or(place.len());
    let hidden = if end < place.len() { "?***" } else { "" };
    format!("{scheme}{user_info}{}{hidden}", &place[..end])
}

/// The file a `sqlite:` store URL names, when it does not exist: the
/// operator commands look into a store another process writes, and opening
/// a mistyped path would create an empty one and report zeros.
fn missing_sqlite_file(spec: &str) -> Option<&str> {
    let path = spec
        .strip_prefix("sqlite://")
        .or_else(|| spec.strip_prefix("sqlite:"))?;
    let path = path.split('?').next().unwrap_or(path);
    (!path.is_empty() && path != ":memory:" && !std::path::Path::new(path).exists()).then_some(path)
}

/// Says that no store is at `spec` when it is a SQLite file that does not
/// exist; whether it did.
fn said_no_such_store(spec: &str) -> bool {
    let Some(path) = missing_sqlite_file(spec) else {
        return false;
    };
    eprintln!(
        "hooklatch: no store at {path} (--store {}): check the path; a store is \
         created by what writes to it (`hooklatch listen`, your app)",
        shown(spec)
    );
    true
}

/// `--namespace`: a receiver's namespace, or a tenant's in it
/// (`hooks~acme`, as `tenant_namespace` joins them).
fn check_namespace(namespace: &str) -> Result<(), UsageError> {
    hooklatch::dedup::validate_stored_namespace(namespace).map_err(|error| {
        UsageError(format!(
            "--namespace {namespace}: {error} (a tenant's namespace is NAMESPACE~TENANT)"
        ))
    })
}

/// `2026-11-29T17:50:01.123Z`: a time in UTC, to the millisecond.
fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

impl<E: std::fmt::Display> From<E> for UsageError {
    fn from(error: E) -> Self {
        Self(error.to_string())
    }
}

/// A secret the scheme cannot read, said for a command line: the library's
/// advice (pass the key as bytes) names an API no flag has.
fn secret_error(error: ConfigError) -> UsageError {
    match error {
        ConfigError::SecretNotBase64 { prefix } if !prefix.is_empty() => UsageError(format!(
            "a secret is not valid base64 after its `{prefix}` prefix: copy the whole signing secret from the provider's dashboard, `{prefix}` included"
        )),
        ConfigError::SecretNotBase64 { .. } => UsageError(
            "a secret is not valid base64: this scheme's secrets are base64 keys; copy the whole signing secret from the provider's dashboard".into(),
        ),
        error => UsageError(error.to_string()),
    }
}

fn sign(args: SignArgs) -> Result<ExitCode, UsageError> {
    let signer =
        Signer::new(args.scheme.scheme()?, &args.secrets.secrets()?).map_err(secret_error)?;
    let body = read_body(&args.body_file)?;
    let at = args.timestamp.map_or_else(SystemTime::now, unix_time);
    let id = args.id.unwrap_or_else(default_id);
    let headers = signer.sign(&id, at, &body)?;
    let Some(url) = &args.curl else {
        for (name, value) in headers.iter() {
            println!("{name}: {value}");
        }
        return Ok(ExitCode::SUCCESS);
    };
    // The body goes as the file it came from; from standard input it is
    // written into the command (`--data-raw`: a leading `@` is not a file
    // there), which a NUL byte cannot be.
    let data = if args.body_file == "-" {
        let text = std::str::from_utf8(&body)
            .ok()
            .filter(|text| !text.contains('\0'))
            .ok_or_else(|| {
                UsageError(
                    "--curl: the body is not text a command line can carry (NUL bytes, or not \
                     UTF-8); save it to a file and pass --body-file"
                        .into(),
                )
            })?;
        shell_quoted(text)
    } else {
        shell_quoted(&format!("@{}", args.body_file))
    };
    // --globoff: `[]` and `{}` in a query are not curl's globs; --url: a
    // URL is never read as an option.
    let mut command = format!("curl -sS --globoff -X POST --url {}", shell_quoted(url));
    for (name, value) in headers.iter() {
        command.push_str(&format!(
            " \\\n  -H {}",
            shell_quoted(&format!("{name}: {value}"))
        ));
    }
    if serde_json::from_slice::<serde_json::Value>(&body).is_ok() {
        command.push_str(" \\\n  -H 'content-type: application/json'");
    }
    let flag = if args.body_file == "-" {
        "--data-raw"
    } else {
        "--data-binary"
    };
    command.push_str(&format!(" \\\n  {flag} {data}"));
    println!("{command}");
    Ok(ExitCode::SUCCESS)
}

/// `text` as one word for a POSIX shell: in single quotes, each `'` closed,
/// escaped and opened again.
fn shell_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A verifier builder for `scheme` with `secrets` and, if given, a
/// tolerance in seconds: what `verify` and `listen` share.
fn verifier_builder(
    scheme: Scheme,
    secrets: &[String],
    tolerance: Option<u64>,
) -> Result<hooklatch::verify::VerifierBuilder, UsageError> {
    let mut builder = Verifier::builder(scheme);
    for secret in secrets {
        builder = builder.with_secret(secret).map_err(secret_error)?;
    }
    if let Some(seconds) = tolerance {
        builder = builder.with_tolerance(Duration::from_secs(seconds));
    }
    Ok(builder)
}

/// `verify --message-key`: the request line from the flags or the
/// capture, then the message signature checked.
fn verify_message(args: &VerifyArgs) -> Result<ExitCode, UsageError> {
    let (line, (headers, body)) = match (&args.request, &args.body_file) {
        (Some(path), _) => {
            let raw = read_body(path)?;
            let captured =
                request::parse(&raw).map_err(|why| format!("--request {path}: {why}"))?;
            (request::request_line(&raw), captured)
        }
        (None, Some(path)) => (None, (args.headers.clone(), read_body(path)?)),
        (None, None) => return Err(UsageError("give --body-file or --request".into())),
    };
    let target = args
        .message
        .url
        .clone()
        .or_else(|| line.as_ref().map(|(_, target)| target.clone()))
        .ok_or_else(|| {
            UsageError("give --url: a message signature covers the request's target".into())
        })?;
    let method = args
        .message
        .method
        .clone()
        .or_else(|| line.map(|(method, _)| method))
        .unwrap_or_else(|| "POST".to_owned());
    let now = args.now.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
            })
    });
    let check = message::Check {
        keys: &args.message.keys,
        require: &args.message.require,
        tag: args.message.tag.as_deref(),
        method: &method,
        target: &target,
        uri_scheme: &args.message.uri_scheme,
        headers: &headers,
        body: &body,
        now,
        ignore_time: args.ignore_timestamp,
    };
    Ok(if message::verify(&check, args.explain)? {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn verify(args: VerifyArgs) -> Result<ExitCode, UsageError> {
    if !args.message.keys.is_empty() {
        return verify_message(&args);
    }
    let scheme = args.scheme.scheme()?;
    let secrets = args.secrets.secrets()?;
    let mut builder = verifier_builder(scheme.clone(), &secrets, args.tolerance)?;
    if args.ignore_timestamp {
        builder = builder.insecure_skip_timestamp_check();
    }
    let verifier = builder.build()?;
    let (headers, body) = match (&args.request, &args.body_file) {
        (Some(path), _) => {
            request::parse(&read_body(path)?).map_err(|why| format!("--request {path}: {why}"))?
        }
        (None, Some(path)) => (args.headers.clone(), read_body(path)?),
        (None, None) => return Err(UsageError("give --body-file or --request".into())),
    };
    let now = args.now.map_or_else(SystemTime::now, unix_time);
    match verifier.verify_at(&headers, &body, now) {
        Ok(event) => {
            let mut line = String::from("ok");
            if let Some(id) = event.id() {
                line.push_str(&format!(" id={id}"));
                if !event.id_is_signed() {
                    line.push_str(" (unsigned)");
                }
            }
            if let Some(timestamp) = event.timestamp() {
                line.push_str(&format!(" timestamp={timestamp}"));
            }
            line.push_str(&format!(" secret={}", event.key_index() + 1));
            // What a receiver claims the event by (`listen` does the same),
            // where that is not the signed id already shown.
            if let Ok(key) = EventKey::default().key(&verifier, &event)
                && Some(key.as_str()) != event.id().filter(|_| event.id_is_signed())
            {
                line.push_str(&format!(" key={key}"));
            }
            println!("{line}");
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            println!("rejected: {error}");
            if args.explain {
                let rejected = explain::Rejected {
                    scheme,
                    secrets: &secrets,
                    headers: &headers,
                    body: &body,
                    error: &error,
                    custom_timestamp_header: args.scheme.timestamp_header.as_deref(),
                    signed_url: args.scheme.signed_url.as_deref(),
                    body_limit: verifier.body_limit(),
                };
                for line in explain::explain(&rejected) {
                    println!("{line}");
                }
            }
            Ok(ExitCode::from(1))
        }
    }
}

/// Ends the process quietly when its output is closed early (`hooklatch
/// sign | head -1`), as a command killed by `SIGPIPE` does (exit 141),
/// instead of `println!`'s panic. Every other panic is reported as usual.
fn quiet_on_closed_output() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        report(info);
    }));
}

fn main() -> ExitCode {
    quiet_on_closed_output();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Sign(args) => sign(args),
        Command::Verify(args) => verify(args),
        Command::Listen(args) => listen::listen(args),
        Command::Send(args) => send::send(args),
        Command::Inbox(args) => inbox::inbox(args),
        Command::Tail(args) => tail::tail(args),
        Command::Outbox(args) => outbox::outbox(args),
        Command::Console(args) => console::console(args),
        Command::Trigger(args) => trigger::trigger(args),
    };
    outcome.unwrap_or_else(|UsageError(message)| {
        eprintln!("hooklatch: {message}");
        ExitCode::from(2)
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    /// Every subcommand's flags are distinct and well formed: clap checks
    /// this only when a subcommand is first parsed, so a clash (a shared
    /// flag named like one of the subcommand's own) would otherwise
    /// surface as a panic at run time.
    #[test]
    fn a_store_url_is_shown_without_its_password_or_query() {
        use super::shown;
        assert_eq!(
            shown("postgres://app:hunter2@db:5432/hooks"),
            "postgres://***@db:5432/hooks"
        );
        assert_eq!(
            shown("postgres://db/hooks?password=hunter2"),
            "postgres://db/hooks?***"
        );
        assert_eq!(
            shown("redis+cluster://:hunter2@a:7000,b:7000"),
            "redis+cluster://***@a:7000,b:7000"
        );
        assert_eq!(shown("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        // Passwords typed without escaping.
        assert_eq!(
            shown("postgres://app:hun/ter?2@db:5432/hooks"),
            "postgres://***@db:5432/hooks"
        );
        assert_eq!(
            shown("redis://:a#b@c@cache:6379/0"),
            "redis://***@cache:6379/0"
        );
        assert_eq!(shown("postgres://db/hooks#frag"), "postgres://db/hooks?***");
        assert_eq!(
            shown("postgres://db/hooks?user=app@corp&password=hunter2"),
            "postgres://***"
        );
        assert_eq!(shown("sqlite:hooks.db"), "sqlite:hooks.db");
    }

    #[test]
    fn every_subcommands_flags_are_well_formed() {
        super::Cli::command().debug_assert();
    }
}
