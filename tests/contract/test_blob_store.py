"""The BlobStore contract (``memmachine.ports.BlobStore``) on every adapter: the file store,
and the S3 store against moto's S3 server (``s3_endpoint_url``, started by the tests), each
test in a bucket of its own."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memmachine.adapters.file.file_blob_store import FileBlobStore
from memmachine.adapters.s3.s3_blob_store import S3BlobStore
from memmachine.errors import ConfigurationError, NotFoundError, StoreUnavailableError
from memmachine.models import Scope
from memmachine.ports import BlobStore
from tests.s3 import REGION, S3_KEYS, all_keys, new_bucket, s3_client
from tests.services import MotoServer

ANA = Scope(user_id="ana", session_id="s1")
BEN = Scope(user_id="ben", session_id="s1")
OTHER_TENANT = Scope(tenant="acme", user_id="ana", session_id="s1")
DATA = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 700  # a few chunks' worth


@pytest.fixture
def bucket(request: pytest.FixtureRequest, unique: str) -> str:
    """A new, empty bucket on the S3 endpoint, for this test only."""
    return new_bucket(request.getfixturevalue("s3_endpoint_url"), unique)


def s3_store(endpoint: str, bucket: str, **options: Any) -> S3BlobStore:
    return S3BlobStore(
        bucket,
        "mm/blobs",
        endpoint_url=endpoint,
        region=REGION,
        path_style=True,
        timeout_seconds=2.0,
        setting=f"MEMMACHINE_BLOB_URL=s3://{bucket}/mm/blobs",
        **S3_KEYS,
        **options,
    )


@pytest.fixture(params=["file", "s3"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    opened: BlobStore
    if request.param == "s3":
        bucket = request.getfixturevalue("bucket")
        opened = s3_store(request.getfixturevalue("s3_endpoint_url"), bucket, page_size=2)
    else:
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


async def test_s3_keys_hold_no_id_and_forget_empties_the_users_prefix(
    s3_endpoint_url: str, bucket: str
) -> None:
    # page_size=2: forgetting four objects takes two listing pages and two batch deletes
    async with s3_store(s3_endpoint_url, bucket, page_size=2) as store:
        ana = Scope(tenant="acme-corp", org_id="north", project_id="apollo", user_id="ana.lopez")
        await store.put(ana, b"one", holder="episode-1")
        await store.put(ana, b"two", holder="episode-2")
        kept = await store.put(BEN, b"one", holder="episode-3")
        keys = all_keys(s3_endpoint_url, bucket)
        assert len(keys) == 6  # three blobs, three holder markers
        assert all(key.startswith("mm/blobs/") for key in keys)
        for identifier in ("acme", "north", "apollo", "ana", "episode"):
            assert not any(identifier in key for key in keys)

        assert await store.forget(ana) == 2
        left = all_keys(s3_endpoint_url, bucket)
        assert len(left) == 2
        assert await read_all(store, BEN, kept.sha256) == b"one"


async def test_s3_endpoint_that_goes_away_is_store_unavailable(tmp_path: Path) -> None:
    server = MotoServer(tmp_path / "moto")
    try:
        server.wait_ready()
        s3_client(server.url).create_bucket(Bucket="short-lived")
        store = s3_store(server.url, "short-lived")
        await store.start()
        info = await store.put(ANA, DATA, holder="e1")
    finally:
        server.stop()
    try:
        with pytest.raises(StoreUnavailableError) as raised:
            await store.put(ANA, b"more", holder="e2")
        assert raised.value.store == "blobs"
        with pytest.raises(StoreUnavailableError):
            await read_all(store, ANA, info.sha256)
        with pytest.raises(StoreUnavailableError):
            await store.count(ANA)
        with pytest.raises(StoreUnavailableError):
            await store.forget(ANA)
    finally:
        await store.close()
    # and at startup too, where it is retried rather than refused
    with pytest.raises(StoreUnavailableError):
        await s3_store(server.url, "short-lived").start()


async def test_s3_missing_bucket_at_startup_names_the_setting(s3_endpoint_url: str) -> None:
    store = s3_store(s3_endpoint_url, "no-such-bucket")
    with pytest.raises(ConfigurationError) as raised:
        await store.start()
    assert "MEMMACHINE_BLOB_URL=s3://no-such-bucket/mm/blobs" in raised.value.message
    assert "does not exist" in raised.value.message
    await store.close()
