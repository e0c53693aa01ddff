"""Python client for the memmachine REST API."""

from memmachine_client._client import AsyncMemMachineClient, MemMachineClient
from memmachine_client.errors import (
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
