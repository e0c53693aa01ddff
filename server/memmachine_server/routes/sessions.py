"""Working memory and forgetting: /v1/sessions and /v1/users."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from memmachine.manager import MemoryManager
from memmachine.pipeline.compaction import compact_session
from memmachine_sdk import models as wire
from memmachine_server.convert import compaction_out, working_messages, working_out
from memmachine_server.openapi import AUTH_ERRORS, errors, scope_parameters
from memmachine_server.routes.jobs import job_out
from memmachine_server.scope import ReadTenant, WriteTenant, resolve_scope
from memmachine_server.state import manager_of

router = APIRouter(prefix="/v1", tags=["sessions"], responses=AUTH_ERRORS)
Manager = Annotated[MemoryManager, Depends(manager_of)]


@router.get(
    "/sessions/{session_id}/working",
    response_model=wire.WorkingMemoryOut,
    responses=errors(403, 422),
    dependencies=[scope_parameters(path="session_id")],
)
async def get_working(
    session_id: str,
    request: Request,
    tenant: ReadTenant,
    manager: Manager,
    last_n: Annotated[int | None, Query(ge=0, le=100_000)] = None,
    offset: Annotated[wire.Offset, Query()] = 0,
    limit: Annotated[int | None, Query(ge=0, le=100_000)] = None,
) -> wire.WorkingMemoryOut:
    """The session's messages — all, the newest ``last_n``, or the page ``offset``/``limit``
    — with state, summary and version. A session never written reads as empty, version 0."""
    scope = resolve_scope(request, tenant, session_id=session_id)
    memory = await manager.get_working(scope, last_n=last_n, offset=offset, limit=limit)
    return working_out(memory)


@router.post(
    "/sessions/{session_id}/working/messages",
    response_model=wire.WorkingMemoryOut,
    responses=errors(403, 413, 422),
    dependencies=[scope_parameters(path="session_id")],
)
async def append_working(
    session_id: str,
    body: wire.AppendWorkingRequest,
    request: Request,
    tenant: WriteTenant,
    manager: Manager,
) -> wire.WorkingMemoryOut:
    """Append messages atomically (no version needed)."""
    scope = resolve_scope(request, tenant, body, session_id=session_id)
    return working_out(await manager.append_working(scope, working_messages(body.messages)))


@router.put(
    "/sessions/{session_id}/working",
    response_model=wire.WorkingMemoryOut,
    responses=errors(403, 409, 413, 422),
    dependencies=[scope_parameters(path="session_id")],
)
async def put_working(
    session_id: str,
    body: wire.PutWorkingRequest,
    request: Request,
    tenant: WriteTenant,
    manager: Manager,
) -> wire.WorkingMemoryOut:
    """Replace messages, state and/or summary; with ``expected_version``, 409 when stale."""
    scope = resolve_scope(request, tenant, body, session_id=session_id)
    memory = await manager.put_working(
        scope,
        messages=None if body.messages is None else working_messages(body.messages),
        state=body.state,
        summary=body.summary,
        expected_version=body.expected_version,
    )
    return working_out(memory)


@router.post(
    "/sessions/{session_id}/compact",
    response_model=wire.CompactResponse,
    responses=errors(403, 409, 422),
    dependencies=[scope_parameters(path="session_id")],
)
async def compact_working(
    session_id: str,
    request: Request,
    tenant: WriteTenant,
    manager: Manager,
    wait: bool = False,
) -> wire.CompactResponse:
    """Compact the session's working memory now, whatever its size: queue a ``compact`` job
    (returned; follow it at ``/v1/jobs/{id}``), or with ``wait=true`` run it inline and
    return what it did. Without a language model the older messages are dropped."""
    scope = resolve_scope(request, tenant, session_id=session_id)
    if wait:
        return wire.CompactResponse(
            result=compaction_out(await compact_session(manager, scope, force=True))
        )
    return wire.CompactResponse(job=job_out(await manager.enqueue_compaction(scope, force=True)))


@router.delete(
    "/sessions/{session_id}/working",
    status_code=204,
    responses=errors(403, 404, 422),
    dependencies=[scope_parameters(path="session_id")],
)
async def delete_working(
    session_id: str, request: Request, tenant: WriteTenant, manager: Manager
) -> Response:
    await manager.delete_working(resolve_scope(request, tenant, session_id=session_id))
    return Response(status_code=204)


@router.delete(
    "/sessions/{session_id}",
    response_model=wire.ForgetResponse,
    responses=errors(403, 422),
    dependencies=[scope_parameters(path="session_id")],
)
async def forget_session(
    session_id: str, request: Request, tenant: WriteTenant, manager: Manager
) -> wire.ForgetResponse:
    """Forget a session everywhere: its episodes, its working memory, and facts sourced from it."""
    scope = resolve_scope(request, tenant, session_id=session_id)
    report = await manager.forget_session(scope)
    return wire.ForgetResponse.model_validate(report.model_dump())


@router.delete(
    "/users/{user_id}",
    response_model=wire.ForgetResponse,
    responses=errors(403, 422),
    dependencies=[scope_parameters(path="user_id")],
)
async def forget_user(
    user_id: str, request: Request, tenant: WriteTenant, manager: Manager
) -> wire.ForgetResponse:
    """Forget a user everywhere: all episodes, facts and sessions."""
    scope = resolve_scope(request, tenant, user_id=user_id)
    report = await manager.forget_user(scope)
    return wire.ForgetResponse.model_validate(report.model_dump())
