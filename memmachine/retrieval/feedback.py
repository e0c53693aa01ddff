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

import unicodedata
from collections import Counter

import Stemmer

from memmachine.indexing.terms import STOPWORDS, TERM_PATTERN, query_terms
from memmachine.retrieval.hops import add_list
from memmachine.retrieval.pipeline import Search

__all__ = ["Feedback", "feedback_terms"]

#: Shorter words are too often fillers ("ok", "oh") to be worth a query slot.
_MIN_CHARS = 3


def _surface(text: str, stemmer: Stemmer.Stemmer) -> dict[str, str]:
    """Each stem of ``text`` with the first word that gave it (a query is analysed again,
    so it is given words, not stems); the analyser's stems, letters-only words only."""
    words = [
        token
        for token in TERM_PATTERN.findall(unicodedata.normalize("NFKC", text).casefold())
        if len(token) >= _MIN_CHARS and token not in STOPWORDS and token.isalpha()
    ]
    stems = [stemmer.stemWord(word) if word.isascii() else word for word in words]
    out: dict[str, str] = {}
    for stem, word in zip(stems, words, strict=True):
        out.setdefault(stem, word)
    return out


def feedback_terms(query: str, sources: list[str], pool: list[str], count: int) -> list[str]:
    """Up to ``count`` words of ``sources`` (the best hits' texts) that are more frequent
    there than in ``pool`` (every candidate's text), best first: in at least two sources,
    not in the query, ranked by share of the sources minus share of the pool (ties: the
    word seen first)."""
    asked = set(query_terms(query))
    stemmer = Stemmer.Stemmer("english", 0)  # as the analyser: one per call, not shared
    seen: dict[str, str] = {}
    in_sources: Counter[str] = Counter()
    for text in sources:
        words = _surface(text, stemmer)
        in_sources.update(words.keys())
        for stem, word in words.items():
            seen.setdefault(stem, word)
    in_pool: Counter[str] = Counter()
    for text in pool:
        in_pool.update(_surface(text, stemmer).keys())
    order = {stem: position for position, stem in enumerate(seen)}
    scored = [
        (in_sources[stem] / len(sources) - in_pool[stem] / max(len(pool), 1), stem)
        for stem in seen
        if in_sources[stem] >= 2 and stem not in asked
    ]
    scored = [(share, stem) for share, stem in scored if share > 0]
    scored.sort(key=lambda item: (-item[0], order[item[1]]))
    return [seen[stem] for _, stem in scored[:count]]


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
