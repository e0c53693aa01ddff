"""The hook a retrieval pipeline calls around each of its named stages.

A pipeline that wants its stages measured takes a :class:`StageObserver` and runs every stage
inside ``with observer.stage("<stage name>"):``. The observer the composition root passes
(:class:`memmachine.telemetry.Telemetry`) times the stage into the
``memmachine_search_stage_duration_seconds`` histogram (label ``stage``) and, with tracing on,
opens a span ``stage.<name>`` under the search's span. Stages that run concurrently (the
full-text part while the query is embedded) each use their own ``with`` block; the spans and
timings stay separate.

Stage names are names from code (``"embed_query"``, ``"vector"``, ``"fulltext"``,
``"fuse"``, ``"rerank"``, ``"expand"``...), never user input: they become label values.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Protocol, runtime_checkable

__all__ = ["NoStageObserver", "StageObserver"]


@runtime_checkable
class StageObserver(Protocol):
    """Measures one stage of a search: ``with observer.stage(name): ...``.

    Contract: ``stage(name)`` returns a context manager that never raises on entry or exit
    for its own reasons; an exception raised inside the block passes through unchanged (and
    is recorded against the stage). ``name`` is a fixed name from code."""

    def stage(self, name: str) -> AbstractContextManager[None]: ...


class NoStageObserver:
    """A :class:`StageObserver` that measures nothing (the default of a pipeline)."""

    def stage(self, name: str) -> AbstractContextManager[None]:
        return nullcontext()
