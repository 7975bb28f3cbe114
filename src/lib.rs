// The README's examples use the sender and the SQLite stores; with fewer
// features the crate's doc points to it, so that every doctest of a plain
// `cargo test` compiles.
#![cfg_attr(
    all(feature = "sender-http", feature = "sqlite"),
    doc = include_str!("../README.md")
)]
#![cfg_attr(
    not(all(feature = "sender-http", feature = "sqlite")),
    doc = "Receive webhooks safely, and send them: see the README \
           (<https://docs.rs/hooklatch> shows it, with every feature)."
)]
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
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(any(feature = "sender", feature = "worker"))]
pub mod trace;
pub mod verify;
#[cfg(feature = "worker")]
pub mod worker;

#[cfg(feature = "redis")]
pub use store::redis::RedisConnection;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use store::sql::SqlDatabase;
