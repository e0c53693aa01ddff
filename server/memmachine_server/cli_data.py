"""``memmachine export``, ``memmachine import`` and ``memmachine search``.

All three build the manager from the same settings and data directory as ``serve``. A
running ``memmachine serve`` holds the embedded database's data directory; these commands
then end with one line saying so and exit status 1.

Exit status: 0 done; 1 the stores failed or could not start; 2 bad input (a bad document,
an unreadable file, a query the manager refuses), with one line on stderr naming it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from memmachine.config import Settings
from memmachine.errors import InvalidInputError, MemMachineError
from memmachine.models import ID_PATTERN, MemoryType, Scope, SearchResult
from memmachine.portability import (
    DocumentError,
    ExportDocument,
    ExportReport,
    export_user,
    import_document,
    parse_document,
)

if TYPE_CHECKING:
    from memmachine.manager import MemoryManager
    from memmachine.ports import StateBackend

__all__ = ["register"]

_BAR_WIDTH = 24


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``export``, ``import`` and ``search`` sub-commands."""
    export = commands.add_parser(
        "export", help="write a user's memories as JSON (episodes, facts, working memory)"
    )
    _scope_flags(export, user_required=True)
    export.add_argument(
        "--out", default="-", help="file to write (default -, standard output)", metavar="FILE"
    )
    export.add_argument(
        "--procedures",
        action="store_true",
        help="also write the project's procedures (the application's, shared by its users)",
    )
    _state_flag(export)
    _common_flags(export)
    export.set_defaults(run=_export)

    load = commands.add_parser(
        "import", help="store a file written by `memmachine export` (again: nothing twice)"
    )
    load.add_argument("file", help="the export file, or - for standard input")
    _scope_flags(load, user_required=False)
    _state_flag(load)
    _common_flags(load)
    load.set_defaults(run=_import)

    search = commands.add_parser("search", help="search a user's memories from the terminal")
    search.add_argument("query", help="what to look for")
    _scope_flags(search, user_required=True)
    search.add_argument("--session-id", type=_identifier, help="only this session's episodes")
    search.add_argument("--top-k", type=int, default=10, help="how many hits (default 10)")
    search.add_argument("--json", action="store_true", help="print the result as JSON")
    search.add_argument("--data-dir", type=Path, help=_DATA_DIR_HELP)
    search.add_argument("--verbose", action="store_true", help="log at the configured level")
    search.set_defaults(run=_search)


_DATA_DIR_HELP = "data directory (default ./.memmachine, MEMMACHINE_DATA_DIR)"


def _identifier(value: str) -> str:
    if re.fullmatch(ID_PATTERN, value) is None:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an id (1-128 letters, digits or ._@+-=#~|)"
        )
    return value


def _scope_flags(parser: argparse.ArgumentParser, *, user_required: bool) -> None:
    retarget = "" if user_required else " (default: the file's)"
    parser.add_argument(
        "--user-id", type=_identifier, required=user_required, help=f"the user{retarget}"
    )
    parser.add_argument("--tenant", type=_identifier, help=f"tenant (default default){retarget}")
    parser.add_argument("--org-id", type=_identifier, help=f"org (default default){retarget}")
    parser.add_argument(
        "--project-id", type=_identifier, help=f"project (default default){retarget}"
    )


def _state_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-backend",
        choices=("file", "sqlite", "redis"),
        help="where the agents keep typed state (as MemoryLayer.state's backend); "
        "without it typed state is left out of an export and refused by an import",
    )


@contextlib.asynccontextmanager
async def _state_backend(
    args: argparse.Namespace, settings: Settings, manager: MemoryManager
) -> AsyncIterator[StateBackend | None]:
    """The ``--state-backend`` named, started, closed afterwards (``None`` without one)."""
    if args.state_backend is None:
        yield None
        return
    from memmachine.bootstrap import build_state_backend

    backend = build_state_backend(settings, args.state_backend, manager=manager)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


def _common_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help=_DATA_DIR_HELP)
    parser.add_argument(
        "--progress",
        action="store_true",
        help="draw the progress bar on stderr even when it is not a terminal",
    )
    parser.add_argument("--verbose", action="store_true", help="log at the configured level")


def _scope(args: argparse.Namespace, base: Scope | None = None) -> Scope:
    """The flags' scope; flags left out come from ``base`` (or default to ``default``)."""
    fields: dict[str, Any] = base.model_dump() if base is not None else {}
    for flag, name in (
        ("tenant", "tenant"),
        ("org_id", "org_id"),
        ("project_id", "project_id"),
        ("user_id", "user_id"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            fields[name] = value
    return Scope(**fields)


def _launch_with(
    args: argparse.Namespace, work: Callable[[MemoryManager, Settings], Awaitable[int]]
) -> int:
    """Run ``work`` with a started manager built like ``serve`` builds it, and close it."""
    from memmachine_server.cli_common import launch as _launch
    from memmachine_server.cli_common import start as _start

    async def run(settings: Settings) -> int:
        manager = await _start(settings)
        if isinstance(manager, int):
            return manager
        try:
            return await work(manager, settings)
        except InvalidInputError as exc:
            return _problem(f"{args.command}: {exc.message}")
        except MemMachineError as exc:
            print(f"memmachine {args.command}: failed: {exc.message}", file=sys.stderr)
            return 1
        finally:
            await manager.close()

    overrides: dict[str, Any] = {"data_dir": args.data_dir}
    if not args.verbose:
        overrides["log_level"] = "WARNING"
    return _launch(overrides, run)


def _problem(message: str) -> int:
    print(f"memmachine: {message}", file=sys.stderr)
    return 2


# --------------------------------------------------------------------------- progress


class _ProgressBar:
    """A one-line progress bar on a stream, redrawn in place; silent when disabled."""

    def __init__(self, stream: IO[str], enabled: bool) -> None:
        self._stream = stream
        self._enabled = enabled
        self._phase: str | None = None

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        if not self._enabled:
            return
        if self._phase is not None and phase != self._phase:
            self._stream.write("\n")
        self._phase = phase
        if total:
            filled = min(_BAR_WIDTH, _BAR_WIDTH * done // total)
            bar = "#" * filled + "." * (_BAR_WIDTH - filled)
            line = f"{phase:<9} [{bar}] {done}/{total}"
        else:
            line = f"{phase:<9} {done}"
        self._stream.write("\r" + line)
        self._stream.flush()

    def finish(self) -> None:
        if self._enabled and self._phase is not None:
            self._stream.write("\n")
            self._stream.flush()
            self._phase = None


def _progress_bar(args: argparse.Namespace) -> _ProgressBar:
    return _ProgressBar(sys.stderr, bool(args.progress) or sys.stderr.isatty())


# --------------------------------------------------------------------------- export


def _export(args: argparse.Namespace) -> int:
    """Write the user's memories as JSON to ``--out`` (standard output by default), with a
    progress bar and a summary line on stderr. A file is written next to its destination
    and moved into place only when the export is complete."""
    scope = _scope(args)
    if args.out != "-" and not Path(args.out).parent.is_dir():
        return _problem(f"export: cannot write {args.out}: no directory {Path(args.out).parent}")

    async def work(manager: MemoryManager, settings: Settings) -> int:
        bar = _progress_bar(args)
        async with _state_backend(args, settings, manager) as state:
            report = await _export_to(args, manager, scope, bar, state)
        bar.finish()
        extra = f", {report.procedures} procedures" if report.procedures is not None else ""
        print(
            f"memmachine export: {report.episodes} episodes, {report.facts} facts "
            f"({report.fact_versions} past versions), {report.closed_facts} closed facts, "
            f"{report.sessions} working sessions, {report.agent_states} typed states, "
            f"{report.custom_spaces} custom record sets, {report.attachments} attachments"
            f"{extra} of user {scope.user_id!r} (tenant {scope.tenant!r})",
            file=sys.stderr,
        )
        return 0

    try:
        return _launch_with(args, work)
    except OSError as exc:
        return _problem(f"export: cannot write {args.out}: {exc.strerror or exc}")


async def _export_to(
    args: argparse.Namespace,
    manager: MemoryManager,
    scope: Scope,
    bar: _ProgressBar,
    state: StateBackend | None,
) -> ExportReport:
    """Export to standard output, or to a file moved into place once complete."""
    options: dict[str, Any] = {"progress": bar, "state": state, "procedures": args.procedures}
    if args.out == "-":
        report = await export_user(manager, scope, sys.stdout.write, **options)
        sys.stdout.flush()
    else:
        target = Path(args.out)
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - moved into place below
            "w",
            encoding="utf-8",
            dir=target.parent if str(target.parent) else ".",
            prefix=f".{target.name}.",
            delete=False,
        )
        try:
            with handle:
                report = await export_user(manager, scope, handle.write, **options)
            os.replace(handle.name, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(handle.name)
            raise
    return report


# --------------------------------------------------------------------------- import


def _read_document(name: str) -> ExportDocument:
    """Read and validate the whole file; ``DocumentError`` says what is wrong with it and
    ``OSError`` why it cannot be read."""
    text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(
            "$", f"not JSON (line {exc.lineno} column {exc.colno}: {exc.msg})"
        ) from None
    return parse_document(data)


def _import(args: argparse.Namespace) -> int:
    """Validate the whole file, then store it for the file's user (or ``--user-id`` /
    ``--tenant`` ...) in batches, with a progress bar and a summary line on stderr. A bad
    document is one line naming the JSON path of its first problem, exit status 2, and
    nothing is stored."""
    try:
        document = _read_document(args.file)
    except DocumentError as exc:
        return _problem(f"import: invalid document at {exc.message}")
    except OSError as exc:
        return _problem(f"import: cannot read {args.file}: {exc.strerror or exc}")
    except UnicodeDecodeError:
        return _problem(f"import: {args.file} is not UTF-8 text")
    target = _scope(args, document.scope.as_scope())

    async def work(manager: MemoryManager, settings: Settings) -> int:
        bar = _progress_bar(args)
        try:
            async with _state_backend(args, settings, manager) as state:
                report = await import_document(manager, document, target, progress=bar, state=state)
        except DocumentError as exc:
            return _problem(f"import: invalid document at {exc.message}")
        finally:
            bar.finish()
        print(
            f"memmachine import: {report.episodes_added} episodes added "
            f"({report.episodes_present} already there), {report.facts_written} facts written "
            f"({report.facts_unchanged} unchanged, {report.fact_versions_replayed} past "
            f"versions replayed), {report.sessions} working sessions, {report.agent_states} "
            f"typed states, {report.custom_spaces} custom record sets, {report.attachments} "
            f"attachments, {report.procedures} procedures "
            f"for user {target.user_id!r} (tenant {target.tenant!r})",
            file=sys.stderr,
        )
        return 0

    return _launch_with(args, work)


# --------------------------------------------------------------------------- search


def _search(args: argparse.Namespace) -> int:
    """Search the user's episodes and profile facts; print a table, or JSON with ``--json``."""
    scope = _scope(args).model_copy(update={"session_id": args.session_id})

    async def work(manager: MemoryManager, settings: Settings) -> int:
        result = await manager.search(
            scope,
            args.query,
            top_k=args.top_k,
            types=(MemoryType.EPISODIC, MemoryType.PROFILE),
        )
        if args.json:
            print(result.model_dump_json(indent=2, exclude={"working"}))
        else:
            print(_table(result, shutil.get_terminal_size((100, 24)).columns))
        return 0

    return _launch_with(args, work)


def _table(result: SearchResult, width: int) -> str:
    """Episodes as ``score  time  role/producer  session  text`` (text cut to ``width``),
    then the profile facts."""
    lines: list[str] = []
    if not result.episodic:
        lines.append("no episodes matched")
    else:
        rows: list[tuple[str, ...]] = [
            (
                f"{hit.score:.3f}",
                _when(hit.episode.timestamp),
                hit.episode.role + (f"/{hit.episode.producer}" if hit.episode.producer else ""),
                hit.episode.scope.session_id or "",
                " ".join(hit.episode.content.split()),
            )
            for hit in result.episodic
        ]
        lines += _columns(("SCORE", "TIME", "WHO", "SESSION", "TEXT"), rows, width)
    if result.profile:
        lines.append("")
        rows = [
            (f"{hit.score:.3f}", f"{hit.fact.tag}/{hit.fact.feature}", hit.fact.value)
            for hit in result.profile
        ]
        lines += _columns(("SCORE", "FACT", "VALUE"), rows, width)
    return "\n".join(lines)


def _columns(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], width: int) -> list[str]:
    """Left-aligned columns; the last one is cut with ``…`` so a line fits ``width``."""
    sizes = [
        max(len(header[column]), *(len(row[column]) for row in rows))
        for column in range(len(header) - 1)
    ]
    room = max(20, width - sum(sizes) - 2 * len(sizes))
    out = []
    for row in [header, *rows]:
        cells = [cell.ljust(size) for cell, size in zip(row, sizes, strict=False)]
        last = row[-1] if len(row[-1]) <= room else row[-1][: room - 1] + "…"
        out.append("  ".join([*cells, last]).rstrip())
    return out


def _when(timestamp: datetime) -> str:
    return timestamp.strftime("%Y-%m-%d %H:%M")
