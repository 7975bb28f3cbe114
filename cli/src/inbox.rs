//! `hooklatch inbox`: look into an inbox and put dead letters back.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, Subcommand};
use hooklatch::dedup::{AnyInbox, DedupError, InboxEntry, InboxQueue};
use hooklatch::sender::HttpTransport;
use hooklatch::verify::Signer;

use crate::UsageError;

#[derive(Debug, Args)]
pub(crate) struct InboxArgs {
    /// The store: `sqlite:PATH`, `postgres://…`, `redis://…` or
    /// `redis+cluster://host:port,…`.
    #[arg(long, global = true, default_value = "sqlite:hooklatch-listen.db")]
    store: String,
    /// The namespace.
    #[arg(long, global = true, default_value = "listen")]
    namespace: String,
    /// Print JSON for scripts: one object a line (none for an empty list).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: InboxCommand,
}

#[derive(Debug, Subcommand)]
enum InboxCommand {
    /// How many events wait, are taken by a worker, and are dead-lettered.
    Stats,
    /// The dead letters, oldest first: id, attempts, type and a body
    /// preview.
    Dead {
        /// How many to show.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Put dead letters back in the inbox, their attempts counted from
    /// zero: one (`--id`) or all (`--all`).
    Requeue {
        /// The event id of the dead letter to requeue.
        #[arg(long, conflicts_with = "all", required_unless_present = "all")]
        id: Option<String>,
        /// Requeue every dead letter of the namespace.
        #[arg(long)]
        all: bool,
    },
    /// Send dead letters to a URL, each signed again with your secret and
    /// POSTed once: one (`--id`), those that died within `--since`, or all
    /// (`--all`). They stay dead letters; `requeue` hands them to the
    /// worker instead.
    Replay(Box<ReplayArgs>),
}

#[derive(Debug, Args)]
struct ReplayArgs {
    /// The event id of the dead letter to replay.
    #[arg(long, conflicts_with_all = ["all", "since"], required_unless_present_any = ["all", "since"])]
    id: Option<String>,
    /// Those that died within this long, such as `1h` or `30m`.
    #[arg(long, conflicts_with = "all", value_parser = crate::send::parse_duration)]
    since: Option<Duration>,
    /// Every dead letter of the namespace (up to `--limit`).
    #[arg(long)]
    all: bool,
    /// Where to POST them, such as http://localhost:3000/webhooks
    /// (loopback and private addresses allowed: it is your app).
    #[arg(long, value_parser = crate::listen::forward_url)]
    url: String,
    #[command(flatten)]
    scheme: crate::SchemeArgs,
    #[command(flatten)]
    secrets: crate::SecretArgs,
    /// How many dead letters to read, oldest first.
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    /// Time allowed for each POST, such as `10s`.
    #[arg(long, default_value = "15s", value_parser = crate::send::parse_duration)]
    timeout: Duration,
}

/// The store `spec` names; `None`, having said why, when it cannot be
/// reached (exit 1). A `spec` that names no store is a usage error.
pub(crate) async fn open_or_say(spec: &str) -> Result<Option<AnyInbox>, UsageError> {
    // `memory` is `listen`'s spelling of `memory:`: refused as that is.
    let spec = if spec == "memory" { "memory:" } else { spec };
    match AnyInbox::connect(spec).await {
        // A store in this process is empty: the receiver's is elsewhere.
        Ok(store) if store.kind() == "memory" => Err(UsageError(
            "--store memory: is an empty store in this process; name the receiver's store".into(),
        )),
        Ok(store) => Ok(Some(store)),
        Err(DedupError::StoreUrl(why)) => Err(crate::no_shared_store("--store", &why)),
        Err(error) => {
            eprintln!("hooklatch: cannot open {}: {error}", crate::shown(spec));
            Ok(None)
        }
    }
}

/// The first `max` characters of a body, on one line.
fn preview(body: &[u8], max: usize) -> String {
    let text: String = String::from_utf8_lossy(body)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max + 1)
        .collect();
    if text.chars().count() > max {
        format!("{}…", text.chars().take(max).collect::<String>())
    } else {
        text
    }
}

pub(crate) fn inbox(args: InboxArgs) -> Result<ExitCode, UsageError> {
    crate::check_namespace(&args.namespace)?;
    // A secret that cannot sign is a usage error, said before the store is
    // opened.
    let signer = match &args.command {
        InboxCommand::Replay(replay) => Some(crate::listen::resigner(
            &replay.scheme.scheme()?,
            &replay.secrets.secrets()?,
        )?),
        _ => None,
    };
    if crate::said_no_such_store(&args.store) {
        return Ok(ExitCode::FAILURE);
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let Some(store) = open_or_say(&args.store).await? else {
            return Ok(ExitCode::FAILURE);
        };
        let namespace = args.namespace.as_str();
        let json = args.json;
        let done = match args.command {
            InboxCommand::Stats => store.stats(namespace).await.map(|stats| {
                if json {
                    println!(
                        "{}",
                        serde_json::json!({
                            "namespace": namespace,
                            "waiting": stats.waiting,
                            "taken": stats.taken,
                            "dead": stats.dead,
                        })
                    );
                    return;
                }
                println!(
                    "waiting {}, taken {}, dead {}",
                    stats.waiting, stats.taken, stats.dead
                );
            }),
            InboxCommand::Dead { limit } => {
                store.dead_letters(namespace, limit).await.map(|dead| {
                    if dead.is_empty() && !json {
                        println!("no dead letters in namespace {namespace}");
                    }
                    for entry in dead {
                        let (reason, died) = death(entry.dead.as_ref());
                        if json {
                            let known = |text: &str| (text != "-").then(|| text.to_owned());
                            println!(
                                "{}",
                                serde_json::json!({
                                    "id": entry.id,
                                    "attempts": entry.attempt,
                                    "type": entry.meta.event_type,
                                    "died": known(&died),
                                    "reason": known(reason),
                                    "body": String::from_utf8_lossy(&entry.body),
                                })
                            );
                            continue;
                        }
                        println!(
                            "{} attempts={} type={} died={died} reason={reason:?} {}",
                            entry.id,
                            entry.attempt,
                            entry.meta.event_type.as_deref().unwrap_or("-"),
                            preview(&entry.body, 80)
                        );
                    }
                })
            }
            InboxCommand::Replay(replay) => {
                let signer = signer.expect("made above for a replay");
                return replay_dead(&store, namespace, json, &replay, &signer).await;
            }
            InboxCommand::Requeue { id, all: _ } => {
                match store.requeue_dead(namespace, id.as_deref()).await {
                    Ok(0) if id.is_some() => {
                        let id = id.unwrap_or_default();
                        eprintln!(
                            "hooklatch: no dead letter {id} in namespace {namespace}: \
                             `hooklatch inbox dead` lists them"
                        );
                        return Ok(ExitCode::FAILURE);
                    }
                    Ok(moved) if json => {
                        println!("{}", serde_json::json!({ "requeued": moved }));
                        Ok(())
                    }
                    Ok(moved) => {
                        println!("requeued {moved}");
                        Ok(())
                    }
                    Err(error) => Err(error),
                }
            }
        };
        match done {
            Ok(()) => Ok(ExitCode::SUCCESS),
            Err(error) => {
                eprintln!("hooklatch: {error}");
                Ok(ExitCode::FAILURE)
            }
        }
    })
}

/// A dead letter's reason and time (RFC 3339, UTC) as `inbox dead` prints
/// them; `-` where the store kept none (letters from before it did).
fn death(dead: Option<&hooklatch::dedup::DeadLetter>) -> (&str, String) {
    let reason = dead.map_or("-", |dead| dead.reason.as_str());
    let died = dead
        .and_then(|dead| dead.at_millis)
        .and_then(|ms| u64::try_from(ms).ok())
        .map_or_else(
            || "-".to_owned(),
            |ms| {
                let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
                humantime::format_rfc3339_seconds(at).to_string()
            },
        );
    (if reason.is_empty() { "-" } else { reason }, died)
}

/// `inbox replay`: the chosen dead letters POSTed once each to `--url`,
/// signed again; exit 1 if one was not answered 2xx, or `--id` names none.
async fn replay_dead(
    store: &AnyInbox,
    namespace: &str,
    json: bool,
    args: &ReplayArgs,
    signer: &Signer,
) -> Result<ExitCode, UsageError> {
    let dead = match store.dead_letters(namespace, args.limit).await {
        Ok(dead) => dead,
        Err(error) => {
            eprintln!("hooklatch: {error}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let died_after = args.since.map(|since| {
        let since = i64::try_from(since.as_millis()).unwrap_or(i64::MAX);
        let now = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |now| i64::try_from(now.as_millis()).unwrap_or(i64::MAX));
        now.saturating_sub(since)
    });
    let chosen: Vec<&InboxEntry> = dead
        .iter()
        .filter(|entry| match (&args.id, died_after) {
            (Some(id), _) => entry.id == *id,
            (None, Some(after)) => entry
                .dead
                .as_ref()
                .and_then(|dead| dead.at_millis)
                .is_some_and(|at| at >= after),
            (None, None) => true,
        })
        .collect();
    // The store hands the oldest first: a full page may leave later ones.
    let more = dead.len() >= args.limit;
    if chosen.is_empty() {
        if more {
            eprintln!(
                "hooklatch: none of the oldest {} dead letters in namespace {namespace} is one to \
                 replay, and there are more: raise --limit",
                args.limit
            );
            return Ok(ExitCode::FAILURE);
        }
        if let Some(id) = &args.id {
            eprintln!(
                "hooklatch: no dead letter {id} among the oldest {} in namespace {namespace}: \
                 `hooklatch inbox dead` lists them",
                args.limit
            );
            return Ok(ExitCode::FAILURE);
        }
        if !json {
            println!("no dead letters to replay in namespace {namespace}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if more && args.id.is_none() {
        eprintln!(
            "hooklatch: only the oldest {} dead letters were read: raise --limit for the rest",
            args.limit
        );
    }
    let transport = HttpTransport::builder(crate::listen::forward_policy())
        .with_attempt_timeout(args.timeout)
        .build()?;
    let mut failed = 0;
    for entry in chosen {
        // Signed now, with the headers the receiver kept (`traceparent`).
        let outcome = crate::listen::post_signed(
            &transport,
            &args.url,
            signer,
            (&entry.id, SystemTime::now()),
            &entry.body,
            &entry.meta.headers,
        )
        .await
        .map_err(|unsent| unsent.to_string());
        if json {
            let line = match &outcome {
                Ok(status) => {
                    serde_json::json!({ "id": entry.id, "replayed": true, "status": status })
                }
                Err(why) => serde_json::json!({ "id": entry.id, "replayed": false, "error": why }),
            };
            println!("{line}");
        } else {
            match &outcome {
                Ok(status) => println!("{} replayed: {status}", entry.id),
                Err(why) => println!("{} not replayed: {why}", entry.id),
            }
        }
        failed += usize::from(outcome.is_err());
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
