"""Fact provenance and history on every dialect.

``profile_facts`` gains ``source_episode_ids`` (JSON list, ``[]`` on existing rows),
``valid_from`` (backfilled from ``created_at``) and ``valid_to`` (``NULL`` = current; current
rows always keep it ``NULL``). The new ``profile_fact_history`` table keeps every closed
version of a fact: the value it had, its provenance, when it held and why it stopped.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from memmachine.adapters.sql.sql_models import UtcDateTime

revision = "0004"
down_revision: str | None = "0003"
branch_labels = None
depends_on = None


def _json() -> Any:
    return sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column(
        "profile_facts",
        sa.Column("source_episode_ids", _json(), nullable=False, server_default=sa.text("'[]'")),
    )
    op.add_column("profile_facts", sa.Column("valid_from", UtcDateTime(), nullable=True))
    op.add_column("profile_facts", sa.Column("valid_to", UtcDateTime(), nullable=True))
    op.execute("UPDATE profile_facts SET valid_from = created_at")
    op.create_table(
        "profile_fact_history",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("fact_id", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("org_id", sa.String(128), nullable=False),
        sa.Column("project_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=True),
        sa.Column("group_id", sa.String(128), nullable=True),
        sa.Column("tag", sa.Text(), nullable=False),
        sa.Column("feature", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("source_session_id", sa.Text(), nullable=True),
        sa.Column("source_episode_ids", _json(), nullable=False),
        sa.Column("valid_from", UtcDateTime(), nullable=False),
        sa.Column("valid_to", UtcDateTime(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("recorded_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_profile_fact_history"),
    )
    op.create_index(
        "ix_profile_fact_history_scope_feature",
        "profile_fact_history",
        ["tenant", "org_id", "project_id", "user_id", "tag", "feature"],
    )


def downgrade() -> None:
    op.drop_index("ix_profile_fact_history_scope_feature", table_name="profile_fact_history")
    op.drop_table("profile_fact_history")
    op.drop_column("profile_facts", "valid_to")
    op.drop_column("profile_facts", "valid_from")
    op.drop_column("profile_facts", "source_episode_ids")
