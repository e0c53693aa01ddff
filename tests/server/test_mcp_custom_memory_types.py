"""Custom memory types as MCP tools (list_memory_types, store_custom_memory,
retrieve_custom_memory) over streamable HTTP at /mcp, driven by the official SDK's client, on
a real app serving the example reading list (registered through MEMMACHINE_MEMORY_TYPES)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI

from memmachine_server.app import create_app
from tests.server.conftest import make_settings
from tests.server.test_mcp_http import call, error_text, mcp_client, ok

KEY_A = "types-mcp-key-a"
KEY_B = "types-mcp-key-b"


@pytest.fixture(scope="module")
async def app(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[FastAPI]:
    settings = make_settings(
        tmp_path_factory.mktemp("mcp-types"),
        api_keys=f"{KEY_A}=tenant-a,{KEY_B}=tenant-b",
        memory_types=[
            "examples.custom_memory_type:ReadingList",
            "tests.unit.memory.test_memory_types:SessionNotes",
        ],
    )
    application = create_app(settings)
    started, stop = asyncio.Event(), asyncio.Event()

    async def serve() -> None:
        async with application.router.lifespan_context(application):
            started.set()
            await stop.wait()

    server = asyncio.create_task(serve())
    waiting = asyncio.create_task(started.wait())
    await asyncio.wait([server, waiting], return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if server.done():
        server.result()
    yield application
    stop.set()
    await server


async def test_the_types_are_listed_with_their_schemas(app: FastAPI) -> None:
    async with mcp_client(app, key=KEY_A) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        listed = ok(await call(session, "list_memory_types"))
        one = ok(await call(session, "list_memory_types", memory_type="session_notes"))
        unknown = error_text(await call(session, "list_memory_types", memory_type="diary"))
    assert [item["name"] for item in one["types"]] == ["session_notes"]
    assert "not_found: memory type 'diary' is not registered" in unknown
    store = tools["store_custom_memory"].input_schema
    assert store["required"] == ["memory_type", "input"]
    assert "user_id" in store["properties"]
    hints = tools["retrieve_custom_memory"].annotations
    assert hints is not None
    assert hints.read_only_hint is True
    types = {item["name"]: item for item in listed["types"]}
    assert sorted(types) == ["reading_list", "session_notes"]
    assert types["reading_list"]["store_schema"]["required"] == ["title"]
    assert types["session_notes"]["partition_by"] == ["session_id"]


async def test_store_and_retrieve_through_the_tools_stay_in_the_tenant(app: FastAPI) -> None:
    async with mcp_client(app, key=KEY_A, headers={"X-User-ID": "mcp-ana"}) as session:
        stored = ok(
            await call(
                session,
                "store_custom_memory",
                memory_type="reading_list",
                input={"title": "Dune", "author": "Frank Herbert"},
            )
        )
        assert stored["type"] == "reading_list"
        assert stored["result"]["title"] == "Dune"
        found = ok(
            await call(
                session,
                "retrieve_custom_memory",
                memory_type="reading_list",
                input={"author": "Frank Herbert"},
            )
        )
        assert [book["title"] for book in found["result"]] == ["Dune"]
    async with mcp_client(app, key=KEY_B) as other:
        theirs = ok(
            await call(
                other, "retrieve_custom_memory", memory_type="reading_list", user_id="mcp-ana"
            )
        )
        assert theirs["result"] == []


async def test_tool_errors_name_the_type_or_the_field(app: FastAPI) -> None:
    async with mcp_client(app, key=KEY_A) as session:
        unknown = error_text(
            await call(session, "store_custom_memory", memory_type="diary", input={}, user_id="u")
        )
        assert "not_found: memory type 'diary' is not registered" in unknown
        invalid = error_text(
            await call(
                session,
                "store_custom_memory",
                memory_type="reading_list",
                input={"title": "Dune", "status": "abandoned"},
                user_id="mcp-ivy",
            )
        )
        assert "invalid_input: input.status" in invalid
        assert "(field: input.status)" in invalid
        session_needed = error_text(
            await call(
                session,
                "store_custom_memory",
                memory_type="session_notes",
                input={"key": "k", "text": "x"},
                user_id="mcp-ivy",
            )
        )
        assert "(field: session_id)" in session_needed
        empty = ok(
            await call(
                session, "retrieve_custom_memory", memory_type="reading_list", user_id="mcp-ivy"
            )
        )
        assert empty["result"] == []


async def test_the_store_tool_takes_an_expiry_and_names_a_bad_one(app: FastAPI) -> None:
    async with mcp_client(app, key=KEY_A) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        stored = ok(
            await call(
                session,
                "store_custom_memory",
                memory_type="reading_list",
                input={"title": "Short-lived Book"},
                user_id="mcp-expiry",
                ttl_seconds=3600,
            )
        )
        both = error_text(
            await call(
                session,
                "store_custom_memory",
                memory_type="reading_list",
                input={"title": "Never Stored"},
                user_id="mcp-expiry",
                ttl_seconds=60,
                expires_at="2099-01-01T00:00:00Z",
            )
        )
        found = ok(
            await call(
                session, "retrieve_custom_memory", memory_type="reading_list", user_id="mcp-expiry"
            )
        )
    properties = tools["store_custom_memory"].input_schema["properties"]
    assert {"expires_at", "ttl_seconds"} <= set(properties)
    assert stored["result"]["title"] == "Short-lived Book"
    assert "ttl_seconds" in both
    assert [book["title"] for book in found["result"]] == ["Short-lived Book"]
