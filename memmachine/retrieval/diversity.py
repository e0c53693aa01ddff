"""The ``diversity`` stage: result slots spread over sessions (``diversity_weight``).

Evidence for a multi-hop question usually sits in several sessions, while the best-scored
hits of a query crowd into one. Walking the hits best first, each hit's score is divided by
``1 + diversity_weight * n``, where ``n`` is how many better hits of its session came before
it (maximal marginal relevance with "same session" as the redundancy), and the hits are
reordered by the new scores. 0 (the default) turns it off.
"""

from __future__ import annotations

from collections import Counter

from memmachine.retrieval.pipeline import Search

__all__ = ["Diversity"]


class Diversity:
    """Hits of a session already represented scored down (``diversity_weight``)."""

    name = "diversity"

    def applies(self, search: Search) -> bool:
        return search.tuning.diversity_weight > 0 and bool(search.scores)

    async def run(self, search: Search) -> None:
        weight, scores = search.tuning.diversity_weight, search.scores
        seen: Counter[str | None] = Counter()
        adjusted: dict[str, float] = {}
        # sorted() is stable: equal scores keep the fused order
        for key in sorted(scores, key=lambda key: -scores[key]):
            session = search.by_id[key].scope.session_id
            adjusted[key] = scores[key] / (1 + weight * seen[session])
            seen[session] += 1
        search.scores = dict(sorted(adjusted.items(), key=lambda item: -item[1]))
