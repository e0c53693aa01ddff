"""Where a graph store spends its time: the episode store's writes and searches taken apart,
on FalkorDB and on Neo4j, each on a fresh server the bench starts (tests/services.py).

Writes: the same synthetic episodes (one user, sessions of ``--batch`` messages, one
384-d vector per episode plus a context-window vector and, for one in four, a sentence
vector, as the default write path stores them) go through ``add_episodes`` on the store as
the app configures it (vectors and the full-text index; neither store creates a vector
index), then with Neo4j's vector index added back as earlier versions created it, without
the full-text index, and without any vectors. The differences say what each part
costs. Every row reports wall time and the CPU seconds of the graph server and of this
process (from /proc), so a busy machine shows as slower wall time, not as a different cost.

Searches, on the ``--episodes`` of the one scope, each part on its own: find the scope's
episodes (no scoring), the exact scan of the episodes' own vectors that
``vector_search`` runs, the scan of the derivative (sentence/window) vectors, the BM25
full-text query, and, on Neo4j, a vector index (created by the bench for it) queried
directly. On Neo4j the plan of the vector scan is profiled: its database hits and page-cache
hits per search.

    uv run python bench/graph_costs.py --episodes 20000 --json /tmp/graph-costs.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from memmachine.adapters.cypher.cypher_dialect import scope_predicate
from memmachine.adapters.cypher.cypher_episode_store import CypherEpisodeStore
from memmachine.models import EpisodeRecord, Scope

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # the sibling bench: servers, CPU clocks, vocabulary

DIMENSIONS = 384
VARIANTS = {
    "as configured": "vectors, full-text index (what the app runs)",
    "with a vector index": "Neo4j's vector index added back, as versions before issue 22 had",
    "no full-text index": "the full-text index dropped",
    "no vectors": "lexical-only store: no vectors at all, full-text index kept",
}


def make_store(kind: str, variant: str, server: Any) -> CypherEpisodeStore:
    """An unstarted store of ``kind`` on ``server``, with or without vectors per ``variant``."""
    dims = None if variant == "no vectors" else DIMENSIONS
    if kind == "neo4j":
        from memmachine.adapters.neo4j.neo4j_episode_store import Neo4jEpisodeStore

        return Neo4jEpisodeStore(
            server.url,
            user=server.user,
            password=server.password,
            embedding_dimensions=dims,
            embedding_model="bench",
        )
    from memmachine.adapters.falkordb.falkordb_episode_store import FalkorDBEpisodeStore

    return FalkorDBEpisodeStore(
        server.url, graph_name="costs", embedding_dimensions=dims, embedding_model="bench"
    )


async def measure_variant(
    kind: str, variant: str, server: Any, args: argparse.Namespace
) -> dict[str, Any]:
    """Ingest into a fresh store with ``variant``'s schema; search it when as configured."""
    store = make_store(kind, variant, server)
    await store.start()
    try:
        await drop_indexes(store, kind, variant)
        row = await ingest(store, server.pid, args)
        if variant == "as configured":
            row["searches"] = await measure_searches(store, kind, server.pid, args)
        return row
    finally:
        await store.close()


#: Neo4j's vector index as versions before issue 22 created it (and the searches query).
NEO4J_VECTOR_INDEX = (
    "CREATE VECTOR INDEX episode_embedding IF NOT EXISTS FOR (n:Episode) ON (n.embedding) "
    "OPTIONS {indexConfig: {`vector.dimensions`: 384, `vector.similarity_function`: 'cosine'}}"
)


async def drop_indexes(store: Any, kind: str, variant: str) -> None:
    if kind == "neo4j" and variant == "with a vector index":
        await store._run(NEO4J_VECTOR_INDEX)
        await store._run("CALL db.awaitIndexes(120)")
    if variant == "no full-text index":
        if kind == "neo4j":
            await store._run("DROP INDEX episode_terms IF EXISTS")
        else:
            await store._run("CALL db.idx.fulltext.drop('Episode')")


def unit(rng: np.random.Generator) -> list[float]:
    vector = rng.standard_normal(DIMENSIONS).astype(np.float32)
    return [float(x) for x in vector / np.linalg.norm(vector)]


def batches(count: int, size: int, seed: int) -> Iterator[tuple[Scope, list[EpisodeRecord]]]:
    """``count`` episodes of one user in sessions of ``size``, one batch per session."""
    words = scale.vocabulary()
    rng, vectors = random.Random(seed), np.random.default_rng(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for first in range(0, count, size):
        scope = Scope(
            tenant="bench", org_id="o", project_id="p", user_id="hot", session_id=f"s{first}"
        )
        records = []
        for n in range(first, min(first + size, count)):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(8, 15)))
            derivatives = [unit(vectors)] * (2 if rng.random() < 0.25 else 1)
            records.append(
                EpisodeRecord(
                    id=f"e{n}",
                    role="user" if n % 2 else "assistant",
                    producer=None,
                    content=text,
                    timestamp=start + timedelta(seconds=n),
                    search_text=text,
                    embedding=unit(vectors),
                    derivative_embeddings=derivatives,
                    derivative_weights=[0.995] + [1.0] * (len(derivatives) - 1),
                )
            )
        yield scope, records


class Clock:
    """Wall seconds, and CPU seconds of this process and of the graph server."""

    def __init__(self, server_pid: int) -> None:
        self.pid = server_pid
        self.wall = self.bench = self.server = 0.0

    def __enter__(self) -> Clock:
        self._start = (time.perf_counter(), time.process_time(), scale.cpu_seconds(self.pid))
        return self

    def __exit__(self, *_: object) -> None:
        wall, bench, server = self._start
        self.wall += time.perf_counter() - wall
        self.bench += time.process_time() - bench
        self.server += scale.cpu_seconds(self.pid) - server


async def ingest(store: Any, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    clock = Clock(pid)
    done = 0
    for scope, records in batches(args.episodes, args.batch, args.seed):
        with clock:
            await store.add_episodes(scope, records)
        done += len(records)
        sys.stderr.write(f"\r  ingested {done:,}/{args.episodes:,}")
    sys.stderr.write("\n")
    return {
        "episodes": done,
        "wall_s": clock.wall,
        "server_cpu_s": clock.server,
        "bench_cpu_s": clock.bench,
        "episodes_per_s": done / clock.wall,
        "server_cpu_ms_per_episode": 1000 * clock.server / done,
    }


def search_parts(store: Any, kind: str) -> dict[str, str]:
    """The Cypher of each part of a search, as the store builds it, over one user's scope."""
    scope = Scope(tenant="bench", org_id="o", project_id="p", user_id="hot")
    where, _ = scope_predicate("e", scope)
    dialect = store._dialect
    own = dialect.cosine_similarity("e.embedding", "vector")
    part = f"coalesce(x.weight, 1.0) * {dialect.cosine_similarity('x.embedding', 'vector')}"
    parts = {
        "find the scope's episodes": f"MATCH (e:Episode) WHERE {where} RETURN count(e)",
        "scan the episodes' own vectors": (
            f"MATCH (e:Episode) WHERE {where} AND e.embedding IS NOT NULL "
            f"WITH e, {own} AS score ORDER BY score DESC, e.id ASC LIMIT $k "
            "RETURN e.id, score"
        ),
        "scan the derivative vectors": (
            f"MATCH (e:Episode) WHERE {where} AND e.derivative_count > 0 "
            "MATCH (e)-[:HAS_DERIVATIVE]->(x:Derivative) "
            f"WITH e, {part} AS score ORDER BY score DESC, e.id ASC LIMIT $k "
            "RETURN e.id, score"
        ),
    }
    if kind == "neo4j":
        parts["vector index, k nearest of all episodes"] = (
            "CALL db.index.vector.queryNodes('episode_embedding', $k, $vector) "
            "YIELD node, score RETURN node.id, score"
        )
        parts["vector index, 10 x k nearest, then the scope's k"] = (
            "CALL db.index.vector.queryNodes('episode_embedding', 10 * $k, $vector) "
            f"YIELD node AS e, score WHERE {where} RETURN e.id, score LIMIT $k"
        )
    return parts


async def measure_searches(store: Any, kind: str, pid: int, args: argparse.Namespace) -> Any:
    scope = Scope(tenant="bench", org_id="o", project_id="p", user_id="hot")
    _, scope_params = scope_predicate("e", scope)
    rng = np.random.default_rng(args.seed + 1)
    queries = [unit(rng) for _ in range(args.queries)]
    words = scale.vocabulary()
    texts = [" ".join(random.Random(i).sample(words, 3)) for i in range(args.queries)]
    results: dict[str, Any] = {}
    if kind == "neo4j":  # for the vector index query, built over the episodes now stored
        await store._run(NEO4J_VECTOR_INDEX)
        await store._run("CALL db.awaitIndexes(600)")
    for name, cypher in search_parts(store, kind).items():
        for vector in queries[:3]:  # plan caches and JIT warm, as on a server in use
            await store._run(cypher, {**scope_params, "vector": vector, "k": 20}, read_only=True)
        samples, clock = [], Clock(pid)
        for vector in queries:
            started = time.perf_counter()
            params = {**scope_params, "vector": vector, "k": 20}
            with clock:
                await store._run(cypher, params, read_only=True)
            samples.append(1000 * (time.perf_counter() - started))
        results[name] = _summary(samples, clock, len(queries))
    for text in texts[:3]:
        await store.fulltext_search(scope, text, 20)
    samples, clock = [], Clock(pid)
    for text in texts:
        started = time.perf_counter()
        with clock:
            await store.fulltext_search(scope, text, 20)
        samples.append(1000 * (time.perf_counter() - started))
    results["BM25 full-text query (fulltext_search)"] = _summary(samples, clock, len(texts))
    if kind == "neo4j":
        results["profile"] = await profile_vector_scan(store, queries[0], scope_params)
        results["vector index recall"] = await vector_index_recall(store, queries, scope_params)
    return results


async def vector_index_recall(
    store: Any, queries: Sequence[list[float]], scope_params: dict[str, str]
) -> dict[str, float]:
    """How many of the exact 20 nearest (the store's scan) Neo4j's vector index returns
    among its first 20, asked for 20 and for 200 (the over-fetch a user holding a tenth of
    the index would need before filtering to their scope)."""
    exact_cypher = search_parts(store, "neo4j")["scan the episodes' own vectors"]
    index_cypher = search_parts(store, "neo4j")["vector index, k nearest of all episodes"]
    found = {20: 0, 200: 0}
    for vector in queries:
        params = {**scope_params, "vector": vector, "k": 20}
        exact = {row[0] for row in await store._run(exact_cypher, params, read_only=True)}
        for k in found:
            rows = await store._run(index_cypher, {**params, "k": k}, read_only=True)
            found[k] += len(exact & {row[0] for row in rows[:20]})
    return {f"overlap_at_20_asked_{k}": hits / (20 * len(queries)) for k, hits in found.items()}


def _summary(samples: Sequence[float], clock: Clock, count: int) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered),
        "p95_ms": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "server_cpu_ms": 1000 * clock.server / count,
        "bench_cpu_ms": 1000 * clock.bench / count,
    }


async def profile_vector_scan(
    store: Any, vector: list[float], scope_params: dict[str, str]
) -> dict[str, Any]:
    """Neo4j's own account of one own-vector scan: database and page-cache hits per operator."""
    cypher = search_parts(store, "neo4j")["scan the episodes' own vectors"]
    driver = store._driver
    result = await driver.execute_query(
        "PROFILE " + cypher, {**scope_params, "vector": vector, "k": 20}
    )
    operators: list[dict[str, Any]] = []

    def walk(plan: Any) -> None:
        operators.append(
            {
                "operator": plan.get("operatorType"),
                "rows": plan.get("rows"),
                "db_hits": plan.get("dbHits"),
                "page_cache_hits": plan.get("pageCacheHits"),
                "page_cache_misses": plan.get("pageCacheMisses"),
                "ms": (plan.get("time") or 0) / 1e6,
            }
        )
        for child in plan.get("children", []):
            walk(child)

    walk(result.summary.profile)
    return {
        "operators": operators,
        "db_hits": sum(op["db_hits"] or 0 for op in operators),
        "runtime": result.summary.profile.get("args", {}).get("runtime"),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "load_at_start": os.getloadavg()[0],
        "episodes": args.episodes,
        "stores": {},
    }
    with tempfile.TemporaryDirectory(prefix="mm-costs-") as tmp:
        for kind in args.graphs:
            name = scale.GRAPHS[kind]
            rows: dict[str, Any] = {}
            for variant in args.variants:
                if kind == "falkordb" and variant == "with a vector index":
                    continue  # FalkorDB rebuilds vector indexes on every load: never made
                sys.stderr.write(f"== {name}: {variant}\n")
                work = Path(tmp) / f"{kind}-{len(rows)}"
                with scale.graph_server(kind, work) as server:
                    rows[variant] = asyncio.run(measure_variant(kind, variant, server, args))
            out["stores"][name] = rows
    out["load_at_end"] = os.getloadavg()[0]
    return out


def render(results: dict[str, Any]) -> str:
    lines = [
        f"{results['episodes']:,} episodes in one user's scope; {results['date']}, "
        f"{results['machine']}, load average {results['load_at_start']:.1f} at start, "
        f"{results['load_at_end']:.1f} at the end.",
        "",
        "| graph store | schema | episodes/s (wall) | server CPU ms per episode | "
        "bench CPU ms per episode |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for store, rows in results["stores"].items():
        for variant, row in rows.items():
            lines.append(
                f"| {store} | {variant} | {row['episodes_per_s']:,.0f} | "
                f"{row['server_cpu_ms_per_episode']:.2f} | "
                f"{1000 * row['bench_cpu_s'] / row['episodes']:.2f} |"
            )
    lines += [
        "",
        "| graph store | part of a search | p50 / p95 ms | server CPU ms | bench CPU ms |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    for store, rows in results["stores"].items():
        searches = rows.get("as configured", {}).get("searches", {})
        for name, part in searches.items():
            if name in ("profile", "vector index recall"):
                continue
            lines.append(
                f"| {store} | {name} | {part['p50_ms']:.1f} / {part['p95_ms']:.1f} | "
                f"{part['server_cpu_ms']:.1f} | {part['bench_cpu_ms']:.1f} |"
            )
    for store, rows in results["stores"].items():
        recall = rows.get("as configured", {}).get("searches", {}).get("vector index recall")
        if recall:
            lines += [
                "",
                f"{store}: of the exact 20 nearest, the vector index returns "
                f"{recall['overlap_at_20_asked_20']:.1%} among its first 20 when asked for "
                f"20, {recall['overlap_at_20_asked_200']:.1%} when asked for 200.",
            ]
    for store, rows in results["stores"].items():
        profile = rows.get("as configured", {}).get("searches", {}).get("profile")
        if profile:
            lines += [
                "",
                f"{store}: PROFILE of one own-vector scan ({profile['runtime']} runtime), "
                f"{profile['db_hits']:,} database hits:",
                "",
                "| operator | rows | db hits | page cache hits / misses |",
                "| --- | ---: | ---: | --- |",
            ]
            for op in profile["operators"]:
                lines.append(
                    f"| {op['operator']} | {op['rows']:,} | {op['db_hits']:,} | "
                    f"{op['page_cache_hits']:,} / {op['page_cache_misses']:,} |"
                )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=100, help="episodes per add (a session)")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--graph", dest="graphs", type=scale._graphs, default="falkordb,neo4j")
    parser.add_argument(
        "--variants",
        type=lambda text: [v.strip() for v in text.split(",")],
        default=list(VARIANTS),
        help=f"comma-separated, of: {', '.join(VARIANTS)}",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown}")
    results = run(args)
    print(render(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
