//! Run with: cargo run -p hooklatch-tower --example typed_providers
//!
//! GitHub, Stripe and Twitch into one axum app, each event handled once, in
//! a typed handler chosen by the event's type:
//!
//! - `POST /webhooks/github`: GitHub's signature; the type is the
//!   `X-GitHub-Event` header (`push`, `ping`, `issues`);
//! - `POST /webhooks/stripe`: Stripe's signature; the type is the body's
//!   `type` (`invoice.paid`, `customer.subscription.deleted`);
//! - `POST /webhooks/twitch`: Twitch EventSub's signature; the type is the
//!   `Twitch-Eventsub-Subscription-Type` header (`channel.follow`). Twitch's
//!   callback verification is answered by the layer with its challenge.
//!
//! Both run in lease mode: the handler runs inline, a duplicate that
//! arrives while it runs is answered 409 with `Retry-After`, and once it
//! answered 2xx every later delivery of the event is answered 200 without
//! running it again. An event type the app does not handle is answered 200
//! and ignored, so the provider counts it delivered and does not retry it.
//!
//! Settings come from the environment (this crate has no flag parser):
//! `GITHUB_WEBHOOK_SECRET`, `STRIPE_WEBHOOK_SECRET` and
//! `TWITCH_WEBHOOK_SECRET` (required),
//! `HOOKLATCH_ADDR` (default `127.0.0.1:3000`), and `DATABASE_URL` for a
//! Postgres store shared by several instances (otherwise the SQLite file
//! `hooklatch.db`). `HOOKLATCH_REASON_IN_BODY=1` names the reason's kind in
//! the body of a 400 (`webhook verification failed: timestamp_too_old
//! (...)`), which helps while setting a provider up.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use hooklatch::dedup::{LeaseStore, PostgresInbox, SqliteInbox};
use hooklatch::receive::Handshake;
use hooklatch::verify::{Scheme, Verifier};
use hooklatch_tower::{RawWebhook, Rejection, Webhook, WebhookLayer};
use serde::Deserialize;
use tokio::sync::mpsc::UnboundedSender;

/// How long a handler may run; past it the lease ends, the handler is
/// stopped and the sender is told to retry (503).
const LEASE: Duration = Duration::from_secs(30);

/// What the handlers did, for whoever listens (`main` prints it, the tests
/// check it). A real app would write to its database here.
#[derive(Debug, Clone, PartialEq)]
enum Handled {
    Push {
        repository: String,
        after: String,
        commits: usize,
    },
    Ping {
        hook_id: u64,
    },
    Issue {
        action: String,
        number: u64,
        title: String,
    },
    InvoicePaid {
        invoice: String,
        customer: String,
        amount_paid: i64,
    },
    SubscriptionDeleted {
        subscription: String,
        customer: String,
    },
    Follow {
        user: String,
        broadcaster: String,
    },
}

/// The handlers' state: where they report what they did.
type Events = UnboundedSender<Handled>;

// GitHub's payloads, with only the fields used. serde ignores the rest.

#[derive(Deserialize)]
struct Repository {
    full_name: String,
}

#[derive(Deserialize)]
struct Push {
    after: String,
    repository: Repository,
    commits: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct Ping {
    hook_id: u64,
}

#[derive(Deserialize)]
struct Issue {
    number: u64,
    title: String,
}

#[derive(Deserialize)]
struct Issues {
    action: String,
    issue: Issue,
}

/// GitHub names the event's type in a header, so the handler takes the
/// event as received ([`RawWebhook`]), matches on its type, and parses the
/// body into that type's struct. A body that does not parse is answered
/// 422, which releases the lease: a redelivery runs the handler again.
async fn github(
    State(events): State<Events>,
    RawWebhook(event): RawWebhook,
) -> Result<&'static str, Rejection> {
    let handled = match event.event_type() {
        Some("push") => {
            let push: Push = event.json()?;
            Handled::Push {
                repository: push.repository.full_name,
                after: push.after,
                commits: push.commits.len(),
            }
        }
        Some("ping") => Handled::Ping {
            hook_id: event.json::<Ping>()?.hook_id,
        },
        Some("issues") => {
            let issues: Issues = event.json()?;
            Handled::Issue {
                action: issues.action,
                number: issues.issue.number,
                title: issues.issue.title,
            }
        }
        // Acknowledged, so GitHub does not retry it, and done with.
        _ => return Ok("ignored"),
    };
    let _ = events.send(handled);
    Ok("handled")
}

// Stripe's payloads: the event's type is in the body, so serde picks the
// variant, and an unknown type is `Other`.

#[derive(Deserialize)]
struct Data<T> {
    object: T,
}

#[derive(Deserialize)]
struct Invoice {
    id: String,
    customer: String,
    amount_paid: i64,
}

#[derive(Deserialize)]
struct Subscription {
    id: String,
    customer: String,
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum StripeEvent {
    #[serde(rename = "invoice.paid")]
    InvoicePaid { data: Data<Invoice> },
    #[serde(rename = "customer.subscription.deleted")]
    SubscriptionDeleted { data: Data<Subscription> },
    #[serde(other)]
    Other,
}

/// Stripe names the event's type in the body, so one tagged enum and
/// [`Webhook<T>`] dispatch it.
async fn stripe(
    State(events): State<Events>,
    Webhook(event): Webhook<StripeEvent>,
) -> &'static str {
    let handled = match event {
        StripeEvent::InvoicePaid { data } => Handled::InvoicePaid {
            invoice: data.object.id,
            customer: data.object.customer,
            amount_paid: data.object.amount_paid,
        },
        StripeEvent::SubscriptionDeleted { data } => Handled::SubscriptionDeleted {
            subscription: data.object.id,
            customer: data.object.customer,
        },
        StripeEvent::Other => return "ignored",
    };
    let _ = events.send(handled);
    "handled"
}

// Twitch's payloads: the type is a header, the fields sit under `event`.

#[derive(Deserialize)]
struct Follow {
    user_name: String,
    broadcaster_user_name: String,
}

#[derive(Deserialize)]
struct Notification<T> {
    event: T,
}

/// Twitch names the subscription's type in a header, so the handler
/// matches on [`VerifiedEvent::event_type`](hooklatch_tower::VerifiedEvent::event_type)
/// as GitHub's does.
async fn twitch(
    State(events): State<Events>,
    RawWebhook(event): RawWebhook,
) -> Result<&'static str, Rejection> {
    let handled = match event.event_type() {
        Some("channel.follow") => {
            let follow: Notification<Follow> = event.json()?;
            Handled::Follow {
                user: follow.event.user_name,
                broadcaster: follow.event.broadcaster_user_name,
            }
        }
        _ => return Ok("ignored"),
    };
    let _ = events.send(handled);
    Ok("handled")
}

/// The verifiers of the three providers.
struct Verifiers {
    github: Verifier,
    stripe: Verifier,
    twitch: Verifier,
}

/// The app: one route per provider, each verified with its own secret and
/// leased in its own namespace of `store`.
fn app<S: LeaseStore + Clone + 'static>(
    verifiers: Verifiers,
    store: S,
    reason_in_body: bool,
    events: Events,
) -> Router {
    let leased = |verifier: Verifier, namespace: &str| {
        WebhookLayer::new(verifier)
            .with_reason_in_body(reason_in_body)
            .with_lease(store.clone(), namespace, LEASE)
            .expect("the namespace is valid")
    };
    Router::new()
        .route(
            "/webhooks/github",
            post(github).layer(leased(verifiers.github, "github")),
        )
        .route(
            "/webhooks/stripe",
            post(stripe).layer(leased(verifiers.stripe, "stripe")),
        )
        .route(
            "/webhooks/twitch",
            post(twitch).layer(
                leased(verifiers.twitch, "twitch")
                    .with_handshake(Handshake::Twitch)
                    .expect("Twitch's handshake beside Twitch's scheme"),
            ),
        )
        .with_state(events)
}

/// A verifier for `scheme` with the secret in the variable `name`.
fn verifier_from_env(scheme: Scheme, name: &str) -> Result<Verifier, Box<dyn std::error::Error>> {
    let secret = std::env::var(name).map_err(|_| format!("set {name}"))?;
    Ok(Verifier::builder(scheme).with_secret(&secret)?.build()?)
}

async fn serve<S: LeaseStore + Clone + 'static>(
    store: S,
) -> Result<(), Box<dyn std::error::Error>> {
    let verifiers = Verifiers {
        github: verifier_from_env(Scheme::github(), "GITHUB_WEBHOOK_SECRET")?,
        stripe: verifier_from_env(Scheme::stripe(), "STRIPE_WEBHOOK_SECRET")?,
        twitch: verifier_from_env(Scheme::twitch(), "TWITCH_WEBHOOK_SECRET")?,
    };
    let reason_in_body = std::env::var("HOOKLATCH_REASON_IN_BODY").as_deref() == Ok("1");
    let address = std::env::var("HOOKLATCH_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let (events, mut handled) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(event) = handled.recv().await {
            println!("{event:?}");
        }
    });
    let listener = tokio::net::TcpListener::bind(&address).await?;
    let local = listener.local_addr()?;
    println!("listening on http://{local}/webhooks/{{github,stripe,twitch}}");
    let app = app(verifiers, store, reason_in_body, events);
    axum::serve(listener, app).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    match std::env::var("DATABASE_URL") {
        Ok(url) => serve(PostgresInbox::connect(&url).await?).await,
        Err(_) => serve(SqliteInbox::open("hooklatch.db").await?).await,
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use hooklatch::dedup::MemoryInbox;
    use hooklatch::verify::Signer;
    use tokio::sync::mpsc::UnboundedReceiver;

    use super::*;

    const GITHUB_SECRET: &str = "It's a Secret to Everybody";
    const STRIPE_SECRET: &str = "whsec_test_secret";
    const TWITCH_SECRET: &str = "twitch-secret-0123456789";

    /// The app on a free loopback port, its base URL, and what its
    /// handlers did.
    async fn start() -> (String, UnboundedReceiver<Handled>) {
        let (events, handled) = tokio::sync::mpsc::unbounded_channel();
        let verifier = |scheme, secret| {
            Verifier::builder(scheme)
                .with_secret(secret)
                .unwrap()
                .build()
                .unwrap()
        };
        let verifiers = Verifiers {
            github: verifier(Scheme::github(), GITHUB_SECRET),
            stripe: verifier(Scheme::stripe(), STRIPE_SECRET),
            twitch: verifier(Scheme::twitch(), TWITCH_SECRET),
        };
        let app = app(verifiers, MemoryInbox::new(), false, events);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, handled)
    }

    /// Posts `body` with `headers`; the status and the body's text.
    async fn post(url: &str, headers: &[(String, String)], body: &[u8]) -> (u16, String) {
        let mut request = reqwest::Client::new().post(url).body(body.to_vec());
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let response = request.send().await.unwrap();
        (
            response.status().as_u16(),
            response.text().await.unwrap_or_default(),
        )
    }

    /// GitHub's headers for `body`: its signature, delivery id and type.
    fn github_headers(event_type: &str, delivery: &str, body: &[u8]) -> Vec<(String, String)> {
        let signed = Signer::new(Scheme::github(), [GITHUB_SECRET])
            .unwrap()
            .sign(delivery, SystemTime::now(), body)
            .unwrap();
        let mut headers: Vec<_> = signed
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        headers.push(("X-GitHub-Event".into(), event_type.into()));
        headers
    }

    /// Stripe's signature header for `body`, signed now.
    fn stripe_headers(body: &[u8]) -> Vec<(String, String)> {
        Signer::new(Scheme::stripe(), [STRIPE_SECRET])
            .unwrap()
            .sign("unused", SystemTime::now(), body)
            .unwrap()
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect()
    }

    /// Everything the handlers did so far.
    fn drain(handled: &mut UnboundedReceiver<Handled>) -> Vec<Handled> {
        std::iter::from_fn(|| handled.try_recv().ok()).collect()
    }

    const PUSH: &[u8] = br#"{"ref":"refs/heads/main","after":"6113728f27ae82c7b1a177c8d03f9e96e0adf246","repository":{"full_name":"octo-org/octo-repo"},"commits":[{"id":"6113728"},{"id":"0d1a26e"}]}"#;

    #[tokio::test]
    async fn a_github_push_reaches_the_push_handler_with_its_typed_fields() {
        let (url, mut handled) = start().await;
        let url = format!("{url}/webhooks/github");
        let headers = github_headers("push", "d-1", PUSH);
        assert_eq!(post(&url, &headers, PUSH).await, (200, "handled".into()));
        let ping = br#"{"zen":"Keep it logically awesome.","hook_id":42}"#;
        let headers = github_headers("ping", "d-2", ping);
        assert_eq!(post(&url, &headers, ping).await, (200, "handled".into()));
        let opened = br#"{"action":"opened","issue":{"number":7,"title":"Crash on start"}}"#;
        let headers = github_headers("issues", "d-3", opened);
        assert_eq!(post(&url, &headers, opened).await, (200, "handled".into()));
        assert_eq!(
            drain(&mut handled),
            [
                Handled::Push {
                    repository: "octo-org/octo-repo".into(),
                    after: "6113728f27ae82c7b1a177c8d03f9e96e0adf246".into(),
                    commits: 2,
                },
                Handled::Ping { hook_id: 42 },
                Handled::Issue {
                    action: "opened".into(),
                    number: 7,
                    title: "Crash on start".into(),
                },
            ]
        );
    }

    #[tokio::test]
    async fn a_stripe_invoice_paid_reaches_its_handler() {
        let (url, mut handled) = start().await;
        let url = format!("{url}/webhooks/stripe");
        let paid = br#"{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1","customer":"cus_1","amount_paid":2000}}}"#;
        assert_eq!(
            post(&url, &stripe_headers(paid), paid).await,
            (200, "handled".into())
        );
        let deleted = br#"{"id":"evt_2","type":"customer.subscription.deleted","data":{"object":{"id":"sub_1","customer":"cus_1"}}}"#;
        assert_eq!(
            post(&url, &stripe_headers(deleted), deleted).await,
            (200, "handled".into())
        );
        assert_eq!(
            drain(&mut handled),
            [
                Handled::InvoicePaid {
                    invoice: "in_1".into(),
                    customer: "cus_1".into(),
                    amount_paid: 2000,
                },
                Handled::SubscriptionDeleted {
                    subscription: "sub_1".into(),
                    customer: "cus_1".into(),
                },
            ]
        );
    }

    /// An event type the app has no handler for is answered 200, so the
    /// provider does not retry it, and nothing is done with it.
    #[tokio::test]
    async fn an_unknown_event_type_is_acknowledged_and_ignored() {
        let (url, mut handled) = start().await;
        let star = br#"{"action":"created","starred_at":"2026-12-01T10:00:00Z"}"#;
        let headers = github_headers("star", "d-9", star);
        assert_eq!(
            post(&format!("{url}/webhooks/github"), &headers, star).await,
            (200, "ignored".into())
        );
        let created =
            br#"{"id":"evt_9","type":"customer.created","data":{"object":{"id":"cus_9"}}}"#;
        assert_eq!(
            post(
                &format!("{url}/webhooks/stripe"),
                &stripe_headers(created),
                created
            )
            .await,
            (200, "ignored".into())
        );
        assert_eq!(drain(&mut handled), []);
    }

    /// A delivery of an event already handled is answered 200 without
    /// running the handler again, whatever its delivery id (GitHub) or
    /// signing time (Stripe).
    #[tokio::test]
    async fn a_duplicate_delivery_is_200_without_running_the_handler_twice() {
        let (url, mut handled) = start().await;
        let github = format!("{url}/webhooks/github");
        assert_eq!(
            post(&github, &github_headers("push", "d-1", PUSH), PUSH).await,
            (200, "handled".into())
        );
        assert_eq!(
            post(&github, &github_headers("push", "d-2", PUSH), PUSH).await,
            (200, "duplicate".into())
        );
        let stripe = format!("{url}/webhooks/stripe");
        let paid = br#"{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1","customer":"cus_1","amount_paid":2000}}}"#;
        for expected in ["handled", "duplicate"] {
            assert_eq!(
                post(&stripe, &stripe_headers(paid), paid).await,
                (200, expected.into())
            );
        }
        assert_eq!(drain(&mut handled).len(), 2, "one push, one invoice");
    }

    /// A body changed after signing, or signed with another secret, is
    /// refused with 400 before any handler runs.
    #[tokio::test]
    async fn a_forged_delivery_is_400() {
        let (url, mut handled) = start().await;
        let headers = github_headers("push", "d-1", PUSH);
        let tampered = String::from_utf8_lossy(PUSH).replace("octo-repo", "evil-repo");
        assert_eq!(
            post(
                &format!("{url}/webhooks/github"),
                &headers,
                tampered.as_bytes()
            )
            .await,
            (400, "webhook verification failed".into())
        );
        let paid = br#"{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1","customer":"cus_1","amount_paid":2000}}}"#;
        let forged: Vec<_> = Signer::new(Scheme::stripe(), ["whsec_not_the_secret"])
            .unwrap()
            .sign("unused", SystemTime::now(), paid)
            .unwrap()
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        assert_eq!(
            post(&format!("{url}/webhooks/stripe"), &forged, paid)
                .await
                .0,
            400
        );
        assert_eq!(drain(&mut handled), []);
    }

    /// Twitch's headers for `body`: its signature, message id and time, the
    /// message's kind and the subscription's type.
    fn twitch_headers(id: &str, kind: &str, body: &[u8]) -> Vec<(String, String)> {
        let mut headers: Vec<(String, String)> = Signer::new(Scheme::twitch(), [TWITCH_SECRET])
            .unwrap()
            .sign(id, SystemTime::now(), body)
            .unwrap()
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        headers.push(("Twitch-Eventsub-Message-Type".into(), kind.into()));
        headers.push((
            "Twitch-Eventsub-Subscription-Type".into(),
            "channel.follow".into(),
        ));
        headers
    }

    /// Twitch's callback verification is answered with its challenge by
    /// the layer; a follow then reaches the follow handler once.
    #[tokio::test]
    async fn twitch_is_verified_by_its_challenge_then_a_follow_reaches_its_handler() {
        let (url, mut handled) = start().await;
        let url = format!("{url}/webhooks/twitch");
        let challenge = br#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"type":"channel.follow","version":"2"}}"#;
        let headers = twitch_headers("m-1", "webhook_callback_verification", challenge);
        assert_eq!(
            post(&url, &headers, challenge).await,
            (200, "pogchamp-kappa-360noscope-vohiyo".into())
        );
        let follow = br#"{"subscription":{"type":"channel.follow"},"event":{"user_name":"Cool_User","broadcaster_user_name":"Cooler_User"}}"#;
        let headers = twitch_headers("m-2", "notification", follow);
        assert_eq!(post(&url, &headers, follow).await, (200, "handled".into()));
        assert_eq!(
            post(&url, &headers, follow).await,
            (200, "duplicate".into())
        );
        assert_eq!(
            drain(&mut handled),
            [Handled::Follow {
                user: "Cool_User".into(),
                broadcaster: "Cooler_User".into(),
            }]
        );
    }
}
