"""The job handlers of a manager, by job kind: what a worker runs.

* ``compact``: :func:`memmachine.pipeline.compaction.compact_session` on the job's session; the
  payload's ``force`` compacts even under the thresholds, ``idle`` runs
  :func:`memmachine.pipeline.compaction.compact_if_idle` instead (the inactivity trigger). A session
  compacted meanwhile (or under its thresholds) makes the job a no-op, so running it again
  is harmless.
* ``extract``: :func:`memmachine.pipeline.extraction.extract_from_episodes` over the payload's
  ``episode_ids``. Running it again re-reads the same episodes; a fact already stored with
  the same value is corroborated, never stored twice.
* ``distill``: :func:`memmachine.pipeline.distillation.distill_session` on the job's session
  (reported successful). Running it again corroborates the procedures it stored, never
  stores them twice.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from memmachine.pipeline.compaction import compact_if_idle, compact_session
from memmachine.pipeline.distillation import distill_session
from memmachine.pipeline.extraction import extract_from_episodes
from memmachine.pipeline.worker import Handler
from memmachine.ports import Job

if TYPE_CHECKING:
    from memmachine.manager import MemoryManager

__all__ = ["handlers_for"]

log = logging.getLogger("memmachine.jobs")


def handlers_for(manager: MemoryManager) -> dict[str, Handler]:
    """``{kind: handler}`` for every job kind ``manager`` can run."""

    async def compact(job: Job) -> None:
        if job.payload.get("idle"):
            result = await compact_if_idle(manager, job.scope)
        else:
            result = await compact_session(manager, job.scope, force=bool(job.payload.get("force")))
        log.info("job %s: session %s: %s", job.id, result.session_id, result.reason)

    async def extract(job: Job) -> None:
        ids = [str(item) for item in job.payload.get("episode_ids") or []]
        result = await extract_from_episodes(manager, job.scope, ids)
        log.info(
            "job %s: %d episodes, %d facts: %d created, %d updated, %d invalidated",
            job.id,
            result.episodes,
            result.extracted,
            result.created,
            result.updated,
            result.invalidated,
        )

    async def distill(job: Job) -> None:
        result = await distill_session(
            manager.language_model, manager.episodes, manager.procedural_service, job.scope
        )
        log.info(
            "job %s: %d episodes, %d procedures: %d created, %d superseded, %d corroborated, "
            "%d refused",
            job.id,
            result.episodes,
            result.distilled,
            result.created,
            result.superseded,
            result.corroborated,
            result.refused,
        )

    return {"compact": compact, "extract": extract, "distill": distill}
