//! How a namespace's keys are spread over shards, each with its own hash
//! tag, so that a busy namespace uses every master of a Redis Cluster.
//!
//! An event's claim and its inbox entry are in the shard its id hashes to,
//! so claiming and enqueueing stay one script in one slot. Shard `s` of
//! namespace `ns` has the hash tag `{ns/s}` (`/` cannot appear in a
//! namespace, so no two namespaces share a tag); with a single shard the
//! tag is `{ns}`, the layout of stores made before shards.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

/// A namespace's shard count when none is chosen: enough to spread one
/// namespace over the masters of any cluster short of a very large one.
pub const DEFAULT_SHARDS: u16 = 16;

/// The most shards a namespace may have.
pub const MAX_SHARDS: u16 = 1024;

/// The shard layout of one store.
#[derive(Debug, Clone)]
pub(super) struct Shards {
    pub(super) prefix: String,
    pub(super) count: u16,
    /// Namespaces whose recorded shard count was checked against `count`.
    checked: Arc<Mutex<HashSet<String>>>,
    /// A lock per namespace being checked: callers that find it unchecked
    /// at once wait for one check, not one `SCAN` of the keyspace each.
    checking: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl Shards {
    pub(super) fn new(prefix: String, count: u16) -> Self {
        Self {
            prefix,
            count,
            checked: Arc::default(),
            checking: Arc::default(),
        }
    }

    /// The shard `id` belongs to: FNV-1a over its bytes, so every process
    /// and release agrees.
    pub(super) fn of(&self, id: &str) -> u16 {
        let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        (hash % u64::from(self.count)) as u16
    }

    /// The key `suffix` of shard `shard` of `namespace`.
    pub(super) fn key(&self, namespace: &str, shard: u16, suffix: &str) -> String {
        if self.count == 1 {
            format!("{}:{{{namespace}}}:{suffix}", self.prefix)
        } else {
            format!("{}:{{{namespace}/{shard}}}:{suffix}", self.prefix)
        }
    }

    /// The claim key of `id`.
    pub(super) fn claim_key(&self, namespace: &str, id: &str) -> String {
        self.key(namespace, self.of(id), &format!("claim:{id}"))
    }

    /// The inbox keys of a shard: stream, attempts, delayed, dead.
    pub(super) fn inbox_keys(&self, namespace: &str, shard: u16) -> [String; 4] {
        ["inbox", "attempts", "delayed", "dead"].map(|suffix| self.key(namespace, shard, suffix))
    }

    /// A shard's idle mark: set by a take that found no new entry, cleared
    /// (and published) by the next accept.
    pub(super) fn idle_key(&self, namespace: &str, shard: u16) -> String {
        self.key(namespace, shard, "idle")
    }

    /// A shard's tail keys: its mark, set while a tail reads it, and the
    /// log of accepts and outcomes kept meanwhile (`tail.lua`).
    pub(super) fn tail_keys(&self, namespace: &str, shard: u16) -> [String; 2] {
        ["tailing", "tail"].map(|suffix| self.key(namespace, shard, suffix))
    }

    /// The channel an accept into an idle shard of `namespace` publishes
    /// on, for workers in other processes.
    pub(super) fn accepted_channel(&self, namespace: &str) -> String {
        format!("{}:{{{namespace}}}:accepted", self.prefix)
    }

    /// Where the namespace's shard count is recorded, and the stream an
    /// unsharded store kept its inbox in.
    pub(super) fn record_keys(&self, namespace: &str) -> [String; 2] {
        [
            format!("{}:{{{namespace}}}:shards", self.prefix),
            format!("{}:{{{namespace}}}:inbox", self.prefix),
        ]
    }

    /// A `SCAN` pattern that matches the claims of `namespace` in the
    /// layout before shards (`{prefix}:{ns}:claim:<id>`), all in the slot
    /// of the hash tag `{ns}`. A namespace used only in lease mode has no
    /// other key.
    pub(super) fn unsharded_claims(&self, namespace: &str) -> String {
        // Namespaces and prefixes hold only `A-Z a-z 0-9 _ - . :`: nothing
        // a glob pattern treats specially.
        format!("{}:{{{namespace}}}:claim:*", self.prefix)
    }

    pub(super) fn is_checked(&self, namespace: &str) -> bool {
        self.checked_set().contains(namespace)
    }

    pub(super) fn mark_checked(&self, namespace: &str) {
        self.checked_set().insert(namespace.to_owned());
        self.checking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(namespace);
    }

    /// The lock the first check of `namespace` runs under.
    pub(super) fn check_lock(&self, namespace: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut checking = self.checking.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(checking.entry(namespace.to_owned()).or_default())
    }

    fn checked_set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.checked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every shard, starting at `start`: each caller begins elsewhere, so
    /// no shard is always asked last.
    pub(super) fn from(&self, start: usize) -> impl Iterator<Item = u16> + use<> {
        let count = usize::from(self.count);
        (0..count).map(move |step| ((start + step) % count) as u16)
    }
}

/// The receipt of an entry taken from a shard: the shard, then the
/// stream entry id.
pub(super) fn receipt_entry(shard: u16, entry: &str) -> String {
    format!("{shard}/{entry}")
}

/// The shard and stream entry id of a receipt.
pub(super) fn parse_receipt_entry(receipt: &str) -> Option<(u16, &str)> {
    let (shard, entry) = receipt.split_once('/')?;
    Some((shard.parse().ok()?, entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_spread_over_every_shard_and_always_to_the_same_one() {
        let shards = Shards::new("hooklatch".into(), DEFAULT_SHARDS);
        let mut seen = [0_u32; DEFAULT_SHARDS as usize];
        for n in 0..1600 {
            let id = format!("evt_{n}");
            assert_eq!(shards.of(&id), shards.of(&id));
            seen[usize::from(shards.of(&id))] += 1;
        }
        assert!(seen.iter().all(|&hits| hits > 50), "{seen:?}");
        // FNV-1a 64 as published (values from an independent
        // implementation), fixed forever: a change would move existing
        // claims to other shards.
        assert_eq!(shards.of("evt_1"), 2);
        assert_eq!(shards.of("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"), 0);
    }

    #[test]
    fn one_shard_keeps_the_unsharded_layout_and_many_get_a_tag_each() {
        let one = Shards::new("hooklatch".into(), 1);
        assert_eq!(one.claim_key("ns", "e"), "hooklatch:{ns}:claim:e");
        assert_eq!(one.inbox_keys("ns", 0)[0], "hooklatch:{ns}:inbox");
        let many = Shards::new("hooklatch".into(), 4);
        let shard = many.of("e");
        assert_eq!(
            many.claim_key("ns", "e"),
            format!("hooklatch:{{ns/{shard}}}:claim:e")
        );
        assert_eq!(many.record_keys("ns")[0], "hooklatch:{ns}:shards");
    }

    #[test]
    fn a_receipt_names_its_shard() {
        assert_eq!(
            parse_receipt_entry(&receipt_entry(7, "1700000000000-0")),
            Some((7, "1700000000000-0"))
        );
        assert_eq!(parse_receipt_entry("1700000000000-0"), None);
    }
}
