"""The composition root: settings in, a wired (not yet started) MemoryManager out.

This is the only module that knows which adapter serves which port. Adding a backend means
one settings value, one adapter, and one branch here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from memmachine.config import Settings
from memmachine.errors import ConfigurationError, MemMachineError
from memmachine.manager import MemoryManager, Resource
from memmachine.models import EmbedderStatus
from memmachine.ports import Embedder, EpisodeStore, ProfileStore, WorkingMemoryStore

if TYPE_CHECKING:
    from memmachine.adapters.embedded_falkordb import EmbeddedFalkorDBServer

# Adapters are imported inside the functions that choose them, so importing memmachine
# loads no driver and no model runtime until a manager is actually built.

__all__ = ["build_manager", "open_manager"]

log = logging.getLogger(__name__)


async def build_manager(settings: Settings) -> MemoryManager:
    """Wire adapters from settings. The embedder is loaded (and, for a remote one, probed)
    here because the episode store needs its dimensions; stores connect in ``start()``."""
    from memmachine.adapters.embedded_falkordb import EmbeddedFalkorDBServer

    data_dir = settings.data_dir.expanduser().resolve()
    embedder, embedder_status = await _embedder(settings)

    resources: list[Resource] = []
    embedded: EmbeddedFalkorDBServer | None = None
    episode_url = _secret(settings.episode_store_url)
    working_url = _secret(settings.working_store_url)
    if episode_url is None or working_url is None:
        embedded = EmbeddedFalkorDBServer(data_dir)
        resources.append(embedded)

    episodes = _episode_store(
        episode_url,
        embedded,
        settings,
        embedder_dims=(embedder.dimensions if embedder else None),
        embedder_model=(embedder.model if embedder else None),
    )
    profile = _profile_store(_secret(settings.profile_store_url), settings)
    working = _working_store(working_url, embedded, settings)
    return MemoryManager(
        episodes=episodes,
        profile=profile,
        working=working,
        embedder=embedder,
        embedder_status=embedder_status,
        limits=settings.limits,
        retrieval=settings.retrieval,
        working_ttl_seconds=settings.working_ttl_seconds,
        resources=resources,
        extra_health=[embedded] if embedded is not None else [],
    )


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
    from memmachine.adapters.falkordb_episode_store import FalkorDBEpisodeStore

    if url is None:
        assert embedded is not None
        redis_url = embedded.url
    else:
        redis_url = _falkordb_redis_url(url)
    return FalkorDBEpisodeStore(
        redis_url,
        graph_name=settings.graph_name,
        embedding_dimensions=embedder_dims,
        embedding_model=embedder_model,
    )


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

    if url is None:
        path = settings.data_dir.expanduser().resolve() / "profile.db"
        return SqlProfileStore(f"sqlite+aiosqlite:///{path}")
    scheme = urlsplit(url).scheme
    if scheme.startswith("sqlite"):
        return SqlProfileStore(url.replace("sqlite://", "sqlite+aiosqlite://", 1))
    raise ConfigurationError(
        f"MEMMACHINE_PROFILE_STORE_URL: unsupported scheme {scheme!r} "
        "(use sqlite+aiosqlite:///path.db, or leave it unset)"
    )


def _working_store(
    url: str | None, embedded: EmbeddedFalkorDBServer | None, settings: Settings
) -> WorkingMemoryStore:
    from memmachine.adapters.redis_working_memory_store import RedisWorkingMemoryStore

    if url is None:
        assert embedded is not None
        url = embedded.url
    elif urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise ConfigurationError(
            "MEMMACHINE_WORKING_STORE_URL: use redis://host:port/db or rediss://…, "
            "or leave it unset"
        )
    return RedisWorkingMemoryStore(url, key_prefix=settings.working_key_prefix)


@asynccontextmanager
async def open_manager(settings: Settings | None = None) -> AsyncIterator[MemoryManager]:
    """Build, start and finally close a manager: ``async with open_manager() as memory:``."""
    manager = await build_manager(settings or Settings())
    await manager.start()
    try:
        yield manager
    finally:
        await manager.close()
