""":class:`ObservedEmbedder`: any embedder, timed and traced per call, texts counted."""

from __future__ import annotations

from collections.abc import Sequence

from memmachine.adapters.observed.observed import Observed
from memmachine.errors import StoreError
from memmachine.ports import Embedder, SpanEmbedder, SpanSet, embed_queries
from memmachine.telemetry import Telemetry

__all__ = ["ObservedEmbedder"]


class ObservedEmbedder(Observed[Embedder]):
    """An :class:`~memmachine.ports.Embedder` (and a
    :class:`~memmachine.ports.SpanEmbedder` exactly when ``inner`` pools spans, and a
    :class:`~memmachine.ports.QueryEmbedder` whose queries are ``inner``'s) that passes
    every call to ``inner`` and reports it (see :mod:`memmachine.adapters.observed.observed`); every
    text embedded counts as ``embedded_texts``."""

    def __init__(self, inner: Embedder, telemetry: Telemetry) -> None:
        super().__init__(inner, telemetry, "model")
        self.kind = type(inner).__name__
        self.model: str = inner.model
        #: Valid once ``inner`` has started (the composition root wraps a started one).
        self.dimensions: int = getattr(inner, "dimensions", 0)

    async def start(self) -> None:
        await super().start()
        self.model, self.dimensions = self._inner.model, self._inner.dimensions

    @property
    def pools_spans(self) -> bool:
        return isinstance(self._inner, SpanEmbedder) and self._inner.pools_spans

    @property
    def max_tokens(self) -> int:
        return self._spans().max_tokens if isinstance(self._inner, SpanEmbedder) else 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        with self._call("embed"):
            vectors = await self._inner.embed(texts)
        self._telemetry.count("embedded_texts", len(texts))
        return vectors

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        with self._call("embed_queries"):
            vectors = await embed_queries(self._inner, texts)
        self._telemetry.count("embedded_texts", len(texts))
        return vectors

    async def count_tokens(self, texts: Sequence[str]) -> list[int]:
        with self._call("count_tokens"):
            return await self._spans().count_tokens(texts)

    async def embed_spans(
        self, texts: Sequence[str], spans: Sequence[Sequence[SpanSet]]
    ) -> list[list[list[float] | None]]:
        with self._call("embed_spans"):
            vectors = await self._spans().embed_spans(texts, spans)
        self._telemetry.count("embedded_texts", len(texts))
        return vectors

    def _spans(self) -> SpanEmbedder:
        if not isinstance(self._inner, SpanEmbedder):
            raise StoreError(f"{self._inner.model} cannot pool spans", store=self.name)
        return self._inner
