"""Finding, registering and serving custom memory types (see :mod:`memmachine.memory.custom`
for what a type is)."""

from __future__ import annotations

import importlib
import inspect
import typing
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from memmachine.errors import ConfigurationError, InvalidInputError, NotFoundError
from memmachine.memory.custom import (
    _NAME,
    _REFERENCE,
    ENTRY_POINT_GROUP,
    PARTITION_FIELDS,
    RECORD_PREFIX,
    RESERVED_NAMES,
    SETTING,
    TYPE_NAME_PATTERN,
    CustomMemoryType,
    MemoryTypeInfo,
    RecordSpace,
    TypeSource,
    _Registered,
    record_name,
)
from memmachine.memory.expiry import expiry_asked
from memmachine.models import Scope
from memmachine.ports import Clock, StateBackend, StateRecord, SystemClock
from memmachine.safety.gate import WriteGate
from memmachine.safety.pii import Redactor

__all__ = [
    "MemoryTypeRegistry",
    "discover_memory_types",
    "load_configured_types",
    "load_entry_point_types",
]


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
        gate: WriteGate | None = None,
        clock: Clock | None = None,
    ) -> None:
        #: When records expire (the manager's clock).
        self.clock: Clock = clock or SystemClock()
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
        #: What every record passes before it is stored: ``gate``, else one that redacts
        #: with ``redactor`` (and nothing else) when one is given.
        self.gate = gate or WriteGate.plain(redactor)
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

    def space(self, name: str, scope: Scope, expires_at: datetime | None = None) -> RecordSpace:
        """The record space of type ``name`` for ``scope``: the user's, narrowed by the ids
        in the type's ``partition_by`` (each required: ``InvalidInputError`` naming it);
        records it writes expire at ``expires_at``."""
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
            gate=self.gate,
            clock=self.clock,
            expires_at=expires_at,
        )

    # ------------------------------------------------------------------ calls

    async def store(
        self,
        name: str,
        scope: Scope,
        payload: Any,
        *,
        field_prefix: str = "",
        expires_at: datetime | None = None,
        ttl_seconds: int | None = None,
    ) -> Any:
        """Validate ``payload`` against the type's ``store_input`` and run its ``store`` in
        the scope's record space; returns the result as JSON data. The records it writes
        expire at ``expires_at`` or after ``ttl_seconds`` (one or neither). Bad input:
        ``InvalidInputError`` naming ``<field_prefix>.<field>`` (``expires_at`` /
        ``ttl_seconds``); unknown type: ``NotFoundError``."""
        entry = self._entry(name)
        end = expiry_asked(expires_at, ttl_seconds, self.clock.now(), "")
        item = _validate(entry.store_input, payload, field_prefix)
        records = self.space(name, scope, end)
        return _jsonable(name, await entry.instance.store(records, item))

    async def retrieve(
        self, name: str, scope: Scope, payload: Any, *, field_prefix: str = ""
    ) -> Any:
        """Like :meth:`store`, with ``retrieve_input`` and the type's ``retrieve``."""
        entry = self._entry(name)
        query = _validate(entry.retrieve_input, payload, field_prefix)
        records = self.space(name, scope)
        return _jsonable(name, await entry.instance.retrieve(records, query))

    async def list_user(self, scope: Scope) -> list[StateRecord]:
        """Every record space of every type for the scope's user (all partitions), as the
        backend lists them (named ``memory_type.<type>``). Nothing without types."""
        if not self._types or self._backend is None:
            return []
        listed = await self._backend.list_user(scope.user_scope())
        return [record for record in listed if record.name.startswith(f"{RECORD_PREFIX}.")]

    async def restore(self, name: str, scope: Scope, records: Sequence[Mapping[str, Any]]) -> bool:
        """Put back the records of type ``name`` in ``scope`` (its partition ids included)
        as an export had them, through the gate; returns whether anything changed (the
        same records already stored are left alone). Unknown type: ``NotFoundError``."""
        self._entry(name)
        assert self._backend is not None  # a registry with types always has one
        record_name = f"{RECORD_PREFIX}.{name}"
        stored = await self._backend.get(scope, record_name)
        if stored is not None and stored.envelope == self.gate.record_envelope(
            record_name, records
        ):
            return False
        await self._backend.put(scope, record_name, self.gate.record_envelope(record_name, records))
        return True

    async def forget_user(self, scope: Scope) -> int:
        """Remove every record of every type for the scope's user (all partitions);
        returns how many record spaces were removed. Nothing to do without types."""
        if not self._types or self._backend is None:
            return 0
        return await self._backend.delete_user(scope.user_scope())

    async def purge_expired(self) -> int:
        """Erase the expired records of every type in every scope holding some (the
        retention sweep's); how many were erased."""
        if not self._types or self._backend is None:
            return 0
        erased = 0
        for name in self.names():
            for scope in await self._backend.scopes_holding(record_name(name)):
                erased += await self.space(name, scope).purge_expired()
        return erased

    async def forget_session(self, scope: Scope) -> int:
        """Remove every record of every type kept in the scope's session (records of a
        partition that spans sessions stay); how many record spaces were removed."""
        if not self._types or self._backend is None:
            return 0
        return await self._backend.delete_session(scope)


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
