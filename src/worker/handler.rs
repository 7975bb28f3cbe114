//! What a worker runs for each event: one [`Handler`], such as a closure or
//! a [`Router`] by event type.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::Failure;
use crate::dedup::{EventMeta, InboxEntry};

/// A handler's future, boxed so that handlers of any shape sit behind one
/// type.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send>>;

/// Runs for each event a worker takes. Implemented for async closures
/// `Fn(Event) -> impl Future<Output = Result<(), E>>` whose error converts
/// into a [`Failure`] (any `std::error::Error` does), and for [`Router`].
pub trait Handler: Send + Sync + 'static {
    /// Handles one event: `Ok` acks it, a [`Failure`] retries or
    /// dead-letters it.
    fn handle(&self, event: Event) -> HandlerFuture;
}

impl<F, Fut, E> Handler for F
where
    F: Fn(Event) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Into<Failure>,
{
    fn handle(&self, event: Event) -> HandlerFuture {
        let handled = self(event);
        Box::pin(async move { handled.await.map_err(Into::into) })
    }
}

/// One event as a handler gets it: the inbox entry, and a signal for when
/// the worker lost it.
#[derive(Debug, Clone)]
pub struct Event {
    entry: Arc<InboxEntry>,
    lost: watch::Receiver<bool>,
}

impl Event {
    pub(crate) fn new(entry: Arc<InboxEntry>, lost: watch::Receiver<bool>) -> Self {
        Self { entry, lost }
    }

    /// The event id (the provider's, as verified).
    pub fn id(&self) -> &str {
        &self.entry.id
    }

    /// The namespace it was accepted in.
    pub fn namespace(&self) -> &str {
        &self.entry.namespace
    }

    /// The event's type, where the provider names one (`invoice.paid`).
    pub fn event_type(&self) -> Option<&str> {
        self.entry.meta.event_type.as_deref()
    }

    /// 1 on the first attempt, 2 on the first retry, and so on.
    pub fn attempt(&self) -> u32 {
        self.entry.attempt
    }

    /// The body exactly as received and verified.
    pub fn body(&self) -> &[u8] {
        &self.entry.body
    }

    /// The body deserialized into `T`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        self.entry.json()
    }

    /// What the provider said about the event besides its body.
    pub fn meta(&self) -> &EventMeta {
        &self.entry.meta
    }

    /// The inbox entry itself.
    pub fn entry(&self) -> &InboxEntry {
        &self.entry
    }

    /// Whether the worker lost the event: a heartbeat found another worker
    /// holds it now (this one stalled past the visibility timeout). Its
    /// result will not be acked; stop work that must not run twice.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Completes when the worker loses the event (see
    /// [`is_lost`](Self::is_lost)); never while it holds it. Race a long
    /// job against it:
    ///
    /// ```
    /// # async fn long_job() {}
    /// # async fn handle(event: hooklatch::worker::Event) -> Result<(), hooklatch::worker::Failure> {
    /// tokio::select! {
    ///     () = long_job() => Ok(()),
    ///     () = event.lost() => Err(hooklatch::worker::Failure::retry("lost the event")),
    /// }
    /// # }
    /// ```
    pub async fn lost(&self) {
        let mut lost = self.lost.clone();
        if lost.wait_for(|lost| *lost).await.is_err() {
            // The worker is done with the event: it can no longer be lost.
            std::future::pending::<()>().await;
        }
    }
}

/// Handlers by event type (the provider's, as [`Event::event_type`] reads
/// it), each with its payload deserialized, and a fallback for the rest.
/// An event of a type nothing handles is acked and logged, unless a
/// [`fallback`](Self::fallback) is set.
///
/// ```
/// use hooklatch::worker::{Event, Failure, Router};
///
/// #[derive(serde::Deserialize)]
/// struct Invoice { id: String, amount_paid: u64 }
///
/// let router = Router::new()
///     .on("invoice.paid", |_event: Event, invoice: Invoice| async move {
///         println!("{} paid {}", invoice.id, invoice.amount_paid);
///         Ok::<_, Failure>(())
///     })
///     .fallback(|event: Event| async move {
///         println!("not handled: {:?}", event.event_type());
///         Ok::<_, Failure>(())
///     });
/// # let _ = router;
/// ```
#[derive(Default, Clone)]
pub struct Router {
    routes: HashMap<String, Arc<dyn Handler>>,
    fallback: Option<Arc<dyn Handler>>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut types: Vec<&str> = self.routes.keys().map(String::as_str).collect();
        types.sort_unstable();
        f.debug_struct("Router")
            .field("types", &types)
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

impl Router {
    /// A router with no routes: every event is acked and logged.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `handler` for events of `event_type`, with the body
    /// deserialized into `T`. A body that is not a `T` is dead-lettered at
    /// once (a retry cannot fix it), the parse error its reason.
    #[must_use]
    pub fn on<T, F, Fut, E>(mut self, event_type: &str, handler: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(Event, T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<Failure>,
    {
        let handler = Arc::new(handler);
        let typed = move |event: Event| {
            let handler = Arc::clone(&handler);
            async move {
                let payload: T = event.json().map_err(|error| {
                    Failure::dead_letter(format!(
                        "the body is not a {}: {error}",
                        std::any::type_name::<T>()
                    ))
                })?;
                handler(event, payload).await.map_err(Into::into)
            }
        };
        self.routes.insert(event_type.to_owned(), Arc::new(typed));
        self
    }

    /// Runs `handler` for events of `event_type`, with the event as it
    /// came (no payload type).
    #[must_use]
    pub fn on_event(mut self, event_type: &str, handler: impl Handler) -> Self {
        self.routes.insert(event_type.to_owned(), Arc::new(handler));
        self
    }

    /// Runs `handler` for events of every type no route names, and events
    /// with no type.
    #[must_use]
    pub fn fallback(mut self, handler: impl Handler) -> Self {
        self.fallback = Some(Arc::new(handler));
        self
    }
}

impl Handler for Router {
    fn handle(&self, event: Event) -> HandlerFuture {
        let route = event
            .event_type()
            .and_then(|event_type| self.routes.get(event_type))
            .or(self.fallback.as_ref());
        match route {
            Some(handler) => handler.handle(event),
            None => {
                tracing::info!(
                    namespace = event.namespace(),
                    id = event.id(),
                    event_type = event.event_type(),
                    "no handler for this event type; acked"
                );
                Box::pin(async { Ok(()) })
            }
        }
    }
}
