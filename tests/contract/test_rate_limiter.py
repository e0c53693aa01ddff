"""Contract suite of :class:`memmachine.ports.RateLimiter`: the in-process limiter, and the
Redis one on a Redis server and on a three-node Redis Cluster.

Refills are checked at 6,000 requests per minute (one every 10 ms), so waiting for one takes
a few tens of milliseconds; no test asserts how fast anything runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from memmachine.adapters.inprocess.in_process_rate_limiter import InProcessRateLimiter
from memmachine.adapters.redis.redis_rate_limiter import RedisRateLimiter
from memmachine.errors import RateLimitedError
from memmachine.ports import RateLimiter
from tests.conftest import drop_redis_keys

OpenLimiter = Callable[[], Awaitable[RateLimiter]]


@pytest.fixture(
    params=[
        pytest.param(None, id="in-process"),
        pytest.param("redis_service_url", id="redis-service"),
        pytest.param("redis_cluster_url", id="redis-cluster"),
    ]
)
def backend_url(request: pytest.FixtureRequest) -> str | None:
    return None if request.param is None else str(request.getfixturevalue(request.param))


@pytest.fixture
async def open_limiter(backend_url: str | None, unique: str) -> AsyncIterator[OpenLimiter]:
    """``await open_limiter()``: a started limiter; Redis ones share the prefix
    ``mmtest-<unique>`` (so two of them are two processes on one Redis), whose keys are
    deleted afterwards."""
    opened: list[RateLimiter] = []

    async def open_one() -> RateLimiter:
        limiter: RateLimiter = (
            InProcessRateLimiter()
            if backend_url is None
            else RedisRateLimiter(backend_url, key_prefix=f"mmtest-{unique}")
        )
        await limiter.start()
        opened.append(limiter)
        return limiter

    yield open_one
    for limiter in opened:
        await limiter.close()
    if backend_url is not None:
        drop_redis_keys(backend_url, f"mmtest-{unique}:*")


@pytest.fixture
async def limiter(open_limiter: OpenLimiter) -> RateLimiter:
    return await open_limiter()


async def _spend_all(limiter: RateLimiter, key: str, per_minute: int) -> int:
    """How many requests pass before the first refusal (at most ``2 * per_minute``)."""
    for spent in range(2 * per_minute):
        try:
            await limiter.check(key, per_minute)
        except RateLimitedError:
            return spent
    return 2 * per_minute


async def test_is_a_rate_limiter(limiter: RateLimiter) -> None:
    assert isinstance(limiter, RateLimiter)


async def test_a_burst_of_the_limit_passes_then_the_next_request_waits(
    limiter: RateLimiter,
) -> None:
    # Refills at 3 per minute are one per 20 s: none happens during the test.
    assert await _spend_all(limiter, "k", 3) == 3
    with pytest.raises(RateLimitedError) as refused:
        await limiter.check("k", 3)
    assert 0 < refused.value.retry_after <= 20.0
    await limiter.check("other", 3)  # buckets are per key


async def test_a_refused_request_spends_nothing_and_the_bucket_refills(
    limiter: RateLimiter,
) -> None:
    per_minute = 600  # one request every 100 ms
    assert await _spend_all(limiter, "k", per_minute) >= per_minute
    with pytest.raises(RateLimitedError) as refused:
        await limiter.check("k", per_minute)
    assert 0 < refused.value.retry_after <= 0.1
    for _ in range(10):  # refused (or passing on a refill): a refusal spends nothing
        with contextlib.suppress(RateLimitedError):
            await limiter.check("k", per_minute)
    await asyncio.sleep(0.25)  # two and a half requests' worth
    await limiter.check("k", per_minute)


async def test_zero_is_unlimited_and_a_new_limit_or_a_forgotten_key_starts_full(
    limiter: RateLimiter,
) -> None:
    for _ in range(500):
        await limiter.check("k", 0)
    assert await _spend_all(limiter, "k", 2) == 2
    assert await _spend_all(limiter, "k", 4) == 4  # another limit: a full bucket of it
    await limiter.forget("k")
    assert await _spend_all(limiter, "k", 4) == 4


@pytest.fixture(
    params=[
        pytest.param("redis_service_url", id="redis-service"),
        pytest.param("redis_cluster_url", id="redis-cluster"),
    ]
)
def redis_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(request.param))


async def test_processes_on_one_redis_share_each_keys_bucket(redis_url: str, unique: str) -> None:
    """Two limiters on one Redis are two server processes: together they allow a key its
    limit once (an in-process limiter belongs to its process by contract)."""
    first = RedisRateLimiter(redis_url, key_prefix=f"mmtest-{unique}")
    second = RedisRateLimiter(redis_url, key_prefix=f"mmtest-{unique}")
    try:
        async with first, second:
            await asyncio.gather(*(limiter.check("k", 5) for limiter in (first, second, first)))
            assert await _spend_all(second, "k", 5) == 2
            with pytest.raises(RateLimitedError):
                await first.check("k", 5)
            # Concurrent checks from both never spend one token twice.
            results = await asyncio.gather(
                *(limiter.check("c", 20) for limiter in (first, second) * 15),
                return_exceptions=True,
            )
            assert sum(result is None for result in results) == 20
            assert all(isinstance(r, RateLimitedError) for r in results if r is not None)
    finally:
        drop_redis_keys(redis_url, f"mmtest-{unique}:*")
