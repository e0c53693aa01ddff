"""Reciprocal-rank fusion: the order hybrid search returns."""

from __future__ import annotations

from memmachine.retrieval import reciprocal_rank_fusion


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
