"""Python client for the memmachine REST API."""

from memmachine_sdk._client import AsyncMemMachineClient, MemMachineClient
from memmachine_sdk.errors import (
    BadRequestError,
    ConflictError,
    MemMachineAPIError,
    MemMachineConnectionError,
    NotFoundError,
    PayloadTooLargeError,
    ServerError,
    UnauthorizedError,
)

__all__ = [
    "AsyncMemMachineClient",
    "BadRequestError",
    "ConflictError",
    "MemMachineAPIError",
    "MemMachineClient",
    "MemMachineConnectionError",
    "NotFoundError",
    "PayloadTooLargeError",
    "ServerError",
    "UnauthorizedError",
]
