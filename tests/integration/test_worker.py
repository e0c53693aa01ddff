"""The worker over a real queue: handlers run, failures retried then dead-lettered, a crashed
worker's job finished once by another, and jobs kept across a restart of the embedded server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memmachine.adapters.falkordb.embedded_falkordb import EmbeddedFalkorDBServer
from memmachine.adapters.redis.redis_job_queue import RedisJobQueue
from memmachine.errors import ModelOutputError
from memmachine.jobs import Worker
from memmachine.models import Scope
from memmachine.ports import Job

ALICE = Scope(tenant="acme", user_id="alice")


@pytest.fixture
async def queue(tmp_path: Path) -> AsyncIterator[RedisJobQueue]:
    """A queue on an embedded server of the test's own (removed with the tmp dir)."""
    async with EmbeddedFalkorDBServer(tmp_path) as server:
        jobs = RedisJobQueue(server.url, backoff_base_seconds=0.0, backoff_max_seconds=0.0)
        await jobs.start()
        yield jobs
        await jobs.close()


async def test_worker_runs_handlers_and_completes(queue: RedisJobQueue) -> None:
    seen: list[dict[str, object]] = []

    async def extract(job: Job) -> None:
        seen.append(job.payload)

    job = await queue.enqueue(ALICE, "extract", {"batch": 1}, idempotency_key="b1")
    worker = Worker(queue, {"extract": extract}, worker_id="w1")
    assert await worker.run_once() is True
    assert await worker.run_once() is False
    assert seen == [{"batch": 1}]
    done = await queue.get(ALICE, job.id)
    assert done is not None
    assert done.status == "done"


async def test_malformed_model_reply_is_retried_then_dead_lettered(queue: RedisJobQueue) -> None:
    calls = 0

    async def extract(job: Job) -> None:
        nonlocal calls
        calls += 1
        raise ModelOutputError("reply is not a fact list", raw='{"facts": [oops' + "x" * 5000)

    job = await queue.enqueue(ALICE, "extract", {}, idempotency_key="b1", max_attempts=3)
    worker = Worker(queue, {"extract": extract}, worker_id="w1", poll_interval=0.01)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    for _ in range(500):
        current = await queue.get(ALICE, job.id)
        if current is not None and current.status == "dead":
            break
        await asyncio.sleep(0.01)
    stop.set()
    await running
    dead = await queue.list_jobs(ALICE, status="dead")
    assert [j.id for j in dead] == [job.id]
    assert calls == 3
    error = dead[0].last_error or ""
    assert "ModelOutputError" in error
    assert '{"facts": [oops' in error
    assert len(error) < 5000  # the raw reply is truncated

    replayed = await queue.replay(ALICE, job.id)
    assert replayed.status == "queued"


async def test_a_crashed_workers_job_is_done_once_by_another(queue: RedisJobQueue) -> None:
    runs: list[str] = []

    async def compact(job: Job) -> None:
        runs.append(job.id)

    job = await queue.enqueue(ALICE, "compact", {}, idempotency_key="c1")
    # The first worker claims and dies before finishing: its lease simply runs out.
    assert await queue.claim("crashed", kinds=["compact"], lease_seconds=0.05) is not None
    survivor = Worker(queue, {"compact": compact}, worker_id="w2")
    assert await survivor.run_once() is False  # still leased to the dead worker
    await asyncio.sleep(0.1)
    assert await survivor.run_once() is True
    assert await survivor.run_once() is False
    assert runs == [job.id]
    done = await queue.get(ALICE, job.id)
    assert done is not None
    assert done.status == "done"
    assert done.attempts == 2


async def test_graceful_stop_finishes_the_current_job(queue: RedisJobQueue) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(job: Job) -> None:
        started.set()
        await release.wait()

    job = await queue.enqueue(ALICE, "slow", {}, idempotency_key="s1")
    stop = asyncio.Event()
    running = asyncio.create_task(Worker(queue, {"slow": slow}, poll_interval=0.01).run(stop))
    await started.wait()
    stop.set()
    release.set()
    await running
    done = await queue.get(ALICE, job.id)
    assert done is not None
    assert done.status == "done"


async def test_jobs_survive_a_restart_of_the_embedded_server(tmp_path: Path) -> None:
    server = EmbeddedFalkorDBServer(tmp_path)
    await server.start()
    try:
        queue = RedisJobQueue(server.url)
        await queue.start()
        queued = await queue.enqueue(ALICE, "extract", {"n": 1}, idempotency_key="b1")
        await queue.enqueue(ALICE, "extract", {"n": 2}, idempotency_key="b2")
        running = await queue.claim("w-before")
        assert running is not None
        assert running.id == queued.id
        await queue.complete(queued.id, "w-before")
        await queue.close()
        await server.close()

        await server.start()
        queue = RedisJobQueue(server.url)
        await queue.start()
        again = await queue.enqueue(ALICE, "extract", {"n": 1}, idempotency_key="b1")
        assert again.id == queued.id
        assert again.status == "done"
        claimed = await queue.claim("w-after")
        assert claimed is not None
        assert claimed.payload == {"n": 2}
        await queue.complete(claimed.id, "w-after")
        assert await queue.claim("w-after") is None
        await queue.close()
    finally:
        await server.close()
