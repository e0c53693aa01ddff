"""Profile memory: /v1/profile."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from memmachine.manager import MemoryManager
from memmachine.models import FactRecord
from memmachine_sdk import models as wire
from memmachine_server.convert import fact_out, fact_version_out
from memmachine_server.openapi import AUTH_ERRORS, errors, scope_parameters
from memmachine_server.scope import ReadTenant, WriteTenant, resolve_scope
from memmachine_server.state import manager_of

router = APIRouter(prefix="/v1/profile", tags=["profile"], responses=AUTH_ERRORS)
Manager = Annotated[MemoryManager, Depends(manager_of)]


@router.post(
    "",
    response_model=wire.ProfileResponse,
    responses=errors(403, 413, 422),
    dependencies=[scope_parameters()],
)
async def set_profile(
    body: wire.SetProfileRequest, request: Request, tenant: WriteTenant, manager: Manager
) -> wire.ProfileResponse:
    """Create or replace facts; a user holds one fact per (tag, feature)."""
    scope = resolve_scope(request, tenant, body)
    records = [FactRecord.model_validate(fact.model_dump()) for fact in body.facts]
    facts = await manager.set_facts(scope, records)
    return wire.ProfileResponse(facts=[fact_out(fact) for fact in facts])


@router.get(
    "",
    response_model=wire.ProfileResponse,
    responses=errors(403, 422),
    dependencies=[scope_parameters()],
)
async def get_profile(
    request: Request,
    tenant: ReadTenant,
    manager: Manager,
    tag: str | None = None,
    feature: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    offset: Annotated[wire.Offset, Query()] = 0,
) -> wire.ProfileResponse:
    scope = resolve_scope(request, tenant)
    facts = await manager.list_facts(scope, tag=tag, feature=feature, limit=limit, offset=offset)
    return wire.ProfileResponse(facts=[fact_out(fact) for fact in facts])


@router.get(
    "/history",
    response_model=wire.ProfileHistoryResponse,
    responses=errors(403, 422),
    dependencies=[scope_parameters()],
)
async def get_profile_history(
    request: Request,
    tenant: ReadTenant,
    manager: Manager,
    tag: Annotated[str, Query(min_length=1)],
    feature: Annotated[str, Query(min_length=1)],
) -> wire.ProfileHistoryResponse:
    """The user's current fact for (tag, feature) and its superseded / invalidated versions."""
    current, history = await manager.fact_history(resolve_scope(request, tenant), tag, feature)
    return wire.ProfileHistoryResponse(
        current=None if current is None else fact_out(current),
        history=[fact_version_out(version) for version in history],
    )


@router.post(
    "/facts/{fact_id}/invalidate",
    response_model=wire.ProfileHistoryResponse,
    responses=errors(403, 404, 413, 422),
    dependencies=[scope_parameters()],
)
async def invalidate_fact(
    fact_id: str,
    request: Request,
    tenant: WriteTenant,
    manager: Manager,
    body: wire.InvalidateFactRequest | None = None,
) -> wire.ProfileHistoryResponse:
    """Close a fact that no longer holds: it leaves the profile and search, and its value
    stays readable in the history with ``reason``. Answers with that history."""
    body = body or wire.InvalidateFactRequest()
    scope = resolve_scope(request, tenant, body)
    current, history = await manager.invalidate_fact(scope, fact_id, body.reason)
    return wire.ProfileHistoryResponse(
        current=None if current is None else fact_out(current),
        history=[fact_version_out(version) for version in history],
    )


@router.post(
    "/search",
    response_model=wire.ProfileSearchResponse,
    responses=errors(403, 413, 422),
    dependencies=[scope_parameters()],
)
async def search_profile(
    body: wire.ProfileSearchRequest, request: Request, tenant: ReadTenant, manager: Manager
) -> wire.ProfileSearchResponse:
    scope = resolve_scope(request, tenant, body)
    hits = await manager.search_facts(scope, body.query, top_k=body.top_k)
    return wire.ProfileSearchResponse(facts=[fact_out(hit.fact, hit) for hit in hits])


@router.get(
    "/facts/{fact_id}",
    response_model=wire.FactOut,
    responses=errors(403, 404, 422),
    dependencies=[scope_parameters()],
)
async def get_fact(
    fact_id: str, request: Request, tenant: ReadTenant, manager: Manager
) -> wire.FactOut:
    return fact_out(await manager.get_fact(resolve_scope(request, tenant), fact_id))


@router.delete(
    "/facts/{fact_id}",
    status_code=204,
    responses=errors(403, 404, 422),
    dependencies=[scope_parameters()],
)
async def delete_fact(
    fact_id: str, request: Request, tenant: WriteTenant, manager: Manager
) -> Response:
    await manager.delete_fact(resolve_scope(request, tenant), fact_id)
    return Response(status_code=204)


@router.delete(
    "",
    response_model=wire.DeletedResponse,
    responses=errors(403, 422),
    dependencies=[scope_parameters()],
)
async def delete_facts(
    request: Request,
    tenant: WriteTenant,
    manager: Manager,
    tag: str | None = None,
    feature: str | None = None,
) -> wire.DeletedResponse:
    """Delete the user's facts, optionally only one tag and/or feature."""
    scope = resolve_scope(request, tenant)
    return wire.DeletedResponse(deleted=await manager.delete_facts(scope, tag=tag, feature=feature))
