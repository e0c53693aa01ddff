"""Memory for the next LLM call: /v1/memory-prompt, and memory as tools: /v1/tools."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from memmachine.manager import MemoryManager
from memmachine.prompting import build_memory_prompt
from memmachine.tools import execute_tool_call, memory_tools
from memmachine_sdk import models as wire
from memmachine_server.openapi import AUTH_ERRORS, errors, scope_parameters
from memmachine_server.scope import ReadTenant, Tenant, ToolTenant, resolve_scope
from memmachine_server.state import manager_of

router = APIRouter(prefix="/v1", tags=["prompt"], responses=AUTH_ERRORS)
Manager = Annotated[MemoryManager, Depends(manager_of)]


@router.post(
    "/memory-prompt",
    response_model=wire.MemoryPromptResponse,
    responses=errors(403, 413, 422),
    dependencies=[scope_parameters()],
)
async def memory_prompt(
    body: wire.MemoryPromptRequest, request: Request, tenant: ReadTenant, manager: Manager
) -> wire.MemoryPromptResponse:
    """Profile facts, relevant episodes, the session summary, the application's procedures
    for similar tasks and recent messages, then the new message, within ``max_tokens`` (the
    text's tokens by the server's tokenizer for the format, named in ``tokenizer``, plus 4
    per message), in OpenAI, Anthropic or Gemini request shape. What is kept is chosen by
    relevance to the new message first: the best-ranked evidence is never dropped for
    weaker material."""
    scope = resolve_scope(request, tenant, body)
    vector = await manager.embed_query(body.query)
    how = await manager.procedural_service.for_prompt(scope, body.query, query_vector=vector)
    prompt = await build_memory_prompt(
        manager,
        scope,
        body.query,
        max_tokens=body.max_tokens,
        format=body.format,
        top_k=body.top_k,
        recent_messages=body.recent_messages,
        procedures=how,
        query_vector=vector,
    )
    return wire.MemoryPromptResponse.model_validate(prompt.model_dump())


@router.get("/tools", response_model=wire.ToolsResponse)
async def list_tools(tenant: Tenant) -> wire.ToolsResponse:
    """``remember``, ``recall`` and ``forget`` in OpenAI function-calling format (strict)."""
    return wire.ToolsResponse(tools=memory_tools())


@router.post(
    "/tools/execute",
    response_model=wire.ToolMessageOut,
    responses=errors(403, 413, 422),
    dependencies=[scope_parameters()],
)
async def execute_tool(
    body: wire.ToolCallRequest, request: Request, tenant: ToolTenant, manager: Manager
) -> wire.ToolMessageOut:
    """Run one tool call as the model made it; returns the ``tool`` message to send back."""
    scope = resolve_scope(request, tenant, body)
    message = await execute_tool_call(
        manager, scope, body.tool_call.model_dump(), field_prefix="tool_call"
    )
    return wire.ToolMessageOut.model_validate(message)
