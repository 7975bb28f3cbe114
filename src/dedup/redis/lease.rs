//! [`LeaseStore`] on Redis: a claim is a string that holds the lease's
//! token until the holder completes (`done`) or releases it.

use std::time::Duration;

use redis::Script;

use super::RedisInbox;
use super::scripts::{
    CLAIM_SCRIPT, COMPLETE, COMPLETE_SCRIPT, EXTEND_LEASE_SCRIPT, RELEASE_SCRIPT,
};
use crate::dedup::{Claim, DedupError, Lease, LeaseStore, check_key, millis, new_token};

impl LeaseStore for RedisInbox {
    async fn claim(
        &self,
        namespace: &str,
        id: &str,
        lease_for: Duration,
    ) -> Result<Claim, DedupError> {
        check_key(namespace, id)?;
        self.check_shards(namespace).await?;
        let mut connection = self.connection.clone();
        let token = new_token();
        let [tailing, log] = self.shards.tail_keys(namespace, self.shards.of(id));
        let (state, left_ms): (i64, i64) = CLAIM_SCRIPT
            .key(self.shards.claim_key(namespace, id))
            .key(tailing)
            .key(log)
            .arg(&token)
            .arg(millis(lease_for).max(1))
            .arg(id)
            .invoke_async(&mut connection)
            .await?;
        Ok(match state {
            1 => Claim::Fresh(Lease::new(namespace, id, token)),
            2 => Claim::Done,
            _ => Claim::InProgress {
                retry_after: Duration::from_millis(left_ms.max(0).unsigned_abs()),
            },
        })
    }

    /// With [replica acks](RedisInbox::with_replica_acks), answers once
    /// the done mark is on enough replicas, or fails with
    /// [`DedupError::ReplicasBehind`]: the mark is kept on the master, so a
    /// retried delivery is most likely answered done, and runs again only
    /// if a failover lost it.
    async fn complete(&self, lease: &Lease) -> Result<(), DedupError> {
        let retention = millis(self.options.retention()).to_string();
        let claim = self.shards.claim_key(lease.namespace(), lease.id());
        let [tailing, log] = self
            .shards
            .tail_keys(lease.namespace(), self.shards.of(lease.id()));
        let held: i64 = self
            .run_script(
                (&COMPLETE_SCRIPT, COMPLETE),
                &[&claim, &tailing, &log],
                &[
                    lease.token().as_bytes(),
                    retention.as_bytes(),
                    lease.id().as_bytes(),
                ],
            )
            .await?;
        if held == 1 {
            Ok(())
        } else {
            Err(DedupError::LeaseLost)
        }
    }

    async fn extend_lease(&self, lease: &Lease, lease_for: Duration) -> Result<(), DedupError> {
        let lease_ms = millis(lease_for).max(1);
        self.on_lease(&EXTEND_LEASE_SCRIPT, lease, Some(lease_ms))
            .await
    }

    async fn release(&self, lease: &Lease) -> Result<(), DedupError> {
        let [tailing, log] = self
            .shards
            .tail_keys(lease.namespace(), self.shards.of(lease.id()));
        let mut invocation =
            RELEASE_SCRIPT.key(self.shards.claim_key(lease.namespace(), lease.id()));
        invocation
            .key(tailing)
            .key(log)
            .arg(lease.token())
            .arg(lease.id());
        self.run_fenced(invocation, None, DedupError::LeaseLost)
            .await
    }
}

impl RedisInbox {
    /// Runs a fenced script on a lease (complete, heartbeat, release), with
    /// an optional milliseconds argument: it answers 1 when the lease's token
    /// still holds the claim.
    async fn on_lease(
        &self,
        script: &Script,
        lease: &Lease,
        ms: Option<i64>,
    ) -> Result<(), DedupError> {
        let mut invocation = script.key(self.shards.claim_key(lease.namespace(), lease.id()));
        invocation.arg(lease.token());
        self.run_fenced(invocation, ms, DedupError::LeaseLost).await
    }
}
