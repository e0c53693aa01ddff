"""Snapshots of a :class:`~memmachine.indexing.scope_index.ScopeIndex`: its living rows as
flat arrays, and an index built back on such arrays.

:func:`snapshot_of` gives the living rows renumbered from 0 (:class:`IndexSnapshot`), and
:func:`index_from_snapshot` builds an index on such arrays without copying the large ones (the
vectors and their int8 codes), so they can be pages of a file mapped into memory: opening a
user's index then costs milliseconds however large it is. Rows added afterwards go to
in-memory tails; ids, postings and session order keep the snapshot's sorted tables and look
them up by binary search, materialising only what a write touches. :func:`compacted` is a
snapshot copied into memory: the index without its deleted rows.

This module reads and sets the index's storage directly: it is the other half of
:class:`ScopeIndex`, kept apart for size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from memmachine.indexing.episode_payloads import Payloads
from memmachine.indexing.index_columns import (
    NO_CODE,
    Chunk,
    Codes,
    Column,
    Ids,
    Layout,
    Matrix,
    Postings,
    Rows,
    SessionOrder,
    table,
)
from memmachine.indexing.scope_index import ScopeIndex

__all__ = ["IndexSnapshot", "compacted", "index_from_snapshot", "snapshot_of"]


@dataclass
class IndexSnapshot:
    """A :class:`ScopeIndex`'s living rows as flat arrays (rows and parts renumbered from
    0): ``meta`` (sizes, state, quantisation bounds), ``arrays`` (everything but the four
    matrices) and ``matrices``: each of ``vectors`` / ``codes`` (one row per episode) and
    ``parts`` / ``part_codes`` (one per sentence vector) as an iterator of row blocks, or
    an array when the snapshot was opened from one."""

    meta: dict[str, Any]
    arrays: dict[str, npt.NDArray[Any]]
    matrices: dict[str, Callable[[], Iterator[npt.NDArray[Any]]]] = field(default_factory=dict)

    #: The names and dtypes of the matrices, in file order.
    MATRICES = (
        ("vectors", np.float32, "n"),
        ("codes", np.int8, "n"),
        ("parts", np.float32, "m"),
        ("part_codes", np.int8, "m"),
    )

    def matrix(self, name: str) -> npt.NDArray[Any]:
        """A whole matrix as one array (copied out of its blocks)."""
        dtype = dict((key, kind) for key, kind, _ in self.MATRICES)[name]
        rows = self.meta["n"] if name in ("vectors", "codes") else self.meta["m"]
        width = self.meta["dimensions"] or 1
        blocks = list(self.matrices[name]())
        if not blocks:
            return np.zeros((rows, width), dtype=dtype)
        return np.concatenate(blocks).astype(dtype, copy=False)


def compacted(index: ScopeIndex) -> ScopeIndex:
    """A new index holding only the living rows of ``index``, in memory (``index`` is left
    as it is, so readers still working on it are unaffected)."""
    snapshot = snapshot_of(index)
    arrays = {name: snapshot.matrix(name) for name, _, _ in IndexSnapshot.MATRICES}
    return index_from_snapshot(snapshot, arrays, in_memory=True)


def snapshot_of(index: ScopeIndex) -> IndexSnapshot:
    """The living rows as flat arrays (see :class:`IndexSnapshot`); rows added while
    the snapshot is taken are left out. The matrices are read block by block when the
    snapshot's ``matrices`` are iterated, so the index must outlive that."""
    n, m = index._n, index._m
    alive = index._alive.view(n).copy()
    keep = np.flatnonzero(alive)
    renumber = np.full(max(n, 1), -1, dtype=np.int64)
    renumber[keep] = np.arange(len(keep))
    owners = index._part_owner.view(m)
    parts = np.flatnonzero(alive[owners]) if m else np.zeros(0, dtype=np.int64)
    arrays: dict[str, npt.NDArray[Any]] = {
        "alive": np.ones(len(keep), dtype=np.bool_),
        "sequence": index._sequence.view(n)[keep],
        "timestamp": index._timestamp.view(n)[keep],
        "length": index._length.view(n)[keep],
        "has_vector": index._has_vector.view(n)[keep],
        "scales": index._scales.view(n)[keep],
        "row_error": index._row_error.view(n)[keep],
        "row_error_parts": index._row_error_parts.view(n)[keep],
        "part_owner": renumber[owners[parts]].astype(np.int32),
        "part_scales": index._part_scales.view(m)[parts],
        "part_weights": index._part_weights.view(m)[parts],
    }
    # narrowing codes renumbered to the values living rows still use
    for name, codes, column in (
        ("session", index._sessions, index._session),
        ("agent", index._agents, index._agent),
        ("group", index._groups, index._group),
    ):
        old = column.view(n)[keep].astype(np.int64)
        used = np.unique(old[old >= 0])
        mapping = np.full(len(codes) + 1, NO_CODE, dtype=np.int32)
        mapping[used] = np.arange(len(used), dtype=np.int32)
        arrays[name] = np.where(old >= 0, mapping[old], NO_CODE).astype(np.int32)
        values = table(codes.value(code) for code in used.tolist())
        order = np.argsort(values, kind="stable").astype(np.int32)
        arrays[f"{name}_values"] = values
        arrays[f"{name}_sorted"], arrays[f"{name}_sorted_codes"] = values[order], order
    arrays["ids"] = index._ids.table(keep)
    arrays["payloads"], arrays["payload_offsets"] = index._payloads.table(keep)
    order = np.argsort(arrays["ids"], kind="stable").astype(np.int32)
    arrays["ids_sorted"], arrays["ids_sorted_rows"] = arrays["ids"][order], order
    # session order: rows sorted by (session, sequence, row)
    sessions = arrays["session"]
    by_session = np.lexsort((np.arange(len(keep)), arrays["sequence"], sessions))
    by_session = by_session[sessions[by_session] >= 0]
    arrays["order_rows"] = by_session.astype(np.int32)
    counts = np.bincount(sessions[sessions >= 0], minlength=len(arrays["session_values"]))
    arrays["order_offsets"] = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    # postings: terms sorted, each term's living rows in row order
    terms: list[str] = []
    rows_out: list[npt.NDArray[np.int32]] = []
    tfs_out: list[npt.NDArray[np.uint16]] = []
    collected: dict[str, tuple[Rows, npt.NDArray[np.uint16]]] = {}
    for term, rows, tfs in index._postings.items():
        collected[term] = (rows, tfs)  # a term copied out meanwhile: the later wins
    for term, (rows, tfs) in collected.items():
        inside = rows < n
        rows, tfs = rows[inside], tfs[inside]
        live = alive[rows]
        if live.any():
            terms.append(term)
            renumbered = renumber[rows[live]].astype(np.int32)
            order_rows = np.argsort(renumbered, kind="stable")
            rows_out.append(renumbered[order_rows])
            tfs_out.append(tfs[live][order_rows])
    keys = table(terms)
    term_order = np.argsort(keys, kind="stable").tolist()
    arrays["terms"] = keys[term_order]
    sizes = np.array([len(rows_out[i]) for i in term_order], dtype=np.int64)
    arrays["posting_offsets"] = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    arrays["posting_rows"] = (
        np.concatenate([rows_out[i] for i in term_order]) if terms else np.zeros(0, dtype=np.int32)
    )
    arrays["posting_tfs"] = (
        np.concatenate([tfs_out[i] for i in term_order]) if terms else np.zeros(0, dtype=np.uint16)
    )
    meta = {
        "dimensions": index.dimensions,
        "n": len(keep),
        "m": len(parts),
        "revision": index.revision,
        "deletions": index.deletions,
        "max_error": index._max_error,
        "max_weight": index._max_weight,
        "quantized_from": index._quantized_from,
    }
    matrices = {
        "vectors": lambda: index._vectors.blocks(keep),
        "codes": lambda: index._codes.blocks(keep),
        "parts": lambda: index._parts.blocks(parts),
        "part_codes": lambda: index._part_codes.blocks(parts),
    }
    return IndexSnapshot(meta, arrays, matrices)


def index_from_snapshot(
    snapshot: IndexSnapshot,
    matrices: Mapping[str, Chunk],
    *,
    in_memory: bool = False,
) -> ScopeIndex:
    """An index on ``snapshot``'s arrays and the four ``matrices`` (kept as they are,
    not copied: they may be pages of a mapped file, or rows of one joined array). With
    ``in_memory`` the matrices become ordinary growable tails instead (the index owns
    them)."""
    meta, arrays = snapshot.meta, snapshot.arrays
    index = ScopeIndex(meta["dimensions"], quantized_from=int(meta["quantized_from"]))
    n, m = int(meta["n"]), int(meta["m"])
    index.revision, index.deletions = int(meta["revision"]), int(meta["deletions"])
    index._max_error = float(meta["max_error"])
    index._max_weight = float(meta["max_weight"])
    index._n, index._m = n, m
    for name, column, dtype in (
        ("alive", "_alive", np.bool_),
        ("session", "_session", np.int32),
        ("agent", "_agent", np.int32),
        ("group", "_group", np.int32),
        ("sequence", "_sequence", np.int64),
        ("timestamp", "_timestamp", np.int64),
        ("length", "_length", np.int32),
        ("has_vector", "_has_vector", np.bool_),
        ("scales", "_scales", np.float32),
        ("row_error", "_row_error", np.float32),
        ("row_error_parts", "_row_error_parts", np.float32),
        ("part_owner", "_part_owner", np.int32),
        ("part_scales", "_part_scales", np.float32),
        ("part_weights", "_part_weights", np.float32),
    ):
        # ``alive`` is written in place (deletions); the others only grow
        setattr(index, column, Column.of(arrays[name], dtype, copy=name == "alive"))
    width = meta["dimensions"] or 1
    for name, kind, _ in IndexSnapshot.MATRICES:
        rows = matrices[name]
        if in_memory:
            matrix = Matrix(width, kind, 0)
            matrix.layout = Layout((), (), 0, np.array(rows[:], dtype=kind))
        else:
            matrix = Matrix.over(rows, width, kind)
        setattr(index, f"_{name}", matrix)
    for name, attribute in (
        ("session", "_sessions"),
        ("agent", "_agents"),
        ("group", "_groups"),
    ):
        codes = Codes(
            arrays[f"{name}_values"], arrays[f"{name}_sorted"], arrays[f"{name}_sorted_codes"]
        )
        setattr(index, attribute, codes)
    index._ids = Ids(arrays["ids"], arrays["ids_sorted"], arrays["ids_sorted_rows"])
    index._payloads = Payloads(arrays["payloads"], arrays["payload_offsets"])
    index._order = SessionOrder(arrays["order_rows"], arrays["order_offsets"], index._sequence.data)
    index._postings = Postings(
        arrays["terms"],
        arrays["posting_offsets"],
        arrays["posting_rows"],
        arrays["posting_tfs"],
    )
    if in_memory:
        index._table_bytes = sum(int(values.nbytes) for values in arrays.values())
    else:
        index.frozen_rows = n
    return index
