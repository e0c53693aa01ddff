"""The SQL database that memmachine's SQL stores share, opened the same way by each of them.

The profile store (:class:`~memmachine.adapters.sql.sql_profile_store.SqlProfileStore`) and the
key store (:class:`~memmachine.adapters.sql.sql_key_store.SqlKeyStore`) live in one database made
by the same Alembic migrations, and either may be the first to open a fresh one.
:class:`SqlDatabase` is what they share:

* the URL: ``sqlite:///path`` and ``postgresql://...`` without a driver get the async one
  (aiosqlite, psycopg); in-memory SQLite is refused, because each pooled connection would
  see its own empty database; any other backend is a ``ConfigurationError``;
* the engine: on SQLite the parent directory of the file is created and every connection
  runs in WAL mode with a busy timeout, foreign keys on and ``synchronous=NORMAL``; the
  writers' engine starts its transactions with ``BEGIN IMMEDIATE`` so concurrent writers
  queue instead of failing on lock upgrade. PostgreSQL connections are pinged before use;
* the start (:meth:`SqlDatabase.start`): the migration step runs in one writer transaction,
  on PostgreSQL under the migration advisory lock, on SQLite under a file lock beside the
  database (:meth:`SqlDatabase.start_lock`), so concurrent starts in threads or processes
  wait and then find the schema at head;
* the sessions: one factory for reads, one for writes (``BEGIN IMMEDIATE`` on SQLite), until
  :meth:`SqlDatabase.close` disposes of the engine. On PostgreSQL with ``timeout_seconds``,
  a session (its connection, statements and commit) is bounded: a frozen server answers
  nothing and psycopg waits forever, so the session is cancelled after that long and its
  connection closed (psycopg first tries, for up to 10 s, to cancel the query on the
  server), and the store's caller gets ``WriteOutcomeUnknownError`` for a write session
  (its commit may have reached the server) or ``StoreUnavailableError`` for a read. New
  connections give up after the same time (``connect_timeout``).

JSON columns are written by :func:`dump_json`; :func:`describe_sql_error` is the one-line
driver error the stores put in their messages.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from alembic.util.exc import CommandError as AlembicError
from sqlalchemy import event, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from memmachine.adapters.sql.migrations import ADVISORY_LOCK_KEY
from memmachine.errors import (
    ConfigurationError,
    StoreError,
    StoreUnavailableError,
    WriteOutcomeUnknownError,
)

__all__ = ["SessionFactory", "SqlDatabase", "describe_sql_error", "dump_json"]

#: What :meth:`SqlDatabase.sessions` hands out: ``async with factory() as session``.
SessionFactory = Callable[[], AbstractAsyncContextManager[AsyncSession]]

T = TypeVar("T")

_SQLITE_BUSY_TIMEOUT_MS = 10_000
_SQLITE_BEGIN_OPTION = "memmachine_sqlite_begin"
#: The ``store`` of the errors raised while the engine is made (the URL is the profile's).
_URL_STORE = "profile"


class SqlDatabase:
    """One SQL database as a memmachine SQL store opens it (see the module docstring).

    ``url`` is an SQLAlchemy URL, checked and normalised here (``ConfigurationError`` when it
    cannot be used); ``kind`` is ``"sqlite"`` or ``"postgresql"``. ``label`` (``"profile
    store"``) starts the messages of the errors :meth:`start` and :meth:`sessions` raise,
    whose ``store`` is ``store``; the URL and engine errors name the profile store, whose
    setting the URL is, for every store. Nothing is opened until :meth:`start`.
    """

    def __init__(
        self,
        url: str,
        *,
        store: str,
        label: str,
        echo: bool = False,
        timeout_seconds: float | None = None,
    ) -> None:
        self.url = _normalise_url(url)
        self.kind: str = self.url.get_backend_name()
        self._store = store
        self._label = label
        self._echo = echo
        #: The bound of a session on PostgreSQL (``None``: unbounded; SQLite never is).
        self._timeout = timeout_seconds if self.kind == "postgresql" else None
        #: The open engine, ``None`` before :meth:`start` and after :meth:`close`.
        self.engine: AsyncEngine | None = None
        self._reader: async_sessionmaker[AsyncSession] | None = None
        self._writer: async_sessionmaker[AsyncSession] | None = None

    async def start(self, migrate: Callable[[Connection], T]) -> T:
        """Make the engine and run ``migrate`` in one writer transaction, under the start
        lock and (PostgreSQL) the migration advisory lock; return what ``migrate`` returned.
        When that fails the engine is disposed and ``StoreUnavailableError`` says ``"<label>
        cannot start: ..."``. Callers start a database once (while :attr:`engine` is
        ``None``)."""
        engine = self.create_engine()
        writer_engine = self.writer_engine(engine)
        try:
            async with self.start_lock(), writer_engine.begin() as conn:
                if self.kind == "postgresql":
                    await conn.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY}
                    )
                migrated = await conn.run_sync(migrate)
        except (SQLAlchemyError, AlembicError) as exc:
            await engine.dispose()
            raise StoreUnavailableError(
                f"{self._label} cannot start: {describe_sql_error(exc)}", store=self._store
            ) from exc
        self.engine = engine
        self._reader = async_sessionmaker(engine, expire_on_commit=False)
        self._writer = async_sessionmaker(writer_engine, expire_on_commit=False)
        return migrated

    async def close(self) -> None:
        """Dispose of the engine and its pool. Safe to call twice."""
        engine, self.engine = self.engine, None
        self._reader = self._writer = None
        if engine is not None:
            await engine.dispose()

    def sessions(self, *, write: bool) -> SessionFactory:
        """The session factory for writes (``BEGIN IMMEDIATE`` on SQLite) or for reads,
        bounded on PostgreSQL (see the module docstring); ``StoreError`` (``"<label> is not
        started"``) before :meth:`start`."""
        sessions = self._writer if write else self._reader
        if sessions is None:
            raise StoreError(f"{self._label} is not started", store=self._store)
        timeout = self._timeout
        if timeout is None:
            return sessions
        maker = sessions

        @asynccontextmanager
        async def bounded() -> AsyncIterator[AsyncSession]:
            bound = asyncio.timeout(timeout)
            try:
                async with bound, maker() as session:
                    yield session
            except TimeoutError:
                if not bound.expired():
                    raise
                if write:
                    raise WriteOutcomeUnknownError(
                        f"{self._label} sent no answer in {timeout:g} s: whether the write "
                        "was applied is unknown",
                        store=self._store,
                    ) from None
                raise StoreUnavailableError(
                    f"{self._label} sent no answer in {timeout:g} s", store=self._store
                ) from None

        return bounded

    def create_engine(self) -> AsyncEngine:
        """A new engine on the database (SQLite: its directory created, its connections set
        up); ``ConfigurationError`` when the driver is missing or refuses the URL."""
        options: dict[str, Any] = {"echo": self._echo, "json_serializer": dump_json}
        if self.kind == "sqlite":
            database = self.url.database
            assert database is not None  # _normalise_url refuses in-memory databases
            try:
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreUnavailableError(
                    f"profile store cannot create the directory of {database}: {exc}",
                    store=_URL_STORE,
                ) from exc
        else:
            options["pool_pre_ping"] = True
            if self._timeout is not None and "connect_timeout" not in self.url.query:
                options["connect_args"] = {"connect_timeout": max(1, round(self._timeout))}
        try:
            engine = create_async_engine(self.url, **options)
        except (ImportError, SQLAlchemyError) as exc:
            raise ConfigurationError(
                f"profile store URL cannot be used ({type(exc).__name__}: {exc}); "
                "is the async driver installed?"
            ) from exc
        if self.kind == "sqlite":
            _configure_sqlite(engine)
        return engine

    def writer_engine(self, engine: AsyncEngine) -> AsyncEngine:
        """``engine`` for writers: on SQLite its transactions begin ``IMMEDIATE``."""
        if self.kind == "sqlite":
            return engine.execution_options(**{_SQLITE_BEGIN_OPTION: "IMMEDIATE"})
        return engine

    @asynccontextmanager
    async def start_lock(self) -> AsyncIterator[None]:
        """On SQLite, one start at a time per database file, across threads and processes.

        ``flock`` on a sibling ``<file>.lock`` (it conflicts even between two descriptors of
        one process). Inside it the first connection switches the file to WAL and migrates;
        later starts find both done. SQLite's own locks cannot do this: the WAL switch may
        fail with "database is locked" without waiting for the busy timeout.
        """
        if self.kind != "sqlite" or self.url.database is None:
            yield
            return
        fd = await asyncio.to_thread(_lock_beside, self.url.database)
        try:
            yield
        finally:
            os.close(fd)  # releases the lock


def dump_json(value: Any) -> str:
    """JSON accepted by SQLite and PostgreSQL alike (no NaN / Infinity)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def describe_sql_error(exc: BaseException) -> str:
    """The driver's own error, first line only: never the SQL text or its parameters."""
    orig = getattr(exc, "orig", None)
    cause = orig if isinstance(orig, BaseException) else exc
    message = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    if isinstance(cause, SQLAlchemyError) and not isinstance(cause, DBAPIError):
        message = message.split("[SQL:", 1)[0].strip()
    return f"{type(cause).__name__}: {message[:200]}" if message else type(cause).__name__


def _normalise_url(url: str) -> URL:
    """Parse ``url``, give a bare ``sqlite`` / ``postgresql`` its async driver, refuse others."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        # The message would repeat the URL, password included.
        raise ConfigurationError("profile store URL is not a valid SQLAlchemy URL") from exc
    backend, _, driver = parsed.drivername.partition("+")
    if backend in ("postgres", "postgresql"):
        return parsed.set(drivername=f"postgresql+{driver or 'psycopg'}")
    if backend != "sqlite":
        raise ConfigurationError(
            f"profile store backend {backend!r} is not supported; use sqlite or postgresql"
        )
    if parsed.database in (None, "", ":memory:") or parsed.query.get("mode") == "memory":
        raise ConfigurationError("profile store needs an SQLite file, not an in-memory database")
    return parsed.set(drivername=f"sqlite+{driver or 'aiosqlite'}")


def _configure_sqlite(engine: AsyncEngine) -> None:
    """WAL, busy timeout and foreign keys on every connection; SQLAlchemy emits ``BEGIN``."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Stop the driver from issuing its own BEGIN so that _on_begin decides the mode.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # The busy timeout first: switching to WAL needs a lock that a connection opening
            # at the same moment may hold, and without a timeout SQLite fails at once.
            cursor.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            # Deleted rows are overwritten with zeros, not left in free space (expiry and
            # retention promise that deleted memories leave the file).
            cursor.execute("PRAGMA secure_delete=ON")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(_SQLITE_BEGIN_OPTION, "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")


def _lock_beside(database: str) -> int:
    """Open ``<database>.lock`` (creating its directory) and block until it is ours."""
    path = Path(database).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd
