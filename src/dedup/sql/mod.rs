//! The SQLite and Postgres inbox stores, written once: the tables and
//! statements ([`statements`]), one write ([`write`]) and the store over
//! either database ([`inbox`]).

mod inbox;
mod statements;
pub(crate) mod write;

pub(crate) use inbox::InboxBackend;
pub use inbox::SqlInbox;
pub(crate) use statements::{
    AcceptParts, BuildAccept, BuildOnInbox, Statements, TAKE_ORDER, counts_schema,
    dead_reason_schema, meta_schema, ready_condition, schema, take_assignments, take_schema,
};
