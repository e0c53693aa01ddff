"""Each episode's float32 vector stored next to its sentence vectors.

A search of an index opened from its file rescores a few hundred episodes in float32: for
each, its own vector and its sentence vectors. Stored as two matrices, that is two scattered
reads per episode when the file's pages are not cached; stored joined (episode 0's vector,
its sentence vectors, episode 1's vector, ...), it is one read of a few adjacent pages.

Sentence vectors are kept in owner order (:class:`~memmachine.indexing.scope_index.ScopeIndex`
appends them with their episode), so with ``owners`` the sorted owner row of every sentence
vector, episode ``r``'s vector sits at ``r + (sentence vectors owned by rows before r)`` and
sentence vector ``j`` at ``owners[j] + j + 1``. :class:`JoinedRows` is one of the two
matrices seen through those positions; :func:`joined_blocks` writes the joined array.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from memmachine.indexing.page_advice import will_need

__all__ = ["JoinedRows", "joined_blocks"]

Rows = npt.NDArray[np.int64]


class JoinedRows:
    """The episode vectors (``parts=False``) or the sentence vectors (``parts=True``) of a
    joined array, indexable like the matrix they were (rows, slices): reads gather the rows
    from ``joined``, which stays as it is (pages of a mapped file)."""

    def __init__(self, joined: npt.NDArray[Any], owners: npt.NDArray[Any], *, parts: bool) -> None:
        self.joined = joined
        self.owners = owners
        self.parts = parts
        self.count = len(owners) if parts else len(joined) - len(owners)
        self.dtype = joined.dtype
        self.nbytes = self.count * int(joined.shape[1]) * joined.itemsize

    def __len__(self) -> int:
        return self.count

    def positions(self, rows: npt.NDArray[Any]) -> Rows:
        """Where ``rows`` (numbers within this matrix) are in the joined array."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.parts:
            placed: Rows = self.owners[rows].astype(np.int64) + rows + 1
            return placed
        before = np.searchsorted(self.owners, rows, side="left")
        return rows + before.astype(np.int64)

    def __getitem__(self, key: Any) -> npt.NDArray[Any]:
        rows = np.arange(self.count)[key] if isinstance(key, slice) else key
        gathered: npt.NDArray[Any] = self.joined[self.positions(rows)]
        return gathered

    def will_need(self, rows: npt.NDArray[Any], extra: npt.NDArray[Any]) -> None:
        """Start reading ``rows`` and the ``extra`` rows after each (an episode's sentence
        vectors after its vector): one read per episode."""
        begins = self.positions(rows)
        will_need(self.joined, begins, begins + 1 + np.asarray(extra, dtype=np.int64))


def joined_blocks(
    vectors: Iterable[npt.NDArray[Any]],
    parts: Iterable[npt.NDArray[Any]],
    owners: npt.NDArray[Any],
    width: int,
) -> Iterator[npt.NDArray[np.float32]]:
    """The joined array, a block at a time, from the episode vectors' blocks (rows in
    order), the sentence vectors' blocks (in order) and their sorted ``owners``."""
    pending = _Reader(parts, width)
    row = 0
    for block in vectors:
        count = len(block)
        low, high = np.searchsorted(owners, [row, row + count], side="left").tolist()
        taken = pending.take(high - low)
        per_row = np.bincount(owners[low:high] - row, minlength=count)[:count]
        at = np.arange(count) + np.concatenate(([0], np.cumsum(per_row)[:-1]))
        out = np.empty((count + len(taken), width), dtype=np.float32)
        is_part = np.ones(len(out), dtype=np.bool_)
        is_part[at] = False
        out[at] = block
        out[is_part] = taken
        yield out
        row += count
    if int(np.searchsorted(owners, row, side="left")) != len(owners):
        raise ValueError("sentence vectors owned by no episode")


class _Reader:
    """Rows taken from a stream of blocks, any number at a time."""

    def __init__(self, blocks: Iterable[npt.NDArray[Any]], width: int) -> None:
        self.blocks = iter(blocks)
        self.width = width
        self.buffer: list[npt.NDArray[Any]] = []
        self.held = 0

    def take(self, count: int) -> npt.NDArray[Any]:
        while self.held < count:
            block = next(self.blocks)
            self.buffer.append(block)
            self.held += len(block)
        if not self.buffer:
            return np.zeros((0, self.width), dtype=np.float32)
        joined = np.concatenate(self.buffer) if len(self.buffer) > 1 else self.buffer[0]
        out, rest = joined[:count], joined[count:]
        self.buffer = [rest] if len(rest) else []
        self.held = len(rest)
        return out
