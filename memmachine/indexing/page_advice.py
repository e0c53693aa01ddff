"""Read-ahead advice for arrays that are pages of a mapped file.

A search on an index opened from its file (:mod:`memmachine.adapters.indexed.search_index_files`)
whose pages are not in the page cache reads them from the disk as it touches them. Left to
itself, the kernel reads them one fault at a time, each fault waiting for its read, and
around every fault it reads the device's read-ahead size more (8 MB on the bench machine):
the scattered float32 rows of a rescoring then pull in most of the vectors' pages (measured
at 100k episodes: 335 MB read per search, 527 ms p50; bench/RESULTS.md). These functions
tell it what is about to be read instead:
:func:`will_need` starts the reads of whole arrays or of some rows at once, so they run side by
side while the caller goes on (``MADV_WILLNEED``), and :func:`random_access` stops the
read-around on arrays read a few scattered rows at a time (``MADV_RANDOM``).

Both are hints: on an array that is not a view of a mapped file (an index built in memory),
or where the platform lacks ``madvise``, they do nothing, and results never depend on them.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import numpy.typing as npt

__all__ = ["random_access", "resident_pages", "wait_read", "will_need"]

_PAGE = mmap.PAGESIZE
_WILLNEED: int | None = getattr(mmap, "MADV_WILLNEED", None)
_RANDOM: int | None = getattr(mmap, "MADV_RANDOM", None)
#: Linux 5.14+ (Python 3.11's mmap lacks the name); older kernels refuse it (EINVAL).
_POPULATE_READ: int | None = getattr(
    mmap, "MADV_POPULATE_READ", 22 if sys.platform == "linux" else None
)
#: Start the reads of at most this many separate page runs per call: past it, the syscalls
#: cost more than the reads they overlap (the pages are then read as they are touched).
_MAX_RUNS = 4096
#: Bytes per advice when a whole array is announced.
_WHOLE_CHUNK = 1 << 20
#: What one advice costs, in pages ``mincore`` can check for the same time.
_ADVISE_COST = 75


def will_need(
    array: npt.NDArray[Any],
    rows: npt.NDArray[Any] | None = None,
    ends: npt.NDArray[Any] | None = None,
) -> None:
    """Start reading, from the file ``array`` is mapped from, the pages holding ``rows``
    (indexes along the first axis) of ``array``, or with ``ends`` the spans ``rows[i]`` to
    ``ends[i]`` (exclusive), or without ``rows`` all of it."""
    where = _mapping(array)
    if where is None or array.size == 0:
        return
    mapping, offset, address = where
    advise = _Advice(mapping, address, _WILLNEED)
    if rows is None:
        # one advice per megabyte: the kernel reads at most its read-ahead size (or the
        # device's largest request) per advice, and drops the rest
        for begin in range(offset, offset + array.nbytes, _WHOLE_CHUNK):
            advise(begin, min(begin + _WHOLE_CHUNK, offset + array.nbytes))
        return
    stride = int(array.strides[0])
    begins = np.asarray(rows, dtype=np.int64)
    stops = begins + 1 if ends is None else np.asarray(ends, dtype=np.int64)
    keep = (begins >= 0) & (stops > begins) & (stops <= len(array))
    begins, stops = begins[keep], stops[keep]
    if not len(begins):
        return
    width = int(array.itemsize * (array.size // len(array)))
    first = (offset + begins * stride) // _PAGE
    last = (offset + (stops - 1) * stride + width - 1) // _PAGE
    # many spans: first ask which pages are cached (one call, ~40 ns a page), so an index
    # whose pages are cached does not pay a syscall (~3 µs) per row
    span = int(last.max()) + 1 - int(first.min())
    many = len(first) * _ADVISE_COST > span
    missing = _missing_pages(address, int(first.min()), int(last.max()) + 1) if many else None
    if missing is not None:
        base = int(first.min())
        counts = np.concatenate(([0], np.cumsum(missing)))
        cold = counts[last - base + 1] > counts[first - base]
        first, last = first[cold], last[cold]
        if not len(first):
            return
    order = np.argsort(first, kind="stable")
    first, last = first[order], np.maximum.accumulate(last[order])
    # merge spans that overlap or touch: one advice per run of pages
    fresh = np.concatenate(([True], first[1:] > last[:-1] + 1))
    run_first = first[fresh]
    run_last = last[np.concatenate((np.flatnonzero(fresh)[1:] - 1, [len(last) - 1]))]
    for page, final in zip(
        run_first[:_MAX_RUNS].tolist(), run_last[:_MAX_RUNS].tolist(), strict=True
    ):
        advise(page * _PAGE, (final + 1) * _PAGE)


def random_access(array: npt.NDArray[Any]) -> None:
    """Read only the touched pages of ``array`` (no read-around): it is read a few
    scattered rows at a time, each announced by :func:`will_need`."""
    where = _mapping(array)
    if where is not None and array.size:
        mapping, offset, address = where
        _Advice(mapping, address, _RANDOM)(offset, offset + array.nbytes)


def wait_read(array: npt.NDArray[Any]) -> None:
    """Return once the pages of ``array`` are read from its file and mapped (reads already
    started by :func:`will_need` are waited for, the others made), the GIL released
    meanwhile: a touch of them afterwards, on any thread, finds them in memory. Call it in
    a worker thread. A hint like the others: where the kernel refuses (before Linux 5.14)
    it returns at once, and the pages are read when touched."""
    where = _mapping(array)
    if where is not None and array.size:
        mapping, offset, address = where
        _Advice(mapping, address, _POPULATE_READ)(offset, offset + array.nbytes)


def resident_pages(array: npt.NDArray[Any]) -> npt.NDArray[np.bool_] | None:
    """For each page ``array`` spans: whether it is in the page cache; ``None`` when
    ``array`` is not a view of a mapped file or the platform cannot tell."""
    where = _mapping(array)
    if where is None or array.size == 0:
        return None
    _, offset, address = where
    first, end = offset // _PAGE, -(-(offset + array.nbytes) // _PAGE)
    missing = _missing_pages(address, first, end)
    return None if missing is None else ~missing


def _mapping(array: npt.NDArray[Any]) -> tuple[mmap.mmap, int, int] | None:
    """The mapped file ``array`` is a view of, its first byte's offset in it, and the
    mapping's address."""
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    if not isinstance(base, memoryview) or not isinstance(base.obj, mmap.mmap):
        return None
    if not base.nbytes:
        return None
    start = np.frombuffer(base, dtype=np.uint8, count=1).ctypes.data
    return base.obj, int(array.ctypes.data) - int(start), int(start)


def _missing_pages(address: int, first: int, end: int) -> npt.NDArray[np.bool_] | None:
    """For the pages ``first`` to ``end`` (exclusive) of the mapping at ``address``: which
    are not in the page cache (``mincore``); ``None`` where that cannot be asked."""
    try:
        mincore = ctypes.CDLL(None, use_errno=True).mincore
    except (OSError, AttributeError):
        return None
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    mincore.restype = ctypes.c_int
    flags = np.zeros(end - first, dtype=np.uint8)
    if mincore(address + first * _PAGE, (end - first) * _PAGE, flags.ctypes.data) != 0:
        return None
    missing: npt.NDArray[np.bool_] = (flags & 1) == 0
    return missing


class _Advice:
    """One kind of advice (``option``; ``None``: none) over the pages of a mapping at
    ``address``, given through libc's ``madvise`` by ctypes, which releases the GIL for the
    call: the kernel allocates the pages and queues their reads inside it (tens of ms for a
    cold index's codes), and ``mmap.madvise`` would hold the GIL all that time, stalling
    every other thread of the process (bench/RESULTS.md, "Read-ahead advice without the
    GIL"). libc is looked up at the first advice given, not for hints that give none."""

    def __init__(self, mapping: mmap.mmap, address: int, option: int | None) -> None:
        self.mapping, self.address, self.option = mapping, address, option
        self._madvise: Callable[[int, int, int], int] | None = None

    def __call__(self, begin: int, end: int) -> None:
        """Advise the pages of ``[begin, end)`` bytes into the mapping (widened to whole
        pages). A refusal (a closed mapping, advice the kernel does not know) is ignored:
        it is a hint."""
        option = self.option
        if option is None:
            return
        begin = begin // _PAGE * _PAGE
        try:
            end = min(end, len(self.mapping))
        except ValueError:  # closed
            return
        if end > begin:
            self._send(begin, end - begin, option)

    def _send(self, begin: int, length: int, option: int) -> None:
        madvise = self._madvise or _libc_madvise()
        if madvise is None:  # no libc to ask: no advice from now on
            self.option = None
            return
        self._madvise = madvise
        madvise(self.address + begin, length, option)  # -1 (refused) is ignored too


def _libc_madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise(address, length, advice)``, called without the GIL; ``None`` where
    there is none. It is found among the process's own symbols (``ctypes.pythonapi`` is a
    handle on them, already open: 4 µs where opening libc again takes 30) and called
    through a ``CFUNCTYPE`` prototype, which releases the GIL (``pythonapi``'s own calls
    keep it)."""
    try:
        address = ctypes.cast(ctypes.pythonapi.madvise, ctypes.c_void_p).value
    except AttributeError:
        return None
    if address is None:
        return None
    prototype = ctypes.CFUNCTYPE(
        ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, use_errno=True
    )
    return cast(Callable[[int, int, int], int], prototype(address))
