""":class:`ObservedLanguageModel`: any language model, timed and traced per call."""

from __future__ import annotations

from collections.abc import Sequence

from memmachine.adapters.observed.observed import Observed
from memmachine.ports import ChatMessage, LanguageModel, ResultT
from memmachine.telemetry import Telemetry

__all__ = ["ObservedLanguageModel"]


class ObservedLanguageModel(Observed[LanguageModel]):
    """A :class:`~memmachine.ports.LanguageModel` that passes every call to ``inner`` and
    reports it (see :mod:`memmachine.adapters.observed.observed`). With tracing on, the HTTP request
    under each call is a span of its own (the httpx instrumentation)."""

    def __init__(self, inner: LanguageModel, telemetry: Telemetry) -> None:
        super().__init__(inner, telemetry, "model")
        self.kind = type(inner).__name__
        self.model: str = inner.model

    async def complete(
        self, messages: Sequence[ChatMessage], *, max_tokens: int | None = None
    ) -> str:
        with self._call("complete"):
            return await self._inner.complete(messages, max_tokens=max_tokens)

    async def complete_structured(
        self,
        messages: Sequence[ChatMessage],
        result_type: type[ResultT],
        *,
        retries: int = 2,
    ) -> ResultT:
        with self._call("complete_structured"):
            return await self._inner.complete_structured(messages, result_type, retries=retries)
