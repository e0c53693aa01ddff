"""The job queue port: durable background jobs with leases, retries and a dead list."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from memmachine.models import Scope, StoreHealth

__all__ = ["Job", "JobQueue", "JobQueueStats", "JobStatus"]


JobStatus = Literal["queued", "running", "done", "dead"]


class Job(BaseModel):
    """A unit of background work (extraction, compaction...) and its state."""

    id: str
    kind: str
    #: Who the work is for; API reads of jobs are confined to it like any other memory.
    scope: Scope
    payload: dict[str, Any] = Field(default_factory=dict)
    #: Enqueueing the same key again returns the existing job instead of adding one.
    idempotency_key: str
    status: JobStatus = "queued"
    attempts: int = 0
    max_attempts: int = 5
    last_error: str | None = None
    created_at: datetime
    updated_at: datetime
    #: A queued job is not claimed before this time (retry backoff).
    available_at: datetime
    #: The id of the request that enqueued the job (``X-Request-ID``), for its logs.
    request_id: str | None = None


class JobQueueStats(BaseModel):
    """What a queue holds right now, over every user: jobs waiting (``queued``, retries
    waiting out their backoff included), being run (``running``) and dead-lettered
    (``dead``)."""

    queued: int = 0
    running: int = 0
    dead: int = 0


@runtime_checkable
class JobQueue(Protocol):
    """A durable queue of background jobs with retries and a dead-letter list.

    Contract:

    * ``enqueue(scope, kind, payload, idempotency_key, max_attempts, delay_seconds)`` stores
      a queued job and returns it; a key already enqueued (in any status) returns that job
      unchanged. With ``delay_seconds`` > 0 the job is not claimable before that much time
      has passed (``available_at`` = now + delay). ``request_id`` (an id of
      :data:`memmachine.telemetry.REQUEST_ID_PATTERN`, or ``None``) is kept with the job and
      returned with it, so the worker's log lines for the job can name the request.
    * ``claim(worker, kinds, lease_seconds)`` hands one available queued job (oldest first,
      ``available_at`` passed) to ``worker`` as ``running``, with ``attempts`` + 1, or
      returns ``None``. A running job whose lease expired (its worker died) becomes
      claimable again: no job is lost when a worker crashes.
    * ``complete(job_id, worker)`` marks it ``done``; ``fail(job_id, worker, error)`` puts
      it back ``queued`` with exponential backoff and jitter, or ``dead`` after
      ``max_attempts``. Both are refused (``ConflictError``) when ``worker`` no longer holds
      the lease, so a job is never completed twice.
    * ``get(scope, job_id)`` returns the job only inside its user's scope; ``list_jobs``
      filters by status; ``replay(scope, job_id)`` requeues a dead job with attempts reset.
    * ``count_jobs(scope)`` counts the user's jobs by status: every status, 0 when none.
    * Retention: a done job may be removed after a retention time the adapter is
      configured with (then ``get``/``list_jobs`` no longer return it and its idempotency
      key is free again); queued and running jobs are never removed, and dead jobs stay
      until replayed or purged: ``purge_dead(scope, job_id=None)`` deletes that dead job
      of the user (``NotFoundError`` outside the user's scope, ``ConflictError`` when it
      is not dead), or every dead job of the user, and returns how many it deleted.
      ``purge_finished(scope, before)`` deletes the user's done and dead jobs (payloads
      with them) last updated before ``before`` and returns how many (the retention
      sweep's, for a tenant's ``jobs_max_age_days``); queued and running jobs stay.
    * ``forget(scope)`` deletes every job of the scope's user, in any status (a payload or
      an error may hold what the user sent), or only those of ``scope.session_id`` when it
      is set; returns how many. A worker still running a forgotten job has its
      ``complete``/``fail`` refused with ``NotFoundError``.
    * ``stats()`` counts the queue's jobs by status over every user (a
      :class:`JobQueueStats`; done jobs are not counted), for monitoring. It reads counters,
      not the jobs: its cost does not grow with the queue.
    * Jobs survive a restart of the process and of the backing store's server when it
      persists (the embedded server does).
    """

    name: str
    kind: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def health(self) -> StoreHealth: ...
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
    ) -> Job: ...
    async def claim(
        self, worker: str, *, kinds: Sequence[str] | None = None, lease_seconds: float = 60.0
    ) -> Job | None: ...
    async def complete(self, job_id: str, worker: str) -> Job: ...
    async def fail(self, job_id: str, worker: str, error: str) -> Job: ...
    async def get(self, scope: Scope, job_id: str) -> Job | None: ...
    async def list_jobs(
        self, scope: Scope, *, status: JobStatus | None = None, limit: int = 100
    ) -> list[Job]: ...
    async def replay(self, scope: Scope, job_id: str) -> Job: ...
    async def count_jobs(self, scope: Scope) -> dict[JobStatus, int]: ...
    async def purge_dead(self, scope: Scope, job_id: str | None = None) -> int: ...
    async def purge_finished(self, scope: Scope, before: datetime) -> int: ...
    async def forget(self, scope: Scope) -> int: ...
    async def stats(self) -> JobQueueStats: ...
