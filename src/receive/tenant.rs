//! Many tenants on one receiver: which tenant a request is for, its
//! secrets and its namespace, looked up through a bounded, expiring cache.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

// Tokio's clock, so that tests can pause and move it; the same as the
// standard library's otherwise.
use tokio::time::Instant;

use super::{Receiver, Rejection, VerifiedEvent};
use crate::dedup::{DedupError, validate_namespace};
use crate::verify::{HeaderKey, HeaderLookup, Headers};

/// One tenant: how its requests are verified and the namespace its events
/// are claimed in, so that the same event id in two tenants is two events.
#[derive(Debug, Clone)]
pub struct Tenant {
    receiver: Receiver,
    namespace: String,
}

impl Tenant {
    /// A tenant verified by `receiver` (its verifier holds the tenant's
    /// secrets, with their validity windows) whose events are claimed in
    /// `namespace`.
    pub fn new(receiver: Receiver, namespace: &str) -> Result<Self, DedupError> {
        validate_namespace(namespace)?;
        Ok(Self {
            receiver,
            namespace: namespace.to_owned(),
        })
    }

    /// How the tenant's requests are read and verified.
    pub fn receiver(&self) -> &Receiver {
        &self.receiver
    }

    /// The namespace the tenant's events are claimed in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

/// Why a tenant could not be looked up (the request is answered 503).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TenantError(Box<dyn std::error::Error + Send + Sync>);

impl TenantError {
    /// Wraps the lookup's own error.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self(error.into())
    }
}

/// Where tenants come from: your database, a secrets manager, a file.
/// [`StaticTenants`] keeps them in memory, replaceable at run time.
pub trait TenantSource: Send + Sync + 'static {
    /// The tenant called `name`, or `None` when there is none (answered
    /// 404). An error is answered 503, so the sender retries.
    fn tenant(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Tenant>, TenantError>> + Send;

    /// Whether lookups should go through [`Tenants`]' cache; a source that
    /// answers from memory says no.
    fn cacheable(&self) -> bool {
        true
    }
}

/// Tenants in memory, replaced whole at run time (after reading a changed
/// file, say) without a restart. Clones share the tenants.
///
/// ```
/// use std::collections::HashMap;
/// use hooklatch::receive::{Receiver, StaticTenants, Tenant};
/// use hooklatch::verify::{Scheme, Verifier};
///
/// let tenant = |secret: &str, namespace: &str| -> Result<Tenant, Box<dyn std::error::Error>> {
///     let verifier = Verifier::builder(Scheme::standard_webhooks()).with_secret(secret)?.build()?;
///     Ok(Tenant::new(Receiver::new(verifier), namespace)?)
/// };
/// let tenants = StaticTenants::default();
/// tenants.replace(HashMap::from([("acme".to_owned(), tenant("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "acme")?)]));
/// assert_eq!(tenants.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct StaticTenants {
    tenants: Arc<RwLock<Arc<HashMap<String, Tenant>>>>,
}

impl StaticTenants {
    /// Replaces every tenant at once: requests already past the lookup
    /// finish with the tenant they found.
    pub fn replace(&self, tenants: HashMap<String, Tenant>) {
        *self.tenants.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(tenants);
    }

    /// How many tenants there are.
    pub fn len(&self) -> usize {
        self.current().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.current().is_empty()
    }

    fn current(&self) -> Arc<HashMap<String, Tenant>> {
        Arc::clone(&self.tenants.read().unwrap_or_else(PoisonError::into_inner))
    }
}

impl TenantSource for StaticTenants {
    async fn tenant(&self, name: &str) -> Result<Option<Tenant>, TenantError> {
        Ok(self.current().get(name).cloned())
    }

    fn cacheable(&self) -> bool {
        false
    }
}

/// A function that names the tenant from a request's path and headers.
pub type NameFn = Arc<dyn Fn(&str, &dyn Headers) -> Option<String> + Send + Sync>;

/// What names the tenant in a request.
#[derive(Clone)]
#[non_exhaustive]
pub enum TenantKey {
    /// The last segment of the path: `/webhooks/{tenant}`.
    LastPathSegment,
    /// The `n`th segment of the path, from 0: `/{tenant}/webhooks` is 0.
    PathSegment(usize),
    /// The host, without a port: `acme.hooks.example.com`.
    Host,
    /// A header's value, such as a GitHub App's installation target.
    Header(HeaderKey),
    /// Anything else: a function of the path and the headers.
    Custom(NameFn),
}

impl std::fmt::Debug for TenantKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::LastPathSegment => f.write_str("LastPathSegment"),
            Self::PathSegment(n) => f.debug_tuple("PathSegment").field(n).finish(),
            Self::Host => f.write_str("Host"),
            Self::Header(name) => f.debug_tuple("Header").field(&name.as_str()).finish(),
            Self::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl TenantKey {
    /// The tenant's name in a request for `path` with `headers`, if it
    /// names one.
    pub fn name_in(&self, path: &str, headers: &dyn Headers) -> Option<String> {
        let segments = || path.split('/').filter(|segment| !segment.is_empty());
        let header = |name: &HeaderKey| match headers.lookup(name) {
            HeaderLookup::One(value) => std::str::from_utf8(value).ok().map(str::to_owned),
            _ => None,
        };
        let name = match self {
            Self::LastPathSegment => segments().next_back().map(str::to_owned),
            Self::PathSegment(n) => segments().nth(*n).map(str::to_owned),
            // Host names ignore case: one spelling, so that made-up
            // spellings of a tenant's host are one name to the cache.
            Self::Host => header(&HeaderKey::from_static("host")).map(|host| {
                host.rsplit_once(':')
                    .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
                    .map_or(host.clone(), |(name, _)| name.to_owned())
                    .to_ascii_lowercase()
            }),
            Self::Header(name) => header(name),
            Self::Custom(find) => find(path, headers),
        }?;
        (!name.is_empty() && name.len() <= 256).then_some(name)
    }
}

type Lookup<'a> = Pin<Box<dyn Future<Output = Result<Option<Tenant>, TenantError>> + Send + 'a>>;

trait DynSource: Send + Sync {
    fn tenant<'a>(&'a self, name: &'a str) -> Lookup<'a>;
}

impl<S: TenantSource> DynSource for S {
    fn tenant<'a>(&'a self, name: &'a str) -> Lookup<'a> {
        Box::pin(TenantSource::tenant(self, name))
    }
}

/// Names kept in least-recently-used order, each with the time it was
/// looked up: a full cache drops the name used least recently, in
/// `O(log n)` under the lock.
struct Lru<V> {
    entries: HashMap<String, (V, Instant, u64)>,
    /// Each name by when it was last used.
    order: BTreeMap<u64, String>,
    /// The names kept for each group ([`Grouped`]), so that counting a
    /// tenant's names costs its names, not the cache.
    groups: HashMap<String, Vec<String>>,
    next: u64,
    capacity: usize,
}

/// What a cached value belongs to: the names one tenant is cached under
/// form its group.
trait Grouped {
    fn group(&self) -> Option<&str>;
}

impl Grouped for Tenant {
    fn group(&self) -> Option<&str> {
        Some(self.namespace())
    }
}

impl Grouped for () {
    fn group(&self) -> Option<&str> {
        None
    }
}

impl<V: Clone + Grouped> Lru<V> {
    fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            groups: HashMap::new(),
            next: 0,
            capacity,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }

    /// The value of `name` and when it was looked up, marked as used. A
    /// name among the most recently used half stays where it is, so that
    /// a hot name costs no reordering.
    fn get(&mut self, name: &str) -> Option<(V, Instant)> {
        let next = self.next;
        let half = u64::try_from(self.capacity / 2).unwrap_or(u64::MAX);
        let (value, at, used) = self.entries.get_mut(name)?;
        let found = (value.clone(), *at);
        if next - *used > half {
            if let Some(name) = self.order.remove(used) {
                self.order.insert(next, name);
            }
            *used = next;
            self.next += 1;
        }
        Some(found)
    }

    fn insert(&mut self, name: String, value: V) {
        if self.capacity == 0 {
            return;
        }
        self.remove(&name);
        while self.entries.len() >= self.capacity {
            let Some(least) = self.order.first_key_value().map(|(_, name)| name.clone()) else {
                break;
            };
            self.remove(&least);
        }
        if let Some(group) = value.group() {
            let names = self.groups.entry(group.to_owned()).or_default();
            names.push(name.clone());
        }
        self.order.insert(self.next, name.clone());
        self.entries
            .insert(name, (value, Instant::now(), self.next));
        self.next += 1;
    }

    fn remove(&mut self, name: &str) -> Option<V> {
        let (value, _, used) = self.entries.remove(name)?;
        self.order.remove(&used);
        if let Some(group) = value.group()
            && let Some(names) = self.groups.get_mut(group)
        {
            names.retain(|kept| kept != name);
            if names.is_empty() {
                self.groups.remove(group);
            }
        }
        Some(value)
    }

    /// Removes every name `drop` picks.
    fn remove_where(&mut self, mut drop: impl FnMut(&str, &V) -> bool) {
        let picked: Vec<String> = self
            .entries
            .iter()
            .filter(|(name, (value, _, _))| drop(name, value))
            .map(|(name, _)| name.clone())
            .collect();
        for name in picked {
            self.remove(&name);
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.order.clear();
        self.groups.clear();
    }

    /// How many names `group` has, and the least recently used of them.
    fn count_and_least_used(&self, group: &str) -> (usize, Option<String>) {
        let names = self.groups.get(group).map_or(&[][..], Vec::as_slice);
        let least = names
            .iter()
            .filter_map(|name| Some((self.entries.get(name)?.2, name)))
            .min()
            .map(|(_, name)| name.clone());
        (names.len(), least)
    }
}

/// At most `per_second` lookups a second, in bursts of as many.
struct LookupLimit {
    per_second: f64,
    tokens: f64,
    at: Instant,
}

impl LookupLimit {
    fn new(per_second: u32) -> Self {
        Self {
            per_second: f64::from(per_second),
            tokens: f64::from(per_second),
            at: Instant::now(),
        }
    }

    /// Whether one more lookup may go to the source now.
    fn allow(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + refill).min(self.per_second);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What [`Tenants`] keeps between requests: known tenants, unknown names
/// in a smaller cache of their own (so that made-up names only ever evict
/// made-up names), and the limit on lookups that reach the source.
struct Cache {
    known: Lru<Tenant>,
    unknown: Lru<()>,
    /// Names a lookup found a tenant for (at most [`NAMES_PER_TENANT`] per
    /// tenant, so that spellings made up by the thousand cannot claim the
    /// budget), kept after the cache lets their answers go: their lookups
    /// have a budget of their own.
    found_before: Lru<FoundUnder>,
    /// The lookups of names never found: made-up names use this one up.
    limit: Option<LookupLimit>,
    /// The lookups of names found before (an answer expired or let go),
    /// apart, so that a flood of made-up names never starves a real tenant.
    limit_found: Option<LookupLimit>,
    /// Counts forgets: a lookup that was asked before one is not kept.
    generation: u64,
}

/// The most unknown names kept; a made-up name a sender keeps using stays
/// answered from here.
const UNKNOWN_NAMES: usize = 1_000;

/// The most names one tenant is cached under: a source that ignores case
/// finds a tenant under every spelling of its name, and spellings made up
/// by the thousand must not push other tenants out.
const NAMES_PER_TENANT: usize = 8;

impl Cache {
    /// With nothing cached every request would need a lookup: the limit
    /// applies only with the cache on.
    fn new(capacity: usize, lookups_per_second: Option<u32>) -> Self {
        let limit = || {
            lookups_per_second
                .filter(|_| capacity > 0)
                .map(|per_second| LookupLimit::new(per_second.max(1)))
        };
        Self {
            known: Lru::new(capacity),
            unknown: Lru::new(capacity.min(UNKNOWN_NAMES)),
            found_before: Lru::new(capacity),
            limit: limit(),
            limit_found: limit(),
            generation: 0,
        }
    }

    /// Keeps `tenant` under `name`, within [`NAMES_PER_TENANT`] names for
    /// its namespace.
    fn keep_known(&mut self, name: String, tenant: Tenant) {
        self.unknown.remove(&name);
        self.known.remove(&name);
        self.found_before.remove(&name);
        let (found, least) = self.found_before.count_and_least_used(tenant.namespace());
        if found >= NAMES_PER_TENANT
            && let Some(least) = least
        {
            self.found_before.remove(&least);
        }
        self.found_before
            .insert(name.clone(), FoundUnder(tenant.namespace().to_owned()));
        let (names, least) = self.known.count_and_least_used(tenant.namespace());
        if names >= NAMES_PER_TENANT
            && let Some(least) = least
        {
            self.known.remove(&least);
        }
        self.known.insert(name, tenant);
    }
}

/// The tenant (its namespace) a name was found under.
#[derive(Clone)]
struct FoundUnder(String);

impl Grouped for FoundUnder {
    fn group(&self) -> Option<&str> {
        Some(&self.0)
    }
}

/// What the cache says of a name.
enum Cached {
    /// A fresh answer: the tenant, or that there is none.
    Fresh(Option<Tenant>),
    /// Nothing fresh, and the limit on lookups is reached: the tenant as
    /// last looked up, if it was known.
    Limited(Option<Tenant>),
    /// Ask the source; keep its answer unless the cache's generation has
    /// moved on (a forget came meanwhile).
    Ask(u64),
}

/// How a receiver finds each request's tenant: the [`TenantKey`] names it,
/// the [`TenantSource`] has it, and a cache sits between: 10,000 known
/// names (at most 8 for one tenant) and 1,000 unknown ones, each answer
/// for 60 s, by default.
/// Names not in the cache reach the source at most 100 times a second
/// ([`with_lookup_limit`](Self::with_lookup_limit)), and names a lookup
/// found before (this process) have 100 more of their own, so a flood of
/// made-up names neither overloads the source, nor evicts a known tenant,
/// nor uses up the lookups a real tenant needs when its answer expires.
/// Past its limit, a name never found is answered 503 (the sender
/// retries), and a tenant whose answer expired keeps its last answer for
/// at most one more time to live, then is answered 503 until a lookup gets
/// through. So a tenant removed or whose secrets changed at the source is
/// refused within the time to live, or twice that while lookups are
/// throttled; [`forget`](Self::forget) makes it take effect at once. Clones share the
/// cache. A source that is not worth caching (`StaticTenants`, in memory)
/// gets neither the cache nor the limit.
///
/// An unknown tenant is answered 404 and a failed lookup 503; neither
/// reads the body.
#[derive(Clone)]
pub struct Tenants {
    key: TenantKey,
    source: Arc<dyn DynSource>,
    cache: Arc<Mutex<Cache>>,
    capacity: usize,
    ttl: Duration,
    lookups_per_second: Option<u32>,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenants")
            .field("key", &self.key)
            .field("capacity", &self.capacity)
            .field("ttl", &self.ttl)
            .field("lookups_per_second", &self.lookups_per_second)
            .finish_non_exhaustive()
    }
}

/// Lookups a second that may reach a source worth caching, by default.
const LOOKUPS_PER_SECOND: u32 = 100;

impl Tenants {
    /// Tenants named by `key`, from `source`.
    pub fn new(key: TenantKey, source: impl TenantSource) -> Self {
        let cacheable = source.cacheable();
        let (capacity, lookups_per_second) = if cacheable {
            (10_000, Some(LOOKUPS_PER_SECOND))
        } else {
            (0, None)
        };
        Self {
            key,
            source: Arc::new(source),
            cache: Arc::new(Mutex::new(Cache::new(capacity, lookups_per_second))),
            capacity,
            ttl: Duration::from_secs(60),
            lookups_per_second,
        }
    }

    /// Keeps up to `capacity` known tenants (and up to 1,000 unknown names,
    /// fewer if `capacity` is smaller) for `ttl` each; a change at the
    /// source shows within `ttl`, or at once after
    /// [`forget`](Self::forget). A capacity of 0 turns the cache off.
    #[must_use]
    pub fn with_cache(mut self, capacity: usize, ttl: Duration) -> Self {
        self.capacity = capacity;
        self.ttl = ttl;
        self.cache = Arc::new(Mutex::new(Cache::new(capacity, self.lookups_per_second)));
        self
    }

    /// Lets at most `per_second` lookups a second (at least one) of names
    /// never found reach the source, and as many again of names a lookup
    /// found before, in bursts of as many, or any number with `None`. The
    /// limit applies only with the cache on: with nothing cached, every
    /// request would need a lookup.
    ///
    /// ```
    /// use std::time::Duration;
    /// use hooklatch::receive::{StaticTenants, TenantKey, Tenants};
    ///
    /// let tenants = Tenants::new(TenantKey::LastPathSegment, StaticTenants::default())
    ///     .with_cache(10_000, Duration::from_secs(60))
    ///     .with_lookup_limit(Some(500));
    /// # let _ = tenants;
    /// ```
    #[must_use]
    pub fn with_lookup_limit(mut self, per_second: Option<u32>) -> Self {
        self.lookups_per_second = per_second;
        self.cache = Arc::new(Mutex::new(Cache::new(self.capacity, per_second)));
        self
    }

    /// Drops the cached lookups of `name`, after its secrets changed: every
    /// spelling of it that differs only in ASCII case (a source may ignore
    /// case), and every other name cached for the same tenant (its
    /// namespace) when one of those spellings is cached. A lookup already
    /// under way when this is called is not kept.
    pub fn forget(&self, name: &str) {
        let mut cache = self.cached();
        cache.generation += 1;
        let mut namespaces = Vec::new();
        cache.known.remove_where(|cached, tenant| {
            let same = cached.eq_ignore_ascii_case(name);
            if same {
                namespaces.push(tenant.namespace().to_owned());
            }
            same
        });
        cache.known.remove_where(|_, tenant| {
            namespaces
                .iter()
                .any(|namespace| namespace == tenant.namespace())
        });
        cache
            .unknown
            .remove_where(|cached, ()| cached.eq_ignore_ascii_case(name));
    }

    /// Drops every cached lookup.
    pub fn forget_all(&self) {
        let mut cache = self.cached();
        cache.generation += 1;
        cache.known.clear();
        cache.unknown.clear();
    }

    fn cached(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tenant a request for `path` with `headers` is for. The name is
    /// read from the request at once; only the lookup waits.
    pub fn resolve(
        &self,
        path: &str,
        headers: &dyn Headers,
    ) -> impl Future<Output = Result<Tenant, Rejection>> + Send + '_ {
        let name = self.key.name_in(path, headers);
        async move {
            let found = match name {
                Some(name) => self.lookup(name).await,
                None => Err(Rejection::UnknownTenant),
            };
            found.inspect_err(|rejection| super::metrics::rejected(rejection, "", ""))
        }
    }

    /// Checks `event`, verified with the secrets `before` had when the
    /// request's headers arrived, against the tenant as it is now that the
    /// body is read (the body may take up to the body timeout): a tenant
    /// removed meanwhile is refused (404), and one whose secrets changed
    /// verifies the event again with them (400 if none signed it). Returns
    /// the tenant as it is now. A tenant is "now" as the cache sees it:
    /// with a source worth caching, a change shows after
    /// [`forget`](Self::forget) or the cache's time to live.
    ///
    /// Both adapters call this between reading the body and claiming the
    /// event.
    pub async fn recheck(
        &self,
        path: &str,
        headers: &(dyn Headers + Sync),
        before: &Tenant,
        event: &VerifiedEvent,
    ) -> Result<Tenant, Rejection> {
        let now = self.resolve(path, headers).await?;
        if now.receiver().checks_as(before.receiver()) {
            return Ok(now);
        }
        let Some(verifier) = now.receiver().verifier() else {
            // A message signature covers the request line, which is not
            // at hand here: the sender's retry is verified afresh.
            return Err(Rejection::TenantLookupFailed(
                "the tenant's keys changed while its request arrived".to_owned(),
            ));
        };
        verifier.verify(headers, &event.body).map_err(|error| {
            let rejection = Rejection::Unverified(error);
            super::metrics::rejected(&rejection, verifier.scheme().name(), "");
            rejection
        })?;
        Ok(now)
    }

    /// What the cache says of `name`.
    fn in_cache(&self, name: &str) -> Cached {
        let mut cache = self.cached();
        let known = cache.known.get(name);
        if let Some((tenant, at)) = &known
            && at.elapsed() < self.ttl
        {
            return Cached::Fresh(Some(tenant.clone()));
        }
        if let Some(((), at)) = cache.unknown.get(name)
            && at.elapsed() < self.ttl
        {
            return Cached::Fresh(None);
        }
        let found_before = known.is_some() || cache.found_before.get(name).is_some();
        let limit = if found_before {
            &mut cache.limit_found
        } else {
            &mut cache.limit
        };
        if limit.as_mut().is_none_or(LookupLimit::allow) {
            Cached::Ask(cache.generation)
        } else {
            // An expired answer stands in for one more time to live at most:
            // a tenant revoked at the source is refused by then.
            Cached::Limited(
                known
                    .filter(|(_, at)| at.elapsed() < self.ttl.saturating_mul(2))
                    .map(|(tenant, _)| tenant),
            )
        }
    }

    async fn lookup(&self, name: String) -> Result<Tenant, Rejection> {
        let generation = match self.in_cache(&name) {
            Cached::Fresh(found) => return found.ok_or(Rejection::UnknownTenant),
            Cached::Limited(Some(stale)) => return Ok(stale),
            Cached::Limited(None) => {
                return Err(Rejection::TenantLookupFailed(
                    "too many lookups of tenants not in the cache".to_owned(),
                ));
            }
            Cached::Ask(generation) => generation,
        };
        let found = self
            .source
            .tenant(&name)
            .await
            .map_err(|error| Rejection::TenantLookupFailed(error.to_string()))?;
        let mut cache = self.cached();
        // An answer read before a forget may hold what was forgotten.
        if cache.generation == generation {
            match &found {
                Some(tenant) => cache.keep_known(name, tenant.clone()),
                None => {
                    cache.known.remove(&name);
                    cache.unknown.insert(name, ());
                }
            }
        }
        drop(cache);
        found.ok_or(Rejection::UnknownTenant)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::verify::{Scheme, Verifier};

    /// A source that counts its lookups, knows `acme`, and fails for
    /// `broken`.
    #[derive(Clone, Default)]
    struct Counting {
        lookups: Arc<AtomicUsize>,
    }

    impl TenantSource for Counting {
        async fn tenant(&self, name: &str) -> Result<Option<Tenant>, TenantError> {
            self.lookups.fetch_add(1, Ordering::SeqCst);
            match name {
                "broken" => Err(TenantError::new("the tenant database is down")),
                "acme" | "globex" => {
                    let verifier = Verifier::builder(Scheme::standard_webhooks())
                        .with_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
                        .unwrap()
                        .build()
                        .unwrap();
                    Ok(Some(Tenant::new(Receiver::new(verifier), name).unwrap()))
                }
                _ => Ok(None),
            }
        }
    }

    const NO_HEADERS: [(&str, &str); 0] = [];

    #[derive(Clone)]
    struct InGroup(String);

    impl Grouped for InGroup {
        fn group(&self) -> Option<&str> {
            Some(&self.0)
        }
    }

    /// The per-tenant index the cache counts names by stays exactly the
    /// cache's names by tenant through inserts, evictions, removals and
    /// clears, and its least used name is the one the order says.
    #[test]
    fn the_group_index_follows_every_insert_eviction_and_removal() {
        let mut lru = Lru::new(50);
        let mut state = 7_u64;
        for step in 0..20_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let name = format!("name-{}", (state >> 33) % 120);
            let group = format!("tenant-{}", (state >> 20) % 9);
            match (state >> 50) % 10 {
                0..=5 => lru.insert(name, InGroup(group)),
                6..=7 => drop(lru.remove(&name)),
                8 if step % 500 == 0 => lru.clear(),
                _ => drop(lru.get(&name)),
            }
            let mut expected: HashMap<String, Vec<String>> = HashMap::new();
            for (name, (value, _, _)) in &lru.entries {
                expected
                    .entry(value.0.clone())
                    .or_default()
                    .push(name.clone());
            }
            let mut indexed = lru.groups.clone();
            for names in expected.values_mut().chain(indexed.values_mut()) {
                names.sort();
            }
            assert_eq!(indexed, expected, "step {step}");
            for (group, names) in &expected {
                let least = lru
                    .order
                    .values()
                    .find(|name| lru.entries[*name].0.0 == *group);
                assert_eq!(
                    lru.count_and_least_used(group),
                    (names.len(), least.cloned())
                );
            }
        }
        assert!(lru.entries.len() <= 50);
    }

    #[tokio::test]
    async fn lookups_are_cached_known_or_not_and_failures_are_503() {
        let source = Counting::default();
        let tenants = Tenants::new(TenantKey::LastPathSegment, source.clone());
        let resolve = |path: &'static str| tenants.resolve(path, &NO_HEADERS);
        assert_eq!(resolve("/hooks/acme").await.unwrap().namespace(), "acme");
        assert!(resolve("/hooks/acme").await.is_ok());
        assert_eq!(
            resolve("/hooks/nobody").await.unwrap_err(),
            Rejection::UnknownTenant
        );
        assert_eq!(
            resolve("/hooks/nobody").await.unwrap_err(),
            Rejection::UnknownTenant
        );
        assert_eq!(
            source.lookups.load(Ordering::SeqCst),
            2,
            "one lookup per name"
        );
        let failed = resolve("/hooks/broken").await.unwrap_err();
        assert_eq!(failed.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(resolve("/hooks/broken").await.is_err());
        assert_eq!(
            source.lookups.load(Ordering::SeqCst),
            4,
            "a failure is not cached"
        );
        assert_eq!(resolve("/").await.unwrap_err(), Rejection::UnknownTenant);
        tenants.forget("acme");
        assert!(resolve("/hooks/acme").await.is_ok());
        assert_eq!(
            source.lookups.load(Ordering::SeqCst),
            5,
            "forgotten, looked up again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_is_bounded_and_entries_expire() {
        let source = Counting::default();
        let tenants = Tenants::new(TenantKey::LastPathSegment, source.clone())
            .with_cache(2, Duration::from_millis(50));
        for name in ["/a", "/b", "/c"] {
            let _ = tenants.resolve(name, &NO_HEADERS).await;
        }
        assert_eq!(tenants.cached().unknown.len(), 2, "bounded");
        assert!(
            tenants.cached().unknown.get("a").is_none(),
            "the least recently used made room"
        );
        let _ = tenants.resolve("/c", &NO_HEADERS).await;
        assert_eq!(source.lookups.load(Ordering::SeqCst), 3);
        tokio::time::sleep(Duration::from_millis(60)).await;
        let _ = tenants.resolve("/c", &NO_HEADERS).await;
        assert_eq!(
            source.lookups.load(Ordering::SeqCst),
            4,
            "expired, looked up again"
        );
    }

    #[tokio::test]
    async fn a_flood_of_made_up_names_never_evicts_a_known_tenant_nor_floods_the_source() {
        let source = Counting::default();
        let tenants = Tenants::new(TenantKey::LastPathSegment, source.clone());
        assert!(tenants.resolve("/hooks/acme", &NO_HEADERS).await.is_ok());
        let started = Instant::now();
        let mut refused = 0;
        for i in 0..20_000 {
            let path = format!("/hooks/made-up-{i}");
            match tenants.resolve(&path, &NO_HEADERS).await {
                Err(Rejection::UnknownTenant) => {}
                Err(Rejection::TenantLookupFailed(_)) => refused += 1,
                other => panic!("a made-up name: {other:?}"),
            }
        }
        let lookups = source.lookups.load(Ordering::SeqCst);
        let allowed = 1.0 + 100.0 * (1.0 + started.elapsed().as_secs_f64());
        #[allow(clippy::cast_precision_loss)]
        let within = (lookups as f64) <= allowed + 1.0;
        assert!(
            within,
            "{lookups} lookups reached the source, at most {allowed} allowed"
        );
        assert!(refused > 19_000, "past the limit, answered 503: {refused}");
        assert!(tenants.resolve("/hooks/acme", &NO_HEADERS).await.is_ok());
        assert_eq!(
            source.lookups.load(Ordering::SeqCst),
            lookups,
            "the known tenant is still cached"
        );
    }

    /// Made-up names use up the lookups of names never found, not those
    /// of a tenant found before: its expired answer is looked up again
    /// during the flood.
    #[tokio::test(start_paused = true)]
    async fn a_flood_of_made_up_names_leaves_a_known_tenant_its_own_lookups() {
        let source = Counting::default();
        let tenants = Tenants::new(TenantKey::LastPathSegment, source.clone())
            .with_cache(100, Duration::from_secs(60))
            .with_lookup_limit(Some(1));
        assert!(tenants.resolve("/hooks/acme", &NO_HEADERS).await.is_ok());
        tokio::time::advance(Duration::from_secs(61)).await;
        for i in 0..100 {
            let path = format!("/hooks/made-up-{i}");
            let _ = tenants.resolve(&path, &NO_HEADERS).await;
        }
        assert_eq!(
            source.lookups.load(Ordering::SeqCst),
            2,
            "one made-up name got through"
        );
        assert!(tenants.resolve("/hooks/acme", &NO_HEADERS).await.is_ok());
        assert_eq!(
            source.lookups.load(Ordering::SeqCst),
            3,
            "the known tenant was looked up again, not served stale"
        );
    }

    /// Past the limit, a known tenant's expired answer stands in for one
    /// more time to live, and no longer: then it is 503 until a lookup
    /// gets through, so a tenant revoked at the source stops verifying.
    #[tokio::test(start_paused = true)]
    async fn past_the_lookup_limit_a_known_tenant_keeps_its_last_answer_for_one_more_ttl() {
        let source = Counting::default();
        let tenants = Tenants::new(TenantKey::LastPathSegment, source.clone())
            .with_cache(100, Duration::from_secs(10))
            .with_lookup_limit(Some(1));
        let resolve = |path: &'static str| tenants.resolve(path, &NO_HEADERS);
        assert!(resolve("/hooks/acme").await.is_ok());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(resolve("/hooks/globex").await.is_ok());
        assert_eq!(
            resolve("/hooks/nobody").await.unwrap_err().status(),
            http::StatusCode::SERVICE_UNAVAILABLE,
            "a name never seen waits for the next lookup"
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        // acme takes this second's lookup; globex, expired, is served as
        // last looked up.
        assert!(resolve("/hooks/acme").await.is_ok());
        assert!(resolve("/hooks/globex").await.is_ok());
        assert_eq!(source.lookups.load(Ordering::SeqCst), 3);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(resolve("/hooks/acme").await.is_ok());
        assert_eq!(
            resolve("/hooks/globex").await.unwrap_err().status(),
            http::StatusCode::SERVICE_UNAVAILABLE,
            "an answer two times to live old is not served"
        );
        assert_eq!(source.lookups.load(Ordering::SeqCst), 4);
    }

    /// A source that ignores case, as a database collation may.
    #[derive(Clone, Default)]
    struct CaseBlind(Counting);

    impl TenantSource for CaseBlind {
        async fn tenant(&self, name: &str) -> Result<Option<Tenant>, TenantError> {
            TenantSource::tenant(&self.0, &name.to_ascii_lowercase()).await
        }
    }

    #[tokio::test]
    async fn forgetting_a_tenant_forgets_every_spelling_of_it() {
        let source = CaseBlind::default();
        let lookups = Arc::clone(&source.0.lookups);
        let tenants = Tenants::new(TenantKey::LastPathSegment, source);
        for path in ["/hooks/ACME", "/hooks/acme", "/hooks/Acme"] {
            assert!(tenants.resolve(path, &NO_HEADERS).await.is_ok());
        }
        assert_eq!(lookups.load(Ordering::SeqCst), 3);
        tenants.forget("acme");
        for path in ["/hooks/ACME", "/hooks/acme", "/hooks/Acme"] {
            assert!(tenants.resolve(path, &NO_HEADERS).await.is_ok());
        }
        assert_eq!(
            lookups.load(Ordering::SeqCst),
            6,
            "every spelling looked up again"
        );
    }

    #[tokio::test]
    async fn spellings_of_one_tenant_never_push_other_tenants_out() {
        let source = CaseBlind::default();
        let lookups = Arc::clone(&source.0.lookups);
        let tenants = Tenants::new(TenantKey::LastPathSegment, source)
            .with_cache(10, Duration::from_secs(60))
            .with_lookup_limit(None);
        assert!(tenants.resolve("/hooks/globex", &NO_HEADERS).await.is_ok());
        for n in 0..64u32 {
            let spelling: String = "acme"
                .chars()
                .enumerate()
                .map(|(i, c)| {
                    if n >> i & 1 == 1 {
                        c.to_ascii_uppercase()
                    } else {
                        c
                    }
                })
                .collect();
            let path = format!(
                "/hooks/{spelling}{}",
                "e".repeat(usize::try_from(n / 16).unwrap())
            );
            let _ = tenants.resolve(&path, &NO_HEADERS).await;
        }
        let before = lookups.load(Ordering::SeqCst);
        assert!(tenants.resolve("/hooks/globex", &NO_HEADERS).await.is_ok());
        assert_eq!(
            lookups.load(Ordering::SeqCst),
            before,
            "globex is still cached"
        );
        assert!(tenants.cached().known.len() <= NAMES_PER_TENANT + 1);
        // Nor can they claim the lookups of names found before: at most
        // eight of one tenant's spellings count as found.
        let (found, _) = tenants.cached().found_before.count_and_least_used("acme");
        assert!(found <= NAMES_PER_TENANT, "{found} spellings of acme");
    }

    /// Host names ignore case: every spelling of one host is one name.
    #[test]
    fn a_host_names_its_tenant_in_one_spelling() {
        let headers = [("host", "AcMe.Example.COM:8443")];
        assert_eq!(
            TenantKey::Host.name_in("/hooks", &headers).as_deref(),
            Some("acme.example.com")
        );
    }

    #[tokio::test]
    async fn with_the_cache_off_no_lookup_is_limited() {
        let source = Counting::default();
        let tenants = Tenants::new(TenantKey::LastPathSegment, source.clone())
            .with_cache(0, Duration::from_secs(60))
            .with_lookup_limit(Some(1));
        for _ in 0..300 {
            assert!(tenants.resolve("/hooks/acme", &NO_HEADERS).await.is_ok());
        }
        assert_eq!(source.lookups.load(Ordering::SeqCst), 300);
    }

    /// A source that takes 100 ms to answer.
    #[derive(Clone, Default)]
    struct Slow(Counting);

    impl TenantSource for Slow {
        async fn tenant(&self, name: &str) -> Result<Option<Tenant>, TenantError> {
            tokio::time::sleep(Duration::from_millis(100)).await;
            TenantSource::tenant(&self.0, name).await
        }
    }

    #[tokio::test]
    async fn a_lookup_under_way_when_the_tenant_is_forgotten_is_not_kept() {
        let source = Slow::default();
        let lookups = Arc::clone(&source.0.lookups);
        let tenants = Tenants::new(TenantKey::LastPathSegment, source);
        let under_way = {
            let tenants = tenants.clone();
            tokio::spawn(async move { tenants.resolve("/hooks/acme", &NO_HEADERS).await.is_ok() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        tenants.forget("acme");
        assert!(under_way.await.unwrap());
        assert!(tenants.resolve("/hooks/acme", &NO_HEADERS).await.is_ok());
        assert_eq!(
            lookups.load(Ordering::SeqCst),
            2,
            "looked up again after the forget"
        );
    }

    #[test]
    fn keys_name_the_tenant_by_path_host_or_header() {
        let headers = [
            ("host", "acme.hooks.example.com:8443"),
            ("x-tenant", "globex"),
        ];
        let name = |key: TenantKey, path: &str| key.name_in(path, &headers);
        assert_eq!(
            name(TenantKey::LastPathSegment, "/webhooks/acme/"),
            Some("acme".into())
        );
        assert_eq!(
            name(TenantKey::PathSegment(0), "/acme/webhooks"),
            Some("acme".into())
        );
        assert_eq!(
            name(TenantKey::Host, "/"),
            Some("acme.hooks.example.com".into())
        );
        let header = TenantKey::Header(HeaderKey::new("x-tenant").unwrap());
        assert_eq!(name(header, "/"), Some("globex".into()));
        let custom = TenantKey::Custom(Arc::new(|path: &str, _: &dyn Headers| {
            path.strip_prefix("/t-").map(str::to_owned)
        }));
        assert_eq!(name(custom, "/t-initech"), Some("initech".into()));
        assert_eq!(name(TenantKey::PathSegment(3), "/a/b"), None);
    }
}
