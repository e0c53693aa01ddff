"""Compaction after a forget: what a store keeps of deleted data on disk is rewritten away.

Deleting a record does not always remove its bytes: a Redis-compatible server's append-only
file still holds every write ever made until it is rewritten, and its RDB snapshot holds
the data as of the last save; an SQLite write-ahead log holds pages as they were before a
delete; PostgreSQL leaves dead tuples in its heap files until they are vacuumed. Each
store that keeps such bytes offers a :class:`Compactor`; :class:`ForgetCompaction` runs them
all after a forget:

* ``delay_seconds`` = 0: at once, inside the forget call (the call returns after it);
* ``delay_seconds`` > 0: once, that long after the first forget not yet compacted (forgets
  in between share the run; a forget during a run makes another run follow), so a burst of
  forgets costs one rewrite;
* a compaction still pending when the manager closes runs before the stores close.

A compactor that fails is logged and retried with the next run; the forget itself has
already removed the data from every read and every live record.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from memmachine.errors import MemMachineError

__all__ = ["Compactor", "ForgetCompaction"]

log = logging.getLogger(__name__)


class Compactor(Protocol):
    """Rewrites what one store keeps of deleted data on disk (see the module docstring)."""

    name: str
    #: Where it compacts (a server's URL): one compactor per place is enough.
    where: str

    async def compact(self) -> None: ...


class ForgetCompaction:
    """Runs every compactor after a forget, at once or ``delay_seconds`` later."""

    def __init__(self, delay_seconds: float = 0.0) -> None:
        self.delay_seconds = delay_seconds
        self.compactors: list[Compactor] = []
        #: How many runs finished (each runs every compactor once).
        self.runs = 0
        self._pending = False
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def add(self, compactor: Compactor) -> None:
        self.compactors.append(compactor)

    async def start(self) -> None:
        """Nothing to start (a resource of the manager so that :meth:`close` runs)."""

    async def close(self) -> None:
        """Run a compaction still pending, now, before the stores close."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._pending:
            await self._run()

    async def request(self) -> None:
        """A forget happened: compact now, or schedule a run ``delay_seconds`` from now."""
        if not self.compactors:
            return
        self._pending = True
        if self.delay_seconds <= 0:
            await self._run()
        elif self._task is None or self._task.done():
            self._task = asyncio.create_task(self._later())

    async def wait(self) -> None:
        """Until no compaction is pending or running (for tests and shutdown)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
        async with self._lock:
            pass

    async def _later(self) -> None:
        while self._pending:
            await asyncio.sleep(self.delay_seconds)
            await self._run()

    async def _run(self) -> None:
        async with self._lock:
            self._pending = False
            for compactor in self.compactors:
                try:
                    await compactor.compact()
                except MemMachineError as exc:
                    self._pending = True  # the next forget (or close) tries again
                    log.warning(
                        "compacting %s after a forget failed: %s", compactor.name, exc.message
                    )
            self.runs += 1
