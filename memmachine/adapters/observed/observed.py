"""What the ``Observed*`` wrappers share: each wraps any adapter of one port and is one
itself, passing every call through unchanged inside
:meth:`memmachine.telemetry.Telemetry.call` (a duration, an error count by kind, a span).

The composition root puts them directly around the driver adapters (under
:class:`~memmachine.adapters.indexed.indexed_episode_store.IndexedEpisodeStore`), so what they
measure is the store's and the model's own work. Label values are the wrapped adapter's
``name`` and ``kind`` and the method's name: never anything from a call's arguments.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Generic, Protocol, TypeVar

from memmachine.ports import Lifecycle
from memmachine.telemetry import Component, Telemetry

__all__ = ["Observed"]


class _Named(Protocol):
    name: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...


InnerT = TypeVar("InnerT", bound=_Named)


class Observed(Lifecycle, Generic[InnerT]):
    """Base of the wrappers: ``inner`` observed as a ``component`` through ``telemetry``."""

    def __init__(self, inner: InnerT, telemetry: Telemetry, component: Component) -> None:
        self._inner = inner
        self._telemetry = telemetry
        self._component: Component = component
        self.name: str = inner.name
        self.kind: str = str(getattr(inner, "kind", ""))

    @property
    def inner(self) -> InnerT:
        """The wrapped adapter."""
        return self._inner

    async def start(self) -> None:
        with self._call("start", span=False):
            await self._inner.start()

    async def close(self) -> None:
        await self._inner.close()

    def _call(self, operation: str, *, span: bool = True) -> AbstractContextManager[None]:
        return self._telemetry.call(
            self._component, self.name, operation, backend=self.kind, span=span
        )
