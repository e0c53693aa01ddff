"""Queueing background jobs for the memory services: compaction, extraction and
distillation of procedures.

A write never fails, nor noticeably slows, because of the queue: the jobs a write earns are
queued with a short timeout, and a queue that is down or slow is logged and skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Sequence
from typing import Any

from memmachine.config import ExtractionSettings
from memmachine.errors import StoreUnavailableError
from memmachine.memory.common import require_session
from memmachine.models import Episode, Scope
from memmachine.ports import Job, JobQueue, LanguageModel
from memmachine.safety.gate import WriteGate

__all__ = ["ENQUEUE_TIMEOUT_SECONDS", "JobScheduler"]

log = logging.getLogger("memmachine.manager")

#: How long a write waits for a job it earned to be queued before giving up on it.
ENQUEUE_TIMEOUT_SECONDS = 1.0


class JobScheduler:
    """Puts ``compact`` and ``extract`` jobs on the queue (``None`` = background jobs off,
    for ``off_reason``)."""

    def __init__(
        self,
        queue: JobQueue | None,
        gate: WriteGate,
        *,
        off_reason: str,
        max_attempts: int,
        language_model: LanguageModel | None,
        extraction: ExtractionSettings,
    ) -> None:
        self.queue = queue
        self.off_reason = "" if queue is not None else off_reason
        self.max_attempts = max_attempts
        self.language_model = language_model
        self.extraction = extraction
        self._gate = gate

    def _queue(self) -> JobQueue:
        if self.queue is None:
            raise StoreUnavailableError(f"background jobs are off: {self.off_reason}", store="jobs")
        return self.queue

    async def enqueue_compaction(
        self,
        scope: Scope,
        *,
        force: bool = False,
        idempotency_key: str | None = None,
        idle: bool = False,
        delay_seconds: float = 0.0,
    ) -> Job:
        """Queue a ``compact`` job for ``scope``'s session (see
        :mod:`memmachine.pipeline.compaction`).

        ``idle`` makes it an inactivity check: when it runs, the session is compacted only
        if nothing was written to it for ``compaction.idle_seconds``. Without
        ``idempotency_key`` every call queues a new job. Raises ``StoreUnavailableError``
        when the job queue is off."""
        queue = self._queue()
        scope = require_session(scope)
        key = idempotency_key or f"compact:{scope.session_id}:{uuid.uuid4().hex}"
        payload: dict[str, Any] = {"force": force}
        if idle:
            payload["idle"] = True
        return await queue.enqueue(
            scope,
            "compact",
            self._gate.job_payload(payload),
            idempotency_key=key,
            max_attempts=self.max_attempts,
            delay_seconds=delay_seconds,
        )

    async def enqueue_extraction(
        self, scope: Scope, episode_ids: Sequence[str], *, idempotency_key: str | None = None
    ) -> Job:
        """Queue an ``extract`` job over ``episode_ids`` (see
        :mod:`memmachine.pipeline.extraction`). Raises ``StoreUnavailableError`` when the job
        queue is off."""
        queue = self._queue()
        scope = require_session(scope)
        ids = list(episode_ids)
        key = idempotency_key or "extract:" + hashlib.sha256("\n".join(ids).encode()).hexdigest()
        return await queue.enqueue(
            scope,
            "extract",
            self._gate.job_payload({"episode_ids": ids}),
            idempotency_key=key,
            max_attempts=self.max_attempts,
        )

    async def enqueue_distillation(self, scope: Scope) -> Job | None:
        """Queue a ``distill`` job for ``scope``'s session (see
        :mod:`memmachine.pipeline.distillation`), once per session; ``None`` when the job
        queue or the language model is off."""
        if self.queue is None or self.language_model is None:
            return None
        scope = require_session(scope)
        return await self.queue.enqueue(
            scope,
            "distill",
            self._gate.job_payload({"session_id": scope.session_id}),
            idempotency_key=f"distill:{scope.user_id}:{scope.session_id}",
            max_attempts=self.max_attempts,
        )

    async def extract_later(self, scope: Scope, episodes: Sequence[Episode]) -> None:
        """After a write: queue one ``extract`` job over the new episodes when a language
        model and the job queue are on. Never fails the write: errors are logged. The job
        is known by the episodes as stored (id and when they were stored): a retry that
        completes an earlier add queues nothing more, while a message stored anew under
        the id of an episode removed before (expired, or forgotten) is extracted again."""
        if (
            self.queue is None
            or self.language_model is None
            or not self.extraction.enabled
            or not episodes
        ):
            return
        stored = "\n".join(f"{e.id} {e.created_at.isoformat()}" for e in episodes)
        key = "extract:" + hashlib.sha256(stored.encode()).hexdigest()
        await self.quietly(
            scope,
            "extraction",
            self.enqueue_extraction(
                scope, [episode.id for episode in episodes], idempotency_key=key
            ),
        )

    async def quietly(self, scope: Scope, what: str, enqueue: Awaitable[Job]) -> None:
        """Await ``enqueue`` for at most :data:`ENQUEUE_TIMEOUT_SECONDS`; log a failure."""
        try:
            async with asyncio.timeout(ENQUEUE_TIMEOUT_SECONDS):
                await enqueue
        except Exception as exc:  # the write has succeeded; the job can wait
            log.warning(
                "could not queue the %s of session %s: %s",
                what,
                scope.session_id,
                getattr(exc, "message", None) or type(exc).__name__,
            )
