"""The ``duplicates`` stage: candidate lists collapsed to distinct evidence (see
:mod:`memmachine.retrieval.evidence` for what counts as the same evidence)."""

from __future__ import annotations

from memmachine.retrieval.evidence import DistinctEvidence, Ranked
from memmachine.retrieval.pipeline import Search

__all__ = ["Duplicates"]


class Duplicates:
    """The candidate lists collapsed to distinct evidence (``distinct_evidence``): each
    piece of evidence once, as the episode stored first at its own rank (a copy is dropped,
    never stands in for it); a full list that held duplicates is read on, twice as deep, so
    it keeps ``depth`` distinct candidates. The candidates stage fetched that depth at once
    (``Search.fetch_depth``), so no signal is searched twice."""

    name = "duplicates"

    def applies(self, search: Search) -> bool:
        return search.tuning.distinct_evidence and bool(search.dense or search.fulltext)

    async def run(self, search: Search) -> None:
        depth = search.depth
        dense, fulltext = search.dense, search.fulltext
        distinct = DistinctEvidence()

        def short(ranked: Ranked) -> bool:
            # a full list in which duplicates took some of the depth
            return len(ranked) >= depth and distinct.distinct(ranked) < len(ranked)

        if short(dense):
            dense = dense + search.dense_reserve
        if short(fulltext):
            fulltext = fulltext + search.fulltext_reserve
        distinct.register([episode for episode, _ in [*dense, *fulltext]])
        search.distinct = distinct
        search.dense = distinct.collapse(dense)[:depth]
        search.fulltext = distinct.collapse(fulltext)[:depth]
        for episode, _ in [*search.dense, *search.fulltext]:
            search.by_id.setdefault(episode.id, episode)
