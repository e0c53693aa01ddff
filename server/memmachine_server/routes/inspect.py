"""Reads for looking inside the memory (the inspector at ``/ui`` uses them; so may anyone):
``/v1/whoami``, ``/v1/users`` and a user's sessions, timeline, forget preview and job counts.

Every route is confined to the caller's tenant and to one org and project (``org_id`` /
``project_id`` in the query or the ``X-Org-ID`` / ``X-Project-ID`` headers, ``default``
when absent), like every other route.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from memmachine.errors import InvalidInputError, NotFoundError, StoreUnavailableError
from memmachine.inspection import MAX_USERS_PER_PAGE, Inspector
from memmachine.models import ProjectScope, UserActivity
from memmachine_sdk import models as wire
from memmachine_server.convert import episode_out
from memmachine_server.keyring import Principal
from memmachine_server.openapi import AUTH_ERRORS, errors, scope_parameters
from memmachine_server.scope import (
    ReadTenant,
    keyring_of,
    principal_of,
    resolve_project,
    resolve_scope,
)
from memmachine_server.state import app_state, manager_of

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["inspection"], responses=AUTH_ERRORS)

#: What a user id may start with (see ``memmachine.models.ID_PATTERN``).
_PARTIAL_ID = re.compile(r"[\w.@+\-=#~|]{0,128}")


def inspector_of(request: Request) -> Inspector:
    return Inspector.of(manager_of(request))


Inspect = Annotated[Inspector, Depends(inspector_of)]


def _user_out(user: UserActivity, project: ProjectScope) -> wire.UserOut:
    return wire.UserOut(
        user_id=user.user_id,
        org_id=project.org_id,
        project_id=project.project_id,
        episodes=user.episodes,
        sessions=user.sessions,
        facts=user.facts,
        working_sessions=user.working_sessions,
        last_active=user.last_active,
    )


def _partial_id(value: str | None, field: str) -> str | None:
    if value is not None and _PARTIAL_ID.fullmatch(value) is None:
        raise InvalidInputError(
            f"{field} must be up to 128 letters, digits or . _ @ + - = # ~ |", field=field
        )
    return value


@router.get("/whoami", response_model=wire.WhoAmIResponse)
async def whoami(
    request: Request, principal: Annotated[Principal, Depends(principal_of)]
) -> wire.WhoAmIResponse:
    """The caller's tenant and rights; with no key on an open server, the open ``default``
    tenant (``key_id`` null). 401 when a key is required and missing, unknown or revoked."""
    return wire.WhoAmIResponse(
        tenant=principal.tenant,
        key_id=principal.key_id,
        can_read=principal.can_read,
        can_write=principal.can_write,
        is_admin=principal.is_admin,
        key_required=keyring_of(app_state(request)).requires_key(),
    )


@router.get(
    "/users",
    response_model=wire.UserListResponse,
    responses=errors(403, 422),
    dependencies=[scope_parameters(only=("org_id", "project_id"))],
)
async def list_users(
    request: Request,
    tenant: ReadTenant,
    inspector: Inspect,
    prefix: Annotated[str | None, Query(max_length=128)] = None,
    after: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_USERS_PER_PAGE)] = 50,
) -> wire.UserListResponse:
    """The project's users that hold episodes, facts or live working memory, by user id
    (code-point order), with their counts and last activity. Page with ``after`` (the
    ``next_after`` of the previous page); ``prefix`` keeps ids starting with it."""
    project = resolve_project(request, tenant)
    page = await inspector.list_users(
        project,
        prefix=_partial_id(prefix, "prefix") or None,
        after=_partial_id(after, "after"),
        limit=limit,
    )
    return wire.UserListResponse(
        users=[_user_out(user, project) for user in page.users], next_after=page.next_after
    )


@router.get(
    "/users/{user_id}",
    response_model=wire.UserOut,
    responses=errors(403, 404, 422),
    dependencies=[scope_parameters(path="user_id")],
)
async def get_user(
    user_id: str, request: Request, tenant: ReadTenant, inspector: Inspect
) -> wire.UserOut:
    """One user's counts and last activity; 404 when no store holds anything for them."""
    scope = resolve_scope(request, tenant, user_id=user_id)
    user = await inspector.user(scope)
    if user is None:
        raise NotFoundError(f"user {user_id!r} has no memories")
    return _user_out(user, scope.project_scope())


@router.get(
    "/users/{user_id}/sessions",
    response_model=wire.SessionListResponse,
    responses=errors(403, 422),
    dependencies=[scope_parameters(path="user_id")],
)
async def list_sessions(
    user_id: str,
    request: Request,
    tenant: ReadTenant,
    inspector: Inspect,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> wire.SessionListResponse:
    """A page of the user's sessions holding episodes (most recently added to first) and
    every session of theirs whose working memory has not expired."""
    scope = resolve_scope(request, tenant, user_id=user_id)
    held, live = await inspector.sessions(scope, limit=limit, offset=offset)
    return wire.SessionListResponse(
        sessions=[wire.SessionOut.model_validate(s.model_dump()) for s in held],
        working=[
            wire.WorkingSessionOut(
                session_id=memory.scope.session_id or "",
                message_count=memory.message_count,
                version=memory.version,
                summary=memory.summary,
                ttl_seconds=memory.ttl_seconds,
                updated_at=memory.updated_at,
            )
            for memory in live
        ],
        limit=limit,
        offset=offset,
    )


@router.get(
    "/users/{user_id}/timeline",
    response_model=wire.TimelineResponse,
    responses=errors(403, 422),
    dependencies=[scope_parameters(path="user_id")],
)
async def timeline(
    user_id: str,
    request: Request,
    tenant: ReadTenant,
    inspector: Inspect,
    bucket_seconds: Annotated[int, Query(ge=60, le=366 * 86_400)] = 86_400,
) -> wire.TimelineResponse:
    """How many of the user's episodes (optionally one ``session_id``) fall in each
    ``bucket_seconds`` of time (aligned on the Unix epoch, UTC), oldest first; empty
    buckets are left out."""
    scope = resolve_scope(request, tenant, user_id=user_id)
    buckets = await inspector.timeline(scope, bucket_seconds=bucket_seconds)
    return wire.TimelineResponse(
        bucket_seconds=bucket_seconds,
        buckets=[wire.TimeBucketOut(start=b.start, count=b.count) for b in buckets],
    )


@router.get(
    "/users/{user_id}/forget-preview",
    response_model=wire.ForgetPreviewOut,
    responses=errors(403, 422),
    dependencies=[scope_parameters(path="user_id")],
)
async def forget_preview(
    user_id: str, request: Request, tenant: ReadTenant, inspector: Inspect
) -> wire.ForgetPreviewOut:
    """What ``DELETE /v1/users/{user_id}`` (or, with ``session_id``,
    ``DELETE /v1/sessions/{session_id}``) would remove right now."""
    preview = await inspector.forget_preview(resolve_scope(request, tenant, user_id=user_id))
    return wire.ForgetPreviewOut(
        user_id=preview.scope.user_id,
        session_id=preview.scope.session_id,
        episodes=preview.episodes,
        facts=preview.facts,
        sessions=preview.sessions,
        working_sessions=preview.working_sessions,
    )


@router.get(
    "/users/{user_id}/job-counts",
    response_model=wire.JobCountsOut,
    responses=errors(403, 422),
    dependencies=[scope_parameters(path="user_id")],
)
async def job_counts(
    user_id: str, request: Request, tenant: ReadTenant, inspector: Inspect
) -> wire.JobCountsOut:
    """The user's background jobs by status (``queued`` is the queue depth); 503 when
    background jobs are off."""
    counts = await inspector.job_counts(resolve_scope(request, tenant, user_id=user_id))
    if counts is None:
        reason = manager_of(request).jobs_off_reason
        raise StoreUnavailableError(f"background jobs are off: {reason}", store="jobs")
    return wire.JobCountsOut.model_validate(counts)


@router.get(
    "/memories/{episode_id}/neighbours",
    response_model=wire.EpisodeNeighboursResponse,
    responses=errors(403, 404, 422),
    dependencies=[scope_parameters()],
)
async def neighbours(
    episode_id: str,
    request: Request,
    tenant: ReadTenant,
    inspector: Inspect,
    before: Annotated[int, Query(ge=0, le=100)] = 3,
    after: Annotated[int, Query(ge=0, le=100)] = 3,
) -> wire.EpisodeNeighboursResponse:
    """One of the user's episodes with up to ``before`` / ``after`` episodes around it in its
    session, in session order; 404 when the user has no such episode."""
    scope = resolve_scope(request, tenant)
    episode, earlier, later = await inspector.neighbours(
        scope, episode_id, before=before, after=after
    )
    return wire.EpisodeNeighboursResponse(
        episode=episode_out(episode),
        before=[episode_out(e) for e in earlier],
        after=[episode_out(e) for e in later],
    )
