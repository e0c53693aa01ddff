"""Analysed search terms on every dialect; a GIN-indexed ``tsvector`` over them on PostgreSQL.

``search_terms`` is written by the store from the shared analyser
(:func:`memmachine.indexing.terms.document_terms`); existing rows are backfilled here with
the same function. On PostgreSQL ``search_vector`` is generated from it with
``array_to_tsvector`` (the terms become lexemes verbatim, no parser or dictionary), so that
PostgreSQL matches exactly the terms SQLite's BM25 sees.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memmachine.indexing.terms import document_terms

revision = "0002"
down_revision: str | None = "0001"
branch_labels = None
depends_on = None

_BATCH = 500
_SEARCH_VECTOR = "array_to_tsvector(array_remove(string_to_array(search_terms, ' '), ''))"


def upgrade() -> None:
    op.add_column(
        "profile_facts",
        sa.Column("search_terms", sa.Text(), nullable=False, server_default=""),
    )
    _backfill()
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE profile_facts ADD COLUMN search_vector tsvector "
            f"GENERATED ALWAYS AS ({_SEARCH_VECTOR}) STORED"
        )
        op.create_index(
            "ix_profile_facts_search_vector",
            "profile_facts",
            ["search_vector"],
            postgresql_using="gin",
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_profile_facts_search_vector", table_name="profile_facts")
        op.drop_column("profile_facts", "search_vector")
    op.drop_column("profile_facts", "search_terms")


def _backfill() -> None:
    connection = op.get_bind()
    facts = sa.table(
        "profile_facts",
        sa.column("id", sa.String()),
        sa.column("tag", sa.Text()),
        sa.column("feature", sa.Text()),
        sa.column("value", sa.Text()),
        sa.column("search_terms", sa.Text()),
    )
    update = (
        sa.update(facts)
        .where(facts.c.id == sa.bindparam("fact_id"))
        .values(search_terms=sa.bindparam("terms"))
    )
    last = ""
    while True:
        batch = connection.execute(
            sa.select(facts.c.id, facts.c.tag, facts.c.feature, facts.c.value)
            .where(facts.c.id > last)
            .order_by(facts.c.id)
            .limit(_BATCH)
        ).all()
        if not batch:
            return
        connection.execute(
            update,
            [
                {
                    "fact_id": row.id,
                    "terms": " ".join(document_terms(f"{row.tag} {row.feature} {row.value}")),
                }
                for row in batch
            ],
        )
        last = batch[-1].id
