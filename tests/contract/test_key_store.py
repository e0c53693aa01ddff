"""The KeyStore contract (``memmachine.ports.KeyStore``) on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from memmachine.adapters.sql.sql_key_store import SqlKeyStore
from memmachine.adapters.sql.sql_profile_store import SqlProfileStore
from memmachine.auth import IssuedKey, issue_key, secret_matches
from memmachine.errors import ConflictError, NotFoundError
from memmachine.models import FactRecord, Scope, utc_now
from memmachine.ports import KeyStore


@pytest.fixture
async def store(key_store_url: str) -> AsyncIterator[KeyStore]:
    async with SqlKeyStore(key_store_url) as opened:
        assert isinstance(opened, KeyStore)
        yield opened


def _issued(tenant: str, minutes: int = 0, **kwargs: object) -> IssuedKey:
    return issue_key(tenant, now=utc_now() + timedelta(minutes=minutes), **kwargs)  # type: ignore[arg-type]


async def test_created_keys_are_found_by_id_with_a_hash_that_checks(store: KeyStore) -> None:
    issued = _issued("acme", name="bot", permissions=["read"], rate_limit_per_minute=7)
    created = await store.create(issued.record, issued.secret_hash)
    assert created == issued.record
    found = await store.get(issued.record.key_id)
    assert found is not None
    assert found.key == issued.record
    assert found.secret_hash != issued.token
    assert secret_matches(issued.token.split("_", 2)[2], found.secret_hash)
    assert await store.get("0123456789abcdef") is None


async def test_an_id_stored_twice_is_a_conflict(store: KeyStore) -> None:
    issued = _issued("acme")
    await store.create(issued.record, issued.secret_hash)
    with pytest.raises(ConflictError):
        await store.create(issued.record, "0" * 64)
    assert [k.key_id for k in await store.list_keys()] == [issued.record.key_id]


async def test_lists_are_per_tenant_oldest_first_and_keep_revoked_keys(store: KeyStore) -> None:
    first, second, other = _issued("a", 0), _issued("a", 1), _issued("b", 2)
    for issued in (second, other, first):
        await store.create(issued.record, issued.secret_hash)
    await store.revoke(first.record.key_id)
    assert [k.key_id for k in await store.list_keys("a")] == [
        first.record.key_id,
        second.record.key_id,
    ]
    assert [k.key_id for k in await store.list_keys()] == [
        first.record.key_id,
        second.record.key_id,
        other.record.key_id,
    ]
    assert await store.list_keys("nobody") == []


async def test_revoking_is_scoped_idempotent_and_leaves_active_keys(store: KeyStore) -> None:
    assert await store.any_active() is False
    mine, theirs = _issued("a"), _issued("b")
    for issued in (mine, theirs):
        await store.create(issued.record, issued.secret_hash)
    assert await store.any_active() is True

    with pytest.raises(NotFoundError):
        await store.revoke(theirs.record.key_id, "a")
    with pytest.raises(NotFoundError):
        await store.revoke("0123456789abcdef")
    revoked = await store.revoke(mine.record.key_id, "a")
    assert revoked.revoked_at is not None
    assert not revoked.active
    again = await store.revoke(mine.record.key_id)
    assert again.revoked_at == revoked.revoked_at

    active = await store.active_keys()
    assert [stored.key.key_id for stored in active] == [theirs.record.key_id]
    assert active[0].secret_hash == theirs.secret_hash
    await store.revoke(theirs.record.key_id)
    assert await store.any_active() is False
    found = await store.get(mine.record.key_id)
    assert found is not None
    assert found.key.revoked_at == revoked.revoked_at


async def test_keys_survive_a_restart_and_share_the_profile_database(key_store_url: str) -> None:
    issued = _issued("acme")
    async with SqlKeyStore(key_store_url) as store:
        await store.create(issued.record, issued.secret_hash)
    scope = Scope(tenant="acme", user_id="ana")
    async with SqlProfileStore(key_store_url) as profile:  # same database, same migrations
        await profile.upsert_facts(scope, [FactRecord(tag="t", feature="f", value="v")])
    async with SqlKeyStore(key_store_url) as store:
        found = await store.get(issued.record.key_id)
        assert found is not None
        assert found.key == issued.record
    async with SqlProfileStore(key_store_url) as profile:
        assert [f.value for f in await profile.list_facts(scope)] == ["v"]
