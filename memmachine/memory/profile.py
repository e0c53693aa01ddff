"""Profile memory: facts about a user, one per (tag, feature), with confidence that ages,
provenance and the history of every value they held."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memmachine.config import ExtractionSettings
from memmachine.errors import NotFoundError
from memmachine.memory.confidence import effective
from memmachine.memory.consolidation import apply_consolidation
from memmachine.memory.expiry import kept_expiry, live_facts, live_hits, live_versions, stamped
from memmachine.models import (
    EpisodeDetachment,
    Fact,
    FactHit,
    FactRecord,
    FactVersion,
    JsonDict,
    Scope,
)
from memmachine.pipeline.extraction import ExtractionResult, FactDecision
from memmachine.ports import Clock, Embedder, ProfileStore, SystemClock, embed_queries
from memmachine.safety.gate import WriteGate, check_query

__all__ = ["ProfileService"]


class ProfileService:
    """Writes (through the gate, embedded), reads (aged) and deletes facts in the profile
    store. ``embedder`` may be replaced at any time; the next call uses it. An expired fact
    (:mod:`memmachine.memory.expiry`) is never returned, by ``clock``'s time."""

    def __init__(
        self,
        *,
        store: ProfileStore,
        gate: WriteGate,
        embedder: Embedder | None,
        extraction: ExtractionSettings,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self.clock: Clock = clock or SystemClock()
        self._gate = gate
        self.embedder = embedder
        self.extraction = extraction

    async def set(self, scope: Scope, facts: Sequence[FactRecord]) -> list[Fact]:
        """Upsert facts for the user; one fact per (tag, feature). All or nothing.

        With ``safety.block_injected_facts`` a fact whose value (or tag, or feature) reads as
        an instruction to the model is refused (``InvalidInputError`` naming
        ``facts.<i>.value``) and nothing is stored. With ``safety.redact_pii`` tag, feature,
        value and metadata string values are redacted and ``metadata["redacted"]`` counts
        what was replaced."""
        self._gate.check_facts(facts)
        records = await self._records(scope, facts)
        return await self._store.upsert_facts(
            scope.model_copy(update={"session_id": None}), self._gate.facts(records)
        )

    async def apply(
        self,
        scope: Scope,
        facts: Sequence[FactRecord],
        *,
        invalidate: Sequence[str] = (),
        reason: str = "invalidated",
    ) -> list[Fact]:
        """Invalidate the user's facts ``invalidate`` and upsert ``facts`` in one store
        transaction (checked, redacted and embedded as :meth:`set` does)."""
        if facts:
            self._gate.check_facts(facts)
        records = await self._records(scope, facts)
        return await self._store.apply_facts(
            scope.user_scope(),
            self._gate.facts(records),
            invalidate=invalidate,
            reason=self._gate.reason(reason),
        )

    async def _records(self, scope: Scope, facts: Sequence[FactRecord]) -> list[FactRecord]:
        now = self.clock.now()
        asked = [
            fact.model_copy(update={"metadata": {**fact.metadata, **_end(fact, now, index)}})
            for index, fact in enumerate(facts)
        ]
        records = kept_expiry(asked, self._gate.facts(asked))
        if self.embedder is not None and records:
            vectors = await self.embedder.embed([_fact_text(fact) for fact in records])
            for record, vector in zip(records, vectors, strict=True):
                record.embedding = vector
        for record in records:
            if record.source_session_id is None:
                record.source_session_id = scope.session_id
        return records

    async def apply_consolidation(
        self,
        scope: Scope,
        decisions: Sequence[FactDecision],
        *,
        tool_episode_ids: frozenset[str] = frozenset(),
    ) -> ExtractionResult:
        """Apply extraction's decisions to the user's profile in one transaction (see
        :func:`memmachine.memory.consolidation.apply_consolidation`)."""
        return await apply_consolidation(
            self._store,
            self.apply,
            scope,
            decisions,
            settings=self.extraction,
            block_injected=self._gate.safety.block_injected_facts,
            tool_episode_ids=tool_episode_ids,
        )

    async def current(
        self,
        scope: Scope,
        *,
        tag: str | None = None,
        feature: str | None = None,
        limit: int = 1000,
        offset: int = 0,
    ) -> list[Fact]:
        """The user's current facts (optionally of one tag / feature), aged."""
        facts = await self._store.list_facts(
            scope.user_scope(), tag=tag, feature=feature, limit=limit, offset=offset
        )
        return [self.aged(fact) for fact in live_facts(facts, self.clock.now())]

    async def get(self, scope: Scope, fact_id: str) -> Fact:
        """One of the user's current facts, aged (``NotFoundError`` when there is none)."""
        fact = await self._store.get_fact(scope.user_scope(), fact_id)
        if fact is None or not live_facts([fact], self.clock.now()):
            raise NotFoundError(f"fact {fact_id!r} not found")
        return self.aged(fact)

    def aged(self, fact: Fact) -> Fact:
        """``fact`` with ``effective_confidence``: its confidence aged since it was last
        confirmed (``extraction.confidence_half_life_days``)."""
        worth = effective(
            fact.confidence,
            fact.updated_at,
            self.clock.now(),
            self.extraction.confidence_half_life_days,
        )
        return fact.model_copy(update={"effective_confidence": round(worth, 6)})

    async def delete(self, scope: Scope, fact_id: str) -> None:
        """Delete one of the user's facts (``NotFoundError`` when there is none)."""
        if not await self._store.delete_fact(scope.user_scope(), fact_id):
            raise NotFoundError(f"fact {fact_id!r} not found")

    async def invalidate(
        self, scope: Scope, fact_id: str, reason: str
    ) -> tuple[Fact | None, list[FactVersion]]:
        """Close one of the user's facts by hand (it leaves reads; its value stays in the
        history with ``reason``); returns :meth:`history` of its (tag, feature).
        ``NotFoundError`` when the user has no such current fact."""
        user = scope.user_scope()
        fact = await self._store.get_fact(user, fact_id)
        if fact is None or not await self._store.invalidate_fact(
            user, fact_id, self._gate.reason(reason)
        ):
            raise NotFoundError(f"fact {fact_id!r} not found")
        return await self.history(user, fact.tag, fact.feature)

    async def delete_matching(
        self, scope: Scope, *, tag: str | None = None, feature: str | None = None
    ) -> int:
        """Delete the user's facts (of one tag / feature); how many there were."""
        return await self._store.delete_facts(scope.user_scope(), tag=tag, feature=feature)

    async def forget(self, scope: Scope) -> int:
        """Delete the facts in ``scope`` (a session's: those it is the source of)."""
        return await self._store.delete_facts(scope)

    async def history(
        self, scope: Scope, tag: str, feature: str
    ) -> tuple[Fact | None, list[FactVersion]]:
        """The user's current fact for (tag, feature), if any, and its closed versions,
        oldest first (those whose value expired left out)."""
        user = scope.user_scope()
        now = self.clock.now()
        current = live_facts(
            await self._store.list_facts(user, tag=tag, feature=feature, limit=1), now
        )
        history = live_versions(await self._store.fact_history(user, tag, feature), now)
        return (self.aged(current[0]) if current else None), history

    async def search(
        self,
        scope: Scope,
        query: str,
        *,
        top_k: int = 10,
        query_vector: Sequence[float] | None = None,
    ) -> list[FactHit]:
        """The user's facts best matching ``query`` (full text and, with an embedder,
        meaning), aged."""
        check_query(self._gate.limits, query, top_k)
        if query_vector is None and self.embedder is not None:
            query_vector = (await embed_queries(self.embedder, [query]))[0]
        found = await self._store.search_facts(scope.user_scope(), query, query_vector, top_k)
        hits = [FactHit(fact=self.aged(fact), score=score) for fact, score in found]
        return live_hits(hits, self.clock.now())

    async def detach_episodes(self, scope: Scope, episode_ids: Sequence[str]) -> EpisodeDetachment:
        """Take deleted episodes out of the user's facts: each fact that rested only on
        them goes back to its newest earlier version other episodes back, or is deleted
        (see ``ProfileStore.detach_episodes``); facts with other sources only lose the ids.
        Restored facts are embedded again (their earlier value's embedding was not kept)."""
        report = await self._store.detach_episodes(scope, episode_ids)
        restored = [await self._store.get_fact(scope, fact_id) for fact_id in report.restored]
        again = [
            FactRecord(
                tag=fact.tag,
                feature=fact.feature,
                value=fact.value,
                confidence=fact.confidence,
                source=fact.source,
                source_session_id=fact.source_session_id,
                source_episode_ids=fact.source_episode_ids,
                metadata=fact.metadata,
            )
            for fact in restored
            if fact is not None
        ]
        if again and self.embedder is not None:
            vectors = await self.embedder.embed([_fact_text(record) for record in again])
            for record, vector in zip(again, vectors, strict=True):
                record.embedding = vector
            await self._store.upsert_facts(scope, self._gate.facts(again))  # same values
        return report


def _end(fact: FactRecord, now: datetime, index: int) -> JsonDict:
    return stamped(fact.metadata, fact.expires_at, fact.ttl_seconds, now, f"facts.{index}")


def _fact_text(fact: FactRecord) -> str:
    return f"{fact.tag} {fact.feature}: {fact.value}"
