"""What every adapter on a Redis-protocol server shares: its health probe and how a driver
error is described (first line only, never a command's arguments)."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from memmachine.adapters.health import NamedStore, health_of
from memmachine.models import StoreHealth

__all__ = ["describe_error", "redis_health"]

_HEALTH_TIMEOUT_SECONDS = 5.0


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
