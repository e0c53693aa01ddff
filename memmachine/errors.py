"""The one error tree of memmachine.

Every error the core or an adapter raises on purpose derives from :class:`MemMachineError`.
Adapters translate driver exceptions into these at their boundary, so callers (REST, MCP, SDK,
CLI) map a small, closed set of types to responses and never see a driver's traceback.

    MemMachineError
    ├── InvalidInputError          bad input; ``field`` names it          (HTTP 422)
    │   ├── PayloadTooLargeError   a message or batch over the limits     (HTTP 413)
    │   └── UnsupportedMediaTypeError  an attachment type not allowed     (HTTP 415)
    ├── AuthenticationError        missing or unknown API key             (HTTP 401)
    ├── NotFoundError              the thing does not exist in this scope (HTTP 404)
    ├── ConflictError              a stale version or a clash             (HTTP 409)
    │   └── StateSchemaError       stored agent state its model cannot read (HTTP 409)
    ├── ConfigurationError         settings that cannot work              (startup)
    └── StoreError                 a storage backend failed               (HTTP 503)
        ├── StoreUnavailableError  a store cannot be reached at all
        ├── WriteOutcomeUnknownError  a write was sent but never answered (HTTP 504)
        └── ModelOutputError       a language model kept answering unusably

A ``StoreError`` other than ``WriteOutcomeUnknownError`` means the request changed nothing
(writes are all or nothing), so it may simply be sent again. ``WriteOutcomeUnknownError``
means the store may or may not have applied the write: sending it again is only safe when
the write is idempotent (an upsert of the same values, a delete) or carries an idempotency
key. No store client resends a write on its own.
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "ConfigurationError",
    "ConflictError",
    "InvalidInputError",
    "MemMachineError",
    "ModelOutputError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "StateSchemaError",
    "StoreError",
    "StoreUnavailableError",
    "UnsupportedMediaTypeError",
    "WriteOutcomeUnknownError",
]


class MemMachineError(Exception):
    """Base of every error memmachine raises on purpose."""

    code = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInputError(MemMachineError):
    """The caller sent something unusable; ``field`` is a dotted path to it when known."""

    code = "invalid_input"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class PayloadTooLargeError(InvalidInputError):
    """A message, fact or batch is larger than the configured limit."""

    code = "payload_too_large"


class UnsupportedMediaTypeError(InvalidInputError):
    """An attachment whose type the configured allow-list does not accept."""

    code = "unsupported_media_type"


class AuthenticationError(MemMachineError):
    """No credentials, or credentials nobody issued (or that were revoked)."""

    code = "unauthenticated"


class PermissionDeniedError(MemMachineError):
    """Valid credentials that may not do this (a read-only key writing, a non-admin key
    managing keys)."""

    code = "permission_denied"


class RateLimitedError(MemMachineError):
    """Too many requests for one key; ``retry_after`` is in seconds."""

    code = "rate_limited"

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NotFoundError(MemMachineError):
    code = "not_found"


class ConflictError(MemMachineError):
    """A write based on a stale version, or one that clashes with existing data."""

    code = "conflict"

    def __init__(self, message: str, current_version: int | None = None) -> None:
        super().__init__(message)
        self.current_version = current_version


class StateSchemaError(ConflictError):
    """Stored agent state that its model cannot read: a newer schema version than the code
    knows, a missing or failing migration step, or data that no longer validates.
    ``schema`` names the state type, ``stored_version`` the version found in the store and
    ``field`` the dotted path that failed (when one did). The stored state is left as it is.
    """

    code = "state_schema_mismatch"

    def __init__(
        self, message: str, *, schema: str, stored_version: int | None, field: str | None = None
    ) -> None:
        super().__init__(message)
        self.schema = schema
        self.stored_version = stored_version
        self.field = field


class ConfigurationError(MemMachineError):
    code = "configuration_error"


class StoreError(MemMachineError):
    """A storage backend failed while serving a request; ``store`` names which one."""

    code = "store_error"

    def __init__(self, message: str, store: str) -> None:
        super().__init__(message)
        self.store = store


class StoreUnavailableError(StoreError):
    code = "store_unavailable"


class WriteOutcomeUnknownError(StoreError):
    """A write reached a store (or may have) but no answer came back in time: the
    connection timed out or broke after the command was handed to it. The write may have
    been applied, in full (store writes are atomic), or not at all; nobody resent it."""

    code = "write_outcome_unknown"


class ModelOutputError(StoreError):
    """A language model's reply could not be used (invalid JSON, wrong shape) even after
    repair and retries; ``raw`` keeps the last reply for the dead-letter record."""

    code = "model_output_error"

    def __init__(self, message: str, store: str = "llm", raw: str | None = None) -> None:
        super().__init__(message, store)
        self.raw = raw
