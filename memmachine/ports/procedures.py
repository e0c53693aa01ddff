"""The procedure store port: procedural memory ("knowing how"), shared by the users of one
application, and the outcome signal of the sessions procedures are learnt from.

A procedure belongs to an application, not to a user: an :class:`AppScope` (tenant, org,
project and optionally one agent) instead of a user's :class:`~memmachine.models.Scope`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from memmachine.models import Identifier, Scope, StoreHealth, utc_now

__all__ = [
    "AppScope",
    "Outcome",
    "Procedure",
    "ProcedureRecord",
    "ProcedureSource",
    "ProcedureStore",
    "ProcedureVersion",
    "SessionOutcome",
    "goal_key",
]

Outcome = Literal["success", "failure"]


class AppScope(BaseModel):
    """Whose procedures: one project of a tenant's org, optionally one agent of it.

    ``agent_id`` ``None`` on a write makes a procedure every agent of the project shares; on
    a read it means every procedure of the project. A read with an ``agent_id`` sees that
    agent's procedures and the shared ones.
    """

    model_config = ConfigDict(frozen=True)

    tenant: Identifier = "default"
    org_id: Identifier = "default"
    project_id: Identifier = "default"
    agent_id: Identifier | None = None

    @classmethod
    def of(cls, scope: Scope) -> AppScope:
        """The application a user's scope belongs to (its agent kept)."""
        return cls(
            tenant=scope.tenant,
            org_id=scope.org_id,
            project_id=scope.project_id,
            agent_id=scope.agent_id,
        )


class ProcedureSource(BaseModel):
    """One session a procedure was learnt from (or confirmed by). The user id is kept so
    that forgetting a user can remove it; it is never shown to other users."""

    user_id: Identifier
    session_id: Identifier


class ProcedureRecord(BaseModel):
    """A procedure as it is written."""

    goal: str
    steps: list[str]
    preconditions: list[str] = Field(default_factory=list)
    pitfalls: list[str] = Field(default_factory=list)
    confidence: float = 0.6
    #: ``"explicit"`` (written by a caller) or ``"distilled"`` (by the LLM pipeline).
    source: str = "explicit"
    sources: list[ProcedureSource] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    embedding: list[float] | None = None


class Procedure(BaseModel):
    """A stored procedure: its current version, confidence and use counts."""

    id: str
    tenant: str
    org_id: str
    project_id: str
    agent_id: str | None = None
    goal: str
    steps: list[str]
    preconditions: list[str] = Field(default_factory=list)
    pitfalls: list[str] = Field(default_factory=list)
    confidence: float
    source: str
    sources: list[ProcedureSource] = Field(default_factory=list)
    successes: int = 0
    failures: int = 0
    #: How many earlier versions the procedure has (its history's length).
    version: int = 1
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)

    @property
    def source_session_ids(self) -> list[str]:
        return list(dict.fromkeys(source.session_id for source in self.sources))


class ProcedureVersion(BaseModel):
    """A superseded version of a procedure."""

    procedure_id: str
    goal: str
    steps: list[str]
    preconditions: list[str] = Field(default_factory=list)
    pitfalls: list[str] = Field(default_factory=list)
    confidence: float
    source: str
    sources: list[ProcedureSource] = Field(default_factory=list)
    successes: int = 0
    failures: int = 0
    reason: str
    valid_from: datetime
    valid_to: datetime


class SessionOutcome(BaseModel):
    """How a session went, as the agent or the user reported it."""

    session_id: str
    outcome: Outcome
    recorded_at: datetime = Field(default_factory=utc_now)


_SPACE = re.compile(r"\s+")


def goal_key(goal: str) -> str:
    """What makes two goals the same goal: case and runs of white space ignored."""
    return _SPACE.sub(" ", goal.strip().casefold())


@runtime_checkable
class ProcedureStore(Protocol):
    """Procedural memory: procedures of an application, their versions and use counts.

    Contract:

    * Scope: every read and write takes an :class:`AppScope`; tenant, org and project always
      match exactly. A write records ``agent_id`` (``None``: shared by the project's
      agents). A read with ``agent_id`` sees that agent's and the shared procedures; without
      one, every procedure of the project. Nothing of another tenant, org or project is
      ever read, changed or counted.
    * ``save(scope, record)`` stores a new procedure (``version`` 1, no uses) and returns it.
      With ``replaces=id`` (a procedure the scope sees) it supersedes that procedure in one
      transaction instead: the current version goes to the history with ``reason`` and
      ``valid_to`` = now, the procedure keeps its id, agent and ``created_at`` and takes the
      record's goal, steps, preconditions, pitfalls, confidence, source, metadata and
      embedding, its use counts start again at 0, its sources become the old ones followed
      by the record's new ones (each (user, session) once) and ``version`` grows by one.
      An unknown ``replaces`` is a ``NotFoundError`` and nothing is stored.
    * ``by_goal(scope, goal)``: the procedure whose goal is the same goal (:func:`goal_key`)
      in exactly ``scope``'s agent (or the shared ones for ``agent_id`` ``None``), or
      ``None``.
    * ``get(scope, id)`` / ``list_procedures(scope, limit=, offset=)`` (most recently
      updated first, then by id) / ``history(scope, id)`` (superseded versions, oldest
      first; ``[]`` for an unknown id).
    * ``search(scope, query, embedding, k)``: up to ``k`` procedures ranked by full text
      (BM25 over the analysed terms of goal, steps, preconditions and pitfalls) and, with
      an embedding, cosine similarity, fused by reciprocal rank; scores in ``(0, 1]``, best
      first. Nothing matches an empty query without an embedding.
    * ``record_use(scope, id, success=, confidence=)``: in one transaction, the procedure's
      ``successes`` or ``failures`` grows by one and its confidence becomes
      ``confidence(old)``; returns the procedure, ``None`` when unknown (nothing changes).
    * ``add_sources(scope, id, sources, confidence=)``: a corroboration: the sources are
      added (each (user, session) once), the confidence becomes ``confidence(old)`` and
      ``updated_at`` moves; no new version. ``None`` when unknown.
    * ``delete(scope, id)`` removes the procedure and its history; whether it existed.
    * ``detach_user(scope)``: a user's ``Scope`` (tenant, org, project, user; its session
      when set): that user's (session's) sources leave every procedure and every version of
      the project, and the user's (session's) outcomes are deleted; the procedures stay.
      Returns how many procedures lost a source.
    * ``set_outcome(scope, outcome)`` records the outcome of ``scope``'s session (a later
      call replaces it); ``get_outcome(scope)`` reads it (``None`` when none was recorded).
    """

    name: str
    kind: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def health(self) -> StoreHealth: ...
    async def save(
        self,
        scope: AppScope,
        record: ProcedureRecord,
        *,
        replaces: str | None = None,
        reason: str = "superseded",
    ) -> Procedure: ...
    async def by_goal(self, scope: AppScope, goal: str) -> Procedure | None: ...
    async def get(self, scope: AppScope, procedure_id: str) -> Procedure | None: ...
    async def list_procedures(
        self, scope: AppScope, *, limit: int = 100, offset: int = 0
    ) -> list[Procedure]: ...
    async def history(self, scope: AppScope, procedure_id: str) -> list[ProcedureVersion]: ...
    async def search(
        self, scope: AppScope, query: str, embedding: Sequence[float] | None, k: int
    ) -> list[tuple[Procedure, float]]: ...
    async def record_use(
        self,
        scope: AppScope,
        procedure_id: str,
        *,
        success: bool,
        confidence: Callable[[float], float],
    ) -> Procedure | None: ...
    async def add_sources(
        self,
        scope: AppScope,
        procedure_id: str,
        sources: Sequence[ProcedureSource],
        *,
        confidence: Callable[[float], float],
    ) -> Procedure | None: ...
    async def delete(self, scope: AppScope, procedure_id: str) -> bool: ...
    async def detach_user(self, scope: Scope) -> int: ...
    async def set_outcome(self, scope: Scope, outcome: Outcome) -> SessionOutcome: ...
    async def get_outcome(self, scope: Scope) -> SessionOutcome | None: ...
