"""A tiny run of the many-users benchmark (bench/many_users.py), so it cannot rot: users of
skewed sizes searched in Zipf order on a small index budget, indexes in memory only and then
kept on disk, every search through the real manager with the real model."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.test_bench_scale import _load, _run_bench


@pytest.fixture(scope="module")
def many() -> ModuleType:
    return _load("many_users")


def test_sizes_and_search_order_are_skewed_and_seeded(many: ModuleType) -> None:
    args = many.build_parser().parse_args(
        ["--users", "200", "--big", "2", "--big-size", "5000", "--big-ranks", "1,50"]
    )
    sizes = many.plan_sizes(args)
    assert len(sizes) == 200
    assert [sizes["big-1"], sizes["big-2"]] == [5000, 5000]
    others = sorted(size for user, size in sizes.items() if user.startswith("user"))
    assert others[0] >= 100
    assert others[-1] <= 5000
    assert others[len(others) // 2] < 400  # most users are small
    sequence = many.zipf_sequence(list(sizes), args)
    assert sequence == many.zipf_sequence(list(sizes), args)  # seeded
    counts = {user: sequence.count(user) for user in set(sequence)}
    assert max(counts, key=counts.__getitem__) == "big-1"  # placed at rank 1
    assert counts["big-1"] > 5 * counts.get("big-2", 0)


def test_a_tiny_run_on_both_index_kinds(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "many.json"
    budget_mb = 1
    _run_bench(
        "many_users",
        [
            "--users", "25",
            "--big", "1",
            "--big-size", "800",
            "--min-size", "20",
            "--max-size", "200",
            "--big-ranks", "2",
            "--searches", "60",
            "--baseline-searches", "30",
            "--budget-mb", str(budget_mb),
            "--model", str(model_dir),
            "--json", str(out),
        ],
    )  # fmt: skip
    results = json.loads(out.read_text())
    assert results["users"] == 25
    for key, searches in (("baseline", 30), ("on_disk", 60)):
        run = results[key]
        assert run["searches"] == searches
        assert sum(run["answered"].values()) == searches
        assert run["index_memory_max"] <= budget_mb << 20  # the budget holds
        assert run["latency_ms"]["all"]["p95"] > 0
    disk = results["on_disk"]["answered"]
    assert disk.get("opened", 0) > 0  # users out of memory came back from their files
    assert disk.get("loaded", 0) == 0  # never read back from the store
    assert results["baseline"]["answered"].get("loaded", 0) > 0
    assert results["build"]["disk_bytes"] > 0
