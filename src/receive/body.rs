//! Reading a request body through a limit and a deadline.

use std::pin::Pin;
use std::time::Duration;

use bytes::{Buf, BufMut as _, Bytes, BytesMut};
use futures_core::Stream;

use super::Rejection;

/// The default time the whole body may take to arrive: 10 seconds.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Refuses before reading when the declared length is over `limit`.
///
/// ```
/// use hooklatch::receive::{Rejection, check_declared_length};
///
/// assert_eq!(check_declared_length(Some(2_000_000), 1 << 20), Err(Rejection::BodyTooLarge { limit: 1 << 20 }));
/// assert_eq!(check_declared_length(None, 1 << 20), Ok(()));
/// ```
pub fn check_declared_length(declared: Option<u64>, limit: usize) -> Result<(), Rejection> {
    match declared {
        Some(length) if length > limit as u64 => Err(Rejection::BodyTooLarge { limit }),
        _ => Ok(()),
    }
}

/// Reads a body's chunks into one buffer of at most `limit` bytes within
/// `timeout`: a chunk that would pass the limit is refused as soon as it
/// arrives, and a body still arriving at the deadline is refused, so a slow
/// or endless client cannot hold the receiver. Needs tokio's timers.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use bytes::Bytes;
/// use hooklatch::receive::{Rejection, read_limited};
///
/// let chunks = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from("{}"))]);
/// let body = read_limited(chunks, 1024, Duration::from_secs(1)).await;
/// assert_eq!(body, Ok(Bytes::from("{}")));
/// # }
/// ```
pub async fn read_limited<S, D, E>(
    body: S,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, Rejection>
where
    S: Stream<Item = Result<D, E>>,
    D: Buf,
{
    let read = async {
        let mut body = std::pin::pin!(body);
        let mut collected = BytesMut::new();
        while let Some(chunk) = next(body.as_mut()).await {
            let chunk = chunk.map_err(|_| Rejection::BodyUnreadable)?;
            if collected.len() + chunk.remaining() > limit {
                return Err(Rejection::BodyTooLarge { limit });
            }
            collected.put(chunk);
        }
        Ok(collected.freeze())
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or(Err(Rejection::BodyTimeout { timeout }))
}

async fn next<S: Stream>(mut stream: Pin<&mut S>) -> Option<S::Item> {
    std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await
}
