//! Reading a request body through a limit.

use bytes::Bytes;
use http::HeaderMap;
use http_body::Body;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};

use crate::rejection::Rejection;

/// The Content-Length header, if present and a number.
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Refuses before reading when Content-Length is over `limit`.
pub(crate) fn check_declared_length(headers: &HeaderMap, limit: usize) -> Result<(), Rejection> {
    match content_length(headers) {
        Some(length) if length > limit as u64 => Err(Rejection::BodyTooLarge { limit }),
        _ => Ok(()),
    }
}

/// The default time the whole body may take to arrive: 10 seconds.
pub const DEFAULT_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads at most `limit` bytes within `timeout`; more is refused as soon as
/// it arrives, and a body still arriving at the deadline is refused (a
/// slow client cannot hold the receiver).
pub(crate) async fn read_limited<B>(
    body: B,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Bytes, Rejection>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Ok(collected) = tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await
    else {
        return Err(Rejection::BodyTimeout { timeout });
    };
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => {
            Err(Rejection::BodyTooLarge { limit })
        }
        Err(_) => Err(Rejection::BodyUnreadable),
    }
}
