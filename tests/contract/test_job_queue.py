"""Contract suite of :class:`memmachine.ports.JobQueue`, run against every Redis-protocol server.

Backends: the machine's Redis service, the embedded FalkorDB server and a FalkorDB server.
Every queue a test opens uses the prefix ``mmtest-<unique>`` and every key under it is
deleted afterwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import pytest
import redis
import redis.asyncio

from memmachine.adapters.redis_job_queue import RedisJobQueue, backoff_ceiling_seconds
from memmachine.errors import ConflictError, InvalidInputError, NotFoundError
from memmachine.models import Scope, utc_now
from memmachine.ports import JobQueue

OpenQueue = Callable[..., Awaitable[RedisJobQueue]]


@pytest.fixture(
    params=[
        pytest.param("redis_service_url", id="redis-service"),
        pytest.param("embedded_falkordb_url", id="embedded-falkordb"),
        pytest.param("falkordb_server_url", id="falkordb-server"),
    ]
)
def backend_url(request: pytest.FixtureRequest) -> str:
    """Resolved in a sync fixture: an async one would ask for the (async, session-scoped)
    server fixtures from inside a running event loop."""
    return str(request.getfixturevalue(request.param))


@pytest.fixture
async def open_queue(backend_url: str, unique: str) -> AsyncIterator[OpenQueue]:
    """``await open_queue(**options)``: a started queue under ``mmtest-<unique>``; all are
    closed and every key of the prefix deleted after the test."""
    queues: list[RedisJobQueue] = []

    async def open_one(**options: float) -> RedisJobQueue:
        queue = RedisJobQueue(backend_url, key_prefix=f"mmtest-{unique}", **options)
        await queue.start()
        queues.append(queue)
        return queue

    yield open_one
    for queue in queues:
        await queue.close()
    client = redis.asyncio.Redis.from_url(backend_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"mmtest-{unique}:*", count=500)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
async def queue(open_queue: OpenQueue) -> RedisJobQueue:
    return await open_queue(backoff_base_seconds=0.0, backoff_max_seconds=0.0)


ALICE = Scope(tenant="acme", user_id="alice", session_id="s1")
BOB = Scope(tenant="acme", user_id="bob")
MALLORY = Scope(tenant="evil", user_id="alice")


async def test_is_a_job_queue(queue: RedisJobQueue) -> None:
    assert isinstance(queue, JobQueue)
    assert (queue.name, queue.kind) == ("jobs", "redis")
    assert (await queue.health()).status == "ok"


async def test_enqueue_stores_a_queued_job(queue: RedisJobQueue) -> None:
    job = await queue.enqueue(ALICE, "extract", {"batch": [1, 2]}, idempotency_key="b1")
    assert (job.status, job.kind, job.payload, job.attempts) == (
        "queued",
        "extract",
        {"batch": [1, 2]},
        0,
    )
    assert job.scope == ALICE
    assert job.max_attempts == 5
    assert job.last_error is None
    assert await queue.get(ALICE, job.id) == job


async def test_enqueue_is_idempotent_in_any_status(queue: RedisJobQueue) -> None:
    first = await queue.enqueue(ALICE, "extract", {"n": 1}, idempotency_key="batch-7")
    again = await queue.enqueue(ALICE, "extract", {"n": 2}, idempotency_key="batch-7")
    assert again == first
    claimed = await queue.claim("w1")
    assert claimed is not None
    await queue.complete(claimed.id, "w1")
    done = await queue.enqueue(ALICE, "extract", {"n": 3}, idempotency_key="batch-7")
    assert (done.id, done.status, done.payload) == (first.id, "done", {"n": 1})
    assert await queue.claim("w1") is None
    # The key is the user's: another tenant's identical key is another job.
    other = await queue.enqueue(MALLORY, "extract", {}, idempotency_key="batch-7")
    assert other.id != first.id


async def test_enqueue_refuses_bad_input(queue: RedisJobQueue) -> None:
    with pytest.raises(InvalidInputError):
        await queue.enqueue(ALICE, "a:b", {}, idempotency_key="k")
    with pytest.raises(InvalidInputError):
        await queue.enqueue(ALICE, "extract", {}, idempotency_key="")
    with pytest.raises(InvalidInputError):
        await queue.enqueue(ALICE, "extract", {}, idempotency_key="k", max_attempts=0)
    with pytest.raises(InvalidInputError):
        await queue.enqueue(ALICE, "extract", {"x": object()}, idempotency_key="k")
    with pytest.raises(InvalidInputError):
        await queue.enqueue(ALICE, "extract", {}, idempotency_key="k", delay_seconds=-1)


async def test_a_delayed_job_waits_its_delay(queue: RedisJobQueue) -> None:
    later = await queue.enqueue(ALICE, "compact", {}, idempotency_key="idle", delay_seconds=3600)
    assert later.available_at >= later.created_at + timedelta(seconds=3599)
    now = await queue.enqueue(ALICE, "compact", {}, idempotency_key="now")
    claimed = await queue.claim("w")
    assert claimed is not None
    assert claimed.id == now.id  # the older but delayed job is not handed out yet
    assert await queue.claim("w") is None
    soon = await queue.enqueue(BOB, "compact", {}, idempotency_key="soon", delay_seconds=0.2)
    for _ in range(200):
        again = await queue.claim("w")
        if again is not None:
            break
        await asyncio.sleep(0.02)
    assert again is not None
    assert again.id == soon.id


async def test_claim_is_fifo_and_filters_kinds(queue: RedisJobQueue) -> None:
    ids = [
        (await queue.enqueue(ALICE, kind, {}, idempotency_key=f"k{i}")).id
        for i, kind in enumerate(["extract", "compact", "extract", "compact"])
    ]
    only_compact = await queue.claim("w", kinds=["compact"])
    assert only_compact is not None
    assert only_compact.id == ids[1]
    assert await queue.claim("w", kinds=["nothing"]) is None
    assert await queue.claim("w", kinds=[]) is None
    rest = [await queue.claim("w") for _ in range(3)]
    assert [job.id for job in rest if job] == [ids[0], ids[2], ids[3]]
    assert all(job and job.status == "running" and job.attempts == 1 for job in rest)
    assert await queue.claim("w") is None


async def test_available_at_is_respected(open_queue: OpenQueue) -> None:
    slow = await open_queue(backoff_base_seconds=3600.0, backoff_max_seconds=3600.0)
    job = await slow.enqueue(ALICE, "extract", {}, idempotency_key="k")
    assert await slow.claim("w") is not None
    failed = await slow.fail(job.id, "w", "boom")
    assert failed.status == "queued"
    assert failed.available_at >= failed.updated_at
    if failed.available_at > utc_now() + timedelta(seconds=1):
        assert await slow.claim("w") is None

    quick = await open_queue(backoff_base_seconds=0.2, backoff_max_seconds=0.2)
    other = await quick.enqueue(BOB, "compact", {}, idempotency_key="k2")
    assert await quick.claim("w", kinds=["compact"]) is not None
    waiting = await quick.fail(other.id, "w", "boom")
    for _ in range(200):
        again = await quick.claim("w", kinds=["compact"])
        if again is not None:
            break
        await asyncio.sleep(0.02)
    assert again is not None
    assert again.id == other.id
    assert again.attempts == 2
    assert utc_now() >= waiting.available_at


async def test_backoff_grows_within_full_jitter_bounds(open_queue: OpenQueue) -> None:
    base, maximum = 10.0, 35.0
    assert [backoff_ceiling_seconds(n, base, maximum) for n in range(1, 5)] == [
        10.0,
        20.0,
        35.0,
        35.0,
    ]
    queue = await open_queue(backoff_base_seconds=base, backoff_max_seconds=maximum)
    delays: list[float] = []
    for i in range(8):
        job = await queue.enqueue(ALICE, "extract", {}, idempotency_key=f"k{i}")
        assert await queue.claim("w") is not None
        failed = await queue.fail(job.id, "w", "boom")
        delay = (failed.available_at - failed.updated_at).total_seconds()
        assert 0 <= delay <= base + 0.001
        delays.append(delay)
    assert len(set(delays)) > 1  # jittered, not a fixed delay


async def test_dead_after_max_attempts_with_last_error(queue: RedisJobQueue) -> None:
    job = await queue.enqueue(ALICE, "extract", {}, idempotency_key="k", max_attempts=3)
    for attempt in range(1, 4):
        claimed = await queue.claim("w")
        assert claimed is not None
        assert claimed.attempts == attempt
        failed = await queue.fail(job.id, "w", f"bad reply #{attempt}")
    assert (failed.status, failed.attempts, failed.last_error) == ("dead", 3, "bad reply #3")
    assert await queue.claim("w") is None
    assert [j.id for j in await queue.list_jobs(ALICE, status="dead")] == [job.id]
    assert await queue.list_jobs(ALICE, status="queued") == []


async def test_replay_requeues_a_dead_job(queue: RedisJobQueue) -> None:
    job = await queue.enqueue(ALICE, "extract", {}, idempotency_key="k", max_attempts=1)
    with pytest.raises(ConflictError):
        await queue.replay(ALICE, job.id)  # not dead
    assert await queue.claim("w") is not None
    await queue.fail(job.id, "w", "boom")
    replayed = await queue.replay(ALICE, job.id)
    assert (replayed.status, replayed.attempts, replayed.last_error) == ("queued", 0, "boom")
    assert await queue.list_jobs(ALICE, status="dead") == []
    claimed = await queue.claim("w")
    assert claimed is not None
    assert claimed.id == job.id
    assert claimed.attempts == 1
    done = await queue.complete(job.id, "w")
    assert done.status == "done"


async def test_expired_lease_is_reclaimed_and_the_loser_is_refused(queue: RedisJobQueue) -> None:
    job = await queue.enqueue(ALICE, "extract", {}, idempotency_key="k")
    first = await queue.claim("dies", lease_seconds=0.05)
    assert first is not None
    assert await queue.claim("other") is None  # still leased
    await asyncio.sleep(0.1)
    second = await queue.claim("other")
    assert second is not None
    assert second.id == job.id
    assert second.attempts == 2
    assert second.last_error is not None
    assert "dies" in second.last_error
    with pytest.raises(ConflictError):
        await queue.complete(job.id, "dies")
    with pytest.raises(ConflictError):
        await queue.fail(job.id, "dies", "late")
    done = await queue.complete(job.id, "other")
    assert done.status == "done"
    with pytest.raises(ConflictError):
        await queue.complete(job.id, "other")  # never done twice
    with pytest.raises(NotFoundError):
        await queue.complete("j-missing", "other")


async def test_a_lease_expiring_on_the_last_attempt_is_dead(queue: RedisJobQueue) -> None:
    job = await queue.enqueue(ALICE, "extract", {}, idempotency_key="k", max_attempts=1)
    assert await queue.claim("dies", lease_seconds=0.05) is not None
    await asyncio.sleep(0.1)
    assert await queue.claim("other") is None
    dead = await queue.get(ALICE, job.id)
    assert dead is not None
    assert dead.status == "dead"
    assert "expired" in (dead.last_error or "")


async def test_scope_isolation(queue: RedisJobQueue) -> None:
    job = await queue.enqueue(ALICE, "extract", {}, idempotency_key="k", max_attempts=1)
    assert await queue.claim("w") is not None
    await queue.fail(job.id, "w", "boom")
    # Session, agent and group do not narrow: the job is the user's.
    assert await queue.get(Scope(tenant="acme", user_id="alice"), job.id) is not None
    for stranger in (BOB, MALLORY, Scope(tenant="acme", org_id="x", user_id="alice")):
        assert await queue.get(stranger, job.id) is None
        assert await queue.list_jobs(stranger) == []
        assert await queue.list_jobs(stranger, status="dead") == []
        with pytest.raises(NotFoundError):
            await queue.replay(stranger, job.id)
    assert [j.id for j in await queue.list_jobs(ALICE)] == [job.id]


async def test_list_jobs_newest_first_with_limit(queue: RedisJobQueue) -> None:
    ids = [
        (await queue.enqueue(ALICE, "extract", {}, idempotency_key=f"k{i}")).id for i in range(5)
    ]
    listed = await queue.list_jobs(ALICE, limit=3)
    assert [j.id for j in listed] == ids[::-1][:3]
    with pytest.raises(InvalidInputError):
        await queue.list_jobs(ALICE, limit=0)


async def test_concurrent_claimers_never_share_a_job(open_queue: OpenQueue) -> None:
    producer = await open_queue()
    for i in range(50):
        await producer.enqueue(ALICE, "extract", {"i": i}, idempotency_key=f"k{i}")
    workers = [await open_queue() for _ in range(5)]

    async def drain(index: int, queue: RedisJobQueue) -> list[str]:
        got: list[str] = []
        while (job := await queue.claim(f"w{index}")) is not None:
            got.append(job.id)
            await queue.complete(job.id, f"w{index}")
        return got

    results = await asyncio.gather(*(drain(i, q) for i, q in enumerate(workers)))
    claimed = [job_id for result in results for job_id in result]
    assert len(claimed) == 50
    assert len(set(claimed)) == 50
    assert len(await producer.list_jobs(ALICE, status="done")) == 50


async def test_jobs_survive_reopening_the_queue(open_queue: OpenQueue) -> None:
    first = await open_queue()
    job = await first.enqueue(ALICE, "extract", {"x": 1}, idempotency_key="k")
    await first.close()
    second = await open_queue()
    assert await second.get(ALICE, job.id) == job
    claimed = await second.claim("w")
    assert claimed is not None
    assert claimed.id == job.id


async def test_count_jobs_counts_the_users_jobs_by_status(queue: RedisJobQueue) -> None:
    assert await queue.count_jobs(ALICE) == {"queued": 0, "running": 0, "done": 0, "dead": 0}
    for key in ("a", "b", "c", "d"):
        await queue.enqueue(ALICE, "extract", {}, idempotency_key=key, max_attempts=1)
    await queue.enqueue(BOB, "extract", {}, idempotency_key="bob")
    await queue.enqueue(MALLORY, "extract", {}, idempotency_key="mallory")
    done = await queue.claim("w", kinds=["extract"])
    assert done is not None
    assert done.scope.user_id == "alice"
    await queue.complete(done.id, "w")
    dead = await queue.claim("w")
    assert dead is not None
    assert dead.scope.user_id == "alice"
    await queue.fail(dead.id, "w", "boom")
    running = await queue.claim("w")
    assert running is not None
    assert running.scope.user_id == "alice"

    assert await queue.count_jobs(ALICE) == {"queued": 1, "running": 1, "done": 1, "dead": 1}
    assert await queue.count_jobs(BOB) == {"queued": 1, "running": 0, "done": 0, "dead": 0}
