"""Python client for the memmachine REST API: :class:`Client` (blocking) and
:class:`AsyncClient` (asyncio), scoped handles from ``client.memory(...)``, the wire
models in :mod:`memmachine_sdk.models` and typed errors in :mod:`memmachine_sdk.errors`.

Depends on httpx and pydantic only; importing it starts nothing and reads no settings."""

from memmachine_sdk._client import (
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    AsyncClient,
    AsyncMemMachineClient,
    Client,
    MemMachineClient,
)
from memmachine_sdk._memory import (
    AsyncMemory,
    AsyncProfile,
    AsyncState,
    Memory,
    Profile,
    SessionState,
    State,
)
from memmachine_sdk._retry import RetryPolicy
from memmachine_sdk.errors import (
    BadRequestError,
    ConflictError,
    InvalidInputError,
    MemMachineAPIError,
    MemMachineConnectionError,
    MemMachineError,
    MemMachineTimeoutError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    ServiceUnavailableError,
    UnauthorizedError,
    WriteOutcomeUnknownError,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "AsyncClient",
    "AsyncMemMachineClient",
    "AsyncMemory",
    "AsyncProfile",
    "AsyncState",
    "BadRequestError",
    "Client",
    "ConflictError",
    "InvalidInputError",
    "MemMachineAPIError",
    "MemMachineClient",
    "MemMachineConnectionError",
    "MemMachineError",
    "MemMachineTimeoutError",
    "Memory",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "Profile",
    "RateLimitedError",
    "RetryPolicy",
    "ServerError",
    "ServiceUnavailableError",
    "SessionState",
    "State",
    "UnauthorizedError",
    "WriteOutcomeUnknownError",
]
