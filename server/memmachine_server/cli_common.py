"""What every ``memmachine`` command shares: settings, logging, starting the manager, and
failing with one line on stderr."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from memmachine.config import Settings
from memmachine.errors import MemMachineError
from memmachine_server.logs import configure_logging

if TYPE_CHECKING:
    from memmachine.manager import MemoryManager
    from memmachine.telemetry import Telemetry

__all__ = ["fail", "launch", "settings_problem", "start"]


def launch(overrides: dict[str, Any], run: Callable[[Settings], Awaitable[int]]) -> int:
    """Settings from the environment plus the given flags (``None`` = not given), logging,
    then ``run`` in an event loop. Unusable settings are one line on stderr, exit 1."""
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except MemMachineError as exc:
        return fail(exc.message)
    except ValidationError as exc:
        return fail(settings_problem(exc))
    configure_logging(settings)
    log = logging.getLogger("memmachine")
    for store, where in settings.describe().items():
        log.info("%s store: %s", store, where)

    async def main() -> int:
        return await run(settings)

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:  # pragma: no cover - Ctrl-C during startup
        return 130


async def start(settings: Settings, telemetry: Telemetry | None = None) -> MemoryManager | int:
    """Build and start the manager (observed through ``telemetry``), or return the exit
    status when that fails.

    A SIGTERM while stores are still being waited for (``docker stop``) cancels startup,
    which closes what started (the embedded database child included) instead of dying."""
    from memmachine.bootstrap import build_manager, start_manager

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        manager = await build_manager(settings, telemetry=telemetry)
        await start_manager(manager, settings)  # closes whatever started when it fails
    except MemMachineError as exc:
        return fail(exc.message)
    except asyncio.CancelledError:
        print("memmachine: startup interrupted", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
    return manager


def fail(message: str) -> int:
    print(f"memmachine: cannot start: {message}", file=sys.stderr)
    return 1


def settings_problem(exc: ValidationError) -> str:
    """The first invalid setting as ``MEMMACHINE_NAME: message`` (the value is not shown,
    it may be a secret)."""
    error = exc.errors()[0]
    name = "_".join(str(part) for part in error["loc"]).upper()
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"invalid setting MEMMACHINE_{name}: {error['msg']}{more}"
