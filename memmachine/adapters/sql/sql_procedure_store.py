"""Procedural memory on SQL through SQLAlchemy 2 async, in the profile store's database.

The ``procedures``, ``procedure_history`` and ``session_outcomes`` tables
(:mod:`~memmachine.adapters.sql.sql_models`) are made by the same Alembic migrations as the
profile tables; ``start()`` opens the database and runs them through the same
:class:`~memmachine.adapters.sql.sql_engine.SqlDatabase` (PostgreSQL under the migration
advisory lock, SQLite under the sibling file lock and ``BEGIN IMMEDIATE``), so any of the SQL
stores may be the first to open a fresh database.

Search ranks in Python on both dialects, as the profile store does on SQLite: BM25 over the
stored analysed terms and cosine similarity over the stored float32 embeddings of the
scope's procedures, fused by reciprocal rank. An application holds playbooks, not
conversations: hundreds, not millions, so one scan of the scope is cheap.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
from sqlalchemy import ColumnElement, delete, or_, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from memmachine.adapters.sql.sql_engine import SessionFactory, describe_sql_error, dump_json
from memmachine.adapters.sql.sql_migrated_store import SqlMigratedStore
from memmachine.adapters.sql.sql_models import (
    ProcedureHistoryRow,
    ProcedureRow,
    SessionOutcomeRow,
)
from memmachine.adapters.sql.sql_ranking import python_rankings, unit_vector
from memmachine.errors import InvalidInputError, MemMachineError, NotFoundError, StoreError
from memmachine.indexing.fusion import reciprocal_rank_fusion
from memmachine.indexing.terms import document_terms, query_terms
from memmachine.models import Scope, utc_now
from memmachine.ports.procedures import (
    AppScope,
    Outcome,
    Procedure,
    ProcedureRecord,
    ProcedureSource,
    ProcedureVersion,
    SessionOutcome,
    goal_key,
)

__all__ = ["SqlProcedureStore"]

_STORE = "procedures"


class SqlProcedureStore(SqlMigratedStore):
    """:class:`~memmachine.ports.procedures.ProcedureStore` on SQLite or PostgreSQL.

    ``url`` is the profile store's SQLAlchemy URL (the same normalisation applies)."""

    def __init__(self, url: str, *, timeout_seconds: float | None = None) -> None:
        super().__init__(
            url, store=_STORE, label="procedure store", timeout_seconds=timeout_seconds
        )

    def _sessions(self, *, write: bool) -> SessionFactory:
        return self._database.sessions(write=write)

    # ------------------------------------------------------------------ writes

    async def save(
        self,
        scope: AppScope,
        record: ProcedureRecord,
        *,
        replaces: str | None = None,
        reason: str = "superseded",
    ) -> Procedure:
        """Store a new procedure, or supersede ``replaces`` keeping its history."""
        embedding, terms = _prepare(record)
        now = utc_now()
        sources = [source.model_dump() for source in _unique(record.sources)]
        with _translate("save a procedure"):
            async with self._sessions(write=True)() as session, session.begin():
                if replaces is None:
                    row = ProcedureRow(
                        id=str(uuid.uuid4()),
                        tenant=scope.tenant,
                        org_id=scope.org_id,
                        project_id=scope.project_id,
                        agent_id=scope.agent_id,
                        version=1,
                        created_at=now,
                        sources=sources,
                    )
                    session.add(row)
                else:
                    found = await _row(session, scope, replaces, lock=True)
                    if found is None:
                        raise NotFoundError(f"procedure {replaces!r} not found")
                    row = found
                    session.add(_version_of(row, reason, now))
                    old = [ProcedureSource.model_validate(item) for item in row.sources]
                    row.sources = [s.model_dump() for s in _unique([*old, *record.sources])]
                    row.version += 1
                row.goal, row.goal_key = record.goal, goal_key(record.goal)
                row.steps, row.preconditions = list(record.steps), list(record.preconditions)
                row.pitfalls, row.confidence = list(record.pitfalls), record.confidence
                row.source, row.meta = record.source, dict(record.metadata)
                row.successes = row.failures = 0
                row.embedding, row.search_terms, row.updated_at = embedding, terms, now
                await session.flush()
                return _to_procedure(row)

    async def record_use(
        self,
        scope: AppScope,
        procedure_id: str,
        *,
        success: bool,
        confidence: Callable[[float], float],
    ) -> Procedure | None:
        """Count one use and move the confidence, in one transaction."""
        with _translate("record a use"):
            async with self._sessions(write=True)() as session, session.begin():
                row = await _row(session, scope, procedure_id, lock=True)
                if row is None:
                    return None
                if success:
                    row.successes += 1
                else:
                    row.failures += 1
                row.confidence = confidence(row.confidence)
                row.updated_at = utc_now()
                await session.flush()
                return _to_procedure(row)

    async def add_sources(
        self,
        scope: AppScope,
        procedure_id: str,
        sources: Sequence[ProcedureSource],
        *,
        confidence: Callable[[float], float],
    ) -> Procedure | None:
        """Corroborate a procedure: more sources, a new confidence, no new version."""
        with _translate("corroborate a procedure"):
            async with self._sessions(write=True)() as session, session.begin():
                row = await _row(session, scope, procedure_id, lock=True)
                if row is None:
                    return None
                old = [ProcedureSource.model_validate(item) for item in row.sources]
                row.sources = [s.model_dump() for s in _unique([*old, *sources])]
                row.confidence = confidence(row.confidence)
                row.updated_at = utc_now()
                await session.flush()
                return _to_procedure(row)

    async def delete(self, scope: AppScope, procedure_id: str) -> bool:
        """Delete a procedure and its history."""
        with _translate("delete a procedure"):
            async with self._sessions(write=True)() as session, session.begin():
                row = await _row(session, scope, procedure_id, lock=True)
                if row is None:
                    return False
                await session.execute(
                    delete(ProcedureHistoryRow).where(
                        *_project(ProcedureHistoryRow, scope),
                        ProcedureHistoryRow.procedure_id == procedure_id,
                    )
                )
                await session.delete(row)
        return True

    async def detach_user(self, scope: Scope) -> int:
        """Take the user's (session's) sources out of every procedure and version of the
        project and delete the user's (session's) outcomes."""

        def keep(sources: list[dict[str, str]]) -> list[dict[str, str]]:
            return [
                item
                for item in sources
                if item.get("user_id") != scope.user_id
                or (scope.session_id is not None and item.get("session_id") != scope.session_id)
            ]

        changed = 0
        with _translate("detach a user from procedures"):
            async with self._sessions(write=True)() as session, session.begin():
                current = await session.scalars(
                    select(ProcedureRow).where(*_project(ProcedureRow, scope))
                )
                for row in current.all():
                    kept = keep(row.sources)
                    if len(kept) != len(row.sources):
                        row.sources, changed = kept, changed + 1
                versions = await session.scalars(
                    select(ProcedureHistoryRow).where(*_project(ProcedureHistoryRow, scope))
                )
                for version in versions.all():
                    version.sources = keep(version.sources)
                outcomes = [
                    *_project(SessionOutcomeRow, scope),
                    SessionOutcomeRow.user_id == scope.user_id,
                ]
                if scope.session_id is not None:
                    outcomes.append(SessionOutcomeRow.session_id == scope.session_id)
                await session.execute(delete(SessionOutcomeRow).where(*outcomes))
        return changed

    async def set_outcome(self, scope: Scope, outcome: Outcome) -> SessionOutcome:
        """Record (or replace) the outcome of ``scope``'s session."""
        if scope.session_id is None:
            raise InvalidInputError("session_id is required", field="session_id")
        key = (scope.tenant, scope.org_id, scope.project_id, scope.user_id, scope.session_id)
        now = utc_now()
        with _translate("record a session outcome"):
            async with self._sessions(write=True)() as session, session.begin():
                row = await session.get(SessionOutcomeRow, key)
                if row is None:
                    row = SessionOutcomeRow(
                        tenant=scope.tenant,
                        org_id=scope.org_id,
                        project_id=scope.project_id,
                        user_id=scope.user_id,
                        session_id=scope.session_id,
                    )
                    session.add(row)
                row.outcome, row.recorded_at = outcome, now
        return SessionOutcome(session_id=scope.session_id, outcome=outcome, recorded_at=now)

    # ------------------------------------------------------------------ reads

    async def get_outcome(self, scope: Scope) -> SessionOutcome | None:
        if scope.session_id is None:
            return None
        key = (scope.tenant, scope.org_id, scope.project_id, scope.user_id, scope.session_id)
        with _translate("read a session outcome"):
            async with self._sessions(write=False)() as session, session.begin():
                row = await session.get(SessionOutcomeRow, key)
        if row is None:
            return None
        return SessionOutcome(
            session_id=row.session_id,
            outcome="success" if row.outcome == "success" else "failure",
            recorded_at=row.recorded_at,
        )

    async def by_goal(self, scope: AppScope, goal: str) -> Procedure | None:
        agent = (
            ProcedureRow.agent_id.is_(None)
            if scope.agent_id is None
            else ProcedureRow.agent_id == scope.agent_id
        )
        statement = select(ProcedureRow).where(
            *_project(ProcedureRow, scope), agent, ProcedureRow.goal_key == goal_key(goal)
        )
        with _translate("read a procedure"):
            async with self._sessions(write=False)() as session, session.begin():
                row = (await session.scalars(statement.limit(1))).first()
        return None if row is None else _to_procedure(row)

    async def get(self, scope: AppScope, procedure_id: str) -> Procedure | None:
        with _translate("read a procedure"):
            async with self._sessions(write=False)() as session, session.begin():
                row = await _row(session, scope, procedure_id)
        return None if row is None else _to_procedure(row)

    async def list_procedures(
        self, scope: AppScope, *, limit: int = 100, offset: int = 0
    ) -> list[Procedure]:
        if limit < 1:
            return []
        statement = (
            select(ProcedureRow)
            .where(*_visible(scope))
            .order_by(ProcedureRow.updated_at.desc(), ProcedureRow.id)
            .limit(limit)
            .offset(max(offset, 0))
        )
        with _translate("list procedures"):
            async with self._sessions(write=False)() as session, session.begin():
                rows = (await session.scalars(statement)).all()
        return [_to_procedure(row) for row in rows]

    async def history(self, scope: AppScope, procedure_id: str) -> list[ProcedureVersion]:
        with _translate("read a procedure's history"):
            async with self._sessions(write=False)() as session, session.begin():
                if await _row(session, scope, procedure_id) is None:
                    return []
                rows = await session.scalars(
                    select(ProcedureHistoryRow)
                    .where(
                        *_project(ProcedureHistoryRow, scope),
                        ProcedureHistoryRow.procedure_id == procedure_id,
                    )
                    .order_by(ProcedureHistoryRow.valid_to, ProcedureHistoryRow.id)
                )
                return [_to_version(row) for row in rows.all()]

    async def search(
        self, scope: AppScope, query: str, embedding: Sequence[float] | None, k: int
    ) -> list[tuple[Procedure, float]]:
        """BM25 and cosine rankings of the scope's procedures, fused by reciprocal rank."""
        terms = query_terms(query)
        vector = unit_vector(embedding)
        if k < 1 or (not terms and vector is None):
            return []
        with _translate("search procedures"):
            async with self._sessions(write=False)() as session, session.begin():
                rows = (
                    await session.scalars(
                        select(ProcedureRow).where(*_visible(scope)).order_by(ProcedureRow.id)
                    )
                ).all()
        rankings = python_rankings(
            terms, vector, [(row.id, row.search_terms, row.embedding) for row in rows]
        )
        fused = reciprocal_rank_fusion({name: ids for name, ids in rankings.items() if ids})
        by_id = {row.id: row for row in rows}
        return [(_to_procedure(by_id[item.key]), item.score) for item in fused[:k]]


# ---------------------------------------------------------------------- helpers


def _project(
    table: type[ProcedureRow] | type[ProcedureHistoryRow] | type[SessionOutcomeRow],
    scope: AppScope | Scope,
) -> list[ColumnElement[bool]]:
    return [
        table.tenant == scope.tenant,
        table.org_id == scope.org_id,
        table.project_id == scope.project_id,
    ]


def _visible(scope: AppScope) -> list[ColumnElement[bool]]:
    """The project's procedures; with an agent, that agent's and the shared ones."""
    conditions = _project(ProcedureRow, scope)
    if scope.agent_id is not None:
        conditions.append(
            or_(ProcedureRow.agent_id.is_(None), ProcedureRow.agent_id == scope.agent_id)
        )
    return conditions


async def _row(
    session: AsyncSession, scope: AppScope, procedure_id: str, *, lock: bool = False
) -> ProcedureRow | None:
    statement = select(ProcedureRow).where(ProcedureRow.id == procedure_id, *_visible(scope))
    if lock:
        statement = statement.with_for_update()
    return (await session.scalars(statement)).first()


def _unique(sources: Sequence[ProcedureSource]) -> list[ProcedureSource]:
    seen: dict[tuple[str, str], ProcedureSource] = {}
    for source in sources:
        seen.setdefault((source.user_id, source.session_id), source)
    return list(seen.values())


def _prepare(record: ProcedureRecord) -> tuple[bytes | None, str]:
    """The embedding as float32 bytes and the analysed terms; bad input is a 4xx."""
    try:
        dump_json(record.metadata)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"metadata is not JSON: {exc}", field="metadata") from exc
    words = " ".join([record.goal, *record.steps, *record.preconditions, *record.pitfalls])
    terms = " ".join(document_terms(words))
    if record.embedding is None:
        return None, terms
    vector = np.asarray(record.embedding, dtype="<f4")
    if vector.ndim != 1 or vector.size == 0 or not bool(np.isfinite(vector).all()):
        raise InvalidInputError(
            "embedding must be a non-empty list of finite floats", field="embedding"
        )
    return vector.tobytes(), terms


def _version_of(row: ProcedureRow, reason: str, now: object) -> ProcedureHistoryRow:
    return ProcedureHistoryRow(
        id=str(uuid.uuid4()),
        procedure_id=row.id,
        tenant=row.tenant,
        org_id=row.org_id,
        project_id=row.project_id,
        goal=row.goal,
        steps=list(row.steps),
        preconditions=list(row.preconditions),
        pitfalls=list(row.pitfalls),
        confidence=row.confidence,
        source=row.source,
        sources=list(row.sources),
        successes=row.successes,
        failures=row.failures,
        reason=reason,
        valid_from=row.updated_at,
        valid_to=now,
    )


def _to_procedure(row: ProcedureRow) -> Procedure:
    return Procedure(
        id=row.id,
        tenant=row.tenant,
        org_id=row.org_id,
        project_id=row.project_id,
        agent_id=row.agent_id,
        goal=row.goal,
        steps=list(row.steps),
        preconditions=list(row.preconditions),
        pitfalls=list(row.pitfalls),
        confidence=row.confidence,
        source=row.source,
        sources=[ProcedureSource.model_validate(item) for item in row.sources],
        successes=row.successes,
        failures=row.failures,
        version=row.version,
        metadata=dict(row.meta),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _to_version(row: ProcedureHistoryRow) -> ProcedureVersion:
    return ProcedureVersion(
        procedure_id=row.procedure_id,
        goal=row.goal,
        steps=list(row.steps),
        preconditions=list(row.preconditions),
        pitfalls=list(row.pitfalls),
        confidence=row.confidence,
        source=row.source,
        sources=[ProcedureSource.model_validate(item) for item in row.sources],
        successes=row.successes,
        failures=row.failures,
        reason=row.reason,
        valid_from=row.valid_from,
        valid_to=row.valid_to,
    )


@contextmanager
def _translate(action: str) -> Iterator[None]:
    """Turn SQLAlchemy exceptions into :class:`StoreError`; let ours through."""
    try:
        yield
    except MemMachineError:
        raise
    except SQLAlchemyError as exc:
        raise StoreError(
            f"procedure store could not {action}: {describe_sql_error(exc)}", store=_STORE
        ) from exc
