"""pgvector on PostgreSQL: detect it, enable it, mirror ``embedding`` into ``embedding_vec``.

Used by revision ``0003`` and by the store at start (a server that gained the extension after
the database reached head gets the column then). Everything is idempotent and never fails
the caller for want of pgvector: without it (or without the right to create it) the store
keeps ranking embeddings in Python.

``embedding_vec`` is ``vector`` without a dimension: the embedding model, and with it the
dimension, may change while old facts keep their vectors, so one column holds any size and
queries compare only vectors of the query's size. A dimension-less column cannot carry an
HNSW/IVFFlat index; search is an exact scan of one user's facts, which the scope index
already narrows to hundreds of rows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, REAL
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

__all__ = [
    "VECTOR_COLUMN",
    "enable_pgvector",
    "has_vector_column",
    "set_vectors",
    "vector_literal",
]

_log = logging.getLogger(__name__)

VECTOR_COLUMN = "embedding_vec"
_BACKFILL_BATCH = 500

#: ``CAST(:vector AS real[])::vector``: a float list bound as ``real[]`` (NULL stays NULL).
_VECTOR_PARAM = bindparam("vector", type_=ARRAY(REAL))


def vector_literal(raw: bytes | None) -> list[float] | None:
    """The ``embedding`` bytes (little-endian float32) as the list bound for a vector."""
    if raw is None or len(raw) == 0 or len(raw) % 4:
        return None
    return [float(x) for x in np.frombuffer(raw, dtype="<f4")]


def has_vector_column(connection: Connection) -> bool:
    """Whether ``profile_facts.embedding_vec`` exists (pgvector set up)."""
    if connection.dialect.name != "postgresql":
        return False
    found = connection.execute(
        text(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = 'profile_facts' AND column_name = :column"
        ),
        {"column": VECTOR_COLUMN},
    ).first()
    return found is not None


def _extension_state(connection: Connection) -> tuple[bool, bool]:
    """(available on the server, installed in this database)."""
    row = connection.execute(
        text(
            "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector'), "
            "EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')"
        )
    ).one()
    return bool(row[0]), bool(row[1])


def enable_pgvector(connection: Connection) -> bool:
    """Create the extension and ``embedding_vec`` (backfilled) when the server offers
    pgvector; whether the column exists afterwards. Runs in the caller's transaction."""
    if connection.dialect.name != "postgresql":
        return False
    if has_vector_column(connection):
        return True
    available, installed = _extension_state(connection)
    if not available:
        return False
    if not installed:
        try:
            with connection.begin_nested():
                connection.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        except DBAPIError as exc:  # e.g. not a superuser: pgvector is not a trusted extension
            _log.warning(
                "pgvector is available but cannot be enabled, using the fallback: %s", exc.orig
            )
            return False
    connection.execute(text("ALTER TABLE profile_facts ADD COLUMN embedding_vec vector"))
    _backfill(connection)
    return True


def set_vectors(connection: Connection, rows: Sequence[tuple[str, bytes | None]]) -> None:
    """Write ``embedding_vec`` of the facts ``(id, embedding bytes)`` (``None`` clears it)."""
    if not rows:
        return
    statement = text(
        "UPDATE profile_facts SET embedding_vec = CAST(:vector AS vector) WHERE id = :id"
    ).bindparams(_VECTOR_PARAM)
    connection.execute(
        statement, [{"id": fact_id, "vector": vector_literal(raw)} for fact_id, raw in rows]
    )


def _backfill(connection: Connection) -> None:
    last = ""
    while True:
        batch = connection.execute(
            text(
                "SELECT id, embedding FROM profile_facts "
                "WHERE embedding IS NOT NULL AND id > :last ORDER BY id LIMIT :limit"
            ),
            {"last": last, "limit": _BACKFILL_BATCH},
        ).all()
        if not batch:
            return
        set_vectors(connection, [(str(row[0]), bytes(row[1])) for row in batch])
        last = str(batch[-1][0])
