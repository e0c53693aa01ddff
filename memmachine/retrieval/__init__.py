"""Retrieval building blocks: the texts that are indexed and the fusion of ranked lists."""

from memmachine.indexing.fusion import FusedItem, reciprocal_rank_fusion, score_fusion
from memmachine.retrieval.text import episode_search_text

__all__ = ["FusedItem", "episode_search_text", "reciprocal_rank_fusion", "score_fusion"]
