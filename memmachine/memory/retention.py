"""The retention sweep: removes expired memories (:mod:`memmachine.memory.expiry`) and
memories older than their retention policy (:class:`~memmachine.config.RetentionPolicy`)
from every store, in bounded batches.

Reads already hide expired memories; the sweep is what erases them. It visits each project
of :meth:`RetentionSettings.swept_projects`, pages through the users the episode, profile
and working stores hold there, and for each user deletes (one store call per memory, so a
write never waits for more than one of them):

* episodes that expired, or whose timestamp is older than ``episodes_max_age_days``;
* facts that expired, or not confirmed (``updated_at``) for ``facts_max_age_days`` of
  their tag (deleting a fact erases its history too);
* working-memory sessions not written for ``working_max_age_days``, and the messages of
  expired episodes from the others (a session's compaction summary is not rewritten).

A fact that rested on removed episodes keeps its value, its ``source_episode_ids`` and its
confidence (which ages as always, since its last confirmation): its own expiry and policy
decide its fate, not its sources'. The report counts what was removed, never what it said.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

from pydantic import BaseModel

from memmachine.config import RetentionSettings
from memmachine.errors import ConflictError
from memmachine.memory.expiry import is_expired
from memmachine.models import ProjectScope, Scope, StoreHealth
from memmachine.ports import Clock, EpisodeStore, ProfileStore, SystemClock, WorkingMemoryStore
from memmachine.safety.gate import WriteGate

__all__ = ["Clock", "RetentionReport", "RetentionSettings", "RetentionSweep"]

log = logging.getLogger("memmachine.retention")


class RetentionReport(BaseModel):
    """What one sweep removed: counts only."""

    started_at: datetime
    finished_at: datetime | None = None
    users: int = 0
    episodes_expired: int = 0
    episodes_aged_out: int = 0
    facts_expired: int = 0
    facts_aged_out: int = 0
    working_sessions_aged_out: int = 0
    #: Messages of expired or removed episodes taken out of working memory.
    working_messages_removed: int = 0


class RetentionSweep:
    """Runs sweeps on demand (:meth:`run`) and, once started, every
    ``settings.sweep_interval_seconds`` in the background; ``last`` is the last report."""

    name = "retention"
    kind = "sweep"

    def __init__(
        self,
        episodes: EpisodeStore,
        profile: ProfileStore,
        working: WorkingMemoryStore,
        settings: RetentionSettings | None,
        clock: Clock | None = None,
        gate: WriteGate | None = None,
    ) -> None:
        #: Rewritten working memory passes it again (idempotent on text it already passed).
        self._gate = gate or WriteGate()
        self._episodes, self._profile, self._working = episodes, profile, working
        self.settings = settings or RetentionSettings()
        self.clock: Clock = clock or SystemClock()
        self.last: RetentionReport | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self.settings.sweep_interval_seconds > 0 and self._task is None:
            self._task = asyncio.create_task(self._loop(), name="memmachine-retention")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def health(self) -> StoreHealth:
        """Counts of the last sweep (never contents)."""
        last = self.last
        if last is None:
            return StoreHealth(name=self.name, kind=self.kind, status="ok", detail="no sweep yet")
        detail = (
            f"last sweep {last.started_at.isoformat()}: {last.users} users, removed "
            f"{last.episodes_expired + last.episodes_aged_out} episodes "
            f"({last.episodes_expired} expired), {last.facts_expired + last.facts_aged_out} "
            f"facts ({last.facts_expired} expired), {last.working_sessions_aged_out} "
            "working sessions"
        )
        return StoreHealth(name=self.name, kind=self.kind, status="ok", detail=detail)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sweep_interval_seconds)
            try:
                await self.run()
            except Exception:
                log.exception("retention sweep failed; retrying at the next interval")

    # ------------------------------------------------------------------ sweeping

    async def run(self) -> RetentionReport:
        """One full sweep over every swept project (one sweep at a time)."""
        async with self._lock:
            report = RetentionReport(started_at=self.clock.now())
            for project in self.settings.swept_projects():
                async for user in self._users(project):
                    report.users += 1
                    removed = await self._episodes_of(user, report)
                    await self._facts_of(user, report)
                    await self._working_of(user, removed, report)
            report.finished_at = self.clock.now()
            self.last = report
            log.info("retention sweep: %s", report.model_dump_json())
            return report

    async def _users(self, project: ProjectScope) -> AsyncIterator[Scope]:
        """Every user any store holds in ``project``, each once, in id order."""
        batch = self.settings.batch_size
        after: str | None = None
        while True:
            found = await asyncio.gather(
                self._episodes.list_users(project, after=after, limit=batch),
                self._profile.list_users(project, after=after, limit=batch),
                self._working.list_users(project, after=after, limit=batch),
            )
            lists = [[activity.user_id for activity in part] for part in found]
            if not any(lists):
                return
            # Only ids below every full list's last one are complete in this round.
            bound = min((ids[-1] for ids in lists if len(ids) == batch), default=None)
            ids = sorted({i for ids in lists for i in ids if bound is None or i <= bound})
            for user_id in ids:
                yield Scope(
                    tenant=project.tenant,
                    org_id=project.org_id,
                    project_id=project.project_id,
                    user_id=user_id,
                )
            if bound is None:
                return
            after = bound

    def _age_limit(self, scope: Scope, kind: str, tag: str = "") -> datetime | None:
        """Memories of ``kind`` in ``scope`` older than this are removed (``None``: kept)."""
        policy = self.settings.policy_for(scope)
        if policy is None:
            return None
        seconds = {
            "episodes": policy.episodes_max_age_seconds,
            "facts": policy.fact_max_age_seconds(tag),
            "working": policy.working_max_age_seconds,
        }[kind]
        return None if seconds is None else self.clock.now() - timedelta(seconds=seconds)

    async def _episodes_of(self, user: Scope, report: RetentionReport) -> set[str]:
        """Remove the user's expired and aged-out episodes; their ids."""
        batch, offset = self.settings.batch_size, 0
        expired: list[str] = []
        aged: list[str] = []
        while True:
            page = await self._episodes.list_episodes(user, limit=batch, offset=offset)
            now = self.clock.now()
            for episode in page:
                limit = self._age_limit(episode.scope, "episodes")
                if is_expired(episode.metadata, now):
                    expired.append(episode.id)
                elif limit is not None and episode.timestamp <= limit:
                    aged.append(episode.id)
            offset += len(page)
            await asyncio.sleep(0)  # let writes in between batches
            if len(page) < batch:
                break
        for index, episode_id in enumerate([*expired, *aged]):
            await self._episodes.delete_episode(user, episode_id)
            if index % batch == batch - 1:
                await asyncio.sleep(0)
        report.episodes_expired += len(expired)
        report.episodes_aged_out += len(aged)
        return {*expired, *aged}

    async def _facts_of(self, user: Scope, report: RetentionReport) -> None:
        batch, offset = self.settings.batch_size, 0
        expired: list[str] = []
        aged: list[str] = []
        while True:
            page = await self._profile.list_facts(user, limit=batch, offset=offset)
            now = self.clock.now()
            for fact in page:
                limit = self._age_limit(fact.scope, "facts", fact.tag)
                if is_expired(fact.metadata, now):
                    expired.append(fact.id)
                elif limit is not None and fact.updated_at <= limit:
                    aged.append(fact.id)
            offset += len(page)
            await asyncio.sleep(0)
            if len(page) < batch:
                break
        for fact_id in [*expired, *aged]:
            await self._profile.delete_fact(user, fact_id)
        report.facts_expired += len(expired)
        report.facts_aged_out += len(aged)

    async def _working_of(self, user: Scope, removed: set[str], report: RetentionReport) -> None:
        """Remove the user's sessions idle past their policy and, from the others, the
        messages of expired episodes and of the episodes just ``removed``."""
        limit = self._age_limit(user, "working")
        for session in await self._working.list_sessions(user):
            if limit is not None and session.updated_at is not None and session.updated_at <= limit:
                report.working_sessions_aged_out += await self._working.delete(session.scope)
                continue
            memory = await self._working.get(session.scope)
            if memory is None:
                continue
            now = self.clock.now()
            live = [
                message
                for message in memory.messages
                if not is_expired(message.metadata, now)
                and message.metadata.get("episode_id") not in removed
            ]
            if len(live) == len(memory.messages):
                continue
            try:
                # Only if no write came in meanwhile; a later sweep retries otherwise.
                await self._working.put(
                    session.scope,
                    messages=self._gate.messages(live),
                    expected_version=memory.version,
                    ttl_seconds=memory.ttl_seconds,
                )
            except ConflictError:
                continue
            report.working_messages_removed += len(memory.messages) - len(live)
