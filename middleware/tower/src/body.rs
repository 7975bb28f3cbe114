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

/// Reads at most `limit` bytes; more is refused as soon as it arrives.
pub(crate) async fn read_limited<B>(body: B, limit: usize) -> Result<Bytes, Rejection>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => {
            Err(Rejection::BodyTooLarge { limit })
        }
        Err(_) => Err(Rejection::BodyUnreadable),
    }
}
