"""Custom memory types: discovery (entry points and the setting), the checks a registration
must pass, and the scoped record space a type stores through, on real SQLite and Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import BaseModel, Field

from memmachine.adapters.redis.redis_state_backend import RedisStateBackend
from memmachine.adapters.sql.sqlite_state_backend import SQLiteStateBackend
from memmachine.agent_state import StateBackend
from memmachine.config import Settings
from memmachine.errors import (
    ConfigurationError,
    InvalidInputError,
    NotFoundError,
    PayloadTooLargeError,
)
from memmachine.memory_types import (
    ENTRY_POINT_GROUP,
    CustomMemoryType,
    MemoryTypeRegistry,
    RecordSpace,
    TypeSource,
    discover_memory_types,
    load_configured_types,
    load_entry_point_types,
)
from memmachine.models import Scope
from memmachine.safety.pii import Redactor

HERE = __name__
READING_LIST = "examples.custom_memory_type:ReadingList"


# ---------------------------------------------------------------------- types under test


class NoteIn(BaseModel):
    key: str = Field(min_length=1)
    text: str = Field(min_length=1)


class NoteQuery(BaseModel):
    contains: str = ""


class Notes(CustomMemoryType[NoteIn, NoteQuery]):
    """Notes per user; retrieve returns the texts containing a word, oldest first."""

    name = "notes"
    description = "Short notes."
    max_records = 5

    async def store(self, records: RecordSpace, item: NoteIn) -> dict[str, Any]:
        record = await records.put(item.key, {"text": item.text})
        return {"key": record.key, "text": record.data["text"]}

    async def retrieve(self, records: RecordSpace, query: NoteQuery) -> list[str]:
        texts = [str(record.data["text"]) for record in await records.records()]
        return [text for text in texts if query.contains in text]


class SessionNotes(Notes):
    """The same notes, kept apart per session."""

    name = "session_notes"
    partition_by = ("session_id",)
    max_records = 100


class OtherNotes(Notes):
    """Another class claiming the name ``notes``."""


class Profile(Notes):
    name = "profile"


class BadName(Notes):
    name = "Bad-Name"


class NoRetrieve(CustomMemoryType[NoteIn, NoteQuery]):
    name = "no_retrieve"

    async def store(self, records: RecordSpace, item: NoteIn) -> None:
        return None


class SyncStore(Notes):
    name = "sync_store"

    def store(self, records: RecordSpace, item: NoteIn) -> Any:  # type: ignore[override]
        return None


class NoModels(CustomMemoryType):  # type: ignore[type-arg]
    name = "no_models"

    async def store(self, records: RecordSpace, item: Any) -> None:
        return None

    async def retrieve(self, records: RecordSpace, query: Any) -> None:
        return None


class BadPartition(Notes):
    name = "bad_partition"
    partition_by = ("user_id",)


def ep(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


def registry_of(*classes: type, backend: StateBackend | None = None) -> MemoryTypeRegistry:
    sources = [TypeSource(cls, f"test {cls.__name__}") for cls in classes]
    return MemoryTypeRegistry(sources, backend or SQLiteStateBackend(":memory:"))


# ---------------------------------------------------------------------- discovery


def test_an_entry_point_registers_its_type_with_its_schemas() -> None:
    sources = load_entry_point_types([ep("reading_list", READING_LIST)])
    registry = MemoryTypeRegistry(sources, SQLiteStateBackend(":memory:"))

    assert registry.names() == ["reading_list"]
    info = registry.infos()[0]
    assert "reading list" in info.description
    assert info.store_schema["required"] == ["title"]
    assert "status" in info.retrieve_schema["properties"]
    assert info.origin == f"entry point reading_list = {READING_LIST}"


def test_an_entry_point_that_cannot_load_names_itself() -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_entry_point_types([ep("broken", "no_such_package.types:Thing")])
    assert "broken = no_such_package.types:Thing" in caught.value.message
    assert "ModuleNotFoundError" in caught.value.message


def test_the_installed_entry_points_are_read_when_none_are_given() -> None:
    # No installed distribution registers a type here: discovery finds only the setting's.
    found = discover_memory_types(f"{HERE}:Notes")
    assert [source.cls for source in found] == [Notes]


def test_the_setting_takes_comma_separated_references(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMMACHINE_MEMORY_TYPES", f" {READING_LIST} , {HERE}:Notes ,")
    settings = Settings()
    assert settings.memory_types == [READING_LIST, f"{HERE}:Notes"]
    registry = MemoryTypeRegistry(
        load_configured_types(settings.memory_types), SQLiteStateBackend(":memory:")
    )
    assert registry.names() == ["notes", "reading_list"]


def test_one_class_through_an_entry_point_and_the_setting_is_registered_once() -> None:
    found = discover_memory_types([READING_LIST], [ep("reading_list", READING_LIST)])
    assert MemoryTypeRegistry(found, SQLiteStateBackend(":memory:")).names() == ["reading_list"]


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("examples.custom_memory_type.ReadingList", "not a 'module:Class' reference"),
        ("no_such_module_here:Thing", "module 'no_such_module_here' cannot be imported"),
        (f"{HERE}:Missing", "has no attribute 'Missing'"),
    ],
)
def test_a_bad_reference_in_the_setting_names_it(reference: str, expected: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_configured_types(f"{HERE}:Notes,{reference}")
    assert f"MEMMACHINE_MEMORY_TYPES entry {reference!r}" in caught.value.message
    assert expected in caught.value.message


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        (NoteIn, "is not a subclass of memmachine.memory_types.CustomMemoryType"),
        (BadName, "name 'Bad-Name' must match"),
        (Profile, "'profile' is reserved"),
        (NoRetrieve, "does not implement retrieve()"),
        (SyncStore, "store() must be async"),
        (NoModels, "store_input must be a pydantic model"),
        (BadPartition, "partition_by ('user_id',) may only name"),
    ],
)
def test_a_bad_registration_is_refused_naming_it(cls: type, expected: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        registry_of(cls)
    assert f"test {cls.__name__}" in caught.value.message
    assert expected in caught.value.message


def test_two_classes_with_one_name_are_refused_naming_both() -> None:
    with pytest.raises(ConfigurationError) as caught:
        registry_of(Notes, OtherNotes)
    assert "'notes' of test OtherNotes is already registered by test Notes" in str(caught.value)


# ---------------------------------------------------------------------- calls and records


@pytest.fixture(params=["sqlite", "redis"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path, unique: str
) -> AsyncIterator[StateBackend]:
    if request.param == "sqlite":
        yield SQLiteStateBackend(tmp_path / "records.db")
        return
    url = str(request.getfixturevalue("redis_service_url"))
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    prefix = f"mmtest-types-{unique}"
    yield RedisStateBackend(url, key_prefix=prefix)
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)
    client.close()


@pytest.fixture
async def registry(backend: StateBackend) -> AsyncIterator[MemoryTypeRegistry]:
    sources = [TypeSource(Notes, "test Notes"), TypeSource(SessionNotes, "test SessionNotes")]
    async with MemoryTypeRegistry(sources, backend, redactor=Redactor()) as opened:
        yield opened


def user(name: str, tenant: str = "default", **ids: str) -> Scope:
    return Scope(tenant=tenant, user_id=name, **ids)


async def test_store_then_retrieve_returns_what_was_stored(registry: MemoryTypeRegistry) -> None:
    ana = user("ana")
    stored = await registry.store("notes", ana, {"key": "k1", "text": "buy oat milk"})
    await registry.store("notes", ana, {"key": "k2", "text": "call the vet"})

    assert stored == {"key": "k1", "text": "buy oat milk"}
    assert await registry.retrieve("notes", ana, {}) == ["buy oat milk", "call the vet"]
    assert await registry.retrieve("notes", ana, {"contains": "vet"}) == ["call the vet"]


async def test_records_never_cross_users_or_tenants(registry: MemoryTypeRegistry) -> None:
    await registry.store("notes", user("ana", "acme"), {"key": "k", "text": "acme secret"})

    assert await registry.retrieve("notes", user("ana", "globex"), {}) == []
    assert await registry.retrieve("notes", user("bob", "acme"), {}) == []
    # Agent and session ids do not split a type without partition_by.
    assert await registry.retrieve("notes", user("ana", "acme", session_id="s9"), {}) == [
        "acme secret"
    ]


async def test_a_session_partitioned_type_needs_and_honours_the_session(
    registry: MemoryTypeRegistry,
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        await registry.store("session_notes", user("ana"), {"key": "k", "text": "x"})
    assert caught.value.field == "session_id"

    await registry.store("session_notes", user("ana", session_id="s1"), {"key": "k", "text": "a"})
    await registry.store("session_notes", user("ana", session_id="s2"), {"key": "k", "text": "b"})
    assert await registry.retrieve("session_notes", user("ana", session_id="s1"), {}) == ["a"]
    assert await registry.retrieve("session_notes", user("ana", session_id="s2"), {}) == ["b"]


async def test_invalid_input_names_the_field_and_stores_nothing(
    registry: MemoryTypeRegistry,
) -> None:
    ana = user("ana")
    with pytest.raises(InvalidInputError) as caught:
        await registry.store("notes", ana, {"key": "k", "text": ""}, field_prefix="input")
    assert caught.value.field == "input.text"
    with pytest.raises(InvalidInputError) as missing:
        await registry.store("notes", ana, {"text": "no key"})
    assert missing.value.field == "key"
    assert await registry.retrieve("notes", ana, {}) == []


async def test_an_unknown_type_is_not_found_naming_it(registry: MemoryTypeRegistry) -> None:
    with pytest.raises(NotFoundError) as caught:
        await registry.retrieve("diary", user("ana"), {})
    assert "'diary' is not registered" in caught.value.message
    assert "notes, session_notes" in caught.value.message


async def test_put_replaces_in_place_and_keeps_when_it_was_created(
    registry: MemoryTypeRegistry,
) -> None:
    space = registry.space("notes", user("ana"))
    first = await space.put("a", {"text": "one"})
    await space.put("b", {"text": "two"})
    again = await space.put("a", {"text": "uno"})

    assert again.created_at == first.created_at
    assert again.updated_at >= first.updated_at
    assert [(r.key, r.data["text"]) for r in await space.records()] == [("a", "uno"), ("b", "two")]
    assert [r.key for r in await space.records(newest_first=True)] == ["b", "a"]
    assert await space.delete("a") is True
    assert await space.delete("a") is False
    assert await space.get("b") is not None
    assert await space.count() == 1


async def test_a_full_space_refuses_more_and_keeps_what_it_had(
    registry: MemoryTypeRegistry,
) -> None:
    ana = user("ana")
    for index in range(Notes.max_records):
        await registry.store("notes", ana, {"key": f"k{index}", "text": f"note {index}"})
    with pytest.raises(PayloadTooLargeError):
        await registry.store("notes", ana, {"key": "extra", "text": "one too many"})
    # Replacing an existing record is still allowed.
    await registry.store("notes", ana, {"key": "k0", "text": "note zero"})
    texts = await registry.retrieve("notes", ana, {})
    assert len(texts) == Notes.max_records
    assert texts[0] == "note zero"
    assert "one too many" not in texts


async def test_concurrent_stores_all_land(registry: MemoryTypeRegistry) -> None:
    space = registry.space("session_notes", user("ana", session_id="busy"))
    await asyncio.gather(*(space.put(f"k{i}", {"text": str(i)}) for i in range(12)))
    assert sorted(int(r.data["text"]) for r in await space.records()) == list(range(12))


async def test_personal_data_is_redacted_before_it_is_stored(
    registry: MemoryTypeRegistry,
) -> None:
    ana = user("ana")
    await registry.store("notes", ana, {"key": "k", "text": "write to ana@example.com"})
    assert await registry.retrieve("notes", ana, {}) == ["write to [EMAIL]"]


async def test_forgetting_a_user_removes_their_records_of_every_type_only(
    registry: MemoryTypeRegistry,
) -> None:
    ana, bob = user("ana"), user("bob")
    await registry.store("notes", ana, {"key": "k", "text": "ana's"})
    await registry.store("session_notes", user("ana", session_id="s1"), {"key": "k", "text": "x"})
    await registry.store("notes", bob, {"key": "k", "text": "bob's"})

    assert await registry.forget_user(ana) >= 2
    assert await registry.retrieve("notes", ana, {}) == []
    assert await registry.retrieve("session_notes", user("ana", session_id="s1"), {}) == []
    assert await registry.retrieve("notes", bob, {}) == ["bob's"]


async def test_records_survive_a_new_backend_on_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "records.db"
    async with registry_of(Notes, backend=SQLiteStateBackend(path)) as first:
        await first.store("notes", user("ana"), {"key": "k", "text": "kept"})
    async with registry_of(Notes, backend=SQLiteStateBackend(path)) as second:
        assert await second.retrieve("notes", user("ana"), {}) == ["kept"]


async def test_an_empty_registry_needs_no_backend_and_knows_no_type() -> None:
    async with MemoryTypeRegistry() as empty:
        assert empty.infos() == []
        assert await empty.forget_user(user("ana")) == 0
        with pytest.raises(NotFoundError):
            await empty.store("notes", user("ana"), {})


def test_the_yaml_file_may_list_the_types(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "memmachine.yaml"
    config.write_text(f"memory_types: [{READING_LIST}]\nmemory_types_store: redis\n")
    monkeypatch.setenv("MEMMACHINE_CONFIG", str(config))
    monkeypatch.delenv("MEMMACHINE_MEMORY_TYPES", raising=False)
    settings = Settings()
    assert settings.memory_types == [READING_LIST]
    assert settings.memory_types_store == "redis"
