//! Run with: cargo run --example verify
//!
//! Signs a sample event the way a sender would, then shows what a receiver
//! sees: the genuine request accepted, and a tampered body, a replay, a
//! wrong secret and a timestamp in milliseconds each refused with a reason
//! an operator can act on. Two secrets are active, as during a rotation.

use std::time::{Duration, SystemTime};

use hooklatch::verify::{ConfigError, Scheme, Signer, Verifier};

const OLD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const NEW_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// Each scenario's name and the verifier's verdict, in order.
fn app() -> Result<Vec<(&'static str, String)>, ConfigError> {
    let now = SystemTime::now();
    let sender = Signer::new(Scheme::standard_webhooks(), [NEW_SECRET])?;
    let receiver = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(OLD_SECRET)?
        .with_secret(NEW_SECRET)?
        .build()?;
    let body = br#"{"type":"invoice.paid","data":{"invoice":"in_42","amount":1000}}"#;
    let headers = sender
        .sign("msg_2mJ9Qd", now, body)
        .expect("the id is visible ASCII");

    let verdict =
        |headers: &dyn Fn() -> Vec<(String, String)>, body: &[u8], at: SystemTime| match receiver
            .verify_at(&headers(), body, at)
        {
            Ok(event) => format!(
                "accepted: id {}, signed by secret #{}",
                event.id().unwrap_or("-"),
                event.key_index() + 1
            ),
            Err(error) => format!("refused: {error}"),
        };
    let as_sent = || {
        headers
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect::<Vec<_>>()
    };
    let in_milliseconds = || {
        let mut changed = as_sent();
        let millis = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        changed[1].1 = millis.to_string();
        changed
    };
    let wrong_secret = Signer::new(
        Scheme::standard_webhooks(),
        ["whsec_AAAAAAAAAAAAAAAAAAAAAA=="],
    )?;
    let forged = || {
        wrong_secret
            .sign("msg_2mJ9Qd", now, body)
            .expect("the id is visible ASCII")
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect::<Vec<_>>()
    };
    let mut tampered = body.to_vec();
    tampered[body.len() - 3] = b'9';

    Ok(vec![
        ("genuine request", verdict(&as_sent, body, now)),
        ("body changed in transit", verdict(&as_sent, &tampered, now)),
        (
            "replayed 10 minutes later",
            verdict(&as_sent, body, now + Duration::from_secs(600)),
        ),
        ("signed with another secret", verdict(&forged, body, now)),
        (
            "timestamp in milliseconds",
            verdict(&in_milliseconds, body, now),
        ),
    ])
}

fn main() -> Result<(), ConfigError> {
    for (scenario, verdict) in app()? {
        println!("{scenario:<28} {verdict}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_genuine_request_is_accepted() {
        let verdicts = super::app().unwrap();
        assert!(
            verdicts[0]
                .1
                .starts_with("accepted: id msg_2mJ9Qd, signed by secret #2")
        );
        assert!(verdicts[1].1.contains("signature mismatch"));
        assert!(verdicts[2].1.contains("600s old"));
        assert!(verdicts[3].1.contains("signature mismatch"));
        assert!(verdicts[4].1.contains("milliseconds"));
    }
}
