//! Read access to request headers, independent of any HTTP library.

use std::borrow::Cow;

use super::error::ConfigError;

/// A header name a scheme reads: lowercase and valid, checked once when
/// the scheme is built (and, with the `http` feature, already parsed for
/// [`http::HeaderMap`] lookups).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderKey {
    name: Cow<'static, str>,
    #[cfg(feature = "http")]
    parsed: http::HeaderName,
}

impl HeaderKey {
    /// Checks that `name` is a valid header name and lowercases it.
    ///
    /// ```
    /// use hooklatch::verify::HeaderKey;
    ///
    /// assert_eq!(HeaderKey::new("X-Acme-Signature")?.as_str(), "x-acme-signature");
    /// assert!(HeaderKey::new("not a header").is_err());
    /// # Ok::<(), hooklatch::verify::ConfigError>(())
    /// ```
    pub fn new(name: &str) -> Result<Self, ConfigError> {
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        let invalid = || ConfigError::InvalidHeaderName(name.to_owned());
        if !valid {
            return Err(invalid());
        }
        let lowercase = name.to_ascii_lowercase();
        Ok(Self {
            #[cfg(feature = "http")]
            parsed: http::HeaderName::from_bytes(lowercase.as_bytes()).map_err(|_| invalid())?,
            name: Cow::Owned(lowercase),
        })
    }

    /// A built-in scheme's header name: lowercase and valid by construction.
    pub(crate) fn from_static(name: &'static str) -> Self {
        Self {
            #[cfg(feature = "http")]
            parsed: http::HeaderName::from_static(name),
            name: Cow::Borrowed(name),
        }
    }

    /// The name, lowercase.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    pub(crate) fn to_cow(&self) -> Cow<'static, str> {
        self.name.clone()
    }
}

/// The result of looking up one header by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderLookup<'a> {
    /// The header is absent.
    Missing,
    /// The header appears exactly once, with this value.
    One(&'a [u8]),
    /// The header appears more than once.
    Repeated,
}

/// Headers a verifier can read: implemented for [`http::HeaderMap`] (feature
/// `http`) and for slices and vectors of `(name, value)` pairs; framework
/// adapters implement it for their own header maps.
///
/// Implementations match names without regard to case.
///
/// ```
/// use hooklatch::verify::{HeaderKey, HeaderLookup, Headers};
///
/// let headers = [("Webhook-Id", "msg_1"), ("webhook-id", "msg_2"), ("webhook-timestamp", "1")];
/// let key = |name| HeaderKey::new(name).unwrap();
/// assert_eq!(headers.lookup(&key("webhook-timestamp")), HeaderLookup::One(b"1"));
/// assert_eq!(headers.lookup(&key("webhook-id")), HeaderLookup::Repeated);
/// assert_eq!(headers.lookup(&key("webhook-signature")), HeaderLookup::Missing);
/// ```
pub trait Headers {
    /// Looks up the header called `name`.
    fn lookup(&self, name: &HeaderKey) -> HeaderLookup<'_>;
}

impl<H: Headers + ?Sized> Headers for &H {
    fn lookup(&self, name: &HeaderKey) -> HeaderLookup<'_> {
        (**self).lookup(name)
    }
}

impl<K: AsRef<str>, V: AsRef<[u8]>> Headers for [(K, V)] {
    fn lookup(&self, name: &HeaderKey) -> HeaderLookup<'_> {
        let mut matching = self
            .iter()
            .filter(|(key, _)| key.as_ref().eq_ignore_ascii_case(name.as_str()));
        match (matching.next(), matching.next()) {
            (None, _) => HeaderLookup::Missing,
            (Some((_, value)), None) => HeaderLookup::One(value.as_ref()),
            (Some(_), Some(_)) => HeaderLookup::Repeated,
        }
    }
}

impl<K: AsRef<str>, V: AsRef<[u8]>, const N: usize> Headers for [(K, V); N] {
    fn lookup(&self, name: &HeaderKey) -> HeaderLookup<'_> {
        self.as_slice().lookup(name)
    }
}

impl<K: AsRef<str>, V: AsRef<[u8]>> Headers for Vec<(K, V)> {
    fn lookup(&self, name: &HeaderKey) -> HeaderLookup<'_> {
        self.as_slice().lookup(name)
    }
}

#[cfg(feature = "http")]
impl Headers for http::HeaderMap {
    fn lookup(&self, name: &HeaderKey) -> HeaderLookup<'_> {
        let mut values = self.get_all(&name.parsed).iter();
        match (values.next(), values.next()) {
            (None, _) => HeaderLookup::Missing,
            (Some(value), None) => HeaderLookup::One(value.as_bytes()),
            (Some(_), Some(_)) => HeaderLookup::Repeated,
        }
    }
}

#[cfg(all(test, feature = "http"))]
mod tests {
    use super::*;

    #[test]
    fn header_map_reports_repeated_headers() {
        let mut map = http::HeaderMap::new();
        map.append("webhook-id", "a".parse().unwrap());
        map.append("webhook-id", "b".parse().unwrap());
        map.insert("webhook-timestamp", "1".parse().unwrap());
        let key = HeaderKey::from_static;
        assert_eq!(map.lookup(&key("webhook-id")), HeaderLookup::Repeated);
        assert_eq!(
            map.lookup(&key("webhook-timestamp")),
            HeaderLookup::One(b"1")
        );
        assert_eq!(map.lookup(&key("webhook-signature")), HeaderLookup::Missing);
    }
}
