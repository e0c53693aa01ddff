"""How fast this machine reads the part of a search index file every first search reads.

A search of a user whose index file is not in the page cache first reads the file's int8
codes (episode and sentence codes: 69 MB at 100k episodes, 78 MB with the small columns)
whole. This measures, on one file, ways of reading such a region from the disk, each after
the file's pages were dropped (``posix_fadvise(DONTNEED)``), interleaved in shuffled order:

- ``fault``: touching a mapping page by page, default advice (the kernel reads ahead);
- ``fault random``: the same with ``MADV_RANDOM`` (how the index maps its file) and no
  advice: one read per page;
- ``one read``: a single ``preadv`` of the whole region into memory;
- ``madvise 1 MB``: ``MADV_WILLNEED`` per megabyte, then the touch (what opening an index
  file does today, :mod:`memmachine.indexing.page_advice`);
- ``fadvise 1 MB``: ``POSIX_FADV_WILLNEED`` per megabyte on the descriptor, then the touch;
- ``madvise N threads``: ``MADV_WILLNEED`` per 4 MB from N threads at once, then the touch
  (``mmap.madvise`` holds the GIL: the threads take turns);
- ``fadvise N threads``: ``POSIX_FADV_WILLNEED`` per 2 MB from N threads at once (the GIL is
  released), then the touch;
- ``pread N threads``: ``preadv`` of 1 MB pieces from N threads (the page cache filled by
  reads in flight side by side), then the touch;
- ``direct N threads``: ``O_DIRECT`` reads of 1 MB from N threads, not through the page
  cache: what the device gives at that queue depth (the floor for any way above).

With ``--index`` the region is the span of the file's ``codes`` and ``part_codes`` arrays;
otherwise ``--mb`` megabytes from ``--offset`` of ``--file`` (e.g. a scratch file written
with ``--make``). ``--rows N`` adds N scattered 2-page reads outside the region (the rows a
rescoring reads), read one by one, announced each then touched (as today), and from threads.
Linux only.

    uv run python bench/cold_read.py --make /tmp/scratch.bin --mb 78 --rounds 5
    uv run python bench/cold_read.py --index /path/to/user.idx --rounds 5
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale
from page_residency import array_spans

_PAGE = mmap.PAGESIZE
_MB = 1 << 20


def index_region(path: Path) -> tuple[int, int]:
    """``(offset, length)`` of the span of ``codes`` and ``part_codes`` in an index file."""
    spans = [
        (begin, begin + size)
        for name, (begin, size) in array_spans(path).items()
        if name in ("codes", "part_codes")
    ]
    if not spans:
        raise SystemExit(f"{path}: no int8 codes (an index under the int8 threshold)")
    begin, end = min(s for s, _ in spans), max(e for _, e in spans)
    return begin, end - begin


def read_bytes() -> int:
    return scale.io_counters()[1]


class Region:
    """The region of ``path`` read by every method."""

    def __init__(self, path: Path, offset: int, length: int) -> None:
        self.path, self.offset, self.length = path, offset // _PAGE * _PAGE, length

    def _mapped(self, rand: bool) -> tuple[int, mmap.mmap]:
        fd = os.open(self.path, os.O_RDONLY)
        mapped = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        if rand:
            mapped.madvise(mmap.MADV_RANDOM)
        return fd, mapped

    def _touch(self, mapped: mmap.mmap) -> None:
        view = np.frombuffer(mapped, dtype=np.uint8)[self.offset : self.offset + self.length]
        int(view[::_PAGE].sum())
        del view

    def _pieces(self, size: int) -> list[int]:
        return list(range(self.offset, self.offset + self.length, size))

    def fault(self, rand: bool) -> None:
        fd, mapped = self._mapped(rand)
        self._touch(mapped)
        mapped.close()
        os.close(fd)

    def one_read(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        os.preadv(fd, [bytearray(self.length)], self.offset)
        os.close(fd)

    def madvise(self, threads: int, size: int) -> None:
        fd, mapped = self._mapped(True)

        def advise(at: int) -> None:
            mapped.madvise(mmap.MADV_WILLNEED, at, min(size, len(mapped) - at))

        self._each(advise, self._pieces(size), threads)
        self._touch(mapped)
        mapped.close()
        os.close(fd)

    def fadvise(self, threads: int, size: int) -> None:
        fd, mapped = self._mapped(True)

        def advise(at: int) -> None:
            os.posix_fadvise(fd, at, size, os.POSIX_FADV_WILLNEED)

        self._each(advise, self._pieces(size), threads)
        self._touch(mapped)
        mapped.close()
        os.close(fd)

    def pread(self, threads: int, direct: bool) -> None:
        preads(self.path, self._pieces(_MB), _MB, threads, direct)
        if not direct:
            fd, mapped = self._mapped(False)
            self._touch(mapped)
            mapped.close()
            os.close(fd)

    @staticmethod
    def _each(call: Callable[[int], None], pieces: list[int], threads: int) -> None:
        if threads == 1:
            for at in pieces:
                call(at)
            return
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(call, pieces))


class Scattered:
    """``count`` spans of ``width`` bytes at random page-aligned offsets of ``path`` in
    ``[begin, end)`` (the rows a rescoring reads: about 230 at 100k episodes, 2 pages each)."""

    def __init__(self, path: Path, span: tuple[int, int], count: int, width: int) -> None:
        begin, end = span
        rng = random.Random(7)
        self.path, self.width = path, width
        pages = (end - begin - width) // _PAGE
        self.offsets = sorted(begin + rng.randrange(pages) * _PAGE for _ in range(count))

    def fault(self, advise: bool) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        mapped = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        mapped.madvise(mmap.MADV_RANDOM)
        if advise:
            for at in self.offsets:
                mapped.madvise(mmap.MADV_WILLNEED, at, self.width)
        view = np.frombuffer(mapped, dtype=np.uint8)
        for at in self.offsets:
            int(view[at : at + self.width : _PAGE].sum())
        del view
        mapped.close()
        os.close(fd)

    def pread(self, threads: int, direct: bool) -> None:
        preads(self.path, self.offsets, self.width, threads, direct)


def preads(path: Path, offsets: list[int], width: int, threads: int, direct: bool) -> None:
    """``width`` bytes at each of ``offsets`` read with ``preadv`` from ``threads`` threads,
    with ``direct`` past the page cache (``O_DIRECT``)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    local = threading.local()

    def read(at: int) -> None:
        if not hasattr(local, "buffer"):
            local.buffer = mmap.mmap(-1, width)  # page-aligned, as O_DIRECT needs
        os.preadv(fd, [local.buffer], at)

    Region._each(read, offsets, threads)
    os.close(fd)


def scattered_methods(rows: Scattered) -> dict[str, Callable[[], None]]:
    return {
        "rows: fault one by one": lambda: rows.fault(False),
        "rows: madvise each, then touch (today)": lambda: rows.fault(True),
        "rows: pread 8 threads": lambda: rows.pread(8, False),
        "rows: direct 1 thread": lambda: rows.pread(1, True),
        "rows: direct 8 threads": lambda: rows.pread(8, True),
        "rows: direct 32 threads": lambda: rows.pread(32, True),
    }


def methods(region: Region) -> dict[str, Callable[[], None]]:
    out: dict[str, Callable[[], None]] = {
        "fault": lambda: region.fault(False),
        "fault random": lambda: region.fault(True),
        "one read": region.one_read,
        "madvise 1 MB (today)": lambda: region.madvise(1, _MB),
        "fadvise 1 MB": lambda: region.fadvise(1, _MB),
    }
    for threads in (4, 8):
        out[f"madvise {threads} threads, 4 MB"] = lambda t=threads: region.madvise(t, 4 * _MB)
        out[f"fadvise {threads} threads, 2 MB"] = lambda t=threads: region.fadvise(t, 2 * _MB)
        out[f"pread {threads} threads"] = lambda t=threads: region.pread(t, False)
    for threads in (1, 4, 16):
        out[f"direct {threads} threads"] = lambda t=threads: region.pread(t, True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--index", type=Path, help="a search index file")
    source.add_argument("--file", type=Path, help="any file")
    source.add_argument("--make", type=Path, help="write a scratch file of --mb + 64 MB")
    parser.add_argument("--mb", type=int, default=78)
    parser.add_argument("--offset", type=int, default=32 * _MB)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=0, help="also N scattered 8 KB reads")
    parser.add_argument("--skip", default="", help="methods to leave out, separated by ;")
    args = parser.parse_args()
    if args.make is not None:
        with args.make.open("wb") as file:
            for _ in range(args.mb + 64):
                file.write(os.urandom(_MB))
            file.flush()
            os.fsync(file.fileno())
        args.file = args.make
    if args.index is not None:
        offset, length = index_region(args.index)
        region = Region(args.index, offset, length)
    else:
        region = Region(args.file, args.offset, args.mb * _MB)
    every = methods(region)
    if args.rows:
        # the larger part of the file before or after the region
        after = (region.offset + region.length, region.path.stat().st_size)
        span = max((0, region.offset), after, key=lambda s: s[1] - s[0])
        every |= scattered_methods(Scattered(region.path, span, args.rows, 2 * _PAGE))
    chosen = {k: v for k, v in every.items() if k not in args.skip.split(";")}
    times: dict[str, list[float]] = {name: [] for name in chosen}
    read: dict[str, float] = {}
    started = time.strftime("%H:%M:%S", time.gmtime())
    for _ in range(args.rounds):
        order = list(chosen)
        random.shuffle(order)
        for name in order:
            scale.drop_page_cache(region.path)
            time.sleep(0.05)
            before, clock = read_bytes(), time.perf_counter()
            chosen[name]()
            times[name].append((time.perf_counter() - clock) * 1000)
            read[name] = (read_bytes() - before) / _MB
    bases = {
        False: statistics.median(times.get("madvise 1 MB (today)", [1.0])),
        True: statistics.median(times.get("rows: madvise each, then touch (today)", [1.0])),
    }
    print(
        f"{region.length / _MB:.1f} MB of {region.path.name}, {args.rounds} rounds, "
        f"{started} to {time.strftime('%H:%M:%S', time.gmtime())} UTC, "
        f"load {os.getloadavg()[0]:.1f}\n"
    )
    print("| way | median ms | min to max ms | MB read | median / today |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, values in times.items():
        middle = statistics.median(values)
        base = bases[name.startswith("rows:")]
        print(
            f"| {name} | {middle:.1f} | {min(values):.0f} to {max(values):.0f} | "
            f"{read[name]:.1f} | {middle / base:.2f} |"
        )


if __name__ == "__main__":
    main()
