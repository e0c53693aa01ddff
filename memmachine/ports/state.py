"""The state port: versioned JSON records per scope and name, with optimistic revisions
(typed agent state and custom memory types keep their records through it)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from memmachine.errors import ConflictError, InvalidInputError, StoreError
from memmachine.models import Scope

__all__ = [
    "STATE_NAME_PATTERN",
    "StateBackend",
    "StateRecord",
    "StoredState",
    "check_expected_revision",
    "record_key",
    "scope_fields",
    "scope_of_key",
    "session_of",
    "sorted_records",
    "stale_revision",
    "stored_record",
]

#: A state name: letters, digits, ``_ . - < >`` (so a qualified class name such as
#: ``test_trip.<locals>.TripState`` fits), at most 200 characters, no spaces or colons.
STATE_NAME_PATTERN = r"^[\w.\-<>]{1,200}$"


@dataclass(frozen=True)
class StoredState:
    """What a backend holds for one (scope, name): the envelope and its revision (>= 1)."""

    envelope: dict[str, Any]
    revision: int


@dataclass(frozen=True)
class StateRecord:
    """One record of a user as :meth:`StateBackend.list_user` lists it: the full scope it
    is kept under, its name, envelope and revision."""

    scope: Scope
    name: str
    envelope: dict[str, Any]
    revision: int


@runtime_checkable
class StateBackend(Protocol):
    """Keeps agent-state envelopes, one per (scope, name), with optimistic revisions.

    Contract:

    * A record is identified by every field of the scope — ``tenant``, ``org_id``,
      ``project_id``, ``user_id``, ``agent_id``, ``session_id``, ``group_id`` (``None`` is a
      value of its own, distinct from every id) — and by ``name`` (matching
      :data:`STATE_NAME_PATTERN`). Two scopes that differ in any field never see each
      other's records.
    * ``get(scope, name)`` returns the record or ``None`` when nothing is stored. The
      envelope comes back equal to the one written (a JSON object: the backend may
      serialise it but must not change a value).
    * ``put(scope, name, envelope, expected_revision=None)`` stores the envelope and returns
      the new revision: 1 for a new record, the previous revision plus one otherwise. With
      ``expected_revision`` the write happens only when the current revision equals it
      (0 = no record may exist); otherwise nothing changes and ``ConflictError`` carries the
      current revision in ``current_version``. Concurrent writers with the same expected
      revision: exactly one wins.
    * ``delete(scope, name)`` removes the record and returns whether there was one.
    * ``delete_user(scope)`` removes every record of the scope's user (tenant, org, project
      and user match; agent, session, group and name are ignored) and returns how many were
      removed (records, unless the backend's docstring names another unit).
    * ``scopes_holding(name)`` returns the scope (all seven fields) of every record named
      ``name``, of every tenant, ordered by :func:`record_key`. It is the one read that
      spans tenants: the retention sweep's, to erase expired custom records wherever they
      are. It returns scopes only, never an envelope.
    * ``list_user(scope)`` returns every record of the scope's user (tenant, org, project
      and user match; agent, session, group and name are ignored) as :class:`StateRecord`
      with the scope and name it was written under, ordered by :func:`record_key`; nothing
      of another user, org, project or tenant.
    * ``delete_session(scope)`` removes every record of the scope's user and session
      (``scope.session_id`` is required; agent, group and name are ignored) and returns how
      many were removed (same unit as ``delete_user``).
    * Driver failures raise ``StoreError`` (``StoreUnavailableError`` when the backend
      cannot be reached) with ``store == name`` of the backend; never a driver exception.
    * ``start()`` prepares the backend (idempotent) and ``close()`` releases it.
    """

    name: str
    kind: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def get(self, scope: Scope, name: str) -> StoredState | None: ...
    async def put(
        self,
        scope: Scope,
        name: str,
        envelope: dict[str, Any],
        *,
        expected_revision: int | None = None,
    ) -> int: ...
    async def delete(self, scope: Scope, name: str) -> bool: ...
    async def delete_user(self, scope: Scope) -> int: ...
    async def scopes_holding(self, name: str) -> list[Scope]: ...
    async def list_user(self, scope: Scope) -> list[StateRecord]: ...
    async def delete_session(self, scope: Scope) -> int: ...


def scope_fields(scope: Scope) -> tuple[str, str, str, str, str | None, str | None, str | None]:
    """The seven fields that identify a scope, in a fixed order (for keys and rows)."""
    return (
        scope.tenant,
        scope.org_id,
        scope.project_id,
        scope.user_id,
        scope.agent_id,
        scope.session_id,
        scope.group_id,
    )


def scope_of_key(key: Sequence[str]) -> Scope:
    """The scope of a record's :func:`record_key` (its first seven fields)."""
    tenant, org_id, project_id, user_id, agent_id, session_id, group_id = key[:7]
    return Scope(
        tenant=tenant,
        org_id=org_id,
        project_id=project_id,
        user_id=user_id,
        agent_id=agent_id or None,
        session_id=session_id or None,
        group_id=group_id or None,
    )


def session_of(scope: Scope) -> str:
    """``scope.session_id``; ``InvalidInputError`` naming it when unset."""
    if scope.session_id is None:
        raise InvalidInputError("a session_id is required", field="session_id")
    return scope.session_id


def record_key(scope: Scope, name: str) -> tuple[str, ...]:
    """A record's identity as text: the seven scope fields (``""`` for an unset agent,
    session or group id, which no id can be), then ``name``."""
    return (*(value or "" for value in scope_fields(scope)), name)


def stored_record(
    user: Scope, tail: tuple[str, str, str, str], revision: object, text: str, store: str
) -> StateRecord:
    """A record a backend kept as text: ``tail`` is the end of its :func:`record_key`
    (agent, session and group id, ``""`` when unset, then the name); ``StoreError`` naming
    ``store`` when the revision or the envelope JSON is unreadable."""
    agent_id, session_id, group_id, name = tail
    owner = user.model_copy(
        update={
            "agent_id": agent_id or None,
            "session_id": session_id or None,
            "group_id": group_id or None,
        }
    )
    try:
        envelope = json.loads(text)
        number = int(str(revision))
    except ValueError as exc:
        raise StoreError(f"the stored {name} state is corrupt", store) from exc
    if not isinstance(envelope, dict):
        raise StoreError(f"the stored {name} state is corrupt", store)
    return StateRecord(owner, name, envelope, number)


def sorted_records(records: list[StateRecord]) -> list[StateRecord]:
    """``records`` in the order :meth:`StateBackend.list_user` returns them."""
    return sorted(records, key=lambda record: record_key(record.scope, record.name))


def check_expected_revision(expected_revision: int | None) -> None:
    """``InvalidInputError`` for a negative (or non-integer) expected revision."""
    if expected_revision is not None and (
        isinstance(expected_revision, bool)
        or not isinstance(expected_revision, int)
        or expected_revision < 0
    ):
        raise InvalidInputError(
            "expected_revision must be an integer >= 0", field="expected_revision"
        )


def stale_revision(name: str, expected: int, current: int) -> ConflictError:
    """The ``ConflictError`` every backend raises for a stale expected revision."""
    return ConflictError(
        f"state {name!r} is at revision {current}, not {expected}: it changed since it was "
        "loaded; load it again and reapply the change",
        current_version=current,
    )
