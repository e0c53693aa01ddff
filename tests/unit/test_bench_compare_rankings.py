"""bench/compare_rankings.py, the question-by-question comparison of locomo_recall's
``--rankings`` files: it counts the questions whose top K differ and names them, within a
run (path against path, copy against copy) and across runs (store against store)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_bench_scale import _load, _run_bench


def _question(text: str, rankings: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "sample_id": "conv-1",
        "category": 4,
        "question": text,
        "evidence": ["D1:1"],
        "rankings": {"bm25": ["D9:9"], **rankings},
    }


def _write(path: Path, questions: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(questions))
    return path


def test_names_the_questions_whose_lists_differ(tmp_path: Path) -> None:
    same = ["D1:1", "D1:2", "D1:3"]
    run = _write(
        tmp_path / "falkordb.json",
        [
            _question("Where?", {"memmachine": same, "stored twice": same}),
            # the copy lost the evidence from its top 10
            _question("Who?", {"memmachine": same, "stored twice": ["D1:2", "D1:3"]}),
            # differs only past the top 2
            _question("When?", {"memmachine": same, "stored twice": ["D1:1", "D1:2", "D2:1"]}),
        ],
    )
    other = _write(
        tmp_path / "neo4j.json",
        [
            _question("Where?", {"memmachine": same, "stored twice": same}),
            _question("Who?", {"memmachine": same, "stored twice": ["D1:2", "D1:3"]}),
            _question("When?", {"memmachine": ["D1:3"], "stored twice": same}),
        ],
    )
    compare = _load("compare_rankings").compare
    table = compare([run, other], "memmachine", 20, 10)
    assert "| falkordb.json: stored twice against memmachine | 1 / 3 | 2 |" in table
    assert "conv-1 c4 hit 1 -> 0: Who?" in table
    assert "| memmachine: neo4j.json against falkordb.json | 2 / 3 | 1 |" in table
    assert "| stored twice: neo4j.json against falkordb.json | 2 / 3 | 1 |" in table
    assert "bm25" not in table
    assert "| falkordb.json: stored twice against memmachine | 2 / 3 | 1 |" in compare(
        [run], "memmachine", 2, 10
    )


def test_refuses_files_of_other_questions(tmp_path: Path) -> None:
    one = _write(tmp_path / "a.json", [_question("Where?", {"memmachine": ["D1:1"]})])
    two = _write(tmp_path / "b.json", [_question("Who?", {"memmachine": ["D1:1"]})])
    with pytest.raises(SystemExit, match="out of step"):
        _load("compare_rankings").compare([one, two], "memmachine", 20, 10)


def test_runs_as_a_script(tmp_path: Path) -> None:
    run = _write(tmp_path / "r.json", [_question("Where?", {"memmachine": ["D1:1"], "x": []})])
    done = _run_bench("compare_rankings", [str(run), "--k", "10"])
    assert "| r.json: x against memmachine | 0 / 1 | 1 |" in done.stdout
