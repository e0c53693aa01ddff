"""Domain models shared by the manager, the ports and the adapters.

These are the core's own types; the REST/SDK wire models live in ``memmachine_sdk.models``
and are converted at the server boundary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from memmachine.errors import InvalidInputError

__all__ = [
    "EXPIRED_SOURCE",
    "ID_PATTERN",
    "PII_KINDS",
    "EmbedderStatus",
    "Episode",
    "EpisodeHit",
    "EpisodeRecord",
    "Fact",
    "FactHit",
    "FactRecord",
    "FactTimes",
    "FactVersion",
    "ForgetReport",
    "HealthReport",
    "Identifier",
    "IndexEntry",
    "IndexState",
    "LlmStatus",
    "MemoryType",
    "NewMessage",
    "ProjectScope",
    "RerankerStatus",
    "Role",
    "Scope",
    "SearchResult",
    "SessionActivity",
    "StoreHealth",
    "TimeBucket",
    "UserActivity",
    "WorkingMemory",
    "WorkingMessage",
    "checked_vector",
    "expiry_of",
    "utc_now",
]

#: Ids are short, printable and free of ``:``, ``/`` and whitespace, so they can be embedded
#: verbatim in Redis keys and graph keys without one id ever aliasing another.
ID_PATTERN = r"^[\w.@+\-=#~|]{1,128}$"
#: The kinds of personal data the write gate can redact, in the order its detectors run
#: (see :mod:`memmachine.safety.pii`).
PII_KINDS: tuple[str, ...] = ("email", "iban", "card", "national_id", "account", "phone")
Identifier = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
Role = Literal["user", "assistant", "system", "tool"]

JsonDict = dict[str, Any]
#: What stands in a fact's ``source_episode_ids`` for the episodes it was derived from that
#: expired or were removed by a retention policy (never an episode id).
EXPIRED_SOURCE = "expired"


def utc_now() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC; aware ones are converted to UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def checked_vector(values: Sequence[float], dimensions: int, field: str) -> list[float]:
    """``values`` as floats, checked: right length, finite, not all zero; else
    ``InvalidInputError`` naming ``field``."""
    if len(values) != dimensions:
        raise InvalidInputError(
            f"expected a vector of {dimensions} dimensions, got {len(values)}", field
        )
    vector = [float(value) for value in values]
    if not all(math.isfinite(value) for value in vector):
        raise InvalidInputError("vector values must be finite numbers", field)
    if not any(vector):
        raise InvalidInputError("a zero vector has no direction", field)
    return vector


class Scope(BaseModel):
    """Who a memory belongs to. Every store read and write takes one.

    ``tenant``, ``org_id``, ``project_id`` and ``user_id`` always match exactly. ``agent_id``,
    ``session_id`` and ``group_id`` narrow a query when set and are ignored when ``None``.
    The tenant comes from the API key, never from the request body.
    """

    model_config = ConfigDict(frozen=True)

    tenant: Identifier = "default"
    org_id: Identifier = "default"
    project_id: Identifier = "default"
    user_id: Identifier
    agent_id: Identifier | None = None
    session_id: Identifier | None = None
    group_id: Identifier | None = None

    def for_session(self, session_id: str) -> Scope:
        return self.model_copy(update={"session_id": session_id})

    def user_scope(self) -> Scope:
        """The same user with every narrowing id dropped."""
        return self.model_copy(update={"agent_id": None, "session_id": None, "group_id": None})

    @property
    def user_key(self) -> str:
        """``tenant/org/project/user``: one string per user (ids cannot contain ``/``)."""
        return f"{self.tenant}/{self.org_id}/{self.project_id}/{self.user_id}"

    def project_scope(self) -> ProjectScope:
        """The tenant, org and project this scope's user belongs to."""
        return ProjectScope(tenant=self.tenant, org_id=self.org_id, project_id=self.project_id)


class ProjectScope(BaseModel):
    """One project of one tenant's org: what a listing across users is confined to.

    The few store reads that answer for many users at once (``list_users``) take one of
    these instead of a :class:`Scope`; all three ids always match exactly.
    """

    model_config = ConfigDict(frozen=True)

    tenant: Identifier = "default"
    org_id: Identifier = "default"
    project_id: Identifier = "default"

    def user(self, user_id: str) -> Scope:
        """The scope of one user of this project."""
        return Scope(
            tenant=self.tenant, org_id=self.org_id, project_id=self.project_id, user_id=user_id
        )


class StoreHealth(BaseModel):
    name: str
    kind: str
    status: Literal["ok", "down", "off"]
    detail: str | None = None
    version: str | None = None
    latency_ms: float | None = None


# --------------------------------------------------------------------------- episodic


class EpisodeRecord(BaseModel):
    """An episode ready to be stored: the manager fills every field; the store adds order."""

    id: str
    role: Role
    producer: str | None
    content: str
    timestamp: datetime
    metadata: JsonDict = Field(default_factory=dict)
    search_text: str
    embedding: list[float] | None = None
    #: Vectors of the episode's sentences and context window (derivatives); dense search
    #: scores the episode by the best of ``embedding`` and these.
    derivative_embeddings: list[list[float]] = Field(default_factory=list)
    #: How much each derivative's similarity counts, in the order of
    #: ``derivative_embeddings`` (empty: 1.0 each): a context window, which also holds the
    #: words of the messages before, counts a little less than the message's own vector.
    derivative_weights: list[float] = Field(default_factory=list)

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return as_utc(value)


class Episode(BaseModel):
    """A stored episode. ``scope.session_id`` is always set; ``sequence`` orders a session."""

    id: str
    scope: Scope
    role: Role
    producer: str | None
    content: str
    timestamp: datetime
    metadata: JsonDict = Field(default_factory=dict)
    sequence: int
    created_at: datetime

    @field_validator("timestamp", "created_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return as_utc(value)


@dataclass(frozen=True, slots=True)
class IndexState:
    """Where a user's episodes stand, for an in-process index kept in step with a store.

    ``revision`` grows by at least one with every write that adds or deletes episodes in the
    user's scope (tenant, org, project, user); ``deletions`` counts the writes that deleted
    something; ``episodes`` is how many episodes the user holds. A user with no episodes
    ever written is ``IndexState(0, 0, 0)``.
    """

    revision: int
    deletions: int
    episodes: int


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """What a search index needs of one stored episode (not the episode itself).

    ``timestamp`` is in microseconds since the Unix epoch (UTC); ``revision`` is the user's
    revision that added the episode (0 for episodes stored before revisions existed);
    ``terms`` are the analysed full-text terms in order, repeats kept; ``embedding`` and
    ``derivatives`` are float32 vectors (``None`` / empty without vectors), each derivative
    with its weight in ``derivative_weights`` (same order and length); ``episode`` is the
    stored episode itself, so an index can hand out its hits without asking the store.
    """

    id: str
    session_id: str
    agent_id: str | None
    group_id: str | None
    sequence: int
    timestamp: int
    revision: int
    terms: tuple[str, ...]
    embedding: npt.NDArray[np.float32] | None
    derivatives: tuple[npt.NDArray[np.float32], ...] = ()
    derivative_weights: tuple[float, ...] = ()
    episode: Episode | None = None


class UserActivity(BaseModel):
    """What a store holds for one user of a project, and when it last changed.

    Each store fills the counts it keeps (the episode store ``episodes`` and ``sessions``,
    the profile store ``facts``, the working store ``working_sessions``) and leaves the
    others at 0; ``last_active`` is the newest write the store knows of for the user.
    """

    user_id: str
    episodes: int = 0
    #: Sessions holding at least one episode.
    sessions: int = 0
    #: Current (not invalidated) facts.
    facts: int = 0
    #: Sessions whose working memory exists (not expired).
    working_sessions: int = 0
    last_active: datetime | None = None

    @field_validator("last_active")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)


class SessionActivity(BaseModel):
    """One session of a user as the episode store holds it."""

    session_id: str
    episodes: int
    #: Timestamps of the session's oldest and newest episode.
    first_at: datetime
    last_at: datetime
    #: When an episode was last added to the session (store time).
    updated_at: datetime

    @field_validator("first_at", "last_at", "updated_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return as_utc(value)


class TimeBucket(BaseModel):
    """How many episodes have a timestamp in ``[start, start + bucket)``."""

    start: datetime
    count: int


class EpisodeHit(BaseModel):
    """A search result: the episode, its fused score, and the rank it had in each signal."""

    episode: Episode
    score: float
    ranks: dict[str, int] = Field(default_factory=dict)
    #: True when the episode was added as a neighbour of a hit rather than matched itself.
    context: bool = False


# --------------------------------------------------------------------------- profile


class FactRecord(BaseModel):
    """A fact to upsert. A user holds at most one fact per (tag, feature)."""

    tag: str
    feature: str
    value: str
    confidence: float = 1.0
    source: str = "explicit"
    source_session_id: str | None = None
    #: Ids of the episodes the value was derived from.
    source_episode_ids: list[str] = Field(default_factory=list)
    metadata: JsonDict = Field(default_factory=dict)
    embedding: list[float] | None = None
    #: When the fact expires (see :mod:`memmachine.memory.expiry`); or ``ttl_seconds``.
    expires_at: datetime | None = None
    ttl_seconds: int | None = None


class FactTimes(BaseModel):
    """When a fact or one of its closed versions was stored and held, as another store
    recorded it (an import puts them back); ``id`` is the fact's id there."""

    id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    recorded_at: datetime | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class Fact(BaseModel):
    id: str
    scope: Scope
    tag: str
    feature: str
    value: str
    confidence: float
    source: str
    source_session_id: str | None = None
    source_episode_ids: list[str] = Field(default_factory=list)
    metadata: JsonDict = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime
    #: Since when the current value holds.
    valid_from: datetime | None = None
    #: ``None`` while the fact is current.
    valid_to: datetime | None = None
    #: What ``confidence`` is worth now, aged since ``updated_at`` (the last confirmation);
    #: set by the manager on reads.
    effective_confidence: float | None = None

    @field_validator("created_at", "updated_at", "valid_from", "valid_to")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)


class FactVersion(BaseModel):
    """A closed version of a fact: the value it had, its provenance and when it held.

    ``reason`` is ``"superseded"`` when a new value replaced it, otherwise the reason given
    to ``invalidate_fact``.
    """

    fact_id: str
    tag: str
    feature: str
    value: str
    confidence: float
    source: str
    source_session_id: str | None = None
    source_episode_ids: list[str] = Field(default_factory=list)
    valid_from: datetime
    valid_to: datetime
    reason: str
    recorded_at: datetime
    #: When the value it held expires (that of the fact when it was closed); ``None``: never.
    expires_at: datetime | None = None

    @field_validator("valid_from", "valid_to", "recorded_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return as_utc(value)

    @field_validator("expires_at")
    @classmethod
    def _utc_or_none(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)


class TopicExample(BaseModel):
    """A few-shot example of a topic: what the user said and the facts it gives."""

    message: str = Field(min_length=1)
    #: ``{"feature": ..., "value": ...}`` pairs extracted from ``message``.
    facts: list[dict[str, str]] = Field(default_factory=list)


class ExtractionTopic(BaseModel):
    """A profile topic the extractor looks for: a name (the facts' tag) plus any of a
    natural-language description, a JSON schema of its features, and few-shot examples.

    With a schema of ``{"properties": {...}}`` only the listed features are kept, and a
    feature whose property has an ``enum`` keeps only values from it."""

    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    json_schema: JsonDict | None = Field(default=None, alias="schema")
    examples: list[TopicExample] = Field(default_factory=list)

    model_config = ConfigDict(populate_by_name=True)

    def allows(self, feature: str, value: str) -> bool:
        """Whether a fact (``feature``, ``value``) fits this topic's schema."""
        properties = (self.json_schema or {}).get("properties")
        if not isinstance(properties, dict):
            return True
        spec = properties.get(feature)
        if not isinstance(spec, dict):
            return False
        allowed = spec.get("enum")
        return not isinstance(allowed, list) or value in [str(item) for item in allowed]


class EpisodeDetachment(BaseModel):
    """What removing episodes did to the facts derived from them."""

    #: Facts still backed by other episodes; only the removed ids were dropped.
    kept: int = 0
    #: Facts that rested only on removed episodes and went back to their newest earlier
    #: version that other episodes still back (ids of those facts).
    restored: list[str] = Field(default_factory=list)
    #: Facts that rested only on removed episodes and had no such version: deleted.
    removed: int = 0
    #: Closed versions that rested only on removed episodes: erased from the history.
    versions_erased: int = 0


class FactHit(BaseModel):
    fact: Fact
    score: float


# --------------------------------------------------------------------------- working


class WorkingMessage(BaseModel):
    role: Role
    content: str
    producer: str | None = None
    timestamp: datetime
    metadata: JsonDict = Field(default_factory=dict)

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return as_utc(value)


class WorkingMemory(BaseModel):
    """One session's working memory.

    ``version`` starts at 0 for a session never written and grows by one on every write
    (append, put, state or summary change). ``message_count`` counts every message held,
    even when ``messages`` is only the last-N window. ``ttl_seconds`` is the time left before
    the session expires (None when it does not exist or never expires).
    """

    scope: Scope
    messages: list[WorkingMessage] = Field(default_factory=list)
    message_count: int = 0
    #: Position of ``messages[0]`` in the whole session (for paging).
    first_index: int = 0
    state: JsonDict = Field(default_factory=dict)
    summary: str | None = None
    version: int = 0
    ttl_seconds: int | None = None
    updated_at: datetime | None = None


# --------------------------------------------------------------------------- manager I/O


class NewMessage(BaseModel):
    """A message handed to the manager; becomes an episode (and a working-memory message)."""

    role: Role = "user"
    content: str
    producer: str | None = None
    timestamp: datetime | None = None
    metadata: JsonDict = Field(default_factory=dict)
    #: When the episode expires (see :mod:`memmachine.memory.expiry`); or ``ttl_seconds``.
    expires_at: datetime | None = None
    ttl_seconds: int | None = None


class MemoryType(StrEnum):
    EPISODIC = "episodic"
    PROFILE = "profile"
    WORKING = "working"


class SearchResult(BaseModel):
    episodic: list[EpisodeHit] = Field(default_factory=list)
    profile: list[FactHit] = Field(default_factory=list)
    working: WorkingMemory | None = None


class ForgetReport(BaseModel):
    episodes_deleted: int = 0
    facts_deleted: int = 0
    sessions_deleted: int = 0


class EmbedderStatus(BaseModel):
    """Whether search is hybrid or lexical-only, and why."""

    enabled: bool
    model: str | None = None
    dimensions: int | None = None
    reason: str | None = None


class RerankerStatus(BaseModel):
    """Whether episode search results are reranked, by which model, or why not."""

    enabled: bool
    model: str | None = None
    reason: str | None = None


class LlmStatus(BaseModel):
    """Whether a language model serves background work (summaries, extraction), or why not."""

    enabled: bool
    model: str | None = None
    reason: str | None = None


class HealthReport(BaseModel):
    status: Literal["ok", "degraded"]
    mode: Literal["hybrid", "lexical-only"]
    embedder: EmbedderStatus
    stores: dict[str, StoreHealth]
    reranker: RerankerStatus = Field(
        default_factory=lambda: RerankerStatus(enabled=False, reason="no reranker configured")
    )
    llm: LlmStatus = Field(
        default_factory=lambda: LlmStatus(enabled=False, reason="no LLM configured")
    )


def expiry_of(metadata: dict[str, Any] | None) -> datetime | None:
    """When a memory with this metadata expires: its ``metadata["expires_at"]`` (ISO 8601),
    ``None`` when absent or not a timestamp (see :mod:`memmachine.memory.expiry`)."""
    value = (metadata or {}).get("expires_at")
    if not isinstance(value, str):
        return None
    try:
        return as_utc(datetime.fromisoformat(value))
    except ValueError:
        return None
