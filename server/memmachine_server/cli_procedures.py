"""``memmachine procedures list|search|show``: an application's procedures from the terminal.

Procedures belong to an application, not to a user: ``--tenant``, ``--org-id`` and
``--project-id`` name the project, and ``--agent-id`` narrows to one agent's procedures and
the shared ones. The manager is built from the same settings and data directory as ``serve``
(see :mod:`memmachine_server.cli_data`).

Exit status: 0 done; 1 the stores failed, procedural memory is off or the procedure is not
the project's; 2 bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from memmachine.ports.procedures import AppScope, Procedure
from memmachine_server.cli_data import _DATA_DIR_HELP, _identifier, _launch_with

if TYPE_CHECKING:
    from memmachine.manager import MemoryManager

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``procedures`` and its subcommands."""
    procedures = commands.add_parser(
        "procedures", help="list, search or show an application's procedures"
    )
    actions = procedures.add_subparsers(dest="procedures_command", required=True)

    listing = actions.add_parser("list", help="the project's procedures, last updated first")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (1-1000)")
    _flags(listing)
    listing.set_defaults(run=lambda args: _launch_with(args, lambda m, _: _list(m, args)))

    search = actions.add_parser("search", help="the procedures best matching a task")
    search.add_argument("query", help="the task, in words")
    search.add_argument("--top-k", type=int, default=5, help="how many (default 5)")
    _flags(search)
    search.set_defaults(run=lambda args: _launch_with(args, lambda m, _: _search(m, args)))

    show = actions.add_parser("show", help="one procedure with its steps and past versions")
    show.add_argument("procedure_id", help="the procedure's id")
    _flags(show)
    show.set_defaults(run=lambda args: _launch_with(args, lambda m, _: _show(m, args)))


def _flags(parser: argparse.ArgumentParser) -> None:
    for flag, what in (("tenant", "tenant"), ("org-id", "org"), ("project-id", "project")):
        parser.add_argument(f"--{flag}", type=_identifier, default="default", help=what)
    parser.add_argument(
        "--agent-id", type=_identifier, help="one agent's procedures and the shared ones"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--data-dir", type=Path, help=_DATA_DIR_HELP)
    parser.add_argument("--verbose", action="store_true", help="log at the configured level")


def _app(args: argparse.Namespace) -> AppScope:
    return AppScope(
        tenant=args.tenant, org_id=args.org_id, project_id=args.project_id, agent_id=args.agent_id
    )


def _line(procedure: Procedure, score: float | None = None) -> str:
    """``id  confidence  uses  version  agent  goal`` (with the score first when searched)."""
    agent = procedure.agent_id or "(shared)"
    line = (
        f"{procedure.id}  conf {procedure.confidence:.2f}  "
        f"+{procedure.successes}/-{procedure.failures}  v{procedure.version}  "
        f"{agent}  {' '.join(procedure.goal.split())}"
    )
    return line if score is None else f"{score:.3f}  {line}"


async def _list(manager: MemoryManager, args: argparse.Namespace) -> int:
    found = await manager.procedural_service.list_procedures(
        _app(args), limit=max(1, min(args.limit, 1000))
    )
    for procedure in found:
        print(procedure.model_dump_json() if args.json else _line(procedure))
    if not found and not args.json:
        print("no procedures")
    return 0


async def _search(manager: MemoryManager, args: argparse.Namespace) -> int:
    hits = await manager.procedural_service.search(_app(args), args.query, top_k=args.top_k)
    if args.json:
        print(json.dumps([{**p.model_dump(mode="json"), "score": s} for p, s in hits], indent=2))
    elif not hits:
        print("no procedures matched")
    for procedure, score in [] if args.json else hits:
        print(_line(procedure, score))
    return 0


async def _show(manager: MemoryManager, args: argparse.Namespace) -> int:
    procedure, history = await manager.procedural_service.history(_app(args), args.procedure_id)
    if args.json:
        data = procedure.model_dump(mode="json")
        data["history"] = [old.model_dump(mode="json") for old in history]
        print(json.dumps(data, indent=2))
        return 0
    print(_line(procedure))
    for title, items in (
        ("preconditions", procedure.preconditions),
        ("steps", procedure.steps),
        ("pitfalls", procedure.pitfalls),
    ):
        if items:
            print(f"{title}:")
            print("\n".join(f"  {number}. {item}" for number, item in enumerate(items, 1)))
    for old in history:
        print(
            f"version until {old.valid_to:%Y-%m-%d %H:%M:%S} ({old.reason}): "
            f"conf {old.confidence:.2f} +{old.successes}/-{old.failures}, "
            f"{len(old.steps)} steps"
        )
    return 0
