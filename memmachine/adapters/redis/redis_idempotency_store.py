"""The :class:`~memmachine.ports.IdempotencyStore` on Redis (or the embedded FalkorDB
server, which speaks the same protocol), so records survive a restart of the server and
every server process on one Redis shares them.

Key layout (``P`` = the key prefix): ``P:{idem:<h>}``, a hash with ``fp`` (the request's
fingerprint), ``done`` (``0`` or ``1``) and, once done, ``status``, ``body`` and ``type``.
``<h>`` is the SHA-256 of tenant and key, so neither is readable in the store and each
record sits alone in its cluster slot. A claim is one ``HSETNX``-like Lua script (the
record is written only when absent, with its lease as TTL); completing rewrites it with the
record's TTL.

An answer holds what the user sent, so a done record is also filed under its owners (the
user and the session it was written for): ``P:{idem-owner:<o>}`` is a sorted set of record
keys scored by when each expires (``<o>`` = SHA-256 of the owner). Filing a record drops
the entries already expired and gives the set the record's TTL, so it never outgrows the
owner's live records; :meth:`RedisIdempotencyStore.forget` deletes every record in it. The
set and the records sit in different cluster slots: they are written and deleted by
separate commands, and an entry whose record is gone is harmless.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Sequence

from redis.commands.core import AsyncScript

from memmachine.adapters.redis.redis_common import (
    RedisClient,
    check_redis_url,
    connect_redis,
    redis_health,
    translate_errors,
)
from memmachine.errors import ConfigurationError, StoreUnavailableError
from memmachine.models import ID_PATTERN, StoreHealth
from memmachine.ports import IdempotencyRecord, Lifecycle

__all__ = ["RedisIdempotencyStore"]

_STORE = "idempotency"

# KEYS[1] = the record; ARGV[1] = fingerprint, ARGV[2] = lease in milliseconds.
# Returns {} when the key was claimed, else the record's fields.
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HMGET', KEYS[1], 'fp', 'done', 'status', 'body', 'type')
end
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'done', '0')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {}
"""

# KEYS[1] = the record; ARGV[1] = lease in milliseconds. Renews a pending record's lease.
_EXTEND = """
if redis.call('HGET', KEYS[1], 'done') == '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return 0
"""


class RedisIdempotencyStore(Lifecycle):
    """:class:`~memmachine.ports.IdempotencyStore` on Redis (see the module docstring).

    ``url`` is ``redis://``, ``rediss://``, ``unix:///path.sock`` or a ``+cluster`` URL;
    ``password`` overrides one in the URL; ``key_prefix`` (an id) starts every key;
    ``timeout_seconds`` bounds each command."""

    name = _STORE
    kind = "redis"

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "mm",
        password: str | None = None,
        timeout_seconds: float = 10.0,
    ) -> None:
        check_redis_url(url, "idempotency store")
        if not re.fullmatch(ID_PATTERN, key_prefix):
            raise ConfigurationError(
                f"idempotency store key prefix {key_prefix!r} must match {ID_PATTERN}"
            )
        self._url, self._password, self._prefix = url, password, key_prefix
        self._timeout = timeout_seconds
        self._client: RedisClient | None = None
        self._claim: AsyncScript | None = None
        self._extend: AsyncScript | None = None

    async def start(self) -> None:
        """Connect and check the server answers. Idempotent."""
        if self._client is not None:
            return
        client = await connect_redis(
            self._url,
            password=self._password,
            label="idempotency store",
            store=_STORE,
            socket_timeout=self._timeout,
        )
        self._client, self._claim = client, client.register_script(_CLAIM)
        self._extend = client.register_script(_EXTEND)

    async def close(self) -> None:
        """Close the client and its pool. Safe to call twice."""
        client, self._client, self._claim, self._extend = self._client, None, None, None
        if client is not None:
            await client.aclose()

    async def health(self) -> StoreHealth:
        """PING and the server's version. Never raises."""
        return await redis_health(self, self._client, detail=f"prefix {self._prefix}")

    async def claim(
        self, tenant: str, key: str, fingerprint: str, lease_seconds: float
    ) -> IdempotencyRecord | None:
        if self._claim is None:
            raise StoreUnavailableError("the idempotency store is not started", store=_STORE)
        lease = str(max(1, int(lease_seconds * 1000)))
        with translate_errors("claiming an idempotency key failed", store=_STORE, write=True):
            reply = await self._claim(keys=[self._key(tenant, key)], args=[fingerprint, lease])
        if not reply:
            return None
        stored_fp, done, status, body, content_type = reply
        if stored_fp is None:  # expired between the two commands of another client
            return IdempotencyRecord(fingerprint=fingerprint)
        return IdempotencyRecord(
            fingerprint=str(stored_fp),
            done=done == "1",
            status=int(status or 0),
            body=base64.b64decode(body or ""),
            content_type=str(content_type or ""),
        )

    async def extend(self, tenant: str, key: str, lease_seconds: float) -> None:
        if self._extend is None:
            raise StoreUnavailableError("the idempotency store is not started", store=_STORE)
        lease = str(max(1, int(lease_seconds * 1000)))
        with translate_errors("renewing an idempotency lease failed", store=_STORE):
            await self._extend(keys=[self._key(tenant, key)], args=[lease])

    async def complete(
        self,
        tenant: str,
        key: str,
        record: IdempotencyRecord,
        ttl_seconds: float,
        owners: Sequence[str] = (),
    ) -> None:
        client = self._started()
        name = self._key(tenant, key)
        ttl_ms = max(1, int(ttl_seconds * 1000))
        fields = [
            "fp",
            record.fingerprint,
            "done",
            "1",
            "status",
            str(record.status),
            "body",
            base64.b64encode(record.body).decode("ascii"),
            "type",
            record.content_type,
        ]
        with translate_errors("storing an idempotent answer failed", store=_STORE, write=True):
            async with client.pipeline(transaction=True) as pipe:
                pipe.hset(name, items=fields)
                pipe.pexpire(name, ttl_ms)
                await pipe.execute()
            now = int(time.time() * 1000)
            for owner in owners:
                index = self._owner_key(owner)
                async with client.pipeline(transaction=True) as pipe:
                    pipe.zremrangebyscore(index, "-inf", now)
                    pipe.zadd(index, {name: now + ttl_ms})
                    pipe.pexpire(index, ttl_ms, gt=True)
                    pipe.pexpire(index, ttl_ms, nx=True)
                    await pipe.execute()

    async def forget(self, owner: str) -> int:
        """Delete every record filed under ``owner``; how many there were."""
        client = self._started()
        index = self._owner_key(owner)
        deleted = 0
        with translate_errors("forgetting idempotent answers failed", store=_STORE, write=True):
            names = [str(name) for name in await client.zrange(index, 0, -1)]
            for name in names:  # one by one: in a cluster each record has its own slot
                deleted += int(await client.delete(name))
            await client.delete(index)
        return deleted

    async def release(self, tenant: str, key: str) -> None:
        client = self._started()
        with translate_errors("releasing an idempotency key failed", store=_STORE, write=True):
            await client.delete(self._key(tenant, key))

    def _started(self) -> RedisClient:
        if self._client is None:
            raise StoreUnavailableError("the idempotency store is not started", store=_STORE)
        return self._client

    def _key(self, tenant: str, key: str) -> str:
        digest = hashlib.sha256(f"{tenant}\0{key}".encode()).hexdigest()
        return f"{self._prefix}:{{idem:{digest}}}"

    def _owner_key(self, owner: str) -> str:
        digest = hashlib.sha256(owner.encode()).hexdigest()
        return f"{self._prefix}:{{idem-owner:{digest}}}"
