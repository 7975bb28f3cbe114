//! `hooklatch console`: the ops console over a store, in the browser.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use hooklatch::dedup::InboxQueue;
use hooklatch_tower::console::Console;

use crate::UsageError;
use crate::inbox::open_or_say;

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
    /// A file holding the token operators sign in with (16 characters or
    /// more; white space around it is ignored). Without it the token is
    /// read from `HOOKLATCH_CONSOLE_TOKEN`. No flag takes the token itself:
    /// a command line is visible to every user of the machine (`ps`).
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:8081", value_parser = crate::serve::socket_address)]
    addr: SocketAddr,
    /// How long a client may take to send a request's head (and, on a
    /// kept-alive connection, to start its next request) before the
    /// connection is closed.
    #[arg(long, default_value = "10s", value_parser = crate::serve::timeout)]
    header_timeout: std::time::Duration,
    /// How long a whole request may take, its body included, before it is
    /// answered 408.
    #[arg(long, default_value = "30s", value_parser = crate::serve::timeout)]
    request_timeout: std::time::Duration,
}

/// The environment variable that holds the token when no file is named.
const TOKEN_VARIABLE: &str = "HOOKLATCH_CONSOLE_TOKEN";

impl ConsoleArgs {
    /// The token: from `--token-file`, else from the environment.
    fn token(&self) -> Result<String, UsageError> {
        match &self.token_file {
            Some(path) => std::fs::read_to_string(path)
                .map(|text| text.trim().to_owned())
                .map_err(|error| {
                    UsageError::from(format!(
                        "cannot read the token file {}: {error}",
                        path.display()
                    ))
                }),
            None => std::env::var(TOKEN_VARIABLE).map_err(|_| {
                UsageError::from(format!(
                    "no token: set {TOKEN_VARIABLE} or name a file with --token-file"
                ))
            }),
        }
    }
}

async fn serve<S: InboxQueue + Clone + 'static>(
    store: S,
    args: &ConsoleArgs,
    token: &str,
) -> Result<ExitCode, UsageError> {
    let mut console = Console::new(store, token, &args.namespaces)?;
    if let Some(spec) = &args.outbox {
        let Some(outbox) = crate::outbox::open_or_say(spec, "--outbox").await? else {
            return Ok(ExitCode::FAILURE);
        };
        console = console.with_outbox(outbox);
    }
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|error| format!("cannot listen on {}: {error}", args.addr))?;
    println!("console on http://{}/", listener.local_addr()?);
    crate::serve::serve(
        listener,
        console.router(),
        crate::serve::Limits {
            head: args.header_timeout,
            whole: args.request_timeout,
        },
        crate::listen::stop_signal(),
    )
    .await;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn console(args: ConsoleArgs) -> Result<ExitCode, UsageError> {
    let token = args.token()?;
    if crate::said_no_such_store(&args.store) {
        return Ok(ExitCode::FAILURE);
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let Some(store) = open_or_say(&args.store).await? else {
            return Ok(ExitCode::FAILURE);
        };
        serve(store, &args, &token).await
    })
}
