"""Text analysis shared by every lexical signal (episode full-text, fact search).

One analyser everywhere means a word matches the same way in every store: NFKC, case-fold,
runs of letters/digits as terms, a small English stopword list, and plural folding.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "MAX_QUERY_TERMS",
    "MAX_TERM_CHARS",
    "STOPWORDS",
    "TERM_PATTERN",
    "document_terms",
    "inflected_query",
    "query_terms",
]

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


def document_terms(text: str) -> list[str]:
    """Every indexable term of ``text`` in order, repeats kept (term frequency counts them).

    Text is NFKC-normalised and case-folded; a term is a run of letters/digits of at most
    :data:`MAX_TERM_CHARS` characters that is not a stopword, plural-folded by
    :func:`_s_stem`.
    """
    terms: list[str] = []
    for token in TERM_PATTERN.findall(unicodedata.normalize("NFKC", text).casefold()):
        if len(token) > MAX_TERM_CHARS or token in STOPWORDS:
            continue
        terms.append(_s_stem(token))
    return terms


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


def inflected_query(text: str) -> str:
    """A full-text query for ``text`` that also matches the common inflections of its terms:
    its own terms first, then for each ASCII word of four letters or more its ``-ed`` and
    ``-ing`` forms or, for such a form, its possible bases ("paint" also finds "painted" and
    "painting"; "hiking" also finds "hike" and "hiked"). Variants no document holds cost
    nothing but a term slot; the result keeps at most :data:`MAX_QUERY_TERMS` terms."""
    terms = query_terms(text)
    out = dict.fromkeys(terms)
    for term in terms:
        for variant in _inflections(term):
            if len(out) >= MAX_QUERY_TERMS:
                return " ".join(out)
            out.setdefault(variant, None)
    return " ".join(out)


def _inflections(term: str) -> list[str]:
    """Likely inflections of ``term``, itself excluded: for an ``-ing``/``-ed`` word its
    possible bases and their other forms, otherwise its ``-ed``/``-ing`` forms."""
    if len(term) < 4 or not term.isascii() or not term.isalpha():
        return []
    bases = []
    for suffix in ("ing", "ed"):
        stem = term[: -len(suffix)]
        if term.endswith(suffix) and len(stem) >= 3:
            bases += [stem, stem + "e"]
            if stem[-1] == stem[-2]:
                bases.append(stem[:-1])  # "shopping" -> "shop"
    found: dict[str, None] = {}
    for base in bases or [term]:
        forms = [base, base + "ed", base + "ing"]
        if base.endswith("e"):
            forms = [base, base + "d", base[:-1] + "ing"]
        for form in forms:
            if form != term:
                found.setdefault(form, None)
    return list(found)


def _s_stem(term: str) -> str:
    """Harman's S-stemmer, for ASCII words longer than three letters: ``-ies`` → ``-y``
    (not ``-eies``/``-aies``), ``-es`` → ``-e`` (not ``-aes``/``-ees``/``-oes``), ``-s`` → ``''``
    (not ``-us``/``-ss``). It only folds plurals, so it rarely merges unrelated words."""
    if len(term) <= 3 or not term.isascii() or not term.isalpha() or not term.endswith("s"):
        return term
    if term.endswith("ies") and not term.endswith(("eies", "aies")):
        return term[:-3] + "y"
    if term.endswith("es") and not term.endswith(("aes", "ees", "oes")):
        return term[:-1]
    if term.endswith(("us", "ss")):
        return term
    return term[:-1]
