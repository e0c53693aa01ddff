"""``memmachine jobs list`` and ``memmachine jobs purge-dead``: a user's background jobs from
the terminal.

Both build the manager from the same settings and data directory as ``serve`` (see
:mod:`memmachine_server.cli_data`) and act on one user's jobs only: ``--tenant``,
``--org-id``, ``--project-id`` and ``--user-id`` name the user, as a request's API key and
ids do. Dead jobs stay until replayed or purged; done jobs expire by themselves after
``MEMMACHINE_JOBS_DONE_RETENTION_SECONDS``.

Exit status: 0 done; 1 the stores failed, jobs are off, or the job is not the user's or
not dead; 2 bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, get_args

from memmachine.errors import StoreUnavailableError
from memmachine.ports import JobQueue, JobStatus
from memmachine_server.cli_data import (
    _DATA_DIR_HELP,
    _identifier,
    _launch_with,
    _scope,
    _scope_flags,
)

if TYPE_CHECKING:
    from memmachine.manager import MemoryManager

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``jobs`` and its subcommands."""
    jobs = commands.add_parser("jobs", help="list a user's background jobs, purge dead ones")
    actions = jobs.add_subparsers(dest="jobs_command", required=True)

    listing = actions.add_parser("list", help="a user's jobs, newest first")
    _scope_flags(listing, user_required=True)
    listing.add_argument("--status", choices=get_args(JobStatus), help="only jobs in this state")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (1-1000)")
    listing.add_argument("--json", action="store_true", help="print the jobs as JSON lines")
    _common_flags(listing)
    listing.set_defaults(run=lambda args: _launch_with(args, lambda m, _: _list(m, args)))

    purge = actions.add_parser(
        "purge-dead", help="delete a user's dead jobs for good (or only --job-id)"
    )
    _scope_flags(purge, user_required=True)
    purge.add_argument("--job-id", type=_identifier, help="only this dead job")
    _common_flags(purge)
    purge.set_defaults(run=lambda args: _launch_with(args, lambda m, _: _purge(m, args)))


def _common_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help=_DATA_DIR_HELP)
    parser.add_argument("--verbose", action="store_true", help="log at the configured level")


def _queue(manager: MemoryManager) -> JobQueue:
    if manager.jobs is None:
        raise StoreUnavailableError(
            f"background jobs are off: {manager.jobs_off_reason}", store="jobs"
        )
    return manager.jobs


async def _list(manager: MemoryManager, args: argparse.Namespace) -> int:
    """One line per job (id, status, kind, attempts, last update, the error's first line),
    or the jobs as JSON lines with ``--json``."""
    jobs = await _queue(manager).list_jobs(_scope(args), status=args.status, limit=args.limit)
    for job in jobs:
        if args.json:
            print(job.model_dump_json())
            continue
        line = (
            f"{job.id}  {job.status:<7}  {job.kind:<8}  "
            f"attempts {job.attempts}/{job.max_attempts}  "
            f"updated {job.updated_at:%Y-%m-%d %H:%M:%S}"
        )
        if job.last_error:
            line += "  " + json.dumps(job.last_error.splitlines()[0][:80])
        print(line)
    return 0


async def _purge(manager: MemoryManager, args: argparse.Namespace) -> int:
    scope = _scope(args)
    purged = await _queue(manager).purge_dead(scope, args.job_id)
    noun = "dead job" if purged == 1 else "dead jobs"
    print(f"purged {purged} {noun} of user {scope.user_id!r} (tenant {scope.tenant!r})")
    return 0
