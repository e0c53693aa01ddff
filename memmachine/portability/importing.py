"""Importing a document through the manager's write path, checked whole before the first
write."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memmachine.models import (
    Fact,
    FactRecord,
    FactTimes,
    NewMessage,
    Scope,
    WorkingMessage,
)

if TYPE_CHECKING:
    from memmachine.manager import MemoryManager
    from memmachine.ports import StateBackend

from memmachine.portability.document import (
    BATCH,
    PAGE,
    ExportDocument,
    ExportedEpisode,
    ExportedFact,
    ExportedFactVersion,
    Progress,
    check_writable,
    fact_pages,
    no_progress,
)
from memmachine.portability.sections import check_sections, import_sections

__all__ = ["ImportReport", "import_document"]


@dataclass
class ImportReport:
    """What :func:`import_document` stored and what it found already there."""

    episodes_added: int = 0
    episodes_present: int = 0
    facts_written: int = 0
    facts_unchanged: int = 0
    fact_versions_replayed: int = 0
    sessions: int = 0
    #: Typed states, custom-type record spaces, blobs and procedures written (what was
    #: already there as the document has it is left alone and not counted).
    agent_states: int = 0
    custom_spaces: int = 0
    attachments: int = 0
    procedures: int = 0


async def import_document(
    manager: MemoryManager,
    document: ExportDocument,
    target: Scope | None = None,
    *,
    progress: Progress | None = None,
    batch_size: int = BATCH,
    state: StateBackend | None = None,
) -> ImportReport:
    """Store ``document`` for ``target`` (its tenant, org, project and user; default the
    document's own scope) through the manager: episodes, then facts, then working memory.

    The document is first checked against the manager's limits and injection guard;
    :class:`DocumentError` is raised, naming the JSON path, before anything is written.
    Episodes are written in session order, in batches, without touching working memory or
    queueing extraction; an episode id the user already has is skipped. Then the version 3
    sections (:mod:`memmachine.portability.sections`); typed agent state goes to ``state``,
    required when the document holds some."""
    check_writable(manager, document)
    decoded = check_sections(manager, document, state)
    user = (target or document.scope.as_scope()).user_scope()
    tick = progress or no_progress
    report = ImportReport()
    await _import_episodes(manager, document, user, report, tick, batch_size)
    await _import_facts(manager, document, user, report, tick, batch_size)
    await _import_closed_facts(manager, document, user, report)
    await _import_working(manager, document, user, report, tick)
    counts = await import_sections(manager, document, user, state, decoded)
    report.agent_states, report.custom_spaces = counts["agent_state"], counts["custom_records"]
    report.attachments, report.procedures = counts["attachments"], counts["procedures"]
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
    async for page in fact_pages(manager, user, PAGE):
        current.update({(fact.tag, fact.feature): fact for fact in page})
    size = max(1, min(batch_size, manager.limits.max_facts_per_request))
    total = len(document.facts)
    pending: dict[tuple[str | None, str | None], list[FactRecord]] = {}
    #: Facts new to the target: they get the exporting store's ids and times once written.
    fresh: list[ExportedFact] = []
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
            fresh.append(fact)
        else:
            if held is None:
                fresh.append(fact)  # times restored only if the history matches (see port)
            pending.setdefault(key, []).append(_fact_record(fact))
            if len(pending[key]) >= size:
                await flush(key)
        tick("facts", done, total)
    for key in list(pending):
        await flush(key)
    for fact in fresh:
        await _restore_times(manager, user, fact.tag, fact.feature, fact, fact.history)


def _ids(key: tuple[str | None, str | None]) -> dict[str, str | None]:
    return {"agent_id": key[0], "group_id": key[1]}


async def _has_history(manager: MemoryManager, user: Scope, fact: ExportedFact) -> bool:
    _, history = await manager.fact_history(user, fact.tag, fact.feature)
    return bool(history)


async def _import_closed_facts(
    manager: MemoryManager, document: ExportDocument, user: Scope, report: ImportReport
) -> None:
    """Replay the versions of each fact that has no current value, for a (tag, feature) the
    target holds neither a current fact nor a history of."""
    for closed in document.closed_facts:
        held = await manager.list_facts(user, tag=closed.tag, feature=closed.feature, limit=1)
        if held or await manager.profile.fact_history(user, closed.tag, closed.feature):
            report.facts_unchanged += 1
            continue
        await _replay_versions(manager, user, closed.tag, closed.feature, closed.history, report)
        await _restore_times(manager, user, closed.tag, closed.feature, None, closed.history)


async def _replay_history(
    manager: MemoryManager, scope: Scope, fact: ExportedFact, report: ImportReport
) -> None:
    """Write the closed versions oldest first (a version closed for another reason than
    being superseded is invalidated with that reason), then the current value."""
    await _replay_versions(manager, scope, fact.tag, fact.feature, fact.history, report)
    await manager.set_facts(scope, [_fact_record(fact)])


async def _restore_times(
    manager: MemoryManager,
    user: Scope,
    tag: str,
    feature: str,
    fact: ExportedFact | None,
    history: Sequence[ExportedFactVersion],
) -> None:
    """Give a (tag, feature) just written the exporting store's ids and times."""
    current = None
    if fact is not None:
        current = FactTimes(
            id=fact.id,
            created_at=fact.created_at,
            updated_at=fact.updated_at,
            valid_from=fact.valid_from,
        )
    versions = [
        FactTimes(
            id=old.fact_id,
            valid_from=old.valid_from,
            valid_to=old.valid_to,
            recorded_at=old.recorded_at,
        )
        for old in history
    ]
    await manager.profile.restore_fact_times(user, tag, feature, current, versions)


async def _replay_versions(
    manager: MemoryManager,
    scope: Scope,
    tag: str,
    feature: str,
    history: Sequence[ExportedFactVersion],
    report: ImportReport,
) -> None:
    now = manager.profile_service.clock.now()
    for old in history:
        if old.expires_at is not None and old.expires_at <= now:
            continue  # expired since the export: a read would hide it, the sweep erase it
        record = FactRecord(
            tag=tag,
            feature=feature,
            value=old.value,
            confidence=old.confidence,
            source=old.source,
            source_session_id=old.source_session_id,
            source_episode_ids=list(old.source_episode_ids),
            expires_at=old.expires_at,
        )
        (stored,) = await manager.set_facts(scope, [record])
        if old.reason != "superseded":
            await manager.apply_facts(scope, [], invalidate=[stored.id], reason=old.reason)
        report.fact_versions_replayed += 1


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
