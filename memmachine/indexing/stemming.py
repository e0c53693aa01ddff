"""Which Snowball stemmer and stopwords a word gets: by its script and its text's language.

A word's script narrows the languages it can be in; the text's detected language (see
:mod:`.language_detection`) picks among them, and each script has a default for a text whose
language is unknown or uses another script (an English product name inside a Chinese sentence
is stemmed as English, a Russian word inside an English one as Russian):

========== ============================================ ==========
script      languages with a Snowball stemmer            default
========== ============================================ ==========
Latin       en es de fr it pt nl da sv no fi hu ro tr     English
            ca eu cs pl lt et id ga eo st sr
Cyrillic    ru sr                                        Russian
Greek       el                                           Greek
Arabic      ar fa                                        Arabic
Devanagari  hi ne                                        Hindi
Armenian    hy                                           Armenian
Tamil       ta                                           Tamil
========== ============================================ ==========

In a text of unknown language, or in English, only ASCII Latin words are stemmed (as
English), as before other languages were read: English terms are what they were.
Words of other scripts, bigrams of unspaced scripts and words with digits are kept as they are.
Stopwords are those published with each Snowball stemmer (``stopwords/``), English keeping
the analyser's own short list.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from importlib import resources

import Stemmer

__all__ = ["ENGLISH", "LATIN_STEMMERS", "STOPWORDS", "Stemmers", "algorithm_for", "stopwords_of"]

ENGLISH = "english"

#: The English stopword list: words that carry no topic and would match everything.
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

_LATIN = {
    "en": ENGLISH, "es": "spanish", "de": "german", "fr": "french", "it": "italian",
    "pt": "portuguese", "nl": "dutch", "da": "danish", "sv": "swedish", "no": "norwegian",
    "nb": "norwegian", "nn": "norwegian", "fi": "finnish", "hu": "hungarian",
    "ro": "romanian", "tr": "turkish", "ca": "catalan", "eu": "basque", "cs": "czech",
    "pl": "polish", "lt": "lithuanian", "et": "estonian", "id": "indonesian",
    "ms": "indonesian", "ga": "irish", "eo": "esperanto", "st": "sesotho", "sr": "serbian",
}  # fmt: skip
#: Every Snowball algorithm for a Latin-script language but English.
LATIN_STEMMERS = tuple(sorted(set(_LATIN.values()) - {ENGLISH}))
_CYRILLIC = {"ru": "russian", "sr": "serbian"}
_ARABIC = {"ar": "arabic", "fa": "persian"}
_DEVANAGARI = {"hi": "hindi", "ne": "nepali"}

#: (first code point, last code point, languages of the script, the script's default).
_SCRIPTS: tuple[tuple[int, int, dict[str, str], str | None], ...] = (
    (0x0370, 0x03FF, {"el": "greek"}, "greek"),
    (0x0400, 0x052F, _CYRILLIC, "russian"),
    (0x0530, 0x058F, {"hy": "armenian"}, "armenian"),
    (0x0600, 0x06FF, _ARABIC, "arabic"),
    (0x0750, 0x077F, _ARABIC, "arabic"),
    (0x0900, 0x097F, _DEVANAGARI, "hindi"),
    (0x0B80, 0x0BFF, {"ta": "tamil"}, "tamil"),
    (0x1F00, 0x1FFF, {"el": "greek"}, "greek"),
)


def algorithm_for(word: str, language: str | None) -> str | None:
    """The Snowball algorithm for ``word`` (casefolded, letters only) in a text whose
    language is ``language`` (ISO 639-1, or ``None`` when unknown), or ``None`` to keep it."""
    if word.isascii():
        if language is None or language == "en":
            return ENGLISH
        return _LATIN.get(language, ENGLISH)
    point = ord(word[0])
    if point < 0x0250 or 0x1E00 <= point <= 0x1EFF:  # Latin with diacritics
        if language is None or language == "en" or language not in _LATIN:
            return None
        return _LATIN[language]
    for first, last, languages, default in _SCRIPTS:
        if first <= point <= last:
            return languages.get(language or "", default)
    return None


@cache
def stopwords_of(algorithm: str) -> frozenset[str]:
    """The stopwords of a Snowball ``algorithm`` (empty when none is published)."""
    if algorithm == ENGLISH:
        return STOPWORDS
    source = resources.files("memmachine.indexing").joinpath("stopwords", f"{algorithm}.txt")
    if not source.is_file():
        return frozenset()
    return frozenset(source.read_text(encoding="utf-8").split())


class Stemmers:
    """Snowball stemmers made on first use, for one thread's run of the analyser (a PyStemmer
    stemmer is cheap to make and must not be shared between threads)."""

    __slots__ = ("_made",)

    def __init__(self) -> None:
        self._made: dict[str, Stemmer.Stemmer] = {}

    def stem(self, word: str, algorithm: str) -> str:
        stemmer = self._made.get(algorithm)
        if stemmer is None:
            stemmer = self._made[algorithm] = Stemmer.Stemmer(algorithm, 0)
        return str(stemmer.stemWord(word))

    def stem_all(self, words: Iterable[tuple[str, str]]) -> list[str]:
        return [self.stem(word, algorithm) for word, algorithm in words]
