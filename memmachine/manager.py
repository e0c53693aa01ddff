"""The memory manager: the one object every interface (REST, MCP, CLI, SDK) calls.

A thin facade over one service per kind of memory (:mod:`memmachine.memory`): episodic,
profile, working, procedural and custom types, sharing one write gate, job scheduler, clock
and retention sweep. Its own logic only spans services: adding messages (all or nothing),
deleting an episode (and its traces in facts), searching every kind at once, and forgetting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from memmachine.config import (
    CompactionSettings,
    ExtractionSettings,
    LimitSettings,
    RetrievalSettings,
    SafetySettings,
)
from memmachine.memory.adding import MessageAdder
from memmachine.memory.custom_registry import MemoryTypeRegistry
from memmachine.memory.episodic import EpisodicService
from memmachine.memory.forgetting import Forgetting
from memmachine.memory.idempotency import IdempotentWrites
from memmachine.memory.lifecycle import Parts, Resource
from memmachine.memory.lifecycle import embedder_status as embedder_status_of
from memmachine.memory.lifecycle import reranker_status as reranker_status_of
from memmachine.memory.procedural import ProceduralMemory
from memmachine.memory.profile import ProfileService
from memmachine.memory.repeats import Added
from memmachine.memory.replaceable import ReplaceableParts
from memmachine.memory.retention import Clock, RetentionSettings, RetentionSweep
from memmachine.memory.scheduling import JobScheduler
from memmachine.memory.working import WorkingService
from memmachine.models import (
    EmbedderStatus,
    EpisodeDetachment,
    HealthReport,
    LlmStatus,
    MemoryType,
    NewMessage,
    RerankerStatus,
    Scope,
    SearchResult,
)
from memmachine.ports import (
    Embedder,
    EpisodeStore,
    JobQueue,
    LanguageModel,
    Lifecycle,
    ProfileStore,
    Reranker,
    RetentionPolicyStore,
    WorkingMemoryStore,
)
from memmachine.ports.procedures import ProcedureStore
from memmachine.prompting.tokens import TokenCounters
from memmachine.retrieval.explain import StageControl
from memmachine.safety.gate import WriteGate, check_query
from memmachine.stage_observer import StageObserver

__all__ = ["MemoryManager", "Resource"]


class MemoryManager(ReplaceableParts, Lifecycle):
    """Every kind of memory behind one API; each method is its service's (``*_service``,
    ``memory_types``, ``idempotent``), documented there. ``embedder``, ``reranker``,
    ``retrieval`` and ``safety`` may be replaced at any time; the next call uses them."""

    def __init__(
        self,
        *,
        episodes: EpisodeStore,
        profile: ProfileStore,
        working: WorkingMemoryStore,
        embedder: Embedder | None,
        embedder_status: EmbedderStatus | None = None,
        reranker: Reranker | None = None,
        reranker_status: RerankerStatus | None = None,
        limits: LimitSettings | None = None,
        retrieval: RetrievalSettings | None = None,
        working_ttl_seconds: int | None = 86_400,
        resources: Sequence[Resource] = (),
        extra_health: Sequence[Any] = (),
        safety: SafetySettings | None = None,
        jobs: JobQueue | None = None,
        jobs_off_reason: str = "no job queue configured",
        language_model: LanguageModel | None = None,
        language_model_off_reason: str = "no LLM configured",
        compaction: CompactionSettings | None = None,
        job_max_attempts: int = 5,
        extraction: ExtractionSettings | None = None,
        memory_types: MemoryTypeRegistry | None = None,
        stage_observer: StageObserver | None = None,
        procedures: ProcedureStore | None = None,
        token_counters: TokenCounters | None = None,
        clock: Clock | None = None,
        retention: RetentionSettings | None = None,
        retention_policies: RetentionPolicyStore | None = None,
        idempotent: IdempotentWrites | None = None,
    ) -> None:
        self.episodes, self.profile, self.working, self.jobs = episodes, profile, working, jobs
        self.embedder_status = embedder_status or embedder_status_of(embedder)
        self.reranker_status = reranker_status or reranker_status_of(reranker)
        self.limits = limits or LimitSettings()
        self.working_ttl_seconds, self.language_model = working_ttl_seconds, language_model
        self.llm_status = (
            LlmStatus(enabled=True, model=language_model.model)
            if language_model is not None
            else LlmStatus(enabled=False, reason=language_model_off_reason)
        )
        self.compaction = compaction or CompactionSettings()
        self.extraction = extraction = extraction or ExtractionSettings()
        #: How token budgets are counted, per prompt format (compaction: the OpenAI one).
        self.token_counters = token_counters or TokenCounters.estimated()
        self.idempotent = idempotent or IdempotentWrites(None)
        #: Custom memory types (:mod:`memmachine.memory_types`), started as a resource.
        self.memory_types = memory_types if memory_types is not None else MemoryTypeRegistry()
        #: What every string the services store passes (validation, PII, injection).
        self.gate = WriteGate(safety, self.limits)
        self.scheduler = JobScheduler(
            jobs,
            self.gate,
            off_reason=jobs_off_reason,
            max_attempts=job_max_attempts,
            language_model=language_model,
            extraction=self.extraction,
        )
        self.jobs_off_reason, self.job_max_attempts = self.scheduler.off_reason, job_max_attempts
        self.episodic_service = EpisodicService(
            store=episodes,
            gate=self.gate,
            embedder=embedder,
            reranker=reranker,
            retrieval=retrieval or RetrievalSettings(),
            stage_observer=stage_observer,
            clock=clock,
        )
        self.profile_service = ProfileService(
            store=profile, gate=self.gate, embedder=embedder, extraction=extraction, clock=clock
        )
        self.working_service = WorkingService(
            store=working,
            gate=self.gate,
            scheduler=self.scheduler,
            compaction=self.compaction,
            language_model=language_model,
            ttl_seconds=working_ttl_seconds,
            token_counter=self.token_counters.compaction,
            clock=clock,
        )
        self.retention = RetentionSweep(
            episodes, profile, working, retention, clock, self.gate, retention_policies
        ).erasing(self.memory_types, jobs)
        self.procedural_service = ProceduralMemory(
            procedures, self.gate, embedder, scheduler=self.scheduler
        )
        stores: list[Resource] = [episodes, profile, working]
        stores += [store for store in (jobs, procedures) if store is not None]
        records = [self.idempotent.store] if self.idempotent.store is not None else []
        # The sweep loads the stored policies at its start: their store starts before it.
        kept = [retention_policies] if retention_policies is not None else []
        self._parts = Parts(
            resources=[*resources, self.memory_types, *kept, self.retention],
            stores=[*stores, *records],  # records live on the working store's server
            health=[*stores, *kept, *extra_health, self.retention],
            language_model=language_model,
        )
        self._resources = self._parts.resources
        # What one service does alone is that service's method, under its public name.
        episodic, facts = self.episodic_service, self.profile_service
        self.get_episode, self.list_episodes = episodic.get, episodic.page
        self.search_episodes = episodic.search
        self.set_facts, self.apply_facts = facts.set, facts.apply
        self.apply_consolidation, self.search_facts = facts.apply_consolidation, facts.search
        self.list_facts, self.get_fact = facts.current, facts.get
        self.delete_fact, self.invalidate_fact = facts.delete, facts.invalidate
        self.delete_facts, self.fact_history = facts.delete_matching, facts.history
        self.get_working = self.working_service.get
        self.append_working = self.working_service.append
        self.put_working = self.working_service.put
        self.delete_working = self.working_service.delete
        self.enqueue_compaction = self.scheduler.enqueue_compaction
        self.enqueue_extraction = self.scheduler.enqueue_extraction
        self._adder = MessageAdder(episodic, self.working_service, self.scheduler)
        forgetting = Forgetting(
            *(episodic, facts, self.working_service, self.memory_types, self.procedural_service),
            jobs=jobs,
            idempotent=self.idempotent,
        )
        self.forget_session, self.forget_user = forgetting.session, forgetting.user
        #: Compaction after a forget, and the typed state backends a user forget reaches.
        self.erasure, self.state_backends = forgetting.erasure, forgetting.state_backends
        self._parts.stores.append(self.erasure)  # closed before the stores it compacts

    # ------------------------------------------------------------------ lifecycle

    async def start(self, start_part: Callable[[Resource], Awaitable[None]] | None = None) -> None:
        """Start everything (see :class:`~memmachine.memory.lifecycle.Parts`); ``start_part``
        starts one resource or store in place of ``part.start()`` (the composition root
        passes one that retries unreachable stores with backoff)."""
        await self._parts.start(self.reranker, start_part, self.close)

    async def close(self) -> None:
        """Close everything in reverse order; safe to call twice."""
        await self._parts.close(self.reranker, self.embedder)

    async def health(self) -> HealthReport:
        stores, ok = await self._parts.health()
        return HealthReport(
            status="ok" if ok else "degraded",
            mode="hybrid" if self.embedder is not None else "lexical-only",
            embedder=self.embedder_status,
            stores=stores,
            reranker=self.reranker_status,
            llm=self.llm_status,
        )

    async def add_messages(
        self,
        scope: Scope,
        messages: Sequence[NewMessage],
        *,
        working: bool = True,
        ids: Sequence[str] | None = None,
        extract: bool = True,
    ) -> Added:
        """Store messages as episodes of ``scope.session_id``, in order (see
        :meth:`EpisodicService.add`; the answer's ``new`` leaves out repeated messages);
        with ``working`` also append them to the session's working memory, complete or
        undone (:class:`~memmachine.memory.adding.MessageAdder`, which also completes a
        retry with the same ``ids``). Without ``extract`` no extraction job is queued."""
        return await self._adder.add(scope, messages, working=working, ids=ids, extract=extract)

    async def delete_episode(self, scope: Scope, episode_id: str) -> EpisodeDetachment:
        """Delete one of the user's episodes, its message in the session's working memory,
        then take it out of the facts it supported (:meth:`ProfileService.detach_episodes`)."""
        episode = await self.episodic_service.delete(scope, episode_id)
        if episode is not None:
            await self.working_service.drop_episode(episode)
        return await self.profile_service.detach_episodes(scope.user_scope(), [episode_id])

    async def embed_query(self, query: str) -> list[float] | None:
        """The vector of a valid ``query`` for several searches to share (a memory prompt
        searches memories and procedures); ``None`` when no embedder is configured."""
        check_query(self.limits, query, 1)
        if self.embedder is None:
            return None
        return await self.episodic_service.embed_query(query)

    async def search(
        self,
        scope: Scope,
        query: str,
        *,
        top_k: int = 10,
        types: Iterable[MemoryType] = tuple(MemoryType),
        expand_context: int = 0,
        working_last_n: int = 20,
        stages: StageControl | None = None,
        query_vector: Sequence[float] | None = None,
    ) -> SearchResult:
        """Search every requested memory type at once with one query embedding (``query_vector``
        when the caller has it from :meth:`embed_query`); ``stages`` controls the episodic
        search's stages (see :meth:`EpisodicService.search`)."""
        check_query(self.limits, query, top_k)
        wanted, result = set(types), SearchResult()
        vector = list(query_vector) if query_vector is not None else None
        if (
            vector is None
            and self.embedder is not None
            and wanted & {MemoryType.EPISODIC, MemoryType.PROFILE}
        ):
            vector = await self.episodic_service.embed_query(query, stages)

        async def episodic() -> None:
            result.episodic = await self.search_episodes(
                scope,
                query,
                top_k=top_k,
                expand_context=expand_context,
                query_vector=vector,
                stages=stages,
            )

        async def profile() -> None:
            result.profile = await self.search_facts(scope, query, top_k=top_k, query_vector=vector)

        async def working() -> None:
            if scope.session_id is not None:
                result.working = await self.get_working(scope, last_n=working_last_n)

        jobs = {MemoryType.EPISODIC: episodic, MemoryType.PROFILE: profile}
        jobs[MemoryType.WORKING] = working
        await asyncio.gather(*(jobs[kind]() for kind in wanted))
        return result
