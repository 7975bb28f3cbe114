//! [`HttpTransport`]: the [`Transport`] over reqwest, with the SSRF guard on
//! the parsed URL and in its DNS resolver.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::{EXCERPT_LEN, Response, Transport, TransportError};
use crate::sender::Policy;
use crate::sender::guard::{AddressPolicy, check_address, check_url};

/// The default time to establish a connection: 5 seconds.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default time for a whole attempt, response included: 15 seconds.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// POSTs over HTTP(S) with reqwest (rustls): no redirects followed, connect
/// and whole-attempt timeouts, and every address checked against an
/// [`AddressPolicy`]. The URL is parsed once ([`check_url`]) and that parsed
/// URL is what reqwest sends to, so an IP literal is refused in whatever
/// spelling; a host name is checked address by address as it resolves, so
/// a name that resolves to an internal address is refused too.
///
/// ```no_run
/// use hooklatch::sender::{AddressPolicy, HttpTransport};
///
/// let transport = HttpTransport::new(AddressPolicy::strict())?;
/// # let _ = transport;
/// # Ok::<(), hooklatch::sender::transport::TransportConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct HttpTransport {
    client: reqwest::Client,
    policy: Arc<AddressPolicy>,
    read: usize,
}

impl HttpTransport {
    /// A transport with the default timeouts (5 s connect, 15 s attempt)
    /// and no proxy.
    pub fn new(policy: AddressPolicy) -> Result<Self, TransportConfigError> {
        Self::builder(policy).build()
    }

    /// A transport with `policy`'s connect and attempt timeouts and its
    /// excerpt length as the read limit.
    pub fn for_policy(
        addresses: AddressPolicy,
        policy: &Policy,
    ) -> Result<Self, TransportConfigError> {
        Self::builder(addresses)
            .with_connect_timeout(policy.connect_timeout())
            .with_attempt_timeout(policy.attempt_timeout())
            .with_read_limit(policy.excerpt_len())
            .build()
    }

    /// A transport with the given timeouts.
    pub fn with_timeouts(
        policy: AddressPolicy,
        connect: Duration,
        attempt: Duration,
    ) -> Result<Self, TransportConfigError> {
        Self::builder(policy)
            .with_connect_timeout(connect)
            .with_attempt_timeout(attempt)
            .build()
    }

    /// Starts a transport with every setting at its default.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use hooklatch::sender::{AddressPolicy, HttpTransport};
    ///
    /// // Egress through a smokescreen-style proxy, which decides on names.
    /// let transport = HttpTransport::builder(AddressPolicy::strict())
    ///     .with_egress_proxy("http://egress-proxy.internal:4750")?
    ///     .with_attempt_timeout(Duration::from_secs(10))
    ///     .build()?;
    /// # let _ = transport;
    /// # Ok::<(), hooklatch::sender::transport::TransportConfigError>(())
    /// ```
    pub fn builder(policy: AddressPolicy) -> HttpTransportBuilder {
        HttpTransportBuilder {
            policy,
            connect: DEFAULT_CONNECT_TIMEOUT,
            attempt: DEFAULT_ATTEMPT_TIMEOUT,
            proxy: None,
            read: EXCERPT_LEN,
        }
    }

    /// The address policy every attempt is checked against.
    pub fn policy(&self) -> &AddressPolicy {
        &self.policy
    }
}

/// Builds an [`HttpTransport`]. Start with [`HttpTransport::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct HttpTransportBuilder {
    policy: AddressPolicy,
    connect: Duration,
    attempt: Duration,
    proxy: Option<reqwest::Url>,
    read: usize,
}

impl HttpTransportBuilder {
    /// Reads at most `bytes` of each answer's body (no more than
    /// [`MAX_EXCERPT_LEN`](crate::sender::rules::MAX_EXCERPT_LEN)), then stops.
    /// Defaults to [`EXCERPT_LEN`] (1,024).
    pub fn with_read_limit(mut self, bytes: usize) -> Self {
        self.read = bytes.min(crate::sender::rules::MAX_EXCERPT_LEN);
        self
    }

    /// The time to establish a connection. Defaults to 5 seconds.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect = timeout;
        self
    }

    /// The time for a whole attempt, response included. Defaults to 15
    /// seconds.
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt = timeout;
        self
    }

    /// Sends every request through this HTTP proxy (`http://` or
    /// `https://`, credentials in the URL if it needs them): plain HTTP in
    /// absolute form, HTTPS through `CONNECT`. The proxy then resolves the
    /// names and enforces egress (smokescreen does this), while the guard
    /// still refuses forbidden IP literals before anything is sent. The
    /// proxy's own address is the operator's choice and is not checked.
    /// Defaults to none; the environment's proxy variables are ignored.
    pub fn with_egress_proxy(mut self, proxy: &str) -> Result<Self, TransportConfigError> {
        let url = reqwest::Url::parse(proxy).map_err(|_| TransportConfigError::ProxyUrl)?;
        // hyper-util reads the proxy again as an `http::Uri` and, if that
        // fails, silently connects directly: refuse such a URL here.
        if !matches!(url.scheme(), "http" | "https")
            || url.host_str().is_none_or(str::is_empty)
            || url.as_str().parse::<http::Uri>().is_err()
        {
            return Err(TransportConfigError::ProxyUrl);
        }
        self.proxy = Some(url);
        Ok(self)
    }

    /// Builds the transport.
    pub fn build(self) -> Result<HttpTransport, TransportConfigError> {
        let policy = Arc::new(self.policy);
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(self.connect)
            .timeout(self.attempt)
            .no_proxy();
        builder = match self.proxy {
            // The targets' names are the proxy's to resolve and refuse; here
            // only the proxy's own name resolves, so a request that went
            // around the proxy would find no address.
            Some(proxy) => {
                let resolver = ProxyOnlyResolver {
                    proxy_host: proxy.host_str().unwrap_or_default().to_owned(),
                };
                builder
                    .proxy(reqwest::Proxy::all(proxy)?)
                    .dns_resolver(Arc::new(resolver))
            }
            None => builder.dns_resolver(Arc::new(GuardedResolver {
                policy: Arc::clone(&policy),
            })),
        };
        Ok(HttpTransport {
            client: builder.build()?,
            policy,
            read: self.read,
        })
    }
}

/// Why an [`HttpTransport`] could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportConfigError {
    /// The egress proxy is not an `http://` or `https://` URL with a host.
    #[error("the egress proxy must be an http:// or https:// URL with a host")]
    ProxyUrl,
    /// reqwest refused the configuration (its TLS backend failed to start).
    #[error("cannot build the HTTP client")]
    Client(#[from] reqwest::Error),
}

impl Transport for HttpTransport {
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Response, TransportError> {
        // The one parse: reqwest sends to this very `Url`.
        let url: reqwest::Url = check_url(url, &self.policy).map_err(TransportError::Refused)?;
        let mut request = self.client.post(url).body(body.to_vec());
        let typed = headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("content-type"));
        if !typed {
            request = request.header(reqwest::header::CONTENT_TYPE, "application/json");
        }
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let mut response = request.send().await.map_err(classify)?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        // Keep the first `read` bytes and stop reading.
        let mut excerpt = Vec::new();
        while excerpt.len() < self.read {
            match response.chunk().await {
                Ok(Some(chunk)) => excerpt.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        excerpt.truncate(self.read);
        Ok(Response {
            status,
            retry_after,
            body: excerpt,
        })
    }
}

/// What kind of failure a reqwest error is; its source chain says why
/// (a refused address, DNS, TLS), and never names the URL.
fn classify(error: reqwest::Error) -> TransportError {
    // The URL may carry credentials; the record and the logs get none.
    let error = error.without_url();
    // A name the guarded resolver refused is a refusal, like a literal
    // address: its class must not reach the record as a connect error.
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(cause) = source {
        if let Some(forbidden) = cause.downcast_ref::<ForbiddenHost>() {
            return TransportError::Refused(forbidden.first);
        }
        source = cause.source();
    }
    if error.is_timeout() {
        TransportError::Timeout {
            after: None,
            source: Some(Box::new(error)),
        }
    } else if error.is_connect() {
        TransportError::Connect(Box::new(error))
    } else {
        TransportError::Other(Box::new(error))
    }
}

/// Resolves with the system resolver, then drops every address the policy
/// forbids; no address left is an error naming the first refusal.
#[derive(Debug)]
struct GuardedResolver {
    policy: Arc<AddressPolicy>,
}

#[derive(Debug, thiserror::Error)]
#[error("every address of `{host}` is forbidden by the SSRF guard ({first})")]
struct ForbiddenHost {
    host: String,
    first: crate::sender::guard::Forbidden,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let mut first = None;
            let allowed: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|address| match check_address(address.ip(), &policy) {
                    Ok(()) => true,
                    Err(reason) => {
                        first.get_or_insert(reason);
                        false
                    }
                })
                .collect();
            match first {
                Some(first) if allowed.is_empty() => Err(Box::new(ForbiddenHost { host, first })
                    as Box<dyn std::error::Error + Send + Sync>),
                _ => Ok(Box::new(allowed.into_iter()) as Addrs),
            }
        })
    }
}

/// Behind an egress proxy: resolves the proxy's own name and nothing else.
#[derive(Debug)]
struct ProxyOnlyResolver {
    proxy_host: String,
}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not resolved here: requests go through the egress proxy")]
struct NotTheProxy(String);

impl Resolve for ProxyOnlyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let allowed = host.eq_ignore_ascii_case(&self.proxy_host);
        Box::pin(async move {
            if !allowed {
                return Err(Box::new(NotTheProxy(host)) as Box<dyn std::error::Error + Send + Sync>);
            }
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            Ok(Box::new(resolved.into_iter()) as Addrs)
        })
    }
}
