"""Core models → wire models."""

from __future__ import annotations

from dataclasses import asdict

from memmachine.memory.repeats import Added
from memmachine.models import (
    Episode,
    EpisodeHit,
    Fact,
    FactHit,
    FactVersion,
    HealthReport,
    NewMessage,
    Scope,
    WorkingMemory,
    WorkingMessage,
    utc_now,
)
from memmachine.pipeline.compaction import CompactionResult
from memmachine.ports.procedures import Procedure
from memmachine.retrieval.explain import HitTrace, StageControl
from memmachine_sdk import models as wire


def episode_out(
    episode: Episode, hit: EpisodeHit | None = None, trace: HitTrace | None = None
) -> wire.EpisodeOut:
    scope = episode.scope
    return wire.EpisodeOut(
        id=episode.id,
        content=episode.content,
        role=episode.role,
        producer=episode.producer,
        timestamp=episode.timestamp,
        sequence=episode.sequence,
        user_id=scope.user_id,
        session_id=scope.session_id or "",
        agent_id=scope.agent_id,
        group_id=scope.group_id,
        org_id=scope.org_id,
        project_id=scope.project_id,
        metadata=episode.metadata,
        created_at=episode.created_at,
        score=None if hit is None else round(hit.score, 6),
        ranks=None if hit is None else hit.ranks,
        context=False if hit is None else hit.context,
        explain=None if trace is None else wire.HitExplanation.model_validate(asdict(trace)),
    )


def search_explanation(control: StageControl) -> wire.SearchExplanation:
    """The stages of one explained search, in order, with their time."""
    return wire.SearchExplanation(
        stages=[wire.StageRunOut.model_validate(asdict(run)) for run in control.runs]
    )


def fact_out(fact: Fact, hit: FactHit | None = None) -> wire.FactOut:
    return wire.FactOut(
        id=fact.id,
        user_id=fact.scope.user_id,
        tag=fact.tag,
        feature=fact.feature,
        value=fact.value,
        confidence=fact.confidence,
        effective_confidence=fact.effective_confidence,
        source=fact.source,
        source_session_id=fact.source_session_id,
        agent_id=fact.scope.agent_id,
        group_id=fact.scope.group_id,
        metadata=fact.metadata,
        created_at=fact.created_at,
        updated_at=fact.updated_at,
        source_episode_ids=list(fact.source_episode_ids),
        valid_from=fact.valid_from,
        score=None if hit is None else round(hit.score, 6),
    )


def fact_version_out(version: FactVersion) -> wire.FactVersionOut:
    return wire.FactVersionOut.model_validate(version.model_dump())


def working_out(memory: WorkingMemory) -> wire.WorkingMemoryOut:
    return wire.WorkingMemoryOut(
        user_id=memory.scope.user_id,
        session_id=memory.scope.session_id or "",
        messages=[
            wire.WorkingMessageOut.model_validate(message.model_dump())
            for message in memory.messages
        ],
        message_count=memory.message_count,
        first_index=memory.first_index,
        state=memory.state,
        summary=memory.summary,
        version=memory.version,
        ttl_seconds=memory.ttl_seconds,
        updated_at=memory.updated_at,
    )


def added_out(scope: Scope, added: Added) -> wire.AddMemoriesResponse:
    """The answer to an add: its episodes' ids and which of them were already stored."""
    return wire.AddMemoriesResponse(
        session_id=scope.session_id or "",
        episode_ids=[episode.id for episode in added],
        repeated_ids=added.repeated_ids,
    )


def new_messages(messages: list[wire.MessageIn]) -> list[NewMessage]:
    return [NewMessage.model_validate(message.model_dump()) for message in messages]


def working_messages(messages: list[wire.WorkingMessageIn]) -> list[WorkingMessage]:
    now = utc_now()
    return [
        WorkingMessage.model_validate(
            {**message.model_dump(), "timestamp": message.timestamp or now}
        )
        for message in messages
    ]


def health_out(report: HealthReport, version: str) -> wire.HealthResponse:
    return wire.HealthResponse.model_validate({**report.model_dump(), "version": version})


def compaction_out(result: CompactionResult) -> wire.CompactionOut:
    return wire.CompactionOut.model_validate(result.model_dump())


def procedure_out(procedure: Procedure) -> wire.ProcedureOut:
    """A procedure as the API answers it: its sessions, never who they belonged to."""
    return wire.ProcedureOut(
        **procedure.model_dump(
            include=set(wire.ProcedureOut.model_fields) - {"source_session_ids"}
        ),
        source_session_ids=procedure.source_session_ids,
    )
