"""Profile extraction: facts about a user from their conversations, consolidated with the
facts already stored.

:func:`extract_from_episodes` is what an ``extract`` job runs: it reads the job's episodes
(skipping those marked ``metadata["suspected_injection"]``), asks the language model for
facts under the configured topics (:func:`extract_facts`), asks it what each candidate means
for the similar facts already stored (:func:`related_facts`, :func:`consolidate`: CREATE,
UPDATE, INVALIDATE or NONE) and has the profile service apply the decisions in one store
transaction (:mod:`memmachine.memory.consolidation`). Every stored fact records its
provenance: ``source`` ``user-explicit`` or ``user-implicit`` and the episode ids it came
from. A replaced or
invalidated value stays readable in the fact's history; a candidate equal to a stored fact
is a corroboration, never a second fact, and raises its confidence; a weaker contradiction
lowers it (see :mod:`memmachine.memory.confidence`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel

from memmachine.config import ExtractionSettings
from memmachine.models import Episode, ExtractionTopic, Fact, Scope
from memmachine.ports import Embedder, EpisodeStore, LanguageModel, ProfileStore, embed_queries
from memmachine.prompting.llm import (
    CandidateFact,
    ExistingFact,
    PromptMessage,
    decide_consolidation,
    extract_candidates,
)

__all__ = [
    "ExtractedFact",
    "ExtractionResult",
    "ExtractionTarget",
    "FactDecision",
    "consolidate",
    "extract_facts",
    "extract_from_episodes",
    "related_facts",
]

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


class ExtractionTarget(Protocol):
    """What extraction reads, and who applies its decisions (a
    :class:`~memmachine.manager.MemoryManager` is one)."""

    @property
    def language_model(self) -> LanguageModel | None: ...
    @property
    def extraction(self) -> ExtractionSettings: ...
    @property
    def embedder(self) -> Embedder | None: ...
    @property
    def episodes(self) -> EpisodeStore: ...
    @property
    def profile(self) -> ProfileStore: ...

    async def apply_consolidation(
        self,
        scope: Scope,
        decisions: Sequence[FactDecision],
        *,
        tool_episode_ids: frozenset[str] = ...,
    ) -> ExtractionResult: ...


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
    :func:`memmachine.prompting.llm.decide_consolidation`)."""
    decisions = await decide_consolidation(model, candidates, _existing(existing_facts))
    return [
        FactDecision(fact=candidates[d.index], action=d.action, fact_id=d.fact_id)
        for d in decisions
    ]


async def related_facts(
    manager: ExtractionTarget, scope: Scope, texts: Sequence[str]
) -> list[Fact]:
    """The user's stored facts most similar to ``texts`` (full-text and, with an embedder,
    vector search in the profile store): the best :data:`FACTS_PER_TEXT` for each text, at
    most :data:`MAX_EXISTING_FACTS` in all, each once, best matches of earlier texts
    first."""
    if not texts:
        return []
    vectors: Sequence[Sequence[float] | None] = [None] * len(texts)
    if manager.embedder is not None:
        vectors = await embed_queries(manager.embedder, list(texts))
    found: dict[str, Fact] = {}
    for text, vector in zip(texts, vectors, strict=True):
        hits = await manager.profile.search_facts(scope, text, vector, FACTS_PER_TEXT)
        for fact, _ in hits:
            found.setdefault(fact.id, fact)
    return list(found.values())[:MAX_EXISTING_FACTS]


def _usable(episode: Episode | None) -> bool:
    return episode is not None and not episode.metadata.get("suspected_injection")


async def extract_from_episodes(
    manager: ExtractionTarget, scope: Scope, episode_ids: Sequence[str]
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
    result = await manager.apply_consolidation(scope, decisions, tool_episode_ids=tool_ids)
    return result.model_copy(update={"episodes": len(usable)})
