"""What one search's stages did: the per-search control a caller hands the pipeline.

A :class:`StageControl` is made for one search and passed down with it (it is never kept
between searches, so nothing a request asks for outlives the request). It carries

* ``off``: the names of stages this search skips (the other searches are not touched);
* ``explain``: whether to record, for this search, how long each stage took
  (:attr:`StageControl.runs`) and, for every hit returned, how the stages moved it
  (:attr:`StageControl.hits`).

The record needs nothing from the stages themselves: after each stage the pipeline hands
the control the search's standing (the scored candidates in score order, or the hits once
a stage has made them, and each candidate's boost factor), and the control compares it with
the standing before. So a new stage is timed, can be switched off by name and shows up in
every hit's steps without a line of its own here.

A hit's ``sources`` name the signals that found it: ``dense`` (vector similarity),
``lexical`` (full-text), ``neighbour`` (a neighbour of a better hit), ``expansion`` (added
as context around a hit), and the name of any other rank a stage gives it.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from memmachine.models import EpisodeHit

__all__ = ["HitStep", "HitTrace", "StageControl", "StageRun", "Standing"]

#: The rank names of the built-in signals, as a user calls them.
_SOURCES = {"vector": "dense", "fulltext": "lexical", "neighbour": "neighbour"}
#: Ranks that order hits without finding them.
_NOT_SOURCES = frozenset({"rerank"})


class Standing(Protocol):
    """What the control reads of a search after each stage
    (:class:`~memmachine.retrieval.pipeline.Search` has it)."""

    scores: dict[str, float]
    factors: dict[str, float]
    hits: list[EpisodeHit]


@dataclass(frozen=True)
class StageRun:
    """One stage of one search: whether it ran (``switched_off``: the request skipped it;
    neither: it had nothing to do, e.g. its setting is 0), how long it took, and whether a
    request may switch it off (``switchable``)."""

    name: str
    ran: bool
    switched_off: bool
    seconds: float
    switchable: bool = True


@dataclass(frozen=True)
class HitStep:
    """What one stage that ran did to one candidate: its rank (1-based, ``None`` when it
    was not a candidate) and score before and after, and the boost factor the stage
    multiplied in (``None`` when it applied none)."""

    stage: str
    rank_before: int | None
    rank_after: int | None
    score_before: float | None
    score_after: float | None
    boost: float | None = None


@dataclass
class HitTrace:
    """How one hit got where it is: the signals that found it, the stage after which it
    stood among the candidates for good (a hit cut and brought back names the stage that
    brought it back), and one step per stage that changed its standing."""

    entered: str
    sources: list[str] = field(default_factory=list)
    steps: list[HitStep] = field(default_factory=list)


#: rank (1-based), score, boost factor of each candidate.
_Snapshot = dict[str, tuple[int, float, float]]


class StageControl:
    """Stages switched off and, with ``explain``, the record of one search (see the module
    docstring). Which names are valid is the pipeline's to check."""

    def __init__(self, off: Collection[str] = (), *, explain: bool = False) -> None:
        self.off = frozenset(off)
        self.explain = explain
        #: Every stage of the pipeline, in order (with ``explain``).
        self.runs: list[StageRun] = []
        #: How each returned hit got there, by episode id (with ``explain``).
        self.hits: dict[str, HitTrace] = {}
        self._standing: _Snapshot = {}
        self._traces: dict[str, HitTrace] = {}

    def skipped(self, name: str, *, switchable: bool = True) -> None:
        """The stage ``name`` did not run (switched off when it is in ``off``)."""
        if self.explain:
            off = name in self.off
            self.runs.append(StageRun(name, False, off, 0.0, switchable))

    @contextmanager
    def running(self, name: str, search: Standing, *, switchable: bool = True) -> Iterator[None]:
        """Around the stage ``name`` working on ``search``: times it and records what it
        changed (with ``explain``; else does nothing)."""
        if not self.explain:
            yield
            return
        started = time.perf_counter()
        yield
        self.runs.append(StageRun(name, True, False, _since(started), switchable))
        self._compare(name, _snapshot(search))

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Time work done for the search outside the pipeline (embedding the query)."""
        started = time.perf_counter()
        yield
        if self.explain:
            self.runs.append(StageRun(name, True, False, _since(started), switchable=False))

    def finish(self, hits: Sequence[EpisodeHit]) -> None:
        """Keep the traces of the hits returned, with the signals that found each."""
        if not self.explain:
            return
        for hit in hits:
            key = hit.episode.id
            trace = self._traces.get(key) or HitTrace(entered=self.runs[-1].name)
            trace.sources = _sources(hit.ranks, hit.context)
            self.hits[key] = trace

    def _compare(self, stage: str, after: _Snapshot) -> None:
        before = self._standing
        for key in before.keys() | after.keys():
            old, new = before.get(key), after.get(key)
            if old == new:
                continue
            trace = self._traces.get(key)
            if trace is None:
                trace = self._traces[key] = HitTrace(entered=stage)
            elif old is None:
                trace.entered = stage  # cut by an earlier stage, brought back by this one
            factor = (new[2] / old[2]) if old and new and old[2] > 0 else None
            trace.steps.append(
                HitStep(
                    stage=stage,
                    rank_before=old[0] if old else None,
                    rank_after=new[0] if new else None,
                    score_before=old[1] if old else None,
                    score_after=new[1] if new else None,
                    boost=factor if factor is not None and factor != 1.0 else None,
                )
            )
        self._standing = after


def _snapshot(search: Standing) -> _Snapshot:
    """Each candidate's rank, score and boost factor: the hits once there are any, else the
    scored candidates best first (equal scores in their order, as ranking keeps them)."""
    factors = search.factors
    if search.hits:
        ordered = [(hit.episode.id, hit.score) for hit in search.hits]
    else:
        scores = search.scores
        ordered = [(key, scores[key]) for key in sorted(scores, key=lambda key: -scores[key])]
    return {
        key: (rank, score, factors.get(key, 1.0)) for rank, (key, score) in enumerate(ordered, 1)
    }


def _sources(ranks: Mapping[str, int], context: bool) -> list[str]:
    found = [_SOURCES.get(name, name) for name in ranks if name not in _NOT_SOURCES]
    return [*found, "expansion"] if context else found


def _since(started: float) -> float:
    return time.perf_counter() - started
