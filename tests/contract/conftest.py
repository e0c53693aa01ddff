"""Backends the contract suites run against.

The episode-store suite takes ``episode_store`` (and ``open_episode_store`` for tests that
reopen a store), parametrised over :data:`EPISODE_STORE_BACKENDS`. Adding an adapter is one
entry there: a function that, given the pytest request (to pull in the fixtures it needs,
such as a server), returns an :class:`EpisodeStoreBackend`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from memmachine.adapters.embedded_falkordb import EmbeddedFalkorDBServer
from memmachine.adapters.falkordb_episode_store import FalkorDBEpisodeStore
from memmachine.ports import EpisodeStore

#: Vector size used by the suite's stores.
DIMENSIONS = 4
MODEL = "contract-test-model"

OpenEpisodeStore = Callable[..., Awaitable[EpisodeStore]]


@dataclass(frozen=True)
class EpisodeStoreBackend:
    """How to make (unstarted) stores of one adapter.

    ``make(namespace, dimensions, model)``: a store whose data lives in ``namespace`` (a
    graph, a database...), so that tests cannot see each other. ``drop(namespace)`` removes
    what a test left behind.
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


def _embedded_falkordb(request: pytest.FixtureRequest) -> EpisodeStoreBackend:
    server: EmbeddedFalkorDBServer = request.getfixturevalue("embedded_falkordb")

    def make(namespace: str, dimensions: int | None, model: str | None) -> EpisodeStore:
        return FalkorDBEpisodeStore(
            server.url,
            graph_name=namespace,
            embedding_dimensions=dimensions,
            embedding_model=model,
        )

    async def drop(namespace: str) -> None:
        client = aioredis.Redis(unix_socket_path=str(server.socket_path))
        try:
            await client.execute_command("GRAPH.DELETE", namespace)
        except ResponseError:
            pass  # the test never created the graph
        finally:
            await client.aclose()

    return EpisodeStoreBackend(make=make, drop=drop)


#: One entry per adapter; the suite runs once for each.
EPISODE_STORE_BACKENDS: dict[str, Callable[[pytest.FixtureRequest], EpisodeStoreBackend]] = {
    "embedded-falkordb": _embedded_falkordb,
}


@pytest.fixture(params=sorted(EPISODE_STORE_BACKENDS))
def episode_store_backend(request: pytest.FixtureRequest) -> EpisodeStoreBackend:
    return EPISODE_STORE_BACKENDS[request.param](request)


@pytest.fixture
async def open_episode_store(
    episode_store_backend: EpisodeStoreBackend,
) -> AsyncIterator[OpenEpisodeStore]:
    """``await open_episode_store(dimensions=4, model=MODEL)``: a started store on this
    test's own namespace. Every store opened is closed, and the namespace dropped, after the
    test."""
    namespace = f"contract-{uuid.uuid4().hex[:12]}"
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
