//! Moving an outbox written before the due index, when every key of
//! endpoint `E` was `PREFIX:{E}:out:NAME` (one hash tag an endpoint) and
//! the set `PREFIX:out:endpoints` listed the endpoints, into the sharded
//! layout.
//!
//! Keys in another slot cannot be moved atomically, so each step can be
//! run again: a key is restored only where it does not exist yet, a set
//! member is added only where it is missing, and an endpoint leaves the
//! earlier list only once all its keys are moved and deleted. A delivery
//! leased under the earlier layout keeps its lease's end as its due time;
//! its holder's `finish` finds the earlier key gone (the lease is lost),
//! and the delivery is due again when the lease ends.

use std::sync::LazyLock;

use redis::{AsyncCommands as _, Script};

use super::RedisOutbox;
use crate::dedup::validate_namespace;
use crate::sender::OutboxError;

static RESTORE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/restore.lua")));
static MIGRATE_SCRIPT: LazyLock<super::Lua> = with_head!("migrate.lua");

/// How many keys or set members one step of a move carries at most.
const MOVE_BATCH: usize = 500;

/// An endpoint's sorted sets, in the order `lua/migrate.lua` takes them.
const SETS: [&str; 6] = ["due", "s:0", "s:1", "s:2", "s:3", "finished"];

impl RedisOutbox {
    /// The key `name` of `endpoint` in the earlier layout.
    fn earlier_key(&self, endpoint: &str, name: &str) -> String {
        format!("{}:{{{endpoint}}}:out:{name}", self.prefix)
    }

    /// Moves every endpoint the earlier layout lists, then forgets it
    /// there. Run once per store before its first call.
    pub(super) async fn move_earlier(&self) -> Result<(), OutboxError> {
        let mut connection = self.connection.clone();
        let listed = format!("{}:out:endpoints", self.prefix);
        let endpoints: Vec<String> = connection.smembers(&listed).await?;
        for endpoint in endpoints {
            // A name the earlier release took but that is no endpoint name
            // has no deliveries: enqueue refused it.
            if validate_namespace(&endpoint).is_ok() {
                self.move_endpoint(&endpoint).await?;
            }
            let () = connection.srem(&listed, &endpoint).await?;
        }
        Ok(())
    }

    async fn move_endpoint(&self, endpoint: &str) -> Result<(), OutboxError> {
        let mut connection = self.connection.clone();
        let mut pipe = redis::pipe();
        for name in SETS {
            pipe.zrange_withscores(self.earlier_key(endpoint, name), 0, -1);
        }
        let sets: Vec<Vec<(String, f64)>> = pipe.query_async(&mut connection).await?;
        // Each delivery is in exactly one of the sets of states.
        let ids: Vec<&str> = sets[1..5]
            .iter()
            .flatten()
            .map(|(id, _)| id.as_str())
            .collect();
        let mut moved = vec![(
            self.earlier_key(endpoint, "health"),
            self.health_key(endpoint),
        )];
        for batch in ids.chunks(MOVE_BATCH) {
            let mut pipe = redis::pipe();
            for id in batch {
                pipe.hget(self.earlier_key(endpoint, &format!("d:{id}")), "attempts");
            }
            let counts: Vec<Option<i64>> = pipe.query_async(&mut connection).await?;
            for (id, count) in batch.iter().zip(counts) {
                moved.push((
                    self.earlier_key(endpoint, &format!("d:{id}")),
                    self.delivery_key(endpoint, id),
                ));
                for n in 1..=count.unwrap_or(0).max(0) {
                    moved.push((
                        self.earlier_key(endpoint, &format!("a:{id}:{n}")),
                        self.attempt_key(endpoint, id, n),
                    ));
                }
            }
        }
        for batch in moved.chunks(MOVE_BATCH) {
            self.restore(batch).await?;
        }
        self.add_set_members(endpoint, &sets).await?;
        let earlier = moved
            .into_iter()
            .map(|(earlier, _)| earlier)
            .chain(SETS.map(|name| self.earlier_key(endpoint, name)));
        let earlier: Vec<String> = earlier.collect();
        for batch in earlier.chunks(MOVE_BATCH) {
            let mut pipe = redis::pipe();
            for key in batch {
                pipe.del(key).ignore();
            }
            let () = pipe.query_async(&mut connection).await?;
        }
        Ok(())
    }

    /// Copies each `(earlier, new)` key, all of one endpoint, where the new
    /// one does not exist yet.
    async fn restore(&self, keys: &[(String, String)]) -> Result<(), OutboxError> {
        let mut connection = self.connection.clone();
        let mut pipe = redis::pipe();
        for (earlier, _) in keys {
            pipe.cmd("DUMP").arg(earlier);
        }
        let dumps: Vec<Option<Vec<u8>>> = pipe.query_async(&mut connection).await?;
        let mut script = RESTORE_SCRIPT.prepare_invoke();
        for ((_, new), dump) in keys.iter().zip(dumps) {
            script.key(new).arg(dump.unwrap_or_default());
        }
        let _: i64 = script.invoke_async(&mut connection).await?;
        Ok(())
    }

    /// Adds the members of the endpoint's earlier sorted sets (in the order
    /// of [`SETS`]) to its new ones, and lists it in its shard.
    async fn add_set_members(
        &self,
        endpoint: &str,
        sets: &[Vec<(String, f64)>],
    ) -> Result<(), OutboxError> {
        let mut connection = self.connection.clone();
        let shard = Self::shard(endpoint);
        let mut rest: Vec<&[(String, f64)]> = sets.iter().map(Vec::as_slice).collect();
        loop {
            let mut script = MIGRATE_SCRIPT.script.prepare_invoke();
            for name in SETS.into_iter().chain(["health"]) {
                script.key(self.key(endpoint, name));
            }
            for name in ["ready", "off", "endpoints"] {
                script.key(self.shard_key(shard, name));
            }
            script.arg(endpoint);
            let mut room = MOVE_BATCH;
            for set in &mut rest {
                let (now, later) = set.split_at(set.len().min(room));
                script.arg(now.len());
                for (member, score) in now {
                    script.arg(score).arg(member);
                }
                room -= now.len();
                *set = later;
            }
            let _: i64 = script.invoke_async(&mut connection).await?;
            if rest.iter().all(|set| set.is_empty()) {
                return Ok(());
            }
        }
    }
}
