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
working memory (:class:`~memmachine.memory.working_state.WorkingMemoryStateBackend`).

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

import math
import re
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar, cast

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from memmachine.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    StateSchemaError,
)
from memmachine.models import Scope
from memmachine.ports import STATE_NAME_PATTERN, StateBackend, check_expected_revision
from memmachine.safety.gate import WriteGate

__all__ = ["AgentStateStore", "LoadedState", "Migration", "StateHandle", "difference"]

_NAME = re.compile(STATE_NAME_PATTERN)

StateT = TypeVar("StateT", bound=BaseModel)
T = TypeVar("T")


#: Turns the ``data`` of one schema version into the ``data`` of the next.
Migration = Callable[[dict[str, Any]], dict[str, Any]]


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
        gate: WriteGate | None = None,
    ) -> None:
        #: What a saved envelope passes before it is stored (it validates every string and
        #: the nesting; state is stored exactly as saved, never redacted).
        self.gate = gate or WriteGate.plain()
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
        differs = difference(state, again, "")
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
            scope,
            self.name,
            self.gate.envelope("agent_state", envelope),
            expected_revision=expected_revision,
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

    async def forget_session(self, scope: Scope) -> int:
        """Remove every state of the scope's session held by the backend (all names and
        agents); returns how many records were removed."""
        return await self.backend.delete_session(scope)

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


def difference(left: Any, right: Any, path: str) -> str | None:
    """The dotted path of the first place where ``left`` and ``right`` differ (``""`` for
    the top), or ``None`` when they are equal."""
    if isinstance(left, BaseModel) and type(left) is type(right):
        for field in type(left).model_fields:
            found = difference(getattr(left, field), getattr(right, field), _join(path, field))
            if found is not None:
                return found
        if left.__pydantic_extra__ != right.__pydantic_extra__:
            return path
        return None
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        if list(left) != list(right):
            return path
        for key in left:
            found = difference(left[key], right[key], _join(path, str(key)))
            if found is not None:
                return found
        return None
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        if type(left) is not type(right) or len(left) != len(right):
            return path
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            found = difference(a, b, _join(path, str(index)))
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
