"""How often WordNet's category -> member relation reaches the evidence LoCoMo's search misses.

Reads a ``bench/locomo_recall.py --rankings`` dump (main's defaults), takes every
(question, evidence turn) pair whose turn is not in the top 10 of the ``memmachine`` row, and
asks, for several expansions, whether WordNet links a noun of the question to a noun of the
turn, and how many other turns of the same speaker in the same conversation the same
expansion also reaches (a link that reaches every turn of the speaker ranks nothing).

* **query time** (``members``): each question noun's hyponym closure (its first sense or
  all senses; at most 1, 2, 3 steps down or every step) - "sports" -> "surfing";
* **write time** (``categories``): each turn noun's hypernym closure (its first sense) -
  "surfing" -> "sport" - matched against the question's nouns.

Words are the text's letters-only tokens and adjacent pairs ("pottery_class"), each reduced
to its noun base forms as WordNet's morphy does (:mod:`memmachine.retrieval.wordnet`);
stopwords, the conversation's speaker names and the question's own nouns are never a link
(a shared word is full text's job, not this one's).

    uv run python bench/locomo_recall.py --data-dir DIR --reuse --rankings base.rank.json
    uv run python bench/category_reach.py base.rank.json [--wordnet /usr/share/wordnet]

Results: bench/RESULTS.md, "A category expanded into its members with WordNet".
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from locomo_recall import DEFAULT_DATA, Turn, load

from memmachine.indexing.terms import STOPWORDS
from memmachine.retrieval.wordnet import Lexicon, load_lexicon

_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def nouns(lexicon: Lexicon, text: str, names: set[str]) -> set[str]:
    """The noun lemmas of ``text``: each letters-only token and each adjacent pair of
    tokens, reduced to its base forms, stopwords and ``names`` left out."""
    words = [w for w in _WORD.findall(text.lower()) if "'" not in w]
    out: set[str] = set()
    for i, word in enumerate(words):
        if len(word) >= 3 and word not in STOPWORDS and word not in names:
            out.update(lexicon.base_forms(word))
        if i + 1 < len(words):
            out.update(lexicon.base_forms(f"{word}_{words[i + 1]}"))
    return {lemma for lemma in out if lemma in lexicon.senses}


@dataclass(frozen=True)
class Expansion:
    label: str
    direction: str  # "members" (query time) or "categories" (write time)
    depth: int | None
    senses: int | None


EXPANSIONS = [
    Expansion("members, first sense, 1 step", "members", 1, 1),
    Expansion("members, first sense, 2 steps", "members", 2, 1),
    Expansion("members, first sense, 3 steps", "members", 3, 1),
    Expansion("members, first sense, all steps", "members", None, 1),
    Expansion("members, all senses, 1 step", "members", 1, None),
    Expansion("members, all senses, 2 steps", "members", 2, None),
    Expansion("members, all senses, all steps", "members", None, None),
    Expansion("categories of the turn's words, first sense, 1 step", "categories", 1, 1),
    Expansion("categories, first sense, 2 steps", "categories", 2, 1),
    Expansion("categories, first sense, 3 steps", "categories", 3, 1),
    Expansion("categories, first sense, all steps", "categories", None, 1),
]


class Reach:
    """Which turns one expansion links to one question, with caches per lemma."""

    def __init__(self, lexicon: Lexicon, expansion: Expansion) -> None:
        self.lexicon, self.expansion = lexicon, expansion
        self._cache: dict[str, frozenset[str]] = {}

    def expand(self, lemma: str) -> frozenset[str]:
        if lemma not in self._cache:
            e = self.expansion
            closure = (
                self.lexicon.members(lemma, e.depth, e.senses) or set()
                if e.direction == "members"
                else self.lexicon.categories(lemma, e.depth, e.senses)
            )
            self._cache[lemma] = frozenset(closure)
        return self._cache[lemma]

    def links(self, question: set[str], turn: set[str]) -> set[tuple[str, str]]:
        """(question noun, turn noun) pairs WordNet links, shared nouns left out."""
        fresh = turn - question
        if self.expansion.direction == "members":
            return {(q, t) for q in question for t in fresh & self.expand(q)}
        return {(q, t) for t in fresh for q in question & self.expand(t)}


def member_rank(
    reach: Reach,
    asked: set[str],
    key: tuple[str, str],
    conversation: list[tuple[str, str]],
    turn_nouns: dict[tuple[str, str], set[str]],
) -> int:
    """The evidence turn's rank among the conversation's turns scored by the linked nouns'
    IDF (a full-text search of the members would rank by their rarity), ties counted
    against it."""
    linked = {key: reach.links(asked, turn_nouns[key]) for key in conversation}
    frequency: dict[str, int] = defaultdict(int)
    for links in linked.values():
        for word in {t for _, t in links}:
            frequency[word] += 1
    total = len(conversation)

    def score(k: tuple[str, str]) -> float:
        return sum(math.log(total / frequency[t]) for t in {t for _, t in linked[k]})

    mine = score(key)
    return 1 + sum(1 for k in conversation if k != key and score(k) >= mine)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("rankings", type=Path, help="a locomo_recall.py --rankings dump")
    parser.add_argument("--wordnet", type=Path, default=Path("/usr/share/wordnet"))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--row", default="memmachine", help="which ranking counts as found")
    parser.add_argument("--examples", type=int, default=6)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    lexicon = load_lexicon(args.wordnet)
    turns, _ = load(args.data, None)
    by_id: dict[tuple[str, str], Turn] = {
        (sample, t.dia_id): t for sample, ts in turns.items() for t in ts
    }
    names = {
        sample: {w for t in ts for w in _WORD.findall(t.speaker.lower())}
        for sample, ts in turns.items()
    }
    turn_nouns = {key: nouns(lexicon, t.content, names[key[0]]) for key, t in by_id.items()}
    speaker_turns: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for key, t in by_id.items():
        speaker_turns[key[0], t.speaker].append(key)
    rows: list[dict[str, Any]] = json.loads(args.rankings.read_text())
    missed: list[tuple[dict[str, Any], tuple[str, str], set[str]]] = []
    for row in rows:
        top = set(row["rankings"][args.row][:10])
        sample = row["sample_id"]
        asked = nouns(lexicon, row["question"], names[sample])
        for dia in row["evidence"]:
            if dia not in top and (sample, dia) in by_id:
                missed.append((row, (sample, dia), asked))
    print(f"{len(rows)} questions, {len(missed)} missed (question, evidence turn) pairs")
    per_cat = defaultdict(int)
    for row, _, _ in missed:
        per_cat[row["category"]] += 1
    print("missed pairs per category:", dict(sorted(per_cat.items())))
    print("missed pairs whose question has a WordNet noun:", sum(bool(a) for *_, a in missed))
    conversation_turns: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for key in by_id:
        conversation_turns[key[0]].append(key)
    header = (
        "| expansion | missed pairs reached (all) | multi-hop | open-domain | "
        "median share of the speaker's turns also reached | reached with ≤ 5 % of them | "
        "evidence in the member list's top 10 / 20 | questions: any@10 missing, a turn in "
        "the top 10 | all@10 missing, every missed turn in the top 20 |"
    )
    print("\n" + header + "\n" + "| --- " * 9 + "|")
    results = []
    for expansion in EXPANSIONS:
        reach = Reach(lexicon, expansion)
        reached = []
        for row, key, asked in missed:
            links = reach.links(asked, turn_nouns[key])
            if not links:
                continue
            speaker = by_id[key].speaker
            others = [k for k in speaker_turns[key[0], speaker] if k != key]
            hit = sum(bool(reach.links(asked, turn_nouns[k])) for k in others)
            rank = member_rank(reach, asked, key, conversation_turns[key[0]], turn_nouns)
            reached.append((row, key, links, hit, hit / max(len(others), 1), rank))
        cats = defaultdict(int)
        for row, *_ in reached:
            cats[row["category"]] += 1
        share = statistics.median([r[4] for r in reached]) if reached else 0.0
        selective = [r for r in reached if r[4] <= 0.05]
        top10 = [r for r in reached if r[5] <= 10]
        top20 = [r for r in reached if r[5] <= 20]
        nothing_found = {
            id(row)
            for row in rows
            if not set(row["rankings"][args.row][:10]) & set(row["evidence"])
        }
        any_gain = {id(r[0]) for r in top10} & nothing_found
        in20: dict[int, set[str]] = defaultdict(set)
        for r in top20:
            in20[id(r[0])].add(r[1][1])
        completed = [
            row
            for row in rows
            if id(row) in in20
            and set(row["evidence"]) - set(row["rankings"][args.row][:10]) <= in20[id(row)]
        ]
        all_gain = f"{len(completed)} ({sum(r['category'] == 1 for r in completed)} multi-hop)"
        print(
            f"| {expansion.label} | {len(reached)} / {len(missed)} | {cats[1]} / {per_cat[1]} | "
            f"{cats[3]} / {per_cat[3]} | {share:.1%} | {len(selective)} | {len(top10)} / "
            f"{len(top20)} | {len(any_gain)} / {len(nothing_found)} | {all_gain} |"
        )
        results.append((expansion, reached))
    for expansion, reached in results:
        if expansion.label not in (EXPANSIONS[1].label, EXPANSIONS[8].label):
            continue
        print(f"\nexamples, {expansion.label} (selective first):")
        chosen = sorted(reached, key=lambda r: r[4])[: args.examples]
        for row, key, links, hit, share, rank in chosen:
            print(
                f"- {row['question']!r} -> {by_id[key].content[:90]!r} via "
                f"{sorted(links)[:3]}; {hit} other turns of the speaker ({share:.0%}); "
                f"rank {rank} in the member list"
            )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    e.label: [
                        {"question": r[0]["question"], "turn": r[1][1], "links": sorted(r[2])}
                        for r in reached
                    ]
                    for e, reached in results
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
