"""Retention policies on SQL through SQLAlchemy 2 async, in the profile store's database.

The ``retention_policies`` table (:class:`~memmachine.adapters.sql.sql_models.RetentionPolicyRow`)
is made by the same Alembic migrations as the profile tables, run at ``start()`` by the
shared :class:`~memmachine.adapters.sql.sql_migrated_store.SqlMigratedStore`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from memmachine.adapters.sql.sql_migrated_store import SqlMigratedStore, translated
from memmachine.adapters.sql.sql_models import RetentionPolicyRow
from memmachine.models import JsonDict, utc_now

__all__ = ["SqlRetentionPolicyStore"]

_STORE = "retention_policies"


class SqlRetentionPolicyStore(SqlMigratedStore):
    """:class:`~memmachine.ports.RetentionPolicyStore` on SQLite or PostgreSQL, at the
    profile store's SQLAlchemy URL."""

    def __init__(self, url: str, *, timeout_seconds: float | None = None) -> None:
        super().__init__(
            url, store=_STORE, label="retention policy store", timeout_seconds=timeout_seconds
        )

    async def put_policies(self, tenant: str, policies: Sequence[JsonDict]) -> None:
        """Replace the tenant's row (one transaction: readers see the old or the new list).
        Two first writes of one tenant racing: the loser's insert fails and it updates."""
        for attempt in range(2):
            try:
                with _translate("store retention policies"):
                    await self._put(tenant, list(policies))
                return
            except IntegrityError:
                if attempt == 1:
                    raise

    async def _put(self, tenant: str, policies: list[JsonDict]) -> None:
        async with self._database.sessions(write=True)() as session, session.begin():
            row = await session.get(RetentionPolicyRow, tenant)
            if row is None:
                session.add(
                    RetentionPolicyRow(tenant=tenant, policies=policies, updated_at=utc_now())
                )
            else:
                row.policies = policies
                row.updated_at = utc_now()

    async def all_policies(self) -> dict[str, list[JsonDict]]:
        """Every tenant's stored list, tenants in id order."""
        statement = select(RetentionPolicyRow).order_by(RetentionPolicyRow.tenant)
        with _translate("read retention policies"):
            async with self._database.sessions(write=False)() as session, session.begin():
                rows = (await session.scalars(statement)).all()
        return {row.tenant: list(row.policies) for row in rows}


def _translate(action: str) -> AbstractContextManager[None]:
    return translated("retention policy store", _STORE, action)
