"""Lexical recall of the shared analyser per language, on XQuAD (questions -> paragraphs).

Each language's 240 paragraphs are ranked for each of its 1,190 questions by Okapi BM25
(k1 1.2, b 0.75, as every store ranks) over one analyser's terms; recall@K is the share of
questions whose own paragraph is among the first K. Analysers compared in the same run:

* ``v2``: the analyser before issue 33 (English Snowball only, a run of letters is one term);
* ``v3``: the analyser of ``memmachine.indexing.terms`` (language detected per text, a stemmer
  and stopwords per language, Chinese and Japanese as character pairs);
* ``v3-jieba``: v3 with Chinese cut by jieba's search mode instead of character pairs (needs
  ``--with jieba``).

Also the cost of analysing one paragraph and one question (µs, median over the run).

    uv run --with jieba python bench/analyser_languages.py --old-terms /tmp/oldterms.py
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memmachine.indexing import terms as v3  # noqa: E402
from memmachine.indexing.segmentation import is_unspaced  # noqa: E402

DATA = ROOT / "bench" / "data" / "xquad"
Analyser = Callable[[str], list[str]]


def load(language: str, source: Path | None) -> tuple[list[str], list[tuple[str, int]]]:
    """(paragraphs, [(question, index of its paragraph)]) of one XQuAD language."""
    import gzip

    path = source / f"xquad.{language}.json" if source else DATA / f"xquad.{language}.json.gz"
    raw = path.read_bytes()
    data: Any = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    paragraphs: list[str] = []
    questions: list[tuple[str, int]] = []
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            paragraphs.append(paragraph["context"])
            questions += [(qa["question"], len(paragraphs) - 1) for qa in paragraph["qas"]]
    return paragraphs, questions


def bm25_recall(
    paragraphs: list[str], questions: list[tuple[str, int]], doc: Analyser, query: Analyser
) -> tuple[dict[int, float], float, float]:
    docs = [Counter(doc(p)) for p in paragraphs]
    lengths = [sum(c.values()) for c in docs]
    average = sum(lengths) / len(lengths)
    frequency: Counter[str] = Counter()
    for counts in docs:
        frequency.update(counts.keys())
    n = len(docs)
    hits = {1: 0, 5: 0, 10: 0}
    for question, own in questions:
        scores = []
        for i, counts in enumerate(docs):
            score = 0.0
            for term in query(question):
                tf = counts.get(term, 0)
                if tf:
                    idf = math.log(1 + (n - frequency[term] + 0.5) / (frequency[term] + 0.5))
                    norm = 1.2 * (1 - 0.75 + 0.75 * lengths[i] / average)
                    score += idf * tf * 2.2 / (tf + norm)
            scores.append(score)
        ranked = sorted(range(n), key=lambda i: -scores[i])
        for k in hits:
            hits[k] += own in ranked[:k] and scores[own] > 0
    per_doc = timed(doc, paragraphs)
    per_query = timed(query, [q for q, _ in questions])
    return {k: v / len(questions) for k, v in hits.items()}, per_doc, per_query


def timed(analyser: Analyser, texts: list[str]) -> float:
    times = []
    for text in texts:
        start = time.perf_counter()
        analyser(text + " ")  # a new string: no cached detection
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def jieba_variant() -> tuple[Analyser, Analyser]:
    """v3 with each Chinese run cut by jieba's search mode (words and their sub-words)."""
    import jieba

    jieba.setLogLevel(60)

    def doc(text: str) -> list[str]:
        words: list[str] = []
        for token in v3.TERM_PATTERN.findall(text.casefold()):
            if any(is_unspaced(char) for char in token):
                words += [w for w in jieba.cut_for_search(token) if w.strip()]
            else:
                words += v3.document_terms(token, "zh")
        return words

    def query(text: str) -> list[str]:
        return list(dict.fromkeys(doc(text)))

    return doc, query


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--languages", default="en,zh,ru,es,de,ar,hi")
    parser.add_argument("--source", type=Path, help="a folder of xquad.<lang>.json files")
    parser.add_argument("--old-terms", type=Path, help="terms.py of analyser version 2")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    analysers: dict[str, tuple[Analyser, Analyser]] = {}
    if args.old_terms:
        spec = importlib.util.spec_from_file_location("old_terms", args.old_terms)
        assert spec
        assert spec.loader
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        analysers["v2"] = (old.document_terms, old.query_terms)
    analysers["v3"] = (v3.document_terms, v3.query_terms)
    with contextlib.suppress(ImportError):
        analysers["v3-jieba"] = jieba_variant()
    rows: list[dict[str, Any]] = []
    print(
        "| language | analyser | recall@1 | recall@5 | recall@10 | µs / paragraph | µs / question |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for language in args.languages.split(","):
        paragraphs, questions = load(language, args.source)
        for name, (doc, query) in analysers.items():
            if name == "v3-jieba" and language not in ("zh",):
                continue
            recall, per_doc, per_query = bm25_recall(paragraphs, questions, doc, query)
            rows.append({"language": language, "analyser": name, **recall, "doc_us": per_doc})
            print(
                f"| {language} | {name} | {recall[1]:.3f} | {recall[5]:.3f} | {recall[10]:.3f} "
                f"| {per_doc:.0f} | {per_query:.0f} |",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
