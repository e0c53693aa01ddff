"""A category the question names, expanded into its members with WordNet: the ``categories`` stage.

"What sports does John like besides basketball?" is answered by "surfing and riding the
waves", which shares no word with the question. WordNet (a lexical database, read by
:mod:`memmachine.retrieval.wordnet`; no model) lists "surfing" among the hyponyms of
"sport". The stage takes the question's nouns (each word and each adjacent pair reduced to
its noun lemmas: "sports" -> "sport", "martial arts" -> "martial_art"; capitalised words,
names, are left out), expands each into the one-word lemmas at most ``category_depth`` steps
below it (of its first ``category_senses`` senses; 0: all), skips a noun with more than
``category_max_members`` of them (a category as general as "activity" or "thing" reaches
every turn and singles nothing out), searches the members in full text and fuses that list
in like a candidate list, ``category_weight`` for its first. A full-text query keeps at most
:data:`~memmachine.indexing.terms.MAX_QUERY_TERMS` terms, so the members are searched that
many at a time, concurrently, and a turn's scores from the searches are added (BM25 is a sum
over the query's terms, so this is the whole list's score wherever each search found it).

It runs only when the composition root was given a WordNet directory
(``lexicon_dir``, ``MEMMACHINE_RETRIEVAL_LEXICON_DIR``); everything it asks is one
``fulltext_search``, so it ranks alike on every search path. Its LoCoMo effect is in
bench/RESULTS.md ("A category expanded into its members with WordNet").
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict

from memmachine.indexing.terms import MAX_QUERY_TERMS, STOPWORDS
from memmachine.models import Episode
from memmachine.retrieval.focus import asked_for, asks_for_several
from memmachine.retrieval.hops import add_list
from memmachine.retrieval.pipeline import Search
from memmachine.retrieval.wordnet import Lexicon

__all__ = ["Categories", "category_members", "question_nouns"]

_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
#: How many nouns' members one stage keeps between searches (a bound, not a tuning knob).
_CACHED = 4096


def question_nouns(lexicon: Lexicon, query: str) -> list[str]:
    """The noun lemmas of ``query``, in order: each lower-case word of three letters or more
    that is no stopword, and each pair of adjacent words, reduced to its base forms
    ("martial arts" -> "martial_art"). A capitalised word (a name) is neither; a word with
    an apostrophe ("John's") ends a pair."""
    words = [w for w in _WORD.findall(query) if "'" not in w and not w[:1].isupper()]
    found: list[str] = []
    for i, word in enumerate(words):
        if len(word) >= 3 and word not in STOPWORDS:
            found += lexicon.base_forms(word)
        if i + 1 < len(words):
            found += lexicon.base_forms(f"{word}_{words[i + 1]}")
    return list(dict.fromkeys(found))


def category_members(
    lexicon: Lexicon, nouns: list[str], depth: int, senses: int, limit: int
) -> list[str]:
    """The one-word members of ``nouns`` (see the module docstring), sorted, none of them a
    noun of the question or a stopword; a noun with more than ``limit`` members adds
    none."""
    members: set[str] = set()
    for noun in nouns:
        below = lexicon.members(noun, depth, senses or None, limit)
        members |= {word for word in below or () if word.isalpha()}
    return sorted(members - set(nouns) - STOPWORDS)


class Categories:
    """The question's categories expanded into their members and searched in full text
    (``category_weight``, ``category_depth``, ``category_senses``, ``category_max_members``,
    ``category_lists_only``, ``category_asked_only``); needs a
    :class:`~memmachine.retrieval.wordnet.Lexicon`."""

    name = "categories"

    def __init__(self, lexicon: Lexicon | None = None) -> None:
        self.lexicon = lexicon
        self._members: dict[tuple[str, int, int, int], list[str]] = {}

    def applies(self, search: Search) -> bool:
        tuning = search.tuning
        if self.lexicon is None or tuning.category_weight <= 0 or not search.scores:
            return False
        if tuning.category_asked_only:
            return asked_for(search.query) is not None
        return not tuning.category_lists_only or asks_for_several(search.query)

    def members(self, search: Search) -> list[str]:
        """The members the query's nouns expand into, with the stage's settings."""
        assert self.lexicon is not None  # applies() checked
        tuning = search.tuning
        text = asked_for(search.query) if tuning.category_asked_only else search.query
        nouns = question_nouns(self.lexicon, text or "")
        key = (
            " ".join(nouns),
            tuning.category_depth,
            tuning.category_senses,
            tuning.category_max_members,
        )
        if key not in self._members:
            if len(self._members) >= _CACHED:
                self._members.clear()
            self._members[key] = category_members(self.lexicon, nouns, *key[1:])
        return self._members[key]

    async def run(self, search: Search) -> None:
        members = self.members(search)
        if not members:
            return
        weight = search.tuning.category_weight
        found = await _search_all(search, members)
        add_list(search, "categories", found, weight)
        search.ceiling *= 1 + weight


async def _search_all(search: Search, words: list[str]) -> list[tuple[Episode, float]]:
    """``words`` searched in full text :data:`MAX_QUERY_TERMS` at a time, each search
    ``search.depth`` deep, a turn's scores added; best first (equal sums: the turn seen
    first), cut to ``search.depth``."""
    chunks = [words[i : i + MAX_QUERY_TERMS] for i in range(0, len(words), MAX_QUERY_TERMS)]
    lists = await asyncio.gather(
        *(search.store.fulltext_search(search.scope, " ".join(c), search.depth) for c in chunks)
    )
    total: dict[str, float] = defaultdict(float)
    episodes: dict[str, Episode] = {}
    for found in lists:
        for episode, score in found:
            episodes.setdefault(episode.id, episode)
            total[episode.id] += score
    ranked = sorted(total, key=lambda key: -total[key])  # stable: first seen wins a tie
    return [(episodes[key], total[key]) for key in ranked[: search.depth]]
