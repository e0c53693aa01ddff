""":class:`ObservedWorkingMemoryStore`: any working-memory store, timed and traced per call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memmachine.adapters.observed.observed import Observed
from memmachine.models import (
    ProjectScope,
    Scope,
    StoreHealth,
    UserActivity,
    WorkingMemory,
    WorkingMessage,
)
from memmachine.ports import WorkingMemoryStore
from memmachine.telemetry import Telemetry

__all__ = ["ObservedWorkingMemoryStore"]


class ObservedWorkingMemoryStore(Observed[WorkingMemoryStore]):
    """A :class:`~memmachine.ports.WorkingMemoryStore` that passes every call to ``inner``
    and reports it (see :mod:`memmachine.adapters.observed.observed`); appended messages count as
    ingested ``working_messages``."""

    def __init__(self, inner: WorkingMemoryStore, telemetry: Telemetry) -> None:
        super().__init__(inner, telemetry, "store")

    async def health(self) -> StoreHealth:
        return await self._inner.health()

    async def get(
        self, scope: Scope, *, last_n: int | None = None, offset: int = 0, limit: int | None = None
    ) -> WorkingMemory | None:
        with self._call("get"):
            return await self._inner.get(scope, last_n=last_n, offset=offset, limit=limit)

    async def append(
        self, scope: Scope, messages: Sequence[WorkingMessage], *, ttl_seconds: int | None
    ) -> WorkingMemory:
        with self._call("append"):
            session = await self._inner.append(scope, messages, ttl_seconds=ttl_seconds)
        self._telemetry.count("working_messages", len(messages))
        return session

    async def put(
        self,
        scope: Scope,
        *,
        messages: Sequence[WorkingMessage] | None = None,
        state: dict[str, Any] | None = None,
        summary: str | None = None,
        expected_version: int | None = None,
        ttl_seconds: int | None,
    ) -> WorkingMemory:
        with self._call("put"):
            return await self._inner.put(
                scope,
                messages=messages,
                state=state,
                summary=summary,
                expected_version=expected_version,
                ttl_seconds=ttl_seconds,
            )

    async def delete(self, scope: Scope) -> int:
        with self._call("delete"):
            return await self._inner.delete(scope)

    async def delete_user(self, scope: Scope) -> int:
        with self._call("delete_user"):
            return await self._inner.delete_user(scope)

    async def list_sessions(self, scope: Scope) -> list[WorkingMemory]:
        with self._call("list_sessions"):
            return await self._inner.list_sessions(scope)

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
