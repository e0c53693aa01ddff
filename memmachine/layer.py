"""``MemoryLayer``: memmachine inside a synchronous agent, no server needed.

With no URLs everything runs embedded under the data directory. Calls block; underneath,
one private event loop thread drives the async :class:`~memmachine.manager.MemoryManager`
(reachable as ``layer.manager`` for everything this facade does not cover).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from pydantic import BaseModel, SecretStr

from memmachine.agent_state import AgentStateStore, Migration, StateBackend, StateHandle
from memmachine.bootstrap import build_manager, build_state_backend, start_manager
from memmachine.config import Settings
from memmachine.errors import InvalidInputError
from memmachine.manager import MemoryManager
from memmachine.models import FactRecord, ForgetReport, NewMessage, Role, Scope
from memmachine.ports.procedures import AppScope, Outcome, ProcedureRecord
from memmachine.prompting import MemoryPrompt, PromptFormat, build_memory_prompt

__all__ = ["MemoryLayer"]

T = TypeVar("T")
StateT = TypeVar("StateT", bound=BaseModel)


class MemoryLayer:
    """Blocking access to the three kinds of memory, typed agent state and the
    application's procedures.

    ``episodic_db``, ``profile_db`` and ``working_db`` take the same URLs as the
    ``MEMMACHINE_*_STORE_URL`` settings; ``None`` means embedded. ``session_id`` is the
    session that ``store_episodic`` writes to unless a call names another.
    """

    def __init__(
        self,
        episodic_db: str | None = None,
        profile_db: str | None = None,
        working_db: str | None = None,
        *,
        session_id: str = "default",
        data_dir: str | Path | None = None,
        org_id: str = "default",
        project_id: str = "default",
        agent_id: str | None = None,
        settings: Settings | None = None,
    ) -> None:
        overrides: dict[str, Any] = {}
        if episodic_db is not None:
            overrides["episode_store_url"] = SecretStr(episodic_db)
        if profile_db is not None:
            overrides["profile_store_url"] = SecretStr(profile_db)
        if working_db is not None:
            overrides["working_store_url"] = SecretStr(working_db)
        if data_dir is not None:
            overrides["data_dir"] = Path(data_dir)
        base = settings or Settings()
        self.settings = base.model_copy(update=overrides)
        self.session_id = session_id
        self._ids = {"org_id": org_id, "project_id": project_id, "agent_id": agent_id}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="memmachine-layer", daemon=True
        )
        self._thread.start()
        self._closed = False
        self._state_backends: dict[str, StateBackend] = {}
        try:
            self.manager: MemoryManager = self._run(self._open())
        except BaseException:
            self._stop_loop()
            raise

    async def _open(self) -> MemoryManager:
        manager = await build_manager(self.settings)
        await start_manager(manager, self.settings)
        return manager

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("this MemoryLayer is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _scope(self, user_id: str, session_id: str | None = None) -> Scope:
        try:
            return Scope.model_validate({"user_id": user_id, "session_id": session_id, **self._ids})
        except ValueError as exc:
            raise InvalidInputError(str(exc), field="user_id") from None

    # ------------------------------------------------------------------ episodic

    def store_episodic(
        self,
        user_id: str,
        data: str | Mapping[str, Any],
        metadata: Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        role: Role = "user",
        producer: str | None = None,
        timestamp: datetime | None = None,
    ) -> str:
        """Store one message (text, or a dict with ``content``/``role``/...); returns its id."""
        fields: dict[str, Any] = {"content": data} if isinstance(data, str) else dict(data)
        fields.setdefault("role", role)
        fields.setdefault("producer", producer)
        fields.setdefault("timestamp", timestamp)
        fields["metadata"] = {**fields.get("metadata", {}), **(metadata or {})}
        scope = self._scope(user_id, session_id or self.session_id)
        stored = self._run(self.manager.add_messages(scope, [NewMessage.model_validate(fields)]))
        return stored[0].id

    def retrieve_episodic(
        self,
        user_id: str,
        keyword: str,
        *,
        top_k: int = 10,
        session_id: str | None = None,
        expand_context: int = 0,
    ) -> list[dict[str, Any]]:
        """Episodes matching ``keyword`` by meaning and by words, best first."""
        scope = self._scope(user_id, session_id)
        hits = self._run(
            self.manager.search_episodes(scope, keyword, top_k=top_k, expand_context=expand_context)
        )
        return [
            {
                "id": hit.episode.id,
                "content": hit.episode.content,
                "score": hit.score,
                "role": hit.episode.role,
                "producer": hit.episode.producer,
                "timestamp": hit.episode.timestamp,
                "session_id": hit.episode.scope.session_id,
                "metadata": hit.episode.metadata,
                "context": hit.context,
            }
            for hit in hits
        ]

    # ------------------------------------------------------------------ profile

    def store_profile(
        self,
        user_id: str,
        data: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        tag: str = "profile",
        confidence: float = 1.0,
    ) -> int:
        """Upsert facts; returns how many were written.

        ``data`` may be ``{feature: value}`` (under ``tag``), ``{tag: {feature: value}}``, or
        a list of ``{"tag", "feature", "value", ...}`` dicts.
        """
        records = [
            FactRecord.model_validate({"confidence": confidence, **fact})
            for fact in _facts_from(data, tag)
        ]
        return len(self._run(self.manager.set_facts(self._scope(user_id), records)))

    def retrieve_profile(
        self, user_id: str, *, tag: str | None = None
    ) -> dict[str, dict[str, str]]:
        """The user's profile as ``{tag: {feature: value}}``."""
        facts = self._run(self.manager.list_facts(self._scope(user_id), tag=tag))
        profile: dict[str, dict[str, str]] = {}
        for fact in facts:
            profile.setdefault(fact.tag, {})[fact.feature] = fact.value
        return profile

    # ------------------------------------------------------------------ prompt

    def memory_prompt(
        self,
        user_id: str,
        query: str,
        *,
        session_id: str | None = None,
        max_tokens: int = 2000,
        format: PromptFormat = "openai",
    ) -> MemoryPrompt:
        """The context for the next LLM call: profile facts, relevant episodes, the session
        summary and recent messages, then ``query``, within ``max_tokens`` (estimated), in
        OpenAI, Anthropic or Gemini shape; see :mod:`memmachine.prompting`."""
        scope = self._scope(user_id, session_id or self.session_id)
        return self._run(
            build_memory_prompt(self.manager, scope, query, max_tokens=max_tokens, format=format)
        )

    # ------------------------------------------------------------------ typed state

    def state(
        self,
        model: type[StateT],
        *,
        user_id: str,
        session_id: str | None = None,
        backend: str = "working",
        name: str | None = None,
        schema_version: int = 1,
        migrations: Mapping[int, Migration] | None = None,
    ) -> StateHandle[StateT]:
        """The typed state ``model`` of ``user_id`` in a session (default: this layer's),
        see :mod:`memmachine.agent_state`: ``handle.load()``, ``handle.save(state)``,
        ``handle.delete()``, and ``with handle as state:`` to save changes on exit.
        ``backend`` is ``working`` (the session's working memory), ``file``, ``sqlite``
        (both under the data dir) or ``redis`` (the working store's server); one backend of
        each kind is opened on first use and closed with the layer."""
        scope = self._scope(user_id, session_id or self.session_id)
        chosen = self._state_backends.get(backend)
        if chosen is None:
            chosen = build_state_backend(self.settings, backend, manager=self.manager)
            self._run(chosen.start())
            self._state_backends[backend] = chosen
            if backend != "working":  # working memory is forgotten with the user already
                self.manager.state_backends.append(chosen)  # forget_user reaches it
        store = AgentStateStore(
            model, chosen, name=name, schema_version=schema_version, migrations=migrations
        )
        return StateHandle(store, scope, self._run)

    # ------------------------------------------------------------------ procedures

    def _app(self) -> AppScope:
        try:
            return AppScope.model_validate(self._ids)
        except ValueError as exc:
            raise InvalidInputError(str(exc), field="agent_id") from None

    def remember_procedure(
        self,
        goal: str,
        steps: Sequence[str],
        *,
        preconditions: Sequence[str] = (),
        pitfalls: Sequence[str] = (),
        confidence: float = 0.6,
        metadata: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Remember how a task is done, for every user of this layer's application (its
        org, project and agent). Personal details are redacted and instructions to the model
        refused (``InvalidInputError`` naming the field); a procedure of the same goal is
        superseded, its old version kept. Returns the stored procedure."""
        record = ProcedureRecord(
            goal=goal,
            steps=list(steps),
            preconditions=list(preconditions),
            pitfalls=list(pitfalls),
            confidence=confidence,
            metadata=dict(metadata or {}),
        )
        stored = self._run(self.manager.procedural_service.remember(self._app(), record))
        return stored.model_dump()

    def recall_procedures(self, task: str, *, top_k: int = 3) -> list[dict[str, Any]]:
        """The application's procedures for ``task`` (words and, with an embedder, meaning),
        best first, each with its ``score``, steps, confidence and use counts."""
        found = self._run(self.manager.procedural_service.search(self._app(), task, top_k=top_k))
        return [{**procedure.model_dump(), "score": score} for procedure, score in found]

    def procedure_history(self, procedure_id: str) -> dict[str, Any]:
        """A procedure with its superseded versions (``history``, oldest first);
        ``NotFoundError`` when the application has none such."""
        procedure, history = self._run(
            self.manager.procedural_service.history(self._app(), procedure_id)
        )
        return {**procedure.model_dump(), "history": [old.model_dump() for old in history]}

    def report_procedure_use(self, procedure_id: str, *, success: bool) -> dict[str, Any]:
        """Count one reuse of a procedure: success raises its confidence, failure lowers it.
        Returns the procedure as it is now (``NotFoundError`` when there is none)."""
        used = self._run(
            self.manager.procedural_service.report_use(self._app(), procedure_id, success=success)
        )
        return used.model_dump()

    def report_outcome(
        self, user_id: str, outcome: Outcome, *, session_id: str | None = None
    ) -> str | None:
        """Record how the user's session (default: this layer's) went. A success queues
        the distillation of its procedures when the job queue and an LLM are on; returns
        that job's id (``None`` when none was queued)."""
        scope = self._scope(user_id, session_id or self.session_id)
        _, job = self._run(self.manager.procedural_service.set_outcome(scope, outcome))
        return job

    # ------------------------------------------------------------------ forget / lifecycle

    def forget_user(self, user_id: str) -> ForgetReport:
        return self._run(self.manager.forget_user(self._scope(user_id)))

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._run(self._close_parts())
        finally:
            self._closed = True
            self._stop_loop()

    async def _close_parts(self) -> None:
        try:
            for backend in self._state_backends.values():
                await backend.close()
        finally:
            await self.manager.close()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _facts_from(
    data: Mapping[str, Any] | Sequence[Mapping[str, Any]], tag: str
) -> list[dict[str, Any]]:
    if not isinstance(data, Mapping):
        return [dict(item) for item in data]
    facts: list[dict[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            facts.extend(
                {"tag": key, "feature": feature, "value": str(inner)}
                for feature, inner in value.items()
            )
        else:
            facts.append({"tag": tag, "feature": key, "value": str(value)})
    return facts
