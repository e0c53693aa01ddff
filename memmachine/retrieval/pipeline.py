"""Episode search as a pipeline of named stages.

A :class:`Search` carries one query through the stages; :class:`SearchPipeline` runs them in
order, each only when it applies (its setting in :class:`~memmachine.config.RetrievalSettings`
is on and there is something for it to do). The stages themselves are in
:mod:`memmachine.retrieval.stages`; :data:`~memmachine.retrieval.stages.STAGES` is the one
place that composes them.

Each stage is an object with a ``name``, so whatever wants to look inside a search passes a
:class:`~memmachine.stage_observer.StageObserver` to :meth:`SearchPipeline.run`: every stage
that runs does so inside ``observer.stage(name)`` (the composition root passes the process's
telemetry, which times each stage into ``memmachine_search_stage_duration_seconds`` and
traces it as a span). Which signals found a hit is in its ``ranks`` (``vector``,
``fulltext``, ``neighbour``, ``rerank``).

A search may also be given a :class:`~memmachine.retrieval.explain.StageControl`: the stages
it names in ``off`` are skipped for that search alone (:meth:`SearchPipeline.check` refuses
an unknown or essential name first), and with ``explain`` it records each stage's time and
how each stage moved each hit. A stage with ``essential = True`` (the candidates, their
fusion, the ranking) cannot be switched off: there would be no hits without it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from memmachine.config import RetrievalSettings
from memmachine.errors import InvalidInputError
from memmachine.models import Episode, EpisodeHit, Scope
from memmachine.ports import Embedder, EpisodeStore, Reranker, embed_queries
from memmachine.retrieval.evidence import DistinctEvidence
from memmachine.retrieval.explain import StageControl
from memmachine.stage_observer import StageObserver

__all__ = ["Search", "SearchPipeline", "Stage", "embed_beside"]


async def embed_beside(
    embedder: Embedder, texts: Sequence[str], pending: asyncio.Future[Any]
) -> list[list[float]]:
    """The query ``texts``' vectors (:func:`~memmachine.ports.embed_queries`) while
    ``pending`` (a store search already started) runs on; when embedding fails, ``pending``
    is cancelled and awaited before the error goes up, so no search is left running for a
    request that has failed."""
    try:
        return await embed_queries(embedder, texts)
    except BaseException:
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        raise


@dataclass
class Search:
    """One episode search on its way through the stages.

    The request (``scope`` ... ``query_vector``) and what serves it (``store`` ...
    ``tuning``) are set when it starts; the stages fill in the rest: the candidate lists of
    each signal, every candidate by id, the fused ``scores`` and per-signal ``ranks``, the
    boost ``factors`` and ``ceiling`` (the largest factor any hit could have had, which
    scales scores back into [0, 1]), ``distinct`` (which episode stands for each piece of
    evidence, when duplicates are collapsed) and finally ``hits``."""

    scope: Scope
    query: str
    top_k: int
    expand_context: int
    query_vector: Sequence[float] | None
    store: EpisodeStore
    embedder: Embedder | None
    reranker: Reranker | None
    tuning: RetrievalSettings
    dense: list[tuple[Episode, float]] = field(default_factory=list)
    fulltext: list[tuple[Episode, float]] = field(default_factory=list)
    by_id: dict[str, Episode] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    ranks: dict[str, dict[str, int]] = field(default_factory=dict)
    factors: dict[str, float] = field(default_factory=dict)
    ceiling: float = 1.0
    distinct: DistinctEvidence | None = None
    hits: list[EpisodeHit] = field(default_factory=list)
    #: The hits each candidate list holds past ``depth``, when the candidates were fetched
    #: deeper for the ``duplicates`` stage (each signal's search is asked once).
    dense_reserve: list[tuple[Episode, float]] = field(default_factory=list)
    fulltext_reserve: list[tuple[Episode, float]] = field(default_factory=list)

    @property
    def depth(self) -> int:
        """How many candidates each signal contributes."""
        tuning = self.tuning
        return max(tuning.min_candidates, self.top_k * tuning.candidates_per_result)

    @property
    def fetch_depth(self) -> int:
        """How deep each signal is searched: twice ``depth`` when duplicates are collapsed,
        so that a list in which duplicates took some of the depth needs no second search."""
        return 2 * self.depth if self.tuning.distinct_evidence else self.depth

    def candidates(self) -> list[Episode]:
        """The scored candidates, in the order of ``scores``."""
        return [self.by_id[key] for key in self.scores]

    def admits(self, episode: Episode) -> bool:
        """Whether ``episode`` may join the results: always, unless it duplicates evidence
        another episode already stands for."""
        return self.distinct is None or self.distinct.admits(episode)

    def newest(self) -> datetime:
        """The time of the newest scored candidate (there must be one)."""
        return max(self.by_id[key].timestamp for key in self.scores)


class Stage(Protocol):
    """One step of a search. A stage the search cannot do without also sets
    ``essential = True`` (read with a default of ``False``): a request cannot switch it off."""

    #: Short and stable: traces and metrics are keyed by it.
    name: str

    def applies(self, search: Search) -> bool:
        """Whether the stage has work to do (its setting is on, there are candidates)."""
        ...

    async def run(self, search: Search) -> None:
        """Do the stage's work on ``search`` in place."""
        ...


class SearchPipeline:
    """Runs ``stages`` in order over a :class:`Search`; see the module docstring."""

    def __init__(self, stages: Sequence[Stage]) -> None:
        self.stages = tuple(stages)

    def names(self) -> list[str]:
        """The stages' names, in the order they run."""
        return [stage.name for stage in self.stages]

    def switchable(self) -> list[str]:
        """The names of the stages a request may switch off, in the order they run."""
        return [stage.name for stage in self.stages if not getattr(stage, "essential", False)]

    def check(self, control: StageControl) -> None:
        """Refuse (``InvalidInputError``, field ``stages_off``) a stage name in
        ``control.off`` that is not one of :meth:`switchable`."""
        allowed = self.switchable()
        for name in sorted(control.off):
            if name not in allowed:
                why = "is essential" if name in self.names() else "is not a stage"
                raise InvalidInputError(
                    f"stage {name!r} {why}; stages that can be switched off: " + ", ".join(allowed),
                    field="stages_off",
                )

    async def run(
        self,
        search: Search,
        observer: StageObserver | None = None,
        control: StageControl | None = None,
    ) -> list[EpisodeHit]:
        """The hits of ``search``, best first; each stage that runs does so inside
        ``observer.stage(name)``, and ``control`` may switch stages off and record them."""
        control = control or StageControl()
        for stage in self.stages:
            switchable = not getattr(stage, "essential", False)
            if stage.name in control.off or not stage.applies(search):
                control.skipped(stage.name, switchable=switchable)
                continue
            with control.running(stage.name, search, switchable=switchable):
                if observer is None:
                    await stage.run(search)
                    continue
                with observer.stage(stage.name):
                    await stage.run(search)
        control.finish(search.hits)
        return search.hits
