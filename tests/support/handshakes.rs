//! Providers' subscription checks as each provider documents them, for
//! the axum layer's and the actix extractor's tests: the request, and the
//! answer a receiver owes it. Included with `#[path]`.

#![allow(dead_code, unreachable_pub)]

use std::time::SystemTime;

use hooklatch::receive::Handshake;
use hooklatch::verify::{Scheme, Signer, Verifier};

/// One provider's handshake: how the receiver is configured, the request,
/// and the answer expected.
pub struct Case {
    pub provider: &'static str,
    pub verifier: Verifier,
    pub handshake: Handshake,
    pub method: &'static str,
    /// The query string, without `?`.
    pub query: &'static str,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub status: u16,
    pub content_type: &'static str,
    pub answer: String,
    /// Headers the answer must carry, names lowercase.
    pub answer_headers: Vec<(&'static str, &'static str)>,
    /// The same request with its proof broken (signature or verify
    /// token), and the status it gets.
    pub forged: Forged,
    /// A webhook of the same provider, which the receiver claims as usual.
    pub webhook: (Vec<(String, String)>, Vec<u8>),
}

pub struct Forged {
    pub query: &'static str,
    pub headers: Vec<(String, String)>,
    pub status: u16,
}

fn verifier(scheme: Scheme, secret: &str) -> Verifier {
    Verifier::builder(scheme)
        .with_secret(secret)
        .unwrap()
        .build()
        .unwrap()
}

fn signed(scheme: Scheme, secret: &str, id: &str, body: &[u8]) -> Vec<(String, String)> {
    let signer = Signer::new(scheme, [secret]).unwrap();
    let headers = signer.sign(id, SystemTime::now(), body).unwrap();
    headers
        .iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// `headers` with the last character of the value of `name` changed.
fn broken(mut headers: Vec<(String, String)>, name: &str) -> Vec<(String, String)> {
    let entry = headers
        .iter_mut()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .unwrap();
    let last = entry.1.pop().unwrap();
    entry.1.push(if last == '0' { '1' } else { '0' });
    headers
}

pub fn cases() -> Vec<Case> {
    let text = "text/plain; charset=utf-8";
    let mut cases = Vec::new();

    // Slack's Events API documentation, "url_verification".
    let secret = "8f742231b10e8888abcd99yyyzzz85a5";
    let body = br#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let headers = signed(Scheme::slack(), secret, "-", body);
    let event =
        br#"{"type":"event_callback","event_id":"Ev08MFMKH6","event":{"type":"app_mention"}}"#;
    cases.push(Case {
        provider: "slack",
        verifier: verifier(Scheme::slack(), secret),
        handshake: Handshake::Slack,
        method: "POST",
        query: "",
        answer_headers: Vec::new(),
        forged: Forged {
            query: "",
            headers: broken(headers.clone(), "x-slack-signature"),
            status: 400,
        },
        headers,
        body: body.to_vec(),
        status: 200,
        content_type: text,
        answer: "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P".into(),
        webhook: (signed(Scheme::slack(), secret, "-", event), event.to_vec()),
    });

    // Meta's Graph API webhooks documentation, "Verification Requests".
    let secret = "meta-app-secret";
    let event = br#"{"object":"page","entry":[{"id":"1","time":1520383571}]}"#;
    cases.push(Case {
        provider: "meta",
        verifier: verifier(Scheme::meta(), secret),
        handshake: Handshake::meta("meatyhamhock"),
        method: "GET",
        query: "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=meatyhamhock",
        headers: Vec::new(),
        body: Vec::new(),
        status: 200,
        content_type: text,
        answer: "1158201444".into(),
        answer_headers: Vec::new(),
        forged: Forged {
            query: "hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=meatyhamhocK",
            headers: Vec::new(),
            status: 403,
        },
        webhook: (signed(Scheme::meta(), secret, "-", event), event.to_vec()),
    });

    // Twitch's EventSub documentation, "Responding to a challenge request".
    let secret = "s3cRe7-twitch-secret";
    let body = br#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","status":"webhook_callback_verification_pending","type":"channel.follow","version":"1","condition":{"broadcaster_user_id":"12826"},"transport":{"method":"webhook","callback":"https://example.com/webhooks/callback"},"created_at":"2019-11-16T10:11:12.634234626Z"}}"#;
    let mut headers = signed(
        Scheme::twitch(),
        secret,
        "e76c6bd4-55c9-4987-8304-da1588d8988b",
        body,
    );
    headers.push((
        "Twitch-Eventsub-Message-Type".into(),
        "webhook_callback_verification".into(),
    ));
    let event = br#"{"subscription":{"type":"channel.follow"},"event":{"user_id":"1337"}}"#;
    let mut notification = signed(
        Scheme::twitch(),
        secret,
        "f00dcafe-0000-4000-8000-000000000001",
        event,
    );
    notification.push(("Twitch-Eventsub-Message-Type".into(), "notification".into()));
    cases.push(Case {
        provider: "twitch",
        verifier: verifier(Scheme::twitch(), secret),
        handshake: Handshake::Twitch,
        method: "POST",
        query: "",
        answer_headers: Vec::new(),
        forged: Forged {
            query: "",
            headers: broken(headers.clone(), "twitch-eventsub-message-signature"),
            status: 400,
        },
        headers,
        body: body.to_vec(),
        status: 200,
        content_type: text,
        answer: "pogchamp-kappa-360noscope-vohiyo".into(),
        webhook: (notification, event.to_vec()),
    });

    // Zoom's webhook documentation, "Validate your webhook endpoint"; the
    // encrypted token for this secret as Elastic's Zoom input computes it.
    let secret = "secretValueTest";
    let body = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
    let headers = signed(Scheme::zoom(), secret, "-", body);
    let event =
        br#"{"event":"meeting.started","payload":{"object":{"id":"1"}},"event_ts":1654503849680}"#;
    cases.push(Case {
        provider: "zoom",
        verifier: verifier(Scheme::zoom(), secret),
        handshake: Handshake::Zoom,
        method: "POST",
        query: "",
        answer_headers: Vec::new(),
        forged: Forged {
            query: "",
            headers: broken(headers.clone(), "x-zm-signature"),
            status: 400,
        },
        headers,
        body: body.to_vec(),
        status: 200,
        content_type: "application/json",
        answer: r#"{"encryptedToken":"70c1f2e2e6ca2d39297490d1f9142c7d701415ea8e6151f6562a08fa657a40ff","plainToken":"qgg8vlvZRS6UYooatFL8Aw"}"#.into(),
        webhook: (signed(Scheme::zoom(), secret, "-", event), event.to_vec()),
    });
    // Discord's interactions documentation, "Receiving an Interaction":
    // a PING, signed with the application's key.
    let key_pair = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60\
                    d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
    let public = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
    let body = br#"{"id":"787053080478613555","token":"ThisIsATokenFromDiscordThatIsVeryLong","type":1,"version":1}"#;
    let headers = signed(Scheme::discord(), key_pair, "-", body);
    let event = br#"{"id":"787053080478613556","token":"ThisIsATokenFromDiscordThatIsVeryLong","type":2,"version":1,"data":{"id":"787053080478613554","name":"test"}}"#;
    cases.push(Case {
        provider: "discord",
        verifier: verifier(Scheme::discord(), public),
        handshake: Handshake::Discord,
        method: "POST",
        query: "",
        answer_headers: Vec::new(),
        forged: Forged {
            query: "",
            headers: broken(headers.clone(), "x-signature-ed25519"),
            status: 400,
        },
        headers,
        body: body.to_vec(),
        status: 200,
        content_type: "application/json",
        answer: r#"{"type":1}"#.into(),
        webhook: (
            signed(Scheme::discord(), key_pair, "-", event),
            event.to_vec(),
        ),
    });
    // Microsoft Graph's change notifications documentation, "Notification
    // endpoint validation": unsigned, on a receiver of any scheme.
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let event = br#"{"type":"order.paid","id":"ord_1"}"#;
    cases.push(Case {
        provider: "microsoft-graph",
        verifier: verifier(Scheme::standard_webhooks(), secret),
        handshake: Handshake::MicrosoftGraph,
        method: "POST",
        query: "validationToken=Validation%3A%20Testing%20client%20application%20reachability%20for%20subscription%20Request-Id%3A%2025b02b51-3a9f-4a8e-8c7b-3d1e0f2a6b4c",
        headers: Vec::new(),
        body: Vec::new(),
        status: 200,
        content_type: text,
        answer: "Validation: Testing client application reachability for subscription Request-Id: 25b02b51-3a9f-4a8e-8c7b-3d1e0f2a6b4c".into(),
        answer_headers: Vec::new(),
        forged: Forged {
            query: "validationToken=%00%01",
            headers: Vec::new(),
            status: 400,
        },
        webhook: (signed(Scheme::standard_webhooks(), secret, "msg_graph_1", event), event.to_vec()),
    });

    // X's Account Activity API documentation, "Challenge-Response Checks";
    // the response token computed outside this crate with X's formula
    // (Python hmac and base64).
    let secret = "x-consumer-secret";
    let event = br#"{"for_user_id":"2244994945","tweet_create_events":[{"id_str":"1"}]}"#;
    cases.push(Case {
        provider: "x",
        verifier: verifier(Scheme::x(), secret),
        handshake: Handshake::X,
        method: "GET",
        query: "crc_token=9b4507b3-9040-4669-9ef0-2d2e4e0ff2a0",
        headers: Vec::new(),
        body: Vec::new(),
        status: 200,
        content_type: "application/json",
        answer: r#"{"response_token":"sha256=9ktWSBo4c6aARMx0b3irPvcgnh1Pve65SDXnQ10Tgro="}"#
            .into(),
        answer_headers: Vec::new(),
        forged: Forged {
            query: "crc_token=",
            headers: Vec::new(),
            status: 400,
        },
        webhook: (signed(Scheme::x(), secret, "-", event), event.to_vec()),
    });
    // Azure Event Grid's "Endpoint validation with Event Grid events
    // schema": an unsigned POST, on a receiver of any scheme.
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let event = br#"{"type":"order.paid","id":"ord_2"}"#;
    let validation = br#"[{"id":"2d1781af-3a4c-4d7c-bd0c-e34b19da4e66","topic":"/subscriptions/xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx","subject":"","data":{"validationCode":"512d38b6-c7b8-40c8-89fe-f46f9e9622b6","validationUrl":"https://rp-eastus2.eventgrid.azure.net:553/eventsubscriptions/myeventsub/validate?id=0000000000-0000-0000-0000-00000000000000&t=2022-10-28T04:23:35.1981776Z&apiVersion=2018-05-01-preview&token=1A1A1A1A"},"eventType":"Microsoft.EventGrid.SubscriptionValidationEvent","eventTime":"2022-10-28T04:23:35.1981776Z","metadataVersion":"1","dataVersion":"1"}]"#;
    cases.push(Case {
        provider: "azure-event-grid",
        verifier: verifier(Scheme::standard_webhooks(), secret),
        handshake: Handshake::AzureEventGrid,
        method: "POST",
        query: "",
        headers: vec![
            ("aeg-event-type".into(), "SubscriptionValidation".into()),
            ("content-type".into(), "application/json".into()),
        ],
        body: validation.to_vec(),
        status: 200,
        content_type: "application/json",
        answer: r#"{"validationResponse":"512d38b6-c7b8-40c8-89fe-f46f9e9622b6"}"#.into(),
        answer_headers: Vec::new(),
        // Without Event Grid's header it is an unsigned webhook.
        forged: Forged {
            query: "",
            headers: vec![("content-type".into(), "application/json".into())],
            status: 400,
        },
        webhook: (
            signed(Scheme::standard_webhooks(), secret, "msg_grid_1", event),
            event.to_vec(),
        ),
    });
    // The CloudEvents 1.0 webhook specification's abuse protection, which
    // Event Grid uses with the CloudEvents schema: an OPTIONS request.
    let event = br#"{"type":"order.paid","id":"ord_3"}"#;
    cases.push(Case {
        provider: "azure-event-grid-cloudevents",
        verifier: verifier(Scheme::standard_webhooks(), secret),
        handshake: Handshake::AzureEventGrid,
        method: "OPTIONS",
        query: "",
        headers: vec![
            (
                "webhook-request-origin".into(),
                "eventgrid.azure.net".into(),
            ),
            ("webhook-request-rate".into(), "120".into()),
        ],
        body: Vec::new(),
        status: 200,
        content_type: text,
        answer: String::new(),
        answer_headers: vec![
            ("webhook-allowed-origin", "eventgrid.azure.net"),
            ("webhook-allowed-rate", "*"),
        ],
        // Two origins: which to allow is ambiguous.
        forged: Forged {
            query: "",
            headers: vec![
                (
                    "webhook-request-origin".into(),
                    "eventgrid.azure.net".into(),
                ),
                ("webhook-request-origin".into(), "attacker.example".into()),
            ],
            status: 400,
        },
        webhook: (
            signed(Scheme::standard_webhooks(), secret, "msg_grid_2", event),
            event.to_vec(),
        ),
    });
    cases
}

/// Sends `method url?query` with `headers` and `body`: the status, the
/// content type and the body.
pub async fn send(
    method: &str,
    url: &str,
    query: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (u16, String, String) {
    let url = if query.is_empty() {
        url.to_owned()
    } else {
        format!("{url}?{query}")
    };
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = reqwest::Client::new()
        .request(method, url)
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|value| value.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let status = response.status().as_u16();
    (status, content_type, response.text().await.unwrap())
}

impl Case {
    /// Sends the handshake to `url` and checks the answer (as JSON where
    /// it is JSON), then sends the forged one and checks its refusal.
    pub async fn check_answered(&self, url: &str) {
        let provider = self.provider;
        let (status, content_type, answer) =
            send(self.method, url, self.query, &self.headers, &self.body).await;
        assert_eq!(status, self.status, "{provider} at {url}: {answer}");
        assert_eq!(content_type, self.content_type, "{provider}");
        if content_type == "application/json" {
            let got: serde_json::Value = serde_json::from_str(&answer).unwrap();
            let want: serde_json::Value = serde_json::from_str(&self.answer).unwrap();
            assert_eq!(got, want, "{provider}");
        } else {
            assert_eq!(answer, self.answer, "{provider}");
        }
        if !self.answer_headers.is_empty() {
            let method = reqwest::Method::from_bytes(self.method.as_bytes()).unwrap();
            let mut request = reqwest::Client::new().request(method, url);
            for (name, value) in &self.headers {
                request = request.header(name, value);
            }
            let response = request.send().await.unwrap();
            for (name, value) in &self.answer_headers {
                let got = response.headers().get(*name).map(|v| v.to_str().unwrap());
                assert_eq!(got, Some(*value), "{provider}: {name}");
            }
        }
        let forged = &self.forged;
        let (status, _, answer) =
            send(self.method, url, forged.query, &forged.headers, &self.body).await;
        assert_eq!(status, forged.status, "{provider} forged: {answer}");
    }
}
