"""Agent state in a SQLite database (aiosqlite), one row per (scope, name).

Table ``agent_state``: the seven scope fields (``''`` stands for an unset agent, session or
group id, which no real id can be), ``name``, ``revision``, ``envelope`` (JSON text) and
``updated_at``; the primary key is the scope fields plus ``name``. Each write is one
``BEGIN IMMEDIATE`` transaction that reads the revision, compares it and writes, so writers
in other processes on the same file are serialised by SQLite's lock (they wait up to
``busy_timeout_seconds``). WAL mode lets readers go on during a write.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from pathlib import Path

import aiosqlite

from memmachine.adapters.json_state_backend import JsonStateBackend
from memmachine.errors import StoreError, StoreUnavailableError
from memmachine.models import Scope, utc_now
from memmachine.ports import (
    StateRecord,
    StoredState,
    record_key,
    scope_fields,
    scope_of_key,
    session_of,
    sorted_records,
    stale_revision,
    stored_record,
)

__all__ = ["SQLiteStateBackend"]

_STORE = "state"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_state (
    tenant TEXT NOT NULL,
    org_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    group_id TEXT NOT NULL,
    name TEXT NOT NULL,
    revision INTEGER NOT NULL,
    envelope TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, org_id, project_id, user_id, agent_id, session_id, group_id, name)
)
"""
# Constant statements; every value is a parameter.
_SELECT_SCOPES = (
    "SELECT tenant, org_id, project_id, user_id, agent_id, session_id, group_id FROM agent_state"
    " WHERE name = ? ORDER BY tenant, org_id, project_id, user_id, agent_id, session_id, group_id"
)
_SELECT = (
    "SELECT revision, envelope FROM agent_state WHERE tenant = ? AND org_id = ? AND"
    " project_id = ? AND user_id = ? AND agent_id = ? AND session_id = ? AND group_id = ?"
    " AND name = ?"
)
_SELECT_REVISION = (
    "SELECT revision FROM agent_state WHERE tenant = ? AND org_id = ? AND project_id = ?"
    " AND user_id = ? AND agent_id = ? AND session_id = ? AND group_id = ? AND name = ?"
)
_INSERT = (
    "INSERT INTO agent_state (tenant, org_id, project_id, user_id, agent_id, session_id,"
    " group_id, name, revision, envelope, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPDATE = (
    "UPDATE agent_state SET revision = ?, envelope = ?, updated_at = ? WHERE tenant = ? AND"
    " org_id = ? AND project_id = ? AND user_id = ? AND agent_id = ? AND session_id = ? AND"
    " group_id = ? AND name = ?"
)
_DELETE = (
    "DELETE FROM agent_state WHERE tenant = ? AND org_id = ? AND project_id = ? AND"
    " user_id = ? AND agent_id = ? AND session_id = ? AND group_id = ? AND name = ?"
)
_LIST_USER = (
    "SELECT agent_id, session_id, group_id, name, revision, envelope FROM agent_state"
    " WHERE tenant = ? AND org_id = ? AND project_id = ? AND user_id = ?"
)
_DELETE_USER = (
    "DELETE FROM agent_state WHERE tenant = ? AND org_id = ? AND project_id = ? AND user_id = ?"
)
_DELETE_SESSION = _DELETE_USER + " AND session_id = ?"


class SQLiteStateBackend(JsonStateBackend):
    """A :class:`~memmachine.ports.StateBackend` on a SQLite file (``:memory:`` works
    too, for one backend object)."""

    name = _STORE
    kind = "sqlite"

    def __init__(self, path: str | Path, *, busy_timeout_seconds: float = 30.0) -> None:
        self.path = path if str(path) == ":memory:" else Path(path).expanduser()
        self._busy_ms = int(busy_timeout_seconds * 1000)
        self._db: aiosqlite.Connection | None = None
        # One connection: its transactions must not interleave between coroutines.
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        if self._db is not None:
            return
        try:
            if isinstance(self.path, Path):
                self.path.parent.mkdir(parents=True, exist_ok=True)
            db = await aiosqlite.connect(str(self.path), isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailableError(
                f"the SQLite state database cannot be opened: {_describe(exc)}", _STORE
            ) from exc
        try:
            await db.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            await db.execute("PRAGMA journal_mode = WAL")
            # A deleted record is overwritten with zeros, not left in free pages.
            await db.execute("PRAGMA secure_delete = ON")
            await db.execute(_SCHEMA)
        except sqlite3.Error as exc:
            await db.close()
            raise StoreUnavailableError(
                f"the SQLite state database cannot be prepared: {_describe(exc)}", _STORE
            ) from exc
        self._db = db

    async def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await db.close()

    def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreUnavailableError("the SQLite state backend is not started", _STORE)
        return self._db

    async def get(self, scope: Scope, name: str) -> StoredState | None:
        db = self._conn()
        async with self._lock:
            try:
                async with db.execute(_SELECT, record_key(scope, name)) as cursor:
                    row = await cursor.fetchone()
            except sqlite3.Error as exc:
                raise StoreError(f"reading state failed: {_describe(exc)}", _STORE) from exc
        if row is None:
            return None
        try:
            envelope = json.loads(row[1])
        except ValueError as exc:
            raise StoreError(f"the stored {name} state is not JSON", _STORE) from exc
        return StoredState(envelope=envelope, revision=int(row[0]))

    async def _put_text(
        self, scope: Scope, name: str, text: str, expected_revision: int | None
    ) -> int:
        key = record_key(scope, name)
        db = self._conn()
        async with self._lock:
            try:
                await db.execute("BEGIN IMMEDIATE")
                try:
                    async with db.execute(_SELECT_REVISION, key) as cursor:
                        row = await cursor.fetchone()
                    current = int(row[0]) if row is not None else 0
                    if expected_revision is not None and expected_revision != current:
                        raise stale_revision(name, expected_revision, current)
                    revision = current + 1
                    now = utc_now().isoformat()
                    if row is None:
                        await db.execute(_INSERT, (*key, revision, text, now))
                    else:
                        await db.execute(_UPDATE, (revision, text, now, *key))
                    await db.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        await db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise StoreError(f"writing state failed: {_describe(exc)}", _STORE) from exc
        return revision

    async def delete(self, scope: Scope, name: str) -> bool:
        return await self._delete(_DELETE, record_key(scope, name)) > 0

    async def delete_user(self, scope: Scope) -> int:
        return await self._delete(_DELETE_USER, scope_fields(scope)[:4])

    async def scopes_holding(self, name: str) -> list[Scope]:
        """The scopes of the rows named ``name``, in key order."""
        db = self._conn()
        async with self._lock:
            try:
                async with db.execute(_SELECT_SCOPES, (name,)) as cursor:
                    rows = await cursor.fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"listing state failed: {_describe(exc)}", _STORE) from exc
        return [scope_of_key(tuple(row)) for row in rows]

    async def list_user(self, scope: Scope) -> list[StateRecord]:
        user = scope.user_scope()
        db = self._conn()
        async with self._lock:
            try:
                async with db.execute(_LIST_USER, scope_fields(user)[:4]) as cursor:
                    rows = await cursor.fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"listing state failed: {_describe(exc)}", _STORE) from exc
        found = [
            stored_record(user, (agent, session, group, name), revision, text, _STORE)
            for agent, session, group, name, revision, text in rows
        ]
        return sorted_records(found)

    async def delete_session(self, scope: Scope) -> int:
        return await self._delete(_DELETE_SESSION, (*scope_fields(scope)[:4], session_of(scope)))

    async def _delete(self, sql: str, parameters: tuple[str, ...]) -> int:
        db = self._conn()
        async with self._lock:
            try:
                cursor = await db.execute(sql, parameters)
                count = cursor.rowcount
                await cursor.close()
                if count > 0:
                    # The write-ahead log still holds the record as it was: fold it into the
                    # (zeroed) file and empty it. A busy reader only postpones this.
                    await db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:
                raise StoreError(f"deleting state failed: {_describe(exc)}", _STORE) from exc
        return count


def _describe(exc: BaseException) -> str:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {message[:200]}" if message else type(exc).__name__
