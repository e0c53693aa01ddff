"""Typed agent state (memmachine.agent_state): round trips, names, envelopes, migrations,
validation and autosave, over the file backend in a temporary directory.

Every backend is checked against the StateBackend contract in
tests/integration/test_agent_state_backends.py; these tests are about the typed layer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel, Field

from memmachine.adapters.file.file_state_backend import FileStateBackend
from memmachine.agent_state import AgentStateStore, StateBackend
from memmachine.errors import ConflictError, InvalidInputError, NotFoundError, StateSchemaError
from memmachine.models import Scope

SCOPE = Scope(user_id="ana", session_id="s1")


class Priority(StrEnum):
    LOW = "low"
    HIGH = "high"


class Seat(IntEnum):
    AISLE = 1
    WINDOW = 2


class Stop(BaseModel):
    city: str
    arrive: datetime
    nights: int = 1
    cost: Decimal = Decimal("0.00")


class TripState(BaseModel):
    trip_id: UUID | None = None
    started: datetime | None = None
    day: date | None = None
    wake: time | None = None
    budget: Decimal = Decimal("0.00")
    priority: Priority = Priority.LOW
    seat: Seat | None = None
    stops: list[Stop] = Field(default_factory=list)
    by_city: dict[str, Stop] = Field(default_factory=dict)
    counters: dict[int, int] = Field(default_factory=dict)
    tags: set[str] = Field(default_factory=set)
    pair: tuple[int, str] | None = None
    ratio: float = 0.5
    notes: str | None = None
    visits: int = 0


class Profile(BaseModel):
    """A state without a default: it needs a name."""

    name: str
    visits: int = 0


def rich_trip() -> TripState:
    lisbon = datetime(2025, 7, 14, 10, 30, tzinfo=ZoneInfo("Europe/Lisbon"))
    kolkata = datetime(2025, 4, 2, 9, 15, 30, 123456, tzinfo=timezone(timedelta(hours=5.5)))
    porto = Stop(city="Porto", arrive=lisbon, nights=2, cost=Decimal("120.10"))
    goa = Stop(city="Goa", arrive=kolkata, cost=Decimal("0.000001"))
    return TripState(
        trip_id=UUID("8f7a3c1e-2b4d-4e6f-9a0b-1c2d3e4f5a6b"),
        started=datetime(2025, 3, 1, 23, 59, 59, 999999, tzinfo=UTC),
        day=date(2025, 2, 28),
        wake=time(6, 45, 10),
        budget=Decimal("1234567890.12345678901234567890"),
        priority=Priority.HIGH,
        seat=Seat.WINDOW,
        stops=[porto, goa],
        by_city={"porto": porto, "goa": goa},
        counters={1: 10, -2: 20},
        tags={"beach", "ünïcødé ✈"},
        pair=(7, "seven"),
        ratio=0.1 + 0.2,
        notes='line one\nline two "quoted"',
    )


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[StateBackend]:
    files = FileStateBackend(tmp_path / "state")
    await files.start()
    yield files
    await files.close()


async def test_rich_state_round_trips_exactly(backend: StateBackend) -> None:
    states = AgentStateStore(TripState, backend)
    trip = rich_trip()
    assert await states.save_state(SCOPE, trip) == 1

    loaded = await states.load_state(SCOPE)
    assert loaded == trip
    assert loaded.model_dump() == trip.model_dump()
    # the instant and the UTC offset survive; a zoneinfo zone reads back as its offset then
    assert loaded.stops[0].arrive.utcoffset() == timedelta(hours=1)
    assert loaded.stops[1].arrive.utcoffset() == timedelta(hours=5, minutes=30)
    assert loaded.stops[1].arrive.microsecond == 123456
    assert str(loaded.budget) == "1234567890.12345678901234567890"
    assert str(loaded.stops[1].cost) == "0.000001"
    assert loaded.priority is Priority.HIGH
    assert loaded.seat is Seat.WINDOW
    assert isinstance(loaded.by_city["goa"], Stop)
    assert loaded.counters == {1: 10, -2: 20}
    assert loaded.ratio == 0.1 + 0.2
    assert loaded.notes is not None
    assert loaded.seat is not None


async def test_a_local_time_in_a_dst_gap_keeps_its_wall_time_and_offset(
    backend: StateBackend,
) -> None:
    states = AgentStateStore(TripState, backend)
    gap = datetime(2025, 3, 30, 1, 30, tzinfo=ZoneInfo("Europe/Lisbon"))  # clocks skip 1:00-2:00
    await states.save_state(SCOPE, TripState(started=gap))
    loaded = (await states.load_state(SCOPE)).started
    assert loaded is not None
    assert loaded.replace(tzinfo=None) == gap.replace(tzinfo=None)
    assert loaded.utcoffset() == gap.utcoffset()


async def test_nothing_stored_gives_a_fresh_default_or_a_named_not_found(
    backend: StateBackend,
) -> None:
    trips = AgentStateStore(TripState, backend)
    first = await trips.load(SCOPE)
    assert first.state == TripState()
    assert first.revision == 0

    profiles = AgentStateStore(Profile, backend)
    with pytest.raises(NotFoundError) as caught:
        await profiles.load_state(SCOPE)
    assert "Profile" in caught.value.message
    assert "user_id=ana" in caught.value.message
    await profiles.save_state(SCOPE, Profile(name="Ana"))
    assert await profiles.load_state(SCOPE) == Profile(name="Ana")


async def test_each_state_type_has_its_own_record(backend: StateBackend) -> None:
    class Counter(BaseModel):
        visits: int = 0

    trips = AgentStateStore(TripState, backend)
    counters = AgentStateStore(Counter, backend)
    await trips.save_state(SCOPE, TripState(visits=3))
    await counters.save_state(SCOPE, Counter(visits=9))
    assert (await trips.load_state(SCOPE)).visits == 3
    assert (await counters.load_state(SCOPE)).visits == 9
    assert counters.name.endswith("<locals>.Counter")
    assert trips.name == "TripState"

    renamed = AgentStateStore(Counter, backend, name="visits.v1")
    assert (await renamed.load_state(SCOPE)).visits == 0
    with pytest.raises(InvalidInputError) as caught:
        AgentStateStore(Counter, backend, name="has space")
    assert caught.value.field == "name"


async def test_the_stored_envelope_names_schema_and_version(backend: StateBackend) -> None:
    states = AgentStateStore(TripState, backend, schema_version=3, migrations={})
    await states.save_state(SCOPE, TripState(visits=1))
    stored = await backend.get(SCOPE, "TripState")
    assert stored is not None
    assert stored.revision == 1
    assert stored.envelope["schema"] == "TripState"
    assert stored.envelope["version"] == 3
    assert stored.envelope["data"]["visits"] == 1


class CartV1(BaseModel):
    items: list[str] = Field(default_factory=list)


class Line(BaseModel):
    sku: str
    qty: int


class CartV3(BaseModel):
    lines: list[Line] = Field(default_factory=list)
    currency: str


def v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    return {"lines": [{"sku": item, "qty": 1} for item in data["items"]]}


def v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "currency": "EUR"}


async def test_older_versions_are_migrated_step_by_step_on_load(backend: StateBackend) -> None:
    old = AgentStateStore(CartV1, backend, name="Cart")
    await old.save_state(SCOPE, CartV1(items=["tea", "cake"]))

    new = AgentStateStore(
        CartV3, backend, name="Cart", schema_version=3, migrations={1: v1_to_v2, 2: v2_to_v3}
    )
    cart = await new.load_state(SCOPE)
    assert cart == CartV3(lines=[Line(sku="tea", qty=1), Line(sku="cake", qty=1)], currency="EUR")
    # a load never rewrites the record; the next save stores the new version
    stored = await backend.get(SCOPE, "Cart")
    assert stored is not None
    assert stored.envelope["version"] == 1
    await new.save_state(SCOPE, cart)
    stored = await backend.get(SCOPE, "Cart")
    assert stored is not None
    assert stored.envelope["version"] == 3
    assert await new.load_state(SCOPE) == cart


async def test_unreadable_versions_are_reported_and_the_record_is_kept(
    backend: StateBackend,
) -> None:
    v1 = AgentStateStore(CartV1, backend, name="Cart")
    await v1.save_state(SCOPE, CartV1(items=["tea"]))

    missing_step = AgentStateStore(
        CartV3, backend, name="Cart", schema_version=3, migrations={2: v2_to_v3}
    )
    with pytest.raises(StateSchemaError) as caught:
        await missing_step.load_state(SCOPE)
    assert caught.value.stored_version == 1
    assert caught.value.schema == "Cart"
    assert "from version 1 to 2" in caught.value.message

    def broken(data: dict[str, Any]) -> dict[str, Any]:
        return {"lines": data["no such key"]}

    failing = AgentStateStore(
        CartV3, backend, name="Cart", schema_version=3, migrations={1: broken, 2: v2_to_v3}
    )
    with pytest.raises(StateSchemaError) as caught:
        await failing.load_state(SCOPE)
    assert "from version 1 to 2 failed" in caught.value.message
    assert "KeyError" in caught.value.message

    not_valid = AgentStateStore(CartV3, backend, name="Cart", schema_version=1)
    with pytest.raises(StateSchemaError) as caught:
        await not_valid.load_state(SCOPE)
    assert caught.value.field == "currency"
    assert caught.value.stored_version == 1
    assert "CartV3" in caught.value.message

    # code older than the data refuses to read it (and so cannot overwrite it by accident)
    await AgentStateStore(
        CartV3, backend, name="Cart", schema_version=3, migrations={1: v1_to_v2, 2: v2_to_v3}
    ).save_state(SCOPE, CartV3(currency="USD"))
    with pytest.raises(StateSchemaError) as caught:
        await v1.load_state(SCOPE)
    assert caught.value.stored_version == 3
    assert "newer" in caught.value.message

    # none of this touched the record
    stored = await backend.get(SCOPE, "Cart")
    assert stored is not None
    assert stored.revision == 2
    assert stored.envelope["data"] == {"lines": [], "currency": "USD"}


async def test_a_failing_nested_field_is_named_by_its_path(backend: StateBackend) -> None:
    states = AgentStateStore(TripState, backend)
    envelope = {
        "schema": "TripState",
        "version": 1,
        "data": {"stops": [{"city": "Porto", "arrive": "2025-01-01T00:00:00Z"}, {"city": "X"}]},
    }
    await backend.put(SCOPE, "TripState", envelope)
    with pytest.raises(StateSchemaError) as caught:
        await states.load_state(SCOPE)
    assert caught.value.field == "stops.1.arrive"


async def test_records_that_are_not_envelopes_of_this_schema_are_refused(
    backend: StateBackend,
) -> None:
    states = AgentStateStore(TripState, backend)
    await backend.put(SCOPE, "TripState", {"visits": 3})
    with pytest.raises(StateSchemaError, match="not a versioned envelope"):
        await states.load_state(SCOPE)
    await backend.put(SCOPE, "TripState", {"schema": "Other", "version": 1, "data": {}})
    with pytest.raises(StateSchemaError, match="'Other'"):
        await states.load_state(SCOPE)


async def test_invalid_state_is_refused_naming_the_field_and_nothing_is_stored(
    backend: StateBackend,
) -> None:
    states = AgentStateStore(TripState, backend)
    await states.save_state(SCOPE, TripState(visits=1))

    bad = TripState()
    bad.visits = "many"  # type: ignore[assignment]  # no validate_assignment on the model
    with pytest.raises(InvalidInputError) as caught:
        await states.save_state(SCOPE, bad)
    assert caught.value.field == "visits"

    not_json = TripState(ratio=float("nan"))
    with pytest.raises(InvalidInputError) as caught:
        await states.save_state(SCOPE, not_json)
    assert caught.value.field == "ratio"

    nested = TripState(stops=[Stop(city="Porto", arrive=datetime(2025, 1, 1, tzinfo=UTC))])
    nested.stops[0].nights = "two"  # type: ignore[assignment]
    with pytest.raises(InvalidInputError) as caught:
        await states.save_state(SCOPE, nested)
    assert caught.value.field == "stops.0.nights"

    with pytest.raises(InvalidInputError) as caught:
        await states.save_state(SCOPE, Profile(name="x"))  # type: ignore[arg-type]
    assert caught.value.field == "state"

    loaded = await states.load(SCOPE)
    assert loaded.state == TripState(visits=1)
    assert loaded.revision == 1


async def test_bad_construction_arguments_are_named() -> None:
    files = FileStateBackend("/nonexistent-never-started")
    with pytest.raises(InvalidInputError) as caught:
        AgentStateStore(TripState, files, schema_version=0)
    assert caught.value.field == "schema_version"
    with pytest.raises(InvalidInputError) as caught:
        AgentStateStore(TripState, files, schema_version=2, migrations={2: v1_to_v2})
    assert caught.value.field == "migrations"
    with pytest.raises(InvalidInputError) as caught:
        AgentStateStore(dict, files)  # type: ignore[type-var]
    assert caught.value.field == "model"


async def test_session_saves_changes_on_exit_and_only_then(backend: StateBackend) -> None:
    states = AgentStateStore(TripState, backend)
    async with states.session(SCOPE) as trip:
        trip.visits += 1
        trip.stops.append(Stop(city="Porto", arrive=datetime(2025, 5, 1, tzinfo=UTC)))
    loaded = await states.load(SCOPE)
    assert loaded.revision == 1
    assert loaded.state.visits == 1
    assert loaded.state.stops[0].city == "Porto"

    async with states.session(SCOPE) as trip:
        pass  # unchanged: nothing is written
    assert (await states.load(SCOPE)).revision == 1

    async def failing_step() -> None:
        async with states.session(SCOPE) as trip:
            trip.visits = 100
            raise RuntimeError("the agent step failed")

    with pytest.raises(RuntimeError):
        await failing_step()
    assert (await states.load_state(SCOPE)).visits == 1


async def test_session_refuses_to_overwrite_a_concurrent_save(backend: StateBackend) -> None:
    states = AgentStateStore(TripState, backend)
    await states.save_state(SCOPE, TripState(visits=1))

    async def step_racing_another_writer() -> None:
        async with states.session(SCOPE) as trip:
            trip.notes = "mine"
            await states.save_state(SCOPE, TripState(visits=1, notes="theirs"))

    with pytest.raises(ConflictError) as caught:
        await step_racing_another_writer()
    assert caught.value.current_version == 2
    assert (await states.load_state(SCOPE)).notes == "theirs"


async def test_concurrent_updates_all_land(backend: StateBackend) -> None:
    states = AgentStateStore(TripState, backend)

    def bump(trip: TripState) -> None:
        trip.visits += 1

    await asyncio.gather(*(states.update(SCOPE, bump, attempts=50) for _ in range(6)))
    loaded = await states.load(SCOPE)
    assert loaded.state.visits == 6
    assert loaded.revision == 6


async def test_delete_and_forget_user(backend: StateBackend) -> None:
    states = AgentStateStore(TripState, backend)
    other_session = SCOPE.for_session("s2")
    ben = Scope(user_id="ben", session_id="s1")
    for scope in (SCOPE, other_session, ben):
        await states.save_state(scope, TripState(visits=2))

    assert await states.delete_state(SCOPE) is True
    assert await states.delete_state(SCOPE) is False
    assert (await states.load(SCOPE)).revision == 0

    assert await states.forget_user(other_session) == 1
    assert (await states.load(other_session)).revision == 0
    assert (await states.load_state(ben)).visits == 2
