"""The worker: claims jobs from a :class:`~memmachine.ports.JobQueue` and runs their handlers.

One handler per job kind. A handler that returns completes the job; one that raises fails
it with the error's text (a :class:`ModelOutputError` adds the model's raw reply, truncated),
and the queue retries it with backoff or parks it as dead. The lease is not renewed: a
handler must finish within ``lease_seconds``, or the job is handed to another worker (and
this worker's ``complete`` is refused). A worker that dies mid-job therefore loses nothing:
its job is claimed again once the lease passes.

``run(stop)`` polls until ``stop`` is set; a job already started is finished (and completed
or failed) before it returns. Cancelling ``run`` instead abandons the jobs in hand to their
leases.

While a job runs, the id of the request that enqueued it is the current request id
(:func:`memmachine.telemetry.bind_request_id`), so every log line of the job names that
request. With ``telemetry`` each attempt is a span ``job.<kind>`` (the parent of the store
and model calls it makes) and is counted by kind and outcome: ``done``, ``retry`` (failed,
queued again) or ``dead`` (failed for the last time).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping

from memmachine.errors import ConflictError, InvalidInputError, ModelOutputError, StoreError
from memmachine.ports import Job, JobQueue
from memmachine.telemetry import AttributeValue, Telemetry, bind_request_id

__all__ = ["Handler", "Worker", "describe_failure"]

log = logging.getLogger("memmachine.jobs")

Handler = Callable[[Job], Awaitable[None]]
"""Does the work of one job; raising fails the attempt."""

_MAX_ERROR_CHARS = 4_000
_MAX_RAW_CHARS = 2_000


def describe_failure(exc: BaseException) -> str:
    """The text recorded as a job's ``last_error``: type and message, plus the raw reply of
    a model that answered unusably, bounded in length."""
    text = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, ModelOutputError) and exc.raw is not None:
        raw = exc.raw if len(exc.raw) <= _MAX_RAW_CHARS else exc.raw[:_MAX_RAW_CHARS] + "…"
        text = f"{text[: _MAX_ERROR_CHARS - len(raw) - 20]}\nraw reply: {raw}"
    return text[:_MAX_ERROR_CHARS]


class Worker:
    """Runs the jobs of the kinds in ``handlers`` from ``queue``, ``concurrency`` at a time."""

    def __init__(
        self,
        queue: JobQueue,
        handlers: Mapping[str, Handler],
        *,
        worker_id: str | None = None,
        concurrency: int = 1,
        poll_interval: float = 0.5,
        lease_seconds: float = 60.0,
        telemetry: Telemetry | None = None,
    ) -> None:
        if not handlers:
            raise InvalidInputError("a worker needs at least one handler", field="handlers")
        if concurrency < 1:
            raise InvalidInputError(f"concurrency must be >= 1, got {concurrency}")
        if poll_interval <= 0 or lease_seconds <= 0:
            raise InvalidInputError("poll_interval and lease_seconds must be > 0")
        self._queue = queue
        self._handlers = dict(handlers)
        self._kinds = sorted(self._handlers)
        self.worker_id = worker_id or (
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        )
        self._concurrency = concurrency
        self._poll_interval = poll_interval
        self._lease_seconds = lease_seconds
        self._telemetry = telemetry or Telemetry()

    async def run_once(self) -> bool:
        """Claim one job and run it to completion or failure; ``False`` when none was
        available. Queue errors (store down, lost lease) propagate."""
        job = await self._queue.claim(
            self.worker_id, kinds=self._kinds, lease_seconds=self._lease_seconds
        )
        if job is None:
            return False
        with bind_request_id(job.request_id):
            await self._run_job(job)
        return True

    async def _run_job(self, job: Job) -> None:
        handler = self._handlers[job.kind]
        started = time.perf_counter()
        attributes: dict[str, AttributeValue] = {
            "memmachine.job_id": job.id,
            "memmachine.attempt": job.attempts,
        }
        with self._telemetry.span(f"job.{job.kind}", attributes):
            try:
                await handler(job)
            except Exception as exc:
                error = describe_failure(exc)
                failed = await self._queue.fail(job.id, self.worker_id, error)
                outcome = "dead" if failed.status == "dead" else "retry"
                self._telemetry.job_finished(job.kind, outcome, time.perf_counter() - started)
                log.warning(
                    "job %s (%s) attempt %d/%d failed, now %s: %s",
                    job.id,
                    job.kind,
                    job.attempts,
                    job.max_attempts,
                    failed.status,
                    error.splitlines()[0] if error else "",
                )
                return
            await self._queue.complete(job.id, self.worker_id)
        self._telemetry.job_finished(job.kind, "done", time.perf_counter() - started)
        log.info("job %s (%s) done after %d attempt(s)", job.id, job.kind, job.attempts)

    async def run(self, stop: asyncio.Event) -> None:
        """Run jobs until ``stop`` is set; jobs in hand are finished first."""
        async with asyncio.TaskGroup() as group:
            for _ in range(self._concurrency):
                group.create_task(self._loop(stop))

    async def _loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                worked = await self.run_once()
            except ConflictError as exc:
                log.warning("worker %s lost a job's lease: %s", self.worker_id, exc.message)
                continue
            except StoreError as exc:
                log.warning("worker %s: job queue failed: %s", self.worker_id, exc.message)
                worked = False
            if not worked:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self._poll_interval)
