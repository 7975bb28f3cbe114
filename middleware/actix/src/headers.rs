//! [`ActixHeaders`]: actix-web's header map, readable by the verifier.

use actix_web::http::header::HeaderMap;
use hooklatch::verify::{HeaderKey, HeaderLookup, Headers};

/// actix-web's header map, for [`Verifier::verify`](hooklatch::verify::Verifier::verify).
///
/// ```
/// use actix_web::test::TestRequest;
/// use hooklatch::verify::{HeaderKey, HeaderLookup, Headers};
/// use hooklatch_actix::ActixHeaders;
///
/// let request = TestRequest::default().insert_header(("webhook-id", "msg_1")).to_http_request();
/// let key = HeaderKey::new("webhook-id")?;
/// assert_eq!(ActixHeaders(request.headers()).lookup(&key), HeaderLookup::One(b"msg_1"));
/// # Ok::<(), hooklatch::verify::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ActixHeaders<'a>(pub &'a HeaderMap);

impl Headers for ActixHeaders<'_> {
    fn lookup(&self, name: &HeaderKey) -> HeaderLookup<'_> {
        let mut values = self.0.get_all(name.as_str());
        match (values.next(), values.next()) {
            (None, _) => HeaderLookup::Missing,
            (Some(value), None) => HeaderLookup::One(value.as_bytes()),
            (Some(_), Some(_)) => HeaderLookup::Repeated,
        }
    }
}
