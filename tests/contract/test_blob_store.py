"""The BlobStore contract (``memmachine.ports.BlobStore``) on every adapter.

Only the file adapter exists: no S3-compatible server can be started here from the
project's packages, so an S3 adapter is not shipped untested."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memmachine.adapters.file.file_blob_store import FileBlobStore
from memmachine.errors import NotFoundError
from memmachine.models import Scope
from memmachine.ports import BlobStore

ANA = Scope(user_id="ana", session_id="s1")
BEN = Scope(user_id="ben", session_id="s1")
OTHER_TENANT = Scope(tenant="acme", user_id="ana", session_id="s1")
DATA = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 700  # a few chunks' worth


@pytest.fixture(params=["file"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    opened = FileBlobStore(tmp_path / "blobs")
    await opened.start()
    assert isinstance(opened, BlobStore)
    yield opened
    await opened.close()


async def read_all(store: BlobStore, scope: Scope, sha256: str, chunk_size: int = 65_536) -> bytes:
    return b"".join([chunk async for chunk in store.read(scope, sha256, chunk_size=chunk_size)])


async def test_put_returns_the_content_address_and_read_gives_the_bytes_back(
    store: BlobStore,
) -> None:
    info = await store.put(ANA, DATA, holder="e1")
    assert info.sha256 == hashlib.sha256(DATA).hexdigest()
    assert info.size == len(DATA)
    assert await read_all(store, ANA, info.sha256) == DATA
    chunks = [chunk async for chunk in store.read(ANA, info.sha256, chunk_size=1000)]
    assert all(len(chunk) <= 1000 for chunk in chunks)
    assert b"".join(chunks) == DATA


async def test_a_blob_is_the_users_whatever_session_or_agent_asks(store: BlobStore) -> None:
    info = await store.put(ANA, DATA, holder="e1")
    other_session = Scope(user_id="ana", session_id="s2", agent_id="bot")
    assert await read_all(store, other_session, info.sha256) == DATA


async def test_no_user_reads_counts_or_removes_another_users_blob(store: BlobStore) -> None:
    info = await store.put(ANA, DATA, holder="e1")
    for stranger in (BEN, OTHER_TENANT):
        with pytest.raises(NotFoundError):
            await read_all(store, stranger, info.sha256)
        assert await store.count(stranger) == 0
        assert await store.release(stranger, info.sha256, "e1") is False
        assert await store.forget(stranger) == 0
    assert await read_all(store, ANA, info.sha256) == DATA


async def test_same_bytes_are_kept_once_until_the_last_holder_is_released(
    store: BlobStore,
) -> None:
    first = await store.put(ANA, DATA, holder="e1")
    second = await store.put(ANA, DATA, holder="e2")
    assert first == second
    assert await store.count(ANA) == 1
    assert await store.release(ANA, first.sha256, "e1") is False
    assert await read_all(store, ANA, first.sha256) == DATA
    assert await store.release(ANA, first.sha256, "e1") is False  # twice: a no-op
    assert await store.release(ANA, first.sha256, "e2") is True
    assert await store.count(ANA) == 0
    with pytest.raises(NotFoundError):
        await read_all(store, ANA, first.sha256)


async def test_forget_removes_every_blob_of_the_user_only(store: BlobStore) -> None:
    await store.put(ANA, b"one", holder="e1")
    await store.put(ANA, b"two", holder="e2")
    kept = await store.put(BEN, b"one", holder="e9")
    assert await store.forget(Scope(user_id="ana")) == 2
    assert await store.count(ANA) == 0
    assert await read_all(store, BEN, kept.sha256) == b"one"


async def test_unknown_or_malformed_keys_are_not_found(store: BlobStore) -> None:
    for key in ("0" * 64, "../../etc/passwd", "", "A" * 64):
        with pytest.raises(NotFoundError):
            await read_all(store, ANA, key)
        assert await store.release(ANA, key, "e1") is False


async def test_concurrent_puts_and_releases_leave_a_consistent_store(store: BlobStore) -> None:
    holders = [f"e{index}" for index in range(20)]
    infos = await asyncio.gather(*(store.put(ANA, DATA, holder=h) for h in holders))
    assert len({info.sha256 for info in infos}) == 1
    released = await asyncio.gather(*(store.release(ANA, infos[0].sha256, h) for h in holders))
    assert released.count(True) == 1
    assert await store.count(ANA) == 0


def test_file_blobs_leave_no_temporary_file_and_no_id_in_a_path(tmp_path: Path) -> None:
    async def run() -> None:
        store = FileBlobStore(tmp_path / "b")
        await store.start()
        await store.put(Scope(user_id="..", session_id=".."), DATA, holder="../h")

    asyncio.run(run())
    names = [path.name for path in (tmp_path / "b").rglob("*")]
    assert not any(name.startswith(".tmp") for name in names)
    assert not any(".." in name for name in names)
    assert all(
        path.resolve().is_relative_to(tmp_path / "b") for path in (tmp_path / "b").rglob("*")
    )
