"""Request and response models of the memmachine REST API.

The server validates requests and serialises responses with these very classes, and the
client parses with them, so the two cannot drift.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
)

__all__ = [
    "MAX_COUNT",
    "MAX_JSON_DEPTH",
    "MAX_OFFSET",
    "AddMemoriesRequest",
    "AddMemoriesResponse",
    "AppendWorkingRequest",
    "Checked",
    "DeletedResponse",
    "EpisodeListResponse",
    "EpisodeOut",
    "ErrorBody",
    "ErrorDetail",
    "FactIn",
    "FactOut",
    "ForgetResponse",
    "HealthResponse",
    "HitExplanation",
    "HitStepOut",
    "MessageIn",
    "Offset",
    "ProfileResponse",
    "ProfileSearchRequest",
    "ProfileSearchResponse",
    "PutWorkingRequest",
    "RerankerOut",
    "ScopeFields",
    "SearchExplanation",
    "SearchRequest",
    "SearchResponse",
    "SetProfileRequest",
    "StageRunOut",
    "StoreHealthOut",
    "TopK",
    "WorkingMemoryOut",
    "WorkingMessageIn",
    "WorkingMessageOut",
    "checked",
]

ID_PATTERN = r"^[\w.@+\-=#~|]{1,128}$"
Id = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
Role = Literal["user", "assistant", "system", "tool"]
MemoryTypeName = Literal["episodic", "profile", "working"]
#: The name of a retrieval stage (``speaker_boost``, ``neighbourhood``...).
StageName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]

#: Deepest nesting of objects and lists accepted inside metadata, state, custom-type input
#: and tool arguments (a value at the top level of ``metadata`` is at depth 1).
MAX_JSON_DEPTH = 32
#: Largest ``offset`` a page may start at, and largest ``top_k`` / count a request may ask
#: for (before the server's own, usually smaller, limits).
MAX_OFFSET = 2**31 - 1
MAX_COUNT = 2**31 - 1
#: Integers inside JSON values must fit in 64 bits (what every store can hold).
_INT64 = (-(2**63), 2**63 - 1)

#: A page start (``offset``) / a number of results (``top_k``) a request may carry.
Offset = Annotated[int, Field(ge=0, le=MAX_OFFSET)]
TopK = Annotated[int, Field(ge=1, le=MAX_COUNT)]


def _all_memory_types() -> list[MemoryTypeName]:
    return ["episodic", "profile", "working"]


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character (\\u0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (\\ud800-\\udfff), which is not text"
    return None


def _where(path: str) -> str:
    return f" at {path}" if path else ""


def _shown(key: object) -> str:
    """A key as it can be quoted in a message: unprintable and unencodable characters
    escaped."""
    text = str(key)
    if text.isprintable() and _text_problem(text) is None:
        return text
    return text.encode("unicode_escape").decode("ascii")


def _check(value: Any, path: str, depth: int) -> None:
    """Raise ``ValueError`` naming the first part of ``value`` no store can keep as given:
    text with NUL or a lone surrogate, a timestamp outside the calendar once in UTC, a
    number that is not finite or an integer over 64 bits, nesting over MAX_JSON_DEPTH."""
    if isinstance(value, str):
        problem = _text_problem(value)
        if problem:
            raise ValueError(f"text{_where(path)} {problem}")
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise ValueError(f"integer{_where(path)} does not fit in 64 bits")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"number{_where(path)} is not finite")
    elif isinstance(value, datetime):
        try:
            if value.tzinfo is not None:
                value.astimezone(UTC)
        except OverflowError:
            raise ValueError(
                f"timestamp{_where(path)} is outside years 1-9999 once converted to UTC"
            ) from None
    elif isinstance(value, dict | list | tuple):
        if depth >= MAX_JSON_DEPTH:
            raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels{_where(path)}")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            inner = f"{path}.{_shown(key)}" if path else _shown(key)
            if isinstance(key, str):
                problem = _text_problem(key)
                if problem:
                    raise ValueError(f"key{_where(inner)} {problem}")
            if not isinstance(item, BaseModel):  # a model checks its own fields
                _check(item, inner, depth + 1)


def checked(value: Any) -> Any:
    """``value`` when every part of it can be stored as given (see :data:`Checked`);
    otherwise ``ValueError`` naming the part (pydantic turns it into a validation error of
    the field)."""
    _check(value, "", 0)
    return value


#: Annotation for input outside the request models (the MCP tools' arguments): text without
#: NUL characters or lone surrogates, timestamps that exist in UTC, finite numbers, 64-bit
#: integers and JSON nested at most MAX_JSON_DEPTH deep.
Checked = AfterValidator(checked)


class _Model(BaseModel):
    # In a response every field is sent, defaulted or not, so the JSON schema of a response
    # lists them all as required (a request schema still lists only those without default).
    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)


class _Request(_Model):
    """A request body: every field is :func:`checked`, so bad text, timestamps, numbers or
    nesting are refused here (a 422 naming the field) rather than by a store."""

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        return checked(value)


class ScopeFields(_Request):
    """Ids a request may carry in its body; missing ones fall back to X-*-ID headers."""

    user_id: Id | None = None
    session_id: Id | None = None
    agent_id: Id | None = None
    group_id: Id | None = None
    org_id: Id | None = None
    project_id: Id | None = None


# ----------------------------------------------------------------- episodic


__all__ += ["AttachmentIn"]


class AttachmentIn(_Request):
    """An image, recording or document with a message: exactly one of ``data_uri``
    (``data:image/png;base64,...``) or ``url`` (fetched only when the server allows it).
    It is stored, described (``caption``, a plain document's text, or the server's model)
    and indexed as an episode of its own linked to it (``metadata.attachment``)."""

    data_uri: str | None = None
    url: str | None = Field(default=None, max_length=4096)
    #: The MIME type, when ``data_uri`` or the server's answer does not give it.
    mime: str | None = Field(default=None, max_length=128)
    name: str | None = Field(default=None, max_length=256)
    caption: str | None = None


class AttachmentDownload(_Model):
    """The bytes of an attachment (``Client.download_attachment``) and its type and name."""

    content: bytes
    mime: str
    name: str | None = None


__all__ += ["AttachmentDownload"]


class MessageIn(_Request):
    role: Role = "user"
    content: str = Field(min_length=1)
    producer: str | None = Field(default=None, max_length=256)
    timestamp: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    #: The episode is never returned from this instant on (ISO 8601) and then removed from
    #: every store; or give ``ttl_seconds`` instead.
    expires_at: datetime | None = None
    ttl_seconds: int | None = Field(default=None, gt=0)
    attachments: list[AttachmentIn] = Field(default_factory=list)


class AddMemoriesRequest(ScopeFields):
    messages: list[MessageIn] = Field(min_length=1)
    #: Also append the messages to the session's working memory.
    working: bool = True


class AddMemoriesResponse(_Model):
    session_id: str
    #: One per message, in order (a message sent again: the id of its stored episode).
    episode_ids: list[str]
    repeated_ids: list[str] = Field(
        default=[],
        description="The ids in episode_ids whose message was already stored before this "
        "add (a message with its timestamp sent again without an Idempotency-Key): nothing "
        "was stored for them. Always empty for an add with an idempotency key, whose retry "
        "is the same add, not a repeat.",
    )


class EpisodeOut(_Model):
    id: str
    content: str
    role: Role
    producer: str | None
    timestamp: datetime
    sequence: int
    user_id: str
    session_id: str
    agent_id: str | None = None
    group_id: str | None = None
    org_id: str
    project_id: str
    metadata: dict[str, Any]
    created_at: datetime
    #: Fused relevance in [0, 1]; set on search results only.
    score: float | None = None
    #: 1-based rank in each retrieval signal that found it (search results only).
    ranks: dict[str, int] | None = None
    #: True when included as a neighbouring turn of a hit (search with expand_context).
    context: bool = False
    #: How the search's stages found and moved this hit (search with ``explain`` only).
    explain: HitExplanation | None = None


class EpisodeListResponse(_Model):
    episodes: list[EpisodeOut]
    total: int
    limit: int
    offset: int


class SearchRequest(ScopeFields):
    query: str = Field(min_length=1)
    top_k: TopK = 10
    types: list[MemoryTypeName] = Field(default_factory=_all_memory_types, min_length=1)
    #: Add up to this many neighbouring turns before and after each episodic hit.
    expand_context: int = Field(default=0, ge=0, le=10)
    #: How many of the session's newest working-memory messages to include.
    working_last_n: int = Field(default=20, ge=0, le=1000)
    #: Retrieval stages to skip in this search only (names as in ``explain.stages``; the
    #: candidates, fusion and ranking stages cannot be skipped). Nothing is kept.
    stages_off: list[StageName] = Field(
        default_factory=list,
        max_length=64,
        description="Retrieval stages to skip in this search only (names as listed by "
        "explain; candidates, fusion and ranking cannot be skipped). Nothing is kept.",
    )
    #: Also return how long each stage took and how the stages found and moved each hit.
    explain: bool = Field(
        default=False,
        description="Also return each retrieval stage's time (explain.stages) and, on each "
        "episode, the signals that found it and how each stage moved it (explain).",
    )


# ----------------------------------------------------------------- profile


class FactIn(_Request):
    tag: str = Field(min_length=1)
    feature: str = Field(min_length=1)
    value: str = Field(min_length=1)
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    #: Provenance: ``bootstrapped`` (seeded by the application, the default),
    #: ``user-explicit``, ``user-implicit`` or ``tool``; any other short label is kept.
    source: str = Field(default="bootstrapped", max_length=64)
    metadata: dict[str, Any] = Field(default_factory=dict)
    #: The fact is never returned from this instant on (ISO 8601) and then removed from
    #: every store; or give ``ttl_seconds`` instead.
    expires_at: datetime | None = None
    ttl_seconds: int | None = Field(default=None, gt=0)


class FactOut(_Model):
    id: str
    user_id: str
    tag: str
    feature: str
    value: str
    confidence: float
    #: ``confidence`` aged since the fact was last confirmed (what it is worth now).
    effective_confidence: float | None = None
    source: str
    source_session_id: str | None = None
    agent_id: str | None = None
    group_id: str | None = None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    #: Episodes the value was derived from.
    source_episode_ids: list[str] = Field(default_factory=list)
    #: Since when the current value holds.
    valid_from: datetime | None = None
    #: Relevance (search results only), higher is better.
    score: float | None = None


class SetProfileRequest(ScopeFields):
    facts: list[FactIn] = Field(min_length=1)


class ProfileResponse(_Model):
    facts: list[FactOut]


class ProfileSearchRequest(ScopeFields):
    query: str = Field(min_length=1)
    top_k: TopK = 10


class ProfileSearchResponse(_Model):
    facts: list[FactOut]


# ----------------------------------------------------------------- working


class WorkingMessageIn(_Request):
    role: Role = "user"
    content: str = Field(min_length=1)
    producer: str | None = Field(default=None, max_length=256)
    timestamp: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class WorkingMessageOut(_Model):
    role: Role
    content: str
    producer: str | None
    timestamp: datetime
    metadata: dict[str, Any]


class WorkingMemoryOut(_Model):
    user_id: str
    session_id: str
    messages: list[WorkingMessageOut]
    message_count: int
    #: Position of ``messages[0]`` in the whole session (for paging with offset/limit).
    first_index: int = 0
    state: dict[str, Any]
    summary: str | None
    #: 0 for a session never written; grows by one with every write.
    version: int
    ttl_seconds: int | None
    updated_at: datetime | None


class AppendWorkingRequest(ScopeFields):
    messages: list[WorkingMessageIn] = Field(min_length=1)


class PutWorkingRequest(ScopeFields):
    """Replace what is given; ``expected_version`` makes the write conditional (409 if stale)."""

    messages: list[WorkingMessageIn] | None = None
    state: dict[str, Any] | None = None
    summary: str | None = None
    expected_version: int | None = Field(default=None, ge=0, le=2**63 - 1)


class StageRunOut(_Model):
    """One retrieval stage of one search."""

    name: str
    #: False when the stage did not run: switched off by the request, or nothing to do.
    ran: bool
    #: True when the request's ``stages_off`` named it.
    switched_off: bool
    #: Seconds the stage took in this search (0 when it did not run).
    seconds: float
    #: Whether ``stages_off`` may name it (not the candidates, fusion and ranking).
    switchable: bool


class HitStepOut(_Model):
    """What one stage that ran did to a hit: rank (1-based; null when it was not a candidate
    then) and score before and after it, and the factor it boosted the hit by (null: none).
    Scores before the ``ranking`` stage are raw fused scores; after it, in [0, 1]."""

    stage: str
    rank_before: int | None
    rank_after: int | None
    score_before: float | None
    score_after: float | None
    boost: float | None = None


class HitExplanation(_Model):
    """How one hit was found and moved by the stages of its search."""

    #: The signals that found it: ``dense``, ``lexical``, ``neighbour``, ``expansion``, or
    #: the rank name of another stage.
    sources: list[str]
    #: The stage after which it stood among the candidates for good (one that cut it and
    #: one that brought it back, e.g. ``expansion``, both show in ``steps``).
    entered: str
    #: One step per stage that changed its rank, score or boost, in order.
    steps: list[HitStepOut]


class SearchExplanation(_Model):
    """The retrieval stages of one episodic search, in order, with their time
    (``embed_query`` first when the query was embedded for it)."""

    stages: list[StageRunOut]


class SearchResponse(_Model):
    episodic: list[EpisodeOut] = Field(default_factory=list)
    profile: list[FactOut] = Field(default_factory=list)
    working: WorkingMemoryOut | None = None
    #: With ``explain``: each stage of the episodic search and its time.
    explain: SearchExplanation | None = None


# ----------------------------------------------------------------- misc


class ForgetResponse(_Model):
    episodes_deleted: int
    facts_deleted: int
    sessions_deleted: int


class DeletedResponse(_Model):
    deleted: int


class StoreHealthOut(_Model):
    name: str
    kind: str
    status: Literal["ok", "down", "off"]
    detail: str | None = None
    version: str | None = None
    latency_ms: float | None = None


class EmbedderOut(_Model):
    enabled: bool
    model: str | None = None
    dimensions: int | None = None
    reason: str | None = None


class RerankerOut(_Model):
    enabled: bool
    model: str | None = None
    reason: str | None = None


class LlmOut(_Model):
    enabled: bool
    model: str | None = None
    reason: str | None = None


class HealthResponse(_Model):
    status: Literal["ok", "degraded"]
    version: str
    mode: Literal["hybrid", "lexical-only"]
    embedder: EmbedderOut
    stores: dict[str, StoreHealthOut]
    #: Whether episode search results are reranked (absent from servers that predate it).
    reranker: RerankerOut | None = None
    #: Whether a language model serves background work; off when absent.
    llm: LlmOut = Field(default_factory=lambda: LlmOut(enabled=False))


class ErrorDetail(_Model):
    # sent without the fields that are None
    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=False)

    code: str
    message: str
    field: str | None = None
    #: Every problem found, for validation errors that name more than one field.
    errors: list[dict[str, Any]] | None = None
    current_version: int | None = None


class ErrorBody(_Model):
    error: ErrorDetail


# ----------------------------------------------------------------- jobs

__all__ += ["JobListResponse", "JobOut", "JobPurgeResponse"]


class JobOut(_Model):
    """A background job (extraction, compaction...) and where it stands."""

    id: str
    kind: str
    status: Literal["queued", "running", "done", "dead"]
    user_id: str
    session_id: str | None = None
    agent_id: str | None = None
    group_id: str | None = None
    org_id: str
    project_id: str
    idempotency_key: str
    payload: dict[str, Any] = Field(default_factory=dict)
    attempts: int
    max_attempts: int
    #: The last failure (with a model's raw reply when it answered unusably).
    last_error: str | None = None
    created_at: datetime
    updated_at: datetime
    #: A queued job is not started before this time (retry backoff).
    available_at: datetime
    #: The ``X-Request-ID`` of the request that enqueued it (its log lines carry it too).
    request_id: str | None = None


class JobListResponse(_Model):
    jobs: list[JobOut]


class JobPurgeResponse(_Model):
    """How many of the user's dead jobs were deleted."""

    purged: int


# ----------------------------------------------------------------- memory prompt and tools

PromptFormatName = Literal["openai", "anthropic", "gemini"]


class MemoryPromptRequest(ScopeFields):
    """The user's new message; the prompt draws on the user's memory and, with a
    ``session_id``, on that session's summary and newest messages."""

    query: str = Field(min_length=1)
    max_tokens: int = Field(default=2000, ge=1, le=1_000_000)
    format: PromptFormatName = "openai"
    #: How many relevant episodes to consider.
    top_k: TopK = 10
    #: How many of the session's newest working-memory messages to consider.
    recent_messages: int = Field(default=20, ge=0, le=1000)


class MemoryPromptResponse(_Model):
    format: PromptFormatName
    #: Messages in the requested format (Gemini: the ``contents`` list).
    messages: list[dict[str, Any]]
    #: The system text on its own ("" when nothing from memory fits).
    system: str
    #: Request fields to merge into the provider call.
    body: dict[str, Any]
    fact_ids: list[str]
    episode_ids: list[str]
    #: The application's procedures included (``## Procedures that worked...``).
    procedure_ids: list[str] = Field(default_factory=list)
    message_count: int
    summary_included: bool
    #: Tokens of the prompt by ``tokenizer`` (its text plus 4 per message); never above
    #: max_tokens.
    token_count: int
    max_tokens: int
    #: What counted the tokens: ``estimate`` (a script-aware estimate that counts at or a
    #: little above OpenAI's tokenizers), ``tiktoken:<encoding>`` or ``tokenizers:<path>``
    #: (the server's ``MEMMACHINE_TOKENIZER_*`` settings).
    tokenizer: str = "estimate"
    dropped: dict[str, int]


class ToolFunctionCall(_Request):
    name: str = Field(min_length=1)
    #: The arguments as the model produced them: a JSON object in a string.
    arguments: str = ""

    @field_validator("arguments", mode="after")
    @classmethod
    def _storable_arguments(cls, value: str) -> str:
        """What the arguments hold is checked like any request field (text that is not
        JSON is left for the tool to refuse)."""
        try:
            parsed = json.loads(value)
        except RecursionError:
            raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
        except ValueError:
            return value
        checked(parsed)
        return value


class ToolCallIn(_Request):
    """One tool call as an OpenAI chat completion returns it."""

    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: ToolFunctionCall


class ToolCallRequest(ScopeFields):
    tool_call: ToolCallIn


class ToolMessageOut(_Model):
    """The message to append to the conversation after running a tool call."""

    role: Literal["tool"] = "tool"
    tool_call_id: str
    #: The tool's result as a JSON string.
    content: str


class ToolsResponse(_Model):
    #: Tool definitions in OpenAI function-calling format (strict-mode compatible).
    tools: list[dict[str, Any]]


__all__ += [
    "MemoryPromptRequest",
    "MemoryPromptResponse",
    "ToolCallIn",
    "ToolCallRequest",
    "ToolFunctionCall",
    "ToolMessageOut",
    "ToolsResponse",
]


# ----------------------------------------------------------------- compaction

__all__ += ["CompactResponse", "CompactionOut", "LlmOut"]


class CompactionOut(_Model):
    """What one compaction of a session's working memory did."""

    session_id: str
    #: False when the session was under its thresholds (or empty) and nothing changed.
    compacted: bool
    #: True when the older messages were folded into the summary by the language model;
    #: False for the keep-last-N truncation used without one.
    summarised: bool
    #: Messages kept verbatim / removed from working memory (episodes are never touched).
    kept: int
    removed: int
    #: Ids of the messages the new summary covers (the previous summary's included).
    covered_ids: list[str] = Field(default_factory=list)
    summary: str | None = None
    #: The session's working-memory version after the compaction.
    version: int
    tokens_before: int
    tokens_after: int
    reason: str


class CompactResponse(_Model):
    """``job`` when the compaction was queued; ``result`` when it ran inline (``wait``)."""

    job: JobOut | None = None
    result: CompactionOut | None = None


# ----------------------------------------------------------------- profile history


class FactVersionOut(_Model):
    """A closed version of a fact: superseded by a new value or invalidated."""

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
    #: When the value it held expires (the fact's expiry when it was closed); from then on
    #: the version is no longer returned.
    expires_at: datetime | None = None


class ProfileHistoryResponse(_Model):
    """``current`` is the fact holding now (``None`` when there is none); ``history`` its
    closed versions, oldest first."""

    current: FactOut | None = None
    history: list[FactVersionOut]


class InvalidateFactRequest(ScopeFields):
    """Close a fact by hand: it leaves the profile, its value stays in the history."""

    reason: str = Field(default="invalidated by the user", min_length=1, max_length=500)


__all__ += ["FactVersionOut", "InvalidateFactRequest", "ProfileHistoryResponse"]


# ----------------------------------------------------------------- API keys (admin)

KeyPermission = Literal["read", "write", "admin"]


def _read_write() -> list[KeyPermission]:
    return ["read", "write"]


class CreateKeyRequest(_Request):
    """A new API key. ``tenant`` may be left out by a tenant's own admin key (its tenant is
    used); ``MEMMACHINE_ADMIN_KEY`` must name it. ``rate_limit_per_minute``: unset = the
    server's default, 0 = unlimited."""

    tenant: Id | None = None
    name: str = Field(default="", max_length=200)
    permissions: list[KeyPermission] = Field(default_factory=_read_write, min_length=1)
    rate_limit_per_minute: int | None = Field(default=None, ge=0, le=MAX_COUNT)


class ApiKeyOut(_Model):
    """An API key as listed: never its secret."""

    id: str
    tenant: str
    name: str
    permissions: list[KeyPermission]
    rate_limit_per_minute: int | None = None
    created_at: datetime
    revoked_at: datetime | None = None


class CreatedKeyOut(ApiKeyOut):
    """A key just created; ``key`` (what goes into ``Authorization: Bearer``) is shown only
    this once."""

    key: str


class ApiKeyListResponse(_Model):
    keys: list[ApiKeyOut]


__all__ += ["ApiKeyListResponse", "ApiKeyOut", "CreateKeyRequest", "CreatedKeyOut"]


# ----------------------------------------------------------------- retention (admin)


class RetentionPolicyIn(_Request):
    """How long one tenant (or one org / project / agent of it) keeps each kind of memory;
    an age left out keeps that kind."""

    tenant: str = Field(min_length=1, max_length=128)
    org_id: str | None = Field(default=None, min_length=1, max_length=128)
    project_id: str | None = Field(default=None, min_length=1, max_length=128)
    agent_id: str | None = Field(default=None, min_length=1, max_length=128)
    episodes_max_age_days: float | None = Field(default=None, gt=0)
    #: Per tag; ``"*"`` = any tag.
    facts_max_age_days: dict[str, float] = Field(default_factory=dict)
    working_max_age_days: float | None = Field(default=None, gt=0)
    #: Done and dead jobs (records and payloads) older than this are removed.
    jobs_max_age_days: float | None = Field(default=None, gt=0)


class RetentionPoliciesRequest(_Request):
    policies: list[RetentionPolicyIn] = Field(max_length=1000)


class RetentionReportOut(_Model):
    """What one sweep removed: counts only, never contents."""

    started_at: datetime
    finished_at: datetime | None = None
    users: int
    episodes_expired: int
    episodes_aged_out: int
    facts_expired: int
    facts_aged_out: int
    working_sessions_aged_out: int
    working_messages_removed: int
    #: Facts and closed versions whose removed source episodes became an "expired" marker.
    fact_sources_expired: int = 0
    #: Closed fact versions erased because the value they held expired.
    fact_versions_expired: int = 0
    #: Records of custom memory types erased because they expired.
    custom_records_expired: int = 0
    #: Working-memory summaries dropped because they were folded from removed episodes.
    working_summaries_dropped: int = 0
    #: Done and dead jobs removed by a ``jobs_max_age_days`` policy.
    jobs_removed: int = 0


class RetentionPolicyOut(_Model):
    """A retention policy in force (see :class:`RetentionPolicyIn`)."""

    tenant: str
    org_id: str | None = None
    project_id: str | None = None
    agent_id: str | None = None
    episodes_max_age_days: float | None = None
    facts_max_age_days: dict[str, float] = Field(default_factory=dict)
    working_max_age_days: float | None = None
    jobs_max_age_days: float | None = None


class RetentionResponse(_Model):
    sweep_interval_seconds: float
    policies: list[RetentionPolicyOut]
    #: The last sweep (shown to ``MEMMACHINE_ADMIN_KEY`` only: it counts every tenant).
    last_sweep: RetentionReportOut | None = None


__all__ += [
    "RetentionPoliciesRequest",
    "RetentionPolicyIn",
    "RetentionPolicyOut",
    "RetentionReportOut",
    "RetentionResponse",
]


# ----------------------------------------------------------------- custom memory types


class MemoryTypeOut(_Model):
    """A registered custom memory type: what its two calls take, as JSON schemas, and which
    ids (besides the user) keep its records apart and must be sent."""

    name: str
    description: str
    store_schema: dict[str, Any]
    retrieve_schema: dict[str, Any]
    partition_by: list[str] = Field(default_factory=list)


class MemoryTypesResponse(_Model):
    types: list[MemoryTypeOut]


class CustomMemoryRequest(ScopeFields):
    """A call of a custom type: ``input`` is validated against the type's own model
    (``store_schema`` / ``retrieve_schema``); errors name ``input.<field>``."""

    input: dict[str, Any] = Field(default_factory=dict)


class CustomStoreRequest(CustomMemoryRequest):
    """A ``store`` call of a custom type; the records it writes expire at ``expires_at``
    (ISO 8601) or ``ttl_seconds`` from now (one or neither): never returned from then on,
    erased by the retention sweep."""

    expires_at: datetime | None = None
    ttl_seconds: int | None = Field(default=None, gt=0)


class CustomMemoryResponse(_Model):
    """What the type's ``store`` / ``retrieve`` returned, as JSON."""

    type: str
    result: Any = None


__all__ += [
    "CustomMemoryRequest",
    "CustomMemoryResponse",
    "CustomStoreRequest",
    "MemoryTypeOut",
    "MemoryTypesResponse",
]


# ----------------------------------------------------------------- inspection

__all__ += [
    "EpisodeNeighboursResponse",
    "ForgetPreviewOut",
    "JobCountsOut",
    "SessionListResponse",
    "SessionOut",
    "TimeBucketOut",
    "TimelineResponse",
    "UserListResponse",
    "UserOut",
    "WhoAmIResponse",
    "WorkingSessionOut",
]


class WhoAmIResponse(_Model):
    """Who the presented key (or, in open mode, no key) is and what it may do."""

    tenant: str
    #: ``None`` when no key was presented (the server is open).
    key_id: str | None = None
    can_read: bool
    can_write: bool
    is_admin: bool
    #: Whether this server refuses requests without a key.
    key_required: bool


class UserOut(_Model):
    """One user of a project and what each store holds for them."""

    user_id: str
    org_id: str
    project_id: str
    episodes: int
    #: Sessions holding episodes.
    sessions: int
    #: Current facts.
    facts: int
    #: Sessions whose working memory has not expired.
    working_sessions: int
    #: The newest write any store knows of for the user.
    last_active: datetime | None = None


class UserListResponse(_Model):
    users: list[UserOut]
    #: Pass as ``after`` for the next page; ``None`` on the last page.
    next_after: str | None = None


class SessionOut(_Model):
    """A session holding episodes."""

    session_id: str
    episodes: int
    first_at: datetime
    last_at: datetime
    updated_at: datetime


class WorkingSessionOut(_Model):
    """A session's working memory, without its messages."""

    session_id: str
    message_count: int
    version: int
    summary: str | None = None
    ttl_seconds: int | None = None
    updated_at: datetime | None = None


class SessionListResponse(_Model):
    #: The page of sessions holding episodes, most recently added to first.
    sessions: list[SessionOut]
    #: Every session of the user with live working memory, most recently written first.
    working: list[WorkingSessionOut]
    limit: int
    offset: int


class TimeBucketOut(_Model):
    start: datetime
    count: int


class TimelineResponse(_Model):
    bucket_seconds: int
    buckets: list[TimeBucketOut]


class ForgetPreviewOut(_Model):
    """What forgetting a user (or one of their sessions) would remove right now."""

    user_id: str
    session_id: str | None = None
    episodes: int
    facts: int
    #: Sessions holding episodes.
    sessions: int
    working_sessions: int


class JobCountsOut(_Model):
    queued: int
    running: int
    done: int
    dead: int


class EpisodeNeighboursResponse(_Model):
    """An episode and the episodes right before and after it in its session."""

    episode: EpisodeOut
    before: list[EpisodeOut]
    after: list[EpisodeOut]


# ----------------------------------------------------------------- procedural memory

__all__ += [
    "AppFields",
    "ProcedureHistoryResponse",
    "ProcedureHitOut",
    "ProcedureIn",
    "ProcedureListResponse",
    "ProcedureOut",
    "ProcedureSearchRequest",
    "ProcedureSearchResponse",
    "ProcedureUseRequest",
    "ProcedureVersionOut",
    "SessionOutcomeRequest",
    "SessionOutcomeResponse",
]


class AppFields(_Request):
    """Which application a procedure request is for (missing ids fall back to the query and
    the X-*-ID headers, then ``default``; no ``agent_id``: shared by the project's agents).
    Procedures belong to the application, never to a user."""

    org_id: Id | None = None
    project_id: Id | None = None
    agent_id: Id | None = None


class ProcedureIn(AppFields):
    """A procedure an application's agents can reuse: shared by every user of the
    application, so it must hold nothing about one user (PII is redacted; an instruction to
    the model is refused)."""

    goal: str = Field(min_length=1)
    steps: list[str] = Field(min_length=1)
    preconditions: list[str] = Field(default_factory=list)
    pitfalls: list[str] = Field(default_factory=list)
    confidence: float = Field(default=0.6, ge=0.0, le=1.0)
    metadata: dict[str, Any] = Field(default_factory=dict)
    #: Supersede this procedure (its version is kept in the history); without it a
    #: procedure of the same goal (same agent) is superseded.
    replaces: Id | None = None


class ProcedureOut(_Model):
    id: str
    org_id: str
    project_id: str
    agent_id: str | None = None
    goal: str
    steps: list[str]
    preconditions: list[str]
    pitfalls: list[str]
    confidence: float
    #: ``explicit`` (written through the API) or ``distilled`` (from a successful session).
    source: str
    #: The sessions the procedure was learnt from or confirmed by.
    source_session_ids: list[str]
    successes: int
    failures: int
    version: int
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class ProcedureListResponse(_Model):
    procedures: list[ProcedureOut]


class ProcedureVersionOut(_Model):
    goal: str
    steps: list[str]
    preconditions: list[str]
    pitfalls: list[str]
    confidence: float
    source: str
    source_session_ids: list[str]
    successes: int
    failures: int
    reason: str
    valid_from: datetime
    valid_to: datetime


class ProcedureHistoryResponse(_Model):
    current: ProcedureOut
    history: list[ProcedureVersionOut]


class ProcedureSearchRequest(AppFields):
    #: The task at hand, in words.
    query: str = Field(min_length=1)
    top_k: int = Field(default=5, ge=1, le=MAX_COUNT)


class ProcedureHitOut(_Model):
    procedure: ProcedureOut
    score: float


class ProcedureSearchResponse(_Model):
    hits: list[ProcedureHitOut]


class ProcedureUseRequest(AppFields):
    #: Whether reusing the procedure worked: raises (or lowers) its confidence.
    success: bool


class SessionOutcomeRequest(ScopeFields):
    outcome: Literal["success", "failure"]


class SessionOutcomeResponse(_Model):
    session_id: str
    outcome: Literal["success", "failure"]
    recorded_at: datetime
    #: The job distilling the session's procedures (a success with a language model and
    #: the job queue on), else ``None``.
    job_id: str | None = None
