"""Alembic environment: migrate through the connection handed over in ``config.attributes``.

Only online migrations on a caller's connection are supported; the caller owns the
transaction (Alembic sees it as external and does not commit).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from memmachine.adapters.sql.sql_models import Base


def _run() -> None:
    connection = context.config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise RuntimeError(
            "memmachine migrations run through memmachine.adapters.sql.migrations.upgrade_schema "
            "with an open connection"
        )
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()


_run()
