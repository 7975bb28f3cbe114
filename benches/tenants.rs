//! Lookups of a known tenant while made-up tenant names arrive at 100,000
//! a second (about as many requests as a bare axum handler answers on a
//! 2-core machine), next to the same lookups with no flood, in the same
//! run. The source answers after 1 ms, as a database query would, and
//! knows one tenant; eight tasks send the made-up names, each 13 every
//! millisecond, all at once.
//! Prints known lookups per second in each phase and their ratio, with the
//! made-up names answered and the lookups that reached the source.
//!
//! Run with: cargo bench --bench tenants --features http

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hooklatch::receive::{Receiver, Tenant, TenantError, TenantKey, TenantSource, Tenants};
use hooklatch::verify::{Scheme, Verifier};

const PHASE: Duration = Duration::from_secs(3);
const FLOODERS: usize = 8;
/// Made-up names each flooding task sends every millisecond.
const PER_MILLISECOND: u64 = 13;
const NO_HEADERS: [(&str, &str); 0] = [];

/// A tenant database: 1 ms a query, one tenant (`acme`).
#[derive(Clone)]
struct Database {
    acme: Tenant,
    queries: Arc<AtomicU64>,
}

impl TenantSource for Database {
    async fn tenant(&self, name: &str) -> Result<Option<Tenant>, TenantError> {
        self.queries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok((name == "acme").then(|| self.acme.clone()))
    }
}

/// Known-tenant lookups in `PHASE`, one after another.
async fn known_lookups(tenants: &Tenants) -> u64 {
    let started = Instant::now();
    let mut lookups = 0;
    while started.elapsed() < PHASE {
        for _ in 0..100 {
            tenants
                .resolve("/hooks/acme", &NO_HEADERS)
                .await
                .expect("the known tenant");
        }
        lookups += 100;
    }
    lookups
}

fn per_second(count: u64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let count = count as f64;
    count / PHASE.as_secs_f64()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let verifier = Verifier::builder(Scheme::standard_webhooks())
            .with_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .expect("a secret")
            .build()
            .expect("a verifier");
        let database = Database {
            acme: Tenant::new(Receiver::new(verifier), "acme").expect("a tenant"),
            queries: Arc::default(),
        };
        let tenants = Tenants::new(TenantKey::LastPathSegment, database.clone());
        tenants
            .resolve("/hooks/acme", &NO_HEADERS)
            .await
            .expect("the known tenant");

        let alone = known_lookups(&tenants).await;

        let stop = Arc::new(AtomicBool::new(false));
        let made_up = Arc::new(AtomicU64::new(0));
        let queries_before = database.queries.load(Ordering::Relaxed);
        let flooders: Vec<_> = (0..FLOODERS)
            .map(|task| {
                let (tenants, stop, made_up) = (tenants.clone(), stop.clone(), made_up.clone());
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(Duration::from_millis(1));
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        tick.tick().await;
                        let names = (i..i + PER_MILLISECOND).map(|n| {
                            let tenants = tenants.clone();
                            async move {
                                let path = format!("/hooks/made-up-{task}-{n}");
                                let _ = tenants.resolve(&path, &NO_HEADERS).await;
                            }
                        });
                        futures_util::future::join_all(names).await;
                        made_up.fetch_add(PER_MILLISECOND, Ordering::Relaxed);
                        i += PER_MILLISECOND;
                    }
                })
            })
            .collect();
        let flooded = known_lookups(&tenants).await;
        stop.store(true, Ordering::Relaxed);
        for flooder in flooders {
            flooder.await.expect("a flooder");
        }
        let queries = database.queries.load(Ordering::Relaxed) - queries_before;

        println!(
            "\nKnown-tenant lookups ({} s each phase, 2 worker threads, source 1 ms a query):",
            PHASE.as_secs()
        );
        println!(
            "| phase | known lookups/s | made-up names/s | source queries/s | ratio to alone |"
        );
        println!("|---|---|---|---|---|");
        println!("| alone | {:.0} | - | - | 1.000x |", per_second(alone));
        println!(
            "| made-up names from {FLOODERS} tasks | {:.0} | {:.0} | {:.0} | {:.3}x |",
            per_second(flooded),
            per_second(made_up.load(Ordering::Relaxed)),
            per_second(queries),
            per_second(flooded) / per_second(alone),
        );
    });
}
