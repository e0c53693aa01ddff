"""Typed agent state kept in a session's working memory (the ``working`` state backend)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from memmachine.config import SafetySettings
from memmachine.errors import ConflictError, InvalidInputError, StateSchemaError, StoreError
from memmachine.memory.agent_state import difference
from memmachine.models import ProjectScope, Scope, WorkingMemory
from memmachine.ports import (
    StateRecord,
    StoredState,
    WorkingMemoryStore,
    check_expected_revision,
    record_key,
    session_of,
    sorted_records,
    stale_revision,
)
from memmachine.safety.pii import Redactor

__all__ = ["Sessions", "WorkingMemoryStateBackend"]


class Sessions(Protocol):
    """The working memory the backend keeps its records in (a
    :class:`~memmachine.manager.MemoryManager` is one)."""

    @property
    def safety(self) -> SafetySettings: ...
    @property
    def working(self) -> WorkingMemoryStore: ...

    async def get_working(self, scope: Scope, *, last_n: int | None = None) -> WorkingMemory: ...

    async def put_working(
        self,
        scope: Scope,
        *,
        state: dict[str, Any] | None = None,
        expected_version: int | None = None,
    ) -> WorkingMemory: ...


class WorkingMemoryStateBackend:
    """Agent state inside a session's working memory, through the manager.

    The records of a session live in its working-memory ``state`` under ``"agent_state"``:
    ``{"<name>[ agent=<id>][ group=<id>]": {"schema", "version", "data", "revision"}}``, so
    ``GET /v1/sessions/{sid}/working`` shows them and every other key of the session state is
    kept as it is. Each write is a compare-and-set on the session's version
    (``MemoryManager.put_working(expected_version=...)``), retried when something else
    (an appended message) changed the session meanwhile; revisions are per record.

    Follows the :class:`StateBackend` contract, with what working memory implies:
    ``scope.session_id`` is required (``InvalidInputError`` naming ``session_id``); records
    expire with the session (``MEMMACHINE_WORKING_TTL_SECONDS`` after its last write) and are
    limited to ``max_state_bytes`` per session (``PayloadTooLargeError``); forgetting the
    session or the user removes them, and so ``delete_user`` here forgets the user's whole
    working memory. With PII redaction on, a state holding a value the manager would redact
    is refused (``InvalidInputError`` naming the field) rather than stored altered.
    """

    name = "state"
    kind = "working-memory"
    #: The key of the session state that holds the records.
    STATE_KEY = "agent_state"

    def __init__(self, manager: Sessions, *, attempts: int = 8) -> None:
        self._manager = manager
        self._attempts = attempts

    async def start(self) -> None:
        """Nothing to do: the manager owns the working-memory store."""

    async def close(self) -> None:
        """Nothing to release: the manager owns the working-memory store."""

    @staticmethod
    def entry_key(scope: Scope, name: str) -> str:
        key = name
        if scope.agent_id is not None:
            key += f" agent={scope.agent_id}"
        if scope.group_id is not None:
            key += f" group={scope.group_id}"
        return key

    async def get(self, scope: Scope, name: str) -> StoredState | None:
        memory = await self._manager.get_working(scope, last_n=0)
        entry = _entries(memory.state).get(self.entry_key(scope, name))
        if entry is None:
            return None
        revision, envelope = _split_entry(entry, name)
        return StoredState(envelope=envelope, revision=revision)

    async def put(
        self,
        scope: Scope,
        name: str,
        envelope: dict[str, Any],
        *,
        expected_revision: int | None = None,
    ) -> int:
        check_expected_revision(expected_revision)
        self._refuse_redactable(envelope)
        key = self.entry_key(scope, name)
        for _ in range(self._attempts):
            memory = await self._manager.get_working(scope, last_n=0)
            entries = _entries(memory.state)
            current = _split_entry(entries[key], name)[0] if key in entries else 0
            if expected_revision is not None and expected_revision != current:
                raise stale_revision(name, expected_revision, current)
            revision = current + 1
            state = {
                **memory.state,
                self.STATE_KEY: {**entries, key: {**envelope, "revision": revision}},
            }
            try:
                await self._manager.put_working(scope, state=state, expected_version=memory.version)
            except StateSchemaError:
                raise
            except ConflictError:
                continue  # the session changed under us: re-read and check again
            return revision
        raise ConflictError(
            f"the working memory of session {scope.session_id!r} kept changing; "
            f"state {name!r} was not saved"
        )

    async def delete(self, scope: Scope, name: str) -> bool:
        key = self.entry_key(scope, name)
        for _ in range(self._attempts):
            memory = await self._manager.get_working(scope, last_n=0)
            entries = _entries(memory.state)
            if key not in entries:
                return False
            remaining = {k: v for k, v in entries.items() if k != key}
            state = {k: v for k, v in memory.state.items() if k != self.STATE_KEY}
            if remaining:
                state[self.STATE_KEY] = remaining
            try:
                await self._manager.put_working(scope, state=state, expected_version=memory.version)
            except StateSchemaError:
                raise
            except ConflictError:
                continue
            return True
        raise ConflictError(
            f"the working memory of session {scope.session_id!r} kept changing; "
            f"state {name!r} was not deleted"
        )

    async def delete_user(self, scope: Scope) -> int:
        """Forget the user's whole working memory (every session, with its states);
        returns how many sessions were removed."""
        return await self._manager.working.delete_user(scope.user_scope())

    async def scopes_holding(self, name: str) -> list[Scope]:
        """Every live session's records named ``name``, found through the working store's
        projects, users and sessions (one read of each session's state)."""
        store = self._manager.working
        found: list[Scope] = []
        after: ProjectScope | None = None
        while projects := await store.list_projects(after=after):
            after = projects[-1]
            for project in projects:
                user_after: str | None = None
                while users := await store.list_users(project, after=user_after):
                    user_after = users[-1].user_id
                    for user in users:
                        for session in await store.list_sessions(project.user(user.user_id)):
                            found += _named(session.scope, session.state, name)
        return sorted(found, key=lambda scope: record_key(scope, name))

    async def list_user(self, scope: Scope) -> list[StateRecord]:
        """Every record in the user's live sessions (their working-memory state)."""
        found: list[StateRecord] = []
        for memory in await self._manager.working.list_sessions(scope.user_scope()):
            for key, entry in _entries(memory.state).items():
                name, *ids = key.split(" ")
                narrowing = dict(part.split("=", 1) for part in ids if "=" in part)
                owner = memory.scope.model_copy(
                    update={
                        "agent_id": narrowing.get("agent"),
                        "group_id": narrowing.get("group"),
                    }
                )
                revision, envelope = _split_entry(entry, name)
                found.append(StateRecord(owner, name, envelope, revision))
        return sorted_records(found)

    async def delete_session(self, scope: Scope) -> int:
        """Forget the session's working memory (with its states); 0 or 1 sessions."""
        return await self._manager.working.delete(scope.for_session(session_of(scope)))

    def _refuse_redactable(self, envelope: Mapping[str, Any]) -> None:
        safety = self._manager.safety
        if not safety.redact_pii:
            return
        data = envelope.get("data")
        redacted = Redactor(safety.pii_kinds).redact_json(data)
        if not redacted.found:
            return
        path = difference(data, redacted.value, "") or "state"
        kinds = ", ".join(sorted(redacted.found))
        raise InvalidInputError(
            f"{path} holds what PII redaction removes ({kinds}); working memory would store it "
            "altered. Keep such values out of the state, or use a file, SQLite or Redis "
            "state backend",
            field=path,
        )


def _entries(state: Mapping[str, Any]) -> dict[str, Any]:
    entries = state.get(WorkingMemoryStateBackend.STATE_KEY)
    if entries is None:
        return {}
    if not isinstance(entries, dict):
        raise StoreError(
            f"the session's working-memory state holds a non-object under "
            f"{WorkingMemoryStateBackend.STATE_KEY!r}",
            store=WorkingMemoryStateBackend.name,
        )
    return entries


def _split_entry(entry: Any, name: str) -> tuple[int, dict[str, Any]]:
    revision = entry.get("revision") if isinstance(entry, dict) else None
    if not isinstance(revision, int) or isinstance(revision, bool) or revision < 1:
        raise StateSchemaError(
            f"the {name} state in working memory has no valid revision",
            schema=name,
            stored_version=None,
        )
    return revision, {k: v for k, v in entry.items() if k != "revision"}


# ---------------------------------------------------------------------- helpers


def _named(session: Scope, state: Mapping[str, Any], name: str) -> list[Scope]:
    """The scopes of the records named ``name`` in one session's state (their entry keys
    read back as :meth:`WorkingMemoryStateBackend.entry_key` wrote them)."""
    found: list[Scope] = []
    for key in _entries(state):
        head, *narrowing = key.split(" ")
        if head != name:
            continue
        ids = dict(part.split("=", 1) for part in narrowing if "=" in part)
        agent, group = ids.get("agent"), ids.get("group")
        found.append(session.model_copy(update={"agent_id": agent, "group_id": group}))
    return found
