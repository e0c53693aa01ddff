"""Typed agent state: a pydantic model per agent, loaded and saved per scope.

An agent declares its state as a pydantic model and keeps one instance of it per
:class:`~memmachine.models.Scope` (tenant, org, project, user, agent, session, group)::

    states = AgentStateStore(TripState, backend, schema_version=2, migrations={1: v1_to_v2})
    state = await states.load_state(scope)          # a validated TripState
    state.stops.append(Stop(city="Porto"))
    await states.save_state(scope, state)
    async with states.session(scope) as state:      # saved on exit when it changed
        state.budget = Decimal("950.00")

What is stored is a versioned envelope ``{"schema": name, "version": n, "data": {...}}``
where ``data`` is the model in pydantic's JSON mode. ``name`` defaults to the model's
qualified class name (so two state types never share a record) and ``version`` is the
store's ``schema_version``. A :class:`StateBackend` keeps envelopes and a per-record
``revision`` for optimistic concurrency; backends are files, SQLite, Redis, or the session's
working memory (:class:`WorkingMemoryStateBackend`, defined here because it only needs the
manager).

Round trips are exact: :meth:`AgentStateStore.save_state` refuses (``InvalidInputError``
naming the field) a state whose JSON form does not read back equal to it, e.g. a float NaN,
so whatever was saved loads back equal: timezone-aware datetimes keep their instant and UTC
offset (a ``zoneinfo`` zone reads back as the fixed offset it had), dates, ``Decimal``
digits, UUIDs, enums, nested models and containers of them, ``None`` in optional fields.

Loading an older ``version`` runs the registered migrations one step at a time
(``migrations[n]`` turns version-``n`` data into version ``n + 1``) and validates the
result. A newer version, a missing or failing step, a record of another schema, or data
that does not validate raises :class:`~memmachine.errors.StateSchemaError` naming the model,
the stored version and the failing field; the stored record is never reset or rewritten by
a load.
"""

from __future__ import annotations

import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast, runtime_checkable

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from memmachine.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    StateSchemaError,
    StoreError,
)
from memmachine.models import Scope
from memmachine.safety.pii import Redactor

if TYPE_CHECKING:
    from memmachine.manager import MemoryManager

__all__ = [
    "STATE_NAME_PATTERN",
    "AgentStateStore",
    "JsonStateBackend",
    "LoadedState",
    "Migration",
    "StateBackend",
    "StateHandle",
    "StoredState",
    "WorkingMemoryStateBackend",
    "check_expected_revision",
    "record_key",
    "scope_fields",
    "stale_revision",
]

StateT = TypeVar("StateT", bound=BaseModel)
T = TypeVar("T")

#: A state name: letters, digits, ``_ . - < >`` (so a qualified class name such as
#: ``test_trip.<locals>.TripState`` fits), at most 200 characters, no spaces or colons.
STATE_NAME_PATTERN = r"^[\w.\-<>]{1,200}$"
_NAME = re.compile(STATE_NAME_PATTERN)

#: Turns the ``data`` of one schema version into the ``data`` of the next.
Migration = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class StoredState:
    """What a backend holds for one (scope, name): the envelope and its revision (>= 1)."""

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


def record_key(scope: Scope, name: str) -> tuple[str, ...]:
    """A record's identity as text: the seven scope fields (``""`` for an unset agent,
    session or group id, which no id can be), then ``name``."""
    return (*(value or "" for value in scope_fields(scope)), name)


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


class JsonStateBackend(ABC):
    """The shared front of the :class:`StateBackend` implementations that keep an envelope
    as JSON text (files, SQLite, Redis).

    :meth:`put` refuses a negative or non-integer ``expected_revision``
    (``InvalidInputError``), writes the envelope as JSON (non-ASCII kept as it is, no NaN or
    infinity) and hands the text to :meth:`_put_text`, which stores it under the
    :class:`StateBackend` contract's revision rules.
    """

    async def put(
        self,
        scope: Scope,
        name: str,
        envelope: dict[str, Any],
        *,
        expected_revision: int | None = None,
    ) -> int:
        check_expected_revision(expected_revision)
        text = json.dumps(envelope, ensure_ascii=False, allow_nan=False)
        return await self._put_text(scope, name, text, expected_revision)

    @abstractmethod
    async def _put_text(
        self, scope: Scope, name: str, text: str, expected_revision: int | None
    ) -> int:
        """Store ``text`` (the envelope's JSON) as the record; the new revision, or
        :func:`stale_revision` when ``expected_revision`` is given and not current."""


@dataclass
class LoadedState(Generic[StateT]):
    """A loaded state with the revision it was read at (0 = nothing was stored: the state
    is the model's default) and the JSON form it had, to tell whether it changed since."""

    state: StateT
    revision: int
    snapshot: dict[str, Any]

    def changed(self) -> bool:
        """Whether the state's JSON form differs from the one it was loaded with."""
        return _dump_quietly(self.state) != self.snapshot


class AgentStateStore(Generic[StateT]):
    """Loads and saves one pydantic model as the state of a scope, through a backend.

    ``name`` (default: the model's ``__qualname__``) keeps state types apart in a backend;
    ``schema_version`` (>= 1) is written into every envelope; ``migrations[n]`` upgrades
    the data of version ``n`` to ``n + 1`` on load (see the module docstring).
    """

    def __init__(
        self,
        model: type[StateT],
        backend: StateBackend,
        *,
        name: str | None = None,
        schema_version: int = 1,
        migrations: Mapping[int, Migration] | None = None,
    ) -> None:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise InvalidInputError("the state model must be a pydantic model", field="model")
        chosen = name if name is not None else model.__qualname__
        if not _NAME.match(chosen):
            raise InvalidInputError(
                f"state name {chosen!r} must match {STATE_NAME_PATTERN}", field="name"
            )
        if (
            not isinstance(schema_version, int)
            or isinstance(schema_version, bool)
            or schema_version < 1
        ):
            raise InvalidInputError(
                "schema_version must be an integer >= 1", field="schema_version"
            )
        steps = dict(migrations or {})
        for step in steps:
            if not 1 <= step < schema_version:
                raise InvalidInputError(
                    f"migration {step} → {step + 1} is outside versions 1..{schema_version}",
                    field="migrations",
                )
        self.model = model
        self.backend = backend
        self.name = chosen
        self.schema_version = schema_version
        self.migrations: dict[int, Migration] = steps

    # ------------------------------------------------------------------ load

    async def load(self, scope: Scope) -> LoadedState[StateT]:
        """The scope's state with its revision. Nothing stored: a default instance at
        revision 0 when the model can be built without arguments, else ``NotFoundError``
        naming the state and the scope. Unreadable records: ``StateSchemaError``."""
        stored = await self.backend.get(scope, self.name)
        if stored is None:
            try:
                state = self.model()
            except ValidationError:
                raise NotFoundError(
                    f"no {self.name} state stored for {_describe(scope)} (and "
                    f"{self.model.__name__} has required fields, so there is no default)"
                ) from None
            return LoadedState(state, 0, _dump_quietly(state))
        state = self._read(stored.envelope)
        return LoadedState(state, stored.revision, _dump_quietly(state))

    async def load_state(self, scope: Scope) -> StateT:
        """The scope's validated state (see :meth:`load`)."""
        return (await self.load(scope)).state

    def _read(self, envelope: Mapping[str, Any]) -> StateT:
        """Envelope → validated model, migrating older versions."""
        version = envelope.get("version") if isinstance(envelope, Mapping) else None
        if (
            not isinstance(envelope, Mapping)
            or not isinstance(version, int)
            or isinstance(version, bool)
            or version < 1
            or not isinstance(envelope.get("data"), dict)
        ):
            raise StateSchemaError(
                f"the stored {self.name} state is not a versioned envelope "
                '{"schema", "version", "data"}',
                schema=self.name,
                stored_version=version if isinstance(version, int) else None,
            )
        schema = envelope.get("schema")
        if schema != self.name:
            raise StateSchemaError(
                f"the stored state is of schema {schema!r}, not {self.name!r}",
                schema=self.name,
                stored_version=version,
            )
        if version > self.schema_version:
            raise StateSchemaError(
                f"the stored {self.name} state is at schema version {version}, newer than "
                f"this code's {self.schema_version}; upgrade the code that reads it",
                schema=self.name,
                stored_version=version,
            )
        data: dict[str, Any] = dict(envelope["data"])
        for step in range(version, self.schema_version):
            migrate = self.migrations.get(step)
            if migrate is None:
                raise StateSchemaError(
                    f"the stored {self.name} state is at schema version {version} and no "
                    f"migration from version {step} to {step + 1} is registered",
                    schema=self.name,
                    stored_version=version,
                )
            try:
                migrated = migrate(data)
            except Exception as exc:  # a user callback: any failure is reported the same way
                raise StateSchemaError(
                    f"migrating the stored {self.name} state from version {step} to "
                    f"{step + 1} failed: {type(exc).__name__}: {exc}",
                    schema=self.name,
                    stored_version=version,
                ) from exc
            if not isinstance(migrated, dict):
                raise StateSchemaError(
                    f"migration {step} → {step + 1} of {self.name} returned "
                    f"{type(migrated).__name__}, not a dict",
                    schema=self.name,
                    stored_version=version,
                )
            data = migrated
        try:
            return self.model.model_validate(data)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = _loc(error["loc"])
            raise StateSchemaError(
                f"the stored {self.name} state (schema version {version}) does not validate "
                f"as {self.model.__name__}: {field or 'state'}: {error['msg']}",
                schema=self.name,
                stored_version=version,
                field=field or None,
            ) from None

    # ------------------------------------------------------------------ save / delete

    def envelope(self, state: StateT) -> dict[str, Any]:
        """The envelope ``state`` is stored as; ``InvalidInputError`` naming the field when
        it is not this store's model, does not validate or would not read back equal."""
        if not isinstance(state, self.model):
            raise InvalidInputError(
                f"expected a {self.model.__name__}, got {type(state).__name__}", field="state"
            )
        try:
            data = state.model_dump(mode="json", round_trip=True, warnings=False)
        except PydanticSerializationError as exc:
            raise InvalidInputError(
                f"the {self.name} state cannot be written as JSON: {exc}", field="state"
            ) from None
        try:
            again = self.model.model_validate(data)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = _loc(error["loc"])
            raise InvalidInputError(
                f"the {self.name} state does not validate: {field or 'state'}: {error['msg']}",
                field=field or "state",
            ) from None
        differs = _difference(state, again, "")
        if differs is not None:
            raise InvalidInputError(
                f"the {self.name} state would not read back as saved: {differs or 'state'} "
                "(a value JSON cannot hold exactly)",
                field=differs or "state",
            )
        return {"schema": self.name, "version": self.schema_version, "data": data}

    async def save_state(
        self, scope: Scope, state: StateT, *, expected_revision: int | None = None
    ) -> int:
        """Store ``state`` for ``scope``; returns the new revision. With ``expected_revision``
        (0 = nothing may be stored yet) a concurrent change raises ``ConflictError`` and
        nothing is written. Invalid state: ``InvalidInputError`` naming the field."""
        check_expected_revision(expected_revision)
        envelope = self.envelope(state)
        return await self.backend.put(
            scope, self.name, envelope, expected_revision=expected_revision
        )

    async def save_if_changed(self, scope: Scope, loaded: LoadedState[StateT]) -> int:
        """Save ``loaded.state`` when it changed since it was loaded, only if nobody saved
        in between (``ConflictError`` otherwise); returns the revision it is stored at."""
        if not loaded.changed():
            return loaded.revision
        revision = await self.save_state(scope, loaded.state, expected_revision=loaded.revision)
        loaded.revision = revision
        loaded.snapshot = _dump_quietly(loaded.state)
        return revision

    async def delete_state(self, scope: Scope) -> bool:
        """Remove the scope's state; returns whether there was one."""
        return await self.backend.delete(scope, self.name)

    async def forget_user(self, scope: Scope) -> int:
        """Remove every state of the scope's user held by the backend (all names, agents,
        sessions); returns how many records were removed. See the backend for its reach."""
        return await self.backend.delete_user(scope)

    # ------------------------------------------------------------------ autosave

    @asynccontextmanager
    async def session(self, scope: Scope) -> AsyncIterator[StateT]:
        """Load the state, let the block change it in place, and save it on a normal exit
        when its JSON form changed. The save is optimistic: if another writer saved the
        scope's state since the load, ``ConflictError`` is raised and this change is not
        written. An exception inside the block saves nothing."""
        loaded = await self.load(scope)
        yield loaded.state
        await self.save_if_changed(scope, loaded)

    async def update(
        self, scope: Scope, change: Callable[[StateT], StateT | None], *, attempts: int = 5
    ) -> StateT:
        """Read-modify-write with retries: ``change`` edits the loaded state in place (or
        returns a replacement); on a concurrent save it is re-run on a fresh load, up to
        ``attempts`` times, then ``ConflictError``. Returns the state as saved."""
        if attempts < 1:
            raise InvalidInputError("attempts must be >= 1", field="attempts")
        for attempt in range(attempts):
            loaded = await self.load(scope)
            replaced = change(loaded.state)
            if replaced is not None:
                loaded.state = replaced
            try:
                await self.save_if_changed(scope, loaded)
            except StateSchemaError:
                raise
            except ConflictError:
                if attempt == attempts - 1:
                    raise
                continue
            return loaded.state
        raise AssertionError("unreachable")  # pragma: no cover


class StateHandle(Generic[StateT]):
    """Blocking access to one scope's state (what ``MemoryLayer.state`` returns).

    ``load()``, ``save(state)``, ``delete()``, and ``with handle as state:`` (or
    ``handle.edit()``) which saves on a normal exit when the state changed, optimistically
    like :meth:`AgentStateStore.session`. ``run`` executes a coroutine to completion on the
    loop that owns the backend.
    """

    def __init__(
        self,
        store: AgentStateStore[StateT],
        scope: Scope,
        run: Callable[[Coroutine[Any, Any, Any]], Any],
    ) -> None:
        self.store = store
        self.scope = scope
        self._run = run
        self._editing: list[AbstractContextManager[StateT]] = []

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return cast(T, self._run(coro))

    def load(self) -> StateT:
        return self._call(self.store.load_state(self.scope))

    def save(self, state: StateT, *, expected_revision: int | None = None) -> int:
        return self._call(
            self.store.save_state(self.scope, state, expected_revision=expected_revision)
        )

    def delete(self) -> bool:
        return self._call(self.store.delete_state(self.scope))

    def update(self, change: Callable[[StateT], StateT | None], *, attempts: int = 5) -> StateT:
        return self._call(self.store.update(self.scope, change, attempts=attempts))

    @contextmanager
    def edit(self) -> Iterator[StateT]:
        loaded = self._call(self.store.load(self.scope))
        yield loaded.state
        self._call(self.store.save_if_changed(self.scope, loaded))

    def __enter__(self) -> StateT:
        editing = self.edit()
        state = editing.__enter__()
        self._editing.append(editing)
        return state

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        self._editing.pop().__exit__(kind, exc, tb)


# ---------------------------------------------------------------------- working memory


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

    def __init__(self, manager: MemoryManager, *, attempts: int = 8) -> None:
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

    def _refuse_redactable(self, envelope: Mapping[str, Any]) -> None:
        safety = self._manager.safety
        if not safety.redact_pii:
            return
        data = envelope.get("data")
        redacted = Redactor(safety.pii_kinds).redact_json(data)
        if not redacted.found:
            return
        path = _difference(data, redacted.value, "") or "state"
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


def _describe(scope: Scope) -> str:
    parts = [f"{key}={value}" for key, value in scope.model_dump().items() if value is not None]
    return "scope " + ", ".join(parts)


def _loc(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _dump_quietly(state: BaseModel) -> dict[str, Any]:
    """The JSON form used to detect changes; a state that cannot be dumped counts as
    changed (and its save then reports why)."""
    try:
        return state.model_dump(mode="json", round_trip=True, warnings=False)
    except PydanticSerializationError:
        return {"\x00unserialisable": id(state)}


def _difference(left: Any, right: Any, path: str) -> str | None:
    """The dotted path of the first place where ``left`` and ``right`` differ (``""`` for
    the top), or ``None`` when they are equal."""
    if isinstance(left, BaseModel) and type(left) is type(right):
        for field in type(left).model_fields:
            found = _difference(getattr(left, field), getattr(right, field), _join(path, field))
            if found is not None:
                return found
        if left.__pydantic_extra__ != right.__pydantic_extra__:
            return path
        return None
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        if list(left) != list(right):
            return path
        for key in left:
            found = _difference(left[key], right[key], _join(path, str(key)))
            if found is not None:
                return found
        return None
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        if type(left) is not type(right) or len(left) != len(right):
            return path
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            found = _difference(a, b, _join(path, str(index)))
            if found is not None:
                return found
        return None
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left):
        return path
    if isinstance(left, datetime) and isinstance(right, datetime):
        # Same wall time and same UTC offset (``==`` is False across zones for a local
        # time in a DST gap or fold, though the offset written pins the instant).
        same = left.replace(tzinfo=None, fold=0) == right.replace(tzinfo=None, fold=0)
        return None if same and left.utcoffset() == right.utcoffset() else path
    if type(left) is not type(right) or left != right:
        return path
    return None


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part
