"""Procedural memory on every dialect.

The ``procedures`` table (an application's procedures: goal, steps, preconditions,
pitfalls, confidence, use counts, sources, embedding and analysed terms), the
``procedure_history`` table of superseded versions and ``session_outcomes`` (the outcome
reported for a session).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from memmachine.adapters.sql.sql_models import UtcDateTime

revision = "0007"
down_revision: str | None = "0006"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(JSONB(), "postgresql")


def _version_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("org_id", sa.String(128), nullable=False),
        sa.Column("project_id", sa.String(128), nullable=False),
        sa.Column("goal", sa.Text(), nullable=False),
        sa.Column("steps", _json(), nullable=False),
        sa.Column("preconditions", _json(), nullable=False),
        sa.Column("pitfalls", _json(), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("sources", _json(), nullable=False),
        sa.Column("successes", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "procedures",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=True),
        sa.Column("goal_key", sa.Text(), nullable=False),
        *_version_columns(),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("metadata", _json(), nullable=False),
        sa.Column("embedding", sa.LargeBinary(), nullable=True),
        sa.Column("search_terms", sa.Text(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_procedures"),
    )
    op.create_index(
        "ix_procedures_scope_goal", "procedures", ["tenant", "org_id", "project_id", "goal_key"]
    )
    op.create_table(
        "procedure_history",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("procedure_id", sa.String(36), nullable=False),
        *_version_columns(),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("valid_from", UtcDateTime(), nullable=False),
        sa.Column("valid_to", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_procedure_history"),
    )
    op.create_index(
        "ix_procedure_history_scope_procedure",
        "procedure_history",
        ["tenant", "org_id", "project_id", "procedure_id"],
    )
    op.create_table(
        "session_outcomes",
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("org_id", sa.String(128), nullable=False),
        sa.Column("project_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("recorded_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant", "org_id", "project_id", "user_id", "session_id", name="pk_session_outcomes"
        ),
    )


def downgrade() -> None:
    op.drop_table("session_outcomes")
    op.drop_index("ix_procedure_history_scope_procedure", table_name="procedure_history")
    op.drop_table("procedure_history")
    op.drop_index("ix_procedures_scope_goal", table_name="procedures")
    op.drop_table("procedures")
