//! What a provider says about a delivery beyond what it signs: the event's
//! type, its own delivery id, how often it retried, and the headers a
//! receiver asked to keep.

use std::sync::OnceLock;

use crate::verify::{HeaderKey, HeaderLookup, Headers};

/// The W3C trace context headers a receiver keeps with every event, so a
/// worker's span can continue the provider's trace.
pub(crate) const TRACE_HEADERS: [&str; 2] = ["traceparent", "tracestate"];

/// The longest trace header kept: W3C's limit for `tracestate`.
const MAX_TRACE_HEADER_LEN: usize = 512;

/// A provider's words about one delivery, read from its headers when the
/// request arrives; the type in the body is read when first asked for.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProviderInfo {
    /// The type named by a header (GitHub, Shopify, Outpost).
    header_type: Option<String>,
    /// Where in the body the type is, when no header names it.
    body_type_at: BodyType,
    body_type: OnceLock<Option<String>>,
    pub(crate) delivery_id: Option<String>,
    pub(crate) retry: Option<u32>,
    pub(crate) kept: Vec<(String, String)>,
}

/// Where a scheme's body names the event's type.
#[derive(Debug, Clone, Copy, Default)]
enum BodyType {
    /// Nowhere: the type is a header's, or the scheme has none.
    #[default]
    Nowhere,
    /// A top-level string field: `type` (Stripe, Standard Webhooks, Svix,
    /// Slack, Square, Convoy, custom schemes; for Slack's interactive payloads,
    /// the `type` of the JSON in the form field `payload`), `event`
    /// (Zoom), `event_type` (Paddle).
    Field(&'static str),
    /// Meta's: the `field` of the first entry's first change
    /// (`entry[0].changes[0].field`), else the top-level `object`.
    MetaChange,
    /// Twitch's: the subscription's `type` (`subscription.type`).
    TwitchSubscription,
}

fn text<H: Headers + ?Sized>(headers: &H, name: &'static str) -> Option<String> {
    match headers.lookup(&HeaderKey::from_static(name)) {
        HeaderLookup::One(value) => std::str::from_utf8(value).ok().map(str::to_owned),
        _ => None,
    }
}

impl ProviderInfo {
    /// Reads what the scheme called `scheme` puts in its headers, and
    /// keeps the headers named in `keep`.
    pub(crate) fn read<H: Headers + ?Sized>(scheme: &str, headers: &H, keep: &[HeaderKey]) -> Self {
        let (header_type, delivery_id, retry) = match scheme {
            "github" => (
                text(headers, "x-github-event"),
                text(headers, "x-github-delivery"),
                None,
            ),
            "shopify" => (
                text(headers, "x-shopify-topic"),
                text(headers, "x-shopify-webhook-id"),
                None,
            ),
            "shopify-events" => (None, text(headers, "shopify-webhook-id"), None),
            "slack" => (
                None,
                None,
                text(headers, "x-slack-retry-num").and_then(|n| n.trim().parse().ok()),
            ),
            // Twitch's type is read from the signed body: its
            // `Twitch-Eventsub-Subscription-Type` header is not signed.
            "twitch" => (
                None,
                text(headers, "twitch-eventsub-message-id"),
                text(headers, "twitch-eventsub-message-retry").and_then(|n| n.trim().parse().ok()),
            ),
            "outpost" => (
                text(headers, "x-outpost-topic"),
                text(headers, "x-outpost-event-id"),
                None,
            ),
            // Hook0's body is the producer's own payload: the type is only
            // in its header.
            "hook0" => (text(headers, "x-event-type"), None, None),
            _ => (None, None, None),
        };
        let body_type_at = match scheme {
            _ if header_type.is_some() => BodyType::Nowhere,
            "github" | "shopify" | "outpost" | "hook0" => BodyType::Nowhere,
            "twitch" => BodyType::TwitchSubscription,
            "zoom" => BodyType::Field("event"),
            "shopify-events" => BodyType::Field("topic"),
            "paddle" => BodyType::Field("event_type"),
            "meta" => BodyType::MetaChange,
            _ => BodyType::Field("type"),
        };
        let kept = keep
            .iter()
            .filter_map(|name| match headers.lookup(name) {
                HeaderLookup::One(value)
                    if !(TRACE_HEADERS.contains(&name.as_str())
                        && value.len() > MAX_TRACE_HEADER_LEN) =>
                {
                    std::str::from_utf8(value)
                        .ok()
                        .map(|value| (name.as_str().to_owned(), value.to_owned()))
                }
                _ => None,
            })
            .collect();
        Self {
            body_type_at,
            header_type,
            body_type: OnceLock::new(),
            delivery_id,
            retry,
            kept,
        }
    }

    /// The event's type: from the header that names it, or the body's
    /// top-level `type` (for Slack's interactive payloads, the `type` of
    /// the JSON in the form field `payload`).
    pub(crate) fn event_type<'a>(&'a self, body: &[u8]) -> Option<&'a str> {
        if let Some(kind) = &self.header_type {
            return Some(kind);
        }
        let at = self.body_type_at;
        self.body_type
            .get_or_init(|| match at {
                BodyType::Nowhere => None,
                BodyType::Field("type") => body_type(body).or_else(|| form_payload_type(body)),
                BodyType::Field(name) => crate::verify::json_field(body, name).ok(),
                BodyType::MetaChange => meta_change_field(body),
                BodyType::TwitchSubscription => twitch_subscription_type(body),
            })
            .as_deref()
    }
}

/// Twitch's event type: the subscription's `type`.
fn twitch_subscription_type(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Notification {
        subscription: Subscription,
    }
    #[derive(serde::Deserialize)]
    struct Subscription {
        #[serde(rename = "type")]
        kind: String,
    }
    serde_json::from_slice::<Notification>(body)
        .ok()
        .map(|notification| notification.subscription.kind)
}

/// Meta's event type: the `field` of the first entry's first change
/// (`feed`, `messages`), else the top-level `object` (`page`,
/// `whatsapp_business_account`).
fn meta_change_field(body: &[u8]) -> Option<String> {
    let json: serde_json::Value = serde_json::from_slice(body).ok()?;
    json["entry"][0]["changes"][0]["field"]
        .as_str()
        .or_else(|| json["object"].as_str())
        .map(str::to_owned)
}

/// The top-level `type` of a JSON object, without building the rest.
fn body_type(body: &[u8]) -> Option<String> {
    crate::verify::json_field(body, "type").ok()
}

/// The `type` of the JSON in a form body's `payload` field, as Slack sends
/// interactive actions.
fn form_payload_type(body: &[u8]) -> Option<String> {
    let body = std::str::from_utf8(body).ok()?;
    let encoded = body
        .split('&')
        .find_map(|pair| pair.strip_prefix("payload="))?;
    let decoded = crate::verify::form_decode(encoded)?;
    body_type(decoded.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(names: &[&str]) -> Vec<HeaderKey> {
        names
            .iter()
            .map(|name| HeaderKey::new(name).unwrap())
            .collect()
    }

    /// A receiver keeps the request's trace context with every event
    /// (so the worker's span continues it), but not a `tracestate` past
    /// W3C's 512 bytes.
    #[test]
    fn every_event_keeps_its_requests_trace_context() {
        let receiver = crate::receive::Receiver::new(
            crate::verify::Verifier::builder(crate::verify::Scheme::standard_webhooks())
                .with_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
                .unwrap()
                .build()
                .unwrap(),
        );
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let long_state = "k=".to_owned() + &"v".repeat(600);
        let headers = [("traceparent", parent), ("tracestate", long_state.as_str())];
        let info = ProviderInfo::read("standard-webhooks", &headers, receiver.kept());
        assert_eq!(info.kept, [("traceparent".to_owned(), parent.to_owned())]);
    }

    #[test]
    fn github_and_shopify_name_the_type_and_delivery_in_headers() {
        let headers = [
            ("x-github-event", "push"),
            ("x-github-delivery", "72d3162e"),
        ];
        let info = ProviderInfo::read("github", &headers, &[]);
        assert_eq!(info.event_type(br#"{"type":"ignored"}"#), Some("push"));
        assert_eq!(info.delivery_id.as_deref(), Some("72d3162e"));
        let headers = [
            ("x-shopify-topic", "orders/create"),
            ("x-shopify-webhook-id", "b54557e4"),
        ];
        let info = ProviderInfo::read("shopify", &headers, &[]);
        assert_eq!(info.event_type(b"{}"), Some("orders/create"));
        assert_eq!(info.delivery_id.as_deref(), Some("b54557e4"));
    }

    #[test]
    fn hook0_names_the_type_in_a_header_and_never_in_the_body() {
        let headers = [("x-event-type", "users.account.created")];
        let info = ProviderInfo::read("hook0", &headers, &[]);
        assert_eq!(
            info.event_type(br#"{"type":"ignored"}"#),
            Some("users.account.created")
        );
        let info = ProviderInfo::read("hook0", &[] as &[(&str, &str)], &[]);
        assert_eq!(info.event_type(br#"{"type":"ignored"}"#), None);
    }

    #[test]
    fn shopify_events_name_the_delivery_in_a_header_and_the_type_in_the_body() {
        let headers = [("shopify-webhook-id", "b54557e4")];
        let info = ProviderInfo::read("shopify-events", &headers, &[]);
        assert_eq!(
            info.event_type(br#"{"topic":"Product","action":"update"}"#),
            Some("Product")
        );
        assert_eq!(info.delivery_id.as_deref(), Some("b54557e4"));
    }

    #[test]
    fn body_schemes_name_the_type_in_the_body() {
        let none: [(&str, &str); 0] = [];
        for scheme in ["stripe", "standard", "svix", "my-custom"] {
            let info = ProviderInfo::read(scheme, &none, &[]);
            assert_eq!(
                info.event_type(br#"{"id":"evt_1","type":"invoice.paid"}"#),
                Some("invoice.paid")
            );
        }
        assert_eq!(
            ProviderInfo::read("stripe", &none, &[]).event_type(b"not json"),
            None
        );
    }

    #[test]
    fn each_newer_provider_names_its_type_where_it_sends_it() {
        let none: [(&str, &str); 0] = [];
        let twitch = [
            (
                "twitch-eventsub-subscription-type",
                "forged.from.the.header",
            ),
            (
                "twitch-eventsub-message-id",
                "e76c6bd4-55c9-4987-8304-da1588d8988b",
            ),
            ("twitch-eventsub-message-retry", "1"),
        ];
        let info = ProviderInfo::read("twitch", &twitch, &[]);
        assert_eq!(
            info.event_type(br#"{"type":"ignored","subscription":{"type":"channel.follow"}}"#),
            Some("channel.follow"),
            "Twitch's type is the signed body's, never the unsigned header's"
        );
        assert_eq!(
            info.delivery_id.as_deref(),
            Some("e76c6bd4-55c9-4987-8304-da1588d8988b")
        );
        assert_eq!(info.retry, Some(1));
        let outpost = [
            ("x-outpost-topic", "user.created"),
            ("x-outpost-event-id", "evt_1"),
        ];
        let info = ProviderInfo::read("outpost", &outpost, &[]);
        assert_eq!(info.event_type(b"{}"), Some("user.created"));
        assert_eq!(info.delivery_id.as_deref(), Some("evt_1"));
        for (scheme, body, kind) in [
            ("zoom", &br#"{"event":"meeting.started","payload":{}}"#[..], Some("meeting.started")),
            ("paddle", br#"{"event_id":"evt_1","event_type":"customer.created"}"#, Some("customer.created")),
            ("square", br#"{"type":"payment.created","event_id":"e"}"#, Some("payment.created")),
            (
                "meta",
                br#"{"object":"page","entry":[{"id":"1","changes":[{"field":"feed","value":{}}]}]}"#,
                Some("feed"),
            ),
            ("meta", br#"{"object":"whatsapp_business_account","entry":[]}"#, Some("whatsapp_business_account")),
            ("convoy", br#"{"type":"order.paid"}"#, Some("order.paid")),
        ] {
            let info = ProviderInfo::read(scheme, &none, &[]);
            assert_eq!(info.event_type(body), kind, "{scheme}");
        }
    }

    #[test]
    fn slack_names_its_retries_and_its_payload_type() {
        let headers = [
            ("x-slack-retry-num", "2"),
            ("x-slack-retry-reason", "http_timeout"),
        ];
        let info = ProviderInfo::read("slack", &headers, &keep(&["x-slack-retry-reason"]));
        assert_eq!(info.retry, Some(2));
        assert_eq!(
            info.kept,
            [("x-slack-retry-reason".to_owned(), "http_timeout".to_owned())]
        );
        assert_eq!(
            info.event_type(br#"{"type":"event_callback","event":{"type":"message"}}"#),
            Some("event_callback")
        );
        let form = b"payload=%7B%22type%22%3A%22block_actions%22%7D";
        let info = ProviderInfo::read("slack", &headers, &[]);
        assert_eq!(info.event_type(form), Some("block_actions"));
    }
}
