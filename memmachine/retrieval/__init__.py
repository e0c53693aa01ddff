"""Retrieval building blocks: the text that is indexed and rank fusion."""

from memmachine.retrieval.fusion import FusedItem, reciprocal_rank_fusion
from memmachine.retrieval.text import episode_search_text

__all__ = ["FusedItem", "episode_search_text", "reciprocal_rank_fusion"]
