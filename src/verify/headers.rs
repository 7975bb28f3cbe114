//! Read access to request headers, independent of any HTTP library.

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
/// `name` is always lowercase ASCII; implementations match names without
/// regard to case.
///
/// ```
/// use hooklatch::verify::{HeaderLookup, Headers};
///
/// let headers = [("Webhook-Id", "msg_1"), ("webhook-id", "msg_2"), ("webhook-timestamp", "1")];
/// assert_eq!(headers.lookup("webhook-timestamp"), HeaderLookup::One(b"1"));
/// assert_eq!(headers.lookup("webhook-id"), HeaderLookup::Repeated);
/// assert_eq!(headers.lookup("webhook-signature"), HeaderLookup::Missing);
/// ```
pub trait Headers {
    /// Looks up the header called `name` (lowercase).
    fn lookup(&self, name: &str) -> HeaderLookup<'_>;
}

impl<H: Headers + ?Sized> Headers for &H {
    fn lookup(&self, name: &str) -> HeaderLookup<'_> {
        (**self).lookup(name)
    }
}

impl<K: AsRef<str>, V: AsRef<[u8]>> Headers for [(K, V)] {
    fn lookup(&self, name: &str) -> HeaderLookup<'_> {
        let mut matching = self
            .iter()
            .filter(|(key, _)| key.as_ref().eq_ignore_ascii_case(name));
        match (matching.next(), matching.next()) {
            (None, _) => HeaderLookup::Missing,
            (Some((_, value)), None) => HeaderLookup::One(value.as_ref()),
            (Some(_), Some(_)) => HeaderLookup::Repeated,
        }
    }
}

impl<K: AsRef<str>, V: AsRef<[u8]>, const N: usize> Headers for [(K, V); N] {
    fn lookup(&self, name: &str) -> HeaderLookup<'_> {
        self.as_slice().lookup(name)
    }
}

impl<K: AsRef<str>, V: AsRef<[u8]>> Headers for Vec<(K, V)> {
    fn lookup(&self, name: &str) -> HeaderLookup<'_> {
        self.as_slice().lookup(name)
    }
}

#[cfg(feature = "http")]
impl Headers for http::HeaderMap {
    fn lookup(&self, name: &str) -> HeaderLookup<'_> {
        let mut values = self.get_all(name).iter();
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
        assert_eq!(map.lookup("webhook-id"), HeaderLookup::Repeated);
        assert_eq!(map.lookup("webhook-timestamp"), HeaderLookup::One(b"1"));
        assert_eq!(map.lookup("webhook-signature"), HeaderLookup::Missing);
    }
}
