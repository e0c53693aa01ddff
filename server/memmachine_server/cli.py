"""The ``memmachine`` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from memmachine.config import Settings
from memmachine.errors import MemMachineError
from memmachine_server import cli_data, cli_jobs, cli_keys, cli_mcp, cli_procedures
from memmachine_server.cli_common import fail, launch, start

if TYPE_CHECKING:
    pass


def _serve(args: argparse.Namespace) -> int:
    """Build and start the manager (retrying stores that are still booting), then serve.

    The stores are up before the port opens. A store still unreachable when the startup
    timeout runs out, or settings that cannot work, end the command with one line on
    stderr and exit status 1, never a traceback."""
    overrides = {"host": args.host, "port": args.port, "data_dir": args.data_dir}
    return launch(overrides, _run)


async def _run(settings: Settings) -> int:
    import uvicorn

    from memmachine.bootstrap import build_telemetry
    from memmachine_server.app import create_app

    try:
        telemetry = build_telemetry(settings)
    except MemMachineError as exc:
        return fail(exc.message)
    try:
        manager = await start(settings, telemetry)
        if isinstance(manager, int):
            return manager
        if refusal := await _auth_refusal(settings):
            await manager.close()
            return fail(refusal)
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(settings, manager=manager, telemetry=telemetry),
                host=settings.host,
                port=settings.port,
                log_level=settings.log_level.lower(),
                lifespan="on",
                # Our handler and one line per request (memmachine.access) instead of
                # uvicorn's own access log.
                log_config=None,
                access_log=False,
            )
        )
        logging.getLogger("memmachine").info(
            "memmachine serving on http://%s:%d (data in %s)",
            settings.host,
            settings.port,
            settings.data_dir.resolve(),
        )
        try:
            await server.serve()
        finally:
            await manager.close()  # the app closed it unless startup failed; idempotent
        return 0 if server.started else 1
    finally:
        telemetry.close()


async def _auth_refusal(settings: Settings) -> str | None:
    """Why serving would be open on a non-loopback address (see ``open_mode_refusal``)."""
    from memmachine.bootstrap import build_key_store
    from memmachine_server.keyring import open_mode_refusal

    return await open_mode_refusal(settings, build_key_store(settings))


def _worker(args: argparse.Namespace) -> int:
    """Build and start the manager like ``serve``, then run background jobs until SIGINT or
    SIGTERM; the jobs in hand are finished first and the command exits 0. Unreachable
    stores end it like ``serve``: one line on stderr, exit status 1."""
    return launch({"data_dir": args.data_dir}, _run_worker)


async def _run_worker(settings: Settings) -> int:
    from memmachine.bootstrap import build_telemetry
    from memmachine.jobs import Worker
    from memmachine.jobs.handlers import handlers_for
    from memmachine_server.metrics_server import serve_metrics

    try:
        name = f"{settings.tracing.service_name}-worker"
        telemetry = build_telemetry(settings, service_name=name)
    except MemMachineError as exc:
        return fail(exc.message)
    manager = await start(settings, telemetry)
    if isinstance(manager, int):
        telemetry.close()
        return manager
    loop = asyncio.get_running_loop()
    log = logging.getLogger("memmachine")
    try:
        if manager.jobs is None:
            return fail(f"background jobs are off: {manager.jobs_off_reason}")
        config = settings.jobs
        worker = Worker(
            manager.jobs,
            handlers_for(manager),
            concurrency=config.concurrency,
            poll_interval=config.poll_interval_seconds,
            lease_seconds=config.lease_seconds,
            telemetry=telemetry,
        )
        stop = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        log.info("memmachine worker %s running (data in %s)", worker.worker_id, settings.data_dir)
        try:
            async with serve_metrics(telemetry.metrics, settings.metrics):
                await worker.run(stop)
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
        log.info("memmachine worker %s stopped", worker.worker_id)
        return 0
    finally:
        await manager.close()
        telemetry.close()


def _version(args: argparse.Namespace) -> int:
    from memmachine_server.app import package_version

    print(package_version())
    return 0


def _openapi(args: argparse.Namespace) -> int:
    """Write the REST API's OpenAPI document (what ``/openapi.json`` serves). It does not
    depend on the settings, which are not read; no store is opened."""
    from memmachine_server.app import create_app

    app = create_app(Settings.model_construct())
    document = json.dumps(app.openapi(), indent=2, ensure_ascii=False) + "\n"
    if args.out is None:
        sys.stdout.write(document)
    else:
        args.out.write_text(document, encoding="utf-8")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memmachine", description="memmachine memory layer")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the REST server")
    serve.add_argument("--host", help="bind address (default 127.0.0.1, MEMMACHINE_HOST)")
    serve.add_argument("--port", type=int, help="port (default 8080, MEMMACHINE_PORT)")
    serve.add_argument(
        "--data-dir", type=Path, help="data directory (default ./.memmachine, MEMMACHINE_DATA_DIR)"
    )
    serve.set_defaults(run=_serve)
    worker = commands.add_parser("worker", help="run background jobs (compaction) on their own")
    worker.add_argument(
        "--data-dir", type=Path, help="data directory (default ./.memmachine, MEMMACHINE_DATA_DIR)"
    )
    worker.set_defaults(run=_worker)
    cli_mcp.register(commands)
    cli_data.register(commands)
    cli_keys.register(commands)
    cli_jobs.register(commands)
    cli_procedures.register(commands)
    openapi = commands.add_parser(
        "openapi", help="print the REST API's OpenAPI document (as /openapi.json serves it)"
    )
    openapi.add_argument("--out", type=Path, help="write it to this file instead of stdout")
    openapi.set_defaults(run=_openapi)
    show_version = commands.add_parser("version", help="print the version")
    show_version.set_defaults(run=_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
