"""Text analysis shared by every lexical signal (episode full-text, fact search).

One analyser everywhere means a word matches the same way in every store: NFKC, case-fold,
runs of letters/digits as terms, a small English stopword list, and Snowball (Porter 2)
English stemming of ASCII words, so "hiking", "hiked" and "hikes" all match "hike".

The stored terms of an episode or fact depend on this analyser: :data:`ANALYSER_VERSION`
names it, and a store that indexed with an older version re-analyses what it holds.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

import Stemmer

__all__ = [
    "ANALYSER_VERSION",
    "BM25_B",
    "BM25_K1",
    "MAX_QUERY_TERMS",
    "MAX_TERM_CHARS",
    "STOPWORDS",
    "TERM_PATTERN",
    "document_terms",
    "query_terms",
    "stems",
    "tokens",
]

#: The analyser's version: 1 folded plurals only (Harman's S-stemmer), 2 stems with Snowball.
ANALYSER_VERSION = 2

#: Okapi BM25 parameters of every episode full-text ranking (stores and in-process index).
BM25_K1 = 1.2
BM25_B = 0.75

#: A term is a run of letters and digits (any script); everything else separates terms.
TERM_PATTERN = re.compile(r"[^\W_]+")

#: Longer tokens (hashes, base64 blobs) are not indexed and not searched.
MAX_TERM_CHARS = 64
#: A query uses at most this many distinct terms (the first ones, in query order).
MAX_QUERY_TERMS = 32

#: A small English stopword list: words that carry no topic and would match everything.
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours
    yourself yourselves s t d ll m re ve
    """.split()  # noqa: SIM905 - a word list reads better as text
)


def tokens(text: str) -> list[str]:
    """The analyser's tokens of ``text`` in order, nothing dropped: ``text`` NFKC-normalised
    and case-folded, cut into runs of letters/digits (:data:`TERM_PATTERN`)."""
    return TERM_PATTERN.findall(unicodedata.normalize("NFKC", text).casefold())


def stems(tokens: Iterable[str]) -> list[str]:
    """The analyser's term of each of ``tokens`` (from :func:`tokens`), in order: an ASCII
    word's Snowball English stem ("painting" → "paint", "parties" → "parti"); digits and
    words in other scripts as they are."""
    stem = Stemmer.Stemmer("english", 0).stemWord  # cheap (<1 µs); not thread-safe; no cache
    return [stem(token) if token.isascii() and token.isalpha() else token for token in tokens]


def document_terms(text: str) -> list[str]:
    """Every indexable term of ``text`` in order, repeats kept (term frequency counts them):
    the :func:`stems` of its :func:`tokens` of at most :data:`MAX_TERM_CHARS` characters
    that are not stopwords."""
    return stems(
        [token for token in tokens(text) if len(token) <= MAX_TERM_CHARS and token not in STOPWORDS]
    )


def query_terms(text: str) -> list[str]:
    """The distinct terms of a search query, in first-seen order, at most
    :data:`MAX_QUERY_TERMS`. Empty when nothing searchable is left (only punctuation,
    stopwords or an empty string)."""
    seen: dict[str, None] = {}
    for term in document_terms(text):
        seen.setdefault(term, None)
        if len(seen) == MAX_QUERY_TERMS:
            break
    return list(seen)
