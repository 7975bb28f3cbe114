//! [`WebhookError`]: how the extractors answer when they stop a request.

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use hooklatch::receive::{HandshakeAnswer, Rejection};

/// An application's own answer to a rejection, set with
/// [`WebhookConfig::with_rejection_response`](crate::WebhookConfig::with_rejection_response).
pub(crate) type RespondFn = Arc<dyn Fn(&Rejection) -> Option<HttpResponse> + Send + Sync>;

/// Why an extractor stopped a request before the handler ran: a
/// [`Rejection`] (400, 409, 413, 422, 500 or 503, see its `status`), an
/// event handled before, which [`LeasedWebhook`](crate::LeasedWebhook)
/// answers 200 without running the handler, or a provider's handshake,
/// answered as the core wrote it
/// ([`WebhookConfig::with_handshake`](crate::WebhookConfig::with_handshake)).
pub struct WebhookError {
    kind: Kind,
    respond: Option<RespondFn>,
    reason_in_body: bool,
}

#[derive(Debug)]
enum Kind {
    Rejected(Rejection),
    AlreadyHandled,
    Handshake(HandshakeAnswer),
}

impl std::fmt::Debug for WebhookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookError")
            .field("kind", &self.kind)
            .field("custom_response", &self.respond.is_some())
            .field("reason_in_body", &self.reason_in_body)
            .finish()
    }
}

impl WebhookError {
    /// The rejection, unless the event was handled before or the request
    /// was a handshake.
    pub fn rejection(&self) -> Option<&Rejection> {
        match &self.kind {
            Kind::Rejected(rejection) => Some(rejection),
            Kind::AlreadyHandled | Kind::Handshake(_) => None,
        }
    }

    /// The answer to a provider's handshake, if the request was one.
    pub fn handshake(&self) -> Option<&HandshakeAnswer> {
        match &self.kind {
            Kind::Handshake(answer) => Some(answer),
            _ => None,
        }
    }

    pub(crate) fn handshake_answered(answer: HandshakeAnswer) -> Self {
        Self {
            kind: Kind::Handshake(answer),
            respond: None,
            reason_in_body: false,
        }
    }

    /// Whether the event was handled before (answered 200).
    pub fn is_already_handled(&self) -> bool {
        matches!(self.kind, Kind::AlreadyHandled)
    }

    pub(crate) fn already_handled() -> Self {
        Self {
            kind: Kind::AlreadyHandled,
            respond: None,
            reason_in_body: false,
        }
    }

    /// Answers with the application's response, where it gives one, else
    /// with the plain text, naming the reason's kind if `reason_in_body`.
    pub(crate) fn answered_by(mut self, respond: Option<RespondFn>, reason_in_body: bool) -> Self {
        self.respond = respond;
        self.reason_in_body = reason_in_body;
        self
    }
}

impl From<Rejection> for WebhookError {
    fn from(rejection: Rejection) -> Self {
        tracing::warn!(
            status = %rejection.status(),
            reason = %rejection.reason(),
            "webhook rejected"
        );
        Self {
            kind: Kind::Rejected(rejection),
            respond: None,
            reason_in_body: false,
        }
    }
}

impl std::fmt::Display for WebhookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Rejected(rejection) => write!(f, "webhook rejected: {rejection}"),
            Kind::AlreadyHandled => f.write_str("webhook already handled"),
            Kind::Handshake(answer) => write!(f, "answered a {} handshake", answer.provider),
        }
    }
}

impl ResponseError for WebhookError {
    fn status_code(&self) -> StatusCode {
        match &self.kind {
            Kind::Rejected(rejection) => StatusCode::from_u16(rejection.status().as_u16())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            Kind::AlreadyHandled => StatusCode::OK,
            Kind::Handshake(answer) => {
                StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK)
            }
        }
    }

    fn error_response(&self) -> HttpResponse {
        let rejection = match &self.kind {
            Kind::Rejected(rejection) => rejection,
            Kind::AlreadyHandled => {
                return HttpResponse::Ok()
                    .content_type("text/plain; charset=utf-8")
                    .body("duplicate");
            }
            Kind::Handshake(answer) => {
                let mut response = HttpResponse::build(self.status_code());
                response
                    .content_type(answer.content_type)
                    .insert_header(("cache-control", "no-store"))
                    .insert_header(("x-content-type-options", "nosniff"));
                for (name, value) in &answer.headers {
                    response.insert_header((*name, value.as_str()));
                }
                return response.body(answer.body.clone());
            }
        };
        if let Some(mut response) = self.respond.as_ref().and_then(|respond| respond(rejection)) {
            // A sender told to come back is told when, whatever the body.
            if let Some(seconds) = rejection.retry_after_secs()
                && !response.headers().contains_key("retry-after")
            {
                response.headers_mut().insert(
                    actix_web::http::header::RETRY_AFTER,
                    actix_web::http::header::HeaderValue::from(seconds),
                );
            }
            return response;
        }
        let mut response = HttpResponse::build(self.status_code());
        response.content_type("text/plain; charset=utf-8");
        if let Some(seconds) = rejection.retry_after_secs() {
            response.insert_header(("retry-after", seconds.to_string()));
        }
        if self.reason_in_body {
            return response.body(rejection.body_text_with_kind());
        }
        response.body(rejection.body_text())
    }
}
