"""Every store URL form the README documents starts the server, which then writes and reads
back an episode, a profile fact and a working-memory message.

The forms that need a server this machine cannot run (TLS: ``rediss://``,
``rediss+cluster://``, ``neo4j+s://``, ``neo4j+ssc://``, ``bolt+s://``) are checked by
parse only, and their test names say so: the composition root accepts them and the client
it builds would speak TLS.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from fastapi.testclient import TestClient

from memmachine.config import EmbeddingSettings, JobSettings, Settings
from memmachine_server.app import create_app
from tests.conftest import Neo4jTarget, drop_redis_keys
from tests.integration.conftest import PostgresDatabase, RedisKeys
from tests.server.conftest import LOCAL
from tests.services import RedisServer


def start_and_round_trip(data_dir: Path, **values: Any) -> None:
    """Start the app on ``values`` (Settings fields), write an episode, a fact and a working
    message, and read each back."""
    settings = Settings(
        data_dir=data_dir,
        embedding=EmbeddingSettings(provider="none"),
        startup_timeout_seconds=10,
        **values,
    )
    user = f"url-{uuid.uuid4().hex[:10]}"
    with TestClient(create_app(settings), raise_server_exceptions=False, base_url=LOCAL) as api:
        health = api.get("/health").json()
        assert {name: store["status"] for name, store in health["stores"].items()} == {
            name: "ok" for name in health["stores"]
        }, health
        added = api.post(
            "/v1/memories",
            json={
                "user_id": user,
                "session_id": "s1",
                "messages": [{"content": "my bike is a green Brompton", "producer": user}],
            },
        )
        assert added.status_code == 201, added.text
        fact = api.post(
            "/v1/profile",
            json={"user_id": user, "facts": [{"tag": "t", "feature": "bike", "value": "Brompton"}]},
        )
        assert fact.status_code == 200, fact.text

        episodes = api.get("/v1/memories", params={"user_id": user, "session_id": "s1"}).json()
        assert [e["content"] for e in episodes["episodes"]] == ["my bike is a green Brompton"]
        facts = api.get("/v1/profile", params={"user_id": user}).json()["facts"]
        assert [(f["feature"], f["value"]) for f in facts] == [("bike", "Brompton")]
        working = api.get("/v1/sessions/s1/working", params={"user_id": user}).json()
        assert [m["content"] for m in working["messages"]] == ["my bike is a green Brompton"]


def with_scheme(url: str, scheme: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((scheme, parts.netloc, parts.path, parts.query, ""))


# --------------------------------------------------------------------------- embedded


def test_embedded_defaults_nothing_set(tmp_path: Path) -> None:
    start_and_round_trip(tmp_path)


# --------------------------------------------------------------------------- profile


def test_profile_sqlite_plain(tmp_path: Path) -> None:
    start_and_round_trip(tmp_path / "d", profile_store_url=f"sqlite:///{tmp_path / 'p.db'}")
    assert (tmp_path / "p.db").is_file()


def test_profile_sqlite_aiosqlite(tmp_path: Path) -> None:
    start_and_round_trip(
        tmp_path / "d", profile_store_url=f"sqlite+aiosqlite:///{tmp_path / 'p.db'}"
    )
    assert (tmp_path / "p.db").is_file()


def test_profile_postgresql_plain(tmp_path: Path, postgres_database: PostgresDatabase) -> None:
    assert postgres_database.libpq_url.startswith("postgresql://")
    start_and_round_trip(tmp_path, profile_store_url=postgres_database.libpq_url)


def test_profile_postgresql_psycopg(tmp_path: Path, postgres_database: PostgresDatabase) -> None:
    assert postgres_database.url.startswith("postgresql+psycopg://")
    start_and_round_trip(tmp_path, profile_store_url=postgres_database.url)


# --------------------------------------------------------------------------- working


def test_working_redis(tmp_path: Path, redis_keys: RedisKeys) -> None:
    assert redis_keys.url.startswith("redis://")
    start_and_round_trip(
        tmp_path,
        working_store_url=redis_keys.url,
        working_key_prefix=redis_keys.prefix,
        jobs=JobSettings(key_prefix=redis_keys.prefix),
    )


def test_working_redis_cluster(tmp_path: Path, redis_cluster_url: str) -> None:
    assert redis_cluster_url.startswith("redis+cluster://")
    prefix = f"mmurl{uuid.uuid4().hex[:10]}"
    try:
        start_and_round_trip(
            tmp_path,
            working_store_url=redis_cluster_url,
            working_key_prefix=prefix,
            jobs=JobSettings(key_prefix=prefix),
        )
    finally:
        drop_redis_keys(redis_cluster_url, f"{prefix}*")


@pytest.fixture
def unix_redis(tmp_path: Path) -> Iterator[Path]:
    """A Redis listening on a Unix socket (and a loopback port, for the readiness check)."""
    socket = tmp_path / "r.sock"
    server = RedisServer(
        tmp_path / "unix-redis", extra_args=("--unixsocket", str(socket), "--unixsocketperm", "700")
    )
    try:
        server.wait_ready()
        yield socket
    finally:
        server.stop()


def test_jobs_unix_socket(tmp_path: Path, unix_redis: Path) -> None:
    start_and_round_trip(tmp_path / "d", jobs=JobSettings(url=f"unix://{unix_redis}"))


def test_jobs_redis(tmp_path: Path, redis_keys: RedisKeys) -> None:
    start_and_round_trip(
        tmp_path, jobs=JobSettings(url=redis_keys.url, key_prefix=redis_keys.prefix)
    )


def test_working_rediss_and_rediss_cluster_checked_by_parse_only_no_tls_server_here() -> None:
    from redis.asyncio import RedisCluster
    from redis.asyncio.connection import SSLConnection

    from memmachine.adapters.redis.redis_common import redis_client
    from memmachine.bootstrap.stores import check_schemes

    check_schemes(None, None, "rediss://cache.example:6380/0")
    check_schemes(None, None, "rediss+cluster://cache.example:6380")
    single = redis_client("rediss://cache.example:6380/0", password=None)
    assert single.connection_pool.connection_class is SSLConnection  # type: ignore[union-attr]
    cluster = redis_client("rediss+cluster://cache.example:6380", password=None)
    assert isinstance(cluster, RedisCluster)
    assert cluster.nodes_manager.connection_kwargs["connection_class"] is SSLConnection


# --------------------------------------------------------------------------- episodes


def test_episodes_falkordb_server(tmp_path: Path, falkordb_server_url: str) -> None:
    start_and_round_trip(tmp_path, episode_store_url=with_scheme(falkordb_server_url, "falkordb"))


def test_episodes_falkordb_unix_socket(tmp_path: Path) -> None:
    socket = tmp_path / "f.sock"
    server = RedisServer(
        tmp_path / "falkordb-unix",
        falkordb=True,
        extra_args=("--unixsocket", str(socket), "--unixsocketperm", "700"),
    )
    try:
        server.wait_ready()
        start_and_round_trip(tmp_path / "d", episode_store_url=f"falkordb+unix://{socket}")
    finally:
        server.stop()


def _neo4j_values(target: Neo4jTarget, scheme: str) -> dict[str, Any]:
    values: dict[str, Any] = {"episode_store_url": with_scheme(target.url, scheme)}
    if target.password:
        values["episode_store_user"] = target.user or "neo4j"
        values["episode_store_password"] = target.password
    return values


def test_episodes_neo4j(tmp_path: Path, neo4j_database: Neo4jTarget) -> None:
    start_and_round_trip(tmp_path, **_neo4j_values(neo4j_database, "neo4j"))


def test_episodes_bolt(tmp_path: Path, neo4j_database: Neo4jTarget) -> None:
    start_and_round_trip(tmp_path, **_neo4j_values(neo4j_database, "bolt"))


@pytest.mark.parametrize("scheme", ["neo4j+s", "neo4j+ssc", "bolt+s"])
async def test_episodes_neo4j_tls_checked_by_parse_only_no_tls_server_here(
    scheme: str, tmp_path: Path
) -> None:
    from neo4j import AsyncGraphDatabase

    from memmachine.bootstrap.stores import check_schemes, episode_store

    url = f"{scheme}://graph.example:7687/memories"
    check_schemes(url, None, None)
    settings = Settings(data_dir=tmp_path, embedding=EmbeddingSettings(provider="none"))
    store = episode_store(url, None, settings, embedder_dims=None, embedder_model=None)
    driver = AsyncGraphDatabase.driver(store._url)  # type: ignore[attr-defined]
    try:
        assert driver.encrypted
    finally:
        await driver.close()
