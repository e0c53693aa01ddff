"""Profile memory on SQL through SQLAlchemy 2 async: SQLite (aiosqlite) and PostgreSQL (psycopg).

The ORM models live in :mod:`memmachine.adapters.sql.sql_models`; the schema is made and changed
by the Alembic migrations of :mod:`memmachine.adapters.sql.migrations`, run by ``start()`` (a
no-op at head; PostgreSQL serialises concurrent starts with an advisory lock, SQLite with
``BEGIN IMMEDIATE``). Behaviour beyond the :class:`~memmachine.ports.ProfileStore` contract:

* Scope: ``tenant``, ``org_id``, ``project_id`` and ``user_id`` always match. For reads and
  deletes ``agent_id`` / ``group_id`` narrow to facts recorded with that agent / group and
  ``session_id`` narrows to facts whose ``source_session_id`` is that session. Upserts match
  an existing (tag, feature) at user level (the one-fact-per-(tag, feature) rule), record
  ``agent_id`` / ``group_id`` only on new facts and keep them on updates.
* Upserts run in one transaction. An update replaces value, confidence, source,
  source_session_id, metadata and embedding. When one batch names the same (tag, feature)
  twice the last record wins and both positions of the result carry the final fact.
* No lost updates: every write that changes current facts (upsert, invalidate, detach)
  reads them ``SELECT ... FOR UPDATE`` in (tag, feature) order on PostgreSQL, so concurrent
  writers of one fact take turns and each sees the value the previous one committed (and
  moves it to the history); SQLite gets the same from ``BEGIN IMMEDIATE``. Two first
  inserts of one (tag, feature) meet at the unique constraint, and the loser runs again
  and updates the winner's row; so does a transaction PostgreSQL rolls back to break a
  deadlock. Either retry is safe: the failed attempt kept nothing.
* History: ``profile_facts`` holds only current facts (``valid_to`` stays ``NULL``). A new
  value for an existing (tag, feature) first copies the old version into
  ``profile_fact_history`` (reason ``"superseded"``); ``invalidate_fact`` / ``apply_facts``
  copy the fact there with their reason and delete it from ``profile_facts``, so every read
  and search sees current facts only without an extra filter. Deleting facts deletes their
  history too.
* ``search_facts`` fuses two rankings by reciprocal-rank fusion
  (:mod:`memmachine.indexing.fusion`), then loads only the ``k`` winners:

  - lexical: BM25 over the analysed terms of tag, feature and value (``search_terms``,
    written at upsert by the shared analyser). SQLite scores every in-scope fact in Python.
    PostgreSQL finds the candidates with the GIN-indexed ``search_vector @@ tsquery`` and
    takes the collection statistics (fact count, mean length, document frequencies) from
    SQL, so only matching facts travel; the BM25 scores are the same as SQLite's.
  - semantic: cosine similarity. PostgreSQL with pgvector computes it in SQL
    (``embedding_vec <=> query``); otherwise the in-scope embeddings of the query's size
    are fetched as bytes and scored with numpy.
* SQLite: the parent directory of the database file is created, the file runs in WAL mode
  with a busy timeout and foreign keys on, and write transactions start with
  ``BEGIN IMMEDIATE`` so concurrent writers queue instead of failing on lock upgrade.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import numpy as np
from sqlalchemy import (
    ColumnElement,
    CursorResult,
    Delete,
    Float,
    Select,
    String,
    bindparam,
    case,
    column,
    delete,
    func,
    literal_column,
    or_,
    select,
    text,
    true,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.postgresql import ARRAY, TSQUERY
from sqlalchemy.engine import Connection
from sqlalchemy.exc import (
    DBAPIError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.expression import ColumnClause

from memmachine.adapters.health import health_of
from memmachine.adapters.sql.migrations import upgrade_schema
from memmachine.adapters.sql.migrations.pgvector import enable_pgvector, set_vectors
from memmachine.adapters.sql.sql_compactor import SqlCompactor
from memmachine.adapters.sql.sql_engine import (
    SessionFactory,
    SqlDatabase,
    describe_sql_error,
    dump_json,
)
from memmachine.adapters.sql.sql_models import ProfileFactHistoryRow, ProfileFactRow
from memmachine.adapters.sql.sql_ranking import (
    Collection,
    FloatArray,
    bm25_ranking,
    cosine_ranking,
    python_rankings,
    unit_vector,
)
from memmachine.errors import (
    InvalidInputError,
    MemMachineError,
    StoreError,
    StoreUnavailableError,
)
from memmachine.indexing.fusion import reciprocal_rank_fusion
from memmachine.indexing.terms import document_terms, query_terms
from memmachine.models import (
    EXPIRED_SOURCE,
    EpisodeDetachment,
    Fact,
    FactRecord,
    FactTimes,
    FactVersion,
    ProjectScope,
    Scope,
    StoreHealth,
    UserActivity,
    as_utc,
    expiry_of,
    utc_now,
)
from memmachine.ports import Lifecycle, page_of_projects

__all__ = ["SqlProfileStore"]

_STORE = "profile"
#: Episode ids matched per query by ``mark_sources_expired`` (SQLite bounds a query's depth).
_MARK_BATCH = 100
_SQLITE_BUSY_TIMEOUT_MS = 10_000
_SQLITE_BEGIN_OPTION = "memmachine_sqlite_begin"
_HEALTH_TIMEOUT_SECONDS = 5.0
#: Attempts of one upsert when a concurrent writer inserted the same (tag, feature) first.
_UPSERT_ATTEMPTS = 3


class SqlProfileStore(Lifecycle):
    """:class:`~memmachine.ports.ProfileStore` on SQLite or PostgreSQL.

    ``url`` is an SQLAlchemy URL. ``sqlite:///path`` and ``postgresql://...`` without a
    driver get the async one (aiosqlite, psycopg); in-memory SQLite is refused because each
    pooled connection would see its own empty database. ``kind`` is ``"sqlite"`` or
    ``"postgresql"``.
    """

    name = _STORE

    def __init__(
        self, url: str, *, echo: bool = False, timeout_seconds: float | None = None
    ) -> None:
        self._database = SqlDatabase(
            url, store=_STORE, label="profile store", echo=echo, timeout_seconds=timeout_seconds
        )
        self.kind: str = self._database.kind
        #: PostgreSQL with ``embedding_vec`` (pgvector): cosine similarity runs in SQL.
        self._pgvector = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open the engine and migrate the schema to the newest revision. Idempotent.

        The upgrade runs in one transaction: on PostgreSQL under a transaction-level
        advisory lock (a concurrent start waits, then finds the schema at head), on SQLite
        under a file lock (see :meth:`~memmachine.adapters.sql.sql_engine.SqlDatabase.start_lock`)
        and ``BEGIN IMMEDIATE``. On PostgreSQL it also enables pgvector when the server gained
        it after the schema reached head.
        """
        if self._database.engine is not None:
            return
        self._pgvector = await self._database.start(_migrate)

    async def close(self) -> None:
        """Dispose of the engine and its pool. Safe to call twice."""
        await self._database.close()

    def compactor(self) -> SqlCompactor:
        """What compacts the fact tables after a forget (see :class:`SqlCompactor`)."""
        return SqlCompactor(
            self._database, ["profile_facts", "profile_fact_history"], name="profile"
        )

    async def health(self) -> StoreHealth:
        """Round-trip ``SELECT 1``; report dialect (on PostgreSQL: whether pgvector ranks
        the vectors), server version and latency. Never raises."""
        engine = self._database.engine
        if engine is None:
            return health_of(self, "down", detail="not started")
        started = time.perf_counter()
        try:
            async with asyncio.timeout(_HEALTH_TIMEOUT_SECONDS), engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
                info = conn.dialect.server_version_info
        except Exception as exc:
            return health_of(self, "down", detail=describe_sql_error(exc))
        latency = (time.perf_counter() - started) * 1000
        version = ".".join(str(part) for part in info) if info else None
        detail = f"{engine.dialect.name}+{engine.dialect.driver}"
        if engine.dialect.name == "postgresql":
            detail += ", vectors ranked by pgvector" if self._pgvector else ", no pgvector"
        return health_of(self, "ok", detail=detail, version=version, latency_ms=latency)

    # ------------------------------------------------------------------ writes

    async def upsert_facts(self, scope: Scope, records: Sequence[FactRecord]) -> list[Fact]:
        """Insert or update one fact per record in one transaction; all or nothing."""
        return await self.apply_facts(scope, records, invalidate=(), reason="")

    async def apply_facts(
        self,
        scope: Scope,
        records: Sequence[FactRecord],
        *,
        invalidate: Sequence[str],
        reason: str,
    ) -> list[Fact]:
        """Invalidate the facts ``invalidate`` (ids in ``scope``; unknown ids are skipped),
        then upsert ``records``, all in one transaction; the stored facts in input order."""
        if not records and not invalidate:
            return []
        prepared = [_prepare(index, record) for index, record in enumerate(records)]
        writer = self._sessions(write=True)
        attempt = 0
        while True:
            attempt += 1
            try:
                async with writer() as session, session.begin():
                    if invalidate:
                        await _invalidate_rows(session, scope, invalidate, reason)
                    rows = await _upsert_rows(session, scope, prepared) if prepared else []
                    if self._pgvector and rows:
                        vectors = {row.id: row.embedding for row in rows}
                        conn = await session.connection()
                        await conn.run_sync(set_vectors, list(vectors.items()))
                return [_to_fact(row) for row in rows]
            except (IntegrityError, OperationalError) as exc:
                # A concurrent upsert inserted one of our (tag, feature) first, or PostgreSQL
                # broke a deadlock by rolling us back: the transaction left nothing behind,
                # so it runs again, and now finds (and locks) the row the other one made.
                if attempt >= _UPSERT_ATTEMPTS or not _worth_retrying(exc):
                    raise _store_error("upsert facts", exc) from exc
            except SQLAlchemyError as exc:
                raise _store_error("upsert facts", exc) from exc

    async def delete_fact(self, scope: Scope, fact_id: str) -> bool:
        """Delete one fact by id when it lies in ``scope``; whether something was deleted."""
        statement = delete(ProfileFactRow).where(
            ProfileFactRow.id == fact_id, *_scope_filter(scope)
        )
        history = delete(ProfileFactHistoryRow).where(
            ProfileFactHistoryRow.fact_id == fact_id, *_history_filter(scope)
        )
        return await self._delete(statement, "delete fact", history) > 0

    async def delete_facts(
        self, scope: Scope, *, tag: str | None = None, feature: str | None = None
    ) -> int:
        """Delete the facts in ``scope`` (optionally one tag / feature); how many."""
        statement = delete(ProfileFactRow).where(
            *_scope_filter(scope), *_tag_feature_filter(tag, feature)
        )
        history = delete(ProfileFactHistoryRow).where(*_history_filter(scope))
        if tag is not None:
            history = history.where(ProfileFactHistoryRow.tag == tag)
        if feature is not None:
            history = history.where(ProfileFactHistoryRow.feature == feature)
        return await self._delete(statement, "delete facts", history)

    async def invalidate_fact(self, scope: Scope, fact_id: str, reason: str) -> bool:
        """Close the fact with ``fact_id`` in ``scope``: its version moves to the history
        (``valid_to`` = now, ``reason``) and it leaves the current facts. Whether it existed."""
        writer = self._sessions(write=True)
        with _translate("invalidate fact"):
            async with writer() as session, session.begin():
                return await _invalidate_rows(session, scope, [fact_id], reason) > 0

    async def fact_history(self, scope: Scope, tag: str, feature: str) -> list[FactVersion]:
        """The closed versions of the user's (tag, feature), oldest first."""
        statement = (
            select(ProfileFactHistoryRow)
            .where(
                *_history_filter(scope),
                ProfileFactHistoryRow.tag == tag,
                ProfileFactHistoryRow.feature == feature,
            )
            .order_by(ProfileFactHistoryRow.valid_to, ProfileFactHistoryRow.recorded_at)
        )
        reader = self._sessions(write=False)
        with _translate("read fact history"):
            async with reader() as session:
                rows = list(await session.scalars(statement))
        return [_to_version(row) for row in rows]

    async def list_fact_versions(self, scope: Scope) -> list[FactVersion]:
        """Every closed version of the user, by (tag, feature) and then oldest first."""
        table = ProfileFactHistoryRow
        statement = (
            select(table)
            .where(*_history_filter(scope.user_scope()))
            .order_by(table.tag, table.feature, table.valid_to, table.recorded_at)
        )
        reader = self._sessions(write=False)
        with _translate("read fact history"):
            async with reader() as session:
                rows = list(await session.scalars(statement))
        return [_to_version(row) for row in rows]

    async def restore_fact_times(
        self,
        scope: Scope,
        tag: str,
        feature: str,
        current: FactTimes | None,
        versions: Sequence[FactTimes],
    ) -> bool:
        """Put back another store's times (and ids) of the user's (tag, feature); see the
        port's contract. One transaction."""
        user = scope.user_scope()
        history = ProfileFactHistoryRow
        writer = self._sessions(write=True)
        with _translate("restore fact times"):
            async with writer() as session, session.begin():
                facts = list(
                    await session.scalars(
                        select(ProfileFactRow).where(
                            *_user_filter(user),
                            ProfileFactRow.tag == tag,
                            ProfileFactRow.feature == feature,
                        )
                    )
                )
                closed = list(
                    await session.scalars(
                        select(history)
                        .where(
                            *_history_filter(user), history.tag == tag, history.feature == feature
                        )
                        .order_by(history.valid_to, history.recorded_at)
                    )
                )
                if len(closed) != len(versions) or bool(facts) != (current is not None):
                    return False
                for row, times in zip(closed, versions, strict=True):
                    _stamp(row, times, ("valid_from", "valid_to", "recorded_at"))
                    if times.id is not None:
                        row.fact_id = times.id
                if facts and current is not None:
                    row_fact = facts[0]
                    _stamp(row_fact, current, ("created_at", "updated_at", "valid_from"))
                    if current.id is not None and current.id != row_fact.id:
                        taken = await session.get(ProfileFactRow, current.id)
                        if taken is None:
                            row_fact.id = current.id
        return True

    async def detach_episodes(self, scope: Scope, episode_ids: Sequence[str]) -> EpisodeDetachment:
        """Drop ``episode_ids`` from the user's facts and their history; a fact that rested
        only on them goes back to its newest version other episodes back, or is deleted
        (see the port's contract). One transaction."""
        gone = set(episode_ids)
        report = EpisodeDetachment()
        if not gone:
            return report
        user = scope.user_scope()
        writer = self._sessions(write=True)
        with _translate("detach episodes from facts"):
            async with writer() as session, session.begin():
                versions = await session.scalars(
                    select(ProfileFactHistoryRow).where(
                        *_history_filter(user),
                        _mentions_any(ProfileFactHistoryRow.source_episode_ids, gone),
                    )
                )
                for version in versions:
                    before = list(version.source_episode_ids or [])
                    left = [e for e in before if e not in gone]
                    if len(left) == len(before):
                        continue
                    if left:
                        version.source_episode_ids = left
                    else:
                        await session.delete(version)
                        report.versions_erased += 1
                await session.flush()
                facts = await session.scalars(
                    select(ProfileFactRow)
                    .where(
                        *_user_filter(user),
                        _mentions_any(ProfileFactRow.source_episode_ids, gone),
                    )
                    .order_by(ProfileFactRow.tag, ProfileFactRow.feature)
                    .with_for_update()
                )
                for row in facts:
                    before = list(row.source_episode_ids or [])
                    left = [e for e in before if e not in gone]
                    if len(left) == len(before):
                        continue
                    if left:
                        row.source_episode_ids = left
                        report.kept += 1
                    elif await _restore_previous(session, user, row):
                        report.restored.append(row.id)
                    else:
                        await session.delete(row)
                        report.removed += 1
        return report

    async def mark_sources_expired(self, scope: Scope, episode_ids: Sequence[str]) -> int:
        """Replace ``episode_ids`` in the user's facts' and closed versions' sources by
        :data:`EXPIRED_SOURCE` (once per list); nothing else changes. One transaction."""
        gone = set(episode_ids)
        if not gone:
            return 0
        user = scope.user_scope()
        changed = 0
        with _translate("mark expired fact sources"):
            async with self._sessions(write=True)() as session, session.begin():
                ids = sorted(gone)
                for start in range(0, len(ids), _MARK_BATCH):
                    batch = set(ids[start : start + _MARK_BATCH])
                    versions = await session.scalars(
                        select(ProfileFactHistoryRow).where(
                            *_history_filter(user),
                            _mentions_any(ProfileFactHistoryRow.source_episode_ids, batch),
                        )
                    )
                    facts = await session.scalars(
                        select(ProfileFactRow).where(
                            *_user_filter(user),
                            _mentions_any(ProfileFactRow.source_episode_ids, batch),
                        )
                    )
                    changed += sum(_mark(row, gone) for row in {*versions, *facts})
        return changed

    async def delete_expired_versions(self, scope: Scope, now: datetime) -> int:
        """Erase the user's closed versions whose ``expires_at`` is at or before ``now``."""
        statement = delete(ProfileFactHistoryRow).where(
            *_history_filter(scope.user_scope()),
            ProfileFactHistoryRow.expires_at.is_not(None),
            ProfileFactHistoryRow.expires_at <= now,
        )
        with _translate("delete expired fact versions"):
            async with self._sessions(write=True)() as session, session.begin():
                result = cast(CursorResult[Any], await session.execute(statement))
        return int(result.rowcount or 0)

    # ------------------------------------------------------------------ reads

    async def get_fact(self, scope: Scope, fact_id: str) -> Fact | None:
        """The fact with ``fact_id`` when it lies in ``scope``, else ``None``."""
        statement = select(ProfileFactRow).where(
            ProfileFactRow.id == fact_id, *_scope_filter(scope)
        )
        rows = await self._select(statement, "get fact")
        return _to_fact(rows[0]) if rows else None

    async def list_facts(
        self,
        scope: Scope,
        *,
        tag: str | None = None,
        feature: str | None = None,
        limit: int = 1000,
        offset: int = 0,
    ) -> list[Fact]:
        """Facts in ``scope`` ordered by (tag, feature), paged by ``limit`` / ``offset``."""
        _check_non_negative(limit=limit, offset=offset)
        statement = (
            select(ProfileFactRow)
            .where(*_scope_filter(scope), *_tag_feature_filter(tag, feature))
            .order_by(ProfileFactRow.tag, ProfileFactRow.feature, ProfileFactRow.id)
            .limit(limit)
            .offset(offset)
        )
        return [_to_fact(row) for row in await self._select(statement, "list facts")]

    async def search_facts(
        self, scope: Scope, query: str, embedding: Sequence[float] | None, k: int
    ) -> list[tuple[Fact, float]]:
        """Up to ``k`` facts in ``scope`` ranked against ``query`` / ``embedding``, best first.

        Lexical: BM25 (k1 = 1.2, b = 0.75) of the query terms over each fact's tag, feature
        and value tokens, with document frequencies taken over the same in-scope facts.
        Semantic: cosine similarity of the query embedding and the fact's embedding (facts
        without one, or of another dimension, are skipped). Only facts with a positive score
        in a signal enter that signal's ranking; the rankings are fused by reciprocal-rank
        fusion, so every fact returned has a score in ``(0, 1]``.
        """
        _check_non_negative(k=k)
        terms = query_terms(query)
        query_vector = unit_vector(embedding)
        if k == 0 or (not terms and query_vector is None):
            return []
        reader = self._sessions(write=False)
        with _translate("search facts"):
            async with reader() as session, session.begin():
                if self.kind == "postgresql":
                    rankings = await _postgres_rankings(
                        session, scope, terms, query_vector, pgvector=self._pgvector
                    )
                else:
                    rankings = await _local_rankings(session, scope, terms, query_vector)
                # Only signals that found something count, so a fact first in each scores 1.
                fused = reciprocal_rank_fusion({name: ids for name, ids in rankings.items() if ids})
                best = fused[:k]
                found = await session.scalars(
                    select(ProfileFactRow).where(
                        ProfileFactRow.id.in_([item.key for item in best]), *_scope_filter(scope)
                    )
                )
                rows = {row.id: row for row in found}
        return [(_to_fact(rows[item.key]), item.score) for item in best if item.key in rows]

    # ------------------------------------------------------------------ inspection

    async def list_users(
        self,
        project: ProjectScope,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[UserActivity]:
        """Users with current facts or closed versions, by user id: one grouped query per
        table (each at most ``limit`` users), merged. On PostgreSQL ids are compared in the
        ``C`` collation, so the order is code-point order as on every other store."""
        if limit < 1:
            return []
        current = self._user_query(ProfileFactRow, ProfileFactRow.updated_at, project)
        closed = self._user_query(ProfileFactHistoryRow, ProfileFactHistoryRow.recorded_at, project)
        users: dict[str, UserActivity] = {}
        reader = self._sessions(write=False)
        with _translate("list users"):
            async with reader() as session, session.begin():
                for table, (query, user_id) in (("facts", current), ("history", closed)):
                    if prefix:
                        query = query.where(func.substr(user_id, 1, len(prefix)) == prefix)
                    if after is not None:
                        query = query.where(user_id > after)
                    for name, count, latest in await session.execute(
                        query.order_by(user_id).limit(limit)
                    ):
                        user = users.setdefault(name, UserActivity(user_id=name))
                        if table == "facts":
                            user.facts = int(count)
                        latest = latest if latest is None else as_utc(latest)
                        if latest is not None and (
                            user.last_active is None or latest > user.last_active
                        ):
                            user.last_active = latest
        return [users[name] for name in sorted(users)][:limit]

    async def list_projects(
        self, *, after: ProjectScope | None = None, limit: int = 100
    ) -> list[ProjectScope]:
        """The distinct projects of the fact and history tables, paged in Python (the
        dialects order ids differently; a deployment holds few projects)."""
        if limit < 1:
            return []
        found: list[tuple[str, str, str]] = []
        with _translate("list projects"):
            async with self._sessions(write=False)() as session, session.begin():
                for table in (ProfileFactRow, ProfileFactHistoryRow):
                    query = select(table.tenant, table.org_id, table.project_id).distinct()
                    found += [(t, o, p) for t, o, p in await session.execute(query)]
        return page_of_projects(found, after, limit)

    def _user_query(
        self,
        table: type[ProfileFactRow] | type[ProfileFactHistoryRow],
        changed: Any,
        project: ProjectScope,
    ) -> tuple[Select[Any], ColumnElement[str]]:
        """Per user of ``project`` in ``table``: (user id, rows, newest ``changed``), and
        the user-id expression to filter and order by."""
        user_id: ColumnElement[str] = (
            table.user_id.collate("C") if self.kind == "postgresql" else table.user_id.expression
        )
        query = (
            select(table.user_id, func.count(), func.max(changed))
            .where(
                table.tenant == project.tenant,
                table.org_id == project.org_id,
                table.project_id == project.project_id,
            )
            .group_by(table.user_id)
        )
        return query, user_id

    # ------------------------------------------------------------------ internals

    def _sessions(self, *, write: bool) -> SessionFactory:
        return self._database.sessions(write=write)

    async def _select(self, statement: Select[ProfileFactRow], action: str) -> list[ProfileFactRow]:
        reader = self._sessions(write=False)
        with _translate(action):
            async with reader() as session, session.begin():
                return list((await session.scalars(statement)).all())

    async def _delete(self, statement: Delete, action: str, *also: Delete) -> int:
        """Run ``statement`` (whose row count is returned) and ``also`` in one transaction."""
        writer = self._sessions(write=True)
        with _translate(action):
            async with writer() as session, session.begin():
                result = cast(CursorResult[Any], await session.execute(statement))
                for extra in also:
                    await session.execute(extra)
                deleted = int(result.rowcount)
            if deleted and self.kind == "sqlite":
                await self._checkpoint()
            return deleted

    async def _checkpoint(self) -> None:
        """SQLite: the write-ahead log still holds pages as they were before a delete; copy
        it into the (securely deleted) file and empty it, outside any transaction. A busy
        reader only postpones this to the next delete."""
        engine = self._database.engine
        if engine is None:
            return
        async with engine.connect() as connection:
            raw = await connection.get_raw_connection()
            driver: Any = raw.driver_connection
            await driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")


# ---------------------------------------------------------------------- configuration


def _migrate(connection: Connection) -> bool:
    """The schema at head, then pgvector when the server offers it; whether it is on."""
    upgrade_schema(connection)
    return enable_pgvector(connection)


# ---------------------------------------------------------------------- errors


def _store_error(action: str, exc: SQLAlchemyError) -> StoreError:
    unavailable = isinstance(exc, DisconnectionError | InterfaceError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )
    error_type = StoreUnavailableError if unavailable else StoreError
    return error_type(f"profile store could not {action}: {describe_sql_error(exc)}", store=_STORE)


@contextmanager
def _translate(action: str) -> Iterator[None]:
    """Turn SQLAlchemy exceptions into :class:`StoreError`; let ours through."""
    try:
        yield
    except MemMachineError:
        raise
    except SQLAlchemyError as exc:
        raise _store_error(action, exc) from exc


# ---------------------------------------------------------------------- validation


@dataclass(frozen=True)
class _Prepared:
    record: FactRecord
    embedding: bytes | None
    search_terms: str


def _prepare(index: int, record: FactRecord) -> _Prepared:
    """Check the parts the database would reject mid-batch, and encode the embedding."""
    try:
        dump_json(record.metadata)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(
            f"metadata of fact {index} is not JSON: {exc}", field=f"records[{index}].metadata"
        ) from exc
    terms = " ".join(document_terms(f"{record.tag} {record.feature} {record.value}"))
    if record.embedding is None:
        return _Prepared(record, None, terms)
    vector = np.asarray(record.embedding, dtype="<f4")
    if vector.ndim != 1 or vector.size == 0 or not bool(np.isfinite(vector).all()):
        raise InvalidInputError(
            f"embedding of fact {index} must be a non-empty list of finite floats",
            field=f"records[{index}].embedding",
        )
    return _Prepared(record, vector.tobytes(), terms)


#: SQLSTATEs of a transaction PostgreSQL rolled back to break a tie: serialization failure
#: and deadlock. Running it again is safe: nothing of it was kept.
_ROLLED_BACK_STATES = frozenset({"40001", "40P01"})


def _worth_retrying(exc: SQLAlchemyError) -> bool:
    """Whether an upsert that failed with ``exc`` left nothing behind and may run again: a
    uniqueness clash with a concurrent insert, or a transaction rolled back by the server."""
    if isinstance(exc, IntegrityError):
        return True
    state = getattr(getattr(exc, "orig", None), "sqlstate", None)
    return isinstance(exc, OperationalError) and state in _ROLLED_BACK_STATES


def _check_non_negative(**values: int) -> None:
    for field, value in values.items():
        if value < 0:
            raise InvalidInputError(f"{field} must be >= 0, got {value}", field=field)


# ---------------------------------------------------------------------- queries


def _user_filter(scope: Scope) -> list[ColumnElement[bool]]:
    return [
        ProfileFactRow.tenant == scope.tenant,
        ProfileFactRow.org_id == scope.org_id,
        ProfileFactRow.project_id == scope.project_id,
        ProfileFactRow.user_id == scope.user_id,
    ]


def _scope_filter(scope: Scope) -> list[ColumnElement[bool]]:
    """The user's facts, narrowed by the scope's agent, group and session when set."""
    conditions = _user_filter(scope)
    if scope.agent_id is not None:
        conditions.append(ProfileFactRow.agent_id == scope.agent_id)
    if scope.group_id is not None:
        conditions.append(ProfileFactRow.group_id == scope.group_id)
    if scope.session_id is not None:
        conditions.append(ProfileFactRow.source_session_id == scope.session_id)
    return conditions


def _history_filter(scope: Scope) -> list[ColumnElement[bool]]:
    """:func:`_scope_filter` over the history table."""
    table = ProfileFactHistoryRow
    conditions: list[ColumnElement[bool]] = [
        table.tenant == scope.tenant,
        table.org_id == scope.org_id,
        table.project_id == scope.project_id,
        table.user_id == scope.user_id,
    ]
    if scope.agent_id is not None:
        conditions.append(table.agent_id == scope.agent_id)
    if scope.group_id is not None:
        conditions.append(table.group_id == scope.group_id)
    if scope.session_id is not None:
        conditions.append(table.source_session_id == scope.session_id)
    return conditions


def _history_row(row: ProfileFactRow, reason: str, now: datetime) -> ProfileFactHistoryRow:
    """The current version of ``row`` as a closed history version ending at ``now``."""
    return ProfileFactHistoryRow(
        id=str(uuid.uuid4()),
        fact_id=row.id,
        tenant=row.tenant,
        org_id=row.org_id,
        project_id=row.project_id,
        user_id=row.user_id,
        agent_id=row.agent_id,
        group_id=row.group_id,
        tag=row.tag,
        feature=row.feature,
        value=row.value,
        confidence=row.confidence,
        source=row.source,
        source_session_id=row.source_session_id,
        source_episode_ids=list(row.source_episode_ids or []),
        valid_from=row.valid_from or row.created_at,
        valid_to=now,
        reason=reason,
        recorded_at=now,
        expires_at=expiry_of(row.meta),
    )


def _mark(row: ProfileFactRow | ProfileFactHistoryRow, gone: set[str]) -> bool:
    """Mark ``row``'s removed sources (see :func:`_marked`); whether it changed."""
    before = list(row.source_episode_ids or [])
    after = _marked(before, gone)
    if after != before:
        row.source_episode_ids = after
    return after != before


def _marked(sources: list[str], gone: set[str]) -> list[str]:
    """``sources`` with each id of ``gone`` replaced by one :data:`EXPIRED_SOURCE`."""
    kept = [source for source in sources if source not in gone]
    if len(kept) == len(sources) or EXPIRED_SOURCE in kept:
        return kept
    return [*kept, EXPIRED_SOURCE]


def _stamp(row: Any, times: FactTimes, fields: Sequence[str]) -> None:
    """Set on ``row`` each of ``fields`` that ``times`` has."""
    for name in fields:
        value = getattr(times, name)
        if value is not None:
            setattr(row, name, as_utc(value))


def _to_version(row: ProfileFactHistoryRow) -> FactVersion:
    return FactVersion(
        fact_id=row.fact_id,
        tag=row.tag,
        feature=row.feature,
        value=row.value,
        confidence=row.confidence,
        source=row.source,
        source_session_id=row.source_session_id,
        source_episode_ids=list(row.source_episode_ids or []),
        valid_from=row.valid_from,
        valid_to=row.valid_to,
        reason=row.reason,
        recorded_at=row.recorded_at,
        expires_at=row.expires_at,
    )


def _tag_feature_filter(tag: str | None, feature: str | None) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if tag is not None:
        conditions.append(ProfileFactRow.tag == tag)
    if feature is not None:
        conditions.append(ProfileFactRow.feature == feature)
    return conditions


async def _invalidate_rows(
    session: AsyncSession, scope: Scope, fact_ids: Sequence[str], reason: str
) -> int:
    """Move the facts ``fact_ids`` in ``scope`` to the history; how many there were."""
    found = await session.scalars(
        select(ProfileFactRow)
        .where(ProfileFactRow.id.in_(list(fact_ids)), *_scope_filter(scope))
        .order_by(ProfileFactRow.tag, ProfileFactRow.feature)
        .with_for_update()
    )
    now = utc_now()
    count = 0
    for row in found:
        session.add(_history_row(row, reason, now))
        await session.delete(row)
        count += 1
    await session.flush()
    return count


async def _upsert_rows(
    session: AsyncSession, scope: Scope, prepared: Sequence[_Prepared]
) -> list[ProfileFactRow]:
    """Apply every record inside the session's transaction; rows in input order.

    The current rows are read ``FOR UPDATE`` (PostgreSQL; SQLite's ``BEGIN IMMEDIATE``
    already serialises writers), so a concurrent upsert of the same (tag, feature) waits
    for this transaction and then reads the value it wrote: no value is overwritten without
    reaching the history. Rows are locked and new ones inserted in (tag, feature) order, so
    two batches wait for each other in one direction only."""
    tags = {item.record.tag for item in prepared}
    features = {item.record.feature for item in prepared}
    statement = (
        select(ProfileFactRow)
        .where(
            *_user_filter(scope),
            ProfileFactRow.tag.in_(tags),
            ProfileFactRow.feature.in_(features),
        )
        .order_by(ProfileFactRow.tag, ProfileFactRow.feature)
        .with_for_update()
    )
    existing = {(row.tag, row.feature): row for row in await session.scalars(statement)}
    now = utc_now()
    created: set[str] = set()
    rows: dict[int, ProfileFactRow] = {}
    # A stable sort: records of one (tag, feature) keep their order, so the last one wins.
    order = sorted(
        range(len(prepared)),
        key=lambda index: (prepared[index].record.tag, prepared[index].record.feature),
    )
    for index in order:
        item = prepared[index]
        record = item.record
        row = existing.get((record.tag, record.feature))
        if row is None:
            row = ProfileFactRow(
                id=str(uuid.uuid4()),
                tenant=scope.tenant,
                org_id=scope.org_id,
                project_id=scope.project_id,
                user_id=scope.user_id,
                agent_id=scope.agent_id,
                group_id=scope.group_id,
                tag=record.tag,
                feature=record.feature,
                created_at=now,
                updated_at=now,
                valid_from=now,
            )
            session.add(row)
            existing[(record.tag, record.feature)] = row
            created.add(row.id)
        elif row.id not in created:
            # Strictly later than before even when the clock has not ticked.
            row.updated_at = max(now, row.updated_at + timedelta(microseconds=1))
            if row.value != record.value:
                # A new value supersedes the old one: keep the old version readable.
                session.add(_history_row(row, "superseded", row.updated_at))
                row.valid_from = row.updated_at
        if row.value == record.value:
            # Corroboration: the episodes of every confirmation are kept.
            known = list(row.source_episode_ids or [])
            row.source_episode_ids = known + [
                e for e in record.source_episode_ids if e not in known
            ]
        else:
            row.source_episode_ids = list(record.source_episode_ids)
        row.valid_to = None
        row.value = record.value
        row.confidence = record.confidence
        row.source = record.source
        row.source_session_id = record.source_session_id
        row.meta = dict(record.metadata)
        row.embedding = item.embedding
        row.search_terms = item.search_terms
        rows[index] = row
    await session.flush()
    return [rows[index] for index in range(len(prepared))]


def _to_fact(row: ProfileFactRow) -> Fact:
    return Fact(
        id=row.id,
        scope=Scope(
            tenant=row.tenant,
            org_id=row.org_id,
            project_id=row.project_id,
            user_id=row.user_id,
            agent_id=row.agent_id,
            group_id=row.group_id,
        ),
        tag=row.tag,
        feature=row.feature,
        value=row.value,
        confidence=row.confidence,
        source=row.source,
        source_session_id=row.source_session_id,
        source_episode_ids=list(row.source_episode_ids or []),
        metadata=dict(row.meta or {}),
        created_at=row.created_at,
        updated_at=row.updated_at,
        valid_from=row.valid_from or row.created_at,
        valid_to=row.valid_to,
    )


# ---------------------------------------------------------------------- ranking


async def _local_rankings(
    session: AsyncSession, scope: Scope, terms: Sequence[str], query_vector: FloatArray | None
) -> dict[str, list[str]]:
    """Both rankings computed in Python over every in-scope fact (SQLite)."""
    statement = (
        select(ProfileFactRow.id, ProfileFactRow.search_terms, ProfileFactRow.embedding)
        .where(*_scope_filter(scope))
        .order_by(ProfileFactRow.tag, ProfileFactRow.feature)
    )
    facts = (await session.execute(statement)).all()
    return python_rankings(
        terms, query_vector, [(row.id, row.search_terms, row.embedding) for row in facts]
    )


# PostgreSQL-only columns, not mapped by the ORM (see sql_models).
_SEARCH_VECTOR: ColumnClause[Any] = column("search_vector")
_EMBEDDING_VEC: ColumnClause[Any] = column("embedding_vec")


def _tsquery(terms: Sequence[str]) -> str:
    """``'a' | 'b'``: the terms as quoted tsquery lexemes, taken verbatim (no parser)."""
    quoted = ("'" + term.replace("\\", "\\\\").replace("'", "''") + "'" for term in terms)
    return " | ".join(quoted)


async def _postgres_rankings(
    session: AsyncSession,
    scope: Scope,
    terms: Sequence[str],
    query_vector: FloatArray | None,
    *,
    pgvector: bool,
) -> dict[str, list[str]]:
    """Lexical candidates from the ``tsvector`` index with statistics from SQL; semantic
    ranking by pgvector in SQL, or by numpy over the embeddings of the query's size."""
    in_scope = _scope_filter(scope)
    rankings: dict[str, list[str]] = {}
    if terms:
        # One scan for the collection statistics: count, mean length, document frequencies.
        frequencies = [
            func.count().filter(_SEARCH_VECTOR.op("@@")(sql_cast(_tsquery([term]), TSQUERY)))
            for term in terms
        ]
        mean_length = func.avg(
            func.cardinality(func.string_to_array(ProfileFactRow.search_terms, " "))
        )
        stats = (
            await session.execute(
                select(func.count(), func.coalesce(mean_length, 0), *frequencies).where(*in_scope)
            )
        ).one()
        candidates = await session.execute(
            select(ProfileFactRow.id, ProfileFactRow.search_terms)
            .where(*in_scope, _SEARCH_VECTOR.op("@@")(sql_cast(_tsquery(terms), TSQUERY)))
            .order_by(ProfileFactRow.tag, ProfileFactRow.feature)
        )
        collection = Collection(
            count=int(stats[0]),
            average_length=float(stats[1]),
            document_frequency={term: int(n) for term, n in zip(terms, stats[2:], strict=True)},
        )
        rankings["lexical"] = bm25_ranking(
            terms, [(row.id, row.search_terms) for row in candidates.all()], collection
        )
    if query_vector is not None:
        if pgvector:
            rankings["semantic"] = await _pgvector_ranking(session, in_scope, query_vector)
        else:
            embeddings = await session.execute(
                select(ProfileFactRow.id, ProfileFactRow.embedding)
                .where(
                    *in_scope,
                    ProfileFactRow.embedding.is_not(None),
                    func.length(ProfileFactRow.embedding) == query_vector.size * 4,
                )
                .order_by(ProfileFactRow.tag, ProfileFactRow.feature)
            )
            rankings["semantic"] = cosine_ranking(
                query_vector, [(row.id, row.embedding) for row in embeddings.all()]
            )
    return rankings


async def _pgvector_ranking(
    session: AsyncSession, in_scope: Sequence[ColumnElement[bool]], query_vector: FloatArray
) -> list[str]:
    """Facts by cosine similarity computed by pgvector; only vectors of the query's size are
    compared (the ``CASE`` keeps ``<=>`` away from other sizes), zero vectors (NaN) dropped."""
    query = text("CAST(:query_vector AS vector)").bindparams(
        bindparam("query_vector", [float(x) for x in query_vector], type_=ARRAY(Float))
    )
    similarity = case(
        (
            func.vector_dims(_EMBEDDING_VEC) == query_vector.size,
            1.0 - _EMBEDDING_VEC.op("<=>", return_type=Float)(query),
        ),
        else_=None,
    ).label("similarity")
    scored = (
        select(ProfileFactRow.id, ProfileFactRow.tag, ProfileFactRow.feature, similarity)
        .where(*in_scope, _EMBEDDING_VEC.is_not(None))
        .subquery()
    )
    result = await session.execute(
        select(scored.c.id)
        .where(scored.c.similarity > 0, scored.c.similarity != literal_column("'NaN'::float8"))
        .order_by(scored.c.similarity.desc(), scored.c.tag, scored.c.feature)
    )
    return [str(fact_id) for fact_id in result.scalars()]


def _mentions_any(column: Any, episode_ids: set[str]) -> ColumnElement[bool]:
    """Rows whose JSON list ``column`` may hold one of ``episode_ids``: a text match on the
    serialised list, so callers check the decoded list. A non-ASCII id (which JSON may
    store escaped) matches every row."""
    if not all(episode_id.isascii() for episode_id in episode_ids):
        return true()
    text_of = sql_cast(column, String)
    return or_(
        *(
            text_of.like("%" + _like_escape(episode_id) + "%", escape="\\")
            for episode_id in sorted(episode_ids)
        )
    )


def _like_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def _restore_previous(session: AsyncSession, scope: Scope, row: ProfileFactRow) -> bool:
    """Make ``row`` its newest closed version that still has source episodes again (that
    version leaves the history); whether there was one."""
    statement = (
        select(ProfileFactHistoryRow)
        .where(*_history_filter(scope), ProfileFactHistoryRow.fact_id == row.id)
        .order_by(ProfileFactHistoryRow.valid_to.desc(), ProfileFactHistoryRow.recorded_at.desc())
    )
    for version in await session.scalars(statement):
        if not version.source_episode_ids:
            continue
        row.value = version.value
        row.confidence = version.confidence
        row.source = version.source
        row.source_session_id = version.source_session_id
        row.source_episode_ids = list(version.source_episode_ids)
        row.valid_from = version.valid_from
        row.valid_to = None
        row.updated_at = max(utc_now(), row.updated_at + timedelta(microseconds=1))
        row.search_terms = " ".join(document_terms(f"{row.tag} {row.feature} {row.value}"))
        row.embedding = None  # the old value's embedding is not kept; re-embedded by callers
        await session.delete(version)
        return True
    return False
