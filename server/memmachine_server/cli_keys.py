"""``memmachine keys create|list|revoke``: manage API keys from the command line.

The commands open only the key store (the profile database: SQLite in the data dir, or
``MEMMACHINE_PROFILE_STORE_URL``), never the embedded FalkorDB, so they work while
``memmachine serve`` runs on the same data dir. A running server accepts a new key at once
and stops accepting a revoked one within ``MEMMACHINE_KEY_REFRESH_SECONDS``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from memmachine.auth import ApiKey, issue_key
from memmachine.config import Settings
from memmachine.errors import MemMachineError
from memmachine.ports import KeyStore

__all__ = ["register"]


def register(commands: Any) -> None:
    """Add ``keys`` and its subcommands to the ``memmachine`` argument parser."""
    keys = commands.add_parser("keys", help="create, list and revoke API keys")
    actions = keys.add_subparsers(dest="keys_command", required=True)

    create = actions.add_parser(
        "create", help="create an API key and print it (on the last line, shown only once)"
    )
    create.add_argument("--tenant", required=True, help="the tenant the key belongs to")
    create.add_argument("--name", default="", help="a label to recognise the key by")
    create.add_argument("--read-only", action="store_true", help="may read but not write")
    create.add_argument(
        "--admin", action="store_true", help="may also manage its tenant's keys (/v1/admin)"
    )
    create.add_argument(
        "--rate-limit",
        type=int,
        metavar="N",
        help="requests per minute (0 = unlimited; default MEMMACHINE_RATE_LIMIT_PER_MINUTE)",
    )
    _data_dir_option(create)
    create.set_defaults(run=lambda args: _with_store(args, _create))

    listing = actions.add_parser("list", help="list API keys (never the keys themselves)")
    listing.add_argument("--tenant", help="only this tenant's keys")
    _data_dir_option(listing)
    listing.set_defaults(run=lambda args: _with_store(args, _list))

    revoke = actions.add_parser("revoke", help="revoke an API key by its id")
    revoke.add_argument("key_id", help="the key's id (from `memmachine keys list`)")
    _data_dir_option(revoke)
    revoke.set_defaults(run=lambda args: _with_store(args, _revoke))


def _data_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", type=Path, help="data directory (default ./.memmachine, MEMMACHINE_DATA_DIR)"
    )


Action = Callable[[argparse.Namespace, KeyStore], Awaitable[int]]


def _with_store(args: argparse.Namespace, action: Action) -> int:
    """Settings as ``serve`` reads them, the key store started, ``action``, the store
    closed. A problem is one line on stderr and exit status 1."""
    from memmachine.bootstrap import build_key_store
    from memmachine_server.cli_common import settings_problem as _settings_problem

    try:
        settings = Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
        store = build_key_store(settings)
    except MemMachineError as exc:
        return _fail(exc.message)
    except ValidationError as exc:
        return _fail(_settings_problem(exc))

    async def main() -> int:
        try:
            await store.start()
            return await action(args, store)
        finally:
            await store.close()

    try:
        return asyncio.run(main())
    except MemMachineError as exc:
        return _fail(exc.message)


async def _create(args: argparse.Namespace, store: KeyStore) -> int:
    permissions = ["read"] if args.read_only else ["read", "write"]
    if args.admin:
        permissions.append("admin")
    if args.rate_limit is not None and args.rate_limit < 0:
        return _fail("--rate-limit must be 0 (unlimited) or more")
    try:
        issued = issue_key(
            args.tenant,
            name=args.name,
            permissions=permissions,
            rate_limit_per_minute=args.rate_limit,
        )
    except ValidationError as exc:
        problem = exc.errors()[0]
        field = "--" + str(problem["loc"][0]).replace("_", "-") if problem["loc"] else "input"
        if field == "--tenant":
            return _fail(
                "--tenant must be 1-128 characters of letters, digits and . _ @ + - = # ~ |"
            )
        return _fail(f"{field}: {problem['msg']}")
    key = await store.create(issued.record, issued.secret_hash)
    print(f"id:          {key.key_id}")
    print(f"tenant:      {key.tenant}")
    if key.name:
        print(f"name:        {key.name}")
    print(f"permissions: {','.join(key.permissions)}")
    print(f"rate limit:  {_limit(key)}")
    print("the key (shown only now; send it as `Authorization: Bearer <key>`):")
    print(issued.token)
    return 0


async def _list(args: argparse.Namespace, store: KeyStore) -> int:
    keys = await store.list_keys(args.tenant)
    rows = [("ID", "TENANT", "NAME", "PERMISSIONS", "RATE LIMIT", "CREATED", "REVOKED")]
    for key in keys:
        rows.append(
            (
                key.key_id,
                key.tenant,
                key.name or "-",
                ",".join(key.permissions),
                _limit(key),
                key.created_at.strftime("%Y-%m-%d %H:%M:%SZ"),
                key.revoked_at.strftime("%Y-%m-%d %H:%M:%SZ") if key.revoked_at else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


async def _revoke(args: argparse.Namespace, store: KeyStore) -> int:
    key = await store.revoke(args.key_id)
    assert key.revoked_at is not None
    print(f"revoked {key.key_id} (tenant {key.tenant}) at {key.revoked_at:%Y-%m-%d %H:%M:%SZ}")
    return 0


def _limit(key: ApiKey) -> str:
    if key.rate_limit_per_minute is None:
        return "default"
    return "unlimited" if key.rate_limit_per_minute == 0 else f"{key.rate_limit_per_minute}/min"


def _fail(message: str) -> int:
    print(f"memmachine keys: {message}", file=sys.stderr)
    return 1
