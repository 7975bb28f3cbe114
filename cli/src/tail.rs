//! `hooklatch tail`: print events as a store accepts them.

use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use clap::Args;
use hooklatch::dedup::{AnyInbox, InboxQueue, Tail, TailedEvent};

use crate::UsageError;

/// How many events one read of a namespace returns at most.
const BATCH: usize = 1000;

#[derive(Debug, Args)]
pub(crate) struct TailArgs {
    /// The store your receiver accepts into: `sqlite:PATH`,
    /// `postgres://…`, `redis://…` or `redis+cluster://host:port,…`.
    #[arg(long, default_value = "sqlite:hooklatch-listen.db")]
    store: String,
    /// The namespace to follow (repeat for several; a tenant's events are
    /// in `NAMESPACE~TENANT`).
    #[arg(long, default_value = "listen")]
    namespace: Vec<String>,
    /// Print JSON for scripts: one object a line.
    #[arg(long)]
    json: bool,
    /// How often to read the store, such as `250ms` or `1s`.
    #[arg(long, default_value = "250ms", value_parser = interval)]
    interval: Duration,
    /// Exit 0 after printing this many events (wait for the next one with
    /// `--count 1`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
}

/// `--interval`: a duration from 10 ms to an hour.
fn interval(text: &str) -> Result<Duration, String> {
    let interval = crate::send::parse_duration(text)?;
    if (Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&interval) {
        Ok(interval)
    } else {
        Err(format!("`{text}` is outside 10ms to 1h"))
    }
}

pub(crate) fn tail(args: TailArgs) -> Result<ExitCode, UsageError> {
    for namespace in &args.namespace {
        crate::check_namespace(namespace)?;
    }
    if crate::said_no_such_store(&args.store) {
        return Ok(ExitCode::FAILURE);
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let Some(store) = crate::inbox::open_or_say(&args.store).await? else {
            return Ok(ExitCode::FAILURE);
        };
        tokio::select! {
            code = follow(&store, &args) => Ok(code),
            _ = tokio::signal::ctrl_c() => Ok(ExitCode::SUCCESS),
        }
    })
}

/// Reads every namespace each interval and prints what is new, until
/// `--count` events are printed. The first reads failing is exit 1; a
/// failure later is said and the read tried again, as a tail outlives a
/// restart of its store.
async fn follow(store: &AnyInbox, args: &TailArgs) -> ExitCode {
    let mut tails: Vec<Tail> = args.namespace.iter().map(|ns| Tail::new(ns)).collect();
    for tail in &mut tails {
        if let Err(error) = store.tail(tail, BATCH).await {
            eprintln!(
                "hooklatch: cannot tail {}: {error}",
                crate::shown(&args.store)
            );
            return ExitCode::FAILURE;
        }
    }
    eprintln!(
        "hooklatch: following {} in {} (Ctrl-C to stop)",
        args.namespace.join(", "),
        crate::shown(&args.store)
    );
    let several = tails.len() > 1;
    let mut printed = 0;
    let mut failing = false;
    loop {
        for tail in &mut tails {
            // A full batch: read again at once.
            loop {
                let events = match store.tail(tail, BATCH).await {
                    Ok(events) => {
                        if std::mem::take(&mut failing) {
                            eprintln!("hooklatch: reading the store again");
                        }
                        events
                    }
                    Err(error) => {
                        if !std::mem::replace(&mut failing, true) {
                            eprintln!("hooklatch: {error}; trying again every {:?}", args.interval);
                        }
                        break;
                    }
                };
                let full = events.len() == BATCH;
                for event in &events {
                    println!("{}", line(event, args.json, several));
                    printed += 1;
                    if args.count == Some(printed) {
                        return ExitCode::SUCCESS;
                    }
                }
                if !full {
                    break;
                }
            }
        }
        tokio::time::sleep(args.interval).await;
    }
}

/// One event as printed: `TIME ID type=… status=…`, with the tenant when
/// there is one and the namespace when several are followed; or a JSON
/// object.
fn line(event: &TailedEvent, json: bool, several: bool) -> String {
    let at = event
        .accepted_at_millis
        .and_then(|ms| u64::try_from(ms).ok())
        .map(|ms| crate::rfc3339(UNIX_EPOCH + Duration::from_millis(ms)));
    if json {
        return serde_json::json!({
            "namespace": event.namespace,
            "tenant": event.tenant(),
            "id": event.id,
            "type": event.event_type,
            "status": event.status.as_str(),
            "accepted_at": at,
        })
        .to_string();
    }
    let mut line = format!(
        "{} {} type={} status={}",
        at.as_deref().unwrap_or("-"),
        event.id,
        event.event_type.as_deref().unwrap_or("-"),
        event.status
    );
    if let Some(tenant) = event.tenant() {
        line.push_str(&format!(" tenant={tenant}"));
    }
    if several {
        line.push_str(&format!(" namespace={}", event.namespace));
    }
    line
}
