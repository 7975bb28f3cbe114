//! Taking due deliveries across endpoints from Redis: at most two script
//! calls a shard, whatever the number of endpoints.
//!
//! Each shard's ready set holds every endpoint of the shard with anything
//! in its due set, scored by its earliest due time (or lease end), and
//! every script that changes a due set keeps it (`lua/head.lua`). A take
//! first asks each shard with wanted endpoints (`lua/find_due.lua`, all
//! shards at once) for the disabled ones and, of those in the ready set,
//! up to each one's limit of due ids; then ranks what was found round-robin
//! over endpoints, keeps the first `limit`, and leases them
//! (`lua/take.lua`, again all shards at once), skipping any that another
//! dispatcher leased in between. A shard whose script fails leaves its
//! endpoints unanswered, and the take returns what the others leased.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use futures_util::future::join_all;
use redis::Script;

use super::{Call, RedisOutbox};
use crate::dedup::validate_namespace;
use crate::sender::OutboxError;
use crate::sender::outbox::codes::{HealthFields, TakenRow, due, health_from_fields};
use crate::sender::outbox::take_across::round_robin;
use crate::sender::outbox::{DueAcross, Taken, Wanted};
use crate::store::{millis, new_token, unix_millis};

static FIND_DUE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/find_due.lua")));

/// One endpoint's part of a lease in `lua/take.lua`: the ids to lease if
/// still due at `now`, until `until` (both in ms).
pub(super) struct Group<'a> {
    pub(super) endpoint: &'a str,
    pub(super) now: i64,
    pub(super) until: i64,
    pub(super) ids: Vec<String>,
}

/// What `lua/find_due.lua` found in a shard: the disabled endpoints, and
/// each endpoint with due deliveries and its ids and due times,
/// alternating.
type Found = (Vec<String>, Vec<(String, Vec<String>)>);

/// One endpoint's health and leased deliveries, from `lua/take.lua`.
pub(super) type Leased = (String, HealthFields, Vec<TakenRow>);

impl RedisOutbox {
    /// Leases, in one script in `shard`, what `groups` name, and reads
    /// each group's endpoint's health.
    pub(super) async fn lease(
        &self,
        shard: u16,
        token: &str,
        groups: &[Group<'_>],
    ) -> Result<Vec<Leased>, OutboxError> {
        let mut call = Call::default();
        call.key(self.shard_key(shard, "ready")).arg(token);
        for group in groups {
            call.key(self.health_key(group.endpoint))
                .key(self.key(group.endpoint, "due"))
                .arg(group.endpoint)
                .arg(group.now)
                .arg(group.until)
                .arg(group.ids.len());
            for id in &group.ids {
                call.key(self.delivery_key(group.endpoint, id)).arg(id);
            }
        }
        // With replica acks a lease waits for them too: a lease a failover
        // lost would let another dispatcher send what this one sends.
        self.run(&super::TAKE_SCRIPT, &call, |_| Ok(())).await
    }

    /// Finds, in one script, the disabled and the due deliveries of
    /// `wanted`, all in `shard`.
    async fn find_due(&self, shard: u16, wanted: &[&Wanted]) -> Result<Found, OutboxError> {
        let mut connection = self.connection().await?;
        let latest = wanted.iter().map(|want| unix_millis(want.now)).max();
        let mut script = FIND_DUE_SCRIPT.prepare_invoke();
        script
            .key(self.shard_key(shard, "ready"))
            .key(self.shard_key(shard, "off"))
            .arg(latest.unwrap_or(0));
        for want in wanted {
            script
                .key(self.key(&want.endpoint, "due"))
                .arg(&want.endpoint)
                .arg(want.limit)
                .arg(unix_millis(want.now));
        }
        Ok(script.invoke_async(&mut connection).await?)
    }

    /// [`take_due_across`](crate::sender::outbox::DeliveryStore::take_due_across):
    /// two rounds of at most one script call a shard.
    pub(super) async fn take_across(
        &self,
        wanted: &[Wanted],
        limit: usize,
        lease: Duration,
    ) -> Result<DueAcross, OutboxError> {
        let mut shards: HashMap<u16, Vec<&Wanted>> = HashMap::new();
        for want in wanted {
            validate_namespace(&want.endpoint)?;
            shards
                .entry(Self::shard(&want.endpoint))
                .or_default()
                .push(want);
        }
        // A shard whose script fails leaves its endpoints unanswered; what
        // the other shards lease is returned all the same.
        let (mut error, mut unanswered) = (None, Vec::new());
        let finds = shards
            .iter()
            .map(|(&shard, wanted)| async move { (shard, self.find_due(shard, wanted).await) });
        let mut found = Vec::with_capacity(shards.len());
        for (shard, answer) in join_all(finds).await {
            match answer {
                Ok(due) => found.push((shard, due)),
                Err(failed) => {
                    error.get_or_insert(failed);
                    let wanted = shards.get(&shard).into_iter().flatten();
                    unanswered.extend(wanted.map(|want| want.endpoint.clone()));
                }
            }
        }
        let by_name: HashMap<&str, &Wanted> = wanted
            .iter()
            .map(|want| (want.endpoint.as_str(), want))
            .collect();
        // Every endpoint's earliest due delivery before any endpoint's
        // second; the first `limit` of them are leased.
        let mut ranked: Vec<(usize, i64, u16, &str, String)> = Vec::new();
        let mut groups: HashMap<u16, Vec<Group<'_>>> = HashMap::new();
        for (shard, (disabled, due)) in &found {
            for endpoint in disabled {
                // Read again with the leases, to report its health.
                if let Some(want) = by_name.get(endpoint.as_str()) {
                    let now = unix_millis(want.now);
                    groups.entry(*shard).or_default().push(Group {
                        endpoint: &want.endpoint,
                        now,
                        until: now,
                        ids: Vec::new(),
                    });
                }
            }
            for (endpoint, pairs) in due {
                let Some(want) = by_name.get(endpoint.as_str()) else {
                    continue;
                };
                for (rank, pair) in pairs.chunks_exact(2).take(want.limit).enumerate() {
                    let at = pair[1].parse().unwrap_or(i64::MAX);
                    ranked.push((rank, at, *shard, &want.endpoint, pair[0].clone()));
                }
            }
        }
        ranked.sort_by_key(|entry| (entry.0, entry.1));
        ranked.truncate(limit);
        let mut chosen: HashMap<(u16, &str), Vec<String>> = HashMap::new();
        for (_, _, shard, endpoint, id) in ranked {
            chosen.entry((shard, endpoint)).or_default().push(id);
        }
        for ((shard, endpoint), ids) in chosen {
            let now = by_name
                .get(endpoint)
                .map_or(0, |want| unix_millis(want.now));
            let until = now.saturating_add(millis(lease));
            let group = Group {
                endpoint,
                now,
                until,
                ids,
            };
            groups.entry(shard).or_default().push(group);
        }
        let token = new_token();
        let leases = groups.iter().map(|(&shard, groups)| {
            let token = &token;
            async move { (groups, self.lease(shard, token, groups).await) }
        });
        let mut answer = DueAcross::default();
        let mut taken: Vec<Taken> = Vec::new();
        for (groups, leased) in join_all(leases).await {
            let leased = match leased {
                Ok(leased) => leased,
                Err(failed) => {
                    error.get_or_insert(failed);
                    unanswered.extend(groups.iter().map(|group| group.endpoint.to_owned()));
                    continue;
                }
            };
            for (endpoint, health, rows) in leased {
                let health = health_from_fields(health);
                if health.disabled.is_some() || !rows.is_empty() {
                    answer.health.insert(endpoint.clone(), health);
                }
                taken.extend(due(&endpoint, &token, health, rows).taken);
            }
        }
        answer.taken = round_robin(taken);
        unanswered.sort_unstable();
        unanswered.dedup();
        answer.or_failed(error, unanswered)
    }
}
