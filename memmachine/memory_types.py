"""Custom memory types: an extension point for memory that is neither episodic, profile nor
working memory (a reading list, meeting notes, a to-do list...).

A custom type is a subclass of :class:`CustomMemoryType` with a ``name``, a ``description``,
two pydantic input models and two coroutines::

    class AddBook(BaseModel):
        title: str
        author: str | None = None

    class FindBooks(BaseModel):
        author: str | None = None

    class ReadingList(CustomMemoryType[AddBook, FindBooks]):
        name = "reading_list"
        description = "Books a user wants to read."

        async def store(self, records: RecordSpace, item: AddBook) -> CustomRecord:
            return await records.put(item.title.lower(), item)

        async def retrieve(self, records: RecordSpace, query: FindBooks) -> list[CustomRecord]:
            return [r for r in await records.records() if query.author in (None, r.data["author"])]

The input models are taken from the generic parameters (or set as ``store_input`` /
``retrieve_input``); requests are validated against them before the type runs, so the type
only ever sees valid input, and bad input is an :class:`~memmachine.errors.InvalidInputError`
naming the field. Whatever ``store`` / ``retrieve`` return (a pydantic model, a list of them,
a dict, a scalar) is sent back as JSON. A type may raise ``InvalidInputError`` (HTTP 422) or
``NotFoundError`` (HTTP 404) itself; anything else it raises is an internal error.

Storage: a type never touches a database. Each call gets a :class:`RecordSpace`, a small
key → JSON-object store holding only this type's records of the caller's scope: tenant, org,
project and user always, plus the ids named in ``partition_by`` (``"agent_id"``,
``"session_id"``, ``"group_id"``), which the request must then carry. Another type, user or
tenant is out of its reach by construction. Records are kept through a
:class:`~memmachine.agent_state.StateBackend` (one versioned record per type and scope, written
with optimistic concurrency, so concurrent writes never lose one another); string values pass
through PII redaction like every other write when it is on; ``max_records`` and ``max_bytes``
bound a space (``PayloadTooLargeError`` beyond). Forgetting a user removes their records of
every type.

Registration, both read when the server (or any manager) is built:

* an entry point in the group ``memmachine.memory_types`` of an installed distribution
  (``[project.entry-points."memmachine.memory_types"] reading_list = "pkg.mod:ReadingList"``);
* the setting ``MEMMACHINE_MEMORY_TYPES``: comma-separated ``module:Class`` references.

A reference that cannot be imported, is not a ``CustomMemoryType`` subclass, has a bad name or
input model, or names a type already registered by another class is a
:class:`~memmachine.errors.ConfigurationError` naming the reference: the server does not start
with a half-loaded set.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import random
import re
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from memmachine.errors import (
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PayloadTooLargeError,
    StoreError,
)
from memmachine.models import Scope, utc_now

if TYPE_CHECKING:
    from memmachine.agent_state import StateBackend
    from memmachine.safety.pii import Redactor

__all__ = [
    "ENTRY_POINT_GROUP",
    "PARTITION_FIELDS",
    "RESERVED_NAMES",
    "SETTING",
    "TYPE_NAME_PATTERN",
    "CustomMemoryType",
    "CustomRecord",
    "MemoryTypeInfo",
    "MemoryTypeRegistry",
    "RecordSpace",
    "TypeSource",
    "discover_memory_types",
    "load_configured_types",
    "load_entry_point_types",
]

#: The entry-point group installed distributions register custom memory types under.
ENTRY_POINT_GROUP = "memmachine.memory_types"
#: The environment variable (setting ``memory_types``) listing ``module:Class`` references.
SETTING = "MEMMACHINE_MEMORY_TYPES"
#: A type name: lower-case letters, digits and ``_``, starting with a letter, 1-64 characters.
TYPE_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
#: Names a custom type may not take: the built-in kinds of memory.
RESERVED_NAMES = frozenset({"episodic", "profile", "working"})
#: The scope ids a type may keep its records apart by, besides the user.
PARTITION_FIELDS = ("agent_id", "session_id", "group_id")

_NAME = re.compile(TYPE_NAME_PATTERN)
_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_MAX_KEY_CHARS = 256
_WRITE_ATTEMPTS = 16

StoreInputT = TypeVar("StoreInputT", bound=BaseModel)
RetrieveInputT = TypeVar("RetrieveInputT", bound=BaseModel)
_T = TypeVar("_T")


class CustomRecord(BaseModel):
    """One record of a custom type: its key, its JSON object and when it was written."""

    key: str
    data: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class RecordSpace:
    """The storage a custom type gets for one call: its own records in one scope.

    Records are JSON objects under string keys (1-256 characters), kept in the order they
    were first stored. Every method reads or writes only this type's records of
    :attr:`scope`; there is no way to name another scope or type through it.
    """

    def __init__(
        self,
        backend: StateBackend,
        scope: Scope,
        type_name: str,
        *,
        max_records: int,
        max_bytes: int,
        redactor: Redactor | None = None,
    ) -> None:
        self._backend = backend
        self._scope = scope
        self._record_name = f"memory_type.{type_name}"
        self._type_name = type_name
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._redactor = redactor

    @property
    def scope(self) -> Scope:
        """The scope these records belong to (the user, plus the type's partition ids)."""
        return self._scope

    async def get(self, key: str) -> CustomRecord | None:
        """The record stored under ``key``, or ``None``."""
        for record in await self._load():
            if record.key == key:
                return record
        return None

    async def records(self, *, newest_first: bool = False) -> list[CustomRecord]:
        """Every record, in the order each key was first stored (or the reverse)."""
        records = await self._load()
        return records[::-1] if newest_first else records

    async def count(self) -> int:
        """How many records there are."""
        return len(await self._load())

    async def put(self, key: str, data: BaseModel | Mapping[str, Any]) -> CustomRecord:
        """Store ``data`` (a pydantic model or a JSON-able mapping) under ``key``, replacing
        the record there (which keeps its ``created_at`` and position). String values are
        PII-redacted when redaction is on. Over ``max_records`` / ``max_bytes``:
        ``PayloadTooLargeError``; data JSON cannot hold: ``InvalidInputError``."""
        _check_key(key)
        value = self._json_object(data)
        now = utc_now()

        def change(records: list[CustomRecord]) -> CustomRecord:
            for index, old in enumerate(records):
                if old.key == key:
                    records[index] = CustomRecord(
                        key=key, data=value, created_at=old.created_at, updated_at=now
                    )
                    return records[index]
            if len(records) >= self._max_records:
                raise PayloadTooLargeError(
                    f"memory type {self._type_name!r} holds at most {self._max_records} "
                    "records per scope; delete some first",
                    field="input",
                )
            records.append(CustomRecord(key=key, data=value, created_at=now, updated_at=now))
            return records[-1]

        return await self._update(change)

    async def delete(self, key: str) -> bool:
        """Remove the record under ``key``; returns whether there was one."""

        def change(records: list[CustomRecord]) -> bool:
            for index, old in enumerate(records):
                if old.key == key:
                    del records[index]
                    return True
            return False

        return await self._update(change)

    async def clear(self) -> int:
        """Remove every record of this space; returns how many there were."""
        count = len(await self._load())
        if count:
            await self._backend.delete(self._scope, self._record_name)
        return count

    # ------------------------------------------------------------------ internals

    def _json_object(self, data: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
        try:
            value = to_jsonable_python(data)
        except PydanticSerializationError as exc:
            raise InvalidInputError(
                f"a {self._type_name} record must be JSON data: {exc}", field="input"
            ) from None
        if not isinstance(value, dict):
            raise InvalidInputError(
                f"a {self._type_name} record must be a JSON object, not {type(value).__name__}",
                field="input",
            )
        if self._redactor is not None:
            redacted: dict[str, Any] = self._redactor.redact_json(value).value
            return redacted
        return value

    async def _read(self) -> tuple[list[CustomRecord], int]:
        stored = await self._backend.get(self._scope, self._record_name)
        if stored is None:
            return [], 0
        try:
            raw = stored.envelope["data"]["records"]
            records = [CustomRecord.model_validate(item) for item in raw]
        except (KeyError, TypeError, ValidationError) as exc:
            raise StoreError(
                f"the stored records of memory type {self._type_name!r} are unreadable: {exc}",
                store=self._backend.name,
            ) from None
        return records, stored.revision

    async def _load(self) -> list[CustomRecord]:
        return (await self._read())[0]

    async def _update(self, change: Callable[[list[CustomRecord]], _T]) -> _T:
        """Read, apply ``change`` to the list in place, write back only if nobody wrote in
        between (retried otherwise); nothing is written when ``change`` raises."""
        for attempt in range(_WRITE_ATTEMPTS):
            records, revision = await self._read()
            before = list(records)
            result = change(records)
            if records == before:
                return result
            envelope = {
                "schema": self._record_name,
                "version": 1,
                "data": {"records": [record.model_dump(mode="json") for record in records]},
            }
            size = len(json.dumps(envelope, separators=(",", ":")).encode())
            if size > self._max_bytes:
                raise PayloadTooLargeError(
                    f"memory type {self._type_name!r} holds at most {self._max_bytes} bytes "
                    "per scope; this write would make it larger",
                    field="input",
                )
            try:
                await self._backend.put(
                    self._scope, self._record_name, envelope, expected_revision=revision
                )
            except ConflictError:
                # Another write landed first: re-read and apply again, after a short random
                # pause so that many writers to one space do not keep colliding.
                await asyncio.sleep(random.uniform(0, 0.002 * (attempt + 1)))
                continue
            return result
        raise ConflictError(
            f"the records of memory type {self._type_name!r} kept changing; nothing was written"
        )


class CustomMemoryType(Generic[StoreInputT, RetrieveInputT]):
    """Base class of a custom memory type (see the module docstring).

    Class attributes:

    * ``name`` (required): matches :data:`TYPE_NAME_PATTERN`, not one of
      :data:`RESERVED_NAMES`; it is the type's URL segment and tool argument.
    * ``description``: one or two sentences for the listing (and for models choosing a tool).
    * ``store_input`` / ``retrieve_input``: the pydantic models of the two calls' input;
      taken from the generic parameters when not set.
    * ``partition_by``: which of ``agent_id``, ``session_id``, ``group_id`` keep records
      apart besides the user (default none: one space per user).
    * ``max_records`` / ``max_bytes``: the bounds of one space.

    The class is instantiated once, without arguments, when it is registered.
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    store_input: ClassVar[type[BaseModel]]
    retrieve_input: ClassVar[type[BaseModel]]
    partition_by: ClassVar[tuple[str, ...]] = ()
    max_records: ClassVar[int] = 1_000
    max_bytes: ClassVar[int] = 1_000_000

    async def store(self, records: RecordSpace, item: StoreInputT) -> Any:
        """Store ``item`` (already validated) in ``records``; returns what the caller gets."""
        raise NotImplementedError

    async def retrieve(self, records: RecordSpace, query: RetrieveInputT) -> Any:
        """Answer ``query`` (already validated) from ``records``."""
        raise NotImplementedError


@dataclass(frozen=True)
class TypeSource:
    """A class found by discovery and where it came from (for messages)."""

    cls: Any
    origin: str


@dataclass(frozen=True)
class MemoryTypeInfo:
    """What the listing shows of a registered type."""

    name: str
    description: str
    store_schema: dict[str, Any]
    retrieve_schema: dict[str, Any]
    partition_by: tuple[str, ...]
    origin: str


@dataclass(frozen=True)
class _Registered:
    instance: CustomMemoryType[Any, Any]
    store_input: type[BaseModel]
    retrieve_input: type[BaseModel]
    info: MemoryTypeInfo


# ---------------------------------------------------------------------- discovery


def load_entry_point_types(entries: Iterable[EntryPoint] | None = None) -> list[TypeSource]:
    """Load the classes registered under :data:`ENTRY_POINT_GROUP` (or the given entry
    points). One that cannot be loaded is a ``ConfigurationError`` naming it."""
    if entries is None:
        entries = entry_points(group=ENTRY_POINT_GROUP)
    found: list[TypeSource] = []
    for entry in entries:
        origin = f"entry point {entry.name} = {entry.value}"
        if entry.dist is not None:
            origin += f" (from {entry.dist.name})"
        try:
            loaded = entry.load()
        except Exception as exc:  # any failure of third-party import code is reported alike
            raise ConfigurationError(
                f"memory type {origin} cannot be loaded: {type(exc).__name__}: {exc}"
            ) from None
        found.append(TypeSource(loaded, origin))
    return found


def load_configured_types(spec: str | Sequence[str] | None) -> list[TypeSource]:
    """Import the ``module:Class`` references of ``MEMMACHINE_MEMORY_TYPES`` (a
    comma-separated string or a list). A malformed or unimportable reference is a
    ``ConfigurationError`` naming it."""
    if spec is None:
        return []
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    found: list[TypeSource] = []
    for item in items:
        reference = item.strip()
        if not reference:
            continue
        origin = f"{SETTING} entry {reference!r}"
        if not _REFERENCE.match(reference):
            raise ConfigurationError(
                f"{origin} is not a 'module:Class' reference (e.g. 'my_pkg.types:ReadingList')"
            )
        module_name, _, attribute = reference.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
        except Exception as exc:  # any failure of third-party import code is reported alike
            raise ConfigurationError(
                f"{origin}: module {module_name!r} cannot be imported: {type(exc).__name__}: {exc}"
            ) from None
        for part in attribute.split("."):
            if not hasattr(target, part):
                raise ConfigurationError(
                    f"{origin}: {module_name!r} has no attribute {attribute!r}"
                )
            target = getattr(target, part)
        found.append(TypeSource(target, origin))
    return found


def discover_memory_types(
    spec: str | Sequence[str] | None, entries: Iterable[EntryPoint] | None = None
) -> list[TypeSource]:
    """Entry-point types first, then the configured ones."""
    return [*load_entry_point_types(entries), *load_configured_types(spec)]


# ---------------------------------------------------------------------- the registry


class MemoryTypeRegistry:
    """The registered custom memory types and the backend their records live in.

    Built (and every registration checked) by :func:`memmachine.bootstrap.build_manager`;
    ``start()`` / ``close()`` open and release the backend (only when a type is
    registered). An empty registry needs no backend.
    """

    def __init__(
        self,
        sources: Iterable[TypeSource] = (),
        backend: StateBackend | None = None,
        *,
        redactor: Redactor | None = None,
    ) -> None:
        self._types: dict[str, _Registered] = {}
        seen: dict[int, str] = {}
        for source in sources:
            if id(source.cls) in seen:
                continue  # the same class through an entry point and the setting
            registered = _register(source)
            name = registered.info.name
            if name in self._types:
                raise ConfigurationError(
                    f"memory type {name!r} of {source.origin} is already registered by "
                    f"{self._types[name].info.origin}"
                )
            seen[id(source.cls)] = name
            self._types[name] = registered
        if self._types and backend is None:
            raise ConfigurationError("custom memory types need a record backend")
        self._backend = backend
        self._redactor = redactor
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open the record backend when there is a type to serve (idempotent)."""
        if self._types and self._backend is not None and not self._started:
            await self._backend.start()
            self._started = True

    async def close(self) -> None:
        """Release the record backend; safe to call twice."""
        if self._started and self._backend is not None:
            self._started = False
            await self._backend.close()

    async def __aenter__(self) -> MemoryTypeRegistry:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ lookup

    def __len__(self) -> int:
        return len(self._types)

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._types)

    def infos(self) -> list[MemoryTypeInfo]:
        """Every registered type's name, description, input schemas and partition, by name."""
        return [self._types[name].info for name in self.names()]

    def get(self, name: str) -> CustomMemoryType[Any, Any]:
        """The registered type ``name``; ``NotFoundError`` naming it otherwise."""
        return self._entry(name).instance

    def _entry(self, name: str) -> _Registered:
        entry = self._types.get(name)
        if entry is None:
            known = ", ".join(self.names()) or "none"
            raise NotFoundError(f"memory type {name!r} is not registered (registered: {known})")
        return entry

    def space(self, name: str, scope: Scope) -> RecordSpace:
        """The record space of type ``name`` for ``scope``: the user's, narrowed by the ids
        in the type's ``partition_by`` (each required: ``InvalidInputError`` naming it)."""
        entry = self._entry(name)
        assert self._backend is not None  # a registry with types always has one
        narrowing: dict[str, str | None] = dict.fromkeys(PARTITION_FIELDS)
        for field in entry.info.partition_by:
            value = getattr(scope, field)
            if value is None:
                raise InvalidInputError(
                    f"memory type {name!r} keeps records per {field}: {field} is required",
                    field=field,
                )
            narrowing[field] = value
        instance = entry.instance
        return RecordSpace(
            self._backend,
            scope.model_copy(update=narrowing),
            name,
            max_records=instance.max_records,
            max_bytes=instance.max_bytes,
            redactor=self._redactor,
        )

    # ------------------------------------------------------------------ calls

    async def store(self, name: str, scope: Scope, payload: Any, *, field_prefix: str = "") -> Any:
        """Validate ``payload`` against the type's ``store_input`` and run its ``store`` in
        the scope's record space; returns the result as JSON data. Bad input:
        ``InvalidInputError`` naming ``<field_prefix>.<field>``; unknown type:
        ``NotFoundError``."""
        entry = self._entry(name)
        item = _validate(entry.store_input, payload, field_prefix)
        records = self.space(name, scope)
        return _jsonable(name, await entry.instance.store(records, item))

    async def retrieve(
        self, name: str, scope: Scope, payload: Any, *, field_prefix: str = ""
    ) -> Any:
        """Like :meth:`store`, with ``retrieve_input`` and the type's ``retrieve``."""
        entry = self._entry(name)
        query = _validate(entry.retrieve_input, payload, field_prefix)
        records = self.space(name, scope)
        return _jsonable(name, await entry.instance.retrieve(records, query))

    async def forget_user(self, scope: Scope) -> int:
        """Remove every record of every type for the scope's user (all partitions);
        returns how many record spaces were removed. Nothing to do without types."""
        if not self._types or self._backend is None:
            return 0
        return await self._backend.delete_user(scope.user_scope())


# ---------------------------------------------------------------------- helpers


def _register(source: TypeSource) -> _Registered:
    cls, origin = source.cls, source.origin
    if not (isinstance(cls, type) and issubclass(cls, CustomMemoryType)):
        raise ConfigurationError(
            f"{origin} is not a subclass of memmachine.memory_types.CustomMemoryType"
        )
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            f"{origin}: the type's name {name!r} must match {TYPE_NAME_PATTERN} "
            "(lower-case letters, digits and _, starting with a letter)"
        )
    if name in RESERVED_NAMES:
        raise ConfigurationError(
            f"{origin}: the name {name!r} is reserved for built-in memory "
            f"({', '.join(sorted(RESERVED_NAMES))})"
        )
    for method in ("store", "retrieve"):
        if getattr(cls, method) is getattr(CustomMemoryType, method):
            raise ConfigurationError(f"{origin}: {cls.__name__} does not implement {method}()")
        if not inspect.iscoroutinefunction(getattr(cls, method)):
            raise ConfigurationError(f"{origin}: {cls.__name__}.{method}() must be async")
    inferred = _generic_inputs(cls)
    store_input = getattr(cls, "store_input", None) or inferred[0]
    retrieve_input = getattr(cls, "retrieve_input", None) or inferred[1]
    for label, model in (("store_input", store_input), ("retrieve_input", retrieve_input)):
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigurationError(
                f"{origin}: {label} must be a pydantic model (set it, or subclass "
                "CustomMemoryType[StoreModel, RetrieveModel])"
            )
    partition = tuple(getattr(cls, "partition_by", ()))
    unknown = [field for field in partition if field not in PARTITION_FIELDS]
    if unknown or len(set(partition)) != len(partition):
        raise ConfigurationError(
            f"{origin}: partition_by {partition!r} may only name "
            f"{', '.join(PARTITION_FIELDS)}, each once"
        )
    for limit in ("max_records", "max_bytes"):
        value = getattr(cls, limit)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigurationError(f"{origin}: {limit} must be a positive integer")
    try:
        instance = cls()
        store_schema = store_input.model_json_schema()
        retrieve_schema = retrieve_input.model_json_schema()
    except Exception as exc:  # third-party constructors and models: report any failure alike
        raise ConfigurationError(
            f"{origin}: {cls.__name__} cannot be set up: {type(exc).__name__}: {exc}"
        ) from None
    description = getattr(cls, "description", "") or ""
    info = MemoryTypeInfo(
        name=name,
        description=str(description).strip(),
        store_schema=store_schema,
        retrieve_schema=retrieve_schema,
        partition_by=partition,
        origin=origin,
    )
    return _Registered(instance, store_input, retrieve_input, info)


def _generic_inputs(cls: type) -> tuple[Any, Any]:
    """The ``[StoreModel, RetrieveModel]`` parameters of the nearest parameterised base."""
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) is CustomMemoryType:
                args = typing.get_args(base)
                if len(args) == 2:
                    return args[0], args[1]
    return None, None


def _validate(model: type[BaseModel], payload: Any, prefix: str) -> BaseModel:
    try:
        return model.model_validate(payload if payload is not None else {})
    except ValidationError as exc:
        error = exc.errors()[0]
        path = ".".join(str(part) for part in (*([prefix] if prefix else []), *error["loc"]))
        field = path or prefix or "input"
        raise InvalidInputError(f"{field}: {error['msg']}", field=field) from None


def _jsonable(name: str, result: Any) -> Any:
    try:
        return to_jsonable_python(result)
    except PydanticSerializationError as exc:
        raise TypeError(f"memory type {name!r} returned a value JSON cannot hold: {exc}") from None


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not 1 <= len(key) <= _MAX_KEY_CHARS:
        raise InvalidInputError(
            f"a record key must be a string of 1-{_MAX_KEY_CHARS} characters", field="key"
        )
