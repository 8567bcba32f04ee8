//! Errors that reach a client. Each carries a stable code (ojs-errors.md §4, plus a few
//! protocol-level ones) so client libraries can match on it instead of on the message.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ErrorCode {
    // ojs-errors.md §4.1 validation
    InvalidPayload,
    InvalidJobType,
    InvalidQueue,
    InvalidArgs,
    InvalidMetadata,
    InvalidStateTransition,
    InvalidRetryPolicy,
    InvalidCronExpression,
    // §4.2 conflict
    DuplicateJob,
    /// The job is reserved by another worker (custom code, ojs-errors §8).
    NotOwner,
    /// A subscription cursor points before the oldest event kept (custom code).
    CursorExpired,
    // §4.3 auth
    Unauthenticated,
    /// The client's token does not have the role the command needs (ojs-errors §4.3).
    Forbidden,
    // §4.4 resource
    NotFound,
    PayloadTooLarge,
    /// `--max-queued-bytes` reached (ojs-errors §4.4, retryable).
    QueueFull,
    // §4.6 backend
    BackendError,
    BackendUnavailable,
    // protocol level (ours)
    UnknownCommand,
    MalformedCommand,
    LineTooLong,
    HelloRequired,
    /// The server is at `--max-connections` (custom code).
    TooManyConnections,
    /// Too many failed HELLOs from this address (custom code).
    RateLimited,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidPayload => "INVALID_PAYLOAD",
            ErrorCode::InvalidJobType => "INVALID_JOB_TYPE",
            ErrorCode::InvalidQueue => "INVALID_QUEUE",
            ErrorCode::InvalidArgs => "INVALID_ARGS",
            ErrorCode::InvalidMetadata => "INVALID_METADATA",
            ErrorCode::InvalidStateTransition => "INVALID_STATE_TRANSITION",
            ErrorCode::InvalidRetryPolicy => "INVALID_RETRY_POLICY",
            ErrorCode::InvalidCronExpression => "INVALID_CRON_EXPRESSION",
            ErrorCode::DuplicateJob => "DUPLICATE_JOB",
            ErrorCode::NotOwner => "NOT_OWNER",
            ErrorCode::CursorExpired => "CURSOR_EXPIRED",
            ErrorCode::Unauthenticated => "UNAUTHENTICATED",
            ErrorCode::Forbidden => "FORBIDDEN",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorCode::QueueFull => "QUEUE_FULL",
            ErrorCode::BackendError => "BACKEND_ERROR",
            ErrorCode::BackendUnavailable => "BACKEND_UNAVAILABLE",
            ErrorCode::UnknownCommand => "UNKNOWN_COMMAND",
            ErrorCode::MalformedCommand => "MALFORMED_COMMAND",
            ErrorCode::LineTooLong => "LINE_TOO_LONG",
            ErrorCode::HelloRequired => "HELLO_REQUIRED",
            ErrorCode::TooManyConnections => "TOO_MANY_CONNECTIONS",
            ErrorCode::RateLimited => "RATE_LIMITED",
        }
    }
}

/// An error with a stable code and a human-readable English message, plus, when a
/// definition was refused for several reasons, each of them with where it was found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OjsError {
    pub code: ErrorCode,
    pub message: String,
    /// The structured problems behind a validation error (empty for other errors): front
    /// ends render them (HTTP `details.validation_errors`) without parsing `message`.
    pub problems: Vec<Problem>,
}

/// One reason a definition was refused, with the JSONPath of the offending value
/// (ojs-workflows §11.1).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl OjsError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        OjsError {
            code,
            message: message.into(),
            problems: Vec::new(),
        }
    }

    /// The same error with its message prefixed by `context: `.
    pub fn context(mut self, context: &str) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for OjsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for OjsError {}

pub type OjsResult<T> = Result<T, OjsError>;
