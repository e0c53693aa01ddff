"""Episode search from in-process indexes, kept in step with any episode store.

:class:`IndexedEpisodeStore` wraps an :class:`~memmachine.ports.EpisodeStore` and is one
itself. Writes and plain reads go to the wrapped store, which stays the only authority.
Searches (``vector_search``, ``fulltext_search``, ``adjacent``, ``neighbours``) are answered
from a :class:`~memmachine.indexing.scope_index.ScopeIndex` of the searched user, loaded from
the store on first use and brought up to date before every search:

1. One small read of the user's :class:`~memmachine.models.IndexState` (deduplicated between
   concurrent searches, never shared with a search that started after a write of this
   process, so a process always reads its own writes). ``adjacent`` and ``neighbours``,
   which expand what a search just found, reuse a read of the last half second.
2. Same state as the index: search it. New revisions but no new deletions: fetch only the
   episodes added since (``index_entries(since=...)``) and add them. New deletions made by
   another process: rebuild. Deletions made through this wrapper are applied to the index
   directly when nobody else deleted in between.
3. Only the ids found are turned into episodes: one ``get_episodes`` round trip for those
   not in a small cache (episodes never change once stored).

Searching an index runs on the event loop: a few milliseconds of mostly vectorised work
(≈6 ms for 100k episodes with 80k sentence vectors), which a worker thread would only
slow down, contending for the GIL with the loop.

A user whose index is not ready (first use of a large user, loading in the background,
over the memory budget, or a failed load) is searched by the wrapped store, with the same
results, only slower. Indexes share one memory budget and the least recently searched are
dropped first. :meth:`IndexedEpisodeStore.stats` tells how much memory the indexes hold and
how many searches each path answered (what the ``/metrics`` index families report).

Several processes (API replicas, workers) on one store: each keeps its own indexes, and each
search first reads the user's ledger (``index_state``), so a search in any process sees every
write acknowledged before it began, whichever process made it. The store serialises a user's
writes on that ledger and numbers them in commit order, so catching up by revision never
skips a write that committed late. A deletion made elsewhere shows as a new ``deletions``
count and makes the next search here reload the user's index from the store, so a deleted
episode is never returned once the delete is acknowledged; a user written to from several
processes in turn therefore reloads on every other process after each delete (additions
only cost the small catch-up read).

With ``index_dir`` (and a store that tells its identity), indexes are also kept on disk,
one file per user (:class:`~memmachine.adapters.indexed.search_index_files.SearchIndexFiles`): a
user whose index is not in memory (dropped for the budget, after a restart, or loaded by
another process sharing the directory) is opened from their file in milliseconds, its
vectors mapped rather than read, and brought up to date as above. The open runs in a worker
thread, so the event loop serves other requests meanwhile; concurrent searches of the user
wait for that one open. A file is written after an index is loaded from the store, when an
index leaves memory with writes the file lacks, and when a user's in-memory rows have grown
by a quarter since their file. Building an
index larger than ``spill_rows`` writes its vectors out as it goes, so even the first load
of a large user holds little in memory. Files hold derived personal data: a deletion
through this store removes the user's file at once, a file found out of step with the
store (deletions made elsewhere) is removed when next opened, and every ``sweep_seconds``
each file is checked against the store and removed if it holds deleted episodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from memmachine.adapters.indexed.search_index_files import SearchIndexFiles
from memmachine.errors import MemMachineError
from memmachine.indexing.index_snapshot import compacted, snapshot_of
from memmachine.indexing.scope_index import ScopeIndex
from memmachine.indexing.terms import query_terms
from memmachine.models import (
    Episode,
    EpisodeRecord,
    IndexEntry,
    IndexState,
    ProjectScope,
    Scope,
    SessionActivity,
    StoreHealth,
    TimeBucket,
    UserActivity,
    checked_vector,
)
from memmachine.ports import EpisodeStore, Lifecycle
from memmachine.telemetry import SearchIndexStats

__all__ = ["IndexedEpisodeStore", "SearchPaths"]

logger = logging.getLogger(__name__)

#: Bytes an index needs per episode besides its vectors (postings, ids, columns), for the
#: budget check before loading; the real size is checked once loaded.
_BYTES_PER_EPISODE = 200
#: Rows an index may gain beyond its file before a new file is written, at least.
_SAVE_AFTER = 1024
#: After a failed load, wait this long before trying again.
_RETRY_SECONDS = 30.0
#: ``adjacent`` / ``neighbours`` reuse a state read this recent (of the same epoch): they
#: follow a search that has just read it, and expand ids that search found.
_REUSE_SECONDS = 0.5


@dataclass
class _Batch:
    """Episode ids of one user asked for in one turn of the event loop."""

    scope: Scope
    done: asyncio.Future[dict[str, Episode]]
    ids: set[str] = field(default_factory=set)


def _retrieve_exception(task: asyncio.Task[None]) -> None:
    """The batch's waiters got the error; mark it seen so asyncio does not log it."""
    if not task.cancelled():
        task.exception()


@dataclass
class _Slot:
    """One user's index and what is happening to it."""

    index: ScopeIndex | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    loading: asyncio.Task[None] | None = None
    failed_at: float | None = None
    #: ``(revision, deletions, rows)`` of the index when the user's file was written from
    #: it (or it was opened from the file); ``None``: no file reflects it.
    saved: tuple[int, int, int] | None = None
    saving: bool = False


@dataclass
class SearchPaths:
    """How searches were answered since start: from an index in memory, from an index
    just opened from its file, or by the wrapped store; and how many indexes were loaded
    from the store and written to files."""

    in_memory: int = 0
    opened: int = 0
    by_store: int = 0
    loaded: int = 0
    saved: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class IndexedEpisodeStore(Lifecycle):
    """An :class:`~memmachine.ports.EpisodeStore` answering searches from in-process
    per-user indexes (see the module docstring).

    ``memory_budget`` caps the bytes all indexes hold together (of an index opened from
    its file: what every search reads, see
    :attr:`~memmachine.indexing.scope_index.ScopeIndex.nbytes`); ``min_episodes`` leaves
    smaller users to the wrapped store; users with at most ``load_inline`` episodes are
    loaded by the search that first needs them, larger ones in the background while the
    wrapped store answers; ``episode_cache`` is how many fetched episodes are kept;
    ``index_dir`` keeps indexes on disk too (see the module docstring).
    """

    def __init__(
        self,
        inner: EpisodeStore,
        *,
        memory_budget: int = 1 << 30,
        min_episodes: int = 0,
        load_inline: int = 2_000,
        episode_cache: int = 4_096,
        index_dir: Path | str | None = None,
        spill_rows: int = 8_192,
        sweep_seconds: float = 600.0,
    ) -> None:
        self._inner = inner
        self.name = inner.name
        self.kind = inner.kind
        self._budget = memory_budget
        self._min_episodes = min_episodes
        self._load_inline = load_inline
        self._cache_size = episode_cache
        self._dimensions: int | None = getattr(inner, "embedding_dimensions", None)
        self._slots: OrderedDict[str, _Slot] = OrderedDict()
        self._epochs: dict[str, int] = {}
        self._checks: dict[str, tuple[int, asyncio.Future[IndexState]]] = {}
        self._recent: dict[str, tuple[int, float, IndexState]] = {}
        self._episodes: OrderedDict[tuple[str, str], Episode] = OrderedDict()
        self._batches: dict[str, _Batch] = {}
        #: Users left to the store for the budget's sake, with their size then.
        self._too_big: dict[str, int] = {}
        self._index_dir = None if index_dir is None else Path(index_dir)
        self._files: SearchIndexFiles | None = None
        self._spill_rows = max(spill_rows, 1)
        self._sweep_seconds = sweep_seconds
        self._sweeper: asyncio.Task[None] | None = None
        self._saves: set[asyncio.Task[None]] = set()
        #: Index files being opened in worker threads (see :meth:`_open`).
        self._opens: set[asyncio.Future[ScopeIndex | None]] = set()
        #: Per user: how many deletions this process made (a file written from an index
        #: read before one of them is removed again).
        self._forgets: dict[str, int] = {}
        #: How searches were answered since start (what :meth:`stats` sums up).
        self.paths = SearchPaths()

    @property
    def inner(self) -> EpisodeStore:
        """The wrapped store."""
        return self._inner

    @property
    def embedding_dimensions(self) -> int | None:
        return self._dimensions

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self._inner.start()
        self._dimensions = getattr(self._inner, "embedding_dimensions", self._dimensions)
        identity = getattr(self._inner, "identity", None)
        if self._index_dir is not None and isinstance(identity, str):
            self._files = SearchIndexFiles(self._index_dir, identity)
            if self._sweep_seconds > 0:
                self._sweeper = asyncio.create_task(self._sweep_forever(self._files))

    async def close(self) -> None:
        loads = [slot.loading for slot in self._slots.values() if slot.loading is not None]
        if self._sweeper is not None:
            loads.append(self._sweeper)
            self._sweeper = None
        for task in loads:
            task.cancel()
        for task in loads:
            with contextlib.suppress(asyncio.CancelledError, MemMachineError):
                await task
        # slots go first: a write or an open finishing below finds its slot gone and
        # keeps nothing mapped
        self._slots.clear()
        while self._saves or self._opens:  # a write under way finishes: no half-written file
            await asyncio.gather(*self._saves, *self._opens, return_exceptions=True)
        self._episodes.clear()
        await self._inner.close()

    async def health(self) -> StoreHealth:
        report = await self._inner.health()
        if report.status != "ok":
            return report
        note = f"search indexes: {self.users_in_memory} users, {self.memory_held / 2**20:.0f} MiB"
        if self._files is not None:
            note += f" (kept on disk in {self._files.directory})"
        detail = f"{report.detail}; {note}" if report.detail else note
        return report.model_copy(update={"detail": detail})

    # ------------------------------------------------------------------ writes

    async def add_episodes(self, scope: Scope, records: Sequence[EpisodeRecord]) -> list[Episode]:
        try:
            return await self._inner.add_episodes(scope, records)
        finally:
            self._wrote(scope)

    async def delete_episode(
        self, scope: Scope, episode_id: str, *, stored_at: datetime | None = None
    ) -> bool:
        key = scope.user_key
        try:
            deleted = await self._inner.delete_episode(scope, episode_id, stored_at=stored_at)
        finally:
            self._wrote(scope)
        if deleted:
            self._forget_file(key)
            await self._deleted(scope, lambda index: index.remove([episode_id]))
            self._episodes.pop((key, episode_id), None)
        return deleted

    async def delete_episodes(self, scope: Scope) -> int:
        try:
            deleted = await self._inner.delete_episodes(scope)
        finally:
            self._wrote(scope)
        if deleted:
            self._forget_file(scope.user_key)
            await self._deleted(scope, lambda index: index.remove_scope(scope))
        return deleted

    # ------------------------------------------------------------------ plain reads

    async def get_episode(self, scope: Scope, episode_id: str) -> Episode | None:
        return await self._inner.get_episode(scope, episode_id)

    async def get_episodes(self, scope: Scope, episode_ids: Sequence[str]) -> list[Episode]:
        return await self._inner.get_episodes(scope, episode_ids)

    async def list_episodes(
        self, scope: Scope, *, limit: int = 100, offset: int = 0, newest_first: bool = False
    ) -> list[Episode]:
        return await self._inner.list_episodes(
            scope, limit=limit, offset=offset, newest_first=newest_first
        )

    async def count_episodes(self, scope: Scope) -> int:
        return await self._inner.count_episodes(scope)

    async def list_users(
        self,
        project: ProjectScope,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[UserActivity]:
        return await self._inner.list_users(project, prefix=prefix, after=after, limit=limit)

    async def list_projects(
        self, *, after: ProjectScope | None = None, limit: int = 100
    ) -> list[ProjectScope]:
        return await self._inner.list_projects(after=after, limit=limit)

    async def list_sessions(
        self, scope: Scope, *, limit: int = 100, offset: int = 0
    ) -> list[SessionActivity]:
        return await self._inner.list_sessions(scope, limit=limit, offset=offset)

    async def episode_timeline(
        self, scope: Scope, *, bucket_seconds: int = 86_400
    ) -> list[TimeBucket]:
        return await self._inner.episode_timeline(scope, bucket_seconds=bucket_seconds)

    async def index_state(self, scope: Scope) -> IndexState:
        return await self._inner.index_state(scope)

    def index_entries(
        self, scope: Scope, *, since: int | None = None
    ) -> AsyncIterator[list[IndexEntry]]:
        return self._inner.index_entries(scope, since=since)

    # ------------------------------------------------------------------ searches

    async def vector_search(
        self, scope: Scope, embedding: Sequence[float], k: int, *, derivatives: bool = True
    ) -> list[tuple[Episode, float]]:
        index = await self._ready(scope) if self._dimensions is not None else None
        if index is None or k <= 0:
            return await self._inner.vector_search(scope, embedding, k, derivatives=derivatives)
        checked_vector(embedding, self._dimensions or 0, "embedding")
        mask = index.mask(scope)
        if mask is None:
            return []
        found = index.vector_top(embedding, k, mask, derivatives=derivatives)
        return await self._with_episodes(scope, found, index)

    async def fulltext_search(
        self, scope: Scope, query: str, k: int
    ) -> list[tuple[Episode, float]]:
        terms = query_terms(query)
        if not terms or k <= 0:
            return []
        index = await self._ready(scope)
        if index is None:
            return await self._inner.fulltext_search(scope, query, k)
        mask = index.mask(scope)
        if mask is None:
            return []
        found = index.bm25_top(terms, k, mask)
        return await self._with_episodes(scope, found, index)

    async def neighbours(
        self, scope: Scope, episode_id: str, *, before: int, after: int
    ) -> list[Episode]:
        before, after = max(before, 0), max(after, 0)
        if before == 0 and after == 0:
            return []
        index = await self._ready(scope, reuse=True)
        if index is None:
            return await self._inner.neighbours(scope, episode_id, before=before, after=after)
        mask = index.mask(scope)
        around = index.neighbours(episode_id, before, after, mask) if mask is not None else None
        self._fit_after_reading(index)
        if not around:
            return []
        found = await self._fetch(scope, around, index)
        return [found[key] for key in around if key in found]

    async def adjacent(self, scope: Scope, episode_ids: Sequence[str]) -> dict[str, list[Episode]]:
        if not episode_ids:
            return {}
        index = await self._ready(scope, reuse=True)
        if index is None:
            return await self._inner.adjacent(scope, episode_ids)
        mask = index.mask(scope)
        if mask is None:
            return {}
        around = index.adjacent(episode_ids, mask)
        self._fit_after_reading(index)
        found = await self._fetch(scope, [key for keys in around.values() for key in keys], index)
        return {
            key: [found[other] for other in others if other in found]
            for key, others in around.items()
        }

    @property
    def users_in_memory(self) -> int:
        """How many users' indexes are in memory."""
        return sum(slot.index is not None for slot in self._slots.values())

    @property
    def memory_held(self) -> int:
        """Bytes all loaded indexes hold (roughly)."""
        return sum(slot.index.nbytes for slot in self._slots.values() if slot.index is not None)

    def stats(self) -> SearchIndexStats:
        """Users and bytes the indexes hold now, the budget, and the searches each path
        answered since start."""
        return SearchIndexStats(
            users=self.users_in_memory,
            bytes=self.memory_held,
            budget_bytes=self._budget,
            searches_in_index=self.paths.in_memory + self.paths.opened,
            searches_in_store=self.paths.by_store,
        )

    async def warm(self, scope: Scope) -> bool:
        """Load (or bring up to date) the index of ``scope``'s user now, whatever its size,
        waiting for a load already under way. Returns whether the user is now searched in
        memory (``False`` when under ``min_episodes`` or over the memory budget)."""
        key = scope.user_key
        slot = self._slots.get(key)
        if slot is not None and slot.loading is not None:
            with contextlib.suppress(MemMachineError):
                await asyncio.shield(slot.loading)
        state = await self._state(scope)
        if state.episodes < self._min_episodes:
            return False
        slot = self._slots.setdefault(key, _Slot())
        slot.failed_at = None
        index = slot.index
        if index is None:
            index, _ = await self._open(scope, slot, state)
        if index is None or index.deletions != state.deletions:
            async with slot.lock:
                slot.index = await self._read_all(scope)
                slot.saved = None
                self._persist_soon(key, slot, slot.index)
            self._fit_budget()
        else:
            await self._catch_up(scope, slot, state)
        return key in self._slots and self._slots[key].index is not None

    # ------------------------------------------------------------------ keeping in step

    def _wrote(self, scope: Scope) -> None:
        """A write of this process ended: state reads that began before it are not reused."""
        key = scope.user_key
        self._epochs[key] = self._epochs.get(key, 0) + 1

    async def _state(self, scope: Scope, *, reuse: bool = False) -> IndexState:
        """The user's state, one read shared by concurrent searches of the same epoch; with
        ``reuse``, a read of the same epoch that ended less than ``_REUSE_SECONDS`` ago."""
        key = scope.user_key
        epoch = self._epochs.get(key, 0)
        if reuse and key in self._recent:
            seen_epoch, seen_at, seen = self._recent[key]
            if seen_epoch == epoch and time.monotonic() - seen_at < _REUSE_SECONDS:
                return seen
        pending = self._checks.get(key)
        if pending is None or pending[0] != epoch:
            future = asyncio.ensure_future(self._inner.index_state(scope))
            pending = (epoch, future)
            self._checks[key] = pending

            def forget(
                done: asyncio.Future[IndexState], key: str = key, epoch: int = epoch
            ) -> None:
                if self._checks.get(key, (None, None))[1] is done:
                    del self._checks[key]
                if not done.cancelled() and done.exception() is None:
                    self._recent[key] = (epoch, time.monotonic(), done.result())

            future.add_done_callback(forget)
        return await asyncio.shield(pending[1])

    async def _ready(self, scope: Scope, *, reuse: bool = False) -> ScopeIndex | None:
        """The user's index, up to date with the store; ``None`` when the wrapped store
        must answer (see the module docstring)."""
        opened: list[ScopeIndex] = []
        index = await self._ready_index(scope, reuse=reuse, opened=opened)
        if not reuse:  # ``adjacent`` / ``neighbours`` follow a search already counted
            if index is None:
                self.paths.by_store += 1
            elif opened:
                self.paths.opened += 1
            else:
                self.paths.in_memory += 1
        return index

    async def _ready_index(
        self, scope: Scope, *, reuse: bool, opened: list[ScopeIndex]
    ) -> ScopeIndex | None:
        key = scope.user_key
        state = await self._state(scope, reuse=reuse)
        slot = self._slots.get(key)
        if slot is None:
            if state.episodes < self._min_episodes:
                return None
            if state.episodes >= self._too_big.get(key, state.episodes + 1):
                return None
            needed = state.episodes * self._bytes_per_episode()
            if needed > self._budget:
                self._refuse(key, state.episodes, needed)
                return None
            slot = self._slots.setdefault(key, _Slot())
        self._slots.move_to_end(key)
        if slot.loading is not None:
            return None
        if slot.failed_at is not None and time.monotonic() - slot.failed_at < _RETRY_SECONDS:
            return None
        # An index may be used when it reflects at least ``state``: no deletion it has not
        # applied, and additions caught up to the state's revision.
        index = slot.index
        if index is None:
            index, fresh = await self._open(scope, slot, state)
            opened += [index] if fresh and index is not None else []
        if index is None or index.deletions < state.deletions:
            index = await self._load(scope, slot, state)
            if index is None:
                return None
            if index.deletions < state.deletions:  # loaded from a read older than ours
                return None
        if index.revision >= state.revision:
            return index
        missing = state.episodes - len(index)
        if missing > self._load_inline:
            slot.loading = asyncio.create_task(self._catch_up_quietly(scope, slot, state))
            return None
        await self._catch_up(scope, slot, state)
        return index if index.revision >= state.revision else None

    def _bytes_per_episode(self) -> int:
        """What an index is expected to hold per episode, for the budget check before it
        is opened or loaded: with files, the int8 codes of its vector and about one
        sentence vector; without, its float32 vector."""
        dimensions = self._dimensions or 0
        if self._files is not None:
            return 2 * dimensions + _BYTES_PER_EPISODE
        return 4 * dimensions + _BYTES_PER_EPISODE

    async def _open(
        self, scope: Scope, slot: _Slot, state: IndexState
    ) -> tuple[ScopeIndex | None, bool]:
        """The user's index from their file, when it is one the store's ``state`` can be
        reached from by additions only; a file that is not (deletions made elsewhere, or
        a store that went back) is removed. Returns the index and whether this call opened
        it (``False``: a concurrent search opened or loaded it first).

        The file is mapped and the index built on its pages in a worker thread (a cold
        file's read-ahead advice and header take tens of milliseconds at 100k episodes),
        under the slot's lock: concurrent first searches of the user wait for one open.
        Whatever happened meanwhile is checked once the thread returns: an open is dropped
        when the slot left (the store closed) or episodes of the user were deleted through
        this store (the file may hold them; it was removed)."""
        files = self._files
        if files is None:
            return None, False
        key = scope.user_key
        async with slot.lock:
            if slot.index is not None:
                return slot.index, False
            forgets = self._forgets.get(key, 0)
            index = await self._in_thread(files, key)
            if index is None:
                return None, False
            if not self._current(key, slot, forgets):
                return None, False
            if (
                index.deletions != state.deletions
                or index.revision > state.revision
                or (index.revision == state.revision and len(index) != state.episodes)
            ):
                files.remove(key)
                return None, False
            slot.index = index
            slot.saved = (index.revision, index.deletions, index.rows)
        self._forget_episodes(key)
        self._fit_budget()
        return index, True

    def _current(self, key: str, slot: _Slot, forgets: int) -> bool:
        """Whether ``slot`` is still the store's for ``key`` and no episode of the user was
        deleted since ``forgets`` was read: what a file opened meanwhile may be used for."""
        return self._slots.get(key) is slot and self._forgets.get(key, 0) == forgets

    async def _in_thread(self, files: SearchIndexFiles, key: str) -> ScopeIndex | None:
        """``files.open(key)`` in a worker thread, returning once the pages every search reads
        whole are read (a cold file's int8 codes: the first search on the loop does not wait
        for the disk); it runs to its end even when the caller is cancelled, and
        :meth:`close` waits for it (no mapping is made after the store closed)."""
        task = asyncio.ensure_future(asyncio.to_thread(files.open, key, wait=True))
        self._opens.add(task)
        task.add_done_callback(self._opens.discard)
        return await asyncio.shield(task)

    async def _load(self, scope: Scope, slot: _Slot, state: IndexState) -> ScopeIndex | None:
        """Load the user's index from scratch: now when small, else in the background."""
        slot.index = None
        self._forget_episodes(scope.user_key)
        if state.episodes <= self._load_inline:
            async with slot.lock:
                if slot.index is None:
                    slot.index = await self._read_all(scope)
                    slot.saved = None
                    self._persist_soon(scope.user_key, slot, slot.index)
            self._fit_budget()
            return slot.index
        slot.loading = asyncio.create_task(self._load_quietly(scope, slot))
        return None

    async def _read_all(self, scope: Scope) -> ScopeIndex:
        state = await self._inner.index_state(scope)
        index = ScopeIndex(self._dimensions)
        self.paths.loaded += 1
        files = self._files
        async for entries in self._inner.index_entries(scope):
            index.add(entries)
            if files is not None and index.tail_rows >= self._spill_rows:
                await asyncio.to_thread(index.freeze, files.spill)
        index.finish_loading()
        index.revision, index.deletions = state.revision, state.deletions
        return index

    async def _load_quietly(self, scope: Scope, slot: _Slot) -> None:
        key = scope.user_key
        began = time.monotonic()
        try:
            async with slot.lock:
                slot.index = await self._read_all(scope)
                slot.saved = None
        except MemMachineError as exc:
            slot.failed_at = time.monotonic()
            logger.warning("search index of %s not loaded: %s", key, exc.message)
            return
        finally:
            slot.loading = None
        slot.failed_at = None
        index = slot.index
        self._persist_soon(key, slot, index)
        logger.info(
            "search index of %s loaded: %d episodes, %.0f MiB in %.1f s",
            key,
            len(index),
            index.nbytes / 2**20,
            time.monotonic() - began,
        )
        self._fit_budget()

    async def _catch_up(self, scope: Scope, slot: _Slot, state: IndexState) -> None:
        """Add the episodes written since the index's revision (no deletions between)."""
        async with slot.lock:
            index = slot.index
            if index is None or index.revision >= state.revision:
                return
            if index.deletions < state.deletions:
                return  # someone deleted meanwhile: the next search reloads
            async for entries in self._inner.index_entries(scope, since=index.revision):
                index.add(entries)
            index.revision = state.revision
        if self._grown(slot, index, share=4):
            self._persist_soon(scope.user_key, slot, index)
        self._fit_budget()

    async def _catch_up_quietly(self, scope: Scope, slot: _Slot, state: IndexState) -> None:
        try:
            await self._catch_up(scope, slot, state)
        except MemMachineError as exc:
            slot.index, slot.failed_at = None, time.monotonic()
            logger.warning("search index of %s dropped: %s", scope.user_key, exc.message)
        finally:
            slot.loading = None

    async def _deleted(self, scope: Scope, apply: Callable[[ScopeIndex], list[str]]) -> None:
        """After a delete through this wrapper: apply it to the user's index when it was the
        only deletion since the index's state, else drop the index."""
        key = scope.user_key
        slot = self._slots.get(key)
        if slot is None or slot.index is None:
            return
        async with slot.lock:
            index = slot.index
            if index is None:
                return
            state = await self._inner.index_state(scope)
            if state.deletions != index.deletions + 1:
                slot.index = None
                self._forget_episodes(key)
                return
            for episode_id in apply(index):
                self._episodes.pop((key, episode_id), None)
            index.deletions = state.deletions
            slot.saved = None  # its file was removed: it held what was deleted
            if index.wants_compaction:
                slot.index = compacted(index)

    def _fit_after_reading(self, index: ScopeIndex) -> None:
        """An index opened from its file copies a session's order out of the file when a
        read first needs it, so reads make it hold more: keep the budget."""
        if index.frozen_rows:
            self._fit_budget()

    def _fit_budget(self) -> None:
        """Drop the least recently searched indexes until all fit the budget."""
        held = self.memory_held
        for key in list(self._slots):
            if held <= self._budget:
                return
            slot = self._slots[key]
            if slot.index is None or slot.loading is not None or len(self._slots) == 1:
                continue
            held -= slot.index.nbytes
            self._drop(key, slot)
        if held > self._budget and len(self._slots) == 1:
            ((key, slot),) = self._slots.items()
            if slot.index is not None:
                self._refuse(key, len(slot.index), slot.index.nbytes)
                del self._slots[key]
                self._forget_episodes(key)

    def _refuse(self, key: str, episodes: int, needed: int) -> None:
        """Leave ``key`` to the store while it holds ``episodes`` or more."""
        if key not in self._too_big:
            logger.warning(
                "search index of %s would need ~%.0f MiB, over the %.0f MiB budget: "
                "searched in the store instead",
                key,
                needed / 2**20,
                self._budget / 2**20,
            )
        self._too_big[key] = episodes

    # ------------------------------------------------------------------ files

    def _grown(self, slot: _Slot, index: ScopeIndex, *, share: int) -> bool:
        """Whether the user's file lags ``index`` enough to be written again: there is
        none, it lacks deletions, or the index has gained ``1/share`` of its rows (and at
        least ``_SAVE_AFTER``) since."""
        if self._files is None or slot.saving:
            return False
        if slot.saved is None:
            return True
        _, deletions, rows = slot.saved
        if index.deletions != deletions:
            return True
        return index.rows - rows >= max(_SAVE_AFTER, rows // share)

    def _persist_soon(self, key: str, slot: _Slot, index: ScopeIndex) -> None:
        """Write ``index`` to the user's file in a worker thread; meanwhile it keeps
        answering from memory."""
        if self._files is None or slot.saving:
            return
        slot.saving = True
        task = asyncio.create_task(self._persist(key, slot, index, self._files))
        self._saves.add(task)
        task.add_done_callback(self._saves.discard)

    async def _persist(
        self, key: str, slot: _Slot, index: ScopeIndex, files: SearchIndexFiles
    ) -> None:
        state = (index.revision, index.deletions, index.rows)
        forgets = self._forgets.get(key, 0)
        try:
            await asyncio.to_thread(lambda: files.save(key, snapshot_of(index)))
        except MemMachineError as exc:
            logger.warning("search index of %s not written to disk: %s", key, exc.message)
            return
        finally:
            slot.saving = False
        if self._forgets.get(key, 0) != forgets:
            files.remove(key)  # episodes were deleted meanwhile: the file may hold them
            return
        self.paths.saved += 1
        if self._slots.get(key) is not slot or slot.index is not index:
            return  # left memory meanwhile: the file is for the next open
        slot.saved = state
        if (index.revision, index.deletions, index.rows) == state:
            # nothing changed while writing: answer from the mapped file, which holds the
            # vectors outside the process heap (and frees what a large build spilled)
            opened = await self._in_thread(files, key)
            if (
                opened is not None
                and self._current(key, slot, forgets)
                and slot.index is index
                and (index.revision, index.deletions, index.rows) == state
                and (opened.revision, len(opened)) == (index.revision, len(index))
            ):
                slot.index = opened
                slot.saved = (opened.revision, opened.deletions, opened.rows)
                self._fit_budget()

    def evict(self, scope: Scope | None = None) -> int:
        """Drop from memory the index of ``scope``'s user (of every user without one),
        writing their file first when it lags (see :meth:`settled`); returns how many
        were dropped. Their next search opens the file, or loads from the store."""
        keys = [scope.user_key] if scope is not None else list(self._slots)
        dropped = 0
        for key in keys:
            slot = self._slots.get(key)
            if slot is None or slot.index is None or slot.loading is not None:
                continue
            self._drop(key, slot)
            dropped += 1
        return dropped

    def _drop(self, key: str, slot: _Slot) -> None:
        """Take the user's index out of memory, writing their file first when it lags."""
        if slot.index is not None and self._grown(slot, slot.index, share=10):
            self._persist_soon(key, slot, slot.index)
        del self._slots[key]
        self._forget_episodes(key)

    def index_file(self, scope: Scope) -> Path | None:
        """Where the index of ``scope``'s user is kept on disk (``None`` without files)."""
        return None if self._files is None else self._files.path(scope.user_key)

    async def settled(self) -> None:
        """Wait until the indexes loading in the background are loaded and the index files
        being written are on disk."""
        while True:
            pending = [slot.loading for slot in self._slots.values() if slot.loading is not None]
            pending += self._saves
            if not pending:
                return
            await asyncio.gather(*pending, return_exceptions=True)

    def _forget_file(self, key: str) -> None:
        """Episodes of the user were deleted: their file may hold them."""
        self._forgets[key] = self._forgets.get(key, 0) + 1
        if self._files is not None:
            self._files.remove(key)

    async def _sweep_forever(self, files: SearchIndexFiles) -> None:
        """Remove leftovers at start, then every ``sweep_seconds`` the files of users who
        had episodes deleted elsewhere since their file was written."""
        await asyncio.to_thread(files.sweep_leftovers)
        while True:
            try:
                await self.sweep()
            except MemMachineError as exc:
                logger.warning("search index files not checked: %s", exc.message)
            await asyncio.sleep(self._sweep_seconds)

    async def sweep(self) -> int:
        """Check every file against the store now; remove those holding episodes deleted
        since they were written (or from a store that went back). Returns how many."""
        files = self._files
        if files is None:
            return 0
        removed = 0
        for key, meta in await asyncio.to_thread(lambda: list(files.users())):
            try:
                tenant, org_id, project_id, user_id = key.split("/")
                scope = Scope(tenant=tenant, org_id=org_id, project_id=project_id, user_id=user_id)
            except ValueError:  # not a key this code writes
                files.remove(key)
                continue
            state = await self._inner.index_state(scope)
            if state.deletions != meta.get("deletions") or state.revision < meta.get("revision", 0):
                files.remove(key)
                slot = self._slots.get(key)
                if slot is not None:
                    slot.saved = None
                removed += 1
        return removed

    # ------------------------------------------------------------------ episodes

    async def _with_episodes(
        self, scope: Scope, found: list[tuple[str, float]], index: ScopeIndex
    ) -> list[tuple[Episode, float]]:
        episodes = await self._fetch(scope, [key for key, _ in found], index)
        return [(episodes[key], score) for key, score in found if key in episodes]

    async def _fetch(
        self, scope: Scope, episode_ids: Sequence[str], index: ScopeIndex
    ) -> dict[str, Episode]:
        """The episodes of these ids (of the scope's user): from the cache, from the
        copies ``index`` holds, else from the store."""
        key = scope.user_key
        user = scope.user_scope()
        found: dict[str, Episode] = {}
        missing: list[str] = []
        for episode_id in dict.fromkeys(episode_ids):
            cached = self._episodes.get((key, episode_id))
            if cached is None:
                held = index.episode(episode_id, user)
                if held is None:
                    missing.append(episode_id)
                    continue
                self._episodes[(key, episode_id)] = cached = held
            else:
                self._episodes.move_to_end((key, episode_id))
            found[episode_id] = cached
        if missing:
            fetched = await self._load_episodes(scope, missing)
            for episode_id in missing:
                episode = fetched.get(episode_id)
                if episode is not None:
                    found[episode_id] = episode
                    self._episodes[(key, episode_id)] = episode
        while len(self._episodes) > self._cache_size:
            self._episodes.popitem(last=False)
        return found

    async def _load_episodes(self, scope: Scope, episode_ids: list[str]) -> dict[str, Episode]:
        """Episodes from the store, one ``get_episodes`` for every request of the user made
        in the same turn of the event loop (the vector and full-text searches of one
        search ask together)."""
        key = scope.user_key
        batch = self._batches.get(key)
        if batch is None:
            batch = _Batch(scope.user_scope(), asyncio.get_running_loop().create_future())
            self._batches[key] = batch
            asyncio.get_running_loop().call_soon(self._flush, key, batch)
        batch.ids.update(episode_ids)
        return await asyncio.shield(batch.done)

    def _flush(self, key: str, batch: _Batch) -> None:
        if self._batches.get(key) is batch:
            del self._batches[key]

        async def load() -> None:
            try:
                episodes = await self._inner.get_episodes(batch.scope, sorted(batch.ids))
            except BaseException as exc:
                if not batch.done.done():
                    batch.done.set_exception(exc)
                raise
            if not batch.done.done():
                batch.done.set_result({episode.id: episode for episode in episodes})

        task = asyncio.ensure_future(load())
        task.add_done_callback(_retrieve_exception)

    def _forget_episodes(self, key: str) -> None:
        for cached in [entry for entry in self._episodes if entry[0] == key]:
            del self._episodes[cached]
