"""The compactors a forget runs (:mod:`memmachine.memory.erasure`): one per Redis-protocol
server behind the episode store, working memory and job queue (the embedded server counts
once), within ``MEMMACHINE_FORGET_COMPACTION_SECONDS`` of a forget or of a retention sweep
that erased anything."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memmachine.config import Settings

if TYPE_CHECKING:
    from memmachine.bootstrap.observability import StoreParts
    from memmachine.manager import MemoryManager

__all__ = ["attach_compactors"]


def attach_compactors(
    settings: Settings,
    manager: MemoryManager,
    raw: StoreParts,
) -> None:
    """Give ``manager.erasure`` its delay and a compactor for every server of ``raw``'s
    stores that keeps deleted bytes on disk, each server once."""
    erasure = manager.erasure
    erasure.delay_seconds = settings.forget_compaction_seconds
    # a retention sweep erases too: it asks for the same compaction
    manager.retention.compaction = erasure
    seen: set[str] = set()
    stores: list[Any] = [raw.episodes, raw.working, raw.jobs, raw.profile]
    for store in stores:
        make = getattr(store, "compactor", None)
        if make is None:
            continue
        compactor = make()
        where = compactor.where
        if where not in seen:
            seen.add(where)
            erasure.add(compactor)
