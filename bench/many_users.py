"""Many users on bounded memory: 1,000 users searched in a skewed (Zipf) order on a fixed
search-index budget, with the indexes kept on disk and, as the baseline in the same run,
without (in memory only, as before indexes had files).

Users: ``--big`` users of ``--big-size`` episodes and the rest (``--users`` in all) with
sizes drawn from a power law between ``--min-size`` and ``--max-size`` (most users small, a
few near the top), seeded. Their synthetic chat (bench/scale.py's generator, sessions of
``--batch`` messages) goes through the real ``MemoryManager.add_messages`` with the
precomputed embedder (the store path; see bench/scale.py), into embedded stores by default or,
with ``--production``, a graph server (``--graph falkordb`` or ``neo4j``) + PostgreSQL +
Redis that the bench starts and removes.

Searches: ``search_episodes(top_k=10)`` with the query embedded by the real model, users
drawn with probability ∝ 1 / rank^``--zipf`` (ranks shuffled, seeded, except the big users,
placed at ``--big-ranks``: one popular, the others rarely searched). Both runs start with
nothing in memory and use the same sequence of (user, query):

1. **baseline**, indexes in memory only, on the ``--budget-mb`` budget: a user whose index is
   not in memory is loaded from the store (inline up to 2,000 episodes, else in the background
   while the store answers), and a user too big for the budget is always answered by the
   store. ``--baseline-searches`` of the sequence (on Neo4j each store-answered search of a
   big user takes seconds).
2. **on disk**: every user's index was built once and written to its file (what their first
   search does; timed as "build"), then ``--searches`` searches on the same budget: a user
   not in memory is opened from their file.

Reported for each: p50 / p95 / p99 over all searches (wall, and CPU ms per search: this
process and the graph server, from /proc), how each search was answered (index in memory,
index just opened from its file, the store), the index memory held (the budget's own
account: the most at any point and at the end), this process's resident memory split into
heap and mapped files, and the graph server's.

    uv run python bench/many_users.py --json /tmp/many.json
    uv run python bench/many_users.py --production --graph neo4j --json /tmp/many-neo4j.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale

#: How a search was answered: from the user's index in memory, from their index just opened
#: from its file, from their index just loaded from the store, or by the store itself.
ANSWERED = ("in_memory", "opened", "loaded", "by_store")


def plan_sizes(args: argparse.Namespace) -> dict[str, int]:
    """Each user's episode count: the big users first, then the others (power law)."""
    rng = random.Random(args.seed)
    sizes = {f"big-{i + 1}": args.big_size for i in range(args.big)}
    # inverse CDF of a power law p(s) ∝ s^-(alpha+1) truncated to [min, max]
    low, high, alpha = args.min_size, args.max_size, args.alpha
    for i in range(args.users - args.big):
        u = rng.random()
        size = low * (1 - u * (1 - (low / high) ** alpha)) ** (-1 / alpha)
        sizes[f"user{i:04d}"] = max(1, round(size))
    return sizes


def zipf_sequence(users: Sequence[str], args: argparse.Namespace) -> list[str]:
    """``max(--searches, --baseline-searches)`` users drawn by Zipf over shuffled ranks, the
    big users at ``--big-ranks``."""
    rng = random.Random(args.seed + 1)
    big = [user for user in users if user.startswith("big-")]
    rest = [user for user in users if not user.startswith("big-")]
    rng.shuffle(rest)
    ranked: list[str] = list(rest)
    for user, rank in sorted(zip(big, args.big_ranks, strict=False), key=lambda pair: pair[1]):
        ranked.insert(min(rank - 1, len(ranked)), user)
    ranked += [user for user in big if user not in ranked]
    weights = np.array([1.0 / (rank**args.zipf) for rank in range(1, len(ranked) + 1)])
    weights /= weights.sum()
    picks = np.random.default_rng(args.seed + 2).choice(
        len(ranked), size=max(args.searches, args.baseline_searches), p=weights
    )
    return [ranked[i] for i in picks]


def memory_of(pid: int | None) -> dict[str, int | None]:
    """Resident memory of ``pid``: all, heap (anonymous) and mapped files, from /proc."""
    out: dict[str, int | None] = {"rss": None, "anon": None, "file": None}
    if pid is None:
        return out
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        for key, field in (("VmRSS:", "rss"), ("RssAnon:", "anon"), ("RssFile:", "file")):
            if line.startswith(key):
                out[field] = int(line.split()[1]) * 1024
    return out


async def ingest(manager: Any, sizes: dict[str, int], fast: Any, args: argparse.Namespace) -> Any:
    from memmachine.models import Scope

    clock = scale.CpuClock(args.server_pid)
    manager.embedder = fast
    total = sum(sizes.values())
    progress = scale.Progress(total)
    done, index = 0, 0
    started, cpu = time.perf_counter(), clock.now()
    for user, size in sizes.items():
        for start in range(0, size, args.batch):
            count = min(args.batch, size - start)
            item = scale.Batch(index=index, user=user, session=f"s{index:07d}", count=count)
            await manager.add_messages(
                Scope(user_id=user, session_id=item.session),
                scale.batch_messages(item, args.seed),
                working=False,
                extract=False,
            )
            index += 1
            done += count
            progress.update(done, f"{len(sizes)} users")
    wall, used = time.perf_counter() - started, clock.now() - cpu
    return {"episodes": done, "seconds": wall, "cpu_seconds": used, "per_s": done / wall}


async def search_run(
    manager: Any,
    episodes: Any,
    sequence: Sequence[str],
    queries: Sequence[str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The searches of ``sequence`` (user i with query i), timed, each classified by how it
    was answered."""
    from memmachine.models import Scope

    clock = scale.CpuClock(args.server_pid)
    manager.episodes = manager.episodic_service.store = episodes
    samples: dict[str, list[float]] = {"all": [], **{kind: [] for kind in ANSWERED}, "big": []}
    cpu_total = 0.0
    answered: Counter[str] = Counter()
    held_max = 0
    started = time.perf_counter()
    for number, user in enumerate(sequence):
        before = episodes.paths.as_dict()
        cpu = clock.now()
        began = time.perf_counter()
        await manager.search_episodes(Scope(user_id=user), queries[number % len(queries)])
        elapsed = (time.perf_counter() - began) * 1000
        cpu_total += clock.now() - cpu
        after = episodes.paths.as_dict()
        moved = [k for k in ("by_store", "opened", "loaded") if after[k] > before[k]]
        kind = moved[0] if moved else "in_memory"
        answered[kind] += 1
        samples["all"].append(elapsed)
        samples[kind].append(elapsed)
        if user.startswith("big-"):
            samples["big"].append(elapsed)
        held_max = max(held_max, episodes.memory_held)
        if number % 200 == 0:
            sys.stderr.write(f"\r  {number}/{len(sequence)} searches")
    sys.stderr.write("\n")
    wall = time.perf_counter() - started
    return {
        "searches": len(sequence),
        "seconds": wall,
        "cpu_ms_per_search": 1000 * cpu_total / max(len(sequence), 1),
        "latency_ms": {name: scale.percentiles(values) for name, values in samples.items()},
        "counts": {name: len(values) for name, values in samples.items()},
        "answered": dict(answered),
        "index_memory_max": held_max,
        "index_memory_end": episodes.memory_held,
        "users_in_memory_end": episodes.users_in_memory,
        "bench_memory": memory_of(os.getpid()),
        "graph_memory": memory_of(args.server_pid),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from memmachine.adapters.indexed.indexed_episode_store import IndexedEpisodeStore
    from memmachine.bootstrap import open_manager
    from memmachine.config import SearchIndexSettings
    from memmachine.models import Scope

    sizes = plan_sizes(args)
    sequence = zipf_sequence(list(sizes), args)
    queries = scale.make_queries(500, args.seed)
    results: dict[str, Any] = {
        "command": " ".join(["python", "bench/many_users.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average_start": os.getloadavg(),
        "users": len(sizes),
        "episodes": sum(sizes.values()),
        "sizes": {
            "big": [args.big_size] * args.big,
            "others_p50": float(np.median([s for u, s in sizes.items() if u.startswith("user")]))
            if args.users > args.big
            else None,
            "others_max": max((s for u, s in sizes.items() if u.startswith("user")), default=0),
        },
        "searched_users": len(set(sequence)),
        "budget_mb": args.budget_mb,
    }
    async with scale.prepared_stores(args) as (settings, stores):
        index_settings = SearchIndexSettings(memory_mb=args.budget_mb)
        settings = settings.model_copy(update={"search_index": index_settings})
        results["stores"] = stores.label
        async with open_manager(settings) as manager:
            args.server_pid = scale.graph_pid(stores)  # the embedded child runs by now
            real = manager.embedder
            if real is None:
                raise SystemExit("no embedding model: pass --model")
            words = scale.vocabulary()
            vectors = await real.embed(words)
            fast = scale.PrecomputedEmbedder(
                real.model,
                {w: np.asarray(v, dtype=np.float32) for w, v in zip(words, vectors, strict=True)},
            )
            on_disk = manager.episodes
            assert isinstance(on_disk, IndexedEpisodeStore)
            sys.stderr.write(f"ingesting {results['episodes']:,} episodes of {len(sizes)} users\n")
            results["ingest"] = await ingest(manager, sizes, fast, args)
            manager.embedder = real

            # 1. baseline: indexes in memory only, on the same budget
            sys.stderr.write("baseline: indexes in memory only\n")
            in_memory = IndexedEpisodeStore(
                on_disk.inner, memory_budget=args.budget_mb << 20, index_dir=None
            )
            await in_memory.start()  # the inner store is started already: only the wrapper
            baseline = sequence[: args.baseline_searches]
            results["baseline"] = await search_run(manager, in_memory, baseline, queries, args)
            await in_memory.settled()
            in_memory.evict()
            del in_memory

            # 2. every user's index built once and written to its file, then the searches
            sys.stderr.write("building every user's index file\n")
            clock = scale.CpuClock(args.server_pid)
            began, cpu = time.perf_counter(), clock.now()
            for user in sizes:
                await on_disk.warm(Scope(user_id=user))
                on_disk.evict()
            await on_disk.settled()
            results["build"] = {
                "seconds": time.perf_counter() - began,
                "cpu_seconds": clock.now() - cpu,
                "disk_bytes": scale.disk_bytes(Path(settings.data_dir) / "search-index"),
            }
            on_disk.evict()
            sys.stderr.write("on disk: indexes opened from their files\n")
            searched = sequence[: args.searches]
            results["on_disk"] = await search_run(manager, on_disk, searched, queries, args)
            manager.episodes = manager.episodic_service.store = on_disk
    results["load_average_end"] = os.getloadavg()
    return results


def _mb(value: Any) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f}"


def render(results: dict[str, Any]) -> str:
    ingest = results["ingest"]
    lines = [
        f"Stores: {results['stores']}. {results['date']}, load average "
        f"{results['load_average_start'][0]:.1f} at the start, "
        f"{results['load_average_end'][0]:.1f} at the end. Command: `{results['command']}`",
        "",
        f"{results['users']:,} users, {results['episodes']:,} episodes "
        f"(big users: {', '.join(f'{s:,}' for s in results['sizes']['big']) or 'none'}; the "
        f"others {results['sizes']['others_p50']:,.0f} median, {results['sizes']['others_max']:,} "
        f"at most); ingested at {ingest['per_s']:,.0f} episodes/s "
        f"({ingest['cpu_seconds']:,.0f} CPU s). {results['searched_users']:,} users searched. "
        f"Index budget {results['budget_mb']} MB. Building every user's index file once took "
        f"{results['build']['seconds']:,.0f} s ({results['build']['cpu_seconds']:,.0f} CPU s), "
        f"{_mb(results['build']['disk_bytes'])} MB on disk.",
        "",
        "| indexes | searches | p50 / p95 / p99 ms | CPU ms per search | index in memory | "
        "opened from its file | loaded from the store | answered by the store | big users "
        "p50 / p95 ms | index memory max / end MB | bench RSS: heap / mapped MB | graph "
        "server RSS MB |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | ---: |",
    ]
    for key, label in (("baseline", "in memory only (before)"), ("on_disk", "kept on disk")):
        run = results[key]
        total = max(run["searches"], 1)
        latency = run["latency_ms"]["all"]
        big = run["latency_ms"]["big"]
        shares = [f"{run['answered'].get(kind, 0) / total:.1%}" for kind in ANSWERED]
        bench = run["bench_memory"]
        lines.append(
            f"| {label} | {run['searches']:,} | {latency['p50']:.1f} / {latency['p95']:.1f} / "
            f"{latency['p99']:.1f} | {run['cpu_ms_per_search']:.1f} | "
            + " | ".join(shares)
            + f" | {_cell(big)} | {_mb(run['index_memory_max'])} / "
            f"{_mb(run['index_memory_end'])} | {_mb(bench['anon'])} / {_mb(bench['file'])} | "
            f"{_mb(run['graph_memory']['rss'])} |"
        )
    lines += [
        "",
        "By how each search was answered (p50 / p95 ms, searches):",
        "",
        "| indexes | index in memory | opened from its file | loaded from the store | "
        "answered by the store |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key, label in (("baseline", "in memory only (before)"), ("on_disk", "kept on disk")):
        run = results[key]
        cells = [f"{_cell(run['latency_ms'][kind])} ({run['counts'][kind]:,})" for kind in ANSWERED]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(latency: dict[str, float]) -> str:
    if math.isnan(latency["p50"]):
        return "-"
    return f"{latency['p50']:.1f} / {latency['p95']:.1f}"


def _ranks(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000, help="users in all")
    parser.add_argument("--big", type=int, default=3, help="users of --big-size episodes")
    parser.add_argument("--big-size", type=int, default=100_000)
    parser.add_argument("--min-size", type=int, default=100, help="smallest other user")
    parser.add_argument("--max-size", type=int, default=5_000, help="largest other user")
    parser.add_argument(
        "--alpha", type=float, default=1.5, help="power law of the other users' sizes"
    )
    parser.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of the searches")
    parser.add_argument(
        "--big-ranks",
        type=_ranks,
        default=[5, 60, 400],
        help="popularity ranks of the big users (1 = most searched)",
    )
    parser.add_argument("--searches", type=int, default=2_000)
    parser.add_argument("--baseline-searches", type=int, default=1_000)
    parser.add_argument("--budget-mb", type=int, default=256, help="search index budget")
    parser.add_argument("--batch", type=int, default=100, help="messages per add_messages call")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--model", type=Path, default=scale.DEFAULT_MODEL)
    parser.add_argument("--embed-batch", type=int, default=64)
    parser.add_argument("--quantize", choices=("none", "int8"), default=None)
    scale.add_production_arguments(parser)
    parser.add_argument("--graph", default="falkordb", help="with --production: falkordb or neo4j")
    parser.add_argument("--json", type=Path, help="write the raw results here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.big > args.users or args.min_size > args.max_size or args.min_size < 1:
        parser.error("need --big <= --users and 1 <= --min-size <= --max-size")
    if args.graph not in scale.GRAPHS:
        parser.error(f"--graph takes {' or '.join(scale.GRAPHS)}")
    # what bench/scale.py's store setup reads
    args.data_dir = args.episode_url = args.profile_url = args.redis_url = None
    with scale.service_servers(args):
        results = asyncio.run(run(args))
    print(render(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
