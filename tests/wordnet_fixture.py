"""A few synsets written in WordNet's own file format (wndb(5)), for the tests of the reader
and of the ``categories`` stage: no test needs the real database installed."""

from __future__ import annotations

from pathlib import Path

__all__ = ["SPORTS", "write_wordnet"]

#: The one-word members of "sport" (first sense) in the fixture: more than one full-text
#: query's worth (32 terms), so the stage must search them in parts.
SPORTS = [f"sport{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(36)]

#: (key, words, hypernym keys); the first synset of a word in this list is its first sense.
SYNSETS: list[tuple[str, list[str], list[str]]] = [
    ("entity", ["entity"], []),
    ("thing", ["thing"], ["entity"]),
    ("activity", ["activity"], ["entity"]),
    ("sport", ["sport", "athletics"], ["activity"]),
    ("water_sport", ["water_sport", "aquatics"], ["sport"]),
    ("surfing", ["surfing", "surfboarding"], ["water_sport"]),
    ("swimming", ["swimming"], ["water_sport"]),
    ("basketball", ["basketball", "hoops"], ["sport"]),
    ("skiing", ["skiing"], ["sport"]),
    *((name, [name], ["sport"]) for name in SPORTS),
    ("sport_mutant", ["sport", "mutant"], ["thing"]),  # the second sense of "sport"
    ("mutation", ["mutation"], ["sport_mutant"]),
    ("dog", ["dog"], ["thing"]),
    ("puppy", ["puppy"], ["dog"]),
    ("poodle", ["poodle"], ["dog"]),
    ("child", ["child", "kid"], ["thing"]),
    ("son", ["son"], ["child"]),
    ("daughter", ["daughter"], ["child"]),
    ("goose", ["goose"], ["thing"]),
    ("martial_art", ["martial_art"], ["sport"]),
    ("karate", ["karate"], ["martial_art"]),
]
LICENCE = "  1 This software and database is being provided to you, the LICENSEE, by\n"


def write_wordnet(directory: Path) -> Path:
    """``index.noun``, ``data.noun`` and ``noun.exc`` for :data:`SYNSETS` in ``directory``;
    each synset's offset is its byte offset in ``data.noun``, as in WordNet."""
    directory.mkdir(parents=True, exist_ok=True)
    hyponyms: dict[str, list[str]] = {key: [] for key, _, _ in SYNSETS}
    for key, _, above in SYNSETS:
        for parent in above:
            hyponyms[parent].append(key)

    def line(key: str, words: list[str], above: list[str], offsets: dict[str, int]) -> str:
        pointers = [("@", parent) for parent in above] + [("~", k) for k in hyponyms[key]]
        return (
            f"{offsets.get(key, 0):08d} 03 n {len(words):02x} "
            + "".join(f"{word} 0 " for word in words)
            + f"{len(pointers):03d} "
            + "".join(f"{symbol} {offsets.get(k, 0):08d} n 0000 " for symbol, k in pointers)
            + f"| the synset {key}  \n"
        )

    # every field has a fixed width, so the lines' lengths do not depend on the offsets
    offsets: dict[str, int] = {}
    position = len(LICENCE.encode())
    for key, words, above in SYNSETS:
        offsets[key] = position
        position += len(line(key, words, above, {}).encode())
    data = LICENCE + "".join(line(key, words, above, offsets) for key, words, above in SYNSETS)
    (directory / "data.noun").write_text(data)
    senses: dict[str, list[int]] = {}
    for key, words, _ in SYNSETS:
        for word in words:
            senses.setdefault(word.lower(), []).append(offsets[key])
    index = LICENCE + "".join(
        f"{lemma} n {len(found)} 2 @ ~ {len(found)} 0 "
        + " ".join(f"{offset:08d}" for offset in found)
        + "  \n"
        for lemma, found in sorted(senses.items())
    )
    (directory / "index.noun").write_text(index)
    (directory / "noun.exc").write_text("children child\ngeese goose\n")
    return directory
