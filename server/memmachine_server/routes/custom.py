"""Custom memory types (:mod:`memmachine.memory_types`): /v1/memory-types.

``GET /v1/memory-types`` lists the registered types with their input schemas;
``POST /v1/memory-types/{name}/store`` and ``.../retrieve`` run a type's ``store`` /
``retrieve`` in the caller's scope with ``{"user_id", ..., "input": {...}}``. An unknown type is
a 404 naming it; input the type's model refuses is a 422 naming ``input.<field>``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from memmachine.manager import MemoryManager
from memmachine.memory_types import MemoryTypeRegistry
from memmachine_sdk import models as wire
from memmachine_server.openapi import AUTH_ERRORS, errors, scope_parameters
from memmachine_server.scope import ReadTenant, WriteTenant, resolve_scope
from memmachine_server.state import manager_of

__all__ = ["memory_types_out", "router"]

router = APIRouter(prefix="/v1/memory-types", tags=["memory types"], responses=AUTH_ERRORS)
Manager = Annotated[MemoryManager, Depends(manager_of)]


def memory_types_out(registry: MemoryTypeRegistry) -> wire.MemoryTypesResponse:
    """The registry's types as the wire listing (REST and MCP)."""
    return wire.MemoryTypesResponse(
        types=[
            wire.MemoryTypeOut(
                name=info.name,
                description=info.description,
                store_schema=info.store_schema,
                retrieve_schema=info.retrieve_schema,
                partition_by=list(info.partition_by),
            )
            for info in registry.infos()
        ]
    )


@router.get("", response_model=wire.MemoryTypesResponse, responses=errors(403))
async def list_memory_types(tenant: ReadTenant, manager: Manager) -> wire.MemoryTypesResponse:
    """The registered custom memory types, by name, with the JSON schemas of their input."""
    return memory_types_out(manager.memory_types)


@router.post(
    "/{name}/store",
    response_model=wire.CustomMemoryResponse,
    responses=errors(403, 404, 409, 413, 422),
    dependencies=[scope_parameters()],
)
async def store_custom(
    name: str,
    body: wire.CustomStoreRequest,
    request: Request,
    tenant: WriteTenant,
    manager: Manager,
) -> wire.CustomMemoryResponse:
    """Run the type's ``store`` with ``input`` in the caller's scope; the records it writes
    expire at ``expires_at`` or after ``ttl_seconds`` when one is given."""
    registry = manager.memory_types
    registry.get(name)  # an unknown type is a 404 before anything else is checked
    scope = resolve_scope(request, tenant, body)
    result = await registry.store(
        name,
        scope,
        body.input,
        field_prefix="input",
        expires_at=body.expires_at,
        ttl_seconds=body.ttl_seconds,
    )
    return wire.CustomMemoryResponse(type=name, result=result)


@router.post(
    "/{name}/retrieve",
    response_model=wire.CustomMemoryResponse,
    responses=errors(403, 404, 413, 422),
    dependencies=[scope_parameters()],
)
async def retrieve_custom(
    name: str,
    body: wire.CustomMemoryRequest,
    request: Request,
    tenant: ReadTenant,
    manager: Manager,
) -> wire.CustomMemoryResponse:
    """Run the type's ``retrieve`` with ``input`` in the caller's scope."""
    registry = manager.memory_types
    registry.get(name)
    scope = resolve_scope(request, tenant, body)
    result = await registry.retrieve(name, scope, body.input, field_prefix="input")
    return wire.CustomMemoryResponse(type=name, result=result)
