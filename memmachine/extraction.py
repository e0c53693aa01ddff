"""Profile extraction: facts about a user from their conversations, consolidated with the
facts already stored.

:func:`extract_from_episodes` is what an ``extract`` job runs: it reads the job's episodes
(skipping those marked ``metadata["suspected_injection"]``), asks the language model for
facts under the configured topics (:func:`extract_facts`), asks it what each candidate means
for the user's stored facts (:func:`consolidate`: CREATE, UPDATE, INVALIDATE or NONE) and
applies the decisions in one store transaction (:func:`apply_consolidation`). Every stored
fact records its provenance: ``source`` ``user-explicit`` or ``user-implicit`` and the
episode ids it came from. A replaced or invalidated value stays readable in the fact's
history; a candidate equal to a stored fact is a corroboration, never a second fact.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from memmachine.models import Episode, Fact, FactRecord, Scope
from memmachine.ports import LanguageModel
from memmachine.prompts import (
    CandidateFact,
    ExistingFact,
    PromptMessage,
    decide_consolidation,
    extract_candidates,
)
from memmachine.safety import looks_like_injection

if TYPE_CHECKING:
    from memmachine.manager import MemoryManager

__all__ = [
    "ExtractedFact",
    "ExtractionResult",
    "FactDecision",
    "apply_consolidation",
    "consolidate",
    "extract_facts",
    "extract_from_episodes",
]

log = logging.getLogger(__name__)

#: A fact found in a conversation: tag, feature, value, kind, confidence and episode ids.
ExtractedFact = CandidateFact

#: Stored facts shown to the model at most (the user's first ones by tag and feature).
MAX_EXISTING_FACTS = 200
#: Why a fact invalidated by extraction left the profile.
INVALIDATED_REASON = "contradicted by a later conversation"


class FactDecision(BaseModel):
    """What to do with one extracted fact; ``fact_id`` names the stored fact for UPDATE and
    INVALIDATE."""

    fact: ExtractedFact
    action: Literal["CREATE", "UPDATE", "INVALIDATE", "NONE"]
    fact_id: str | None = None


class ExtractionResult(BaseModel):
    """What one extraction did."""

    episodes: int
    extracted: int
    created: int = 0
    updated: int = 0
    invalidated: int = 0
    unchanged: int = 0


def _existing(facts: Sequence[Fact]) -> list[ExistingFact]:
    return [ExistingFact(id=f.id, tag=f.tag, feature=f.feature, value=f.value) for f in facts]


async def extract_facts(
    model: LanguageModel,
    messages: Sequence[PromptMessage],
    topics: Sequence[str],
    existing_facts: Sequence[Fact],
) -> list[ExtractedFact]:
    """Facts about the user in ``messages`` under ``topics``, each citing its messages."""
    return await extract_candidates(model, messages, topics, _existing(existing_facts))


async def consolidate(
    model: LanguageModel, candidates: Sequence[ExtractedFact], existing_facts: Sequence[Fact]
) -> list[FactDecision]:
    """One decision per candidate, in order (see
    :func:`memmachine.prompts.decide_consolidation`)."""
    decisions = await decide_consolidation(model, candidates, _existing(existing_facts))
    return [
        FactDecision(fact=candidates[d.index], action=d.action, fact_id=d.fact_id)
        for d in decisions
    ]


async def apply_consolidation(
    manager: MemoryManager, scope: Scope, decisions: Sequence[FactDecision]
) -> ExtractionResult:
    """Apply ``decisions`` to the user's profile in one store transaction.

    CREATE stores the fact under its own (tag, feature); UPDATE stores its value under the
    (tag, feature) of the named fact (the old value goes to the history); INVALIDATE closes
    the named fact; NONE changes nothing. With ``safety.block_injected_facts`` a fact that
    reads as an instruction to the model is dropped instead of failing the batch."""
    user = scope.user_scope()
    targets: dict[str, Fact] = {}
    for decision in decisions:
        if decision.action == "UPDATE" and decision.fact_id is not None:
            stored = await manager.profile.get_fact(user, decision.fact_id)
            if stored is not None:
                targets[stored.id] = stored
    records: list[FactRecord] = []
    invalidate: list[str] = []
    result = ExtractionResult(episodes=0, extracted=len(decisions))
    block = manager.safety.block_injected_facts
    for decision in decisions:
        found = decision.fact
        tag, feature = found.tag, found.feature
        if decision.action in ("CREATE", "UPDATE") and block and _injected(found):
            log.warning("extracted fact %s/%s reads as an instruction; dropped", tag, feature)
            result.unchanged += 1
            continue
        if decision.action == "NONE":
            result.unchanged += 1
            continue
        if decision.action == "INVALIDATE":
            if decision.fact_id is not None:
                invalidate.append(decision.fact_id)
                result.invalidated += 1
            continue
        if decision.action == "UPDATE" and decision.fact_id in targets:
            target = targets[decision.fact_id]
            tag, feature = target.tag, target.feature
            result.updated += 1
        else:
            result.created += 1
        records.append(
            FactRecord(
                tag=tag,
                feature=feature,
                value=found.value,
                confidence=found.confidence,
                source=f"user-{found.kind}",
                source_session_id=scope.session_id,
                source_episode_ids=list(found.episode_ids),
            )
        )
    if records or invalidate:
        await manager.apply_facts(scope, records, invalidate=invalidate, reason=INVALIDATED_REASON)
    return result


def _injected(fact: ExtractedFact) -> bool:
    return any(looks_like_injection(text) for text in (fact.tag, fact.feature, fact.value))


def _usable(episode: Episode | None) -> bool:
    return episode is not None and not episode.metadata.get("suspected_injection")


async def extract_from_episodes(
    manager: MemoryManager, scope: Scope, episode_ids: Sequence[str]
) -> ExtractionResult:
    """Extract facts from the episodes ``episode_ids`` of ``scope`` and consolidate them.

    A no-op without a language model or usable episodes. Raises what the model raises."""
    model = manager.language_model
    user = scope.user_scope()
    episodes = [await manager.episodes.get_episode(user, episode_id) for episode_id in episode_ids]
    usable = [episode for episode in episodes if episode is not None and _usable(episode)]
    if model is None or not usable:
        return ExtractionResult(episodes=len(usable), extracted=0)
    messages = [
        PromptMessage(id=e.id, role=e.role, content=e.content, producer=e.producer) for e in usable
    ]
    existing = await manager.profile.list_facts(user, limit=MAX_EXISTING_FACTS)
    candidates = await extract_facts(
        model, messages, manager.extraction.all_topics, existing_facts=existing
    )
    decisions = await consolidate(model, candidates, existing)
    result = await apply_consolidation(manager, scope, decisions)
    return result.model_copy(update={"episodes": len(usable)})
