"""The export document: its models, and the checks a document passes before anything of
it is written (see :mod:`memmachine.portability` for the format)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memmachine.errors import InvalidInputError
from memmachine.models import (
    Fact,
    Identifier,
    Role,
    Scope,
    as_utc,
)
from memmachine.ports.procedures import ProcedureSource
from memmachine.ports.state import STATE_NAME_PATTERN
from memmachine.safety import looks_like_injection

if TYPE_CHECKING:
    from memmachine.manager import MemoryManager

__all__ = [
    "BATCH",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "PAGE",
    "DocumentError",
    "ExportDocument",
    "ExportScope",
    "ExportedAttachment",
    "ExportedClosedFact",
    "ExportedCustomRecord",
    "ExportedCustomSpace",
    "ExportedEpisode",
    "ExportedFact",
    "ExportedFactVersion",
    "ExportedMessage",
    "ExportedProcedure",
    "ExportedProcedureVersion",
    "ExportedSession",
    "ExportedState",
    "Progress",
    "check_writable",
    "fact_pages",
    "no_progress",
    "parse_document",
]

FORMAT_NAME = "memmachine-export"
#: 2 added ``closed_facts`` (features whose every version is closed, e.g. invalidated) and
#: working memory of sessions that have no episodes; 3 added ``agent_state``,
#: ``custom_records``, ``attachments`` and (when asked for) ``procedures``. Versions 1 and 2
#: still import.
FORMAT_VERSION = 3

#: ``progress(phase, done, total)``: ``phase`` is ``"episodes"``, ``"facts"``,
#: ``"working"``, ``"agent_state"``, ``"custom_records"``, ``"attachments"`` or
#: ``"procedures"``; ``total`` is ``None`` when it is not known in advance.
Progress = Callable[[str, int, int | None], None]

#: Facts and episodes read per store call, and items written per manager call.
PAGE = 200
BATCH = 100


class DocumentError(InvalidInputError):
    """The document cannot be imported; ``field`` is the JSON path of the first problem."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}", field=path)
        self.path = path
        self.problem = problem


# --------------------------------------------------------------------------- the document


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Timestamped(_Strict):
    @field_validator("*", mode="after")
    @classmethod
    def _utc(cls, value: Any) -> Any:
        return as_utc(value) if isinstance(value, datetime) else value


class ExportScope(_Strict):
    """Whose memories these are."""

    tenant: Identifier = "default"
    org_id: Identifier = "default"
    project_id: Identifier = "default"
    user_id: Identifier

    def as_scope(self) -> Scope:
        return Scope(
            tenant=self.tenant,
            org_id=self.org_id,
            project_id=self.project_id,
            user_id=self.user_id,
        )


class ExportedEpisode(_Timestamped):
    """One episode; ``sequence`` is its position in its session."""

    id: Identifier
    session_id: Identifier
    agent_id: Identifier | None = None
    group_id: Identifier | None = None
    sequence: int = Field(ge=1)
    role: Role
    producer: str | None = None
    content: str
    timestamp: datetime
    metadata: dict[str, Any] = Field(default_factory=dict)


class ExportedFactVersion(_Timestamped):
    """A closed version of a fact: the value it had, its provenance, when and why it ended."""

    value: str
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    source: str = "explicit"
    source_session_id: str | None = None
    source_episode_ids: list[str] = Field(default_factory=list)
    valid_from: datetime
    valid_to: datetime
    reason: str
    #: The exporting store's id of the fact and when it recorded the version (version 2).
    fact_id: str | None = None
    recorded_at: datetime | None = None
    #: When the value it held expires (version 3); ``None``: never.
    expires_at: datetime | None = None


class ExportedFact(_Timestamped):
    """A current fact with its closed versions (oldest first). ``id`` and the times are the
    exporting store's; an import re-stamps them."""

    id: str | None = None
    tag: str
    feature: str
    value: str
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    source: str = "explicit"
    source_session_id: str | None = None
    source_episode_ids: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    agent_id: Identifier | None = None
    group_id: Identifier | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    valid_from: datetime | None = None
    history: list[ExportedFactVersion] = Field(default_factory=list)


class ExportedClosedFact(_Strict):
    """A (tag, feature) the user holds no current value for, only closed versions (oldest
    first): a fact that was invalidated, with what it was before."""

    tag: str
    feature: str
    history: list[ExportedFactVersion] = Field(min_length=1)


class ExportedMessage(_Timestamped):
    """One working-memory message."""

    role: Role
    content: str
    producer: str | None = None
    timestamp: datetime
    metadata: dict[str, Any] = Field(default_factory=dict)


class ExportedSession(_Strict):
    """One session's working memory."""

    session_id: Identifier
    messages: list[ExportedMessage] = Field(default_factory=list)
    state: dict[str, Any] = Field(default_factory=dict)
    summary: str | None = None


class ExportedState(_Strict):
    """One typed agent state record (version 3): the narrowing ids of its scope, its name
    and its envelope (``{"schema", "version", "data"}``) exactly as stored."""

    agent_id: Identifier | None = None
    session_id: Identifier | None = None
    group_id: Identifier | None = None
    name: str = Field(pattern=STATE_NAME_PATTERN)
    envelope: dict[str, Any]


class ExportedCustomRecord(_Strict):
    """One record of a custom memory type, as the type's record space holds it."""

    key: str = Field(min_length=1, max_length=256)
    data: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class ExportedCustomSpace(_Strict):
    """The records of one custom memory type in one scope (the type's partition ids),
    in the order they were first stored (version 3)."""

    type: str
    agent_id: Identifier | None = None
    session_id: Identifier | None = None
    group_id: Identifier | None = None
    records: list[ExportedCustomRecord] = Field(default_factory=list)


class ExportedAttachment(_Strict):
    """One attachment blob (version 3): its bytes in base64, their SHA-256 and size, and
    the ids of the episodes (in ``episodes``) that hold it."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=1)
    holders: list[Identifier] = Field(min_length=1)
    data: str


class _ExportedProcedureBody(_Timestamped):
    """What a procedure and each of its superseded versions hold."""

    goal: str
    steps: list[str]
    preconditions: list[str] = Field(default_factory=list)
    pitfalls: list[str] = Field(default_factory=list)
    confidence: float = Field(ge=0.0, le=1.0)
    source: str = "explicit"
    sources: list[ProcedureSource] = Field(default_factory=list)
    successes: int = Field(default=0, ge=0)
    failures: int = Field(default=0, ge=0)


class ExportedProcedureVersion(_ExportedProcedureBody):
    """A superseded version of a procedure, with the uses it had counted."""

    reason: str = "superseded"
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class ExportedProcedure(_ExportedProcedureBody):
    """One procedure of the application (version 3, only in an export that asked for
    them): its current version, use counts and superseded versions (oldest first)."""

    id: str | None = None
    agent_id: Identifier | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    history: list[ExportedProcedureVersion] = Field(default_factory=list)


class ExportDocument(_Timestamped):
    """A whole export, as :func:`export_user` writes it and :func:`parse_document` reads it."""

    format: Literal["memmachine-export"] = "memmachine-export"
    version: Literal[1, 2, 3] = 3
    exported_at: datetime
    scope: ExportScope
    episodes: list[ExportedEpisode] = Field(default_factory=list)
    facts: list[ExportedFact] = Field(default_factory=list)
    closed_facts: list[ExportedClosedFact] = Field(default_factory=list)
    working: list[ExportedSession] = Field(default_factory=list)
    agent_state: list[ExportedState] = Field(default_factory=list)
    custom_records: list[ExportedCustomSpace] = Field(default_factory=list)
    attachments: list[ExportedAttachment] = Field(default_factory=list)
    #: ``None``: the export did not ask for the application's procedures (not ``[]``: the
    #: application had none).
    procedures: list[ExportedProcedure] | None = None
    # Extension point: a new kind of memory a user owns (attachments, procedures...) adds
    # its own section here as a list of its own models with an empty default, bumps
    # FORMAT_VERSION, writes the section in export_user after "working" and restores it in
    # import_document after _import_working; older documents import with the section empty.


def parse_document(data: object) -> ExportDocument:
    """Validate a decoded JSON document whole and return it.

    Raises :class:`DocumentError` naming the JSON path of the first problem: not an object,
    another format, a newer version, a missing or mistyped field, an unknown field, an id
    that is not an identifier, or an episode id, fact (tag, feature) or working session
    given twice."""
    if not isinstance(data, Mapping):
        raise DocumentError("$", "the document must be a JSON object")
    if data.get("format") != FORMAT_NAME:
        raise DocumentError("$.format", f"not a memmachine export (expected {FORMAT_NAME!r})")
    version = data.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise DocumentError(
            "$.version",
            f"version {version} is newer than this memmachine reads ({FORMAT_VERSION})",
        )
    try:
        document = ExportDocument.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise DocumentError(_json_path(error["loc"]), error["msg"]) from None
    _check_unique(document)
    return document


def _json_path(loc: Sequence[int | str]) -> str:
    path = "$"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _check_unique(document: ExportDocument) -> None:
    seen: dict[object, int] = {}
    for index, episode in enumerate(document.episodes):
        first = seen.setdefault(episode.id, index)
        if first != index:
            raise DocumentError(
                f"$.episodes[{index}].id",
                f"episode id {episode.id!r} is also at $.episodes[{first}]",
            )
    seen = {}
    for index, fact in enumerate(document.facts):
        first = seen.setdefault((fact.tag, fact.feature), index)
        if first != index:
            raise DocumentError(
                f"$.facts[{index}]",
                f"fact {fact.tag!r}/{fact.feature!r} is also at $.facts[{first}]",
            )
    closed_seen: dict[object, int] = {}
    for index, closed in enumerate(document.closed_facts):
        key = (closed.tag, closed.feature)
        if key in seen:
            raise DocumentError(
                f"$.closed_facts[{index}]",
                f"fact {closed.tag!r}/{closed.feature!r} is also at $.facts[{seen[key]}]",
            )
        first = closed_seen.setdefault(key, index)
        if first != index:
            raise DocumentError(
                f"$.closed_facts[{index}]",
                f"fact {closed.tag!r}/{closed.feature!r} is also at $.closed_facts[{first}]",
            )
    seen = {}
    for index, session in enumerate(document.working):
        first = seen.setdefault(session.session_id, index)
        if first != index:
            raise DocumentError(
                f"$.working[{index}].session_id",
                f"session {session.session_id!r} is also at $.working[{first}]",
            )


def check_writable(manager: MemoryManager, document: ExportDocument) -> None:
    """What the manager would refuse, found before the first write: empty or over-long
    texts, and (with the injection guard on) fact values that read as instructions."""
    limits = manager.limits
    guard = manager.safety.block_injected_facts

    def text(path: str, value: str, limit: int) -> None:
        if not value.strip():
            raise DocumentError(path, "must not be empty")
        if len(value) > limit:
            raise DocumentError(path, f"{len(value)} characters; the limit is {limit}")

    for index, episode in enumerate(document.episodes):
        text(f"$.episodes[{index}].content", episode.content, limits.max_message_chars)
    checked: list[list[tuple[str, str]]] = []
    for index, fact in enumerate(document.facts):
        fields = [
            (f"$.facts[{index}].tag", fact.tag),
            (f"$.facts[{index}].feature", fact.feature),
            (f"$.facts[{index}].value", fact.value),
        ]
        fields += [
            (f"$.facts[{index}].history[{number}].value", old.value)
            for number, old in enumerate(fact.history)
        ]
        checked.append(fields)
    for index, closed in enumerate(document.closed_facts):
        checked.append(
            [
                (f"$.closed_facts[{index}].tag", closed.tag),
                (f"$.closed_facts[{index}].feature", closed.feature),
                *(
                    (f"$.closed_facts[{index}].history[{number}].value", old.value)
                    for number, old in enumerate(closed.history)
                ),
            ]
        )
    for fields in checked:
        for path, value in fields:
            text(path, value, limits.max_fact_chars)
            reason = looks_like_injection(value) if guard else None
            if reason is not None:
                raise DocumentError(
                    path,
                    f"reads as an instruction to the model ({reason}); "
                    "facts like this are not stored",
                )
    for index, session in enumerate(document.working):
        for number, message in enumerate(session.messages):
            text(
                f"$.working[{index}].messages[{number}].content",
                message.content,
                limits.max_message_chars,
            )
        if len(json.dumps(session.state)) > limits.max_state_bytes:
            raise DocumentError(
                f"$.working[{index}].state", f"larger than {limits.max_state_bytes} bytes"
            )
        if session.summary is not None and len(session.summary) > limits.max_message_chars:
            raise DocumentError(
                f"$.working[{index}].summary",
                f"longer than {limits.max_message_chars} characters",
            )


async def fact_pages(
    manager: MemoryManager, user: Scope, page_size: int
) -> AsyncIterator[list[Fact]]:
    """The user's current facts, a page of at most ``page_size`` at a time, in the manager's
    order (tag, feature); the last page is the first one shorter than ``page_size``."""
    offset = 0
    while True:
        page = await manager.list_facts(user, limit=page_size, offset=offset)
        yield page
        offset += len(page)
        if len(page) < page_size:
            return


def no_progress(phase: str, done: int, total: int | None) -> None:
    return None
