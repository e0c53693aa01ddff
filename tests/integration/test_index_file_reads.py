"""What a search of an index opened from its file reads from the disk when none of the
file's pages are cached (a user's first search since long ago): the first pass's int8 codes
are read as the file opens, and of the float32 vectors only the pages of the rows the
rescoring needs, not the whole matrix the kernel's read-around used to pull in. The answers
are those of the index the file was written from."""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

import numpy as np
import pytest

from memmachine.adapters.indexed.search_index_files import SearchIndexFiles
from memmachine.indexing.index_snapshot import snapshot_of
from memmachine.indexing.page_advice import resident_pages
from memmachine.indexing.scope_index import ScopeIndex
from memmachine.models import IndexEntry, Scope

DIMENSIONS = 64
USER = Scope(user_id="ann")


def _entries(count: int) -> list[IndexEntry]:
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((16, DIMENSIONS)).astype(np.float32)
    return [
        IndexEntry(
            id=f"e{i:06d}",
            session_id=f"s{i % 50}",
            agent_id=None,
            group_id=None,
            sequence=i,
            timestamp=1_700_000_000_000_000 + i,
            revision=1,
            terms=("word", f"w{i % 97}"),
            embedding=(centres[i % 16] + 0.5 * rng.standard_normal(DIMENSIONS)).astype(np.float32),
        )
        for i in range(count)
    ]


def _drop_cached_pages(path: Path) -> bool:
    """Drop the file's pages from the page cache; whether the kernel did (not on tmpfs)."""
    with path.open("rb") as file:
        os.fsync(file.fileno())
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    fd = os.open(path, os.O_RDONLY)
    try:
        mapped = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    view = np.frombuffer(mapped, dtype=np.uint8)
    cached = resident_pages(view)
    del view
    mapped.close()
    return cached is not None and not cached.any()


def _share_cached(array: np.ndarray) -> float:
    cached = resident_pages(array)
    assert cached is not None
    return float(cached.mean())


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise")
def test_a_disk_cold_search_reads_the_codes_and_only_the_vectors_it_rescores(
    tmp_path: Path,
) -> None:
    built = ScopeIndex(DIMENSIONS, quantized_from=0)
    built.add(_entries(40_000))
    files = SearchIndexFiles(tmp_path, "falkordb:abc")
    files.save(USER.user_key, snapshot_of(built))
    path = files.path(USER.user_key)
    if not _drop_cached_pages(path):
        pytest.skip("this file system keeps the pages (tmpfs?): nothing is read from disk")

    opened = files.open(USER.user_key)
    assert opened is not None
    codes = opened._codes.layout.chunks[0]
    vectors = opened._vectors.layout.chunks[0]
    # the codes' reads were started by opening, before any search touched them
    deadline = time.monotonic() + 30
    while _share_cached(codes) < 1.0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _share_cached(codes) == 1.0
    assert _share_cached(vectors) < 0.01  # at most a page shared with its neighbour

    mask = opened.mask(USER)
    assert mask is not None
    query = _entries(1)[0].embedding
    assert query is not None
    got = opened.vector_top(query, 10, mask)
    assert got == built.vector_top(query, 10, mask)
    # a few rows rescored: a small part of the vectors' pages, not the whole matrix
    assert 0.0 < _share_cached(vectors) < 0.5
    assert opened.bm25_top(["w5"], 10, mask) == built.bm25_top(["w5"], 10, mask)
