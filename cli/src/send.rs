//! `hooklatch send`: one event delivered with the library's sender,
//! printing every attempt.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use hooklatch::sender::guard::{Forbidden, IpNet, check_address, check_url};
use hooklatch::sender::outbox::{DeliveryState, DisableReason};
use hooklatch::sender::rules::{Attempt, Final, Jitter, Schedule, WaitReason};
use hooklatch::sender::{
    AddressPolicy, AnyOutbox, DispatchError, Dispatcher, Endpoint, HttpTransport, Policy,
    deliver_observed,
};
use hooklatch::verify::Signer;

use crate::{SchemeArgs, UsageError, default_id, read_body};

#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    #[command(flatten)]
    scheme: SchemeArgs,
    /// Where to POST the event.
    #[arg(long)]
    url: String,
    #[command(flatten)]
    secrets: crate::SecretArgs,
    /// Event id [default: msg_ followed by the current time in hex].
    #[arg(long)]
    id: Option<String>,
    /// File holding the body, or `-` for standard input.
    #[arg(long)]
    body_file: String,
    /// A preset (svix, nine-over-three-days, five-retries-over-ten-hours,
    /// seven-over-a-day, exponential) or the delays before each attempt,
    /// such as `0,200ms,1s,5m` (a bare number is seconds).
    #[arg(long, default_value = "0,1s,5s,30s")]
    schedule: String,
    /// Time allowed for each attempt, such as `10s` [default: 15s, or the
    /// preset's].
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Allow loopback and private addresses (your own machine or network).
    /// Cloud metadata addresses stay refused.
    #[arg(long)]
    allow_private: bool,
    /// Allow this CIDR range, such as `10.20.0.0/16`, whatever its class
    /// (repeat for several).
    #[arg(long = "allow-range", value_name = "CIDR")]
    allow_ranges: Vec<IpNet>,
    /// Refuse this CIDR range, even where allowed otherwise (repeat for
    /// several).
    #[arg(long = "deny-range", value_name = "CIDR")]
    deny_ranges: Vec<IpNet>,
    /// Send through this HTTP proxy, which then resolves names and
    /// enforces egress (IP literals are still checked here).
    #[arg(long, value_name = "URL")]
    egress_proxy: Option<String>,
    /// Keep the delivery in this outbox (`sqlite:PATH`, `postgres://…`,
    /// `redis://…`) and deliver it from there, as a dispatcher does:
    /// `hooklatch outbox` and `console` then show it and its attempts.
    /// The secret is not written to the store. While it runs, this command
    /// is one of the store's dispatchers (it also sends what is due to the
    /// endpoints saved there). Needs --endpoint.
    #[arg(long, value_name = "STORE", requires = "endpoint")]
    outbox: Option<String>,
    /// The endpoint's name in the outbox, such as `acme-orders`.
    #[arg(long, requires = "outbox", value_parser = endpoint_name)]
    endpoint: Option<String>,
}

/// `--endpoint`: a name the outbox can keep.
fn endpoint_name(text: &str) -> Result<String, String> {
    hooklatch::sender::outbox::validate_endpoint_name(text)
        .map(|()| text.to_owned())
        .map_err(|error| error.to_string())
}

pub(crate) fn send(args: SendArgs) -> Result<ExitCode, UsageError> {
    let signer = Signer::new(args.scheme.scheme()?, &args.secrets.secrets()?)
        .map_err(crate::secret_error)?;
    let body = read_body(&args.body_file)?;
    let mut policy = policy(&args.schedule)?;
    if let Some(timeout) = args.timeout {
        policy = policy.with_attempt_timeout(timeout);
    }
    let mut addresses = if args.allow_private {
        AddressPolicy::strict()
            .insecure_allow_loopback()
            .insecure_allow_private()
    } else {
        AddressPolicy::strict()
    };
    for range in args.allow_ranges.iter().copied() {
        addresses = addresses.insecure_allow_range(range);
    }
    for range in args.deny_ranges.iter().copied() {
        addresses = addresses.with_denied_range(range);
    }
    let id = args.id.clone().unwrap_or_else(default_id);
    // An id the scheme cannot sign is the flag's fault: said now, not as
    // a failed first attempt.
    if let Err(error) = signer.sign(&id, std::time::SystemTime::now(), &body) {
        return Err(UsageError(format!("--id `{id}`: {error}")));
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        refuse_forbidden(&args.url, &addresses, args.egress_proxy.is_some()).await?;
        let mut transport = HttpTransport::builder(addresses)
            .with_connect_timeout(policy.connect_timeout())
            .with_attempt_timeout(policy.attempt_timeout());
        if let Some(proxy) = &args.egress_proxy {
            transport = transport
                .with_egress_proxy(proxy)
                .map_err(|error| format!("--egress-proxy `{proxy}`: {error}"))?;
        }
        let transport = transport.build()?;
        if let (Some(spec), Some(name)) = (&args.outbox, &args.endpoint) {
            let Some(store) = crate::outbox::open_or_say(spec, "--outbox").await? else {
                return Ok(ExitCode::FAILURE);
            };
            let sending = Sending {
                url: &args.url,
                id: &id,
                body: &body,
            };
            return through_outbox(store, transport, name, signer, policy, sending).await;
        }
        let endpoint = Endpoint::new(&args.url, signer);
        let schedule = policy.schedule();
        let attempts = schedule.attempts();
        println!(
            "sending {id} to {} ({attempts} {} over {})",
            args.url,
            plural(attempts, "attempt"),
            human(schedule.window())
        );
        let record = deliver_observed(
            &transport,
            &endpoint,
            &policy,
            (&id, &body),
            fastrand::f64,
            |attempt| print_attempt(attempt, "the open breaker"),
        )
        .await;
        Ok(ended(record.outcome, record.attempts.len()))
    })
}

/// What is sent, and where.
struct Sending<'a> {
    url: &'a str,
    id: &'a str,
    body: &'a [u8],
}

/// `--outbox`: the delivery stored in the outbox and delivered from there
/// by a dispatcher in this process, printing each attempt as the store
/// records it, until it is delivered, dead or gone.
async fn through_outbox(
    store: AnyOutbox,
    transport: HttpTransport,
    name: &str,
    signer: Signer,
    policy: Policy,
    sending: Sending<'_>,
) -> Result<ExitCode, UsageError> {
    let Sending { url, id, body } = sending;
    let dispatcher = Dispatcher::new(store, transport).with_poll_interval(POLL);
    let schedule = policy.schedule();
    let (attempts, window) = (schedule.attempts(), schedule.window());
    // Past this the delivery is left pending in the outbox: the schedule,
    // each attempt's time limit, and a margin for the polling.
    let deadline = tokio::time::Instant::now()
        + window
        + policy.attempt_timeout() * attempts
        + Duration::from_secs(60);
    let failed = |error: DispatchError| {
        eprintln!("hooklatch: {error}");
        Ok(ExitCode::FAILURE)
    };
    // A saved endpoint of that name is a service's: this command's route
    // would replace it in this process.
    if let Err(error) = dispatcher.refresh_endpoints().await {
        return failed(error);
    }
    if dispatcher.endpoints().iter().any(|saved| saved == name) {
        return Err(UsageError(format!(
            "--endpoint {name}: the outbox has an endpoint saved under that name (a service's); \
             give the CLI's sends a name of their own"
        )));
    }
    // Added, not saved: the secret stays out of the store.
    if let Err(error) = dispatcher.add_endpoint(name, url, signer, policy).await {
        return failed(error);
    }
    let disabled = |reason: DisableReason| {
        let why = match reason {
            DisableReason::Gone => "it answered 410 Gone".to_owned(),
            DisableReason::NoSuccessFor(after) => format!("no success for {}", human(after)),
            DisableReason::Manual => "an operator disabled it".to_owned(),
            other => format!("{other:?}"),
        };
        eprintln!(
            "hooklatch: endpoint {name} is disabled ({why}), so nothing is sent to it: \
             `hooklatch outbox enable --endpoint {name}` sends its deliveries again"
        );
        Ok(ExitCode::FAILURE)
    };
    if let Ok(Some(reason)) = dispatcher.disabled(name) {
        return disabled(reason);
    }
    match dispatcher.send(name, id, body).await {
        Ok(true) => {}
        Ok(false) => {
            eprintln!(
                "hooklatch: the outbox already has delivery {id} for endpoint {name}: nothing \
                 sent (`hooklatch outbox attempts --endpoint {name}` shows it, `outbox replay` \
                 sends it again once dead)"
            );
            return Ok(ExitCode::FAILURE);
        }
        Err(error) => return failed(error),
    }
    println!(
        "sending {id} to {url} through the outbox, endpoint {name} ({attempts} {} over {})",
        plural(attempts, "attempt"),
        human(window)
    );
    let running = dispatcher.start();
    let mut shown = 0;
    let mut store_errors = 0;
    let delivery = loop {
        match dispatcher.delivery(name, id).await {
            Ok(Some(delivery)) => {
                store_errors = 0;
                for attempt in delivery.attempts.iter().skip(shown) {
                    print_attempt(attempt, "the dispatcher's polling or the open breaker");
                }
                shown = delivery.attempts.len();
                if delivery.state != DeliveryState::Pending {
                    break delivery;
                }
            }
            Ok(None) => {
                running.stop().await;
                eprintln!("hooklatch: delivery {id} left the outbox while being sent");
                return Ok(ExitCode::FAILURE);
            }
            // A store that fails now and then: the dispatcher retries too.
            Err(error) if store_errors < 10 => {
                store_errors += 1;
                eprintln!("hooklatch: cannot read the delivery yet: {error}");
            }
            Err(error) => {
                running.stop().await;
                return failed(error);
            }
        }
        // Disabled while pending (no success for too long): it would wait
        // for an enable.
        if let Ok(Some(reason)) = dispatcher.disabled(name) {
            running.stop().await;
            return disabled(reason);
        }
        if tokio::time::Instant::now() > deadline {
            running.stop().await;
            eprintln!(
                "hooklatch: delivery {id} is still pending past its schedule; it stays in the \
                 outbox (`hooklatch outbox attempts --endpoint {name}`)"
            );
            return Ok(ExitCode::FAILURE);
        }
        tokio::time::sleep(POLL).await;
    };
    running.stop().await;
    let outcome = match delivery.state {
        DeliveryState::Delivered => Final::Delivered,
        DeliveryState::Gone => Final::Gone,
        _ => Final::Dead,
    };
    Ok(ended(outcome, delivery.attempts.len()))
}

/// How often `--outbox` looks at the delivery, and the dispatcher for
/// what is due.
const POLL: Duration = Duration::from_millis(50);

/// `1 attempt`, `2 attempts`.
fn plural(count: impl Into<u64>, word: &str) -> String {
    let count = count.into();
    if count == 1 {
        word.to_owned()
    } else {
        format!("{word}s")
    }
}

/// The last line and the exit code for a delivery that ended in `outcome`
/// after `count` attempts.
fn ended(outcome: Final, count: usize) -> ExitCode {
    let attempts = format!(
        "{count} {}",
        plural(u64::try_from(count).unwrap_or(u64::MAX), "attempt")
    );
    match outcome {
        Final::Delivered => {
            println!("delivered after {attempts}");
            ExitCode::SUCCESS
        }
        Final::Gone => {
            println!("gone: the endpoint answered 410; a sender disables it");
            ExitCode::from(1)
        }
        // Dead (out of attempts or a give-up status), or an ending this
        // command does not know yet: not delivered either way.
        _ => {
            println!("abandoned after {attempts}");
            ExitCode::from(1)
        }
    }
}

/// Checks the URL as the transport will (the same parse), then resolves a
/// host name now and refuses a forbidden address with a clear message; the
/// transport checks again at connect time. Behind an egress proxy, names
/// are the proxy's to resolve.
async fn refuse_forbidden(
    text: &str,
    addresses: &AddressPolicy,
    proxied: bool,
) -> Result<(), UsageError> {
    let url = check_url(text, addresses).map_err(|forbidden| match forbidden {
        Forbidden::NotHttp => UsageError(format!(
            "--url `{text}`: use an http:// or https:// URL with a host"
        )),
        forbidden => UsageError(format!(
            "refusing to send to {text}: its host is a {forbidden}; {}",
            hint(forbidden)
        )),
    })?;
    let Some(host) = url.domain().filter(|_| !proxied) else {
        return Ok(());
    };
    let port = url.port_or_known_default().unwrap_or(80);
    // A name that does not resolve now is left to the attempts.
    let Ok(resolved) = tokio::net::lookup_host((host, port)).await else {
        return Ok(());
    };
    for address in resolved {
        let ip = address.ip();
        if let Err(forbidden) = check_address(ip, addresses) {
            return Err(UsageError(format!(
                "refusing to send to {text}: {host} ({ip}) is a {forbidden}; {}",
                hint(forbidden)
            )));
        }
    }
    Ok(())
}

/// What lets a send through to a `forbidden` address, if anything does.
fn hint(forbidden: Forbidden) -> &'static str {
    match forbidden {
        Forbidden::Metadata => {
            "cloud metadata addresses are refused whatever the flags, --allow-private and --allow-range included"
        }
        Forbidden::Denied => "a --deny-range names it",
        Forbidden::Loopback | Forbidden::Private => {
            "pass --allow-private (or --allow-range with its range) to send to your own machine or network"
        }
        _ => "pass --allow-range with its range to allow it",
    }
}

/// Prints one attempt; `held_by` says what can hold an attempt past its
/// time (`--outbox`'s dispatcher polls too).
fn print_attempt(attempt: &Attempt, held_by: &str) {
    let mut line = format!("attempt {}", attempt.number);
    if attempt.number > 1 {
        let why = match attempt.reason {
            WaitReason::RetryAfter => "Retry-After",
            _ => "schedule",
        };
        line.push_str(&format!(" after {} ({why})", human(attempt.waited)));
    }
    if attempt.held >= Duration::from_millis(1) {
        line.push_str(&format!(", held {} by {held_by}", human(attempt.held)));
    }
    match &attempt.result {
        Ok(status) => line.push_str(&format!(": {status}")),
        Err(error) => line.push_str(&format!(": error: {error}")),
    }
    line.push_str(&format!(" in {}", human(attempt.duration)));
    println!("{line}");
}

/// The policy for `--schedule`.
fn policy(schedule: &str) -> Result<Policy, UsageError> {
    Ok(match schedule {
        "svix" => Policy::svix(),
        "nine-over-three-days" => Policy::nine_attempts_over_three_days(),
        "five-retries-over-ten-hours" => Policy::five_retries_over_ten_hours(),
        "seven-over-a-day" => Policy::seven_attempts_over_a_day(),
        "exponential" => Policy::exponential_to_an_hour(20),
        list => {
            let delays = list
                .split(',')
                .map(|delay| parse_duration(delay.trim()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| format!("--schedule: {error}"))?;
            Policy::new(Schedule::Table {
                delays,
                jitter: Jitter::None,
            })
        }
    })
}

/// `200ms`, `1s`, `5m`, `2h` (any of humantime's forms, such as `1m 30s`),
/// or a bare number of seconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    humantime::parse_duration(text)
        .map_err(|error| format!("`{text}` is not a duration such as 200ms, 1s, 5m or 2h: {error}"))
}

/// A duration as people read it: `250 ms`, `1.5 s`, `5 min`, `2.5 h`.
fn human(duration: Duration) -> String {
    let millis = duration.as_millis();
    let seconds = duration.as_secs_f64();
    if millis < 1000 {
        format!("{millis} ms")
    } else if seconds < 120.0 {
        format!("{seconds:.1} s")
    } else if seconds < 7200.0 {
        format!("{:.1} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}
