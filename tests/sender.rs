//! The delivery loop against a scripted transport, on tokio's paused clock:
//! exact attempt times, Retry-After, 410, give-up statuses, exhaustion,
//! the breaker, and a fresh signature on every attempt.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use hooklatch::sender::guard::Forbidden;
use hooklatch::sender::rules::{AttemptError, Breaker, Final, Jitter, Schedule, WaitReason};
use hooklatch::sender::transport::{Response, TransportError};
use hooklatch::sender::{Endpoint, Policy, Transport, deliver};
use hooklatch::verify::{Scheme, Signer, Verifier};

pub(crate) const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const BASE: u64 = 1_700_000_000;

type Headers = Vec<(String, String)>;

/// Answers from a script and records what it was sent, and when.
#[derive(Clone, Default)]
struct Scripted {
    answers: Arc<Mutex<VecDeque<Result<Response, TransportError>>>>,
    sent: Arc<Mutex<Vec<(Duration, Headers)>>>,
    start: Arc<Mutex<Option<tokio::time::Instant>>>,
}

impl Scripted {
    fn new(answers: Vec<Result<Response, TransportError>>) -> Self {
        let scripted = Self::default();
        *scripted.answers.lock().unwrap() = answers.into();
        *scripted.start.lock().unwrap() = Some(tokio::time::Instant::now());
        scripted
    }

    fn sent_at(&self) -> Vec<u64> {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .map(|(at, _)| at.as_secs())
            .collect()
    }
}

impl Transport for Scripted {
    async fn post(
        &self,
        _url: &str,
        headers: &[(String, String)],
        _body: &[u8],
    ) -> Result<Response, TransportError> {
        let at = self.start.lock().unwrap().unwrap().elapsed();
        self.sent.lock().unwrap().push((at, headers.to_vec()));
        self.answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Err(TransportError::Other("script ran out".into())))
    }
}

fn status(code: u16) -> Result<Response, TransportError> {
    Ok(Response::new(code).with_body(b"ok".to_vec()))
}

fn with_retry_after(code: u16, value: &str) -> Result<Response, TransportError> {
    Ok(Response::new(code).with_retry_after(value))
}

fn table(seconds: &[u64]) -> Schedule {
    Schedule::Table {
        delays: seconds.iter().copied().map(Duration::from_secs).collect(),
        jitter: Jitter::None,
    }
}

/// Signed timestamps follow tokio's paused clock from a fixed base.
fn policy(schedule: Schedule) -> Policy {
    let start = tokio::time::Instant::now();
    Policy::new(schedule).with_clock(move || {
        UNIX_EPOCH + Duration::from_secs(BASE) + (tokio::time::Instant::now() - start)
    })
}

fn endpoint() -> Endpoint {
    Endpoint::new(
        "http://127.0.0.1:9/hooks",
        Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn retries_failures_on_schedule_with_the_same_id_and_fresh_signatures() {
    let transport = Scripted::new(vec![
        status(500),
        Err(TransportError::Connect("connection refused".into())),
        status(200),
    ]);
    let record = deliver(
        &transport,
        &endpoint(),
        &policy(table(&[0, 5, 300, 1800])),
        "msg_1",
        b"{}",
        || 0.5,
    )
    .await;
    assert_eq!(record.outcome, Final::Delivered);
    assert_eq!(transport.sent_at(), [0, 5, 305]);
    let results: Vec<_> = record.attempts.iter().map(|a| a.result.clone()).collect();
    assert_eq!(
        results,
        [
            Ok(500),
            Err(AttemptError::new("could not connect: connection refused")),
            Ok(200)
        ]
    );

    let verifier = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .unwrap()
        .build()
        .unwrap();
    let sent = transport.sent.lock().unwrap().clone();
    let mut timestamps = Vec::new();
    for ((at, headers), attempt) in sent.iter().zip(&record.attempts) {
        let header = |name: &str| {
            headers
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
                .unwrap()
        };
        assert_eq!(header("webhook-id"), "msg_1", "the id is stable");
        timestamps.push(header("webhook-timestamp"));
        let now = UNIX_EPOCH + Duration::from_secs(BASE) + *at;
        assert!(
            verifier.verify_at(headers, b"{}", now).is_ok(),
            "a valid signature each time"
        );
        assert_eq!(attempt.sent_at, now);
    }
    assert_eq!(
        timestamps,
        [BASE, BASE + 5, BASE + 305].map(|t| t.to_string()),
        "a fresh timestamp each attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_on_429_and_503_waits_the_longer_of_it_and_the_schedule() {
    let date = httpdate::fmt_http_date(
        UNIX_EPOCH + Duration::from_secs(BASE + 120 + 90), // 90 s after the second attempt
    );
    let transport = Scripted::new(vec![
        with_retry_after(429, "120"),
        with_retry_after(503, &date),
        with_retry_after(503, "1"),
        status(204),
    ]);
    let record = deliver(
        &transport,
        &endpoint(),
        &policy(table(&[0, 5, 5, 30])),
        "msg_2",
        b"{}",
        || 0.5,
    )
    .await;
    assert_eq!(record.outcome, Final::Delivered);
    assert_eq!(transport.sent_at(), [0, 120, 210, 240]);
    let reasons: Vec<_> = record.attempts.iter().map(|a| a.reason).collect();
    assert_eq!(
        reasons,
        [
            WaitReason::Schedule,
            WaitReason::RetryAfter,
            WaitReason::RetryAfter,
            WaitReason::Schedule
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn gone_stops_at_once() {
    let transport = Scripted::new(vec![status(410), status(200)]);
    let record = deliver(
        &transport,
        &endpoint(),
        &policy(table(&[0, 5])),
        "msg_3",
        b"{}",
        || 0.5,
    )
    .await;
    assert_eq!(record.outcome, Final::Gone);
    assert_eq!(record.attempts.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn give_up_statuses_end_the_delivery() {
    let transport = Scripted::new(vec![status(400), status(200)]);
    let record = deliver(
        &transport,
        &endpoint(),
        &policy(table(&[0, 5])).with_give_up_on(&[400, 422]),
        "msg_4",
        b"{}",
        || 0.5,
    )
    .await;
    assert_eq!(record.outcome, Final::Dead);
    assert_eq!(record.attempts.len(), 1);
}

/// A refusal by the SSRF guard reaches the endpoint's owner (the record,
/// the console, notices) as "refused" only: which class of address a name
/// resolved to would tell an outsider what exists inside the network. The
/// typed error keeps the class for the operator.
#[tokio::test(start_paused = true)]
async fn a_refused_attempt_records_refused_never_the_class_of_address() {
    for class in [
        Forbidden::Loopback,
        Forbidden::Private,
        Forbidden::LinkLocal,
    ] {
        let transport = Scripted::new(vec![Err(TransportError::Refused(class))]);
        let record = deliver(
            &transport,
            &endpoint(),
            &policy(table(&[0])),
            "msg_refused",
            b"{}",
            || 0.5,
        )
        .await;
        let error = record.attempts[0].result.as_ref().unwrap_err();
        assert!(error.as_str().starts_with("refused"), "{error}");
        assert!(!error.as_str().contains(&class.to_string()), "{error}");
        assert!(!error.as_str().contains("address guard"), "{error}");
        assert!(
            matches!(error.transport_error(), Some(TransportError::Refused(kept)) if *kept == class),
            "the typed error keeps the class"
        );
    }
}

/// An attempt's record keeps a transport error as text in the form the
/// outbox has always stored: the message, then each source's.
#[test]
fn a_transport_error_is_recorded_as_its_message_and_sources() {
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
    assert_eq!(
        TransportError::Connect(Box::new(io)).report(),
        "could not connect: connection refused"
    );
    let refused = TransportError::Refused(Forbidden::Loopback);
    assert_eq!(
        refused.report(),
        format!("refused: {}", Forbidden::Loopback)
    );
    let deadline = TransportError::Timeout {
        after: Some(Duration::from_millis(1500)),
        source: None,
    };
    assert_eq!(deadline.report(), "timed out after 1500 ms");
    assert!(
        std::error::Error::source(&refused).is_some(),
        "source() kept"
    );
}

#[tokio::test(start_paused = true)]
async fn a_delivery_is_dead_when_the_attempts_run_out() {
    let transport = Scripted::new(vec![
        status(302),
        status(500),
        Err(TransportError::Timeout {
            after: None,
            source: Some("deadline".into()),
        }),
    ]);
    let record = deliver(
        &transport,
        &endpoint(),
        &policy(table(&[0, 1, 2])),
        "msg_5",
        b"{}",
        || 0.5,
    )
    .await;
    assert_eq!(record.outcome, Final::Dead);
    assert_eq!(transport.sent_at(), [0, 1, 3]);
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_holds_attempts_until_it_half_opens() {
    let transport = Scripted::new(vec![status(500), status(500), status(200)]);
    let endpoint = endpoint().with_breaker(
        Breaker::new()
            .with_failure_threshold(2)
            .with_cool_down(Duration::from_secs(60)),
    );
    let record = deliver(
        &transport,
        &endpoint,
        &policy(table(&[0, 1, 1])),
        "msg_6",
        b"{}",
        || 0.5,
    )
    .await;
    assert_eq!(record.outcome, Final::Delivered);
    // Opened at 1 s; the third attempt waits its 1 s, then the rest of the
    // 60 s cool-down.
    assert_eq!(transport.sent_at(), [0, 1, 61]);
    assert_eq!(record.attempts[2].held, Duration::from_secs(59));
}

#[tokio::test(start_paused = true)]
async fn jitter_moves_attempts_within_its_bounds() {
    let schedule = Schedule::Table {
        delays: vec![Duration::ZERO, Duration::from_secs(100)],
        jitter: Jitter::Proportional {
            below: 0.1,
            above: 0.1,
        },
    };
    for (random, expected) in [(0.0, 90), (0.5, 100), (0.9999, 109)] {
        let transport = Scripted::new(vec![status(500), status(200)]);
        deliver(
            &transport,
            &endpoint(),
            &policy(schedule.clone()),
            "msg_7",
            b"{}",
            || random,
        )
        .await;
        assert_eq!(transport.sent_at()[1], expected, "random {random}");
    }
}

#[tokio::test(start_paused = true)]
async fn only_the_first_kilobyte_of_a_response_is_kept() {
    let transport = Scripted::new(vec![Ok(Response::new(500).with_body(vec![b'x'; 10_000]))]);
    let record = deliver(
        &transport,
        &endpoint(),
        &policy(table(&[0])),
        "msg_8",
        b"{}",
        || 0.5,
    )
    .await;
    assert_eq!(record.attempts[0].excerpt.len(), 1024);
}

mod over_http {
    //! `HttpTransport` against a scripted receiver on 127.0.0.1, in real time.

    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use axum::Router;
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::IntoResponse;
    use axum::routing::{get, post};
    use hooklatch::sender::guard::Forbidden;
    use hooklatch::sender::rules::{Final, Jitter, Schedule};
    use hooklatch::sender::transport::TransportError;
    use hooklatch::sender::{AddressPolicy, Endpoint, HttpTransport, Policy, Transport, deliver};
    use hooklatch::verify::{Scheme, Signer, Verifier};

    use super::SECRET;

    /// What the receiver answers next: status, Retry-After, delay.
    type Step = (u16, Option<&'static str>, Duration);

    struct Receiver {
        url: String,
        seen: Arc<Mutex<Vec<HeaderMap>>>,
    }

    async fn receiver(steps: Vec<Step>) -> Receiver {
        let steps = Arc::new(Mutex::new(VecDeque::from(steps)));
        let seen: Arc<Mutex<Vec<HeaderMap>>> = Arc::default();
        let (steps_in, seen_in) = (steps.clone(), seen.clone());
        let app = Router::new()
            .route(
                "/hooks",
                post(move |headers: HeaderMap| {
                    let (steps, seen) = (steps_in.clone(), seen_in.clone());
                    async move {
                        seen.lock().unwrap().push(headers);
                        let (status, retry_after, delay) = steps
                            .lock()
                            .unwrap()
                            .pop_front()
                            .unwrap_or((200, None, Duration::ZERO));
                        tokio::time::sleep(delay).await;
                        let mut response =
                            (StatusCode::from_u16(status).unwrap(), "answer").into_response();
                        if let Some(value) = retry_after {
                            response
                                .headers_mut()
                                .insert("retry-after", value.parse().unwrap());
                        }
                        if status == 302 {
                            response
                                .headers_mut()
                                .insert("location", "/elsewhere".parse().unwrap());
                        }
                        response
                    }
                }),
            )
            .route(
                "/elsewhere",
                get(|| async { "followed" }).post(|| async { "followed" }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, seen }
    }

    /// Timeouts no stall of a loaded machine reaches: these tests expect
    /// each attempt's own answer.
    fn loopback() -> HttpTransport {
        HttpTransport::with_timeouts(
            AddressPolicy::strict().insecure_allow_loopback(),
            Duration::from_secs(10),
            Duration::from_secs(10),
        )
        .unwrap()
    }

    fn quick(seconds: &[f64]) -> Policy {
        Policy::new(Schedule::Table {
            delays: seconds
                .iter()
                .map(|s| Duration::from_secs_f64(*s))
                .collect(),
            jitter: Jitter::None,
        })
    }

    fn endpoint(url: &str) -> Endpoint {
        Endpoint::new(
            url,
            Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap(),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn server_errors_then_success_each_signed_anew() {
        let server = receiver(vec![
            (500, None, Duration::ZERO),
            (503, None, Duration::ZERO),
        ])
        .await;
        let record = deliver(
            &loopback(),
            &endpoint(&server.url),
            &quick(&[0.0, 0.05, 0.05]),
            "msg_h1",
            b"{}",
            || 0.5,
        )
        .await;
        assert_eq!(record.outcome, Final::Delivered);
        let seen = server.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3);
        let verifier = Verifier::builder(Scheme::standard_webhooks())
            .with_secret(SECRET)
            .unwrap()
            .build()
            .unwrap();
        for headers in &seen {
            assert_eq!(headers["webhook-id"], "msg_h1");
            assert!(verifier.verify(headers, b"{}").is_ok());
        }
        assert_eq!(record.attempts[0].excerpt, b"answer");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_answer_times_out_and_is_retried() {
        let server = receiver(vec![(200, None, Duration::from_secs(30))]).await;
        let impatient = HttpTransport::with_timeouts(
            AddressPolicy::strict().insecure_allow_loopback(),
            Duration::from_secs(10),
            Duration::from_millis(500),
        )
        .unwrap();
        let record = deliver(
            &impatient,
            &endpoint(&server.url),
            &quick(&[0.0, 0.05]),
            "msg_h2",
            b"{}",
            || 0.5,
        )
        .await;
        let error = record.attempts[0].result.as_ref().unwrap_err();
        assert!(error.as_str().starts_with("timed out"), "{error}");
        assert!(
            matches!(
                error.transport_error(),
                Some(TransportError::Timeout { .. })
            ),
            "{error:?}"
        );
        // Ended by the timeout, before the server's answer at 30 s.
        assert!(record.attempts[0].duration < Duration::from_secs(30));
        assert_eq!(record.outcome, Final::Delivered);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gone_disables_after_one_attempt() {
        let server = receiver(vec![(410, None, Duration::ZERO)]).await;
        let record = deliver(
            &loopback(),
            &endpoint(&server.url),
            &quick(&[0.0, 0.05]),
            "msg_h3",
            b"{}",
            || 0.5,
        )
        .await;
        assert_eq!(record.outcome, Final::Gone);
        assert_eq!(server.seen.lock().unwrap().len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retry_after_seconds_and_date_are_honoured() {
        let date = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(2));
        let date: &'static str = Box::leak(date.into_boxed_str());
        let server = receiver(vec![
            (429, Some("1"), Duration::ZERO),
            (503, Some(date), Duration::ZERO),
        ])
        .await;
        let started = Instant::now();
        let record = deliver(
            &loopback(),
            &endpoint(&server.url),
            &quick(&[0.0, 0.01, 0.01]),
            "msg_h4",
            b"{}",
            || 0.5,
        )
        .await;
        assert_eq!(record.outcome, Final::Delivered);
        assert!(record.attempts[1].waited >= Duration::from_secs(1));
        // The date said "2 s from the start"; HTTP dates have whole seconds.
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redirects_are_not_followed() {
        let server = receiver(vec![
            (302, None, Duration::ZERO),
            (500, None, Duration::ZERO),
        ])
        .await;
        let record = deliver(
            &loopback(),
            &endpoint(&server.url),
            &quick(&[0.0, 0.01]),
            "msg_h5",
            b"{}",
            || 0.5,
        )
        .await;
        assert_eq!(record.attempts[0].result, Ok(302));
        assert_eq!(record.outcome, Final::Dead);
        assert_eq!(
            server.seen.lock().unwrap().len(),
            2,
            "only /hooks was called"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn refused_connections_are_retried_on_schedule() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/hooks");
        let record = deliver(
            &loopback(),
            &endpoint(&url),
            &quick(&[0.0, 0.05, 0.05]),
            "msg_h6",
            b"{}",
            || 0.5,
        )
        .await;
        assert_eq!(record.outcome, Final::Dead);
        assert_eq!(record.attempts.len(), 3);
        for attempt in &record.attempts {
            assert!(
                attempt
                    .result
                    .as_ref()
                    .unwrap_err()
                    .as_str()
                    .contains("connect"),
                "{:?}",
                attempt.result
            );
        }
    }

    /// A name that resolves to an internal address is recorded as refused,
    /// never with the class of address it resolved to.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_name_refused_by_the_resolver_records_refused_never_the_class() {
        let server = receiver(vec![]).await;
        let by_name = server.url.replace("127.0.0.1", "localhost");
        let strict = HttpTransport::new(AddressPolicy::strict()).unwrap();
        let record = deliver(
            &strict,
            &endpoint(&by_name),
            &quick(&[0.0]),
            "msg_by_name",
            b"{}",
            || 0.5,
        )
        .await;
        let error = record.attempts[0].result.as_ref().unwrap_err();
        assert!(error.as_str().starts_with("refused"), "{error}");
        for clue in ["loopback", "localhost", "forbidden"] {
            assert!(!error.as_str().contains(clue), "{clue} in {error}");
        }
    }

    /// reqwest's errors name the URL, which may carry credentials: an
    /// attempt's record (shown to the endpoint's owner, kept in the outbox)
    /// never does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_attempt_record_never_holds_the_endpoints_url() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://user:PSECRET@127.0.0.1:{port}/services/SSECRET?token=QSECRET");
        let record = deliver(
            &loopback(),
            &endpoint(&url),
            &quick(&[0.0]),
            "msg_masked",
            b"{}",
            || 0.5,
        )
        .await;
        let error = record.attempts[0].result.as_ref().unwrap_err().as_str();
        assert!(error.contains("connect"), "{error}");
        for secret in ["PSECRET", "SSECRET", "QSECRET", "/services"] {
            assert!(!error.contains(secret), "{secret} in {error}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_guard_refuses_loopback_literals_and_names_unless_allowed() {
        let server = receiver(vec![]).await;
        let strict = HttpTransport::new(AddressPolicy::strict()).unwrap();
        let refused = strict.post(&server.url, &[], b"{}").await.unwrap_err();
        assert!(
            matches!(refused, TransportError::Refused(Forbidden::Loopback)),
            "{refused:?}"
        );
        assert!(refused.report().contains("loopback"), "{refused}");
        // A hostname that resolves to loopback is refused by the resolver,
        // and reported as a refusal, like the literal.
        let by_name = server.url.replace("127.0.0.1", "localhost");
        let refused = strict.post(&by_name, &[], b"{}").await.unwrap_err();
        assert!(
            matches!(refused, TransportError::Refused(Forbidden::Loopback)),
            "{refused:?}"
        );
        assert!(
            server.seen.lock().unwrap().is_empty(),
            "nothing reached the receiver"
        );
        assert!(loopback().post(&by_name, &[], b"{}").await.is_ok());
    }
}
