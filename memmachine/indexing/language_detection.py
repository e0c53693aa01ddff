"""Which language a text is written in: py3langid's naive Bayes model, loaded once on first use.

The analyser asks for a text's language to choose the stemmer and stopwords of its words in a
script several languages share (Latin, Cyrillic, Arabic, Devanagari). A guess below
:data:`MIN_CONFIDENCE` (:data:`MIN_NON_LATIN_CONFIDENCE` for a text mostly in other letters
than ASCII ones) counts as no guess, so a short or ambiguous text keeps the script's
default (English for Latin letters): on LoCoMo's 3,435 English turns no guess clears it for
another language (bench/results/2026-11-29-analyser.md).

py3langid (BSD-3-Clause) is a maintained fork of langid.py: numpy only, its model inside the
wheel, about 0.2 ms a text here. The model is read from the package on the first call, not on
import, under a lock.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

__all__ = ["MIN_CONFIDENCE", "MIN_NON_LATIN_CONFIDENCE", "detect_language", "likely_language"]

#: A guess whose normalised probability is lower means "unknown".
MIN_CONFIDENCE = 0.9
#: The same for a text written mostly in letters other than ASCII ones.
MIN_NON_LATIN_CONFIDENCE = 0.3

#: Texts longer than this are judged by their first this many characters (enough for a guess).
_SAMPLE_CHARS = 512

#: Texts up to this long are remembered (at most 4,096 of them).
_CACHED_CHARS = 256

_lock = threading.Lock()
_identifier: list[Any] = []


def _model() -> Any:
    if not _identifier:
        with _lock:
            if not _identifier:
                from py3langid.langid import MODEL_FILE, LanguageIdentifier

                _identifier.append(LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True))
    return _identifier[0]


def detect_language(text: str) -> str | None:
    """The ISO 639-1 code of ``text``'s language (``"ru"``, ``"zh"``, ``"es"``), or ``None``
    when the model is not at least :data:`MIN_CONFIDENCE` sure or the text holds no letter.
    Short texts (queries, mostly) are remembered, so a repeated query is not judged again."""
    if len(text) <= _CACHED_CHARS:
        return _detect_short(text)
    return _detect(text[:_SAMPLE_CHARS])


@lru_cache(maxsize=4096)
def _detect_short(text: str) -> str | None:
    return _detect(text)


def likely_language(text: str) -> str | None:
    """The model's best guess for ``text``, however unsure (``None`` without a letter): a
    query is short, and its words are looked up in its likeliest language besides the
    script's default (see :func:`memmachine.indexing.terms.query_terms`)."""
    return _guess_short(text) if len(text) <= _CACHED_CHARS else _guess(text[:_SAMPLE_CHARS])[0]


@lru_cache(maxsize=4096)
def _guess_short(text: str) -> str | None:
    return _guess(text)[0]


def _guess(text: str) -> tuple[str | None, float]:
    if not any(char.isalpha() for char in text):
        return None, 0.0
    language, probability = _model().classify(text)
    return str(language), float(probability)


def _detect(text: str) -> str | None:
    language, probability = _guess(text)
    if probability >= MIN_CONFIDENCE:
        return language
    # Mostly other letters than ASCII: the script has settled most of it (its stemmer is
    # chosen by script), and the model only hesitates between near neighbours (ru / uk / be,
    # zh / yue / wuu), so a plainer lead is enough.
    letters = [char for char in text if char.isalpha()]
    ascii_letters = sum(char.isascii() for char in letters)
    if probability >= MIN_NON_LATIN_CONFIDENCE and ascii_letters * 2 < len(letters):
        return language
    return None
