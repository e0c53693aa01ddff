"""A ranked list fused in by a stage (speaker focus, second hop) scores hits by rank, so the
order of hits whose scores differ only by float rounding must not decide their share: the
stores compute cosine in their own arithmetic, and a swapped tie deep in a list changed the
fused score of a result on one path but not another (test_search_paths_agree)."""

from __future__ import annotations

from datetime import UTC, datetime

from memmachine.config.sections import RetrievalSettings
from memmachine.models import Episode, Scope
from memmachine.retrieval.hops import add_list, add_scaled_list
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


def empty_search() -> Search:
    return Search(
        scope=SCOPE,
        query="q",
        top_k=10,
        expand_context=0,
        query_vector=None,
        store=None,  # type: ignore[arg-type]
        embedder=None,
        reranker=None,
        tuning=RetrievalSettings(),
    )


def fused(ranked: list[tuple[str, float]]) -> dict[str, float]:
    search = empty_search()
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


def scaled(ranked: list[tuple[str, float]], floor: float) -> dict[str, float]:
    search = empty_search()
    add_scaled_list(search, "test", [(episode(key), score) for key, score in ranked], 1.0, floor)
    return search.scores


def test_a_list_fused_by_score_moves_only_as_much_as_its_scores() -> None:
    # b and c swap places and move by ~1e-6, as cosines do between two engines: every
    # share moves by about as much, where a rank would have jumped
    one = scaled([("a", 0.9), ("b", 0.6123456), ("c", 0.6123450), ("d", 0.5)], floor=0.4)
    other = scaled([("a", 0.9), ("c", 0.6123462), ("b", 0.6123449), ("d", 0.5)], floor=0.4)
    for key in "abcd":
        assert abs(one[key] - other[key]) < 1e-5
    assert one["a"] == 1.0  # the best gets the weight, the cut nothing
    assert one["a"] > one["b"] > one["d"] > scaled([("a", 0.9), ("e", 0.4)], 0.4)["e"] == 0.0
