""":class:`ObservedEpisodeStore`: any episode store, timed and traced per call."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime

from memmachine.adapters.observed.observed import Observed
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
)
from memmachine.ports import EpisodeStore
from memmachine.telemetry import Telemetry

__all__ = ["ObservedEpisodeStore"]


class ObservedEpisodeStore(Observed[EpisodeStore]):
    """An :class:`~memmachine.ports.EpisodeStore` that passes every call to ``inner`` and
    reports it (see :mod:`memmachine.adapters.observed.observed`); stored episodes count as
    ingested ``episodes``."""

    def __init__(self, inner: EpisodeStore, telemetry: Telemetry) -> None:
        super().__init__(inner, telemetry, "store")

    @property
    def embedding_dimensions(self) -> int | None:
        dimensions: int | None = getattr(self._inner, "embedding_dimensions", None)
        return dimensions

    async def health(self) -> StoreHealth:
        return await self._inner.health()

    async def add_episodes(self, scope: Scope, records: Sequence[EpisodeRecord]) -> list[Episode]:
        with self._call("add_episodes"):
            stored = await self._inner.add_episodes(scope, records)
        self._telemetry.count("episodes", len(stored))
        return stored

    async def get_episode(self, scope: Scope, episode_id: str) -> Episode | None:
        with self._call("get_episode"):
            return await self._inner.get_episode(scope, episode_id)

    async def list_episodes(
        self, scope: Scope, *, limit: int = 100, offset: int = 0, newest_first: bool = False
    ) -> list[Episode]:
        with self._call("list_episodes"):
            return await self._inner.list_episodes(
                scope, limit=limit, offset=offset, newest_first=newest_first
            )

    async def count_episodes(self, scope: Scope) -> int:
        with self._call("count_episodes"):
            return await self._inner.count_episodes(scope)

    async def delete_episode(
        self, scope: Scope, episode_id: str, *, stored_at: datetime | None = None
    ) -> bool:
        with self._call("delete_episode"):
            return await self._inner.delete_episode(scope, episode_id, stored_at=stored_at)

    async def delete_episodes(self, scope: Scope) -> int:
        with self._call("delete_episodes"):
            return await self._inner.delete_episodes(scope)

    async def vector_search(
        self, scope: Scope, embedding: Sequence[float], k: int, *, derivatives: bool = True
    ) -> list[tuple[Episode, float]]:
        with self._call("vector_search"):
            return await self._inner.vector_search(scope, embedding, k, derivatives=derivatives)

    async def fulltext_search(
        self, scope: Scope, query: str, k: int
    ) -> list[tuple[Episode, float]]:
        with self._call("fulltext_search"):
            return await self._inner.fulltext_search(scope, query, k)

    async def neighbours(
        self, scope: Scope, episode_id: str, *, before: int, after: int
    ) -> list[Episode]:
        with self._call("neighbours"):
            return await self._inner.neighbours(scope, episode_id, before=before, after=after)

    async def adjacent(self, scope: Scope, episode_ids: Sequence[str]) -> dict[str, list[Episode]]:
        with self._call("adjacent"):
            return await self._inner.adjacent(scope, episode_ids)

    async def get_episodes(self, scope: Scope, episode_ids: Sequence[str]) -> list[Episode]:
        with self._call("get_episodes"):
            return await self._inner.get_episodes(scope, episode_ids)

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

    async def list_sessions(
        self, scope: Scope, *, limit: int = 100, offset: int = 0
    ) -> list[SessionActivity]:
        with self._call("list_sessions"):
            return await self._inner.list_sessions(scope, limit=limit, offset=offset)

    async def episode_timeline(
        self, scope: Scope, *, bucket_seconds: int = 86_400
    ) -> list[TimeBucket]:
        with self._call("episode_timeline"):
            return await self._inner.episode_timeline(scope, bucket_seconds=bucket_seconds)

    async def index_state(self, scope: Scope) -> IndexState:
        with self._call("index_state"):
            return await self._inner.index_state(scope)

    async def index_entries(
        self, scope: Scope, *, since: int | None = None
    ) -> AsyncIterator[list[IndexEntry]]:
        # Timed over the whole read; no span, since a generator may be finished in
        # another context than the one it started in.
        with self._call("index_entries", span=False):
            async for batch in self._inner.index_entries(scope, since=since):
                yield batch
