"""Multi-hop search without a model: the ``decomposition`` and ``second_hop`` stages.

Evidence for a multi-hop question ("What do Melanie's kids like, and where did they go
camping?") is spread over turns that each share only part of the question's words, or
share words with each other rather than with the question. Two cheap full-text searches
reach such turns:

* ``decomposition`` (``decomposition_weight``): a question with several clauses (split at
  commas, semicolons and the conjunctions "and", "or", "but", "as well as") is also
  searched clause by clause, and each clause's best turn gets ``decomposition_weight``
  times the best fused score added, so it is in the results even when another clause's
  words dominate the whole question's ranking.
* ``second_hop`` (``second_hop_weight``, ``second_hop_sources``): the words of the best
  first-hop hits are searched again, so turns that continue what those hits talk about
  (the same trip, person or project, in another session) become candidates.

The second hop's list adds ``weight * (rrf_k + 1) / (rrf_k + rank)`` to a hit's fused
score (its first adds ``weight``, as a fused list does). The score ceiling grows to match.
Duplicates are collapsed as in the candidate lists when ``distinct_evidence`` is on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator

from memmachine.models import Episode
from memmachine.retrieval.pipeline import Search

__all__ = ["Decomposition", "SecondHop", "add_list", "add_scaled_list", "clauses"]

_SPLIT = re.compile(r"[,;]|\b(?:and|or|but|as well as)\b", re.IGNORECASE)
_WORD = re.compile(r"\w+")
#: Scores this close (relative and absolute) are one tie: float rounding, not a ranking.
_TIE = 1e-6


def clauses(query: str) -> list[str]:
    """The clauses of ``query`` with at least two words each; one clause or none means the
    query is not decomposed (the whole query is already searched)."""
    parts = [part.strip() for part in _SPLIT.split(query)]
    return [part for part in parts if len(_WORD.findall(part)) >= 2]


def add_list(
    search: Search, signal: str, ranked: list[tuple[Episode, float]], weight: float
) -> None:
    """Add one more ranked list to the fused scores, ``weight`` for its first; a hit's
    ``ranks[signal]`` is its best rank in the lists of that signal."""
    k = search.tuning.rrf_k

    def shares(hits: list[tuple[Episode, float]]) -> Iterator[tuple[int, float]]:
        rank, previous = 0, None
        for position, (_, score) in enumerate(hits, start=1):
            # Hits whose scores are equal up to float rounding share the first one's rank:
            # the stores compute cosine and BM25 in their own arithmetic, which orders such
            # ties differently, and on deep lists a swapped tie would change a hit's fused
            # score.
            if previous is None or not math.isclose(score, previous, rel_tol=_TIE, abs_tol=_TIE):
                rank = position
            previous = score
            yield rank, weight * (k + 1) / (k + rank)

    _fuse(search, signal, ranked, shares)


def add_scaled_list(
    search: Search,
    signal: str,
    ranked: list[tuple[Episode, float]],
    weight: float,
    floor: float,
) -> None:
    """Add one more list to the fused scores by score rather than rank: a hit adds
    ``weight * (score - floor) / (best - floor)`` (``best`` = the list's highest score), so
    its first adds ``weight`` and a hit at ``floor`` nothing; ``ranks[signal]`` is its
    position.

    For lists whose scores differ between the paths by float rounding (the engines compute
    cosine in their own float32 arithmetic, ~1e-6 apart): a hit's share then moves by about
    as much as its score, where a rank would jump whenever two scores cross, or cross a tie
    tolerance, on one path only. With ``floor`` the score at the depth the list was cut at,
    a hit that one path cuts and another keeps (a tie at the cut) adds next to nothing."""

    def shares(hits: list[tuple[Episode, float]]) -> Iterator[tuple[int, float]]:
        best = max((score for _, score in hits), default=floor)
        span = best - floor
        for position, (_, score) in enumerate(hits, start=1):
            yield position, weight * max(0.0, score - floor) / span if span > 0 else weight

    _fuse(search, signal, ranked, shares)


def _fuse(
    search: Search,
    signal: str,
    ranked: list[tuple[Episode, float]],
    shares: Callable[[list[tuple[Episode, float]]], Iterable[tuple[int, float]]],
) -> None:
    """Add ``ranked`` (duplicates collapsed first when ``distinct_evidence`` is on) to the
    fused scores: ``shares`` gives each hit of the collapsed list its rank and the share it
    adds, in order; a hit the results do not admit adds nothing but keeps its place."""
    if search.distinct is not None:
        # owners already chosen stay; a new piece of evidence is owned by its first copy here
        ranked = search.distinct.collapse(ranked)
    for (episode, _), (rank, share) in zip(ranked, shares(ranked), strict=True):
        if not search.admits(episode):
            continue
        search.by_id.setdefault(episode.id, episode)
        search.scores[episode.id] = search.scores.get(episode.id, 0.0) + share
        search.factors.setdefault(episode.id, 1.0)
        ranks = search.ranks.setdefault(episode.id, {})
        ranks[signal] = min(ranks.get(signal, rank), rank)


class Decomposition:
    """The best hit of each clause of a multi-clause query lifted (``decomposition_weight``)."""

    name = "decomposition"

    def applies(self, search: Search) -> bool:
        return (
            search.tuning.decomposition_weight > 0
            and bool(search.scores)
            and len(clauses(search.query)) > 1
        )

    async def run(self, search: Search) -> None:
        weight = search.tuning.decomposition_weight
        lift = weight * max(search.scores.values())
        for part in clauses(search.query):
            ranked = await search.store.fulltext_search(search.scope, part, 1)
            add_list(search, "clause", ranked[:1], lift)
        search.ceiling *= 1 + weight


class SecondHop:
    """The words of the best first-hop hits searched again (``second_hop_weight``,
    ``second_hop_sources``)."""

    name = "second_hop"

    def applies(self, search: Search) -> bool:
        return search.tuning.second_hop_weight > 0 and bool(search.scores)

    async def run(self, search: Search) -> None:
        tuning, scores = search.tuning, search.scores
        sources = sorted(scores, key=lambda key: -scores[key])[: tuning.second_hop_sources]
        text = " ".join(search.by_id[key].content for key in sources)
        ranked = await search.store.fulltext_search(search.scope, text, search.depth)
        chosen = set(sources)
        onward = [(episode, score) for episode, score in ranked if episode.id not in chosen]
        add_list(search, "second_hop", onward, tuning.second_hop_weight)
        search.ceiling *= 1 + tuning.second_hop_weight
