"""Procedural memory: /v1/procedures, and a session's outcome: /v1/sessions/{id}/outcome.

Procedures belong to an application (the caller's tenant, ``org_id``, ``project_id`` and
optionally ``agent_id``), not to a user: any user's agent of the application reads them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import ValidationError

from memmachine.errors import InvalidInputError
from memmachine.manager import MemoryManager
from memmachine.ports.procedures import AppScope, ProcedureRecord
from memmachine_sdk import models as wire
from memmachine_server.convert import procedure_out
from memmachine_server.openapi import AUTH_ERRORS, errors, scope_parameters
from memmachine_server.scope import SCOPE_HEADERS, ReadTenant, WriteTenant, resolve_scope
from memmachine_server.state import manager_of

router = APIRouter(prefix="/v1", tags=["procedures"], responses=AUTH_ERRORS)
Manager = Annotated[MemoryManager, Depends(manager_of)]
_APP_IDS = ("org_id", "project_id", "agent_id")


def app_scope(request: Request, tenant: str, body: wire.AppFields | None = None) -> AppScope:
    """The application a request is for: ``org_id``, ``project_id`` and ``agent_id`` from
    the body, then the query, then the ``X-*-ID`` headers, under the caller's tenant."""
    values: dict[str, str] = {}
    for name in _APP_IDS:
        value = getattr(body, name, None) if body is not None else None
        value = value or request.query_params.get(name) or request.headers.get(SCOPE_HEADERS[name])
        if value is not None:
            values[name] = value
    try:
        return AppScope(tenant=tenant, **values)
    except ValidationError as exc:
        field = ".".join(str(part) for part in exc.errors()[0]["loc"])
        raise InvalidInputError(
            f"{field} must be 1-128 characters of letters, digits and . _ @ + - = # ~ |",
            field=field,
        ) from None


@router.post(
    "/procedures",
    status_code=201,
    response_model=wire.ProcedureOut,
    responses=errors(403, 413, 422),
    dependencies=[scope_parameters(only=_APP_IDS)],
)
async def add_procedure(
    body: wire.ProcedureIn, request: Request, tenant: WriteTenant, manager: Manager
) -> wire.ProcedureOut:
    """Remember how: store a procedure for every user of the application. A procedure of
    the same goal (or ``replaces``) is superseded, its version kept in the history."""
    fields = body.model_dump(include={"goal", "steps", "preconditions", "pitfalls"})
    record = ProcedureRecord(**fields, confidence=body.confidence, metadata=body.metadata)
    app = app_scope(request, tenant, body)
    stored = await manager.procedural_service.remember(app, record, replaces=body.replaces)
    return procedure_out(stored)


@router.get(
    "/procedures",
    response_model=wire.ProcedureListResponse,
    responses=errors(403, 422),
    dependencies=[scope_parameters(only=_APP_IDS)],
)
async def list_procedures(
    request: Request,
    tenant: ReadTenant,
    manager: Manager,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[wire.Offset, Query()] = 0,
) -> wire.ProcedureListResponse:
    """The application's procedures, most recently updated first."""
    found = await manager.procedural_service.list_procedures(
        app_scope(request, tenant), limit=limit, offset=offset
    )
    return wire.ProcedureListResponse(procedures=[procedure_out(p) for p in found])


@router.post(
    "/procedures/search",
    response_model=wire.ProcedureSearchResponse,
    responses=errors(403, 413, 422),
    dependencies=[scope_parameters(only=_APP_IDS)],
)
async def search_procedures(
    body: wire.ProcedureSearchRequest, request: Request, tenant: ReadTenant, manager: Manager
) -> wire.ProcedureSearchResponse:
    """The application's procedures best matching a task description."""
    hits = await manager.procedural_service.search(
        app_scope(request, tenant, body), body.query, top_k=body.top_k
    )
    return wire.ProcedureSearchResponse(
        hits=[wire.ProcedureHitOut(procedure=procedure_out(p), score=score) for p, score in hits]
    )


@router.get(
    "/procedures/{procedure_id}",
    response_model=wire.ProcedureOut,
    responses=errors(403, 404, 422),
    dependencies=[scope_parameters(only=_APP_IDS)],
)
async def get_procedure(
    procedure_id: str, request: Request, tenant: ReadTenant, manager: Manager
) -> wire.ProcedureOut:
    found = await manager.procedural_service.get(app_scope(request, tenant), procedure_id)
    return procedure_out(found)


@router.get(
    "/procedures/{procedure_id}/history",
    response_model=wire.ProcedureHistoryResponse,
    responses=errors(403, 404, 422),
    dependencies=[scope_parameters(only=_APP_IDS)],
)
async def procedure_history(
    procedure_id: str, request: Request, tenant: ReadTenant, manager: Manager
) -> wire.ProcedureHistoryResponse:
    """A procedure and the versions it superseded, oldest first."""
    current, history = await manager.procedural_service.history(
        app_scope(request, tenant), procedure_id
    )
    versions = [
        wire.ProcedureVersionOut(
            **version.model_dump(exclude={"procedure_id", "sources"}),
            source_session_ids=list(dict.fromkeys(s.session_id for s in version.sources)),
        )
        for version in history
    ]
    return wire.ProcedureHistoryResponse(current=procedure_out(current), history=versions)


@router.post(
    "/procedures/{procedure_id}/uses",
    response_model=wire.ProcedureOut,
    responses=errors(403, 404, 413, 422),
    dependencies=[scope_parameters(only=_APP_IDS)],
)
async def report_procedure_use(
    procedure_id: str,
    body: wire.ProcedureUseRequest,
    request: Request,
    tenant: WriteTenant,
    manager: Manager,
) -> wire.ProcedureOut:
    """Report that reusing a procedure worked (its confidence rises) or failed (it falls)."""
    used = await manager.procedural_service.report_use(
        app_scope(request, tenant, body), procedure_id, success=body.success
    )
    return procedure_out(used)


@router.delete(
    "/procedures/{procedure_id}",
    status_code=204,
    responses=errors(403, 404, 422),
    dependencies=[scope_parameters(only=_APP_IDS)],
)
async def delete_procedure(
    procedure_id: str, request: Request, tenant: WriteTenant, manager: Manager
) -> Response:
    """Delete a procedure and its history."""
    await manager.procedural_service.delete(app_scope(request, tenant), procedure_id)
    return Response(status_code=204)


@router.post(
    "/sessions/{session_id}/outcome",
    response_model=wire.SessionOutcomeResponse,
    responses=errors(403, 413, 422),
    dependencies=[scope_parameters(path="session_id")],
)
async def set_session_outcome(
    session_id: str,
    body: wire.SessionOutcomeRequest,
    request: Request,
    tenant: WriteTenant,
    manager: Manager,
) -> wire.SessionOutcomeResponse:
    """Report how a session went. A success queues the distillation of the session's
    reusable procedures (once per session) when a language model and the job queue are on."""
    scope = resolve_scope(request, tenant, body, session_id=session_id, require_session=True)
    outcome, job_id = await manager.procedural_service.set_outcome(scope, body.outcome)
    return wire.SessionOutcomeResponse(**outcome.model_dump(), job_id=job_id)
