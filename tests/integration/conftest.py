"""Stores of the test's own on the session's servers, for tests that run a whole server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import Neo4jTarget, database_url, empty_neo4j


@dataclass(frozen=True)
class PostgresDatabase:
    """A database of the test's own on the session's PostgreSQL."""

    admin_url: str
    name: str

    @property
    def url(self) -> str:
        return database_url(self.admin_url, self.name)

    @property
    def libpq_url(self) -> str:
        return database_url(self.admin_url, self.name, driver="postgresql")


@dataclass(frozen=True)
class RedisKeys:
    """A key prefix of the test's own on the session's Redis."""

    url: str
    prefix: str


@pytest.fixture
def postgres_database(postgres_admin_url: str) -> Iterator[PostgresDatabase]:
    """A new database on the session's PostgreSQL; dropped afterwards (connections too)."""
    import psycopg

    name = f"mmtest_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield PostgresDatabase(postgres_admin_url, name)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def redis_keys(redis_service_url: str) -> Iterator[RedisKeys]:
    """A fresh key prefix on the session's Redis; its keys are deleted afterwards."""
    from redis import Redis

    keys = RedisKeys(redis_service_url, f"mmtest{uuid.uuid4().hex[:12]}")
    yield keys
    with Redis.from_url(redis_service_url) as client:
        found = list(client.scan_iter(match=f"{keys.prefix}:*", count=1000))
        if found:
            client.delete(*found)


@pytest.fixture
def neo4j_database(neo4j_target: Neo4jTarget) -> Iterator[Neo4jTarget]:
    """The session's Neo4j, empty before the test and emptied after it."""
    empty_neo4j(neo4j_target)
    try:
        yield neo4j_target
    finally:
        empty_neo4j(neo4j_target)


def neo4j_settings(target: Neo4jTarget) -> dict[str, str]:
    """The environment that points a server's episodic memory at ``target``."""
    env = {"MEMMACHINE_EPISODE_STORE_URL": target.url}
    if target.password:
        env["MEMMACHINE_EPISODE_STORE_USER"] = target.user or "neo4j"
        env["MEMMACHINE_EPISODE_STORE_PASSWORD"] = target.password
    return env


def production_settings(
    graph: dict[str, str], database: PostgresDatabase, keys: RedisKeys
) -> dict[str, str]:
    """The environment of a server on a graph store (``graph``: its settings), PostgreSQL and
    Redis, with nothing embedded."""
    return {
        **graph,
        "MEMMACHINE_PROFILE_STORE_URL": database.url,
        "MEMMACHINE_WORKING_STORE_URL": keys.url,
        "MEMMACHINE_WORKING_KEY_PREFIX": keys.prefix,
        "MEMMACHINE_STARTUP_TIMEOUT_SECONDS": "10",
    }
