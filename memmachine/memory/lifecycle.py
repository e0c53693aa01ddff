"""Starting, closing and checking everything a manager holds, in one order."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from memmachine.models import EmbedderStatus, RerankerStatus, StoreHealth
from memmachine.ports import Embedder, LanguageModel, Reranker

__all__ = ["Parts", "Resource", "embedder_status", "reranker_status"]

log = logging.getLogger("memmachine.manager")


class Resource(Protocol):
    """Something with a lifecycle the manager starts before, and closes after, its stores."""

    async def start(self) -> None: ...
    async def close(self) -> None: ...


class Parts:
    """The reranker, resources, stores, job queue and language model of a manager.

    :meth:`start` starts the reranker (a no-op when it is already loaded), the resources,
    the stores, the job queue, then the language model's client (no request is sent); on
    any failure it closes what started and re-raises. :meth:`close` closes the language
    model, the reranker, the embedder, then the queue, stores and resources in reverse
    order; it is safe to call twice."""

    def __init__(
        self,
        *,
        resources: Sequence[Resource],
        stores: Sequence[Resource],
        health: Sequence[Any],
        language_model: LanguageModel | None,
    ) -> None:
        self.resources = list(resources)
        self.stores = list(stores)
        self.health_checks = list(health)
        self.language_model = language_model
        self._started: list[Resource] = []
        self._llm_started = False

    async def start(
        self,
        reranker: Reranker | None,
        start_part: Callable[[Resource], Awaitable[None]] | None,
        close: Callable[[], Awaitable[None]],
    ) -> None:
        """Start everything (``start_part`` starts one resource or store in place of
        ``part.start()``); on a failure ``close`` runs and the error is re-raised."""
        try:
            if reranker is not None:
                await reranker.start()
            for part in [*self.resources, *self.stores]:
                if start_part is None:
                    await part.start()
                else:
                    await start_part(part)
                self._started.append(part)
            if self.language_model is not None:
                await self.language_model.start()
                self._llm_started = True
        except BaseException:
            await close()
            raise

    async def close(self, reranker: Reranker | None, embedder: Embedder | None) -> None:
        if self.language_model is not None and self._llm_started:
            self._llm_started = False
            await close_quietly(self.language_model)
        if reranker is not None:
            await close_quietly(reranker)
        if embedder is not None:
            await close_quietly(embedder)
        while self._started:
            await close_quietly(self._started.pop())

    async def health(self) -> tuple[dict[str, StoreHealth], bool]:
        """Every store's report by name, and whether none is down."""
        reports: list[StoreHealth] = list(
            await asyncio.gather(*(part.health() for part in self.health_checks))
        )
        return {report.name: report for report in reports}, all(
            report.status != "down" for report in reports
        )


async def close_quietly(part: Resource | Embedder | Reranker | LanguageModel) -> None:
    started = time.monotonic()
    try:
        await part.close()
    except Exception:
        log.exception("closing %r failed", part)
    finally:
        log.debug("closed %r in %.3fs", part, time.monotonic() - started)


def embedder_status(embedder: Embedder | None) -> EmbedderStatus:
    """What /health says of an embedder the composition root did not describe."""
    if embedder is None:
        return EmbedderStatus(enabled=False, reason="no embedder configured")
    return EmbedderStatus(enabled=True, model=embedder.model, dimensions=embedder.dimensions)


def reranker_status(reranker: Reranker | None) -> RerankerStatus:
    """What /health says of a reranker the composition root did not describe."""
    if reranker is None:
        return RerankerStatus(enabled=False, reason="no reranker configured")
    return RerankerStatus(enabled=True, model=reranker.model)
