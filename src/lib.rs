#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod dedup;
#[cfg(all(feature = "metrics", any(feature = "http", feature = "sender")))]
mod gauges;
#[cfg(feature = "http")]
pub mod receive;
#[cfg(feature = "sender")]
pub mod sender;
pub mod sequence;
mod store;
pub mod verify;

#[cfg(feature = "redis")]
pub use store::redis::RedisConnection;
