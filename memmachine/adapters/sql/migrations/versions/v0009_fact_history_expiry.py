"""The expiry of closed fact versions on every dialect.

``profile_fact_history.expires_at``: when the value a closed version held expires (the
fact's expiry when it was closed); ``NULL`` for every version closed before.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memmachine.adapters.sql.sql_models import UtcDateTime

revision = "0009"
down_revision: str | None = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("profile_fact_history") as batch:
        batch.add_column(sa.Column("expires_at", UtcDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("profile_fact_history") as batch:
        batch.drop_column("expires_at")
