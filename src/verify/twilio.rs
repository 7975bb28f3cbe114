//! Twilio's signed content: the webhook URL followed by the form parameters
//! sorted by name, or, for a JSON body, the URL with the body's SHA-256 in
//! its `bodySHA256` query parameter.

use sha2::{Digest as _, Sha256};

use super::encoding::hex_encode;
use super::form::form_pairs;

/// The URLs Twilio may have signed for one configured webhook URL: as
/// given, and with the port written the other way (Twilio's own libraries
/// try both, since its signing is not consistent about default ports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SignedUrls {
    urls: Vec<String>,
}

/// Why a body cannot be Twilio's signed content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyProblem {
    /// A form pair does not decode (a bad escape, or not UTF-8).
    NotAForm,
    /// A form name is empty, holds `?`, `&` or `=`, or is `bodySHA256`:
    /// with such a name, the sorted parameters could spell a JSON body's
    /// `?bodySHA256=` (a value may start with `=`) and take that request's
    /// signature.
    UnusualName,
    /// More than [`MAX_FORM_PAIRS`] pairs: refused before any is decoded,
    /// so a forged form costs no more than a genuine one.
    TooManyPairs,
}

/// The most form pairs a Twilio body may hold. Twilio's voice and
/// messaging requests carry a few dozen.
pub(super) const MAX_FORM_PAIRS: usize = 256;

/// The largest body a Twilio verifier accepts unless told otherwise:
/// Twilio's forms are a few KiB, and a larger limit would only let a
/// stranger make each forged request cost more.
pub(crate) const TWILIO_BODY_LIMIT: usize = 64 * 1024;

impl SignedUrls {
    pub(super) fn new(url: &str) -> Self {
        let mut urls = vec![url.to_owned()];
        // With nothing after the host and port, the URL with a port would
        // be the one without it followed by `:443`, which a first form
        // name could supply: one signature would verify two bodies.
        if let Some(other) = other_port_form(url)
            && other != url
            && !ends_at_authority(url)
        {
            urls.push(other);
        }
        Self { urls }
    }

    /// The content signed under each URL, for `body`: the URL and the
    /// sorted form parameters, or the URL with `bodySHA256` when the body
    /// is JSON.
    pub(super) fn contents(&self, body: &[u8]) -> Result<Vec<Vec<u8>>, BodyProblem> {
        let suffix = params(body)?;
        Ok(self
            .urls
            .iter()
            .map(|url| match &suffix {
                Params::Form(text) => [url.as_bytes(), text.as_bytes()].concat(),
                Params::BodyDigest(hex) => {
                    let separator = match url.split_once('?') {
                        None => "?",
                        Some((_, query)) if query.is_empty() || query.ends_with('&') => "",
                        Some(_) => "&",
                    };
                    format!("{url}{separator}bodySHA256={hex}").into_bytes()
                }
            })
            .collect())
    }
}

enum Params {
    /// Each name and value, sorted by name then value, nothing between.
    Form(String),
    /// The body's SHA-256, lowercase hex.
    BodyDigest(String),
}

/// Twilio sends form bodies for voice and messaging and JSON (a `{` or
/// `[` first) for the newer products; a form encodes both brackets.
fn params(body: &[u8]) -> Result<Params, BodyProblem> {
    if matches!(body.trim_ascii_start().first(), Some(b'{' | b'[')) {
        return Ok(Params::BodyDigest(hex_encode(&Sha256::digest(body))));
    }
    let text = std::str::from_utf8(body).map_err(|_| BodyProblem::NotAForm)?;
    if text
        .split('&')
        .filter(|pair| !pair.is_empty())
        .nth(MAX_FORM_PAIRS)
        .is_some()
    {
        return Err(BodyProblem::TooManyPairs);
    }
    let mut pairs = form_pairs(text)
        .collect::<Result<Vec<_>, ()>>()
        .map_err(|()| BodyProblem::NotAForm)?;
    if pairs
        .iter()
        .any(|(name, _)| name.is_empty() || name.contains(['?', '&', '=']) || name == "bodySHA256")
    {
        return Err(BodyProblem::UnusualName);
    }
    // Twilio's libraries sort the names, then each name's distinct values.
    pairs.sort_unstable();
    pairs.dedup();
    let mut text = String::with_capacity(body.len());
    for (name, value) in &pairs {
        text.push_str(name);
        text.push_str(value);
    }
    Ok(Params::Form(text))
}

/// Whether nothing follows `url`'s host and port.
fn ends_at_authority(url: &str) -> bool {
    url.split_once("://")
        .is_none_or(|(_, rest)| !rest.contains(['/', '?', '#']))
}

/// `url` with its default port removed when it has one (or any port, as
/// Twilio's libraries strip), else with the scheme's default port added.
fn other_port_form(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" => "443",
        "http" => "80",
        _ => return None,
    };
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_len);
    let host_start = authority.rfind('@').map_or(0, |at| at + 1);
    let host = &authority[host_start..];
    let port_at = host
        .rfind(':')
        .filter(|at| host[at + 1..].bytes().all(|b| b.is_ascii_digit()))
        .filter(|at| !host[*at..].contains(']'));
    let host = match port_at {
        // An empty port (`host:`) is no port, as URL parsers read it.
        Some(at) if at + 1 == host.len() => format!("{}:{default_port}", &host[..at]),
        Some(at) => host[..at].to_owned(),
        None => format!("{host}:{default_port}"),
    };
    Some(format!(
        "{scheme}://{}{host}{tail}",
        &authority[..host_start]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_other_port_form_adds_the_default_port_or_strips_the_one_given() {
        for (given, other) in [
            (
                "https://mycompany.com/myapp.php?foo=1",
                "https://mycompany.com:443/myapp.php?foo=1",
            ),
            (
                "https://mycompany.com:443/myapp.php",
                "https://mycompany.com/myapp.php",
            ),
            ("http://mycompany.com:1234/a", "http://mycompany.com/a"),
            ("http://mycompany.com", "http://mycompany.com:80"),
            (
                "https://user:pass@host.test/a",
                "https://user:pass@host.test:443/a",
            ),
            ("https://[::1]/a", "https://[::1]:443/a"),
            ("https://[::1]:8443/a", "https://[::1]/a"),
        ] {
            assert_eq!(other_port_form(given).as_deref(), Some(other), "{given}");
        }
        assert_eq!(other_port_form("ftp://host/a"), None);
        assert_eq!(
            SignedUrls::new("https://h.example:8443").urls,
            ["https://h.example:8443"],
            "no other form when nothing follows the port"
        );
        assert_eq!(SignedUrls::new("https://h.example/").urls.len(), 2);
        assert_eq!(other_port_form("not a url"), None);
    }

    /// Each URL form, read by the URL parser HTTP clients use (the `url`
    /// crate, as reqwest does), is the configured URL with only its port
    /// written the other way: the same scheme, user, host, path, query
    /// and fragment, and no port but the scheme's default.
    #[test]
    fn the_other_port_form_is_the_same_url_to_a_real_parser() {
        for given in [
            "https://mycompany.com/myapp.php?foo=1&bar=2",
            "https://mycompany.com:443/myapp.php",
            "http://mycompany.com:80/a/b/",
            "http://mycompany.com:1234/a",
            "https://user:pass@host.test/a",
            "https://user:p%40ss@host.test:443/a?x=1",
            "https://[::1]/a",
            "https://[::1]:443/a",
            "https://[2001:db8::1]:8443/x?y=%5Bz%5D",
            "HTTPS://Example.COM/A",
            "https://h.test/a?next=http://x.test:80/",
            "https://h.test:/a",
            "https://h.test:0443/a",
        ] {
            let Some(other) = other_port_form(given) else {
                panic!("{given}: no other form");
            };
            let parsed = url::Url::parse(given).unwrap();
            let other_parsed = url::Url::parse(&other)
                .unwrap_or_else(|error| panic!("{given} -> {other}: {error}"));
            let parts = |u: &url::Url| {
                (
                    u.scheme().to_owned(),
                    u.username().to_owned(),
                    u.password().map(str::to_owned),
                    u.host_str().map(str::to_owned),
                    u.path().to_owned(),
                    u.query().map(str::to_owned),
                    u.fragment().map(str::to_owned),
                )
            };
            assert_eq!(parts(&parsed), parts(&other_parsed), "{given} -> {other}");
            // The one form or the other carries no port but the scheme's
            // default, which the parser drops: Twilio's libraries strip a
            // port that is not the default, and add the default.
            assert_ne!(other, given);
            assert_eq!(other_parsed.port(), None, "{given} -> {other}");
        }
    }

    /// Where the URL ends at its host, a name starting with the port
    /// would move the port between URL and form; with one URL form only,
    /// no body but the signed one verifies.
    #[test]
    fn one_signature_never_covers_two_bodies_under_the_two_port_forms() {
        for url in [
            "https://h.example:8443",
            "https://h.example",
            "https://h.example/p",
        ] {
            let urls = SignedUrls::new(url);
            let signed = urls.contents(b"AccountSid=AC1&Body=pay+100").unwrap();
            for forged in [
                &b"%3A8443AccountSid=AC1&Body=pay+100"[..],
                b"%3A443AccountSid=AC1&Body=pay+100",
                b"%3A443%2FpAccountSid=AC1&Body=pay+100",
            ] {
                let forged = urls.contents(forged).unwrap_or_default();
                assert!(
                    forged.iter().all(|content| !signed.contains(content)),
                    "{url}"
                );
            }
        }
    }

    #[test]
    fn a_json_body_digest_joins_the_query_as_twilio_adds_it() {
        let digest = |url: &str| {
            let content = SignedUrls::new(url).contents(b"{}").unwrap().remove(0);
            String::from_utf8(content).unwrap()
        };
        let hex = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
        assert_eq!(
            digest("https://h/a"),
            format!("https://h/a?bodySHA256={hex}")
        );
        assert_eq!(
            digest("https://h/a?"),
            format!("https://h/a?bodySHA256={hex}")
        );
        assert_eq!(
            digest("https://h/a?x=1"),
            format!("https://h/a?x=1&bodySHA256={hex}")
        );
    }

    #[test]
    fn form_names_that_could_spell_a_body_digest_are_refused() {
        for body in ["%3FbodySHA256%3D=abc", "=x", "a%26b=1", "%zz=1"] {
            assert!(params(body.as_bytes()).is_err(), "{body}");
        }
    }

    /// With a configured URL ending in `?` or `&`, a JSON body's content is
    /// `{url}bodySHA256={hex}`, and a form `bodySHA256==<hex>` sorted and
    /// joined spells the same: the JSON request's signature would verify
    /// that form. The name is refused.
    #[test]
    fn a_form_cannot_take_a_json_bodys_signature_when_the_url_ends_in_a_separator() {
        let json = br#"{"event":"paid"}"#;
        for url in ["https://h.test/hook?", "https://h.test/hook?x=1&"] {
            let urls = SignedUrls::new(url);
            let signed = urls.contents(json).unwrap();
            let hex = hex_encode(&Sha256::digest(json));
            for form in [format!("bodySHA256=={hex}"), format!("bodySHA256=%3D{hex}")] {
                assert_eq!(
                    urls.contents(form.as_bytes()).err(),
                    Some(BodyProblem::UnusualName),
                    "{url} {form}: would sign {:?}",
                    String::from_utf8_lossy(&signed[0])
                );
            }
        }
    }

    /// A form of more pairs than Twilio sends is refused before a pair is
    /// decoded or sorted; one at the bound is read.
    #[test]
    fn a_form_of_too_many_pairs_is_refused_before_it_is_decoded() {
        let form = |pairs: usize| vec!["a=1"; pairs].join("&");
        assert!(params(form(MAX_FORM_PAIRS).as_bytes()).is_ok());
        assert!(matches!(
            params(form(MAX_FORM_PAIRS + 1).as_bytes()),
            Err(BodyProblem::TooManyPairs)
        ));
        // Empty pairs are not pairs, as Twilio's libraries read them.
        let padded = format!("{}&&&&", form(MAX_FORM_PAIRS));
        assert!(params(padded.as_bytes()).is_ok());
    }
}
