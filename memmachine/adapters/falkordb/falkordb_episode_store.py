"""Episodic memory on FalkorDB (embedded or a server), over the Redis protocol.

The graph model, the queries and the behaviour are those of
:class:`~memmachine.adapters.cypher.cypher_dialect.CypherEpisodeStore`, shared with Neo4j;
this module adds the connection, FalkorDB's schema and how a query travels. One graph
(``graph_name``) holds one deployment's episodes; vectors are stored as ``vecf32``.

Search specifics:

* ``vector_search`` is an exact scan through the ``user_id`` index (6-10 ms for 5k episodes
  of 384 dimensions). No HNSW vector index is created: FalkorDB rebuilds vector indexes
  from scratch whenever it loads a graph (15 s for 20k episodes of 384 dimensions, against
  0.3 s without), besides slowing every write. Large users are searched by the in-process
  index of :class:`~memmachine.adapters.indexed.indexed_episode_store.IndexedEpisodeStore`
  instead, which reads the vectors once (``index_entries``).
* ``fulltext_search`` ranks with BM25 computed in the query because FalkorDB's built-in
  score is TF-IDF with an integer (``logb``) idf, normalised by the document's most frequent
  term rather than its length, and it *averages* term scores on an OR query: "a fox met a
  dog" ranks below every document holding only "dog" for "fox dog".

Queries are sent as ``GRAPH.QUERY`` / ``GRAPH.RO_QUERY`` with FalkorDB's ``CYPHER name=value``
parameter header (rendered by the ``falkordb`` client's helper) and read in the verbose
reply format: the store returns scalars only, which parse about twice as fast that way as
through the client's compact-format decoder.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis
from falkordb.helpers import stringify_param_value
from redis import exceptions as redis_errors

from memmachine.adapters.cypher.cypher_dialect import FalkorDBDialect
from memmachine.adapters.cypher.cypher_episode_store import FULLTEXT_INDEX, CypherEpisodeStore
from memmachine.adapters.health import health_of
from memmachine.adapters.redis.redis_common import (
    DEFAULT_SOCKET_TIMEOUT_SECONDS,
    redis_client,
    translate_errors,
)
from memmachine.adapters.redis.redis_compactor import RedisCompactor
from memmachine.errors import ConfigurationError, StoreError, StoreUnavailableError
from memmachine.models import StoreHealth

__all__ = ["FalkorDBEpisodeStore"]

_STORE = "episodic"
#: How long ``start()`` waits for FalkorDB to finish filling new indexes.
_INDEX_WAIT_SECONDS = 120.0
_RANGE_INDEXES = (
    ("Episode", "id"),
    ("Episode", "user_id"),
    ("Episode", "session_id"),
    ("Session", "key"),
    ("Session", "user_id"),
    ("UserLedger", "key"),
    ("MemMachineMeta", "key"),
)


class FalkorDBEpisodeStore(CypherEpisodeStore):
    """:class:`~memmachine.ports.EpisodeStore` on FalkorDB.

    ``url`` is a redis-py URL (``unix:///path.sock``, ``redis://host:port``,
    ``rediss://…``); ``falkordb://``, ``falkordbs://`` and ``falkordb+unix://`` are accepted
    too. With ``embedding_dimensions`` the store keeps vectors; without, it is lexical only:
    embeddings are ignored and ``vector_search`` returns ``[]``. The graph remembers the
    dimensions and model it was built with, and ``start()`` refuses others with
    ``ConfigurationError`` rather than mixing vectors (a lexical-only store may open a graph
    with vectors; its new episodes simply have none). A query waits ``timeout_seconds`` for
    its answer; the client never resends one (see :mod:`memmachine.adapters.redis.redis_common`).
    """

    kind = "falkordb"

    def __init__(
        self,
        url: str,
        *,
        graph_name: str = "memmachine",
        embedding_dimensions: int | None = None,
        embedding_model: str | None = None,
        password: str | None = None,
        timeout_seconds: float = DEFAULT_SOCKET_TIMEOUT_SECONDS,
    ) -> None:
        if not graph_name:
            raise ConfigurationError("graph_name must not be empty")
        super().__init__(
            FalkorDBDialect(),
            embedding_dimensions=embedding_dimensions,
            embedding_model=embedding_model,
        )
        self._url = _redis_url(url)
        self._password = password
        self._graph = graph_name
        self._timeout = timeout_seconds
        self._client: aioredis.Redis | None = None

    @property
    def graph_name(self) -> str:
        return self._graph

    @property
    def _location(self) -> str:
        return f"graph {self._graph!r}"

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect, check the graph's embedding settings, create indexes and wait until
        FalkorDB has filled them (idempotent)."""
        if self._client is not None:
            return
        try:
            client = redis_client(self._url, password=self._password, socket_timeout=self._timeout)
            if not isinstance(client, aioredis.Redis):  # a cluster URL: FalkorDB has none
                await client.aclose()
                raise ConfigurationError("the episode store URL names a Redis Cluster")
            self._client = client
        except (ValueError, redis_errors.RedisError) as exc:
            raise ConfigurationError(f"invalid episode store URL: {exc}") from None
        try:
            await self._check_meta()
            await self._create_indexes()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Drop the connection pool. Idempotent."""
        client, self._client = self._client, None
        if client is not None:
            # closing a pool to a dead server is best effort
            with contextlib.suppress(redis_errors.RedisError, OSError):
                await client.aclose()

    def compactor(self) -> RedisCompactor:
        """What rewrites the server's files after a forget (see :class:`RedisCompactor`)."""
        return RedisCompactor(self._url, name="episodes", password=self._password)

    async def health(self) -> StoreHealth:
        """Status, FalkorDB/Redis version and the latency of ``RETURN 1``. Never raises."""
        vectors = f"{self._dimensions} dims" if self._dimensions else "off"
        detail = f"graph {self._graph!r}, vectors {vectors}"
        if self._client is None:
            return health_of(self, "down", f"{detail}; not started")
        try:
            began = time.perf_counter()
            await self._run("RETURN 1", read_only=True)
            latency = (time.perf_counter() - began) * 1000
            version = await self._version()
        except StoreError as exc:
            return health_of(self, "down", f"{detail}; {exc.message}")
        return health_of(self, "ok", detail, version=version, latency_ms=round(latency, 3))

    # ------------------------------------------------------------------ internals

    async def _create_indexes(self) -> None:
        statements = [self._dialect.range_index(label, prop) for label, prop in _RANGE_INDEXES]
        statements.append(self._dialect.fulltext_index(FULLTEXT_INDEX, "Episode", "search_terms"))
        # No HNSW vector index: search is an exact scan (see the module docstring).
        for statement in statements:
            try:
                await self._run(statement)
            except StoreError as exc:
                if not self._dialect.is_already_indexed(exc.message):
                    raise
        await self._await_indexes()

    async def _await_indexes(self) -> None:
        """Return once FalkorDB reports every index of the graph operational. An index
        created over existing nodes is filled in the background, and until then a query
        through it misses those nodes (a full-text search finds nothing)."""
        deadline = time.monotonic() + _INDEX_WAIT_SECONDS
        delay = 0.01
        while True:
            rows = await self._run(
                "CALL db.indexes() YIELD label, status RETURN label, status", read_only=True
            )
            building = sorted({str(label) for label, status in rows if status != "OPERATIONAL"})
            if not building:
                return
            if time.monotonic() > deadline:
                raise StoreUnavailableError(
                    f"FalkorDB is still building the {', '.join(building)} indexes of "
                    f"{self._location} after {_INDEX_WAIT_SECONDS:.0f} s",
                    _STORE,
                )
            await asyncio.sleep(delay)
            delay = min(2 * delay, 0.5)

    async def _version(self) -> str | None:
        client = self._require_client()
        try:
            info = await client.info("server")
            modules = await client.module_list()
        except (redis_errors.RedisError, OSError):
            return None  # a managed server may refuse INFO/MODULE: the version is optional
        parts = [
            _module_version(module)
            for module in modules
            if isinstance(module, Mapping) and module.get("name") == "graph"
        ]
        parts.append(f"Redis {info.get('redis_version', '?')}")
        return ", ".join(parts)

    async def _run(
        self,
        cypher: str,
        params: Mapping[str, object] | None = None,
        *,
        read_only: bool = False,
    ) -> list[list[Any]]:
        """Run one parameterised query; the rows of its result (``[]`` when none).

        Driver errors become ``StoreUnavailableError`` (cannot reach the server, or a read
        got no answer), ``WriteOutcomeUnknownError`` (a write got no answer: it may have
        been applied) or ``StoreError`` (the server refused the query). Nothing is resent.
        """
        client = self._require_client()
        command = "GRAPH.RO_QUERY" if read_only else "GRAPH.QUERY"
        query = _with_params(cypher, params)
        with translate_errors(
            "episode store could not run a query", store=_STORE, write=not read_only
        ):
            try:
                reply = await client.execute_command(command, self._graph, query)  # type: ignore[no-untyped-call]
            except redis_errors.ResponseError as exc:
                raise StoreError(f"episode store query failed: {exc}", _STORE) from exc
        if isinstance(reply, list) and len(reply) == 3 and isinstance(reply[1], list):
            return reply[1]
        return []

    def _require_client(self) -> aioredis.Redis:
        if self._client is None:
            raise StoreUnavailableError("episode store is not started", _STORE)
        return self._client


# ---------------------------------------------------------------------- helpers


def _redis_url(url: str) -> str:
    """Accept ``falkordb[s]://`` and ``falkordb+unix://`` as aliases of the redis schemes."""
    for alias, scheme in (
        ("falkordb+unix://", "unix://"),
        ("falkordbs://", "rediss://"),
        ("falkordb://", "redis://"),
    ):
        if url.startswith(alias):
            return scheme + url[len(alias) :]
    return url


def _with_params(cypher: str, params: Mapping[str, object] | None) -> str:
    """FalkorDB's parameter header (``CYPHER a=1 b="x" …``) followed by the query."""
    if not params:
        return cypher
    header = " ".join(f"{name}={stringify_param_value(value)}" for name, value in params.items())
    return f"CYPHER {header} {cypher}"


def _module_version(module: Mapping[str, Any]) -> str:
    ver = int(str(module.get("ver", 0)))
    return f"FalkorDB {ver // 10000}.{ver // 100 % 100}.{ver % 100}"
