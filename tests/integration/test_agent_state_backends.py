"""Every agent-state backend against the StateBackend contract, through one parametrized
suite: files, SQLite, the machine's Redis and a three-node Redis Cluster (a unique key
prefix, removed afterwards) and the session's working memory on the embedded stores. Then
what is particular to working memory and the blocking ``MemoryLayer.state`` API.

Every scope a test writes under has the tenant ``t<unique>``, so tests sharing a server or
a manager never see each other's records.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from uuid import UUID

import pytest
from pydantic import BaseModel, Field

from memmachine import MemoryLayer, open_manager
from memmachine.agent_state import AgentStateStore, StateBackend, WorkingMemoryStateBackend
from memmachine.bootstrap import build_state_backend
from memmachine.config import EmbeddingSettings, Settings
from memmachine.errors import ConfigurationError, ConflictError, InvalidInputError, NotFoundError
from memmachine.manager import MemoryManager
from memmachine.models import Scope, WorkingMessage, utc_now
from memmachine.ports import record_key
from tests.conftest import async_redis_client, drop_redis_keys

KINDS = ["file", "sqlite", "redis", "redis-cluster", "working"]
#: Where the Redis kinds run: the fixture returning their server's URL.
REDIS_URL_FIXTURES = {"redis": "redis_service_url", "redis-cluster": "redis_cluster_url"}


class Mood(StrEnum):
    CALM = "calm"
    BUSY = "busy"


class Task(BaseModel):
    title: str
    due: datetime | None = None
    estimate: Decimal | None = None


class AgentState(BaseModel):
    run_id: UUID | None = None
    mood: Mood = Mood.CALM
    since: datetime | None = None
    birthday: date | None = None
    tasks: list[Task] = Field(default_factory=list)
    by_tag: dict[str, list[Task]] = Field(default_factory=dict)
    turns: int = 0
    note: str | None = None


def sample_state() -> AgentState:
    due = datetime(2026, 1, 15, 17, 0, tzinfo=timezone(timedelta(hours=-8)))
    task = Task(title="book the vet 🐶", due=due, estimate=Decimal("1.50"))
    return AgentState(
        run_id=UUID("0b9e3f0a-51c7-4c1e-8d4c-6a1f2b3c4d5e"),
        mood=Mood.BUSY,
        since=datetime(2026, 1, 1, 8, 30, 15, 250000, tzinfo=UTC),
        birthday=date(1990, 2, 28),
        tasks=[task, Task(title="water plants")],
        by_tag={"pets": [task], "empty": []},
        turns=7,
    )


@pytest.fixture(scope="module")
async def manager(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MemoryManager]:
    """A manager on the embedded stores (FalkorDB child for working memory, SQLite)."""
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("state-manager"),
        embedding=EmbeddingSettings(provider="none"),
    )
    async with open_manager(settings) as opened:
        yield opened


@dataclass
class Backends:
    """``open()`` starts a new backend object on the test's storage (a second one sees what
    the first wrote, as another process would); all are closed after the test."""

    kind: str
    open: Callable[[], Awaitable[StateBackend]]


@pytest.fixture
async def opened() -> AsyncIterator[list[StateBackend]]:
    """Backends a test opened, closed after it."""
    backends: list[StateBackend] = []
    yield backends
    for backend in backends:
        await backend.close()


@pytest.fixture(params=KINDS)
def backends(
    request: pytest.FixtureRequest, tmp_path: Path, unique: str, opened: list[StateBackend]
) -> Iterator[Backends]:
    kind: str = request.param
    prefix = f"state-test-{unique}"
    settings = Settings(data_dir=tmp_path, embedding=EmbeddingSettings(provider="none"))
    manager: MemoryManager | None = None
    location: str | None = None
    if kind == "working":
        manager = request.getfixturevalue("manager")
    elif kind in REDIS_URL_FIXTURES:
        location = str(request.getfixturevalue(REDIS_URL_FIXTURES[kind]))
        settings = settings.model_copy(update={"working_key_prefix": prefix})

    async def open_backend() -> StateBackend:
        built = "redis" if kind in REDIS_URL_FIXTURES else kind
        backend = build_state_backend(settings, built, manager=manager, location=location)
        await backend.start()
        opened.append(backend)
        return backend

    yield Backends(kind, open_backend)
    if location is not None:
        drop_redis_keys(location, f"{prefix}:*")


def scope_of(unique: str, **ids: str | None) -> Scope:
    values: dict[str, str | None] = {"user_id": "ana", "session_id": "s1", **ids}
    return Scope.model_validate({"tenant": f"t{unique}", **values})


# ---------------------------------------------------------------------- the shared suite


async def test_state_round_trips_and_survives_a_new_backend_object(
    backends: Backends, unique: str
) -> None:
    scope = scope_of(unique)
    states = AgentStateStore(AgentState, await backends.open())
    assert await states.load_state(scope) == AgentState()
    assert await states.save_state(scope, sample_state()) == 1

    again = AgentStateStore(AgentState, await backends.open())
    loaded = await again.load(scope)
    assert loaded.state == sample_state()
    assert loaded.revision == 1
    assert loaded.state.tasks[0].due is not None
    assert loaded.state.tasks[0].due.utcoffset() == timedelta(hours=-8)
    assert str(loaded.state.tasks[0].estimate) == "1.50"


async def test_envelopes_come_back_as_written(backends: Backends, unique: str) -> None:
    backend = await backends.open()
    envelope = {
        "schema": "Raw",
        "version": 4,
        "data": {"text": 'ünï "quoted"\n\ttab', "n": 2**53 + 1, "x": 0.1, "nested": [{"a": None}]},
    }
    assert await backend.put(scope_of(unique), "Raw", envelope) == 1
    stored = await backend.get(scope_of(unique), "Raw")
    assert stored is not None
    assert stored.envelope == envelope
    assert stored.revision == 1
    assert await backend.get(scope_of(unique), "Other") is None


async def test_revisions_are_compared_and_a_stale_write_changes_nothing(
    backends: Backends, unique: str
) -> None:
    scope = scope_of(unique)
    states = AgentStateStore(AgentState, await backends.open())
    assert await states.save_state(scope, AgentState(turns=1), expected_revision=0) == 1
    assert await states.save_state(scope, AgentState(turns=2), expected_revision=1) == 2
    assert await states.save_state(scope, AgentState(turns=3)) == 3

    for stale in (0, 2, 9):
        with pytest.raises(ConflictError) as caught:
            await states.save_state(scope, AgentState(turns=99), expected_revision=stale)
        assert caught.value.current_version == 3
    loaded = await states.load(scope)
    assert loaded.state.turns == 3
    assert loaded.revision == 3

    with pytest.raises(InvalidInputError) as refused:
        await states.save_state(scope, AgentState(), expected_revision=-1)
    assert refused.value.field == "expected_revision"


async def test_of_concurrent_creators_exactly_one_wins(backends: Backends, unique: str) -> None:
    scope = scope_of(unique)
    writers = [AgentStateStore(AgentState, await backends.open()) for _ in range(2)]
    results = await asyncio.gather(
        *(
            writers[index % 2].save_state(scope, AgentState(turns=index), expected_revision=0)
            for index in range(8)
        ),
        return_exceptions=True,
    )
    winners = [index for index, result in enumerate(results) if result == 1]
    assert len(winners) == 1
    assert all(isinstance(r, ConflictError) for i, r in enumerate(results) if i != winners[0])
    assert (await writers[0].load_state(scope)).turns == winners[0]


async def test_concurrent_read_modify_writes_lose_no_update(
    backends: Backends, unique: str
) -> None:
    scope = scope_of(unique)
    writers = [AgentStateStore(AgentState, await backends.open()) for _ in range(2)]

    def take_turn(state: AgentState) -> None:
        state.turns += 1

    await asyncio.gather(
        *(writers[index % 2].update(scope, take_turn, attempts=50) for index in range(6))
    )
    loaded = await writers[0].load(scope)
    assert loaded.state.turns == 6
    assert loaded.revision == 6


async def test_every_scope_field_keeps_states_apart(backends: Backends, unique: str) -> None:
    backend = await backends.open()
    states = AgentStateStore(AgentState, backend)
    base = scope_of(unique)
    variants = [
        base,
        base.model_copy(update={"tenant": f"u{unique}"}),
        base.model_copy(update={"org_id": "acme"}),
        base.model_copy(update={"project_id": "bot"}),
        base.model_copy(update={"user_id": "ben"}),
        base.model_copy(update={"agent_id": "planner"}),
        base.model_copy(update={"agent_id": "writer"}),
        base.model_copy(update={"session_id": "s2"}),
        base.model_copy(update={"group_id": "family"}),
        base.model_copy(update={"agent_id": "planner", "group_id": "family"}),
    ]
    for turns, scope in enumerate(variants, start=1):
        assert await states.save_state(scope, AgentState(turns=turns)) == 1
    for turns, scope in enumerate(variants, start=1):
        assert (await states.load_state(scope)).turns == turns
    try:
        assert await states.delete_state(variants[5]) is True
        assert await states.delete_state(variants[5]) is False
        assert (await states.load(variants[5])).revision == 0
        assert (await states.load_state(variants[6])).turns == 7
        assert (await states.load_state(base)).turns == 1
    finally:
        for scope in variants[1:]:
            await states.forget_user(scope)


async def test_forgetting_a_user_removes_all_their_states_and_no_one_elses(
    backends: Backends, unique: str
) -> None:
    backend = await backends.open()
    first = AgentStateStore(AgentState, backend)
    second = AgentStateStore(Task, backend, name="CurrentTask")
    ana_s1 = scope_of(unique)
    ana_s2 = scope_of(unique, session_id="s2", agent_id="planner")
    ben = scope_of(unique, user_id="ben")
    other_tenant = ana_s1.model_copy(update={"tenant": f"u{unique}"})
    for scope in (ana_s1, ana_s2, ben, other_tenant):
        await first.save_state(scope, AgentState(turns=1))
    await second.save_state(ana_s1, Task(title="x"))

    removed = await first.forget_user(ana_s2)
    # working memory forgets the user's sessions (2); the others count records (3)
    assert removed == (2 if backends.kind == "working" else 3)
    assert (await first.load(ana_s1)).revision == 0
    assert (await first.load(ana_s2)).revision == 0
    with pytest.raises(NotFoundError, match="no CurrentTask state"):
        await second.load_state(ana_s1)
    assert (await first.load_state(ben)).turns == 1
    assert (await first.load_state(other_tenant)).turns == 1
    await first.forget_user(ben)
    await first.forget_user(other_tenant)


async def test_scopes_holding_lists_every_scope_of_a_name_across_tenants(
    backends: Backends, unique: str
) -> None:
    backend = await backends.open()
    states = AgentStateStore(AgentState, backend, name="SweptState")
    others = AgentStateStore(AgentState, backend, name="OtherState")
    base = scope_of(unique)
    held = [
        base,
        base.model_copy(update={"agent_id": "planner", "group_id": "family"}),
        base.model_copy(update={"tenant": f"u{unique}", "session_id": "s2"}),
        base.model_copy(update={"user_id": "ben"}),
    ]
    for scope in held:
        await states.save_state(scope, AgentState(turns=1))
    await others.save_state(base.model_copy(update={"user_id": "cy"}), AgentState())
    try:
        found = [s for s in await backend.scopes_holding("SweptState") if unique in s.tenant]
        key = [record_key(scope, "SweptState") for scope in found]
        assert key == sorted(key)
        assert sorted(found, key=str) == sorted(held, key=str)
        assert await backend.scopes_holding("NoSuchState") == []
    finally:
        for scope in [*held, base.model_copy(update={"user_id": "cy"})]:
            await states.forget_user(scope)


async def test_listing_a_user_gives_every_record_with_its_scope_and_no_one_elses(
    backends: Backends, unique: str
) -> None:
    backend = await backends.open()
    first = AgentStateStore(AgentState, backend)
    second = AgentStateStore(Task, backend, name="CurrentTask")
    ana_s1 = scope_of(unique)
    ana_planner = scope_of(unique, session_id="s2", agent_id="planner", group_id="family")
    ben = scope_of(unique, user_id="ben")
    other_project = ana_s1.model_copy(update={"project_id": "bot"})
    await first.save_state(ana_s1, AgentState(turns=1))
    await first.save_state(ana_s1, AgentState(turns=2))
    await second.save_state(ana_planner, Task(title="vet 🐶"))
    for scope in (ben, other_project):
        await first.save_state(scope, AgentState(turns=9))
    try:
        # a new backend object sees the same records, as another process would
        listed = await (await backends.open()).list_user(ana_planner)
        assert [(r.scope, r.name, r.revision) for r in listed] == [
            (ana_s1, "AgentState", 2),
            (ana_planner, "CurrentTask", 1),
        ]
        assert listed[0].envelope == (await backend.get(ana_s1, "AgentState")).envelope
        assert listed[1].envelope["data"]["title"] == "vet 🐶"
        assert await backend.list_user(scope_of(unique, user_id="cy")) == []
    finally:
        for scope in (ana_s1, ben, other_project):
            await first.forget_user(scope)


async def test_forgetting_a_session_removes_its_states_and_no_other_sessions(
    backends: Backends, unique: str
) -> None:
    backend = await backends.open()
    first = AgentStateStore(AgentState, backend)
    second = AgentStateStore(Task, backend, name="CurrentTask")
    ana_s1 = scope_of(unique)
    ana_s1_planner = scope_of(unique, agent_id="planner")
    ana_s2 = scope_of(unique, session_id="s2")
    ben_s1 = scope_of(unique, user_id="ben")
    for scope in (ana_s1, ana_s1_planner, ana_s2, ben_s1):
        await first.save_state(scope, AgentState(turns=1))
    await second.save_state(ana_s1, Task(title="x"))

    removed = await first.forget_session(ana_s1)
    # working memory forgets the session (1); the others count its records (3)
    assert removed == (1 if backends.kind == "working" else 3)
    assert (await first.load(ana_s1)).revision == 0
    assert (await first.load(ana_s1_planner)).revision == 0
    with pytest.raises(NotFoundError, match="no CurrentTask state"):
        await second.load_state(ana_s1)
    assert (await first.load_state(ana_s2)).turns == 1
    assert (await first.load_state(ben_s1)).turns == 1
    assert await first.forget_session(ana_s1) == 0
    with pytest.raises(InvalidInputError) as refused:
        await first.forget_session(ana_s1.user_scope())
    assert refused.value.field == "session_id"
    await first.forget_user(ana_s2)
    await first.forget_user(ben_s1)


async def test_user_wide_state_without_a_session(backends: Backends, unique: str) -> None:
    states = AgentStateStore(AgentState, await backends.open())
    user_wide = scope_of(unique, session_id=None)
    if backends.kind == "working":
        with pytest.raises(InvalidInputError) as caught:
            await states.save_state(user_wide, AgentState())
        assert caught.value.field == "session_id"
        return
    await states.save_state(user_wide, AgentState(turns=5))
    assert (await states.load_state(user_wide)).turns == 5
    assert (await states.load(scope_of(unique))).revision == 0


# ---------------------------------------------------------------------- Redis upgrade


async def test_redis_start_moves_records_of_the_untagged_layout(
    redis_service_url: str, unique: str
) -> None:
    """Records an earlier version wrote without the user's hash tag load after the upgrade,
    and forgetting the user still removes every one of them."""
    from memmachine.adapters.redis.redis_state_backend import RedisStateBackend

    prefix = f"state-old-{unique}"
    tenant = f"t{unique}"
    user = f"{prefix}:state:{tenant}:default:default:ana"
    envelope = json.dumps({"schema": "AgentState", "version": 1, "data": {"turns": 4}})
    raw = async_redis_client(redis_service_url, decode_responses=True)
    try:
        for record in (f"{user}::s1::AgentState", f"{user}:planner:s2::AgentState"):
            await raw.hset(record, mapping={"revision": 2, "envelope": envelope})
            await raw.sadd(user, record)
        backend = RedisStateBackend(redis_service_url, key_prefix=prefix)
        await backend.start()
        try:
            states = AgentStateStore(AgentState, backend)
            loaded = await states.load(scope_of(unique))
            assert (loaded.state.turns, loaded.revision) == (4, 2)
            planner = scope_of(unique, session_id="s2", agent_id="planner")
            assert (await states.load_state(planner)).turns == 4
            assert [key async for key in raw.scan_iter(match=f"{user}*")] == []
            assert await states.forget_user(planner) == 2
            assert [key async for key in raw.scan_iter(match=f"{prefix}:*")] == []
        finally:
            await backend.close()
    finally:
        drop_redis_keys(redis_service_url, f"{prefix}:*")
        await raw.aclose()


# ---------------------------------------------------------------------- working memory


async def test_working_memory_state_is_what_the_session_shows(
    manager: MemoryManager, unique: str
) -> None:
    scope = scope_of(unique)
    await manager.put_working(scope, state={"step": "greeting"})
    states = AgentStateStore(AgentState, WorkingMemoryStateBackend(manager))
    async with states.session(scope) as state:
        state.turns = 1
        # a message lands in the session meanwhile: the save still goes through
        await manager.append_working(
            scope, [WorkingMessage(role="user", content="hi", timestamp=utc_now())]
        )

    memory = await manager.get_working(scope)
    assert memory.state["step"] == "greeting"
    entry = memory.state["agent_state"]["AgentState"]
    assert entry["schema"] == "AgentState"
    assert entry["version"] == 1
    assert entry["revision"] == 1
    assert entry["data"]["turns"] == 1
    assert [message.content for message in memory.messages] == ["hi"]

    await states.save_state(scope.model_copy(update={"agent_id": "planner"}), AgentState())
    keys = set((await manager.get_working(scope)).state["agent_state"])
    assert keys == {"AgentState", "AgentState agent=planner"}

    assert await states.delete_state(scope) is True
    assert set((await manager.get_working(scope)).state["agent_state"]) == {
        "AgentState agent=planner"
    }

    report = await manager.forget_user(scope)
    assert report.sessions_deleted == 1
    assert (await states.load(scope.model_copy(update={"agent_id": "planner"}))).revision == 0


async def test_working_memory_refuses_state_the_redactor_would_alter(
    manager: MemoryManager, unique: str
) -> None:
    scope = scope_of(unique)
    states = AgentStateStore(AgentState, WorkingMemoryStateBackend(manager))
    await states.save_state(scope, AgentState(turns=1))
    with_email = AgentState(tasks=[Task(title="mail ana@example.com the invoice")])
    with pytest.raises(InvalidInputError) as caught:
        await states.save_state(scope, with_email)
    assert caught.value.field == "tasks.0.title"
    assert "email" in caught.value.message
    assert (await states.load_state(scope)).turns == 1
    await manager.forget_user(scope)


async def test_working_memory_enforces_the_state_size_limit(
    manager: MemoryManager, unique: str
) -> None:
    scope = scope_of(unique)
    states = AgentStateStore(AgentState, WorkingMemoryStateBackend(manager))
    too_big = AgentState(note="x" * (manager.limits.max_state_bytes + 1))
    with pytest.raises(InvalidInputError) as caught:
        await states.save_state(scope, too_big)
    assert caught.value.field == "state"
    assert (await states.load(scope)).revision == 0


def test_build_state_backend_rejects_what_it_cannot_build(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    with pytest.raises(ConfigurationError, match="unknown state backend 'mongo'"):
        build_state_backend(settings, "mongo")
    with pytest.raises(ConfigurationError, match="needs a manager"):
        build_state_backend(settings, "working")
    with pytest.raises(ConfigurationError, match="needs a URL"):
        build_state_backend(settings, "redis")


# ---------------------------------------------------------------------- MemoryLayer


def test_memory_layer_state_blocking_api(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, embedding=EmbeddingSettings(provider="none"))
    with MemoryLayer(session_id="chat-1", settings=settings) as memory:
        handle = memory.state(AgentState, user_id="ana")
        with handle as state:
            state.tasks.append(Task(title="plan the trip", estimate=Decimal("2.25")))
            state.mood = Mood.BUSY
        assert handle.load().tasks[0].estimate == Decimal("2.25")
        assert memory.manager is not None
        working = memory.state(AgentState, user_id="ana").load()
        assert working.mood is Mood.BUSY

        on_file = memory.state(AgentState, user_id="ana", backend="file")
        assert on_file.load() == AgentState()  # each backend holds its own states
        assert on_file.save(sample_state()) == 1
        assert on_file.update(lambda state: state.model_copy(update={"turns": 8})).turns == 8
        with pytest.raises(ConflictError):
            on_file.save(AgentState(), expected_revision=1)

        memory.forget_user("ana")
        assert handle.load() == AgentState()
        # forget_user reaches every backend the layer opened, the file one too
        assert on_file.load() == AgentState()
        assert on_file.delete() is False

    # the file backend persisted under the data dir and is closed with the layer
    assert (tmp_path / "state").is_dir()
