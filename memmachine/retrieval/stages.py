"""The stages of episode search, in the order :data:`STAGES` runs them.

1. ``candidates``: dense similarity (an episode scores the best of its own vector and its
   derivative vectors, with ``sentence_derivatives``) and full-text BM25 over the episode's
   indexed text, each ``max(min_candidates, top_k * candidates_per_result)`` deep; the
   full-text search runs while the query is embedded.
2. ``duplicates`` (``distinct_evidence``): the candidate lists collapsed so that each
   piece of evidence (the same words said by the same producer, see
   :mod:`memmachine.retrieval.evidence`) appears once, as the episode stored first; a full
   list that held duplicates is fetched once more, twice as deep. Later stages never add a
   duplicate of an episode already in the results.
3. ``fusion``: the two lists fused by reciprocal rank (``fusion="rrf"``, ``rrf_k``) or by
   score (``fusion="score"``: each list min-max scaled, from 0 when it is shorter than asked
   for), weighted by ``vector_weight`` and ``fulltext_weight``.
4. ``decomposition`` and ``second_hop`` (off by default; see
   :mod:`memmachine.retrieval.hops`): the best full-text hit of each clause of a
   multi-clause query lifted by ``decomposition_weight`` times the best fused score, and
   the words of the best ``second_hop_sources`` hits searched in full text once more, that
   list adding ``second_hop_weight * (rrf_k + 1) / (rrf_k + rank)`` to a hit's score;
   ``feedback`` (off by default; see :mod:`memmachine.retrieval.feedback`): the words the
   best hits share more than the other candidates searched in full text, fused in at
   ``feedback_weight``;
   ``categories`` (only with a WordNet directory, ``lexicon_dir``; see
   :mod:`memmachine.retrieval.categories`): the query's nouns expanded into their WordNet
   members ("sports" -> "surfing") searched in full text, fused in at ``category_weight``;
   ``speaker_focus`` (see :mod:`memmachine.retrieval.focus`): for a query that names one
   speaker and asks for several things or for an inference, the dense and full-text lists fetched
   ``speaker_focus_depth`` deep, cut to that speaker's episodes and fused in at
   ``speaker_focus_weight`` (opt-in: the dense list asked without the names,
   ``speaker_focus_unnamed``, and a dense list of the phrase a list question asks for,
   ``speaker_focus_phrase_weight``).
5. Boosts, each a factor on a hit's fused score: ``speaker_boost`` (hits said by a speaker
   the query names), ``time_ranges`` (``time_boost``: hits inside a time range the query
   names, relative ranges resolved against the newest candidate or now, whichever is
   earlier; see :func:`~memmachine.retrieval.temporal.time_ranges`), ``when_boost`` (hits
   that say when something happened, when the query asks when), ``recency``
   (``recency_weight``, ``recency_half_life_days``) and ``importance``
   (``importance_weight`` times ``metadata["importance"]``). ``boosts`` then multiplies each
   score by the product of its factors.
6. ``neighbourhood``: each of the best ``neighbour_candidates`` passes ``neighbour_weight``
   times its score to the turns right before and after it in its session and
   ``second_neighbour_weight`` times its score to the turns two away; a turn keeps the
   largest share passed to it, added to its own score, and may enter the results this way
   (``ranks["neighbour"]`` = the rank of the hit that passed it).
7. ``diversity`` (``diversity_weight``, off by default; see
   :mod:`memmachine.retrieval.diversity`): each hit's score divided by
   ``1 + diversity_weight * n``, ``n`` being the better hits of its session.
8. ``ranking``: best first (equal scores keep the fused order), cut to ``top_k`` (to
   ``max(top_k, rerank_candidates)`` with a reranker), scores divided by the ceiling so
   that 1.0 = first in every signal with every boost and the largest neighbour share.
9. ``rerank`` (with a reranker): the pool scored by the reranker against each hit's indexed
   text (``"<date> <speaker>: <content>"``), reordered by that score (equal scores keep the
   earlier order), cut to ``top_k``, given ``ranks["rerank"]`` (1-based); ``score`` is the
   reranker's score min-max scaled over the pool (1.0 for all when it scored them alike). A
   failing reranker raises ``StoreError`` (``store="reranker"``): the search fails rather
   than silently returning another order.
10. ``expansion`` (``expand_context`` > 0): up to that many neighbouring turns before and
   after each hit, marked ``context=True`` and scored at half the hit they surround, on top
   of the ``top_k`` hits.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from datetime import timedelta

from memmachine.errors import StoreError
from memmachine.indexing.fusion import reciprocal_rank_fusion, score_fusion
from memmachine.models import Episode, EpisodeHit, utc_now
from memmachine.retrieval.categories import Categories
from memmachine.retrieval.diversity import Diversity
from memmachine.retrieval.duplicates import Duplicates
from memmachine.retrieval.feedback import Feedback
from memmachine.retrieval.focus import SpeakerFocus
from memmachine.retrieval.hops import Decomposition, SecondHop
from memmachine.retrieval.pipeline import Search, SearchPipeline, Stage, embed_beside
from memmachine.retrieval.speakers import named_speakers
from memmachine.retrieval.temporal import asks_when, mentions_time, time_ranges
from memmachine.retrieval.text import episode_search_text
from memmachine.retrieval.wordnet import Lexicon

__all__ = [
    "STAGES",
    "ApplyBoosts",
    "Candidates",
    "Categories",
    "Decomposition",
    "Diversity",
    "Duplicates",
    "Expansion",
    "Feedback",
    "Fusion",
    "ImportanceBoost",
    "Neighbourhood",
    "Ranking",
    "RecencyBoost",
    "Rerank",
    "SecondHop",
    "SpeakerBoost",
    "SpeakerFocus",
    "TimeRangeBoost",
    "WhenBoost",
    "default_pipeline",
]


class Candidates:
    """Dense and full-text candidates, fetched concurrently (always runs)."""

    name = "candidates"
    essential = True

    def applies(self, search: Search) -> bool:
        return True

    async def run(self, search: Search) -> None:
        store, depth = search.store, search.fetch_depth
        lexical = asyncio.ensure_future(store.fulltext_search(search.scope, search.query, depth))
        if search.query_vector is None and search.embedder is not None:
            search.query_vector = (await embed_beside(search.embedder, [search.query], lexical))[0]
        if search.query_vector is not None:
            search.dense, search.fulltext = await asyncio.gather(
                store.vector_search(
                    search.scope,
                    search.query_vector,
                    depth,
                    derivatives=search.tuning.sentence_derivatives,
                ),
                lexical,
            )
        else:
            search.dense, search.fulltext = [], await lexical
        # past ``depth`` only for the duplicates stage: every other stage sees ``depth`` hits
        cut = search.depth
        search.dense, search.dense_reserve = search.dense[:cut], search.dense[cut:]
        search.fulltext, search.fulltext_reserve = search.fulltext[:cut], search.fulltext[cut:]
        for episode, _ in [*search.dense, *search.fulltext]:
            search.by_id.setdefault(episode.id, episode)


class Fusion:
    """The candidate lists fused into one score per episode (``fusion``, ``rrf_k``,
    ``vector_weight``, ``fulltext_weight``)."""

    name = "fusion"
    essential = True

    def applies(self, search: Search) -> bool:
        return True

    async def run(self, search: Search) -> None:
        tuning = search.tuning
        weights = {"vector": tuning.vector_weight, "fulltext": tuning.fulltext_weight}
        if tuning.fusion == "score":
            scored = {
                "vector": [(episode.id, score) for episode, score in search.dense],
                "fulltext": [(episode.id, score) for episode, score in search.fulltext],
            }
            fused = score_fusion(scored, weights=weights, depth=search.depth)
        else:
            rankings = {
                "vector": [episode.id for episode, _ in search.dense],
                "fulltext": [episode.id for episode, _ in search.fulltext],
            }
            fused = reciprocal_rank_fusion(rankings, k=tuning.rrf_k, weights=weights)
        search.scores = {item.key: item.score for item in fused}
        search.ranks = {item.key: dict(item.ranks) for item in fused}
        search.factors = dict.fromkeys(search.scores, 1.0)


class SpeakerBoost:
    """Hits said by a speaker the query names (``speaker_boost``)."""

    name = "speaker_boost"

    def applies(self, search: Search) -> bool:
        return search.tuning.speaker_boost > 0 and bool(search.scores)

    async def run(self, search: Search) -> None:
        boost = search.tuning.speaker_boost
        episodes = search.candidates()
        named = named_speakers(search.query, {e.producer for e in episodes if e.producer})
        if named:
            search.ceiling *= 1 + boost
            for episode in episodes:
                if episode.producer in named:
                    search.factors[episode.id] *= 1 + boost


class TimeRangeBoost:
    """Hits inside a time range the query names (``time_boost``, ``time_slack_days``)."""

    name = "time_ranges"

    def applies(self, search: Search) -> bool:
        return search.tuning.time_boost > 0 and bool(search.scores)

    async def run(self, search: Search) -> None:
        tuning = search.tuning
        anchor = min(search.newest(), utc_now())
        ranges = time_ranges(search.query, anchor, slack=timedelta(days=tuning.time_slack_days))
        if ranges:
            search.ceiling *= 1 + tuning.time_boost
            for episode in search.candidates():
                if any(episode.timestamp in span for span in ranges):
                    search.factors[episode.id] *= 1 + tuning.time_boost


class WhenBoost:
    """Hits that say when something happened, for a query that asks when (``when_boost``)."""

    name = "when_boost"

    def applies(self, search: Search) -> bool:
        return search.tuning.when_boost > 0 and bool(search.scores)

    async def run(self, search: Search) -> None:
        boost = search.tuning.when_boost
        if asks_when(search.query):
            search.ceiling *= 1 + boost
            for episode in search.candidates():
                if mentions_time(episode.content):
                    search.factors[episode.id] *= 1 + boost


class RecencyBoost:
    """Newer hits, halving with age (``recency_weight``, ``recency_half_life_days``)."""

    name = "recency"

    def applies(self, search: Search) -> bool:
        return search.tuning.recency_weight > 0 and bool(search.scores)

    async def run(self, search: Search) -> None:
        tuning = search.tuning
        search.ceiling *= 1 + tuning.recency_weight
        half_life = tuning.recency_half_life_days * 86_400.0
        newest = search.newest()
        for episode in search.candidates():
            age = max((newest - episode.timestamp).total_seconds(), 0.0)
            search.factors[episode.id] *= 1 + tuning.recency_weight * 0.5 ** (age / half_life)


class ImportanceBoost:
    """Hits by ``metadata["importance"]`` (``importance_weight``)."""

    name = "importance"

    def applies(self, search: Search) -> bool:
        return search.tuning.importance_weight > 0 and bool(search.scores)

    async def run(self, search: Search) -> None:
        weight = search.tuning.importance_weight
        search.ceiling *= 1 + weight
        for episode in search.candidates():
            search.factors[episode.id] *= 1 + weight * _importance(episode)


class ApplyBoosts:
    """Each fused score multiplied by the product of its boost factors."""

    name = "boosts"

    def applies(self, search: Search) -> bool:
        return bool(search.factors)

    async def run(self, search: Search) -> None:
        scores = search.scores
        for key, factor in search.factors.items():
            scores[key] *= factor


class Neighbourhood:
    """Shares of the best hits' scores passed to the turns one and two away in their
    session (``neighbour_weight``, ``second_neighbour_weight``, ``neighbour_candidates``);
    one batched ``EpisodeStore.adjacent`` query per distance."""

    name = "neighbourhood"

    def applies(self, search: Search) -> bool:
        tuning = search.tuning
        return max(tuning.neighbour_weight, tuning.second_neighbour_weight) > 0 and bool(
            search.scores
        )

    async def run(self, search: Search) -> None:
        tuning, scores, by_id = search.tuning, search.scores, search.by_id
        sources = sorted(scores, key=lambda key: -scores[key])[: tuning.neighbour_candidates]
        adjacent = await search.store.adjacent(search.scope, sources)
        beyond: dict[str, list[Episode]] = {}
        if tuning.second_neighbour_weight > 0:
            nearest = {episode.id for around in adjacent.values() for episode in around}
            beyond = await search.store.adjacent(search.scope, sorted(nearest))
        shares: dict[str, tuple[float, int]] = {}

        def offer(episode: Episode, share: float, position: int) -> None:
            if not search.admits(episode):
                return
            by_id.setdefault(episode.id, episode)
            if share > shares.get(episode.id, (0.0, 0))[0]:
                shares[episode.id] = (share, position)

        for position, key in enumerate(sources, 1):
            first = tuning.neighbour_weight * scores[key]
            second = tuning.second_neighbour_weight * scores[key]
            origin = by_id[key].sequence
            for near in adjacent.get(key, []):
                offer(near, first, position)
                step = near.sequence - origin
                for far in beyond.get(near.id, []):
                    # two away: one more step the same way, in the same session
                    if (far.sequence - near.sequence) * step > 0:
                        offer(far, second, position)
        for key, (share, position) in shares.items():
            scores[key] = scores.get(key, 0.0) + share
            search.ranks.setdefault(key, {})["neighbour"] = position
        search.ceiling *= 1 + max(tuning.neighbour_weight, tuning.second_neighbour_weight)


class Ranking:
    """The best hits, scores scaled into [0, 1] (always runs)."""

    name = "ranking"
    essential = True

    def applies(self, search: Search) -> bool:
        return True

    async def run(self, search: Search) -> None:
        scores, top_k = search.scores, search.top_k
        # sorted() is stable: equal scores keep the fused order
        order = sorted(scores, key=lambda key: -scores[key])
        pool = top_k if search.reranker is None else max(top_k, search.tuning.rerank_candidates)
        search.hits = [
            EpisodeHit(
                episode=search.by_id[key],
                score=min(scores[key] / search.ceiling, 1.0),
                ranks=search.ranks[key],
            )
            for key in order[:pool]
        ]


class Rerank:
    """The pool reordered by the reranker and cut to ``top_k`` (``rerank_candidates``)."""

    name = "rerank"

    def applies(self, search: Search) -> bool:
        return search.reranker is not None and bool(search.hits)

    async def run(self, search: Search) -> None:
        assert search.reranker is not None
        hits = search.hits
        texts = [
            episode_search_text(
                hit.episode.content,
                timestamp=hit.episode.timestamp,
                producer=hit.episode.producer,
                role=hit.episode.role,
            )
            for hit in hits
        ]
        scores = await search.reranker.score(search.query, texts)
        if len(scores) != len(hits):
            raise StoreError(
                f"the reranker returned {len(scores)} scores for {len(hits)} texts",
                store="reranker",
            )
        if not all(math.isfinite(score) for score in scores):
            raise StoreError("the reranker returned a score that is not finite", store="reranker")
        low, high = min(scores), max(scores)
        spread = high - low
        # sorted() is stable: equal reranker scores keep the fused order.
        order = sorted(range(len(hits)), key=lambda index: -scores[index])[: search.top_k]
        out: list[EpisodeHit] = []
        for position, index in enumerate(order, start=1):
            hit = hits[index]
            scaled = (scores[index] - low) / spread if spread > 0 else 1.0
            out.append(
                hit.model_copy(update={"score": scaled, "ranks": {**hit.ranks, "rerank": position}})
            )
        search.hits = out


class Expansion:
    """Neighbouring turns around each hit, as context (``expand_context``)."""

    name = "expansion"

    def applies(self, search: Search) -> bool:
        return search.expand_context > 0 and bool(search.hits)

    async def run(self, search: Search) -> None:
        width = search.expand_context
        neighbour_lists = await asyncio.gather(
            *(
                search.store.neighbours(search.scope, hit.episode.id, before=width, after=width)
                for hit in search.hits
            )
        )
        seen = {hit.episode.id for hit in search.hits}
        out: list[EpisodeHit] = []
        for hit, neighbours in zip(search.hits, neighbour_lists, strict=True):
            out.append(hit)
            for episode in neighbours:
                if episode.id in seen or not search.admits(episode):
                    continue
                seen.add(episode.id)
                out.append(EpisodeHit(episode=episode, score=hit.score * 0.5, context=True))
        search.hits = out


#: The stages of a search, in the order they run: the one place they are composed.
STAGES: tuple[Callable[[], Stage], ...] = (
    Candidates,
    Duplicates,
    Fusion,
    Decomposition,
    SecondHop,
    Feedback,
    Categories,
    SpeakerFocus,
    SpeakerBoost,
    TimeRangeBoost,
    WhenBoost,
    RecencyBoost,
    ImportanceBoost,
    ApplyBoosts,
    Neighbourhood,
    Diversity,
    Ranking,
    Rerank,
    Expansion,
)


def default_pipeline(lexicon: Lexicon | None = None) -> SearchPipeline:
    """A pipeline of :data:`STAGES`; ``categories`` runs only when given ``lexicon``
    (WordNet's nouns, read by the composition root from ``lexicon_dir``)."""
    return SearchPipeline(
        [Categories(lexicon) if stage is Categories else stage() for stage in STAGES]
    )


def _importance(episode: Episode) -> float:
    """``metadata["importance"]`` clamped to [0, 1]; 0 when absent or not a number."""
    value = episode.metadata.get("importance")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return min(max(float(value), 0.0), 1.0)
