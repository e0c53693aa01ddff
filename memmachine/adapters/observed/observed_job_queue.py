""":class:`ObservedJobQueue`: any job queue, timed and traced per call, and the request id of
whoever enqueues a job kept with it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memmachine.adapters.observed.observed import Observed
from memmachine.models import Scope, StoreHealth
from memmachine.ports import Job, JobQueue, JobQueueStats, JobStatus
from memmachine.telemetry import Telemetry, current_request_id

__all__ = ["ObservedJobQueue"]


class ObservedJobQueue(Observed[JobQueue]):
    """A :class:`~memmachine.ports.JobQueue` that passes every call to ``inner`` and reports
    it (see :mod:`memmachine.adapters.observed.observed`). ``enqueue`` without a ``request_id`` gets
    the current one (:func:`memmachine.telemetry.current_request_id`), so a job enqueued
    while a request is served names that request."""

    def __init__(self, inner: JobQueue, telemetry: Telemetry) -> None:
        super().__init__(inner, telemetry, "store")

    async def health(self) -> StoreHealth:
        return await self._inner.health()

    async def enqueue(
        self,
        scope: Scope,
        kind: str,
        payload: dict[str, Any],
        *,
        idempotency_key: str,
        max_attempts: int = 5,
        delay_seconds: float = 0.0,
        request_id: str | None = None,
    ) -> Job:
        with self._call("enqueue"):
            return await self._inner.enqueue(
                scope,
                kind,
                payload,
                idempotency_key=idempotency_key,
                max_attempts=max_attempts,
                delay_seconds=delay_seconds,
                request_id=request_id or current_request_id(),
            )

    async def claim(
        self, worker: str, *, kinds: Sequence[str] | None = None, lease_seconds: float = 60.0
    ) -> Job | None:
        # Idle workers poll: a span per poll would drown the traces.
        with self._call("claim", span=False):
            return await self._inner.claim(worker, kinds=kinds, lease_seconds=lease_seconds)

    async def complete(self, job_id: str, worker: str) -> Job:
        with self._call("complete"):
            return await self._inner.complete(job_id, worker)

    async def fail(self, job_id: str, worker: str, error: str) -> Job:
        with self._call("fail"):
            return await self._inner.fail(job_id, worker, error)

    async def get(self, scope: Scope, job_id: str) -> Job | None:
        with self._call("get"):
            return await self._inner.get(scope, job_id)

    async def list_jobs(
        self, scope: Scope, *, status: JobStatus | None = None, limit: int = 100
    ) -> list[Job]:
        with self._call("list_jobs"):
            return await self._inner.list_jobs(scope, status=status, limit=limit)

    async def replay(self, scope: Scope, job_id: str) -> Job:
        with self._call("replay"):
            return await self._inner.replay(scope, job_id)

    async def count_jobs(self, scope: Scope) -> dict[JobStatus, int]:
        with self._call("count_jobs"):
            return await self._inner.count_jobs(scope)

    async def purge_dead(self, scope: Scope, job_id: str | None = None) -> int:
        with self._call("purge_dead"):
            return await self._inner.purge_dead(scope, job_id)

    async def purge_finished(self, scope: Scope, before: datetime) -> int:
        with self._call("purge_finished"):
            return await self._inner.purge_finished(scope, before)

    async def forget(self, scope: Scope) -> int:
        with self._call("forget"):
            return await self._inner.forget(scope)

    async def stats(self) -> JobQueueStats:
        with self._call("stats", span=False):
            return await self._inner.stats()
