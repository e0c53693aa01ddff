"""The composition root: settings in, a wired (not yet started) MemoryManager out.

This package is the only place that knows which adapter serves which port. Adding a backend
means one settings value, one adapter, and one branch here (stores in
:mod:`~memmachine.bootstrap.stores`, embedders in :mod:`~memmachine.bootstrap.embedders`).
:func:`start_manager` (:mod:`~memmachine.bootstrap.startup`) starts what it built, retrying
stores that cannot be reached yet (a container whose databases are still booting) with
exponential backoff, up to ``MEMMACHINE_STARTUP_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from memmachine.bootstrap.attachments import (
    attach_blob_store,
    build_attachments,
    build_blob_store,
)
from memmachine.bootstrap.erasure import attach_compactors
from memmachine.bootstrap.lexicon import configured_lexicon
from memmachine.bootstrap.observability import (
    StoreParts,
    build_rate_limiter,
    build_telemetry,
    observed,
)
from memmachine.bootstrap.startup import start_manager
from memmachine.bootstrap.stores import (
    FALKORDB_SCHEMES,
    NEO4J_SCHEMES,
    REDIS_SCHEMES,
    build_key_store,
    check_jobs_url,
    check_schemes,
    episode_store,
    idempotency_store,
    job_queue,
    procedure_store,
    profile_store,
    resolve_credentials,
    retention_policy_store,
    searched_in_memory,
    secret,
    store_credentials,
    working_store,
)
from memmachine.bootstrap.tokenizers import build_token_counters
from memmachine.config import LLM_OFF_REASON, LlmSettings, Settings
from memmachine.errors import ConfigurationError, MemMachineError
from memmachine.manager import MemoryManager, Resource
from memmachine.memory.idempotency import IdempotentWrites
from memmachine.models import EmbedderStatus, RerankerStatus
from memmachine.ports import Clock, Embedder, LanguageModel, Reranker, StateBackend
from memmachine.retrieval.stages import default_pipeline
from memmachine.retrieval.wordnet import Lexicon
from memmachine.telemetry import Telemetry

if TYPE_CHECKING:
    from memmachine.adapters.falkordb.embedded_falkordb import EmbeddedFalkorDBServer
    from memmachine.memory.custom_registry import MemoryTypeRegistry

# Adapters are imported inside the functions that choose them, so importing memmachine
# loads no driver and no model runtime until a manager is actually built.

__all__ = [
    "FALKORDB_SCHEMES",
    "NEO4J_SCHEMES",
    "REDIS_SCHEMES",
    "attach_blob_store",
    "build_attachments",
    "build_blob_store",
    "build_key_store",
    "build_language_model",
    "build_manager",
    "build_rate_limiter",
    "build_state_backend",
    "build_telemetry",
    "open_manager",
    "start_manager",
]

log = logging.getLogger(__name__)


async def build_manager(
    settings: Settings, *, telemetry: Telemetry | None = None, clock: Clock | None = None
) -> MemoryManager:
    """Wire adapters from settings. The embedder is loaded (and, for a remote one, probed)
    here because the episode store needs its dimensions, and the reranker is loaded here so
    that one that cannot load leaves search unreranked; stores connect in ``start()``.
    With ``telemetry`` every store and model is observed and so are the manager's
    operations (see :func:`~memmachine.bootstrap.observability.observed`). ``clock`` (the
    system clock by default) decides when memories expire."""
    episode_url = secret(settings.episode_store_url)
    profile_url = secret(settings.profile_store_url)
    working_url = secret(settings.working_store_url)
    # Refuse a bad URL before loading a model for nothing.
    check_schemes(episode_url, profile_url, working_url)
    check_jobs_url(secret(settings.jobs.url))

    lexicon = await configured_lexicon(settings.retrieval)
    embedder, embedder_status = await _embedder(settings)
    reranker: Reranker | None = None
    try:
        reranker, reranker_status = await _reranker(settings)
        return _wire(
            settings,
            embedder,
            embedder_status,
            reranker,
            reranker_status,
            episode_url,
            profile_url,
            working_url,
            telemetry,
            clock,
            lexicon,
        )
    except BaseException:
        if reranker is not None:
            await reranker.close()
        if embedder is not None:
            await embedder.close()
        raise


def _wire(
    settings: Settings,
    embedder: Embedder | None,
    embedder_status: EmbedderStatus,
    reranker: Reranker | None,
    reranker_status: RerankerStatus,
    episode_url: str | None,
    profile_url: str | None,
    working_url: str | None,
    telemetry: Telemetry | None = None,
    clock: Clock | None = None,
    lexicon: Lexicon | None = None,
) -> MemoryManager:
    from memmachine.adapters.falkordb.embedded_falkordb import EmbeddedFalkorDBServer

    resources: list[Resource] = []
    embedded: EmbeddedFalkorDBServer | None = None
    if episode_url is None or working_url is None:
        # Only a store left unset needs the embedded server.
        embedded = EmbeddedFalkorDBServer(settings.data_dir.expanduser().resolve())
        resources.append(embedded)
    # a resource, so startup checks the bucket and retries an endpoint not reachable yet
    blobs = build_blob_store(settings)
    resources.append(blobs)

    raw = StoreParts(
        episodes=episode_store(
            episode_url,
            embedded,
            settings,
            embedder_dims=(embedder.dimensions if embedder else None),
            embedder_model=(embedder.model if embedder else None),
        ),
        profile=profile_store(profile_url, settings),
        working=working_store(working_url, embedded, settings),
        jobs=job_queue(working_url, embedded, settings),
        embedder=embedder,
        reranker=reranker,
        language_model=build_language_model(settings.llm),
    )
    parts = observed(telemetry, raw)
    episodes = searched_in_memory(
        parts.episodes, settings.search_index, settings.data_dir, telemetry
    )
    profile, working, jobs = parts.profile, parts.working, parts.jobs
    embedder, reranker = parts.embedder, parts.reranker
    language_model, llm_off_reason = parts.language_model
    memory_types = _memory_types(settings, working_url, embedded, clock)
    idempotent = IdempotentWrites(
        idempotency_store(working_url, embedded, settings),
        ttl_seconds=settings.idempotency_ttl_seconds,
        lease_seconds=max(2.0, 2 * settings.store_timeout_seconds),
        wait_seconds=max(4.0, 4 * settings.store_timeout_seconds),
    )
    manager = MemoryManager(
        episodes=episodes,
        profile=profile,
        working=working,
        embedder=embedder,
        embedder_status=embedder_status,
        reranker=reranker,
        reranker_status=reranker_status,
        limits=settings.limits,
        retrieval=settings.retrieval,
        safety=settings.safety,
        working_ttl_seconds=settings.working_ttl_seconds,
        resources=resources,
        extra_health=[embedded] if embedded is not None else [],
        jobs=jobs,
        language_model=language_model,
        language_model_off_reason=llm_off_reason,
        compaction=settings.compaction,
        job_max_attempts=settings.jobs.max_attempts,
        extraction=settings.extraction,
        memory_types=memory_types,
        procedures=procedure_store(profile_url, settings),
        token_counters=build_token_counters(settings.tokenizer),
        retention=settings.retention,
        retention_policies=retention_policy_store(profile_url, settings),
        clock=clock,
        stage_observer=telemetry,
        idempotent=idempotent,
    )
    manager.episodic_service.blobs = blobs
    manager.episodic_service.pipeline = default_pipeline(lexicon)
    attach_compactors(settings, manager, raw)
    if telemetry is not None:
        telemetry.instrument_operations(manager)
    return manager


def _memory_types(
    settings: Settings,
    working_url: str | None,
    embedded: EmbeddedFalkorDBServer | None,
    clock: Clock | None = None,
) -> MemoryTypeRegistry:
    """The custom memory types of the ``memmachine.memory_types`` entry points and
    ``MEMMACHINE_MEMORY_TYPES`` (a bad registration is a ``ConfigurationError``), with their
    record backend per ``MEMMACHINE_MEMORY_TYPES_STORE``: SQLite ``<data dir>/memory_types.db``,
    or the working store's Redis."""
    from memmachine.memory.custom_registry import MemoryTypeRegistry, discover_memory_types
    from memmachine.safety.pii import Redactor

    sources = discover_memory_types(settings.memory_types)
    if not sources:
        return MemoryTypeRegistry()
    backend: StateBackend
    if settings.memory_types_store == "redis":
        # The working store's URL and password, or the embedded server.
        url = None if working_url is not None or embedded is None else embedded.url
        backend = build_state_backend(settings, "redis", location=url)
    else:
        path = settings.data_dir.expanduser().resolve() / "memory_types.db"
        backend = build_state_backend(settings, "sqlite", location=str(path))
    safety = settings.safety
    redactor = Redactor(safety.pii_kinds) if safety.redact_pii else None
    return MemoryTypeRegistry(sources, backend, redactor=redactor, clock=clock)


async def _embedder(settings: Settings) -> tuple[Embedder | None, EmbedderStatus]:
    """Load (or, for a remote endpoint, start and probe) the embedder. A model that cannot
    be had leaves search lexical-only, with the reason logged and reported by /health."""
    from memmachine.bootstrap.embedders import EmbedderChoice, choose_embedder

    choice = await asyncio.to_thread(choose_embedder, settings.embedding)
    if choice.embedder is not None:
        try:
            await choice.embedder.start()
        except MemMachineError as exc:
            await choice.embedder.close()
            reason = f"lexical-only: the embedder could not start ({exc.message})"
            log.warning("search runs lexical-only: %s", reason)
            choice = EmbedderChoice(None, reason)
    return choice.embedder, choice.status()


async def _reranker(settings: Settings) -> tuple[Reranker | None, RerankerStatus]:
    """Load the cross-encoder named by ``MEMMACHINE_RERANKER_MODEL``. One that cannot be had
    leaves search without reranking, with the reason logged and reported by /health."""
    config = settings.reranker
    if config.model is None or not config.model.strip():
        return None, RerankerStatus(
            enabled=False, reason="no reranker configured (MEMMACHINE_RERANKER_MODEL is unset)"
        )
    from memmachine.adapters.torch.cross_encoder_reranker import CrossEncoderReranker

    reranker = CrossEncoderReranker(
        config.model.strip(),
        device=config.device,
        batch_size=config.batch_size,
        max_length=config.max_length,
    )
    try:
        await reranker.start()
    except MemMachineError as exc:
        await reranker.close()
        reason = f"the reranker could not start ({exc.message})"
        log.warning("search results are not reranked: %s", reason)
        return None, RerankerStatus(enabled=False, model=reranker.model, reason=reason)
    return reranker, RerankerStatus(enabled=True, model=reranker.model)


@asynccontextmanager
async def open_manager(settings: Settings | None = None) -> AsyncIterator[MemoryManager]:
    """Build, start and finally close a manager: ``async with open_manager() as memory:``."""
    settings = settings or Settings()
    manager = await build_manager(settings)
    await start_manager(manager, settings)
    try:
        yield manager
    finally:
        await manager.close()


def build_language_model(settings: LlmSettings) -> tuple[LanguageModel | None, str]:
    """The configured language model, not yet started, and ``""``; or ``None`` and the reason
    it is off. The caller awaits ``start()`` and ``close()``."""
    if not settings.enabled or settings.model is None:
        return None, LLM_OFF_REASON
    from memmachine.adapters.openai.openai_language_model import OpenAILanguageModel

    api_key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    model = OpenAILanguageModel(
        settings.base_url,
        settings.model,
        api_key=api_key,
        timeout=settings.timeout_seconds,
        max_retries=settings.max_retries,
    )
    return model, ""


def build_state_backend(
    settings: Settings,
    kind: str = "working",
    *,
    manager: MemoryManager | None = None,
    location: str | None = None,
    password: str | None = None,
) -> StateBackend:
    """A typed-agent-state backend (not yet started; see :mod:`memmachine.memory.agent_state`).

    ``kind``: ``working`` (the session's working memory, through ``manager``, which is
    required), ``file`` (JSON files under ``location``, default ``<data dir>/state``),
    ``sqlite`` (the database file ``location``, default ``<data dir>/state.db``) or
    ``redis`` (the server at ``location``, default ``MEMMACHINE_WORKING_STORE_URL`` with its
    password, keys under ``MEMMACHINE_WORKING_KEY_PREFIX``). Anything else, or a missing
    manager or Redis URL, is a ``ConfigurationError``.
    """
    data_dir = settings.data_dir.expanduser().resolve()
    if kind == "working":
        from memmachine.memory.working_state import WorkingMemoryStateBackend

        if manager is None:
            raise ConfigurationError("the working-memory state backend needs a manager")
        return WorkingMemoryStateBackend(manager)
    if kind == "file":
        from memmachine.adapters.file.file_state_backend import FileStateBackend

        return FileStateBackend(location or data_dir / "state")
    if kind == "sqlite":
        from memmachine.adapters.sql.sqlite_state_backend import SQLiteStateBackend

        return SQLiteStateBackend(location or data_dir / "state.db")
    if kind == "redis":
        from memmachine.adapters.redis.redis_state_backend import RedisStateBackend

        url = location
        if url is None:
            url = secret(settings.working_store_url)
            if url is None:
                raise ConfigurationError(
                    "the Redis state backend needs a URL: pass one, or set "
                    "MEMMACHINE_WORKING_STORE_URL"
                )
            found = store_credentials("WORKING", url, None, settings.working_store_password)
            if found.password is not None and resolve_credentials(url).password is None:
                password = password or found.password.get_secret_value()
        return RedisStateBackend(url, key_prefix=settings.working_key_prefix, password=password)
    raise ConfigurationError(f"unknown state backend {kind!r} (use working, file, sqlite or redis)")
