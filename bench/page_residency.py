"""Which parts of a search index file are in the page cache (Linux ``mincore``).

Dropping a file's pages (``posix_fadvise(DONTNEED)``), running one search, then asking which
of its pages are cached again tells, array by array, what that search read from the disk
(what it touched plus the kernel's read-ahead around it). Used by ``bench/scale.py --cold``.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from memmachine.adapters.indexed.search_index_files import read_header
from memmachine.indexing.page_advice import resident_pages

__all__ = ["array_spans", "resident_by_array"]


def array_spans(path: Path) -> dict[str, tuple[int, int]]:
    """``{array name: (offset of its first byte, its size in bytes)}`` for a search index
    file (see ``memmachine.adapters.indexed.search_index_files``), with ``"header"`` for the
    bytes before the first array."""
    header, start = read_header(path)
    spans = {"header": (0, start)}
    for entry in header["arrays"]:
        size = int(np.prod(entry["shape"])) * np.dtype(entry["dtype"]).itemsize
        spans[entry["name"]] = (start + int(entry["offset"]), size)
    return spans


def resident_by_array(path: Path) -> dict[str, tuple[int, int]]:
    """``{array name: (bytes of its pages in the page cache, its size in bytes)}`` for each
    span of :func:`array_spans`. Empty where ``mincore`` is missing."""
    resident = _resident_pages(path)
    if resident is None:
        return {}
    page = mmap.PAGESIZE
    return {
        name: (_cached(resident, begin, begin + size, page), size)
        for name, (begin, size) in array_spans(path).items()
    }


def _cached(resident: np.ndarray, begin: int, end: int, page: int) -> int:
    """Bytes of ``[begin, end)`` whose pages are cached (whole pages, clipped to the range)."""
    if end <= begin:
        return 0
    first, last = begin // page, (end - 1) // page
    pages = resident[first : last + 1]
    total = int(np.count_nonzero(pages)) * page
    # the first and last pages count only their part inside the range
    if pages[0]:
        total -= begin - first * page
    if pages[-1]:
        total -= (last + 1) * page - end
    return max(total, 0)


def _resident_pages(path: Path) -> np.ndarray | None:
    """One flag per page of ``path``: whether it is in the page cache."""
    size = path.stat().st_size
    if size == 0:
        return np.zeros(0, dtype=np.bool_)
    fd = os.open(path, os.O_RDONLY)
    try:
        mapped = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    view = np.frombuffer(mapped, dtype=np.uint8)
    try:
        return resident_pages(view)
    finally:
        del view
        mapped.close()
