"""The job handlers of a manager, by job kind: what a worker runs.

* ``compact``: :func:`memmachine.compaction.compact_session` on the job's session; the
  payload's ``force`` compacts even under the thresholds. A session compacted meanwhile
  (or under its thresholds) makes the job a no-op, so running it again is harmless.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from memmachine.compaction import compact_session
from memmachine.jobs.worker import Handler
from memmachine.ports import Job

if TYPE_CHECKING:
    from memmachine.manager import MemoryManager

__all__ = ["handlers_for"]

log = logging.getLogger("memmachine.jobs")


def handlers_for(manager: MemoryManager) -> dict[str, Handler]:
    """``{kind: handler}`` for every job kind ``manager`` can run."""

    async def compact(job: Job) -> None:
        result = await compact_session(manager, job.scope, force=bool(job.payload.get("force")))
        log.info("job %s: session %s: %s", job.id, result.session_id, result.reason)

    return {"compact": compact}
