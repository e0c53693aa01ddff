"""Adding messages: episodes and the session's working memory, complete or undone.

An add stores the messages as episodes (one atomic write), then appends them to the
session's working memory. When the append fails with nothing applied, the episodes are
removed again and the add fails with nothing applied (503); when that removal fails too,
what is stored is no longer known to be nothing, so the add is "outcome unknown" (504).
An append whose own outcome is unknown is a 504 as well.

A message sent again without ids (:mod:`memmachine.memory.repeats`) is answered with the
episode already stored; only the episodes the add stored (the answer's ``new``) go to
working memory and to extraction, and only they are removed when the append fails.

An add with ids of its own (the REST and MCP interfaces derive them from the caller's
idempotency key, :func:`~memmachine.memory.idempotency.episode_ids_for`) can be sent
again after any of those answers: when every id is already stored, that is the earlier
attempt, and the retry completes it (appends to working memory the episodes it lacks)
instead of failing, so the episodes are stored once and working memory agrees with them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from memmachine.errors import (
    ConflictError,
    MemMachineError,
    NotFoundError,
    StoreError,
    WriteOutcomeUnknownError,
)
from memmachine.memory.episodic import EpisodicService
from memmachine.memory.repeats import Added
from memmachine.memory.scheduling import JobScheduler
from memmachine.memory.working import WorkingService
from memmachine.models import Episode, NewMessage, Scope

__all__ = ["MessageAdder"]

log = logging.getLogger(__name__)


class MessageAdder:
    """Adds messages to episodes and working memory at once (see the module docstring)."""

    def __init__(
        self, episodic: EpisodicService, working: WorkingService, scheduler: JobScheduler
    ) -> None:
        self._episodic, self._working, self._scheduler = episodic, working, scheduler

    async def add(
        self,
        scope: Scope,
        messages: Sequence[NewMessage],
        *,
        working: bool = True,
        ids: Sequence[str] | None = None,
        extract: bool = True,
    ) -> Added:
        """Store ``messages`` as episodes of ``scope.session_id`` and, with ``working``,
        in its working memory; without ``extract`` no extraction job is queued. A message
        already stored (:mod:`memmachine.memory.repeats`) is answered with its episode and
        neither appended nor extracted again; the answer's ``new`` leaves it out. A retry
        with the same ``ids`` that completes an earlier attempt is that add, not a repeat:
        its ``new`` lists every episode, as the first attempt's would have."""
        retried = False
        try:
            added = await self._episodic.add_new(scope, messages, ids=ids)
        except ConflictError:
            earlier = await self._stored(scope, ids)
            if earlier is None:
                raise
            added, retried = Added(earlier, earlier), True
        if working and added.new:
            await self._append(scope, added.new, retried=retried)
        if extract:
            await self._scheduler.extract_later(scope, added.new)
        return added

    async def _stored(self, scope: Scope, ids: Sequence[str] | None) -> list[Episode] | None:
        """The episodes of ``ids`` when every one is stored (an earlier attempt of this
        add), else ``None``."""
        if not ids:
            return None
        found = []
        for episode_id in ids:
            try:
                found.append(await self._episodic.get(scope, episode_id))
            except NotFoundError:
                return None
        return found

    async def _append(self, scope: Scope, stored: list[Episode], *, retried: bool) -> None:
        missing = stored
        if retried:
            memory = await self._working.get(scope)
            held = {message.metadata.get("episode_id") for message in memory.messages}
            missing = [episode for episode in stored if episode.id not in held]
            if not missing:
                return
        try:
            await self._working.append_episodes(scope, missing)
        except WriteOutcomeUnknownError:
            raise
        except BaseException as failed:
            if retried:  # the episodes are the earlier attempt's: a later retry completes it
                raise
            try:
                await self._episodic.remove(scope, stored)
            except MemMachineError as undo:
                store = undo.store if isinstance(undo, StoreError) else "episode"
                log.warning("an add could not be undone: %s", undo.message)
                raise WriteOutcomeUnknownError(
                    "the working-memory append failed and the episodes just stored could "
                    "not be removed: send the add again with the same idempotency key to "
                    "complete it",
                    store=store,
                ) from failed
            raise
