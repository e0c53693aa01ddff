"""API keys on SQL through SQLAlchemy 2 async, in the profile store's database.

The ``api_keys`` table (:class:`~memmachine.adapters.sql.sql_models.ApiKeyRow`) is made by the
same Alembic migrations as the profile tables; ``start()`` opens the database and runs them
through the same :class:`~memmachine.adapters.sql.sql_engine.SqlDatabase` as
:class:`~memmachine.adapters.sql.sql_profile_store.SqlProfileStore` (PostgreSQL under the
migration advisory lock, SQLite under the sibling file lock and ``BEGIN IMMEDIATE``), so
either store may be the first to open a fresh database, and the ``memmachine keys`` command
can open the keys while a server uses the same file. Only the sha256 of a key's secret is
stored. Behaviour beyond the :class:`~memmachine.ports.KeyStore` contract: keys list oldest
first, then by id.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from memmachine.adapters.sql.sql_engine import SessionFactory
from memmachine.adapters.sql.sql_migrated_store import SqlMigratedStore, translated
from memmachine.adapters.sql.sql_models import ApiKeyRow
from memmachine.auth import ApiKey, Permission, StoredKey
from memmachine.errors import ConflictError, NotFoundError
from memmachine.models import utc_now

__all__ = ["SqlKeyStore"]

_STORE = "keys"


class SqlKeyStore(SqlMigratedStore):
    """:class:`~memmachine.ports.KeyStore` on SQLite or PostgreSQL.

    ``url`` is the profile store's SQLAlchemy URL (the same normalisation applies: a bare
    ``sqlite://`` / ``postgresql://`` gets its async driver, in-memory SQLite is refused)."""

    def __init__(self, url: str, *, timeout_seconds: float | None = None) -> None:
        super().__init__(url, store=_STORE, label="key store", timeout_seconds=timeout_seconds)

    # ------------------------------------------------------------------ the contract

    async def create(self, key: ApiKey, secret_hash: str) -> ApiKey:
        """Store a new key; an id already stored is a ``ConflictError``."""
        row = ApiKeyRow(
            id=key.key_id,
            tenant=key.tenant,
            name=key.name,
            secret_hash=secret_hash,
            can_read=key.can_read,
            can_write=key.can_write,
            is_admin=key.is_admin,
            rate_limit_per_minute=key.rate_limit_per_minute,
            created_at=key.created_at,
            revoked_at=key.revoked_at,
        )
        try:
            with _translate("create a key"):
                async with self._sessions(write=True)() as session, session.begin():
                    session.add(row)
        except IntegrityError as exc:
            raise ConflictError(f"API key {key.key_id} already exists") from exc
        return _to_key(row)

    async def get(self, key_id: str) -> StoredKey | None:
        """The key and its hash, revoked or not; ``None`` when unknown."""
        with _translate("read a key"):
            async with self._sessions(write=False)() as session, session.begin():
                row = await session.get(ApiKeyRow, key_id)
        return None if row is None else StoredKey(_to_key(row), row.secret_hash)

    async def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        """The tenant's keys (every tenant's for ``None``), revoked included, oldest first."""
        statement = select(ApiKeyRow).order_by(ApiKeyRow.created_at, ApiKeyRow.id)
        if tenant is not None:
            statement = statement.where(ApiKeyRow.tenant == tenant)
        with _translate("list keys"):
            async with self._sessions(write=False)() as session, session.begin():
                rows = (await session.scalars(statement)).all()
        return [_to_key(row) for row in rows]

    async def active_keys(self) -> list[StoredKey]:
        """Every key not revoked, with its hash."""
        statement = select(ApiKeyRow).where(ApiKeyRow.revoked_at.is_(None)).order_by(ApiKeyRow.id)
        with _translate("list keys"):
            async with self._sessions(write=False)() as session, session.begin():
                rows = (await session.scalars(statement)).all()
        return [StoredKey(_to_key(row), row.secret_hash) for row in rows]

    async def revoke(self, key_id: str, tenant: str | None = None) -> ApiKey:
        """Mark the key revoked (the first revocation time is kept) and return it."""
        with _translate("revoke a key"):
            async with self._sessions(write=True)() as session, session.begin():
                row = await session.get(ApiKeyRow, key_id)
                if row is None or (tenant is not None and row.tenant != tenant):
                    raise NotFoundError(f"API key {key_id!r} not found")
                if row.revoked_at is None:
                    row.revoked_at = utc_now()
        return _to_key(row)

    async def any_active(self) -> bool:
        """Whether at least one key is not revoked."""
        statement = (
            select(func.count()).select_from(ApiKeyRow).where(ApiKeyRow.revoked_at.is_(None))
        )
        with _translate("count keys"):
            async with self._sessions(write=False)() as session, session.begin():
                count = await session.scalar(statement)
        return bool(count)

    # ------------------------------------------------------------------ internals

    def _sessions(self, *, write: bool) -> SessionFactory:
        return self._database.sessions(write=write)


def _to_key(row: ApiKeyRow) -> ApiKey:
    allowed: list[Permission] = []
    if row.can_read:
        allowed.append("read")
    if row.can_write:
        allowed.append("write")
    if row.is_admin:
        allowed.append("admin")
    return ApiKey(
        key_id=row.id,
        tenant=row.tenant,
        name=row.name,
        permissions=tuple(allowed),
        rate_limit_per_minute=row.rate_limit_per_minute,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


def _translate(action: str) -> AbstractContextManager[None]:
    return translated("key store", _STORE, action)
