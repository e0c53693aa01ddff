"""Errors the client raises; each carries the HTTP status and the server's error code.

    MemMachineAPIError
    ├── BadRequestError        422 (``field`` names the bad input)
    │   └── PayloadTooLargeError   413
    ├── UnauthorizedError      401
    ├── NotFoundError          404
    ├── ConflictError          409 (``current_version`` for working memory)
    └── ServerError            5xx
MemMachineConnectionError      the server could not be reached
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BadRequestError",
    "ConflictError",
    "MemMachineAPIError",
    "MemMachineConnectionError",
    "NotFoundError",
    "PayloadTooLargeError",
    "ServerError",
    "UnauthorizedError",
    "error_for",
]


class MemMachineConnectionError(Exception):
    """The server could not be reached (refused, timed out, DNS)."""


class MemMachineAPIError(Exception):
    def __init__(self, status: int, code: str, message: str, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        detail = body.get("error", {}) if isinstance(body, dict) else {}
        self.field: str | None = detail.get("field")
        self.current_version: int | None = detail.get("current_version")


class BadRequestError(MemMachineAPIError):
    pass


class PayloadTooLargeError(BadRequestError):
    pass


class UnauthorizedError(MemMachineAPIError):
    pass


class NotFoundError(MemMachineAPIError):
    pass


class ConflictError(MemMachineAPIError):
    pass


class ServerError(MemMachineAPIError):
    pass


def error_for(status: int, body: Any) -> MemMachineAPIError:
    detail = body.get("error", {}) if isinstance(body, dict) else {}
    code = str(detail.get("code", "http_error"))
    message = str(detail.get("message", "request failed"))
    kind: type[MemMachineAPIError]
    if status == 413:
        kind = PayloadTooLargeError
    elif status in (400, 422):
        kind = BadRequestError
    elif status in (401, 403):
        kind = UnauthorizedError
    elif status == 404:
        kind = NotFoundError
    elif status == 409:
        kind = ConflictError
    elif status >= 500:
        kind = ServerError
    else:
        kind = MemMachineAPIError
    return kind(status, code, message, body if isinstance(body, dict) else {})
