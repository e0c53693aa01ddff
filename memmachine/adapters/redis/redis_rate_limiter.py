"""The :class:`~memmachine.ports.RateLimiter` on Redis: one bucket per key, shared by every
server process on the same Redis (or Redis Cluster), so N replicas together allow a key its
limit once, not N times.

Key layout (``P`` = the key prefix): ``P:{ratelimit:<key id>}``, a hash ``tokens``, ``at``
(the server's time when they were counted, seconds) and ``limit``. One key per bucket, named
with its own hash tag, so every script touches one slot and keys spread over a cluster's
nodes. A bucket expires once it would be full again (60 s after its last request), so idle
keys cost nothing; a missing bucket is a full one.

Each check is one Lua script: refill by the time passed since ``at`` on the server's clock
(``TIME``, so processes on machines whose clocks differ agree), then spend one request or
report how long until one is available. Atomic, so concurrent requests on several replicas
never spend the same token twice.
"""

from __future__ import annotations

import re

from redis.commands.core import AsyncScript

from memmachine.adapters.inprocess.in_process_rate_limiter import rate_limited
from memmachine.adapters.redis.redis_common import (
    DRIVER_ERRORS,
    RedisClient,
    check_redis_url,
    connect_redis,
    driver_error,
    redis_health,
)
from memmachine.errors import ConfigurationError, StoreUnavailableError
from memmachine.models import ID_PATTERN, StoreHealth
from memmachine.ports import Lifecycle

__all__ = ["RedisRateLimiter"]

_STORE = "rate-limiter"

# KEYS[1] = the bucket; ARGV[1] = the limit per minute. Returns {1} when a request was
# spent, else {0, seconds until the next one (a string: Lua numbers reply as integers)}.
_CHECK = """
local limit = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at', 'limit')
local tokens, at = tonumber(b[1]), tonumber(b[2])
if tokens == nil or at == nil or tonumber(b[3]) ~= limit then
  tokens, at = limit, now
end
local rate = limit / 60
tokens = math.min(limit, tokens + math.max(0, now - at) * rate)
local spent = 0
if tokens >= 1 then
  tokens = tokens - 1
  spent = 1
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens),
  'at', string.format('%.6f', now), 'limit', limit)
redis.call('PEXPIRE', KEYS[1], 61000)
if spent == 1 then return {1} end
return {0, string.format('%.6f', (1 - tokens) / rate)}
"""


class RedisRateLimiter(Lifecycle):
    """:class:`~memmachine.ports.RateLimiter` on Redis (see the module docstring).

    ``url`` is ``redis://``, ``rediss://``, ``unix:///path.sock`` or ``redis+cluster://`` /
    ``rediss+cluster://``; ``password`` overrides one in the URL; ``key_prefix`` (an id)
    starts every key so deployments can share a server.
    """

    name = _STORE
    kind = "redis"

    def __init__(self, url: str, *, key_prefix: str = "mm", password: str | None = None) -> None:
        check_redis_url(url, "rate limiter")
        if not re.fullmatch(ID_PATTERN, key_prefix):
            raise ConfigurationError(
                f"rate limiter key prefix {key_prefix!r} must match {ID_PATTERN}"
            )
        self._url = url
        self._password = password
        self._prefix = key_prefix
        self._client: RedisClient | None = None
        self._check: AsyncScript | None = None

    async def start(self) -> None:
        """Connect and check the server answers. Idempotent."""
        if self._client is not None:
            return
        client = await connect_redis(
            self._url, password=self._password, label="rate limiter", store=_STORE
        )
        self._client = client
        self._check = client.register_script(_CHECK)

    async def close(self) -> None:
        """Close the client and its pool. Safe to call twice."""
        client, self._client, self._check = self._client, None, None
        if client is not None:
            await client.aclose()

    async def health(self) -> StoreHealth:
        """PING and the server's version. Never raises."""
        return await redis_health(self, self._client, detail=f"prefix {self._prefix}")

    async def check(self, key_id: str, per_minute: int) -> None:
        """Spend one request of ``key_id``'s shared bucket, or raise ``RateLimitedError``."""
        if per_minute <= 0:
            return
        if self._check is None:
            raise StoreUnavailableError("the rate limiter is not started", store=_STORE)
        try:
            reply = await self._check(keys=[self._key(key_id)], args=[str(per_minute)])
        except DRIVER_ERRORS as exc:
            raise driver_error(exc, "checking a rate limit failed", _STORE) from exc
        if int(reply[0]) != 1:
            raise rate_limited(per_minute, float(reply[1]))

    async def forget(self, key_id: str) -> None:
        """Drop ``key_id``'s bucket."""
        if self._client is None:
            raise StoreUnavailableError("the rate limiter is not started", store=_STORE)
        try:
            await self._client.delete(self._key(key_id))
        except DRIVER_ERRORS as exc:
            raise driver_error(exc, "dropping a rate limit failed", _STORE) from exc

    def _key(self, key_id: str) -> str:
        return f"{self._prefix}:{{ratelimit:{key_id}}}"
