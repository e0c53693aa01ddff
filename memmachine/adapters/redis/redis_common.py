"""What every adapter on a Redis-protocol server shares: connecting, its health probe, and
how a driver error is described (first line only, never a command's arguments)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from memmachine.adapters.health import NamedStore, health_of
from memmachine.errors import ConfigurationError, StoreUnavailableError
from memmachine.models import StoreHealth

__all__ = ["connect_redis", "describe_error", "redis_health"]

_HEALTH_TIMEOUT_SECONDS = 5.0
_CONNECT_TIMEOUT_SECONDS = 5.0
_SOCKET_TIMEOUT_SECONDS = 10.0


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
) -> Redis:
    """A client on ``url`` that has answered a PING (decoded replies, bounded timeouts).

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
    try:
        client = Redis.from_url(url, **options)
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
