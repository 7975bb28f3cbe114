//! W3C trace context (`traceparent`) carried from a received event, through
//! the outbox, to every attempt of the deliveries it caused.
//!
//! A [`Dispatcher`](crate::sender::Dispatcher) stores the trace the send
//! ran in ([`TraceParent::current`]) with the delivery, and each attempt,
//! however many hours later, sends a `traceparent` header of that trace
//! with a span id of its own. A [`Worker`](crate::worker::Worker) built
//! `with_request_traces()` runs each handler in the trace the provider's
//! request came with, so a delivery sent from a handler belongs to the
//! trace that led to it. Elsewhere, run the send in
//! [`TraceParent::scope`]:
//!
//! ```
//! use hooklatch::trace::TraceParent;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let parent = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")?;
//! let sent_in = parent
//!     .scope(async {
//!         // dispatcher.send("acme", "evt_1", body).await?
//!         TraceParent::current()
//!     })
//!     .await;
//! assert_eq!(sent_in, Some(parent));
//! # Ok(())
//! # }
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
//! ```
//!
//! With OpenTelemetry, format the current span's context as a
//! `traceparent` (its propagator's `inject`) and parse that.

use std::fmt;
use std::future::Future;

tokio::task_local! {
    static CURRENT: TraceParent;
}

/// A W3C `traceparent`: a trace id, the id of the span that made the call
/// (the parent of the next), and the trace flags (sampled or not).
///
/// Only version `00` is written; a later version is read as the
/// recommendation says, by its first four fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    trace_id: [u8; 16],
    parent_id: [u8; 8],
    flags: u8,
}

/// Why a `traceparent` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid traceparent: {0}")]
pub struct InvalidTraceParent(&'static str);

impl TraceParent {
    /// Reads a `traceparent` header value: `00-{32 hex}-{16 hex}-{2 hex}`,
    /// lowercase, neither id all zeros.
    ///
    /// # Errors
    ///
    /// [`InvalidTraceParent`] naming the first field that is wrong.
    pub fn parse(text: &str) -> Result<Self, InvalidTraceParent> {
        let text = text.trim_matches([' ', '\t']);
        let mut fields = text.split('-');
        let (Some(version), Some(trace), Some(parent), Some(flags)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(InvalidTraceParent("it needs four fields split by `-`"));
        };
        let version = hex_bytes::<1>(version).ok_or(InvalidTraceParent(
            "the version is not two lowercase hex digits",
        ))?;
        // Version ff is invalid; version 00 has exactly four fields, and a
        // later version may add fields after them.
        if version[0] == 0xff || (version[0] == 0 && fields.next().is_some()) {
            return Err(InvalidTraceParent(
                "the version or the field count is wrong",
            ));
        }
        let trace_id = hex_bytes::<16>(trace).ok_or(InvalidTraceParent(
            "the trace id is not 32 lowercase hex digits",
        ))?;
        let parent_id = hex_bytes::<8>(parent).ok_or(InvalidTraceParent(
            "the parent id is not 16 lowercase hex digits",
        ))?;
        let flags = hex_bytes::<1>(flags).ok_or(InvalidTraceParent(
            "the flags are not two lowercase hex digits",
        ))?[0];
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return Err(InvalidTraceParent("an id is all zeros"));
        }
        Ok(Self {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// The trace id, as 32 lowercase hex digits.
    pub fn trace_id(&self) -> String {
        hex(&self.trace_id)
    }

    /// The id of the span this context names as the parent, as 16
    /// lowercase hex digits.
    pub fn parent_id(&self) -> String {
        hex(&self.parent_id)
    }

    /// Whether the caller sampled the trace (flag `01`).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The same trace and flags under a new, random span id: what one
    /// delivery attempt sends, so each attempt is a span of its own.
    #[must_use]
    pub fn child(&self) -> Self {
        let mut parent_id = [0; 8];
        while parent_id == [0; 8] {
            parent_id = fastrand::u64(..).to_be_bytes();
        }
        Self { parent_id, ..*self }
    }

    /// The trace the current task runs in, set by [`scope`](Self::scope)
    /// (the worker sets it around each handler).
    pub fn current() -> Option<Self> {
        CURRENT.try_with(|current| *current).ok()
    }

    /// Runs `future` in this trace: [`current`](Self::current) returns it
    /// there, and deliveries sent there carry it.
    pub async fn scope<F: Future>(self, future: F) -> F::Output {
        CURRENT.scope(self, future).await
    }

    /// Runs `run` in this trace, synchronously.
    #[cfg(feature = "worker")]
    pub(crate) fn sync_scope<R>(self, run: impl FnOnce() -> R) -> R {
        CURRENT.sync_scope(self, run)
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            self.trace_id(),
            self.parent_id(),
            self.flags
        )
    }
}

impl std::str::FromStr for TraceParent {
    type Err = InvalidTraceParent;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

/// `N` bytes from exactly `2 * N` lowercase hex digits.
fn hex_bytes<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let digit = |byte: u8| match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    };
    let mut bytes = [0; N];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_recommendations_example_reads_and_writes_back_unchanged() {
        let parent = TraceParent::parse(EXAMPLE).unwrap();
        assert_eq!(parent.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parent.parent_id(), "00f067aa0ba902b7");
        assert!(parent.sampled());
        assert_eq!(parent.to_string(), EXAMPLE);
    }

    #[test]
    fn a_child_keeps_the_trace_and_flags_under_a_new_span() {
        let parent = TraceParent::parse(EXAMPLE).unwrap();
        let child = parent.child();
        assert_eq!(child.trace_id(), parent.trace_id());
        assert_eq!(child.sampled(), parent.sampled());
        assert_ne!(child.parent_id(), parent.parent_id());
        assert_ne!(child.child().parent_id(), child.parent_id());
    }

    #[test]
    fn malformed_contexts_are_refused_with_the_field_named() {
        for (text, says) in [
            ("", "four fields"),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                "four fields",
            ),
            (
                "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version",
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx",
                "field count",
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                "trace id",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
                "trace id",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
                "parent id",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
                "flags",
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "all zeros",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "all zeros",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-é1",
                "flags",
            ),
        ] {
            let error = TraceParent::parse(text).unwrap_err().to_string();
            assert!(error.contains(says), "{text:?}: {error}");
        }
        // A later version may carry more fields; its first four are read.
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-next";
        assert_eq!(TraceParent::parse(later).unwrap().to_string(), EXAMPLE);
    }

    #[tokio::test]
    async fn current_is_the_scope_the_task_runs_in_and_none_outside() {
        assert_eq!(TraceParent::current(), None);
        let parent = TraceParent::parse(EXAMPLE).unwrap();
        let inner = parent.child();
        let seen = parent
            .scope(async {
                let outer = TraceParent::current();
                let nested = inner.scope(async { TraceParent::current() }).await;
                (outer, nested, TraceParent::current())
            })
            .await;
        assert_eq!(seen, (Some(parent), Some(inner), Some(parent)));
        assert_eq!(TraceParent::current(), None);
    }
}
