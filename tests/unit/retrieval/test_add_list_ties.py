"""A ranked list fused in by a stage (speaker focus, second hop) scores hits by rank, so the
order of hits whose scores differ only by float rounding must not decide their share: the
stores compute cosine in their own arithmetic, and a swapped tie deep in a list changed the
fused score of a result on one path but not another (test_search_paths_agree)."""

from __future__ import annotations

from datetime import UTC, datetime

from memmachine.config.sections import RetrievalSettings
from memmachine.models import Episode, Scope
from memmachine.retrieval.hops import add_list
from memmachine.retrieval.pipeline import Search

WHEN = datetime(2026, 1, 1, tzinfo=UTC)
SCOPE = Scope(user_id="u", session_id="s")


def episode(key: str) -> Episode:
    return Episode(
        id=key,
        scope=SCOPE,
        role="user",
        producer="ann",
        content=key,
        timestamp=WHEN,
        sequence=0,
        created_at=WHEN,
    )


def fused(ranked: list[tuple[str, float]]) -> dict[str, float]:
    search = Search(
        scope=SCOPE,
        query="q",
        top_k=10,
        expand_context=0,
        query_vector=None,
        store=None,
        embedder=None,
        reranker=None,
        tuning=RetrievalSettings(),  # type: ignore[arg-type]
    )
    add_list(search, "test", [(episode(key), score) for key, score in ranked], 1.0)
    return search.scores


def test_scores_equal_up_to_rounding_share_a_rank_in_either_order() -> None:
    one = fused([("a", 0.9), ("b", 0.61234567), ("c", 0.61234559), ("d", 0.5)])
    other = fused([("a", 0.9), ("c", 0.61234559), ("b", 0.61234567), ("d", 0.5)])
    assert one == other
    assert one["b"] == one["c"] < one["a"]
    assert one["d"] < one["b"]  # d keeps its own place (fourth), after the tie


def test_distinct_scores_keep_their_ranks() -> None:
    scores = fused([("a", 0.9), ("b", 0.8), ("c", 0.7)])
    assert scores["a"] > scores["b"] > scores["c"]
