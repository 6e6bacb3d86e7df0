//! An error as the API answers it: a status code and `{"error": "…"}`; what each refusal of
//! the steering and delayed clients becomes.
//!
//! Owns: `ApiError` and its response.
//! Must not: decide anything beyond the status code.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::command::CommandError;
use crate::control::client::SteerError;
use crate::delayed::client::{DelayedError, SubmissionError};
use crate::delayed::submission::SubmissionId;

/// An error as the API answers it: a status code and `{"error": "…"}`.
#[derive(Debug)]
pub struct ApiError {
    pub(super) status: StatusCode,
    pub(super) message: String,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(super) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        #[derive(Serialize)]
        struct Body {
            error: String,
        }
        let mut response = (
            self.status,
            axum::Json(Body {
                error: self.message,
            }),
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

pub(super) fn chain(err: &dyn std::error::Error) -> String {
    crate::report::error_chain(err)
}

impl From<SteerError> for ApiError {
    fn from(err: SteerError) -> Self {
        let status = match &err {
            SteerError::UnknownJob { .. } => StatusCode::NOT_FOUND,
            SteerError::Paused { .. }
            | SteerError::Disabled { .. }
            | SteerError::NoOwner
            | SteerError::NoPeer { .. }
            | SteerError::NotTheOwner { .. } => StatusCode::CONFLICT,
            SteerError::UnknownGroup { .. } => StatusCode::NOT_FOUND,
            SteerError::NotHandedOver { .. } => StatusCode::GATEWAY_TIMEOUT,
            SteerError::Range(_) | SteerError::Broadcast { .. } => StatusCode::BAD_REQUEST,
            SteerError::Request(err) => return ApiError::from_delayed(err),
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        Self::new(status, chain(&err))
    }
}

impl From<CommandError> for ApiError {
    fn from(err: CommandError) -> Self {
        match err {
            CommandError::Steer(err) => err.into(),
            CommandError::Delayed(err) => ApiError::from_delayed(&err),
            CommandError::Acl(_) => Self::new(StatusCode::SERVICE_UNAVAILABLE, chain(&err)),
            CommandError::Mismatched => Self::new(StatusCode::INTERNAL_SERVER_ERROR, chain(&err)),
        }
    }
}

impl ApiError {
    pub(super) fn from_delayed(err: &DelayedError) -> Self {
        let status = match err {
            DelayedError::UnknownJob { .. }
            | DelayedError::Submission(SubmissionError::NotFound { .. }) => StatusCode::NOT_FOUND,
            DelayedError::Submission(
                SubmissionError::Conflict { .. }
                | SubmissionError::NotPending { .. }
                | SubmissionError::NotReschedulable { .. }
                | SubmissionError::NewerRecord { .. },
            )
            | DelayedError::NotFailed { .. } => StatusCode::CONFLICT,
            err if err.is_refusal() => StatusCode::BAD_REQUEST,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        Self::new(status, chain(err))
    }
}

pub(super) fn path_id(id: &str) -> Result<SubmissionId, ApiError> {
    SubmissionId::parse(id).map_err(|err| ApiError::new(StatusCode::BAD_REQUEST, err.to_string()))
}
