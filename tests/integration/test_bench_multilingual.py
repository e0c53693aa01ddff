"""The XQuAD harness (bench/multilingual_recall.py) on a few of its own paragraphs: the kept
data reads as SQuAD's format in parallel across languages, the run stores them through the
manager on embedded stores and finds each question's paragraph, and ``--reuse`` does not store
a language twice."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.test_bench_scale import _load


@pytest.fixture(scope="module")
def xq() -> ModuleType:
    return _load("multilingual_recall")


def test_the_kept_languages_are_parallel(xq: ModuleType) -> None:
    en, zh, ru = (xq.Lang(code) for code in ("en", "zh", "ru"))
    assert len(en.paragraphs) == len(zh.paragraphs) == len(ru.paragraphs) == 240
    assert len(en.questions) == len(zh.questions) == len(ru.questions) == 1190
    assert [own for _, own in en.questions] == [own for _, own in zh.questions]


def test_a_small_run_finds_the_paragraphs_and_reuses_its_stores(
    xq: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMMACHINE_EMBEDDING_PROVIDER", "none")
    original = xq.Lang

    class Small(original):  # type: ignore[misc,valid-type]
        def __init__(self, code: str) -> None:
            super().__init__(code)
            self.paragraphs = self.paragraphs[:6]
            self.questions = [(q, own) for q, own in self.questions if own < 6]

    monkeypatch.setattr(xq, "Lang", Small)
    args = argparse.Namespace(languages="en,zh", cross=True, data_dir=tmp_path, reuse=True)
    rows, meta = asyncio.run(xq.run(args))
    assert set(rows) == {"bm25", "dense", "memmachine lexical", "memmachine"}
    assert rows.pop("dense") == {}  # no embedder: no dense row
    assert set(rows["bm25"]) == {("en", "en"), ("zh", "zh"), ("en", "zh"), ("zh", "en")}
    for name in rows:
        for pair in (("en", "en"), ("zh", "zh")):
            row = rows[name][pair]
            assert row.asked > 20
            assert row.found[10] == row.asked  # six paragraphs: all are in the top 10
            assert row.found[1] / row.asked > 0.7, (name, pair)
    assert all(seconds is not None for seconds in meta["ingest_seconds"].values())
    assert "|" in xq.table(rows)
    _, again = asyncio.run(xq.run(args))
    assert all(seconds is None for seconds in again["ingest_seconds"].values())
