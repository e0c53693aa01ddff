"""Episodic memory: every message as an episode, embedded and indexed when it is written,
found again by the search pipeline (:mod:`memmachine.retrieval`)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Sequence

from memmachine.config import RetrievalSettings
from memmachine.errors import ConflictError, InvalidInputError, NotFoundError
from memmachine.memory.common import require_session
from memmachine.memory.embedding import embed_records
from memmachine.memory.expiry import kept_expiry, live_episodes, live_hits, stamped
from memmachine.memory.repeats import Added, known_repeats, live_repeats, message_ids, unexpired
from memmachine.models import (
    ID_PATTERN,
    Episode,
    EpisodeHit,
    EpisodeRecord,
    NewMessage,
    Scope,
    as_utc,
)
from memmachine.ports import (
    ATTACHMENT_KEY,
    BlobStore,
    Clock,
    Embedder,
    EpisodeStore,
    Reranker,
    SystemClock,
    embed_queries,
)
from memmachine.retrieval.explain import StageControl
from memmachine.retrieval.pipeline import Search, SearchPipeline
from memmachine.retrieval.stages import default_pipeline
from memmachine.retrieval.text import Said, episode_search_text, indexed_text
from memmachine.safety.gate import WriteGate, check_query
from memmachine.stage_observer import StageObserver

__all__ = ["EpisodicService"]

#: Writes of an add retried after a conflict on a derived id found free again (see
#: :meth:`EpisodicService._store_new`).
_FREED_RETRIES = 3


class EpisodicService:
    """Writes, reads, searches and deletes episodes in the episode store.

    ``embedder``, ``reranker``, ``retrieval`` and ``store`` may be replaced at any time; the
    next call uses them (benchmarks and tests search one data set through several stores).
    An expired episode (:mod:`memmachine.memory.expiry`) is never returned, by ``clock``'s
    time, whether or not the retention sweep has removed it yet. With ``blobs`` set,
    deleting or forgetting episodes also releases the blobs of their attachments
    (:mod:`memmachine.memory.attachments`)."""

    #: Where attachment blobs are kept (``None``: no attachments).
    blobs: BlobStore | None = None

    def __init__(
        self,
        *,
        store: EpisodeStore,
        gate: WriteGate,
        embedder: Embedder | None,
        reranker: Reranker | None,
        retrieval: RetrievalSettings,
        pipeline: SearchPipeline | None = None,
        stage_observer: StageObserver | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self.clock: Clock = clock or SystemClock()
        self._gate = gate
        self.embedder = embedder
        self.reranker = reranker
        self.retrieval = retrieval
        self.pipeline = pipeline or default_pipeline()
        #: Told of every search stage that runs (metrics, traces); ``None``: nobody.
        self.stage_observer = stage_observer

    @property
    def store(self) -> EpisodeStore:
        """The episode store every call reads and writes."""
        return self._store

    @store.setter
    def store(self, value: EpisodeStore) -> None:
        self._store = value

    async def add(
        self, scope: Scope, messages: Sequence[NewMessage], *, ids: Sequence[str] | None = None
    ) -> list[Episode]:
        """The episodes of :meth:`add_new`, one per message in input order."""
        return (await self.add_new(scope, messages, ids=ids)).episodes

    async def add_new(
        self, scope: Scope, messages: Sequence[NewMessage], *, ids: Sequence[str] | None = None
    ) -> Added:
        """Store messages as episodes of ``scope.session_id``, in order (the session is
        required). ``ids`` gives the episodes' ids (one per message, each matching
        ``ID_PATTERN``; an id the user already has raises ``ConflictError`` and stores
        nothing) instead of ids of their own.

        Without ``ids``, a message with a timestamp that is already stored in the scope
        (same role, producer, timestamp, content and metadata, see
        :mod:`memmachine.memory.repeats`), or that comes earlier in the same batch, is not
        stored again: the answer gives the stored episode in its place, and ``new`` lists
        only what this call stored.

        Each message passes the write gate before it is embedded: content and metadata
        string values redacted with ``metadata["redacted"]`` counting what was replaced,
        and a message that reads as an instruction to the model stored with
        ``metadata["suspected_injection"]`` giving the reason, so extraction can skip it."""
        scope = require_session(scope)
        self._gate.check_messages(messages)
        given = None if ids is None else _episode_ids(ids, len(messages))
        messages = self._gate.messages(messages)
        derived: dict[str, NewMessage] = {}
        if given is None:
            given, derived = message_ids(scope, messages)
        said, known = await self._look_up(scope, given, derived)
        now = self.clock.now()
        lexical = self.retrieval.lexical_context
        records = []
        contexts: list[list[Said]] = []
        seen: set[str] = set(known)
        for index, (episode_id, message) in enumerate(zip(given, messages, strict=True)):
            if episode_id in seen and episode_id in derived:
                continue  # stored already, or earlier in this batch
            seen.add(episode_id)
            timestamp = as_utc(message.timestamp) if message.timestamp else now
            end = stamped(
                message.metadata, message.expires_at, message.ttl_seconds, now, f"messages.{index}"
            )
            own = episode_search_text(
                message.content, timestamp=timestamp, producer=message.producer, role=message.role
            )
            before = [content for _, content in said[len(said) - lexical :]] if lexical else []
            records.append(
                EpisodeRecord(
                    id=episode_id,
                    role=message.role,
                    producer=message.producer,
                    content=message.content,
                    timestamp=timestamp,
                    metadata={**message.metadata, **end},
                    search_text=indexed_text(own, before),
                )
            )
            contexts.append(list(said))
            said.append((message.producer or message.role, message.content))
        if self.embedder is not None and records:
            await embed_records(self.embedder, records, contexts, self.retrieval)
        stored = await self._store_new(scope, records, derived, known)
        try:
            stored = kept_expiry([r for r in records if r.id not in known], stored)
        except InvalidInputError:
            await self.remove(scope, stored)
            raise
        by_id = {**known, **{episode.id: episode for episode in stored}}
        return Added(episodes=[by_id[episode_id] for episode_id in given], new=stored)

    async def _look_up(
        self, scope: Scope, given: list[str], derived: dict[str, NewMessage]
    ) -> tuple[list[Said], dict[str, Episode]]:
        """The session's last messages (see :meth:`_said_before`) and the live episodes
        already stored under the ``derived`` ids (see :meth:`_repeats`). The last messages
        are read only when something will be stored: at once with the lookup when a
        message's id is not derived (it is stored whatever the lookup finds), else after
        it, and not at all for repeats only."""
        if any(episode_id not in derived for episode_id in given):
            return await asyncio.gather(self._said_before(scope), self._repeats(scope, derived))
        known = await self._repeats(scope, derived)
        stored = any(episode_id not in known for episode_id in given)
        return (await self._said_before(scope) if stored else []), known

    async def _repeats(self, scope: Scope, derived: dict[str, NewMessage]) -> dict[str, Episode]:
        """The live episodes already stored under the ``derived`` ids. An expired one is
        left out (its message is stored anew) but not removed yet: :meth:`_store_new`
        removes it when the write meets it, after the add's input was checked and embedded,
        so an add refused or failed before its write leaves it to the retention sweep."""
        return unexpired(await known_repeats(self._store, scope, derived), self.clock.now())

    async def _store_new(
        self,
        scope: Scope,
        records: list[EpisodeRecord],
        derived: dict[str, NewMessage],
        known: dict[str, Episode],
    ) -> list[Episode]:
        """Store ``records`` (through the write gate); those a concurrent add of the same
        message stored first (a conflict on a derived id) go into ``known`` instead, unless
        what holds the id has expired: it is removed and the record stored after all. A
        derived id held at the write and free at the lookup (an expired episode another add
        or the sweep removed in between) is written again, a few times at most."""
        freed = 0
        while True:
            try:
                if not records:
                    return []
                return await self._store.add_episodes(scope, self._gate.episodes(records))
            except ConflictError:
                wanted = {r.id: derived[r.id] for r in records if r.id in derived}
                found = await known_repeats(self._store, scope, wanted)
                if not found:
                    freed += 1
                    if not wanted or freed > _FREED_RETRIES:
                        raise
                    continue
                live = await live_repeats(self._store, scope, found, self.clock.now())
                known.update(live)
                records = [record for record in records if record.id not in live]

    async def _said_before(self, session_scope: Scope) -> list[Said]:
        """The last messages of the session, oldest first, as many as the context window or
        lexical context may use (none when both are off)."""
        tuning = self.retrieval
        window = tuning.context_window if self.embedder is not None else 0
        wanted = max(window, tuning.lexical_context)
        if wanted <= 0:
            return []
        latest = await self._store.list_episodes(session_scope, limit=wanted, newest_first=True)
        latest = live_episodes(latest, self.clock.now())
        return [(episode.producer or episode.role, episode.content) for episode in latest[::-1]]

    async def get(self, scope: Scope, episode_id: str) -> Episode:
        """One of the user's episodes (``NotFoundError`` when there is none)."""
        episode = await self._store.get_episode(scope.user_scope(), episode_id)
        if episode is None or not live_episodes([episode], self.clock.now()):
            raise NotFoundError(f"episode {episode_id!r} not found")
        return episode

    async def page(
        self, scope: Scope, *, limit: int = 100, offset: int = 0, newest_first: bool = False
    ) -> tuple[list[Episode], int]:
        """A page of the scope's episodes and the total count in scope. Expired episodes the
        sweep has not removed yet are left out of the page (which may then be short) but
        still counted in the total until they are removed."""
        page, total = await asyncio.gather(
            self._store.list_episodes(scope, limit=limit, offset=offset, newest_first=newest_first),
            self._store.count_episodes(scope),
        )
        return live_episodes(page, self.clock.now()), total

    async def delete(self, scope: Scope, episode_id: str) -> Episode | None:
        """Delete one of the user's episodes (``NotFoundError`` when there is none); the
        episode as it was (``None`` if it went between the read and the delete)."""
        user = scope.user_scope()
        episode = await self._store.get_episode(user, episode_id)
        if not await self._store.delete_episode(user, episode_id):
            raise NotFoundError(f"episode {episode_id!r} not found")
        if episode is not None and self.blobs is not None:
            await self._release([episode])
        return episode

    async def remove(self, scope: Scope, episodes: Sequence[Episode]) -> None:
        """Take back episodes this service just stored (a multi-store write that failed)."""
        for episode in episodes:
            await self._store.delete_episode(scope, episode.id)

    async def forget(self, scope: Scope) -> int:
        """Delete every episode in ``scope``; how many there were. The blobs of their
        attachments go too (all of the user's when ``scope`` is the whole user)."""
        whole_user = scope == scope.user_scope()
        attached = [] if self.blobs is None or whole_user else await self._attached(scope)
        deleted = await self._store.delete_episodes(scope)
        if self.blobs is not None and whole_user:
            await self.blobs.forget(scope)
        await self._release(attached)
        return deleted

    async def _attached(self, scope: Scope) -> list[Episode]:
        """The episodes in ``scope`` that hold an attachment."""
        found: list[Episode] = []
        offset, page = 0, 1_000
        while True:
            batch = await self._store.list_episodes(scope, limit=page, offset=offset)
            found.extend(episode for episode in batch if ATTACHMENT_KEY in episode.metadata)
            offset += len(batch)
            if len(batch) < page:
                return found

    async def _release(self, episodes: Sequence[Episode]) -> None:
        """Release the blobs the episodes hold."""
        for episode in episodes:
            link = episode.metadata.get(ATTACHMENT_KEY)
            if self.blobs is not None and isinstance(link, dict):
                await self.blobs.release(episode.scope, str(link.get("sha256")), episode.id)

    async def ids(self, scope: Scope) -> list[str]:
        """The ids of every episode in ``scope``."""
        ids: list[str] = []
        page = 1_000
        while True:
            batch = await self._store.list_episodes(scope, limit=page, offset=len(ids))
            ids.extend(episode.id for episode in batch)
            if len(batch) < page:
                return ids

    async def embed_query(self, query: str, stages: StageControl | None = None) -> list[float]:
        """The query's vector (there must be an embedder), its time recorded in ``stages`` as
        ``embed_query``; a bad ``stages`` is refused first (see :meth:`search`)."""
        assert self.embedder is not None
        stages = stages or StageControl()
        self.pipeline.check(stages)
        with stages.timed("embed_query"):
            return list((await embed_queries(self.embedder, [query]))[0])

    async def search(
        self,
        scope: Scope,
        query: str,
        *,
        top_k: int = 10,
        expand_context: int = 0,
        query_vector: Sequence[float] | None = None,
        observer: StageObserver | None = None,
        stages: StageControl | None = None,
    ) -> list[EpisodeHit]:
        """Hybrid search over the scope's episodes, best first, through the stages of
        :mod:`memmachine.retrieval.stages` (each switched by its setting in
        :class:`~memmachine.config.RetrievalSettings`).

        Without a reranker a hit's ``score`` is in [0, 1]: 1.0 = first in every signal with
        every boost and the largest neighbour share; with one, the reranker's score scaled
        over its candidates. ``expand_context`` adds up to that many neighbouring turns
        before and after each hit (``context=True``) on top of the ``top_k`` hits.
        Each stage runs inside ``observer.stage(name)`` (default: ``stage_observer``);
        ``stages`` switches stages off for this search and may record what each did
        (:class:`~memmachine.retrieval.explain.StageControl`; a name that is not a stage or
        is essential raises ``InvalidInputError``)."""
        check_query(self._gate.limits, query, top_k)
        if stages is not None:
            self.pipeline.check(stages)
        search = Search(
            scope=scope,
            query=query,
            top_k=top_k,
            expand_context=expand_context,
            query_vector=query_vector,
            store=self._store,
            embedder=self.embedder,
            reranker=self.reranker,
            tuning=self.retrieval,
        )
        hits = await self.pipeline.run(search, observer or self.stage_observer, stages)
        # After the search, not before: an episode that expires while it runs is left out.
        return live_hits(hits, self.clock.now())


def _episode_ids(ids: Sequence[str] | None, count: int) -> list[str]:
    """The caller's episode ids, checked, or ``count`` fresh ones."""
    if ids is None:
        return [str(uuid.uuid4()) for _ in range(count)]
    if len(ids) != count:
        raise InvalidInputError(f"{len(ids)} ids for {count} messages", field="ids")
    for index, episode_id in enumerate(ids):
        if re.fullmatch(ID_PATTERN, episode_id) is None:
            raise InvalidInputError(
                f"episode id {index} must be 1-128 letters, digits or ._@+-=#~|",
                field=f"ids.{index}",
            )
    return list(ids)
