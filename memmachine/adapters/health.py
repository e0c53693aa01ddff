"""The one way an adapter reports its health."""

from __future__ import annotations

from typing import Literal, Protocol

from memmachine.models import StoreHealth

__all__ = ["NamedStore", "health_of"]


class NamedStore(Protocol):
    """Anything that reports health: it has a name and a kind."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...


def health_of(
    store: NamedStore,
    status: Literal["ok", "down", "off"],
    detail: str | None = None,
    *,
    version: str | None = None,
    latency_ms: float | None = None,
) -> StoreHealth:
    """A :class:`StoreHealth` carrying the store's own name and kind."""
    return StoreHealth(
        name=store.name,
        kind=store.kind,
        status=status,
        detail=detail,
        version=version,
        latency_ms=latency_ms,
    )
