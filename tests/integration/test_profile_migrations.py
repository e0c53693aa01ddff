"""Alembic migrations of the SQL profile store, on SQLite and on the machine's PostgreSQL.

Each PostgreSQL test gets a database of its own (``mmtest_<hex>``), dropped afterwards.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from memmachine.adapters.sql.migrations import (
    BASELINE_REVISION,
    alembic_config,
    current_revision,
    head_revision,
)
from memmachine.adapters.sql.migrations.pgvector import has_vector_column
from memmachine.adapters.sql.sql_models import Base
from memmachine.adapters.sql.sql_profile_store import SqlProfileStore
from memmachine.errors import StoreError
from memmachine.models import FactRecord, Scope
from tests.conftest import temporary_postgres_database

# Reflecting a pgvector column (servers that have the extension) is expected to warn.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Did not recognize type 'vector':sqlalchemy.exc.SAWarning"
)

SCOPE = Scope(tenant="acme", org_id="o", project_id="p", user_id="alice")

#: ``profile_facts`` exactly as ``Base.metadata.create_all`` made it on SQLite before
#: migrations existed (no ``alembic_version`` table). Frozen: do not update.
LEGACY_SQLITE_DDL = [
    """CREATE TABLE profile_facts (
        id VARCHAR(36) NOT NULL,
        tenant VARCHAR(128) NOT NULL,
        org_id VARCHAR(128) NOT NULL,
        project_id VARCHAR(128) NOT NULL,
        user_id VARCHAR(128) NOT NULL,
        agent_id VARCHAR(128),
        group_id VARCHAR(128),
        tag TEXT NOT NULL,
        feature TEXT NOT NULL,
        value TEXT NOT NULL,
        confidence FLOAT NOT NULL,
        source TEXT NOT NULL,
        source_session_id TEXT,
        metadata JSON NOT NULL,
        embedding BLOB,
        created_at DATETIME NOT NULL,
        updated_at DATETIME NOT NULL,
        CONSTRAINT pk_profile_facts PRIMARY KEY (id),
        CONSTRAINT uq_profile_facts_tenant_org_id_project_id_user_id_tag_feature
            UNIQUE (tenant, org_id, project_id, user_id, tag, feature)
    )""",
    "CREATE INDEX ix_profile_facts_scope_agent "
    "ON profile_facts (tenant, org_id, project_id, user_id, agent_id)",
    "CREATE INDEX ix_profile_facts_scope_session "
    "ON profile_facts (tenant, org_id, project_id, user_id, source_session_id)",
]

#: Columns and indexes the migrations add on PostgreSQL that the ORM does not map.
POSTGRES_ONLY = {"search_vector", "embedding_vec", "ix_profile_facts_search_vector"}


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'profile.db'}"


@pytest.fixture
def pgvector_url(postgres_admin_url: str) -> Iterator[str]:
    """A fresh database on the PostgreSQL with pgvector."""
    with temporary_postgres_database(postgres_admin_url) as url:
        yield url


@pytest.fixture
def plain_url(postgres_plain_admin_url: str) -> Iterator[str]:
    """A fresh database on the PostgreSQL without pgvector."""
    with temporary_postgres_database(postgres_plain_admin_url) as url:
        yield url


#: Fixture names of a fresh, empty database, by the ids the tests run under.
DATABASES = {"sqlite": "sqlite_url", "postgresql": "pgvector_url", "postgresql-plain": "plain_url"}


@pytest.fixture(params=["postgresql", "postgresql-plain"])
def postgres_url(request: pytest.FixtureRequest) -> str:
    """A fresh database on the PostgreSQL with pgvector, and on the one without."""
    return str(request.getfixturevalue(DATABASES[request.param]))


@pytest.fixture(params=sorted(DATABASES))
def database_url(request: pytest.FixtureRequest) -> str:
    """A fresh, empty database of each dialect (PostgreSQL with and without pgvector)."""
    return str(request.getfixturevalue(DATABASES[request.param]))


@pytest.fixture
async def engine_for() -> AsyncIterator[Callable[[str], AsyncEngine]]:
    """``engine_for(url)``: a plain engine for looking at a database; disposed afterwards."""
    engines: list[AsyncEngine] = []

    def make(url: str) -> AsyncEngine:
        engines.append(create_async_engine(url))
        return engines[-1]

    yield make
    for engine in engines:
        await engine.dispose()


def schema_of(connection: Connection) -> dict[str, Any]:
    """Tables, columns (name, type, nullable) and indexes, comparable between two moments."""
    inspector = inspect(connection)
    return {
        table: {
            "columns": [
                (c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)
            ],
            "indexes": sorted(str(index["name"]) for index in inspector.get_indexes(table)),
            "unique": sorted(str(u["name"]) for u in inspector.get_unique_constraints(table)),
        }
        for table in sorted(inspector.get_table_names())
    }


def model_differences(connection: Connection) -> list[Any]:
    """What Alembic autogenerate would change to make the database match ``Base.metadata``,
    ignoring the PostgreSQL-only search/vector columns the ORM does not map."""

    def include(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
        return name not in POSTGRES_ONLY and name != "alembic_version"

    context = MigrationContext.configure(connection, opts={"include_object": include})
    return list(compare_metadata(context, Base.metadata))


# --------------------------------------------------------------------------- fresh databases


async def test_fresh_database_is_migrated_to_head_and_matches_the_models(
    database_url: str, engine_for: Callable[[str], AsyncEngine]
) -> None:
    async with SqlProfileStore(database_url) as store:
        [stored] = await store.upsert_facts(
            SCOPE, [FactRecord(tag="food", feature="coffee", value="Black coffee")]
        )
        assert [f.id for f, _ in await store.search_facts(SCOPE, "COFFEE", None, 5)] == [stored.id]
    async with engine_for(database_url).connect() as conn:
        assert await conn.run_sync(current_revision) == head_revision()
        assert await conn.run_sync(model_differences) == []
        terms = (await conn.execute(text("SELECT search_terms FROM profile_facts"))).scalar_one()
        assert terms == "food coffe black coffe"  # Snowball stems


async def test_postgres_has_a_gin_indexed_tsvector_and_visible_rows(
    postgres_url: str, engine_for: Callable[[str], AsyncEngine]
) -> None:
    async with SqlProfileStore(postgres_url) as store:
        await store.upsert_facts(
            SCOPE,
            [
                FactRecord(
                    tag="pets", feature="dogs", value="Two golden retrievers", embedding=[0.6, 0.8]
                ),
                FactRecord(tag="travel", feature="next_trip", value="Lisbon in May"),
            ],
        )
    async with engine_for(postgres_url).connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT tag, feature, value, search_vector::text, embedding IS NOT NULL "
                    "FROM profile_facts ORDER BY tag"
                )
            )
        ).all()
        assert [tuple(row) for row in rows] == [
            (
                "pets",
                "dogs",
                "Two golden retrievers",
                "'dog' 'golden' 'pet' 'retriev' 'two'",
                True,
            ),
            (
                "travel",
                "next_trip",
                "Lisbon in May",
                "'lisbon' 'may' 'next' 'travel' 'trip'",
                False,
            ),
        ]
        index = (
            await conn.execute(
                text(
                    "SELECT indexdef FROM pg_indexes "
                    "WHERE indexname = 'ix_profile_facts_search_vector'"
                )
            )
        ).scalar_one()
        assert "USING gin (search_vector)" in index
        # The lexical candidates come from the index-backed @@ predicate.
        matched = (
            (
                await conn.execute(
                    text(
                        "SELECT feature FROM profile_facts "
                        "WHERE search_vector @@ 'retriev'::tsquery"
                    )
                )
            )
            .scalars()
            .all()
        )
        assert matched == ["dogs"]


async def test_pgvector_column_exists_exactly_when_the_server_offers_vector(
    postgres_url: str, engine_for: Callable[[str], AsyncEngine]
) -> None:
    async with SqlProfileStore(postgres_url) as store:
        [stored] = await store.upsert_facts(
            SCOPE, [FactRecord(tag="a", feature="b", value="c", embedding=[1.0, 0.0, 0.0])]
        )
        hits = await store.search_facts(SCOPE, "", [1.0, 0.1, 0.0], 3)
        assert [f.id for f, _ in hits] == [stored.id]
    async with engine_for(postgres_url).connect() as conn:
        available = (
            await conn.execute(
                text("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")
            )
        ).scalar_one()
        columns = await conn.run_sync(
            lambda sync: {c["name"] for c in inspect(sync).get_columns("profile_facts")}
        )
        assert ("embedding_vec" in columns) == bool(available)
        if available:
            vector = (
                await conn.execute(text("SELECT embedding_vec::text FROM profile_facts"))
            ).scalar_one()
            assert vector == "[1,0,0]"


# --------------------------------------------------------------------------- adoption


async def test_pre_migration_sqlite_file_is_adopted_and_keeps_its_facts(
    tmp_path: Path, engine_for: Callable[[str], AsyncEngine]
) -> None:
    path = tmp_path / "legacy.db"
    with sqlite3.connect(path) as legacy:
        for statement in LEGACY_SQLITE_DDL:
            legacy.execute(statement)
        legacy.execute(
            "INSERT INTO profile_facts VALUES ('0b6c2d1e-0000-4000-8000-000000000001', "
            "'acme', 'o', 'p', 'alice', NULL, NULL, 'food', 'coffee', 'Drinks black coffee', "
            "0.9, 'explicit', 's1', '{\"k\": 1}', NULL, "
            "'2024-01-02 03:04:05.000006', '2024-01-02 03:04:05.000006')"
        )
    legacy.close()
    url = f"sqlite+aiosqlite:///{path}"

    async with SqlProfileStore(url) as store:
        [kept] = await store.list_facts(SCOPE)
        assert (kept.tag, kept.feature, kept.value, kept.metadata) == (
            "food",
            "coffee",
            "Drinks black coffee",
            {"k": 1},
        )
        assert kept.created_at.isoformat() == "2024-01-02T03:04:05.000006+00:00"
        # The backfilled search terms make the old fact searchable.
        assert [f.id for f, _ in await store.search_facts(SCOPE, "black", None, 5)] == [kept.id]
    async with engine_for(url).connect() as conn:
        assert await conn.run_sync(current_revision) == head_revision()
        assert await conn.run_sync(model_differences) == []


async def test_pre_migration_postgres_database_is_adopted(
    postgres_url: str, engine_for: Callable[[str], AsyncEngine]
) -> None:
    engine = engine_for(postgres_url)
    async with engine.begin() as conn:
        # What the pre-migration store made on PostgreSQL: the baseline, unstamped.
        await conn.run_sync(lambda sync: command.upgrade(alembic_config(sync), BASELINE_REVISION))
        await conn.execute(text("DROP TABLE alembic_version"))
        await conn.execute(
            text(
                "INSERT INTO profile_facts VALUES ('0b6c2d1e-0000-4000-8000-000000000002', 'acme', "
                "'o', 'p', 'alice', NULL, NULL, 'pets', 'dog', 'Rex the retriever', 1.0, "
                "'explicit', NULL, '{}', NULL, now(), now())"
            )
        )
    async with SqlProfileStore(postgres_url) as store:
        hits = await store.search_facts(SCOPE, "retrievers", None, 5)
        assert [(f.feature, f.value) for f, _ in hits] == [("dog", "Rex the retriever")]
    async with engine.connect() as conn:
        assert await conn.run_sync(current_revision) == head_revision()


@pytest.mark.parametrize("dialect", sorted(DATABASES))
async def test_a_revision_0003_database_keeps_its_facts_and_gains_history(
    dialect: str, request: pytest.FixtureRequest, engine_for: Callable[[str], AsyncEngine]
) -> None:
    url = str(request.getfixturevalue(DATABASES[dialect]))
    engine = engine_for(url)
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: command.upgrade(alembic_config(sync), "0003"))
        await conn.execute(
            text(
                "INSERT INTO profile_facts (id, tenant, org_id, project_id, user_id, tag, "
                "feature, value, confidence, source, metadata, created_at, updated_at) VALUES "
                "('0b6c2d1e-0000-4000-8000-000000000003', 'acme', 'o', 'p', 'alice', 'food', "
                "'coffee', 'Black coffee', 0.8, 'explicit', '{}', :at, :at)"
            ),
            {"at": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)},
        )
    async with SqlProfileStore(url) as store:
        [kept] = await store.list_facts(SCOPE)
        assert (kept.value, kept.confidence, kept.source_episode_ids) == ("Black coffee", 0.8, [])
        assert kept.valid_from == kept.created_at
        assert kept.valid_to is None
        await store.upsert_facts(SCOPE, [FactRecord(tag="food", feature="coffee", value="Tea")])
        [version] = await store.fact_history(SCOPE, "food", "coffee")
        assert version.value == "Black coffee"
    async with engine.connect() as conn:
        assert await conn.run_sync(current_revision) == head_revision()
        assert await conn.run_sync(model_differences) == []


@pytest.mark.parametrize("dialect", sorted(DATABASES))
async def test_facts_indexed_by_the_older_analyser_are_analysed_again(
    dialect: str, request: pytest.FixtureRequest, engine_for: Callable[[str], AsyncEngine]
) -> None:
    url = str(request.getfixturevalue(DATABASES[dialect]))
    engine = engine_for(url)
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: command.upgrade(alembic_config(sync), "0005"))
        # the terms analyser 1 stored: words as written, plurals folded
        await conn.execute(
            text(
                "INSERT INTO profile_facts (id, tenant, org_id, project_id, user_id, tag, "
                "feature, value, confidence, source, metadata, created_at, updated_at, "
                "search_terms, source_episode_ids, valid_from) VALUES "
                "('0b6c2d1e-0000-4000-8000-000000000006', 'acme', 'o', 'p', 'alice', "
                "'hobby', 'weekend', 'Hiking in the hills', 0.8, 'explicit', '{}', :at, :at, "
                "'hobby weekend hiking hill', '[]', :at)"
            ),
            {"at": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)},
        )
    async with SqlProfileStore(url) as store:
        found = await store.search_facts(SCOPE, "Does she like to hike?", None, 5)
    assert [fact.value for fact, _ in found] == ["Hiking in the hills"]
    async with engine.connect() as conn:
        stored = (await conn.execute(text("SELECT search_terms FROM profile_facts"))).scalar()
        assert stored == "hobbi weekend hike hill"
        assert await conn.run_sync(current_revision) == head_revision()


@pytest.mark.parametrize("dialect", sorted(DATABASES))
async def test_chinese_and_russian_facts_of_analyser_2_are_analysed_again(
    dialect: str, request: pytest.FixtureRequest, engine_for: Callable[[str], AsyncEngine]
) -> None:
    """A database written before the analyser read other languages (revision 0009: a Chinese
    value one term, Russian words unstemmed) is re-analysed on start: a Chinese fact is found
    by two of its characters, a Russian one by a word in another case, and none is lost."""
    url = str(request.getfixturevalue(DATABASES[dialect]))
    engine = engine_for(url)
    ids = ("0b6c2d1e-0000-4000-8000-000000000010", "0b6c2d1e-0000-4000-8000-000000000011")
    facts = [
        (ids[0], "宠物", "狗", "一只叫豆豆的柯基犬", "宠物 狗 一只叫豆豆的柯基犬"),
        (ids[1], "спорт", "зима", "катается на лыжах", "спорт зима катается на лыжах"),
    ]
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: command.upgrade(alembic_config(sync), "0009"))
        for fact_id, tag, feature, value, old_terms in facts:
            await conn.execute(
                text(
                    "INSERT INTO profile_facts (id, tenant, org_id, project_id, user_id, tag, "
                    "feature, value, confidence, source, metadata, created_at, updated_at, "
                    "search_terms, source_episode_ids, valid_from) VALUES "
                    "(:id, 'acme', 'o', 'p', 'alice', :tag, :feature, :value, 0.8, 'explicit', "
                    "'{}', :at, :at, :terms, '[]', :at)"
                ),
                {
                    "id": fact_id,
                    "tag": tag,
                    "feature": feature,
                    "value": value,
                    "terms": old_terms,
                    "at": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
                },
            )
    async with SqlProfileStore(url) as store:
        dog = await store.search_facts(SCOPE, "柯基豆豆", None, 5)
        skiing = await store.search_facts(SCOPE, "лыжи", None, 5)
        everything = await store.list_facts(SCOPE)
    assert [fact.value for fact, _ in dog] == ["一只叫豆豆的柯基犬"]
    assert [fact.value for fact, _ in skiing] == ["катается на лыжах"]
    assert sorted(fact.value for fact in everything) == sorted(f[3] for f in facts)
    async with engine.connect() as conn:
        assert await conn.run_sync(current_revision) == head_revision()


# --------------------------------------------------------------------------- repeat and race


async def test_starting_twice_changes_nothing(
    database_url: str, engine_for: Callable[[str], AsyncEngine]
) -> None:
    async with SqlProfileStore(database_url) as store:
        await store.upsert_facts(SCOPE, [FactRecord(tag="a", feature="b", value="c")])
    engine = engine_for(database_url)
    async with engine.connect() as conn:
        before = await conn.run_sync(schema_of)
    async with SqlProfileStore(database_url) as store:
        assert len(await store.list_facts(SCOPE)) == 1
    async with engine.connect() as conn:
        assert await conn.run_sync(schema_of) == before
        versions = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalars()
        assert list(versions) == [head_revision()]


async def test_concurrent_starts_on_one_database_all_succeed(
    database_url: str, engine_for: Callable[[str], AsyncEngine]
) -> None:
    stores = [SqlProfileStore(database_url) for _ in range(4)]
    try:
        await asyncio.gather(*(store.start() for store in stores))
        for index, store in enumerate(stores):
            await store.upsert_facts(SCOPE, [FactRecord(tag="t", feature=f"f{index}", value="v")])
        assert len(await stores[0].list_facts(SCOPE)) == len(stores)
    finally:
        for store in stores:
            await store.close()
    async with engine_for(database_url).connect() as conn:
        assert await conn.run_sync(current_revision) == head_revision()


# --------------------------------------------------------------------------- odd states


async def test_downgrade_to_base_and_upgrade_again(
    database_url: str, engine_for: Callable[[str], AsyncEngine]
) -> None:
    async with SqlProfileStore(database_url):
        pass
    engine = engine_for(database_url)
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: command.downgrade(alembic_config(sync), "base"))
        assert await conn.run_sync(lambda sync: inspect(sync).has_table("profile_facts")) is False
    async with SqlProfileStore(database_url) as store:
        assert await store.list_facts(SCOPE) == []
    async with engine.connect() as conn:
        assert await conn.run_sync(current_revision) == head_revision()


async def test_a_schema_from_a_newer_version_refuses_to_start(
    sqlite_url: str, engine_for: Callable[[str], AsyncEngine]
) -> None:
    async with SqlProfileStore(sqlite_url):
        pass
    async with engine_for(sqlite_url).begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    store = SqlProfileStore(sqlite_url)
    with pytest.raises(StoreError) as caught:
        await store.start()
    assert "9999" in str(caught.value)
    assert caught.value.store == "profile"
    await store.close()


async def test_semantic_search_runs_in_sql_with_pgvector_and_in_python_without(
    postgres_url: str, request: pytest.FixtureRequest, engine_for: Callable[[str], AsyncEngine]
) -> None:
    """Both PostgreSQL paths rank a query vector the same way; /health says which one ran."""
    with_pgvector = request.node.callspec.params["postgres_url"] == "postgresql"
    facts = [
        FactRecord(tag="pets", feature="dog", value="Rex", embedding=[1.0, 0.0, 0.0]),
        FactRecord(tag="food", feature="coffee", value="black", embedding=[0.0, 1.0, 0.0]),
        FactRecord(tag="home", feature="city", value="Oslo", embedding=[0.6, 0.0, 0.8]),
    ]
    async with SqlProfileStore(postgres_url) as store:
        await store.upsert_facts(SCOPE, facts)
        hits = await store.search_facts(SCOPE, "", [0.9, 0.1, 0.1], 3)
        health = await store.health()
    assert [fact.feature for fact, _ in hits] == ["dog", "city", "coffee"]
    assert health.status == "ok"
    assert ("pgvector" in (health.detail or "")) is True
    assert ("no pgvector" in (health.detail or "")) is not with_pgvector
    async with engine_for(postgres_url).connect() as conn:
        assert await conn.run_sync(has_vector_column) is with_pgvector
