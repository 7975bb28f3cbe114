//! The parts of a request a signature covers.

use super::MessageSignatureError;
/// The parts of a request a message signature can cover: its method, its
/// target URI (absolute: scheme, authority, path and query) and its
/// headers.
#[derive(Debug, Clone)]
pub struct MessageRequest<'a> {
    pub(super) method: &'a str,
    pub(super) scheme: String,
    pub(super) authority: String,
    pub(super) path: String,
    pub(super) query: Option<String>,
    pub(super) headers: &'a http::HeaderMap,
}

impl<'a> MessageRequest<'a> {
    /// A request by its method and absolute target URI, as the client sent
    /// it (`https://example.com/foo?x=1`).
    ///
    /// # Errors
    ///
    /// [`MessageSignatureError::InvalidTarget`] when the URI does not parse
    /// or is not absolute.
    pub fn new(
        method: &'a str,
        target_uri: &str,
        headers: &'a http::HeaderMap,
    ) -> Result<Self, MessageSignatureError> {
        let uri: http::Uri = target_uri
            .parse()
            .map_err(|_| MessageSignatureError::InvalidTarget(target_uri.to_owned()))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(MessageSignatureError::InvalidTarget(format!(
                "{target_uri} is not absolute (scheme and authority)"
            )));
        };
        Self::from_parts(method, scheme, authority.as_str(), &uri, headers)
    }

    /// A request as a server receives it: `uri` in origin form
    /// (`/foo?x=1`, as axum and actix hand it over), the authority from
    /// the `Host` header, and `scheme` the one the client used (`https`
    /// behind a TLS-terminating proxy).
    ///
    /// # Errors
    ///
    /// [`MessageSignatureError::InvalidTarget`] when there is no authority
    /// in `uri` nor a `Host` header.
    pub fn from_server(
        method: &'a http::Method,
        uri: &http::Uri,
        scheme: &str,
        headers: &'a http::HeaderMap,
    ) -> Result<Self, MessageSignatureError> {
        let authority = match uri.authority() {
            Some(authority) => authority.as_str().to_owned(),
            None => headers
                .get(http::header::HOST)
                .and_then(|host| host.to_str().ok())
                .ok_or_else(|| {
                    MessageSignatureError::InvalidTarget("no authority and no Host".to_owned())
                })?
                .to_owned(),
        };
        Self::from_parts(method.as_str(), scheme, &authority, uri, headers)
    }

    fn from_parts(
        method: &'a str,
        scheme: &str,
        authority: &str,
        uri: &http::Uri,
        headers: &'a http::HeaderMap,
    ) -> Result<Self, MessageSignatureError> {
        // A method is a token (RFC 9110): nothing that could end a line of
        // the signature base.
        if http::Method::from_bytes(method.as_bytes()).is_err() {
            return Err(MessageSignatureError::InvalidTarget(format!(
                "the method {method:?} is not a token"
            )));
        }
        let scheme = scheme.to_ascii_lowercase();
        // Section 2.2.3: the host lowercased, without user information,
        // the scheme's default port left out.
        let authority = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        let mut authority = authority.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "https" => Some(":443"),
            "http" => Some(":80"),
            _ => None,
        };
        if let Some(port) = default_port
            && authority.ends_with(port)
        {
            authority.truncate(authority.len() - port.len());
        }
        let path = match uri.path() {
            "" => "/".to_owned(),
            path => path.to_owned(),
        };
        Ok(Self {
            method,
            scheme,
            authority,
            path,
            query: uri.query().map(str::to_owned),
            headers,
        })
    }

    /// A derived component's value (section 2.2), or `None` for one this
    /// library does not derive.
    pub(super) fn derived(&self, name: &str) -> Option<String> {
        let query = self.query.as_deref().map(|query| format!("?{query}"));
        Some(match name {
            "@method" => self.method.to_owned(),
            "@scheme" => self.scheme.clone(),
            "@authority" => self.authority.clone(),
            "@path" => self.path.clone(),
            "@query" => query.unwrap_or_else(|| "?".to_owned()),
            "@request-target" => format!("{}{}", self.path, query.unwrap_or_default()),
            "@target-uri" => format!(
                "{}://{}{}{}",
                self.scheme,
                self.authority,
                self.path,
                query.unwrap_or_default()
            ),
            _ => return None,
        })
    }

    /// A header field's value (section 2.1): every line's value, trimmed,
    /// joined by `, `; `None` when absent.
    pub(super) fn field(&self, name: &str) -> Option<String> {
        let mut values = self.headers.get_all(name).iter().peekable();
        values.peek()?;
        let mut joined = Vec::new();
        for (at, value) in values.enumerate() {
            if at > 0 {
                joined.extend_from_slice(b", ");
            }
            joined.extend_from_slice(value.as_bytes().trim_ascii());
        }
        // Values are visible ASCII and spaces in practice; others are
        // kept as their bytes read as Latin-1 would lose them, so refuse.
        String::from_utf8(joined).ok()
    }
}
