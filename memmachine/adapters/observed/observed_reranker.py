""":class:`ObservedReranker`: any reranker, timed and traced per call."""

from __future__ import annotations

from collections.abc import Sequence

from memmachine.adapters.observed.observed import Observed
from memmachine.ports import Reranker
from memmachine.telemetry import Telemetry

__all__ = ["ObservedReranker"]


class ObservedReranker(Observed[Reranker]):
    """A :class:`~memmachine.ports.Reranker` that passes every call to ``inner`` and reports
    it (see :mod:`memmachine.adapters.observed.observed`)."""

    def __init__(self, inner: Reranker, telemetry: Telemetry) -> None:
        super().__init__(inner, telemetry, "model")
        self.kind = type(inner).__name__
        self.model: str = inner.model

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        with self._call("score"):
            return await self._inner.score(query, texts)
