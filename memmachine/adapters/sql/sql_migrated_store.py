"""What every store on the profile database shares besides its tables: one engine on the
profile store's URL, the schema migrated to the newest revision at start, and a health
probe."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from memmachine.adapters.health import health_of
from memmachine.adapters.sql.migrations import upgrade_schema
from memmachine.adapters.sql.sql_engine import SqlDatabase, describe_sql_error
from memmachine.errors import MemMachineError, StoreError
from memmachine.models import StoreHealth
from memmachine.ports import Lifecycle

__all__ = ["SqlMigratedStore", "translated"]

_HEALTH_TIMEOUT_SECONDS = 5.0


class SqlMigratedStore(Lifecycle):
    """A store on SQLite or PostgreSQL named ``store`` (``label`` in messages). ``url`` is
    the profile store's SQLAlchemy URL (a bare ``sqlite://`` / ``postgresql://`` gets its
    async driver, in-memory SQLite is refused)."""

    name: str

    def __init__(
        self, url: str, *, store: str, label: str, timeout_seconds: float | None = None
    ) -> None:
        self.name = store
        self._database = SqlDatabase(url, store=store, label=label, timeout_seconds=timeout_seconds)
        self.kind: str = self._database.kind

    async def start(self) -> None:
        """Open the engine and migrate the database to the newest revision. Idempotent."""
        if self._database.engine is not None:
            return
        await self._database.start(upgrade_schema)

    async def close(self) -> None:
        """Dispose of the engine. Safe to call twice."""
        await self._database.close()

    async def health(self) -> StoreHealth:
        """Round-trip ``SELECT 1``. Never raises."""
        engine = self._database.engine
        if engine is None:
            return health_of(self, "down", detail="not started")
        started = time.perf_counter()
        try:
            async with asyncio.timeout(_HEALTH_TIMEOUT_SECONDS), engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception as exc:
            return health_of(self, "down", detail=describe_sql_error(exc))
        latency = (time.perf_counter() - started) * 1000
        return health_of(self, "ok", detail=engine.dialect.name, latency_ms=latency)


@contextmanager
def translated(label: str, store: str, action: str) -> Iterator[None]:
    """SQLAlchemy errors become a :class:`StoreError` naming ``store`` ("<label> could not
    <action>: ..."); ours and integrity errors (which callers turn into conflicts) pass."""
    try:
        yield
    except (MemMachineError, IntegrityError):
        raise
    except SQLAlchemyError as exc:
        raise StoreError(
            f"{label} could not {action}: {describe_sql_error(exc)}", store=store
        ) from exc
