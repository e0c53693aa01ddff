"""Compaction of an SQL database after a forget.

* SQLite (deleted rows are zeroed by ``secure_delete``): ``PRAGMA wal_checkpoint(TRUNCATE)``
  folds the write-ahead log, which still holds the pages as they were, into the file and
  empties it.
* PostgreSQL: a deleted row stays in its table's heap file (a dead tuple), in its indexes
  and in TOAST until the table is rewritten. ``VACUUM FULL`` of the tables that held the
  user's rows rewrites each into a new file (indexes and TOAST included) and removes the old
  one, so the bytes leave the table files; it holds an exclusive lock on each table while
  it runs (reads and writes of that table wait). Then ``pg_switch_wal()`` and
  ``CHECKPOINT`` (superuser, or the grants of ``pg_switch_wal`` and ``pg_checkpoint``;
  skipped with a log line otherwise), after which PostgreSQL removes or recycles the WAL
  segments that held the rows' inserts. What that does not reach is said in RELIABILITY.md
  ("Forget means forgotten"): WAL segments are recycled, not erased, unless
  ``wal_recycle = off``; archives and replicas keep their own copies.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from memmachine.adapters.sql.sql_engine import SqlDatabase, describe_sql_error
from memmachine.errors import StoreError

__all__ = ["SqlCompactor"]

log = logging.getLogger(__name__)

_TABLE = re.compile(r"[a-z_]{1,63}")


class SqlCompactor:
    """Compacts ``tables`` of ``database`` (see the module docstring)."""

    def __init__(self, database: SqlDatabase, tables: Sequence[str], *, name: str) -> None:
        for table in tables:
            if not _TABLE.fullmatch(table):
                raise ValueError(f"not a table name: {table!r}")
        self._database, self._tables = database, list(tables)
        self.name = name
        self.where = f"{database.url.render_as_string(hide_password=True)}#{','.join(tables)}"

    async def compact(self) -> None:
        engine = self._database.engine
        if engine is None:
            return
        try:
            async with engine.connect() as connection:
                if self._database.kind == "sqlite":
                    raw = await connection.get_raw_connection()
                    driver: Any = raw.driver_connection
                    await driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    return
                autocommit = await connection.execution_options(isolation_level="AUTOCOMMIT")
                for table in self._tables:
                    await autocommit.execute(text(f"VACUUM FULL {table}"))
                # A new WAL segment, then a checkpoint: the segments holding the deleted
                # rows' inserts are then before the redo point, so PostgreSQL drops them.
                for statement in ("SELECT pg_switch_wal()", "CHECKPOINT"):
                    try:
                        await autocommit.execute(text(statement))
                    except SQLAlchemyError as exc:
                        log.warning(
                            "%s: %s after a forget was refused (%s); the WAL keeps the "
                            "deleted rows until PostgreSQL recycles its segments",
                            self.name,
                            statement,
                            describe_sql_error(exc),
                        )
        except SQLAlchemyError as exc:
            raise StoreError(
                f"{self.name} could not compact after a forget: {describe_sql_error(exc)}",
                store=self.name,
            ) from exc
