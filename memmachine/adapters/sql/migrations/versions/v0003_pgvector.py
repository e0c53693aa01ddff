"""PostgreSQL with pgvector: the ``vector`` extension and ``embedding_vec`` (backfilled).

A no-op on SQLite and on servers without pgvector (or where it cannot be created); the store
then ranks embeddings in Python. See :mod:`memmachine.adapters.sql.migrations.pgvector`.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

from memmachine.adapters.sql.migrations.pgvector import enable_pgvector

revision = "0003"
down_revision: str | None = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    enable_pgvector(op.get_bind())


def downgrade() -> None:
    # The extension stays: other tables of the database may use it.
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE profile_facts DROP COLUMN IF EXISTS embedding_vec")
