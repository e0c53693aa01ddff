"""Contract suite of :class:`memmachine.ports.WorkingMemoryStore`, run against every adapter.

Adapters are listed in ``WORKING_STORE_URLS`` as the names of fixtures returning a Redis
protocol URL. Every store a test makes gets a key prefix of its own
(``mmtest-<unique>-<suffix>``) and every key under ``mmtest-<unique>-`` is deleted afterwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.crc import key_slot

from memmachine.adapters.redis.redis_working_memory_store import RedisWorkingMemoryStore
from memmachine.errors import (
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    StoreError,
    StoreUnavailableError,
)
from memmachine.models import Scope, WorkingMessage
from memmachine.ports import WorkingMemoryStore
from tests.conftest import async_redis_client, drop_redis_keys
from tests.contract.conftest import (
    USER_IDS_IN_ORDER,
    check_project_listing,
    check_user_listing,
    projects_of,
)

MakeStore = Callable[[str], Awaitable[RedisWorkingMemoryStore]]

# --------------------------------------------------------------------------- adapters


#: Fixture names returning a Redis-protocol URL, one per backend under test: the machine's
#: Redis service, the embedded FalkorDB server (a redis-server reached over a unix socket),
#: a FalkorDB server and a three-node Redis Cluster (``redis+cluster://``).
WORKING_STORE_URLS = [
    pytest.param("redis_service_url", id="redis-service"),
    pytest.param("embedded_falkordb_url", id="embedded-falkordb"),
    pytest.param("falkordb_server_url", id="falkordb-server"),
    pytest.param("redis_cluster_url", id="redis-cluster"),
]


@pytest.fixture(params=WORKING_STORE_URLS)
def backend_url(request: pytest.FixtureRequest) -> str:
    """The adapter's URL. Resolved in a sync fixture: an async one would ask for the
    (async, session-scoped) server fixtures from inside a running event loop."""
    return str(request.getfixturevalue(request.param))


@pytest.fixture
async def working_url(backend_url: str, unique: str) -> AsyncIterator[str]:
    """The adapter's URL; afterwards every key of the test's prefixes is deleted."""
    url = backend_url
    yield url
    drop_redis_keys(url, f"mmtest-{unique}-*")


@pytest.fixture
async def make_store(working_url: str, unique: str) -> AsyncIterator[MakeStore]:
    """Start stores on the adapter's server, each under prefix ``mmtest-<unique>-<suffix>``."""
    stores: list[RedisWorkingMemoryStore] = []

    async def make(suffix: str) -> RedisWorkingMemoryStore:
        store = RedisWorkingMemoryStore(working_url, key_prefix=f"mmtest-{unique}-{suffix}")
        await store.start()
        stores.append(store)
        return store

    yield make
    for store in stores:
        await store.close()


@pytest.fixture
async def working_store(make_store: MakeStore) -> RedisWorkingMemoryStore:
    return await make_store("a")


@pytest.fixture
async def raw(working_url: str) -> AsyncIterator[Any]:
    """A plain client on the adapter's server (or cluster), to look at keys and TTLs."""
    client = async_redis_client(working_url, decode_responses=True)
    yield client
    await client.aclose()


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def scope() -> Scope:
    return Scope(tenant="acme", org_id="sales", project_id="crm", user_id="alice", session_id="s1")


T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def msg(content: str, role: Any = "user", **extra: Any) -> WorkingMessage:
    return WorkingMessage(role=role, content=content, timestamp=T0, **extra)


def msgs(*contents: str) -> list[WorkingMessage]:
    return [msg(content) for content in contents]


def contents(memory: Any) -> list[str]:
    return [m.content for m in memory.messages]


TTL = 600


# --------------------------------------------------------------------------- lifecycle


async def test_is_a_working_memory_store(working_store: RedisWorkingMemoryStore) -> None:
    assert isinstance(working_store, WorkingMemoryStore)
    assert working_store.name == "working"
    assert working_store.kind == "redis"


async def test_health_reports_version_and_latency(
    working_store: RedisWorkingMemoryStore,
) -> None:
    health = await working_store.health()
    assert health.status == "ok"
    assert (health.name, health.kind) == ("working", "redis")
    assert health.version
    assert health.latency_ms is not None
    assert health.latency_ms >= 0


async def test_start_close_idempotent_and_health_down_after_close(
    working_url: str, unique: str
) -> None:
    store = RedisWorkingMemoryStore(working_url, key_prefix=f"mmtest-{unique}-lifecycle")
    assert (await store.health()).status == "down"
    async with store:
        await store.start()
        assert (await store.health()).status == "ok"
    await store.close()
    assert (await store.health()).status == "down"
    with pytest.raises(StoreError) as caught:
        await store.get(Scope(user_id="u", session_id="s"))
    assert caught.value.store == "working"


async def test_unreachable_server_is_store_unavailable() -> None:
    store = RedisWorkingMemoryStore("redis://127.0.0.1:1/0")
    with pytest.raises(StoreUnavailableError) as caught:
        await store.start()
    assert caught.value.store == "working"
    assert (await store.health()).status == "down"


async def test_unreachable_cluster_is_store_unavailable() -> None:
    store = RedisWorkingMemoryStore("redis+cluster://127.0.0.1:1")
    with pytest.raises(StoreUnavailableError) as caught:
        await store.start()
    assert caught.value.store == "working"


@pytest.mark.parametrize("url", ["http://localhost:6379", "falkordb://localhost", ""])
def test_bad_url_is_a_configuration_error(url: str) -> None:
    with pytest.raises(ConfigurationError):
        RedisWorkingMemoryStore(url)


async def test_a_cluster_url_with_a_database_is_a_configuration_error() -> None:
    store = RedisWorkingMemoryStore("redis+cluster://secret@127.0.0.1:7000/2")
    with pytest.raises(ConfigurationError) as caught:
        await store.start()
    assert "one database" in caught.value.message
    assert "secret" not in caught.value.message


@pytest.mark.parametrize("prefix", ["", "a:b", "has space"])
def test_bad_prefix_is_a_configuration_error(prefix: str) -> None:
    with pytest.raises(ConfigurationError):
        RedisWorkingMemoryStore("redis://localhost", key_prefix=prefix)


# --------------------------------------------------------------------------- reads and versions


async def test_missing_session_is_none(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    assert await working_store.get(scope) is None
    assert await working_store.get(scope, last_n=5) is None


async def test_session_id_is_required(working_store: RedisWorkingMemoryStore, scope: Scope) -> None:
    user = scope.user_scope()
    with pytest.raises(InvalidInputError):
        await working_store.get(user)
    with pytest.raises(InvalidInputError):
        await working_store.append(user, msgs("x"), ttl_seconds=TTL)
    with pytest.raises(InvalidInputError):
        await working_store.put(user, state={}, ttl_seconds=TTL)
    with pytest.raises(InvalidInputError):
        await working_store.delete(user)


async def test_every_write_increments_the_version_by_one(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    first = await working_store.append(scope, msgs("a", "b"), ttl_seconds=TTL)
    assert first.version == 1
    second = await working_store.put(scope, state={"step": 1}, ttl_seconds=TTL)
    assert second.version == 2
    third = await working_store.put(scope, summary="so far", ttl_seconds=TTL)
    assert third.version == 3
    fourth = await working_store.append(scope, [], ttl_seconds=TTL)
    assert fourth.version == 4
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert loaded.version == 4
    assert first.updated_at is not None
    assert loaded.updated_at is not None
    assert loaded.updated_at >= first.updated_at
    assert loaded.updated_at.utcoffset() == timedelta(0)


async def test_a_write_returns_the_session_without_messages(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    await working_store.put(scope, state={"k": "v"}, summary="sum", ttl_seconds=TTL)
    written = await working_store.append(scope, msgs("a", "b", "c"), ttl_seconds=TTL)
    assert written.messages == []
    assert written.message_count == 3
    assert written.state == {"k": "v"}
    assert written.summary == "sum"
    assert written.ttl_seconds == TTL
    assert written.scope == scope
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert contents(loaded) == ["a", "b", "c"]
    assert (loaded.message_count, loaded.state, loaded.summary) == (3, {"k": "v"}, "sum")
    assert loaded.scope == scope


# --------------------------------------------------------------------------- append


async def test_append_adds_at_the_end(working_store: RedisWorkingMemoryStore, scope: Scope) -> None:
    await working_store.append(scope, msgs("a", "b"), ttl_seconds=TTL)
    await working_store.append(scope, msgs("c"), ttl_seconds=TTL)
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert contents(loaded) == ["a", "b", "c"]
    assert loaded.state == {}
    assert loaded.summary is None


async def test_concurrent_appends_all_land_without_interleaving(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    calls, per_call = 20, 5

    async def append(call: int) -> None:
        batch = msgs(*(f"{call}:{i}" for i in range(per_call)))
        await working_store.append(scope, batch, ttl_seconds=TTL)

    await asyncio.gather(*(append(call) for call in range(calls)))
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert loaded.version == calls
    assert loaded.message_count == calls * per_call
    got = contents(loaded)
    assert len(got) == calls * per_call
    for start in range(0, len(got), per_call):
        chunk = got[start : start + per_call]
        call = chunk[0].split(":")[0]
        assert chunk == [f"{call}:{i}" for i in range(per_call)]
    assert len({chunk.split(":")[0] for chunk in got}) == calls


async def test_large_append_in_one_call(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    batch = msgs(*(f"m{i}" for i in range(2500)))
    written = await working_store.append(scope, batch, ttl_seconds=TTL)
    assert written.message_count == 2500
    loaded = await working_store.get(scope, last_n=2)
    assert loaded is not None
    assert contents(loaded) == ["m2498", "m2499"]


# --------------------------------------------------------------------------- put


async def test_put_replaces_only_the_given_parts(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    await working_store.put(
        scope, messages=msgs("a", "b"), state={"x": 1}, summary="s1", ttl_seconds=TTL
    )

    await working_store.put(scope, state={"y": 2}, ttl_seconds=TTL)
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert (contents(loaded), loaded.state, loaded.summary) == (["a", "b"], {"y": 2}, "s1")

    await working_store.put(scope, messages=msgs("c"), ttl_seconds=TTL)
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert (contents(loaded), loaded.state, loaded.summary) == (["c"], {"y": 2}, "s1")

    await working_store.put(scope, summary="", ttl_seconds=TTL)
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert (contents(loaded), loaded.state, loaded.summary) == (["c"], {"y": 2}, "")

    await working_store.put(scope, messages=[], state={}, ttl_seconds=TTL)
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert (contents(loaded), loaded.message_count, loaded.state) == ([], 0, {})
    assert loaded.version == 5


async def test_put_creates_a_missing_session(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    written = await working_store.put(scope, summary="new", ttl_seconds=TTL)
    assert (written.version, written.message_count, written.summary) == (1, 0, "new")
    assert written.state == {}


async def test_put_with_expected_version_is_compare_and_set(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    created = await working_store.put(
        scope, state={"v": 0}, messages=msgs("a"), expected_version=0, ttl_seconds=TTL
    )
    assert created.version == 1

    with pytest.raises(ConflictError) as caught:
        await working_store.put(scope, state={"v": "lost"}, expected_version=0, ttl_seconds=TTL)
    assert caught.value.current_version == 1

    updated = await working_store.put(
        scope, state={"v": 1}, messages=msgs("b"), expected_version=1, ttl_seconds=TTL
    )
    assert updated.version == 2

    with pytest.raises(ConflictError) as caught:
        await working_store.put(
            scope, state={"v": "stale"}, messages=[], summary="x", expected_version=1, ttl_seconds=5
        )
    assert caught.value.current_version == 2

    loaded = await working_store.get(scope)
    assert loaded is not None
    assert (loaded.version, loaded.state, contents(loaded)) == (2, {"v": 1}, ["b"])
    assert loaded.summary is None
    assert loaded.ttl_seconds is not None
    assert loaded.ttl_seconds > 5


async def test_expected_version_of_a_missing_session_must_be_zero(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    with pytest.raises(ConflictError) as caught:
        await working_store.put(scope, state={}, expected_version=3, ttl_seconds=TTL)
    assert caught.value.current_version == 0
    assert await working_store.get(scope) is None


async def test_concurrent_compare_and_set_lets_one_writer_win(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    await working_store.put(scope, state={"winner": None}, ttl_seconds=TTL)

    async def attempt(i: int) -> int | None:
        """The version the write saw: None when it won, else the conflict's current one."""
        try:
            await working_store.put(scope, state={"winner": i}, expected_version=1, ttl_seconds=TTL)
        except ConflictError as exc:
            return exc.current_version
        return None

    seen = await asyncio.gather(*(attempt(i) for i in range(10)))
    assert sorted(seen, key=str) == [2] * 9 + [None]
    wins = [version is None for version in seen]
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert loaded.version == 2
    assert loaded.state == {"winner": wins.index(True)}


async def test_non_json_state_is_refused_and_nothing_changes(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    await working_store.put(scope, state={"ok": True}, ttl_seconds=TTL)
    with pytest.raises(InvalidInputError):
        await working_store.put(scope, state={"bad": {1, 2}}, ttl_seconds=TTL)
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert (loaded.version, loaded.state) == (1, {"ok": True})


# --------------------------------------------------------------------------- last_n


async def test_last_n_returns_the_newest_messages_in_order(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    await working_store.append(scope, msgs(*(f"m{i}" for i in range(10))), ttl_seconds=TTL)
    window = await working_store.get(scope, last_n=3)
    assert window is not None
    assert contents(window) == ["m7", "m8", "m9"]
    assert window.message_count == 10

    everything = await working_store.get(scope, last_n=50)
    assert everything is not None
    assert contents(everything) == [f"m{i}" for i in range(10)]

    none = await working_store.get(scope, last_n=0)
    assert none is not None
    assert (none.messages, none.message_count, none.version) == ([], 10, 1)

    with pytest.raises(InvalidInputError):
        await working_store.get(scope, last_n=-1)


async def test_offset_and_limit_page_through_a_long_session(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    await working_store.append(scope, msgs(*(f"m{i}" for i in range(25))), ttl_seconds=TTL)
    pages = []
    offset = 0
    while True:
        page = await working_store.get(scope, offset=offset, limit=10)
        assert page is not None
        assert page.first_index == offset
        assert page.message_count == 25
        if not page.messages:
            break
        pages.append(contents(page))
        offset += len(page.messages)
    assert [len(p) for p in pages] == [10, 10, 5]
    assert [text for page in pages for text in page] == [f"m{i}" for i in range(25)]

    tail = await working_store.get(scope, offset=20)
    assert tail is not None
    assert contents(tail) == [f"m{i}" for i in range(20, 25)]
    newest = await working_store.get(scope, last_n=3)
    assert newest is not None
    assert newest.first_index == 22
    empty = await working_store.get(scope, offset=5, limit=0)
    assert empty is not None
    assert empty.messages == []
    with pytest.raises(InvalidInputError) as both:
        await working_store.get(scope, last_n=3, offset=1)
    assert both.value.field == "last_n"
    with pytest.raises(InvalidInputError) as negative:
        await working_store.get(scope, offset=-1)
    assert negative.value.field == "offset"


# --------------------------------------------------------------------------- TTL


async def test_ttl_is_set_and_none_means_persistent(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    written = await working_store.append(scope, msgs("a"), ttl_seconds=120)
    assert written.ttl_seconds == 120
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert loaded.ttl_seconds is not None
    assert 115 <= loaded.ttl_seconds <= 120

    persistent = await working_store.put(scope, state={"keep": 1}, ttl_seconds=None)
    assert persistent.ttl_seconds is None
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert loaded.ttl_seconds is None

    again = await working_store.append(scope, msgs("b"), ttl_seconds=30)
    assert again.ttl_seconds == 30


async def test_every_write_restarts_the_ttl_of_the_whole_session(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    await working_store.put(scope, messages=msgs("a"), state={"s": 1}, summary="sum", ttl_seconds=2)
    await asyncio.sleep(1.1)
    aged = await working_store.get(scope)
    assert aged is not None
    assert aged.ttl_seconds == 1
    refreshed = await working_store.put(scope, summary="sum2", ttl_seconds=2)
    assert refreshed.ttl_seconds == 2
    # Past the first write's expiry: the messages and state survive because the summary write
    # restarted the TTL of every key of the session.
    await asyncio.sleep(1.1)
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert (contents(loaded), loaded.state, loaded.summary) == (["a"], {"s": 1}, "sum2")


async def test_a_session_expires_and_starts_over(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    await working_store.append(scope, msgs("short-lived"), ttl_seconds=1)
    other = scope.for_session("s2")
    await working_store.append(other, msgs("stays"), ttl_seconds=TTL)
    await asyncio.sleep(1.2)
    assert await working_store.get(scope) is None
    assert await working_store.delete(scope) == 0
    restarted = await working_store.put(
        scope, messages=msgs("new"), expected_version=0, ttl_seconds=TTL
    )
    assert (restarted.version, restarted.message_count) == (1, 1)
    await working_store.delete(scope)
    # Expired sessions are not counted by delete_user.
    assert await working_store.delete_user(scope) == 1


async def test_redis_keys_share_the_ttl_and_the_user_index_outlives_them(
    working_store: RedisWorkingMemoryStore, raw: Any, scope: Scope, unique: str
) -> None:
    user_key = f"mmtest-{unique}-a:{{acme:sales:crm:wm:alice}}"
    await working_store.append(scope, msgs("a"), ttl_seconds=100)
    await working_store.put(scope.for_session("s2"), state={}, ttl_seconds=50)
    meta, messages, index = f"{user_key}:s1:meta", f"{user_key}:s1:messages", f"{user_key}:sessions"
    assert await raw.type(meta) == "hash"
    assert await raw.type(messages) == "list"
    assert await raw.smembers(index) == {"s1", "s2"}
    for key in (meta, messages, index):
        assert 99_000 < await raw.pttl(key) <= 100_000
    assert 49_000 < await raw.pttl(f"{user_key}:s2:meta") <= 50_000

    await working_store.put(scope, summary="x", ttl_seconds=300)
    for key in (meta, messages, index):
        assert 299_000 < await raw.pttl(key) <= 300_000

    await working_store.put(scope.for_session("s3"), state={}, ttl_seconds=None)
    assert await raw.pttl(index) == -1


async def test_every_key_of_a_user_shares_one_cluster_slot(
    working_store: RedisWorkingMemoryStore, raw: Any, scope: Scope, unique: str
) -> None:
    """The user's hash tag keeps a user's sessions in one slot (so scripts and
    transactions stay on one cluster node), and other users hash elsewhere."""
    for session in ("s1", "s2", "s3"):
        await working_store.append(scope.for_session(session), msgs("x"), ttl_seconds=TTL)
    bob = scope.model_copy(update={"user_id": "bob"})
    await working_store.append(bob, msgs("y"), ttl_seconds=TTL)

    prefix = f"mmtest-{unique}-a"
    alice_keys = [key async for key in raw.scan_iter(match=f"{prefix}:*alice*")]
    bob_keys = [key async for key in raw.scan_iter(match=f"{prefix}:*bob*")]
    assert len(alice_keys) == 7  # three sessions x (meta, messages) + the session set
    assert len({key_slot(key.encode()) for key in alice_keys}) == 1
    assert len(bob_keys) == 3
    assert {key_slot(key.encode()) for key in bob_keys} != {key_slot(alice_keys[0].encode())}
    assert await working_store.delete_user(scope) == 3
    assert await working_store.get(bob) is not None


# --------------------------------------------------------------------------- upgrade


@dataclass
class Upgrade:
    """A single Redis server and a key prefix of the test's own, to write what an earlier
    version (keys without the user's hash tag) left there."""

    url: str
    prefix: str
    raw: Any

    #: Alice's user key in the untagged layout (scope ``acme/sales/crm/alice``).
    @property
    def old_user(self) -> str:
        return f"{self.prefix}:acme:sales:crm:wm:alice"

    def store(self) -> RedisWorkingMemoryStore:
        return RedisWorkingMemoryStore(self.url, key_prefix=self.prefix)


@pytest.fixture
async def upgrade(redis_service_url: str, unique: str) -> AsyncIterator[Upgrade]:
    raw = async_redis_client(redis_service_url, decode_responses=True)
    prefix = f"mmtest-{unique}-old"
    yield Upgrade(redis_service_url, prefix, raw)
    drop_redis_keys(redis_service_url, f"{prefix}:*")
    await raw.aclose()


async def test_start_moves_sessions_of_the_untagged_layout_with_their_ttl(
    upgrade: Upgrade, scope: Scope
) -> None:
    """What an earlier version left on a single server is found after the upgrade: same
    messages, state, summary, version and TTL."""
    raw, old = upgrade.raw, upgrade.old_user
    await raw.hset(
        f"{old}:s1:meta",
        mapping={"version": 3, "state": '{"step":2}', "summary": "so far", "updated_at": ""},
    )
    await raw.rpush(f"{old}:s1:messages", *(m.model_dump_json() for m in msgs("a", "b")))
    await raw.hset(f"{old}:s2:meta", mapping={"version": 1})
    await raw.sadd(f"{old}:sessions", "s1", "s2")
    for key in (f"{old}:s1:meta", f"{old}:s1:messages", f"{old}:sessions"):
        await raw.pexpire(key, 100_000)

    async with upgrade.store() as store:
        loaded = await store.get(scope, last_n=10)
        assert loaded is not None
        assert (contents(loaded), loaded.state, loaded.summary, loaded.version) == (
            ["a", "b"],
            {"step": 2},
            "so far",
            3,
        )
        assert loaded.ttl_seconds == 100
        persistent = await store.get(scope.for_session("s2"))
        assert persistent is not None
        assert (persistent.version, persistent.ttl_seconds) == (1, None)
        assert [key async for key in raw.scan_iter(match=f"{old}:*")] == []

        assert (await store.append(scope, msgs("c"), ttl_seconds=TTL)).version == 4
        assert await store.delete_user(scope) == 2


async def test_an_old_key_whose_new_name_is_taken_is_kept_not_overwritten(
    upgrade: Upgrade, scope: Scope
) -> None:
    old_meta = f"{upgrade.old_user}:s1:meta"
    async with upgrade.store() as store:
        await store.put(scope, summary="written by this version", ttl_seconds=TTL)
    await upgrade.raw.hset(old_meta, mapping={"version": 7, "summary": "left by an old process"})
    async with upgrade.store() as store:
        loaded = await store.get(scope)
        assert loaded is not None
        assert (loaded.summary, loaded.version) == ("written by this version", 1)
    assert await upgrade.raw.hget(old_meta, "summary") == "left by an old process"


async def test_a_session_set_of_both_layouts_is_merged_so_forget_reaches_all(
    upgrade: Upgrade, scope: Scope
) -> None:
    """A session written by an old process after the upgrade began is still forgotten."""
    async with upgrade.store() as store:
        await store.append(scope, msgs("new"), ttl_seconds=TTL)
    await upgrade.raw.hset(f"{upgrade.old_user}:s-old:meta", mapping={"version": 1})
    await upgrade.raw.sadd(f"{upgrade.old_user}:sessions", "s-old")
    async with upgrade.store() as store:
        assert await store.get(scope.for_session("s-old")) is not None
        assert await store.delete_user(scope) == 2
    assert [key async for key in upgrade.raw.scan_iter(match=f"{upgrade.prefix}:*")] == []


# --------------------------------------------------------------------------- delete


async def test_delete_removes_one_session(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    await working_store.append(scope, msgs("a"), ttl_seconds=TTL)
    await working_store.append(scope.for_session("s2"), msgs("b"), ttl_seconds=TTL)
    assert await working_store.delete(scope) == 1
    assert await working_store.get(scope) is None
    assert await working_store.delete(scope) == 0
    assert await working_store.get(scope.for_session("s2")) is not None
    again = await working_store.append(scope, msgs("c"), ttl_seconds=TTL)
    assert (again.version, again.message_count) == (1, 1)


async def test_delete_user_removes_every_session_of_the_user_only(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    for session in ("s1", "s2", "s3"):
        await working_store.append(scope.for_session(session), msgs(session), ttl_seconds=TTL)
    bob = scope.model_copy(update={"user_id": "bob"})
    await working_store.append(bob, msgs("bob's"), ttl_seconds=TTL)

    assert await working_store.delete_user(scope.user_scope()) == 3
    for session in ("s1", "s2", "s3"):
        assert await working_store.get(scope.for_session(session)) is None
    assert await working_store.get(bob) is not None
    assert await working_store.delete_user(scope) == 0


# --------------------------------------------------------------------------- isolation


@pytest.mark.parametrize("field", ["tenant", "org_id", "project_id", "user_id"])
async def test_the_same_session_id_elsewhere_is_another_session(
    working_store: RedisWorkingMemoryStore, scope: Scope, field: str
) -> None:
    other = scope.model_copy(update={field: f"{getattr(scope, field)}-other"})
    await working_store.append(scope, msgs("mine"), ttl_seconds=TTL)
    assert await working_store.get(other) is None
    with pytest.raises(ConflictError):
        await working_store.put(other, state={}, expected_version=1, ttl_seconds=TTL)

    theirs = await working_store.put(
        other, messages=msgs("theirs"), expected_version=0, ttl_seconds=TTL
    )
    assert theirs.version == 1
    mine = await working_store.get(scope)
    assert mine is not None
    assert (contents(mine), mine.version) == (["mine"], 1)

    assert await working_store.delete_user(other) == 1
    assert await working_store.get(scope) is not None
    assert await working_store.delete(other) == 0


async def test_agent_and_group_do_not_split_a_session(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    await working_store.append(
        scope.model_copy(update={"agent_id": "bot"}), msgs("a"), ttl_seconds=TTL
    )
    loaded = await working_store.get(scope.model_copy(update={"group_id": "g"}))
    assert loaded is not None
    assert contents(loaded) == ["a"]


async def test_stores_with_other_key_prefixes_do_not_see_each_other(
    make_store: MakeStore, scope: Scope
) -> None:
    first, second = await make_store("one"), await make_store("two")
    await first.append(scope, msgs("first"), ttl_seconds=TTL)
    assert await second.get(scope) is None
    await second.append(scope, msgs("second"), ttl_seconds=TTL)
    assert await second.delete_user(scope) == 1
    loaded = await first.get(scope)
    assert loaded is not None
    assert (contents(loaded), loaded.version) == (["first"], 1)


# --------------------------------------------------------------------------- round trip


async def test_unicode_messages_and_nested_state_round_trip(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    state = {
        "plan": [{"step": 1, "done": True}, {"step": 2, "done": False, "notes": None}],
        "ünïcode": "日本語 — ✓ 🚀",
        "numbers": {"int": 2**53, "float": 0.1, "neg": -3},
        "empty": {"list": [], "dict": {}},
    }
    messages = [
        msg("Grüß Gott 👋", producer="alice", metadata={"lang": "de", "tags": ["a", "b"]}),
        WorkingMessage(
            role="assistant",
            content='quotes " and \\ backslashes\nnew line',
            producer=None,
            timestamp=datetime(2025, 3, 1, 13, 0, tzinfo=UTC),
        ),
        msg("tool output", role="tool", metadata={"nested": {"deep": [1, [2, [3]]]}}),
    ]
    await working_store.put(scope, messages=messages, state=state, summary="Ü", ttl_seconds=TTL)
    loaded = await working_store.get(scope)
    assert loaded is not None
    assert loaded.messages == messages
    assert loaded.state == state
    assert loaded.summary == "Ü"
    assert all(m.timestamp.tzinfo is not None for m in loaded.messages)


async def test_invalid_ttl_is_refused(working_store: RedisWorkingMemoryStore, scope: Scope) -> None:
    with pytest.raises(InvalidInputError):
        await working_store.append(scope, msgs("a"), ttl_seconds=0)
    with pytest.raises(InvalidInputError):
        await working_store.put(scope, state={}, expected_version=-1, ttl_seconds=TTL)
    assert await working_store.get(scope) is None


# --------------------------------------------------------------------------- inspection


async def test_list_sessions_gives_each_live_session_without_messages(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    await working_store.append(scope, msgs("a", "b"), ttl_seconds=TTL)
    await working_store.put(scope.for_session("s2"), summary="so far", ttl_seconds=None)
    await working_store.append(scope.for_session("s3"), msgs("c"), ttl_seconds=TTL)
    await working_store.delete(scope.for_session("s3"))
    await working_store.append(scope, msgs("d"), ttl_seconds=TTL)  # s1 written last
    bob = scope.model_copy(update={"user_id": "bob"})
    await working_store.append(bob, msgs("x"), ttl_seconds=TTL)

    sessions = await working_store.list_sessions(scope.model_copy(update={"session_id": None}))

    assert [(s.scope.session_id, s.message_count, s.version) for s in sessions] == [
        ("s1", 3, 2),
        ("s2", 0, 1),
    ]
    assert all(s.messages == [] for s in sessions)
    assert sessions[1].summary == "so far"
    assert sessions[1].ttl_seconds is None
    assert sessions[0].ttl_seconds is not None
    assert 0 < sessions[0].ttl_seconds <= TTL


async def test_list_users_counts_live_sessions_per_user(
    working_store: RedisWorkingMemoryStore, scope: Scope, raw: Any, unique: str
) -> None:
    await working_store.append(scope, msgs("a"), ttl_seconds=TTL)
    await working_store.append(scope.for_session("s2"), msgs("b"), ttl_seconds=TTL)
    bob = scope.model_copy(update={"user_id": "bob"})
    await working_store.append(bob, msgs("x"), ttl_seconds=TTL)
    carl = scope.model_copy(update={"user_id": "carl"})
    await working_store.append(carl, msgs("y"), ttl_seconds=TTL)
    other_project = scope.model_copy(update={"project_id": "ops", "user_id": "dan"})
    await working_store.append(other_project, msgs("z"), ttl_seconds=TTL)
    other_tenant = scope.model_copy(update={"tenant": "rival", "user_id": "eve"})
    await working_store.append(other_tenant, msgs("z"), ttl_seconds=TTL)
    await working_store.delete_user(bob)
    # carl's only session expires: its keys vanish on their own
    expiring = f"mmtest-{unique}-a:{{acme:sales:crm:wm:carl}}:s1:*"
    await raw.delete(*[key async for key in raw.scan_iter(match=expiring)])

    users = await working_store.list_users(scope.project_scope())

    assert [(u.user_id, u.working_sessions) for u in users] == [("alice", 2)]
    assert users[0].last_active is not None
    assert [u.user_id for u in await working_store.list_users(other_project.project_scope())] == [
        "dan"
    ]
    assert [u.user_id for u in await working_store.list_users(other_tenant.project_scope())] == [
        "eve"
    ]
    # carl is found again as soon as he has a session
    await working_store.append(carl.for_session("s5"), msgs("back"), ttl_seconds=TTL)
    assert [u.user_id for u in await working_store.list_users(scope.project_scope())] == [
        "alice",
        "carl",
    ]


async def test_list_users_pages_by_user_id_in_code_point_order(
    working_store: RedisWorkingMemoryStore, scope: Scope
) -> None:
    for name in reversed(USER_IDS_IN_ORDER):
        await working_store.append(
            scope.model_copy(update={"user_id": name}), msgs(name), ttl_seconds=TTL
        )
    await check_user_listing(working_store.list_users, scope.project_scope())


async def test_list_projects_lists_every_project_with_a_session_in_order(
    working_store: RedisWorkingMemoryStore, unique: str
) -> None:
    for index, project in enumerate(reversed(projects_of(unique))):
        session = project.user(f"u{index}").for_session("s1")
        await working_store.append(session, msgs("hi"), ttl_seconds=TTL)
    await check_project_listing(working_store.list_projects, unique)
    await working_store.delete(projects_of(unique)[0].user("u3").for_session("s1"))
    assert projects_of(unique)[0] not in await working_store.list_projects(limit=10_000)
