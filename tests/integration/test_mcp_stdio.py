"""``memmachine mcp`` as an MCP client runs it: a child process speaking MCP on stdin/stdout,
driven by the official SDK's ``stdio_client``, on the embedded stores in a data directory."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from memmachine_server.mcp_server import TOOL_NAMES

COMMAND = [sys.executable, "-m", "memmachine_server.cli", "mcp"]
#: Generous bound on the child's startup/shutdown, so a hung child fails the test instead
#: of hanging the suite (not a speed assertion).
PATIENCE_SECONDS = 120


def processes_of(data_dir: Path) -> list[int]:
    """Live processes that use ``data_dir``: the MCP server (by its environment) and the
    embedded database child (by its command line)."""
    marker = str(data_dir).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
            status = (entry / "status").read_text()
        except OSError:
            continue
        if "State:\tZ" in status:
            continue
        if marker in cmdline or b"MEMMACHINE_DATA_DIR=" + marker in environ:
            found.append(int(entry.name))
    return found


def child_env(data_dir: Path, model_dir: Path, **extra: str) -> dict[str, str]:
    return {
        "MEMMACHINE_DATA_DIR": str(data_dir),
        "MEMMACHINE_EMBEDDING_MODEL": str(model_dir),
        "MEMMACHINE_STARTUP_TIMEOUT_SECONDS": "60",
        **extra,
    }


@asynccontextmanager
async def mcp_process(tmp_path: Path, env: dict[str, str]) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=COMMAND[0], args=COMMAND[1:], env=env, cwd=tmp_path)
    with (tmp_path / "stderr.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await asyncio.wait_for(session.initialize(), PATIENCE_SECONDS)
            yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def test_tools_over_stdio_and_memory_survives_a_restart(
    tmp_path: Path, model_dir: Path
) -> None:
    data_dir = tmp_path / "data"
    env = child_env(
        data_dir, model_dir, MEMMACHINE_USER_ID="alice", MEMMACHINE_SESSION_ID="trip-planning"
    )
    async with mcp_process(tmp_path, env) as session:
        tools = (await session.list_tools()).tools
        assert {tool.name for tool in tools} == set(TOOL_NAMES)
        assert all(tool.description and tool.input_schema["properties"] for tool in tools)

        # No ids in the arguments: they come from MEMMACHINE_USER_ID / _SESSION_ID.
        added = await call(session, "add_memory", content="I want to visit Kyoto in April")
        assert added["session_id"] == "trip-planning"
        episode_id = added["episode_ids"][0]
        await call(
            session,
            "set_profile",
            facts=[{"tag": "travel", "feature": "next_trip", "value": "Kyoto"}],
        )
        state = await call(session, "set_state", state={"stage": "booking"}, expected_version=1)
        assert state["version"] == 2  # the added message was version 1

        stale = await session.call_tool("set_state", {"state": {"x": 1}, "expected_version": 1})
        assert isinstance(stale, CallToolResult)
        assert stale.is_error
        text = stale.content[0]
        assert isinstance(text, TextContent)
        assert "conflict" in text.text

        prompt = await call(session, "memory_prompt", query="Where am I going?")
        assert "Kyoto" in prompt["system"]
    assert processes_of(data_dir) == []

    async with mcp_process(tmp_path, env) as session:
        found = await call(session, "search_memory", query="Which city will I visit?")
        assert [hit["id"] for hit in found["episodic"]] == [episode_id]
        assert found["profile"][0]["value"] == "Kyoto"
        assert (await call(session, "get_state"))["state"] == {"stage": "booking"}
        assert (await call(session, "get_memory", episode_id=episode_id))["content"] == (
            "I want to visit Kyoto in April"
        )
    assert processes_of(data_dir) == []

    # Another tenant on the same stores sees none of it.
    other = {**env, "MEMMACHINE_TENANT": "another-tenant"}
    async with mcp_process(tmp_path, other) as session:
        found = await call(session, "search_memory", query="Kyoto")
        assert found["episodic"] == []
        assert found["profile"] == []
        missing = await session.call_tool("get_memory", {"episode_id": episode_id})
        assert isinstance(missing, CallToolResult)
        assert missing.is_error
    assert processes_of(data_dir) == []
    log = (tmp_path / "stderr.log").read_text()
    assert "memmachine MCP server stopped" in log
    assert "Traceback" not in log


async def test_sigterm_closes_the_stores_and_exits_cleanly(tmp_path: Path, model_dir: Path) -> None:
    data_dir = tmp_path / "data"
    process = await asyncio.create_subprocess_exec(
        *COMMAND,
        stdin=asyncio.subprocess.PIPE,  # kept open: the server is not stopped by EOF here
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", ""), **child_env(data_dir, model_dir)},
        cwd=tmp_path,
    )
    assert process.stderr is not None
    assert process.stdout is not None
    try:
        log = b""
        while b"MCP server on stdio" not in log:
            line = await asyncio.wait_for(process.stderr.readline(), PATIENCE_SECONDS)
            assert line, log.decode()
            log += line
        assert len(processes_of(data_dir)) == 2  # the server and its embedded database

        process.send_signal(signal.SIGTERM)
        rest = await asyncio.wait_for(process.stderr.read(), PATIENCE_SECONDS)
        code = await asyncio.wait_for(process.wait(), PATIENCE_SECONDS)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert code == 0, rest.decode()
    assert b"memmachine MCP server stopped" in rest
    assert await process.stdout.read() == b""  # stdout carries the protocol only
    assert processes_of(data_dir) == []


async def test_an_invalid_tenant_fails_with_one_line(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        *COMMAND,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={
            "PATH": os.environ.get("PATH", ""),
            "MEMMACHINE_DATA_DIR": str(tmp_path / "data"),
            "MEMMACHINE_EMBEDDING_PROVIDER": "none",
            "MEMMACHINE_TENANT": "no spaces/allowed",
        },
        cwd=tmp_path,
    )
    out, err = await asyncio.wait_for(process.communicate(), PATIENCE_SECONDS)
    assert process.returncode == 1
    assert out == b""
    lines = err.decode().strip().splitlines()
    assert lines[-1].startswith("memmachine: cannot start: MEMMACHINE_TENANT must be")
    assert "Traceback" not in err.decode()
    assert not (tmp_path / "data").exists()  # nothing was started


@pytest.fixture(autouse=True)
def _no_stray_children(tmp_path: Path) -> Iterator[None]:
    """Whatever a test leaves running under its directory is killed (and fails the test)."""
    yield
    left = processes_of(tmp_path)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []
