"""Procedure distillation: what a ``distill`` job runs on a session reported successful.

:func:`distill_session` reads the session's episodes (skipping those marked
``metadata["suspected_injection"]``), hides who the user is before the model sees them (the
user's id and the names the user's messages were produced under become ``[USER]``; the
stored episodes are already redacted of PII by the write gate), shows the model the
application's procedures most similar to the session, asks it for the reusable procedures
the session shows (:func:`memmachine.prompting.llm.distill_procedures`, told to generalise)
and hands each to the procedural memory service, which passes it through the write gate
again (identities, every PII kind, the poisoning guard) and creates, supersedes or
corroborates a procedure. A candidate the gate refuses is counted, not stored.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel

from memmachine.errors import InvalidInputError
from memmachine.models import Episode, Scope
from memmachine.ports import EpisodeStore, LanguageModel
from memmachine.ports.procedures import (
    AppScope,
    Procedure,
    ProcedureRecord,
    ProcedureSource,
    SessionOutcome,
)
from memmachine.prompting.llm import KnownProcedure, PromptMessage, distill_procedures

__all__ = ["DistillationResult", "ProcedureLearner", "distill_session", "identities_of"]

log = logging.getLogger("memmachine.jobs")

#: Episodes of a session read at most.
MAX_EPISODES = 500
#: Known procedures shown to the model at most.
KNOWN_PROCEDURES = 5


class DistillationResult(BaseModel):
    """What one distillation did."""

    episodes: int
    distilled: int = 0
    created: int = 0
    superseded: int = 0
    corroborated: int = 0
    refused: int = 0


class ProcedureLearner(Protocol):
    """Who stores what distillation finds (the procedural memory service is one)."""

    async def learn(
        self,
        app: AppScope,
        record: ProcedureRecord,
        *,
        identities: Sequence[str] = ...,
        better_than: str | None = ...,
    ) -> tuple[Any, Procedure]: ...

    async def search(
        self,
        app: AppScope,
        query: str,
        *,
        top_k: int = ...,
        query_vector: Sequence[float] | None = ...,
    ) -> list[tuple[Procedure, float]]: ...

    async def outcome(self, scope: Scope) -> SessionOutcome | None: ...


def identities_of(scope: Scope, episodes: Sequence[Episode]) -> list[str]:
    """Who the user is in a session: the user id and every name (and part of a name) the
    user's messages were produced under."""
    names = {scope.user_id}
    for episode in episodes:
        if episode.role == "user" and episode.producer:
            names.add(episode.producer)
            names.update(re.split(r"[\s._@-]+", episode.producer))
    return sorted((name for name in names if len(name) >= 3), key=len, reverse=True)


def _hide(text: str, identities: Sequence[str]) -> str:
    for name in identities:
        text = re.sub(re.escape(name), "[USER]", text, flags=re.IGNORECASE)
    return text


async def distill_session(
    model: LanguageModel | None,
    episodes: EpisodeStore,
    learner: ProcedureLearner,
    scope: Scope,
) -> DistillationResult:
    """Distil the procedures of ``scope``'s session, if its outcome is ``success``.

    A no-op without a language model, a success or usable episodes. Raises what the model
    raises."""
    if model is None or scope.session_id is None:
        return DistillationResult(episodes=0)
    session = scope.user_scope().for_session(scope.session_id)
    outcome = await learner.outcome(session)
    if outcome is None or outcome.outcome != "success":
        return DistillationResult(episodes=0)
    read = await episodes.list_episodes(session, limit=MAX_EPISODES, offset=0)
    usable = [e for e in read if not e.metadata.get("suspected_injection")]
    if not usable:
        return DistillationResult(episodes=0)
    identities = identities_of(scope, usable)
    messages = [
        PromptMessage(id=e.id, role=e.role, content=_hide(e.content, identities)) for e in usable
    ]
    app = AppScope.of(scope)
    task = " ".join(m.content for m in messages if m.role == "user")[:2000] or messages[0].content
    similar = await learner.search(app, task[:2000], top_k=KNOWN_PROCEDURES)
    known = [KnownProcedure(id=p.id, goal=p.goal, steps=p.steps) for p, _ in similar]
    candidates = await distill_procedures(model, messages, known)
    result = DistillationResult(episodes=len(usable), distilled=len(candidates))
    source = ProcedureSource(user_id=scope.user_id, session_id=scope.session_id)
    for candidate in candidates:
        record = ProcedureRecord(
            goal=candidate.goal,
            steps=candidate.steps,
            preconditions=candidate.preconditions,
            pitfalls=candidate.pitfalls,
            confidence=candidate.confidence,
            source="distilled",
            sources=[source],
        )
        try:
            what, _ = await learner.learn(
                app, record, identities=identities, better_than=candidate.supersedes
            )
        except InvalidInputError as exc:
            log.warning("a distilled procedure was refused: %s", exc.message)
            result.refused += 1
            continue
        setattr(result, what, getattr(result, what) + 1)
    return result
