"""Episodic memory and cross-memory search: /v1/memories."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request, Response

from memmachine.manager import MemoryManager
from memmachine.memory.idempotency import IDEMPOTENCY_HEADER
from memmachine.models import MemoryType
from memmachine.retrieval.explain import StageControl
from memmachine_sdk import models as wire
from memmachine_server.convert import (
    added_out,
    episode_out,
    fact_out,
    search_explanation,
    working_out,
)
from memmachine_server.openapi import AUTH_ERRORS, errors, scope_parameters
from memmachine_server.routes.attachments import add_messages
from memmachine_server.scope import ReadTenant, WriteTenant, resolve_scope
from memmachine_server.state import manager_of

router = APIRouter(prefix="/v1/memories", tags=["memories"], responses=AUTH_ERRORS)
Manager = Annotated[MemoryManager, Depends(manager_of)]


@router.post(
    "",
    status_code=201,
    response_model=wire.AddMemoriesResponse,
    responses=errors(403, 413, 415, 422),
    dependencies=[scope_parameters()],
)
async def add_memories(
    body: wire.AddMemoriesRequest, request: Request, tenant: WriteTenant, manager: Manager
) -> wire.AddMemoriesResponse:
    """Store messages as episodes of a session (and, by default, in its working memory)."""
    scope = resolve_scope(request, tenant, body, require_session=True)
    key = request.headers.get(IDEMPOTENCY_HEADER)
    return added_out(scope, await add_messages(request, manager, scope, body, key=key))


@router.get(
    "",
    response_model=wire.EpisodeListResponse,
    responses=errors(403, 422),
    dependencies=[scope_parameters()],
)
async def list_memories(
    request: Request,
    tenant: ReadTenant,
    manager: Manager,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[wire.Offset, Query()] = 0,
    order: Literal["oldest", "newest"] = "oldest",
) -> wire.EpisodeListResponse:
    """A page of the user's episodes (optionally one session, agent or group)."""
    scope = resolve_scope(request, tenant)
    episodes, total = await manager.list_episodes(
        scope, limit=limit, offset=offset, newest_first=order == "newest"
    )
    return wire.EpisodeListResponse(
        episodes=[episode_out(episode) for episode in episodes],
        total=total,
        limit=limit,
        offset=offset,
    )


@router.post(
    "/search",
    response_model=wire.SearchResponse,
    responses=errors(403, 413, 422),
    dependencies=[scope_parameters()],
)
async def search_memories(
    body: wire.SearchRequest, request: Request, tenant: ReadTenant, manager: Manager
) -> wire.SearchResponse:
    """Hybrid search over episodes, matching profile facts, and the session's working memory.

    ``stages_off`` skips retrieval stages in this search only (an unknown or essential stage
    is a 422 naming ``stages_off``); ``explain`` adds each stage's time (``explain.stages``)
    and, on each episode, the signals that found it and how each stage moved it."""
    scope = resolve_scope(request, tenant, body)
    # Per search only: switched-off stages and the record of what each stage did.
    stages = StageControl(body.stages_off, explain=body.explain)
    result = await manager.search(
        scope,
        body.query,
        top_k=body.top_k,
        types=[MemoryType(kind) for kind in body.types],
        expand_context=body.expand_context,
        working_last_n=body.working_last_n,
        stages=stages,
    )
    return wire.SearchResponse(
        episodic=[
            episode_out(hit.episode, hit, stages.hits.get(hit.episode.id))
            for hit in result.episodic
        ],
        profile=[fact_out(hit.fact, hit) for hit in result.profile],
        working=None if result.working is None else working_out(result.working),
        explain=search_explanation(stages) if body.explain else None,
    )


@router.get(
    "/{episode_id}",
    response_model=wire.EpisodeOut,
    responses=errors(403, 404, 422),
    dependencies=[scope_parameters()],
)
async def get_memory(
    episode_id: str, request: Request, tenant: ReadTenant, manager: Manager
) -> wire.EpisodeOut:
    scope = resolve_scope(request, tenant)
    return episode_out(await manager.get_episode(scope, episode_id))


@router.delete(
    "/{episode_id}",
    status_code=204,
    responses=errors(403, 404, 422),
    dependencies=[scope_parameters()],
)
async def delete_memory(
    episode_id: str, request: Request, tenant: WriteTenant, manager: Manager
) -> Response:
    scope = resolve_scope(request, tenant)
    await manager.delete_episode(scope, episode_id)
    return Response(status_code=204)
