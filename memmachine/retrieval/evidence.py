"""Duplicate-aware selection: the result slots go to distinct evidence.

The same message stored twice (a client retry without an idempotency key, a re-import of a
conversation) would otherwise take two of the ``top_k`` slots, and push a piece of real
evidence out. Two episodes are *the same evidence* when their :func:`evidence_key` is equal:
the same role and producer said the same words, compared after Unicode folding, case
folding and with punctuation and spacing ignored ("Thanks!!" and "thanks" are one). The
episode kept for a key is the one stored first (``created_at``, then ``sequence``, then
``id``), so the original wins over its copies whichever order the stores return them in.

The :class:`~memmachine.retrieval.duplicates.Duplicates` stage collapses the candidate
lists before fusion, so each list's ranks are ranks among distinct evidence (a conversation
stored twice fuses as it does once). Later stages that add episodes (the graph
neighbourhood) ask :meth:`DistinctEvidence.admits` before adding one.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from memmachine.models import Episode

__all__ = ["DistinctEvidence", "Ranked", "evidence_key"]

_WORD = re.compile(r"\w+")

Ranked = list[tuple[Episode, float]]


def evidence_key(episode: Episode) -> str:
    """What makes two episodes the same evidence: role, producer and folded words."""
    text = episode.content
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    words = _WORD.findall(text.casefold())
    return f"{episode.role}\x1f{episode.producer or ''}\x1f{' '.join(words)}"


def _first_stored(episode: Episode) -> tuple[object, ...]:
    return (episode.created_at, episode.sequence, episode.id)


class DistinctEvidence:
    """Which episode stands for each piece of evidence in one search."""

    def __init__(self) -> None:
        self._owner: dict[str, Episode] = {}
        self._keys: dict[str, str] = {}  # episode id -> its evidence key

    def key(self, episode: Episode) -> str:
        """``evidence_key(episode)``, computed once per episode."""
        key = self._keys.get(episode.id)
        if key is None:
            key = self._keys[episode.id] = evidence_key(episode)
        return key

    def register(self, episodes: Sequence[Episode]) -> None:
        """Make the first-stored episode of each key among ``episodes`` its owner (an owner
        already chosen is replaced only by one stored earlier)."""
        for episode in episodes:
            key = self.key(episode)
            held = self._owner.get(key)
            if held is None or _first_stored(episode) < _first_stored(held):
                self._owner[key] = episode

    def owner(self, episode: Episode) -> Episode:
        """The episode that stands for ``episode``'s evidence (itself when unregistered)."""
        return self._owner.get(self.key(episode), episode)

    def admits(self, episode: Episode) -> bool:
        """Whether ``episode`` may join the results: it owns its key, or the key is new (it
        then becomes the owner)."""
        held = self._owner.setdefault(self.key(episode), episode)
        return held.id == episode.id

    def distinct(self, ranked: Ranked) -> int:
        """How many pieces of evidence ``ranked`` holds."""
        return len({self.key(episode) for episode, _ in ranked})

    def collapse(self, ranked: Ranked) -> Ranked:
        """``ranked`` with each piece of evidence once, as its owner at the owner's own rank
        and score: a copy is dropped, never stands in for its owner, so copies that rank
        differently (indexed with other context) move nothing. A piece not yet owned is
        owned by its first-stored episode in ``ranked``."""
        keys = [self.key(episode) for episode, _ in ranked]
        fresh: dict[str, Episode] = {}
        for key, (episode, _) in zip(keys, ranked, strict=True):
            if key in self._owner:
                continue
            held = fresh.get(key)
            if held is None or _first_stored(episode) < _first_stored(held):
                fresh[key] = episode
        self._owner.update(fresh)
        owner = self._owner
        return [hit for key, hit in zip(keys, ranked, strict=True) if owner[key].id == hit[0].id]
