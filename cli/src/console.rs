//! `hooklatch console`: the ops console over a store, in the browser.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Args;
use hooklatch::dedup::Inbox;
use hooklatch_tower::console::Console;

use crate::UsageError;
use crate::inbox::AnyInbox;
use crate::outbox::AnyOutbox;

#[derive(Debug, Args)]
pub(crate) struct ConsoleArgs {
    /// The store: `sqlite:PATH`, `postgres://…`, `redis://…` or
    /// `redis+cluster://host:port,…`.
    #[arg(long, default_value = "sqlite:hooklatch-listen.db")]
    store: String,
    /// A namespace to show (repeat for several).
    #[arg(long = "namespace", default_value = "listen")]
    namespaces: Vec<String>,
    /// An outbox to show too (the same forms as --store): its endpoints,
    /// deliveries and attempts, with replay, enable and disable.
    #[arg(long)]
    outbox: Option<String>,
    /// The token operators sign in with, 16 characters or more.
    #[arg(long, env = "HOOKLATCH_CONSOLE_TOKEN", hide_env_values = true)]
    token: String,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:8081")]
    addr: SocketAddr,
}

async fn serve<S: Inbox + Clone + 'static>(
    store: S,
    args: &ConsoleArgs,
) -> Result<ExitCode, UsageError> {
    let mut console = Console::new(store, &args.token, &args.namespaces)?;
    if let Some(spec) = &args.outbox {
        console = match AnyOutbox::open(spec).await? {
            Ok(AnyOutbox::Sqlite(outbox)) => console.with_outbox(outbox),
            Ok(AnyOutbox::Postgres(outbox)) => console.with_outbox(outbox),
            Ok(AnyOutbox::Redis(outbox)) => console.with_outbox(outbox),
            Err(error) => {
                eprintln!("hooklatch: cannot open {spec}: {error}");
                return Ok(ExitCode::FAILURE);
            }
        };
    }
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|error| format!("cannot listen on {}: {error}", args.addr))?;
    println!("console on http://{}/", listener.local_addr()?);
    axum::serve(listener, console.router()).await?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn console(args: ConsoleArgs) -> Result<ExitCode, UsageError> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let Some(store) = AnyInbox::open_or_say(&args.store).await? else {
            return Ok(ExitCode::FAILURE);
        };
        match store {
            AnyInbox::Sqlite(store) => serve(store, &args).await,
            AnyInbox::Postgres(store) => serve(store, &args).await,
            AnyInbox::Redis(store) => serve(store, &args).await,
        }
    })
}
