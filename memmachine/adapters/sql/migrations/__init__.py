"""Alembic migrations of the SQL schema (:mod:`memmachine.adapters.sql.sql_models`).

They run programmatically: :func:`upgrade_schema` builds an Alembic ``Config`` in memory
(no ``alembic.ini``) pointing at this directory and upgrades the database behind an open
connection to the newest revision, inside the caller's transaction. The same revisions run on
SQLite and PostgreSQL; PostgreSQL-only pieces check the dialect.

Revisions (``versions/``):

* ``0001`` baseline: the ``profile_facts`` table exactly as ``create_all`` made it before
  migrations existed.
* ``0002`` ``search_terms`` (analysed terms, backfilled) on every dialect; on PostgreSQL a
  generated ``search_vector tsvector`` over it with a GIN index.
* ``0003`` PostgreSQL with pgvector available: the ``vector`` extension and an
  ``embedding_vec vector`` column (backfilled from ``embedding``). A no-op elsewhere.
* ``0004`` fact provenance and history: ``source_episode_ids``, ``valid_from``, ``valid_to``
  on ``profile_facts`` and the ``profile_fact_history`` table of closed versions.
* ``0005`` the ``api_keys`` table (hashes of API key secrets, never keys), used by
  :class:`~memmachine.adapters.sql.sql_key_store.SqlKeyStore` on the same database.
* ``0006`` every fact's ``search_terms`` analysed again with the Snowball analyser
  (:data:`memmachine.indexing.terms.ANALYSER_VERSION` 2).
* ``0007`` procedural memory: the ``procedures``, ``procedure_history`` and
  ``session_outcomes`` tables.
* ``0008`` the ``retention_policies`` table (policies set through the admin route, per
  tenant), used by
  :class:`~memmachine.adapters.sql.sql_retention_policy_store.SqlRetentionPolicyStore`.
* ``0009`` ``profile_fact_history.expires_at``: a closed version expires with the value it
  held.
* ``0010`` every fact's and procedure's ``search_terms`` analysed again in its own language
  (:data:`memmachine.indexing.terms.ANALYSER_VERSION` 3).

A database made by the pre-migration code (``profile_facts`` without an ``alembic_version``
table) is stamped at the baseline and then upgraded, so its rows are kept.

Running the upgrade at every start is safe: at head it changes nothing. Concurrent starts are
serialised by the caller: PostgreSQL takes :data:`ADVISORY_LOCK_KEY` as a transaction-level
advisory lock before calling :func:`upgrade_schema`; SQLite runs it in a ``BEGIN IMMEDIATE``
transaction. Both dialects have transactional DDL, so a failed upgrade leaves nothing behind.

To write a new revision by hand: ``uv run alembic -x url=... revision`` is not wired; copy the
newest file in ``versions/``, give it the next number as ``revision`` and the previous one as
``down_revision``.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

__all__ = [
    "ADVISORY_LOCK_KEY",
    "BASELINE_REVISION",
    "MIGRATIONS_DIR",
    "alembic_config",
    "current_revision",
    "head_revision",
    "upgrade_schema",
]

MIGRATIONS_DIR = Path(__file__).resolve().parent
#: The revision that matches the schema made by ``create_all`` before migrations existed.
BASELINE_REVISION = "0001"
#: Key of the PostgreSQL advisory lock held while migrating: the first 8 bytes of
#: sha256("memmachine.sql.migrations") as a signed big-endian integer.
ADVISORY_LOCK_KEY = -0x0D85_A19B_9DAB_5539


def alembic_config(connection: Connection | None = None) -> Config:
    """An in-memory Alembic configuration for this directory, bound to ``connection``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision in ``versions/``."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at; ``None`` when it has never been migrated."""
    return MigrationContext.configure(connection).get_current_revision()


def upgrade_schema(connection: Connection) -> None:
    """Bring the database behind ``connection`` to the newest revision, in its transaction.

    The caller holds a transaction (and on PostgreSQL the advisory lock). A pre-migration
    database (``profile_facts`` present, no version table) is first stamped at
    :data:`BASELINE_REVISION`.
    """
    config = alembic_config(connection)
    tables = set(inspect(connection).get_table_names())
    if "profile_facts" in tables and "alembic_version" not in tables:
        command.stamp(config, BASELINE_REVISION)
    command.upgrade(config, "head")
