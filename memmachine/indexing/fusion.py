"""Fusion of several ranked candidate lists: by rank (reciprocal-rank fusion) or by score."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

__all__ = ["FusedItem", "reciprocal_rank_fusion", "score_fusion"]


@dataclass
class FusedItem(Generic[K]):
    key: K
    #: Fused score normalised to [0, 1]: 1.0 means first in every list.
    score: float
    #: 1-based rank of the item in each list it appeared in.
    ranks: dict[str, int] = field(default_factory=dict)


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[K]],
    *,
    k: int = 60,
    weights: Mapping[str, float] | None = None,
) -> list[FusedItem[K]]:
    """Fuse ranked lists by ``sum(weight / (k + rank))``, best first.

    Ties keep the order in which items were first seen, walking the lists in the order
    given, so the result is deterministic.
    """
    weights = weights or {}
    best = sum(weights.get(name, 1.0) for name in rankings) / (k + 1) or 1.0
    fused: dict[K, FusedItem[K]] = {}
    raw: dict[K, float] = {}
    for name, ranked in rankings.items():
        weight = weights.get(name, 1.0)
        for position, key in enumerate(ranked, start=1):
            item = fused.get(key)
            if item is None:
                item = fused[key] = FusedItem(key=key, score=0.0)
                raw[key] = 0.0
            if name in item.ranks:
                continue
            item.ranks[name] = position
            raw[key] += weight / (k + position)
    order = sorted(fused, key=lambda key: -raw[key])
    out = []
    for key in order:
        item = fused[key]
        item.score = raw[key] / best
        out.append(item)
    return out


def score_fusion(
    scored: Mapping[str, Sequence[tuple[K, float]]],
    *,
    weights: Mapping[str, float] | None = None,
    depth: int | None = None,
) -> list[FusedItem[K]]:
    """Fuse scored lists by ``sum(weight * scaled score)``, best first.

    Each list holds ``(key, score)`` pairs, best first, with scores on the list's own scale
    (cosine, BM25...). A list's scores are min-max scaled to [0, 1] (all 1.0 when they are
    equal) so a signal counts by how far ahead of its other candidates an item is, not by
    its raw scale. A list shorter than ``depth`` (the number of candidates asked for) holds
    everything that signal found, so it is scaled from ``min(lowest score, 0)``: what it
    left out scores 0 there, and its own last item is not pushed down to 0. An item missing
    from a list gets 0 from it. ``score`` is the weighted sum divided by the total weight:
    1.0 means best in every list. Ties keep the order in which items were first seen,
    walking the lists in the order given.
    """
    weights = weights or {}
    total = sum(weights.get(name, 1.0) for name in scored) or 1.0
    fused: dict[K, FusedItem[K]] = {}
    raw: dict[K, float] = {}
    for name, pairs in scored.items():
        weight = weights.get(name, 1.0)
        values = [score for _, score in pairs]
        low, high = (min(values), max(values)) if values else (0.0, 0.0)
        if depth is not None and len(pairs) < depth:
            low = min(low, 0.0)
        for position, (key, score) in enumerate(pairs, start=1):
            item = fused.get(key)
            if item is None:
                item = fused[key] = FusedItem(key=key, score=0.0)
                raw[key] = 0.0
            if name in item.ranks:
                continue
            item.ranks[name] = position
            scaled = (score - low) / (high - low) if high > low else 1.0
            raw[key] += weight * scaled
    order = sorted(fused, key=lambda key: -raw[key])
    out = []
    for key in order:
        item = fused[key]
        item.score = raw[key] / total
        out.append(item)
    return out
