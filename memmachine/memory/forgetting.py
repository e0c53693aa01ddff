"""Forgetting a session or a user in every store that holds them."""

from __future__ import annotations

import asyncio

from memmachine.memory.common import require_session
from memmachine.memory.custom_registry import MemoryTypeRegistry
from memmachine.memory.episodic import EpisodicService
from memmachine.memory.procedural import ProceduralMemory
from memmachine.memory.profile import ProfileService
from memmachine.memory.working import WorkingService
from memmachine.models import ForgetReport, Scope

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
    ) -> None:
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
        episodes, facts, sessions, _ = await asyncio.gather(
            self._episodic.forget(session),
            self._profile.forget(session),
            self._working.forget_session(session),
            self._procedural.forget(session),
        )
        if episode_ids:
            await self._profile.detach_episodes(session.user_scope(), episode_ids)
        return ForgetReport(
            episodes_deleted=episodes, facts_deleted=facts, sessions_deleted=sessions
        )

    async def user(self, scope: Scope) -> ForgetReport:
        """Remove everything stored for the user, in all three stores and in every custom
        memory type. Procedures are the application's (and hold nothing personal): they
        stay, and lose every session of the user from their provenance; the user's session
        outcomes are deleted."""
        user = scope.user_scope()
        episodes, facts, sessions, _, _ = await asyncio.gather(
            self._episodic.forget(user),
            self._profile.forget(user),
            self._working.forget_user(user),
            self._custom.forget_user(user),
            self._procedural.forget(user),
        )
        return ForgetReport(
            episodes_deleted=episodes, facts_deleted=facts, sessions_deleted=sessions
        )
