"""One user's memories as a versioned JSON document: export and import.

The document (``format`` ``"memmachine-export"``, ``version`` 1)::

    {"format": "memmachine-export", "version": 1, "exported_at": "...",
     "scope": {"tenant", "org_id", "project_id", "user_id"},
     "episodes": [{"id", "session_id", "agent_id", "group_id", "sequence", "role",
                   "producer", "content", "timestamp", "metadata"}, ...],
     "facts": [{"id", "tag", "feature", "value", "confidence", "source",
                "source_session_id", "source_episode_ids", "metadata", "agent_id",
                "group_id", "created_at", "updated_at", "valid_from",
                "history": [{"value", ..., "valid_from", "valid_to", "reason"}]}, ...],
     "working": [{"session_id", "messages", "state", "summary"}, ...]}

:func:`export_user` writes it piece by piece while paging through the stores, so a large
user never sits in memory whole. Episodes are oldest first; facts are ordered by (tag,
feature) with their closed versions oldest first; working memory is exported for every
session that has episodes (the working store cannot list sessions on its own).

:func:`parse_document` validates a whole document before anything is written and raises
:class:`DocumentError` naming the JSON path (``$.episodes[3].role``) of the first problem.
:func:`import_document` then checks it against the manager's limits and safety settings
(again before writing) and writes through the :class:`~memmachine.manager.MemoryManager`, so
PII redaction and the injection guard apply. Importing the same document twice stores
nothing twice: episodes keep their ids and an id the user already has is skipped; a fact
whose (tag, feature) already holds the same value is left alone; working memory is replaced.
Fact ids and the store's own times (``created_at``, ``updated_at``, ``valid_from``, the
history's ``valid_to``) are re-stamped on import; the history's values, provenance and
reasons are replayed in order for a (tag, feature) the target has never held.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memmachine.errors import InvalidInputError
from memmachine.models import (
    Fact,
    FactRecord,
    FactVersion,
    Identifier,
    NewMessage,
    Role,
    Scope,
    WorkingMessage,
    as_utc,
    utc_now,
)
from memmachine.safety import looks_like_injection

if TYPE_CHECKING:
    from memmachine.manager import MemoryManager

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "DocumentError",
    "ExportDocument",
    "ExportReport",
    "ExportScope",
    "ExportedEpisode",
    "ExportedFact",
    "ExportedFactVersion",
    "ExportedMessage",
    "ExportedSession",
    "ImportReport",
    "Progress",
    "export_user",
    "import_document",
    "parse_document",
]

FORMAT_NAME = "memmachine-export"
FORMAT_VERSION = 1

#: ``progress(phase, done, total)``: ``phase`` is ``"episodes"``, ``"facts"`` or
#: ``"working"``; ``total`` is ``None`` when it is not known in advance.
Progress = Callable[[str, int, int | None], None]

_PAGE = 200
_BATCH = 100


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


class ExportDocument(_Timestamped):
    """A whole export, as :func:`export_user` writes it and :func:`parse_document` reads it."""

    format: Literal["memmachine-export"] = "memmachine-export"
    version: Literal[1] = 1
    exported_at: datetime
    scope: ExportScope
    episodes: list[ExportedEpisode] = Field(default_factory=list)
    facts: list[ExportedFact] = Field(default_factory=list)
    working: list[ExportedSession] = Field(default_factory=list)


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
    seen = {}
    for index, session in enumerate(document.working):
        first = seen.setdefault(session.session_id, index)
        if first != index:
            raise DocumentError(
                f"$.working[{index}].session_id",
                f"session {session.session_id!r} is also at $.working[{first}]",
            )


def _check_writable(manager: MemoryManager, document: ExportDocument) -> None:
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


# --------------------------------------------------------------------------- export


@dataclass
class ExportReport:
    """What :func:`export_user` wrote."""

    episodes: int = 0
    facts: int = 0
    fact_versions: int = 0
    sessions: int = 0


async def export_user(
    manager: MemoryManager,
    scope: Scope,
    write: Callable[[str], object],
    *,
    progress: Progress | None = None,
    page_size: int = _PAGE,
) -> ExportReport:
    """Write the user's memories (``scope``'s tenant, org, project and user; narrowing ids
    are ignored) as one JSON document through ``write``, page by page."""
    user = scope.user_scope()
    report = ExportReport()
    tick = progress or _no_progress
    head = ExportDocument(
        exported_at=utc_now(),
        scope=ExportScope(
            tenant=user.tenant, org_id=user.org_id, project_id=user.project_id, user_id=user.user_id
        ),
    ).model_dump(mode="json", include={"format", "version", "exported_at", "scope"})
    write(json.dumps(head, ensure_ascii=False)[:-1])

    write(',\n"episodes": [')
    sessions: dict[str, None] = {}
    offset = 0
    while True:
        page, total = await manager.list_episodes(user, limit=page_size, offset=offset)
        for episode in page:
            session_id = episode.scope.session_id or ""
            sessions.setdefault(session_id, None)
            item = ExportedEpisode(
                id=episode.id,
                session_id=session_id,
                agent_id=episode.scope.agent_id,
                group_id=episode.scope.group_id,
                sequence=episode.sequence,
                role=episode.role,
                producer=episode.producer,
                content=episode.content,
                timestamp=episode.timestamp,
                metadata=episode.metadata,
            )
            write(_element(report.episodes, item))
            report.episodes += 1
        offset += len(page)
        tick("episodes", report.episodes, total)
        if len(page) < page_size:
            break
    write("\n],\n")

    write('"facts": [')
    async for facts in _fact_pages(manager, user, page_size):
        for fact in facts:
            _, history = await manager.fact_history(user, fact.tag, fact.feature)
            write(_element(report.facts, _exported_fact(fact, history)))
            report.facts += 1
            report.fact_versions += len(history)
        tick("facts", report.facts, None)
    write("\n],\n")

    write('"working": [')
    for number, session_id in enumerate(sessions, start=1):
        memory = await manager.get_working(user.for_session(session_id))
        if memory.version > 0:
            item_session = ExportedSession(
                session_id=session_id,
                messages=[
                    ExportedMessage.model_validate(message.model_dump())
                    for message in memory.messages
                ],
                state=memory.state,
                summary=memory.summary,
            )
            write(_element(report.sessions, item_session))
            report.sessions += 1
        tick("working", number, len(sessions))
    write("\n]}\n")
    return report


def _element(count: int, item: BaseModel) -> str:
    """``item`` as the next element of a JSON array that holds ``count`` elements so far."""
    return ("\n" if count == 0 else ",\n") + item.model_dump_json()


async def _fact_pages(
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


def _exported_fact(fact: Fact, history: Sequence[FactVersion]) -> ExportedFact:
    return ExportedFact(
        id=fact.id,
        tag=fact.tag,
        feature=fact.feature,
        value=fact.value,
        confidence=fact.confidence,
        source=fact.source,
        source_session_id=fact.source_session_id,
        source_episode_ids=list(fact.source_episode_ids),
        metadata=fact.metadata,
        agent_id=fact.scope.agent_id,
        group_id=fact.scope.group_id,
        created_at=fact.created_at,
        updated_at=fact.updated_at,
        valid_from=fact.valid_from,
        history=[
            ExportedFactVersion(
                value=old.value,
                confidence=old.confidence,
                source=old.source,
                source_session_id=old.source_session_id,
                source_episode_ids=list(old.source_episode_ids),
                valid_from=old.valid_from,
                valid_to=old.valid_to,
                reason=old.reason,
            )
            for old in history
        ],
    )


def _no_progress(phase: str, done: int, total: int | None) -> None:
    return None


# --------------------------------------------------------------------------- import


@dataclass
class ImportReport:
    """What :func:`import_document` stored and what it found already there."""

    episodes_added: int = 0
    episodes_present: int = 0
    facts_written: int = 0
    facts_unchanged: int = 0
    fact_versions_replayed: int = 0
    sessions: int = 0


async def import_document(
    manager: MemoryManager,
    document: ExportDocument,
    target: Scope | None = None,
    *,
    progress: Progress | None = None,
    batch_size: int = _BATCH,
) -> ImportReport:
    """Store ``document`` for ``target`` (its tenant, org, project and user; default the
    document's own scope) through the manager: episodes, then facts, then working memory.

    The document is first checked against the manager's limits and injection guard;
    :class:`DocumentError` is raised, naming the JSON path, before anything is written.
    Episodes are written in session order, in batches, without touching working memory or
    queueing extraction; an episode id the user already has is skipped."""
    _check_writable(manager, document)
    user = (target or document.scope.as_scope()).user_scope()
    tick = progress or _no_progress
    report = ImportReport()
    await _import_episodes(manager, document, user, report, tick, batch_size)
    await _import_facts(manager, document, user, report, tick, batch_size)
    await _import_working(manager, document, user, report, tick)
    return report


async def _import_episodes(
    manager: MemoryManager,
    document: ExportDocument,
    user: Scope,
    report: ImportReport,
    tick: Progress,
    batch_size: int,
) -> None:
    size = max(1, min(batch_size, manager.limits.max_batch_messages))
    total = len(document.episodes)
    ordered = sorted(document.episodes, key=lambda episode: (episode.session_id, episode.sequence))
    batches: list[list[ExportedEpisode]] = []
    for episode in ordered:
        last = batches[-1] if batches else None
        if (
            last is not None
            and len(last) < size
            and (last[0].session_id, last[0].agent_id, last[0].group_id)
            == (episode.session_id, episode.agent_id, episode.group_id)
        ):
            last.append(episode)
        else:
            batches.append([episode])
    done = 0
    tick("episodes", 0, total)
    for batch in batches:
        found = await asyncio.gather(
            *(manager.episodes.get_episode(user, episode.id) for episode in batch)
        )
        new = [episode for episode, there in zip(batch, found, strict=True) if there is None]
        report.episodes_present += len(batch) - len(new)
        if new:
            head = new[0]
            scope = user.model_copy(
                update={
                    "session_id": head.session_id,
                    "agent_id": head.agent_id,
                    "group_id": head.group_id,
                }
            )
            stored = await manager.add_messages(
                scope,
                [
                    NewMessage(
                        role=episode.role,
                        content=episode.content,
                        producer=episode.producer,
                        timestamp=episode.timestamp,
                        metadata=episode.metadata,
                    )
                    for episode in new
                ],
                working=False,
                ids=[episode.id for episode in new],
                extract=False,
            )
            report.episodes_added += len(stored)
        done += len(batch)
        tick("episodes", done, total)


async def _import_facts(
    manager: MemoryManager,
    document: ExportDocument,
    user: Scope,
    report: ImportReport,
    tick: Progress,
    batch_size: int,
) -> None:
    current: dict[tuple[str, str], Fact] = {}
    async for page in _fact_pages(manager, user, _PAGE):
        current.update({(fact.tag, fact.feature): fact for fact in page})
    size = max(1, min(batch_size, manager.limits.max_facts_per_request))
    total = len(document.facts)
    pending: dict[tuple[str | None, str | None], list[FactRecord]] = {}
    tick("facts", 0, total)

    async def flush(key: tuple[str | None, str | None]) -> None:
        records = pending.pop(key, [])
        if records:
            scope = user.model_copy(update={"agent_id": key[0], "group_id": key[1]})
            await manager.set_facts(scope, records)
            report.facts_written += len(records)

    for done, fact in enumerate(document.facts, start=1):
        held = current.get((fact.tag, fact.feature))
        key = (fact.agent_id, fact.group_id)
        if held is not None and held.value == fact.value:
            report.facts_unchanged += 1
        elif held is None and fact.history and not await _has_history(manager, user, fact):
            await _replay_history(manager, user.model_copy(update=_ids(key)), fact, report)
            report.facts_written += 1
        else:
            pending.setdefault(key, []).append(_fact_record(fact))
            if len(pending[key]) >= size:
                await flush(key)
        tick("facts", done, total)
    for key in list(pending):
        await flush(key)


def _ids(key: tuple[str | None, str | None]) -> dict[str, str | None]:
    return {"agent_id": key[0], "group_id": key[1]}


async def _has_history(manager: MemoryManager, user: Scope, fact: ExportedFact) -> bool:
    _, history = await manager.fact_history(user, fact.tag, fact.feature)
    return bool(history)


async def _replay_history(
    manager: MemoryManager, scope: Scope, fact: ExportedFact, report: ImportReport
) -> None:
    """Write the closed versions oldest first (a version closed for another reason than
    being superseded is invalidated with that reason), then the current value."""
    for old in fact.history:
        record = FactRecord(
            tag=fact.tag,
            feature=fact.feature,
            value=old.value,
            confidence=old.confidence,
            source=old.source,
            source_session_id=old.source_session_id,
            source_episode_ids=list(old.source_episode_ids),
        )
        (stored,) = await manager.set_facts(scope, [record])
        if old.reason != "superseded":
            await manager.apply_facts(scope, [], invalidate=[stored.id], reason=old.reason)
        report.fact_versions_replayed += 1
    await manager.set_facts(scope, [_fact_record(fact)])


def _fact_record(fact: ExportedFact) -> FactRecord:
    return FactRecord(
        tag=fact.tag,
        feature=fact.feature,
        value=fact.value,
        confidence=fact.confidence,
        source=fact.source,
        source_session_id=fact.source_session_id,
        source_episode_ids=list(fact.source_episode_ids),
        metadata=fact.metadata,
    )


async def _import_working(
    manager: MemoryManager,
    document: ExportDocument,
    user: Scope,
    report: ImportReport,
    tick: Progress,
) -> None:
    """Replace each session's working memory with the exported one (in chunks within the
    batch limit)."""
    size = manager.limits.max_batch_messages
    total = len(document.working)
    tick("working", 0, total)
    for number, session in enumerate(document.working, start=1):
        scope = user.for_session(session.session_id)
        messages = [WorkingMessage.model_validate(m.model_dump()) for m in session.messages]
        await manager.put_working(
            scope, messages=messages[:size] or None, state=session.state, summary=session.summary
        )
        for start in range(size, len(messages), size):
            await manager.append_working(scope, messages[start : start + size])
        report.sessions += 1
        tick("working", number, total)
