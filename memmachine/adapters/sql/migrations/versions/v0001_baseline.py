"""Baseline: ``profile_facts`` as ``create_all`` made it before migrations existed.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None

_SCOPE = ("tenant", "org_id", "project_id", "user_id")


def upgrade() -> None:
    op.create_table(
        "profile_facts",
        sa.Column("id", sa.String(36), nullable=False),
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
        sa.Column(
            "metadata",
            sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
            nullable=False,
        ),
        sa.Column("embedding", sa.LargeBinary(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_profile_facts"),
        sa.UniqueConstraint(
            *_SCOPE,
            "tag",
            "feature",
            name="uq_profile_facts_tenant_org_id_project_id_user_id_tag_feature",
        ),
    )
    op.create_index("ix_profile_facts_scope_agent", "profile_facts", [*_SCOPE, "agent_id"])
    op.create_index(
        "ix_profile_facts_scope_session", "profile_facts", [*_SCOPE, "source_session_id"]
    )


def downgrade() -> None:
    op.drop_table("profile_facts")
