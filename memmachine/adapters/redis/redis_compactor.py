"""Compaction of a Redis-protocol server after a forget (Redis, FalkorDB, the embedded server).

A deleted key leaves the server's memory at once, but not its files: the append-only file
holds every write ever made (the forgotten user's text included) until it is rewritten, and
the RDB snapshot holds the data as of the last save. :meth:`RedisCompactor.compact`:

1. when AOF is on: ``BGREWRITEAOF`` (after any rewrite already running), and waits until
   the rewrite is done (Redis 7 then deletes the old base and incremental files);
2. when RDB snapshots are on (``CONFIG GET save`` is not empty, or cannot be read, as on
   managed servers that hide ``CONFIG``): ``BGSAVE``, and waits until it finished.

Either step failing (``aof_last_bgrewrite_status`` / ``rdb_last_bgsave_status`` not ``ok``)
is a ``StoreError``. A server with neither keeps nothing on disk and is left alone. A Redis
Cluster is not compacted here (each node persists on its own; run ``BGREWRITEAOF`` on each
primary), which :meth:`compact` logs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from redis.exceptions import ResponseError

from memmachine.adapters.redis.redis_common import (
    RedisClient,
    check_redis_url,
    connect_redis,
    translate_errors,
)
from memmachine.errors import StoreError

__all__ = ["RedisCompactor"]

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.05


class RedisCompactor:
    """Rewrites one server's append-only file and snapshot (see the module docstring).
    ``name`` names the store in errors and logs; ``timeout_seconds`` bounds each wait."""

    kind = "redis"

    def __init__(
        self,
        url: str,
        *,
        name: str,
        password: str | None = None,
        timeout_seconds: float = 600.0,
    ) -> None:
        check_redis_url(url, name)
        self.name, self.where = name, url
        self._url, self._password, self._timeout = url, password, timeout_seconds

    async def compact(self) -> None:
        if "+cluster" in self._url.split("://", 1)[0]:
            log.warning("%s is a Redis Cluster: its nodes' files are not rewritten", self.name)
            return
        client = await connect_redis(
            self._url, password=self._password, label=self.name, store=self.name
        )
        try:
            with translate_errors(f"{self.name} could not compact its files", store=self.name):
                info = await client.info("persistence")
                if int(info.get("aof_enabled", 0)):
                    await self._rewrite_aof(client)
                if await self._snapshots_on(client):
                    await self._save(client)
        finally:
            await client.aclose()

    async def _rewrite_aof(self, client: RedisClient) -> None:
        await self._until(client, lambda i: not _aof_busy(i), "an earlier AOF rewrite")
        try:
            await client.bgrewriteaof()
        except ResponseError as exc:  # another process started one meanwhile: wait for it
            if "already in progress" not in str(exc):
                raise
        info = await self._until(client, lambda i: not _aof_busy(i), "the AOF rewrite")
        if info.get("aof_last_bgrewrite_status") != "ok":
            raise StoreError(f"{self.name}: the AOF rewrite failed", store=self.name)

    async def _save(self, client: RedisClient) -> None:
        before = await self._until(
            client, lambda i: not int(i.get("rdb_bgsave_in_progress", 0)), "an earlier save"
        )
        saves = int(before.get("rdb_saves", -1))
        await client.bgsave(schedule=True)

        def saved(info: dict[str, Any]) -> bool:
            if int(info.get("rdb_bgsave_in_progress", 0)):
                return False
            if saves >= 0:
                return int(info.get("rdb_saves", 0)) > saves
            return int(info.get("rdb_changes_since_last_save", 1)) == 0

        info = await self._until(client, saved, "the snapshot")
        if info.get("rdb_last_bgsave_status") != "ok":
            raise StoreError(f"{self.name}: the snapshot failed", store=self.name)

    async def _snapshots_on(self, client: RedisClient) -> bool:
        try:
            config = await client.config_get("save")
        except Exception:  # CONFIG hidden (managed servers): assume snapshots are on
            return True
        return bool(str(config.get("save", "")).strip())

    async def _until(self, client: RedisClient, done: Any, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + self._timeout
        while True:
            info: dict[str, Any] = await client.info("persistence")
            if done(info):
                return info
            if time.monotonic() > deadline:
                raise StoreError(
                    f"{self.name}: {what} did not finish in {self._timeout:g} s", store=self.name
                )
            await asyncio.sleep(_POLL_SECONDS)


def _aof_busy(info: dict[str, Any]) -> bool:
    return bool(
        int(info.get("aof_rewrite_in_progress", 0)) or int(info.get("aof_rewrite_scheduled", 0))
    )
