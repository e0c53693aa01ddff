"""When the clients try a request again, and how long they wait first."""

from __future__ import annotations

import random
from dataclasses import dataclass

import httpx

from memmachine_sdk.errors import (
    MemMachineAPIError,
    MemMachineConnectionError,
    MemMachineError,
    MemMachineTimeoutError,
    RateLimitedError,
    ServiceUnavailableError,
)

__all__ = ["RetryPolicy", "connection_error"]

#: Gateway errors: a proxy in front of the server gave up; the server may have acted.
_GATEWAY = (502, 504)


@dataclass(frozen=True)
class RetryPolicy:
    """How a client retries.

    A request is sent at most ``max_retries + 1`` times. Between attempts the client waits
    the server's ``Retry-After`` when it sent one, otherwise a random time between 0 and
    ``min(backoff_max, backoff_base * 2**n)`` seconds before retry ``n`` (0-based):
    exponential backoff with full jitter. A ``Retry-After`` longer than
    ``max_retry_after`` is not waited for: the error is raised at once, ``retry_after``
    telling the caller how long to wait.

    What is retried:

    * 429 and 503, for every request: the server refused or failed before acting (its
      writes are all-or-nothing);
    * connection failures before the request was sent (refused, connect timeout), for
      every request;
    * 502, 504, read/write timeouts and dropped connections only for requests that are
      safe to repeat (reads, searches, PUT without ``expected_version``, DELETE): the
      server may have acted on the first attempt, and adding memories twice would store
      them twice. A 504 ``write_outcome_unknown`` is the server saying exactly that about
      one of its stores (:class:`~memmachine_sdk.errors.WriteOutcomeUnknownError`).

    Writes that are not safe to repeat carry an ``Idempotency-Key`` header, one per call
    and the same on each of its attempts.
    """

    max_retries: int = 2
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if self.backoff_base < 0 or self.backoff_max < 0 or self.max_retry_after < 0:
            raise ValueError("backoff_base, backoff_max and max_retry_after must be >= 0")

    def backoff(self, retry: int, rng: random.Random) -> float:
        """A full-jitter delay before retry number ``retry`` (0 for the first retry)."""
        ceiling = min(self.backoff_max, self.backoff_base * (2.0**retry))
        return rng.uniform(0.0, ceiling)

    def delay(
        self, error: MemMachineError, *, retry: int, idempotent: bool, rng: random.Random
    ) -> float | None:
        """Seconds to wait before sending again after ``error``, or ``None`` to give up.
        ``retry`` counts the retries already made."""
        if retry >= self.max_retries:
            return None
        if isinstance(error, RateLimitedError | ServiceUnavailableError):
            if error.retry_after is not None:
                return error.retry_after if error.retry_after <= self.max_retry_after else None
            return self.backoff(retry, rng)
        if isinstance(error, MemMachineAPIError):
            return self.backoff(retry, rng) if error.status in _GATEWAY and idempotent else None
        if isinstance(error, MemMachineConnectionError):
            return self.backoff(retry, rng) if idempotent or not error.request_sent else None
        return None


def connection_error(exc: httpx.TransportError, url: str) -> MemMachineConnectionError:
    """The SDK error for a transport failure; ``request_sent`` is False only when the
    connection could not be opened, so the server cannot have seen the request."""
    not_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
    if isinstance(exc, httpx.TimeoutException):
        kind = type(exc).__name__
        return MemMachineTimeoutError(
            f"no response from {url} in time ({kind})", request_sent=not not_sent
        )
    reason = str(exc) or type(exc).__name__
    return MemMachineConnectionError(f"cannot reach {url}: {reason}", request_sent=not not_sent)
