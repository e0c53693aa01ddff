"""Per-memory expiry: an episode, fact or custom record written with ``expires_at`` or
``ttl_seconds`` carries its end in ``metadata["expires_at"]`` (ISO 8601, UTC).

From that instant on, reads never return it (every service filters what its store hands
back, so search, list, get, the memory prompt and export agree); the retention sweep
(:mod:`memmachine.memory.retention`) then removes it from the stores.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from memmachine.errors import InvalidInputError
from memmachine.models import (
    Episode,
    EpisodeHit,
    EpisodeRecord,
    Fact,
    FactHit,
    FactRecord,
    FactVersion,
    JsonDict,
    as_utc,
    expiry_of,
)

__all__ = [
    "EXPIRES_AT",
    "expiry_asked",
    "expiry_of",
    "is_expired",
    "kept_expiry",
    "live_episodes",
    "live_facts",
    "live_hits",
    "live_versions",
    "stamped",
]

#: The metadata key holding a memory's expiry.
EXPIRES_AT = "expires_at"

H = TypeVar("H", EpisodeHit, FactHit)
R = TypeVar("R", Episode, FactRecord)


def stamped(
    metadata: JsonDict,
    expires_at: datetime | None,
    ttl_seconds: int | None,
    now: datetime,
    field: str,
) -> JsonDict:
    """The metadata entry recording the expiry asked for (``{}`` for none), to merge into
    the memory's metadata before the write gate (:func:`kept_expiry` checks it survived).
    ``InvalidInputError`` naming ``<field>.expires_at`` / ``<field>.ttl_seconds`` when both
    are given, when the TTL is not positive or when ``expires_at`` is not in the future.
    An expiry already in ``metadata`` (an imported memory) is kept when it is a timestamp."""
    if expires_at is None and ttl_seconds is None:
        if EXPIRES_AT not in metadata:
            return {}
        end = expiry_of(metadata)
        if end is None:
            raise InvalidInputError(
                f"metadata key {EXPIRES_AT!r} must be an ISO 8601 timestamp",
                f"{field}.metadata.{EXPIRES_AT}",
            )
        return {EXPIRES_AT: end.isoformat()}
    end = expiry_asked(expires_at, ttl_seconds, now, field)
    assert end is not None
    return {EXPIRES_AT: end.isoformat()}


def expiry_asked(
    expires_at: datetime | None, ttl_seconds: int | None, now: datetime, field: str
) -> datetime | None:
    """The instant a write asked its memory to expire at (``None``: never);
    ``InvalidInputError`` naming ``<field>.expires_at`` / ``<field>.ttl_seconds`` (or the
    bare names for an empty ``field``) when both are given, when the TTL is not positive
    or when ``expires_at`` is not in the future."""
    prefix = f"{field}." if field else ""
    if expires_at is None and ttl_seconds is None:
        return None
    if expires_at is not None and ttl_seconds is not None:
        raise InvalidInputError("give expires_at or ttl_seconds, not both", f"{prefix}ttl_seconds")
    if ttl_seconds is not None:
        if ttl_seconds <= 0:
            raise InvalidInputError("ttl_seconds must be positive", f"{prefix}ttl_seconds")
        try:
            return now + timedelta(seconds=ttl_seconds)
        except OverflowError:  # past the year 9999: no instant to expire at
            raise InvalidInputError(
                "ttl_seconds is too large: the expiry would fall after the year 9999",
                f"{prefix}ttl_seconds",
            ) from None
    assert expires_at is not None
    end = as_utc(expires_at)
    if end <= now:
        raise InvalidInputError("expires_at must be in the future", f"{prefix}expires_at")
    return end


def kept_expiry(asked: Sequence[EpisodeRecord | FactRecord], gated: list[R]) -> list[R]:
    """``gated`` (what the write gate, or the store after it, made of ``asked``) after
    checking that every expiry asked for survived: a memory must never outlive its expiry
    because redaction rewrote the timestamp (``InvalidInputError`` naming the record)."""
    for index, (before, after) in enumerate(zip(asked, gated, strict=True)):
        if expiry_of(before.metadata) != expiry_of(after.metadata):
            raise InvalidInputError(
                "the expiry did not survive redaction", f"records.{index}.{EXPIRES_AT}"
            )
    return gated


def is_expired(metadata: dict[str, Any], now: datetime) -> bool:
    """Whether the memory has expired at ``now`` (the expiry instant itself is expired)."""
    end = expiry_of(metadata)
    return end is not None and end <= now


def live_episodes(episodes: Iterable[Episode], now: datetime) -> list[Episode]:
    return [episode for episode in episodes if not is_expired(episode.metadata, now)]


def live_facts(facts: Iterable[Fact], now: datetime) -> list[Fact]:
    return [fact for fact in facts if not is_expired(fact.metadata, now)]


def live_versions(versions: Iterable[FactVersion], now: datetime) -> list[FactVersion]:
    """Closed fact versions whose value has not expired (a version expires with the value
    it held, even when a new value replaced it before its expiry)."""
    return [v for v in versions if v.expires_at is None or v.expires_at > now]


def live_hits(hits: Iterable[H], now: datetime) -> list[H]:
    """Search hits whose episode or fact has not expired."""
    return [hit for hit in hits if not is_expired(_memory(hit).metadata, now)]


def _memory(hit: EpisodeHit | FactHit) -> Episode | Fact:
    return hit.episode if isinstance(hit, EpisodeHit) else hit.fact
