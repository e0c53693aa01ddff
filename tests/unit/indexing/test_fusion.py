"""Rank and score fusion: the order hybrid search returns."""

from __future__ import annotations

import pytest

from memmachine.retrieval import reciprocal_rank_fusion, score_fusion


def test_items_found_by_both_signals_beat_items_found_by_one() -> None:
    fused = reciprocal_rank_fusion({"vector": ["a", "b", "c"], "fulltext": ["c", "d", "a"]})
    keys = [item.key for item in fused]
    assert keys[:2] == ["a", "c"]
    assert set(keys) == {"a", "b", "c", "d"}
    assert fused[0].ranks == {"vector": 1, "fulltext": 3}


def test_first_everywhere_scores_one_and_scores_fall_with_rank() -> None:
    fused = reciprocal_rank_fusion({"vector": ["x", "y"], "fulltext": ["x"]})
    assert fused[0].score == 1.0
    assert 0 < fused[1].score < fused[0].score


def test_ties_keep_first_seen_order_and_duplicates_count_once() -> None:
    fused = reciprocal_rank_fusion({"vector": ["p", "p", "q"], "fulltext": ["q", "p"]})
    assert fused[0].ranks == {"vector": 1, "fulltext": 2}
    tied = reciprocal_rank_fusion({"vector": ["m"], "fulltext": ["n"]})
    assert [item.key for item in tied] == ["m", "n"]


def test_weights_shift_the_balance_and_empty_lists_are_fine() -> None:
    fused = reciprocal_rank_fusion({"vector": ["v"], "fulltext": ["f"]}, weights={"fulltext": 2.0})
    assert fused[0].key == "f"
    assert reciprocal_rank_fusion({"vector": [], "fulltext": []}) == []


def test_score_fusion_adds_min_max_scaled_scores() -> None:
    fused = score_fusion(
        {
            "vector": [("a", 0.9), ("b", 0.5), ("c", 0.1)],
            "fulltext": [("c", 12.0), ("a", 11.0), ("d", 2.0)],
        }
    )
    by_key = {item.key: item for item in fused}
    # a: best dense (1.0) and 0.9 of the way up full-text's range -> (1.0 + 0.9) / 2
    assert by_key["a"].score == pytest.approx(0.95)
    assert [item.key for item in fused][:2] == ["a", "c"]
    assert by_key["c"].ranks == {"vector": 3, "fulltext": 1}
    # the weakest candidate of a list gets nothing from it
    assert by_key["d"].score == 0.0


def test_score_fusion_follows_score_gaps_not_ranks() -> None:
    close = score_fusion({"fulltext": [("x", 10.0), ("y", 9.9), ("z", 1.0)]})
    assert close[1].score == pytest.approx(0.989, abs=1e-3)
    far = score_fusion({"fulltext": [("x", 10.0), ("y", 2.0), ("z", 1.0)]})
    assert far[1].score == pytest.approx(0.111, abs=1e-3)


def test_score_fusion_weights_equal_scores_and_empty_lists() -> None:
    fused = score_fusion(
        {"vector": [("v", 0.3)], "fulltext": [("f", 4.0)]}, weights={"fulltext": 3.0}
    )
    # a one-item list scales to 1.0; weights then decide, over the total weight
    assert [(item.key, item.score) for item in fused] == [("f", 0.75), ("v", 0.25)]
    tied = score_fusion({"vector": [("m", 0.5), ("n", 0.5)], "fulltext": []})
    assert [(item.key, item.score) for item in tied] == [("m", 0.5), ("n", 0.5)]
    assert score_fusion({"vector": [], "fulltext": []}) == []


def test_a_list_shorter_than_asked_for_is_scaled_from_zero() -> None:
    # every document the signal found is here: what is missing scores 0, and the last one
    # found keeps the part of the score it has
    short = score_fusion({"fulltext": [("x", 8.0), ("y", 2.0)]}, depth=30)
    assert [(item.key, item.score) for item in short] == [("x", 1.0), ("y", 0.25)]
    full = score_fusion({"fulltext": [("x", 8.0), ("y", 2.0)]}, depth=2)
    assert [(item.key, item.score) for item in full] == [("x", 1.0), ("y", 0.0)]
