//! Many tenants on one receiver: which tenant a request is for, its
//! secrets and its namespace, looked up through a bounded, expiring cache.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use super::{Receiver, Rejection};
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
            Self::Host => header(&HeaderKey::from_static("host")).map(|host| {
                host.rsplit_once(':')
                    .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
                    .map_or(host.clone(), |(name, _)| name.to_owned())
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

/// A cached answer: the tenant, or that there is none, and when it was
/// looked up.
type Cached = (Option<Tenant>, Instant);

/// How a receiver finds each request's tenant: the [`TenantKey`] names it,
/// the [`TenantSource`] has it, and a cache (10,000 names for 60 s by
/// default, unknown names included, so a flood of made-up names does not
/// reach the source) sits between. Clones share the cache.
///
/// An unknown tenant is answered 404 and a failed lookup 503; neither
/// reads the body.
#[derive(Clone)]
pub struct Tenants {
    key: TenantKey,
    source: Arc<dyn DynSource>,
    cache: Arc<Mutex<HashMap<String, Cached>>>,
    capacity: usize,
    ttl: Duration,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenants")
            .field("key", &self.key)
            .field("capacity", &self.capacity)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Tenants {
    /// Tenants named by `key`, from `source`.
    pub fn new(key: TenantKey, source: impl TenantSource) -> Self {
        let cacheable = source.cacheable();
        Self {
            key,
            source: Arc::new(source),
            cache: Arc::default(),
            capacity: if cacheable { 10_000 } else { 0 },
            ttl: Duration::from_secs(60),
        }
    }

    /// Keeps up to `capacity` lookups for `ttl` each; a change at the
    /// source shows within `ttl`, or at once after [`forget`](Self::forget).
    /// A capacity of 0 turns the cache off.
    #[must_use]
    pub fn with_cache(mut self, capacity: usize, ttl: Duration) -> Self {
        self.capacity = capacity;
        self.ttl = ttl;
        self
    }

    /// Drops the cached lookup of `name`, after its secrets changed.
    pub fn forget(&self, name: &str) {
        self.cached().remove(name);
    }

    /// Drops every cached lookup.
    pub fn forget_all(&self) {
        self.cached().clear();
    }

    fn cached(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
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

    async fn lookup(&self, name: String) -> Result<Tenant, Rejection> {
        if let Some((found, at)) = self.cached().get(&name).cloned()
            && at.elapsed() < self.ttl
        {
            return found.ok_or(Rejection::UnknownTenant);
        }
        let found = self
            .source
            .tenant(&name)
            .await
            .map_err(|error| Rejection::TenantLookupFailed(error.to_string()))?;
        if self.capacity > 0 {
            let mut cache = self.cached();
            if cache.len() >= self.capacity && !cache.contains_key(&name) {
                // Full: make room by dropping the oldest lookup.
                let oldest = cache
                    .iter()
                    .min_by_key(|(_, (_, at))| *at)
                    .map(|(name, _)| name.clone());
                if let Some(oldest) = oldest {
                    cache.remove(&oldest);
                }
            }
            cache.insert(name, (found.clone(), Instant::now()));
        }
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
                "acme" => {
                    let verifier = Verifier::builder(Scheme::standard_webhooks())
                        .with_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
                        .unwrap()
                        .build()
                        .unwrap();
                    Ok(Some(Tenant::new(Receiver::new(verifier), "acme").unwrap()))
                }
                _ => Ok(None),
            }
        }
    }

    const NO_HEADERS: [(&str, &str); 0] = [];

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

    #[tokio::test]
    async fn the_cache_is_bounded_and_entries_expire() {
        let source = Counting::default();
        let tenants = Tenants::new(TenantKey::LastPathSegment, source.clone())
            .with_cache(2, Duration::from_millis(50));
        for name in ["/a", "/b", "/c"] {
            let _ = tenants.resolve(name, &NO_HEADERS).await;
        }
        assert_eq!(tenants.cached().len(), 2, "bounded");
        assert!(!tenants.cached().contains_key("a"), "the oldest made room");
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
