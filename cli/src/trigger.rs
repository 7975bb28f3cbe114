//! `hooklatch trigger`: a realistic event of a provider, signed in its
//! scheme with your secret and with the headers the provider sends,
//! POSTed once to your app. Each payload follows the shape the provider
//! documents (its source is named), with fresh ids and the current time,
//! so every trigger is a new event to the receiver.

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, ValueEnum};
use hooklatch::sender::HttpTransport;
use hooklatch::verify::Scheme;

use crate::UsageError;

#[derive(Debug, Args)]
pub(crate) struct TriggerArgs {
    /// The provider.
    #[arg(value_enum, required_unless_present = "list")]
    provider: Option<Provider>,
    /// The event, such as `payment_intent.succeeded` (`--list` shows
    /// each provider's).
    #[arg(required_unless_present = "list")]
    event: Option<String>,
    /// List the providers, their events and where each payload's shape
    /// comes from.
    #[arg(long, conflicts_with_all = ["provider", "event"])]
    list: bool,
    /// Where to POST it, such as http://localhost:3000/webhooks (loopback
    /// and private addresses allowed: it is your app).
    #[arg(long, value_parser = crate::listen::forward_url, required_unless_present = "list")]
    url: Option<String>,
    /// The secret to sign with, in the provider's form (`whsec_...` for
    /// Stripe and Standard Webhooks). A command line is visible to every
    /// user of the machine (`ps`): prefer --secret-file or
    /// HOOKLATCH_SECRET.
    #[arg(
        long = "secret",
        value_name = "SECRET",
        env = "HOOKLATCH_SECRET",
        hide_env_values = true,
        required_unless_present_any = ["list", "secret_file"]
    )]
    secret: Option<String>,
    /// A file holding the secret, white space around it ignored.
    #[arg(long, value_name = "PATH")]
    secret_file: Option<std::path::PathBuf>,
}

/// The providers with events to trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Provider {
    Stripe,
    Github,
    Shopify,
    Slack,
    /// Standard Webhooks.
    Standard,
    /// Hook0 (and Coinbase's developer platform).
    Hook0,
}

impl Provider {
    fn scheme(self) -> Scheme {
        match self {
            Self::Stripe => Scheme::stripe(),
            Self::Github => Scheme::github(),
            Self::Shopify => Scheme::shopify(),
            Self::Slack => Scheme::slack(),
            Self::Standard => Scheme::standard_webhooks(),
            Self::Hook0 => Scheme::hook0(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Stripe => "stripe",
            Self::Github => "github",
            Self::Shopify => "shopify",
            Self::Slack => "slack",
            Self::Standard => "standard",
            Self::Hook0 => "hook0",
        }
    }

    /// A fresh event id: Stripe's goes in the body (`evt_...`), GitHub's
    /// and Shopify's delivery ids and Hook0's event ids are GUIDs, the
    /// others `msg_...`.
    fn event_id(self) -> String {
        match self {
            Self::Stripe => format!("evt_{}", alphanumeric(24)),
            Self::Github | Self::Shopify | Self::Hook0 => guid(),
            Self::Slack | Self::Standard => format!("msg_{}", alphanumeric(24)),
        }
    }
}

/// One event's payload: `{{id}}` becomes a fresh event id, `{{ref}}` a
/// fresh object id (each its own), `{{sha}}` a commit hash, `{{number}}` a
/// numeric id, `{{hook}}` a webhook's id (one a body), `{{now}}` the Unix
/// time and `{{now_iso}}` the same in RFC 3339. Every body has a fresh
/// value somewhere: where a provider's id header is not signed, the
/// receiver claims the body's digest.
struct Fixture {
    provider: Provider,
    event: &'static str,
    /// The provider's documentation of this payload's shape.
    source: &'static str,
    /// Headers the provider sends besides the signature's.
    headers: &'static [(&'static str, &'static str)],
    body: &'static str,
}

const STRIPE_EVENT: &str = "https://docs.stripe.com/api/events/object";
const GITHUB_EVENTS: &str = "https://docs.github.com/en/webhooks/webhook-events-and-payloads";
const SHOPIFY_ORDERS: &str =
    "https://shopify.dev/docs/api/webhooks?reference=toml#list-of-topics-orders/create";
const SLACK_EVENTS: &str = "https://api.slack.com/apis/events-api#callback-field";
const HOOK0_SCHEMAS: &str =
    "https://github.com/hook0/hook0/blob/master/documentation/reference/event-schemas.md";
const STANDARD_PAYLOAD: &str = "https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md#payload-structure";

const FIXTURES: &[Fixture] = &[
    Fixture {
        provider: Provider::Stripe,
        event: "payment_intent.succeeded",
        source: STRIPE_EVENT,
        headers: &[],
        body: r#"{"id":"{{id}}","object":"event","api_version":"2025-10-29.clover","created":{{now}},"data":{"object":{"id":"pi_{{ref}}","object":"payment_intent","amount":2000,"amount_received":2000,"currency":"usd","customer":null,"livemode":false,"metadata":{},"payment_method":"pm_{{ref}}","payment_method_types":["card"],"status":"succeeded"}},"livemode":false,"pending_webhooks":1,"request":{"id":"req_{{ref}}","idempotency_key":null},"type":"payment_intent.succeeded"}"#,
    },
    Fixture {
        provider: Provider::Stripe,
        event: "checkout.session.completed",
        source: STRIPE_EVENT,
        headers: &[],
        body: r#"{"id":"{{id}}","object":"event","api_version":"2025-10-29.clover","created":{{now}},"data":{"object":{"id":"cs_test_{{ref}}","object":"checkout.session","amount_total":2000,"currency":"usd","customer":"cus_{{ref}}","customer_details":{"email":"jenny.rosen@example.com","name":"Jenny Rosen"},"livemode":false,"mode":"payment","payment_intent":"pi_{{ref}}","payment_status":"paid","status":"complete"}},"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"type":"checkout.session.completed"}"#,
    },
    Fixture {
        provider: Provider::Stripe,
        event: "invoice.paid",
        source: STRIPE_EVENT,
        headers: &[],
        body: r#"{"id":"{{id}}","object":"event","api_version":"2025-10-29.clover","created":{{now}},"data":{"object":{"id":"in_{{ref}}","object":"invoice","amount_due":2000,"amount_paid":2000,"currency":"usd","customer":"cus_{{ref}}","livemode":false,"status":"paid"}},"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"type":"invoice.paid"}"#,
    },
    Fixture {
        provider: Provider::Github,
        event: "ping",
        source: GITHUB_EVENTS,
        headers: &[("x-github-event", "ping")],
        body: r#"{"zen":"Design for failure.","hook_id":{{hook}},"hook":{"type":"Repository","id":{{hook}},"name":"web","active":true,"events":["push","pull_request"],"config":{"content_type":"json","insecure_ssl":"0","url":"https://example.com/webhooks"}},"repository":{"id":1296269,"name":"Hello-World","full_name":"octocat/Hello-World","private":false},"sender":{"login":"octocat","id":1,"type":"User"}}"#,
    },
    Fixture {
        provider: Provider::Github,
        event: "push",
        source: GITHUB_EVENTS,
        headers: &[("x-github-event", "push")],
        body: r#"{"ref":"refs/heads/main","before":"{{sha}}","after":"{{sha}}","created":false,"deleted":false,"forced":false,"commits":[{"id":"{{sha}}","message":"Update README.md","timestamp":"{{now_iso}}","author":{"name":"Monalisa Octocat","email":"octocat@github.com","username":"octocat"},"added":[],"removed":[],"modified":["README.md"]}],"repository":{"id":1296269,"name":"Hello-World","full_name":"octocat/Hello-World","private":false,"default_branch":"main"},"pusher":{"name":"octocat","email":"octocat@github.com"},"sender":{"login":"octocat","id":1,"type":"User"}}"#,
    },
    Fixture {
        provider: Provider::Github,
        event: "pull_request.opened",
        source: GITHUB_EVENTS,
        headers: &[("x-github-event", "pull_request")],
        body: r#"{"action":"opened","number":1347,"pull_request":{"id":{{number}},"number":1347,"state":"open","title":"Amazing new feature","user":{"login":"octocat","id":1},"head":{"ref":"new-topic","sha":"{{sha}}"},"base":{"ref":"main","sha":"{{sha}}"},"created_at":"{{now_iso}}"},"repository":{"id":1296269,"name":"Hello-World","full_name":"octocat/Hello-World","private":false},"sender":{"login":"octocat","id":1,"type":"User"}}"#,
    },
    Fixture {
        provider: Provider::Shopify,
        event: "orders/create",
        source: SHOPIFY_ORDERS,
        headers: &[
            ("x-shopify-topic", "orders/create"),
            ("x-shopify-shop-domain", "example.myshopify.com"),
            ("x-shopify-api-version", "2025-10"),
        ],
        body: r##"{"id":{{number}},"created_at":"{{now_iso}}","currency":"USD","email":"jon@example.com","financial_status":"paid","name":"#1001","order_number":1001,"total_price":"20.00","line_items":[{"id":{{number}},"title":"Aviator sunglasses","quantity":1,"price":"20.00","sku":"SKU2006-001"}],"customer":{"id":{{number}},"email":"jon@example.com","first_name":"Jon","last_name":"Snow"}}"##,
    },
    Fixture {
        provider: Provider::Slack,
        event: "app_mention",
        source: SLACK_EVENTS,
        headers: &[],
        body: r#"{"token":"XXYYZZ","team_id":"T123ABC456","api_app_id":"A123ABC456","event":{"type":"app_mention","user":"U123ABC456","text":"<@U0LAN0Z89> is it everything a river should be?","ts":"{{now}}.000016","channel":"C123ABC456","event_ts":"{{now}}.000016"},"type":"event_callback","event_id":"Ev{{ref}}","event_time":{{now}}}"#,
    },
    Fixture {
        provider: Provider::Standard,
        event: "contact.created",
        source: STANDARD_PAYLOAD,
        headers: &[],
        body: r#"{"type":"contact.created","timestamp":"{{now_iso}}","data":{"id":"contact_{{ref}}","type":"contact","name":"John Doe","email":"john@example.com"}}"#,
    },
    Fixture {
        provider: Provider::Standard,
        event: "invoice.paid",
        source: STANDARD_PAYLOAD,
        headers: &[],
        body: r#"{"type":"invoice.paid","timestamp":"{{now_iso}}","data":{"id":"invoice_{{ref}}","amount":2000,"currency":"usd","status":"paid"}}"#,
    },
    Fixture {
        provider: Provider::Hook0,
        event: "users.account.created",
        source: HOOK0_SCHEMAS,
        headers: &[("x-event-type", "users.account.created")],
        body: r#"{"user_id":"user_{{ref}}","email":"john.doe@example.com","name":"John Doe","username":"johndoe","plan":"free","email_verified":false,"created_at":"{{now_iso}}"}"#,
    },
];

/// `n` random letters and digits.
fn alphanumeric(n: usize) -> String {
    (0..n).map(|_| fastrand::alphanumeric()).collect()
}

/// `n` random hexadecimal digits.
fn hex(n: usize) -> String {
    (0..n)
        .map(|_| char::from_digit(fastrand::u32(0..16), 16).unwrap_or('0'))
        .collect()
}

/// A random GUID, as GitHub's and Shopify's delivery ids are.
fn guid() -> String {
    format!("{}-{}-4{}-a{}-{}", hex(8), hex(4), hex(3), hex(3), hex(12))
}

/// The fixture's body with its placeholders filled in.
fn expand(fixture: &Fixture, event_id: &str, now: SystemTime) -> String {
    let seconds = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let iso = humantime::format_rfc3339_seconds(now).to_string();
    let hook = fastrand::u64(100_000_000..1_000_000_000).to_string();
    let mut body = String::with_capacity(fixture.body.len() + 64);
    let mut rest = fixture.body;
    while let Some(start) = rest.find("{{") {
        body.push_str(&rest[..start]);
        let Some(end) = rest[start..].find("}}") else {
            body.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let value = match &rest[start + 2..start + end] {
            "id" => event_id.to_owned(),
            "ref" => alphanumeric(24),
            "sha" => hex(40),
            "number" => fastrand::u64(1_000_000_000_000..10_000_000_000_000).to_string(),
            "now" => seconds.to_string(),
            "now_iso" => iso.clone(),
            "hook" => hook.clone(),
            other => format!("{{{{{other}}}}}"),
        };
        body.push_str(&value);
        rest = &rest[start + end + 2..];
    }
    body.push_str(rest);
    body
}

fn list() {
    for fixture in FIXTURES {
        println!(
            "{} {}  (shaped after {})",
            fixture.provider.name(),
            fixture.event,
            fixture.source
        );
    }
}

pub(crate) fn trigger(args: TriggerArgs) -> Result<ExitCode, UsageError> {
    let (Some(provider), Some(event), Some(url)) = (args.provider, args.event, args.url) else {
        list();
        return Ok(ExitCode::SUCCESS);
    };
    let Some(fixture) = FIXTURES
        .iter()
        .find(|fixture| fixture.provider == provider && fixture.event == event.as_str())
    else {
        let known: Vec<&str> = FIXTURES
            .iter()
            .filter(|fixture| fixture.provider == provider)
            .map(|fixture| fixture.event)
            .collect();
        return Err(UsageError(format!(
            "no {} event `{event}` to trigger: try {} (`hooklatch trigger --list` shows all)",
            provider.name(),
            known.join(", ")
        )));
    };
    let secrets = crate::SecretArgs {
        given: args.secret.into_iter().collect(),
        files: args.secret_file.into_iter().collect(),
    }
    .secrets()?;
    let signer = crate::listen::resigner(&provider.scheme(), &secrets)?;
    let now = SystemTime::now();
    let event_id = provider.event_id();
    let body = expand(fixture, &event_id, now);
    let mut headers: Vec<(String, String)> = fixture
        .headers
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    if provider == Provider::Shopify {
        headers.push((
            "x-shopify-triggered-at".into(),
            humantime::format_rfc3339_millis(now).to_string(),
        ));
        headers.push(("x-shopify-event-id".into(), guid()));
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let transport = HttpTransport::new(crate::listen::forward_policy())?;
        // Slack's scheme carries no id: its event's is `event_id` in the body.
        match provider {
            Provider::Slack => println!("triggering slack {event} to {url}"),
            _ => println!(
                "triggering {} {event} ({event_id}) to {url}",
                provider.name()
            ),
        }
        let sent = crate::listen::post_signed(
            &transport,
            &url,
            &signer,
            (&event_id, now),
            body.as_bytes(),
            &headers,
        )
        .await;
        Ok(match sent {
            Ok(status) => {
                println!("answered {status}");
                ExitCode::SUCCESS
            }
            Err(crate::listen::Unsent::Answered(status)) => {
                println!("answered {status}: not accepted");
                ExitCode::FAILURE
            }
            Err(unsent) => {
                println!("{unsent}");
                ExitCode::FAILURE
            }
        })
    })
}
