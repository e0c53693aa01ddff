"""Procedural memory: how an application's agents got things done, shared by its users.

A procedure (goal, steps, preconditions, pitfalls) belongs to an application (an
:class:`~memmachine.ports.procedures.AppScope`: tenant, org, project, optionally an agent),
never to a user. It is written explicitly ("remember how") or distilled by the LLM pipeline
from a session reported successful (:mod:`memmachine.pipeline.distillation`), and every
version passes :meth:`~memmachine.safety.gate.WriteGate.procedure`: the user's identities
replaced, every PII kind redacted, instructions to the model refused.

Confidence moves with evidence: a reported successful reuse combines as independent
evidence of :data:`USE_EVIDENCE` (:func:`~memmachine.memory.confidence.corroborated`), a
failure discounts it by :data:`USE_EVIDENCE` (:func:`~memmachine.memory.confidence.
contradicted`); a distilled candidate for a goal already known corroborates the stored
procedure unless it is at least as confident, or the model said it is better, in which case
it supersedes it (the older version stays in the history). An explicit write for a goal
already known supersedes it.

Forgetting a user (or a session) does not delete procedures: they are the application's,
and hold nothing personal. It takes the user's (session's) sessions out of their
provenance and deletes the user's session outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from memmachine.errors import InvalidInputError, NotFoundError, StoreUnavailableError
from memmachine.memory.common import require_session
from memmachine.memory.confidence import contradicted, corroborated
from memmachine.memory.scheduling import JobScheduler
from memmachine.models import Scope
from memmachine.ports import Embedder, embed_queries
from memmachine.ports.procedures import (
    AppScope,
    Outcome,
    Procedure,
    ProcedureRecord,
    ProcedureStore,
    ProcedureVersion,
    SessionOutcome,
)
from memmachine.safety.gate import WriteGate, check_query

__all__ = ["USE_EVIDENCE", "ProceduralMemory", "procedure_text"]

#: The weight of one reported use (success or failure) as evidence.
USE_EVIDENCE = 0.3
#: The weight of one more successful session that yields the same procedure.
DISTILLED_EVIDENCE = 0.3

Learnt = Literal["created", "superseded", "corroborated"]


class ProceduralMemory:
    """Writes (through the gate, embedded), reads and searches an application's procedures.
    ``store`` ``None`` = procedural memory is off (``off_reason``); ``embedder`` may be
    replaced at any time."""

    def __init__(
        self,
        store: ProcedureStore | None,
        gate: WriteGate,
        embedder: Embedder | None,
        *,
        scheduler: JobScheduler | None = None,
        off_reason: str = "no procedure store configured",
    ) -> None:
        self.store_or_none = store
        self._scheduler = scheduler
        self._gate = gate
        self.embedder = embedder
        self.off_reason = off_reason

    @property
    def _store(self) -> ProcedureStore:
        if self.store_or_none is None:
            raise StoreUnavailableError(
                f"procedural memory is off: {self.off_reason}", store="procedures"
            )
        return self.store_or_none

    async def _embedded(self, record: ProcedureRecord) -> ProcedureRecord:
        if self.embedder is None:
            return record
        vector = (await self.embedder.embed([procedure_text(record)]))[0]
        return record.model_copy(update={"embedding": list(vector)})

    # ------------------------------------------------------------------ writes

    async def remember(
        self, app: AppScope, record: ProcedureRecord, *, replaces: str | None = None
    ) -> Procedure:
        """Store a procedure written by a caller. ``replaces`` (or a procedure of the same
        goal in the same agent) is superseded, its version kept in the history; a
        ``replaces`` the application does not have is an ``InvalidInputError``."""
        gated = await self._embedded(self._gate.procedure(record))
        if replaces is None:
            same = await self._store.by_goal(app, gated.goal)
            replaces = same.id if same is not None else None
        elif await self._store.get(app, replaces) is None:
            raise InvalidInputError(f"replaces: no procedure {replaces!r}", field="replaces")
        return await self._store.save(
            app,
            self._gate.procedure(gated),
            replaces=replaces,
            reason=self._gate.procedure_reason("superseded"),
        )

    async def learn(
        self,
        app: AppScope,
        record: ProcedureRecord,
        *,
        identities: Sequence[str] = (),
        better_than: str | None = None,
    ) -> tuple[Learnt, Procedure]:
        """Store a distilled procedure (see the module docstring for when it supersedes or
        corroborates the stored one). ``identities`` are replaced by ``[USER]``;
        ``better_than`` names a stored procedure the model judged worse."""
        gated = self._gate.procedure(record, identities)
        current = await self._store.get(app, better_than) if better_than else None
        if current is None:
            current = await self._store.by_goal(app, gated.goal)
        if current is None:
            saved = await self._store.save(app, self._gate.procedure(await self._embedded(gated)))
            return "created", saved
        if better_than == current.id or gated.confidence >= current.confidence:
            saved = await self._store.save(
                app,
                self._gate.procedure(await self._embedded(gated)),
                replaces=current.id,
                reason=self._gate.procedure_reason("superseded by a better procedure"),
            )
            return "superseded", saved
        confirmed = await self._store.add_sources(
            app,
            current.id,
            gated.sources,
            confidence=lambda old: corroborated(old, DISTILLED_EVIDENCE),
        )
        return "corroborated", confirmed or current

    async def report_use(self, app: AppScope, procedure_id: str, *, success: bool) -> Procedure:
        """Count one reuse of a procedure: success raises its confidence, failure lowers
        it. ``NotFoundError`` when the application has no such procedure."""
        found = await self._store.record_use(
            app,
            procedure_id,
            success=success,
            confidence=lambda old: (
                corroborated(old, USE_EVIDENCE) if success else contradicted(old, USE_EVIDENCE)
            ),
        )
        if found is None:
            raise NotFoundError(f"procedure {procedure_id!r} not found")
        return found

    async def restore(
        self,
        app: AppScope,
        record: ProcedureRecord,
        *,
        replaces: str | None,
        reason: str,
        successes: int,
        failures: int,
    ) -> Procedure:
        """Store one version of an imported procedure (through the gate, embedded),
        superseding ``replaces`` with ``reason``, then count its uses back while keeping the
        confidence it had."""
        gated = await self._embedded(self._gate.procedure(record))
        saved = await self._store.save(
            app,
            self._gate.procedure(gated),
            replaces=replaces,
            reason=self._gate.procedure_reason(reason),
        )
        for success in [True] * successes + [False] * failures:
            counted = await self._store.record_use(
                app, saved.id, success=success, confidence=lambda _old: record.confidence
            )
            saved = counted or saved
        return saved

    async def delete(self, app: AppScope, procedure_id: str) -> None:
        """Delete a procedure and its history (``NotFoundError`` when there is none)."""
        if not await self._store.delete(app, procedure_id):
            raise NotFoundError(f"procedure {procedure_id!r} not found")

    async def set_outcome(
        self, scope: Scope, outcome: Outcome
    ) -> tuple[SessionOutcome, str | None]:
        """Record how the user's session went; a success queues the distillation of its
        procedures (once per session) when the job queue and a language model are on.
        Returns the outcome and the id of the ``distill`` job (``None`` when none)."""
        session = require_session(scope)
        target = session.user_scope().for_session(str(session.session_id))
        recorded = await self._store.set_outcome(target, outcome)
        job = None
        if outcome == "success" and self._scheduler is not None:
            job = await self._scheduler.enqueue_distillation(session)
        return recorded, None if job is None else job.id

    async def outcome(self, scope: Scope) -> SessionOutcome | None:
        """The outcome recorded for the user's session, if any."""
        session = require_session(scope)
        target = session.user_scope().for_session(str(session.session_id))
        return await self._store.get_outcome(target)

    # ------------------------------------------------------------------ reads

    async def get(self, app: AppScope, procedure_id: str) -> Procedure:
        """One procedure (``NotFoundError`` when the application has none such)."""
        found = await self._store.get(app, procedure_id)
        if found is None:
            raise NotFoundError(f"procedure {procedure_id!r} not found")
        return found

    async def list_procedures(
        self, app: AppScope, *, limit: int = 100, offset: int = 0
    ) -> list[Procedure]:
        """The application's procedures, most recently updated first."""
        return await self._store.list_procedures(app, limit=limit, offset=offset)

    async def history(
        self, app: AppScope, procedure_id: str
    ) -> tuple[Procedure, list[ProcedureVersion]]:
        """A procedure and its superseded versions, oldest first."""
        return await self.get(app, procedure_id), await self._store.history(app, procedure_id)

    async def search(
        self,
        app: AppScope,
        query: str,
        *,
        top_k: int = 5,
        query_vector: Sequence[float] | None = None,
    ) -> list[tuple[Procedure, float]]:
        """The application's procedures best matching a task description (full text and,
        with an embedder, meaning), best first."""
        check_query(self._gate.limits, query, top_k)
        if query_vector is None and self.embedder is not None:
            query_vector = (await embed_queries(self.embedder, [query]))[0]
        return await self._store.search(app, query, query_vector, top_k)

    async def for_prompt(
        self,
        scope: Scope,
        query: str,
        top_k: int = 3,
        *,
        query_vector: Sequence[float] | None = None,
    ) -> list[Procedure]:
        """The application's procedures for the task ``query`` (whose vector the caller may
        have already) describes, best first, for a memory prompt: none when procedural memory
        is off or the query is unusable."""
        if self.store_or_none is None or not query.strip():
            return []
        found = await self.search(
            AppScope.of(scope),
            query[: self._gate.limits.max_message_chars],
            top_k=top_k,
            query_vector=query_vector,
        )
        return [procedure for procedure, _ in found]

    # ------------------------------------------------------------------ forgetting

    async def forget(self, scope: Scope) -> int:
        """Take the user's (with a session: that session's) sessions out of every
        procedure's provenance and delete their outcomes; how many procedures changed.
        A no-op when procedural memory is off."""
        if self.store_or_none is None:
            return 0
        target = scope.model_copy(update={"agent_id": None, "group_id": None})
        return await self.store_or_none.detach_user(target)


def procedure_text(record: ProcedureRecord | Procedure) -> str:
    """The text a procedure is embedded from: its goal, then its steps."""
    return "\n".join([record.goal, *record.steps])
