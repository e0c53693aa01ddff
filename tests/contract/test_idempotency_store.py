"""Contract suite of :class:`memmachine.ports.IdempotencyStore`: the Redis one on a Redis
server and on a three-node Redis Cluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from memmachine.adapters.redis.redis_idempotency_store import RedisIdempotencyStore
from memmachine.ports import IdempotencyRecord, IdempotencyStore
from tests.conftest import drop_redis_keys


@pytest.fixture(
    params=[
        pytest.param("redis_service_url", id="redis-service"),
        pytest.param("redis_cluster_url", id="redis-cluster"),
    ]
)
async def store(request: pytest.FixtureRequest, unique: str) -> AsyncIterator[IdempotencyStore]:
    url = str(request.getfixturevalue(request.param))
    opened = RedisIdempotencyStore(url, key_prefix=f"mmtest-{unique}")
    await opened.start()
    yield opened
    await opened.close()
    drop_redis_keys(url, f"mmtest-{unique}:*")


def _done(fingerprint: str, body: bytes) -> IdempotencyRecord:
    return IdempotencyRecord(fingerprint, True, 201, body, "application/json")


async def test_the_first_claim_owns_the_key_and_later_ones_see_its_record(
    store: IdempotencyStore,
) -> None:
    assert await store.claim("t", "k", "fp", 30) is None
    pending = await store.claim("t", "k", "other", 30)
    assert pending == IdempotencyRecord("fp")
    await store.complete("t", "k", _done("fp", b'{"ok": true}'), 60)
    assert await store.claim("t", "k", "fp", 30) == _done("fp", b'{"ok": true}')


async def test_of_concurrent_claims_exactly_one_owns_the_key(store: IdempotencyStore) -> None:
    claims = await asyncio.gather(*(store.claim("t", "race", f"fp{n}", 30) for n in range(10)))
    assert sum(claim is None for claim in claims) == 1


async def test_tenants_never_share_a_key(store: IdempotencyStore) -> None:
    assert await store.claim("tenant-a", "k", "fp", 30) is None
    assert await store.claim("tenant-b", "k", "fp", 30) is None
    await store.complete("tenant-a", "k", _done("fp", b"a"), 60)
    assert await store.claim("tenant-b", "k", "fp", 30) == IdempotencyRecord("fp")


async def test_a_released_key_may_be_claimed_again(store: IdempotencyStore) -> None:
    assert await store.claim("t", "again", "fp", 30) is None
    await store.release("t", "again")
    assert await store.claim("t", "again", "fp2", 30) is None


async def test_a_lease_that_is_not_renewed_ends_and_a_renewed_one_holds(
    store: IdempotencyStore,
) -> None:
    assert await store.claim("t", "lapsed", "fp", 1) is None
    assert await store.claim("t", "held", "fp", 1) is None
    for _ in range(4):
        await asyncio.sleep(0.4)
        await store.extend("t", "held", 1)
    assert await store.claim("t", "lapsed", "fp", 30) is None
    assert await store.claim("t", "held", "fp", 30) == IdempotencyRecord("fp")


async def test_an_answer_is_kept_for_its_ttl_and_no_renewal_cuts_it(
    store: IdempotencyStore,
) -> None:
    assert await store.claim("t", "kept", "fp", 1) is None
    await store.complete("t", "kept", _done("fp", b"\x00binary\xff"), 60)
    await store.extend("t", "kept", 1)
    await asyncio.sleep(1.2)
    assert await store.claim("t", "kept", "fp", 30) == _done("fp", b"\x00binary\xff")


async def test_forget_drops_every_answer_filed_under_the_owner(store: IdempotencyStore) -> None:
    for key, owners in (("k1", ["u1", "u1/s1"]), ("k2", ["u1", "u1/s2"]), ("k3", ["u2"])):
        assert await store.claim("t", key, "fp", 30) is None
        await store.complete("t", key, _done("fp", key.encode()), 60, owners)
    assert await store.forget("u1/s1") == 1
    assert await store.claim("t", "k1", "fp", 30) is None  # gone: claimable afresh
    assert await store.claim("t", "k2", "fp", 30) == _done("fp", b"k2")
    # k2, and k1's new pending claim (still listed under u1): every key of u1 is released.
    assert await store.forget("u1") == 2
    assert await store.claim("t", "k1", "fp", 30) is None
    assert await store.claim("t", "k2", "fp", 30) is None
    assert await store.claim("t", "k3", "fp", 30) == _done("fp", b"k3")
    assert await store.forget("nobody") == 0
