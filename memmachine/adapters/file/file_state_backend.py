"""Agent state as JSON files, one per (scope, name), under a root directory.

Layout::

    {root}/{sha256(tenant, org, project, user)}/{sha256(agent, session, group, name)}.json
    {root}/{sha256(tenant, org, project, user)}/.lock

Directory and file names are hashes, so no id or name ever becomes a path component (an id
may be ``..``) and every name fits the file system's limits. Each file holds
``{"scope", "name", "revision", "envelope"}``; a read checks ``scope`` and ``name``.

Every operation on a user's records holds an exclusive ``flock`` on the user's ``.lock``,
which serialises writers across threads and processes on one machine (not over NFS). A write
goes to a temporary file that is fsynced and renamed over the record, so a crash leaves the
old record or the new one, never a torn file. ``delete_user`` removes the user's records and
leaves the (empty but for ``.lock``) directory behind.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memmachine.adapters.file.file_common import write_atomically
from memmachine.adapters.json_state_backend import JsonStateBackend
from memmachine.errors import StoreError
from memmachine.models import Scope
from memmachine.ports import (
    StateRecord,
    StoredState,
    record_key,
    scope_fields,
    session_of,
    sorted_records,
    stale_revision,
)

__all__ = ["FileStateBackend"]

_STORE = "state"


class FileStateBackend(JsonStateBackend):
    """A :class:`~memmachine.ports.StateBackend` on the local file system."""

    name = _STORE
    kind = "file"

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser()

    async def start(self) -> None:
        try:
            await asyncio.to_thread(self.root.mkdir, parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"the state directory {self.root} cannot be created: {exc.strerror}", _STORE
            ) from exc

    async def close(self) -> None:
        """Nothing is held open between calls."""

    async def get(self, scope: Scope, name: str) -> StoredState | None:
        return await asyncio.to_thread(self._get, scope, name)

    async def _put_text(
        self, scope: Scope, name: str, text: str, expected_revision: int | None
    ) -> int:
        return await asyncio.to_thread(self._put, scope, name, text, expected_revision)

    async def delete(self, scope: Scope, name: str) -> bool:
        return await asyncio.to_thread(self._delete, scope, name)

    async def delete_user(self, scope: Scope) -> int:
        return await asyncio.to_thread(self._delete_user, scope)

    async def scopes_holding(self, name: str) -> list[Scope]:
        return await asyncio.to_thread(self._scopes_holding, name)

    async def list_user(self, scope: Scope) -> list[StateRecord]:
        return await asyncio.to_thread(self._list_user, scope)

    async def delete_session(self, scope: Scope) -> int:
        session = session_of(scope)
        return await asyncio.to_thread(self._delete_user, scope, session)

    # ------------------------------------------------------------------ blocking parts

    def _scopes_holding(self, name: str) -> list[Scope]:
        """Every record file's scope when its name is ``name`` (a file is replaced by an
        atomic rename, so one read without the lock sees a whole record)."""
        found: list[Scope] = []
        for path in self.root.glob("*/*.json"):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                if record["name"] == name:
                    found.append(Scope.model_validate(record["scope"]))
            except FileNotFoundError:
                continue  # deleted meanwhile
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise StoreError(f"the state file {path.name} is corrupt", _STORE) from exc
        return sorted(found, key=lambda scope: record_key(scope, name))

    def _user_dir(self, scope: Scope) -> Path:
        return self.root / _digest(scope_fields(scope)[:4])

    def _path(self, scope: Scope, name: str) -> Path:
        return self._user_dir(scope) / f"{_digest([*scope_fields(scope)[4:], name])}.json"

    @contextmanager
    def _locked(self, scope: Scope, *, create: bool) -> Iterator[Path | None]:
        """The user's directory with its lock held; ``None`` when it does not exist and
        ``create`` is false."""
        directory = self._user_dir(scope)
        if not create and not directory.is_dir():
            yield None
            return
        try:
            directory.mkdir(parents=True, exist_ok=True)
            lock = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreError(f"the state directory is unusable: {exc.strerror}", _STORE) from exc
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield directory
        finally:
            os.close(lock)  # closing releases the lock

    def _read(self, path: Path, scope: Scope, name: str) -> tuple[int, dict[str, Any]] | None:
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"a state file cannot be read: {exc.strerror}", _STORE) from exc
        try:
            record = json.loads(raw)
            revision = record["revision"]
            envelope = record["envelope"]
            same = record["scope"] == scope.model_dump() and record["name"] == name
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"the state file {path.name} is corrupt", _STORE) from exc
        if not same:
            raise StoreError(f"the state file {path.name} belongs to another scope", _STORE)
        if not isinstance(revision, int) or not isinstance(envelope, dict):
            raise StoreError(f"the state file {path.name} is corrupt", _STORE)
        return revision, envelope

    def _get(self, scope: Scope, name: str) -> StoredState | None:
        with self._locked(scope, create=False) as directory:
            if directory is None:
                return None
            found = self._read(self._path(scope, name), scope, name)
        if found is None:
            return None
        return StoredState(envelope=found[1], revision=found[0])

    def _put(self, scope: Scope, name: str, envelope: str, expected: int | None) -> int:
        path = self._path(scope, name)
        with self._locked(scope, create=True) as directory:
            assert directory is not None
            found = self._read(path, scope, name)
            current = found[0] if found is not None else 0
            if expected is not None and expected != current:
                raise stale_revision(name, expected, current)
            revision = current + 1
            record = (
                f'{{"scope": {json.dumps(scope.model_dump())}, "name": {json.dumps(name)}, '
                f'"revision": {revision}, "envelope": {envelope}}}'
            )
            _write_atomically(directory, path, record)
            return revision

    def _delete(self, scope: Scope, name: str) -> bool:
        with self._locked(scope, create=False) as directory:
            if directory is None:
                return False
            try:
                self._path(scope, name).unlink()
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise StoreError(f"a state file cannot be removed: {exc.strerror}", _STORE) from exc
            return True

    def _list_user(self, scope: Scope) -> list[StateRecord]:
        user = scope.user_scope()
        found: list[StateRecord] = []
        with self._locked(user, create=False) as directory:
            if directory is None:
                return []
            for path in directory.glob("*.json"):
                try:
                    record = json.loads(path.read_text(encoding="utf-8"))
                    owner = Scope.model_validate(record["scope"])
                    name = record["name"]
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    message = f"a state file cannot be read: {exc.strerror}"
                    raise StoreError(message, _STORE) from exc
                except (ValueError, KeyError, TypeError) as exc:
                    raise StoreError(f"the state file {path.name} is corrupt", _STORE) from exc
                if owner.user_scope() != user:
                    raise StoreError(f"the state file {path.name} belongs to another user", _STORE)
                read = self._read(path, owner, name)
                if read is not None:
                    found.append(StateRecord(owner, name, read[1], read[0]))
        return sorted_records(found)

    def _delete_user(self, scope: Scope, session: str | None = None) -> int:
        """Remove the user's records, or (``session``) those of that session: file names
        are hashes, so each file's ``scope`` is read to find them."""
        with self._locked(scope, create=False) as directory:
            if directory is None:
                return 0
            removed = 0
            try:
                for path in directory.glob("*.json"):
                    if session is not None and _session_of_file(path) != session:
                        continue
                    path.unlink()
                    removed += 1
            except OSError as exc:
                raise StoreError(f"a state file cannot be removed: {exc.strerror}", _STORE) from exc
            return removed


def _session_of_file(path: Path) -> str | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        session: str | None = record["scope"]["session_id"]
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"the state file {path.name} is corrupt", _STORE) from exc
    return session


def _digest(parts: Any) -> str:
    return hashlib.sha256(json.dumps(list(parts)).encode()).hexdigest()


def _write_atomically(directory: Path, path: Path, text: str) -> None:
    try:
        write_atomically(directory / path.name, text.encode("utf-8"))
    except OSError as exc:
        raise StoreError(f"a state file cannot be written: {exc.strerror}", _STORE) from exc
