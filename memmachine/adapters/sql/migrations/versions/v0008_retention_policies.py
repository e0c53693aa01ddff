"""Retention policies set through the admin route, kept across restarts.

The ``retention_policies`` table holds one row per tenant: its policies as a JSON list and
when they were last set.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from memmachine.adapters.sql.sql_models import UtcDateTime

revision = "0008"
down_revision: str | None = "0007"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "retention_policies",
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("policies", _json(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", name="pk_retention_policies"),
    )


def downgrade() -> None:
    op.drop_table("retention_policies")
