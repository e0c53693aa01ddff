"""The LongMemEval harness (bench/longmemeval.py) on a small fixture written in LongMemEval's
published format (tests/fixtures/longmemeval_tiny.json): it reads every field the format
has, scores session and turn recall as LongMemEval defines them, and a real run through the
manager finds the evidence of this easy set."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.test_bench_scale import _load, _run_bench

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "longmemeval_tiny.json"


@pytest.fixture(scope="module")
def lme() -> ModuleType:
    return _load("longmemeval")


def test_the_fixture_is_read_as_longmemeval_defines_it(lme: ModuleType) -> None:
    questions = lme.load(FIXTURE)
    assert [q.id for q in questions][:2] == ["lme_dog_1", "lme_marathon_2"]
    dog = questions[0]
    assert dog.type == "single-session-user"
    assert dog.answer_sessions == {"answer_dog_1"}
    assert dog.evidence_turns == {("answer_dog_1", 2)}  # the has_answer turn
    assert dog.sessions["answer_dog_1"][2].content.startswith("She's a beagle")
    assert dog.sessions["answer_dog_1"][0].timestamp == datetime(2023, 5, 20, 2, 21, tzinfo=UTC)
    assert dog.date == "2023/06/01 (Thu) 10:00"
    marathons = questions[1]
    assert marathons.evidence_turns == {("answer_marathon_a", 0), ("answer_marathon_b", 0)}
    # sessions keep the haystack's order, which is by date
    starts = [turns[0].timestamp for turns in marathons.sessions.values()]
    assert starts == sorted(starts)
    assert questions[-1].abstention
    assert not questions[-1].evidence_turns
    assert [q.id for q in lme.load(FIXTURE, types=["multi-session"])] == ["lme_marathon_2"]
    assert len(lme.load(FIXTURE, limit=3)) == 3


def test_recall_counts_sessions_and_turns_any_and_all(lme: ModuleType) -> None:
    questions = {q.id: q for q in lme.load(FIXTURE)}
    recall = lme.Recall(ks=(1, 2))
    marathons = questions["lme_marathon_2"]
    # one evidence turn first, the other session's turn third: session all@2 holds
    # (the two answer sessions are the first two distinct sessions), turn all@2 does not
    ranked = [("answer_marathon_a", 0), ("answer_marathon_b", 1), ("answer_marathon_b", 0)]
    recall.add(marathons, ranked, 12.0)
    recall.add(questions["lme_cat_6_abs"], [("sharegpt_bike_2", 0)], 8.0)
    assert recall.at("turn", "any", 1) == 1.0
    assert recall.at("turn", "all", 2) == 0.0
    assert recall.at("session", "all", 1) == 0.0
    assert recall.at("session", "all", 2) == 1.0
    assert recall.abstentions == 1  # counted apart, not scored
    assert recall.as_json()["recall"]["overall"]["questions"] == 1
    assert recall.latencies_ms == [12.0, 8.0]


def test_the_harness_runs_end_to_end_on_the_fixture(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "lme.json"
    done = _run_bench(
        "longmemeval", ["--data", str(FIXTURE), "--model", str(model_dir), "--json", str(out)]
    )
    results = json.loads(out.read_text())
    assert results["questions"] == 6
    assert results["ingest"]["turns"] == 76  # every turn of every history
    assert results["ingest"]["turns_per_s"] > 0
    mm = results["memmachine"]
    assert mm["abstentions"] == 1
    overall = mm["recall"]["overall"]
    assert overall["questions"] == 5
    # the evidence of these plain questions is found, turn and session
    assert overall["turn_any@5"] == 1.0
    assert overall["session_any@5"] == 1.0
    assert set(mm["recall"]) >= {"overall", "multi-session", "temporal-reasoning"}
    assert mm["latency_ms"]["p50"] > 0
    assert "session any@5" in done.stdout
    assert "bm25" in done.stdout


def test_missing_data_is_refused_with_where_to_get_it(
    lme: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exited:
        lme.main(["--data", str(tmp_path / "absent.json")])
    assert exited.value.code == 2
    assert "LongMemEval" in capsys.readouterr().err
