"""A reader of WordNet's noun database: a category's members and a word's categories.

WordNet (Princeton, WordNet 3.0 licence; Debian's ``wordnet-base`` puts it in
``/usr/share/wordnet``) is a lexical database, not a model: each noun synset lists its
words and its pointers to more general synsets (hypernyms, ``@`` and ``@i``) and more
specific ones (hyponyms, ``~`` and ``~i``). "sport" reaches "surfing", "skiing" and
"basketball" through its hyponyms. This module reads the files itself (the format of
wndb(5)): ``index.noun`` (each lemma's synsets, most frequent sense first), ``data.noun``
(each synset's words and pointers) and ``noun.exc`` (irregular plurals), and finds a
word's base form as morphy(7) does for nouns (the exception list, then the plural endings,
kept only when the result is a noun of the index).

Nothing is read at import time: :func:`load_lexicon` reads a directory when called (the
composition root calls it once) and refuses a missing or malformed one with
:class:`~memmachine.errors.ConfigurationError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from memmachine.errors import ConfigurationError

__all__ = ["Lexicon", "load_lexicon"]

#: morphy(7)'s detachment rules for nouns: an ending and what replaces it.
_NOUN_ENDINGS = (
    ("s", ""),
    ("ses", "s"),
    ("xes", "x"),
    ("zes", "z"),
    ("ches", "ch"),
    ("shes", "sh"),
    ("men", "man"),
    ("ies", "y"),
)
_DOWN = ("~", "~i")  # hyponym, instance hyponym
_UP = ("@", "@i")  # hypernym, instance hypernym


@dataclass(frozen=True)
class Lexicon:
    """WordNet's nouns: each lemma's synsets (most frequent sense first), each synset's
    lemmas and its hyponym and hypernym synsets. Lemmas are lower case, words of a compound
    joined by ``_`` as in the files ("pottery_class")."""

    senses: dict[str, tuple[int, ...]]
    lemmas: dict[int, tuple[str, ...]]
    hyponyms: dict[int, tuple[int, ...]]
    hypernyms: dict[int, tuple[int, ...]]
    exceptions: dict[str, tuple[str, ...]]

    def base_forms(self, word: str) -> list[str]:
        """The noun lemmas ``word`` may be a form of ("dogs" -> "dog", "geese" -> "goose"),
        the word itself first when it is one; empty when it is no noun."""
        word = word.lower()
        found = [word] if word in self.senses else []
        found += [base for base in self.exceptions.get(word, ()) if base in self.senses]
        for ending, replacement in _NOUN_ENDINGS:
            if word.endswith(ending) and len(word) > len(ending):
                base = word[: -len(ending)] + replacement
                if base in self.senses:
                    found.append(base)
        return list(dict.fromkeys(found))

    def synsets(self, lemma: str, senses: int | None = None) -> tuple[int, ...]:
        """``lemma``'s synsets, most frequent first; only the first ``senses`` when given."""
        found = self.senses.get(lemma, ())
        return found if senses is None else found[:senses]

    def _closure(
        self,
        start: Iterable[int],
        links: dict[int, tuple[int, ...]],
        depth: int | None,
        limit: int | None = None,
    ) -> set[int] | None:
        """The synsets reached from ``start`` through ``links`` in at most ``depth`` steps
        (every step when None), ``start`` excluded unless reached again; None as soon as
        more than ``limit`` are reached."""
        seen: set[int] = set()
        frontier = list(dict.fromkeys(start))
        step = 0
        while frontier and (depth is None or step < depth):
            step += 1
            following: list[int] = []
            for synset in frontier:
                for linked in links.get(synset, ()):
                    if linked not in seen:
                        seen.add(linked)
                        following.append(linked)
            if limit is not None and len(seen) > limit:
                return None
            frontier = following
        return seen

    def members(
        self,
        lemma: str,
        depth: int | None = None,
        senses: int | None = None,
        limit: int | None = None,
    ) -> set[str] | None:
        """The lemmas of the synsets below ``lemma`` (its hyponyms, theirs, ... at most
        ``depth`` steps down; of its first ``senses`` senses when given): "sport" ->
        "surfing", "skiing", ... The lemma itself is not among them. None when there are
        more than ``limit`` (a category too general to single anything out)."""
        below = self._closure(self.synsets(lemma, senses), self.hyponyms, depth, limit)
        if below is None:
            return None
        found = {word for synset in below for word in self.lemmas[synset]} - {lemma}
        return None if limit is not None and len(found) > limit else found

    def categories(
        self, lemma: str, depth: int | None = None, senses: int | None = None
    ) -> set[str]:
        """The lemmas of the synsets above ``lemma`` (its hypernyms, at most ``depth`` steps
        up; of its first ``senses`` senses when given): "surfing" -> "water_sport",
        "sport", ..."""
        above = self._closure(self.synsets(lemma, senses), self.hypernyms, depth) or set()
        return {word for synset in above for word in self.lemmas[synset]} - {lemma}


def _read(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise ConfigurationError(f"cannot read WordNet file {path}: {exc.strerror}") from exc


def _parse_index(lines: list[str], path: Path) -> dict[str, tuple[int, ...]]:
    """``index.noun``: ``lemma pos synset_cnt p_cnt [ptr_symbol...] sense_cnt tagsense_cnt
    synset_offset...`` (lines starting with a space are the licence)."""
    senses: dict[str, tuple[int, ...]] = {}
    for number, line in enumerate(lines, start=1):
        if not line or line.startswith(" "):
            continue
        fields = line.split()
        try:
            count = int(fields[2])
            pointers = int(fields[3])
            offsets = fields[6 + pointers : 6 + pointers + count]
            if len(offsets) != count:
                raise ValueError("fewer synset offsets than synset_cnt")
            senses[fields[0]] = tuple(int(offset) for offset in offsets)
        except (IndexError, ValueError) as exc:
            raise ConfigurationError(f"malformed WordNet index {path}, line {number}") from exc
    return senses


def _parse_data(
    lines: list[str], path: Path
) -> tuple[dict[int, tuple[str, ...]], dict[int, tuple[int, ...]], dict[int, tuple[int, ...]]]:
    """``data.noun``: ``synset_offset lex_filenum ss_type w_cnt word lex_id [word lex_id...]
    p_cnt [pointer_symbol synset_offset pos source/target...] | gloss``; ``w_cnt`` is two
    hexadecimal digits, ``p_cnt`` three decimal ones."""
    lemmas: dict[int, tuple[str, ...]] = {}
    down: dict[int, tuple[int, ...]] = {}
    up: dict[int, tuple[int, ...]] = {}
    for number, line in enumerate(lines, start=1):
        if not line or line.startswith(" "):
            continue
        fields = line.split(" | ", 1)[0].split()
        try:
            offset = int(fields[0])
            words = int(fields[3], 16)
            lemmas[offset] = tuple(fields[4 + 2 * i].lower() for i in range(words))
            at = 4 + 2 * words
            pointers = int(fields[at])
            below: list[int] = []
            above: list[int] = []
            for i in range(pointers):
                symbol, target, pos = fields[at + 1 + 4 * i : at + 4 + 4 * i]
                if pos != "n":
                    continue
                if symbol in _DOWN:
                    below.append(int(target))
                elif symbol in _UP:
                    above.append(int(target))
        except (IndexError, ValueError) as exc:
            raise ConfigurationError(f"malformed WordNet data {path}, line {number}") from exc
        if below:
            down[offset] = tuple(below)
        if above:
            up[offset] = tuple(above)
    return lemmas, down, up


def load_lexicon(directory: Path) -> Lexicon:
    """WordNet's nouns from ``directory`` (``index.noun``, ``data.noun``, ``noun.exc``
    optional). A missing directory or file, or a file not in WordNet's format, is a
    :class:`~memmachine.errors.ConfigurationError` naming the path."""
    if not directory.is_dir():
        raise ConfigurationError(f"WordNet directory {directory} does not exist")
    index_path, data_path = directory / "index.noun", directory / "data.noun"
    senses = _parse_index(_read(index_path), index_path)
    lemmas, down, up = _parse_data(_read(data_path), data_path)
    if not senses or not lemmas:
        raise ConfigurationError(f"WordNet directory {directory} holds no nouns")
    missing = next((o for offsets in senses.values() for o in offsets if o not in lemmas), None)
    if missing is not None:
        raise ConfigurationError(
            f"WordNet index {index_path} names synset {missing:08d}, which {data_path} lacks"
        )
    exceptions: dict[str, tuple[str, ...]] = {}
    exc_path = directory / "noun.exc"
    if exc_path.exists():
        for line in _read(exc_path):
            inflected, *bases = line.split() or [""]
            if bases:
                exceptions[inflected] = tuple(bases)
    return Lexicon(senses, lemmas, down, up, exceptions)
