"""A cold user's index file is opened in a worker thread: the event loop keeps serving other
users meanwhile, concurrent first searches of the user share one open, and a deletion or a
close that happens while the file opens is never undone by the open finishing.

The event loop's worker threads are a real thread pool that holds every index file open at
its end (file mapped, index built, not handed back yet) until the test lets it go
(:class:`HeldOpens`), so a test acts while an open is under way without depending on how
long an open takes."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import random
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from memmachine.adapters.indexed import search_index_files
from memmachine.adapters.indexed.indexed_episode_store import IndexedEpisodeStore
from memmachine.adapters.indexed.search_index_files import SearchIndexFiles
from memmachine.errors import StoreError
from memmachine.indexing.page_advice import resident_pages
from memmachine.models import Episode
from tests.integration import test_indexed_episode_store as base
from tests.integration.test_index_file_reads import drop_cached_pages
from tests.integration.test_indexed_episode_store import ANN, WORDS, plain, ranked, server
from tests.integration.test_search_index_files import graph, on_disk, plain_identity

__all__ = ["graph", "server"]  # fixtures shared with those files

BOB = ANN.model_copy(update={"user_id": "bob"}).user_scope()
EVERY_WORD = " ".join(WORDS)


class HeldOpens(ThreadPoolExecutor):
    """Worker threads for ``asyncio.to_thread``; after :meth:`hold` they hold each index
    file open (``SearchIndexFiles.open``) at its end, the file mapped and the index built,
    until :meth:`release`, and count them."""

    def __init__(self) -> None:
        super().__init__(max_workers=4)
        self.gate = threading.Event()
        self.gate.set()
        self.opens = 0  # index file opens handed over since hold() (on the loop's thread)
        self.opening = asyncio.Event()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        # to_thread hands over functools.partial(context.run, function, *arguments)
        called = fn.args[0] if isinstance(fn, functools.partial) and fn.args else None
        owner = getattr(called, "__self__", None)
        if isinstance(owner, SearchIndexFiles) and getattr(called, "__name__", "") == "open":
            self.opens += 1
            loop = asyncio.get_running_loop()

            def held() -> Any:
                opened = fn(*args, **kwargs)  # the file is mapped, the index built on it
                loop.call_soon_threadsafe(self.opening.set)
                self.gate.wait()
                return opened

            return super().submit(held)
        return super().submit(fn, *args, **kwargs)

    def hold(self) -> None:
        self.opens = 0
        self.opening.clear()
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    async def until_opening(self, *searches: asyncio.Task[Any]) -> None:
        """Wait until an open has mapped its file and is held (or a search ended without
        one)."""
        opening = asyncio.ensure_future(self.opening.wait())
        await asyncio.wait([opening, *searches], return_when=asyncio.FIRST_COMPLETED)
        opening.cancel()


@pytest.fixture
async def pool() -> AsyncIterator[HeldOpens]:
    loop = asyncio.get_running_loop()
    held = HeldOpens()
    loop.set_default_executor(held)
    try:
        yield held
    finally:
        held.release()
        loop.set_default_executor(ThreadPoolExecutor())
        held.shutdown(wait=True)


@pytest.fixture
async def rng(server: str, graph: str, tmp_path: Path) -> random.Random:
    """Ann's and Bob's episodes stored and Ann's index file written in ``tmp_path``; the
    random numbers that made them, for more."""
    rng = random.Random(40)
    async with on_disk(server, graph, tmp_path) as store:
        await base.fill(store, rng)
        assert await store.warm(ANN)
        await store.settled()
    gc.collect()  # what that store mapped is unmapped once collected
    return rng


async def cold_search(
    fast: IndexedEpisodeStore, pool: HeldOpens, k: int = 500
) -> asyncio.Task[list[tuple[Episode, float]]]:
    """A full-text search of Ann's every word, started once the pool holds opens, and
    under way in the open of her file when returned."""
    pool.hold()
    search = asyncio.create_task(fast.fulltext_search(ANN.user_scope(), EVERY_WORD, k))
    await pool.until_opening(search)
    assert pool.opens == 1
    assert not search.done()
    return search


async def test_concurrent_first_searches_of_a_cold_user_open_the_file_once(
    server: str, graph: str, tmp_path: Path, pool: HeldOpens, rng: random.Random
) -> None:
    query = base.vector(rng)
    async with plain(server, graph) as truth, on_disk(server, graph, tmp_path) as fast:
        want = ranked(await truth.vector_search(ANN.user_scope(), query, 9))
        pool.hold()
        searches = [
            asyncio.create_task(fast.vector_search(ANN.user_scope(), query, 9)) for _ in range(5)
        ]
        await pool.until_opening(*searches)
        for _ in range(20):  # every search reaches the user's index meanwhile
            await asyncio.sleep(0)
        pool.release()
        answers = await asyncio.gather(*searches)
        assert [ranked(answer) for answer in answers] == [want] * 5
        assert pool.opens == 1
        assert fast.paths.opened == 1  # one search opened the file, the others waited for it
        assert fast.paths.in_memory == 4
        assert fast.paths.loaded == 0
        stats = fast.stats()
        assert stats.users == 1
        assert stats.searches_in_index == 5


async def test_another_user_is_served_while_a_cold_file_opens(
    server: str, graph: str, tmp_path: Path, pool: HeldOpens, rng: random.Random
) -> None:
    async with plain(server, graph) as truth, on_disk(server, graph, tmp_path) as fast:
        assert await fast.warm(BOB)  # from the store: Bob has no file yet
        await fast.settled()
        cold = await cold_search(fast, pool, 50)
        # Bob is answered on the event loop while Ann's file is still opening
        hot = await fast.fulltext_search(BOB, EVERY_WORD, 50)
        assert not cold.done()
        assert ranked(hot) == ranked(await truth.fulltext_search(BOB, EVERY_WORD, 50))
        pool.release()
        want = ranked(await truth.fulltext_search(ANN.user_scope(), EVERY_WORD, 50))
        assert ranked(await cold) == want
        assert fast.paths.opened == 1


async def test_a_forget_while_the_file_opens_is_never_answered_from_it(
    server: str, graph: str, tmp_path: Path, pool: HeldOpens, rng: random.Random
) -> None:
    async with on_disk(server, graph, tmp_path) as fast:
        path = fast.index_file(ANN)
        assert path is not None
        assert path.exists()
        search = await cold_search(fast, pool)
        assert await fast.delete_episodes(ANN.user_scope()) > 0  # Ann is forgotten
        pool.release()
        assert await search == []  # answered after the forget: nothing of Ann's
        assert await fast.fulltext_search(ANN.user_scope(), EVERY_WORD, 500) == []
        await fast.settled()
        assert fast.paths.opened == 0
        assert len(await fast.fulltext_search(BOB, EVERY_WORD, 500)) == 40  # Bob untouched


async def test_a_write_while_the_file_opens_is_seen_by_the_next_search(
    server: str, graph: str, tmp_path: Path, pool: HeldOpens, rng: random.Random
) -> None:
    async with plain(server, graph) as truth, on_disk(server, graph, tmp_path) as fast:
        first = await cold_search(fast, pool)
        await fast.add_episodes(ANN.for_session("late"), base.records(rng, "late", 7))
        after = asyncio.create_task(fast.fulltext_search(ANN.user_scope(), EVERY_WORD, 500))
        pool.release()
        await first
        found = {episode.id for episode, _ in await after}
        assert {f"late{i}" for i in range(7)} <= found
        want = ranked(await truth.fulltext_search(ANN.user_scope(), EVERY_WORD, 500))
        assert ranked(await after) == want
        assert pool.opens == 1


def mapped(path: Path) -> bool:
    """Whether this process maps ``path``."""
    return str(path) in Path("/proc/self/maps").read_text()


async def test_closing_the_store_while_the_file_opens_leaves_nothing_mapped(
    server: str, graph: str, tmp_path: Path, pool: HeldOpens, rng: random.Random
) -> None:
    fast = on_disk(server, graph, tmp_path)
    await fast.start()
    path = SearchIndexFiles(tmp_path, plain_identity(fast)).path(ANN.user_key)
    search = await cold_search(fast, pool)
    assert mapped(path)  # the thread has mapped it
    closing = asyncio.create_task(fast.close())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not closing.done()  # the close waits for the open under way
    pool.release()
    await closing
    with contextlib.suppress(StoreError):  # a search racing a close: the store's clear error
        await search
    assert fast.users_in_memory == 0
    assert fast.memory_held == 0
    del search
    gc.collect()
    assert not mapped(path)


async def test_a_cold_users_pages_are_read_in_the_worker_thread_while_another_user_is_served(
    server: str,
    graph: str,
    tmp_path: Path,
    rng: random.Random,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the pages of Ann's file are waited for where the file is opened, held here before
    # they are: the loop serves Bob meanwhile, and Ann's first search then finds every page
    # the open waited for in memory (it does not wait for the disk on the loop)
    loop, loop_thread = asyncio.get_running_loop(), threading.get_ident()
    reading, gate = asyncio.Event(), threading.Event()
    holding: list[bool] = []
    waits: list[tuple[bool, bool]] = []  # (on the loop's thread, all pages read after)
    wait_for_reads = search_index_files._wait_for_reads

    def held(arrays: dict[str, Any]) -> None:
        if not holding:  # Bob's file, written and mapped again by the warm below
            wait_for_reads(arrays)
            return
        loop.call_soon_threadsafe(reading.set)
        gate.wait()
        wait_for_reads(arrays)
        read_whole = [arrays[name] for name in search_index_files._READ_WHOLE if name in arrays]
        pages = [resident_pages(array) for array in read_whole if array.size]
        waits.append(
            (
                threading.get_ident() == loop_thread,
                all(cached is not None and bool(cached.all()) for cached in pages),
            )
        )

    monkeypatch.setattr(search_index_files, "_wait_for_reads", held)
    query = base.vector(rng)
    async with plain(server, graph) as truth, on_disk(server, graph, tmp_path) as fast:
        assert await fast.warm(BOB)  # from the store: Bob has no file yet
        await fast.settled()
        path = fast.index_file(ANN)
        assert path is not None
        if not drop_cached_pages(path):
            gate.set()
            pytest.skip("this file system keeps the pages (tmpfs?): nothing is read from disk")
        holding.append(True)
        cold = asyncio.create_task(fast.vector_search(ANN.user_scope(), query, 9))
        waiting = asyncio.ensure_future(reading.wait())
        await asyncio.wait([waiting, cold], return_when=asyncio.FIRST_COMPLETED)
        assert waiting.done()
        assert not cold.done()
        # Bob is answered on the event loop while Ann's pages are still being read
        hot = await fast.vector_search(BOB, query, 9)
        assert not cold.done()
        assert ranked(hot) == ranked(await truth.vector_search(BOB, query, 9))
        gate.set()
        assert ranked(await cold) == ranked(await truth.vector_search(ANN.user_scope(), query, 9))
        assert waits == [(False, True)]  # one wait, in a worker thread, every page read
        assert fast.paths.opened == 1
