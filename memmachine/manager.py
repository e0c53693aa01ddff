"""The memory manager: the one service every interface (REST, MCP, CLI, SDK) calls.

It owns no storage itself. It validates input against the limits, assigns ids and times,
embeds text, fans a request out to the episode, profile and working-memory stores, fuses
search signals (and, with a reranker, reorders the best of them), and keeps multi-store
writes all-or-nothing by compensating on failure.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from memmachine.compaction import RESERVED_STATE_KEY, working_tokens
from memmachine.confidence import effective
from memmachine.config import (
    CompactionSettings,
    ExtractionSettings,
    LimitSettings,
    RetrievalSettings,
    SafetySettings,
)
from memmachine.errors import (
    InvalidInputError,
    NotFoundError,
    PayloadTooLargeError,
    StoreError,
    StoreUnavailableError,
)
from memmachine.memory_types import MemoryTypeRegistry
from memmachine.models import (
    ID_PATTERN,
    EmbedderStatus,
    Episode,
    EpisodeDetachment,
    EpisodeHit,
    EpisodeRecord,
    Fact,
    FactHit,
    FactRecord,
    FactVersion,
    ForgetReport,
    HealthReport,
    LlmStatus,
    MemoryType,
    NewMessage,
    RerankerStatus,
    Scope,
    SearchResult,
    StoreHealth,
    WorkingMemory,
    WorkingMessage,
    as_utc,
    utc_now,
)
from memmachine.ports import (
    Embedder,
    EpisodeStore,
    Job,
    JobQueue,
    LanguageModel,
    ProfileStore,
    Reranker,
    SpanEmbedder,
    WorkingMemoryStore,
)
from memmachine.retrieval import episode_search_text, reciprocal_rank_fusion, score_fusion
from memmachine.retrieval.derivatives import sentence_spans, split_sentences
from memmachine.retrieval.speakers import named_speakers
from memmachine.retrieval.temporal import asks_when, mentions_time, time_ranges
from memmachine.retrieval.text import Said, indexed_text, window_layout, window_text
from memmachine.safety import Redactor, looks_like_injection, merge_counts

__all__ = ["MemoryManager", "Resource"]

log = logging.getLogger(__name__)

#: How long a write waits for its compaction job to be queued before giving up on it.
_ENQUEUE_TIMEOUT_SECONDS = 1.0


class Resource(Protocol):
    """Something with a lifecycle the manager starts before, and closes after, its stores."""

    async def start(self) -> None: ...
    async def close(self) -> None: ...


class MemoryManager:
    """Working, episodic and profile memory behind one API; see the module docstring."""

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
    ) -> None:
        self.episodes = episodes
        self.profile = profile
        self.working = working
        self.embedder = embedder
        self.embedder_status = embedder_status or _status_of(embedder)
        self.reranker = reranker
        self.reranker_status = reranker_status or _reranker_status_of(reranker)
        self.limits = limits or LimitSettings()
        self.retrieval = retrieval or RetrievalSettings()
        self.working_ttl_seconds = working_ttl_seconds
        self._resources = list(resources)
        self._extra_health = list(extra_health)
        self._started: list[Resource] = []
        self.safety = safety or SafetySettings()
        #: The background job queue (compaction, extraction), or ``None`` when it is off.
        self.jobs = jobs
        self.jobs_off_reason = "" if jobs is not None else jobs_off_reason
        self.job_max_attempts = job_max_attempts
        #: The chat model of background work (summaries), or ``None`` when it is off.
        self.language_model = language_model
        self.llm_status = (
            LlmStatus(enabled=True, model=language_model.model)
            if language_model is not None
            else LlmStatus(enabled=False, reason=language_model_off_reason)
        )
        self.compaction = compaction or CompactionSettings()
        self.extraction = extraction or ExtractionSettings()
        self._llm_started = False
        #: Custom memory types (:mod:`memmachine.memory_types`), started as a resource.
        self.memory_types = memory_types if memory_types is not None else MemoryTypeRegistry()
        self._resources.append(self.memory_types)

    # ------------------------------------------------------------------ lifecycle

    async def start(self, start_part: Callable[[Resource], Awaitable[None]] | None = None) -> None:
        """Start the reranker (a no-op when it is already loaded), resources, stores, the job
        queue, then the language model's client (no request is sent); on any failure close
        what started and re-raise.

        ``start_part`` starts one resource or store in place of ``part.start()`` (the
        composition root passes one that retries unreachable stores with backoff)."""
        if self.reranker is not None:
            try:
                await self.reranker.start()
            except BaseException:
                await self.close()
                raise
        parts: list[Resource] = [*self._resources, self.episodes, self.profile, self.working]
        if self.jobs is not None:
            parts.append(self.jobs)
        for part in parts:
            try:
                if start_part is None:
                    await part.start()
                else:
                    await start_part(part)
            except BaseException:
                await self.close()
                raise
            self._started.append(part)
        if self.language_model is not None:
            try:
                await self.language_model.start()
            except BaseException:
                await self.close()
                raise
            self._llm_started = True

    async def close(self) -> None:
        """Close the language model, the reranker, the embedder, then the queue, stores and
        resources in reverse order; safe to call twice."""
        if self.language_model is not None and self._llm_started:
            self._llm_started = False
            await _close_quietly(self.language_model)
        if self.reranker is not None:
            await _close_quietly(self.reranker)
        if self.embedder is not None:
            await _close_quietly(self.embedder)
        while self._started:
            await _close_quietly(self._started.pop())

    @property
    def safety(self) -> SafetySettings:
        """Write-path safety: PII redaction and the injection guard (see :meth:`add_messages`,
        :meth:`set_facts`, :meth:`append_working`, :meth:`put_working`). Assigning new
        settings takes effect on the next write."""
        return self._safety

    @safety.setter
    def safety(self, value: SafetySettings) -> None:
        self._safety = value
        self._redactor = Redactor(value.pii_kinds) if value.redact_pii else None

    async def __aenter__(self) -> MemoryManager:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def health(self) -> HealthReport:
        checks = [self.episodes.health(), self.profile.health(), self.working.health()]
        if self.jobs is not None:
            checks.append(self.jobs.health())
        checks += [part.health() for part in self._extra_health]
        reports: list[StoreHealth] = list(await asyncio.gather(*checks))
        stores = {report.name: report for report in reports}
        ok = all(report.status != "down" for report in reports)
        return HealthReport(
            status="ok" if ok else "degraded",
            mode="hybrid" if self.embedder is not None else "lexical-only",
            embedder=self.embedder_status,
            stores=stores,
            reranker=self.reranker_status,
            llm=self.llm_status,
        )

    # ------------------------------------------------------------------ episodic

    async def add_messages(
        self,
        scope: Scope,
        messages: Sequence[NewMessage],
        *,
        working: bool = True,
        ids: Sequence[str] | None = None,
        extract: bool = True,
    ) -> list[Episode]:
        """Store messages as episodes of ``scope.session_id``, in order.

        With ``working`` the same messages are appended to the session's working memory.
        All or nothing: if any part fails, the episodes written by this call are removed.
        ``ids`` gives the episodes' ids (one per message, each matching ``ID_PATTERN``; an id
        the user already has raises ``ConflictError`` and stores nothing) instead of fresh
        ones. Without ``extract`` no extraction job is queued for the new episodes.

        With ``safety.redact_pii`` the content and the metadata's string values are redacted
        before they are embedded or stored, and ``metadata["redacted"]`` counts what was
        replaced per kind. With ``safety.block_injected_facts`` a message that reads as an
        instruction to the model is still stored (it is a record of what was said) with
        ``metadata["suspected_injection"]`` giving the reason, so extraction can skip it.
        """
        session_scope = _require_session(scope)
        self._check_messages(messages)
        episode_ids = _episode_ids(ids, len(messages))
        messages = [self._sanitize_message(message) for message in messages]
        now = utc_now()
        said = await self._said_before(session_scope) if messages else []
        lexical = self.retrieval.lexical_context
        records = []
        contexts: list[list[Said]] = []
        for episode_id, message in zip(episode_ids, messages, strict=True):
            timestamp = as_utc(message.timestamp) if message.timestamp else now
            own = episode_search_text(
                message.content, timestamp=timestamp, producer=message.producer, role=message.role
            )
            before = [content for _, content in said[len(said) - lexical :]] if lexical else []
            records.append(
                EpisodeRecord(
                    id=episode_id,
                    role=message.role,
                    producer=message.producer,
                    content=message.content,
                    timestamp=timestamp,
                    metadata=message.metadata,
                    search_text=indexed_text(own, before),
                )
            )
            contexts.append(list(said))
            said.append((message.producer or message.role, message.content))
        if self.embedder is not None and records:
            await self._embed_records(self.embedder, records, contexts)
        stored = await self.episodes.add_episodes(session_scope, records)
        if working and stored:
            try:
                memory = await self.working.append(
                    session_scope,
                    [_working_message(episode) for episode in stored],
                    ttl_seconds=self.working_ttl_seconds,
                )
            except BaseException:
                for episode in stored:
                    await self.episodes.delete_episode(session_scope, episode.id)
                raise
            await self._maybe_enqueue_compaction(session_scope, memory)
        if extract:
            await self._maybe_enqueue_extraction(session_scope, stored)
        return stored

    async def get_episode(self, scope: Scope, episode_id: str) -> Episode:
        episode = await self.episodes.get_episode(scope.user_scope(), episode_id)
        if episode is None:
            raise NotFoundError(f"episode {episode_id!r} not found")
        return episode

    async def list_episodes(
        self, scope: Scope, *, limit: int = 100, offset: int = 0, newest_first: bool = False
    ) -> tuple[list[Episode], int]:
        """A page of the scope's episodes and the total count in scope."""
        page, total = await asyncio.gather(
            self.episodes.list_episodes(
                scope, limit=limit, offset=offset, newest_first=newest_first
            ),
            self.episodes.count_episodes(scope),
        )
        return page, total

    async def delete_episode(self, scope: Scope, episode_id: str) -> EpisodeDetachment:
        """Delete one of the user's episodes, then the facts that rested only on it: each
        goes back to its newest earlier version other episodes back, or is deleted (see
        ``ProfileStore.detach_episodes``); facts with other sources only lose the id."""
        user = scope.user_scope()
        if not await self.episodes.delete_episode(user, episode_id):
            raise NotFoundError(f"episode {episode_id!r} not found")
        return await self._detach_episodes(user, [episode_id])

    async def _detach_episodes(self, scope: Scope, episode_ids: Sequence[str]) -> EpisodeDetachment:
        """Take deleted episodes out of the user's facts; restored facts are embedded
        again (their earlier value's embedding was not kept)."""
        report = await self.profile.detach_episodes(scope, episode_ids)
        restored = [await self.profile.get_fact(scope, fact_id) for fact_id in report.restored]
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
            await self.profile.upsert_facts(scope, again)  # same values: no new version
        return report

    async def search_episodes(
        self,
        scope: Scope,
        query: str,
        *,
        top_k: int = 10,
        expand_context: int = 0,
        query_vector: Sequence[float] | None = None,
    ) -> list[EpisodeHit]:
        """Hybrid search over the scope's episodes, best first.

        Stages (each has a switch in :class:`~memmachine.config.RetrievalSettings`):

        1. Candidates: dense similarity (an episode scores the best of its own vector and its
           derivative vectors: sentences, ``sentence_derivatives``, and its context window,
           ``context_window``) and full-text BM25 over the episode's indexed text (its own
           words and those of the messages before it, ``lexical_context``), each
           ``max(min_candidates, top_k * candidates_per_result)`` deep, fused by reciprocal
           rank (``fusion="rrf"``, ``rrf_k``) or by score (``fusion="score"``: each list
           min-max scaled, from 0 when it is shorter than asked for), weighted by
           ``vector_weight`` and ``fulltext_weight``.
        2. Boosts, multiplying the fused score: hits said by a speaker the query names
           (``speaker_boost``), hits inside a time range the query names, relative ranges
           resolved against the newest candidate or now, whichever is earlier
           (``time_boost``, see :func:`memmachine.retrieval.temporal.time_ranges`), hits that
           say when something happened when the query asks when (``when_boost``, see
           :func:`~memmachine.retrieval.temporal.asks_when`), recency (``recency_weight``)
           and ``metadata["importance"]`` (``importance_weight``).
        3. Graph neighbourhood: each of the best ``neighbour_candidates`` passes
           ``neighbour_weight`` times its score to the turns right before and after it in its
           session and ``second_neighbour_weight`` times its score to the turns two away; a
           turn keeps the largest share passed to it, added to its own score, and may enter
           the results this way (``ranks["neighbour"]`` = the rank of the hit that passed
           it).

        Without a reranker a hit's ``score`` is in [0, 1]: 1.0 = first in every signal with
        every boost and the largest neighbour share. With one, the best
        ``max(top_k, retrieval.rerank_candidates)`` hits are scored by the reranker against
        their indexed text (``"<date> <speaker>: <content>"``), reordered by that score
        (equal scores keep the earlier order), cut to ``top_k`` and given
        ``ranks["rerank"]`` (1-based); ``score`` is then the reranker's score min-max scaled
        over those candidates: 1.0 = the reranker's best, 0.0 = its worst, and 1.0 for all
        when it scored them all alike. A failing reranker raises ``StoreError``
        (``store="reranker"``): the search fails rather than silently returning another
        order.

        ``expand_context`` adds up to that many neighbouring turns before and after each hit
        (marked ``context=True``, scored just below the hit they surround); they come on top
        of the ``top_k`` hits.
        """
        self._check_query(query, top_k)
        tuning = self.retrieval
        candidates = max(tuning.min_candidates, top_k * tuning.candidates_per_result)
        # the full-text search runs while the query is embedded (in a worker thread)
        lexical = asyncio.ensure_future(self.episodes.fulltext_search(scope, query, candidates))
        if query_vector is None and self.embedder is not None:
            try:
                query_vector = (await self.embedder.embed([query]))[0]
            except BaseException:
                lexical.cancel()
                await asyncio.gather(lexical, return_exceptions=True)
                raise
        if query_vector is not None:
            dense_hits, text_hits = await asyncio.gather(
                self.episodes.vector_search(
                    scope, query_vector, candidates, derivatives=tuning.sentence_derivatives
                ),
                lexical,
            )
        else:
            dense_hits, text_hits = [], await lexical
        by_id: dict[str, Episode] = {}
        for episode, _ in [*dense_hits, *text_hits]:
            by_id.setdefault(episode.id, episode)
        weights = {"vector": tuning.vector_weight, "fulltext": tuning.fulltext_weight}
        if tuning.fusion == "score":
            scored = {
                "vector": [(episode.id, score) for episode, score in dense_hits],
                "fulltext": [(episode.id, score) for episode, score in text_hits],
            }
            fused = score_fusion(scored, weights=weights, depth=candidates)
        else:
            rankings = {
                "vector": [episode.id for episode, _ in dense_hits],
                "fulltext": [episode.id for episode, _ in text_hits],
            }
            fused = reciprocal_rank_fusion(rankings, k=tuning.rrf_k, weights=weights)
        scores = {item.key: item.score for item in fused}
        ranks = {item.key: dict(item.ranks) for item in fused}
        ceiling = self._boost(query, scores, by_id)
        spread = max(tuning.neighbour_weight, tuning.second_neighbour_weight)
        if spread > 0 and scores:
            await self._spread_to_neighbours(scope, scores, ranks, by_id)
            ceiling *= 1 + spread
        # sorted() is stable: equal scores keep the fused order
        order = sorted(scores, key=lambda key: -scores[key])
        pool = top_k if self.reranker is None else max(top_k, tuning.rerank_candidates)
        hits = [
            EpisodeHit(episode=by_id[key], score=min(scores[key] / ceiling, 1.0), ranks=ranks[key])
            for key in order[:pool]
        ]
        if self.reranker is not None and hits:
            hits = await self._rerank(self.reranker, query, hits, top_k)
        if expand_context > 0 and hits:
            hits = await self._expand(scope, hits, expand_context)
        return hits

    async def _said_before(self, session_scope: Scope) -> list[Said]:
        """The last messages of the session, oldest first, as many as the context window or
        lexical context may use (none when both are off)."""
        tuning = self.retrieval
        window = tuning.context_window if self.embedder is not None else 0
        wanted = max(window, tuning.lexical_context)
        if wanted <= 0:
            return []
        latest = await self.episodes.list_episodes(session_scope, limit=wanted, newest_first=True)
        return [(episode.producer or episode.role, episode.content) for episode in latest[::-1]]

    async def _embed_records(
        self,
        embedder: Embedder,
        records: Sequence[EpisodeRecord],
        contexts: Sequence[Sequence[Said]],
    ) -> None:
        """Set each record's ``embedding`` and ``derivative_embeddings`` (with their
        weights), reading each message after up to ``retrieval.context_window`` of the
        messages before it in its session (``contexts[i]``, oldest first): pooled from one
        run over that window when the embedder can (:meth:`_embed_in_windows`), else as
        separate texts (:meth:`_embed_as_texts`)."""
        tuning = self.retrieval
        left = list(range(len(records)))
        if (
            tuning.context_window
            and tuning.context_pooling
            and isinstance(embedder, SpanEmbedder)
            and embedder.pools_spans
        ):
            left = await self._embed_in_windows(embedder, records, contexts)
        if left:
            await self._embed_as_texts(
                embedder, [records[i] for i in left], [contexts[i] for i in left]
            )

    async def _embed_in_windows(
        self,
        embedder: SpanEmbedder,
        records: Sequence[EpisodeRecord],
        contexts: Sequence[Sequence[Said]],
    ) -> list[int]:
        """One model run per record over its window (:func:`window_layout`: the date, the
        messages before it, then its own ``"<speaker>: <content>"`` line), as many of the
        messages before as fit the model's window, newest kept. The record's own vector is
        pooled over the date and its own line; with ``retrieval.sentence_derivatives`` each
        sentence of a multi-sentence message is pooled over the date, the speaker and the
        sentence (weight 1.0). Returns the positions of the records left to embed as texts:
        a message too long for the model on its own, or whose sentences cannot be located."""
        tuning = self.retrieval
        owns = [_search_text(record) for record in records]
        befores = [list(context)[-tuning.context_window :] for context in contexts]
        lines = [f"{speaker}: {content}" for before in befores for speaker, content in before]
        counts = await embedder.count_tokens(["", *owns, *lines])
        specials, own_counts, line_counts = counts[0], counts[1 : len(owns) + 1], counts[1:]
        line_tokens = iter(count - specials for count in line_counts[len(owns) :])
        texts: list[str] = []
        spans: list[list[list[tuple[int, int]]]] = []
        placed: list[int] = []
        left: list[int] = []
        for index, record in enumerate(records):
            before = befores[index]
            tokens = [next(line_tokens) for _ in before]
            total, kept = own_counts[index], 0
            for extra in reversed(tokens):
                if total + extra > embedder.max_tokens:
                    break
                total, kept = total + extra, kept + 1
            sentences = sentence_spans(record.content) if tuning.sentence_derivatives else []
            if own_counts[index] > embedder.max_tokens or sentences is None:
                left.append(index)
                continue
            said = [*before[len(before) - kept :], (record.producer or record.role, record.content)]
            layout = window_layout(said, timestamp=record.timestamp)
            day, line, start = (0, layout.day_end), layout.line_start, layout.content_start
            sets = [[day, (line, len(layout.text))]]
            sets += [[day, (line, start), (start + a, start + b)] for a, b in sentences]
            texts.append(layout.text)
            spans.append(sets)
            placed.append(index)
        pooled = await embedder.embed_spans(texts, spans) if texts else []
        for index, vectors in zip(placed, pooled, strict=True):
            own, *parts = vectors
            if own is None:
                left.append(index)
                continue
            record = records[index]
            record.embedding = own
            for vector in parts:
                if vector is not None:
                    record.derivative_embeddings.append(vector)
                    record.derivative_weights.append(1.0)
        return sorted(left)

    async def _embed_as_texts(
        self,
        embedder: Embedder,
        records: Sequence[EpisodeRecord],
        contexts: Sequence[Sequence[Said]],
    ) -> None:
        """Each record's own text (``"<date> <speaker>: <content>"``), with
        ``retrieval.sentence_derivatives`` each sentence of a multi-sentence message in the
        same ``"<date> <speaker>:"`` context (weight 1.0), and with
        ``retrieval.context_window`` its window (:func:`window_text`; weight
        ``retrieval.context_window_weight``), embedded as texts in one call."""
        tuning = self.retrieval
        texts = [_search_text(record) for record in records]
        owners: list[int] = []
        weights: list[float] = []
        for index, record in enumerate(records):
            if tuning.sentence_derivatives:
                for sentence in split_sentences(record.content):
                    texts.append(
                        episode_search_text(
                            sentence,
                            timestamp=record.timestamp,
                            producer=record.producer,
                            role=record.role,
                        )
                    )
                    owners.append(index)
                    weights.append(1.0)
            before = (
                list(contexts[index])[-tuning.context_window :] if tuning.context_window else []
            )
            if before:
                speaker = record.producer or record.role
                said = [*before, (speaker, record.content)]
                texts.append(window_text(said, timestamp=record.timestamp))
                owners.append(index)
                weights.append(tuning.context_window_weight)
        vectors = await embedder.embed(texts)
        for record, vector in zip(records, vectors[: len(records)], strict=True):
            record.embedding = vector
        for index, vector, weight in zip(owners, vectors[len(records) :], weights, strict=True):
            records[index].derivative_embeddings.append(vector)
            records[index].derivative_weights.append(weight)

    def _boost(self, query: str, scores: dict[str, float], by_id: dict[str, Episode]) -> float:
        """Multiply ``scores`` in place by the speaker, time, recency and importance boosts
        (see :meth:`search_episodes`); returns the largest factor any hit could have had."""
        tuning = self.retrieval
        ceiling = 1.0
        if not scores:
            return ceiling
        episodes = [by_id[key] for key in scores]
        factors = dict.fromkeys(scores, 1.0)
        if tuning.speaker_boost > 0:
            named = named_speakers(query, {e.producer for e in episodes if e.producer})
            if named:
                ceiling *= 1 + tuning.speaker_boost
                for episode in episodes:
                    if episode.producer in named:
                        factors[episode.id] *= 1 + tuning.speaker_boost
        newest = max(episode.timestamp for episode in episodes)
        if tuning.time_boost > 0:
            anchor = min(newest, utc_now())
            ranges = time_ranges(query, anchor, slack=timedelta(days=tuning.time_slack_days))
            if ranges:
                ceiling *= 1 + tuning.time_boost
                for episode in episodes:
                    if any(episode.timestamp in span for span in ranges):
                        factors[episode.id] *= 1 + tuning.time_boost
        if tuning.when_boost > 0 and asks_when(query):
            ceiling *= 1 + tuning.when_boost
            for episode in episodes:
                if mentions_time(episode.content):
                    factors[episode.id] *= 1 + tuning.when_boost
        if tuning.recency_weight > 0:
            ceiling *= 1 + tuning.recency_weight
            half_life = tuning.recency_half_life_days * 86_400.0
            for episode in episodes:
                age = max((newest - episode.timestamp).total_seconds(), 0.0)
                factors[episode.id] *= 1 + tuning.recency_weight * 0.5 ** (age / half_life)
        if tuning.importance_weight > 0:
            ceiling *= 1 + tuning.importance_weight
            for episode in episodes:
                factors[episode.id] *= 1 + tuning.importance_weight * _importance(episode)
        for key, factor in factors.items():
            scores[key] *= factor
        return ceiling

    async def _spread_to_neighbours(
        self,
        scope: Scope,
        scores: dict[str, float],
        ranks: dict[str, dict[str, int]],
        by_id: dict[str, Episode],
    ) -> None:
        """Graph neighbourhood (see :meth:`search_episodes`): add to ``scores`` in place the
        largest share each turn one or two away receives from the best hits. One batched
        ``EpisodeStore.adjacent`` query per distance."""
        tuning = self.retrieval
        sources = sorted(scores, key=lambda key: -scores[key])[: tuning.neighbour_candidates]
        adjacent = await self.episodes.adjacent(scope, sources)
        beyond: dict[str, list[Episode]] = {}
        if tuning.second_neighbour_weight > 0:
            nearest = {episode.id for around in adjacent.values() for episode in around}
            beyond = await self.episodes.adjacent(scope, sorted(nearest))
        shares: dict[str, tuple[float, int]] = {}

        def offer(episode: Episode, share: float, position: int) -> None:
            by_id.setdefault(episode.id, episode)
            if share > shares.get(episode.id, (0.0, 0))[0]:
                shares[episode.id] = (share, position)

        for position, key in enumerate(sources, 1):
            first = tuning.neighbour_weight * scores[key]
            second = tuning.second_neighbour_weight * scores[key]
            origin = by_id[key].sequence
            for near in adjacent.get(key, []):
                offer(near, first, position)
                step = near.sequence - origin
                for far in beyond.get(near.id, []):
                    # two away: one more step the same way, in the same session
                    if (far.sequence - near.sequence) * step > 0:
                        offer(far, second, position)
        for key, (share, position) in shares.items():
            scores[key] = scores.get(key, 0.0) + share
            ranks.setdefault(key, {})["neighbour"] = position

    @staticmethod
    async def _rerank(
        reranker: Reranker, query: str, hits: list[EpisodeHit], top_k: int
    ) -> list[EpisodeHit]:
        """Reorder ``hits`` by the reranker's scores and keep the best ``top_k``; see
        :meth:`search_episodes` for what the scores become."""
        texts = [
            episode_search_text(
                hit.episode.content,
                timestamp=hit.episode.timestamp,
                producer=hit.episode.producer,
                role=hit.episode.role,
            )
            for hit in hits
        ]
        scores = await reranker.score(query, texts)
        if len(scores) != len(hits):
            raise StoreError(
                f"the reranker returned {len(scores)} scores for {len(hits)} texts",
                store="reranker",
            )
        if not all(math.isfinite(score) for score in scores):
            raise StoreError("the reranker returned a score that is not finite", store="reranker")
        low, high = min(scores), max(scores)
        spread = high - low
        # sorted() is stable: equal reranker scores keep the fused order.
        order = sorted(range(len(hits)), key=lambda index: -scores[index])[:top_k]
        out: list[EpisodeHit] = []
        for position, index in enumerate(order, start=1):
            hit = hits[index]
            scaled = (scores[index] - low) / spread if spread > 0 else 1.0
            out.append(
                hit.model_copy(update={"score": scaled, "ranks": {**hit.ranks, "rerank": position}})
            )
        return out

    async def _expand(self, scope: Scope, hits: list[EpisodeHit], width: int) -> list[EpisodeHit]:
        neighbour_lists = await asyncio.gather(
            *(
                self.episodes.neighbours(scope, hit.episode.id, before=width, after=width)
                for hit in hits
            )
        )
        seen = {hit.episode.id for hit in hits}
        out: list[EpisodeHit] = []
        for hit, neighbours in zip(hits, neighbour_lists, strict=True):
            out.append(hit)
            for episode in neighbours:
                if episode.id in seen:
                    continue
                seen.add(episode.id)
                out.append(EpisodeHit(episode=episode, score=hit.score * 0.5, context=True))
        return out

    async def search(
        self,
        scope: Scope,
        query: str,
        *,
        top_k: int = 10,
        types: Iterable[MemoryType] = tuple(MemoryType),
        expand_context: int = 0,
        working_last_n: int = 20,
    ) -> SearchResult:
        """Search every requested memory type at once with one query embedding."""
        self._check_query(query, top_k)
        wanted = set(types)
        vector = None
        if self.embedder is not None and wanted & {MemoryType.EPISODIC, MemoryType.PROFILE}:
            vector = (await self.embedder.embed([query]))[0]
        result = SearchResult()

        async def episodic() -> None:
            result.episodic = await self.search_episodes(
                scope,
                query,
                top_k=top_k,
                expand_context=expand_context,
                query_vector=vector,
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

    # ------------------------------------------------------------------ profile

    async def set_facts(self, scope: Scope, facts: Sequence[FactRecord]) -> list[Fact]:
        """Upsert facts for the user; one fact per (tag, feature). All or nothing.

        With ``safety.block_injected_facts`` a fact whose value (or tag, or feature) reads as
        an instruction to the model is refused (``InvalidInputError`` naming
        ``facts.<i>.value``) and nothing is stored. With ``safety.redact_pii`` tag, feature,
        value and metadata string values are redacted and ``metadata["redacted"]`` counts
        what was replaced."""
        self._check_facts(facts)
        self._check_injected_facts(facts)
        records = await self._fact_records(scope, facts)
        return await self.profile.upsert_facts(
            scope.model_copy(update={"session_id": None}), records
        )

    async def apply_facts(
        self,
        scope: Scope,
        facts: Sequence[FactRecord],
        *,
        invalidate: Sequence[str] = (),
        reason: str = "invalidated",
    ) -> list[Fact]:
        """Invalidate the user's facts ``invalidate`` and upsert ``facts`` in one store
        transaction (checked, redacted and embedded as :meth:`set_facts` does)."""
        if facts:
            self._check_facts(facts)
            self._check_injected_facts(facts)
        records = await self._fact_records(scope, facts)
        return await self.profile.apply_facts(
            scope.user_scope(), records, invalidate=invalidate, reason=reason
        )

    async def _fact_records(self, scope: Scope, facts: Sequence[FactRecord]) -> list[FactRecord]:
        records = [self._sanitize_fact(fact) for fact in facts]
        if self.embedder is not None and records:
            vectors = await self.embedder.embed([_fact_text(fact) for fact in records])
            for record, vector in zip(records, vectors, strict=True):
                record.embedding = vector
        for record in records:
            if record.source_session_id is None:
                record.source_session_id = scope.session_id
        return records

    async def list_facts(
        self,
        scope: Scope,
        *,
        tag: str | None = None,
        feature: str | None = None,
        limit: int = 1000,
        offset: int = 0,
    ) -> list[Fact]:
        facts = await self.profile.list_facts(
            scope.user_scope(), tag=tag, feature=feature, limit=limit, offset=offset
        )
        return [self._aged(fact) for fact in facts]

    async def get_fact(self, scope: Scope, fact_id: str) -> Fact:
        fact = await self.profile.get_fact(scope.user_scope(), fact_id)
        if fact is None:
            raise NotFoundError(f"fact {fact_id!r} not found")
        return self._aged(fact)

    def _aged(self, fact: Fact) -> Fact:
        """``fact`` with ``effective_confidence``: its confidence aged since it was last
        confirmed (``extraction.confidence_half_life_days``)."""
        worth = effective(
            fact.confidence, fact.updated_at, utc_now(), self.extraction.confidence_half_life_days
        )
        return fact.model_copy(update={"effective_confidence": round(worth, 6)})

    async def delete_fact(self, scope: Scope, fact_id: str) -> None:
        if not await self.profile.delete_fact(scope.user_scope(), fact_id):
            raise NotFoundError(f"fact {fact_id!r} not found")

    async def invalidate_fact(
        self, scope: Scope, fact_id: str, reason: str
    ) -> tuple[Fact | None, list[FactVersion]]:
        """Close one of the user's facts by hand (it leaves reads; its value stays in the
        history with ``reason``); returns :meth:`fact_history` of its (tag, feature).
        ``NotFoundError`` when the user has no such current fact."""
        user = scope.user_scope()
        fact = await self.profile.get_fact(user, fact_id)
        if fact is None or not await self.profile.invalidate_fact(user, fact_id, reason):
            raise NotFoundError(f"fact {fact_id!r} not found")
        return await self.fact_history(user, fact.tag, fact.feature)

    async def delete_facts(
        self, scope: Scope, *, tag: str | None = None, feature: str | None = None
    ) -> int:
        return await self.profile.delete_facts(scope.user_scope(), tag=tag, feature=feature)

    async def fact_history(
        self, scope: Scope, tag: str, feature: str
    ) -> tuple[Fact | None, list[FactVersion]]:
        """The user's current fact for (tag, feature), if any, and its closed versions,
        oldest first."""
        user = scope.user_scope()
        current = await self.profile.list_facts(user, tag=tag, feature=feature, limit=1)
        history = await self.profile.fact_history(user, tag, feature)
        return (self._aged(current[0]) if current else None), history

    async def search_facts(
        self,
        scope: Scope,
        query: str,
        *,
        top_k: int = 10,
        query_vector: Sequence[float] | None = None,
    ) -> list[FactHit]:
        self._check_query(query, top_k)
        if query_vector is None and self.embedder is not None:
            query_vector = (await self.embedder.embed([query]))[0]
        found = await self.profile.search_facts(scope.user_scope(), query, query_vector, top_k)
        return [FactHit(fact=self._aged(fact), score=score) for fact, score in found]

    # ------------------------------------------------------------------ working

    async def get_working(
        self,
        scope: Scope,
        *,
        last_n: int | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> WorkingMemory:
        """The session's working memory (the newest ``last_n`` messages, or a page of them);
        a session never written reads as empty, version 0."""
        session_scope = _require_session(scope)
        memory = await self.working.get(session_scope, last_n=last_n, offset=offset, limit=limit)
        return memory or WorkingMemory(scope=session_scope)

    async def append_working(
        self, scope: Scope, messages: Sequence[WorkingMessage]
    ) -> WorkingMemory:
        """Append messages to the session's working memory (redacted like
        :meth:`add_messages`)."""
        session_scope = _require_session(scope)
        self._check_messages(messages)
        messages = [self._sanitize_message(message) for message in messages]
        memory = await self.working.append(
            session_scope, messages, ttl_seconds=self.working_ttl_seconds
        )
        await self._maybe_enqueue_compaction(session_scope, memory)
        return memory

    # ------------------------------------------------------------------ compaction jobs

    async def enqueue_compaction(
        self,
        scope: Scope,
        *,
        force: bool = False,
        idempotency_key: str | None = None,
        idle: bool = False,
        delay_seconds: float = 0.0,
    ) -> Job:
        """Queue a ``compact`` job for ``scope``'s session (see :mod:`memmachine.compaction`).

        ``idle`` makes it an inactivity check: when it runs, the session is compacted only
        if nothing was written to it for ``compaction.idle_seconds``. Without
        ``idempotency_key`` every call queues a new job. Raises ``StoreUnavailableError``
        when the job queue is off."""
        session_scope = _require_session(scope)
        if self.jobs is None:
            raise StoreUnavailableError(
                f"background jobs are off: {self.jobs_off_reason}", store="jobs"
            )
        key = idempotency_key or f"compact:{session_scope.session_id}:{uuid.uuid4().hex}"
        payload: dict[str, Any] = {"force": force}
        if idle:
            payload["idle"] = True
        return await self.jobs.enqueue(
            session_scope,
            "compact",
            payload,
            idempotency_key=key,
            max_attempts=self.job_max_attempts,
            delay_seconds=delay_seconds,
        )

    async def enqueue_extraction(
        self, scope: Scope, episode_ids: Sequence[str], *, idempotency_key: str | None = None
    ) -> Job:
        """Queue an ``extract`` job over ``episode_ids`` (see :mod:`memmachine.extraction`).

        Raises ``StoreUnavailableError`` when the job queue is off."""
        session_scope = _require_session(scope)
        if self.jobs is None:
            raise StoreUnavailableError(
                f"background jobs are off: {self.jobs_off_reason}", store="jobs"
            )
        ids = list(episode_ids)
        key = idempotency_key or "extract:" + hashlib.sha256("\n".join(ids).encode()).hexdigest()
        return await self.jobs.enqueue(
            session_scope,
            "extract",
            {"episode_ids": ids},
            idempotency_key=key,
            max_attempts=self.job_max_attempts,
        )

    async def _maybe_enqueue_extraction(self, scope: Scope, episodes: Sequence[Episode]) -> None:
        """After a write: queue one ``extract`` job over the new episodes when a language
        model and the job queue are on. Never fails the write: errors are logged."""
        if (
            self.jobs is None
            or self.language_model is None
            or not self.extraction.enabled
            or not episodes
        ):
            return
        try:
            async with asyncio.timeout(_ENQUEUE_TIMEOUT_SECONDS):
                await self.enqueue_extraction(scope, [episode.id for episode in episodes])
        except Exception as exc:  # the write has succeeded; extraction can wait
            log.warning(
                "could not queue the extraction of session %s: %s",
                scope.session_id,
                getattr(exc, "message", None) or type(exc).__name__,
            )

    async def _maybe_enqueue_compaction(self, scope: Scope, memory: WorkingMemory) -> None:
        """After a write: queue the compactions the session has earned. Never fails (nor
        noticeably slows) the write: a queue that is down or slow is logged and skipped.

        * turn count: one job per ``trigger_messages`` bucket once the session holds more
          messages than that;
        * token count: one job per compaction round once the session's messages and
          summary are estimated above ``max_tokens`` (read only when the session holds more
          than ``keep_last_n`` messages, so that a compaction could remove something);
        * inactivity (with a language model and ``idle_seconds`` > 0): one delayed check
          per session and ``idle_seconds`` window, which compacts the session when nothing
          was written to it for ``idle_seconds`` (see :func:`compact_if_idle`)."""
        settings = self.compaction
        if self.jobs is None:
            return
        own = memory.state.get(RESERVED_STATE_KEY)
        rounds = own.get("compactions", 0) if isinstance(own, dict) else 0
        wanted: list[tuple[str, bool, float]] = []  # (idempotency key, idle, delay)
        trigger = settings.trigger_messages
        if trigger > 0 and memory.message_count > trigger:
            bucket = memory.message_count // trigger
            wanted.append((f"compact:{scope.session_id}:{rounds}:{bucket}", False, 0.0))
        elif memory.message_count > settings.keep_last_n:
            held = await self.working.get(scope)
            if held is not None and working_tokens(held.messages, held.summary) > (
                settings.max_tokens
            ):
                wanted.append((f"compact:{scope.session_id}:{rounds}:tokens", False, 0.0))
        idle = settings.idle_seconds
        if idle > 0 and self.language_model is not None and memory.message_count > 1:
            window = int(time.time() // idle)
            wanted.append((f"idle:{scope.session_id}:{rounds}:{window}", True, idle))
        for key, is_idle, delay in wanted:
            try:
                async with asyncio.timeout(_ENQUEUE_TIMEOUT_SECONDS):
                    await self.enqueue_compaction(
                        scope, idempotency_key=key, idle=is_idle, delay_seconds=delay
                    )
            except Exception as exc:  # the write has succeeded; compaction can wait
                log.warning(
                    "could not queue the compaction of session %s: %s",
                    scope.session_id,
                    getattr(exc, "message", None) or type(exc).__name__,
                )

    async def put_working(
        self,
        scope: Scope,
        *,
        messages: Sequence[WorkingMessage] | None = None,
        state: dict[str, Any] | None = None,
        summary: str | None = None,
        expected_version: int | None = None,
    ) -> WorkingMemory:
        session_scope = _require_session(scope)
        if messages is not None:
            self._check_messages(messages)
        if state is not None and len(json.dumps(state)) > self.limits.max_state_bytes:
            raise PayloadTooLargeError(
                f"state is larger than {self.limits.max_state_bytes} bytes", field="state"
            )
        if summary is not None and len(summary) > self.limits.max_message_chars:
            raise PayloadTooLargeError(
                f"summary is longer than {self.limits.max_message_chars} characters",
                field="summary",
            )
        if expected_version is not None and expected_version < 0:
            raise InvalidInputError("expected_version must be >= 0", field="expected_version")
        if messages is not None:
            messages = [self._sanitize_message(message) for message in messages]
        if self._redactor is not None:
            if state is not None:
                state = self._redactor.redact_json(state).value
            if summary is not None:
                summary = self._redactor.redact(summary).text
        return await self.working.put(
            session_scope,
            messages=messages,
            state=state,
            summary=summary,
            expected_version=expected_version,
            ttl_seconds=self.working_ttl_seconds,
        )

    async def delete_working(self, scope: Scope) -> None:
        if not await self.working.delete(_require_session(scope)):
            raise NotFoundError(f"session {scope.session_id!r} has no working memory")

    # ------------------------------------------------------------------ forget

    async def forget_session(self, scope: Scope) -> ForgetReport:
        """Remove a session from all three stores: episodes, working memory, and the facts
        whose provenance is that session."""
        session_scope = _require_session(scope).model_copy(
            update={"agent_id": None, "group_id": None}
        )
        episode_ids = await self._episode_ids_of(session_scope)
        episodes, facts, sessions = await asyncio.gather(
            self.episodes.delete_episodes(session_scope),
            self.profile.delete_facts(session_scope),
            self.working.delete(session_scope),
        )
        if episode_ids:
            # Facts from other sessions that this session corroborated lose its episodes.
            await self._detach_episodes(session_scope.user_scope(), episode_ids)
        return ForgetReport(
            episodes_deleted=episodes, facts_deleted=facts, sessions_deleted=sessions
        )

    async def _episode_ids_of(self, scope: Scope) -> list[str]:
        ids: list[str] = []
        page = 1_000
        while True:
            batch = await self.episodes.list_episodes(scope, limit=page, offset=len(ids))
            ids.extend(episode.id for episode in batch)
            if len(batch) < page:
                return ids

    async def forget_user(self, scope: Scope) -> ForgetReport:
        """Remove everything stored for the user, in all three stores and in every
        custom memory type."""
        user_scope = scope.user_scope()
        episodes, facts, sessions, _ = await asyncio.gather(
            self.episodes.delete_episodes(user_scope),
            self.profile.delete_facts(user_scope),
            self.working.delete_user(user_scope),
            self.memory_types.forget_user(user_scope),
        )
        return ForgetReport(
            episodes_deleted=episodes, facts_deleted=facts, sessions_deleted=sessions
        )

    # ------------------------------------------------------------------ safety

    def _sanitize_message(self, message: _Message) -> _Message:
        """``message`` with its content and metadata redacted and the findings recorded in
        its metadata; the same object when there is nothing to change."""
        content, metadata = message.content, dict(message.metadata)
        found: dict[str, int] = {}
        if self._redactor is not None:
            text = self._redactor.redact(content)
            values = self._redactor.redact_json(metadata)
            content, metadata = text.text, values.value
            found = merge_counts(text.found, values.found)
        if found:
            metadata["redacted"] = found
        reason = looks_like_injection(content) if self._safety.block_injected_facts else None
        if reason is not None:
            metadata["suspected_injection"] = reason
        if content == message.content and metadata == message.metadata:
            return message
        return message.model_copy(update={"content": content, "metadata": metadata})

    def _check_injected_facts(self, facts: Sequence[FactRecord]) -> None:
        if not self._safety.block_injected_facts:
            return
        for index, fact in enumerate(facts):
            for name in ("value", "feature", "tag"):
                reason = looks_like_injection(getattr(fact, name))
                if reason is not None:
                    raise InvalidInputError(
                        f"fact {index} {name} looks like an instruction to the model "
                        f"({reason}); it is not stored as a fact",
                        field=f"facts.{index}.{name}",
                    )

    def _sanitize_fact(self, fact: FactRecord) -> FactRecord:
        if self._redactor is None:
            return fact.model_copy()
        redactor = self._redactor
        tag, feature, value = (
            redactor.redact(text) for text in (fact.tag, fact.feature, fact.value)
        )
        metadata = redactor.redact_json(fact.metadata)
        found = merge_counts(tag.found, feature.found, value.found, metadata.found)
        new_metadata: dict[str, Any] = metadata.value
        if found:
            new_metadata["redacted"] = found
        return fact.model_copy(
            update={
                "tag": tag.text,
                "feature": feature.text,
                "value": value.text,
                "metadata": new_metadata,
            }
        )

    # ------------------------------------------------------------------ validation

    def _check_messages(self, messages: Sequence[NewMessage | WorkingMessage]) -> None:
        limits = self.limits
        if not messages:
            raise InvalidInputError("at least one message is required", field="messages")
        if len(messages) > limits.max_batch_messages:
            raise PayloadTooLargeError(
                f"{len(messages)} messages in one request; the limit is "
                f"{limits.max_batch_messages}",
                field="messages",
            )
        for index, message in enumerate(messages):
            if len(message.content) > limits.max_message_chars:
                raise PayloadTooLargeError(
                    f"message {index} has {len(message.content)} characters; the limit is "
                    f"{limits.max_message_chars}",
                    field=f"messages.{index}.content",
                )
            if not message.content.strip():
                raise InvalidInputError(
                    f"message {index} is empty", field=f"messages.{index}.content"
                )

    def _check_facts(self, facts: Sequence[FactRecord]) -> None:
        limits = self.limits
        if not facts:
            raise InvalidInputError("at least one fact is required", field="facts")
        if len(facts) > limits.max_facts_per_request:
            raise PayloadTooLargeError(
                f"{len(facts)} facts in one request; the limit is {limits.max_facts_per_request}",
                field="facts",
            )
        for index, fact in enumerate(facts):
            for name in ("tag", "feature", "value"):
                text: str = getattr(fact, name)
                if not text.strip():
                    raise InvalidInputError(
                        f"fact {index} has an empty {name}", field=f"facts.{index}.{name}"
                    )
                if len(text) > limits.max_fact_chars:
                    raise PayloadTooLargeError(
                        f"fact {index} {name} is longer than {limits.max_fact_chars} characters",
                        field=f"facts.{index}.{name}",
                    )
            if not 0.0 <= fact.confidence <= 1.0:
                raise InvalidInputError(
                    "confidence must be between 0 and 1", field=f"facts.{index}.confidence"
                )

    def _check_query(self, query: str, top_k: int) -> None:
        if not query.strip():
            raise InvalidInputError("query must not be empty", field="query")
        if len(query) > self.limits.max_message_chars:
            raise PayloadTooLargeError("query is too long", field="query")
        if not 1 <= top_k <= self.limits.max_top_k:
            raise InvalidInputError(
                f"top_k must be between 1 and {self.limits.max_top_k}", field="top_k"
            )


_Message = TypeVar("_Message", NewMessage, WorkingMessage)


def _require_session(scope: Scope) -> Scope:
    if scope.session_id is None:
        raise InvalidInputError("session_id is required", field="session_id")
    return scope


def _episode_ids(ids: Sequence[str] | None, count: int) -> list[str]:
    """The caller's episode ids, checked, or ``count`` fresh ones."""
    if ids is None:
        return [str(uuid.uuid4()) for _ in range(count)]
    if len(ids) != count:
        raise InvalidInputError(f"{len(ids)} ids for {count} messages", field="ids")
    for index, episode_id in enumerate(ids):
        if re.fullmatch(ID_PATTERN, episode_id) is None:
            raise InvalidInputError(
                f"episode id {index} must be 1-128 letters, digits or ._@+-=#~|",
                field=f"ids.{index}",
            )
    return list(ids)


def _working_message(episode: Episode) -> WorkingMessage:
    return WorkingMessage(
        role=episode.role,
        content=episode.content,
        producer=episode.producer,
        timestamp=episode.timestamp,
        metadata={**episode.metadata, "episode_id": episode.id},
    )


def _importance(episode: Episode) -> float:
    """``metadata["importance"]`` clamped to [0, 1]; 0 when absent or not a number."""
    value = episode.metadata.get("importance")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return min(max(float(value), 0.0), 1.0)


def _search_text(record: EpisodeRecord) -> str:
    """The text an episode's own vector is embedded from: ``"<date> <speaker>: <content>"``."""
    return episode_search_text(
        record.content, timestamp=record.timestamp, producer=record.producer, role=record.role
    )


def _fact_text(fact: FactRecord) -> str:
    return f"{fact.tag} {fact.feature}: {fact.value}"


def _status_of(embedder: Embedder | None) -> EmbedderStatus:
    if embedder is None:
        return EmbedderStatus(enabled=False, reason="no embedder configured")
    return EmbedderStatus(enabled=True, model=embedder.model, dimensions=embedder.dimensions)


def _reranker_status_of(reranker: Reranker | None) -> RerankerStatus:
    if reranker is None:
        return RerankerStatus(enabled=False, reason="no reranker configured")
    return RerankerStatus(enabled=True, model=reranker.model)


async def _close_quietly(part: Resource | Embedder | Reranker | LanguageModel) -> None:
    started = time.monotonic()
    try:
        await part.close()
    except Exception:
        log.exception("closing %r failed", part)
    finally:
        log.debug("closed %r in %.3fs", part, time.monotonic() - started)
