"""Copies of episodes kept in the search index, so a search asks the store for none.

Each row's episode (all but its id and its user, which the index knows) is compact JSON;
:class:`Payloads` holds them as one growable byte buffer with offsets, or on a snapshot's
arrays.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from memmachine.indexing.page_advice import will_need
from memmachine.models import Episode, Scope

__all__ = ["Payloads", "decode_episode", "encode_episode"]

Rows = npt.NDArray[np.int64]


class Payloads:
    """Each row's episode, encoded (:func:`encode_episode`; empty when the entry had
    none): a snapshot's blob and offsets (rows ``0..frozen``), then a list."""

    def __init__(
        self, blob: npt.NDArray[Any] | None = None, offsets: npt.NDArray[Any] | None = None
    ) -> None:
        self.frozen_blob = np.zeros(0, dtype=np.uint8) if blob is None else blob
        self.frozen_offsets = np.zeros(1, dtype=np.int64) if offsets is None else offsets
        self.frozen = len(self.frozen_offsets) - 1
        self.added: list[bytes] = []
        self.added_bytes = 0

    def __getitem__(self, row: int) -> bytes:
        if row < self.frozen:
            start, end = self.frozen_offsets[row], self.frozen_offsets[row + 1]
            return self.frozen_blob[start:end].tobytes()
        return self.added[row - self.frozen]

    def will_need(self, rows: npt.NDArray[Any]) -> None:
        """Start reading the payloads of ``rows`` (when they are pages of a mapped file)."""
        rows = rows[rows < self.frozen]
        will_need(self.frozen_blob, self.frozen_offsets[rows], self.frozen_offsets[rows + 1])

    def append(self, payload: bytes) -> None:
        self.added.append(payload)
        self.added_bytes += len(payload)

    def table(self, rows: Rows) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """The payloads of ``rows`` as one blob and its offsets."""
        pieces = [self[row] for row in rows.tolist()]
        sizes = np.fromiter((len(piece) for piece in pieces), dtype=np.int64, count=len(pieces))
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        return np.frombuffer(b"".join(pieces), dtype=np.uint8).copy(), offsets

    @property
    def nbytes(self) -> int:
        return self.added_bytes + 40 * len(self.added)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def encode_episode(episode: Episode | None) -> bytes:
    """What an episode holds besides its id and its user, as compact JSON (``b""`` for
    none)."""
    if episode is None:
        return b""
    scope = episode.scope
    fields = [
        scope.agent_id,
        scope.session_id,
        scope.group_id,
        episode.role,
        episode.producer,
        episode.content,
        (episode.timestamp - _EPOCH) // _MICROSECOND,
        episode.metadata,
        episode.sequence,
        (episode.created_at - _EPOCH) // _MICROSECOND,
    ]
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode()


def decode_episode(episode_id: str, payload: bytes, user: Scope) -> Episode:
    """The episode :func:`encode_episode` encoded. Its values were validated when it was
    stored, so the models are built without validating them again."""
    (
        agent_id,
        session_id,
        group_id,
        role,
        producer,
        content,
        timestamp,
        metadata,
        sequence,
        created_at,
    ) = json.loads(payload)
    scope = Scope.model_construct(
        tenant=user.tenant,
        org_id=user.org_id,
        project_id=user.project_id,
        user_id=user.user_id,
        agent_id=agent_id,
        session_id=session_id,
        group_id=group_id,
    )
    return Episode.model_construct(
        id=episode_id,
        scope=scope,
        role=role,
        producer=producer,
        content=content,
        timestamp=_EPOCH + timestamp * _MICROSECOND,
        metadata=metadata,
        sequence=sequence,
        created_at=_EPOCH + created_at * _MICROSECOND,
    )
