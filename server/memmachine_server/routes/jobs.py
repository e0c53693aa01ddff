"""Background jobs: /v1/jobs (status, the dead-letter list, replay, purge)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request

from memmachine.errors import NotFoundError, StoreUnavailableError
from memmachine.ports import Job, JobQueue
from memmachine_sdk import models as wire
from memmachine_server.openapi import AUTH_ERRORS, errors, scope_parameters
from memmachine_server.scope import ReadTenant, WriteTenant, resolve_scope
from memmachine_server.state import manager_of

__all__ = ["job_out", "queue_of", "router"]

router = APIRouter(prefix="/v1", tags=["jobs"], responses=AUTH_ERRORS)


def queue_of(request: Request) -> JobQueue:
    """The manager's job queue; 503 when background jobs are off."""
    manager = manager_of(request)
    if manager.jobs is None:
        raise StoreUnavailableError(
            f"background jobs are off: {manager.jobs_off_reason}", store="jobs"
        )
    return manager.jobs


Queue = Annotated[JobQueue, Depends(queue_of)]


def job_out(job: Job) -> wire.JobOut:
    scope = job.scope
    return wire.JobOut(
        id=job.id,
        kind=job.kind,
        status=job.status,
        user_id=scope.user_id,
        session_id=scope.session_id,
        agent_id=scope.agent_id,
        group_id=scope.group_id,
        org_id=scope.org_id,
        project_id=scope.project_id,
        idempotency_key=job.idempotency_key,
        payload=job.payload,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        last_error=job.last_error,
        created_at=job.created_at,
        updated_at=job.updated_at,
        available_at=job.available_at,
        request_id=job.request_id,
    )


@router.get(
    "/jobs",
    response_model=wire.JobListResponse,
    responses=errors(403, 422),
    dependencies=[scope_parameters()],
)
async def list_jobs(
    request: Request,
    tenant: ReadTenant,
    queue: Queue,
    status: Literal["queued", "running", "done", "dead"] | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> wire.JobListResponse:
    """The user's jobs, newest first; ``status=dead`` is the dead-letter list."""
    scope = resolve_scope(request, tenant)
    jobs = await queue.list_jobs(scope, status=status, limit=limit)
    return wire.JobListResponse(jobs=[job_out(job) for job in jobs])


@router.delete(
    "/jobs/dead",
    response_model=wire.JobPurgeResponse,
    responses=errors(403, 404, 409, 422),
    dependencies=[scope_parameters()],
)
async def purge_dead_jobs(
    request: Request,
    tenant: WriteTenant,
    queue: Queue,
    job_id: str | None = None,
) -> wire.JobPurgeResponse:
    """Delete the user's dead jobs for good, or only ``job_id`` (404 when it is not the
    user's, 409 when it is not dead). A tenant only ever reaches its own jobs."""
    purged = await queue.purge_dead(resolve_scope(request, tenant), job_id)
    return wire.JobPurgeResponse(purged=purged)


@router.get(
    "/jobs/{job_id}",
    response_model=wire.JobOut,
    responses=errors(403, 404, 422),
    dependencies=[scope_parameters()],
)
async def get_job(job_id: str, request: Request, tenant: ReadTenant, queue: Queue) -> wire.JobOut:
    """One of the user's jobs; another user's job is a 404 like a missing one."""
    job = await queue.get(resolve_scope(request, tenant), job_id)
    if job is None:
        raise NotFoundError(f"job {job_id!r} not found")
    return job_out(job)


@router.post(
    "/jobs/{job_id}/replay",
    response_model=wire.JobOut,
    responses=errors(403, 404, 409, 422),
    dependencies=[scope_parameters()],
)
async def replay_job(
    job_id: str, request: Request, tenant: WriteTenant, queue: Queue
) -> wire.JobOut:
    """Requeue a dead job with its attempts reset; 409 when it is not dead."""
    return job_out(await queue.replay(resolve_scope(request, tenant), job_id))
