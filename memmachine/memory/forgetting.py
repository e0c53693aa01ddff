"""Forgetting a session or a user in every store that holds them.

Besides the memory services (episodes and their attachment blobs and search indexes,
facts, working memory, custom memory types, procedures' provenance), a forget reaches the
records kept *about* the user's writes: their background jobs (payloads and errors may hold
what they sent), the kept answers of their idempotent writes (which hold it verbatim), and
the typed agent state of every backend registered in :attr:`Forgetting.state_backends`,
and custom memory type records (of the session, or every one of the user). Then the stores
that keep deleted bytes on disk are compacted (:class:`~memmachine.memory.erasure.ForgetCompaction`,
at once or within its stated delay).

The user's ``UserLedger`` node (revision and counters of their episodes, no text) stays: the
search indexes of other processes compare revisions with it, so it must never go back.
"""

from __future__ import annotations

import asyncio

from memmachine.memory.common import require_session
from memmachine.memory.custom_registry import MemoryTypeRegistry
from memmachine.memory.episodic import EpisodicService
from memmachine.memory.erasure import ForgetCompaction
from memmachine.memory.idempotency import IdempotentWrites
from memmachine.memory.procedural import ProceduralMemory
from memmachine.memory.profile import ProfileService
from memmachine.memory.working import WorkingService
from memmachine.models import ForgetReport, Scope
from memmachine.ports import JobQueue, StateBackend

__all__ = ["Forgetting"]


class Forgetting:
    """Asks every memory service to forget a scope; a new kind of memory joins here."""

    def __init__(
        self,
        episodic: EpisodicService,
        profile: ProfileService,
        working: WorkingService,
        custom: MemoryTypeRegistry,
        procedural: ProceduralMemory,
        *,
        jobs: JobQueue | None = None,
        idempotent: IdempotentWrites | None = None,
        erasure: ForgetCompaction | None = None,
    ) -> None:
        self._jobs, self._idempotent = jobs, idempotent or IdempotentWrites(None)
        self.erasure = erasure or ForgetCompaction()
        #: Typed agent state backends a user forget also empties of the user.
        self.state_backends: list[StateBackend] = []
        self._procedural = procedural
        self._episodic = episodic
        self._profile = profile
        self._working = working
        self._custom = custom

    async def session(self, scope: Scope) -> ForgetReport:
        """Remove a session from all three stores: episodes, working memory, and the facts
        whose provenance is that session; facts of other sessions that this session
        corroborated lose its episodes. Procedures are the application's, not the user's:
        they stay, and lose this session from their provenance."""
        session = require_session(scope).model_copy(update={"agent_id": None, "group_id": None})
        episode_ids = await self._episodic.ids(session)
        episodes, facts, sessions, *_ = await asyncio.gather(
            self._episodic.forget(session),
            self._profile.forget(session),
            self._working.forget_session(session),
            self._procedural.forget(session),
            self._custom.forget_session(session),
            *(backend.delete_session(session) for backend in self.state_backends),
        )
        if episode_ids:
            await self._profile.detach_episodes(session.user_scope(), episode_ids)
        await self._records(session)
        return ForgetReport(
            episodes_deleted=episodes, facts_deleted=facts, sessions_deleted=sessions
        )

    async def user(self, scope: Scope) -> ForgetReport:
        """Remove everything stored for the user, in all three stores and in every custom
        memory type. Procedures are the application's (and hold nothing personal): they
        stay, and lose every session of the user from their provenance; the user's session
        outcomes are deleted."""
        user = scope.user_scope()
        episodes, facts, sessions, *_ = await asyncio.gather(
            self._episodic.forget(user),
            self._profile.forget(user),
            self._working.forget_user(user),
            self._custom.forget_user(user),
            self._procedural.forget(user),
            *(backend.delete_user(user) for backend in self.state_backends),
        )
        await self._records(user)
        return ForgetReport(
            episodes_deleted=episodes, facts_deleted=facts, sessions_deleted=sessions
        )

    async def _records(self, scope: Scope) -> None:
        """The jobs and kept idempotent answers of ``scope`` (a user, or one session),
        then the compaction of what the stores keep on disk."""
        if self._jobs is not None:
            await self._jobs.forget(scope)
        await self._idempotent.forget(scope)
        await self.erasure.request()
