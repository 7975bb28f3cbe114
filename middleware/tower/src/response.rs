//! How the layer answers a rejection: the core's plain-text answer, or the
//! application's own through [`WebhookLayer::with_rejection_response`](crate::WebhookLayer::with_rejection_response).

use std::fmt;
use std::sync::Arc;

use hooklatch::receive::{HandshakeAnswer, Rejection};
use http::{HeaderName, HeaderValue, Response, StatusCode, header};

type Hook = dyn Fn(&Rejection) -> Option<Response<String>> + Send + Sync;

/// The rejection answerer a layer was configured with. Part of the sealed
/// [`Mode`](crate::Mode) trait's signature; not for use outside this crate.
#[doc(hidden)]
#[derive(Clone, Default)]
pub struct Answers {
    hook: Option<Arc<Hook>>,
    /// Whether the plain-text answer names the reason's kind.
    reason_in_body: bool,
}

impl fmt::Debug for Answers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answers")
            .field("hook", &self.hook.is_some())
            .field("reason_in_body", &self.reason_in_body)
            .finish()
    }
}

impl Answers {
    pub(crate) fn with_hook(
        self,
        hook: impl Fn(&Rejection) -> Option<Response<String>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            hook: Some(Arc::new(hook)),
            ..self
        }
    }

    pub(crate) fn with_reason_in_body(self, reason_in_body: bool) -> Self {
        Self {
            reason_in_body,
            ..self
        }
    }

    /// The answer to `rejection`: the hook's where it gives one, with the
    /// rejection in the extensions as always, else the core's (naming the
    /// reason's kind when opted in).
    pub(crate) fn reject<B: From<&'static str> + From<String>>(
        &self,
        rejection: Rejection,
    ) -> Response<B> {
        if let Some(response) = self.hook.as_ref().and_then(|hook| hook(&rejection)) {
            tracing::warn!(status = %rejection.status(), reason = %rejection.reason(), "webhook rejected");
            let mut response = response.map(B::from);
            // A sender told to come back is told when, whatever the body.
            if let Some(seconds) = rejection.retry_after_secs() {
                response
                    .headers_mut()
                    .entry(http::header::RETRY_AFTER)
                    .or_insert(http::HeaderValue::from(seconds));
            }
            response.extensions_mut().insert(rejection);
            return response;
        }
        if self.reason_in_body {
            return rejection.into_response_with_kind();
        }
        rejection.into_response()
    }
}

/// The answer to a provider's handshake, as the core wrote it, never
/// cached or sniffed (it echoes the provider's text).
pub(crate) fn handshake<B: From<String>>(answer: HandshakeAnswer) -> Response<B> {
    let mut response = Response::new(B::from(answer.body));
    *response.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(answer.content_type),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    for (name, value) in answer.headers {
        // The core echoes only visible ASCII, which is always a valid value.
        if let Ok(value) = HeaderValue::try_from(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    response
}
