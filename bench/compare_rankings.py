"""Compare the rankings that bench/locomo_recall.py ``--rankings`` wrote, question by question.

Within one file, every row (a search path, a stored-twice copy, ...) is compared with a
reference row: how many questions got the very same top-K list, and which did not. Given
several files (the same questions on other stores or in other runs), each row found in all
of them is also compared with the first file's same row.

    uv run python bench/compare_rankings.py falkordb.rankings.json [neo4j.rankings.json ...]
        [--reference memmachine] [--k 20] [--show 10]

A question is named by its conversation, category and text, with whether its evidence is in
the reference's top 10 and in the row's (``hit 1 -> 0``: the row lost it).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Rows of plain baselines, not memmachine's search: left out unless named.
BASELINES = ("bm25", "dense", "hybrid")


def load(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(path.read_text())
    if not isinstance(rows, list) or not rows or "rankings" not in rows[0]:
        raise SystemExit(f"{path}: not a --rankings file of bench/locomo_recall.py")
    return rows


def differing(
    left: Sequence[dict[str, Any]], right: Sequence[dict[str, Any]], a: str, b: str, k: int
) -> list[str]:
    """Questions whose top-``k`` lists differ between row ``a`` of ``left`` and row ``b`` of
    ``right`` (the same questions in the same order), each as one line."""
    if len(left) != len(right):
        raise SystemExit(f"not the same questions: {len(left)} against {len(right)}")
    out = []
    for one, other in zip(left, right, strict=True):
        if (one["sample_id"], one["question"]) != (other["sample_id"], other["question"]):
            raise SystemExit(f"questions out of step: {one['question']!r} / {other['question']!r}")
        first, second = one["rankings"][a][:k], other["rankings"][b][:k]
        if first != second:
            evidence = set(one["evidence"])
            hit = [int(bool(evidence & set(r[:10]))) for r in (first, second)]
            out.append(
                f"{one['sample_id']} c{one['category']} hit {hit[0]} -> {hit[1]}: {one['question']}"
            )
    return out


def report(label: str, diffs: list[str], total: int, show: int) -> list[str]:
    lines = [f"| {label} | {total - len(diffs)} / {total} | {len(diffs)} |"]
    return (
        lines
        + [f"|   {line} | | |" for line in diffs[:show]]
        + ([f"|   ... {len(diffs) - show} more | | |"] if len(diffs) > show else [])
    )


def compare(files: Sequence[Path], reference: str, k: int, show: int) -> str:
    runs = {path: load(path) for path in files}
    first_path, first = next(iter(runs.items()))
    if reference not in first[0]["rankings"]:
        raise SystemExit(f"no row {reference!r} in {first_path}")
    head = [f"| compared | same top {k} | differ |", "| --- | ---: | ---: |"]
    lines = ["", *head]
    for path, rows in runs.items():
        for row in rows[0]["rankings"]:
            if row == reference or row in BASELINES:
                continue
            diffs = differing(rows, rows, reference, row, k)
            lines += report(f"{path.name}: {row} against {reference}", diffs, len(rows), show)
    for path, rows in list(runs.items())[1:]:
        shared = [row for row in first[0]["rankings"] if row in rows[0]["rankings"]]
        for row in shared:
            if row in BASELINES:
                continue
            diffs = differing(first, rows, row, row, k)
            label = f"{row}: {path.name} against {first_path.name}"
            lines += report(label, diffs, len(rows), show)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("files", type=Path, nargs="+", help="--rankings files of locomo_recall")
    parser.add_argument("--reference", default="memmachine", help="the row others are held to")
    parser.add_argument("--k", type=int, default=20, help="compare the top K of each list")
    parser.add_argument("--show", type=int, default=10, help="name at most this many questions")
    args = parser.parse_args()
    print(compare(args.files, args.reference, args.k, args.show))


if __name__ == "__main__":
    main()
