"""``memmachine mcp``: the MCP server over stdio, on the stores ``memmachine serve`` would use."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memmachine.config import Settings

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Add the ``mcp`` command to the ``memmachine`` parser's subcommands."""
    mcp = commands.add_parser(
        "mcp",
        help="run the MCP server over stdio (for MCP clients that spawn it)",
        description=(
            "Serve memmachine's memory tools over MCP on stdin/stdout until stdin closes or "
            "SIGTERM/SIGINT. Logs go to stderr. Tenant: MEMMACHINE_TENANT (default 'default'); "
            "default ids: MEMMACHINE_USER_ID, MEMMACHINE_SESSION_ID, MEMMACHINE_AGENT_ID, "
            "MEMMACHINE_GROUP_ID, MEMMACHINE_ORG_ID, MEMMACHINE_PROJECT_ID."
        ),
    )
    mcp.add_argument(
        "--data-dir", type=Path, help="data directory (default ./.memmachine, MEMMACHINE_DATA_DIR)"
    )
    mcp.set_defaults(run=_mcp)


def _mcp(args: argparse.Namespace) -> int:
    """Build and start the manager like ``serve`` (one line on stderr and exit 1 when that
    fails), serve MCP over stdio, then close the manager (and the embedded database)."""
    from memmachine_server.cli_common import launch as _launch

    return _launch({"data_dir": args.data_dir}, _run_mcp)


async def _run_mcp(settings: Settings) -> int:
    from memmachine.errors import MemMachineError
    from memmachine_server.app import package_version
    from memmachine_server.cli_common import fail as _fail
    from memmachine_server.cli_common import start as _start
    from memmachine_server.mcp_server import (
        McpCaller,
        build_mcp_server,
        scope_defaults,
        serve_stdio,
    )
    from memmachine_server.mcp_server import stdio_tenant as tenant_of
    from memmachine_server.scope import Principal

    environ = dict(os.environ)
    try:
        tenant = tenant_of(environ)
    except MemMachineError as exc:
        return _fail(exc.message)
    manager = await _start(settings)
    if isinstance(manager, int):
        return manager
    log = logging.getLogger("memmachine")
    caller = McpCaller(manager=manager, principal=Principal(tenant=tenant))
    server = build_mcp_server(
        lambda _ctx: caller, defaults=scope_defaults(environ), version=package_version()
    )
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    stopped = asyncio.Event()

    def stop() -> None:
        stopped.set()
        task.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop)
    log.info(
        "memmachine MCP server on stdio (tenant %s, data in %s)",
        tenant,
        settings.data_dir.resolve(),
    )
    try:
        await serve_stdio(server, max_message_bytes=4 * settings.limits.max_request_bytes)
    except asyncio.CancelledError:
        if not stopped.is_set():
            raise
        task.uncancel()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await manager.close()
    log.info("memmachine MCP server stopped")
    return 0
