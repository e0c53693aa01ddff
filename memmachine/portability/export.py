"""Exporting one user's memories as a document, written piece by piece while paging through
the stores."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel

from memmachine.memory.expiry import live_versions
from memmachine.models import (
    Fact,
    FactVersion,
    Scope,
    utc_now,
)

if TYPE_CHECKING:
    from memmachine.manager import MemoryManager
    from memmachine.ports import StateBackend

from memmachine.portability.document import (
    PAGE,
    ExportDocument,
    ExportedClosedFact,
    ExportedEpisode,
    ExportedFact,
    ExportedFactVersion,
    ExportedMessage,
    ExportedSession,
    ExportScope,
    Progress,
    fact_pages,
    no_progress,
)
from memmachine.portability.sections import attachment_holder, write_sections

__all__ = ["ExportReport", "export_user"]


@dataclass
class ExportReport:
    """What :func:`export_user` wrote."""

    episodes: int = 0
    facts: int = 0
    fact_versions: int = 0
    closed_facts: int = 0
    sessions: int = 0
    agent_states: int = 0
    custom_spaces: int = 0
    attachments: int = 0
    #: ``None`` when the export did not ask for the application's procedures.
    procedures: int | None = None


async def export_user(
    manager: MemoryManager,
    scope: Scope,
    write: Callable[[str], object],
    *,
    progress: Progress | None = None,
    page_size: int = PAGE,
    state: StateBackend | None = None,
    procedures: bool = False,
) -> ExportReport:
    """Write the user's memories (``scope``'s tenant, org, project and user; narrowing ids
    are ignored) as one JSON document through ``write``, page by page: with ``state`` the
    typed agent state kept there, and with ``procedures`` the application's procedures
    (see :mod:`memmachine.portability.sections`)."""
    user = scope.user_scope()
    report = ExportReport()
    tick = progress or no_progress
    head = ExportDocument(
        exported_at=utc_now(),
        scope=ExportScope(
            tenant=user.tenant, org_id=user.org_id, project_id=user.project_id, user_id=user.user_id
        ),
    ).model_dump(mode="json", include={"format", "version", "exported_at", "scope"})
    write(json.dumps(head, ensure_ascii=False)[:-1])

    write(',\n"episodes": [')
    sessions: dict[str, None] = {}
    blobs: dict[str, list[str]] = {}
    offset = 0
    while True:
        page, total = await manager.list_episodes(user, limit=page_size, offset=offset)
        for episode in page:
            session_id = episode.scope.session_id or ""
            sessions.setdefault(session_id, None)
            attachment_holder(episode, blobs)
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
    current: set[tuple[str, str]] = set()
    async for facts in fact_pages(manager, user, page_size):
        for fact in facts:
            current.add((fact.tag, fact.feature))
            _, history = await manager.fact_history(user, fact.tag, fact.feature)
            write(_element(report.facts, _exported_fact(fact, history)))
            report.facts += 1
            report.fact_versions += len(history)
        tick("facts", report.facts, None)
    write("\n],\n")

    write('"closed_facts": [')
    closed: dict[tuple[str, str], list[FactVersion]] = {}
    stored = await manager.profile.list_fact_versions(user)
    for version in live_versions(stored, manager.profile_service.clock.now()):
        closed.setdefault((version.tag, version.feature), []).append(version)
    for (tag, feature), versions in closed.items():
        if (tag, feature) in current:
            continue  # exported with its current fact
        item_closed = ExportedClosedFact(
            tag=tag, feature=feature, history=[_exported_version(old) for old in versions]
        )
        write(_element(report.closed_facts, item_closed))
        report.closed_facts += 1
        report.fact_versions += len(versions)
    write("\n],\n")

    # Sessions with live working memory but no episodes (e.g. written with working only).
    for memory in await manager.working.list_sessions(user):
        sessions.setdefault(memory.scope.session_id or "", None)

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
    write("\n]")
    counts = await write_sections(manager, user, write, blobs, state=state, procedures=procedures)
    report.agent_states, report.custom_spaces = counts["agent_state"], counts["custom_records"]
    report.attachments, report.procedures = counts["attachments"], counts.get("procedures")
    write("}\n")
    return report


def _element(count: int, item: BaseModel) -> str:
    """``item`` as the next element of a JSON array that holds ``count`` elements so far."""
    return ("\n" if count == 0 else ",\n") + item.model_dump_json()


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
        history=[_exported_version(old) for old in history],
    )


def _exported_version(old: FactVersion) -> ExportedFactVersion:
    return ExportedFactVersion(
        value=old.value,
        confidence=old.confidence,
        source=old.source,
        source_session_id=old.source_session_id,
        source_episode_ids=list(old.source_episode_ids),
        valid_from=old.valid_from,
        valid_to=old.valid_to,
        reason=old.reason,
        fact_id=old.fact_id,
        recorded_at=old.recorded_at,
        expires_at=old.expires_at,
    )
