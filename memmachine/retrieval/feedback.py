"""Pseudo-relevance feedback without a model: the ``feedback`` stage.

The evidence a multi-hop question misses rarely shares a word with the question ("What are
the breeds of Audrey's dogs?" / "Pepper and Panda are Lab mixes, and Precious and Pixie are
Chihuahua mixes") but often shares one with the evidence that was found. The stage reads the
best ``feedback_sources`` fused hits, keeps the ``feedback_terms`` words over-represented in
them against the whole candidate pool (a term's share of the sources minus its share of the
pool: words every turn uses, "great", "thanks", the speakers' names, cancel out), and
searches those words in full text once more (feedback terms as in RM3, the contrast with
the pool standing in for the collection statistics the store port does not expose; the
question's own words are left out of that query: with them, LoCoMo any@10 fell). That list is
fused in like a candidate list, ``feedback_weight`` for its first.

Everything it reads is what the candidate lists returned and everything it asks is a
``fulltext_search``, so it ranks alike on every search path. Duplicates are collapsed as in
the candidate lists when ``distinct_evidence`` is on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from memmachine.indexing.terms import STOPWORDS, query_terms, stems, tokens
from memmachine.retrieval.hops import add_list
from memmachine.retrieval.pipeline import Search

__all__ = ["Feedback", "feedback_terms"]

#: Shorter words are too often fillers ("ok", "oh") to be worth a query slot.
_MIN_CHARS = 3


def _words(text: str) -> list[str]:
    """The words of ``text`` worth a query slot, in order: the analyser's tokens that are
    letters only, at least :data:`_MIN_CHARS` long and not stopwords."""
    return [
        token
        for token in tokens(text)
        if len(token) >= _MIN_CHARS and token not in STOPWORDS and token.isalpha()
    ]


def _learn(known: dict[str, str], texts: Iterable[Iterable[str]]) -> None:
    """Add the analyser's stem of each word of ``texts`` that ``known`` lacks: each distinct
    word is stemmed once per search (the candidates repeat most of their words)."""
    new = list(dict.fromkeys(word for words in texts for word in words if word not in known))
    known.update(zip(new, stems(new), strict=True))


def feedback_terms(query: str, sources: list[str], pool: list[str], count: int) -> list[str]:
    """Up to ``count`` words of ``sources`` (the best hits' texts) that are more frequent
    there than in ``pool`` (every candidate's text), best first: in at least two sources,
    not in the query, ranked by share of the sources minus share of the pool (ties: the
    word seen first). A query is analysed again, so words are returned, not stems: for
    each stem the first word of the sources that gave it."""
    asked = set(query_terms(query))
    stem: dict[str, str] = {}  # word -> its stem
    source_words = [_words(text) for text in sources]
    _learn(stem, source_words)
    seen: dict[str, str] = {}
    in_sources: Counter[str] = Counter()
    for words in source_words:
        for word in words:
            seen.setdefault(stem[word], word)
        in_sources.update({stem[word] for word in words})
    wanted = {key for key in seen if in_sources[key] >= 2 and key not in asked}
    if not wanted:
        return []
    # the pool is only counted for the stems that can still be chosen
    pool_words = [set(_words(text)) for text in pool]
    _learn(stem, pool_words)
    in_pool: Counter[str] = Counter()
    for distinct in pool_words:
        in_pool.update({stem[word] for word in distinct} & wanted)
    order = {key: position for position, key in enumerate(seen)}
    scored = [
        (in_sources[key] / len(sources) - in_pool[key] / max(len(pool), 1), key) for key in wanted
    ]
    scored = [(share, key) for share, key in scored if share > 0]
    scored.sort(key=lambda item: (-item[0], order[item[1]]))
    return [seen[key] for _, key in scored[:count]]


class Feedback:
    """The words the best hits share searched in full text (``feedback_weight``,
    ``feedback_sources``, ``feedback_terms``)."""

    name = "feedback"

    def applies(self, search: Search) -> bool:
        return search.tuning.feedback_weight > 0 and bool(search.scores)

    async def run(self, search: Search) -> None:
        tuning, scores = search.tuning, search.scores
        # sorted() is stable: equal fused scores keep the fused order
        ranked = sorted(scores, key=lambda key: -scores[key])
        sources = [search.by_id[key].content for key in ranked[: tuning.feedback_sources]]
        pool = [search.by_id[key].content for key in ranked]
        words = feedback_terms(search.query, sources, pool, tuning.feedback_terms)
        if not words:
            return
        expanded = " ".join(words)
        found = await search.store.fulltext_search(search.scope, expanded, search.depth)
        add_list(search, "feedback", found, tuning.feedback_weight)
        search.ceiling *= 1 + tuning.feedback_weight
