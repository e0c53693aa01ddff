"""Profile extraction: facts about a user from their conversations, consolidated with the
facts already stored.

:func:`extract_from_episodes` is what an ``extract`` job runs: it reads the job's episodes
(skipping those marked ``metadata["suspected_injection"]``), asks the language model for
facts under the configured topics (:func:`extract_facts`), asks it what each candidate means
for the similar facts already stored (:func:`related_facts`, :func:`consolidate`: CREATE,
UPDATE, INVALIDATE or NONE) and applies the decisions in one store transaction
(:func:`apply_consolidation`). Every stored fact records its provenance: ``source``
``user-explicit`` or ``user-implicit`` and the episode ids it came from. A replaced or
invalidated value stays readable in the fact's history; a candidate equal to a stored fact
is a corroboration, never a second fact, and raises its confidence; a weaker contradiction
lowers it (see :mod:`memmachine.confidence`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from memmachine.confidence import contradicted, corroborated, effective, supersedes
from memmachine.models import Episode, ExtractionTopic, Fact, FactRecord, Scope, utc_now
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
    "related_facts",
]

log = logging.getLogger(__name__)

#: A fact found in a conversation: tag, feature, value, kind, confidence and episode ids.
ExtractedFact = CandidateFact

#: Stored facts shown to the model at most (the most similar to what it is looking at).
MAX_EXISTING_FACTS = 60
#: Similar stored facts looked up per message or candidate.
FACTS_PER_TEXT = 8
#: ``metadata["via"]`` of the episodes the ``remember`` tool writes.
REMEMBER_TOOL_MARK = "remember"
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
    #: Candidates equal to a stored fact: its confidence rose.
    corroborated: int = 0
    #: Weaker candidates with another value: the stored fact's confidence fell.
    weakened: int = 0
    invalidated: int = 0
    unchanged: int = 0


def _existing(facts: Sequence[Fact]) -> list[ExistingFact]:
    return [ExistingFact(id=f.id, tag=f.tag, feature=f.feature, value=f.value) for f in facts]


async def extract_facts(
    model: LanguageModel,
    messages: Sequence[PromptMessage],
    topics: Sequence[ExtractionTopic],
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
    manager: MemoryManager,
    scope: Scope,
    decisions: Sequence[FactDecision],
    *,
    tool_episode_ids: frozenset[str] = frozenset(),
) -> ExtractionResult:
    """Apply ``decisions`` to the user's profile in one store transaction.

    CREATE stores the fact under its own (tag, feature); UPDATE gives the named fact the new
    value; INVALIDATE closes the named fact. Confidence follows :mod:`memmachine.confidence`:
    a candidate equal to a stored fact (whatever the action) corroborates it — its
    confidence rises and its episodes join the fact's; a candidate with a different value
    replaces the fact only when at least as confident as the fact is worth now (aged),
    otherwise it only lowers the fact's confidence, and a fact that falls below
    ``extraction.min_confidence`` is invalidated. NONE naming no fact changes nothing. With
    ``safety.block_injected_facts`` a fact that reads as an instruction to the model is
    dropped instead of failing the batch. A fact drawn only from ``tool_episode_ids`` (notes
    an agent saved with the ``remember`` tool) gets source ``tool``."""
    user = scope.user_scope()
    settings = manager.extraction
    now = utc_now()
    stored: dict[str, Fact] = {}
    for decision in decisions:
        if decision.fact_id is not None and decision.fact_id not in stored:
            fact = await manager.profile.get_fact(user, decision.fact_id)
            if fact is not None:
                stored[fact.id] = fact
    for decision in decisions:  # the fact already under the candidate's own key, if any
        found = decision.fact
        if not any((f.tag, f.feature) == (found.tag, found.feature) for f in stored.values()):
            same_key = await manager.profile.list_facts(
                user, tag=found.tag, feature=found.feature, limit=1
            )
            stored.update({fact.id: fact for fact in same_key})
    by_key = {(fact.tag, fact.feature): fact for fact in stored.values()}
    records: dict[tuple[str, str], FactRecord] = {}
    invalidate: list[str] = []
    result = ExtractionResult(episodes=0, extracted=len(decisions))
    block = manager.safety.block_injected_facts

    def current(fact: Fact) -> tuple[str, float]:
        """The fact's value and confidence as this batch has left them so far."""
        record = records.get((fact.tag, fact.feature))
        return (record.value, record.confidence) if record else (fact.value, fact.confidence)

    for decision in decisions:
        found = decision.fact
        if decision.action == "INVALIDATE":
            if decision.fact_id in stored and decision.fact_id not in invalidate:
                invalidate.append(decision.fact_id)
                records.pop((stored[decision.fact_id].tag, stored[decision.fact_id].feature), None)
                result.invalidated += 1
            else:
                result.unchanged += 1
            continue
        target = stored.get(decision.fact_id or "") if decision.action != "CREATE" else None
        target = target or by_key.get((found.tag, found.feature))
        if target is not None and target.id in invalidate:
            target = None
        if decision.action == "NONE" and (target is None or current(target)[0] != found.value):
            result.unchanged += 1
            continue
        if block and _injected(found):
            log.warning(
                "extracted fact %s/%s reads as an instruction; dropped", found.tag, found.feature
            )
            result.unchanged += 1
            continue
        if target is None:
            records[(found.tag, found.feature)] = _record(
                scope, found, found.tag, found.feature, tool_episode_ids
            )
            result.created += 1
            continue
        value, confidence = current(target)
        key = (target.tag, target.feature)
        aged_from = now if key in records else target.updated_at
        worth = effective(confidence, aged_from, now, settings.confidence_half_life_days)
        if value == found.value:
            record = _record(scope, found, *key, tool_episode_ids)
            record.confidence = corroborated(worth, found.confidence)
            record.source = records[key].source if key in records else target.source
            records[key] = record
            result.corroborated += 1
            continue
        if supersedes(found.confidence, worth):
            records[key] = _record(scope, found, *key, tool_episode_ids)
            result.updated += 1
            continue
        lowered = contradicted(worth, found.confidence)
        if lowered < settings.min_confidence:
            invalidate.append(target.id)
            records.pop(key, None)
            result.invalidated += 1
            continue
        weakened = records.get(key) or FactRecord(
            tag=target.tag,
            feature=target.feature,
            value=target.value,
            source=target.source,
            source_session_id=target.source_session_id,
            metadata=target.metadata,
        )
        weakened.confidence = lowered
        contested = [str(e) for e in weakened.metadata.get("contradicted_by", [])]
        weakened.metadata = {
            **weakened.metadata,
            "contradicted_by": [*contested, *(e for e in found.episode_ids if e not in contested)],
        }
        records[key] = weakened
        result.weakened += 1
    if records or invalidate:
        await manager.apply_facts(
            scope, list(records.values()), invalidate=invalidate, reason=INVALIDATED_REASON
        )
    return result


def _record(
    scope: Scope, found: ExtractedFact, tag: str, feature: str, tool_ids: frozenset[str]
) -> FactRecord:
    from_tool = bool(found.episode_ids) and all(e in tool_ids for e in found.episode_ids)
    return FactRecord(
        tag=tag,
        feature=feature,
        value=found.value,
        confidence=found.confidence,
        source="tool" if from_tool else f"user-{found.kind}",
        source_session_id=scope.session_id,
        source_episode_ids=list(found.episode_ids),
    )


async def related_facts(manager: MemoryManager, scope: Scope, texts: Sequence[str]) -> list[Fact]:
    """The user's stored facts most similar to ``texts`` (full-text and, with an embedder,
    vector search in the profile store): the best :data:`FACTS_PER_TEXT` for each text, at
    most :data:`MAX_EXISTING_FACTS` in all, each once, best matches of earlier texts
    first."""
    if not texts:
        return []
    vectors: Sequence[Sequence[float] | None] = [None] * len(texts)
    if manager.embedder is not None:
        vectors = await manager.embedder.embed(list(texts))
    found: dict[str, Fact] = {}
    for text, vector in zip(texts, vectors, strict=True):
        hits = await manager.profile.search_facts(scope, text, vector, FACTS_PER_TEXT)
        for fact, _ in hits:
            found.setdefault(fact.id, fact)
    return list(found.values())[:MAX_EXISTING_FACTS]


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
    existing = await related_facts(manager, user, [message.content for message in messages])
    candidates = await extract_facts(
        model, messages, manager.extraction.all_topics, existing_facts=existing
    )
    similar = await related_facts(
        manager, user, [f"{c.tag} {c.feature} {c.value}" for c in candidates]
    )
    decisions = await consolidate(model, candidates, similar)
    tool_ids = frozenset(e.id for e in usable if e.metadata.get("via") == REMEMBER_TOOL_MARK)
    result = await apply_consolidation(manager, scope, decisions, tool_episode_ids=tool_ids)
    return result.model_copy(update={"episodes": len(usable)})
