"""Working memory: one session's messages, state and summary, and when to compact them."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from memmachine.config import CompactionSettings
from memmachine.errors import ConflictError, MemMachineError, NotFoundError
from memmachine.memory.common import require_session
from memmachine.memory.expiry import is_expired
from memmachine.memory.scheduling import JobScheduler
from memmachine.models import Episode, Scope, WorkingMemory, WorkingMessage
from memmachine.pipeline.compaction import RESERVED_STATE_KEY, working_tokens
from memmachine.ports import Clock, LanguageModel, SystemClock, TokenCounter, WorkingMemoryStore
from memmachine.safety.gate import WriteGate

__all__ = ["WorkingService"]

log = logging.getLogger(__name__)


class WorkingService:
    """Reads and writes sessions in the working-memory store (every write through the
    gate, every session expiring ``ttl_seconds`` after its last write) and queues the
    compactions a write earns. A message of an expired episode is not returned."""

    def __init__(
        self,
        *,
        store: WorkingMemoryStore,
        gate: WriteGate,
        scheduler: JobScheduler,
        compaction: CompactionSettings,
        language_model: LanguageModel | None,
        ttl_seconds: int | None,
        token_counter: TokenCounter,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self.clock: Clock = clock or SystemClock()
        self._gate = gate
        self._scheduler = scheduler
        self.compaction = compaction
        self.language_model = language_model
        self.ttl_seconds = ttl_seconds
        self.token_counter = token_counter

    async def get(
        self,
        scope: Scope,
        *,
        last_n: int | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> WorkingMemory:
        """The session's working memory (the newest ``last_n`` messages, or a page of them);
        a session never written reads as empty, version 0."""
        session_scope = require_session(scope)
        memory = await self._store.get(session_scope, last_n=last_n, offset=offset, limit=limit)
        if memory is None:
            return WorkingMemory(scope=session_scope)
        now = self.clock.now()
        live = [message for message in memory.messages if not is_expired(message.metadata, now)]
        return memory.model_copy(update={"messages": live})

    async def append(self, scope: Scope, messages: Sequence[WorkingMessage]) -> WorkingMemory:
        """Append messages to the session (redacted and marked like episodes)."""
        session_scope = require_session(scope)
        self._gate.check_messages(messages)
        memory = await self._store.append(
            session_scope, self._gate.messages(messages), ttl_seconds=self.ttl_seconds
        )
        await self.compact_later(session_scope, memory)
        return memory

    async def append_episodes(self, scope: Scope, episodes: Sequence[Episode]) -> WorkingMemory:
        """Append stored episodes to their session, each with ``metadata["episode_id"]``,
        and queue the compactions that earns."""
        messages = [
            WorkingMessage(
                role=episode.role,
                content=episode.content,
                producer=episode.producer,
                timestamp=episode.timestamp,
                metadata={**episode.metadata, "episode_id": episode.id},
            )
            for episode in episodes
        ]
        memory = await self._store.append(
            scope, self._gate.messages(messages), ttl_seconds=self.ttl_seconds
        )
        await self.compact_later(scope, memory)
        return memory

    async def put(
        self,
        scope: Scope,
        *,
        messages: Sequence[WorkingMessage] | None = None,
        state: dict[str, Any] | None = None,
        summary: str | None = None,
        expected_version: int | None = None,
    ) -> WorkingMemory:
        """Replace the parts given (messages, state, summary), optionally only when the
        session is still at ``expected_version`` (``ConflictError`` otherwise)."""
        session_scope = require_session(scope)
        self._gate.check_working(messages, state, summary, expected_version)
        return await self._store.put(
            session_scope,
            messages=self._gate.messages(messages),
            state=self._gate.state(state),
            summary=self._gate.summary(summary),
            expected_version=expected_version,
            ttl_seconds=self.ttl_seconds,
        )

    async def delete(self, scope: Scope) -> None:
        """Remove the session's working memory (``NotFoundError`` when it has none)."""
        if not await self._store.delete(require_session(scope)):
            raise NotFoundError(f"session {scope.session_id!r} has no working memory")

    async def drop_episode(self, episode: Episode, attempts: int = 5) -> int:
        """Take the messages of a deleted ``episode`` out of its session's working memory
        (matched by their ``episode_id``); how many were removed. Written only if no write
        came in meanwhile, retried on a fresh read up to ``attempts`` times."""
        scope = episode.scope
        for _ in range(attempts):
            memory = await self._store.get(scope)
            if memory is None:
                return 0
            kept = [m for m in memory.messages if m.metadata.get("episode_id") != episode.id]
            if len(kept) == len(memory.messages):
                return 0
            try:
                await self._store.put(
                    scope,
                    messages=self._gate.messages(kept),
                    expected_version=memory.version,
                    ttl_seconds=memory.ttl_seconds,
                )
            except ConflictError:
                continue
            return len(memory.messages) - len(kept)
        raise ConflictError(
            f"the working memory of session {scope.session_id!r} kept changing; the deleted "
            "episode's message is still in it (retry the delete)"
        )

    async def forget_session(self, scope: Scope) -> int:
        """Remove the session's working memory; how many sessions that was (0 or 1)."""
        return await self._store.delete(scope)

    async def forget_user(self, scope: Scope) -> int:
        """Remove every session of the user; how many there were."""
        return await self._store.delete_user(scope.user_scope())

    async def compact_later(self, scope: Scope, memory: WorkingMemory) -> None:
        """After a write: queue the compactions the session has earned. Never fails (nor
        noticeably slows) the write: a queue that is down or slow is logged and skipped.

        * turn count: one job per ``trigger_messages`` bucket once the session holds more
          messages than that;
        * token count: one job per compaction round once the session's messages and
          summary are estimated above ``max_tokens`` (read only when the session holds more
          than ``keep_last_n`` messages, so that a compaction could remove something);
        * inactivity (with a language model and ``idle_seconds`` > 0): one delayed check
          per session and ``idle_seconds`` window, which compacts the session when nothing
          was written to it for ``idle_seconds`` (see
          :func:`~memmachine.pipeline.compaction.compact_if_idle`)."""
        settings = self.compaction
        if self._scheduler.queue is None:
            return
        own = memory.state.get(RESERVED_STATE_KEY)
        rounds = own.get("compactions", 0) if isinstance(own, dict) else 0
        wanted: list[tuple[str, bool, float]] = []  # (idempotency key, idle, delay)
        trigger = settings.trigger_messages
        if trigger > 0 and memory.message_count > trigger:
            bucket = memory.message_count // trigger
            wanted.append((f"compact:{scope.session_id}:{rounds}:{bucket}", False, 0.0))
        elif memory.message_count > settings.keep_last_n:
            try:
                held = await self._store.get(scope)
            except MemMachineError as exc:  # the write is done: this check may be skipped
                log.warning("the compaction check of a session was skipped: %s", exc.message)
                held = None
            tokens = (
                0
                if held is None
                else working_tokens(held.messages, held.summary, self.token_counter)
            )
            if tokens > settings.max_tokens:
                wanted.append((f"compact:{scope.session_id}:{rounds}:tokens", False, 0.0))
        idle = settings.idle_seconds
        if idle > 0 and self.language_model is not None and memory.message_count > 1:
            window = int(time.time() // idle)
            wanted.append((f"idle:{scope.session_id}:{rounds}:{window}", True, idle))
        for key, is_idle, delay in wanted:
            job = self._scheduler.enqueue_compaction(
                scope, idempotency_key=key, idle=is_idle, delay_seconds=delay
            )
            await self._scheduler.quietly(scope, "compaction", job)
