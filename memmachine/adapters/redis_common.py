"""What every adapter on a Redis-protocol server shares: connecting, its health probe, how
a driver error is described (first line only, never a command's arguments) and how it maps
to the error tree.

No command is ever sent twice by the client. redis-py retries a command after a timeout or
a broken connection by default, resending it on a new connection: for a write that the
server did receive (a frozen server runs it when it wakes up) that is a second write. Our
clients are built with no retries; a connection that went stale in the pool is still
replaced before a command is sent on it (the pool checks it when handing it out). A write
that fails after a connection was handed out for it may have reached the server, so it is
reported as :class:`~memmachine.errors.WriteOutcomeUnknownError`; one that failed before
(the server refused the connection) as :class:`~memmachine.errors.StoreUnavailableError`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
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
    "DEFAULT_SOCKET_TIMEOUT_SECONDS",
    "connect_redis",
    "describe_error",
    "redis_client",
    "redis_health",
    "translate_errors",
]

_HEALTH_TIMEOUT_SECONDS = 5.0
_CONNECT_TIMEOUT_SECONDS = 5.0
#: How long a command may wait for its answer before it fails (the store is frozen, or
#: the network dropped it).
DEFAULT_SOCKET_TIMEOUT_SECONDS = 10.0

#: Set in a task once a pool hands it a connection: a command may be on its way from then.
_handed_out: ContextVar[bool] = ContextVar("memmachine_redis_handed_out", default=False)


class _TrackedPool(ConnectionPool):
    """A connection pool that notes, in the calling task, when it hands a connection out
    (see :func:`translate_errors`)."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        connection: AbstractConnection = await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        _handed_out.set(True)
        return connection


def redis_client(
    url: str,
    *,
    password: str | None,
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT_SECONDS,
    max_connections: int | None = None,
) -> Redis:
    """A client on ``url`` that never retries a command (decoded replies, bounded timeouts);
    nothing is connected yet. Raises ``ValueError`` / ``RedisError`` for a URL redis-py
    cannot use."""
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
    return Redis.from_pool(_TrackedPool.from_url(url, **options))


@contextmanager
def translate_errors(failed: str, *, store: str, write: bool = False) -> Iterator[None]:
    """Turn the redis-py exceptions of the block into the error tree, ours passing through.

    ``failed`` starts each message (``"working store could not append to the session"``).
    A timeout or broken connection is ``StoreUnavailableError``, except for a ``write``
    that had been given a connection: that one may have reached the server, so it is
    ``WriteOutcomeUnknownError``. A refused command is ``StoreError``."""
    token = _handed_out.set(False)
    try:
        yield
    except MemMachineError:
        raise
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        if write and _handed_out.get():
            raise WriteOutcomeUnknownError(
                f"{failed}: no answer, so whether it was applied is unknown "
                f"({describe_error(exc)})",
                store=store,
            ) from exc
        raise StoreUnavailableError(f"{failed}: {describe_error(exc)}", store=store) from exc
    except RedisError as exc:
        raise StoreError(f"{failed}: {describe_error(exc)}", store=store) from exc
    finally:
        _handed_out.reset(token)


def describe_error(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 200 characters)."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {message[:200]}" if message else type(exc).__name__


async def redis_health(store: NamedStore, client: Redis | None, *, detail: str) -> StoreHealth:
    """PING and ``INFO server``: the server's version and round-trip latency. Never raises."""
    if client is None:
        return health_of(store, "down", detail="not started")
    started = time.perf_counter()
    try:
        async with asyncio.timeout(_HEALTH_TIMEOUT_SECONDS):
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


async def connect_redis(
    url: str,
    *,
    password: str | None,
    label: str,
    store: str,
    max_connections: int | None = None,
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT_SECONDS,
) -> Redis:
    """A :func:`redis_client` on ``url`` that has answered a PING.

    A URL redis-py cannot use is a ``ConfigurationError`` that never quotes it (it may hold
    a password); a server that does not answer is ``StoreUnavailableError`` naming ``label``.
    """
    try:
        client = redis_client(
            url,
            password=password,
            socket_timeout=socket_timeout,
            max_connections=max_connections,
        )
    except (ValueError, RedisError) as exc:
        raise ConfigurationError(f"{label} URL cannot be used ({type(exc).__name__})") from exc
    try:
        await client.ping()
    except RedisError as exc:
        await client.aclose()
        raise StoreUnavailableError(
            f"{label} cannot reach Redis: {describe_error(exc)}", store=store
        ) from exc
    return client
