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

No command is ever sent twice by the client. redis-py retries a command after a timeout or
a broken connection by default, resending it on a new connection: for a write that the
server did receive (a frozen server runs it when it wakes up) that is a second write. Our
clients are built with no retries (a connection that went stale in the pool is still
replaced before a command is sent on it: the pool checks it when handing it out; a
cluster client still follows MOVED / ASK redirections, which the server sends instead of
running the command). A write that fails after a connection was handed out for it (on a
cluster: after it was issued at all) may have reached the server, so it is reported as
:class:`~memmachine.errors.WriteOutcomeUnknownError`; one that failed before (the server
refused the connection) as :class:`~memmachine.errors.StoreUnavailableError`
(:func:`translate_errors`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
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
from memmachine.errors import (
    ConfigurationError,
    MemMachineError,
    StoreError,
    StoreUnavailableError,
    WriteOutcomeUnknownError,
)
from memmachine.models import StoreHealth

__all__ = [
    "CLUSTER_SCHEMES",
    "DEFAULT_SOCKET_TIMEOUT_SECONDS",
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
    "redis_client",
    "redis_health",
    "translate_errors",
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
#: How long a command may wait for its answer before it fails (the store is frozen, or
#: the network dropped it).
DEFAULT_SOCKET_TIMEOUT_SECONDS = 10.0
_MIGRATE_BATCH = 500

log = logging.getLogger(__name__)


def describe_error(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 200 characters)."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {message[:200]}" if message else type(exc).__name__


def driver_error(
    exc: BaseException, message: str, store: str, *, write: bool = False
) -> StoreError:
    """The project's error for a driver exception: ``StoreUnavailableError`` when the
    server (or a shard) cannot be reached, else ``StoreError``; ``message`` comes first,
    then :func:`describe_error` of ``exc``. A ``write`` that timed out or lost its
    connection after it may have been sent (see :func:`translate_errors`) is
    ``WriteOutcomeUnknownError``."""
    text = f"{message}: {describe_error(exc)}"
    if write and _handed_out.get() and isinstance(exc, _NO_ANSWER):
        return WriteOutcomeUnknownError(
            f"{message}: no answer, so whether it was applied is unknown ({describe_error(exc)})",
            store=store,
        )
    if isinstance(exc, _UNAVAILABLE):
        return StoreUnavailableError(text, store=store)
    return StoreError(text, store=store)


#: Failures that leave a command's fate open (against a refusal the server sent).
_NO_ANSWER = (RedisConnectionError, RedisTimeoutError, OSError)
#: Set in a task once a command may be on its way: a pool handed it a connection, or (on a
#: cluster, whose nodes keep their own connections) it was issued.
_handed_out: ContextVar[bool] = ContextVar("memmachine_redis_handed_out", default=False)


@contextmanager
def translate_errors(failed: str, *, store: str, write: bool = False) -> Iterator[None]:
    """Turn the driver exceptions of the block into the error tree, ours passing through
    (:func:`driver_error`; ``failed`` starts each message). A ``write`` that times out or
    loses its connection once a connection was handed out for it is
    ``WriteOutcomeUnknownError``: it may have reached the server."""
    token = _handed_out.set(False)
    try:
        yield
    except MemMachineError:
        raise
    except (*DRIVER_ERRORS, OSError) as exc:
        raise driver_error(exc, failed, store, write=write) from exc
    finally:
        _handed_out.reset(token)


class _TrackedPool(ConnectionPool):
    """A connection pool that notes, in the calling task, when it hands a connection out
    (see :func:`translate_errors`)."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        connection: AbstractConnection = await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        _handed_out.set(True)
        return connection


class _TrackedCluster(RedisCluster):
    """A cluster client that notes, in the calling task, that a command was issued (its
    nodes' connections are not handed out by a pool)."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        _handed_out.set(True)
        return await super().execute_command(*args, **kwargs)


def redis_client(
    url: str,
    *,
    password: str | None,
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT_SECONDS,
    max_connections: int | None = None,
) -> RedisClient:
    """A client on ``url`` that never resends a command (decoded replies, bounded
    timeouts), nothing connected yet: a cluster client for the ``+cluster`` schemes
    (``max_connections`` per node), else a single-server one. ``ConfigurationError`` for a
    cluster URL with a database path; ``ValueError`` / ``TypeError`` / a driver error for
    a URL redis-py cannot use."""
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_connect_timeout": _CONNECT_TIMEOUT_SECONDS,
        "socket_timeout": socket_timeout,
        "retry": Retry(NoBackoff(), 0),
    }
    if max_connections is not None:
        options["max_connections"] = max_connections
    if password is not None:
        options["password"] = password
    parts = urlsplit(url)
    if parts.scheme not in CLUSTER_SCHEMES:
        return Redis.from_pool(_TrackedPool.from_url(url, **options))
    if parts.path.strip("/"):
        raise ConfigurationError(
            f"a Redis Cluster has one database, so a {parts.scheme}:// URL takes no /db path"
        )
    plain = parts.scheme.removesuffix("+cluster")
    return _TrackedCluster.from_url(
        urlunsplit((plain, parts.netloc, "", parts.query, "")), **options
    )


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
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT_SECONDS,
) -> RedisClient:
    """A :func:`redis_client` on ``url`` that has answered a PING: a
    :class:`RedisCluster` for the ``+cluster`` schemes (``max_connections`` per node), else
    a :class:`Redis`; with ``migration``, the keys of the older layout are moved before it
    is returned (:func:`migrate_keys`; the client is closed when that fails).

    A URL redis-py cannot use is a ``ConfigurationError`` that never quotes it (it may hold
    a password); a server that does not answer is ``StoreUnavailableError`` naming ``label``.
    """
    client: RedisClient
    try:
        client = redis_client(
            url,
            password=password,
            socket_timeout=socket_timeout,
            max_connections=max_connections,
        )
    except ConfigurationError as exc:
        raise ConfigurationError(f"{label} URL: {exc.message}") from exc
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
