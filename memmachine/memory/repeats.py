"""Repeated messages: a message sent again is the message already stored, not a second one.

A message that carries its own ``timestamp`` is known by where it was said and what it
says: its scope (tenant, org, project, user, agent, group, session), role, producer,
timestamp, content and metadata, as the write gate leaves them (what is stored). Its
episode id is derived from exactly those (:func:`message_ids`, a name-based UUID), so the
same message sent again (a retry after a timeout without an idempotency key, a conversation
imported twice) names the episode already stored, and the episodic service answers with
that episode instead of storing a copy (:func:`known_repeats` finds them; no embedding,
derivative or extraction job is spent on a repeat). The store's own rule that an id exists
once per user, checked inside its write, keeps it so under concurrent writers and across
restarts; deleting or forgetting the episode frees the id, so the message can be stored
again. A message without a timestamp gets a fresh id: two "ok"s sent at different times
are two messages. The expiry asked for (``expires_at``, ``ttl_seconds``) is not part of
what a message is: a repeat keeps the stored episode's expiry.

An expired episode is no stored message, whether or not the retention sweep has removed it
yet (reads hide it): a message sent again after its episode expired is removed as the sweep
would remove it (:func:`live_repeats`: the store takes its derivatives and search-index
entries with it) and stored anew under the same id, with the expiry the new message asks
for, and goes to working memory and extraction like any new message. The removal happens
when the add's write meets the expired episode, after its input was checked and embedded:
an add refused or failed before its write leaves the episode to the retention sweep (and
what the sweep does with the facts it supported). A removal that fails fails the add
before anything is stored (the caller retries). Two such re-sends at once
store one episode: the store's id check makes the later write a conflict, answered with
the episode the other stored. Removals name the episode as read (``stored_at``, checked
inside the store's delete), so neither another re-send nor the retention sweep, which
removes expired episodes the same way, removes a message stored anew after it read the
expired one.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime

from memmachine.errors import ConflictError
from memmachine.memory.expiry import is_expired
from memmachine.models import Episode, NewMessage, Scope, as_utc
from memmachine.ports import EpisodeStore

__all__ = ["Added", "known_repeats", "live_repeats", "message_ids", "repeat_id", "unexpired"]

#: The namespace of episode ids derived from a message (see :func:`repeat_id`).
_NAMESPACE = uuid.UUID("5d0c1b52-6f41-4c43-9a55-2f0d8d6e7a01")


class Added(list[Episode]):
    """What an add answered: the episodes, one per message in input order (a repeat as the
    episode already stored), and ``new``, the ones this add stored, in order. It is the list
    of episodes itself, so a caller that wants only them (``add_messages`` has always
    answered a list) reads it as before."""

    def __init__(self, episodes: Iterable[Episode], new: Iterable[Episode]) -> None:
        super().__init__(episodes)
        self.new: list[Episode] = list(new)

    @property
    def episodes(self) -> list[Episode]:
        """The episodes, one per message in input order."""
        return list(self)

    @property
    def repeated_ids(self) -> list[str]:
        """The ids of the episodes that were stored before this add (a message sent again),
        in input order, each once."""
        fresh = {episode.id for episode in self.new}
        return list(dict.fromkeys(e.id for e in self if e.id not in fresh))


def repeat_id(scope: Scope, message: NewMessage) -> str | None:
    """The episode id of ``message`` (as the write gate left it) in ``scope``: the same for
    the same message sent again, different when any of scope, role, producer, timestamp,
    content or metadata differ; ``None`` when the message carries no timestamp."""
    if message.timestamp is None:
        return None
    said = [
        scope.tenant,
        scope.org_id,
        scope.project_id,
        scope.user_id,
        scope.agent_id,
        scope.group_id,
        scope.session_id,
        message.role,
        message.producer,
        as_utc(message.timestamp).isoformat(timespec="microseconds"),
        message.content,
        message.metadata,
    ]
    text = json.dumps(said, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    # A SHA-256 digest, shaped as a UUID like every other episode id.
    digest = hashlib.sha256(_NAMESPACE.bytes + text.encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=5))


def message_ids(
    scope: Scope, messages: Sequence[NewMessage]
) -> tuple[list[str], dict[str, NewMessage]]:
    """Each message's episode id (derived, or fresh when it has no timestamp) and the
    messages whose id is derived, by id."""
    ids: list[str] = []
    derived: dict[str, NewMessage] = {}
    for message in messages:
        known = repeat_id(scope, message)
        ids.append(known or str(uuid.uuid4()))
        if known is not None:
            derived.setdefault(known, message)
    return ids, derived


async def known_repeats(
    store: EpisodeStore, scope: Scope, derived: dict[str, NewMessage]
) -> dict[str, Episode]:
    """The episodes already stored in ``scope`` under the ids of ``derived`` (see
    :func:`message_ids`), by id. An id held by another message (only a caller that chose
    that id for it can have done so) raises ``ConflictError``."""
    if not derived:
        return {}
    found = {episode.id: episode for episode in await store.get_episodes(scope, list(derived))}
    for episode_id, episode in found.items():
        if not _same(episode, derived[episode_id]):
            raise ConflictError(f"episode id {episode_id!r} already holds another message")
    return found


def unexpired(found: dict[str, Episode], now: datetime) -> dict[str, Episode]:
    """``found`` (see :func:`known_repeats`) without the episodes expired at ``now``: the
    repeats that still hold their message."""
    return {i: episode for i, episode in found.items() if not is_expired(episode.metadata, now)}


async def live_repeats(
    store: EpisodeStore, scope: Scope, found: dict[str, Episode], now: datetime
) -> dict[str, Episode]:
    """``found`` (see :func:`known_repeats`) without the episodes expired at ``now``, which
    are removed from ``store`` first, as the retention sweep would remove them (the store
    takes their derivatives and index entries with them), so their messages can be stored
    anew under the same ids. Each removal names the episode as read (its ``created_at``),
    so a message another add stored anew meanwhile is never removed. A removal that fails
    raises before anything is stored."""
    live = unexpired(found, now)
    for episode_id, episode in found.items():
        if episode_id not in live:
            # Only the episode read: one another add stored anew since is kept (and found
            # as a repeat when this add's write meets it).
            await store.delete_episode(scope, episode_id, stored_at=episode.created_at)
    return live


def _same(episode: Episode, message: NewMessage) -> bool:
    return (
        message.timestamp is not None
        and (episode.role, episode.producer, episode.content)
        == (message.role, message.producer, message.content)
        and as_utc(episode.timestamp) == as_utc(message.timestamp)
    )
