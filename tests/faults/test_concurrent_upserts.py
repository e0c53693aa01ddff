"""No lost updates: parallel writers upserting one (tag, feature) on every SQL dialect.

Each of :data:`WRITERS` writers sets the same fact to :data:`VALUES` values of its own, one
after the other, all writers at once. Every value a writer was told is stored must then be
in the fact's history or be the current value, exactly once; each writer's values must come
in the order it wrote them; and the versions must chain (each one closes when the next
opens), so the history is a single line with no value overwritten unseen.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from memmachine.adapters.sql.sql_profile_store import SqlProfileStore
from memmachine.models import FactRecord, Scope
from tests.conftest import temporary_postgres_database
from tests.faults.conftest import Report

WRITERS = 8
VALUES = 12


@pytest.fixture(params=["sqlite", "postgresql", "postgresql-plain"])
def profile_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'profile.db'}"
        return
    fixture = "postgres_admin_url" if request.param == "postgresql" else "postgres_plain_admin_url"
    with temporary_postgres_database(str(request.getfixturevalue(fixture))) as url:
        yield url


@pytest.fixture
async def store(profile_url: str) -> AsyncIterator[SqlProfileStore]:
    store = SqlProfileStore(profile_url)
    await store.start()
    try:
        yield store
    finally:
        await store.close()


async def test_parallel_upserts_of_one_fact_lose_no_value(
    store: SqlProfileStore, tally: Report, request: pytest.FixtureRequest
) -> None:
    scope = Scope(tenant="race", user_id="ana")

    async def writer(number: int) -> list[str]:
        acknowledged = []
        for index in range(VALUES):
            value = f"writer {number} value {index}"
            [stored] = await store.upsert_facts(
                scope, [FactRecord(tag="home", feature="city", value=value)]
            )
            assert stored.value == value
            acknowledged.append(value)
        return acknowledged

    written = await asyncio.gather(*(writer(number) for number in range(WRITERS)))
    acknowledged = [value for values in written for value in values]

    history = await store.fact_history(scope, "home", "city")
    [current] = await store.list_facts(scope)
    versions = [version.value for version in history] + [current.value]
    counts = Counter(versions)
    lost = [value for value in acknowledged if value not in counts]
    duplicated = [value for value, count in counts.items() if count > 1]
    tally(
        case=f"concurrent upserts, {WRITERS} writers x {VALUES} values, {request.node.callspec.id}",
        acknowledged=len(acknowledged),
        stored=len(counts),
        lost=len(lost),
        duplicated=len(duplicated),
    )
    assert lost == []
    assert duplicated == []
    assert set(counts) == set(acknowledged)  # nothing invented either
    for values in written:  # each writer's values in the order it wrote them
        assert [value for value in versions if value in values] == values
    # one line of versions: each closes exactly when the next opens
    opened = [version.valid_from for version in history[1:]] + [current.valid_from]
    assert [version.valid_to for version in history] == opened
    assert all(version.reason == "superseded" for version in history)
