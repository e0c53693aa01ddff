"""The ``memmachine`` command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from memmachine.config import Settings


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from memmachine_server.app import create_app

    overrides: dict[str, object] = {}
    if args.host is not None:
        overrides["host"] = args.host
    if args.port is not None:
        overrides["port"] = args.port
    if args.data_dir is not None:
        overrides["data_dir"] = args.data_dir
    settings = Settings(**overrides)  # type: ignore[arg-type]
    _configure_logging(settings.log_level)
    logging.getLogger("memmachine").info(
        "memmachine serving on http://%s:%d (data in %s)",
        settings.host,
        settings.port,
        settings.data_dir.resolve(),
    )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        lifespan="on",
    )
    return 0


def _version(args: argparse.Namespace) -> int:
    from memmachine_server.app import package_version

    print(package_version())
    return 0


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )


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
    show_version = commands.add_parser("version", help="print the version")
    show_version.set_defaults(run=_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
