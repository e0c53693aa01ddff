"""Episodic memory on Neo4j 5 (5.18 or later), through the official async driver.

The graph model, the queries and the behaviour are those of
:class:`~memmachine.adapters.cypher.cypher_dialect.CypherEpisodeStore`, shared with FalkorDB; the
Cypher that differs (schema DDL, the full-text procedure, the Lucene query, the cosine
function's [0, 1] scale) comes from
:class:`~memmachine.adapters.cypher.cypher_dialect.Neo4jDialect`.
This module adds the connection, the schema and the error mapping.

* One database (``database``, default: the server's default database) holds one
  deployment's episodes, like one graph does on FalkorDB. ``start()`` creates, idempotently:
  a uniqueness constraint on (tenant, org_id, project_id, user_id, id) of ``Episode`` (ids
  are unique per user, and a concurrent batch that loses the race on an id fails with
  ``ConflictError``), uniqueness constraints on ``Session.key``, ``UserLedger.key`` and
  ``MemMachineMeta.key`` (so concurrent ``MERGE`` s never duplicate them), range indexes on
  ``Episode.id``, ``user_id`` and ``session_id`` and on ``Session.user_id``, the full-text
  index ``episode_terms`` over
  ``Episode.search_terms`` (whitespace analyzer: the text is already normalised). No vector
  index: search is exact within the scope (a scan scored by ``vector.similarity.cosine``)
  and large users are searched by the in-process index of
  :class:`~memmachine.adapters.indexed.indexed_episode_store.IndexedEpisodeStore`, never by an
  approximate index over every user's episodes, whose upkeep cost 40 % of the CPU of every
  write (bench/RESULTS.md). A ``episode_embedding`` vector index left by an earlier version
  is dropped on start.
* The server sends only warnings the code can act on: notifications below WARNING and
  of the UNRECOGNIZED classification (a property key no node has yet) are switched off,
  so optional properties such as ``agent_id`` do not put a warning in the log per query.
* Every query is parameterised and bounded by ``timeout_seconds``, twice over: the server
  ends a transaction running longer (a ``Query`` timeout; the transaction is rolled back, so
  the caller gets ``StoreUnavailableError``), and the client stops waiting after that long
  whatever the server does (a frozen server answers nothing, and the driver has no read
  timeout of its own). A write the client stopped waiting for may still commit when the
  server wakes, so it is ``WriteOutcomeUnknownError`` (HTTP 504); a read is
  ``StoreUnavailableError``. Schema work in ``start()`` gets ``_START_TIMEOUT`` instead.
* A write runs through ``AsyncDriver.execute_query``: one managed (explicit) transaction,
  which the driver runs again on transient errors (deadlocks, leader changes, a connection
  lost mid-query) within ``max_transaction_retry_time``. That is safe, never a second
  write: the driver retries only errors met before ``COMMIT`` was sent (the server rolls
  back a transaction that never got its ``COMMIT``), and a connection lost while a
  ``COMMIT`` was on its way raises ``IncompleteCommit``, which it never retries. A read
  (one statement) runs as an auto-commit transaction routed to a reader: one round trip
  where a managed transaction takes two (half the latency and server CPU of the ledger
  read every search makes), retried on errors the driver calls retryable. A batch of
  episodes is one ``UNWIND`` query, so it is stored entirely or not at all.
* Driver errors never escape: an unreachable server, refused credentials or exhausted
  retries raise ``StoreUnavailableError``; a refused query ``StoreError``; a uniqueness
  violation ``ConflictError`` (see :func:`store_error`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from neo4j import (
    READ_ACCESS,
    AsyncDriver,
    AsyncGraphDatabase,
    Query,
    RoutingControl,
    basic_auth,
)
from neo4j import exceptions as neo4j_errors

from memmachine.adapters.cypher.cypher_dialect import Neo4jDialect
from memmachine.adapters.cypher.cypher_episode_store import FULLTEXT_INDEX, CypherEpisodeStore
from memmachine.adapters.health import health_of
from memmachine.adapters.neo4j.neo4j_compactor import DEFAULT_MAX_SCRUB_BYTES, Neo4jCompactor
from memmachine.errors import (
    ConfigurationError,
    ConflictError,
    MemMachineError,
    StoreError,
    StoreUnavailableError,
    WriteOutcomeUnknownError,
)
from memmachine.models import Scope, StoreHealth

__all__ = ["DEFAULT_TIMEOUT_SECONDS", "Neo4jEpisodeStore", "store_error"]

_STORE = "episodic"
_SCHEMES = frozenset({"neo4j", "neo4j+s", "neo4j+ssc", "bolt", "bolt+s", "bolt+ssc"})
_VECTOR_INDEX = "episode_embedding"
_INDEX_WAIT_SECONDS = 120
_CONNECTION_TIMEOUT = 5.0
_RETRY_SECONDS = 5.0
#: How long a query may take (the server's transaction timeout), by default.
DEFAULT_TIMEOUT_SECONDS = 10.0
#: How much longer than that the client waits, so a transaction the server timed out (and
#: rolled back) is answered as such rather than as a write of unknown outcome.
_GRACE_SECONDS = 1.0
#: The bound of each schema statement and check ``start()`` runs (index builds included).
_START_TIMEOUT = _INDEX_WAIT_SECONDS + 60.0
#: The characters of text (every string property) of an episode ``e``, read by the
#: statement that deletes it.
_TEXT_CHARS = (
    "reduce(n = 0, k IN keys(e) | n + CASE WHEN e[k] IS :: STRING THEN size(e[k]) ELSE 0 END)"
)
#: What a delete of unknown outcome counts (it may have taken any amount of text): enough
#: for the compactor's largest scrub.
_UNKNOWN_CHARS = DEFAULT_MAX_SCRUB_BYTES // 2
_COMPONENTS = "CALL dbms.components() YIELD name, versions, edition RETURN name, versions, edition"


class Neo4jEpisodeStore(CypherEpisodeStore):
    """:class:`~memmachine.ports.EpisodeStore` on Neo4j 5.

    ``url`` is a driver URI (``neo4j://``, ``neo4j+s://``, ``neo4j+ssc://``, ``bolt://``,
    ``bolt+s://``, ``bolt+ssc://``); credentials may ride in its userinfo
    (``neo4j://user:pass@host:7687``) and a path names the database (``/memories``), but
    ``user``, ``password`` and ``database`` given as arguments win. Without any credentials
    the driver connects unauthenticated; a password without a user means user ``neo4j``.
    With ``embedding_dimensions`` the store keeps vectors; without, it is lexical only. The
    database remembers the dimensions and model it was built with, and ``start()`` refuses
    others with ``ConfigurationError``. A query may run ``timeout_seconds`` (see the module
    docstring); the driver waits at most that long for a pooled connection too.
    """

    kind = "neo4j"

    def __init__(
        self,
        url: str,
        *,
        user: str | None = None,
        password: str | None = None,
        database: str | None = None,
        embedding_dimensions: int | None = None,
        embedding_model: str | None = None,
        max_connection_pool_size: int = 50,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        dialect = Neo4jDialect()
        super().__init__(
            dialect,
            embedding_dimensions=embedding_dimensions,
            embedding_model=embedding_model,
        )
        if max_connection_pool_size < 1:
            raise ConfigurationError(
                f"max_connection_pool_size must be positive, got {max_connection_pool_size}"
            )
        if not timeout_seconds > 0:
            raise ConfigurationError(f"timeout_seconds must be positive, got {timeout_seconds}")
        driver_url, url_user, url_password, url_database = _split_url(url)
        self._url = driver_url
        self._user = user if user is not None else url_user
        self._password = password if password is not None else url_password
        self._database = database or url_database
        self._pool_size = max_connection_pool_size
        self._timeout = timeout_seconds
        #: The bound of the queries running now (raised while ``start()`` builds the schema).
        self._limit = timeout_seconds
        self._neo4j = dialect
        self._driver: AsyncDriver | None = None
        #: Characters of episode text deleted since the last compaction (see ``compactor``).
        self._deleted_chars = 0

    @property
    def database(self) -> str | None:
        """The database the store uses (``None``: the server's default database)."""
        return self._database

    @property
    def _location(self) -> str:
        if self._database is None:
            return "the default Neo4j database"
        return f"Neo4j database {self._database!r}"

    def schema_statements(self) -> list[str]:
        """The DDL ``start()`` runs before checking the embedding settings, in order
        (constraints first: the settings node is merged under its own constraint)."""
        dialect = self._neo4j
        return [
            dialect.unique_constraint(
                "episode_id_per_user",
                "Episode",
                ("tenant", "org_id", "project_id", "user_id", "id"),
            ),
            dialect.unique_constraint("session_key", "Session", ("key",)),
            dialect.unique_constraint("user_ledger_key", "UserLedger", ("key",)),
            dialect.unique_constraint("memmachine_meta_key", "MemMachineMeta", ("key",)),
            dialect.range_index("Episode", "id"),
            dialect.range_index("Episode", "user_id"),
            dialect.range_index("Episode", "session_id"),
            dialect.range_index("Session", "user_id"),
            dialect.fulltext_index(FULLTEXT_INDEX, "Episode", "search_terms"),
        ]

    def obsolete_statements(self) -> list[str]:
        """DDL ``start()`` runs to drop what earlier versions created and nothing reads."""
        return [f"DROP INDEX {_VECTOR_INDEX} IF EXISTS"]

    # ------------------------------------------------------------------ forget

    def compactor(self) -> Neo4jCompactor:
        """What scrubs the text of deleted episodes out of the database's files after a
        forget (:mod:`memmachine.adapters.neo4j.neo4j_compactor`), sized by the text
        deleted since its last run."""

        def reset(chars: int) -> None:
            self._deleted_chars = max(0, self._deleted_chars - chars)

        return Neo4jCompactor(
            lambda cypher, params: self._run(cypher, params),
            name="episodic",
            where=f"{self._url}/{self._database or ''}",
            deleted_bytes=lambda: self._deleted_chars,
            reset=reset,
            fulltext=("Episode", "search_terms"),
        )

    _text_chars = _TEXT_CHARS

    def _text_deleted(self, chars: int) -> None:
        self._deleted_chars += chars

    async def delete_episode(
        self, scope: Scope, episode_id: str, *, stored_at: datetime | None = None
    ) -> bool:
        with self._unknown_counted():
            return await super().delete_episode(scope, episode_id, stored_at=stored_at)

    async def delete_episodes(self, scope: Scope) -> int:
        with self._unknown_counted():
            return await super().delete_episodes(scope)

    @contextlib.contextmanager
    def _unknown_counted(self) -> Iterator[None]:
        """A delete whose outcome is unknown (no answer; a commit cut off) did not report
        the text it took: count :data:`_UNKNOWN_CHARS`, so the next compaction scrubs its
        most rather than too little."""
        try:
            yield
        except WriteOutcomeUnknownError:
            self._deleted_chars += _UNKNOWN_CHARS
            raise

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect, create the schema, check the embedding settings (idempotent)."""
        if self._driver is not None:
            return
        auth = None
        if self._user is not None or self._password is not None:
            auth = basic_auth(self._user or "neo4j", self._password or "")
        try:
            self._driver = AsyncGraphDatabase.driver(
                self._url,
                auth=auth,
                max_connection_pool_size=self._pool_size,
                connection_timeout=min(_CONNECTION_TIMEOUT, self._timeout),
                connection_acquisition_timeout=self._timeout,
                max_transaction_retry_time=min(_RETRY_SECONDS, self._timeout),
                # Warnings and worse only, and not "unrecognized" ones: a property no episode
                # has yet (agent_id, group_id) draws one on every query that returns it.
                notifications_min_severity="WARNING",
                notifications_disabled_classifications=["UNRECOGNIZED"],
            )
        except (neo4j_errors.ConfigurationError, ValueError) as exc:
            raise ConfigurationError(f"invalid episode store URL: {exc}") from None
        self._limit = max(_START_TIMEOUT, self._timeout)
        try:
            await self._verify_connectivity()
            for statement in self.schema_statements():
                await self._ddl(statement)
            await self._check_meta()
            for statement in self.obsolete_statements():
                await self._ddl(statement)
            await self._run("CALL db.awaitIndexes($seconds)", {"seconds": _INDEX_WAIT_SECONDS})
        except BaseException:
            await self.close()
            raise
        finally:
            self._limit = self._timeout

    async def close(self) -> None:
        """Close the driver and its connection pool. Idempotent."""
        driver, self._driver = self._driver, None
        if driver is not None:
            # closing connections to a dead server is best effort
            with contextlib.suppress(neo4j_errors.Neo4jError, neo4j_errors.DriverError, OSError):
                await driver.close()

    async def health(self) -> StoreHealth:
        """Status, server version and latency of ``CALL dbms.components()``. Never raises."""
        vectors = f"{self._dimensions} dims" if self._dimensions else "off"
        detail = f"{self._location}, vectors {vectors}"
        driver = self._driver
        if driver is None:
            return health_of(self, "down", f"{detail}; not started")
        try:
            began = time.perf_counter()
            # one auto-commit query, not a retried transaction: health answers quickly
            async with (
                asyncio.timeout(self._timeout),
                driver.session(
                    database=self._database,
                    default_access_mode=READ_ACCESS,
                    disable_auto_commit_retries=True,
                ) as session,
            ):
                result = await session.run(Query(_COMPONENTS, timeout=self._timeout))
                rows = await result.values()
            latency = (time.perf_counter() - began) * 1000
        except TimeoutError:
            return health_of(self, "down", f"{detail}; no answer in {self._timeout:g} s")
        except (neo4j_errors.Neo4jError, neo4j_errors.DriverError, OSError) as exc:
            return health_of(self, "down", f"{detail}; {store_error(exc).message}")
        return health_of(self, "ok", detail, version=_version(rows), latency_ms=round(latency, 3))

    # ------------------------------------------------------------------ internals

    async def _verify_connectivity(self) -> None:
        """Fail fast (no transaction retries) when the server cannot be reached or refuses
        the credentials."""
        driver = self._require_driver()
        try:
            await driver.verify_connectivity()
        except (neo4j_errors.Neo4jError, neo4j_errors.DriverError, OSError) as exc:
            raise store_error(exc) from exc

    async def _ddl(self, statement: str) -> None:
        try:
            await self._run(statement)
        except StoreError as exc:
            if not self._neo4j.is_already_indexed(exc.message):
                raise

    async def _run(
        self,
        cypher: str,
        params: Mapping[str, object] | None = None,
        *,
        read_only: bool = False,
    ) -> list[list[Any]]:
        """Run one parameterised query, bounded (see the module docstring); the rows of its
        result."""
        driver = self._require_driver()
        limit = self._limit
        # The server ends the transaction after ``limit``; the client gives up a little later.
        query = Query(cypher, timeout=limit)
        bound = asyncio.timeout(limit + _GRACE_SECONDS)
        try:
            async with bound:
                if read_only:
                    return await self._read(driver, query, params)
                result = await driver.execute_query(
                    query,
                    dict(params or {}),
                    routing_=RoutingControl.WRITE,
                    database_=self._database,
                )
        except TimeoutError:
            if not bound.expired():
                raise
            raise _no_answer(limit + _GRACE_SECONDS, write=not read_only) from None
        except (neo4j_errors.Neo4jError, neo4j_errors.DriverError, OSError) as exc:
            raise store_error(exc) from exc
        return [list(record.values()) for record in result.records]

    async def _read(
        self, driver: AsyncDriver, query: Query, params: Mapping[str, object] | None
    ) -> list[list[Any]]:
        """One read in an auto-commit transaction, retried on retryable errors for at most
        ``_RETRY_SECONDS`` (a read is one statement, so retrying it is safe)."""
        deadline = time.monotonic() + _RETRY_SECONDS
        delay = 0.05
        while True:
            try:
                async with driver.session(
                    database=self._database, default_access_mode=READ_ACCESS
                ) as session:
                    result = await session.run(query, dict(params or {}))
                    rows: list[list[Any]] = await result.values()
                    return rows
            except (neo4j_errors.Neo4jError, neo4j_errors.DriverError, OSError) as exc:
                retryable = not isinstance(exc, OSError) and exc.is_retryable()
                if not retryable or time.monotonic() + delay > deadline:
                    raise store_error(exc) from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _require_driver(self) -> AsyncDriver:
        if self._driver is None:
            raise StoreUnavailableError("episode store is not started", _STORE)
        return self._driver


# ---------------------------------------------------------------------- helpers


def _no_answer(seconds: float, *, write: bool) -> StoreError:
    """The error for a query the client stopped waiting for after ``seconds``: a write may
    still commit when the server answers (outcome unknown), a read changed nothing."""
    if write:
        return WriteOutcomeUnknownError(
            f"episode store sent no answer in {seconds:g} s: whether the write was applied "
            "is unknown",
            _STORE,
        )
    return StoreUnavailableError(f"episode store sent no answer in {seconds:g} s", _STORE)


def store_error(exc: BaseException) -> MemMachineError:
    """The project's error for a driver exception (the caller raises it ``from exc``).

    * a uniqueness violation (``ConstraintError``) → ``ConflictError``;
    * a connection lost while a commit was on its way (``IncompleteCommit``, which the
      driver never retries) → ``WriteOutcomeUnknownError``;
    * refused credentials, an unreachable server or cluster, a pool that cannot hand out a
      connection, a transient error still failing after the driver's retries, a socket
      error, a transaction the server ended at its timeout (and rolled back) →
      ``StoreUnavailableError``;
    * any other server or driver error (a refused query, missing privileges, an unknown
      database) → ``StoreError`` naming the server's error code.
    """
    if isinstance(exc, neo4j_errors.ConstraintError):
        return ConflictError("an episode with this id already exists")
    if isinstance(exc, neo4j_errors.IncompleteCommit):
        return WriteOutcomeUnknownError(
            "episode store connection lost while committing: whether the write was applied "
            "is unknown",
            _STORE,
        )
    if isinstance(exc, neo4j_errors.Neo4jError) and "TransactionTimedOut" in (exc.code or ""):
        return StoreUnavailableError(
            "episode store query ran past its timeout and was rolled back", _STORE
        )
    if isinstance(exc, neo4j_errors.AuthError):
        return StoreUnavailableError(
            f"episode store refused the credentials ({type(exc).__name__})", _STORE
        )
    if isinstance(
        exc,
        (
            neo4j_errors.ServiceUnavailable,
            neo4j_errors.SessionExpired,
            neo4j_errors.ConnectionPoolError,
            neo4j_errors.TransientError,
            OSError,
        ),
    ):
        return StoreUnavailableError(f"episode store unreachable ({type(exc).__name__})", _STORE)
    if isinstance(exc, neo4j_errors.Neo4jError):
        return StoreError(f"episode store query failed: {exc.code}: {exc.message}", _STORE)
    return StoreError(f"episode store driver error ({type(exc).__name__}: {exc})", _STORE)


def _split_url(url: str) -> tuple[str, str | None, str | None, str | None]:
    """``(driver URL, user, password, database)``: the URL without userinfo and path, the
    userinfo's (percent-decoded) parts and the path's database name."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigurationError(f"invalid episode store URL: {exc}") from None
    if parts.scheme not in _SCHEMES:
        raise ConfigurationError(
            f"a Neo4j URL starts with one of {', '.join(sorted(_SCHEMES))}://, "
            f"not {parts.scheme or '(no scheme)'}://"
        )
    userinfo, at, host = parts.netloc.rpartition("@")
    if not host:
        raise ConfigurationError("a Neo4j URL needs a host")
    user = password = None
    if at:
        name, colon, secret = userinfo.partition(":")
        user = unquote(name) or None
        password = unquote(secret) if colon else None
    database = unquote(parts.path.strip("/")) or None
    return urlunsplit((parts.scheme, host, "", parts.query, "")), user, password, database


def _version(rows: Sequence[Sequence[Any]]) -> str | None:
    """``Neo4j Kernel 5.26.0 community`` from ``dbms.components()`` rows."""
    parts = []
    for name, versions, edition in rows:
        version = ", ".join(str(v) for v in versions) if isinstance(versions, list) else versions
        parts.append(" ".join(str(part) for part in (name, version, edition) if part))
    return "; ".join(parts) or None
