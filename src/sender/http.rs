//! [`HttpTransport`]: the [`Transport`] over reqwest, with the SSRF guard in
//! its DNS resolver.

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::deliver::{EXCERPT_LEN, Response, Transport};
use super::guard::{AddressPolicy, check_address, check_url};

/// The default time to establish a connection: 5 seconds.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default time for a whole attempt, response included: 15 seconds.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// POSTs over HTTP(S) with reqwest (rustls): no redirects followed, connect
/// and whole-attempt timeouts, and every address checked against an
/// [`AddressPolicy`] at connect time: IP literals before connecting,
/// hostnames as they resolve, so a name that later resolves to a private
/// address is still refused.
///
/// ```no_run
/// use hooklatch::sender::{AddressPolicy, HttpTransport};
///
/// let transport = HttpTransport::new(AddressPolicy::strict())?;
/// # let _ = transport;
/// # Ok::<(), reqwest::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct HttpTransport {
    client: reqwest::Client,
    policy: AddressPolicy,
}

impl HttpTransport {
    /// A transport with the default timeouts (5 s connect, 15 s attempt).
    pub fn new(policy: AddressPolicy) -> Result<Self, reqwest::Error> {
        Self::with_timeouts(policy, DEFAULT_CONNECT_TIMEOUT, DEFAULT_ATTEMPT_TIMEOUT)
    }

    /// A transport with `policy`'s connect and attempt timeouts.
    pub fn for_policy(
        addresses: AddressPolicy,
        policy: &super::deliver::Policy,
    ) -> Result<Self, reqwest::Error> {
        Self::with_timeouts(
            addresses,
            policy.connect_timeout(),
            policy.attempt_timeout(),
        )
    }

    /// A transport with the given timeouts.
    pub fn with_timeouts(
        policy: AddressPolicy,
        connect: Duration,
        attempt: Duration,
    ) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(connect)
            .timeout(attempt)
            .dns_resolver(std::sync::Arc::new(GuardedResolver { policy }))
            .no_proxy()
            .build()?;
        Ok(Self { client, policy })
    }
}

impl Transport for HttpTransport {
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Response, String> {
        check_url(url, self.policy).map_err(|reason| format!("refused: {reason}"))?;
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
        let mut response = request.send().await.map_err(describe)?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        // Keep the first kilobyte and stop reading.
        let mut excerpt = Vec::new();
        while excerpt.len() < EXCERPT_LEN {
            match response.chunk().await {
                Ok(Some(chunk)) => excerpt.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        excerpt.truncate(EXCERPT_LEN);
        Ok(Response {
            status,
            retry_after,
            body: excerpt,
        })
    }
}

fn describe(error: reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    // The source chain says why (refused address, DNS, TLS).
    let mut reason = format!("{kind}: {error}");
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        reason.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    reason
}

/// Resolves with the system resolver, then drops every address the policy
/// forbids; no address left is an error.
#[derive(Debug)]
struct GuardedResolver {
    policy: AddressPolicy,
}

#[derive(Debug, thiserror::Error)]
#[error("every address of `{0}` is forbidden by the SSRF guard")]
struct ForbiddenHost(String);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|address| check_address(address.ip(), policy).is_ok())
                .collect();
            if resolved.is_empty() {
                return Err(
                    Box::new(ForbiddenHost(host)) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            Ok(Box::new(resolved.into_iter()) as Addrs)
        })
    }
}
