"""Smoke tests of the scale benchmark (bench/scale.py), the REST load test (bench/load.py)
and its replica variant (bench/replicas.py): their arguments are checked, and a very small
run of each goes end to end through the real manager / real ``memmachine serve`` processes,
so the scripts cannot rot."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str) -> ModuleType:
    module_name = f"memmachine_bench_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _run_bench(name: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``bench/<name>.py`` with ``args`` in a fresh interpreter; it must exit 0."""
    done = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def scale() -> ModuleType:
    return _load("scale")


@pytest.fixture(scope="module")
def load() -> ModuleType:
    return _load("load")


def test_scale_arguments(scale: ModuleType) -> None:
    args = scale.build_parser().parse_args(["--sizes", "10k,30_000", "--hot-share", "0.5"])
    assert args.sizes == [10_000, 30_000]
    assert args.hot_share == 0.5
    assert scale.build_parser().parse_args(["--hot", "100k,5k"]).hot == [100_000, 5_000]
    assert args.onnx_episodes == 2_000  # the default real-model share is documented
    with pytest.raises(SystemExit):
        scale.build_parser().parse_args(["--sizes", "ten"])
    with pytest.raises(SystemExit):
        scale.build_parser().parse_args(["--hot", "5", "--hot-share", "0.5"])


def test_scale_refuses_a_bad_hot_share(
    capsys: pytest.CaptureFixture[str], scale: ModuleType
) -> None:
    with pytest.raises(SystemExit) as exited:
        scale.main(["--sizes", "100", "--hot-share", "1.5"])
    assert exited.value.code == 2
    assert "--hot-share" in capsys.readouterr().err


def test_plan_fills_each_size_with_the_hot_user_first(scale: ModuleType) -> None:
    plan = list(scale.plan_batches([250, 500], users=7, batch=60, hot=100, hot_share=None, seed=1))
    batches = [item for _, item in plan]
    assert sum(item.count for checkpoint, item in plan if checkpoint == 250) == 250
    assert sum(item.count for item in batches) == 500
    assert all(0 < item.count <= 60 for item in batches)
    assert sum(item.count for item in batches if item.user == scale.HOT_USER) == 100
    assert [item.user for item in batches[:2]] == [scale.HOT_USER, scale.HOT_USER]
    assert len({item.session for item in batches}) == len(batches)

    shared = [
        item
        for _, item in scale.plan_batches(
            [200, 400], users=3, batch=50, hot=0, hot_share=0.5, seed=1
        )
    ]
    assert sum(item.count for item in shared if item.user == scale.HOT_USER) == 200

    two = list(
        scale.plan_batches([150, 600], users=3, batch=50, hot=[300, 40], hot_share=None, seed=1)
    )
    first, second = scale.hot_users(2)
    held = {
        checkpoint: {
            user: sum(i.count for c, i in two if c <= checkpoint and i.user == user)
            for user in (first, second)
        }
        for checkpoint in (150, 600)
    }
    assert held == {150: {first: 150, second: 0}, 600: {first: 300, second: 40}}


async def test_precomputed_vectors_are_unit_length_and_deterministic(scale: ModuleType) -> None:
    words = {"dog": np.array([1.0, 0.0, 0.0], dtype=np.float32)}
    embedder = scale.PrecomputedEmbedder("some-model", words)
    first = await embedder.embed(["the dog", "the dog", "2024-01-01 Ana: dog"])
    assert embedder.dimensions == 3
    assert embedder.model == "some-model"
    assert first[0] == first[1]
    for vector in first:
        assert math.isclose(float(np.linalg.norm(vector)), 1.0, rel_tol=1e-5)


async def test_precomputed_spans_pool_the_words_inside_them(scale: ModuleType) -> None:
    words = {"the": np.array([1.0, 0, 0]), "dog": np.array([0, 1.0, 0])}
    embedder = scale.PrecomputedEmbedder("some-model", words)
    text = "the dog ran"
    (whole,) = await embedder.embed([text])
    ((same, dog, none),) = await embedder.embed_spans([text], [[[(0, 11)], [(4, 7)], [(8, 9)]]])
    assert same == whole
    assert dog == pytest.approx([0.0, 1.0, 0.0])
    assert none is None  # "r" alone is no whole word
    assert await embedder.count_tokens([text, ""]) == [5, 2]


def test_percentiles(scale: ModuleType) -> None:
    cut = scale.percentiles([float(value) for value in range(1, 101)])
    assert cut["p50"] == pytest.approx(50.5)
    assert cut["p95"] == pytest.approx(95.05)
    assert cut["p99"] > cut["p95"]


def test_load_arguments(load: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    args = load.build_parser().parse_args(["--clients", "3", "--duration", "5"])
    assert (args.clients, args.duration) == (3, 5.0)
    with pytest.raises(SystemExit) as exited:
        load.main(["--search-ratio", "2"])
    assert exited.value.code == 2
    assert "--search-ratio" in capsys.readouterr().err


def test_a_tiny_scale_run(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    done = _run_bench(
        "scale",
        [
            "--sizes",
            "100,200",
            "--hot",
            "80,30",
            "--users",
            "5",
            "--batch",
            "40",
            "--onnx-episodes",
            "40",
            "--queries",
            "4",
            "--model",
            str(model_dir),
            "--json",
            str(out),
        ],
    )
    assert "| 200 | 80 |" in done.stdout  # the size table, hot scope fixed at 80
    assert "| 200 | 30 |" in done.stdout  # and the second hot user's
    results = json.loads(out.read_text())
    ingest = results["ingest"]
    assert ingest["onnx"]["episodes"] + ingest["precomputed"]["episodes"] == 200
    assert ingest["onnx"]["episodes"] == 40
    assert [point["hot_scope_episodes"] for point in results["checkpoints"]] == [80, 80]
    held = [[scope["episodes"] for scope in point["scopes"]] for point in results["checkpoints"]]
    assert held == [[80, 20], [80, 30]]  # hot users filled in order, within each size
    for point in results["checkpoints"]:
        for scope in point["scopes"]:
            assert scope["search_ms"]["with_embedding"]["p95"] > 0
            assert scope["search_ms"]["mean_hits"]["value"] > 0  # searches found episodes
            assert scope["index"]["loaded"]  # searched by the in-process index
        assert point["resources"]["graph_rss"] > 0
    assert "Growth for a fixed scope of 80 episodes, store 100 -> 200" in done.stdout


def test_a_tiny_production_run_on_both_graph_stores(model_dir: Path, tmp_path: Path) -> None:
    """--production --graph falkordb,neo4j: the bench starts its own PostgreSQL, Redis and
    both graph servers, runs the same episodes and queries on each, and puts them side by
    side; the same searches find the same number of episodes on both."""
    out = tmp_path / "trio.json"
    done = _run_bench(
        "scale",
        [
            "--production",
            "--graph", "falkordb,neo4j",
            "--sizes", "120",
            "--hot", "60",
            "--users", "3",
            "--batch", "30",
            "--onnx-episodes", "30",
            "--queries", "3",
            "--store-queries", "2",
            "--model", str(model_dir),
            "--json", str(out),
        ],
    )  # fmt: skip
    assert "Side by side" in done.stdout
    assert "| FalkorDB | 120 | 60 |" in done.stdout
    assert "| Neo4j | 120 | 60 |" in done.stdout
    runs = json.loads(out.read_text())["runs"]
    assert [run["graph"] for run in runs] == ["FalkorDB", "Neo4j"]
    assert [run["stores"] for run in runs] == [
        "production (FalkorDB server, PostgreSQL, Redis)",
        "production (Neo4j server, PostgreSQL, Redis)",
    ]
    hits = [run["checkpoints"][0]["search_ms"]["mean_hits"]["value"] for run in runs]
    assert hits[0] > 0
    assert hits[0] == hits[1]
    for run in runs:
        assert run["checkpoints"][0]["resources"]["graph_rss"] > 0
        assert run["checkpoints"][0]["resources"]["postgres_db"] > 0


def test_ingest_profiles_compare_write_paths_on_the_same_episodes(
    scale: ModuleType, model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "profiles.json"
    done = _run_bench(
        "scale",
        [
            "--ingest-profiles",
            "60",
            "--users",
            "4",
            "--batch",
            "20",
            "--model",
            str(model_dir),
            "--json",
            str(out),
        ],
    )
    rows = json.loads(out.read_text())["profiles"]
    assert [row["label"] for row in rows] == [label for label, _, _ in scale.INGEST_PROFILES]
    assert all(row["stored"] == row["episodes"] == 60 for row in rows)  # nothing lost
    models = {row["quantize"]: row["model"] for row in rows}
    assert models["int8"] != models["none"]  # the int8 rows really ran the int8 copy
    by_label = {row["label"]: row for row in rows}
    store_path = by_label["store path only (precomputed vectors)"]
    assert store_path["episodes_per_cpu_s"] > rows[0]["episodes_per_cpu_s"]
    assert "| int8, no context window |" in done.stdout


def test_ingest_profiles_need_fresh_stores(
    scale: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exited:
        scale.main(["--ingest-profiles", "10", "--data-dir", str(tmp_path)])
    assert exited.value.code == 2
    assert "--data-dir" in capsys.readouterr().err


def test_a_tiny_load_run(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    _run_bench(
        "load",
        [
            "--clients",
            "3",
            "--users",
            "2",
            "--duration",
            "4",
            "--max-ops",
            "24",
            "--model",
            str(model_dir),
            "--json",
            str(out),
        ],
    )
    results = json.loads(out.read_text())
    check = results["verify"]
    assert results["errors"] == 0
    assert results["operations"]["add"]["count"] > 0
    assert check["acknowledged"] == check["stored"] > 0
    assert check["missing"] == check["unexpected"] == check["changed"] == 0
    assert results["child_left_running"] is False


def test_graph_costs_takes_each_store_apart(tmp_path: Path) -> None:
    """bench/graph_costs.py: the same episodes on FalkorDB and Neo4j, the store as
    configured and without vectors, each search part timed; on Neo4j the profiled vector
    scan reads exactly the scope's episodes through the index, no others."""
    out = tmp_path / "costs.json"
    _run_bench(
        "graph_costs",
        [
            "--episodes", "50",
            "--batch", "25",
            "--queries", "2",
            "--variants", "as configured,no vectors",
            "--json", str(out),
        ],
    )  # fmt: skip
    stores = json.loads(out.read_text())["stores"]
    assert set(stores) == {"FalkorDB", "Neo4j"}
    for rows in stores.values():
        assert set(rows) == {"as configured", "no vectors"}
        assert all(row["episodes"] == 50 for row in rows.values())
        assert "scan the episodes' own vectors" in rows["as configured"]["searches"]
    profile = stores["Neo4j"]["as configured"]["searches"]["profile"]
    seeks = [op for op in profile["operators"] if op["operator"].startswith("NodeIndexSeek")]
    assert [op["rows"] for op in seeks] == [50]


def test_a_tiny_replicas_run(
    model_dir: Path, tmp_path: Path, postgres_admin_url: str, redis_service_url: str
) -> None:
    """bench/replicas.py: one replica, then two, on production stores; nothing lost, the
    probe's writes found through the other replica, deleted ones never returned."""
    out = tmp_path / "replicas.json"
    _run_bench(
        "replicas",
        [
            "--phases", "1,2",
            "--clients", "2",
            "--duration", "3",
            "--max-ops", "20",
            "--probe-pause", "0.05",
            "--model", str(model_dir),
            "--postgres-admin-url", postgres_admin_url,
            "--machine-redis-url", redis_service_url,
            "--json", str(out),
        ],
    )  # fmt: skip
    results = json.loads(out.read_text())
    assert [phase["replicas"] for phase in results["phases"]] == [1, 2]
    for phase in results["phases"]:
        check, probes = phase["verify"], phase["probes"]
        assert phase["errors"] == 0
        assert check["acknowledged"] == check["stored"] > 0
        assert check["missing"] == check["unexpected"] == check["changed"] == 0
        assert probes["found_first"] >= 1
        assert probes["never_found"] == probes["resurfaced"] == probes["error_count"] == 0
    assert results["server_log_tracebacks"] == 0
