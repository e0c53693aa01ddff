"""SQLAlchemy 2 declarative models of the SQL stores (SQLite now, PostgreSQL next).

This module is the ORM's view of the SQL schema. The schema itself is created and changed by
the Alembic migrations in :mod:`memmachine.adapters.sql.migrations` (run by
:class:`SqlProfileStore` at every start); a test checks that the migrated schema matches
``Base.metadata``. Everything here is dialect-neutral; the few dialect differences are
handled by column types:

* Timestamps use :class:`UtcDateTime`: aware UTC ``datetime`` in and out. PostgreSQL stores
  ``timestamptz``; SQLite has no time zones, so naive UTC is stored and UTC is re-attached
  when reading.
* ``metadata`` is JSON (``jsonb`` on PostgreSQL).
* ``embedding`` is a float32 little-endian byte string (``BLOB`` / ``bytea``): 4 bytes per
  dimension, decoded with ``numpy.frombuffer(raw, dtype="<f4")``. ``NULL`` = no embedding.
* ``search_terms`` holds the terms of tag, feature and value as produced by the shared
  analyser (:func:`memmachine.indexing.terms.document_terms`), joined by single spaces. The
  store writes it with every upsert; lexical search reads it instead of re-analysing text
  (SQLite: BM25 in Python; PostgreSQL: a generated ``tsvector`` over it, GIN-indexed).

PostgreSQL-only columns that the ORM does not map (the migrations add them, the store
reads them with explicit SQL): ``search_vector tsvector`` (generated from ``search_terms``)
and, when the server has pgvector, ``embedding_vec vector`` (a copy of ``embedding``).

Constraint and index names follow :data:`NAMING_CONVENTION` so migrations are stable.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

__all__ = [
    "NAMING_CONVENTION",
    "ApiKeyRow",
    "Base",
    "ProcedureHistoryRow",
    "ProcedureRow",
    "ProfileFactHistoryRow",
    "ProfileFactRow",
    "RetentionPolicyRow",
    "SessionOutcomeRow",
    "UtcDateTime",
]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: Longest id allowed by ``memmachine.models.ID_PATTERN``.
ID_LENGTH = 128


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC ``datetime`` column on every dialect.

    Binding requires an aware datetime (naive ones are taken as UTC) and converts it to UTC;
    on SQLite the tzinfo is then dropped because SQLite stores text without an offset.
    Results always come back aware, in UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base of every memmachine SQL table."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _json_type() -> Any:
    return JSON().with_variant(JSONB(), "postgresql")


class ProfileFactRow(Base):
    """One profile fact: ``{tag, feature, value}`` about a user, with provenance.

    A user (tenant, org, project, user) holds at most one fact per (tag, feature).
    ``agent_id`` and ``group_id`` record who wrote the fact first; ``source_session_id``
    the session the latest value came from.
    """

    __tablename__ = "profile_facts"
    __table_args__ = (
        UniqueConstraint("tenant", "org_id", "project_id", "user_id", "tag", "feature"),
        Index(
            "ix_profile_facts_scope_session",
            "tenant",
            "org_id",
            "project_id",
            "user_id",
            "source_session_id",
        ),
        Index(
            "ix_profile_facts_scope_agent",
            "tenant",
            "org_id",
            "project_id",
            "user_id",
            "agent_id",
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(ID_LENGTH))
    org_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    project_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    user_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    agent_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    group_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    tag: Mapped[str] = mapped_column(Text)
    feature: Mapped[str] = mapped_column(Text)
    value: Mapped[str] = mapped_column(Text)
    confidence: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(Text)
    source_session_id: Mapped[str | None] = mapped_column(Text)
    # ``metadata`` is reserved on declarative classes, hence the attribute name.
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", _json_type())
    embedding: Mapped[bytes | None] = mapped_column(LargeBinary)
    #: The analysed terms of tag, feature and value, space-separated (see the module doc).
    search_terms: Mapped[str] = mapped_column(Text, server_default="")
    #: Ids of the episodes the current value was derived from (JSON list of strings).
    source_episode_ids: Mapped[list[str]] = mapped_column(_json_type(), server_default=text("'[]'"))
    #: Since when the current value holds; ``NULL`` on rows older than revision 0004 means
    #: ``created_at``.
    valid_from: Mapped[datetime | None] = mapped_column(UtcDateTime())
    #: Always ``NULL`` here (a current fact); closed versions live in ``profile_fact_history``.
    valid_to: Mapped[datetime | None] = mapped_column(UtcDateTime())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class ProfileFactHistoryRow(Base):
    """One closed version of a profile fact: a value that was superseded or invalidated.

    Written by the store before a fact's value is replaced (``reason`` ``"superseded"``) or
    when a fact is invalidated (the current row is then removed from ``profile_facts``).
    ``valid_to`` is when the version stopped holding.
    """

    __tablename__ = "profile_fact_history"
    __table_args__ = (
        Index(
            "ix_profile_fact_history_scope_feature",
            "tenant",
            "org_id",
            "project_id",
            "user_id",
            "tag",
            "feature",
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    fact_id: Mapped[str] = mapped_column(String(36))
    tenant: Mapped[str] = mapped_column(String(ID_LENGTH))
    org_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    project_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    user_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    agent_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    group_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    tag: Mapped[str] = mapped_column(Text)
    feature: Mapped[str] = mapped_column(Text)
    value: Mapped[str] = mapped_column(Text)
    confidence: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(Text)
    source_session_id: Mapped[str | None] = mapped_column(Text)
    source_episode_ids: Mapped[list[str]] = mapped_column(_json_type())
    valid_from: Mapped[datetime] = mapped_column(UtcDateTime())
    valid_to: Mapped[datetime] = mapped_column(UtcDateTime())
    reason: Mapped[str] = mapped_column(Text)
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime())
    #: When the value it held expires (the fact's ``metadata["expires_at"]`` when it was
    #: closed); ``NULL`` = never. Reads hide it from then on; the retention sweep erases it.
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class ApiKeyRow(Base):
    """One API key (see :mod:`memmachine.auth`): its tenant, rights and the sha256 of its
    secret, never the key itself. ``revoked_at`` set = the key authenticates nothing."""

    __tablename__ = "api_keys"
    __table_args__ = (Index("ix_api_keys_tenant", "tenant"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(ID_LENGTH))
    name: Mapped[str] = mapped_column(Text)
    secret_hash: Mapped[str] = mapped_column(String(64))
    can_read: Mapped[bool] = mapped_column(Boolean)
    can_write: Mapped[bool] = mapped_column(Boolean)
    is_admin: Mapped[bool] = mapped_column(Boolean)
    #: ``NULL`` = the server's default limit; 0 = unlimited.
    rate_limit_per_minute: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class ProcedureRow(Base):
    """One procedure of an application (tenant, org, project; ``agent_id`` ``NULL`` =
    shared by its agents): its current version, confidence and use counts. ``goal_key`` is
    the goal compared as :func:`memmachine.ports.procedures.goal_key` does; ``sources`` a
    JSON list of ``{"user_id", "session_id"}``; ``search_terms`` the analysed terms of
    goal, steps, preconditions and pitfalls."""

    __tablename__ = "procedures"
    __table_args__ = (
        Index("ix_procedures_scope_goal", "tenant", "org_id", "project_id", "goal_key"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(ID_LENGTH))
    org_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    project_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    agent_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    goal: Mapped[str] = mapped_column(Text)
    goal_key: Mapped[str] = mapped_column(Text)
    steps: Mapped[list[str]] = mapped_column(_json_type())
    preconditions: Mapped[list[str]] = mapped_column(_json_type())
    pitfalls: Mapped[list[str]] = mapped_column(_json_type())
    confidence: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(Text)
    sources: Mapped[list[dict[str, str]]] = mapped_column(_json_type())
    successes: Mapped[int] = mapped_column(Integer)
    failures: Mapped[int] = mapped_column(Integer)
    version: Mapped[int] = mapped_column(Integer)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", _json_type())
    embedding: Mapped[bytes | None] = mapped_column(LargeBinary)
    search_terms: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class ProcedureHistoryRow(Base):
    """One superseded version of a procedure; ``valid_to`` is when it was superseded."""

    __tablename__ = "procedure_history"
    __table_args__ = (
        Index(
            "ix_procedure_history_scope_procedure",
            "tenant",
            "org_id",
            "project_id",
            "procedure_id",
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    procedure_id: Mapped[str] = mapped_column(String(36))
    tenant: Mapped[str] = mapped_column(String(ID_LENGTH))
    org_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    project_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    goal: Mapped[str] = mapped_column(Text)
    steps: Mapped[list[str]] = mapped_column(_json_type())
    preconditions: Mapped[list[str]] = mapped_column(_json_type())
    pitfalls: Mapped[list[str]] = mapped_column(_json_type())
    confidence: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(Text)
    sources: Mapped[list[dict[str, str]]] = mapped_column(_json_type())
    successes: Mapped[int] = mapped_column(Integer)
    failures: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text)
    valid_from: Mapped[datetime] = mapped_column(UtcDateTime())
    valid_to: Mapped[datetime] = mapped_column(UtcDateTime())


class SessionOutcomeRow(Base):
    """The outcome (``success`` / ``failure``) reported for one session of a user."""

    __tablename__ = "session_outcomes"

    tenant: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    outcome: Mapped[str] = mapped_column(String(16))
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime())


class RetentionPolicyRow(Base):
    """The retention policies one tenant set through the admin route (a JSON list of
    policy objects; ``[]`` = the tenant set none, overriding the settings file's)."""

    __tablename__ = "retention_policies"

    tenant: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    policies: Mapped[list[dict[str, Any]]] = mapped_column(_json_type())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
