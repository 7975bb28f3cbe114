//! The toolbox every store shares: time and tokens, key checks, one SQL
//! dialect with a versioned, locked migration, and one Redis connection
//! builder. Each concern's stores (claims and inbox in `dedup`, positions
//! in `sequence`, the outbox in `sender`) are built from it. Crate-private
//! but for two types users meet: [`StoreError`] (re-exported by `dedup`
//! and `sequence`) and the Redis connection (`hooklatch::RedisConnection`).

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod group_commit;
#[cfg(any(feature = "postgres", all(feature = "sqlite", feature = "sender")))]
pub(crate) mod held_connection;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod sql;

use std::sync::atomic::{AtomicU64, Ordering};

/// `From` the drivers' errors (those compiled) for an area's error type
/// whose `Store` variant holds a [`StoreError`], so that `?` works on a
/// driver call in every store.
macro_rules! driver_errors_into_store {
    ($error:ty) => {
        #[cfg(any(feature = "sqlite", feature = "postgres"))]
        impl From<sqlx::Error> for $error {
            fn from(error: sqlx::Error) -> Self {
                Self::Store(error.into())
            }
        }

        #[cfg(feature = "redis")]
        impl From<::redis::RedisError> for $error {
            fn from(error: ::redis::RedisError) -> Self {
                Self::Store(error.into())
            }
        }
    };
}
pub(crate) use driver_errors_into_store;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The database behind a store failed or could not be reached. Opaque, so
/// that no driver's types are part of this crate's API: `source()` is the
/// driver's own error, and [`backend`](Self::backend) names the database.
#[derive(Debug, thiserror::Error)]
#[error("{backend} store: {source}")]
pub struct StoreError {
    backend: &'static str,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl StoreError {
    /// The failure of a store of your own: `backend` names its database
    /// (as `sql` and `redis` do the built-in ones'), `source` is its
    /// driver's error, kept as [`source`](std::error::Error::source).
    ///
    /// ```
    /// use hooklatch::dedup::{DedupError, StoreError};
    ///
    /// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    /// let error = DedupError::Store(StoreError::new("mydb", refused));
    /// assert!(error.to_string().starts_with("mydb store: "));
    /// ```
    pub fn new(
        backend: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self {
            backend,
            source: source.into(),
        }
    }

    /// `sql` or `redis` (`store` for an error of no one backend), or the
    /// name a store of your own gave [`new`](Self::new).
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// Another of this crate's errors that has no counterpart where it
    /// arrived; [`backend`](Self::backend) is `store`.
    #[cfg(feature = "sender")]
    pub(crate) fn other(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            backend: "store",
            source: Box::new(error),
        }
    }

    /// An error known only by its text, such as one a batch shares with
    /// each of its callers.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) fn message(backend: &'static str, message: &str) -> Self {
        Self {
            backend,
            source: message.to_owned().into(),
        }
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        Self {
            backend: "sql",
            source: Box::new(error),
        }
    }
}

#[cfg(feature = "redis")]
impl From<::redis::RedisError> for StoreError {
    fn from(error: ::redis::RedisError) -> Self {
        Self {
            backend: "redis",
            source: Box::new(error),
        }
    }
}

/// The longest namespace accepted, in bytes.
pub(crate) const MAX_NAMESPACE_LEN: usize = 64;

/// Milliseconds since the Unix epoch, as stores record time; 0 before it.
pub(crate) fn unix_millis(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Now on this host's clock, in milliseconds since the Unix epoch. Stores
/// that decide expiry use the server's clock instead.
#[cfg(all(
    feature = "sender",
    any(feature = "sqlite", feature = "postgres", feature = "redis")
))]
pub(crate) fn now_millis() -> i64 {
    unix_millis(SystemTime::now())
}

/// The longest duration a store adds to a time: 100 years, so that "now +
/// duration" computed in SQL or Lua cannot overflow a 64-bit integer.
const MAX_MILLIS: i64 = 100 * 365 * 24 * 60 * 60 * 1000;

/// A duration in whole milliseconds, capped at 100 years.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).map_or(MAX_MILLIS, |ms| ms.min(MAX_MILLIS))
}

/// A token unique to this process and call: process id, time and a counter.
/// Tokens tell holders apart; they are not secrets.
pub(crate) fn new_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{:x}-{:x}-{:x}",
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

pub(crate) use crate::verify::key_problem;

/// What is wrong with a namespace (or key prefix): it must be 1 to 64
/// characters of `A-Z a-z 0-9 _ - . :`. `None` when it is fine.
pub(crate) fn namespace_problem(namespace: &str) -> Option<&'static str> {
    if namespace.is_empty() {
        Some("is empty")
    } else if namespace.len() > MAX_NAMESPACE_LEN {
        Some("is longer than 64 bytes")
    } else if !namespace
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b))
    {
        Some("may hold only A-Z a-z 0-9 _ - . :")
    } else {
        None
    }
}

/// What joins a receiver's namespace and its tenant's: a character no
/// namespace may hold, so `hooks` + `acme` can never be the namespace of
/// another receiver or of another pair.
pub(crate) const TENANT_SEPARATOR: char = '~';

/// What is wrong with a namespace as a store keeps it: a namespace, or two
/// joined by [`TENANT_SEPARATOR`]. `None` when it is fine.
pub(crate) fn stored_namespace_problem(namespace: &str) -> Option<&'static str> {
    match namespace.split_once(TENANT_SEPARATOR) {
        None => namespace_problem(namespace),
        Some((receiver, tenant)) => namespace_problem(receiver).or(namespace_problem(tenant)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_namespaces_are_checked() {
        assert_eq!(key_problem("evt_1"), None);
        assert_eq!(key_problem(""), Some("is empty"));
        assert_eq!(
            key_problem("a b"),
            Some("has characters outside visible ASCII")
        );
        assert_eq!(
            key_problem(&"i".repeat(257)),
            Some("is longer than 256 bytes")
        );
        assert_eq!(namespace_problem("tenant-7:github"), None);
        assert!(namespace_problem("two words").is_some());
        assert!(namespace_problem(&"n".repeat(65)).is_some());
        assert!(namespace_problem("hooks~acme").is_some());
        assert_eq!(stored_namespace_problem("hooks~acme"), None);
        assert_eq!(
            stored_namespace_problem(&format!("{}~{}", "h".repeat(64), "t".repeat(64))),
            None
        );
        assert!(stored_namespace_problem("hooks~acme~x").is_some());
        assert!(stored_namespace_problem("~acme").is_some());
    }

    #[test]
    fn tokens_are_unique() {
        let tokens: std::collections::HashSet<_> = (0..1000).map(|_| new_token()).collect();
        assert_eq!(tokens.len(), 1000);
    }
}
