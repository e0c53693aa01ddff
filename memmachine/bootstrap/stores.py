"""Stores from settings: which adapter serves each store port, at which URL, with which
credentials (adapters are imported only by the function that picks them)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit, urlunsplit

from memmachine.config import (
    Credentials,
    SearchIndexSettings,
    Settings,
    redact_url,
    resolve_credentials,
    with_password,
    without_userinfo,
)
from memmachine.errors import ConfigurationError
from memmachine.ports import (
    EpisodeStore,
    IdempotencyStore,
    JobQueue,
    KeyStore,
    ProfileStore,
    RetentionPolicyStore,
    WorkingMemoryStore,
)
from memmachine.ports.procedures import ProcedureStore

if TYPE_CHECKING:
    from pydantic import SecretStr

    from memmachine.adapters.falkordb.embedded_falkordb import EmbeddedFalkorDBServer
    from memmachine.telemetry import Telemetry

__all__ = [
    "build_key_store",
    "check_jobs_url",
    "check_schemes",
    "episode_store",
    "idempotency_store",
    "job_queue",
    "procedure_store",
    "profile_store",
    "resolve_credentials",
    "retention_policy_store",
    "searched_in_memory",
    "secret",
    "store_credentials",
    "working_store",
]

log = logging.getLogger("memmachine.bootstrap")

NEO4J_SCHEMES = frozenset({"neo4j", "neo4j+s", "neo4j+ssc", "bolt", "bolt+s", "bolt+ssc"})
FALKORDB_SCHEMES = frozenset({"falkordb", "falkordbs", "falkordb+unix"})
#: Working store, job queue and Redis state: one server, or a Redis Cluster (``+cluster``).
REDIS_SCHEMES = frozenset({"redis", "rediss", "unix", "redis+cluster", "rediss+cluster"})


def check_jobs_url(url: str | None) -> None:
    """Refuse a job-queue URL of a scheme no queue adapter serves."""
    if url is not None and _scheme(url) not in REDIS_SCHEMES:
        raise ConfigurationError(
            f"MEMMACHINE_JOBS_URL: unsupported scheme {_scheme(url)!r} "
            "(use redis://host:port/db, rediss://..., unix:///path.sock or "
            "redis+cluster://host:port, or leave it unset)"
        )


def episode_store(
    url: str | None,
    embedded: EmbeddedFalkorDBServer | None,
    settings: Settings,
    *,
    embedder_dims: int | None,
    embedder_model: str | None,
) -> EpisodeStore:
    """The episode store at ``url`` (the embedded server when unset)."""
    return _episode_store_of(
        url, embedded, settings, embedder_dims=embedder_dims, embedder_model=embedder_model
    )


def check_schemes(episode: str | None, profile: str | None, working: str | None) -> None:
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


def secret(value: object) -> str | None:
    if value is None:
        return None
    text: str = value.get_secret_value()  # type: ignore[attr-defined]
    return text.strip() or None


def _episode_store_of(
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

    from memmachine.adapters.falkordb.falkordb_episode_store import FalkorDBEpisodeStore

    password: str | None = None
    if url is None:
        assert embedded is not None
        redis_url = embedded.url
    else:
        credentials = store_credentials(
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
        timeout_seconds=settings.store_timeout_seconds,
    )


def searched_in_memory(
    store: EpisodeStore,
    settings: SearchIndexSettings,
    data_dir: Path,
    telemetry: Telemetry | None = None,
) -> EpisodeStore:
    """``store`` behind in-process search indexes, unless they are switched off (their
    sizes watched by the metrics, with ``telemetry``); kept on disk too (in
    ``settings.directory``, else ``<data dir>/search-index``) unless that is switched off."""
    if not settings.enabled:
        return store
    from memmachine.adapters.indexed.indexed_episode_store import IndexedEpisodeStore

    directory = None
    if settings.on_disk:
        directory = (settings.directory or data_dir / "search-index").expanduser().resolve()
    indexed = IndexedEpisodeStore(
        store,
        memory_budget=settings.memory_mb << 20,
        min_episodes=settings.min_episodes,
        load_inline=settings.load_inline,
        episode_cache=settings.episode_cache,
        index_dir=directory,
    )
    if telemetry is not None and telemetry.metrics is not None:
        telemetry.metrics.watch_index(indexed.stats)
    return indexed


def _neo4j_episode_store(
    url: str, settings: Settings, *, embedder_dims: int | None, embedder_model: str | None
) -> EpisodeStore:
    """``neo4j://[user:pass@]host:port[/database]``; the driver gets the URL without its
    userinfo and path, and the credentials and database as arguments."""
    try:
        from memmachine.adapters.neo4j.neo4j_episode_store import Neo4jEpisodeStore
    except ImportError as exc:
        raise ConfigurationError(
            f"MEMMACHINE_EPISODE_STORE_URL={redact_url(url)}: the Neo4j episode store is not "
            f"available in this installation ({type(exc).__name__}: {exc})"
        ) from None
    credentials = store_credentials(
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
        timeout_seconds=settings.store_timeout_seconds,
    )


def store_credentials(
    role: str, url: str, user: str | None, password: SecretStr | None
) -> Credentials:
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


def profile_store(url: str | None, settings: Settings) -> ProfileStore:
    from memmachine.adapters.sql.sql_profile_store import SqlProfileStore

    return SqlProfileStore(
        _profile_database_url(url, settings), timeout_seconds=settings.store_timeout_seconds
    )


def procedure_store(url: str | None, settings: Settings) -> ProcedureStore:
    """Procedural memory, in the profile store's database."""
    from memmachine.adapters.sql.sql_procedure_store import SqlProcedureStore

    return SqlProcedureStore(
        _profile_database_url(url, settings), timeout_seconds=settings.store_timeout_seconds
    )


def retention_policy_store(url: str | None, settings: Settings) -> RetentionPolicyStore:
    """Retention policies set through the admin route, in the profile store's database."""
    from memmachine.adapters.sql.sql_retention_policy_store import SqlRetentionPolicyStore

    return SqlRetentionPolicyStore(
        _profile_database_url(url, settings), timeout_seconds=settings.store_timeout_seconds
    )


def _profile_database_url(url: str | None, settings: Settings) -> str:
    """The SQLAlchemy URL of the profile database: SQLite in the data dir when unset."""
    if url is None:
        path = settings.data_dir.expanduser().resolve() / "profile.db"
        return f"sqlite+aiosqlite:///{path}"
    if _scheme(url).startswith("sqlite"):
        # Bare ``sqlite://`` and ``sqlite+aiosqlite://`` alike: the store gives a bare one
        # its async driver (a string replace here once turned the documented form into
        # ``sqlite+aiosqlite+aiosqlite://``).
        return url
    # postgresql+psycopg:// or postgresql:// (the store gives a bare one its async driver)
    credentials = store_credentials("PROFILE", url, None, settings.profile_store_password)
    if credentials.password is not None and resolve_credentials(url).password is None:
        url = with_password(url, credentials.password.get_secret_value())
    return url


def build_key_store(settings: Settings) -> KeyStore:
    """The API key store (not yet started): the ``api_keys`` table in the profile store's
    database, so the server and the ``memmachine keys`` command share it through the data
    dir (SQLite) or ``MEMMACHINE_PROFILE_STORE_URL``."""
    from memmachine.adapters.sql.sql_key_store import SqlKeyStore

    url = secret(settings.profile_store_url)
    check_schemes(None, url, None)
    return SqlKeyStore(
        _profile_database_url(url, settings), timeout_seconds=settings.store_timeout_seconds
    )


def _working_server(
    url: str | None, embedded: EmbeddedFalkorDBServer | None, settings: Settings
) -> tuple[str, str | None]:
    """The working store's URL and the password to send it (``None`` when the URL carries
    one or none is set), or the embedded server's URL when ``url`` is unset."""
    if url is None:
        assert embedded is not None
        return embedded.url, None
    credentials = store_credentials("WORKING", url, None, settings.working_store_password)
    if credentials.password is not None and resolve_credentials(url).password is None:
        return url, credentials.password.get_secret_value()
    return url, None


def working_store(
    url: str | None, embedded: EmbeddedFalkorDBServer | None, settings: Settings
) -> WorkingMemoryStore:
    from memmachine.adapters.redis.redis_working_memory_store import RedisWorkingMemoryStore

    url, password = _working_server(url, embedded, settings)
    return RedisWorkingMemoryStore(
        url,
        key_prefix=settings.working_key_prefix,
        password=password,
        timeout_seconds=settings.store_timeout_seconds,
    )


def idempotency_store(
    working_url: str | None, embedded: EmbeddedFalkorDBServer | None, settings: Settings
) -> IdempotencyStore:
    """The records of idempotent writes on the working store's server (with its password
    and key prefix), else on the embedded server: kept across restarts either way."""
    from memmachine.adapters.redis.redis_idempotency_store import RedisIdempotencyStore

    url, password = _working_server(working_url, embedded, settings)
    return RedisIdempotencyStore(
        url,
        key_prefix=settings.working_key_prefix,
        password=password,
        timeout_seconds=settings.store_timeout_seconds,
    )


def job_queue(
    working_url: str | None, embedded: EmbeddedFalkorDBServer | None, settings: Settings
) -> JobQueue:
    """The queue on ``MEMMACHINE_JOBS_URL``, else on the working store's server (with the
    working store's password), else on the embedded server."""
    from memmachine.adapters.redis.redis_job_queue import RedisJobQueue

    config = settings.jobs
    url = secret(config.url)
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
