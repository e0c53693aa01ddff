"""The apply step of profile consolidation: the decisions extraction made (CREATE, UPDATE,
INVALIDATE, NONE) turned into one profile-store transaction, with confidence moving as
:mod:`memmachine.memory.confidence` says."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from typing import Protocol

from memmachine.config import ExtractionSettings
from memmachine.memory.confidence import contradicted, corroborated, effective, supersedes
from memmachine.models import Fact, FactRecord, Scope, utc_now
from memmachine.pipeline.extraction import (
    INVALIDATED_REASON,
    ExtractedFact,
    ExtractionResult,
    FactDecision,
)
from memmachine.ports import ProfileStore
from memmachine.safety import looks_like_injection

__all__ = ["ApplyFacts", "apply_consolidation"]

log = logging.getLogger("memmachine.pipeline.extraction")


class ApplyFacts(Protocol):
    """Upserts facts and invalidates others in one transaction, through the write gate."""

    def __call__(
        self,
        scope: Scope,
        facts: Sequence[FactRecord],
        *,
        invalidate: Sequence[str] = (),
        reason: str = ...,
    ) -> Awaitable[list[Fact]]: ...


async def apply_consolidation(
    profile: ProfileStore,
    apply: ApplyFacts,
    scope: Scope,
    decisions: Sequence[FactDecision],
    *,
    settings: ExtractionSettings,
    block_injected: bool,
    tool_episode_ids: frozenset[str] = frozenset(),
) -> ExtractionResult:
    """Apply ``decisions`` to the user's profile in one store transaction.

    CREATE stores the fact under its own (tag, feature); UPDATE gives the named fact the new
    value; INVALIDATE closes the named fact. Confidence follows :mod:`memmachine.memory.confidence`:
    a candidate equal to a stored fact (whatever the action) corroborates it — its
    confidence rises and its episodes join the fact's; a candidate with a different value
    replaces the fact only when at least as confident as the fact is worth now (aged),
    otherwise it only lowers the fact's confidence, and a fact that falls below
    ``settings.min_confidence`` is invalidated. NONE naming no fact changes nothing. With
    ``block_injected`` a fact that reads as an instruction to the model is dropped instead
    of failing the batch. A fact drawn only from ``tool_episode_ids`` (notes an agent saved
    with the ``remember`` tool) gets source ``tool``. ``profile`` is read (the facts the
    decisions name); ``apply`` writes, through the profile service."""
    user = scope.user_scope()
    now = utc_now()
    stored: dict[str, Fact] = {}
    for decision in decisions:
        if decision.fact_id is not None and decision.fact_id not in stored:
            fact = await profile.get_fact(user, decision.fact_id)
            if fact is not None:
                stored[fact.id] = fact
    for decision in decisions:  # the fact already under the candidate's own key, if any
        found = decision.fact
        if not any((f.tag, f.feature) == (found.tag, found.feature) for f in stored.values()):
            same_key = await profile.list_facts(user, tag=found.tag, feature=found.feature, limit=1)
            stored.update({fact.id: fact for fact in same_key})
    by_key = {(fact.tag, fact.feature): fact for fact in stored.values()}
    records: dict[tuple[str, str], FactRecord] = {}
    invalidate: list[str] = []
    result = ExtractionResult(episodes=0, extracted=len(decisions))
    block = block_injected

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
        await apply(scope, list(records.values()), invalidate=invalidate, reason=INVALIDATED_REASON)
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


def _injected(fact: ExtractedFact) -> bool:
    return any(looks_like_injection(text) for text in (fact.tag, fact.feature, fact.value))
