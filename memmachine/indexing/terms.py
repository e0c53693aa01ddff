"""Text analysis shared by every lexical signal (episode full-text, fact and procedure search).

One analyser everywhere means a word matches the same way in every store: NFKC, case-fold,
runs of letters/digits cut into words (:mod:`.segmentation`: scripts written without spaces,
such as Chinese and Japanese, into overlapping character pairs), and each word stemmed and
stopword-filtered in its own language (:mod:`.stemming`), the language being detected per text
(:mod:`.language_detection`) or given. "hiking", "hiked" and "hikes" all match "hike";
«лыжах» and «лыжи» match «лыж»; 柯基犬 matches 豆豆是柯基.

A query is short and its language often uncertain: its words are looked up both in its
likeliest language and in their script's default (English for Latin letters), unless the
likeliest is English or a language is given. An English text analyses as it did before other
languages were read.

The stored terms of an episode, fact or procedure depend on this analyser:
:data:`ANALYSER_VERSION` names it, and a store that indexed with an older version re-analyses
what it holds.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from memmachine.indexing.language_detection import detect_language, likely_language
from memmachine.indexing.segmentation import TERM_PATTERN, pieces
from memmachine.indexing.stemming import (
    LATIN_STEMMERS,
    STOPWORDS,
    Stemmers,
    algorithm_for,
    stopwords_of,
)

__all__ = [
    "ANALYSER_VERSION",
    "BM25_B",
    "BM25_K1",
    "MAX_QUERY_TERMS",
    "MAX_TERM_CHARS",
    "STOPWORDS",
    "TERM_PATTERN",
    "analyse",
    "document_terms",
    "query_terms",
    "stems",
    "tokens",
]

#: The analyser's version: 1 folded plurals only (Harman's S-stemmer), 2 stems English with
#: Snowball, 3 reads every language (segmentation, a stemmer and stopwords per language).
ANALYSER_VERSION = 3

#: Okapi BM25 parameters of every episode full-text ranking (stores and in-process index).
BM25_K1 = 1.2
BM25_B = 0.75

#: Longer tokens (hashes, base64 blobs) are not indexed and not searched.
MAX_TERM_CHARS = 64
#: A query uses at most this many distinct terms (the first ones, in query order).
MAX_QUERY_TERMS = 32

#: Russian writers often drop the diaeresis of yo: it is read as ye, as Snowball's list does.
_YO, _YE = "\u0451", "\u0435"
_YO_FOLDED = frozenset({"russian", "serbian"})


def tokens(text: str) -> list[str]:
    """The analyser's words of ``text`` in order, nothing dropped: ``text`` NFKC-normalised
    and case-folded, cut into runs of letters/digits (:data:`TERM_PATTERN`), each run of an
    unspaced script cut into character pairs."""
    words: list[str] = []
    for run in TERM_PATTERN.findall(unicodedata.normalize("NFKC", text).casefold()):
        words.extend(pieces(run))
    return words


def _term(word: str, language: str | None, stemmers: Stemmers) -> str | None:
    """``word``'s term in a text of ``language``, or ``None`` for a stopword."""
    if not word.isalpha():
        return word
    algorithm = algorithm_for(word, language)
    if algorithm is None:
        return None if word in STOPWORDS else word
    if algorithm in _YO_FOLDED:
        word = word.replace(_YO, _YE)
    if word in stopwords_of(algorithm):
        return None
    return stemmers.stem(word, algorithm)


def stems(tokens: Iterable[str], language: str | None = None) -> list[str]:
    """The analyser's term of each of ``tokens`` (from :func:`tokens`), in order, in a text
    of ``language`` (ISO 639-1; ``None``: unknown): a word's Snowball stem in its language
    ("painting" → "paint", «лыжах» → «лыж»); digits, pairs of unspaced scripts and words of
    scripts without a stemmer as they are. Stopwords are stemmed too (nothing is dropped)."""
    stemmers = Stemmers()
    out: list[str] = []
    for token in tokens:
        if not token.isalpha():
            out.append(token)
            continue
        algorithm = algorithm_for(token, language)
        if algorithm is None:
            out.append(token)
        else:
            word = token.replace(_YO, _YE) if algorithm in _YO_FOLDED else token
            out.append(stemmers.stem(word, algorithm))
    return out


def document_terms(text: str, language: str | None = None) -> list[str]:
    """Every indexable term of ``text`` in order, repeats kept (term frequency counts them):
    the terms of its :func:`tokens` of at most :data:`MAX_TERM_CHARS` characters that are not
    stopwords, in ``language`` (detected from ``text`` when not given)."""
    return analyse(text, detect_language(text) if language is None else language)


def analyse(text: str, language: str | None) -> list[str]:
    """:func:`document_terms` of ``text`` in ``language`` as given, ``None`` meaning unknown
    (nothing is detected): for the words of a text whose language is already known."""
    stemmers = Stemmers()
    terms: list[str] = []
    for word in tokens(text):
        if len(word) <= MAX_TERM_CHARS:
            term = _term(word, language, stemmers)
            if term is not None:
                terms.append(term)
    return terms


def query_terms(text: str, language: str | None = None) -> list[str]:
    """The distinct terms of a search query, in first-seen order, at most
    :data:`MAX_QUERY_TERMS`. Each word gives its term in ``language`` when given; else in the
    query's likeliest language and, when that is not English, also in its script's default
    (two terms where they differ; a stopword of the likeliest language gives none). Empty
    when nothing searchable is left (only punctuation, stopwords or an empty string)."""
    if language is not None:
        languages: tuple[str | None, ...] = (language,)
    else:
        likely = likely_language(text)
        languages = (None,) if likely in (None, "en") else (likely, None)
    stemmers = Stemmers()
    seen: dict[str, None] = {}
    for word in tokens(text):
        if len(word) > MAX_TERM_CHARS:
            continue
        terms: list[str] = []
        for lang in languages:
            term = _term(word, lang, stemmers)
            if term is None:
                break  # a stopword in the likeliest language is no term in any
            terms.append(term)
        else:
            if language is None and _unread_latin(word, languages):
                # a Latin word with diacritics no guessed language stems ("café" in a query
                # too short to tell French): its stem in each Latin language that has one
                terms += [stemmers.stem(word, algorithm) for algorithm in LATIN_STEMMERS]
        for term in terms:
            seen.setdefault(term, None)
            if len(seen) == MAX_QUERY_TERMS:
                return list(seen)
    return list(seen)


def _unread_latin(word: str, languages: tuple[str | None, ...]) -> bool:
    """Whether ``word`` is a Latin word with diacritics that none of ``languages`` stems."""
    if word.isascii() or not word.isalpha():
        return False
    point = ord(word[0])
    latin = point < 0x0250 or 0x1E00 <= point <= 0x1EFF
    return latin and all(algorithm_for(word, lang) is None for lang in languages)
