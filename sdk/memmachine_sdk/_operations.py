"""The client methods for fact invalidation, background jobs, API keys and the inspector
reads, as mixins of :class:`~memmachine_sdk.Client` (blocking) and
:class:`~memmachine_sdk.AsyncClient`; each is one line over a call builder of
``_requests``, like the methods in ``_client``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel

from memmachine_sdk import models as m

if TYPE_CHECKING:
    from memmachine_sdk._requests import Call, Requests

T = TypeVar("T", bound=BaseModel)
JobStatus = Literal["queued", "running", "done", "dead"]
Permission = Literal["read", "write", "admin"]

__all__ = ["AsyncOperations", "JobStatus", "Permission", "SyncOperations"]


class SyncOperations:
    """Jobs, keys, fact invalidation and inspector reads for the blocking client."""

    if TYPE_CHECKING:
        _calls: Requests

        def _get(self, call: Call[T]) -> T: ...

    def invalidate_fact(
        self, fact_id: str, *, reason: str | None = None, user_id: str | None = None
    ) -> m.ProfileHistoryResponse:
        """Close a fact that no longer holds: it leaves the profile and search; its value
        stays in the history (returned) with ``reason``."""
        return self._get(self._calls.invalidate_fact(fact_id, reason=reason, user_id=user_id))

    def list_jobs(
        self, *, user_id: str | None = None, status: JobStatus | None = None, limit: int = 100
    ) -> list[m.JobOut]:
        """The user's background jobs, newest first; ``status="dead"`` is the dead-letter
        list."""
        call = self._calls.list_jobs(user_id=user_id, status=status, limit=limit)
        return self._get(call).jobs

    def get_job(self, job_id: str, *, user_id: str | None = None) -> m.JobOut:
        """One of the user's jobs (``NotFoundError`` for another user's)."""
        return self._get(self._calls.get_job(job_id, user_id=user_id))

    def replay_job(self, job_id: str, *, user_id: str | None = None) -> m.JobOut:
        """Requeue a dead job with its attempts reset (``ConflictError`` when not dead)."""
        return self._get(self._calls.replay_job(job_id, user_id=user_id))

    def purge_dead_jobs(self, *, job_id: str | None = None, user_id: str | None = None) -> int:
        """Delete the user's dead jobs (only ``job_id`` when given) for good; how many."""
        return self._get(self._calls.purge_dead_jobs(job_id=job_id, user_id=user_id)).purged

    def create_key(
        self,
        *,
        tenant: str | None = None,
        name: str = "",
        permissions: Sequence[Permission] | None = None,
        rate_limit_per_minute: int | None = None,
    ) -> m.CreatedKeyOut:
        """A new API key (admin); its ``key`` is shown only in this answer."""
        call = self._calls.create_key(
            tenant=tenant,
            name=name,
            permissions=permissions,
            rate_limit_per_minute=rate_limit_per_minute,
        )
        return self._get(call)

    def list_keys(self, *, tenant: str | None = None) -> list[m.ApiKeyOut]:
        """The tenant's keys, revoked ones included, oldest first (admin); never a secret."""
        return self._get(self._calls.list_keys(tenant=tenant)).keys

    def revoke_key(self, key_id: str) -> m.ApiKeyOut:
        """Revoke a key (admin): from now on it is refused."""
        return self._get(self._calls.revoke_key(key_id))

    def get_retention(self) -> m.RetentionResponse:
        """The retention policies in force for the caller's tenant (admin), and the last
        sweep's counts (``MEMMACHINE_ADMIN_KEY`` only)."""
        return self._get(self._calls.get_retention())

    def set_retention(
        self, policies: Sequence[m.RetentionPolicyIn | Mapping[str, Any]]
    ) -> m.RetentionResponse:
        """Replace the caller's tenant's retention policies (admin); the next sweep applies
        them to old data too. They last until the server restarts."""
        return self._get(self._calls.set_retention(policies))

    def run_retention_sweep(self) -> m.RetentionReportOut:
        """Run the expiry and retention sweep now (``MEMMACHINE_ADMIN_KEY`` only): what it
        removed, as counts."""
        return self._get(self._calls.run_retention_sweep())

    def whoami(self) -> m.WhoAmIResponse:
        """The caller's tenant and rights."""
        return self._get(self._calls.whoami())

    def list_users(
        self, *, prefix: str | None = None, after: str | None = None, limit: int = 50
    ) -> m.UserListResponse:
        """A page of the project's users with their counts; the next page starts
        ``after`` this one's ``next_after``."""
        return self._get(self._calls.list_users(prefix=prefix, after=after, limit=limit))

    def get_user(self, user_id: str) -> m.UserOut:
        """One user's counts and last activity (``NotFoundError`` when nothing is held)."""
        return self._get(self._calls.get_user(user_id))

    def list_sessions(
        self, user_id: str, *, limit: int = 50, offset: int = 0
    ) -> m.SessionListResponse:
        """The user's sessions holding episodes and their live working-memory sessions."""
        return self._get(self._calls.list_sessions(user_id, limit=limit, offset=offset))

    def timeline(
        self, user_id: str, *, session_id: str | None = None, bucket_seconds: int = 86_400
    ) -> m.TimelineResponse:
        """How many of the user's episodes fall in each ``bucket_seconds``, oldest first."""
        call = self._calls.timeline(user_id, session_id=session_id, bucket_seconds=bucket_seconds)
        return self._get(call)

    def forget_preview(self, user_id: str, *, session_id: str | None = None) -> m.ForgetPreviewOut:
        """What forgetting the user (or one session) would remove right now."""
        return self._get(self._calls.forget_preview(user_id, session_id=session_id))

    def job_counts(self, user_id: str) -> m.JobCountsOut:
        """The user's background jobs by status."""
        return self._get(self._calls.job_counts(user_id))

    def neighbours(
        self, episode_id: str, *, user_id: str | None = None, before: int = 3, after: int = 3
    ) -> m.EpisodeNeighboursResponse:
        """An episode with up to ``before`` / ``after`` episodes around it in its session."""
        call = self._calls.neighbours(episode_id, user_id=user_id, before=before, after=after)
        return self._get(call)


class AsyncOperations:
    """The same calls for the async client; see :class:`SyncOperations` for each."""

    if TYPE_CHECKING:
        _calls: Requests

        async def _get(self, call: Call[T]) -> T: ...

    async def invalidate_fact(
        self, fact_id: str, *, reason: str | None = None, user_id: str | None = None
    ) -> m.ProfileHistoryResponse:
        call = self._calls.invalidate_fact(fact_id, reason=reason, user_id=user_id)
        return await self._get(call)

    async def list_jobs(
        self, *, user_id: str | None = None, status: JobStatus | None = None, limit: int = 100
    ) -> list[m.JobOut]:
        call = self._calls.list_jobs(user_id=user_id, status=status, limit=limit)
        return (await self._get(call)).jobs

    async def get_job(self, job_id: str, *, user_id: str | None = None) -> m.JobOut:
        return await self._get(self._calls.get_job(job_id, user_id=user_id))

    async def replay_job(self, job_id: str, *, user_id: str | None = None) -> m.JobOut:
        return await self._get(self._calls.replay_job(job_id, user_id=user_id))

    async def purge_dead_jobs(
        self, *, job_id: str | None = None, user_id: str | None = None
    ) -> int:
        call = self._calls.purge_dead_jobs(job_id=job_id, user_id=user_id)
        return (await self._get(call)).purged

    async def create_key(
        self,
        *,
        tenant: str | None = None,
        name: str = "",
        permissions: Sequence[Permission] | None = None,
        rate_limit_per_minute: int | None = None,
    ) -> m.CreatedKeyOut:
        call = self._calls.create_key(
            tenant=tenant,
            name=name,
            permissions=permissions,
            rate_limit_per_minute=rate_limit_per_minute,
        )
        return await self._get(call)

    async def list_keys(self, *, tenant: str | None = None) -> list[m.ApiKeyOut]:
        return (await self._get(self._calls.list_keys(tenant=tenant))).keys

    async def revoke_key(self, key_id: str) -> m.ApiKeyOut:
        return await self._get(self._calls.revoke_key(key_id))

    async def get_retention(self) -> m.RetentionResponse:
        return await self._get(self._calls.get_retention())

    async def set_retention(
        self, policies: Sequence[m.RetentionPolicyIn | Mapping[str, Any]]
    ) -> m.RetentionResponse:
        return await self._get(self._calls.set_retention(policies))

    async def run_retention_sweep(self) -> m.RetentionReportOut:
        return await self._get(self._calls.run_retention_sweep())

    async def whoami(self) -> m.WhoAmIResponse:
        return await self._get(self._calls.whoami())

    async def list_users(
        self, *, prefix: str | None = None, after: str | None = None, limit: int = 50
    ) -> m.UserListResponse:
        return await self._get(self._calls.list_users(prefix=prefix, after=after, limit=limit))

    async def get_user(self, user_id: str) -> m.UserOut:
        return await self._get(self._calls.get_user(user_id))

    async def list_sessions(
        self, user_id: str, *, limit: int = 50, offset: int = 0
    ) -> m.SessionListResponse:
        return await self._get(self._calls.list_sessions(user_id, limit=limit, offset=offset))

    async def timeline(
        self, user_id: str, *, session_id: str | None = None, bucket_seconds: int = 86_400
    ) -> m.TimelineResponse:
        call = self._calls.timeline(user_id, session_id=session_id, bucket_seconds=bucket_seconds)
        return await self._get(call)

    async def forget_preview(
        self, user_id: str, *, session_id: str | None = None
    ) -> m.ForgetPreviewOut:
        return await self._get(self._calls.forget_preview(user_id, session_id=session_id))

    async def job_counts(self, user_id: str) -> m.JobCountsOut:
        return await self._get(self._calls.job_counts(user_id))

    async def neighbours(
        self, episode_id: str, *, user_id: str | None = None, before: int = 3, after: int = 3
    ) -> m.EpisodeNeighboursResponse:
        call = self._calls.neighbours(episode_id, user_id=user_id, before=before, after=after)
        return await self._get(call)
