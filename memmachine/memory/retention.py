"""The retention sweep: removes expired memories (:mod:`memmachine.memory.expiry`) and
memories older than their retention policy (:class:`~memmachine.config.RetentionPolicy`)
from every store, in bounded batches.

Reads already hide expired memories; the sweep is what erases them. It visits every project
any store holds data in (``list_projects`` of the episode, profile and working stores) and
those of :meth:`RetentionSettings.swept_projects`, pages through the users the episode, profile
and working stores hold there, and for each user deletes (one store call per memory, so a
write never waits for more than one of them):

* episodes that expired, or whose timestamp is older than ``episodes_max_age_days``;
* facts that expired, or not confirmed (``updated_at``) for ``facts_max_age_days`` of
  their tag (deleting a fact erases its history too);
* working-memory sessions not written for ``working_max_age_days``, and the messages of
  expired episodes from the others; a compaction summary folded from an episode the sweep
  removes is dropped (emptied, with the record of what it covered), since only the
  language model could rewrite it without what the episode said.

A fact that rested on removed episodes keeps its value and its confidence (which ages as
always, since its last confirmation): its own expiry and policy decide its fate, not its
sources'. Its provenance says what happened: the removed ids in its ``source_episode_ids``
(and in its closed versions') become one :data:`~memmachine.models.EXPIRED_SOURCE` marker
instead of dangling ids. A closed version expires with the value it held (the fact's expiry
when it was replaced): reads hide it from then on and the sweep erases it. The report
counts what was removed, never what it said.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from pydantic import BaseModel

from memmachine.config import RetentionPolicy, RetentionSettings
from memmachine.errors import ConflictError
from memmachine.memory.expiry import is_expired
from memmachine.models import ProjectScope, Scope, StoreHealth
from memmachine.pipeline.compaction import RESERVED_STATE_KEY, covered_ids
from memmachine.ports import (
    Clock,
    EpisodeStore,
    JobQueue,
    ProfileStore,
    RetentionPolicyStore,
    SystemClock,
    WorkingMemoryStore,
)
from memmachine.safety.gate import WriteGate

__all__ = ["Clock", "RetentionReport", "RetentionSettings", "RetentionSweep"]

log = logging.getLogger("memmachine.retention")

#: What the sweep reads of a memory: id, metadata, the moment its age counts from, and the
#: moment before which its policy removes it (``None``: kept).
Memory = tuple[str, dict[str, Any], datetime, datetime | None]


class ExpiringRecords(Protocol):
    """Records kept apart from the stores (custom memory types) that expire on their own."""

    async def purge_expired(self) -> int: ...


class Compaction(Protocol):
    """What rewrites the stores' files after an erasure (a forget's
    :class:`~memmachine.memory.erasure.ForgetCompaction`)."""

    async def request(self) -> None: ...


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
    #: Facts and closed versions whose removed sources became the "expired" marker.
    fact_sources_expired: int = 0
    #: Closed fact versions erased because the value they held expired.
    fact_versions_expired: int = 0
    #: Records of custom memory types erased because they expired.
    custom_records_expired: int = 0
    #: Working-memory summaries dropped because they were folded from removed episodes.
    working_summaries_dropped: int = 0
    #: Done and dead jobs removed by a ``jobs_max_age_days`` policy.
    jobs_removed: int = 0

    @property
    def removed(self) -> int:
        """Everything the sweep erased, summed over the counts above (0: the stores' files
        hold nothing new to compact)."""
        counted = self.model_dump(exclude={"started_at", "finished_at", "users"})
        return sum(value for value in counted.values() if isinstance(value, int))


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
        policies: RetentionPolicyStore | None = None,
    ) -> None:
        #: Rewritten working memory passes it again (idempotent on text it already passed).
        self._gate = gate or WriteGate()
        self._episodes, self._profile, self._working = episodes, profile, working
        self.settings = settings or RetentionSettings()
        #: Where policies set through :meth:`replace_policies` are kept across restarts.
        self._stored = policies
        #: The custom memory types whose expired records the sweep erases.
        self.custom: ExpiringRecords | None = None
        self._jobs: JobQueue | None = None
        #: Run after a sweep that erased anything, as after a forget (set by the
        #: composition root; ``None``: the stores' own compaction only).
        self.compaction: Compaction | None = None
        self.clock: Clock = clock or SystemClock()
        self.last: RetentionReport | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def erasing(self, custom: ExpiringRecords, jobs: JobQueue | None) -> RetentionSweep:
        """This sweep, also erasing the expired records of ``custom`` (the custom memory
        types) and the jobs of ``jobs`` older than their policy at every run."""
        self.custom, self._jobs = custom, jobs
        return self

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Load the stored policies (the policy store is started before), then start the
        background sweep."""
        if self._stored is not None:
            stored = await self._stored.all_policies()
            merged = _merged(self.settings.policies, stored)
            self.settings = self.settings.model_copy(update={"policies": merged})
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
            f"working sessions, {last.fact_versions_expired} fact versions, "
            f"{last.custom_records_expired} custom records, {last.working_summaries_dropped} "
            f"summaries, {last.jobs_removed} jobs; {last.fact_sources_expired} facts lost "
            "sources to expiry"
        )
        return StoreHealth(name=self.name, kind=self.kind, status="ok", detail=detail)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sweep_interval_seconds)
            try:
                await self.run()
            except Exception:
                log.exception("retention sweep failed; retrying at the next interval")

    async def replace_policies(
        self, tenant: str | None, policies: Sequence[RetentionPolicy]
    ) -> list[RetentionPolicy]:
        """Replace ``tenant``'s policies (every tenant's for ``None``; ``policies`` then name
        their tenants, else they all name ``tenant``) and keep them in the policy store, so
        a restart keeps them; the next sweep applies them. The policies now in force."""
        current = self.settings.policies
        tenants = {tenant} if tenant is not None else {p.tenant for p in (*current, *policies)}
        if self._stored is not None:
            for name in sorted(tenants):
                mine = [p.model_dump(mode="json") for p in policies if p.tenant == name]
                await self._stored.put_policies(name, mine)
        kept = [policy for policy in current if policy.tenant not in tenants]
        self.settings = self.settings.model_copy(update={"policies": [*kept, *policies]})
        return self.settings.policies

    # ------------------------------------------------------------------ sweeping

    async def run(self) -> RetentionReport:
        """One full sweep over every swept project (one sweep at a time)."""
        async with self._lock:
            report = RetentionReport(started_at=self.clock.now())
            for project in await self._projects():
                async for user in self._users(project):
                    report.users += 1
                    removed = await self._episodes_of(user, report)
                    # An id stored again since (a message sent again) names that message.
                    gone = await self._still_gone(user, removed, removed)
                    if gone:
                        report.fact_sources_expired += await self._profile.mark_sources_expired(
                            user, sorted(gone)
                        )
                    await self._facts_of(user, report)
                    report.fact_versions_expired += await self._profile.delete_expired_versions(
                        user, self.clock.now()
                    )
                    await self._working_of(user, removed, report)
                    limit = self._age_limit(user, "jobs")
                    if self._jobs is not None and limit is not None:
                        report.jobs_removed += await self._jobs.purge_finished(user, limit)
            if self.custom is not None:
                report.custom_records_expired = await self.custom.purge_expired()
            report.finished_at = self.clock.now()
            self.last = report
            if report.removed and self.compaction is not None:
                # the erased text stays in append-only files and freed pages until compacted
                await self.compaction.request()
            log.info("retention sweep: %s", report.model_dump_json())
            return report

    async def _projects(self) -> list[ProjectScope]:
        """Every project any store holds data in, and those the settings name, in order."""
        found = {project: None for project in self.settings.swept_projects()}
        for store in (self._episodes, self._profile, self._working):
            after: ProjectScope | None = None
            while page := await store.list_projects(after=after, limit=self.settings.batch_size):
                found.update(dict.fromkeys(page))
                after = page[-1]
        return sorted(found, key=lambda p: (p.tenant, p.org_id, p.project_id))

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
            "jobs": policy.jobs_max_age_seconds,
        }[kind]
        return None if seconds is None else self.clock.now() - timedelta(seconds=seconds)

    async def _episodes_of(self, user: Scope, report: RetentionReport) -> set[str]:
        """Remove the user's expired and aged-out episodes; the ids of those removed. Each
        removal names the episode as read (``stored_at``): a message stored anew under its
        id since (an expired message sent again) is kept."""
        stored: dict[str, datetime] = {}

        async def page(offset: int) -> list[Memory]:
            found = await self._episodes.list_episodes(
                user, limit=self.settings.batch_size, offset=offset
            )
            stored.update((e.id, e.created_at) for e in found)
            return [
                (e.id, e.metadata, e.timestamp, self._age_limit(e.scope, "episodes")) for e in found
            ]

        def delete(episode_id: str) -> Awaitable[bool]:
            return self._episodes.delete_episode(user, episode_id, stored_at=stored[episode_id])

        expired, aged = await self._select(page)
        removed = await self._remove([*expired, *aged], delete)
        report.episodes_expired += len(removed.intersection(expired))
        report.episodes_aged_out += len(removed.intersection(aged))
        return removed

    async def _facts_of(self, user: Scope, report: RetentionReport) -> None:
        """Remove the user's expired facts and those unconfirmed past their tag's age."""

        async def page(offset: int) -> list[Memory]:
            found = await self._profile.list_facts(
                user, limit=self.settings.batch_size, offset=offset
            )
            return [
                (f.id, f.metadata, f.updated_at, self._age_limit(f.scope, "facts", f.tag))
                for f in found
            ]

        expired, aged = await self._select(page)
        await self._remove([*expired, *aged], lambda i: self._profile.delete_fact(user, i))
        report.facts_expired += len(expired)
        report.facts_aged_out += len(aged)

    async def _select(
        self, page: Callable[[int], Awaitable[list[Memory]]]
    ) -> tuple[list[str], list[str]]:
        """The ids of the expired and of the aged-out memories, read in batches (writes get
        their turn between batches)."""
        expired: list[str] = []
        aged: list[str] = []
        offset = 0
        while True:
            found = await page(offset)
            now = self.clock.now()
            for memory_id, metadata, moment, limit in found:
                if is_expired(metadata, now):
                    expired.append(memory_id)
                elif limit is not None and moment <= limit:
                    aged.append(memory_id)
            offset += len(found)
            await asyncio.sleep(0)
            if len(found) < self.settings.batch_size:
                return expired, aged

    async def _remove(self, ids: list[str], delete: Callable[[str], Awaitable[bool]]) -> set[str]:
        """One store call per memory, yielding to other work after each batch; the ids the
        store removed."""
        removed: set[str] = set()
        for index, memory_id in enumerate(ids):
            if await delete(memory_id):
                removed.add(memory_id)
            if index % self.settings.batch_size == self.settings.batch_size - 1:
                await asyncio.sleep(0)
        return removed

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
            held = [message.metadata.get("episode_id") for message in memory.messages]
            gone = await self._still_gone(user, removed, {*held, *covered_ids(memory.state)})
            # A removed id stored again was appended again: only its last copy is the new one.
            last = {episode_id: position for position, episode_id in enumerate(held)}
            now = self.clock.now()
            live = [
                message
                for position, message in enumerate(memory.messages)
                if not is_expired(message.metadata, now)
                and held[position] not in gone
                and (held[position] not in removed or last[held[position]] == position)
            ]
            # A summary folded from a removed episode would keep telling what it said.
            stale = bool(memory.summary) and not gone.isdisjoint(covered_ids(memory.state))
            if len(live) == len(memory.messages) and not stale:
                continue
            try:
                # Only if no write came in meanwhile; a later sweep retries otherwise.
                await self._working.put(
                    session.scope,
                    messages=self._gate.messages(live),
                    state=self._gate.state(_uncovered(memory.state) if stale else None),
                    summary=self._gate.summary("" if stale else None),
                    expected_version=memory.version,
                    ttl_seconds=memory.ttl_seconds,
                )
            except ConflictError:
                continue
            report.working_messages_removed += len(memory.messages) - len(live)
            report.working_summaries_dropped += stale

    async def _still_gone(self, user: Scope, removed: set[str], held: set[Any]) -> set[str]:
        """The ``removed`` ids among ``held`` that no episode holds now: a message sent again
        after the sweep removed its episode is stored anew under the same id, and its facts
        and working-memory copy are kept. Read after the working memory it filters, so an
        append made since is caught by the write's version check."""
        wanted = sorted(removed.intersection(held))
        if not wanted:
            return set()
        again = {episode.id for episode in await self._episodes.get_episodes(user, wanted)}
        return set(wanted) - again


def _uncovered(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with the record of what the (dropped) summary covered emptied."""
    own = state.get(RESERVED_STATE_KEY)
    own = dict(own) if isinstance(own, dict) else {}
    own["summary_covers"] = []
    return {**state, RESERVED_STATE_KEY: own}


def _merged(
    defaults: Sequence[RetentionPolicy], stored: dict[str, list[dict[str, Any]]]
) -> list[RetentionPolicy]:
    """The settings file's policies of the tenants that stored none, then the stored ones
    (a tenant's stored list, even empty, replaces its settings-file policies). A stored
    policy this version no longer accepts is skipped with a warning (its data is kept)."""
    policies = [policy for policy in defaults if policy.tenant not in stored]
    for tenant, entries in stored.items():
        for entry in entries:
            try:
                policies.append(RetentionPolicy.model_validate(entry))
            except ValueError as exc:
                log.warning("skipping a stored retention policy of %s: %s", tenant, exc)
    return policies
