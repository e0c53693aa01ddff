"""The RetentionPolicyStore contract (``memmachine.ports.RetentionPolicyStore``) on SQLite
and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from memmachine.adapters.sql.sql_retention_policy_store import SqlRetentionPolicyStore
from memmachine.ports import RetentionPolicyStore

ACME = [
    {"tenant": "acme", "episodes_max_age_days": 90},
    {"tenant": "acme", "project_id": "crm", "facts_max_age_days": {"*": 30}},
]


@pytest.fixture
async def store(key_store_url: str) -> AsyncIterator[RetentionPolicyStore]:
    async with SqlRetentionPolicyStore(key_store_url) as opened:
        assert isinstance(opened, RetentionPolicyStore)
        yield opened


async def test_a_fresh_store_holds_no_tenant(store: RetentionPolicyStore) -> None:
    assert await store.all_policies() == {}


async def test_put_replaces_one_tenant_in_order_and_keeps_an_empty_list(
    store: RetentionPolicyStore,
) -> None:
    await store.put_policies("globex", [{"tenant": "globex", "working_max_age_days": 1}])
    await store.put_policies("acme", [{"tenant": "acme", "episodes_max_age_days": 1}])
    await store.put_policies("acme", ACME)
    assert await store.all_policies() == {
        "acme": ACME,
        "globex": [{"tenant": "globex", "working_max_age_days": 1}],
    }
    await store.put_policies("globex", [])
    found = await store.all_policies()
    assert list(found) == ["acme", "globex"]
    assert found["globex"] == []


async def test_policies_survive_a_restart(key_store_url: str) -> None:
    async with SqlRetentionPolicyStore(key_store_url) as first:
        await first.put_policies("acme", ACME)
    async with SqlRetentionPolicyStore(key_store_url) as second:
        assert await second.all_policies() == {"acme": ACME}
        assert (await second.health()).status == "ok"
