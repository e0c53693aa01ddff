"""Users' search indexes on disk, opened by mapping them into memory.

:class:`SearchIndexFiles` keeps one file per user: a
:class:`~memmachine.indexing.index_snapshot.IndexSnapshot` of the user's
:class:`~memmachine.indexing.scope_index.ScopeIndex` (living rows only). Opening a file maps
it and builds the index on the mapped pages, so a user of 100k episodes is ready to search in
milliseconds instead of being read back from the store; the pages a search touches come from
the operating system's page cache and are given back under memory pressure.

Layout: ``<directory>/<store>/<user>.idx`` (directories and files readable by the process's
user only), where ``<store>`` names the episode store's
graph or database by its identity (a random id the store keeps in its settings node, so
another store, or the same one recreated, never sees these files) and ``<user>`` is a hash of
``tenant/org/project/user``. A file is an 8-byte magic, the length of a JSON header, the
header (format, user, store, analyser version, the snapshot's meta, and each array's
dtype, shape and offset), then the arrays, each aligned to 64 bytes. From format 3 on, an
index large enough for the int8 first pass stores each episode's float32 vector beside its
sentence vectors (one read per rescored episode); a file of another format is removed and
the index rebuilt.

A file is written whole to a temporary name, flushed to disk and renamed over the old one,
so a reader (this process or another sharing the directory) sees either the old snapshot
or the new one. Every snapshot records the store revision and deletion count it reflects;
the caller checks them against the store before using it. Files hold derived personal data
(vectors, stemmed terms, ids): the caller removes a user's file whenever episodes of the
user are deleted.

Large indexes are built without holding their vectors in memory: :meth:`spill` writes rows
to a scratch file, maps it and unlinks it at once (the pages stay readable while mapped and
the space is freed when they are dropped).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import mmap
import os
import struct
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memmachine.errors import StoreError
from memmachine.indexing.index_columns import SIMD
from memmachine.indexing.index_snapshot import IndexSnapshot, index_from_snapshot
from memmachine.indexing.joined_rows import JoinedRows, joined_blocks
from memmachine.indexing.page_advice import random_access, wait_read, will_need
from memmachine.indexing.scope_index import ScopeIndex
from memmachine.indexing.terms import ANALYSER_VERSION

__all__ = ["SearchIndexFiles", "read_header"]

logger = logging.getLogger(__name__)

_MAGIC = b"MMSIDX01"
_FORMAT = 3  # 3: episode vectors joined with their sentence vectors
_ALIGN = 64
_SUFFIX = ".idx"


class SearchIndexFiles:
    """The search index files of one episode store (see the module docstring).

    ``directory`` is the root shared by all stores; ``store`` is the episode store's
    identity. Methods block (file IO): call them from a worker thread, :meth:`open` too (it
    maps a file, reads its header, advises the kernel to read ahead and builds the index on
    the mapped pages: tens of milliseconds for a cold file of 100k episodes).
    """

    def __init__(self, directory: Path | str, store: str) -> None:
        digest = hashlib.sha256(store.encode()).hexdigest()[:24]
        self.store = store
        self.directory = Path(directory).expanduser() / digest

    def path(self, user_key: str) -> Path:
        """Where ``user_key``'s index lives."""
        digest = hashlib.sha256(user_key.encode()).hexdigest()[:32]
        return self.directory / f"{digest}{_SUFFIX}"

    # ------------------------------------------------------------------ reading

    def open(self, user_key: str, *, wait: bool = False) -> ScopeIndex | None:
        """The user's index mapped from its file; ``None`` when there is none, or it was
        written for another store, user, analyser or format (such a file is removed).

        The reads of what every search reads whole are started; with ``wait``, this returns
        once they are done and those pages mapped: called in a worker thread, a cold file's
        disk reads (≈60 ms at 100k episodes) are waited for there, not by the first search
        on the event loop, whose page faults would hold the loop (and the GIL) meanwhile."""
        path = self.path(user_key)
        try:
            mapped = _map(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            logger.warning("search index file %s not readable: %s", path.name, exc)
            return None
        # before the first touch: read-around would pull megabytes in around the header
        random_access(np.frombuffer(mapped, dtype=np.uint8))
        try:
            header, start = _header(mapped)
            if (
                header.get("format") != _FORMAT
                or header.get("user") != user_key
                or header.get("store") != self.store
                or header.get("analyser") != ANALYSER_VERSION
            ):
                raise ValueError("written for another user, store or version")
            arrays = {
                entry["name"]: _view(mapped, start, entry, len(mapped))
                for entry in header["arrays"]
            }
        except (ValueError, KeyError, TypeError, struct.error) as exc:
            logger.warning("search index file %s unusable (%s): removed", path.name, exc)
            self.remove(user_key)
            return None
        _advise_reads(arrays)
        if wait:
            _wait_for_reads(arrays)
        matrices: dict[str, Any] = {}
        if "joined" in arrays:
            joined, owners = arrays.pop("joined"), arrays["part_owner"]
            matrices["vectors"] = JoinedRows(joined, owners, parts=False)
            matrices["parts"] = JoinedRows(joined, owners, parts=True)
        matrices.update({name: arrays.pop(name) for name in _names(matrices)})
        return index_from_snapshot(IndexSnapshot(header["meta"], arrays), matrices)

    def users(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(user key, snapshot meta)`` of every readable file of this store."""
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob(f"*{_SUFFIX}")):
            try:
                header, _ = read_header(path)
            except (OSError, ValueError, struct.error):
                continue
            if header.get("store") == self.store and isinstance(header.get("user"), str):
                yield header["user"], header.get("meta", {})

    # ------------------------------------------------------------------ writing

    def save(self, user_key: str, snapshot: IndexSnapshot) -> None:
        """Write ``snapshot`` as the user's index, atomically. Raises ``StoreError`` when
        the disk refuses."""
        meta = snapshot.meta
        width = int(meta["dimensions"] or 1)
        entries: list[dict[str, Any]] = []
        offset = 0
        for name, values in snapshot.arrays.items():
            entries.append(_entry(name, values.dtype, values.shape, offset))
            offset = _aligned(offset + values.nbytes)
        matrices = _matrices(snapshot)
        for name, dtype, count, _ in matrices:
            shape = (count, width)
            entries.append(_entry(name, np.dtype(dtype), shape, offset))
            offset = _aligned(offset + shape[0] * shape[1] * np.dtype(dtype).itemsize)
        header = json.dumps(
            {
                "format": _FORMAT,
                "user": user_key,
                "store": self.store,
                "analyser": ANALYSER_VERSION,
                "meta": meta,
                "arrays": entries,
            },
            separators=(",", ":"),
        ).encode()
        prefix = _MAGIC + struct.pack("<Q", len(header)) + header
        start = _aligned(len(prefix))
        path = self.path(user_key)
        temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            self._make_directory()
            with _private(temporary) as file:
                file.write(prefix)
                file.write(b"\0" * (start - len(prefix)))
                for name, values in snapshot.arrays.items():
                    _write_at(file, start, entries, name, [np.ascontiguousarray(values)])
                for name, dtype, _, produce in matrices:
                    blocks = (block.astype(dtype, copy=False) for block in produce())
                    _write_at(file, start, entries, name, blocks)
                file.truncate(start + offset)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise StoreError(f"search index file not written: {exc}", "episodic") from exc

    def spill(self, rows: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """``rows`` written to a scratch file and mapped back read-only (the file is
        unlinked at once; see the module docstring)."""
        self._make_directory()
        path = self.directory / f"spill-{uuid.uuid4().hex}.tmp"
        values = np.ascontiguousarray(rows)
        try:
            with _private(path) as file:
                file.write(values.tobytes())
            if values.nbytes == 0:
                return values.copy()
            mapped = _map(path)
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        return np.frombuffer(mapped, dtype=values.dtype).reshape(values.shape)

    def _make_directory(self) -> None:
        """The store's directory, readable by this user only (files hold personal data)."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def remove(self, user_key: str) -> None:
        """Delete the user's file (if any)."""
        with contextlib.suppress(FileNotFoundError):
            self.path(user_key).unlink()

    def sweep_leftovers(self) -> int:
        """Delete temporary files left by writes that never finished (a crash); returns
        how many."""
        removed = 0
        if not self.directory.is_dir():
            return 0
        for path in self.directory.glob("*.tmp"):
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
        return removed


# ---------------------------------------------------------------------- helpers

#: Arrays every search reads whole or in many places (the first pass over the int8 codes,
#: the masks, BM25's lengths, the id and session lookups): their reads are started when the
#: file is opened, side by side, while the query is still being embedded. Small ones first:
#: opening copies ``alive`` at once. Everything else (the float32 vectors a rescoring reads a
#: few scattered rows of, the episodes, the postings) is read a few rows at a time, each
#: announced just before it is read (:mod:`memmachine.indexing.page_advice`).
_READ_WHOLE = (
    "alive",
    "has_vector",
    "length",
    "scales",
    "row_error",
    "row_error_parts",
    "part_owner",
    "part_scales",
    "part_weights",
    "session",
    "sequence",
    "order_offsets",
    "order_rows",
    "terms",
    "posting_offsets",
    "ids_sorted",
    "ids_sorted_rows",
    "payload_offsets",
    "codes",
    "part_codes",
)


def _matrices(
    snapshot: IndexSnapshot,
) -> list[tuple[str, Any, int, Callable[[], Iterator[npt.NDArray[Any]]]]]:
    """The matrices a file holds: ``(name, dtype, rows, blocks)``. An index searched with
    the int8 first pass stores each episode's float32 vector beside its sentence vectors
    (``joined``: one read per rescored episode, :mod:`memmachine.indexing.joined_rows`); a
    smaller one, scanned whole in float32, keeps the two matrices apart."""
    meta, produce = snapshot.meta, snapshot.matrices
    n, m = int(meta["n"]), int(meta["m"])
    out = [
        (name, dtype, n if rows == "n" else m, produce[name])
        for name, dtype, rows in IndexSnapshot.MATRICES
    ]
    if not (SIMD and n + m >= int(meta["quantized_from"])):
        return out
    width, owners = int(meta["dimensions"] or 1), snapshot.arrays["part_owner"]

    def joined() -> Iterator[npt.NDArray[Any]]:
        return joined_blocks(produce["vectors"](), produce["parts"](), owners, width)

    kept = [entry for entry in out if entry[0] not in ("vectors", "parts")]
    return [("joined", np.float32, n + m, joined), *kept]


def _names(matrices: dict[str, Any]) -> list[str]:
    """The matrices of :class:`IndexSnapshot` not in ``matrices`` yet."""
    return [name for name, _, _ in IndexSnapshot.MATRICES if name not in matrices]


def _advise_reads(arrays: dict[str, npt.NDArray[Any]]) -> None:
    """Start reading the arrays a search reads whole (the file is mapped without
    read-around, which would read megabytes around every scattered row)."""
    for name in _READ_WHOLE:
        if name in arrays:
            will_need(arrays[name])


def _wait_for_reads(arrays: dict[str, npt.NDArray[Any]]) -> None:
    """Wait (without the GIL) until the arrays :func:`_advise_reads` started reading are
    read and mapped."""
    for name in _READ_WHOLE:
        if name in arrays:
            wait_read(arrays[name])


def _private(path: Path) -> Any:
    """``path`` created for writing, readable and writable by this user only."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")


def _map(path: Path) -> mmap.mmap:
    fd = os.open(path, os.O_RDONLY)
    try:
        return mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    finally:
        os.close(fd)


def read_header(path: Path) -> tuple[dict[str, Any], int]:
    """The JSON header of the search index file at ``path`` and the offset its arrays'
    offsets count from; ``ValueError`` (or ``struct.error``) when it is not such a file."""
    with path.open("rb") as file:

        def read(begin: int, end: int) -> bytes:
            file.seek(begin)
            return file.read(end - begin)

        return _parse_header(read)


def _header(mapped: mmap.mmap) -> tuple[dict[str, Any], int]:
    return _parse_header(lambda begin, end: mapped[begin:end])


def _parse_header(read: Callable[[int, int], bytes]) -> tuple[dict[str, Any], int]:
    """The header and where the arrays start, from ``read(begin, end)`` of the file's bytes."""
    if read(0, 8) != _MAGIC:
        raise ValueError("not a search index file")
    (length,) = struct.unpack("<Q", read(8, 16))
    header = json.loads(read(16, 16 + length))
    if not isinstance(header, dict):
        raise ValueError("bad header")
    return header, _aligned(16 + length)


def _view(mapped: mmap.mmap, start: int, entry: dict[str, Any], size: int) -> npt.NDArray[Any]:
    dtype = np.dtype(entry["dtype"])
    shape = tuple(int(value) for value in entry["shape"])
    count = int(np.prod(shape)) if shape else 1
    offset = start + int(entry["offset"])
    if offset + count * dtype.itemsize > size:
        raise ValueError("file shorter than its header says")
    return np.frombuffer(mapped, dtype=dtype, count=count, offset=offset).reshape(shape)


def _entry(name: str, dtype: np.dtype[Any], shape: tuple[int, ...], offset: int) -> dict[str, Any]:
    return {"name": name, "dtype": dtype.str, "shape": list(shape), "offset": offset}


def _aligned(offset: int) -> int:
    return -(-offset // _ALIGN) * _ALIGN


def _write_at(
    file: Any,
    start: int,
    entries: list[dict[str, Any]],
    name: str,
    blocks: Any,
) -> None:
    entry = next(entry for entry in entries if entry["name"] == name)
    file.seek(start + entry["offset"])
    written = 0
    for block in blocks:
        data = np.ascontiguousarray(block).tobytes()
        file.write(data)
        written += len(data)
    expected = int(np.prod(entry["shape"])) * np.dtype(entry["dtype"]).itemsize
    if written != expected:
        raise OSError(f"{name}: wrote {written} bytes, expected {expected}")
