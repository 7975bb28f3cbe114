//! The Lua scripts, one per step, each atomic on the node that holds its
//! keys. Every key a script touches is passed in `KEYS[]`.

use std::sync::LazyLock;

use redis::Script;

/// Accepts a batch of events: each claims its id and appends the event to
/// its shard's inbox stream, or does nothing if the id is claimed. If an
/// append fails, its claim is deleted again before the script ends, so
/// nothing of that event is kept.
pub(super) const ACCEPT_MANY: &str = include_str!("lua/accept_many.lua");

/// Moves due retries back onto the stream, reclaims entries whose worker
/// died, reads new ones, and dead-letters any past its last attempt.
/// Returns `{entry, id, body, signed_at, attempt, token, meta}` for each
/// delivery; the token is unique to the take that issued it.
pub(super) const TAKE: &str = include_str!("lua/take.lua");

/// Acks an entry if this delivery still holds it: its token is the one the
/// entry's last take issued, a count and that take's nonce.
pub(super) const ACK: &str = include_str!("lua/ack.lua");

/// Gives an entry back: to the delayed set for `retry_in` ms on the
/// server's clock, or to the dead letters after its last attempt. -1: no
/// longer held; 0: will retry; 1: dead-lettered.
pub(super) const NACK: &str = include_str!("lua/nack.lua");

/// 1: fresh lease; 2: done; 3: in progress, with the lease's remaining ms.
pub(super) const CLAIM: &str = include_str!("lua/claim.lua");

pub(super) const COMPLETE: &str = include_str!("lua/complete.lua");

/// A heartbeat for a taken entry this delivery still holds: its idle time,
/// which `XAUTOCLAIM` measures against the visibility timeout, starts
/// again from zero (`JUSTID` leaves the delivery count alone).
pub(super) const EXTEND_TAKEN: &str = include_str!("lua/extend_taken.lua");

/// A heartbeat for a lease this delivery still holds.
pub(super) const EXTEND_LEASE: &str = include_str!("lua/extend_lease.lua");

pub(super) const RELEASE: &str = include_str!("lua/release.lua");

/// Records a namespace's shard count on first use; returns the count on
/// record.
pub(super) const SHARDS: &str = include_str!("lua/shards.lua");

pub(super) static ACCEPT_MANY_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACCEPT_MANY));
pub(super) static TAKE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(TAKE));
pub(super) static ACK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACK));
/// Acks many entries of one shard, each as `ACK` does; 1 or 0 for each.
pub(super) static ACK_MANY_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/ack_many.lua")));
pub(super) static NACK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(NACK));
pub(super) static CLAIM_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(CLAIM));
pub(super) static COMPLETE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(COMPLETE));
pub(super) static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
pub(super) static EXTEND_TAKEN_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(EXTEND_TAKEN));
pub(super) static EXTEND_LEASE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(EXTEND_LEASE));
pub(super) static SHARDS_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SHARDS));

/// The consumer group every worker joins.
pub(super) const GROUP: &str = "hooklatch";

/// One shard's counts: `{waiting, taken, dead}`.
pub(super) static STATS_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/stats.lua")));

/// Moves one shard's dead letters back onto its stream; returns how many.
pub(super) static REQUEUE_DEAD_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/requeue_dead.lua")));

/// Reads one shard's tail log and keeps the shard's accepts logged for
/// 30 s more: `{cursor, logged, id, meta, status, ...}`.
pub(super) static TAIL_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/tail.lua")));
