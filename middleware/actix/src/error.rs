//! [`WebhookError`]: how the extractors answer when they stop a request.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use hooklatch::receive::Rejection;

/// Why an extractor stopped a request before the handler ran.
#[derive(Debug)]
#[non_exhaustive]
pub enum WebhookError {
    /// The request was refused; see [`Rejection`] for the status of each
    /// cause (400, 409, 413, 422, 500, 503).
    Rejected(Rejection),
    /// [`LeasedWebhook`](crate::LeasedWebhook) only: the event was handled
    /// before, so the handler is skipped and the sender told 200.
    AlreadyHandled,
}

impl WebhookError {
    pub(crate) fn rejected(rejection: Rejection) -> Self {
        tracing::warn!(
            status = %rejection.status(),
            reason = %rejection.reason(),
            "webhook rejected"
        );
        Self::Rejected(rejection)
    }
}

impl From<Rejection> for WebhookError {
    fn from(rejection: Rejection) -> Self {
        Self::rejected(rejection)
    }
}

impl std::fmt::Display for WebhookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Rejected(rejection) => write!(f, "webhook rejected: {rejection}"),
            Self::AlreadyHandled => f.write_str("webhook already handled"),
        }
    }
}

impl ResponseError for WebhookError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Rejected(rejection) => StatusCode::from_u16(rejection.status().as_u16())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            Self::AlreadyHandled => StatusCode::OK,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        response.content_type("text/plain; charset=utf-8");
        let Self::Rejected(rejection) = self else {
            return response.body("duplicate");
        };
        if let Some(seconds) = rejection.retry_after_secs() {
            response.insert_header(("retry-after", seconds.to_string()));
        }
        response.body(rejection.body_text())
    }
}
