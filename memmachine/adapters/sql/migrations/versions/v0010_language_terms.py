"""Re-analyse every fact's and procedure's ``search_terms`` in its own language.

The shared analyser (:func:`memmachine.indexing.terms.document_terms`, analyser version 3)
now reads every language: Chinese and Japanese as character pairs, a Snowball stemmer and
stopwords per language, the language detected per text. Queries are analysed the same way, so
terms stored by version 2 (a Chinese sentence as one term, Russian unstemmed) would not match.
Every row is analysed again; on PostgreSQL ``search_vector`` follows, being generated from the
column. English terms are unchanged. Downgrading keeps the new terms.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

from memmachine.indexing.terms import document_terms

revision = "0010"
down_revision: str | None = "0009"
branch_labels = None
depends_on = None

_BATCH = 500


def _texts(value: Any) -> list[str]:
    """A JSON list column's strings, whether the driver decoded it (PostgreSQL) or not."""
    if isinstance(value, str):
        value = json.loads(value)
    return [str(item) for item in value or []]


def _reanalyse(table: sa.TableClause, words: Any) -> None:
    connection = op.get_bind()
    update = (
        sa.update(table)
        .where(table.c.id == sa.bindparam("row_id"))
        .values(search_terms=sa.bindparam("terms"))
    )
    last = ""
    while True:
        batch = connection.execute(
            sa.select(table).where(table.c.id > last).order_by(table.c.id).limit(_BATCH)
        ).all()
        if not batch:
            return
        connection.execute(
            update,
            [{"row_id": row.id, "terms": " ".join(document_terms(words(row)))} for row in batch],
        )
        last = batch[-1].id


def upgrade() -> None:
    facts = sa.table(
        "profile_facts",
        sa.column("id", sa.String()),
        sa.column("tag", sa.Text()),
        sa.column("feature", sa.Text()),
        sa.column("value", sa.Text()),
        sa.column("search_terms", sa.Text()),
    )
    _reanalyse(facts, lambda row: f"{row.tag} {row.feature} {row.value}")
    procedures = sa.table(
        "procedures",
        sa.column("id", sa.String()),
        sa.column("goal", sa.Text()),
        sa.column("steps"),
        sa.column("preconditions"),
        sa.column("pitfalls"),
        sa.column("search_terms", sa.Text()),
    )
    _reanalyse(
        procedures,
        lambda row: " ".join(
            [row.goal, *_texts(row.steps), *_texts(row.preconditions), *_texts(row.pitfalls)]
        ),
    )


def downgrade() -> None:
    """Nothing to undo: the columns are unchanged."""
