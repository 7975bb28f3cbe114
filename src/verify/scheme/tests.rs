//! Unit tests of [`Scheme`]: templates, what each provider signs, header names.

use super::*;

#[test]
fn templates_are_parsed_and_checked() {
    let scheme = Scheme::custom("x", "x-sig").unwrap();
    assert!(scheme.clone().with_template("{body}").is_ok());
    assert!(
        scheme
            .clone()
            .with_template("v0:{timestamp}:{body}")
            .is_ok()
    );
    for bad in [
        "",
        "{id}",
        "{body}{body}",
        "{body",
        "{nope}{body}",
        "}{body}",
    ] {
        assert!(scheme.clone().with_template(bad).is_err(), "{bad:?}");
    }
    let needs_id = scheme.clone().with_template("{id}.{body}").unwrap();
    assert!(needs_id.validate().is_err());
    assert!(needs_id.with_id_header("x-id").unwrap().validate().is_ok());
}

#[test]
fn ids_and_timestamps_read_must_be_signed_unless_opted_out() {
    let unsigned_id = Scheme::custom("x", "x-sig")
        .unwrap()
        .with_id_header("x-id")
        .unwrap();
    assert_eq!(
        unsigned_id.validate(),
        Err(ConfigError::UnsignedHeader {
            what: "id",
            header: "x-id".into()
        })
    );
    let opted = unsigned_id.clone().insecure_allow_unsigned_id();
    assert!(opted.validate().is_ok());
    assert!(!opted.signs_id());
    let signed = unsigned_id.with_template("{id}.{body}").unwrap();
    assert!(signed.validate().is_ok());
    assert!(signed.signs_id());

    let unsigned_timestamp = Scheme::custom("x", "x-sig")
        .unwrap()
        .with_timestamp_header("x-ts")
        .unwrap();
    assert!(matches!(
        unsigned_timestamp.validate(),
        Err(ConfigError::UnsignedHeader {
            what: "timestamp",
            ..
        })
    ));
    let opted = unsigned_timestamp
        .clone()
        .insecure_allow_unsigned_timestamp();
    assert!(opted.validate().is_ok());
    assert!(
        !opted.has_timestamp(),
        "an unsigned timestamp stops no replay"
    );
    let signed = unsigned_timestamp
        .with_template("{timestamp}.{body}")
        .unwrap();
    assert!(signed.has_timestamp());
    // Stripe's `t=` field unsigned is refused the same way.
    assert!(
        Scheme::stripe()
            .with_template("{body}")
            .unwrap()
            .validate()
            .is_err()
    );
}

#[test]
fn providers_say_what_they_sign() {
    for (scheme, signs_id, has_timestamp) in [
        (Scheme::standard_webhooks(), true, true),
        (Scheme::svix(), true, true),
        (Scheme::stripe(), false, true),
        (Scheme::github(), false, false),
        (Scheme::shopify(), false, false),
        (Scheme::slack(), false, true),
    ] {
        assert!(scheme.validate().is_ok(), "{}", scheme.name());
        assert_eq!(scheme.signs_id(), signs_id, "{}", scheme.name());
        assert_eq!(scheme.has_timestamp(), has_timestamp, "{}", scheme.name());
    }
    assert_eq!(Scheme::stripe().body_id_field(), Some("id"));
}

#[test]
fn header_names_are_validated_and_lowercased() {
    let scheme = Scheme::custom("x", "X-Acme-Signature").unwrap();
    assert_eq!(scheme.signature_header(), "x-acme-signature");
    assert_eq!(
        Scheme::custom("x", "bad header").unwrap_err(),
        ConfigError::InvalidHeaderName("bad header".into())
    );
    assert!(Scheme::custom("x", "").is_err());
}
