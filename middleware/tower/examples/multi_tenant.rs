//! Run with: cargo run -p hooklatch-tower --example multi_tenant
//!
//! One receiver for many tenants: `POST /webhooks/{tenant}`, Standard
//! Webhooks signatures, each tenant with its own secrets and its own
//! namespace (`tenants:{tenant}`), so the same event id from two tenants is
//! two events. An unknown tenant is answered 404.
//!
//! - `HOOKLATCH_TENANTS_FILE` (default `tenants.json`): the tenants and
//!   their secrets, re-read within 2 s of a change, with no restart:
//!
//!   ```json
//!   {"acme": ["whsec_…", {"secret": "whsec_…", "not_before": 1700000000, "expires_at": 1800000000}],
//!    "globex": ["whsec_…"]}
//!   ```
//!
//!   Times are in seconds since the Unix epoch; either end may be left
//!   out. A file that does not parse is reported and the tenants from the
//!   last good one stay.
//! - `HOOKLATCH_ADDR`, and `DATABASE_URL`, `REDIS_URL` or
//!   `REDIS_CLUSTER_NODES` (otherwise SQLite), as for `axum_receiver`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Router;
use axum::routing::post_service;
use hooklatch::dedup::Inbox;
use hooklatch::receive::{Receiver, StaticTenants, Tenant, TenantKey, Tenants};
use hooklatch::verify::{Scheme, Validity, Verifier};
use hooklatch_tower::WebhookLayer;

mod support;

use support::{Serve, Served};

/// Every tenant's events are claimed in `tenants:{tenant}`.
const NAMESPACE: &str = "tenants";

/// How often the tenants file is looked at.
const RELOAD_EVERY: Duration = Duration::from_millis(500);

/// A secret as the tenants file writes it: the secret alone, or with its
/// validity window.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum SecretEntry {
    Always(String),
    Windowed {
        secret: String,
        not_before: Option<i64>,
        expires_at: Option<i64>,
    },
}

/// The tenants a file describes, each verified with its own secrets and
/// claimed in its own namespace.
fn parse_tenants(text: &str) -> Result<HashMap<String, Tenant>, String> {
    // serde's message quotes the value it could not take, which may be a
    // secret: say only where and what kind of mistake.
    let file: HashMap<String, Vec<SecretEntry>> = serde_json::from_str(text).map_err(|error| {
        let kind = match error.classify() {
            serde_json::error::Category::Syntax => "not JSON",
            serde_json::error::Category::Eof => "cut short",
            serde_json::error::Category::Data | serde_json::error::Category::Io => {
                "not a map of tenant names to lists of secrets"
            }
        };
        format!(
            "not a tenants file: {kind} at line {}, column {}",
            error.line(),
            error.column()
        )
    })?;
    let mut tenants = HashMap::with_capacity(file.len());
    for (name, secrets) in file {
        let mut builder = Verifier::builder(Scheme::standard_webhooks());
        for entry in secrets {
            let (secret, validity) = match entry {
                SecretEntry::Always(secret) => (secret, Validity::ALWAYS),
                SecretEntry::Windowed {
                    secret,
                    not_before,
                    expires_at,
                } => (secret, Validity::from_unix_seconds(not_before, expires_at)),
            };
            builder = builder
                .with_secret_valid(&secret, validity)
                .map_err(|error| format!("tenant `{name}`: {error}"))?;
        }
        let verifier = builder
            .build()
            .map_err(|error| format!("tenant `{name}`: {error}"))?;
        let tenant = Tenant::new(Receiver::new(verifier), &name)
            .map_err(|error| format!("tenant `{name}`: {error}"))?;
        tenants.insert(name, tenant);
    }
    Ok(tenants)
}

/// Loads the tenants file into `tenants` now, then again whenever its
/// contents change. A bad file is reported and changes nothing.
async fn keep_loading(path: PathBuf, tenants: StaticTenants) {
    let mut loaded: Option<String> = None;
    loop {
        match std::fs::read_to_string(&path) {
            Ok(text) if loaded.as_ref() != Some(&text) => {
                match parse_tenants(&text) {
                    Ok(parsed) => {
                        println!("loaded {} tenants from {}", parsed.len(), path.display());
                        tenants.replace(parsed);
                    }
                    Err(error) => eprintln!(
                        "{}: {error}; keeping the {} tenants loaded before with their \
                         secrets as they were: a secret taken out of the file is still \
                         accepted until the file loads",
                        path.display(),
                        tenants.len(),
                    ),
                }
                loaded = Some(text);
            }
            Ok(_) => {}
            Err(error) => eprintln!("cannot read {}: {error}", path.display()),
        }
        tokio::time::sleep(RELOAD_EVERY).await;
    }
}

/// The receiver: `/webhooks/{tenant}`, verified with the tenant's secrets
/// and accepted into its namespace. No handler: the inbox answers.
fn app<S: Inbox + Clone + 'static>(store: S, tenants: StaticTenants) -> Router {
    let inbox = WebhookLayer::for_tenants(Tenants::new(TenantKey::LastPathSegment, tenants))
        .with_inbox(store, NAMESPACE)
        .expect("the namespace is valid");
    Router::new().route("/webhooks/{tenant}", post_service(inbox.into_endpoint()))
}

struct MultiTenant {
    address: String,
    tenants_file: PathBuf,
}

impl Serve for MultiTenant {
    async fn serve<S: Inbox + Clone + 'static>(self, store: S) -> Served {
        let tenants = StaticTenants::default();
        tokio::spawn(keep_loading(self.tenants_file, tenants.clone()));
        let listener = tokio::net::TcpListener::bind(&self.address).await?;
        println!(
            "listening on http://{}/webhooks/{{tenant}}",
            listener.local_addr()?
        );
        axum::serve(listener, app(store, tenants)).await?;
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Served {
    let tenants_file =
        std::env::var("HOOKLATCH_TENANTS_FILE").unwrap_or_else(|_| "tenants.json".into());
    if !Path::new(&tenants_file).exists() {
        return Err(
            format!("no tenants file at {tenants_file}: set HOOKLATCH_TENANTS_FILE").into(),
        );
    }
    let server = MultiTenant {
        address: support::address_from_env(),
        tenants_file: tenants_file.into(),
    };
    support::with_store_from_env(server).await
}

#[cfg(test)]
mod tests {
    use std::time::{Instant, SystemTime};

    use hooklatch::dedup::MemoryInbox;
    use hooklatch::verify::Signer;

    use super::*;

    const ACME: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ACME_NEXT: &str = "whsec_dGhlIG5leHQgc2VjcmV0IG9mIGFjbWUgY29ycA==";
    const ACME_RETIRED: &str = "whsec_dGhlIHJldGlyZWQgc2VjcmV0IG9mIGFjbWUu";
    const GLOBEX: &str = "whsec_dGhlIHNlY3JldCBvZiBnbG9iZXggaW5jb3Jw";

    async fn deliver(
        client: &reqwest::Client,
        base: &str,
        tenant: &str,
        secret: &str,
        id: &str,
    ) -> u16 {
        let body = format!(r#"{{"id":"{id}"}}"#);
        let signed = Signer::new(Scheme::standard_webhooks(), [secret])
            .unwrap()
            .sign(id, SystemTime::now(), body.as_bytes())
            .unwrap();
        let mut request = client.post(format!("{base}/webhooks/{tenant}")).body(body);
        for (name, value) in signed.iter() {
            request = request.header(name, value);
        }
        request.send().await.unwrap().status().as_u16()
    }

    #[test]
    fn a_bad_tenants_file_is_reported_by_place_never_by_its_secrets() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        for (text, kind) in [
            (
                format!(r#"{{"acme": "{secret}"}}"#),
                "not a map of tenant names",
            ),
            (format!(r#"{{"acme": ["{secret}""#), "cut short"),
            (format!(r#"{{"acme": [{secret}]}}"#), "not JSON"),
        ] {
            let error = parse_tenants(&text).unwrap_err();
            assert!(!error.contains("whsec_"), "no secret in: {error}");
            assert!(
                error.contains(kind) && error.contains("line 1, column"),
                "{error}"
            );
        }
    }

    /// Tenants from a file, over HTTP: each verified with its own secrets
    /// inside their windows, each in its own namespace, an unknown one
    /// 404; a changed file takes effect within 2 s, with no restart.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tenants_from_a_file_are_verified_apart_and_reloaded_without_a_restart() {
        let dir = std::env::temp_dir().join(format!("hooklatch-tenants-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tenants.json");
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        std::fs::write(
            &file,
            format!(
                r#"{{"acme": ["{ACME}",
                              {{"secret": "{ACME_NEXT}", "not_before": {later}}},
                              {{"secret": "{ACME_RETIRED}", "expires_at": {earlier}}}],
                    "globex": ["{GLOBEX}"]}}"#,
                later = now + 3600,
                earlier = now - 3600,
            ),
        )
        .unwrap();
        let store = MemoryInbox::new();
        let tenants = StaticTenants::default();
        tokio::spawn(keep_loading(file.clone(), tenants.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(axum::serve(listener, app(store.clone(), tenants.clone())).into_future());
        while tenants.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let client = reqwest::Client::new();
        assert_eq!(deliver(&client, &base, "acme", ACME, "evt_1").await, 202);
        assert_eq!(deliver(&client, &base, "acme", ACME, "evt_1").await, 200);
        assert_eq!(
            deliver(&client, &base, "globex", GLOBEX, "evt_1").await,
            202,
            "same id, other tenant"
        );
        assert_eq!(
            deliver(&client, &base, "initech", ACME, "evt_2").await,
            404,
            "unknown tenant"
        );
        assert_eq!(
            deliver(&client, &base, "globex", ACME, "evt_3").await,
            400,
            "another tenant's secret"
        );
        assert_eq!(
            deliver(&client, &base, "acme", ACME_NEXT, "evt_4").await,
            400,
            "not yet valid"
        );
        assert_eq!(
            deliver(&client, &base, "acme", ACME_RETIRED, "evt_5").await,
            400,
            "expired"
        );

        // Rotate acme to its next secret and add initech, in the file only.
        std::fs::write(
            &file,
            format!(r#"{{"acme": ["{ACME_NEXT}"], "initech": ["{GLOBEX}"]}}"#),
        )
        .unwrap();
        let changed = Instant::now();
        while deliver(&client, &base, "initech", GLOBEX, "evt_6").await != 202 {
            // A liveness bound, not a speed goal: the file is read again
            // every few hundred milliseconds.
            assert!(
                changed.elapsed() < Duration::from_secs(30),
                "the change took effect without a restart"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            deliver(&client, &base, "acme", ACME_NEXT, "evt_7").await,
            202
        );
        assert_eq!(
            deliver(&client, &base, "acme", ACME, "evt_8").await,
            400,
            "the old secret is gone"
        );
        assert_eq!(
            deliver(&client, &base, "globex", GLOBEX, "evt_9").await,
            404,
            "a removed tenant"
        );

        // A broken file changes nothing.
        std::fs::write(&file, "{ not json").unwrap();
        tokio::time::sleep(RELOAD_EVERY * 3).await;
        assert_eq!(
            deliver(&client, &base, "acme", ACME_NEXT, "evt_10").await,
            202
        );

        let ids = |tenant: &'static str| {
            let store = store.clone();
            async move {
                support::drain_ids(
                    &store,
                    &hooklatch::dedup::tenant_namespace(NAMESPACE, tenant),
                )
                .await
            }
        };
        assert_eq!(ids("acme").await, ["evt_1", "evt_7", "evt_10"]);
        assert_eq!(ids("globex").await, ["evt_1"]);
        assert_eq!(ids("initech").await, ["evt_6"]);
        std::fs::remove_dir_all(&dir).ok();
    }
}
