""":class:`ObservedProfileStore`: any profile store, timed and traced per call."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memmachine.adapters.observed.observed import Observed
from memmachine.models import (
    EpisodeDetachment,
    Fact,
    FactRecord,
    FactTimes,
    FactVersion,
    ProjectScope,
    Scope,
    StoreHealth,
    UserActivity,
)
from memmachine.ports import ProfileStore
from memmachine.telemetry import Telemetry

__all__ = ["ObservedProfileStore"]


class ObservedProfileStore(Observed[ProfileStore]):
    """A :class:`~memmachine.ports.ProfileStore` that passes every call to ``inner`` and
    reports it (see :mod:`memmachine.adapters.observed.observed`); stored facts count as ingested
    ``facts``."""

    def __init__(self, inner: ProfileStore, telemetry: Telemetry) -> None:
        super().__init__(inner, telemetry, "store")

    async def health(self) -> StoreHealth:
        return await self._inner.health()

    async def upsert_facts(self, scope: Scope, records: Sequence[FactRecord]) -> list[Fact]:
        with self._call("upsert_facts"):
            stored = await self._inner.upsert_facts(scope, records)
        self._telemetry.count("facts", len(stored))
        return stored

    async def get_fact(self, scope: Scope, fact_id: str) -> Fact | None:
        with self._call("get_fact"):
            return await self._inner.get_fact(scope, fact_id)

    async def list_facts(
        self,
        scope: Scope,
        *,
        tag: str | None = None,
        feature: str | None = None,
        limit: int = 1000,
        offset: int = 0,
    ) -> list[Fact]:
        with self._call("list_facts"):
            return await self._inner.list_facts(
                scope, tag=tag, feature=feature, limit=limit, offset=offset
            )

    async def delete_fact(self, scope: Scope, fact_id: str) -> bool:
        with self._call("delete_fact"):
            return await self._inner.delete_fact(scope, fact_id)

    async def delete_facts(
        self, scope: Scope, *, tag: str | None = None, feature: str | None = None
    ) -> int:
        with self._call("delete_facts"):
            return await self._inner.delete_facts(scope, tag=tag, feature=feature)

    async def search_facts(
        self, scope: Scope, query: str, embedding: Sequence[float] | None, k: int
    ) -> list[tuple[Fact, float]]:
        with self._call("search_facts"):
            return await self._inner.search_facts(scope, query, embedding, k)

    async def invalidate_fact(self, scope: Scope, fact_id: str, reason: str) -> bool:
        with self._call("invalidate_fact"):
            return await self._inner.invalidate_fact(scope, fact_id, reason)

    async def apply_facts(
        self,
        scope: Scope,
        records: Sequence[FactRecord],
        *,
        invalidate: Sequence[str],
        reason: str,
    ) -> list[Fact]:
        with self._call("apply_facts"):
            stored = await self._inner.apply_facts(
                scope, records, invalidate=invalidate, reason=reason
            )
        self._telemetry.count("facts", len(stored))
        return stored

    async def fact_history(self, scope: Scope, tag: str, feature: str) -> list[FactVersion]:
        with self._call("fact_history"):
            return await self._inner.fact_history(scope, tag, feature)

    async def list_fact_versions(self, scope: Scope) -> list[FactVersion]:
        with self._call("list_fact_versions"):
            return await self._inner.list_fact_versions(scope)

    async def restore_fact_times(
        self,
        scope: Scope,
        tag: str,
        feature: str,
        current: FactTimes | None,
        versions: Sequence[FactTimes],
    ) -> bool:
        with self._call("restore_fact_times"):
            return await self._inner.restore_fact_times(scope, tag, feature, current, versions)

    async def detach_episodes(self, scope: Scope, episode_ids: Sequence[str]) -> EpisodeDetachment:
        with self._call("detach_episodes"):
            return await self._inner.detach_episodes(scope, episode_ids)

    async def mark_sources_expired(self, scope: Scope, episode_ids: Sequence[str]) -> int:
        with self._call("mark_sources_expired"):
            return await self._inner.mark_sources_expired(scope, episode_ids)

    async def delete_expired_versions(self, scope: Scope, now: datetime) -> int:
        with self._call("delete_expired_versions"):
            return await self._inner.delete_expired_versions(scope, now)

    async def list_users(
        self,
        project: ProjectScope,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[UserActivity]:
        with self._call("list_users"):
            return await self._inner.list_users(project, prefix=prefix, after=after, limit=limit)

    async def list_projects(
        self, *, after: ProjectScope | None = None, limit: int = 100
    ) -> list[ProjectScope]:
        with self._call("list_projects"):
            return await self._inner.list_projects(after=after, limit=limit)
