"""What a cold index open's read-ahead advice costs the requests served beside it.

Opening a user's index file whose pages are not cached (a cold user) announces its int8
codes to the kernel (``MADV_WILLNEED`` per megabyte, :mod:`memmachine.indexing.page_advice`);
the kernel allocates the pages and queues their reads inside the call. Python's
``mmap.madvise`` holds the GIL through it; libc's ``madvise`` called through ctypes releases
it. This measures, each way, in one process:

- ``cold``: the cold user's open plus first search (wall ms), the page cache of their file
  dropped before each round (bench/scale.py ``drop_page_cache``);
- ``loop``: hot searches of another user's index in memory, on the same event loop, one
  arriving every ``--every`` ms from 20 ms before the cold open to 20 ms after: each one's
  wall from its arrival to its answer (what a concurrent request waits);
- ``thread``: a worker thread (what ``asyncio.to_thread`` work, e.g. an embedder handing
  back a query's vector, is) waking every 0.5 ms for a moment of Python: how late it ran
  at worst while the cold open and search ran (it needs the GIL).

Variants, in shuffled order each round: ``ctypes`` (libc ``madvise`` through ctypes, what
page_advice does) and ``mmap`` (``mmap.madvise``, what it did before; swapped in as
``page_advice._Advice``), each with the open on the event loop (as the index store does)
and with the open in a worker thread (``asyncio.to_thread``; the first search stays on the
loop). Linux only; the index file is built once into ``--dir`` (random vectors: only the
bytes matter).

    uv run python bench/advice_stall.py --episodes 100000 --rounds 10

With ``--store BEFORE``, the cold search goes through ``IndexedEpisodeStore.vector_search``
instead (a fresh store per round, whose wrapped store only tells the file's state), two ways
alternated: this checkout's store and the one in the file ``BEFORE`` (another version of
indexed_episode_store.py, e.g. ``git show main:memmachine/adapters/indexed/
indexed_episode_store.py``), loaded beside it; open = cold there.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale

from memmachine.adapters.indexed.indexed_episode_store import IndexedEpisodeStore
from memmachine.adapters.indexed.search_index_files import SearchIndexFiles
from memmachine.indexing import page_advice
from memmachine.indexing.index_snapshot import snapshot_of
from memmachine.indexing.scope_index import ScopeIndex
from memmachine.models import Episode, IndexEntry, IndexState, Scope

DIMENSIONS = 384
IDENTITY = "bench:advice-stall"
COLD, HOT = Scope(user_id="cold"), Scope(user_id="hot")


def entries(first: int, count: int, seed: int) -> list[IndexEntry]:
    rng = np.random.default_rng(seed + first)
    vectors = rng.standard_normal((count, DIMENSIONS)).astype(np.float32)
    parts = rng.standard_normal((count, DIMENSIONS)).astype(np.float32)
    return [
        IndexEntry(
            id=f"e{first + i:07d}",
            session_id=f"s{(first + i) // 500}",
            agent_id=None,
            group_id=None,
            sequence=first + i,
            timestamp=1_700_000_000_000_000 + first + i,
            revision=1,
            terms=("word", f"w{i % 997}"),
            embedding=vectors[i],
            derivatives=(parts[i],) if i % 2 else (),
            derivative_weights=(0.9,) if i % 2 else (),
        )
        for i in range(count)
    ]


def built(count: int, seed: int) -> ScopeIndex:
    index = ScopeIndex(DIMENSIONS)
    for start in range(0, count, 10_000):
        index.add(entries(start, min(10_000, count - start), seed))
    index.finish_loading()
    return index


class MmapAdvice(page_advice._Advice):
    """The advice through ``mmap.madvise``, which holds the GIL (what page_advice gave
    before it called libc's ``madvise`` through ctypes)."""

    def _send(self, begin: int, length: int) -> None:
        if self.option is not None:
            self.mapping.madvise(self.option, begin, length)


class FileState:
    """The store an ``IndexedEpisodeStore`` wraps here: it tells the cold user's state (that
    of their file) and holds no episodes."""

    name, kind, identity, embedding_dimensions = "bench", "bench", IDENTITY, DIMENSIONS

    def __init__(self, state: IndexState) -> None:
        self.state = state

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def index_state(self, scope: Scope) -> IndexState:
        return self.state

    async def get_episodes(self, scope: Scope, episode_ids: Any) -> list[Episode]:
        return []


def store_search(kind: Any, directory: Path, state: IndexState) -> Any:
    """A cold search through a fresh store of ``kind``: open and first search."""

    async def search(query: list[float]) -> float:
        store = kind(FileState(state), index_dir=directory, sweep_seconds=0)
        await store.start()
        try:
            began = time.perf_counter()
            await store.vector_search(COLD, query, 10)
            assert store.paths.opened == 1
            return time.perf_counter() - began
        finally:
            await store.close()

    return search


def loaded(path: Path) -> Any:
    """``IndexedEpisodeStore`` of another version of its module, loaded beside this one."""
    spec = importlib.util.spec_from_file_location("indexed_episode_store_before", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.IndexedEpisodeStore


class Worker:
    """A thread that wakes every 0.5 ms for a moment of Python work (as a worker thread
    handing back an embedding does): how late it got to run (the GIL) inside a window."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.window: tuple[float, float] | None = None
        self.gaps: list[tuple[float, float]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            due = time.perf_counter() + 0.0005
            time.sleep(0.0005)
            now = time.perf_counter()
            self.gaps.append((due, now))

    def longest(self, begin: float, end: float) -> float:
        inside = [late - due for due, late in self.gaps if late >= begin and due <= end]
        return max(inside, default=0.0)


async def one_round(
    files: SearchIndexFiles,
    hot: ScopeIndex,
    query: list[float],
    every: float,
    worker: Worker,
    threaded: bool,
    store: Any = None,
) -> tuple[float, float, list[float], float, int]:
    path = files.path(COLD.user_key)
    scale.drop_page_cache(path)
    hot_mask = hot.mask(HOT)
    assert hot_mask is not None
    waits: list[float] = []

    async def hot_search(arrival: float) -> None:
        await asyncio.sleep(max(0.0, arrival - time.perf_counter()))
        hot.vector_top(query, 10, hot_mask)
        waits.append(time.perf_counter() - arrival)

    loop_start = time.perf_counter()
    cold_at = loop_start + 0.02
    arrivals = [loop_start + n * every for n in range(int(0.2 / every))]
    searches = [asyncio.create_task(hot_search(a)) for a in arrivals]
    await asyncio.sleep(max(0.0, cold_at - time.perf_counter()))
    read_before = scale.io_counters()[1]
    began = time.perf_counter()
    if store is not None:
        opening = await store(query)
    else:
        if threaded:
            opened = await asyncio.to_thread(files.open, COLD.user_key)
        else:
            opened = files.open(COLD.user_key)
        opening = time.perf_counter() - began
        assert opened is not None
        mask = opened.mask(COLD)
        assert mask is not None
        opened.vector_top(query, 10, mask)
        del opened, mask
    ended = time.perf_counter()
    read = scale.io_counters()[1] - read_before
    await asyncio.gather(*searches)
    # the searches that were waiting while the cold one ran
    overlapped = [wait for arrival, wait in zip(arrivals, waits, strict=False) if arrival <= ended]
    return ended - began, opening, overlapped, worker.longest(began, ended), read


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--every", type=float, default=0.002, help="seconds between hot ones")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/advice_stall"))
    parser.add_argument("--store", type=Path, help="indexed_episode_store.py to compare with")
    args = parser.parse_args()
    files = SearchIndexFiles(args.dir, IDENTITY)
    if files.open(COLD.user_key) is None:
        print(f"building a {args.episodes}-episode index file ...", flush=True)
        files.save(COLD.user_key, snapshot_of(built(args.episodes, 1)))
    opened = files.open(COLD.user_key)
    assert opened is not None
    state = IndexState(opened.revision, opened.deletions, len(opened))
    del opened
    hot = built(5_000, 7)
    query = np.random.default_rng(9).standard_normal(DIMENSIONS).astype(np.float32).tolist()
    libc = page_advice._Advice
    variants: dict[str, tuple[Any, bool]] = {
        "mmap": (MmapAdvice, False),
        "ctypes": (libc, False),
        "mmap, open in a thread": (MmapAdvice, True),
        "ctypes, open in a thread": (libc, True),
    }
    stores: dict[str, Any] = {}
    if args.store is not None:
        variants = {"store before": (libc, False), "store now": (libc, False)}
        stores["store before"] = store_search(loaded(args.store), args.dir, state)
        stores["store now"] = store_search(IndexedEpisodeStore, args.dir, state)
    worker = Worker()
    worker.thread.start()
    results: dict[str, tuple[list[float], list[float], list[float], list[float], list[int]]] = {
        name: ([], [], [], [], []) for name in variants
    }
    try:
        for round_ in range(args.rounds):
            order = list(variants)
            random.Random(round_).shuffle(order)
            for name in order:
                advise, threaded = variants[name]
                page_advice._Advice = advise  # type: ignore[misc]
                cold, opening, waits, late, read = await one_round(
                    files, hot, query, args.every, worker, threaded, stores.get(name)
                )
                results[name][0].append(cold)
                results[name][1].append(opening)
                results[name][2].extend(waits)
                results[name][3].append(late)
                results[name][4].append(read)
    finally:
        page_advice._Advice = libc  # type: ignore[misc]
        worker.stop.set()
    print(f"{args.episodes} episodes, {args.rounds} rounds, a hot search every {args.every}s")
    print(
        f"{'variant':25}  cold p50/p95/max ms  open p50 ms  loop wait p50/p99/max ms  "
        "thread late p50/max ms  disk MB/round"
    )
    for name, (colds, opens, waited, lates, reads) in results.items():
        print(
            f"{name:25}  {pct(colds, 0.5):6.1f} {pct(colds, 0.95):6.1f} {max(colds) * 1000:6.1f}  "
            f"{pct(opens, 0.5):6.1f}   "
            f"{pct(waited, 0.5):6.2f} {pct(waited, 0.99):6.2f} {max(waited) * 1000:6.2f}   "
            f"{statistics.median(lates) * 1000:6.2f} {max(lates) * 1000:6.2f}   "
            f"{statistics.median(reads) / 2**20:6.1f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
