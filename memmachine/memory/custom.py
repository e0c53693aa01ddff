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
:class:`~memmachine.ports.StateBackend` (one versioned record per type and scope, written
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
import json
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar, cast

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from memmachine.errors import (
    ConflictError,
    InvalidInputError,
    PayloadTooLargeError,
    StoreError,
)
from memmachine.models import Scope, utc_now
from memmachine.ports import Clock, StateBackend, SystemClock
from memmachine.safety.gate import WriteGate

__all__ = [
    "ENTRY_POINT_GROUP",
    "PARTITION_FIELDS",
    "RECORD_PREFIX",
    "RESERVED_NAMES",
    "SETTING",
    "TYPE_NAME_PATTERN",
    "CustomMemoryType",
    "CustomRecord",
    "MemoryTypeInfo",
    "RecordSpace",
    "TypeSource",
    "record_name",
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
#: A type's records of one scope are the backend record ``<RECORD_PREFIX>.<type name>``.
RECORD_PREFIX = "memory_type"

_NAME = re.compile(TYPE_NAME_PATTERN)
_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_MAX_KEY_CHARS = 256
_WRITE_ATTEMPTS = 16

StoreInputT = TypeVar("StoreInputT", bound=BaseModel)
RetrieveInputT = TypeVar("RetrieveInputT", bound=BaseModel)
_T = TypeVar("_T")


class CustomRecord(BaseModel):
    """One record of a custom type: its key, its JSON object, when it was written and
    when it expires (``None``: never)."""

    key: str
    data: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None

    def expired(self, now: datetime) -> bool:
        """Whether the record has expired at ``now`` (the instant itself is expired)."""
        return self.expires_at is not None and self.expires_at <= now


class RecordSpace:
    """The storage a custom type gets for one call: its own records in one scope.

    Records are JSON objects under string keys (1-256 characters), kept in the order they
    were first stored. Every method reads or writes only this type's records of
    :attr:`scope`; there is no way to name another scope or type through it.

    A record written by a call made with an expiry (``expires_at``, the instant ``clock``
    reaches it) is never returned from then on, and the next write of the space, or the
    retention sweep (:meth:`purge_expired`), erases it.
    """

    def __init__(
        self,
        backend: StateBackend,
        scope: Scope,
        type_name: str,
        *,
        max_records: int,
        max_bytes: int,
        gate: WriteGate,
        clock: Clock | None = None,
        expires_at: datetime | None = None,
    ) -> None:
        self._clock: Clock = clock or SystemClock()
        self._expires_at = expires_at
        self._backend = backend
        self._scope = scope
        self._record_name = record_name(type_name)
        self._type_name = type_name
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._gate = gate

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
                        key=key,
                        data=value,
                        created_at=old.created_at,
                        updated_at=now,
                        expires_at=self._expires_at,
                    )
                    return records[index]
            if len(records) >= self._max_records:
                raise PayloadTooLargeError(
                    f"memory type {self._type_name!r} holds at most {self._max_records} "
                    "records per scope; delete some first",
                    field="input",
                )
            records.append(
                CustomRecord(
                    key=key, data=value, created_at=now, updated_at=now, expires_at=self._expires_at
                )
            )
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

    async def purge_expired(self) -> int:
        """Erase the records that expired; how many there were."""
        records, _ = await self._read()
        if not any(record.expired(self._clock.now()) for record in records):
            return 0
        return await self._update(lambda live: 0, count_expired=True)

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
        return self._gate.record_data(value)

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
        """The records that have not expired."""
        now = self._clock.now()
        return [record for record in (await self._read())[0] if not record.expired(now)]

    async def _update(
        self, change: Callable[[list[CustomRecord]], _T], *, count_expired: bool = False
    ) -> _T:
        """Read, drop the expired records, apply ``change`` to the list in place, write
        back only if nobody wrote in between (retried otherwise); nothing is written when
        ``change`` raises or changes nothing (and nothing expired). With ``count_expired``
        the answer is how many expired records were dropped."""
        for attempt in range(_WRITE_ATTEMPTS):
            stored_records, revision = await self._read()
            now = self._clock.now()
            records = [record for record in stored_records if not record.expired(now)]
            result = change(records)
            if records == stored_records:
                return result
            if count_expired:
                result = cast(_T, sum(record.expired(now) for record in stored_records))
            stored = [record.model_dump(mode="json") for record in records]
            envelope = {"schema": self._record_name, "version": 1, "data": {"records": stored}}
            size = len(json.dumps(envelope, separators=(",", ":")).encode())
            if size > self._max_bytes:
                raise PayloadTooLargeError(
                    f"memory type {self._type_name!r} holds at most {self._max_bytes} bytes "
                    "per scope; this write would make it larger",
                    field="input",
                )
            try:
                await self._backend.put(
                    self._scope,
                    self._record_name,
                    self._gate.record_envelope(self._record_name, stored),
                    expected_revision=revision,
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


def record_name(type_name: str) -> str:
    """The state record a type's records of one scope are kept in."""
    return f"{RECORD_PREFIX}.{type_name}"


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not 1 <= len(key) <= _MAX_KEY_CHARS:
        raise InvalidInputError(
            f"a record key must be a string of 1-{_MAX_KEY_CHARS} characters", field="key"
        )
