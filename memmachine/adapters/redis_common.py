"""What every adapter on a Redis-protocol server shares: the URL schemes and connecting
(one server or a Redis Cluster), its health probe, how a driver error is described (first
line only, never a command's arguments), and moving keys of an older layout to the current
one.

URLs: ``redis://``, ``rediss://`` and ``unix:///path.sock`` reach one server;
``redis+cluster://[user:password@]host:port`` (``rediss+cluster://`` with TLS) reaches a
Redis Cluster through any one of its nodes, from which the client learns the others. A
cluster has one database, so such a URL has no ``/db`` path.

Cluster safety: every key a Lua script or a multi-key command touches carries the same hash
tag (``{...}``), so it lives in one slot, and every script declares at least one of those
keys so a cluster client sends it to the node holding them. Each adapter's docstring names
its tag.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from memmachine.adapters.health import NamedStore, health_of
from memmachine.errors import ConfigurationError, StoreError, StoreUnavailableError
from memmachine.models import StoreHealth

__all__ = [
    "CLUSTER_SCHEMES",
    "DRIVER_ERRORS",
    "MOVE_KEY",
    "MOVE_KEY_FUNCTION",
    "REDIS_SCHEMES",
    "KeyMigration",
    "RedisClient",
    "check_redis_url",
    "connect_redis",
    "describe_error",
    "driver_error",
    "migrate_keys",
    "redis_health",
]

#: Schemes that reach a Redis Cluster (the client learns every node from the one given).
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
#: Every scheme a Redis adapter accepts.
REDIS_SCHEMES = ("redis", "rediss", "unix", *CLUSTER_SCHEMES)

#: A client on one server or on a cluster; the adapters use what both offer.
RedisClient: TypeAlias = Redis | RedisCluster

#: What a Redis driver call may raise (the cluster client's own errors are not RedisError).
DRIVER_ERRORS = (RedisError, RedisClusterException)
# Errors meaning "the data is fine, the server (or a shard of the cluster) cannot be had".
_UNAVAILABLE = (
    RedisConnectionError,
    RedisTimeoutError,
    ClusterDownError,
    MasterDownError,
    TryAgainError,
    RedisClusterException,
)

_HEALTH_TIMEOUT_SECONDS = 5.0
_CONNECT_TIMEOUT_SECONDS = 5.0
_SOCKET_TIMEOUT_SECONDS = 10.0
_MIGRATE_BATCH = 500

log = logging.getLogger(__name__)


def describe_error(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 200 characters)."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {message[:200]}" if message else type(exc).__name__


def driver_error(exc: BaseException, message: str, store: str) -> StoreError:
    """The project's error for a driver exception: ``StoreUnavailableError`` when the
    server (or a shard) cannot be reached, else ``StoreError``; ``message`` comes first,
    then :func:`describe_error` of ``exc``."""
    text = f"{message}: {describe_error(exc)}"
    if isinstance(exc, _UNAVAILABLE):
        return StoreUnavailableError(text, store=store)
    return StoreError(text, store=store)


def check_redis_url(url: str, label: str) -> None:
    """``ConfigurationError`` naming ``label`` unless ``url`` has a scheme of
    :data:`REDIS_SCHEMES` (the URL itself is never quoted: it may hold a password)."""
    scheme = urlsplit(url).scheme
    if scheme not in REDIS_SCHEMES:
        raise ConfigurationError(
            f"{label} URL must start with redis://, rediss://, unix://, redis+cluster:// "
            f"or rediss+cluster://, not {scheme!r}"
        )


async def redis_health(
    store: NamedStore, client: RedisClient | None, *, detail: str
) -> StoreHealth:
    """PING (every primary of a cluster) and ``INFO server``: the server's version and the
    round-trip latency. Never raises."""
    if client is None:
        return health_of(store, "down", detail="not started")
    started = time.perf_counter()
    try:
        async with asyncio.timeout(_HEALTH_TIMEOUT_SECONDS):
            if isinstance(client, RedisCluster):
                primaries = client.get_primaries()
                await client.ping(target_nodes=RedisCluster.PRIMARIES)
                detail = f"{detail}, cluster of {len(primaries)} primaries"
            else:
                await client.ping()
            latency = (time.perf_counter() - started) * 1000
            info = await client.info("server")
    except Exception as exc:
        return health_of(store, "down", detail=describe_error(exc))
    version = info.get("redis_version")
    return health_of(
        store,
        "ok",
        detail=detail,
        version=str(version) if version is not None else None,
        latency_ms=latency,
    )


@dataclass(frozen=True)
class KeyMigration:
    """Keys of an older layout to move at connect time (see :func:`migrate_keys`)."""

    match: str
    rename: Callable[[str], str | None]
    script: str = ""
    args: Sequence[str] = ()


async def connect_redis(
    url: str,
    *,
    password: str | None,
    label: str,
    store: str,
    max_connections: int | None = None,
    migration: KeyMigration | None = None,
) -> RedisClient:
    """A client on ``url`` that has answered a PING (decoded replies, bounded timeouts): a
    :class:`RedisCluster` for the ``+cluster`` schemes (``max_connections`` per node), else
    a :class:`Redis`; with ``migration``, the keys of the older layout are moved before it
    is returned (:func:`migrate_keys`; the client is closed when that fails).

    A URL redis-py cannot use is a ``ConfigurationError`` that never quotes it (it may hold
    a password); a server that does not answer is ``StoreUnavailableError`` naming ``label``.
    """
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_connect_timeout": _CONNECT_TIMEOUT_SECONDS,
        "socket_timeout": _SOCKET_TIMEOUT_SECONDS,
    }
    if max_connections is not None:
        options["max_connections"] = max_connections
    if password is not None:
        options["password"] = password
    parts = urlsplit(url)
    client: RedisClient
    try:
        if parts.scheme in CLUSTER_SCHEMES:
            if parts.path.strip("/"):
                raise ConfigurationError(
                    f"{label} URL: a Redis Cluster has one database, so a "
                    f"{parts.scheme}:// URL takes no /db path"
                )
            plain = parts.scheme.removesuffix("+cluster")
            client = RedisCluster.from_url(
                urlunsplit((plain, parts.netloc, "", parts.query, "")), **options
            )
        else:
            client = Redis.from_url(url, **options)
    except (ValueError, TypeError, *DRIVER_ERRORS) as exc:
        raise ConfigurationError(f"{label} URL cannot be used ({type(exc).__name__})") from exc
    try:
        await client.ping()
    except DRIVER_ERRORS as exc:
        await client.aclose()
        raise StoreUnavailableError(
            f"{label} cannot reach Redis: {describe_error(exc)}", store=store
        ) from exc
    if migration is not None:
        try:
            await migrate_keys(
                client,
                match=migration.match,
                rename=migration.rename,
                label=label,
                store=store,
                script=migration.script or MOVE_KEY,
                args=migration.args,
            )
        except BaseException:
            await client.aclose()
            raise
    return client


#: Lua ``move_key(old, new)``, the move of :func:`migrate_keys`: RENAMENX (the TTL goes
#: along) and 1; when ``new`` exists already, two sets are merged into it (the longer TTL
#: wins, none beats any) and 1, anything else is left alone and 0; -1 when ``old`` is gone.
MOVE_KEY_FUNCTION = """
local function move_key(old, new)
  if redis.call('EXISTS', old) == 0 then return -1 end
  if redis.call('RENAMENX', old, new) == 1 then return 1 end
  if redis.call('TYPE', old).ok ~= 'set' or redis.call('TYPE', new).ok ~= 'set' then
    return 0
  end
  local old_ttl, new_ttl = redis.call('PTTL', old), redis.call('PTTL', new)
  redis.call('SUNIONSTORE', new, new, old)
  if old_ttl >= 0 and new_ttl >= 0 then
    redis.call('PEXPIRE', new, math.max(old_ttl, new_ttl))
  end
  redis.call('DEL', old)
  return 1
end
"""
#: :data:`MOVE_KEY_FUNCTION` applied to ``KEYS = [old, new]``.
MOVE_KEY = MOVE_KEY_FUNCTION + "return move_key(KEYS[1], KEYS[2])\n"


async def migrate_keys(
    client: RedisClient,
    *,
    match: str,
    rename: Callable[[str], str | None],
    label: str,
    store: str,
    script: str = MOVE_KEY,
    args: Sequence[str] = (),
) -> int:
    """Move the keys of an older layout to the current one, on a single server.

    Every key ``SCAN`` finds for ``match`` whose ``rename(key)`` is a new name is handed
    to ``script`` (default :data:`MOVE_KEY`) with ``KEYS = [old, new]`` and ``args``. The
    script moves it (see :data:`MOVE_KEY_FUNCTION`: data the current layout already holds
    is never overwritten) and returns 1 when moved, 0 when the new name was taken (the
    old key stays; a warning counts such keys), -1 when the old key was gone (another
    process moved it first). Returns how many keys were moved. A cluster client is left
    alone: no older layout ever ran on a cluster.
    """
    if isinstance(client, RedisCluster):
        return 0
    moved = kept = 0
    helper = client.register_script(script)
    try:
        async for key in client.scan_iter(match=match, count=_MIGRATE_BATCH):
            new = rename(key)
            if new is None:
                continue
            result = int(await helper(keys=[key, new], args=list(args)))
            if result == 1:
                moved += 1
            elif result == 0:
                kept += 1
    except DRIVER_ERRORS as exc:
        raise driver_error(
            exc, f"{label} could not move keys of the previous layout", store
        ) from exc
    if moved:
        log.info("%s: moved %d keys of the previous layout to the current one", label, moved)
    if kept:
        log.warning(
            "%s: %d keys of the previous layout stay in place: their new name already exists "
            '(see the README, "Upgrading a Redis deployment")',
            label,
            kept,
        )
    return moved
