"""Contract suite of :class:`memmachine.ports.JobQueue`, run against every Redis-protocol server.

Backends: the machine's Redis service, the embedded FalkorDB server, a FalkorDB server and a
three-node Redis Cluster. Every queue a test opens uses the prefix ``mmtest-<unique>`` and
every key of it is deleted afterwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from redis.crc import key_slot

from memmachine.adapters.redis import redis_job_queue
from memmachine.adapters.redis.redis_job_queue import RedisJobQueue, backoff_ceiling_seconds
from memmachine.errors import ConfigurationError, ConflictError, InvalidInputError, NotFoundError
from memmachine.models import Scope, utc_now
from memmachine.ports import Job, JobQueue, JobQueueStats
from tests.conftest import async_redis_client, drop_redis_keys

OpenQueue = Callable[..., Awaitable[RedisJobQueue]]


@pytest.fixture(
    params=[
        pytest.param("redis_service_url", id="redis-service"),
        pytest.param("embedded_falkordb_url", id="embedded-falkordb"),
        pytest.param("falkordb_server_url", id="falkordb-server"),
        pytest.param("redis_cluster_url", id="redis-cluster"),
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

    async def open_one(**options: Any) -> RedisJobQueue:
        queue = RedisJobQueue(backend_url, key_prefix=f"mmtest-{unique}", **options)
        await queue.start()
        queues.append(queue)
        return queue

    yield open_one
    for queue in queues:
        await queue.close()
    drop_redis_keys(backend_url, f"{{mmtest-{unique}:jobs}}:*")


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


# --------------------------------------------------------------------------- retention


async def _dead(queue: RedisJobQueue, scope: Scope, key: str) -> Job:
    job = await queue.enqueue(scope, "extract", {}, idempotency_key=key, max_attempts=1)
    claimed = await queue.claim("w", kinds=["extract"])
    assert claimed is not None
    assert claimed.id == job.id
    return await queue.fail(job.id, "w", "boom")


async def _done(queue: RedisJobQueue, scope: Scope, key: str) -> Job:
    job = await queue.enqueue(scope, "compact", {}, idempotency_key=key)
    claimed = await queue.claim("w", kinds=["compact"])
    assert claimed is not None
    assert claimed.id == job.id
    return await queue.complete(job.id, "w")


async def test_done_jobs_expire_after_the_retention_and_free_their_key(
    open_queue: OpenQueue, backend_url: str, unique: str
) -> None:
    short = await open_queue(done_retention_seconds=0.3)
    keeper = await open_queue()
    expiring = await _done(short, ALICE, "short")
    kept = await _done(keeper, ALICE, "kept")
    dead = await _dead(short, ALICE, "dead")
    queued = await short.enqueue(ALICE, "later", {}, idempotency_key="queued")
    assert await short.get(ALICE, expiring.id) is not None

    await asyncio.sleep(0.5)
    assert await short.get(ALICE, expiring.id) is None
    listed = {job.id for job in await short.list_jobs(ALICE)}
    assert listed == {kept.id, dead.id, queued.id}
    assert [job.id for job in await short.list_jobs(ALICE, status="done")] == [kept.id]

    # The next claim sweeps it away for good: the job and its index entries.
    assert await short.claim("w", kinds=["nothing-queued"]) is None
    raw = async_redis_client(backend_url, decode_responses=True)
    try:
        base = f"{{mmtest-{unique}:jobs}}"
        owner = f"{base}:u:acme:default:default:alice"
        assert await raw.exists(f"{base}:job:{expiring.id}") == 0
        assert await raw.zscore(f"{owner}:all", expiring.id) is None
        assert await raw.zscore(f"{owner}:done", expiring.id) is None
        assert await raw.hget(f"{owner}:idem", "short") is None
        assert await raw.exists(f"{base}:job:{kept.id}") == 1
    finally:
        await raw.aclose()
    again = await short.enqueue(ALICE, "compact", {}, idempotency_key="short")
    assert (again.status, again.id != expiring.id) == ("queued", True)


async def test_an_expired_done_job_frees_its_key_even_before_a_sweep(
    open_queue: OpenQueue,
) -> None:
    queue = await open_queue(done_retention_seconds=0.2)
    done = await _done(queue, ALICE, "k")
    await asyncio.sleep(0.3)
    again = await queue.enqueue(ALICE, "compact", {"n": 2}, idempotency_key="k")
    assert again.id != done.id
    assert again.payload == {"n": 2}
    assert await queue.get(ALICE, done.id) is None


def test_retention_must_be_positive() -> None:
    with pytest.raises(ConfigurationError):
        RedisJobQueue("redis://localhost", done_retention_seconds=0)


# --------------------------------------------------------------------------- purge


async def test_purge_dead_removes_only_the_users_dead_jobs(queue: RedisJobQueue) -> None:
    first, second = await _dead(queue, ALICE, "d1"), await _dead(queue, ALICE, "d2")
    bobs = await _dead(queue, BOB, "d1")
    done = await _done(queue, ALICE, "done")
    queued = await queue.enqueue(ALICE, "later", {}, idempotency_key="queued")

    assert await queue.purge_dead(MALLORY) == 0
    with pytest.raises(NotFoundError):
        await queue.purge_dead(BOB, first.id)
    with pytest.raises(NotFoundError):
        await queue.purge_dead(MALLORY, first.id)
    for alive in (done, queued):
        with pytest.raises(ConflictError):
            await queue.purge_dead(ALICE, alive.id)

    assert await queue.purge_dead(ALICE, first.id) == 1
    assert await queue.get(ALICE, first.id) is None
    with pytest.raises(NotFoundError):
        await queue.replay(ALICE, first.id)
    assert [job.id for job in await queue.list_jobs(ALICE, status="dead")] == [second.id]

    assert await queue.purge_dead(ALICE) == 1
    assert await queue.list_jobs(ALICE, status="dead") == []
    assert {job.id for job in await queue.list_jobs(ALICE)} == {done.id, queued.id}
    assert [job.id for job in await queue.list_jobs(BOB, status="dead")] == [bobs.id]
    # A purged job's idempotency key is free again.
    again = await queue.enqueue(ALICE, "extract", {}, idempotency_key="d1")
    assert again.id not in (first.id, bobs.id)
    assert again.status == "queued"


async def test_purge_dead_empties_a_dead_list_longer_than_one_batch(
    queue: RedisJobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_job_queue, "_PURGE_BATCH", 2)
    dead = [await _dead(queue, ALICE, f"d{n}") for n in range(5)]
    assert len(await queue.list_jobs(ALICE, status="dead")) == len(dead)
    assert await queue.purge_dead(ALICE) == 5
    assert await queue.list_jobs(ALICE) == []


async def test_stats_count_queued_running_and_dead_jobs_of_every_user(
    queue: RedisJobQueue,
) -> None:
    assert await queue.stats() == JobQueueStats(queued=0, running=0, dead=0)
    await queue.enqueue(ALICE, "extract", {}, idempotency_key="a", max_attempts=1)
    await queue.enqueue(BOB, "compact", {}, idempotency_key="b")
    await queue.enqueue(MALLORY, "extract", {}, idempotency_key="m", delay_seconds=60)
    assert await queue.stats() == JobQueueStats(queued=3, running=0, dead=0)

    claimed = await queue.claim("w", kinds=["extract"])
    assert claimed is not None
    assert await queue.stats() == JobQueueStats(queued=2, running=1, dead=0)
    await queue.fail(claimed.id, "w", "boom")  # its only attempt: dead
    assert await queue.stats() == JobQueueStats(queued=2, running=0, dead=1)

    await queue.replay(ALICE, claimed.id)
    assert await queue.stats() == JobQueueStats(queued=3, running=0, dead=0)
    again = await queue.claim("w", kinds=["extract"], lease_seconds=0.05)
    assert again is not None
    await asyncio.sleep(0.1)
    other = await queue.claim("x", kinds=["compact"])  # reclaims the expired lease: dead
    assert other is not None
    assert await queue.stats() == JobQueueStats(queued=1, running=1, dead=1)

    await queue.complete(other.id, "x")  # done jobs are not counted
    assert await queue.stats() == JobQueueStats(queued=1, running=0, dead=1)
    assert await queue.purge_dead(ALICE) == 1
    assert await queue.stats() == JobQueueStats(queued=1, running=0, dead=0)


async def test_the_request_id_is_kept_with_the_job(queue: RedisJobQueue) -> None:
    job = await queue.enqueue(ALICE, "extract", {}, idempotency_key="r", request_id="req-1.a")
    plain = await queue.enqueue(ALICE, "extract", {}, idempotency_key="p")
    assert (job.request_id, plain.request_id) == ("req-1.a", None)
    stored = await queue.get(ALICE, job.id)
    assert stored is not None
    assert stored.request_id == "req-1.a"
    claimed = await queue.claim("w")
    assert claimed is not None
    assert claimed.request_id == "req-1.a"
    for bad in ("", "has space", "x" * 200, 'quote"d'):
        with pytest.raises(InvalidInputError) as caught:
            await queue.enqueue(ALICE, "extract", {}, idempotency_key="bad", request_id=bad)
        assert caught.value.field == "request_id"


# --------------------------------------------------------------------------- cluster


async def test_every_key_of_a_queue_shares_one_slot(
    queue: RedisJobQueue, backend_url: str, unique: str
) -> None:
    """The queue's hash tag keeps all its keys in one slot, so every script runs on the
    one cluster node that holds them."""
    await _dead(queue, ALICE, "d")
    await _done(queue, BOB, "done")
    await queue.enqueue(MALLORY, "later", {}, idempotency_key="q", delay_seconds=60)
    raw = async_redis_client(backend_url, decode_responses=True)
    try:
        keys = [key async for key in raw.scan_iter(match=f"{{mmtest-{unique}:jobs}}:*")]
    finally:
        await raw.aclose()
    assert len(keys) >= 12
    assert len({key_slot(key.encode()) for key in keys}) == 1


# --------------------------------------------------------------------------- upgrade


async def test_start_moves_a_queue_of_the_untagged_layout(
    redis_service_url: str, unique: str
) -> None:
    """Jobs an earlier version left on a single server (keys ``<prefix>:jobs:...``) carry
    over: the queued one is claimed and completed, the dead one replayed, the done one
    keeps its key taken, and new ids continue the old sequence."""
    prefix = f"mmtest-{unique}-old"
    old = f"{prefix}:jobs"
    owner = f"{old}:u:acme:default:default:alice"
    raw = async_redis_client(redis_service_url, decode_responses=True)
    now = round(utc_now().timestamp() * 1000)

    def job(seq: int, kind: str, status: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": f"j{seq:015d}", "kind": kind, "scope": ALICE.model_dump_json(),
            "payload": "{}", "idem": f"k{seq}", "status": status, "attempts": 0,
            "max_attempts": 5, "created": now - 10_000, "updated": now - 10_000,
            "available": now - 10_000, "owner": owner, "seq": seq, **extra,
        }  # fmt: skip

    try:
        await raw.set(f"{old}:seq", 3)
        await raw.sadd(f"{old}:kinds", "extract", "compact")
        await raw.hset(f"{old}:job:j000000000000001", mapping=job(1, "extract", "queued"))
        await raw.hset(
            f"{old}:job:j000000000000002",
            mapping=job(2, "extract", "dead", attempts=5, last_error="boom"),
        )
        await raw.hset(f"{old}:job:j000000000000003", mapping=job(3, "compact", "done"))
        await raw.zadd(f"{old}:queued:extract", {"j000000000000001": now - 10_000})
        await raw.hset(
            f"{owner}:idem",
            mapping={f"k{n}": f"j{n:015d}" for n in (1, 2, 3)},
        )
        await raw.zadd(f"{owner}:all", {f"j{n:015d}": n for n in (1, 2, 3)})
        await raw.zadd(f"{owner}:queued", {"j000000000000001": 1})
        await raw.zadd(f"{owner}:dead", {"j000000000000002": 2})
        await raw.zadd(f"{owner}:done", {"j000000000000003": 3})

        queue = RedisJobQueue(redis_service_url, key_prefix=prefix, done_retention_seconds=3600)
        async with queue:
            assert [key async for key in raw.scan_iter(match=f"{old}:*")] == []
            assert [j.id for j in await queue.list_jobs(ALICE)] == [
                "j000000000000003",
                "j000000000000002",
                "j000000000000001",
            ]
            claimed = await queue.claim("w")
            assert claimed is not None
            assert claimed.id == "j000000000000001"
            await queue.complete(claimed.id, "w")
            assert {j.id for j in await queue.list_jobs(ALICE, status="done")} == {
                "j000000000000001",
                "j000000000000003",
            }
            assert (await queue.stats()).dead == 1  # the old version's dead job is counted
            replayed = await queue.replay(ALICE, "j000000000000002")
            assert (await queue.stats()).dead == 0
            assert (replayed.status, replayed.last_error) == ("queued", "boom")
            kept = await queue.enqueue(ALICE, "compact", {}, idempotency_key="k3")
            assert (kept.id, kept.status) == ("j000000000000003", "done")
            fresh = await queue.enqueue(ALICE, "compact", {}, idempotency_key="k4")
            assert fresh.id == "j000000000000004"
            expires = await raw.hget(f"{{{old}}}:job:j000000000000003", "expires")
            assert int(expires) == now - 10_000 + 3_600_000
    finally:
        drop_redis_keys(redis_service_url, f"*{prefix}*")
        await raw.aclose()


async def test_purge_finished_removes_the_users_old_done_and_dead_jobs_only(
    queue: RedisJobQueue,
) -> None:
    done, dead = await _done(queue, ALICE, "old-done"), await _dead(queue, ALICE, "old-dead")
    bobs = await _done(queue, BOB, "old-done")
    queued = await queue.enqueue(ALICE, "later", {"note": "waiting"}, idempotency_key="q")
    # Nothing finished before a moment in the past.
    assert await queue.purge_finished(ALICE, done.created_at - timedelta(days=1)) == 0

    later = utc_now() + timedelta(seconds=5)
    assert await queue.purge_finished(MALLORY, later) == 0
    assert await queue.purge_finished(ALICE, later) == 2
    assert await queue.get(ALICE, done.id) is None
    assert await queue.get(ALICE, dead.id) is None
    assert await queue.get(ALICE, queued.id) is not None
    assert await queue.get(BOB, bobs.id) is not None
    assert (await queue.stats()).dead == 0


async def test_forget_deletes_every_job_of_the_user_or_session_in_any_status(
    queue: RedisJobQueue,
) -> None:
    other_session = ALICE.for_session("s2")
    running = await queue.enqueue(ALICE, "extract", {"said": "x"}, idempotency_key="r")
    assert (await queue.claim("w1")) is not None
    queued = await queue.enqueue(ALICE, "extract", {"said": "y"}, idempotency_key="q")
    elsewhere = await queue.enqueue(other_session, "extract", {}, idempotency_key="e")
    bobs = await queue.enqueue(BOB, "extract", {}, idempotency_key="q")
    # A session: only its jobs go, queued or running.
    assert await queue.forget(ALICE) == 2
    assert await queue.get(ALICE, running.id) is None
    assert await queue.get(ALICE, queued.id) is None
    assert [job.id for job in await queue.list_jobs(ALICE)] == [elsewhere.id]
    with pytest.raises(NotFoundError):  # the worker of a forgotten job cannot finish it
        await queue.complete(running.id, "w1")
    # The user: every session; another user keeps theirs, and nothing is left to claim.
    assert await queue.forget(ALICE.user_scope()) == 1
    assert await queue.list_jobs(ALICE) == []
    assert await queue.count_jobs(ALICE) == {"queued": 0, "running": 0, "done": 0, "dead": 0}
    assert [job.id for job in await queue.list_jobs(BOB)] == [bobs.id]
    claimed = await queue.claim("w2")
    assert claimed is not None
    assert claimed.id == bobs.id
    assert await queue.claim("w2") is None
    assert await queue.stats() == JobQueueStats(queued=0, running=1, dead=0)
    # Its keys are free again.
    again = await queue.enqueue(ALICE, "extract", {}, idempotency_key="q")
    assert again.id not in (queued.id, running.id)
