"""Memory that expires on the production stores (a FalkorDB server or Neo4j, PostgreSQL,
Redis), with a clock the test moves: read until the instant, never after, and after the
sweep no row, node or key holds the expired text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from redis import Redis

from memmachine.config import EmbeddingSettings
from tests.fakes.clock import ManualClock
from tests.integration.conftest import PostgresDatabase, RedisKeys, production_settings
from tests.integration.test_backends_e2e import (  # noqa: F401  (fixtures)
    GraphStore,
    falkordb_graph,
    falkordb_server,
    neo4j_graph,
)
from tests.integration.test_expiry import (
    FACT_SECRET,
    KEPT,
    SECRET,
    every_read,
    manager_of,
    start,
    write_expiring,
)


@pytest.fixture(params=["falkordb+postgres+redis", "neo4j+postgres+redis"])
def stores(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> tuple[GraphStore, PostgresDatabase, RedisKeys]:
    if request.param.startswith("neo4j"):
        graph = neo4j_graph(request.getfixturevalue("neo4j_database"))
    else:
        graph = falkordb_graph(request.getfixturevalue("falkordb_server"))
    database: PostgresDatabase = request.getfixturevalue("postgres_database")
    keys: RedisKeys = request.getfixturevalue("redis_keys")
    for name, value in production_settings(graph.env, database, keys).items():
        monkeypatch.setenv(name, value)
    # A shared machine may take a while to answer the first connection.
    monkeypatch.setenv("MEMMACHINE_STARTUP_TIMEOUT_SECONDS", "60")
    return graph, database, keys


@pytest.fixture
def app(
    tmp_path: Path, stores: tuple[GraphStore, PostgresDatabase, RedisKeys]
) -> Iterator[tuple[TestClient, ManualClock]]:
    clock = ManualClock()
    client = start(
        (tmp_path / "data").resolve(), clock, embedding=EmbeddingSettings(provider="none")
    )
    try:
        yield client, clock
    finally:
        client.__exit__(None, None, None)


def stored_text(database: PostgresDatabase, keys: RedisKeys) -> str:
    """Every row of every profile table and every working-memory key, as text."""
    parts: list[Any] = []
    with psycopg.connect(database.libpq_url) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        ]
        for table in tables:
            parts.append(conn.execute(f'SELECT * FROM "{table}"').fetchall())
    with Redis.from_url(keys.url, decode_responses=True) as client:
        for key in client.scan_iter(match=f"{keys.prefix}:*", count=1000):
            kind = client.type(key)
            if kind == "list":
                parts.append(client.lrange(key, 0, -1))
            elif kind == "hash":
                parts.append(client.hgetall(key))
            elif kind == "string":
                parts.append(client.get(key))
    return repr(parts)


def test_expiry_and_sweep_on_the_production_stores(
    app: tuple[TestClient, ManualClock], stores: tuple[GraphStore, PostgresDatabase, RedisKeys]
) -> None:
    api, clock = app
    graph, database, keys = stores
    episode_id, fact_id = write_expiring(api, clock, "p1")
    before = every_read(api, "p1", episode_id, fact_id)
    assert SECRET in before["list"]
    assert SECRET in before["search"]
    assert SECRET in before["get"]
    assert FACT_SECRET in before["facts"]
    assert FACT_SECRET in before["prompt"]
    assert FACT_SECRET in stored_text(database, keys)

    clock.advance(5)
    after = every_read(api, "p1", episode_id, fact_id)
    for path, text in after.items():
        assert SECRET not in text, path
        assert FACT_SECRET not in text, path
    assert KEPT in after["list"]

    report = api.portal.call(manager_of(api).retention.run)  # type: ignore[union-attr]
    assert (report.episodes_expired, report.facts_expired) == (1, 1)
    assert graph.episodes_of(["p1"]) == {"p1": 1}  # the kept one
    text = stored_text(database, keys)
    assert SECRET not in text
    assert FACT_SECRET not in text
    assert KEPT in text
