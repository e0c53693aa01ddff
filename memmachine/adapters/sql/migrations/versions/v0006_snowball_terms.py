"""Re-analyse every fact's ``search_terms`` with the Snowball analyser.

The shared analyser (:func:`memmachine.indexing.terms.document_terms`, analyser version 2)
now stems words ("hiking" → "hike") where version 1 only folded plurals, and queries are
analysed the same way, so terms stored by version 1 would no longer match. Every row is
analysed again; on PostgreSQL ``search_vector`` follows, being generated from the column.
Downgrading keeps the new terms (the old analyser is gone).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memmachine.indexing.terms import document_terms

revision = "0006"
down_revision: str | None = "0005"
branch_labels = None
depends_on = None

_BATCH = 500


def upgrade() -> None:
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


def downgrade() -> None:
    """Nothing to undo: the columns are unchanged."""
