"""Looking inside the memory: the reads behind the inspector (``/ui``) that span stores.

An :class:`Inspector` answers questions no single memory service owns: which users a
project has and what each store holds for them, a user's sessions in both the episode and
the working store, how a user's episodes spread over time, what forgetting would remove,
and where a user's background jobs stand. It only reads; every change the inspector makes
goes through the :class:`~memmachine.manager.MemoryManager` like any other interface's.

It holds the same store objects as the manager (:meth:`Inspector.of`), so it sees exactly
what the manager sees (the in-process search index included) and needs no wiring of its
own.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from memmachine.errors import InvalidInputError, NotFoundError
from memmachine.manager import MemoryManager
from memmachine.models import (
    Episode,
    ProjectScope,
    Scope,
    SessionActivity,
    TimeBucket,
    UserActivity,
    WorkingMemory,
)
from memmachine.ports import EpisodeStore, JobQueue, JobStatus, ProfileStore, WorkingMemoryStore

__all__ = ["ForgetPreview", "Inspector", "UserPage"]

#: Most users one page may hold.
MAX_USERS_PER_PAGE = 500
#: Most facts counted for a forget preview of one session.
_FACT_COUNT_LIMIT = 100_000


@dataclass(frozen=True)
class UserPage:
    """A page of a project's users; ``next_after`` continues it (``None``: last page)."""

    users: list[UserActivity]
    next_after: str | None


@dataclass(frozen=True)
class ForgetPreview:
    """What forgetting ``scope`` (a user, or one session when it has a ``session_id``)
    would remove right now."""

    scope: Scope
    episodes: int
    facts: int
    sessions: int
    working_sessions: int


class Inspector:
    """Cross-store reads for the inspector; see the module docstring."""

    def __init__(
        self,
        *,
        episodes: EpisodeStore,
        profile: ProfileStore,
        working: WorkingMemoryStore,
        jobs: JobQueue | None,
    ) -> None:
        self.episodes = episodes
        self.profile = profile
        self.working = working
        self.jobs = jobs

    @classmethod
    def of(cls, manager: MemoryManager) -> Inspector:
        """An inspector over the manager's own stores."""
        return cls(
            episodes=manager.episodes,
            profile=manager.profile,
            working=manager.working,
            jobs=manager.jobs,
        )

    async def list_users(
        self,
        project: ProjectScope,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> UserPage:
        """The project's users that any store holds something for, by user id (code-point
        order), with each store's counts merged; ``prefix`` and ``after`` as in the stores'
        ``list_users``. Each store is asked for ``limit`` users past ``after``: a user among
        the first ``limit`` of the union is among the first ``limit`` of every store that
        holds it, so the merged counts are complete."""
        if not 1 <= limit <= MAX_USERS_PER_PAGE:
            raise InvalidInputError(f"limit must be 1-{MAX_USERS_PER_PAGE}", field="limit")
        answers = await asyncio.gather(
            self.episodes.list_users(project, prefix=prefix, after=after, limit=limit),
            self.profile.list_users(project, prefix=prefix, after=after, limit=limit),
            self.working.list_users(project, prefix=prefix, after=after, limit=limit),
        )
        merged: dict[str, UserActivity] = {}
        for answer in answers:
            for found in answer:
                user = merged.setdefault(found.user_id, UserActivity(user_id=found.user_id))
                _merge(user, found)
        users = [merged[key] for key in sorted(merged)][:limit]
        more = len(merged) > limit or any(len(answer) == limit for answer in answers)
        return UserPage(users=users, next_after=users[-1].user_id if more and users else None)

    async def user(self, scope: Scope) -> UserActivity | None:
        """One user's counts, or ``None`` when no store holds anything for them. (A user id
        is the smallest id it prefixes, so each store's first user with that prefix is
        either this user or proof it holds none.)"""
        page = await self.list_users(scope.project_scope(), prefix=scope.user_id, limit=1)
        if page.users and page.users[0].user_id == scope.user_id:
            return page.users[0]
        return None

    async def sessions(
        self, scope: Scope, *, limit: int = 50, offset: int = 0
    ) -> tuple[list[SessionActivity], list[WorkingMemory]]:
        """A page of the user's sessions holding episodes, and every session of theirs with
        live working memory (without messages)."""
        user = scope.user_scope()
        held, live = await asyncio.gather(
            self.episodes.list_sessions(user, limit=limit, offset=offset),
            self.working.list_sessions(user),
        )
        return held, live

    async def neighbours(
        self, scope: Scope, episode_id: str, *, before: int = 3, after: int = 3
    ) -> tuple[Episode, list[Episode], list[Episode]]:
        """One of the user's episodes with up to ``before`` / ``after`` episodes around it
        in its session; ``NotFoundError`` when the user has no such episode."""
        user = scope.user_scope()
        episode = await self.episodes.get_episode(user, episode_id)
        if episode is None:
            raise NotFoundError(f"episode {episode_id!r} not found")
        around = await self.episodes.neighbours(user, episode_id, before=before, after=after)
        earlier = [e for e in around if e.sequence < episode.sequence]
        later = [e for e in around if e.sequence > episode.sequence]
        return episode, earlier, later

    async def timeline(self, scope: Scope, *, bucket_seconds: int = 86_400) -> list[TimeBucket]:
        """The scope's episodes counted per ``bucket_seconds`` of their timestamps."""
        return await self.episodes.episode_timeline(scope, bucket_seconds=bucket_seconds)

    async def forget_preview(self, scope: Scope) -> ForgetPreview:
        """What ``forget_session`` (``scope.session_id`` set) or ``forget_user`` would
        remove: episodes, facts (for a session: those sourced from it), sessions holding
        episodes, and live working memories."""
        if scope.session_id is None:
            user = scope.user_scope()
            found = await self.user(user)
            activity = found or UserActivity(user_id=user.user_id)
            return ForgetPreview(
                scope=user,
                episodes=activity.episodes,
                facts=activity.facts,
                sessions=activity.sessions,
                working_sessions=activity.working_sessions,
            )
        session = scope.model_copy(update={"agent_id": None, "group_id": None})
        episodes, facts, working = await asyncio.gather(
            self.episodes.count_episodes(session),
            self.profile.list_facts(session, limit=_FACT_COUNT_LIMIT),
            self.working.get(session, last_n=0),
        )
        return ForgetPreview(
            scope=session,
            episodes=episodes,
            facts=len(facts),
            sessions=1 if episodes else 0,
            working_sessions=0 if working is None else 1,
        )

    async def job_counts(self, scope: Scope) -> dict[JobStatus, int] | None:
        """The user's background jobs by status; ``None`` when jobs are off."""
        if self.jobs is None:
            return None
        return await self.jobs.count_jobs(scope.user_scope())


def _merge(into: UserActivity, found: UserActivity) -> None:
    """Add one store's counts for a user to ``into`` (each store fills its own fields)."""
    into.episodes += found.episodes
    into.sessions += found.sessions
    into.facts += found.facts
    into.working_sessions += found.working_sessions
    if found.last_active is not None and (
        into.last_active is None or found.last_active > into.last_active
    ):
        into.last_active = found.last_active
