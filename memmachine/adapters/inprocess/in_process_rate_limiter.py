"""The :class:`~memmachine.ports.RateLimiter` of one process: token buckets in memory.

What the embedded mode uses (one process serves a data dir). With several server processes
each holds its own buckets, so N processes allow N times a key's limit: production uses
:class:`~memmachine.adapters.redis.redis_rate_limiter.RedisRateLimiter`, which they share.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from memmachine.errors import RateLimitedError
from memmachine.ports import Lifecycle

__all__ = ["InProcessRateLimiter", "rate_limited"]


def rate_limited(per_minute: int, wait: float) -> RateLimitedError:
    """The error for a key over its limit of ``per_minute``, ``wait`` seconds from the next
    request."""
    return RateLimitedError(
        f"rate limit of {per_minute} requests per minute exceeded for this API key; "
        f"retry in {max(1, math.ceil(wait))}s",
        retry_after=wait,
    )


class InProcessRateLimiter(Lifecycle):
    """Token buckets per key in this process (see :class:`~memmachine.ports.RateLimiter`);
    ``clock`` (seconds, monotonic) is replaceable for tests. Safe to use from several
    threads."""

    name = "rate-limiter"
    kind = "in-process"

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        #: key id -> (tokens left, when they were counted, the limit they were counted for)
        self._buckets: dict[str, tuple[float, float, int]] = {}

    async def start(self) -> None:
        """Nothing to connect."""

    async def close(self) -> None:
        """Nothing to release; the buckets stay."""

    async def check(self, key_id: str, per_minute: int) -> None:
        """Spend one request of ``key_id``'s bucket, or raise ``RateLimitedError``."""
        if per_minute <= 0:
            return
        rate = per_minute / 60.0
        with self._lock:
            now = self._clock()
            tokens, then, limit = self._buckets.get(key_id, (float(per_minute), now, per_minute))
            if limit != per_minute:  # the key's limit changed: start from a full bucket
                tokens, then = float(per_minute), now
            tokens = min(float(per_minute), tokens + (now - then) * rate)
            if tokens >= 1.0:
                self._buckets[key_id] = (tokens - 1.0, now, per_minute)
                return
            self._buckets[key_id] = (tokens, now, per_minute)
        raise rate_limited(per_minute, (1.0 - tokens) / rate)

    async def forget(self, key_id: str) -> None:
        """Drop ``key_id``'s bucket."""
        with self._lock:
            self._buckets.pop(key_id, None)
