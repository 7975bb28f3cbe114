//! `hooklatch outbox`: look into an outbox, replay what failed, and
//! enable or disable an endpoint.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, Subcommand};
use hooklatch::sender::AnyOutbox;
use hooklatch::sender::OutboxError;
use hooklatch::sender::outbox::OutboxView;
use hooklatch::sender::outbox::{DeliveryState, DisableReason, EndpointHealth};

use crate::{UsageError, rfc3339};

#[derive(Debug, Args)]
pub(crate) struct OutboxArgs {
    /// The store: `sqlite:PATH`, `postgres://…`, `redis://…` or
    /// `redis+cluster://host:port,…`.
    #[arg(long, global = true, default_value = "sqlite:hooklatch-outbox.db")]
    store: String,
    /// Print JSON for scripts: one object a line (none for an empty list).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: OutboxCommand,
}

#[derive(Debug, Subcommand)]
enum OutboxCommand {
    /// Every endpoint: health, deliveries by state, and URL when saved.
    Endpoints,
    /// An endpoint's dead deliveries, oldest first, with their last answer.
    Dead {
        #[arg(long)]
        endpoint: String,
        /// How many to show.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// An endpoint's latest attempts, newest first.
    Attempts {
        #[arg(long)]
        endpoint: String,
        /// How many to show.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Send dead (or gone) deliveries again from the start of their
    /// schedule: one (`--id`), or those last tried in a time range.
    Replay {
        #[arg(long)]
        endpoint: String,
        /// The webhook id of one delivery.
        #[arg(long, conflicts_with_all = ["since", "until"], required_unless_present = "since")]
        id: Option<String>,
        /// Start of the range: a UTC time (`2026-11-29T10:00:00Z`,
        /// `2026-11-29 10:00:00`) or how long ago (`24h`, `90m`).
        #[arg(long, value_parser = when)]
        since: Option<SystemTime>,
        /// End of the range (same forms) [default: now].
        #[arg(long, value_parser = when, requires = "since")]
        until: Option<SystemTime>,
    },
    /// Stop delivering to an endpoint (its deliveries wait, pending).
    Disable {
        #[arg(long)]
        endpoint: String,
    },
    /// Deliver to an endpoint again and forget its failures (and, when its
    /// saved policy says so, send its dead deliveries again).
    Enable {
        #[arg(long)]
        endpoint: String,
    },
}

/// A UTC time, or a duration before now.
fn when(text: &str) -> Result<SystemTime, String> {
    if let Ok(ago) = humantime::parse_duration(text) {
        return SystemTime::now()
            .checked_sub(ago)
            .ok_or_else(|| format!("`{text}` ago is before the epoch"));
    }
    humantime::parse_rfc3339_weak(text).map_err(|_| {
        format!("`{text}`: use a UTC time such as 2026-11-29T10:00:00Z, or a duration such as 24h")
    })
}

/// The outbox `spec` (given as `flag`) names; `None`, having said why,
/// when it cannot be reached (exit 1). A `spec` that names no outbox is a
/// usage error.
pub(crate) async fn open_or_say(spec: &str, flag: &str) -> Result<Option<AnyOutbox>, UsageError> {
    // `memory` is `listen`'s spelling of `memory:`: refused as that is.
    let spec = if spec == "memory" { "memory:" } else { spec };
    match AnyOutbox::connect(spec).await {
        // An outbox in this process is empty: the dispatcher's is elsewhere.
        Ok(store) if store.kind() == "memory" => Err(UsageError(format!(
            "{flag} memory: is an empty outbox in this process; name the dispatchers' store"
        ))),
        Ok(store) => Ok(Some(store)),
        Err(OutboxError::StoreUrl(why)) => Err(crate::no_shared_store(flag, &why)),
        Err(error) => {
            eprintln!("hooklatch: cannot open {}: {error}", crate::shown(spec));
            Ok(None)
        }
    }
}

fn health_text(health: EndpointHealth) -> String {
    let disabled = match health.disabled {
        None => "enabled".to_owned(),
        Some(DisableReason::Gone) => "disabled(gone)".to_owned(),
        Some(DisableReason::NoSuccessFor(after)) => {
            format!(
                "disabled(no success for {})",
                humantime::format_duration(after)
            )
        }
        Some(DisableReason::Manual) => "disabled(manual)".to_owned(),
        Some(_) => "disabled".to_owned(),
    };
    match health.failing_since {
        Some(since) => format!("{disabled} failing_since={}", rfc3339(since)),
        None => disabled,
    }
}

/// Endpoints read at a time by `outbox endpoints`.
const PAGE: usize = 500;

/// Prints `value` as one line of JSON.
fn print_json(value: &serde_json::Value) {
    println!("{value}");
}

async fn run(
    store: &impl OutboxView,
    command: OutboxCommand,
    json: bool,
) -> Result<(), OutboxError> {
    let now = SystemTime::now();
    match command {
        OutboxCommand::Endpoints => {
            let mut after: Option<String> = None;
            loop {
                let page = store.endpoint_page(after.as_deref(), PAGE, now).await?;
                for endpoint in &page {
                    let counts = endpoint.counts;
                    if json {
                        print_json(&serde_json::json!({
                            "name": endpoint.name,
                            "health": health_text(EndpointHealth {
                                failing_since: None,
                                ..endpoint.health
                            }),
                            "failing_since": endpoint.health.failing_since.map(rfc3339),
                            "pending": counts.pending,
                            "due": counts.due,
                            "dead": counts.dead,
                            "gone": counts.gone,
                            "delivered": counts.delivered,
                            "url": endpoint.masked_url(),
                        }));
                        continue;
                    }
                    let url = endpoint.masked_url().unwrap_or_else(|| "-".to_owned());
                    println!(
                        "{} {} pending={} due={} dead={} gone={} delivered={} url={url}",
                        endpoint.name,
                        health_text(endpoint.health),
                        counts.pending,
                        counts.due,
                        counts.dead,
                        counts.gone,
                        counts.delivered,
                    );
                }
                match page.last() {
                    Some(last) if page.len() == PAGE => after = Some(last.name.clone()),
                    _ => break,
                }
            }
        }
        OutboxCommand::Dead { endpoint, limit } => {
            let dead = store.list(&endpoint, DeliveryState::Dead, limit).await?;
            if dead.is_empty() && !json {
                println!("no dead deliveries for endpoint {endpoint}");
            }
            for id in dead {
                let delivery = store.delivery(&endpoint, &id).await?;
                let last = delivery.and_then(|delivery| delivery.attempts.last().cloned());
                if json {
                    print_json(&serde_json::json!({
                        "id": id,
                        "attempts": last.as_ref().map_or(0, |last| last.number),
                        "last": last.as_ref().map(|last| rfc3339(last.sent_at)),
                        "answer": last.as_ref().map(|last| answer_json(&last.result)),
                    }));
                    continue;
                }
                match last {
                    Some(last) => println!(
                        "{id} attempts={} last={} answer={}",
                        last.number,
                        rfc3339(last.sent_at),
                        answer(&last.result)
                    ),
                    None => println!("{id} attempts=0"),
                }
            }
        }
        OutboxCommand::Attempts { endpoint, limit } => {
            let attempts = store.recent_attempts(&endpoint, limit).await?;
            if attempts.is_empty() && !json {
                println!("no attempts for endpoint {endpoint} yet");
            }
            for recent in attempts {
                let attempt = recent.attempt;
                if json {
                    print_json(&serde_json::json!({
                        "at": rfc3339(attempt.sent_at),
                        "id": recent.id,
                        "attempt": attempt.number,
                        "answer": answer_json(&attempt.result),
                        "took_ms": u64::try_from(attempt.duration.as_millis()).unwrap_or(u64::MAX),
                    }));
                    continue;
                }
                println!(
                    "{} {} #{} answer={} took={}ms",
                    rfc3339(attempt.sent_at),
                    recent.id,
                    attempt.number,
                    answer(&attempt.result),
                    attempt.duration.as_millis()
                );
            }
        }
        OutboxCommand::Replay {
            endpoint,
            id,
            since,
            until,
        } => {
            let replayed = match (id, since) {
                (Some(id), _) => u64::from(store.replay(&endpoint, &id, now).await?),
                (None, Some(since)) => {
                    let until = until.unwrap_or(now + Duration::from_millis(1));
                    let ids = store
                        .replay_between(&endpoint, since, until, now, usize::MAX)
                        .await?;
                    u64::try_from(ids.len()).unwrap_or(u64::MAX)
                }
                (None, None) => 0,
            };
            if json {
                print_json(&serde_json::json!({ "replayed": replayed }));
            } else {
                println!("replayed {replayed}");
            }
        }
        OutboxCommand::Disable { endpoint } => {
            let disabled = store.disable(&endpoint, DisableReason::Manual, now).await?;
            if json {
                print_json(&serde_json::json!({ "disabled": true, "already": !disabled }));
                return Ok(());
            }
            println!(
                "{}",
                if disabled {
                    "disabled"
                } else {
                    "disabled already"
                }
            );
        }
        OutboxCommand::Enable { endpoint } => {
            // As the saved policy says: its backlog too, if it replays on
            // enable.
            match store.enable_as_saved(&endpoint, now).await? {
                replayed if json => {
                    print_json(&serde_json::json!({ "enabled": true, "replayed": replayed }));
                }
                0 => println!("enabled"),
                replayed => println!("enabled, replayed {replayed}"),
            }
        }
    }
    Ok(())
}

/// An attempt's answer for JSON: its status, or its error's name.
fn answer_json(result: &Result<u16, hooklatch::sender::rules::AttemptError>) -> serde_json::Value {
    match result {
        Ok(status) => serde_json::json!(status),
        Err(error) => serde_json::json!(error.as_str()),
    }
}

fn answer(result: &Result<u16, hooklatch::sender::rules::AttemptError>) -> String {
    match result {
        Ok(status) => status.to_string(),
        Err(error) => format!("{:?}", error.as_str()),
    }
}

pub(crate) fn outbox(args: OutboxArgs) -> Result<ExitCode, UsageError> {
    if let Some(endpoint) = endpoint_of(&args.command) {
        hooklatch::sender::outbox::validate_endpoint_name(endpoint)?;
    }
    if crate::said_no_such_store(&args.store) {
        return Ok(ExitCode::FAILURE);
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let Some(store) = open_or_say(&args.store, "--store").await? else {
            return Ok(ExitCode::FAILURE);
        };
        // An operation on a name the outbox does not know would report
        // nothing, or (a disable, an enable) create the endpoint.
        if let Some(endpoint) = endpoint_of(&args.command) {
            match store.endpoint_names().await {
                Ok(names) if names.iter().any(|name| name == endpoint) => {}
                Ok(_) => {
                    eprintln!(
                        "hooklatch: no endpoint named {endpoint} in {}: \
                         `hooklatch outbox endpoints` lists them",
                        crate::shown(&args.store)
                    );
                    return Ok(ExitCode::FAILURE);
                }
                Err(error) => {
                    eprintln!("hooklatch: {error}");
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
        let done = run(&store, args.command, args.json).await;
        match done {
            Ok(()) => Ok(ExitCode::SUCCESS),
            Err(error) => {
                eprintln!("hooklatch: {error}");
                Ok(ExitCode::FAILURE)
            }
        }
    })
}

fn endpoint_of(command: &OutboxCommand) -> Option<&str> {
    match command {
        OutboxCommand::Endpoints => None,
        OutboxCommand::Dead { endpoint, .. }
        | OutboxCommand::Attempts { endpoint, .. }
        | OutboxCommand::Replay { endpoint, .. }
        | OutboxCommand::Disable { endpoint }
        | OutboxCommand::Enable { endpoint } => Some(endpoint),
    }
}
