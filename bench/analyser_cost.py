"""Cost per text of the analyser before and after it read every language.

Times ``document_terms`` and ``query_terms`` of the current analyser
(``memmachine.indexing.terms``) against the English-only analyser of version 2, loaded from
git (commit 0c23023), on LoCoMo turns and questions and on XQuAD Chinese and Russian
paragraphs and questions. Reports the median and p95 microseconds per text after a warm-up.

    nice uv run python bench/analyser_cost.py --locomo ../shared/bench/locomo_public.json
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from memmachine.indexing import terms as current

OLD_COMMIT = "0c23023"
XQUAD = Path(__file__).parent / "data" / "xquad"


def _old_analyser() -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{OLD_COMMIT}:memmachine/indexing/terms.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "terms_v2.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("terms_v2", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the analyser of {OLD_COMMIT}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _locomo(path: Path) -> tuple[list[str], list[str]]:
    turns: list[str] = []
    questions: list[str] = []
    for sample in json.loads(path.read_text()):
        conversation = sample["conversation"]
        for key, value in conversation.items():
            if key.startswith("session_") and isinstance(value, list):
                turns.extend(turn["text"] for turn in value)
        questions.extend(qa["question"] for qa in sample["qa"])
    return turns, questions


def _xquad(language: str) -> tuple[list[str], list[str]]:
    with gzip.open(XQUAD / f"xquad.{language}.json.gz", "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    paragraphs: list[str] = []
    questions: list[str] = []
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            paragraphs.append(paragraph["context"])
            questions.extend(qa["question"] for qa in paragraph["qas"])
    return paragraphs, questions


def _timed(function: Callable[[str], object], texts: list[str]) -> tuple[float, float]:
    for text in texts[:200]:
        function(text)
    samples: list[float] = []
    for text in texts:
        start = time.perf_counter_ns()
        function(text)
        samples.append((time.perf_counter_ns() - start) / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--locomo", type=Path, required=True)
    args = parser.parse_args()
    old = _old_analyser()
    turns, locomo_questions = _locomo(args.locomo)
    zh_paragraphs, zh_questions = _xquad("zh")
    ru_paragraphs, ru_questions = _xquad("ru")
    corpora = [
        ("LoCoMo turns", "document_terms", turns),
        ("LoCoMo questions", "query_terms", locomo_questions),
        ("XQuAD zh paragraphs", "document_terms", zh_paragraphs),
        ("XQuAD zh questions", "query_terms", zh_questions),
        ("XQuAD ru paragraphs", "document_terms", ru_paragraphs),
        ("XQuAD ru questions", "query_terms", ru_questions),
    ]
    print("| texts | n | function | v2 median µs | v2 p95 µs | v3 median µs | v3 p95 µs |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, function, texts in corpora:
        before = _timed(getattr(old, function), texts)
        after = _timed(getattr(current, function), texts)
        print(
            f"| {name} | {len(texts)} | {function} | {before[0]:.1f} | {before[1]:.1f} "
            f"| {after[0]:.1f} | {after[1]:.1f} |"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
