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

from memmachine.adapters.indexed import search_index_files
from memmachine.adapters.indexed.search_index_files import SearchIndexFiles
from memmachine.indexing import page_advice
from memmachine.indexing.index_snapshot import compacted, snapshot_of
from memmachine.indexing.joined_rows import JoinedRows
from memmachine.indexing.page_advice import resident_pages
from memmachine.indexing.scope_index import ScopeIndex
from memmachine.models import IndexEntry, Scope
from tests.unit.indexing.test_scope_index import DIMENSIONS as ENTRY_DIMENSIONS
from tests.unit.indexing.test_scope_index import entries, with_terms

DIMENSIONS = 64
USER = Scope(user_id="ann")


def _entries(count: int) -> list[IndexEntry]:
    """Episodes around 16 topics; every other one has sentence vectors (0 to 2)."""
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((16, DIMENSIONS)).astype(np.float32)

    def near(i: int) -> np.ndarray:
        return (centres[i % 16] + 0.5 * rng.standard_normal(DIMENSIONS)).astype(np.float32)

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
            embedding=near(i),
            derivatives=tuple(near(i + 1) for _ in range(i % 3 if i % 2 else 0)),
            derivative_weights=tuple(0.9 for _ in range(i % 3 if i % 2 else 0)),
        )
        for i in range(count)
    ]


def drop_cached_pages(path: Path) -> bool:
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
    if not drop_cached_pages(path):
        pytest.skip("this file system keeps the pages (tmpfs?): nothing is read from disk")

    opened = files.open(USER.user_key)
    assert opened is not None
    codes = opened._codes.layout.chunks[0]
    joined = opened._vectors.layout.chunks[0]
    assert isinstance(joined, JoinedRows)  # each vector beside its sentence vectors
    vectors = joined.joined
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
    assert opened.vector_top(query, 10, mask, derivatives=False) == built.vector_top(
        query, 10, mask, derivatives=False
    )
    assert opened.bm25_top(["w5"], 10, mask) == built.bm25_top(["w5"], 10, mask)


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise")
def test_an_open_that_waits_returns_with_the_codes_read_and_the_vectors_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what the index store does in its worker thread: the first search, on the event loop,
    # then touches no code page that is still on the disk. What is cached is looked at as
    # soon as the wait returns, before the index is built on the pages (which takes longer
    # than reading this small file would)
    built = ScopeIndex(DIMENSIONS, quantized_from=0)
    built.add(_entries(40_000))
    files = SearchIndexFiles(tmp_path, "falkordb:abc")
    files.save(USER.user_key, snapshot_of(built))
    if not drop_cached_pages(files.path(USER.user_key)):
        pytest.skip("this file system keeps the pages (tmpfs?): nothing is read from disk")
    cached: list[tuple[float, float]] = []
    wait_for_reads = search_index_files._wait_for_reads

    def looked_at(arrays: dict[str, np.ndarray]) -> None:
        wait_for_reads(arrays)
        cached.append((_share_cached(arrays["codes"]), _share_cached(arrays["joined"])))

    monkeypatch.setattr(search_index_files, "_wait_for_reads", looked_at)
    opened = files.open(USER.user_key, wait=True)
    assert opened is not None
    codes, vectors = cached[0]
    assert codes == 1.0  # read, not just started
    assert vectors < 0.01  # the vectors are left to the rescoring
    assert _answers(opened) == _answers(built)


@pytest.mark.parametrize("quantized_from", [0, 10**9])
def test_a_file_with_each_vector_beside_its_sentence_vectors_answers_as_the_index_it_was_taken_from(
    tmp_path: Path, quantized_from: int
) -> None:
    rng = np.random.default_rng(17)
    data = with_terms(entries(rng, 3_000), 17)
    built = ScopeIndex(ENTRY_DIMENSIONS, quantized_from=quantized_from)
    built.add(data[:2_000])
    built.remove(["e000010", "e000501"])
    files = SearchIndexFiles(tmp_path, "falkordb:abc")
    files.save(USER.user_key, snapshot_of(built))
    opened = files.open(USER.user_key)
    assert opened is not None
    chunk = opened._vectors.layout.chunks[0]
    # joined only where the int8 first pass rescores a few rows; a float scan reads all
    assert isinstance(chunk, JoinedRows) == (quantized_from == 0)
    for index in (built, opened):  # both go on receiving writes and deletions
        index.add(data[2_000:])
        index.remove(["e002100", "e000021"])
    files.save(USER.user_key, snapshot_of(opened))  # an opened index written again
    reopened = files.open(USER.user_key)
    assert reopened is not None
    for scope in (USER, USER.model_copy(update={"agent_id": "bot"}), USER.for_session("s4")):
        want_mask = built.mask(scope)
        assert want_mask is not None
        for index in (opened, reopened, compacted(opened)):
            mask = index.mask(scope)
            assert mask is not None
            for _ in range(6):
                query = rng.standard_normal(ENTRY_DIMENSIONS).astype(np.float32)
                for derivatives in (True, False):
                    for k in (1, 10, 60):
                        want = built.vector_top(query, k, want_mask, derivatives=derivatives)
                        got = index.vector_top(query, k, mask, derivatives=derivatives)
                        assert got == want
            terms = ["cat", "river"]
            assert index.bm25_top(terms, 20, mask) == built.bm25_top(terms, 20, want_mask)


def test_a_file_of_the_previous_format_is_removed_not_misread(tmp_path: Path) -> None:
    built = ScopeIndex(DIMENSIONS, quantized_from=0)
    built.add(_entries(500))
    files = SearchIndexFiles(tmp_path, "falkordb:abc")
    files.save(USER.user_key, snapshot_of(built))
    path = files.path(USER.user_key)
    data = path.read_bytes()
    assert data.count(b'"format":3,') == 1
    # format 2 kept the episode vectors and the sentence vectors apart: read as format 3,
    # the joined rows would be other vectors
    path.write_bytes(data.replace(b'"format":3,', b'"format":2,'))
    assert files.open(USER.user_key) is None
    assert not path.exists()  # removed, so the caller rebuilds it from the store


def _answers(index: ScopeIndex) -> list[object]:
    mask = index.mask(USER)
    assert mask is not None
    queries = [entry.embedding for entry in _entries(3)]
    return [
        *(index.vector_top(query, 10, mask) for query in queries if query is not None),
        index.bm25_top(["w5", "word"], 10, mask),
    ]


@pytest.mark.parametrize("refusal", ["advice the kernel refuses", "no madvise"])
def test_a_read_ahead_that_fails_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusal: str
) -> None:
    built = ScopeIndex(DIMENSIONS, quantized_from=0)
    built.add(_entries(3_000))
    files = SearchIndexFiles(tmp_path, "falkordb:abc")
    files.save(USER.user_key, snapshot_of(built))
    drop_cached_pages(files.path(USER.user_key))
    # an advice number no kernel knows: madvise fails with EINVAL on every call
    monkeypatch.setattr(page_advice, "_WILLNEED", 0x7FFF if refusal != "no madvise" else None)
    monkeypatch.setattr(page_advice, "_RANDOM", 0x7FFE if refusal != "no madvise" else None)
    monkeypatch.setattr(page_advice, "_POPULATE_READ", 0x7FFD if refusal != "no madvise" else None)
    opened = files.open(USER.user_key, wait=True)
    assert opened is not None
    assert _answers(opened) == _answers(built)
