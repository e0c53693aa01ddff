"""The composition root: settings in, a wired (not yet started) MemoryManager out.

This is the only module that knows which adapter serves which port. Adding a backend means
one settings value, one adapter, and one branch here. :func:`start_manager` starts what it
built, retrying stores that cannot be reached yet (a container whose databases are still
booting) with exponential backoff, up to ``MEMMACHINE_STARTUP_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit, urlunsplit

from memmachine.config import (
    LLM_OFF_REASON,
    Credentials,
    LlmSettings,
    SearchIndexSettings,
    Settings,
    redact_url,
    resolve_credentials,
    url_address,
    with_password,
    without_userinfo,
)
from memmachine.errors import ConfigurationError, MemMachineError, StoreUnavailableError
from memmachine.manager import MemoryManager, Resource
from memmachine.models import EmbedderStatus, RerankerStatus
from memmachine.ports import (
    Embedder,
    EpisodeStore,
    JobQueue,
    KeyStore,
    LanguageModel,
    ProfileStore,
    Reranker,
    WorkingMemoryStore,
)

if TYPE_CHECKING:
    from pydantic import SecretStr

    from memmachine.adapters.embedded_falkordb import EmbeddedFalkorDBServer
    from memmachine.agent_state import StateBackend
    from memmachine.memory_types import MemoryTypeRegistry

# Adapters are imported inside the functions that choose them, so importing memmachine
# loads no driver and no model runtime until a manager is actually built.

__all__ = [
    "build_key_store",
    "build_manager",
    "build_state_backend",
    "open_manager",
    "start_manager",
]

log = logging.getLogger(__name__)

NEO4J_SCHEMES = frozenset({"neo4j", "neo4j+s", "neo4j+ssc", "bolt", "bolt+s", "bolt+ssc"})
FALKORDB_SCHEMES = frozenset({"falkordb", "falkordbs", "falkordb+unix"})
#: Working store, job queue and Redis state: one server, or a Redis Cluster (``+cluster``).
REDIS_SCHEMES = frozenset({"redis", "rediss", "unix", "redis+cluster", "rediss+cluster"})
#: However little startup time is left, one attempt may take this long before it is abandoned.
_MIN_ATTEMPT_SECONDS = 10.0


async def build_manager(settings: Settings) -> MemoryManager:
    """Wire adapters from settings. The embedder is loaded (and, for a remote one, probed)
    here because the episode store needs its dimensions, and the reranker is loaded here so
    that one that cannot load leaves search unreranked; stores connect in ``start()``."""
    episode_url = _secret(settings.episode_store_url)
    profile_url = _secret(settings.profile_store_url)
    working_url = _secret(settings.working_store_url)
    # Refuse a bad URL before loading a model for nothing.
    _check_schemes(episode_url, profile_url, working_url)

    jobs_url = _secret(settings.jobs.url)
    if jobs_url is not None and _scheme(jobs_url) not in REDIS_SCHEMES:
        raise ConfigurationError(
            f"MEMMACHINE_JOBS_URL: unsupported scheme {_scheme(jobs_url)!r} "
            "(use redis://host:port/db, rediss://..., unix:///path.sock or "
            "redis+cluster://host:port, or leave it unset)"
        )

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
) -> MemoryManager:
    from memmachine.adapters.embedded_falkordb import EmbeddedFalkorDBServer

    resources: list[Resource] = []
    embedded: EmbeddedFalkorDBServer | None = None
    if episode_url is None or working_url is None:
        # Only a store left unset needs the embedded server.
        embedded = EmbeddedFalkorDBServer(settings.data_dir.expanduser().resolve())
        resources.append(embedded)

    episodes = _searched_in_memory(
        _episode_store(
            episode_url,
            embedded,
            settings,
            embedder_dims=(embedder.dimensions if embedder else None),
            embedder_model=(embedder.model if embedder else None),
        ),
        settings.search_index,
        settings.data_dir,
    )
    profile = _profile_store(profile_url, settings)
    working = _working_store(working_url, embedded, settings)
    jobs = _job_queue(working_url, embedded, settings)
    memory_types = _memory_types(settings, working_url, embedded)
    language_model, llm_off_reason = build_language_model(settings.llm)
    return MemoryManager(
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
    )


def _memory_types(
    settings: Settings, working_url: str | None, embedded: EmbeddedFalkorDBServer | None
) -> MemoryTypeRegistry:
    """The custom memory types of the ``memmachine.memory_types`` entry points and
    ``MEMMACHINE_MEMORY_TYPES`` (a bad registration is a ``ConfigurationError``), with their
    record backend per ``MEMMACHINE_MEMORY_TYPES_STORE``: SQLite ``<data dir>/memory_types.db``,
    or the working store's Redis."""
    from memmachine.memory_types import MemoryTypeRegistry, discover_memory_types
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
    return MemoryTypeRegistry(sources, backend, redactor=redactor)


def _check_schemes(episode: str | None, profile: str | None, working: str | None) -> None:
    if episode is not None and _scheme(episode) not in NEO4J_SCHEMES | FALKORDB_SCHEMES:
        raise ConfigurationError(
            f"MEMMACHINE_EPISODE_STORE_URL: unsupported scheme {_scheme(episode)!r} "
            "(use neo4j://, neo4j+s://, neo4j+ssc://, bolt://, bolt+s://, "
            "falkordb://host:port or falkordb+unix:///path.sock, or leave it unset)"
        )
    if profile is not None and _scheme(profile).split("+")[0] not in (
        "sqlite",
        "postgresql",
        "postgres",
    ):
        raise ConfigurationError(
            f"MEMMACHINE_PROFILE_STORE_URL: unsupported scheme {_scheme(profile)!r} "
            "(use postgresql+psycopg://user@host:5432/db, sqlite+aiosqlite:///path.db, "
            "or leave it unset)"
        )
    if working is not None and _scheme(working) not in REDIS_SCHEMES:
        raise ConfigurationError(
            f"MEMMACHINE_WORKING_STORE_URL: unsupported scheme {_scheme(working)!r} "
            "(use redis://host:port/db, rediss://... or redis+cluster://host:port, "
            "or leave it unset)"
        )


def _scheme(url: str) -> str:
    try:
        return urlsplit(url).scheme.lower()
    except ValueError:
        return ""


async def _embedder(settings: Settings) -> tuple[Embedder | None, EmbedderStatus]:
    """Load (or, for a remote endpoint, start and probe) the embedder. A model that cannot
    be had leaves search lexical-only, with the reason logged and reported by /health."""
    from memmachine.adapters.embedder_factory import EmbedderChoice, choose_embedder

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
    from memmachine.adapters.cross_encoder_reranker import CrossEncoderReranker

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


def _secret(value: object) -> str | None:
    if value is None:
        return None
    text: str = value.get_secret_value()  # type: ignore[attr-defined]
    return text.strip() or None


def _episode_store(
    url: str | None,
    embedded: EmbeddedFalkorDBServer | None,
    settings: Settings,
    *,
    embedder_dims: int | None,
    embedder_model: str | None,
) -> EpisodeStore:
    if url is not None and _scheme(url) in NEO4J_SCHEMES:
        return _neo4j_episode_store(
            url, settings, embedder_dims=embedder_dims, embedder_model=embedder_model
        )

    from memmachine.adapters.falkordb_episode_store import FalkorDBEpisodeStore

    password: str | None = None
    if url is None:
        assert embedded is not None
        redis_url = embedded.url
    else:
        credentials = _credentials(
            "EPISODE", url, settings.episode_store_user, settings.episode_store_password
        )
        redis_url = _falkordb_redis_url(url)
        if credentials.user and _scheme(redis_url) != "unix" and not urlsplit(redis_url).username:
            redis_url = _with_user(redis_url, credentials.user)
        if credentials.password is not None:
            password = credentials.password.get_secret_value()
    return FalkorDBEpisodeStore(
        redis_url,
        graph_name=settings.graph_name,
        embedding_dimensions=embedder_dims,
        embedding_model=embedder_model,
        password=password,
    )


def _searched_in_memory(
    store: EpisodeStore, settings: SearchIndexSettings, data_dir: Path
) -> EpisodeStore:
    """``store`` behind in-process search indexes, unless they are switched off; kept on
    disk too (in ``settings.directory``, else ``<data dir>/search-index``) unless that is."""
    if not settings.enabled:
        return store
    from memmachine.adapters.indexed_episode_store import IndexedEpisodeStore

    directory = None
    if settings.on_disk:
        directory = settings.directory or data_dir / "search-index"
        directory = directory.expanduser().resolve()
    return IndexedEpisodeStore(
        store,
        memory_budget=settings.memory_mb << 20,
        min_episodes=settings.min_episodes,
        load_inline=settings.load_inline,
        episode_cache=settings.episode_cache,
        index_dir=directory,
    )


def _neo4j_episode_store(
    url: str, settings: Settings, *, embedder_dims: int | None, embedder_model: str | None
) -> EpisodeStore:
    """``neo4j://[user:pass@]host:port[/database]``; the driver gets the URL without its
    userinfo and path, and the credentials and database as arguments."""
    try:
        from memmachine.adapters.neo4j_episode_store import Neo4jEpisodeStore
    except ImportError as exc:
        raise ConfigurationError(
            f"MEMMACHINE_EPISODE_STORE_URL={redact_url(url)}: the Neo4j episode store is not "
            f"available in this installation ({type(exc).__name__}: {exc})"
        ) from None
    credentials = _credentials(
        "EPISODE", url, settings.episode_store_user, settings.episode_store_password
    )
    parts = urlsplit(without_userinfo(url))
    database = parts.path.strip("/") or None
    driver_url = urlunsplit((parts.scheme, parts.netloc, "", parts.query, ""))
    password = credentials.password.get_secret_value() if credentials.password else None
    user = credentials.user or ("neo4j" if password is not None else None)
    return Neo4jEpisodeStore(
        driver_url,
        user=user,
        password=password,
        database=database,
        embedding_dimensions=embedder_dims,
        embedding_model=embedder_model,
    )


def _credentials(role: str, url: str, user: str | None, password: SecretStr | None) -> Credentials:
    credentials = resolve_credentials(url, user, password)
    if credentials.variable_ignored:
        log.warning(
            "MEMMACHINE_%s_STORE_PASSWORD is ignored: MEMMACHINE_%s_STORE_URL carries a "
            "password, and the URL wins",
            role,
            role,
        )
    return credentials


def _with_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, f"{quote(user, safe='')}@{parts.netloc}", *parts[2:]))


def _falkordb_redis_url(url: str) -> str:
    """``falkordb://[user:pass@]host:port`` → ``redis://…``; ``falkordb+unix:///p.sock`` →
    ``unix:///p.sock``."""
    parts = urlsplit(url)
    if parts.scheme == "falkordb":
        return urlunsplit(("redis", parts.netloc, parts.path, parts.query, ""))
    if parts.scheme == "falkordbs":
        return urlunsplit(("rediss", parts.netloc, parts.path, parts.query, ""))
    if parts.scheme == "falkordb+unix":
        return urlunsplit(("unix", "", parts.path, parts.query, ""))
    raise ConfigurationError(
        f"MEMMACHINE_EPISODE_STORE_URL: unsupported scheme {parts.scheme!r} "
        "(use falkordb://host:port or falkordb+unix:///path.sock, or leave it unset)"
    )


def _profile_store(url: str | None, settings: Settings) -> ProfileStore:
    from memmachine.adapters.sql_profile_store import SqlProfileStore

    return SqlProfileStore(_profile_database_url(url, settings))


def _profile_database_url(url: str | None, settings: Settings) -> str:
    """The SQLAlchemy URL of the profile database: SQLite in the data dir when unset."""
    if url is None:
        path = settings.data_dir.expanduser().resolve() / "profile.db"
        return f"sqlite+aiosqlite:///{path}"
    if _scheme(url).startswith("sqlite"):
        return url.replace("sqlite://", "sqlite+aiosqlite://", 1)
    # postgresql+psycopg:// or postgresql:// (the store gives a bare one its async driver)
    credentials = _credentials("PROFILE", url, None, settings.profile_store_password)
    if credentials.password is not None and resolve_credentials(url).password is None:
        url = with_password(url, credentials.password.get_secret_value())
    return url


def build_key_store(settings: Settings) -> KeyStore:
    """The API key store (not yet started): the ``api_keys`` table in the profile store's
    database, so the server and the ``memmachine keys`` command share it through the data
    dir (SQLite) or ``MEMMACHINE_PROFILE_STORE_URL``."""
    from memmachine.adapters.sql_key_store import SqlKeyStore

    url = _secret(settings.profile_store_url)
    _check_schemes(None, url, None)
    return SqlKeyStore(_profile_database_url(url, settings))


def _working_store(
    url: str | None, embedded: EmbeddedFalkorDBServer | None, settings: Settings
) -> WorkingMemoryStore:
    from memmachine.adapters.redis_working_memory_store import RedisWorkingMemoryStore

    password: str | None = None
    if url is None:
        assert embedded is not None
        url = embedded.url
    else:
        credentials = _credentials("WORKING", url, None, settings.working_store_password)
        if credentials.password is not None and resolve_credentials(url).password is None:
            password = credentials.password.get_secret_value()
    return RedisWorkingMemoryStore(url, key_prefix=settings.working_key_prefix, password=password)


def _job_queue(
    working_url: str | None, embedded: EmbeddedFalkorDBServer | None, settings: Settings
) -> JobQueue:
    """The queue on ``MEMMACHINE_JOBS_URL``, else on the working store's server (with the
    working store's password), else on the embedded server."""
    from memmachine.adapters.redis_job_queue import RedisJobQueue

    config = settings.jobs
    url = _secret(config.url)
    password: str | None = None
    if url is not None:
        credentials = resolve_credentials(url, None, config.password)
        if credentials.variable_ignored:
            log.warning(
                "MEMMACHINE_JOBS_PASSWORD is ignored: MEMMACHINE_JOBS_URL carries a password, "
                "and the URL wins"
            )
        if credentials.password is not None and resolve_credentials(url).password is None:
            password = credentials.password.get_secret_value()
    elif working_url is not None:
        url = working_url
        credentials = resolve_credentials(url, None, settings.working_store_password)
        if credentials.password is not None and resolve_credentials(url).password is None:
            password = credentials.password.get_secret_value()
    else:
        assert embedded is not None
        url = embedded.url
    return RedisJobQueue(
        url,
        key_prefix=config.key_prefix,
        password=password,
        backoff_base_seconds=config.backoff_base_seconds,
        backoff_max_seconds=config.backoff_max_seconds,
        done_retention_seconds=config.done_retention_seconds or None,
    )


# ---------------------------------------------------------------------- startup


async def start_manager(manager: MemoryManager, settings: Settings) -> None:
    """Start ``manager``'s resources and stores in order. A part that raises
    ``StoreUnavailableError`` is tried again with exponential backoff until the shared
    ``startup_timeout_seconds`` budget is spent; then ``StoreUnavailableError`` names the
    store and its host:port (never a password), and every part started so far is closed."""
    deadline = time.monotonic() + settings.startup_timeout_seconds
    targets = _targets(manager, settings)
    secrets = [*settings.secrets(), *_job_secrets(settings)]

    # The one resource bootstrap adds to a manager is the embedded FalkorDB server.
    embedded = ("embedded FalkorDB", str(settings.data_dir.expanduser().resolve() / "falkordb"))

    async def start_part(part: Resource) -> None:
        label, address = targets.get(id(part), embedded)
        await _start_with_retries(
            part,
            label=label,
            address=address,
            deadline=deadline,
            base=settings.startup_backoff_base_seconds,
            cap=settings.startup_backoff_max_seconds,
            secrets=secrets,
        )

    await manager.start(start_part)


def _job_secrets(settings: Settings) -> list[str]:
    """The job queue's passwords (the URL's and the variable's), to scrub from messages."""
    found: list[str] = []
    url = _secret(settings.jobs.url)
    if url is not None:
        password = resolve_credentials(url).password
        if password is not None:
            found.append(password.get_secret_value())
    if settings.jobs.password is not None and settings.jobs.password.get_secret_value():
        found.append(settings.jobs.password.get_secret_value())
    return found


def _targets(manager: MemoryManager, settings: Settings) -> dict[int, tuple[str, str]]:
    """{id(part): (what it is, where it is)} for the messages of :func:`start_manager`."""
    data_dir = settings.data_dir.expanduser().resolve()
    embedded = f"embedded FalkorDB in {data_dir / 'falkordb'}"
    episode = _secret(settings.episode_store_url)
    profile = _secret(settings.profile_store_url)
    working = _secret(settings.working_store_url)
    targets: dict[int, tuple[str, str]] = {
        id(manager.episodes): ("episode store", url_address(episode) if episode else embedded),
        id(manager.profile): (
            "profile store",
            url_address(profile) if profile else str(data_dir / "profile.db"),
        ),
        id(manager.working): ("working store", url_address(working) if working else embedded),
    }
    if manager.jobs is not None:
        jobs = _secret(settings.jobs.url) or working
        targets[id(manager.jobs)] = ("job queue", url_address(jobs) if jobs else embedded)
    if settings.memory_types_store == "redis":
        records = url_address(working) if working else embedded
    else:
        records = str(data_dir / "memory_types.db")
    targets[id(manager.memory_types)] = ("custom memory type store", records)
    return targets


async def _start_with_retries(
    part: Resource,
    *,
    label: str,
    address: str,
    deadline: float,
    base: float,
    cap: float,
    secrets: list[str],
) -> None:
    began = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        remaining = deadline - time.monotonic()
        try:
            async with asyncio.timeout(max(remaining, _MIN_ATTEMPT_SECONDS)):
                await part.start()
        except StoreUnavailableError as exc:
            last: StoreUnavailableError = exc
        except TimeoutError:
            await _close_after_failure(part)
            last = StoreUnavailableError("connecting timed out", store=getattr(part, "name", label))
        else:
            if attempt > 1:
                log.info("%s at %s is up after %d attempts", label, address, attempt)
            return
        remaining = deadline - time.monotonic()
        reason = _scrub(last.message, secrets)
        if remaining <= 0:
            elapsed = time.monotonic() - began
            raise StoreUnavailableError(
                f"{label} at {address} is unreachable after {attempt} attempt"
                f"{'s' if attempt != 1 else ''} in {elapsed:.1f}s: {reason}",
                store=last.store,
            ) from None
        delay = min(cap, base * 2 ** (attempt - 1), remaining)
        log.warning(
            "%s at %s is not reachable yet (%s); retrying in %.1fs", label, address, reason, delay
        )
        await asyncio.sleep(delay)


async def _close_after_failure(part: Resource) -> None:
    try:
        await part.close()
    except Exception:  # best effort after an abandoned attempt
        log.debug("closing %r after a failed start failed", part, exc_info=True)


def _scrub(message: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            message = message.replace(secret, "***")
    return message


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
    from memmachine.adapters.openai_language_model import OpenAILanguageModel

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
    """A typed-agent-state backend (not yet started; see :mod:`memmachine.agent_state`).

    ``kind``: ``working`` (the session's working memory, through ``manager``, which is
    required), ``file`` (JSON files under ``location``, default ``<data dir>/state``),
    ``sqlite`` (the database file ``location``, default ``<data dir>/state.db``) or
    ``redis`` (the server at ``location``, default ``MEMMACHINE_WORKING_STORE_URL`` with its
    password, keys under ``MEMMACHINE_WORKING_KEY_PREFIX``). Anything else, or a missing
    manager or Redis URL, is a ``ConfigurationError``.
    """
    data_dir = settings.data_dir.expanduser().resolve()
    if kind == "working":
        from memmachine.agent_state import WorkingMemoryStateBackend

        if manager is None:
            raise ConfigurationError("the working-memory state backend needs a manager")
        return WorkingMemoryStateBackend(manager)
    if kind == "file":
        from memmachine.adapters.file_state_backend import FileStateBackend

        return FileStateBackend(location or data_dir / "state")
    if kind == "sqlite":
        from memmachine.adapters.sqlite_state_backend import SQLiteStateBackend

        return SQLiteStateBackend(location or data_dir / "state.db")
    if kind == "redis":
        from memmachine.adapters.redis_state_backend import RedisStateBackend

        url = location
        if url is None:
            url = _secret(settings.working_store_url)
            if url is None:
                raise ConfigurationError(
                    "the Redis state backend needs a URL: pass one, or set "
                    "MEMMACHINE_WORKING_STORE_URL"
                )
            credentials = _credentials("WORKING", url, None, settings.working_store_password)
            if credentials.password is not None and resolve_credentials(url).password is None:
                password = password or credentials.password.get_secret_value()
        return RedisStateBackend(url, key_prefix=settings.working_key_prefix, password=password)
    raise ConfigurationError(f"unknown state backend {kind!r} (use working, file, sqlite or redis)")
