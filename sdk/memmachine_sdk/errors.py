"""Errors the SDK raises. Every one is a :class:`MemMachineError` and carries ``status``
(the HTTP status, ``None`` when no response arrived), ``code`` (the server's error code),
``message`` and ``field`` (the dotted path of the bad input, when there is one).

    MemMachineError
    ├── MemMachineAPIError           the server answered with an error status
    │   ├── BadRequestError          400
    │   │   ├── InvalidInputError    422 (also raised before sending for invalid input)
    │   │   └── PayloadTooLargeError 413
    │   ├── UnauthorizedError        401 missing or unknown API key
    │   ├── PermissionDeniedError    403 the key may not do this
    │   ├── NotFoundError            404
    │   ├── ConflictError            409 (``current_version`` for working memory)
    │   ├── RateLimitedError         429 (``retry_after`` in seconds)
    │   └── ServerError              5xx
    │       ├── ServiceUnavailableError  503: a store is down; nothing was applied
    │       └── WriteOutcomeUnknownError 504: a store got the write but never answered
    └── MemMachineConnectionError    no response: refused, reset, DNS...
        └── MemMachineTimeoutError   no response within the timeout
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = [
    "BadRequestError",
    "ConflictError",
    "InvalidInputError",
    "MemMachineAPIError",
    "MemMachineConnectionError",
    "MemMachineError",
    "MemMachineTimeoutError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "ServerError",
    "ServiceUnavailableError",
    "UnauthorizedError",
    "WriteOutcomeUnknownError",
    "error_for",
    "parse_retry_after",
]


class MemMachineError(Exception):
    """Base of everything the SDK raises on purpose."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str = "error",
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field


class MemMachineConnectionError(MemMachineError):
    """No response arrived: the connection was refused, reset or could not be opened.

    For a request that is not safe to repeat (adding memories, appending messages) this
    does not say whether the server acted on it before the connection broke."""

    def __init__(
        self, message: str, *, request_sent: bool = True, code: str = "connection_error"
    ) -> None:
        super().__init__(message, code=code)
        #: False when the request certainly never reached the server (the connection
        #: could not be opened), so the server did nothing.
        self.request_sent = request_sent


class MemMachineTimeoutError(MemMachineConnectionError):
    """No response within the client's timeout (connect, read, write or pool)."""

    def __init__(self, message: str, *, request_sent: bool = True) -> None:
        super().__init__(message, request_sent=request_sent, code="timeout")


class MemMachineAPIError(MemMachineError):
    """The server answered with an error status. ``body`` is the decoded error body."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        body: dict[str, Any] | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        body = body or {}
        detail = body.get("error", {})
        detail = detail if isinstance(detail, dict) else {}
        field = detail.get("field")
        super().__init__(
            message, status=status, code=code, field=field if isinstance(field, str) else None
        )
        self.body = body
        version = detail.get("current_version")
        self.current_version: int | None = version if isinstance(version, int) else None
        #: Seconds the server asked to wait before trying again (Retry-After), if it did.
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


class BadRequestError(MemMachineAPIError):
    """The request was refused as malformed (400); base of the other bad-input errors."""


class InvalidInputError(BadRequestError):
    """A field failed validation (422); ``field`` names it, e.g. ``messages.0.content``."""


class PayloadTooLargeError(BadRequestError):
    """The request, a message or the state is over the server's size limits (413)."""


class UnauthorizedError(MemMachineAPIError):
    """No API key, or one the server does not know (401)."""


class PermissionDeniedError(MemMachineAPIError):
    """The API key is valid but may not do this, e.g. a read-only key writing (403)."""


class NotFoundError(MemMachineAPIError):
    """The thing does not exist in the caller's scope (404)."""


class ConflictError(MemMachineAPIError):
    """A write based on a stale version (409); ``current_version`` is the version now."""


class RateLimitedError(MemMachineAPIError):
    """Too many requests for this key (429); ``retry_after`` says how long to wait."""


class ServerError(MemMachineAPIError):
    """The server failed (5xx)."""


class ServiceUnavailableError(ServerError):
    """A store behind the server is unavailable (503); the request changed nothing."""


class WriteOutcomeUnknownError(ServerError):
    """A store took the write but did not answer in time (504, code
    ``write_outcome_unknown``): it may or may not have been applied. The client does not
    repeat such a write; read before sending it again, or it may be applied twice."""

    #: The server's error code for it.
    code_sent = "write_outcome_unknown"


_KINDS: dict[int, type[MemMachineAPIError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: InvalidInputError,
    429: RateLimitedError,
    503: ServiceUnavailableError,
}


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date);
    ``None`` when absent or unreadable. Never negative."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def error_for(status: int, body: Any, *, retry_after: float | None = None) -> MemMachineAPIError:
    """The typed error for an error response: its class follows ``status``, ``code``,
    ``message`` and ``field`` come from the body's ``error`` object when it has one."""
    body = body if isinstance(body, dict) else {}
    detail = body.get("error", {})
    detail = detail if isinstance(detail, dict) else {}
    code = str(detail.get("code", "http_error"))
    message = str(detail.get("message", f"request failed with HTTP {status}"))
    kind = _KINDS.get(status)
    if code == WriteOutcomeUnknownError.code_sent:
        kind = WriteOutcomeUnknownError
    if kind is None:
        kind = ServerError if status >= 500 else MemMachineAPIError
    return kind(status, code, message, body, retry_after=retry_after)
