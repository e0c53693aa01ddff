"""Contract suite of :class:`memmachine.ports.ProfileStore`, run against every adapter.

Adapters are listed in ``PROFILE_STORE_URLS`` as the names of fixtures that return an
async SQLAlchemy URL for a fresh (or shared) database. Every test works under tenants that start
with its own ``unique`` token and removes them afterwards, so a shared server database works
as well as a temporary SQLite file.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, text
from sqlalchemy.ext.asyncio import create_async_engine

from memmachine.adapters.sql.sql_models import ProfileFactHistoryRow, ProfileFactRow
from memmachine.adapters.sql.sql_profile_store import SqlProfileStore
from memmachine.errors import (
    ConfigurationError,
    InvalidInputError,
    MemMachineError,
    StoreError,
)
from memmachine.models import EXPIRED_SOURCE, Fact, FactRecord, FactTimes, Scope, utc_now
from memmachine.ports import ProfileStore
from tests.conftest import temporary_postgres_database
from tests.contract.conftest import (
    USER_IDS_IN_ORDER,
    check_project_listing,
    check_user_listing,
    projects_of,
)

# --------------------------------------------------------------------------- adapters


@pytest.fixture
def sqlite_profile_url(tmp_path: Path) -> str:
    """A new SQLite file in a directory that does not exist yet (the store creates it)."""
    return f"sqlite+aiosqlite:///{tmp_path / 'profile' / 'facts.db'}"


@pytest.fixture(scope="session")
def postgresql_profile_url(postgres_admin_url: str) -> Iterator[str]:
    """``MEMMACHINE_TEST_POSTGRES_URL`` when set (used as is, never dropped); otherwise a
    database of its own on the session's PostgreSQL with pgvector, dropped at the end."""
    url = os.environ.get("MEMMACHINE_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    with temporary_postgres_database(postgres_admin_url) as created:
        yield created


@pytest.fixture(scope="session")
def postgresql_plain_profile_url(postgres_plain_admin_url: str) -> Iterator[str]:
    """A database of its own on the session's PostgreSQL without pgvector."""
    with temporary_postgres_database(postgres_plain_admin_url) as created:
        yield created


#: Fixture names returning a URL, one per adapter under test.
PROFILE_STORE_URLS = [
    pytest.param("sqlite_profile_url", id="sqlite"),
    pytest.param("postgresql_profile_url", id="postgresql"),
    pytest.param("postgresql_plain_profile_url", id="postgresql-plain"),
]


@pytest.fixture(params=PROFILE_STORE_URLS)
async def profile_url(request: pytest.FixtureRequest, unique: str) -> AsyncIterator[str]:
    """The adapter's URL; afterwards the test's tenants are removed from a server database."""
    url = str(request.getfixturevalue(request.param))
    yield url
    if not url.startswith("sqlite"):  # a temporary SQLite file goes away by itself
        engine = create_async_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.execute(
                    delete(ProfileFactRow).where(ProfileFactRow.tenant.like(f"t{unique}%"))
                )
                await conn.execute(
                    delete(ProfileFactHistoryRow).where(
                        ProfileFactHistoryRow.tenant.like(f"t{unique}%")
                    )
                )
        finally:
            await engine.dispose()


@pytest.fixture
async def profile_store(profile_url: str) -> AsyncIterator[SqlProfileStore]:
    store = SqlProfileStore(profile_url)
    await store.start()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def poison(
    profile_store: SqlProfileStore, profile_url: str, unique: str
) -> AsyncIterator[Callable[[str], Awaitable[None]]]:
    """Make the database itself reject any row written with a given value (a trigger)."""
    engine = create_async_engine(profile_url)
    name = f"poison_{unique}"
    dialect = engine.dialect.name

    async def install(value: str) -> None:
        literal = value.replace("'", "''")
        async with engine.begin() as conn:
            if dialect == "sqlite":
                for event in ("INSERT", "UPDATE"):
                    await conn.execute(
                        text(
                            f"CREATE TRIGGER {name}_{event.lower()} BEFORE {event} "
                            f"ON profile_facts WHEN NEW.value = '{literal}' "
                            "BEGIN SELECT RAISE(ABORT, 'poisoned'); END"
                        )
                    )
            elif dialect == "postgresql":
                await conn.execute(
                    text(
                        f"CREATE FUNCTION {name}() RETURNS trigger AS $$ BEGIN "
                        f"IF NEW.value = '{literal}' THEN RAISE EXCEPTION 'poisoned'; END IF; "
                        "RETURN NEW; END $$ LANGUAGE plpgsql"
                    )
                )
                await conn.execute(
                    text(
                        f"CREATE TRIGGER {name} BEFORE INSERT OR UPDATE ON profile_facts "
                        f"FOR EACH ROW EXECUTE FUNCTION {name}()"
                    )
                )
            else:  # pragma: no cover - a new adapter must say how to poison its database
                pytest.fail(f"no poison trigger for {dialect}")

    try:
        yield install
    finally:
        async with engine.begin() as conn:
            if dialect == "sqlite":
                await conn.execute(text(f"DROP TRIGGER IF EXISTS {name}_insert"))
                await conn.execute(text(f"DROP TRIGGER IF EXISTS {name}_update"))
            elif dialect == "postgresql":
                await conn.execute(text(f"DROP TRIGGER IF EXISTS {name} ON profile_facts"))
                await conn.execute(text(f"DROP FUNCTION IF EXISTS {name}()"))
        await engine.dispose()


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def scope(unique: str) -> Scope:
    return Scope(tenant=f"t{unique}", org_id="acme", project_id="crm", user_id="alice")


def fact(tag: str, feature: str, value: str, **extra: Any) -> FactRecord:
    return FactRecord(tag=tag, feature=feature, value=value, **extra)


def unit(*components: float) -> list[float]:
    norm = sum(c * c for c in components) ** 0.5
    return [c / norm for c in components]


def keyed(facts: list[Fact]) -> dict[tuple[str, str], Fact]:
    return {(f.tag, f.feature): f for f in facts}


async def seed_food(store: ProfileStore, scope: Scope) -> list[Fact]:
    return await store.upsert_facts(
        scope,
        [
            fact("food", "coffee", "Drinks black coffee every morning", embedding=unit(1, 0, 0)),
            fact("food", "tea", "Prefers green tea in the afternoon", embedding=unit(0, 1, 0)),
            fact("pets", "dog", "Has a golden retriever named Rex", embedding=unit(0, 0, 1)),
            fact("work", "employer", "Works at a bank in Zurich"),
        ],
    )


# --------------------------------------------------------------------------- lifecycle


async def test_is_a_profile_store(profile_store: SqlProfileStore) -> None:
    assert isinstance(profile_store, ProfileStore)
    assert profile_store.name == "profile"
    assert profile_store.kind in ("sqlite", "postgresql")


async def test_start_and_close_are_idempotent(profile_url: str, scope: Scope) -> None:
    store = SqlProfileStore(profile_url)
    async with store:
        await store.start()
        await store.upsert_facts(scope, [fact("a", "b", "c")])
    await store.close()
    await store.close()


async def test_health_reports_version_and_latency(profile_store: SqlProfileStore) -> None:
    health = await profile_store.health()
    assert health.status == "ok"
    assert health.name == "profile"
    assert health.kind == profile_store.kind
    assert health.version
    assert health.latency_ms is not None
    assert health.latency_ms >= 0


async def test_health_of_a_closed_store_is_down_not_an_error(profile_url: str) -> None:
    store = SqlProfileStore(profile_url)
    assert (await store.health()).status == "down"
    await store.start()
    await store.close()
    health = await store.health()
    assert health.status == "down"
    assert health.detail


async def test_use_before_start_is_a_store_error(profile_url: str, scope: Scope) -> None:
    store = SqlProfileStore(profile_url)
    with pytest.raises(StoreError) as caught:
        await store.list_facts(scope)
    assert caught.value.store == "profile"


async def test_facts_persist_across_close_and_start(profile_url: str, scope: Scope) -> None:
    async with SqlProfileStore(profile_url) as store:
        [stored] = await store.upsert_facts(
            scope, [fact("food", "coffee", "black", metadata={"n": [1, {"é": None}]})]
        )
    async with SqlProfileStore(profile_url) as reopened:
        assert await reopened.get_fact(scope, stored.id) == stored


# --------------------------------------------------------------------------- upsert


async def test_upsert_creates_facts_in_input_order(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    writer = scope.model_copy(update={"agent_id": "crm-bot", "group_id": "family"})
    facts = await profile_store.upsert_facts(
        writer,
        [
            fact("work", "title", "Engineer", confidence=0.7, source="extracted"),
            fact("food", "coffee", "black", source_session_id="s1"),
        ],
    )
    assert [(f.tag, f.feature, f.value) for f in facts] == [
        ("work", "title", "Engineer"),
        ("food", "coffee", "black"),
    ]
    first, second = facts
    assert first.confidence == 0.7
    assert first.source == "extracted"
    assert first.source_session_id is None
    assert second.source_session_id == "s1"
    assert second.source == "explicit"
    assert first.id != second.id
    uuid.UUID(first.id)
    for stored in facts:
        assert stored.scope == writer.model_copy(update={"session_id": None})
        assert stored.created_at.tzinfo is not None
        assert stored.created_at.utcoffset() == timedelta(0)
        assert stored.updated_at == stored.created_at
        assert await profile_store.get_fact(scope, stored.id) == stored


async def test_upsert_empty_batch_stores_nothing(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    assert await profile_store.upsert_facts(scope, []) == []
    assert await profile_store.list_facts(scope) == []


async def test_upsert_existing_replaces_value_keeps_id_and_created_at(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    [old] = await profile_store.upsert_facts(
        scope.model_copy(update={"agent_id": "first-agent"}),
        [fact("food", "coffee", "black", confidence=0.5, metadata={"a": 1})],
    )
    [new] = await profile_store.upsert_facts(
        scope.model_copy(update={"agent_id": "second-agent"}),
        [
            fact(
                "food",
                "coffee",
                "flat white",
                confidence=0.9,
                source="extracted",
                source_session_id="s2",
                metadata={"b": 2},
            )
        ],
    )
    assert new.id == old.id
    assert new.created_at == old.created_at
    assert new.updated_at > old.updated_at
    assert (new.value, new.confidence, new.source) == ("flat white", 0.9, "extracted")
    assert new.source_session_id == "s2"
    assert new.metadata == {"b": 2}
    # Who recorded the fact first stays recorded.
    assert new.scope.agent_id == "first-agent"
    assert await profile_store.list_facts(scope) == [new]


async def test_new_value_keeps_the_old_version_in_the_history(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    [old] = await profile_store.upsert_facts(
        scope,
        [fact("food", "coffee", "black", source="user-explicit", source_episode_ids=["e1"])],
    )
    assert old.source_episode_ids == ["e1"]
    assert old.valid_from is not None
    assert old.valid_to is None
    [new] = await profile_store.upsert_facts(
        scope, [fact("food", "coffee", "flat white", source_episode_ids=["e2"])]
    )
    assert new.id == old.id
    assert new.source_episode_ids == ["e2"]
    assert new.valid_from is not None
    assert new.valid_from > old.valid_from
    [version] = await profile_store.fact_history(scope, "food", "coffee")
    assert (version.fact_id, version.value, version.source) == (old.id, "black", "user-explicit")
    assert version.source_episode_ids == ["e1"]
    assert version.valid_from == old.valid_from
    assert version.valid_to == new.valid_from
    assert version.reason == "superseded"


async def test_same_value_again_is_a_corroboration_without_history(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    [old] = await profile_store.upsert_facts(
        scope, [fact("food", "coffee", "black", source_episode_ids=["e1"])]
    )
    [again] = await profile_store.upsert_facts(
        scope, [fact("food", "coffee", "black", source_episode_ids=["e2", "e1"])]
    )
    assert again.updated_at > old.updated_at
    assert again.valid_from == old.valid_from
    assert again.source_episode_ids == ["e1", "e2"]
    assert await profile_store.fact_history(scope, "food", "coffee") == []


async def test_invalidated_fact_leaves_reads_and_stays_in_the_history(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    stored = keyed(await seed_food(profile_store, scope))
    coffee = stored[("food", "coffee")]
    other_user = scope.model_copy(update={"user_id": "bob"})
    assert await profile_store.invalidate_fact(other_user, coffee.id, "wrong user") is False
    assert await profile_store.invalidate_fact(scope, coffee.id, "user said otherwise") is True
    assert await profile_store.invalidate_fact(scope, coffee.id, "again") is False
    assert await profile_store.get_fact(scope, coffee.id) is None
    assert ("food", "coffee") not in keyed(await profile_store.list_facts(scope))
    hits = await profile_store.search_facts(scope, "coffee", None, 5)
    assert coffee.id not in [f.id for f, _ in hits]
    [version] = await profile_store.fact_history(scope, "food", "coffee")
    assert (version.value, version.reason) == (coffee.value, "user said otherwise")
    assert version.valid_to >= version.valid_from
    assert await profile_store.fact_history(other_user, "food", "coffee") == []
    # The (tag, feature) can hold a new fact afterwards.
    [fresh] = await profile_store.upsert_facts(scope, [fact("food", "coffee", "none")])
    assert fresh.id != coffee.id


async def test_list_fact_versions_holds_every_closed_version_of_the_user(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    stored = keyed(await seed_food(profile_store, scope))
    await profile_store.upsert_facts(scope, [fact("food", "tea", "green")])
    await profile_store.invalidate_fact(scope, stored[("food", "coffee")].id, "gave it up")
    other_user = scope.model_copy(update={"user_id": "bob"})
    await profile_store.upsert_facts(other_user, [fact("food", "tea", "x")])
    await profile_store.upsert_facts(other_user, [fact("food", "tea", "y")])
    versions = await profile_store.list_fact_versions(scope.for_session("elsewhere"))
    assert [(v.tag, v.feature, v.value, v.reason) for v in versions] == [
        ("food", "coffee", stored[("food", "coffee")].value, "gave it up"),
        ("food", "tea", stored[("food", "tea")].value, "superseded"),
    ]
    assert [v.value for v in await profile_store.list_fact_versions(other_user)] == ["x"]


async def test_restore_fact_times_puts_back_ids_and_times_when_the_history_matches(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    [old] = await profile_store.upsert_facts(scope, [fact("home", "city", "Porto")])
    await profile_store.upsert_facts(scope, [fact("home", "city", "Lisbon")])
    then = datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)
    current = FactTimes(
        id=f"restored-{uuid.uuid4().hex[:8]}",
        created_at=then,
        updated_at=then + timedelta(days=2),
        valid_from=then + timedelta(days=1),
    )
    version = FactTimes(
        id=current.id, valid_from=then, valid_to=then + timedelta(days=1), recorded_at=then
    )
    # Two versions given, one held: nothing changes.
    assert not await profile_store.restore_fact_times(
        scope, "home", "city", current, [version, version]
    )
    assert (await profile_store.list_facts(scope))[0].id == old.id
    assert await profile_store.restore_fact_times(scope, "home", "city", current, [version])
    [restored] = await profile_store.list_facts(scope)
    assert (restored.id, restored.value) == (current.id, "Lisbon")
    assert (restored.created_at, restored.updated_at, restored.valid_from) == (
        current.created_at,
        current.updated_at,
        current.valid_from,
    )
    [closed] = await profile_store.fact_history(scope, "home", "city")
    assert (closed.fact_id, closed.value, closed.valid_from, closed.valid_to) == (
        current.id,
        "Porto",
        then,
        then + timedelta(days=1),
    )
    # Another user's fact keeps its id: an id already taken is not given away.
    other = scope.model_copy(update={"user_id": "bob"})
    await profile_store.upsert_facts(other, [fact("home", "city", "Oslo")])
    assert await profile_store.restore_fact_times(other, "home", "city", current, [])
    assert (await profile_store.list_facts(other))[0].id != current.id


async def test_apply_facts_invalidates_and_upserts_in_one_transaction(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    stored = keyed(await seed_food(profile_store, scope))
    coffee, tea = stored[("food", "coffee")], stored[("food", "tea")]
    with pytest.raises(InvalidInputError):
        await profile_store.apply_facts(
            scope,
            [fact("food", "juice", "orange", metadata={"bad": float("nan")})],
            invalidate=[coffee.id],
            reason="contradicted",
        )
    assert await profile_store.get_fact(scope, coffee.id) == coffee
    [juice] = await profile_store.apply_facts(
        scope,
        [fact("food", "juice", "orange")],
        invalidate=[coffee.id, "missing-id"],
        reason="contradicted",
    )
    assert juice.value == "orange"
    assert await profile_store.get_fact(scope, coffee.id) is None
    assert await profile_store.get_fact(scope, tea.id) == tea
    [version] = await profile_store.fact_history(scope, "food", "coffee")
    assert version.reason == "contradicted"


async def test_deleting_facts_erases_their_history(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    await profile_store.upsert_facts(scope, [fact("food", "coffee", "black")])
    [current] = await profile_store.upsert_facts(scope, [fact("food", "coffee", "white")])
    assert len(await profile_store.fact_history(scope, "food", "coffee")) == 1
    assert await profile_store.delete_fact(scope, current.id) is True
    assert await profile_store.fact_history(scope, "food", "coffee") == []
    await profile_store.upsert_facts(scope, [fact("food", "tea", "green")])
    await profile_store.upsert_facts(scope, [fact("food", "tea", "black")])
    assert await profile_store.delete_facts(scope.user_scope()) == 1
    assert await profile_store.fact_history(scope, "food", "tea") == []


async def test_detaching_episodes_keeps_restores_or_removes_the_facts_on_them(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    backed_twice, only_one, replaced, manual = await profile_store.upsert_facts(
        scope,
        [
            fact("food", "coffee", "black", source_episode_ids=["e_1", "e2"]),
            fact("pets", "dog", "beagle", source_episode_ids=["e3"]),
            fact("home", "city", "Porto", source_episode_ids=["e4"]),
            fact("work", "role", "nurse"),  # set by hand: no episodes
        ],
    )
    # "home/city" moves to Lisbon on the strength of episode e5 alone.
    [moved] = await profile_store.upsert_facts(
        scope, [fact("home", "city", "Lisbon", source_episode_ids=["e5"])]
    )
    other_user = scope.model_copy(update={"user_id": "bob"})
    [bobs] = await profile_store.upsert_facts(
        other_user, [fact("pets", "dog", "poodle", source_episode_ids=["e3"])]
    )
    # "e1" must not match "e_1" (LIKE wildcards are escaped).
    nothing = await profile_store.detach_episodes(scope, ["e1", "unknown"])
    assert (nothing.kept, nothing.restored, nothing.removed) == (0, [], 0)

    report = await profile_store.detach_episodes(scope, ["e_1", "e3", "e5"])
    assert report.kept == 1
    assert report.restored == [moved.id]
    assert report.removed == 1
    current = keyed(await profile_store.list_facts(scope))
    assert current[("food", "coffee")].source_episode_ids == ["e2"]
    assert ("pets", "dog") not in current
    restored = current[("home", "city")]
    assert (restored.id, restored.value, restored.source_episode_ids) == (
        replaced.id,
        "Porto",
        ["e4"],
    )
    assert restored.valid_from == replaced.valid_from
    assert await profile_store.fact_history(scope, "home", "city") == []
    assert current[("work", "role")] == manual
    # Another user's fact resting on an episode id that looks the same is untouched.
    assert await profile_store.list_facts(other_user) == [bobs]

    # A closed version resting only on a removed episode is erased from the history.
    await profile_store.upsert_facts(
        scope, [fact("home", "city", "Faro", source_episode_ids=["e6"])]
    )
    [porto] = await profile_store.fact_history(scope, "home", "city")
    assert porto.value == "Porto"
    erased = await profile_store.detach_episodes(scope, ["e4"])
    assert erased.versions_erased == 1
    assert await profile_store.fact_history(scope, "home", "city") == []
    assert keyed(await profile_store.list_facts(scope))[("home", "city")].value == "Faro"
    assert backed_twice.id == current[("food", "coffee")].id
    assert only_one.id not in {f.id for f in await profile_store.list_facts(scope)}


async def test_one_fact_per_tag_and_feature(profile_store: SqlProfileStore, scope: Scope) -> None:
    await profile_store.upsert_facts(scope, [fact("food", "coffee", "black")])
    await profile_store.upsert_facts(scope, [fact("food", "coffee", "latte")])
    await profile_store.upsert_facts(scope, [fact("food", "tea", "green")])
    await profile_store.upsert_facts(scope, [fact("drinks", "coffee", "espresso")])
    listed = await profile_store.list_facts(scope)
    assert [(f.tag, f.feature, f.value) for f in listed] == [
        ("drinks", "coffee", "espresso"),
        ("food", "coffee", "latte"),
        ("food", "tea", "green"),
    ]


async def test_same_tag_and_feature_twice_in_one_batch_last_wins(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    facts = await profile_store.upsert_facts(
        scope,
        [
            fact("food", "coffee", "black"),
            fact("pets", "dog", "Rex"),
            fact("food", "coffee", "latte"),
        ],
    )
    assert facts[0] == facts[2]
    assert facts[0].value == "latte"
    assert facts[0].updated_at == facts[0].created_at
    assert len(await profile_store.list_facts(scope)) == 2


async def test_failing_batch_stores_nothing(
    profile_store: SqlProfileStore,
    scope: Scope,
    poison: Callable[[str], Awaitable[None]],
) -> None:
    [existing] = await profile_store.upsert_facts(scope, [fact("food", "coffee", "black")])
    await poison("POISON")
    with pytest.raises(StoreError) as caught:
        await profile_store.upsert_facts(
            scope,
            [
                fact("food", "coffee", "latte"),  # an update, written before the failure
                fact("pets", "dog", "Rex"),  # an insert
                fact("work", "title", "POISON"),  # rejected by the database
            ],
        )
    assert caught.value.store == "profile"
    assert await profile_store.list_facts(scope) == [existing]


async def test_batch_with_non_json_metadata_stores_nothing(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    with pytest.raises(MemMachineError):
        await profile_store.upsert_facts(
            scope,
            [fact("food", "coffee", "black"), fact("pets", "dog", "Rex", metadata={"x": {1, 2}})],
        )
    assert await profile_store.list_facts(scope) == []


async def test_concurrent_upserts_of_one_feature_keep_one_fact(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    results = await asyncio.gather(
        *(profile_store.upsert_facts(scope, [fact("food", "coffee", f"v{i}")]) for i in range(12))
    )
    ids = {stored.id for [stored] in results}
    assert len(ids) == 1
    [only] = await profile_store.list_facts(scope)
    assert only.value in {f"v{i}" for i in range(12)}


async def test_metadata_and_unicode_round_trip(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    metadata = {
        "nested": {"list": [1, 2.5, "drei", None, True], "empty": {}},
        "unicode": "Zürich — 東京 🚀",
        "big": 2**53,
    }
    [stored] = await profile_store.upsert_facts(
        scope, [fact("lieux", "ville préférée", "Zürich 🇨🇭", metadata=metadata)]
    )
    loaded = await profile_store.get_fact(scope, stored.id)
    assert loaded is not None
    assert loaded.metadata == metadata
    assert (loaded.tag, loaded.feature, loaded.value) == ("lieux", "ville préférée", "Zürich 🇨🇭")
    assert loaded.created_at.tzinfo == UTC


# --------------------------------------------------------------------------- get / delete one


async def test_get_fact_by_id(profile_store: SqlProfileStore, scope: Scope) -> None:
    facts = await seed_food(profile_store, scope)
    assert await profile_store.get_fact(scope, facts[1].id) == facts[1]
    assert await profile_store.get_fact(scope, str(uuid.uuid4())) is None
    assert await profile_store.get_fact(scope, "not-a-uuid") is None


async def test_delete_fact_by_id(profile_store: SqlProfileStore, scope: Scope) -> None:
    facts = await seed_food(profile_store, scope)
    assert await profile_store.delete_fact(scope, facts[0].id) is True
    assert await profile_store.delete_fact(scope, facts[0].id) is False
    assert await profile_store.get_fact(scope, facts[0].id) is None
    assert len(await profile_store.list_facts(scope)) == len(facts) - 1


# --------------------------------------------------------------------------- list


async def test_list_orders_by_tag_then_feature_and_filters(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    await profile_store.upsert_facts(
        scope,
        [
            fact("work", "title", "Engineer"),
            fact("food", "tea", "green"),
            fact("food", "coffee", "black"),
            fact("pets", "dog", "Rex"),
            fact("drinks", "coffee", "espresso"),
        ],
    )
    listed = await profile_store.list_facts(scope)
    assert [(f.tag, f.feature) for f in listed] == [
        ("drinks", "coffee"),
        ("food", "coffee"),
        ("food", "tea"),
        ("pets", "dog"),
        ("work", "title"),
    ]
    by_tag = await profile_store.list_facts(scope, tag="food")
    assert [f.feature for f in by_tag] == ["coffee", "tea"]
    by_feature = await profile_store.list_facts(scope, feature="coffee")
    assert [f.tag for f in by_feature] == ["drinks", "food"]
    both = await profile_store.list_facts(scope, tag="food", feature="tea")
    assert [f.value for f in both] == ["green"]
    assert await profile_store.list_facts(scope, tag="nope") == []


async def test_list_pages_with_limit_and_offset(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    await profile_store.upsert_facts(scope, [fact("t", f"f{i:02d}", str(i)) for i in range(7)])
    pages = [await profile_store.list_facts(scope, limit=3, offset=o) for o in (0, 3, 6, 9)]
    assert [[f.feature for f in page] for page in pages] == [
        ["f00", "f01", "f02"],
        ["f03", "f04", "f05"],
        ["f06"],
        [],
    ]
    assert await profile_store.list_facts(scope, limit=0) == []
    with pytest.raises(InvalidInputError):
        await profile_store.list_facts(scope, limit=-1)
    with pytest.raises(InvalidInputError):
        await profile_store.list_facts(scope, offset=-1)


# --------------------------------------------------------------------------- delete many


async def test_delete_facts_by_tag_feature_and_all(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    await seed_food(profile_store, scope)
    await profile_store.upsert_facts(scope, [fact("drinks", "coffee", "espresso")])
    assert await profile_store.delete_facts(scope, tag="food", feature="tea") == 1
    assert await profile_store.delete_facts(scope, feature="coffee") == 2
    assert await profile_store.delete_facts(scope, tag="food") == 0
    assert await profile_store.delete_facts(scope, tag="pets") == 1
    assert [f.tag for f in await profile_store.list_facts(scope)] == ["work"]
    assert await profile_store.delete_facts(scope) == 1
    assert await profile_store.list_facts(scope) == []
    assert await profile_store.delete_facts(scope) == 0


async def test_delete_facts_of_one_session_by_provenance(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    await profile_store.upsert_facts(
        scope,
        [
            fact("food", "coffee", "black", source_session_id="s1"),
            fact("food", "tea", "green", source_session_id="s2"),
            fact("pets", "dog", "Rex", source_session_id="s1"),
            fact("work", "title", "Engineer"),
        ],
    )
    assert await profile_store.delete_facts(scope.for_session("s1"), tag="pets") == 1
    assert await profile_store.delete_facts(scope.for_session("s1")) == 1
    assert await profile_store.delete_facts(scope.for_session("s3")) == 0
    assert [f.feature for f in await profile_store.list_facts(scope)] == ["tea", "title"]


# --------------------------------------------------------------------------- scope


@pytest.mark.parametrize("field", ["tenant", "org_id", "project_id", "user_id"])
async def test_every_method_is_confined_to_its_scope(
    profile_store: SqlProfileStore, scope: Scope, field: str
) -> None:
    other = scope.model_copy(update={field: f"{getattr(scope, field)}-other"})
    mine = await seed_food(profile_store, scope)
    coffee = mine[0]

    assert await profile_store.get_fact(other, coffee.id) is None
    assert await profile_store.list_facts(other) == []
    assert await profile_store.search_facts(other, "coffee", unit(1, 0, 0), 10) == []
    assert await profile_store.delete_fact(other, coffee.id) is False
    assert await profile_store.delete_facts(other) == 0
    assert await profile_store.delete_facts(other.for_session("s1")) == 0

    # The same (tag, feature) elsewhere is another fact; ours is untouched.
    [theirs] = await profile_store.upsert_facts(other, [fact("food", "coffee", "decaf")])
    assert theirs.id != coffee.id
    assert getattr(theirs.scope, field) == getattr(other, field)
    assert await profile_store.list_facts(scope) == sorted(mine, key=lambda f: (f.tag, f.feature))
    assert await profile_store.list_facts(other) == [theirs]
    assert await profile_store.delete_facts(other) == 1
    assert len(await profile_store.list_facts(scope)) == len(mine)


async def test_agent_group_and_session_narrow_reads_and_deletes(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    by_bot = scope.model_copy(update={"agent_id": "bot", "group_id": "g1"})
    [bot_fact] = await profile_store.upsert_facts(
        by_bot, [fact("food", "coffee", "black", source_session_id="s1")]
    )
    [plain] = await profile_store.upsert_facts(scope, [fact("food", "tea", "green")])

    for narrowed in (
        scope.model_copy(update={"agent_id": "bot"}),
        scope.model_copy(update={"group_id": "g1"}),
        scope.for_session("s1"),
    ):
        assert await profile_store.list_facts(narrowed) == [bot_fact]
        assert await profile_store.get_fact(narrowed, plain.id) is None
        hits = await profile_store.search_facts(narrowed, "tea coffee", None, 5)
        assert [f.id for f, _ in hits] == [bot_fact.id]
        assert await profile_store.delete_fact(narrowed, plain.id) is False

    other_agent = scope.model_copy(update={"agent_id": "other"})
    assert await profile_store.list_facts(other_agent) == []
    assert await profile_store.delete_facts(other_agent) == 0
    assert len(await profile_store.list_facts(scope)) == 2


# --------------------------------------------------------------------------- search


async def test_search_ranks_the_matching_fact_first(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    await seed_food(profile_store, scope)
    hits = await profile_store.search_facts(scope, "coffee", None, 10)
    assert [f.feature for f, _ in hits] == ["coffee"]
    assert hits[0][1] > 0


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("爬山", "hobby"),  # a Chinese word typed without spaces
        ("黄山爬山", "hobby"),
        ("iPhone", "phone"),  # the English part of a Chinese fact
        ("手机", "phone"),  # and its Chinese part
        ("сестрой", "sister"),  # Russian in another grammatical case
        ("Казань", "sister"),
        ("api_key", "secret"),  # a Latin identifier inside Russian
    ],
)
async def test_search_finds_chinese_russian_and_mixed_facts(
    profile_store: SqlProfileStore, scope: Scope, query: str, expected: str
) -> None:
    await profile_store.upsert_facts(
        scope,
        [
            fact("interests", "hobby", "周末喜欢去黄山爬山"),
            fact("devices", "phone", "用的手机是iPhone 15"),
            fact("family", "sister", "Сестра живёт в Казани"),
            fact("work", "secret", "Ключ api_key лежит в config.yaml"),
        ],
    )
    hits = await profile_store.search_facts(scope, query, None, 10)
    assert [f.feature for f, _ in hits][:1] == [expected]
    assert hits[0][1] > 0


async def test_search_is_case_and_punctuation_insensitive(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    await seed_food(profile_store, scope)
    hits = await profile_store.search_facts(scope, "What about COFFEE?!", None, 10)
    assert [f.feature for f, _ in hits] == ["coffee"]
    hits = await profile_store.search_facts(scope, "retriever, Rex.", None, 10)
    assert [f.feature for f, _ in hits] == ["dog"]


async def test_search_reads_chinese_russian_and_mixed_facts(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    """Facts are searched in the language they were written in: Chinese by characters typed
    without spaces, Russian by a word in another case, mixed text by either part."""
    await profile_store.upsert_facts(
        scope,
        [
            fact("宠物", "狗", "一只叫豆豆的柯基犬"),
            fact("здоровье", "аллергия", "аллергия на арахис и орехи"),
            fact("设备", "手机", "新买的iPhone 15"),
            fact("travel", "next_trip", "Lisbon in May"),
        ],
    )

    async def first(query: str) -> str:
        hits = await profile_store.search_facts(scope, query, None, 5)
        return hits[0][0].feature if hits else ""

    assert await first("柯基豆豆") == "狗"
    assert await first("арахиса") == "аллергия"
    assert await first("Есть ли аллергии?") == "аллергия"
    assert await first("iphone") == "手机"
    assert await first("手机") == "手机"
    assert await first("lisbon") == "next_trip"


async def test_search_matches_tag_feature_and_value(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    await profile_store.upsert_facts(
        scope,
        [
            fact("health", "allergy", "peanuts"),
            fact("food_preferences", "dessert", "tiramisu"),
            fact("travel", "next_trip", "Lisbon in May"),
        ],
    )
    assert [f.tag for f, _ in await profile_store.search_facts(scope, "Health", None, 5)] == [
        "health"
    ]
    assert [f.tag for f, _ in await profile_store.search_facts(scope, "preferences", None, 5)] == [
        "food_preferences"
    ]
    assert [f.tag for f, _ in await profile_store.search_facts(scope, "trip", None, 5)] == [
        "travel"
    ]
    assert [f.tag for f, _ in await profile_store.search_facts(scope, "lisbon", None, 5)] == [
        "travel"
    ]


async def test_search_prefers_facts_matching_more_and_rarer_terms(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    await profile_store.upsert_facts(
        scope,
        [
            fact("drinks", "morning", "coffee with oat milk"),
            fact("drinks", "evening", "black coffee, no sugar"),
            fact("drinks", "afternoon", "black tea"),
        ],
    )
    hits = await profile_store.search_facts(scope, "black coffee", None, 10)
    assert next(f.feature for f, _ in hits) == "evening"
    assert {f.feature for f, _ in hits} == {"morning", "evening", "afternoon"}
    scores = [score for _, score in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(score > 0 for score in scores)


async def test_search_excludes_facts_without_a_positive_score(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    await seed_food(profile_store, scope)
    assert await profile_store.search_facts(scope, "skiing holidays", None, 10) == []
    assert await profile_store.search_facts(scope, "", None, 10) == []
    assert await profile_store.search_facts(scope, "?!", None, 10) == []
    # A query vector pointing away from every fact vector matches nothing either.
    assert await profile_store.search_facts(scope, "", unit(-1, -1, -1), 10) == []


async def test_search_by_embedding(profile_store: SqlProfileStore, scope: Scope) -> None:
    await seed_food(profile_store, scope)
    hits = await profile_store.search_facts(scope, "", unit(0.2, 1, 0), 10)
    assert [f.feature for f, _ in hits] == ["tea", "coffee"]
    hits = await profile_store.search_facts(scope, "", unit(0, 0, 1), 10)
    assert [f.feature for f, _ in hits] == ["dog"]


async def test_search_fuses_text_and_embedding(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    await seed_food(profile_store, scope)
    # Text finds the employer (no embedding), the vector finds the dog: both come back.
    hits = await profile_store.search_facts(scope, "bank", unit(0, 0, 1), 10)
    assert {f.feature for f, _ in hits} == {"employer", "dog"}
    # Agreeing signals beat a single one.
    hits = await profile_store.search_facts(scope, "coffee tea", unit(0, 1, 0), 10)
    assert hits[0][0].feature == "tea"
    assert hits[0][1] > hits[1][1] > 0


async def test_search_ignores_embeddings_of_another_dimension(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    await seed_food(profile_store, scope)
    hits = await profile_store.search_facts(scope, "coffee", unit(1, 0, 0, 0, 0), 10)
    assert [f.feature for f, _ in hits] == ["coffee"]


async def test_search_returns_at_most_k(profile_store: SqlProfileStore, scope: Scope) -> None:
    await profile_store.upsert_facts(
        scope, [fact("likes", f"thing{i}", f"likes music genre {i}") for i in range(8)]
    )
    assert len(await profile_store.search_facts(scope, "music", None, 3)) == 3
    assert await profile_store.search_facts(scope, "music", None, 0) == []
    with pytest.raises(InvalidInputError):
        await profile_store.search_facts(scope, "music", None, -1)


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    "url", ["sqlite+aiosqlite://", "sqlite:///:memory:", "mysql://u@h/db", "not a url"]
)
def test_unusable_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(ConfigurationError):
        SqlProfileStore(url)


def test_kind_comes_from_the_url(tmp_path: Path) -> None:
    assert SqlProfileStore(f"sqlite:///{tmp_path}/x.db").kind == "sqlite"
    assert SqlProfileStore("postgresql://u:p@localhost/db").kind == "postgresql"


# --------------------------------------------------------------------------- inspection


async def test_list_users_counts_current_facts_per_user(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    before = utc_now()
    await profile_store.upsert_facts(scope, [fact("food", "likes", "tea"), fact("a", "b", "c")])
    bob = scope.model_copy(update={"user_id": "bob"})
    await profile_store.upsert_facts(bob, [fact("food", "likes", "coffee")])
    other_project = scope.model_copy(update={"project_id": "ops", "user_id": "carl"})
    await profile_store.upsert_facts(other_project, [fact("x", "y", "z")])
    other_tenant = scope.model_copy(update={"tenant": f"{scope.tenant}x", "user_id": "dan"})
    await profile_store.upsert_facts(other_tenant, [fact("x", "y", "z")])

    users = await profile_store.list_users(scope.project_scope())

    assert [(u.user_id, u.facts) for u in users] == [("alice", 2), ("bob", 1)]
    assert all(
        u.last_active is not None and u.last_active >= before - timedelta(seconds=5) for u in users
    )
    assert [u.user_id for u in await profile_store.list_users(other_project.project_scope())] == [
        "carl"
    ]
    assert [u.user_id for u in await profile_store.list_users(other_tenant.project_scope())] == [
        "dan"
    ]


async def test_list_users_keeps_a_user_whose_facts_are_all_invalidated(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    """What is left of a user (their history) stays findable until it is deleted."""
    [stored] = await profile_store.upsert_facts(scope, [fact("food", "likes", "tea")])
    await profile_store.invalidate_fact(scope, stored.id, "moved on")

    [user] = await profile_store.list_users(scope.project_scope())
    assert (user.user_id, user.facts) == ("alice", 0)

    await profile_store.delete_facts(scope)
    assert await profile_store.list_users(scope.project_scope()) == []


async def test_list_users_pages_by_user_id_in_code_point_order(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    for name in reversed(USER_IDS_IN_ORDER):
        await profile_store.upsert_facts(
            scope.model_copy(update={"user_id": name}), [fact("t", "f", name)]
        )
    await check_user_listing(profile_store.list_users, scope.project_scope())


async def test_list_projects_lists_every_project_holding_facts_in_order(
    profile_store: SqlProfileStore, unique: str
) -> None:
    for index, project in enumerate(reversed(projects_of(unique))):
        await profile_store.upsert_facts(project.user(f"u{index}"), [fact("t", "f", "v")])
    await check_project_listing(profile_store.list_projects, unique)
    emptied = projects_of(unique)[0].user("u3")
    await profile_store.delete_facts(emptied)
    assert projects_of(unique)[0] not in await profile_store.list_projects(limit=10_000)


async def test_removed_sources_become_one_expired_marker_in_facts_and_versions(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    first = fact("food", "coffee", "black", source_episode_ids=["e1", "e2"])
    await profile_store.upsert_facts(scope, [first])
    [current] = await profile_store.upsert_facts(
        scope, [fact("food", "coffee", "flat white", source_episode_ids=["e1", "e2", "e3"])]
    )
    other = scope.model_copy(update={"user_id": "bob"})
    await profile_store.upsert_facts(
        other, [fact("food", "tea", "green", source_episode_ids=["e1"])]
    )

    assert await profile_store.mark_sources_expired(scope, ["e1", "e2"]) == 2
    [marked] = await profile_store.list_facts(scope)
    assert marked.source_episode_ids == ["e3", EXPIRED_SOURCE]
    assert (marked.value, marked.updated_at) == ("flat white", current.updated_at)
    [version] = await profile_store.fact_history(scope, "food", "coffee")
    assert (version.value, version.source_episode_ids) == ("black", [EXPIRED_SOURCE])
    # the marker stands once however many sources expire; other users keep theirs
    assert await profile_store.mark_sources_expired(scope, ["e3"]) == 1
    assert (await profile_store.list_facts(scope))[0].source_episode_ids == [EXPIRED_SOURCE]
    assert (await profile_store.list_facts(other))[0].source_episode_ids == ["e1"]
    assert await profile_store.mark_sources_expired(scope, ["e9"]) == 0


async def test_thousands_of_removed_sources_are_marked_at_once(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    ids = [f"episode-{n:04d}" for n in range(2_000)]
    await profile_store.upsert_facts(scope, [fact("a", "first", "x", source_episode_ids=ids[:2])])
    await profile_store.upsert_facts(scope, [fact("a", "last", "y", source_episode_ids=ids[-1:])])
    assert await profile_store.mark_sources_expired(scope, ids) == 2
    facts = await profile_store.list_facts(scope)
    assert [f.source_episode_ids for f in facts] == [[EXPIRED_SOURCE], [EXPIRED_SOURCE]]


async def test_a_closed_version_expires_with_the_value_it_held(
    profile_store: SqlProfileStore, scope: Scope
) -> None:
    ends = utc_now().replace(microsecond=0) + timedelta(hours=1)
    expiring = fact("access", "code", "4412", metadata={"expires_at": ends.isoformat()})
    await profile_store.upsert_facts(scope, [expiring])
    await profile_store.upsert_facts(scope, [fact("access", "code", "9001")])
    await profile_store.upsert_facts(scope, [fact("access", "code", "9002")])
    versions = await profile_store.fact_history(scope, "access", "code")
    assert [(v.value, v.expires_at) for v in versions] == [("4412", ends), ("9001", None)]

    assert await profile_store.delete_expired_versions(scope, ends - timedelta(seconds=1)) == 0
    assert await profile_store.delete_expired_versions(scope, ends) == 1
    versions = await profile_store.fact_history(scope, "access", "code")
    assert [v.value for v in versions] == ["9001"]
    assert (await profile_store.list_facts(scope))[0].value == "9002"
