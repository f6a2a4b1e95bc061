"""Error codes: one shape everywhere, `{"error": {"type", "code", "message"}}`."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel


class ErrorCode(StrEnum):
    bad_request = "bad_request"
    unauthorized = "unauthorized"
    forbidden = "forbidden"
    not_found = "not_found"
    payload_too_large = "payload_too_large"
    unsupported_media_type = "unsupported_media_type"
    rate_limited = "rate_limited"
    overloaded = "overloaded"
    deadline_exceeded = "deadline_exceeded"
    policy_violation = "policy_violation"
    content_blocked = "content_blocked"
    cancelled = "cancelled"
    unavailable = "unavailable"
    internal = "internal"


# (HTTP status, error type). The types follow the OpenAI/Anthropic vocabulary so SDK clients
# raise their own exception classes for them.
_TABLE: dict[ErrorCode, tuple[int, str]] = {
    ErrorCode.bad_request: (400, "invalid_request_error"),
    ErrorCode.unauthorized: (401, "authentication_error"),
    ErrorCode.forbidden: (403, "permission_error"),
    ErrorCode.not_found: (404, "not_found_error"),
    ErrorCode.payload_too_large: (413, "request_too_large"),
    ErrorCode.unsupported_media_type: (415, "invalid_request_error"),
    ErrorCode.rate_limited: (429, "rate_limit_error"),
    ErrorCode.overloaded: (503, "overloaded_error"),
    ErrorCode.deadline_exceeded: (504, "timeout_error"),
    ErrorCode.policy_violation: (400, "policy_violation"),
    ErrorCode.content_blocked: (400, "content_blocked"),
    ErrorCode.cancelled: (499, "cancelled"),
    ErrorCode.unavailable: (503, "api_error"),
    ErrorCode.internal: (500, "api_error"),
}


def http_status(code: ErrorCode) -> int:
    return _TABLE[code][0]


def error_type(code: ErrorCode) -> str:
    return _TABLE[code][1]


class ErrorInfo(BaseModel):
    type: str
    code: ErrorCode
    message: str

    @classmethod
    def of(cls, code: ErrorCode, message: str) -> ErrorInfo:
        return cls(type=error_type(code), code=code, message=message)


class ErrorBody(BaseModel):
    error: ErrorInfo
